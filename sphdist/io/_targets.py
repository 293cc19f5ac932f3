"""Where a path becomes its versioned store: the one choice between the Target implementations.

The protocol, :class:`~sphdist.io._store.Target`, imports none of its implementations; this
module, above them, chooses once, where a path is opened, as zarr's ``storage/_common.py``
(``make_store_path``) chooses among its stores: :class:`~sphdist.io._posix.PosixTarget` for a
local path, :class:`~sphdist.io._object.ObjectTarget` for a URL.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from sphdist.errors import ParameterError
from sphdist.io._fs import protocol_of
from sphdist.io._lock import Lock
from sphdist.io._object import ObjectTarget
from sphdist.io._posix import PosixTarget
from sphdist.io._store import Target

__all__ = ["open_target"]


def open_target(path: str | os.PathLike[str] | Target, *, lock: Lock | None = None) -> Target:
    """The storage target of ``path``, chosen once.

    :class:`~sphdist.io._posix.PosixTarget` for a local path, else
    :class:`~sphdist.io._object.ObjectTarget` (any URL, ``file://`` included).

    Parameters
    ----------
    path : str or path-like or Target
        An open target is returned as it is.
    lock : sphdist.io._lock.Lock, optional
        How its writers exclude each other; default: the one the implementation names
        from its capabilities.

    Returns
    -------
    Target

    Raises
    ------
    ValueError
        If ``path`` is a URL of a protocol fsspec does not know (see
        :func:`sphdist.io.location`).
    ParameterError
        If ``path`` names no store of its own: the root of a filesystem (``/``), or an object
        store URL without a bucket (``s3:///m.zarr``).
    """
    if isinstance(path, Target):
        return path
    protocol = protocol_of(path)
    if protocol is None:
        if not Path(os.path.realpath(path)).name:  # '/' (where the OS goes): no '<name>.lock'
            _refuse_unnamed(path, "the root of the filesystem")
        return PosixTarget(path, lock=lock)
    if protocol not in ("file", "local", "memory") and not urlsplit(str(path)).netloc:
        _refuse_unnamed(path, f"a {protocol}:// URL without a bucket")
    return ObjectTarget(path, lock=lock)


def _refuse_unnamed(path: str | os.PathLike[str], what: str) -> None:
    raise ParameterError(
        f"{path}: {what} is no store. To resolve this, pass the path of a corpus, model or "
        "embedding (a folder such as /data/c.zarr, or s3://BUCKET/c.zarr)."
    )
