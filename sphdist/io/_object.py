"""A versioned store in an object store (any fsspec URL): committed by a manifest.

Object stores have no rename. Every version is written under its own prefix inside the
target, ``<target>/v-<random>/`` (a complete zarr group), and becomes visible when one small
object naming it is written last: the target's own group metadata document
``<target>/zarr.json``, whose attribute ``sphdist`` is the version's tag plus
``"version": "v-<random>"`` and ``"previous"``, the version it replaced (the **manifest**, one
PUT, atomic on S3; on local disk, a ``file://`` URL, a flushed temporary renamed). Readers
follow the manifest to a version and read that prefix, which is never changed once committed.

**Grace period**: the previous version is kept until the next commit, so a reader that opened
it before a commit still reads it whole; versions neither named nor previous (a killed
writer's) are removed after a commit and by the next writer. A crash at any instant leaves the
previous manifest, hence the previous complete version, readable. A target written before
manifests (a zarr group with the tag at its root) is read in place; the first commit over it
replaces its metadata document with a manifest and removes its arrays.

The lock is chosen from the store's capabilities (:meth:`ObjectTarget._default_lock`): an
``flock`` of the local path for ``file://``, a lease in the bucket for ``s3://``
(:class:`sphdist.io._lease.LeaseLock`), and none elsewhere (a warning says so).
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from sphdist.io._fs import filesystem, fsync_tree, local_path, location, protocol_of, replace_file
from sphdist.io._lease import LeaseLock
from sphdist.io._lock import FileLock, Lock, NoLock
from sphdist.io._store import MANIFEST, CommitState, Target

__all__ = ["ObjectTarget", "VERSION_PREFIX", "version_of"]

#: The prefix of a version's name inside its target: ``v-<random>``.
VERSION_PREFIX = "v-"


class ObjectTarget(Target):
    """A store in an object store (any fsspec URL): committed by a manifest.

    Parameters
    ----------
    path : str or upath.UPath
        The target URL.
    lock : sphdist.io._lock.Lock, optional
        Default: chosen from the capabilities: an ``flock`` on local disk, a lease where the
        store writes on a condition, else none.
    """

    def __init__(self, path: str | os.PathLike[str], *, lock: Lock | None = None) -> None:
        self.path = location(path)
        self.lock = lock if lock is not None else self._default_lock()

    def _default_lock(self) -> Lock:
        """The lock of this store's writers, chosen from its capabilities.

        An ``flock`` on local disk (``file://``), a lease where the store writes on a
        condition (S3), else none (its writers are warned).
        """
        if local_path(self.path) is not None:
            return FileLock(self.path, explain=protocol_of(self.path) is None)
        if self.supports_conditional_write:
            return LeaseLock(self.path)
        return NoLock(self.path)

    @property
    def supports_atomic_rename(self) -> bool:
        """True on local disk (a ``file://`` URL): its small objects are renamed into place."""
        return local_path(self.path) is not None

    @property
    def supports_conditional_write(self) -> bool:
        """True for S3 (``If-None-Match``/``If-Match`` on a PUT): its lock is a lease."""
        return protocol_of(self.path) == "s3"

    def reader(self) -> tuple[Path, str | None]:
        """The version the manifest names and its name, from one read of the manifest.

        ``target`` itself (and None) for a group written before manifests, or nothing.
        """
        named = _named_version(self.path)
        return (self.path if named is None else self.path / named), named

    def replaced(self, version: Hashable | None, *, failed: bool) -> bool:
        """Whether a failed read of ``version`` failed because the version is gone.

        A version is never changed once committed: only a failed read of a version that is
        gone (two commits later, past its grace period) met a replacement.
        """
        if not failed or version is None:
            return False
        tag = _read_manifest(self.path) or {}
        return version not in (tag.get("version"), tag.get("previous"))

    def state(self) -> CommitState:
        """See :class:`~sphdist.io._store.CommitState`; never interrupted (one write)."""
        tag = _read_manifest(self.path) or {}
        named, previous = version_of(tag.get("version")), version_of(tag.get("previous"))
        return CommitState(
            committed=named is not None,
            staging=tuple(n for n in _versions(self.path) if n not in (named, previous)),
            interrupted=False,
        )

    def committed(self) -> bool:
        """A manifest is there (or a group written before manifests)."""
        fs, inner = filesystem(self.path / MANIFEST)
        fs.invalidate_cache(inner)
        return bool(fs.exists(inner))

    def staging(self) -> Path:
        """The version prefix ``<target>/v-<random>``."""
        return self.path / f"{VERSION_PREFIX}{uuid.uuid4().hex[:12]}"

    def commit(self, staging: Path) -> None:
        """Write the manifest naming ``staging``; remove the versions older than the previous.

        Raises
        ------
        OutputLockedError
            If another writer holds the output's lock (this writer's lease was taken over).
        ValueError
            If ``staging`` is not a version prefix of the target (:meth:`staging`).
        """
        self.lock.check_held()  # a writer that lost its lease writes nothing more
        _commit_manifest(location(staging), self.path)

    def discard(self, path: Path) -> None:
        """Remove the prefix ``path`` unless the manifest names it (it is the target then)."""
        path = location(path)
        if _named_version(path.parent) != path.name:
            _remove(path)

    def recover(self) -> None:
        """Remove the versions neither named nor previous (a killed writer's)."""
        _remove_unnamed(self.path)

    def remove_stale(self) -> None:
        """:meth:`recover`, and remove ``<target>.scratch``."""
        _remove_unnamed(self.path)
        _remove(self.scratch())


def _read_manifest(target: Path) -> dict | None:
    """The ``sphdist`` attribute of ``<target>/zarr.json``, or None (absent or not JSON)."""
    fs, inner = filesystem(target / MANIFEST)
    try:
        document = json.loads(fs.cat_file(inner))
    except (FileNotFoundError, ValueError):
        return None
    tag = document.get("attributes", {}).get("sphdist") if isinstance(document, dict) else None
    return tag if isinstance(tag, dict) else None


def version_of(name: Any) -> str | None:
    """``name`` if it names a version (``v-<random>``), else None."""
    return name if isinstance(name, str) and name.startswith(VERSION_PREFIX) else None


def _named_version(target: Path) -> str | None:
    """The version prefix the manifest of ``target`` names, or None."""
    tag = _read_manifest(target)
    return None if tag is None else version_of(tag.get("version"))


def _versions(target: Path) -> list[str]:
    """Names of the version prefixes under ``target`` (named or not), sorted."""
    fs, inner = filesystem(target)
    try:
        entries = fs.ls(inner, detail=False, refresh=True)
    except FileNotFoundError:
        return []
    names = (entry.rstrip("/").rsplit("/", 1)[-1] for entry in entries)
    return sorted(name for name in names if name.startswith(VERSION_PREFIX))


def _remove(path: Path) -> None:
    """Remove everything under ``path`` (a prefix), ignoring a missing one."""
    fs, inner = filesystem(path)
    try:
        fs.rm(inner, recursive=True)
    except FileNotFoundError:
        pass
    fs.invalidate_cache()


def _remove_unnamed(target: Path, keep: tuple[str, ...] | None = None) -> None:
    """Remove whatever under ``target`` the manifest does not name as current or previous.

    That is killed writers' versions, versions older than the previous one, and the arrays of
    a group written before manifests. ``keep``: the names to keep (default: read from the
    manifest).
    """
    if keep is None:
        tag = _read_manifest(target) or {}
        keep = tuple(filter(None, (version_of(tag.get("version")),
                                   version_of(tag.get("previous")))))
    if not keep:
        # nothing committed by manifest: only versions are a writer's debris
        for name in _versions(target):
            _remove(target / name)
        return
    fs, inner = filesystem(target)
    for entry in fs.ls(inner, detail=False, refresh=True):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name not in (MANIFEST, *keep):
            _remove(target / name)


def _put_small(path: Path, data: bytes) -> None:
    """Write one small object so that readers see the old bytes or the new, never a part.

    One PUT in an object store; on local disk (a ``file://`` URL) a temporary sibling, flushed
    and renamed (with the directory entry flushed too).
    """
    fs, inner = filesystem(path)
    if local_path(path) is not None:
        replace_file(Path(inner), data)
        return
    fs.pipe_file(inner, data)


def _commit_manifest(staging: Path, target: Path) -> None:
    """Make the complete version at ``staging`` (``<target>/v-<random>``) the current one.

    The version it replaces is recorded as ``previous`` and kept until the next commit (the
    readers' grace period); older ones are removed.
    """
    if str(staging.parent).rstrip("/") != str(target).rstrip("/") or not staging.name.startswith(
        VERSION_PREFIX
    ):
        raise ValueError(f"{staging} is not a version of {target} (see Target.staging)")
    fs, inner = filesystem(staging)
    if local_path(staging) is not None:
        fsync_tree(inner)  # durability on local disk, as the rename protocol
    document = json.loads(fs.cat_file(f"{inner}/{MANIFEST}"))
    previous = _named_version(target)
    tag = dict(document.get("attributes", {}).get("sphdist") or {})
    tag["version"] = staging.name
    if previous is not None and previous != staging.name:
        tag["previous"] = previous
    manifest = {"zarr_format": 3, "node_type": "group", "attributes": {"sphdist": tag}}
    _put_small(target / MANIFEST, json.dumps(manifest, indent=2).encode())
    _remove_unnamed(target, keep=(staging.name, *([tag["previous"]] if "previous" in tag else [])))
