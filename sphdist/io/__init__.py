"""Storage: the only code that knows the zarr layouts.

``corpus.zarr`` (:mod:`~sphdist.io.corpus`, written by :mod:`~sphdist.io.corpus_writer`),
``model.zarr`` (:mod:`~sphdist.io.model`) and ``embedding.zarr`` (:mod:`~sphdist.io.embedding`):
opening, validating, writing, and committing them atomically (:mod:`~sphdist.io._atomic`).
:func:`open_stored` opens any of them, dispatching on the stored kind, through one safe-codec
check (:mod:`~sphdist.io._zarr`); :func:`atomic_path` writes any single file atomically.
A writer holds :func:`output_lock` on its output for its whole life (:mod:`~sphdist.io._lock`):
one writer per output.

``open_stored`` and ``stored_kind`` are imported on first use, so that importing this package
(as the command line does at start-up) does not import zarr.
"""

from typing import Any

from sphdist.io._atomic import CommitState, atomic_path, commit_state
from sphdist.io._lock import output_lock

__all__ = [
    "CommitState", "atomic_path", "commit_state", "output_lock", "open_stored", "stored_kind",
]

_LAZY = ("open_stored", "stored_kind")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from sphdist.io import stored

        return getattr(stored, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
