"""A versioned store on a local POSIX filesystem: committed by rename, locked by ``flock``.

The version is built in a sibling staging directory ``<target>.tmp-<random>`` and committed
by two renames (``rename(2)`` of a directory within one filesystem is atomic on POSIX):

1. ``target`` -> ``target.old``   (only if ``target`` exists)
2. ``staging`` -> ``target``
3. remove ``target.old``

Before step 1 every file and directory of the staging tree is flushed to disk (``fsync``),
and the parent directory after step 2, so the commit is durable against a power loss, not
only a killed process. A crash between 1 and 2 leaves ``target.old`` (complete) and no
``target``; readers then read ``target.old`` in place (:meth:`PosixTarget.reader`), and the
next writer puts it back (:meth:`PosixTarget.recover`). The output's lock is an ``flock``
(:class:`sphdist.io._lock.FileLock`).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Hashable
from pathlib import Path

from sphdist.io._fs import fsync_directory, fsync_tree
from sphdist.io._lock import FileLock, Lock
from sphdist.io._store import CommitState, Target

__all__ = ["PosixTarget"]


class PosixTarget(Target):
    """A store on a local POSIX filesystem: committed by rename, locked by ``flock``.

    Parameters
    ----------
    path : path-like
        The target (a local path).
    lock : sphdist.io._lock.Lock, optional
        Default: an ``flock`` on ``<target>.lock`` (:class:`sphdist.io._lock.FileLock`).
    """

    supports_atomic_rename = True
    supports_conditional_write = False

    def __init__(self, path: str | os.PathLike[str], *, lock: Lock | None = None) -> None:
        self.path = Path(path)
        self.lock = lock if lock is not None else FileLock(self.path)

    def _old(self) -> Path:
        return self.path.with_name(self.path.name + ".old")

    def readable(self) -> Path:
        """``target``; after a commit interrupted between its renames, ``target.old``."""
        old = self._old()
        return old if not self.path.exists() and old.exists() else self.path

    def identity(self) -> tuple[int, int] | None:
        """(inode, mtime in ns) of ``target``, or None if there is none.

        Every rename onto ``target`` changes it (clock-free: file times come from the kernel's
        coarse clock).
        """
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns

    def reader(self) -> tuple[Path, tuple[int, int] | None]:
        """(:meth:`readable`, :meth:`identity`), the identity taken first."""
        version = self.identity()
        return self.readable(), version

    def replaced(self, version: Hashable | None, *, failed: bool) -> bool:
        """A rename replaces a local target in place: any commit since ``version`` counts."""
        return self.identity() != version

    def state(self) -> CommitState:
        """See :class:`~sphdist.io._store.CommitState`."""
        committed = self.path.exists()
        return CommitState(
            committed=committed,
            staging=tuple(sorted(
                p.name for p in self.path.parent.glob(f"{self.path.name}.tmp-*")
            )),
            interrupted=self._old().exists() and not committed,
        )

    def committed(self) -> bool:
        """``target`` exists, or ``target.old`` after an interrupted commit."""
        return self.path.exists() or self._old().exists()

    def staging(self) -> Path:
        """``<target>.tmp-<random>``: same parent directory, hence the same filesystem."""
        return self.path.with_name(f"{self.path.name}.tmp-{uuid.uuid4().hex[:12]}")

    def commit(self, staging: Path) -> None:
        """Flush ``staging`` to disk, then rename it onto ``target``.

        The previous version is ``target.old`` between the two renames, removed after.

        Raises
        ------
        OSError
            If a rename fails (for example staging and target on different filesystems); the
            previous ``target`` is then still in place (or in ``target.old``, which
            :meth:`recover` restores).
        """
        staging = Path(staging)
        fsync_tree(staging)  # the data reach the disk before a rename makes them the target
        self.recover()
        old = self._old()
        if self.path.exists():
            os.replace(self.path, old)
        os.replace(staging, self.path)
        fsync_directory(self.path.parent)  # the renames too: a power loss keeps the new tree
        if old.exists():
            shutil.rmtree(old, ignore_errors=True)

    def discard(self, path: Path) -> None:
        """``rm -r path``, ignoring a missing one."""
        shutil.rmtree(path, ignore_errors=True)

    def recover(self) -> None:
        """Move ``target.old`` back when ``target`` is missing; else remove it."""
        old = self._old()
        if old.exists() and not self.path.exists():
            os.replace(old, self.path)
        elif old.exists():
            shutil.rmtree(old, ignore_errors=True)

    def remove_stale(self) -> None:
        """Remove ``<target>.tmp-*`` and ``<target>.scratch``."""
        for stale in self.path.parent.glob(f"{self.path.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(self.scratch(), ignore_errors=True)
