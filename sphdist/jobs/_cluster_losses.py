"""A cluster that loses its workers: the exceptions, the scheduler's bounds, the messages.

A computation on a cluster fails with one of :func:`worker_losses` when a worker holding its
data dies, or stops answering for :func:`worker_ttl` seconds (frozen: a suspended VM, a swap
storm; the scheduler removes it), and with distributed's ``NoWorkerError``
(:func:`no_worker_left`) when the cluster has had no worker for :func:`no_workers_timeout`
seconds. The scheduler is given both bounds for the duration of a job
(:func:`scheduler_bounds`). The fit restarts from its last
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
    "WORKER_TTL_S",
    "no_workers_timeout",
    "worker_ttl",
    "no_workers_bound",
    "worker_ttl_bound",
    "scheduler_bounds",
    "worker_losses",
    "no_worker_left",
    "workers_lost",
    "log_retry",
]

logger = logging.getLogger("sphdist")

#: Seconds the embedded LocalCluster's tasks wait while it has no worker (all of them lost,
#: their nannies restarting them) before they fail (``distributed.scheduler.no-workers-timeout``).
NO_WORKERS_TIMEOUT_S = 60

#: Seconds a worker may send the scheduler no heartbeat (frozen, cut off) before the scheduler
#: removes it, for the duration of a job (``distributed.scheduler.worker-ttl``; distributed's
#: default, 5 minutes checked every 5 minutes, ended a fit 398.5 s after a worker froze).
#: A busy worker still sends one every 0.5 s to 2 s (its event loop is not its tasks' threads).
WORKER_TTL_S = 60

#: The scheduler looks for workers past their time-to-live this many times per time-to-live
#: (distributed: once), so that a frozen worker is removed within 1.25 times it.
_TTL_CHECKS = 4


def no_workers_timeout() -> float:
    """Seconds a job's tasks may wait while the cluster has no worker, before they fail.

    dask's ``distributed.scheduler.no-workers-timeout`` where it is set (on this machine:
    ``DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT=10min`` for a cluster whose workers
    wait in a batch queue), else :data:`NO_WORKERS_TIMEOUT_S`.
    """
    value = dask.config.get("distributed.scheduler.no-workers-timeout", None)
    seconds = parse_timedelta(value) if value is not None else None
    return float(seconds) if seconds else float(NO_WORKERS_TIMEOUT_S)


def worker_ttl() -> float | None:
    """Seconds a worker may go without a heartbeat before a job's scheduler removes it.

    dask's ``distributed.scheduler.worker-ttl`` where it is set to something other than
    distributed's default (5 minutes; e.g. ``DASK_DISTRIBUTED__SCHEDULER__WORKER_TTL=3min``
    for workers that pause longer), else :data:`WORKER_TTL_S`. None where it is set to none
    (``null``): the scheduler keeps its own. Set to distributed's default as distributed
    spells it (``"5 minutes"``), it reads as not set.
    """
    key = "distributed.scheduler.worker-ttl"
    value = dask.config.get(key, None)
    if value == dask.config.get(key, None, config=dask.config.merge(*dask.config.defaults)):
        return float(WORKER_TTL_S)
    seconds = parse_timedelta(value) if value is not None else None
    return float(seconds) if seconds else None


@contextlib.contextmanager
def scheduler_bounds(client: Client, no_workers: float, ttl: float | None) -> Iterator[None]:
    """For the duration of a job, the scheduler's bounds on lost and frozen workers.

    :func:`no_workers_bound` with ``no_workers`` seconds, and :func:`worker_ttl_bound` with
    ``ttl`` seconds (None: the scheduler's own); both are given back after.
    """
    with no_workers_bound(client, no_workers), worker_ttl_bound(client, ttl):
        yield


def _set_worker_ttl(dask_scheduler: Any, seconds: Any, period: Any, only_if: Any) -> Any:
    # runs on the scheduler, in its event loop (sent by value: it need not have sphdist
    # installed). distributed checks the time-to-live in a periodic callback made when the
    # scheduler starts, whose period (the time-to-live it had then) is replaced with it.
    from tornado.ioloop import PeriodicCallback

    previous = dask_scheduler.worker_ttl
    if only_if == "longer" and not (previous is None or previous > seconds):
        return previous
    if only_if != "longer" and previous != only_if:
        return previous
    dask_scheduler.worker_ttl = seconds
    check = dask_scheduler.periodic_callbacks.pop("worker-ttl", None)
    if check is not None:
        check.stop()
    if seconds:
        check = PeriodicCallback(dask_scheduler.check_worker_ttl, period * 1000)
        dask_scheduler.periodic_callbacks["worker-ttl"] = check
        check.start()
    return previous


@contextlib.contextmanager
def worker_ttl_bound(client: Client, seconds: float | None) -> Iterator[None]:
    """The scheduler removes a worker that sent no heartbeat for ``seconds``, during a job.

    A frozen worker (stopped by ``SIGSTOP``: a suspended VM, a swap storm) keeps its
    connections open and answers nothing: the job's tasks and the broadcast of U wait on it
    until the scheduler removes it for its silence, after distributed's worker time-to-live
    (``distributed.scheduler.worker-ttl``, 5 minutes by default, looked at every 5 minutes:
    a fit ended 398.5 s after the freeze; issue 43 item 11). For the duration of the job a
    scheduler whose time-to-live is longer than ``seconds`` (:func:`worker_ttl`), or that
    has none, gets ``seconds``, checked every ``seconds / 4``; then its own back. Once it is
    removed, the work waiting on it fails as a worker loss (:func:`worker_losses`), or runs
    on the other workers; a worker with a nanny is restarted by it. A busy worker is not
    removed: its heartbeats come from its event loop, every 0.5 s (up to 10 workers) to
    ``n / 200 + 1`` s, and distributed never removes one before 10 of them are missed
    (a task's BLAS and sparse products release the GIL; one call that held it for ``seconds``
    would starve the event loop and get its worker removed).
    """
    refused = object()
    if seconds is None:
        previous: Any = refused
    else:
        try:
            previous = client.run_on_scheduler(_set_worker_ttl, seconds=seconds,
                                               period=seconds / _TTL_CHECKS, only_if="longer")
        except Exception as exc:  # a scheduler that runs no client code: its own bound
            logger.warning("could not give the scheduler a worker time-to-live (%s: %s): a "
                           "frozen worker is noticed after the scheduler's own",
                           type(exc).__name__, exc)
            previous = refused
    try:
        yield
    finally:
        if previous is not refused and (previous is None or previous > seconds):
            with contextlib.suppress(Exception):  # the scheduler may be gone
                client.run_on_scheduler(_set_worker_ttl, seconds=previous,
                                        period=previous, only_if=seconds)


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
