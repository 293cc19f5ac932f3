"""Connecting to Dask: a scheduler by address, an embedded LocalCluster, or local processes.

:class:`ProcessCluster` starts a real local cluster of ``dask scheduler`` / ``dask worker``
processes (what ``cluster/local.sh`` does from the shell).

Everything sphdist starts listens on 127.0.0.1 (the dashboard included) unless told otherwise.
Encryption and mutual authentication use TLS certificates (:func:`tls_security`): pass the same
CA, certificate and key to the scheduler, the workers and ``sphdist fit`` (``--tls-ca-file``,
``--tls-cert``, ``--tls-key``); see ``cluster/README.md``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from distributed import Client, LocalCluster
from distributed.security import Security

from sphdist.errors import InputNotFoundError, ParameterError, WorkersLostError

__all__ = ["connect", "tls_security", "ProcessCluster", "fit_with_retries", "WORKER_LOSS"]

logger = logging.getLogger("sphdist")

T = TypeVar("T")


def _worker_loss_errors() -> tuple[type[BaseException], ...]:
    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    return (FutureCancelledError, KilledWorker, CommClosedError)


#: Exceptions with which a computation fails when a worker holding its data dies.
WORKER_LOSS: tuple[type[BaseException], ...] = _worker_loss_errors()


def fit_with_retries(
    fit: Callable[..., T],
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    resume: bool = False,
    overwrite: bool = False,
    retries: int = 3,
    **kwargs: Any,
) -> T:
    """Run ``fit(input, output, ...)``, resuming from its last checkpoint when a worker dies.

    When a worker is lost in the middle of an iteration (killed, pre-empted, out of memory),
    data the iteration needs may be gone with it; the fit is then restarted with
    ``resume=True`` from the last complete checkpoint at ``output``, which reaches bitwise the
    same U, V and objective history as an undisturbed run.

    Parameters
    ----------
    fit : callable
        :func:`sphdist.jobs.workflow.fit_corpus` (or a function with its signature).
    input, output : path-like
        Passed to ``fit``.
    resume, overwrite : bool
        Passed to the first attempt. A retry resumes the checkpoint written by the attempts of
        this call; if none was written yet, it repeats the first attempt's flags.
    retries : int, default 3
        Restarts allowed after a worker loss; 0 disables them.
    **kwargs
        More arguments of ``fit``.

    Returns
    -------
    object
        What ``fit`` returns.

    Raises
    ------
    ParameterError
        If ``retries`` < 0.
    WorkersLostError
        When workers are still lost after ``retries`` restarts (the cause is chained).
    """
    if retries < 0:
        raise ParameterError(f"retries must be >= 0, got {retries}.")
    started = time.time_ns()
    marker = Path(output) / "zarr.json"
    for attempt in range(retries + 1):
        try:
            return fit(input, output, resume=resume, overwrite=overwrite, **kwargs)
        except WORKER_LOSS as exc:
            if attempt == retries:
                raise WorkersLostError(
                    f"workers were lost in {retries + 1} attempts to fit {output} (last: "
                    f"{type(exc).__name__}: {str(exc)[:200]}). The last complete checkpoint is "
                    "kept. To resolve this, check the workers' logs (often a memory limit "
                    "below what sphdist.core.solver.fit's Notes give), then rerun with --resume."
                ) from exc
            if marker.exists() and marker.stat().st_mtime_ns >= started:
                resume, overwrite = True, False  # continue our own checkpoint
            logger.warning(
                "a worker was lost (%s: %s); resuming %s from its last checkpoint "
                "(retry %d of %d)", type(exc).__name__, str(exc)[:200], output, attempt + 1,
                retries,
            )
    raise AssertionError("unreachable")  # pragma: no cover


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


@contextlib.contextmanager
def connect(
    scheduler_address: str | None = None,
    *,
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    memory_limit: str | int = "auto",
    dashboard_address: str = "127.0.0.1:0",
    security: Security | None = None,
) -> Iterator[Client]:
    """A distributed Client for the duration of a ``with`` block.

    Parameters
    ----------
    scheduler_address : str, optional
        Address of a running scheduler (``tcp://host:port``, ``tls://...``). Default: the
        ``DASK_SCHEDULER_ADDRESS`` environment variable; if neither is set, an embedded
        ``LocalCluster`` is started.
    n_workers : int, optional
        Worker processes of the LocalCluster; default one per core.
    threads_per_worker : int, default 1
        Threads per worker process of the LocalCluster.
    memory_limit : str or int, default "auto"
        Memory limit per worker of the LocalCluster, in bytes or as a string ("4GiB").
    dashboard_address : str, default "127.0.0.1:0"
        Where the LocalCluster's dashboard listens (loopback, a free port); ``":0"`` or
        ``"0.0.0.0:8787"`` exposes it on every interface, which must be asked for.
    security : distributed.security.Security, optional
        TLS credentials (:func:`tls_security`): used to connect to ``scheduler_address``, and
        an embedded LocalCluster then speaks ``tls://`` only.

    Yields
    ------
    distributed.Client
        Registered as the default client, so dask computations run on it.

    Raises
    ------
    ParameterError
        If ``n_workers`` or ``threads_per_worker`` is below 1.
    OSError
        If the scheduler cannot be reached (``TimeoutError`` is an ``OSError``).

    Notes
    -----
    The LocalCluster and everything it listens on bind to 127.0.0.1.
    """
    address = scheduler_address or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if address:
        with Client(address, security=security) as client:
            logger.info("connected to scheduler %s (dashboard %s)", address, client.dashboard_link)
            yield client
        return
    if n_workers is not None and n_workers < 1:
        raise ParameterError(f"n_workers must be >= 1, got {n_workers}.")
    if threads_per_worker < 1:
        raise ParameterError(f"threads_per_worker must be >= 1, got {threads_per_worker}.")
    n_workers = n_workers or os.cpu_count() or 1
    tls = {"security": security, "protocol": "tls://"} if security is not None else {}
    with LocalCluster(
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        processes=True,
        memory_limit=memory_limit,
        host="127.0.0.1",
        dashboard_address=dashboard_address,
        **tls,
    ) as cluster, Client(cluster, security=security) as client:
        logger.info(
            "started LocalCluster: %d workers x %d threads, dashboard %s",
            n_workers, threads_per_worker, client.dashboard_link,
        )
        yield client


def _dask_command() -> list[str]:
    """The ``dask`` command of this interpreter's environment."""
    exe = Path(sys.executable).with_name("dask")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "dask"]


class ProcessCluster:
    """A real cluster on loopback: one ``dask scheduler`` and N ``dask worker`` processes.

    Unlike ``LocalCluster``, every party is a separate OS process started from the command line
    exactly as on a cluster's nodes, so processes can be killed (``SIGKILL``) to test fault
    tolerance. Use as a context manager; leaving it terminates every process it started.

    Parameters
    ----------
    n_workers : int, default 2
        Worker processes started on entry (each ``--nworkers 1``).
    memory_limit : str or int, default "2GiB"
        ``--memory-limit`` of every worker: the worker spills to disk above 60 % of it and is
        restarted by its nanny above 95 % (distributed's defaults).
    nthreads : int, default 1
        ``--nthreads`` of every worker.
    security : tuple of path-like (ca, cert, key), optional
        TLS files: the scheduler listens on ``tls://127.0.0.1`` and requires them.
    dashboard : bool, default False
        Start the scheduler's dashboard (on 127.0.0.1, a free port).
    nanny : bool, default True
        Run every worker under a nanny, which restarts it if it dies.
    worker_args : sequence of str, optional
        More ``dask worker`` options (e.g. ``["--preload", "module"]``).
    env : dict, optional
        Extra environment variables of every process (e.g. ``DASK_DISTRIBUTED__...`` config).
    log_dir : path-like, optional
        Where ``scheduler.log`` and ``worker-<i>.log`` are written; default a temporary
        directory removed on exit.
    timeout : float, default 60
        Seconds to wait for the scheduler and for the workers to connect.

    Attributes
    ----------
    address : str
        The scheduler address, ``tcp://127.0.0.1:PORT`` or ``tls://127.0.0.1:PORT``.

    Raises
    ------
    ParameterError
        If ``n_workers`` < 0 or ``nthreads`` < 1.
    TimeoutError
        If the scheduler or the workers do not come up within ``timeout`` seconds of
        :meth:`start` / :meth:`add_workers`.
    """

    def __init__(
        self,
        n_workers: int = 2,
        *,
        memory_limit: str | int = "2GiB",
        nthreads: int = 1,
        security: Sequence[str | os.PathLike[str]] | None = None,
        dashboard: bool = False,
        nanny: bool = True,
        worker_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        timeout: float = 60.0,
    ):
        if n_workers < 0:
            raise ParameterError(f"n_workers must be >= 0, got {n_workers}.")
        if nthreads < 1:
            raise ParameterError(f"nthreads must be >= 1, got {nthreads}.")
        self.n_workers = n_workers
        self.memory_limit = str(memory_limit)
        self.nthreads = nthreads
        self.tls_files = [str(p) for p in security] if security is not None else None
        self.dashboard = dashboard
        self.nanny = nanny
        self.worker_args = list(worker_args)
        self.env = {**os.environ, **(env or {})}
        self.timeout = timeout
        self._own_log_dir = log_dir is None
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="sphdist-cluster-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.scheduler_file = self.log_dir / "scheduler.json"
        self.address = ""
        self.scheduler: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self._logs: list = []

    # -- lifecycle ----------------------------------------------------------------------
    def _tls_args(self) -> list[str]:
        if self.tls_files is None:
            return []
        ca, cert, key = self.tls_files
        return ["--tls-ca-file", ca, "--tls-cert", cert, "--tls-key", key]

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / log_name, "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        return subprocess.Popen(
            _dask_command() + args, stdout=log, stderr=subprocess.STDOUT, env=self.env,
            start_new_session=True,  # a Ctrl-C of the caller does not race our shutdown
        )

    def start(self) -> ProcessCluster:
        """Start the scheduler and ``n_workers`` workers; wait until all are connected."""
        protocol = "tls" if self.tls_files else "tcp"
        self.scheduler_file.unlink(missing_ok=True)
        dash = (["--dashboard-address", "127.0.0.1:0"] if self.dashboard
                else ["--no-dashboard"])
        self.scheduler = self._spawn(
            ["scheduler", "--host", "127.0.0.1", "--port", "0", "--protocol", protocol,
             "--scheduler-file", str(self.scheduler_file), *dash, *self._tls_args()],
            "scheduler.log",
        )
        deadline = time.monotonic() + self.timeout
        while not self.scheduler_file.exists() or not self.scheduler_file.stat().st_size:
            if self.scheduler.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(
                    f"the dask scheduler did not start; see {self.log_dir / 'scheduler.log'}"
                )
            time.sleep(0.1)
        self.address = json.loads(self.scheduler_file.read_text())["address"]
        self.add_workers(self.n_workers)
        return self

    def add_workers(self, n: int) -> None:
        """Start ``n`` more workers and wait until the scheduler sees all of them."""
        for _ in range(n):
            i = len(self.workers)
            self.workers.append(self._spawn(
                ["worker", self.address, "--host", "127.0.0.1", "--nthreads",
                 str(self.nthreads), "--nworkers", "1", "--memory-limit", self.memory_limit,
                 "--name", f"worker-{i}", "--no-dashboard",
                 # the worker's HTTP server (/health, /metrics) stays up without a dashboard
                 "--dashboard-address", "127.0.0.1:0",
                 "--nanny" if self.nanny else "--no-nanny",
                 "--local-directory", str(self.log_dir / f"worker-{i}"),
                 *self._tls_args(), *self.worker_args],
                f"worker-{i}.log",
            ))
        self.wait_for_workers(len(self.workers))

    def security(self) -> Security | None:
        """The client-side ``Security`` for this cluster (None without TLS)."""
        return tls_security(*self.tls_files) if self.tls_files else None

    def client(self, **kwargs) -> Client:
        """A new ``distributed.Client`` connected to the scheduler."""
        return Client(self.address, security=self.security(), **kwargs)

    def wait_for_workers(self, n: int) -> None:
        """Block until ``n`` workers are connected (or raise TimeoutError)."""
        with self.client(set_as_default=False) as client:
            client.wait_for_workers(n, timeout=self.timeout)

    def stop(self) -> None:
        """Terminate every process started (SIGTERM, then SIGKILL after 10 s)."""
        procs = [*self.workers, *([self.scheduler] if self.scheduler else [])]
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.workers, self.scheduler = [], None
        for log in self._logs:
            log.close()
        self._logs = []
        if self._own_log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def logs(self) -> dict[str, str]:
        """Text of every log file, by name (``scheduler.log``, ``worker-0.log``, ...)."""
        return {p.name: p.read_text(errors="replace") for p in sorted(self.log_dir.glob("*.log"))}

    def __enter__(self) -> ProcessCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
