"""One writer per output in an S3 bucket: a lock object with a lease, taken by a conditional write.

Object stores have no ``flock``. A writer of ``s3://bucket/model.zarr`` creates the object
``s3://bucket/model.zarr.lock`` with ``If-None-Match: *`` (S3 conditional writes: the PUT fails
if the key exists, so of two writers exactly one creates it). The object is a JSON record: host,
pid, command, since, a random token, and ``expires`` (seconds since the epoch). A thread renews
the lease every third of its length with ``If-Match: <etag>`` (so it fails if anyone replaced
the record); on release the record is deleted, again with ``If-Match``.

A second writer that finds the object reads it and

- takes it over (``If-Match`` on the etag it read: of several, one wins) when the lease has
  expired, or when the holder ran on this host and its process is gone (then at once, without
  waiting for the lease), and logs one INFO line on the ``sphdist`` logger saying from which
  pid and host and why (``lock taken over from pid 4711 on host (its process is gone; ...)``);
- otherwise watches it until it expires: if the holder renews it meanwhile (the etag changes),
  the holder is alive and the writer is refused with
  :class:`~sphdist.errors.OutputLockedError` naming it. A live holder is therefore found within
  one renewal period, and a killed one is taken over at most one lease after it stopped.

A holder whose renewal fails (it was taken over after a pause longer than the lease) marks the
lease lost (:meth:`Lease.check`), and every commit to the output first reads the lock object and
refuses to write if it names another holder (:func:`held_here`), so a paused writer that wakes
up does not overwrite the new writer's versions.

The lease length is ``SPHDIST_LOCK_LEASE`` seconds (default 30).

References
----------
.. [1] Amazon S3 User Guide, "How to prevent object overwrites with conditional writes",
   https://docs.aws.amazon.com/AmazonS3/latest/userguide/conditional-writes.html
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from sphdist.errors import OutputLockedError
from sphdist.io._fs import filesystem, is_storage_failure, storage_error
from sphdist.io._lock import lock_path, lock_record, refusal

__all__ = ["Lease", "LeaseLock", "lease_seconds", "read_record", "held_here"]

_PRECONDITION = ("PreconditionFailed", "pre-conditions", "412")

logger = logging.getLogger("sphdist")


def lease_seconds() -> float:
    """The lease length: ``SPHDIST_LOCK_LEASE`` seconds, default 30 (at least 1)."""
    try:
        return max(1.0, float(os.environ.get("SPHDIST_LOCK_LEASE", "30")))
    except ValueError:
        return 30.0


def _failed_precondition(exc: BaseException) -> bool:
    return isinstance(exc, FileExistsError) or any(word in str(exc) for word in _PRECONDITION)


def _split(lock: Path) -> tuple[Any, str, str]:
    fs, inner = filesystem(lock)
    bucket, _, key = inner.partition("/")
    return fs, bucket, key


def read_record(lock: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The lock record at ``lock`` and its etag, or (None, None) when there is none."""
    from fsspec.asyn import sync

    fs, bucket, key = _split(lock)

    async def get() -> tuple[bytes, str]:
        response = await fs._call_s3("get_object", Bucket=bucket, Key=key)
        body = await response["Body"].read()
        return body, response["ETag"]

    try:
        body, etag = sync(fs.loop, get)
    except FileNotFoundError:
        return None, None
    try:
        record = json.loads(body)
    except ValueError:
        record = {}
    return (record if isinstance(record, dict) else {}), etag


def _pid_alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (OSError, ValueError, TypeError):
        return True  # exists but not ours, or unknown: assume alive
    return True


class Lease:
    """The lock object of one output in an S3 bucket, held by this process.

    Parameters
    ----------
    target : upath.UPath
        The output (``s3://bucket/model.zarr``); the lock object is ``<target>.lock``
        (:func:`sphdist.io._lock.lock_path`).
    """

    def __init__(self, target: Path) -> None:
        self.target = target
        self.path = lock_path(target)
        self.seconds = lease_seconds()
        self.token = uuid.uuid4().hex
        self.etag: str | None = None
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the record -----------------------------------------------------------------------
    def _record(self) -> bytes:
        return json.dumps(lock_record(
            token=self.token, expires=time.time() + self.seconds, lease=self.seconds,
        )).encode()

    def _put(self, **condition: str) -> str:
        fs, bucket, key = _split(self.path)
        response = fs.call_s3(
            "put_object", Bucket=bucket, Key=key, Body=self._record(),
            ContentType="application/json", **condition,
        )
        return response["ETag"]

    # -- acquire / renew / release ----------------------------------------------------------
    def acquire(self) -> None:
        """Create or take over the lock object; start renewing it.

        Raises
        ------
        OutputLockedError
            If a live writer holds it (it renewed its lease while this one watched).
        """
        deadline: float | None = None
        while True:
            try:
                self.etag = self._put(IfNoneMatch="*")
                break
            except Exception as exc:
                if not _failed_precondition(exc):
                    raise
            record, etag = read_record(self.path)
            if record is None:
                continue  # released meanwhile: create it again
            why = self._stale(record)
            if why:
                try:
                    self.etag = self._put(IfMatch=etag)
                except Exception as exc:
                    if not _failed_precondition(exc):
                        raise
                    raise refusal(self.target, read_record(self.path)[0]) from None
                logger.info("%s: lock taken over from pid %s on %s (%s)", self.target,
                            record.get("pid"), record.get("host"), why)
                break
            # a holder that is alive renews within a third of its lease: watch for that
            expires = float(record.get("expires", 0))
            deadline = deadline or min(expires, time.time() + self.seconds) + 0.5
            if time.time() > deadline:
                raise refusal(self.target, record)
            time.sleep(min(1.0, self.seconds / 6))
            again, etag_now = read_record(self.path)
            if again is not None and etag_now != etag and not self._stale(again):
                raise refusal(self.target, again)  # renewed: a live writer
        self._thread = threading.Thread(target=self._renew, name="sphdist-lease", daemon=True)
        self._thread.start()

    def _stale(self, record: dict[str, Any]) -> str | None:
        """Why the writer of ``record`` no longer holds the lock, in words; None if it may."""
        try:
            expires = float(record.get("expires", 0))
        except (TypeError, ValueError):
            expires = 0.0
        now = time.time()
        if now > expires:
            return "its lease expired"
        if record.get("host") == socket.gethostname() and not _pid_alive(record.get("pid")):
            return (f"its process is gone; its lease had {expires - now:.0f} s left, "
                    "not waited for")
        return None

    def _renew(self) -> None:
        while not self._stop.wait(self.seconds / 3) and self.renew():
            pass

    def renew(self) -> bool:
        """Extend the lease once (``If-Match`` on the last etag); False once it is lost.

        A failed precondition means another writer replaced the record: the lease is lost
        (:meth:`check` then refuses every commit). Any other error is taken as transient: the
        renewal thread tries again one period later, while the lease still runs.
        """
        try:
            self.etag = self._put(IfMatch=self.etag)
        except Exception as exc:
            if _failed_precondition(exc):
                self.lost = True
                return False
        return True

    def release(self) -> None:
        """Stop renewing and delete the lock object if it is still this holder's."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.lost or self.etag is None:
            return
        fs, bucket, key = _split(self.path)
        try:
            fs.call_s3("delete_object", Bucket=bucket, Key=key, IfMatch=self.etag)
        except Exception:  # taken over, or already gone: nothing of ours to delete
            pass

    def check(self) -> None:
        """Raise OutputLockedError if the lease was lost (taken over after a long pause)."""
        if self.lost:
            raise _lost(self.target, self.seconds)


def _lost(target: Path, seconds: float) -> OutputLockedError:
    return OutputLockedError(
        f"{target}: this writer lost its lock (its lease of {seconds:g} s "
        "ran out and another writer took the output over); nothing more is written. "
        "To resolve this, check which process writes it now (`sphdist info "
        f"{target}`), and rerun when it has finished."
    )


def held_here(target: Path) -> None:
    """Refuse a commit to ``target`` while another process holds its lock object.

    Reads the lock object (one GET): a record that names another host or pid means this
    process's lease was taken over (or it never held one while another writer does).

    Raises
    ------
    OutputLockedError
        If the lock object names another holder.
    """
    record, _ = read_record(lock_path(target))
    if record is not None and (record.get("host"), record.get("pid")) != (
        socket.gethostname(), os.getpid()
    ):
        raise _lost(target, float(record.get("lease", lease_seconds())))


class LeaseLock:
    """The lock of an output in a store with conditional writes: a :class:`Lease`.

    Parameters
    ----------
    target : upath.UPath
        The output (``s3://bucket/model.zarr``).
    """

    def __init__(self, target: Path) -> None:
        self.target = target

    def acquire(self) -> Lease:
        """Take a lease on ``<target>.lock``.

        Raises
        ------
        OutputLockedError
            If another writer holds it.
        StorageError
            If the store fails the lease's requests.
        """
        lease = Lease(self.target)
        try:
            lease.acquire()
        except Exception as exc:
            if not is_storage_failure(exc):
                raise
            raise storage_error(self.target, exc) from None
        return lease

    def holder(self) -> dict[str, Any] | None:
        """The record in the lock object, or None."""
        return read_record(lock_path(self.target))[0]

    def check_held(self) -> None:
        """:func:`held_here`: a writer that lost its lease writes nothing more."""
        held_here(self.target)
