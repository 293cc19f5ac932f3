"""Storage targets: one protocol, two implementations, chosen once where a path is opened.

Every sphdist store (a ``corpus.zarr``, ``model.zarr``, ``embedding.zarr``, an export) is
written as a complete new version beside the current one and then committed, so that a
reader, or a crash at any instant, sees either the previous complete version or the new
complete version, never a mixture. :func:`open_target` picks the implementation for a path,
once; callers never ask where a path lives. Both implement :class:`Target`:

- :class:`PosixTarget`, a local path: the version is built in a sibling staging directory
  ``<target>.tmp-<random>`` and committed by two renames (``rename(2)`` of a directory within
  one filesystem is atomic on POSIX):

  1. ``target`` -> ``target.old``   (only if ``target`` exists)
  2. ``staging`` -> ``target``
  3. remove ``target.old``

  Before step 1 every file and directory of the staging tree is flushed to disk (``fsync``),
  and the parent directory after step 2, so the commit is durable against a power loss, not
  only a killed process. A crash between 1 and 2 leaves ``target.old`` (complete) and no
  ``target``; readers then read ``target.old`` in place (:meth:`Target.readable`), and the
  next writer puts it back (:meth:`Target.recover`). The output's lock is an ``flock``
  (:class:`sphdist.io._lock.FileHold`).

- :class:`ObjectTarget`, any URL (``s3://``, ``gs://``, ``memory://``, also ``file://``, which
  is how this protocol is exercised on local disk): object stores have no rename. Every
  version is written under its own prefix inside the target, ``<target>/v-<random>/`` (a
  complete zarr group), and becomes visible when one small object naming it is written last:
  the target's own group metadata document ``<target>/zarr.json``, whose attribute ``sphdist``
  is the version's tag plus ``"version": "v-<random>"`` and ``"previous"``, the version it
  replaced (the **manifest**, one PUT, atomic on S3; on a local ``file://`` filesystem a
  flushed temporary renamed). Readers follow the manifest to a version and read that prefix,
  which is never changed once committed. **Grace period**: the previous version is kept until
  the next commit, so a reader that opened it before a commit still reads it whole; versions
  neither named nor previous (a killed writer's) are removed after a commit and by the next
  writer. A crash at any instant leaves the previous manifest, hence the previous complete
  version, readable. A target written before manifests (a zarr group with the tag at its
  root) is read in place; the first commit over it replaces its metadata document with a
  manifest and removes its arrays. The lock is an ``flock`` of the local path for
  ``file://``, a lease in the bucket for ``s3://`` (:class:`sphdist.io._lease.Lease`), and
  none elsewhere (a warning says so).

One writer: :func:`open_output` holds the output's lock for a block and gives an
:class:`Output`, through which the writer stages, commits and cleans up; :func:`locks_output`
does the same for a function that writes one output. Given what it writes (``kind``) and what
the command reads (``inputs``), :func:`open_output` applies the output policy once: an output
is never an input of the same command, never inside or around an input or another store,
never at another output's lock, staging or previous-version name, and replaces (with
``--overwrite``) only what is of its own kind. This is the only module that knows the
names of the staging trees, of the previous version and of a writer's scratch directory
(``<target>.scratch``). Single files (plots, exports, reports) are written with
:func:`atomic_path`.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import inspect
import json
import logging
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable, Hashable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

from sphdist.errors import Interrupted, OutputExistsError, OutputLockedError, ParameterError
from sphdist.io import _lock
from sphdist.io._fs import (
    filesystem,
    fsync_directory,
    is_storage_failure,
    location,
    protocol_of,
    removal_command,
    replace_file,
    storage_error,
)

__all__ = [
    "Target", "PosixTarget", "ObjectTarget", "open_target", "Output", "open_output",
    "output_lock", "locks_output", "lock_holder", "CommitState", "commit_state",
    "readable_path", "committed", "commit_identity", "staging_path", "discard", "atomic_path",
    "fsync_tree", "MANIFEST", "exists", "open_file", "load_array", "remove",
    "check_output_place", "check_output_kind", "found_at",
]

F = TypeVar("F", bound=Callable[..., Any])

#: The object naming a target's current version, in the object-store protocol.
MANIFEST = "zarr.json"
_VERSION_PREFIX = "v-"

logger = logging.getLogger("sphdist")


class CommitState(NamedTuple):
    """What is on disk for a target (see :meth:`Target.state`).

    Attributes
    ----------
    committed : bool
        A version is committed at the target.
    staging : tuple of str
        Names of the staging trees (versions not committed) beside or in it: a running
        writer's next version, or a killed writer's debris. An object store's previous
        version, kept for its readers, is not one.
    interrupted : bool
        ``target.old`` exists and ``target`` does not: a local commit stopped between its two
        renames (:meth:`Target.recover` restores it).
    """

    committed: bool
    staging: tuple[str, ...]
    interrupted: bool

    @property
    def complete(self) -> bool:
        """A complete version is on disk (as ``target``, or as ``target.old``)."""
        return self.committed or self.interrupted


class Hold(Protocol):
    """A held output lock (:class:`sphdist.io._lock.FileHold`, :class:`sphdist.io._lease.Lease`)."""

    def check(self) -> None:
        """Raise OutputLockedError if the lock was lost."""

    def release(self) -> None:
        """Release the lock."""


class Target(Protocol):
    """Where one store lives, and how its versions are committed and read.

    Implemented by :class:`PosixTarget` (rename + ``flock``) and :class:`ObjectTarget`
    (manifest + lease); :func:`open_target` chooses. Writers call the mutating methods only
    while they hold the output's lock (:func:`open_output`).

    Attributes
    ----------
    path : pathlib.Path or upath.UPath
        The target, as the user named it (``str()`` of it is that name).
    """

    path: Path

    def readable(self) -> Path:
        """The directory a reader opens: the last complete version; changes nothing."""

    def state(self) -> CommitState:
        """What is committed, staged or interrupted; changes nothing."""

    def identity(self) -> Hashable | None:
        """What identifies the committed version now (changes with every commit), or None."""

    def reader(self) -> tuple[Path, Hashable | None]:
        """Where a reader reads (:meth:`readable`) and the version there (:meth:`identity`)."""

    def replaced(self, version: Hashable | None, *, failed: bool) -> bool:
        """Whether a read of ``version`` (from :meth:`reader`) may have met another version.

        ``failed``: the read raised. True means the error (or the values) may come from a
        commit that replaced ``version`` during the read, not from damage.
        """

    def committed(self) -> bool:
        """Whether a complete version is there (what a writer must not overwrite)."""

    def staging(self) -> Path:
        """A fresh location to build the next version in."""

    def scratch(self) -> Path:
        """The sibling directory a writer keeps temporary arrays in while it runs."""

    def commit(self, staging: Path) -> None:
        """Make the complete version at ``staging`` the committed one, atomically."""

    def discard(self, path: Path) -> None:
        """Remove a staging tree or scratch directory that was not committed (missing: fine)."""

    def recover(self) -> None:
        """Put back what an interrupted commit left (only a writer holding the lock)."""

    def remove_stale(self) -> None:
        """Remove killed writers' staging trees and scratch (only a writer holding the lock)."""

    def lock(self) -> Hold:
        """Take the output's lock; raise OutputLockedError if another writer holds it."""

    def holder(self) -> dict[str, Any] | None:
        """The record of the writer holding the lock (host, pid, command, since), or None."""

    def write_file(self) -> contextlib.AbstractContextManager[Path]:
        """Write one file at the target atomically: yield a temporary path, then publish it."""

    def exists(self) -> bool:
        """Whether anything is at the path now."""

    def open(self, mode: str = "rb") -> Any:
        """A binary file object on the path (a single file, not a store)."""

    def load_array(self) -> Any:
        """``np.load`` of the ``.npy``/``.npz`` file at the path."""

    def remove(self) -> None:
        """Delete the single file at the path; a missing one is not an error."""


def _named(target: Path) -> None:
    if Path(target).name in ("", ".."):
        raise ParameterError(
            f"{target}: an output path names no file or directory of its own (it is a "
            f"directory to write into). To resolve this, name the output in it, e.g. "
            f"--output {Path(target) / 'model.zarr'}."
        )


def _creatable(target: Any, lock: Path) -> None:
    """Raise ParameterError if the lock file ``lock`` of ``target`` cannot be created.

    ``flock`` refused looks the same as a lock file that cannot be made (``/proc``, a
    directory that does not accept files): a lock file that is not there, or that can be
    opened now, means no writer holds it, and the OS's reason is said instead.
    """
    if os.path.lexists(lock):
        return  # a holder's lock file: the refusal names it
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return  # another writer made it meanwhile
    except OSError as exc:
        raise ParameterError(
            f"{target}: no output can be written there: its lock file {lock} cannot be created "
            f"([Errno {exc.errno}] {exc.strerror}). To resolve this, choose an --output in a "
            f"directory you may write to, e.g. --output {_elsewhere(target, 'file', '')}."
        ) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(lock)


def fsync_tree(root: str | os.PathLike[str]) -> None:
    """Flush every file and directory of a local tree to disk (``fsync(2)``), files first.

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
        fsync_directory(Path(directory))


# -- a local path: rename + flock ------------------------------------------------------------


class PosixTarget:
    """A store on a local POSIX filesystem: committed by rename, locked by ``flock``.

    Parameters
    ----------
    path : path-like
        The target (a local path).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def _old(self) -> Path:
        return self.path.with_name(self.path.name + ".old")

    def readable(self) -> Path:
        """``target``; after a commit interrupted between its renames, ``target.old``."""
        old = self._old()
        return old if not self.path.exists() and old.exists() else self.path

    def state(self) -> CommitState:
        """See :class:`CommitState`."""
        committed = self.path.exists()
        return CommitState(
            committed=committed,
            staging=tuple(sorted(
                p.name for p in self.path.parent.glob(f"{self.path.name}.tmp-*")
            )),
            interrupted=self._old().exists() and not committed,
        )

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

    def committed(self) -> bool:
        """``target`` exists, or ``target.old`` after an interrupted commit."""
        return self.path.exists() or self._old().exists()

    def staging(self) -> Path:
        """``<target>.tmp-<random>``: same parent directory, hence the same filesystem."""
        return self.path.with_name(f"{self.path.name}.tmp-{uuid.uuid4().hex[:12]}")

    def scratch(self) -> Path:
        """``<target>.scratch``."""
        return self.path.with_name(f"{self.path.name}.scratch")

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

    def _lock_path(self) -> Path:
        return _lock.lock_path(Path(os.path.abspath(self.path)))

    def lock(self) -> Hold:
        """An ``flock`` on ``<target>.lock`` (:class:`sphdist.io._lock.FileHold`).

        Raises
        ------
        ParameterError
            If ``target`` names no entry of its own (``.``, ``..``, ``/``): an output is
            written beside its siblings and renamed into place, so it must have a name. Also
            if its lock file cannot be created there (``/proc``): the OS's reason, not a
            holder.
        OutputLockedError
            If another writer holds it.
        """
        _named(self.path)
        lock = self._lock_path()
        try:
            return _lock.FileHold(self.path, lock)
        except OutputLockedError:
            _creatable(self.path, lock)  # no holder: the lock file cannot be made there
            raise

    def holder(self) -> dict[str, Any] | None:
        """The record in ``<target>.lock.json``."""
        return _lock.read_local_record(self._lock_path())

    @contextlib.contextmanager
    def write_file(self) -> Iterator[Path]:
        """Yield ``<dir>/.<name>.tmp-<random><suffix>``; flush it and rename it onto ``target``."""
        target = self.path
        tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:12]}{target.suffix}")
        try:
            yield tmp
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            if target.is_dir() and not target.is_symlink():
                self.commit(tmp)  # a file replacing a directory (an overwrite)
            else:
                os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_directory(target.parent)

    def exists(self) -> bool:
        """``os.path.exists``."""
        return os.path.exists(self.path)

    def open(self, mode: str = "rb") -> Any:
        """The builtin :func:`open`."""
        return open(self.path, mode)

    def load_array(self) -> Any:
        """``np.load``, memory-mapped for a ``.npy`` file."""
        import numpy as np

        if str(self.path).endswith(".npy"):
            return np.load(self.path, mmap_mode="r")
        return np.load(self.path)

    def remove(self) -> None:
        """``os.remove``, ignoring a missing file."""
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)


# -- a URL: manifest + lease -----------------------------------------------------------------


class _NoHold:
    """No lock: a store with no conditional write sphdist can lock with."""

    def check(self) -> None:
        """Nothing to check."""

    def release(self) -> None:
        """Nothing to release."""


class ObjectTarget:
    """A store in an object store (any fsspec URL): committed by a manifest, locked by a lease.

    Parameters
    ----------
    path : str or upath.UPath
        The target URL.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = location(path)
        protocol = protocol_of(self.path)
        #: how the output is locked, chosen once: an flock of the local path, a lease, none
        self._locking = ("flock" if protocol in ("file", "local")
                         else "lease" if protocol == "s3" else None)

    def readable(self) -> Path:
        """The version the manifest names (``<target>/v-<random>``), or ``target`` itself.

        ``target`` itself: a group written before manifests, or nothing.
        """
        named = _named_version(self.path)
        return self.path if named is None else self.path / named

    def state(self) -> CommitState:
        """See :class:`CommitState`; never interrupted (the manifest is one write)."""
        tag = _read_manifest(self.path) or {}
        named, previous = _version_of(tag.get("version")), _version_of(tag.get("previous"))
        return CommitState(
            committed=named is not None,
            staging=tuple(n for n in _versions(self.path) if n not in (named, previous)),
            interrupted=False,
        )

    def identity(self) -> str | None:
        """The version the manifest names."""
        return _named_version(self.path)

    def reader(self) -> tuple[Path, str | None]:
        """The version the manifest names and its name, from one read of the manifest."""
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

    def committed(self) -> bool:
        """A manifest is there (or a group written before manifests)."""
        return ObjectTarget(self.path / MANIFEST).exists()

    def staging(self) -> Path:
        """The version prefix ``<target>/v-<random>``."""
        return self.path / f"{_VERSION_PREFIX}{uuid.uuid4().hex[:12]}"

    def scratch(self) -> Path:
        """``<target>.scratch``."""
        return self.path.with_name(f"{self.path.name}.scratch")

    def commit(self, staging: Path) -> None:
        """Write the manifest naming ``staging``; remove the versions older than the previous.

        Raises
        ------
        OutputLockedError
            If another writer holds the output's lease (this writer's was taken over).
        ValueError
            If ``staging`` is not a version prefix of the target (:meth:`staging`).
        """
        if self._locking == "lease":
            from sphdist.io._lease import held_here

            held_here(self.path)  # a writer that lost its lease writes nothing more
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

    def _local_lock(self) -> Path:
        return _lock.lock_path(Path(filesystem(self.path)[1]))

    def lock(self) -> Hold:
        """An flock (``file://``), a lease (``s3://``), or nothing (warned).

        Raises
        ------
        OutputLockedError
            If another writer holds it.
        StorageError
            If the store fails the lease's requests.
        """
        if self._locking == "flock":
            _named(str(self.path))
            return _lock.FileHold(self.path, self._local_lock())
        if self._locking == "lease":
            from sphdist.io._lease import Lease

            lease = Lease(self.path)
            try:
                lease.acquire()
            except Exception as exc:
                if not is_storage_failure(exc):
                    raise
                raise storage_error(self.path, exc) from None
            return lease
        logger.warning(
            "%s: %s:// has no conditional write sphdist can lock with; make sure no other "
            "process writes this output at the same time.", self.path, protocol_of(self.path),
        )
        return _NoHold()

    def holder(self) -> dict[str, Any] | None:
        """The record of the lock's holder."""
        if self._locking == "flock":
            return _lock.read_local_record(self._local_lock())
        if self._locking == "lease":
            from sphdist.io._lease import read_record

            return read_record(_lock.lock_path(self.path))[0]
        return None

    @contextlib.contextmanager
    def write_file(self) -> Iterator[Path]:
        """Yield a local temporary file; upload it to ``target`` in one PUT when the block ends."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="sphdist-upload-") as folder:
            tmp = Path(folder) / f"part{self.path.suffix}"
            yield tmp
            if not tmp.exists():
                raise OSError(f"{self.path}: nothing was written to upload")
            fs, inner = filesystem(self.path)
            fs.put_file(str(tmp), inner)

    def exists(self) -> bool:
        """Whether the store has anything at the path now (its listing cache not trusted)."""
        fs, inner = filesystem(self.path)
        fs.invalidate_cache(inner)
        return bool(fs.exists(inner))

    def open(self, mode: str = "rb") -> Any:
        """An fsspec file object on the path.

        Writing uploads it when it is closed (one PUT, or a multipart upload completed at
        close: readers never see a part of it).
        """
        import fsspec

        return fsspec.open(str(self.path), mode).open()

    def load_array(self) -> Any:
        """``np.load`` of the whole file, read into memory."""
        import io

        import numpy as np

        with self.open() as f:
            return np.load(io.BytesIO(f.read()))

    def remove(self) -> None:
        """Delete the object, ignoring a missing one."""
        fs, inner = filesystem(self.path)
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(inner)


def _read_manifest(target: Path) -> dict | None:
    """The ``sphdist`` attribute of ``<target>/zarr.json``, or None (absent or not JSON)."""
    fs, inner = filesystem(target / MANIFEST)
    try:
        document = json.loads(fs.cat_file(inner))
    except (FileNotFoundError, ValueError):
        return None
    tag = document.get("attributes", {}).get("sphdist") if isinstance(document, dict) else None
    return tag if isinstance(tag, dict) else None


def _version_of(name: Any) -> str | None:
    return name if isinstance(name, str) and name.startswith(_VERSION_PREFIX) else None


def _named_version(target: Path) -> str | None:
    """The version prefix the manifest of ``target`` names, or None."""
    tag = _read_manifest(target)
    return None if tag is None else _version_of(tag.get("version"))


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


def _remove_unnamed(target: Path, keep: tuple[str, ...] | None = None) -> None:
    """Remove whatever under ``target`` the manifest does not name as current or previous.

    That is killed writers' versions, versions older than the previous one, and the arrays of
    a group written before manifests. ``keep``: the names to keep (default: read from the
    manifest).
    """
    if keep is None:
        tag = _read_manifest(target) or {}
        keep = tuple(filter(None, (_version_of(tag.get("version")),
                                   _version_of(tag.get("previous")))))
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

    One PUT in an object store; on a local ``file://`` filesystem a temporary sibling, flushed
    and renamed (with the directory entry flushed too).
    """
    fs, inner = filesystem(path)
    if "file" in fs.protocol or "local" in fs.protocol:
        replace_file(Path(inner), data)
        return
    fs.pipe_file(inner, data)


def _commit_manifest(staging: Path, target: Path) -> None:
    """Make the complete version at ``staging`` (``<target>/v-<random>``) the current one.

    The version it replaces is recorded as ``previous`` and kept until the next commit (the
    readers' grace period); older ones are removed.
    """
    if str(staging.parent).rstrip("/") != str(target).rstrip("/") or not staging.name.startswith(
        _VERSION_PREFIX
    ):
        raise ValueError(f"{staging} is not a version of {target} (see Target.staging)")
    fs, inner = filesystem(staging)
    if "file" in fs.protocol or "local" in fs.protocol:
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


# -- choosing once, and the writer -----------------------------------------------------------


def open_target(path: str | os.PathLike[str]) -> Target:
    """The storage target of ``path``, chosen once.

    :class:`PosixTarget` for a local path, else :class:`ObjectTarget` (any URL, ``file://``
    included).

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    Target

    Raises
    ------
    ValueError
        If ``path`` is a URL of a protocol fsspec does not know (see
        :func:`sphdist.io.location`).
    """
    if isinstance(path, PosixTarget | ObjectTarget):
        return path
    return PosixTarget(path) if protocol_of(path) is None else ObjectTarget(path)


class Output:
    """A writer's hold on its output (:func:`open_output`): the lock, staging and the commit.

    Attributes
    ----------
    target : Target
        Where the output lives.
    path : pathlib.Path or upath.UPath
        The output, as named.
    """

    def __init__(self, target: Target, hold: Hold) -> None:
        self.target, self.path, self._hold = target, target.path, hold

    def committed(self) -> bool:
        """Whether a complete version is there (see :meth:`Target.committed`)."""
        return self.target.committed()

    def identity(self) -> Hashable | None:
        """The committed version now (see :meth:`Target.identity`)."""
        return self.target.identity()

    def staging(self) -> Path:
        """A fresh location for the next version."""
        return self.target.staging()

    def scratch(self) -> Path:
        """The writer's scratch directory."""
        return self.target.scratch()

    def commit(self, staging: Path) -> None:
        """Commit ``staging``, unless this writer lost its lock (OutputLockedError)."""
        self._hold.check()
        self.target.commit(staging)

    def discard(self, path: Path) -> None:
        """Remove an uncommitted staging tree or the scratch directory."""
        self.target.discard(path)

    def recover(self) -> None:
        """Put back what an interrupted commit left."""
        self.target.recover()

    def remove_stale(self) -> None:
        """Remove killed writers' staging trees and scratch (the lock proves them stale)."""
        self.target.remove_stale()


@contextlib.contextmanager
def open_output(
    path: str | os.PathLike[str] | Target, *, kind: str | None = None,
    inputs: Iterable[Any] = (),
) -> Iterator[Output]:
    """Hold the output ``path`` for a writer: its lock for the block, staging and commit.

    Not reentrant: a second hold of the same output, in this process or another, is refused.
    Released on exit whatever happens; the kernel releases an ``flock`` if the process dies,
    and a lease expires.

    With ``kind``, the output policy is applied once, here (:func:`check_output_place` before
    the lock is taken, so nothing is created inside what is refused, and
    :func:`check_output_kind` under it): an output is never an input of the same command,
    never inside or around an input or another store, never at a name sphdist keeps for
    another output (``.lock``, ``.old``...), and what is there already is replaced only if it
    is of the same kind.

    Parameters
    ----------
    path : path-like or Target
        The output (file or directory), existing or not. A local parent directory is created
        if missing (as a writer would).
    kind : {"corpus", "model", "embedding", "index", "file"}, optional
        What the writer writes (``"file"``: one file, an export, a table, a figure). Default:
        no policy (a caller that checked already).
    inputs : iterable of path-like, optional
        What the same command reads (None entries are skipped; a glob pattern counts for the
        paths it matches).

    Yields
    ------
    Output

    Raises
    ------
    OutputLockedError
        If another writer holds it; the message names the holder (host, pid, command,
        since) and the remedies.
    OSError
        If the lock file cannot be created (a read-only or missing location).
    ParameterError
        If ``path`` names no entry of its own (``.``, ``..``, ``/``), or is refused by
        :func:`check_output_place`.
    OutputExistsError
        If something of another kind is at ``path`` (:func:`check_output_kind`).
    """
    target = open_target(path)
    if kind is not None:
        check_output_place(target.path, kind, inputs)
    hold = target.lock()
    try:
        if kind is not None:
            check_output_kind(target, kind)
        yield Output(target, hold)
    finally:
        hold.release()


# -- the output policy: what an output may be, where, and what it may replace ----------------

#: What sphdist keeps beside an output ``X`` (``X.lock``, ``X.lock.json``, ``X.old``,
#: ``X.scratch``, ``X.tmp-<random>``...): an output is never named so.
_COMPANIONS = {".lock.json": "lock record", ".lock": "lock",
               ".old": "previous version (during a commit)", ".scratch": "temporary arrays"}

#: The kinds of output, in messages: what it is, and what writes it.
_KINDS = {
    "corpus": ("a sphdist corpus", "sphdist ingest` or `sphdist synth", "corpus.zarr"),
    "model": ("a sphdist model", "sphdist fit", "model.zarr"),
    "embedding": ("a sphdist embedding", "sphdist transform", "embedding.zarr"),
    "index": ("a sphdist index", "sphdist index", "index.zarr"),
    "file": ("a file", "", ""),
}


def _key(path: Any) -> str:
    """``path`` as comparable text: a resolved local path, or ``protocol://bucket/key``."""
    protocol = protocol_of(path)
    if protocol is None:
        return os.path.realpath(os.fspath(path))
    if protocol in ("file", "local"):
        return os.path.realpath(location(path).path)
    rest = re.sub("/+", "/", str(path).split("://", 1)[1]).strip("/")
    return f"{'s3' if protocol == 's3a' else protocol}://{rest}"


def _within(inner: str, outer: str) -> bool:
    """Whether the key ``inner`` is strictly below the key ``outer``."""
    return inner.startswith(outer.rstrip("/") + "/")


def _input_keys(inputs: Iterable[Any]) -> list[tuple[str, str]]:
    """(key, as named) of each input; an object with ``paths`` (a source spec) gives those."""
    found: list[tuple[str, str]] = []
    for item in inputs:
        if item is None:
            continue
        paths = getattr(item, "paths", item)
        one_path = isinstance(paths, str | os.PathLike) or hasattr(paths, "protocol")  # a UPath
        items = [paths] if one_path else list(paths) if isinstance(paths, list | tuple) else []
        for one in items:
            if isinstance(one, str | os.PathLike) or hasattr(one, "protocol"):
                found.append((_key(one), str(one)))  # not a path (an array): nothing to nest
    return found


def _stores_above(key: str) -> Iterator[str]:
    """The keys of the zarr nodes (a ``zarr.json`` there) above the key ``key``, nearest first."""
    protocol, _, rest = key.rpartition("://")
    parts = rest.split("/")
    for i in range(len(parts) - 1, 0, -1):
        above = "/".join(parts[:i]) or "/"
        if protocol:
            try:
                fs, inner = filesystem(f"{protocol}://{above}/{MANIFEST}")
                present = bool(fs.exists(inner))
            except Exception as exc:
                if not is_storage_failure(exc):
                    raise
                raise storage_error(f"{protocol}://{above}", exc) from None
        else:
            present = os.path.isfile(os.path.join(above, MANIFEST))
        if present:
            yield f"{protocol}://{above}" if protocol else above


def _named_as(path: Any, key: str) -> str:
    """``key`` written as the user wrote ``path`` (relative stays relative where it can)."""
    if protocol_of(path) is not None:
        return key
    text = os.fspath(path)
    return key if os.path.isabs(text) else os.path.relpath(key)


def _elsewhere(path: Any, kind: str, beside: str, taken: Iterable[str] = ()) -> str:
    """Another output to suggest: the kind's usual name, or ``<stem>-2<suffix>``, in ``beside``."""
    name = location(path).name
    stem, dot, suffix = name.partition(".")
    candidates = [_KINDS[kind][2] or (name if beside != str(location(path).parent) else ""),
                  f"{stem}-2{dot}{suffix}", f"{stem}-new{dot}{suffix}"]
    taken = set(taken)
    for candidate in filter(None, candidates):
        other = (beside.rstrip("/") + "/" + candidate if "://" in beside
                 else candidate if beside in ("", ".") else os.path.join(beside, candidate))
        if _key(other) not in taken and not exists(other):
            return other
    return beside.rstrip("/") + "/" + f"{stem}-{uuid.uuid4().hex[:6]}{dot}{suffix}"


def check_output_place(
    path: str | os.PathLike[str], kind: str, inputs: Iterable[Any] = (),
) -> None:
    """Refuse an output that is an input, nests with an input or a store, or is a companion.

    Looks only at names: whether a parent of ``path`` holds a ``zarr.json`` (is a store), and
    whether a name it suggests is free. Writes nothing, so a refused output leaves no lock
    file (or lease) behind.

    Parameters
    ----------
    path : path-like
        The output.
    kind : str
        What is written there (see :func:`open_output`).
    inputs : iterable of path-like
        What the same command reads.

    Raises
    ------
    ParameterError
        If ``path`` names a companion of another output (``X.lock``, ``X.lock.json``,
        ``X.old``, ``X.scratch``, ``X.tmp-...``); is an input of the command, or inside or
        around one; or is inside a zarr store (a corpus, model...), whose next commit would
        remove it. The message names both paths and another output to choose. Also if
        ``path`` is a symbolic link, a named pipe, a device or a socket: an output is
        committed by a rename, which would replace the link or the device itself (``export
        -o /dev/stdout --overwrite`` once turned the machine's ``/dev/stdout`` into a file).
    StorageError
        If the object store fails while its parents are looked at.
    """
    name = location(path).name
    for suffix in _COMPANIONS:
        if name.endswith(suffix) and len(name) > len(suffix):
            base = location(path).with_name(name[: -len(suffix)])
            raise ParameterError(
                f"{path}: a name ending in {suffix} is where sphdist keeps the "
                f"{_COMPANIONS[suffix]} of another output, {base}; writing there would break "
                f"that output's commits. To resolve this, choose another name, e.g. --output "
                f"{_elsewhere(base, kind, str(base.parent))}."
            )
    if ".tmp-" in name:
        raise ParameterError(
            f"{path}: a name holding .tmp- is where sphdist stages another output before "
            f"its commit (and removes it as debris). To resolve this, choose another name, "
            f"e.g. --output {_elsewhere(path, kind, str(location(path).parent))}."
        )
    _refuse_special_file(path, kind)
    key = _key(path)
    found = _input_keys(inputs)
    taken = [k for k, _ in found]
    for other, named in found:
        glob_pattern = any(c in named for c in "*?[") and not exists(named)
        if other == key or (glob_pattern and fnmatch.fnmatchcase(key, other)):
            also = "" if named == str(path) else f" ({named})"
            raise ParameterError(
                f"{path} is also an input of this command{also}: a command never replaces "
                f"what it reads. To resolve this, choose another --output, e.g. "
                f"--output {_elsewhere(path, kind, str(location(path).parent), taken)}."
            )
        if _within(key, other):
            outside = os.path.dirname(other) if "://" not in other else other.rsplit("/", 1)[0]
            raise ParameterError(
                f"{path} is inside {named}, an input of this command: an output is never "
                f"written inside what the command reads (its next commit would remove it). "
                f"To resolve this, choose an --output outside it, e.g. --output "
                f"{_named_as(path, _elsewhere(path, kind, outside, taken))}."
            )
        if _within(other, key):
            raise ParameterError(
                f"{path} contains {named}, an input of this command: a command never "
                f"replaces what it reads. To resolve this, choose an --output that does not "
                f"contain it, e.g. --output "
                f"{_named_as(path, _elsewhere(path, kind, other.rsplit('/', 1)[0], taken))}."
            )
    for store in list(_stores_above(key))[-1:]:  # the outermost: what a user named
        outside = store.rsplit("/", 1)[0] or "/"
        raise ParameterError(
            f"{path} is inside {_named_as(path, store)}, a zarr store ({_found_text(store)}): "
            f"an output is never written inside another store (its next commit would remove "
            f"it). To resolve this, choose an --output outside it, e.g. --output "
            f"{_named_as(path, _elsewhere(path, kind, outside, taken))}."
        )


def _refuse_special_file(path: Any, kind: str) -> None:
    """Refuse a local output that is a link, a pipe, a device or a socket (see the caller)."""
    if protocol_of(path) is not None:
        return
    text = os.fspath(path)
    try:
        mode = os.lstat(text).st_mode
    except OSError:
        return  # nothing there (or nothing to see): the writer says what is wrong
    if stat.S_ISLNK(mode):
        pointed = os.path.realpath(text)
        raise ParameterError(
            f"{text} is a symbolic link (to {pointed}): an output is committed by a rename, "
            f"which would replace the link, not write where it points. To resolve this, name "
            f"the place itself, e.g. --output {pointed}, or another --output, e.g. --output "
            f"{_elsewhere(text, kind, str(location(text).parent))}."
        )
    what = ("a named pipe" if stat.S_ISFIFO(mode) else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket"
            if stat.S_ISSOCK(mode) else None)
    if what is not None:
        raise ParameterError(
            f"{text} is {what}: an output is written to a new file and renamed into place, "
            f"which would replace {what} rather than write into it. To resolve this, write a "
            f"file, e.g. --output {_elsewhere(text, kind, str(location(text).parent))}, and "
            f"copy it from there."
        )


def _found_text(path: Any) -> str:
    """What is at ``path``, in words (see :func:`found_at`)."""
    found = found_at(path)
    if found in _KINDS and found != "file":
        return _KINDS[found][0]
    return {
        None: "nothing", "file": "a file", "directory": "a directory",
        "zarr": "a zarr store not written by sphdist",
    }.get(found, f"a store tagged {found!r}")


def found_at(path: str | os.PathLike[str] | Target) -> str | None:
    """What is at ``path``: a sphdist kind, or ``"zarr"``, ``"directory"``, ``"file"``, None.

    Parameters
    ----------
    path : path-like or Target

    Returns
    -------
    str or None
        The ``sphdist.kind`` tag of a store (``"corpus"``, ``"model"``...; after a local
        commit interrupted between its renames, the previous version's); ``"zarr"`` for a
        zarr node without one; ``"directory"`` for a directory (or prefix) holding anything
        else; ``"file"`` for anything that is not a directory; None for nothing, an empty
        directory, or a prefix holding only versions no manifest names (a killed writer's).

    Raises
    ------
    StorageError
        If the object store fails.
    """
    target = open_target(path)
    protocol = protocol_of(target.path)
    try:
        where = target.readable()
        fs, inner = filesystem(where)
        if protocol is None:
            inner = os.fspath(where)
        try:
            document = json.loads(fs.cat_file(f"{inner.rstrip('/')}/{MANIFEST}"))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError):
            document = None
        if isinstance(document, dict):
            tag = document.get("attributes", {}).get("sphdist")
            kind = tag.get("kind") if isinstance(tag, dict) else None
            return kind if isinstance(kind, str) else "zarr"
        if protocol is None:
            if os.path.isdir(inner):
                return "directory" if any(os.scandir(inner)) else None
            return "file" if os.path.lexists(inner) else None
        fs.invalidate_cache(inner)
        if fs.isfile(inner):
            return "file"
        if not fs.exists(inner):
            return None
        names = [e.rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(inner, detail=False)]
        # only versions no manifest names: a killed writer's, which the next writer removes
        return "directory" if any(not _version_of(n) for n in names) else None
    except Exception as exc:
        if not is_storage_failure(exc) or protocol is None:
            raise
        raise storage_error(target.path, exc) from None


def check_output_kind(path: str | os.PathLike[str] | Target, kind: str) -> None:
    """Refuse to write ``kind`` at ``path`` if something of another kind is there.

    An output replaces (with ``overwrite``) only what its kind of writer wrote: a corpus a
    corpus, a model a model, a file a file; never a store of another kind, a directory, or a
    zarr store sphdist did not write. Called by :func:`open_output` under the output's lock.

    Parameters
    ----------
    path : path-like or Target
    kind : {"corpus", "model", "embedding", "index", "file"}

    Raises
    ------
    OutputExistsError
        If ``path`` holds anything else; the message says what it is, and how to remove it
        by hand if it is really to be replaced.
    StorageError
        If the object store fails.
    """
    target = open_target(path)
    found = found_at(target)
    if found is None or found == kind:
        return
    what, writer, _ = _KINDS[kind]
    by = f", as `{writer}` writes it" if writer else ""
    rm = removal_command(target.path, directory=found != "file")
    beside = str(target.path.parent)
    raise OutputExistsError(
        f"{target.path} is {_found_text(target)}, not {what}: this command replaces (with "
        f"--overwrite) only {what}{by}, never anything else. To resolve this, choose another "
        f"--output, e.g. --output {_elsewhere(target.path, kind, beside)}, or, if "
        f"{target.path} is really to be replaced, remove it by hand first: `{rm}`."
    )


#: The name the rest of the package and its tests used for :func:`open_output`.
output_lock = open_output


#: The commit at an output that could not be read before its writer ran.
_UNKNOWN = object()


def _left_behind(target: Any, before: Any) -> str:
    """What a writer of ``target`` stopped by Ctrl-C left there (``before``: the commit then)."""
    try:
        now = _UNKNOWN if before is _UNKNOWN else commit_identity(target)
    except Exception:  # the store fails: say what is sure
        now = _UNKNOWN
    if now is _UNKNOWN:
        return (f"interrupted (Ctrl-C) while writing {target}, which is committed only when "
                "complete. To resolve this, run the command again.")
    if now != before:
        return f"interrupted (Ctrl-C) after {target} was committed: it is complete."
    return (
        f"interrupted (Ctrl-C): nothing was written, {target} "
        f"{'does not exist' if before is None else 'is as it was'} (an output is committed "
        "only when complete). To resolve this, run the command again."
    )


def locks_output(
    parameter: str = "output", *, kind: str | Callable[[dict[str, Any]], str] | None = None,
    inputs: tuple[str, ...] | Callable[[dict[str, Any]], Iterable[Any]] = (),
) -> Callable[[F], F]:
    """Decorate a writer so that it holds its output (:func:`open_output`) throughout.

    For the jobs that write one output (ingest, synth, transform, export): the lock is taken
    before the function looks at the output (whether it exists, ``overwrite``) and released
    after its commit, or its failure. A Ctrl-C (:class:`KeyboardInterrupt`) is raised again as
    :class:`~sphdist.errors.Interrupted`, saying what is at the output: nothing was written
    (an output is committed only when complete), unless the commit was done.

    Parameters
    ----------
    parameter : str, default "output"
        The name of the decorated function's argument that is the output path.
    kind : str or callable, optional
        What the function writes (see :func:`open_output`), or a function of its bound
        arguments (defaults included) that says it; default: no output policy.
    inputs : tuple of str or callable
        The names of the function's arguments that are what it reads (paths, sequences of
        paths, or objects with ``paths``), or a function of its bound arguments (defaults
        included) that returns what it reads (for an argument that is a path only sometimes:
        ``neighbors``' queries are texts or a file), for the output policy.

    Returns
    -------
    callable
        The decorator; the decorated function keeps its name, signature and docstring.
    """

    def decorate(function: F) -> F:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def locked(*args: Any, **kwargs: Any) -> Any:
            try:
                bound = signature.bind(*args, **kwargs)
                target = bound.arguments[parameter]
            except (TypeError, KeyError):  # the function's own TypeError says what is wrong
                return function(*args, **kwargs)
            bound.apply_defaults()
            what = kind(bound.arguments) if callable(kind) else kind
            read = (list(inputs(bound.arguments)) if callable(inputs)
                    else [bound.arguments.get(name) for name in inputs])
            try:
                before = commit_identity(target)
            except Exception:  # a failing store: the writer says so; Ctrl-C then says less
                before = _UNKNOWN
            try:
                with open_output(target, kind=what, inputs=read):
                    return function(*args, **kwargs)
            except Interrupted:
                raise
            except KeyboardInterrupt as exc:
                raise Interrupted(_left_behind(target, before)) from exc

        return locked  # type: ignore[return-value]

    return decorate


# -- one call on a path (for writers and readers that hold no Output) ------------------------


def readable_path(path: str | os.PathLike[str]) -> Path:
    """The directory a reader of ``path`` opens (:meth:`Target.readable`); changes nothing."""
    return open_target(path).readable()


def commit_state(path: str | os.PathLike[str]) -> CommitState:
    """What is committed, staged or interrupted at ``path`` (:meth:`Target.state`)."""
    return open_target(path).state()


def committed(path: str | os.PathLike[str]) -> bool:
    """Whether a complete version of ``path`` is there (:meth:`Target.committed`)."""
    return open_target(path).committed()


def commit_identity(path: str | os.PathLike[str]) -> Hashable | None:
    """What identifies the version committed at ``path`` now (:meth:`Target.identity`)."""
    return open_target(path).identity()


def staging_path(path: str | os.PathLike[str]) -> Path:
    """A fresh location to build ``path``'s next version in (:meth:`Target.staging`)."""
    return open_target(path).staging()


def discard(path: str | os.PathLike[str]) -> None:
    """Remove an uncommitted staging tree or scratch directory, ignoring a missing one."""
    target = open_target(path)
    target.discard(target.path)


def lock_holder(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The writer recorded as holding ``path``'s lock: host, pid, command, since; or None."""
    return open_target(path).holder()


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Write one file atomically: yield a temporary path, then publish it at ``path``.

    The caller writes the complete file to the yielded path (by any means: ``savefig``,
    ``np.save``, ``to_parquet``, ``open``). On normal exit a local file is flushed to disk and
    renamed onto ``path`` with :func:`os.replace` (atomic on POSIX), and the directory entry
    is flushed; a URL is uploaded in one PUT. A reader therefore sees the previous complete
    file or the new complete file, never a part. A local directory at ``path`` is replaced
    through a commit. If the block raises, the temporary is removed, ``path`` is left as it
    was, and the exception propagates.

    Parameters
    ----------
    path : path-like
        The file to write; its parent directory must exist. Whatever is there is replaced.

    Yields
    ------
    pathlib.Path
        Locally ``<dir>/.<name>.tmp-<random><suffix>``: same directory (hence the same
        filesystem) and same suffix as ``path``, so writers that infer the format from the
        suffix still do.

    Raises
    ------
    OSError
        If the block wrote nothing at the yielded path, or the rename fails.
    """
    with open_target(path).write_file() as tmp:
        yield tmp


def exists(path: str | os.PathLike[str]) -> bool:
    """Whether anything is at ``path`` now (:meth:`Target.exists`)."""
    return open_target(path).exists()


def open_file(path: str | os.PathLike[str], mode: str = "rb") -> Any:
    """A binary file object on ``path``, local or in an object store (:meth:`Target.open`)."""
    return open_target(path).open(mode)


def load_array(path: str | os.PathLike[str]) -> Any:
    """``np.load`` of a ``.npy``/``.npz`` file: memory-mapped locally, read whole from a URL."""
    return open_target(path).load_array()


def remove(path: str | os.PathLike[str]) -> None:
    """Delete one file (local or in an object store); a missing one is not an error."""
    open_target(path).remove()
