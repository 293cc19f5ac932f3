"""Atomic replacement of a zarr group: by rename on POSIX disks, by a manifest in object stores.

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

**Object stores** (any URL, :func:`sphdist.io._fs.is_remote`: ``s3://``, ``gs://``, also
``file://``) have no rename. There every version is written under its own prefix inside the
target, ``<target>/v-<random>/`` (a complete zarr group, :func:`staging_path`), and becomes
visible when one small object naming it is written last: the target's own group metadata
document ``<target>/zarr.json``, whose attribute ``sphdist`` is the version's tag plus
``"version": "v-<random>"`` (the **manifest**, one PUT, atomic on S3; on a local ``file://``
filesystem written to a temporary name, flushed and renamed). Readers follow the manifest
(:func:`readable_path`); versions the manifest does not name are removed after the commit,
and by the next writer (:func:`recover_directory`, :func:`discard_stale`). A crash at any
instant leaves the previous manifest, hence the previous complete version, readable. A target
written before manifests (a zarr group with the tag at its root) is read in place, and the
first commit over it replaces its metadata document with a manifest and removes its arrays.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from sphdist.io._fs import exists, filesystem, is_remote, location

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
    "committed",
    "commit_identity",
    "MANIFEST",
]

#: The object naming a target's current version, in the object-store protocol.
MANIFEST = "zarr.json"
_VERSION_PREFIX = "v-"


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
        ``<target>.tmp-<random>`` in the same parent directory (hence the same filesystem); for
        a URL, the version prefix ``<target>/v-<random>`` (object-store protocol).
    """
    if is_remote(target):
        return location(target) / f"{_VERSION_PREFIX}{uuid.uuid4().hex[:12]}"
    target = Path(target)
    return target.with_name(f"{target.name}.tmp-{uuid.uuid4().hex[:12]}")


def scratch_path(target: str | os.PathLike[str]) -> Path:
    """The sibling directory a writer of ``target`` keeps temporary arrays in while it runs.

    ``<target>.scratch``: never read as ``target``; removed by its writer at the end and,
    after a killed writer, by :func:`discard_stale`.
    """
    target = location(target)
    return target.with_name(f"{target.name}.scratch")


def recover_directory(target: str | os.PathLike[str]) -> None:
    """Restore ``target`` from ``target.old`` after a crash between the two renames.

    Only a writer of ``target`` calls this (before it writes); readers use
    :func:`readable_path` and leave the tree as it is.

    Parameters
    ----------
    target : path-like
        The directory a previous :func:`commit_directory` was replacing. For a URL: removes
        the versions its manifest does not name (a killed writer's).
    """
    if is_remote(target):
        _remove_unnamed(location(target))
        return
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
    if is_remote(target):
        _commit_manifest(location(staging), location(target))
        return
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
    """Remove a staging tree, ignoring a missing one (and, for a URL, a committed version)."""
    if is_remote(path):
        path = location(path)
        if _named_version(path.parent) != path.name:  # committed: it is the target now
            _remove(path)
        return
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

    if is_remote(target):
        with output_lock(target):
            _remove_unnamed(location(target))
            _remove(scratch_path(target))
        return
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
    if is_remote(target):
        target = location(target)
        named = _named_version(target)
        return CommitState(
            committed=named is not None,
            staging=tuple(name for name in _versions(target) if name != named),
            interrupted=False,
        )
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
        For a URL, the version its manifest names (``<target>/v-<random>``), or ``target``
        itself (a group written before manifests, or nothing).
    """
    if is_remote(target):
        target = location(target)
        named = _named_version(target)
        return target if named is None else target / named
    target = Path(target)
    old = _old(target)
    return old if not target.exists() and old.exists() else target


def commit_identity(target: str | os.PathLike[str]) -> tuple[int, int] | str | None:
    """What identifies the version committed at ``target`` now, or None; changes with every commit.

    Locally (inode, mtime in ns) of ``target``, which every rename onto it changes (clock-free:
    file times come from the kernel's coarse clock); for a URL, the version its manifest names.
    """
    if is_remote(target):
        return _named_version(location(target))
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns


def committed(target: str | os.PathLike[str]) -> bool:
    """Whether a complete version of ``target`` is there (what a writer must not overwrite).

    ``target`` exists (locally, or as ``target.old`` after an interrupted commit); for a URL,
    its manifest names a version, or a group written before manifests is there. A killed
    writer's staging trees or unnamed versions do not count.
    """
    if is_remote(target):
        return exists(location(target) / MANIFEST)
    return commit_state(target).complete


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
    if is_remote(target):
        with _uploaded(location(target)) as tmp:
            yield tmp
        return
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


# -- object-store protocol (manifest) --------------------------------------------------------


def _read_manifest(target: Path) -> dict | None:
    """The ``sphdist`` attribute of ``<target>/zarr.json``, or None (absent or not JSON)."""
    fs, inner = filesystem(target / MANIFEST)
    try:
        document = json.loads(fs.cat_file(inner))
    except (FileNotFoundError, ValueError):
        return None
    tag = document.get("attributes", {}).get("sphdist") if isinstance(document, dict) else None
    return tag if isinstance(tag, dict) else None


def _named_version(target: Path) -> str | None:
    """The version prefix the manifest of ``target`` names, or None."""
    tag = _read_manifest(target)
    version = None if tag is None else tag.get("version")
    return version if isinstance(version, str) and version.startswith(_VERSION_PREFIX) else None


def _versions(target: Path) -> list[str]:
    """Names of the version prefixes under ``target`` (named or not), sorted."""
    fs, inner = filesystem(target)
    try:
        entries = fs.ls(inner, detail=False, refresh=True)
    except FileNotFoundError:
        return []
    names = (entry.rstrip("/").rsplit("/", 1)[-1] for entry in entries)
    return sorted(name for name in names if name.startswith(_VERSION_PREFIX))


def _remove(path: Path) -> None:
    """Remove everything under ``path`` (a prefix), ignoring a missing one."""
    fs, inner = filesystem(path)
    try:
        fs.rm(inner, recursive=True)
    except FileNotFoundError:
        pass
    fs.invalidate_cache()


def _remove_unnamed(target: Path, keep: str | None = None) -> None:
    """Remove whatever under ``target`` the manifest (or ``keep``) does not name.

    That is killed writers' versions, the previous version, and the arrays of a group written
    before manifests.
    """
    keep = keep or _named_version(target)
    if keep is None:  # nothing committed by manifest: only versions are a writer's debris
        for name in _versions(target):
            _remove(target / name)
        return
    fs, inner = filesystem(target)
    for entry in fs.ls(inner, detail=False, refresh=True):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name not in (MANIFEST, keep):
            _remove(target / name)


def _put_small(path: Path, data: bytes) -> None:
    """Write one small object so that readers see the old bytes or the new, never a part.

    One PUT in an object store; on a local ``file://`` filesystem a temporary sibling, flushed
    and renamed (with the directory entry flushed too).
    """
    fs, inner = filesystem(path)
    if "file" in fs.protocol or "local" in fs.protocol:
        local = Path(inner)
        with atomic_path(local) as tmp:
            tmp.write_bytes(data)
        return
    fs.pipe_file(inner, data)


def _commit_manifest(staging: Path, target: Path) -> None:
    """Make the complete version at ``staging`` (``<target>/v-<random>``) the current one."""
    from sphdist.io._lock import check_lease

    if str(staging.parent).rstrip("/") != str(target).rstrip("/") or not staging.name.startswith(
        _VERSION_PREFIX
    ):
        raise ValueError(f"{staging} is not a version of {target} (see staging_path)")
    check_lease(target)  # a writer that lost its lease writes nothing more
    fs, inner = filesystem(staging)
    if "file" in fs.protocol or "local" in fs.protocol:
        fsync_tree(inner)  # durability on local disk, as the rename protocol
    document = json.loads(fs.cat_file(f"{inner}/{MANIFEST}"))
    tag = dict(document.get("attributes", {}).get("sphdist") or {})
    tag["version"] = staging.name
    manifest = {"zarr_format": 3, "node_type": "group", "attributes": {"sphdist": tag}}
    _put_small(target / MANIFEST, json.dumps(manifest, indent=2).encode())
    _remove_unnamed(target, keep=staging.name)


@contextlib.contextmanager
def _uploaded(target: Path) -> Iterator[Path]:
    """Yield a local temporary file; upload it to ``target`` in one PUT when the block ends."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="sphdist-upload-") as folder:
        tmp = Path(folder) / f"part{target.suffix}"
        yield tmp
        if not tmp.exists():
            raise OSError(f"{target}: nothing was written to upload")
        fs, inner = filesystem(target)
        fs.put_file(str(tmp), inner)
