"""Where a job's Dask computations run: a scheduler, a LocalCluster, or threads in-process.

A real local cluster of ``dask scheduler`` / ``dask worker`` processes is what
``cluster/local.sh`` starts from the shell.

Everything sphdist starts listens on 127.0.0.1 (the dashboard included) unless told otherwise,
and the embedded LocalCluster speaks ``tls://`` with credentials made for it alone
(``distributed.security.Security.temporary()``, held in memory and handed to its workers), so no
other process on the machine can submit code to it. Encryption and mutual authentication with
an external scheduler use TLS certificates (:func:`tls_security`): pass the same CA,
certificate and key to the scheduler, the workers and ``sphdist fit`` (``--tls-ca-file``,
``--tls-cert``, ``--tls-key``); see ``cluster/README.md``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
from dask.utils import format_bytes, parse_bytes
from distributed import Client, LocalCluster
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.security import Security

from sphdist.errors import InputNotFoundError, ParameterError

__all__ = [
    "IN_PROCESS_MAX_BYTES",
    "check_dashboard_address",
    "check_memory_limit",
    "check_scheduler_address",
    "connect",
    "runs_in_process",
    "stored_nbytes",
    "tls_security",
]

logger = logging.getLogger("sphdist")

#: Largest X, in stored bytes (:func:`stored_nbytes`), that a job given neither a scheduler nor
#: a number of workers runs on dask's threaded scheduler in its own process instead of starting
#: a LocalCluster. Measured on the 2-core development machine (``sphdist fit``, r = 20, threads
#: vs 2 worker processes; cluster/README.md): threads took 0.2-0.6x the LocalCluster's seconds
#: per iteration on every corpus from 20 Newsgroups (21 MiB stored) to 500k synthetic documents
#: (496 MiB). The limit is the largest size measured, not a crossover: above it a fit keeps the
#: workers' bounded memory (X streamed, spilled, retried on worker loss).
IN_PROCESS_MAX_BYTES = 512 * 2**20

#: A remedy for a bad scheduler address, as a working command.
_ADDRESS_REMEDY = (
    "pass the address the scheduler printed when it started (e.g. --scheduler-address "
    "tcp://127.0.0.1:8786, see cluster/README.md), or leave out --scheduler-address and unset "
    "DASK_SCHEDULER_ADDRESS to run on this machine"
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
    files = {"--tls-ca-file": ca_file, "--tls-cert": cert_file, "--tls-key": key_file}
    for option, path in files.items():
        if path is not None and not Path(path).is_file():
            raise InputNotFoundError(
                f"{path}: no such TLS file ({option}). To resolve this, pass PEM files made as "
                "in cluster/README.md (cluster/make_certs.py writes a CA and a certificate)."
            )
    ca, cert = str(ca_file), str(cert_file)
    key = str(key_file) if key_file is not None else None
    return Security(
        tls_ca_file=ca,
        tls_client_cert=cert, tls_client_key=key,
        tls_scheduler_cert=cert, tls_scheduler_key=key,
        tls_worker_cert=cert, tls_worker_key=key,
        require_encryption=True,
    )


# -- validation of the options ----------------------------------------------------------------


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
                  "pass e.g. --dashboard-address 127.0.0.1:8787 (or 127.0.0.1:0 for a free port)"):
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
                  "unit, e.g. --memory-limit 4GiB, or --memory-limit auto"):
        if limit != "auto" and parse_bytes(limit) < 0:
            raise ValueError("a limit is not negative")


# -- where the job runs -----------------------------------------------------------------------


class StorageOptions(WorkerPlugin):
    """Gives every worker the ``--storage-option`` values of the job (fsspec configuration).

    The workers read the corpus' chunks and write V straight from and to the object store, so
    they need the endpoint and credentials the driver was given; those from the environment
    (``AWS_*``) or fsspec's configuration files must be set on the workers themselves.
    """

    name = "sphdist-storage-options"

    def __init__(self, options: dict[str, dict[str, Any]]) -> None:
        self.options = options

    def setup(self, worker: Any) -> None:
        """Apply the options in the worker's process (also for workers that join later)."""
        from sphdist.io._fs import apply_storage_options

        apply_storage_options(self.options)


def _share_storage_options(client: Client) -> None:
    from sphdist.io._fs import storage_options

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


def runs_in_process(nbytes: int, available: int | None = None) -> bool:
    """Whether X of ``nbytes`` stored bytes is small enough for the threaded scheduler.

    Parameters
    ----------
    nbytes : int
        X's stored size (:func:`stored_nbytes`), in bytes.
    available : int, optional
        Memory available to this process, in bytes; default what the OS reports
        (``psutil.virtual_memory().available``).

    Returns
    -------
    bool
        ``nbytes`` is at most :data:`IN_PROCESS_MAX_BYTES` and at most an eighth of
        ``available`` (X held in memory next to the job's other arrays).

    Examples
    --------
    >>> runs_in_process(22 * 2**20, available=8 * 2**30), runs_in_process(2**30, 8 * 2**30)
    (True, False)
    >>> runs_in_process(100 * 2**20, available=512 * 2**20)
    False
    """
    if available is None:
        import psutil

        available = psutil.virtual_memory().available
    return nbytes <= min(IN_PROCESS_MAX_BYTES, available // 8)


@contextlib.contextmanager
def _threads() -> Iterator[None]:
    """Dask's threaded scheduler, one thread per core, with single-threaded BLAS per task."""
    from threadpoolctl import threadpool_limits

    with dask.config.set(scheduler="threads", num_workers=os.cpu_count() or 1), \
            threadpool_limits(1, user_api="blas"):
        yield


@contextlib.contextmanager
def connect(
    scheduler_address: str | None = None,
    *,
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    memory_limit: str | int = "auto",
    dashboard_address: str = "127.0.0.1:0",
    security: Security | bool | None = None,
    data_nbytes: int | None = None,
    silence_logs: int = logging.CRITICAL,
) -> Iterator[Client | None]:
    """A distributed Client, or dask's threaded scheduler, for the duration of a ``with`` block.

    Parameters
    ----------
    scheduler_address : str, optional
        Address of a running scheduler (``tcp://host:port``, ``tls://...``). Default: the
        ``DASK_SCHEDULER_ADDRESS`` environment variable; if neither is set, the job runs on
        this machine (below).
    n_workers : int, optional
        Worker processes of an embedded LocalCluster; 0 runs on dask's threaded scheduler in
        this process instead. Default: threads in this process when ``data_nbytes`` is given
        and small (:func:`runs_in_process`), else a LocalCluster of one worker per core.
    threads_per_worker : int, default 1
        Threads per worker process of the LocalCluster.
    memory_limit : str or int, default "auto"
        Memory limit per worker of the LocalCluster, in bytes or as a string ("4GiB").
    dashboard_address : str, default "127.0.0.1:0"
        Where the LocalCluster's dashboard listens (loopback, a free port); ``":0"`` or
        ``"0.0.0.0:8787"`` exposes it on every interface, which must be asked for.
    security : distributed.security.Security or bool, optional
        TLS credentials (:func:`tls_security`) to connect to ``scheduler_address`` (default
        none) or for the embedded LocalCluster. The LocalCluster speaks ``tls://`` in every
        case but ``security=False``: by default with temporary credentials of its own
        (``Security.temporary()``, held in memory), so that no other local process can
        connect to it and run code in its workers.
    data_nbytes : int, optional
        Stored size of the data the job reads, in bytes (:func:`stored_nbytes`); lets the
        default choose threads for small data. None (the default) keeps the LocalCluster.
    silence_logs : int, default logging.CRITICAL
        Level below which the LocalCluster's scheduler, nanny and worker log records are
        dropped; by default a failed task's ``Compute Failed`` block is not printed (the
        error still reaches the caller as an exception). ``logging.WARNING`` shows them.

    Yields
    ------
    distributed.Client or None
        The Client, registered as the default, so dask computations run on it; None when the
        job runs on the threaded scheduler (set as dask's default for the block).

    Raises
    ------
    ParameterError
        If ``n_workers`` is negative, ``threads_per_worker`` is below 1, or the address,
        dashboard address or memory limit cannot be read.
    OSError
        If the scheduler cannot be reached (``TimeoutError`` is an ``OSError``).

    Notes
    -----
    The LocalCluster and everything it listens on bind to 127.0.0.1. On one machine the
    threaded scheduler moves no bytes between processes: scipy's sparse products and NumPy's
    BLAS release the GIL, so two threads keep two cores busy (cluster/README.md has the
    measurements behind :data:`IN_PROCESS_MAX_BYTES`).
    """
    address = scheduler_address or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if address:
        check_scheduler_address(address)
        with Client(address, security=security or None) as client:
            logger.info("connected to scheduler %s (dashboard %s)", address, client.dashboard_link)
            _share_storage_options(client)
            yield client
        return
    if n_workers is not None and n_workers < 0:
        raise ParameterError(f"n_workers must be >= 0, got {n_workers}.")
    if threads_per_worker < 1:
        raise ParameterError(f"threads_per_worker must be >= 1, got {threads_per_worker}.")
    check_memory_limit(memory_limit)
    check_dashboard_address(dashboard_address)
    limit = format_bytes(IN_PROCESS_MAX_BYTES)
    size = "" if data_nbytes is None else f"X is {format_bytes(data_nbytes)} stored, "
    if n_workers == 0 or (
        n_workers is None and data_nbytes is not None and runs_in_process(data_nbytes)
    ):
        logger.info(
            "running in this process on dask's threaded scheduler (%d threads), no worker "
            "processes: %s; --n-workers N starts a LocalCluster of N worker processes instead",
            os.cpu_count() or 1,
            "as --n-workers 0 asks" if n_workers == 0 else f"{size}at most the {limit} fitted so",
        )
        with _threads():
            yield None
        return
    why = f"--n-workers {n_workers}" if n_workers is not None else "one per core" + (
        "" if data_nbytes is None
        else f": {size}above the {limit} (or an eighth of the available memory) fitted in this "
        "process; --n-workers 0 fits there anyway"
    )
    n_workers = n_workers or os.cpu_count() or 1
    with LocalCluster(
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        processes=True,
        memory_limit=memory_limit,
        host="127.0.0.1",
        dashboard_address=dashboard_address,
        security=Security() if security is False else (security or True),
        silence_logs=silence_logs,
    ) as cluster, Client(cluster) as client:
        _share_storage_options(client)
        logger.info(
            "started LocalCluster %s: %d workers x %d threads (%s), dashboard %s",
            cluster.scheduler_address, n_workers, threads_per_worker, why, client.dashboard_link,
        )
        yield client
