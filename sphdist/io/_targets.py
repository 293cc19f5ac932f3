"""Where a path becomes its versioned store: the one choice between the Target implementations.

The protocol, :class:`~sphdist.io._store.Target`, imports none of its implementations; this
module, above them, chooses once, where a path is opened, as zarr's ``storage/_common.py``
(``make_store_path``) chooses among its stores: :class:`~sphdist.io._posix.PosixTarget` for a
local path, :class:`~sphdist.io._object.ObjectTarget` for a URL.
"""

from __future__ import annotations

import os

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
    """
    if isinstance(path, Target):
        return path
    if protocol_of(path) is None:
        return PosixTarget(path, lock=lock)
    return ObjectTarget(path, lock=lock)
