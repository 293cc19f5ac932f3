"""Where a job's Dask computations run: a scheduler, a LocalCluster, or threads in-process.

:func:`connect` is the entry: it takes a :class:`ClusterSpec` and holds, for one ``with``
block, a Client of a scheduler, a LocalCluster of worker processes and its Client, or dask's
threaded scheduler. A real local cluster of ``dask scheduler`` / ``dask worker`` processes is
what ``cluster/local.sh`` starts from the shell.

Everything sphdist starts listens on 127.0.0.1 (the dashboard included) unless told otherwise,
and the embedded LocalCluster speaks ``tls://`` with credentials made for it alone
(``distributed.security.Security.temporary()``, held in memory and handed to its workers), so no
other process on the machine can submit code to it. Encryption and mutual authentication with
an external scheduler use TLS certificates (:func:`tls_security`): pass the same CA,
certificate and key to the scheduler, the workers and the job (:class:`ClusterSpec`'s
``tls_ca_file``, ``tls_cert``, ``tls_key``); see ``cluster/README.md``.

This module is the public home of the cluster's names; each role has a module of its own below
it, as distributed keeps ``deploy/``, ``security.py`` and ``client.py`` apart:

- ``_cluster_spec.py``: :class:`ClusterSpec`, the value of "where a job runs" (no dask);
- ``_cluster_checks.py``: the options' values refused before anything starts (no dask);
- ``_cluster_security.py``: :func:`tls_security`;
- ``_cluster_memory.py``: the memory budget, the fit's memory check, :func:`cpu_count`;
- ``_cluster_losses.py``: worker losses, the no-workers timeout, the worker time-to-live;
- ``_cluster_paths.py``: paths as the tasks see them;
- ``_cluster_deploy.py``: the Client and the LocalCluster (imports distributed when imported).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import dask
import dask.threaded
from threadpoolctl import threadpool_limits

from sphdist.errors import ParameterError, Text, option
from sphdist.jobs._cluster_checks import (
    MAX_MEMORY_BUDGET,
    check_dashboard_address,
    check_memory_budget,
    check_memory_limit,
    check_scheduler_address,
)
from sphdist.jobs._cluster_losses import (
    NO_WORKERS_TIMEOUT_S,
    WORKER_TTL_S,
    log_retry,
    no_worker_left,
    no_workers_timeout,
    worker_losses,
    worker_ttl,
    workers_lost,
)
from sphdist.jobs._cluster_memory import (
    MEMORY_BUDGET_FRACTION,
    check_worker_memory,
    cpu_count,
    holds_in_memory,
    memory_check,
    stored_nbytes,
)
from sphdist.jobs._cluster_paths import check_workers_see, task_path
from sphdist.jobs._cluster_security import tls_security
from sphdist.jobs._cluster_spec import ClusterConflictError, ClusterSpec

if TYPE_CHECKING:
    from distributed import Client
    from distributed.security import Security

__all__ = [
    "ClusterConflictError",
    "ClusterSpec",
    "MEMORY_BUDGET_FRACTION",
    "MAX_MEMORY_BUDGET",
    "memory_check",
    "check_dashboard_address",
    "check_memory_budget",
    "check_memory_limit",
    "check_worker_memory",
    "NO_WORKERS_TIMEOUT_S",
    "no_workers_timeout",
    "WORKER_TTL_S",
    "worker_ttl",
    "check_scheduler_address",
    "connect",
    "cpu_count",
    "holds_in_memory",
    "stored_nbytes",
    "task_path",
    "check_workers_see",
    "tls_security",
    "worker_losses",
    "no_worker_left",
    "workers_lost",
    "log_retry",
]

logger = logging.getLogger("sphdist")


@contextlib.contextmanager
def _threads() -> Iterator[None]:
    """Dask's threaded scheduler, one thread per core, with single-threaded BLAS per task.

    Named by the function (``dask.threaded.get``), which is what ``"threads"`` names: dask
    resolves the name by first importing ``distributed`` (about 0.4 s), to see whether a
    Client is running, at every compute.
    """
    with dask.config.set(scheduler=dask.threaded.get, num_workers=cpu_count()), \
            threadpool_limits(1, user_api="blas"):
        yield


@contextlib.contextmanager
def connect(
    spec: ClusterSpec | str | None = None,
    *,
    security: Security | bool | None = None,
    silence_logs: int = logging.CRITICAL,
    **fields: Any,
) -> Iterator[Client | None]:
    """A distributed Client, or dask's threaded scheduler, for the duration of a ``with`` block.

    Parameters
    ----------
    spec : ClusterSpec, optional
        Where the job runs (:class:`ClusterSpec`, validated when it is made): a scheduler's
        ``address`` (default: the ``DASK_SCHEDULER_ADDRESS`` environment variable), else a
        LocalCluster of ``n_workers`` worker processes, else (default, and ``n_workers=0``)
        dask's threaded scheduler in this process, one thread per core, whatever the size of
        the data (the job holds X in memory or streams it, :func:`holds_in_memory`). A
        string is the ``address``.
    security : distributed.security.Security or bool, optional
        TLS credentials to use instead of those of the spec's TLS files
        (:func:`tls_security`). The LocalCluster speaks ``tls://`` in every case but
        ``security=False`` (or the spec's ``insecure``): by default with temporary credentials
        of its own (``Security.temporary()``, held in memory), so that no other local process
        can connect to it and run code in its workers.
    silence_logs : int, default logging.CRITICAL
        Level below which the LocalCluster's scheduler, nanny and worker log records are
        dropped; by default a failed task's ``Compute Failed`` block is not printed (the
        error still reaches the caller as an exception). ``logging.WARNING`` shows them.
    **fields
        Without ``spec``: the fields of a :class:`ClusterSpec` (``scheduler_address`` is
        taken for ``address``), as the keywords of before: ``connect(n_workers=4,
        memory_limit="8GiB")``.

    Yields
    ------
    distributed.Client or None
        The Client, registered as the default, so dask computations run on it; None when the
        job runs on the threaded scheduler (set as dask's default for the block).

    Raises
    ------
    ParameterError
        As :class:`ClusterSpec` for the keywords; if the address from the environment cannot
        be read, or a ``tls://`` address comes without TLS credentials (the files it needs
        are named).
    InputNotFoundError
        If a TLS file of the spec does not exist.
    TypeError
        If both a ``spec`` and keywords are given, or a keyword is no field.
    OSError
        If the scheduler cannot be reached (``TimeoutError`` is an ``OSError``).

    Notes
    -----
    A job on a cluster with no worker (all lost, or none started) does not wait for ever: its
    tasks fail with distributed's ``NoWorkerError`` after :func:`no_workers_timeout` seconds,
    on the LocalCluster and on an external scheduler, which is given that timeout for the
    block if it has none of its own (``no_workers_bound`` in ``_cluster_losses.py``). A worker
    that sends no heartbeat for :func:`worker_ttl` seconds (frozen) is removed by the
    scheduler, which is given that time-to-live for the block where its own is longer
    (``worker_ttl_bound``): the work waiting on it runs elsewhere or fails as a worker loss.

    The LocalCluster's worker processes never take SIGINT: they fork from multiprocessing's
    fork server, started with SIGINT blocked, so a Ctrl-C at a terminal (sent to the whole
    process group) is this process' alone, and the block's end stops them. A SIGINT or
    SIGTERM received while the LocalCluster starts (in the main thread) takes effect once it
    has started, inside the ``with`` block, which closes it: distributed cannot stop a
    LocalCluster part-way through its start.

    The LocalCluster and everything it listens on bind to 127.0.0.1. On one machine the
    threaded scheduler moves no bytes between processes: scipy's sparse products and NumPy's
    BLAS release the GIL (two threads on their own chunks ran 1.66x one thread's work rate),
    so two threads keep two cores busy, where a LocalCluster's iterations take longer: U goes
    to the workers and the summed partials come back every pass, and the partials of the blocks
    cross between workers where the sum tree crosses from one worker's run of blocks to the
    next (:func:`sphdist.core.graph.block_workers`), each 36 MB at 100k documents and r = 100,
    through TLS (``pipelines/results/benchmark.md``).
    """
    if "scheduler_address" in fields:
        fields["address"] = fields.pop("scheduler_address")
    if isinstance(spec, str):
        spec = ClusterSpec(spec, **fields)
    elif spec is None:
        spec = ClusterSpec(**fields)
    elif fields:
        raise TypeError(f"connect() takes a ClusterSpec or its fields, not both: {sorted(fields)}")
    if security is None and spec.tls:
        security = tls_security(spec.tls_ca_file, spec.tls_cert, spec.tls_key)
    elif security is None and spec.insecure:
        security = False
    address = spec.address or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if address:
        check_scheduler_address(address)
        if address.startswith("tls://") and not security:
            raise ParameterError(
                f"scheduler address {address} speaks TLS, but no TLS files were given. To "
                "resolve this, pass the CA certificate and the client certificate (and its "
                "key) that the scheduler trusts: " + option("tls_ca_file", 'CA.pem') + " "
                + option("tls_cert", 'CERT.pem') + " " + option("tls_key", 'KEY.pem')
                + " (or SPHDIST_TLS_CA_FILE, SPHDIST_TLS_CERT, SPHDIST_TLS_KEY; "
                "cluster/README.md makes them)."
            )
    elif not spec.n_workers:
        logger.info(
            "running in this process on dask's threaded scheduler (%d threads), no worker "
            "processes%s; %s starts a LocalCluster of N worker processes instead",
            cpu_count(), Text(" (" + option("n_workers", 0) + ")") if spec.n_workers == 0 else "",
            Text(option("n_workers", "N")),
        )
        with _threads():
            yield None
        return
    # distributed (about 0.4 s) is imported by a job on a cluster, never by one on threads
    from sphdist.jobs import _cluster_deploy

    if address:
        held = _cluster_deploy.join(address, security or None)
    else:
        check_worker_memory(spec.memory_limit, spec.threads_per_worker)
        held = _cluster_deploy.local_cluster(spec, security, silence_logs)
    with held as client:
        yield client
