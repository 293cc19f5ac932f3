"""Atomic replacement of a directory tree (a zarr group on a local or shared POSIX filesystem).

Writers build the complete new tree in a sibling staging directory and then call
:func:`commit_directory`, so that a reader, or a crash at any instant, sees either the previous
complete tree or the new complete tree, never a mixture:

1. ``target`` -> ``target.old``   (only if ``target`` exists)
2. ``staging`` -> ``target``
3. remove ``target.old``

A crash between 1 and 2 leaves ``target.old`` (complete) and no ``target``;
:func:`recover_directory` puts it back. ``rename(2)`` of a directory within one filesystem is
atomic on POSIX, which is all this relies on.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

__all__ = ["staging_path", "commit_directory", "recover_directory", "discard", "discard_stale"]


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


def recover_directory(target: str | os.PathLike[str]) -> None:
    """Restore ``target`` from ``target.old`` after a crash between the two renames.

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
    recover_directory(target)
    old = _old(target)
    if target.exists():
        os.replace(target, old)
    os.replace(staging, target)
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)


def discard(path: str | os.PathLike[str]) -> None:
    """Remove a staging tree, ignoring a missing one."""
    shutil.rmtree(path, ignore_errors=True)


def discard_stale(target: str | os.PathLike[str]) -> None:
    """Remove staging trees of ``target`` left by a writer that was killed.

    Call it only where no other writer of ``target`` can be running (one fit per output).
    """
    target = Path(target)
    for stale in target.parent.glob(f"{target.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
