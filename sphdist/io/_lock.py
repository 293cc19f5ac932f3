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
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import filelock

from sphdist.errors import OutputLockedError
from sphdist.io._fs import replace_file

__all__ = ["lock_path", "record_path", "lock_record", "refusal", "read_local_record", "FileHold"]

_ATTEMPTS = 5  # acquisitions of a lock file another holder removed meanwhile


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
        f"{stop}, or choose another --output."
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
        for _ in range(_ATTEMPTS):
            lock = filelock.FileLock(str(self.path), timeout=0, thread_local=False)
            try:
                lock.acquire()
            except filelock.Timeout:
                raise refusal(self.target, read_local_record(self.path)) from None
            if _locked_file_is_current(lock, self.path):
                return lock
            lock.release(force=True)  # a holder removed that file as we locked it: again
        raise refusal(self.target, read_local_record(self.path))  # pragma: no cover

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
