"""Storage: the only code that knows the zarr layouts and where stores live.

``corpus.zarr`` (:mod:`~sphdist.io.corpus`, written by :mod:`~sphdist.io.corpus_writer`),
``model.zarr`` (:mod:`~sphdist.io.model`) and ``embedding.zarr`` (:mod:`~sphdist.io.embedding`):
opening, validating, writing, and committing them atomically. Where a store lives (a local
path, or a URL of an object store) is decided once, by :func:`open_target` (``_targets.py``),
which returns one of the two implementations of the versioned-store protocol :class:`Target`
(``_store.py``): :class:`PosixTarget` (``_posix.py``: rename) or :class:`ObjectTarget`
(``_object.py``: a manifest), each naming its lock (``_lock.py``, ``_lease.py``: an ``flock``,
a lease, or none);
a writer holds its output with :func:`open_output` (``_atomic.py``: the lock, the staging
location and the commit; one writer per output; the output policy in ``_policy.py``).
:func:`open_stored` opens any stored kind, dispatching on its tag, through one safe-codec
check; a held output's one file is written through :meth:`Output.file`, and
:func:`atomic_path` writes a file no one holds atomically (``_files.py``: the single-file
operations, and :func:`output_format`, the format a file's suffix tells).

This package exports what the other layers use; its underscored modules are its own.
``open_stored``, ``stored_kind`` and ``require_finite`` are imported on first use, so that
importing this package (as the command line does at start-up) does not import zarr.
"""

from typing import Any

from sphdist.io._atomic import (
    CommitState,
    ObjectTarget,
    Output,
    PosixTarget,
    Target,
    atomic_path,
    commit_identity,
    commit_state,
    committed,
    discard,
    exists,
    hold_output,
    load_array,
    lock_holder,
    open_file,
    open_output,
    open_target,
    output_lock,
    readable_path,
    refuse_existing,
    remove,
    staging_path,
)
from sphdist.io._files import output_format
from sphdist.io._fs import (
    absolute,
    anchored,
    apply_storage_options,
    glob,
    is_remote,
    is_storage_failure,
    join,
    listing_command,
    location,
    parse_storage_option,
    set_storage_options,
    storage_error,
    storage_options,
)

__all__ = [
    "Target", "PosixTarget", "ObjectTarget", "open_target", "Output", "open_output",
    "output_lock", "hold_output", "refuse_existing", "lock_holder", "CommitState", "commit_state",
    "committed", "commit_identity", "readable_path", "staging_path", "discard", "atomic_path",
    "location", "is_remote", "exists", "absolute", "anchored", "join", "open_file", "load_array",
    "remove",
    "output_format", "glob", "listing_command", "is_storage_failure", "storage_error",
    "parse_storage_option", "set_storage_options", "storage_options", "apply_storage_options",
    "open_stored", "stored_kind", "require_finite",
]

_LAZY = {"open_stored": "stored", "stored_kind": "stored", "require_finite": "_checked"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"sphdist.io.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
