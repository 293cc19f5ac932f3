"""One writer per output: an exclusive lock on an output for the life of its writer.

A writer of ``<target>`` (a ``corpus.zarr``, ``model.zarr``, ``embedding.zarr``, an export)
holds :func:`output_lock` from before it looks at what is on disk until after its last commit.
The lock is a :class:`filelock.FileLock` (``flock(2)``) on ``<target>.lock``, beside the output,
so it also guards the output's staging trees (``<target>.tmp-*``) and previous version
(``<target>.old``, :mod:`sphdist.io._atomic`): while it is held nobody else commits, recovers or
cleans up there, and whoever holds it knows that staging trees it did not make are a dead
writer's. A second writer is refused at once with :class:`~sphdist.errors.OutputLockedError`,
naming the holder recorded in ``<target>.lock.json`` (host, pid, command, start time).

The kernel releases an ``flock`` when its process ends however it ends (even SIGKILL), so a
killed writer leaves no stale lock, only a stale record, which the next holder replaces. On
release the record and the lock file are removed (the lock file while still locked; an
acquirer that locked a removed file notices and tries again). ``flock`` works between the
processes of one machine and, on Linux, across NFS clients (emulated with ``fcntl`` locks).

Readers take no lock: they read the last complete version
(:func:`~sphdist.io._atomic.readable_path`).

An output in an S3 bucket (``s3://...``) is locked with a lock object and a lease taken by a
conditional write (:mod:`sphdist.io._lease`); a ``file://`` URL with the ``flock`` of its local
path. Other object stores have no conditional write that sphdist uses: their outputs are
written without the one-writer guarantee, which a warning says.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import inspect
import json
import os
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import filelock

from sphdist.errors import Interrupted, OutputLockedError, ParameterError
from sphdist.io._atomic import atomic_path, commit_identity
from sphdist.io._fs import (
    filesystem,
    is_remote,
    is_storage_failure,
    location,
    protocol_of,
)

__all__ = ["output_lock", "locks_output", "holds_lock", "lock_holder", "check_lease"]

F = TypeVar("F", bound=Callable[..., Any])

_ATTEMPTS = 5  # acquisitions of a lock file another holder removed meanwhile


class _Held:
    def __init__(self, lock: Any, owner: tuple[int, int]):
        self.lock, self.owner, self.depth = lock, owner, 1


_HELD: dict[str, _Held] = {}  # lock path -> the hold of this process
_HELD_GUARD = threading.Lock()


def _local(target: str | os.PathLike[str]) -> Path:
    """The local path of ``target``: itself, or the path of a ``file://`` URL."""
    if is_remote(target):
        return Path(filesystem(target)[1])
    return Path(os.path.abspath(target))


def _lock_path(target: str | os.PathLike[str]) -> Path:
    if protocol_of(target) not in (None, "file", "local"):
        target = location(target)
        return target.with_name(target.name + ".lock")
    target = _local(target)
    return target.with_name(target.name + ".lock")


def _record_path(lock: Path) -> Path:
    return lock.with_name(lock.name + ".json")


def _owner() -> tuple[int, int]:
    return os.getpid(), threading.get_ident()


def lock_holder(target: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The writer recorded as holding ``target``'s lock: host, pid, command, since; or None.

    The record is written by the holder after it acquired the lock; None when there is none
    (no writer, or one that is just acquiring or releasing). Changes nothing.

    Parameters
    ----------
    target : path-like
        The output.

    Returns
    -------
    dict or None
    """
    if protocol_of(target) == "s3":
        from sphdist.io._lease import read_record

        return read_record(_lock_path(target))[0]
    try:
        record = json.loads(_record_path(_lock_path(target)).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def holds_lock(target: str | os.PathLike[str]) -> bool:
    """Whether this thread of this process holds ``target``'s lock (:func:`output_lock`)."""
    held = _HELD.get(str(_lock_path(target)))
    return held is not None and held.owner == _owner()


def check_lease(target: str | os.PathLike[str]) -> None:
    """Refuse to commit to an object-store ``target`` whose lease this process lost.

    Raises
    ------
    OutputLockedError
        If this process held the lease of ``target`` and another writer took it over.
    """
    held = _HELD.get(str(_lock_path(target)))
    if held is not None and hasattr(held.lock, "check"):
        held.lock.check()


def _refusal(target: Path, record: dict[str, Any] | None) -> OutputLockedError:
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


def _write_record(record_path: Path) -> None:
    record = {
        "host": socket.gethostname(), "pid": os.getpid(),
        "command": " ".join([os.path.basename(sys.argv[0] or "python"), *sys.argv[1:]]),
        "since": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    with atomic_path(record_path) as tmp:
        tmp.write_text(json.dumps(record))


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


def _acquire(target: Path, path: Path) -> filelock.BaseFileLock:
    for _ in range(_ATTEMPTS):
        lock = filelock.FileLock(str(path), timeout=0, thread_local=False)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise _refusal(target, lock_holder(target)) from None
        if _locked_file_is_current(lock, path):
            return lock
        lock.release(force=True)  # a holder removed that file as we locked it: again
    raise _refusal(target, lock_holder(target))  # pragma: no cover


@contextlib.contextmanager
def output_lock(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Hold the exclusive lock on the output ``target`` for the block; refuse if another has it.

    Reentrant in one thread (a job that holds it may call a writer that takes it again); another
    thread or process is refused. Released on exit whatever happens; the kernel releases it if
    the process dies.

    Parameters
    ----------
    target : path-like
        The output (file or directory), existing or not. Its parent directory is created if
        missing (as a writer would).

    Yields
    ------
    pathlib.Path
        The lock file, ``<target>.lock``.

    Raises
    ------
    OutputLockedError
        If another process (or thread) holds it; the message names the holder (host, pid,
        command, since) and the remedies.
    OSError
        If the lock file cannot be created (a read-only or missing location).
    ParameterError
        If ``target`` names no entry of its own (``.``, ``..``, ``/``): an output is written
        beside its siblings and renamed into place, so it must have a name.
    """
    if protocol_of(target) in (None, "file", "local") and Path(target).name in ("", ".."):
        raise ParameterError(
            f"{target}: an output path names no file or directory of its own (it is a "
            f"directory to write into). To resolve this, name the output in it, e.g. "
            f"--output {Path(target) / 'model.zarr'}."
        )
    path = _lock_path(target)
    key, owner = str(path), _owner()
    with _HELD_GUARD:
        held = _HELD.get(key)
        if held is not None and held.owner == owner:
            held.depth += 1
        elif held is not None:
            raise _refusal(location(target), lock_holder(target))
    if held is None and protocol_of(target) not in (None, "file", "local"):
        held = _HELD[key] = _Held(_acquire_object_lock(target), owner)
    elif held is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = _acquire(location(target), path)
        try:
            _write_record(_record_path(path))
        except BaseException:
            lock.release(force=True)
            raise
        held = _HELD[key] = _Held(lock, owner)
    try:
        yield path
    finally:
        held.depth -= 1
        if held.depth == 0 and not isinstance(held.lock, filelock.BaseFileLock):
            _HELD.pop(key, None)
            if held.lock is not None:
                held.lock.release()
        elif held.depth == 0:
            _HELD.pop(key, None)
            with contextlib.suppress(OSError):  # record first, then the file, while locked
                _record_path(path).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                if _locked_file_is_current(held.lock, path):
                    path.unlink()
            held.lock.release(force=True)


def _acquire_object_lock(target: str | os.PathLike[str]) -> Any:
    """The lease of an object-store output (S3), or None where none can be taken (warned)."""
    if protocol_of(target) == "s3":
        from sphdist.io._fs import storage_error
        from sphdist.io._lease import Lease

        lease = Lease(location(target), lambda t, record: _refusal(t, record))
        try:
            lease.acquire()
        except Exception as exc:
            if not is_storage_failure(exc):
                raise
            raise storage_error(target, exc) from None
        return lease
    import logging

    logging.getLogger("sphdist").warning(
        "%s: %s:// has no conditional write sphdist can lock with; make sure no other process "
        "writes this output at the same time.", target, protocol_of(target),
    )
    return None


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


def locks_output(parameter: str = "output") -> Callable[[F], F]:
    """Decorate a writer so that it holds :func:`output_lock` on its ``parameter`` throughout.

    For the jobs that write one output (ingest, synth, transform, export): the lock is taken
    before the function looks at the output (whether it exists, ``overwrite``) and released
    after its commit, or its failure. A Ctrl-C (:class:`KeyboardInterrupt`) is raised again as
    :class:`~sphdist.errors.Interrupted`, saying what is at the output: nothing was written
    (an output is committed only when complete), unless the commit was done.

    Parameters
    ----------
    parameter : str, default "output"
        The name of the decorated function's argument that is the output path.

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
                target = signature.bind(*args, **kwargs).arguments[parameter]
            except (TypeError, KeyError):  # the function's own TypeError says what is wrong
                return function(*args, **kwargs)
            try:
                before = commit_identity(target)
            except Exception:  # a failing store: the writer says so; Ctrl-C then says less
                before = _UNKNOWN
            try:
                with output_lock(target):
                    return function(*args, **kwargs)
            except Interrupted:
                raise
            except KeyboardInterrupt as exc:
                raise Interrupted(_left_behind(target, before)) from exc

        return locked  # type: ignore[return-value]

    return decorate
