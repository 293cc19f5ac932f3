"""Where a job's Dask computations run: a scheduler, a LocalCluster, or threads in-process.

A real local cluster of ``dask scheduler`` / ``dask worker`` processes is what
``cluster/local.sh`` starts from the shell.

Everything sphdist starts listens on 127.0.0.1 (the dashboard included) unless told otherwise,
and the embedded LocalCluster speaks ``tls://`` with credentials made for it alone
(``distributed.security.Security.temporary()``, held in memory and handed to its workers), so no
other process on the machine can submit code to it. Encryption and mutual authentication with
an external scheduler use TLS certificates (:func:`tls_security`): pass the same CA,
certificate and key to the scheduler, the workers and the job (:class:`ClusterSpec`'s
``tls_ca_file``, ``tls_cert``, ``tls_key``); see ``cluster/README.md``.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dask
from dask.utils import format_bytes, parse_bytes

from sphdist.errors import (
    InputNotFoundError,
    InsufficientMemoryError,
    ParameterError,
    Words,
    WorkersLostError,
    option,
)
from sphdist.jobs._cluster_spec import ClusterConflictError, ClusterSpec

if TYPE_CHECKING:  # distributed is imported where a job connects to a cluster: a fit on
    # dask's threads never imports it (about 0.4 s of its start-up)
    from distributed import Client, LocalCluster
    from distributed.security import Security

#: distributed's names this module uses, bound here on first use (:func:`_distributed`), so a
#: test may still replace ``cluster.LocalCluster`` or ``cluster.Client``.
_DISTRIBUTED = {"Client": "distributed", "LocalCluster": "distributed",
                "Security": "distributed.security"}


def _distributed() -> None:
    """Import distributed's :data:`_DISTRIBUTED` names into this module, once."""
    import importlib

    for name, module in _DISTRIBUTED.items():
        if name not in globals():
            globals()[name] = getattr(importlib.import_module(module), name)


def __getattr__(name: str) -> Any:  # PEP 562: cluster.LocalCluster etc. import distributed
    if name in _DISTRIBUTED:
        _distributed()
        return globals()[name]
    if name == "WORKER_LOSS":  # the tuple of worker_losses, distributed imported
        return _worker_loss_errors()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "ClusterConflictError",
    "ClusterSpec",
    "MEMORY_BUDGET_FRACTION",
    "memory_check",
    "check_dashboard_address",
    "check_memory_budget",
    "check_memory_limit",
    "check_worker_memory",
    "NO_WORKERS_TIMEOUT_S",
    "check_scheduler_address",
    "connect",
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

#: Fraction of the memory available to a job that X may take when it is held in memory
#: (``--memory-budget``'s default): in this process, of what the OS reports available; on a
#: cluster, of the workers' summed memory limits. The rest is left to the pass (U, the chains'
#: partial sums, the chunks in flight), to the driver's arrays and to everything else.
MEMORY_BUDGET_FRACTION = 0.25

#: A remedy for a bad scheduler address (the option named by :func:`sphdist.errors.option`).
_ADDRESS_REMEDY = (
    "pass the address the scheduler printed when it started (e.g. "
    f"{option('address', 'tcp://127.0.0.1:8786')}, see cluster/README.md), or leave out "
    f"{option('address')} and unset DASK_SCHEDULER_ADDRESS to run on this machine"
)


def tls_security(
    ca_file: str | os.PathLike[str],
    cert_file: str | os.PathLike[str],
    key_file: str | os.PathLike[str] | None = None,
) -> Security:
    """A ``distributed.Security`` that encrypts and authenticates every connection with TLS.

    Parameters
    ----------
    ca_file : path-like
        PEM file of the certificate authority that signed every party's certificate.
    cert_file : path-like
        PEM certificate of this party (it may also hold the private key).
    key_file : path-like, optional
        PEM private key of ``cert_file``, when it is a separate file.

    Returns
    -------
    distributed.security.Security
        With ``require_encryption=True``: the same files serve as client, scheduler and worker
        credentials, so a ``tls://`` scheduler accepts only parties holding a certificate
        signed by the CA.

    Raises
    ------
    InputNotFoundError
        If one of the files does not exist.
    """
    files = {"tls_ca_file": ca_file, "tls_cert": cert_file, "tls_key": key_file}
    for name, path in files.items():  # named as ClusterSpec's fields (and the options)
        if path is not None and not Path(path).is_file():
            raise InputNotFoundError(
                f"{path}: no such TLS file ({option(name)}). To resolve this, pass PEM files "
                "made as in cluster/README.md (cluster/make_certs.py writes a CA and a "
                "certificate)."
            )
    ca, cert = str(ca_file), str(cert_file)
    key = str(key_file) if key_file is not None else None
    _distributed()
    return Security(
        tls_ca_file=ca,
        tls_client_cert=cert, tls_client_key=key,
        tls_scheduler_cert=cert, tls_scheduler_key=key,
        tls_worker_cert=cert, tls_worker_key=key,
        require_encryption=True,
    )


# -- validation of the options ----------------------------------------------------------------


def cpu_count() -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, a cgroup cpuset).

    What the threaded scheduler and a default LocalCluster use, so that a fit started under
    ``taskset -c 0,1`` runs two threads (``os.cpu_count`` counts every core of the machine).
    """
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


@contextlib.contextmanager
def _refused(problem: str, remedy: str) -> Iterator[None]:
    """Turn the ValueError or TypeError of a parser into a ParameterError: problem, remedy."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        raise ParameterError(f"{problem} ({exc}). To resolve this, {remedy}.") from None


def check_scheduler_address(address: str) -> None:
    """Refuse a scheduler address distributed cannot connect to, before trying.

    Parameters
    ----------
    address : str
        ``scheme://host:port`` (``tcp``, ``tls``, or another scheme distributed knows).

    Raises
    ------
    ParameterError
        If the scheme is unknown or the host and port cannot be parsed (``foo://bar``).
    """
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import backends

    with _refused(f"scheduler address {address!r} is not one distributed can connect to",
                  _ADDRESS_REMEDY):
        scheme, location = parse_address(address, strict=True)
        if scheme not in backends:
            raise ValueError(f"unknown scheme {scheme}://, known: "
                             + ", ".join(f"{s}://" for s in sorted(backends)))
        if scheme in ("tcp", "tls"):
            parse_host_port(location, default_port=8786)


def check_dashboard_address(address: str) -> None:
    """Refuse a dashboard address that is not ``[host]:port`` with a port in [0, 65535].

    Parameters
    ----------
    address : str
        ``host:port``; ``:port`` listens on every interface, port 0 picks a free port.

    Raises
    ------
    ParameterError
        If the port is missing, not an integer or out of range (``127.0.0.1:notaport``).
    """
    from distributed.comm.addressing import parse_host_port

    with _refused(f"dashboard address {address!r} is not host:port",
                  f"pass e.g. {option('dashboard_address', '127.0.0.1:8787')} (or 127.0.0.1:0 "
                  "for a free port)"):
        _, port = parse_host_port(address)
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} is not in [0, 65535]")


def check_memory_limit(limit: str | int) -> None:
    """Refuse a worker memory limit distributed cannot read.

    Parameters
    ----------
    limit : str or int
        ``"auto"`` (the machine's memory shared by the workers), bytes, or a number with a unit
        (``"4GiB"``, ``"4e9"``); 0 means no limit.

    Raises
    ------
    ParameterError
        If ``limit`` is not ``"auto"``, a size in bytes or a size with a unit (``4XB``).
    """
    with _refused(f"memory limit {limit!r} is not a size", "pass bytes or a number with a "
                  f"unit, e.g. {option('memory_limit', '4GiB')}, or "
                  f"{option('memory_limit', 'auto')}"):
        if limit != "auto" and parse_bytes(limit) < 0:
            raise ValueError("a limit is not negative")


# -- paths the tasks use ----------------------------------------------------------------------

#: A remedy for a local path that the workers do not see as the driver does; "{name}" is
#: replaced by the path's name (not with str.format: the option marker is JSON, braces included).
_SHARED_REMEDY = (
    "put it where this machine and every worker reach the same files: an object store "
    "(e.g. s3://BUCKET/{name}, with AWS_ENDPOINT_URL and the credentials set for the workers "
    "too) or a filesystem mounted at the same path on every node; or leave out "
    f"{option('address')} to run on this machine"
)


def task_path(path: str | os.PathLike[str] | None, *, output: bool = False) -> Any:
    """``path`` as every task of a job is given it: absolute, or a URL, made so once here.

    A task runs in a worker process whose working directory is its own (on another machine,
    or where ``dask worker`` was started), so a relative path would name another file there.
    Jobs call this at their entry, on the driver, before any task is built.

    Parameters
    ----------
    path : path-like or None
        A local path (relative or absolute) or a URL (``s3://bucket/model.zarr``).
    output : bool, default False
        ``path`` is a store to write: one that names no file (``.``, ``..``, ``dir/..``) is
        returned as it is, for the writer to refuse in its own words, instead of becoming
        the name of the working directory (or of its parent).

    Returns
    -------
    pathlib.Path or upath.UPath or None
        The local path resolved against this process' working directory (an input's
        symbolic links resolved, an output's kept), or the URL unchanged; None for None.

    Raises
    ------
    ValueError
        As :func:`sphdist.io.location` (an empty path, an unknown protocol).

    Examples
    --------
    >>> import os
    >>> str(task_path("model.zarr")) == os.path.join(os.getcwd(), "model.zarr")
    True
    >>> str(task_path("s3://bucket/model.zarr"))
    's3://bucket/model.zarr'
    """
    from sphdist.io import absolute, is_remote, location

    if path is None:
        return None
    given = location(path)
    if is_remote(given) or (output and given.name in ("", ".", "..")):
        return given
    if output:  # a link stays a link: the writer refuses to replace it, never writes through
        return location(os.path.abspath(given))
    return location(absolute(given))


def _signature(path: str) -> tuple[int, int] | None:
    """(size, mtime in ns) of the file, or of a zarr store's ``zarr.json``; None if absent."""
    target = os.path.join(path, "zarr.json") if os.path.isdir(path) else path
    try:
        stat = os.stat(target)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def _sees(marker: str) -> bool:
    return os.path.exists(marker)


def check_workers_see(
    client: Client | None, *, inputs: tuple[Any, ...] = (), outputs: tuple[Any, ...] = (),
) -> None:
    """Refuse, before any task runs, local paths that the workers do not see as this process.

    The tasks of a job read its inputs and write its outputs themselves, so on a cluster
    whose workers share no filesystem with the driver (separate machines, containers) a local
    path names nothing, or another file, in their processes. URLs are not checked (every
    party opens the same object store).

    Parameters
    ----------
    client : distributed.Client or None
        The cluster; None (dask's threads in this process) checks nothing.
    inputs : tuple of path-like
        Stores the tasks read: every worker must see the same file (the size and modification
        time of the store's ``zarr.json``, or of the file).
    outputs : tuple of path-like
        Stores the tasks write: every worker must see the directory that will hold it (a
        marker file written there by this process for the check, then removed).

    Raises
    ------
    InputNotFoundError
        If a worker does not see an input as this process does; naming the path, the worker
        and the remedy (an object store, or a filesystem shared at the same path).
    ParameterError
        If a worker does not see the folder of an output; the same.
    """
    import shlex
    import uuid

    from sphdist.io import is_remote

    if client is None:
        return
    for path in inputs:
        if path is None or is_remote(path):
            continue
        path = str(path)
        mine = _signature(path)
        seen = client.run(_signature, path)
        for worker, theirs in seen.items():
            if tuple(theirs or ()) != tuple(mine or ()):
                how = "does not find it" if theirs is None else "finds another file there"
                name = Path(path).name
                raise InputNotFoundError(
                    f"{path}: worker {worker} {how}: the workers do not share this machine's "
                    "filesystem, and the tasks read the input themselves. To resolve this, "
                    + _SHARED_REMEDY.replace("{name}", name) + f" (e.g. `aws s3 cp --recursive "
                    f"{shlex.quote(path)} s3://BUCKET/{shlex.quote(name)}`, then pass that URL)."
                )
    for path in outputs:
        if path is None or is_remote(path):
            continue
        folder = Path(path).parent
        marker = folder / f".{Path(path).name}.sphdist-shared-{uuid.uuid4().hex}"
        try:
            marker.touch()
        except OSError:
            continue  # the writer reports an unwritable output in its own words
        try:
            seen = client.run(_sees, str(marker))
        finally:
            marker.unlink(missing_ok=True)
        for worker, ok in seen.items():
            if not ok:
                raise ParameterError(
                    f"{path}: worker {worker} does not see the folder {folder} of this "
                    "machine: the workers do not share its filesystem, and the tasks write "
                    "the output themselves (nothing was written). To resolve this, "
                    + _SHARED_REMEDY.replace("{name}", Path(path).name) + "."
                )


#: Seconds the embedded LocalCluster's tasks wait while it has no worker (all of them lost,
#: their nannies restarting them) before they fail (``distributed.scheduler.no-workers-timeout``).
NO_WORKERS_TIMEOUT_S = 60


def no_workers_timeout() -> float:
    """Seconds a job's tasks may wait while the cluster has no worker, before they fail.

    dask's ``distributed.scheduler.no-workers-timeout`` where it is set (on this machine:
    ``DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT=10min`` for a cluster whose workers
    wait in a batch queue), else :data:`NO_WORKERS_TIMEOUT_S`.
    """
    from dask.utils import parse_timedelta

    value = dask.config.get("distributed.scheduler.no-workers-timeout", None)
    seconds = parse_timedelta(value) if value is not None else None
    return float(seconds) if seconds else float(NO_WORKERS_TIMEOUT_S)


@contextlib.contextmanager
def _no_workers_bound(client: Client, seconds: float) -> Iterator[None]:
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
    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker, NoWorkerError

    return (FutureCancelledError, KilledWorker, CommClosedError, NoWorkerError)


def worker_losses() -> tuple[type[BaseException], ...]:
    """Exceptions with which a computation fails when a worker holding its data dies.

    None before ``distributed`` is imported (dask's threads lose no worker): a fit on the
    threaded scheduler never imports it (about 0.4 s of its start-up). ``WORKER_LOSS`` (a
    module attribute, PEP 562) is the same tuple, importing ``distributed``.
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
    from distributed.scheduler import NoWorkerError

    return isinstance(exc, NoWorkerError)


def workers_lost(output: Any, attempt: int, exc: BaseException, resume: str) -> WorkersLostError:
    """The error of a job that lost its workers for good, with the command that continues it.

    Parameters
    ----------
    output : path-like
        The job's output, whose last complete checkpoint is kept.
    attempt : int
        The attempt that failed, from 0 (the restarts before it).
    exc : BaseException
        Its failure (one of :func:`worker_losses`).
    resume : str
        The command that continues the job (a :func:`sphdist.errors.remedy` marker).

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
    return WorkersLostError(
        f"{output}: {what}. The last complete checkpoint is kept. To resolve this, check the "
        "workers' logs (often a memory limit below what sphdist.core.solver.fit's Notes give, "
        f"or a worker killed from outside), then continue the fit: {resume}."
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
    from distributed.worker_memory import parse_memory_limit

    from sphdist.core.solver import BASE_BYTES

    check_memory_limit(limit)
    nbytes = parse_memory_limit(limit, threads_per_worker, logger=logger)
    if nbytes is not None and nbytes < BASE_BYTES:
        floor = f"{2 ** math.ceil(math.log2(BASE_BYTES)) // 2**20}MiB"
        raise ParameterError(
            f"memory limit {limit!r} per worker ({format_bytes(nbytes)}) cannot hold a worker "
            f"process before any task runs (about {format_bytes(BASE_BYTES)}): its nanny would "
            "restart it for ever and no task would run. To resolve this, give each worker at "
            f"least that, e.g. {option('memory_limit', floor)} (the fit checks its own "
            f"estimate against it before it starts), or leave out {option('memory_limit')} "
            "(auto: this machine's memory shared by the workers)."
        )


# -- where the job runs -----------------------------------------------------------------------


def _share_storage_options(client: Client) -> None:
    from sphdist.io import storage_options
    from sphdist.jobs._storage_plugin import StorageOptions

    options = storage_options()
    if options:
        client.register_plugin(StorageOptions(options))


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


def check_memory_budget(value: str | int | None) -> int | None:
    """A fit's ``memory_budget`` in bytes: None for the default, else a size such as ``4GiB``.

    Raises
    ------
    ParameterError
        If the value is neither a size nor ``auto`` (an empty value, a unit alone, an
        infinity), or more than ``MAX_MEMORY_BUDGET`` (1 EiB).

    Examples
    --------
    >>> check_memory_budget("4GiB"), check_memory_budget("auto"), check_memory_budget(0)
    (4294967296, None, 0)
    """
    if value is None or value == "auto":
        return None
    remedy = (f"To resolve this, pass bytes or a size such as {option('memory_budget', '4GiB')}"
              " (0 streams X from the store every iteration).")
    try:  # parse_bytes reads "" and "GiB" as one unit, and "1e400" as an infinity
        if isinstance(value, str) and not value.strip()[:1].isdigit():
            raise ValueError(value)
        nbytes = parse_bytes(value) if isinstance(value, str) else int(value)
    except (ValueError, TypeError, OverflowError):
        nbytes = -1
    if nbytes < 0:
        raise ParameterError(f"memory budget {value!r} is not a size. {remedy}")
    if nbytes > MAX_MEMORY_BUDGET:
        raise ParameterError(
            f"memory budget {value!r} is more than any machine's memory (at most 1 EiB, "
            f"{MAX_MEMORY_BUDGET} bytes). {remedy}"
        )
    return int(nbytes)


#: The largest ``--memory-budget``, in bytes (1 EiB): beyond it a value is a typo (``1e100``).
MAX_MEMORY_BUDGET = 2**60


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
    reason : sphdist.errors.Words
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
        if available is None:
            import psutil

            available = psutil.virtual_memory().available
        budget = int(available * MEMORY_BUDGET_FRACTION)
        source = (f"a quarter of the {format_bytes(available)} available; "
                  f"{option('memory_budget')} sets it")
    else:
        limits = [w.get("memory_limit") or 0 for w in client.scheduler_info()["workers"].values()]
        total = sum(limits) if limits and all(limits) else 0
        budget = int(total * MEMORY_BUDGET_FRACTION)
        source = (f"a quarter of the workers' {format_bytes(total)} memory limits; "
                  f"{option('memory_budget')} sets it") if total else (
            "the workers set no memory limit")
    size = f"X ({format_bytes(nbytes)})"
    if nbytes <= budget:
        where = "in memory" if client is None else "in the workers' memory"
        return True, Words(f"{size} is held {where}: within the memory budget of "
                           f"{format_bytes(budget)} ({source})")
    return False, Words(f"{size} is streamed from the store every iteration, chunk by chunk: "
                        f"above the memory budget of {format_bytes(budget)} ({source})")


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
        ``remedy(r, split_every)``: the same job with r components and that fan-in, as the
        marker of a :class:`sphdist.errors.Remedy` (:func:`sphdist.errors.remedy`).

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
    from sphdist.core import graph
    from sphdist.core.solver import BASE_BYTES, peak_bytes

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
        if available is None:
            import psutil

            available = psutil.virtual_memory().available
        places = [("this machine", int(available), cpu_count(), True, held_bytes)]
    else:
        workers = list(client.scheduler_info()["workers"].values())
        share = held_bytes // max(len(workers), 1)
        places = [(f"worker {w.get('name', '?')}'s memory limit", int(w["memory_limit"]),
                   int(w.get("nthreads", 1)), False, share)
                  for w in workers if w.get("memory_limit")][:1]
        if available is None:
            import psutil

            available = psutil.virtual_memory().available
        places.append(("this machine (the driver)", int(available), 0, None, 0))

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
                options.append(f"fit at most {fits} components: "
                               f"{remedy(fits, split_every)}")
            options.append("ingest fewer features (a larger min_df, or the hashing scheme "
                           "with fewer n_features)")
            options.append("run on a cluster whose workers have more memory "
                           f"({option('address')})")
            raise InsufficientMemoryError(text + "; or ".join(options) + ".")

    return check


@contextlib.contextmanager
def _threads() -> Iterator[None]:
    """Dask's threaded scheduler, one thread per core, with single-threaded BLAS per task.

    Named by the function (``dask.threaded.get``), which is what ``"threads"`` names: dask
    resolves the name by first importing ``distributed`` (about 0.4 s), to see whether a
    Client is running, at every compute.
    """
    import dask.threaded
    from threadpoolctl import threadpool_limits

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
    block if it has none of its own (:func:`_no_workers_bound`).

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
    n_workers, threads_per_worker = spec.n_workers, spec.threads_per_worker
    memory_limit, dashboard_address = spec.memory_limit, spec.dashboard_address
    scheduler_address = spec.address
    address = scheduler_address or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if address:
        check_scheduler_address(address)
        if address.startswith("tls://") and not security:
            raise ParameterError(
                f"scheduler address {address} speaks TLS, but no TLS files were given. To "
                "resolve this, pass the CA certificate and the client certificate (and its key) "
                f"that the scheduler trusts: {option('tls_ca_file', 'CA.pem')} "
                f"{option('tls_cert', 'CERT.pem')} {option('tls_key', 'KEY.pem')} (or "
                "SPHDIST_TLS_CA_FILE, SPHDIST_TLS_CERT, SPHDIST_TLS_KEY; cluster/README.md makes "
                "them)."
            )
        _distributed()
        seconds = no_workers_timeout()
        with dask.config.set({  # read by graph.broadcast's scatter too
            "distributed.scheduler.no-workers-timeout": f"{seconds}s",
        }), Client(address, security=security or None) as client, \
                _no_workers_bound(client, seconds):
            logger.info("connected to scheduler %s (dashboard %s)", address, client.dashboard_link)
            _share_storage_options(client)
            yield client
        return
    if n_workers is None or n_workers == 0:
        logger.info(
            "running in this process on dask's threaded scheduler (%d threads), no worker "
            "processes%s; %s starts a LocalCluster of N worker processes instead",
            cpu_count(), Words(f" ({option('n_workers', 0)})") if n_workers == 0 else "",
            Words(option("n_workers", "N")),
        )
        with _threads():
            yield None
        return
    _distributed()
    why = Words(option("n_workers", n_workers))
    n_workers = n_workers or cpu_count()
    check_worker_memory(memory_limit, threads_per_worker)
    with dask.config.set({  # a cluster that keeps losing its workers fails, never waits
        "distributed.scheduler.no-workers-timeout": f"{no_workers_timeout()}s",
        "distributed.scheduler.work-stealing": False,  # a pass's placement holds (graph.py)
    }), LocalCluster(
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        processes=True,
        memory_limit=memory_limit,
        host="127.0.0.1",
        dashboard_address=dashboard_address,
        security=Security() if security is False else (security or True),
        silence_logs=silence_logs,
    ) as cluster, Client(cluster, direct_to_workers=True) as client:  # U, totals: one hop
        _share_storage_options(client)
        logger.info(
            "started LocalCluster %s: %d workers x %d threads (%s), dashboard %s",
            cluster.scheduler_address, n_workers, threads_per_worker, why, client.dashboard_link,
        )
        yield client
