"""Atomic replacement of a directory tree (a zarr group on a local or shared POSIX filesystem).

Writers build the complete new tree in a sibling staging directory and then call
:func:`commit_directory`, so that a reader, or a crash at any instant, sees either the previous
complete tree or the new complete tree, never a mixture:

1. ``target`` -> ``target.old``   (only if ``target`` exists)
2. ``staging`` -> ``target``
3. remove ``target.old``

Before step 1 every file and directory of the staging tree is flushed to disk (``fsync``), and
the parent directory after step 2, so the commit is durable against a power loss, not only a
killed process.

A crash between 1 and 2 leaves ``target.old`` (complete) and no ``target``; readers then read
``target.old`` in place (:func:`readable_path`) and change nothing, and the next writer puts it
back (:func:`recover_directory`, which :func:`commit_directory` calls first). ``rename(2)`` of
a directory within one filesystem is atomic on POSIX, which is all this relies on.
:func:`commit_state` describes what is on disk (committed, staging, interrupted) without
changing it. This is the only module that knows the
names of the staging trees (``<target>.tmp-*``), of the previous version (``<target>.old``)
and of a writer's scratch directory (``<target>.scratch``).

Single files (plots, exports, reports) are written with :func:`atomic_path`: a temporary
sibling, flushed and renamed onto the target.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

__all__ = [
    "staging_path",
    "scratch_path",
    "commit_directory",
    "fsync_tree",
    "recover_directory",
    "discard",
    "discard_stale",
    "CommitState",
    "commit_state",
    "readable_path",
    "atomic_path",
]


def _old(target: Path) -> Path:
    return target.with_name(target.name + ".old")


def staging_path(target: str | os.PathLike[str]) -> Path:
    """Return a fresh sibling path to build ``target``'s replacement in.

    Parameters
    ----------
    target : path-like
        The directory that will be replaced.

    Returns
    -------
    pathlib.Path
        ``<target>.tmp-<random>`` in the same parent directory (hence the same filesystem).
    """
    target = Path(target)
    return target.with_name(f"{target.name}.tmp-{uuid.uuid4().hex[:12]}")


def scratch_path(target: str | os.PathLike[str]) -> Path:
    """The sibling directory a writer of ``target`` keeps temporary arrays in while it runs.

    ``<target>.scratch``: never read as ``target``; removed by its writer at the end and,
    after a killed writer, by :func:`discard_stale`.
    """
    target = Path(target)
    return target.with_name(f"{target.name}.scratch")


def recover_directory(target: str | os.PathLike[str]) -> None:
    """Restore ``target`` from ``target.old`` after a crash between the two renames.

    Only a writer of ``target`` calls this (before it writes); readers use
    :func:`readable_path` and leave the tree as it is.

    Parameters
    ----------
    target : path-like
        The directory a previous :func:`commit_directory` was replacing.
    """
    target = Path(target)
    old = _old(target)
    if old.exists() and not target.exists():
        os.replace(old, target)
    elif old.exists():
        shutil.rmtree(old, ignore_errors=True)


def commit_directory(staging: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Atomically make the complete tree at ``staging`` visible as ``target``.

    Parameters
    ----------
    staging : path-like
        A complete tree, normally from :func:`staging_path`.
    target : path-like
        Where it becomes visible; a previous tree there is replaced.

    Raises
    ------
    OSError
        If a rename fails (for example staging and target on different filesystems); the
        previous ``target`` is then still in place (or in ``target.old``, which
        :func:`recover_directory` restores).
    """
    staging, target = Path(staging), Path(target)
    fsync_tree(staging)  # the data reach the disk before a rename makes them the target
    recover_directory(target)
    old = _old(target)
    if target.exists():
        os.replace(target, old)
    os.replace(staging, target)
    _fsync_directory(target.parent)  # the renames too: a power loss keeps the new tree
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)


def fsync_tree(root: str | os.PathLike[str]) -> None:
    """Flush every file and directory of a tree to disk (``fsync(2)``), files first.

    Parameters
    ----------
    root : path-like
        A complete staging tree.

    Notes
    -----
    Without it a rename can reach the disk before the data it publishes (ext4's and XFS's
    delayed allocation), and a power loss then leaves a committed tree of empty or torn
    files; a killed process alone cannot cause that, since the kernel's page cache survives
    it.
    """
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_directory(Path(directory))


def discard(path: str | os.PathLike[str]) -> None:
    """Remove a staging tree, ignoring a missing one."""
    shutil.rmtree(path, ignore_errors=True)


def discard_stale(target: str | os.PathLike[str]) -> None:
    """Remove staging trees of ``target`` left by a writer that was killed.

    Holds ``target``'s lock meanwhile (:func:`sphdist.io.output_lock`, reentrant: a writer
    calls this while it holds it): the lock proves that no other writer is building them.

    Raises
    ------
    OutputLockedError
        If another process is writing ``target`` (its staging trees are then left alone).
    """
    from sphdist.io._lock import output_lock

    target = Path(target)
    with output_lock(target):
        for stale in target.parent.glob(f"{target.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        shutil.rmtree(scratch_path(target), ignore_errors=True)


class CommitState(NamedTuple):
    """What is on disk for a tree that :func:`commit_directory` replaces (see :func:`commit_state`).

    Attributes
    ----------
    committed : bool
        ``target`` exists.
    staging : tuple of str
        Names of the staging trees beside it (:func:`staging_path`): a running writer's next
        version, or a killed writer's debris.
    interrupted : bool
        ``target.old`` exists and ``target`` does not: a commit stopped between its two renames
        (:func:`recover_directory` restores it).
    """

    committed: bool
    staging: tuple[str, ...]
    interrupted: bool

    @property
    def complete(self) -> bool:
        """A complete version is on disk (as ``target``, or as ``target.old``)."""
        return self.committed or self.interrupted


def commit_state(target: str | os.PathLike[str]) -> CommitState:
    """Describe the committed, pending and interrupted versions of ``target``; changes nothing.

    Parameters
    ----------
    target : path-like
        A directory written through :func:`staging_path` and :func:`commit_directory`.

    Returns
    -------
    CommitState
    """
    target = Path(target)
    committed = target.exists()
    return CommitState(
        committed=committed,
        staging=tuple(sorted(p.name for p in target.parent.glob(f"{target.name}.tmp-*"))),
        interrupted=_old(target).exists() and not committed,
    )


def readable_path(target: str | os.PathLike[str]) -> Path:
    """The directory a reader of ``target`` opens: its last complete version; changes nothing.

    ``target`` itself when it exists. After a commit interrupted between its two renames
    (:attr:`CommitState.interrupted`), ``<target>.old``, read in place: moving it back is the
    job of the next writer (:func:`recover_directory`), never of a reader. Otherwise ``target``
    (absent: the caller reports it missing). Staging trees are never read.

    Parameters
    ----------
    target : path-like

    Returns
    -------
    pathlib.Path
    """
    target = Path(target)
    old = _old(target)
    return old if not target.exists() and old.exists() else target


def _fsync_directory(directory: Path) -> None:
    """Flush a directory entry (a rename into it) to disk, where the platform allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Write one file atomically: yield a temporary sibling path, then rename it onto ``target``.

    The caller writes the complete file to the yielded path (by any means: ``savefig``,
    ``np.save``, ``to_parquet``, ``open``). On normal exit the file is flushed to disk and
    renamed onto ``target`` with :func:`os.replace` (atomic on POSIX), and the directory entry
    is flushed; a reader therefore sees the previous complete file or the new complete file,
    never a part. A directory at ``target`` is replaced through :func:`commit_directory`.
    If the block raises, the temporary is removed, ``target`` is left as it was, and the
    exception propagates.

    Parameters
    ----------
    target : path-like
        The file to write; its parent directory must exist. Whatever is there is replaced.

    Yields
    ------
    pathlib.Path
        ``<dir>/.<name>.tmp-<random><suffix>``: same directory (hence the same filesystem) and
        same suffix as ``target``, so writers that infer the format from the suffix still do.

    Raises
    ------
    OSError
        If the block wrote nothing at the yielded path, or the rename fails.
    """
    target = Path(target)
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:12]}{target.suffix}")
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        if target.is_dir() and not target.is_symlink():
            commit_directory(tmp, target)  # a file replacing a directory (an overwrite)
        else:
            os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_directory(target.parent)
