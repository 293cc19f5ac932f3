"""Worker processes forked from multiprocessing's fork server, which never take a Ctrl-C.

Both kinds of worker process sphdist starts on one machine fork from the one fork server of
this process (multiprocessing keeps one per process): a LocalCluster's (distributed's
``multiprocessing-method: forkserver``, :mod:`sphdist.jobs.cluster`) and an ingest's own
pool (:mod:`sphdist.text.ingest`). :func:`start_fork_server` starts it the same way for
both, whichever comes first, so every worker has the same signal mask and environment:

- **SIGINT blocked.** A Ctrl-C at a terminal is sent to the whole process group: workers
  that took it printed their KeyboardInterrupt tracebacks (about 75 lines with two workers,
  some while still importing their modules) before the command's one ``Error:`` line. The
  server starts with SIGINT blocked, as the standard library starts its resource tracker
  (bpo-33613), and every process forked from it inherits the mask from its first instruction
  on; the command's own process takes the Ctrl-C and stops its workers.
- **The environment a worker starts in**: ``distributed.nanny.pre-spawn-environ`` (one BLAS
  thread per worker thread: ``OMP_NUM_THREADS=1`` and the others; ``MALLOC_TRIM_THRESHOLD_``)
  and distributed's ``PYTHONHASHSEED``, read as a process starts, hence set when the server
  starts, whose NumPy makes its BLAS threads then. This process' own environment is given
  back as it was.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections.abc import Iterator, Sequence
from multiprocessing import forkserver, resource_tracker
from typing import Any

__all__ = ["START_METHOD", "fork_context", "start_fork_server"]

#: How worker processes start: forked from the fork server, spawned where there is none
#: (Windows) or where signals cannot be blocked.
START_METHOD = ("forkserver" if "forkserver" in multiprocessing.get_all_start_methods()
                and hasattr(signal, "pthread_sigmask") else "spawn")

#: A worker's environment where distributed's configuration is not loaded (an ingest's pool):
#: its ``distributed.nanny.pre-spawn-environ`` defaults.
_WORKER_ENVIRONMENT = {"OMP_NUM_THREADS": 1, "MKL_NUM_THREADS": 1, "OPENBLAS_NUM_THREADS": 1,
                       "MALLOC_TRIM_THRESHOLD_": 65536}


def fork_context(preload: Sequence[str] = ()) -> Any:
    """The multiprocessing context of :data:`START_METHOD`, its fork server started.

    Parameters
    ----------
    preload : sequence of str
        Modules the server imports once, so that each worker forks with them imported, where
        this call starts it (a server already running keeps what it imported).

    Returns
    -------
    multiprocessing.context.BaseContext
    """
    context = multiprocessing.get_context(START_METHOD)
    if START_METHOD == "forkserver":
        if preload:
            context.set_forkserver_preload(list(preload))
        start_fork_server()
    return context


def start_fork_server() -> None:
    """Start this process' fork server, if it is not running: SIGINT blocked, a worker's env.

    Only this thread blocks SIGINT, for the few milliseconds of the launch: a Ctrl-C meanwhile
    is delivered to another thread, or here once unblocked, never lost (Python runs its
    handler in the main thread either way). A no-op where workers are spawned.
    """
    if START_METHOD != "forkserver":
        return
    with _worker_environment():
        # started first: its own launch blocks SIGINT and SIGTERM, then unblocks them
        resource_tracker.ensure_running()
        unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            forkserver.ensure_running()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)


@contextlib.contextmanager
def _worker_environment() -> Iterator[None]:
    """The environment, in the block, as distributed's Nanny sets it for a worker.

    The variables of ``distributed.nanny.pre-spawn-environ`` (a variable already set is
    kept) and ``PYTHONHASHSEED`` (distributed's 6640 where it is unset or 0: its nanny.py,
    PR 8400); the environment of before once the block ends.
    """
    import dask  # here: a text query imports the ingest's module, never dask (test_startup)

    # distributed's configuration where distributed is loaded, else its defaults
    wanted = dask.config.get("distributed.nanny.pre-spawn-environ", None) or _WORKER_ENVIRONMENT
    before = dict(os.environ)
    try:
        for name, value in wanted.items():
            if value is not None:
                os.environ.setdefault(name, str(value))
        if os.environ.get("PYTHONHASHSEED") in (None, "0"):
            os.environ["PYTHONHASHSEED"] = "6640"
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)
