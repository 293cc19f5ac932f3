"""The lock record, its file name, and the ``flock`` of a local output (one writer per output).

A writer of ``<target>`` (a ``corpus.zarr``, ``model.zarr``, ``embedding.zarr``, an export)
holds the output's lock (:func:`sphdist.io.open_output`) from before it looks at what is on
disk until after its last commit. This module holds what both locking protocols share: the
lock's name, ``<target>.lock`` (:func:`lock_path`, beside the output, so it also guards the
output's staging trees and previous version), the record of the holder (host, pid, command,
start time; :func:`lock_record`) and the refusal that names it (:func:`refusal`), and the
lock of a local output, :class:`FileHold`.

:class:`FileHold` is a :class:`filelock.FileLock` (``flock(2)``) on ``<target>.lock``, with the
record in ``<target>.lock.json``. A second writer is refused at once with
:class:`~sphdist.errors.OutputLockedError`, naming the holder; so is a second acquisition in the
same process (``flock`` locks an open file, and every acquisition opens its own). The kernel
releases an ``flock`` when its process ends however it ends (even SIGKILL), so a killed writer
leaves no stale lock, only a stale record, which the next holder replaces. On release the
record and the lock file are removed (the lock file while still locked; an acquirer that locked
a removed file notices and tries again). ``flock`` works between the processes of one machine
and, on Linux, across NFS clients (emulated with ``fcntl`` locks).

An output in an S3 bucket is locked with a lease instead (:class:`sphdist.io._lease.Lease`,
the same name and record). Readers take no lock.

A store is given its lock (:class:`Lock`) when it is made, instead of switching on a name:
:class:`FileLock` (an ``flock``) where the store is on local disk, a lease
(:class:`sphdist.io._lease.LeaseLock`) where it supports conditional writes, :class:`NoLock`
elsewhere (a warning says so). Each store names its own (:class:`sphdist.io.PosixTarget` an
``flock``, :class:`sphdist.io.ObjectTarget` by its capabilities): this module imports none of
the stores, nor the lease.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sphdist.errors import OutputLockedError, ParameterError, option
from sphdist.io._fs import anchored, local_path, protocol_of, replace_file
from sphdist.io._names import check_named, elsewhere

if TYPE_CHECKING:  # imported where a lock is taken: a reader (a neighbour query) takes none
    import filelock

__all__ = [
    "lock_path", "record_path", "lock_record", "refusal", "read_local_record", "FileHold",
    "Hold", "Lock", "FileLock", "NoLock",
]

logger = logging.getLogger("sphdist")

_ATTEMPTS = 5  # acquisitions of a lock file another holder removed meanwhile
#: Seconds a refused writer waits for the holder's record: a holder writes it right after
#: taking the lock, so a writer refused in between would otherwise name no one.
RECORD_WAIT = 2.0


def lock_path(target: Path) -> Path:
    """The lock of the output ``target``: ``<target>.lock``, its sibling."""
    return target.with_name(target.name + ".lock")


def record_path(lock: Path) -> Path:
    """Where a local lock's holder is recorded: ``<target>.lock.json``."""
    return lock.with_name(lock.name + ".json")


def lock_record(**extra: Any) -> dict[str, Any]:
    """The holder's record: host, pid, command line and start time (UTC), plus ``extra``."""
    return {
        "host": socket.gethostname(), "pid": os.getpid(),
        "command": " ".join([os.path.basename(sys.argv[0] or "python"), *sys.argv[1:]]),
        "since": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **extra,
    }


def refusal(target: Any, record: dict[str, Any] | None) -> OutputLockedError:
    """The error for a writer refused because the holder of ``record`` writes ``target``."""
    if record is None:
        who, stop = "another process (not recorded yet)", "stop it"
    else:
        pid, host = record.get("pid", "?"), record.get("host", "?")
        command = str(record.get("command", ""))[:200]
        who = f"pid {pid} on {host}" + (f" (`{command}`)" if command else "")
        who += f", since {record.get('since', '?')}"
        stop = f"stop it (kill {pid}" + ("" if host == socket.gethostname() else f" on {host}")
        stop += ")"
    return OutputLockedError(
        f"{target} is being written by {who}. To resolve this, wait for it to finish, or "
        f"{stop}, or choose another " + option("output") + "."
    )


def read_local_record(lock: Path) -> dict[str, Any] | None:
    """The record beside the local lock file ``lock``, or None (none, or unreadable)."""
    try:
        record = json.loads(record_path(lock).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _locked_file_is_current(lock: filelock.BaseFileLock, path: Path) -> bool:
    """Whether the file this lock holds is still the one at ``path`` (not removed meanwhile)."""
    fd = getattr(getattr(lock, "_context", None), "lock_file_fd", None)
    if fd is None:  # pragma: no cover  (filelock's internals changed: trust it)
        return True
    try:
        held, current = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return held.st_nlink > 0 and (held.st_dev, held.st_ino) == (current.st_dev, current.st_ino)


class FileHold:
    """An ``flock`` on the local lock file ``path`` of the output ``target``, held until released.

    Parameters
    ----------
    target : path-like
        The output, as named in messages.
    path : pathlib.Path
        Its local lock file (:func:`lock_path`); the parent directory is created if missing.

    Raises
    ------
    OutputLockedError
        If another process, or another acquisition in this one, holds it; the message names
        the holder (host, pid, command, since) and the remedies.
    OSError
        If the lock file cannot be created (a read-only or missing location).
    """

    def __init__(self, target: Any, path: Path) -> None:
        self.target, self.path = target, path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = self._acquire()
        try:
            replace_file(record_path(path), json.dumps(lock_record()).encode())
        except BaseException:
            self._lock.release(force=True)
            raise

    def _acquire(self) -> filelock.BaseFileLock:
        import filelock

        for _ in range(_ATTEMPTS):
            lock = filelock.FileLock(str(self.path), timeout=0, thread_local=False)
            try:
                lock.acquire()
            except filelock.Timeout:
                raise refusal(self.target, self._holder()) from None
            if _locked_file_is_current(lock, self.path):
                return lock
            lock.release(force=True)  # a holder removed that file as we locked it: again
        raise refusal(self.target, read_local_record(self.path))  # pragma: no cover

    def _holder(self) -> dict[str, Any] | None:
        """The record of the process holding the lock: waited for up to :data:`RECORD_WAIT`.

        None if it is still missing then (a holder that died between locking and recording
        leaves none: the lock is released with it, and the next writer takes it).
        """
        deadline = time.monotonic() + RECORD_WAIT
        while (record := read_local_record(self.path)) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return record

    def check(self) -> None:
        """Nothing to check: an ``flock`` is held until released (or the process ends)."""

    def release(self) -> None:
        """Remove the record, then the lock file while still locked, then unlock."""
        with contextlib.suppress(OSError):
            record_path(self.path).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            if _locked_file_is_current(self._lock, self.path):
                self.path.unlink()
        self._lock.release(force=True)


# -- the lock a store is given -----------------------------------------------------------------


class Hold(Protocol):
    """A held output lock (:class:`FileHold`, :class:`sphdist.io._lease.Lease`)."""

    def check(self) -> None:
        """Raise OutputLockedError if the lock was lost."""

    def release(self) -> None:
        """Release the lock."""


class Lock(Protocol):
    """How the writers of one output exclude each other; given to its store when it is made.

    Implemented by :class:`FileLock` (``flock``), :class:`sphdist.io._lease.LeaseLock` (a lease
    object written with conditional writes) and :class:`NoLock`.
    """

    def acquire(self) -> Hold:
        """Take the lock; raise OutputLockedError if another writer holds it."""

    def holder(self) -> dict[str, Any] | None:
        """The record of the writer holding it (host, pid, command, since), or None."""

    def check_held(self) -> None:
        """Raise OutputLockedError if another process holds it now (before a commit)."""


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
            f"{target}: no output can be written there: its lock file {lock} cannot be "
            f"created ([Errno {exc.errno}] {exc.strerror}). To resolve this, choose an "
            + option("output") + " in a directory you may write to, e.g. "
            + option("output", elsewhere(target, 'file', '')) + "."
        ) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(lock)


class FileLock:
    """The ``flock`` of an output on local disk: :class:`FileHold` on ``<target>.lock``.

    Parameters
    ----------
    target : path-like
        The output, as named (a local path or a ``file://`` URL).
    explain : bool, default True
        When refused, say so if the lock file cannot be created there at all (``/proc``)
        rather than name a holder.
    """

    def __init__(self, target: Any, *, explain: bool = True) -> None:
        self.target, self._explain = target, explain

    def _path(self) -> Path:
        return lock_path(anchored(local_path(self.target)))  # beside it, where the OS goes

    def acquire(self) -> FileHold:
        """An ``flock`` on ``<target>.lock``.

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
        check_named(str(self.target))
        lock = self._path()
        try:
            return FileHold(self.target, lock)
        except OutputLockedError:
            if self._explain:
                _creatable(self.target, lock)  # no holder: the lock file cannot be made there
            raise

    def holder(self) -> dict[str, Any] | None:
        """The record in ``<target>.lock.json``."""
        return read_local_record(self._path())

    def check_held(self) -> None:
        """Nothing to check: an ``flock`` is held until released (or the process ends)."""


class _NoHold:
    """No lock held: nothing to check or release."""

    def check(self) -> None:
        """Nothing to check."""

    def release(self) -> None:
        """Nothing to release."""


class NoLock:
    """No lock: a store with neither local files nor a conditional write to lock with.

    Parameters
    ----------
    target : path-like
        The output, as named.
    """

    def __init__(self, target: Any) -> None:
        self.target = target

    def acquire(self) -> _NoHold:
        """Warn that nothing excludes another writer; hold nothing."""
        logger.warning(
            "%s: %s:// has no conditional write sphdist can lock with; make sure no other "
            "process writes this output at the same time.", self.target,
            protocol_of(self.target),
        )
        return _NoHold()

    def holder(self) -> None:
        """None: no holder is recorded."""
        return None

    def check_held(self) -> None:
        """Nothing to check."""

