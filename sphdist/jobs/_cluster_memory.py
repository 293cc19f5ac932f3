"""The memory a job may use, where it runs: the budget for X, the fit's check, the worker limit.

Whether X is held in memory or streamed (:func:`holds_in_memory`, of :func:`stored_nbytes`), the
fit's refusal of a fit that cannot fit memory before U is allocated (:func:`memory_check`, of
:func:`sphdist.core.solver.peak_bytes`), and the refusal of a LocalCluster worker limit below an
idle worker (:func:`check_worker_memory`); with the cores that share this machine's memory
(:func:`cpu_count`). Its public home is :mod:`sphdist.jobs.cluster`.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psutil
from dask.utils import format_bytes

from sphdist.core import graph
from sphdist.core.solver import BASE_BYTES, peak_bytes
from sphdist.errors import InsufficientMemoryError, ParameterError, Text, option
from sphdist.jobs._cluster_checks import check_memory_limit

if TYPE_CHECKING:
    from distributed import Client

__all__ = [
    "MEMORY_BUDGET_FRACTION",
    "cpu_count",
    "stored_nbytes",
    "holds_in_memory",
    "memory_check",
    "check_worker_memory",
]

logger = logging.getLogger("sphdist")

#: Fraction of the memory available to a job that X may take when it is held in memory
#: (``--memory-budget``'s default): in this process, of what the OS reports available; on a
#: cluster, of the workers' summed memory limits. The rest is left to the pass (U, the chains'
#: partial sums, the chunks in flight), to the driver's arrays and to everything else.
MEMORY_BUDGET_FRACTION = 0.25


def cpu_count() -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, a cgroup cpuset).

    What the threaded scheduler and a default LocalCluster use, so that a fit started under
    ``taskset -c 0,1`` runs two threads (``os.cpu_count`` counts every core of the machine).
    """
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def _available(available: int | None) -> int:
    """``available``, or the memory the OS reports available to this process, in bytes."""
    return psutil.virtual_memory().available if available is None else available


def stored_nbytes(source: Any) -> int:
    """Bytes of X as stored, uncompressed: what a job holds to keep X in memory.

    Parameters
    ----------
    source : Corpus or DenseInput
        An open input (:func:`sphdist.io.corpus.open_input`).

    Returns
    -------
    int
        In bytes. A corpus: ``nnz * (8 + 4)`` for its float64 values and int32 feature indices,
        plus 8 per int64 column pointer (``n + n_chunks``). A dense input: ``m * n * 8``.
    """
    m, n = source.shape
    if hasattr(source, "nnz"):
        return int(source.nnz) * 12 + 8 * (int(n) + len(source.chunks))
    return int(m) * int(n) * 8


def holds_in_memory(
    nbytes: int, budget: int | None = None, client: Client | None = None,
    available: int | None = None,
) -> tuple[bool, str]:
    """Whether a job holds X in memory or streams it from the store, and why, in words.

    Parameters
    ----------
    nbytes : int
        X's size in memory (:func:`stored_nbytes`: CSC values, indices and pointers), in bytes.
    budget : int, optional
        The most bytes X may take, in bytes (the fit's ``memory_budget``). Default
        :data:`MEMORY_BUDGET_FRACTION` of the memory available: to this process (``available``,
        default what the OS reports) on dask's threaded scheduler, or the workers' summed
        memory limits with a ``client`` (unknown limits: X is streamed).
    client : distributed.Client, optional
        The cluster the job runs on; None for threads in this process.
    available : int, optional
        Memory available to this process, in bytes (for the threaded scheduler's default).

    Returns
    -------
    hold : bool
        ``nbytes <= budget``: X is read once and kept (``persist``) in this process or the
        workers' memory; else every pass reads and decompresses each chunk from the store as
        its task runs, so memory does not grow with n.
    reason : sphdist.errors.Text
        One line for the log: which, the sizes, and the parameter that changes it (a
        ``str``; the command line names its option).

    Examples
    --------
    >>> hold, why = holds_in_memory(2**30, available=16 * 2**30)
    >>> hold, why[:64]
    (True, 'X (1.00 GiB) is held in memory: within the memory budget of 4.00')
    >>> holds_in_memory(2**30, budget=0)[0]
    False
    """
    if budget is not None:
        source = option("memory_budget")
    elif client is None:
        available = _available(available)
        budget = int(available * MEMORY_BUDGET_FRACTION)
        source = (f"a quarter of the {format_bytes(available)} available; "
                  + option("memory_budget") + " sets it")
    else:
        limits = [w.get("memory_limit") or 0 for w in client.scheduler_info()["workers"].values()]
        total = sum(limits) if limits and all(limits) else 0
        budget = int(total * MEMORY_BUDGET_FRACTION)
        source = (f"a quarter of the workers' {format_bytes(total)} memory limits; "
                  + option("memory_budget") + " sets it") if total else (
            "the workers set no memory limit")
    size = f"X ({format_bytes(nbytes)})"
    if nbytes <= budget:
        where = "in memory" if client is None else "in the workers' memory"
        return True, Text(f"{size} is held {where}: within the memory budget of "
                          f"{format_bytes(budget)} (" + source + ")")
    return False, Text(f"{size} is streamed from the store every iteration, chunk by chunk: "
                       f"above the memory budget of {format_bytes(budget)} (" + source + ")")


def memory_check(
    source: Any, n_components: int, *, dtype: Any, split_every: int,
    client: Client | None = None, held_bytes: int = 0, available: int | None = None,
    remedy: Callable[[int, int], str] | None = None,
) -> Callable[[int], None]:
    """The fit's memory check: refuse, before U is allocated, a fit that cannot fit memory.

    Parameters
    ----------
    source : Corpus or DenseInput
        The open input (its chunk layout and nnz give the chunks' bytes).
    n_components : int
        r.
    dtype : numpy.float64 or numpy.float32
        The fit's compute dtype.
    split_every : int
        Fan-in of the tree that sums a pass's partials (with the blocks of the source's
        chunk layout and the threads, it bounds the partials alive at once,
        :func:`sphdist.core.graph.partials_held`).
    client : distributed.Client, optional
        The cluster: each worker's estimate is checked against its memory limit (workers
        without one are not checked) and the driver's against this machine. None: threads in
        this process, where one process holds the driver's and the worker's share.
    held_bytes : int, default 0
        X in memory (:func:`holds_in_memory`), in bytes: in this process on threads, spread
        over the workers on a cluster.
    available : int, optional
        Memory available to this process, in bytes; default what the OS reports.
    remedy : callable, optional
        ``remedy(r, split_every)``: the same job with r components and that fan-in, named
        in a message (:func:`sphdist.errors.remedy`).

    Returns
    -------
    callable
        ``check(k)`` for :func:`sphdist.core.solver.fit` (k: the rows of U), which raises
        :class:`~sphdist.errors.InsufficientMemoryError` naming the estimate, the memory
        there is, and the largest r that fits (with ``split_every``).

    References
    ----------
    The estimate is :func:`sphdist.core.solver.peak_bytes` (the formula of ``solver.fit``'s
    Notes), which is above the measured peak (0.99 GiB estimated for 0.80 GiB measured
    at 100k documents streamed, r = 100, ``pipelines/results/memory_streamed.md``).
    """
    m, n = source.shape
    sizes = [int(c) for c in source.chunks] or [int(n)]
    largest = max(sizes)
    nnz = getattr(source, "nnz", None)
    chunk_bytes = (12 * int(nnz) * largest // max(int(n), 1) + 8 * largest if nnz is not None
                   else 8 * int(m) * largest)
    blocks = graph.pass_blocks(sizes)
    n_blocks = len(blocks)
    block_chunks = max(b - a for a, b in blocks)
    if client is None:
        places = [("this machine", int(_available(available)), cpu_count(), True, held_bytes)]
    else:
        workers = list(client.scheduler_info()["workers"].values())
        share = held_bytes // max(len(workers), 1)
        places = [(f"worker {w.get('name', '?')}'s memory limit", int(w["memory_limit"]),
                   int(w.get("nthreads", 1)), False, share)
                  for w in workers if w.get("memory_limit")][:1]
        places.append(("this machine (the driver)", int(_available(available)), 0, None, 0))

    def need(k: int, r: int, s: int, threads: int, both: bool | None, held: int) -> int:
        peak = peak_bytes(k, r, dtype=dtype, split_every=s, n_blocks=n_blocks,
                          chunk_bytes=chunk_bytes, block_chunks=block_chunks,
                          threads=max(threads, 1))
        if both is None:  # the driver of a cluster
            return BASE_BYTES + peak.driver
        return BASE_BYTES + held + peak.worker + (peak.driver if both else 0)

    def largest_r(k: int, s: int) -> int:
        r = 0
        for step in (2 ** e for e in range(20, -1, -1)):  # the largest r that fits everywhere
            if r + step <= min(k, n) and all(
                need(k, r + step, s, t, both, held) <= limit
                for _, limit, t, both, held in places
            ):
                r += step
        return r

    def check(k: int) -> None:
        for where, limit, threads, both, held in places:
            estimate = need(k, n_components, split_every, threads, both, held)
            if estimate <= limit:
                continue
            fits = largest_r(k, split_every)
            text = (f"a fit of {n_components} components on {k} features needs about "
                    f"{format_bytes(estimate)} of memory, more than {format_bytes(limit)} "
                    f"({where}); nothing was allocated or written. To resolve this, ")
            options = []
            if remedy is not None and fits:  # another fan-in saves a partial at most
                options.append(f"fit at most {fits} components: " + remedy(fits, split_every))
            options.append("ingest fewer features (a larger " + option("min_df")
                           + ", or the hashing scheme with fewer " + option("n_features") + ")")
            options.append("run on a cluster whose workers have more memory (" + option("address")
                           + ")")
            raise InsufficientMemoryError(text + Text("; or ").join(options) + ".")

    return check


def check_worker_memory(limit: str | int | float, threads_per_worker: int = 1) -> None:
    """Refuse a LocalCluster worker memory limit below what one worker process takes idle.

    A worker above 95 % of its limit is restarted by its nanny (distributed's default), so
    with a limit below the process' own memory before any task runs, the workers are killed
    and restarted for ever and no task runs (issue 31: a ``memory_limit`` of 1MiB waited with
    nothing printed).

    Parameters
    ----------
    limit : str, int or float
        The worker memory limit: ``"auto"``, bytes, a size (``"4GiB"``), or a fraction of this
        machine's memory (a number <= 1, as distributed reads it); 0 means no limit.
    threads_per_worker : int, default 1
        For ``"auto"``: the machine's memory shared in proportion to the threads.

    Raises
    ------
    ParameterError
        If the limit, in bytes, is below :data:`sphdist.core.solver.BASE_BYTES` (the memory
        of a process of Python, dask, NumPy and SciPy before a fit allocates anything, the
        R_0 of the estimate in :func:`sphdist.core.solver.fit`'s Notes); the remedy names a
        limit that holds it, and the fit's own estimate then checks the rest
        (:func:`memory_check`).

    Examples
    --------
    >>> check_worker_memory("4GiB"), check_worker_memory("auto"), check_worker_memory(0)
    (None, None, None)
    """
    # distributed is imported by the LocalCluster this limit is for, never by a fit on threads
    from distributed.worker_memory import parse_memory_limit

    check_memory_limit(limit)
    nbytes = parse_memory_limit(limit, threads_per_worker, logger=logger)
    if nbytes is not None and nbytes < BASE_BYTES:
        floor = f"{2 ** math.ceil(math.log2(BASE_BYTES)) // 2**20}MiB"
        raise ParameterError(
            f"memory limit {limit!r} per worker ({format_bytes(nbytes)}) cannot hold a worker "
            f"process before any task runs (about {format_bytes(BASE_BYTES)}): its nanny "
            "would restart it for ever and no task would run. To resolve this, give each "
            "worker at least that, e.g. " + option("memory_limit", floor)
            + " (the fit checks its own estimate against it before it starts), or leave out "
            + option("memory_limit") + " (auto: this machine's memory shared by the workers)."
        )
