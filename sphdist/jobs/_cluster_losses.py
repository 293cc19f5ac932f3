"""A cluster that loses its workers: the exceptions, the no-workers timeout, the messages.

A computation on a cluster fails with one of :func:`worker_losses` when a worker holding its
data dies, and with distributed's ``NoWorkerError`` (:func:`no_worker_left`) when the cluster
has had no worker for :func:`no_workers_timeout` seconds, which an external scheduler is given
for the duration of a job (:func:`no_workers_bound`). The fit restarts from its last
checkpoint (:func:`log_retry`), or ends with :func:`workers_lost`. Dask's threads lose no
worker: nothing here imports ``distributed`` before a job has. Its public home is
:mod:`sphdist.jobs.cluster`.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import dask
from dask.utils import parse_timedelta

from sphdist.errors import WorkersLostError

if TYPE_CHECKING:
    from distributed import Client

__all__ = [
    "NO_WORKERS_TIMEOUT_S",
    "no_workers_timeout",
    "no_workers_bound",
    "worker_losses",
    "no_worker_left",
    "workers_lost",
    "log_retry",
]

logger = logging.getLogger("sphdist")

#: Seconds the embedded LocalCluster's tasks wait while it has no worker (all of them lost,
#: their nannies restarting them) before they fail (``distributed.scheduler.no-workers-timeout``).
NO_WORKERS_TIMEOUT_S = 60


def no_workers_timeout() -> float:
    """Seconds a job's tasks may wait while the cluster has no worker, before they fail.

    dask's ``distributed.scheduler.no-workers-timeout`` where it is set (on this machine:
    ``DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT=10min`` for a cluster whose workers
    wait in a batch queue), else :data:`NO_WORKERS_TIMEOUT_S`.
    """
    value = dask.config.get("distributed.scheduler.no-workers-timeout", None)
    seconds = parse_timedelta(value) if value is not None else None
    return float(seconds) if seconds else float(NO_WORKERS_TIMEOUT_S)


@contextlib.contextmanager
def no_workers_bound(client: Client, seconds: float) -> Iterator[None]:
    """A scheduler without a no-workers timeout fails our tasks after ``seconds`` without workers.

    A scheduler started with distributed's defaults keeps a task that no worker can run
    waiting for good: a job on a cluster that lost every worker (killed, pre-empted, never
    started) would wait for ever (issue 31 item 4). For the duration of the job the scheduler
    gets the timeout the embedded LocalCluster has (:func:`no_workers_timeout`), then its own
    setting back; a scheduler that has a timeout of its own keeps it. The timeout is the
    scheduler's, so while the job runs it applies to every client's tasks on it.
    """

    def _set_no_workers_timeout(dask_scheduler: Any, seconds: Any, only_if: Any) -> Any:
        # runs on the scheduler (sent by value: it need not have sphdist installed)
        previous = dask_scheduler.no_workers_timeout
        if previous == only_if:
            dask_scheduler.no_workers_timeout = seconds
        return previous

    refused = object()
    try:
        previous = client.run_on_scheduler(_set_no_workers_timeout, seconds=seconds,
                                           only_if=None)
    except Exception as exc:  # a scheduler that runs no client code: the job runs unbounded
        logger.warning("could not give the scheduler a no-workers timeout (%s: %s): a job "
                       "on it waits while it has no worker", type(exc).__name__, exc)
        previous = refused
    try:
        yield
    finally:
        if previous is None:  # it had none: it gets none back (unless another job changed it)
            with contextlib.suppress(Exception):  # the scheduler may be gone
                client.run_on_scheduler(_set_no_workers_timeout, seconds=None, only_if=seconds)


def _worker_loss_errors() -> tuple[type[BaseException], ...]:
    # imported once distributed is (worker_losses): a fit on threads never imports it
    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker, NoWorkerError

    return (FutureCancelledError, KilledWorker, CommClosedError, NoWorkerError)


def worker_losses() -> tuple[type[BaseException], ...]:
    """Exceptions with which a computation fails when a worker holding its data dies.

    None before ``distributed`` is imported (dask's threads lose no worker): a fit on the
    threaded scheduler never imports it (about 0.4 s of its start-up).
    """
    return _worker_loss_errors() if "distributed" in sys.modules else ()


def no_worker_left(exc: BaseException) -> bool:
    """Whether a task failed because the cluster had no worker left for a while.

    Parameters
    ----------
    exc : BaseException
        A failure of a computation (one of :func:`worker_losses`).

    Returns
    -------
    bool
        Whether it is distributed's ``NoWorkerError``: a task waited
        :func:`no_workers_timeout` without a worker, so a restart would wait again.
    """
    from distributed.scheduler import NoWorkerError  # a job on a cluster imported it

    return isinstance(exc, NoWorkerError)


def workers_lost(output: Any, attempt: int, exc: BaseException, resume: str, *,
                 again: str | None = None) -> WorkersLostError:
    """The error of a job that lost its workers for good, with the command that continues it.

    Parameters
    ----------
    output : path-like
        The job's output, whose last complete checkpoint is kept.
    attempt : int
        The attempt that failed, from 0 (the restarts before it).
    exc : BaseException
        Its failure (one of :func:`worker_losses`).
    resume : Text
        The job that continues the fit, named in a message (:func:`sphdist.errors.remedy`).
    again : Text, optional
        Given when the job wrote no checkpoint of its own: the job that runs it again,
        offered instead of ``resume`` (a scheduler that never had a worker; issue 44 item 10).

    Returns
    -------
    WorkersLostError
    """
    if no_worker_left(exc):
        what = (f"the cluster had no worker left for {getattr(exc, 'timeout', 0):.0f} s (every "
                f"worker lost{'' if attempt == 0 else f', after {attempt} restarts'})")
    else:
        what = (f"workers were lost in {attempt + 1} attempts (last: {type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200] if str(exc) else ''})")
    logs = ("check the workers' logs (often a memory limit below what sphdist.core.solver.fit's "
            "Notes give, or a worker killed from outside)")
    if again is None:
        return WorkersLostError(
            f"{output}: {what}. The last complete checkpoint is kept. To resolve this, {logs}, "
            "then continue the fit: " + resume + "."
        )
    if no_worker_left(exc):
        logs = ("start workers for the scheduler (dask worker SCHEDULER_ADDRESS), or see in "
                "their logs why they ended")
    return WorkersLostError(
        f"{output}: {what}; no checkpoint of this fit was written. To resolve this, {logs}, "
        "then run the fit again: " + again + "."
    )


def log_retry(output: Any, exc: BaseException, attempt: int, retries: int) -> None:
    """Log that a worker was lost and ``output`` resumes from its last checkpoint.

    Parameters
    ----------
    output : path-like
        The job's output.
    exc : BaseException
        The failure (one of :func:`worker_losses`).
    attempt : int
        The attempt that failed, from 0.
    retries : int
        The restarts allowed.
    """
    logger.warning(
        "a worker was lost (%s: %s); resuming %s from its last checkpoint "
        "(retry %d of %d)", type(exc).__name__, str(exc)[:200], output, attempt + 1,
        retries,
    )
