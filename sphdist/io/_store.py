"""The versioned-store protocol: where one store lives, and how its versions are committed.

Every sphdist store (a ``corpus.zarr``, ``model.zarr``, ``embedding.zarr``, an index) is
written as a complete new version beside the current one and then committed, so that a
reader, or a crash at any instant, sees either the previous complete version or the new
complete version, never a mixture. :class:`Target` is that protocol, in the manner of zarr's
``zarr.abc.store.Store``: a few abstract methods, capability properties that say what the
medium can do (:attr:`Target.supports_atomic_rename`, :attr:`Target.supports_conditional_write`)
and a :class:`~sphdist.io._lock.Lock` given to it when it is made. Two implementations, each
in its own module, are chosen once, where a path is opened
(:func:`sphdist.io._targets.open_target`; this module imports neither):

- :class:`sphdist.io._posix.PosixTarget`, a local path: committed by rename, locked by
  ``flock``;
- :class:`sphdist.io._object.ObjectTarget`, any fsspec URL (``s3://``, ``memory://``, also
  ``file://``): committed by writing a manifest that names the version, locked by a lease
  where the store has conditional writes.

Single files (exports, reports, figures) are not versioned stores: :mod:`sphdist.io._files`.
"""

from __future__ import annotations

import abc
from collections.abc import Hashable
from pathlib import Path
from typing import Any, NamedTuple

from sphdist.io._lock import Hold, Lock

__all__ = ["Target", "CommitState", "MANIFEST"]

#: The object naming a target's current version, in the object-store protocol.
MANIFEST = "zarr.json"


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


class Target(abc.ABC):
    """A versioned store: where one store lives, and how its versions are committed and read.

    Implemented by :class:`~sphdist.io._posix.PosixTarget` (rename + ``flock``) and
    :class:`~sphdist.io._object.ObjectTarget` (manifest + lease);
    :func:`~sphdist.io._targets.open_target` chooses. Writers call the mutating methods only
    while they hold the output's lock (:func:`sphdist.io.open_output`).

    Attributes
    ----------
    path : pathlib.Path or upath.UPath
        The target, as the user named it (``str()`` of it is that name).
    lock : sphdist.io._lock.Lock
        How its writers exclude each other (given, or the one each implementation names:
        an ``flock`` on local disk, a lease where writes are conditional, else none).
    """

    path: Path
    lock: Lock

    # -- capabilities ----------------------------------------------------------------------

    @property
    @abc.abstractmethod
    def supports_atomic_rename(self) -> bool:
        """Whether the medium renames atomically (local disk), so small objects are renamed."""

    @property
    @abc.abstractmethod
    def supports_conditional_write(self) -> bool:
        """Whether the medium writes on a condition (S3's ``If-None-Match``): a lease works."""

    # -- reading ---------------------------------------------------------------------------

    @abc.abstractmethod
    def reader(self) -> tuple[Path, Hashable | None]:
        """Where a reader reads (the last complete version) and which version that is.

        The version changes with every commit (None: nothing committed). Changes nothing.
        """

    @abc.abstractmethod
    def replaced(self, version: Hashable | None, *, failed: bool) -> bool:
        """Whether a read of ``version`` (from :meth:`reader`) may have met another version.

        ``failed``: the read raised. True means the error (or the values) may come from a
        commit that replaced ``version`` during the read, not from damage.
        """

    @abc.abstractmethod
    def state(self) -> CommitState:
        """What is committed, staged or interrupted; changes nothing."""

    @abc.abstractmethod
    def committed(self) -> bool:
        """Whether a complete version is there (what a writer must not overwrite)."""

    # -- writing (under the lock) ------------------------------------------------------------

    @abc.abstractmethod
    def staging(self) -> Path:
        """A fresh location to build the next version in."""

    @abc.abstractmethod
    def commit(self, staging: Path) -> None:
        """Make the complete version at ``staging`` the committed one, atomically."""

    @abc.abstractmethod
    def discard(self, path: Path) -> None:
        """Remove a staging tree or scratch directory that was not committed (missing: fine)."""

    @abc.abstractmethod
    def recover(self) -> None:
        """Put back what an interrupted commit left (only a writer holding the lock)."""

    @abc.abstractmethod
    def remove_stale(self) -> None:
        """Remove killed writers' staging trees and scratch (only a writer holding the lock)."""

    # -- derived ---------------------------------------------------------------------------

    def readable(self) -> Path:
        """The directory a reader opens: the last complete version; changes nothing."""
        return self.reader()[0]

    def identity(self) -> Hashable | None:
        """What identifies the committed version now (changes with every commit), or None."""
        return self.reader()[1]

    def scratch(self) -> Path:
        """``<target>.scratch``: the sibling a writer keeps temporary arrays in while it runs."""
        return self.path.with_name(f"{self.path.name}.scratch")

    def acquire(self) -> Hold:
        """Take the output's lock (:attr:`lock`); raise OutputLockedError if it is held."""
        return self.lock.acquire()

    def holder(self) -> dict[str, Any] | None:
        """The record of the writer holding the lock (host, pid, command, since), or None."""
        return self.lock.holder()

