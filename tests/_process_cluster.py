"""A real cluster on loopback for the fault and security tests (a test harness, not sphdist API).

:class:`ProcessCluster` starts one ``dask scheduler`` and N ``dask worker`` processes from the
command line, as ``cluster/local.sh`` does from the shell, so that a test can SIGKILL a worker,
grow the cluster, read every party's log, or require TLS. distributed's own
``SubprocessCluster`` (experimental in distributed 2026.8) serves none of these: it has no TLS
(its spec is JSON: it takes no ``Security``), keeps the scheduler's stderr in an undrained
pipe, writes no log files and passes no per-process environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from distributed import Client
from distributed.security import Security

from sphdist.errors import ParameterError
from sphdist.jobs.cluster import tls_security

__all__ = ["ProcessCluster", "isolation_unavailable"]

# run as `sh -c SCRIPT sh CWD KEPT... -- HIDDEN... -- COMMAND...` inside `unshare --mount`:
# every kept folder (the software the command runs) is opened, an empty tmpfs is mounted on
# /tmp, each kept folder is bound back onto its own path through the open descriptor (the
# path itself is already covered; --no-canonicalize keeps mount from resolving the
# descriptor's link to that covered path), then an empty tmpfs on every hidden directory
# still in view (one under /tmp is hidden by the private /tmp already)
_ISOLATE = """
set -e
cwd=$1; shift
n=2
for p in "$@"; do [ "$p" = -- ] && break; n=$((n + 1)); eval "exec $n<\\"\\$p\\""; done
mount -t tmpfs sphdist-tmp /tmp
n=2
while [ "$1" != -- ]; do
    n=$((n + 1))
    mkdir -p "$1"
    mount --no-canonicalize --bind "/proc/self/fd/$n" "$1"
    eval "exec $n<&-"
    shift
done; shift
while [ "$1" != -- ]; do if [ -d "$1" ]; then mount -t tmpfs sphdist-hidden "$1"; fi; shift; done
shift
mkdir -p "$cwd" && cd "$cwd"
exec "$@"
"""
_MAX_KEPT = 7  # the script's descriptors 3 to 9 (sh redirects a single digit)

# what the interpreter runs from: its prefixes, its folder and every folder of its sys.path
_WHERE = ("import json, os, sys; print(json.dumps([sys.prefix, sys.exec_prefix, "
          "sys.base_prefix, sys.base_exec_prefix, os.path.dirname(sys.executable), *sys.path]))")


def _isolated(
    command: list[str], kept: Sequence[str], hidden: Sequence[str], cwd: str
) -> list[str]:
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", _ISOLATE, "sh", cwd,
            *kept, "--", *hidden, "--", *command]


def _software(env: dict[str, str]) -> list[str]:
    """The folders under /tmp that this interpreter runs from, with ``env`` (its
    ``PYTHONPATH``): what a worker's private /tmp must show, as every node has the software.

    Raises
    ------
    RuntimeError
        If the interpreter does not run, or runs from more than 7 separate folders of /tmp.
    """
    found = subprocess.run([sys.executable, "-c", _WHERE], env=env, capture_output=True,
                           text=True, timeout=300)
    if found.returncode:
        raise RuntimeError(f"{sys.executable} did not run: {found.stderr.strip()[-500:]}")
    folders = set()
    for entry in json.loads(found.stdout):
        if not entry or not os.path.exists(entry):
            continue
        for path in {os.path.abspath(entry), os.path.realpath(entry)}:
            folder = path if os.path.isdir(path) else os.path.dirname(path)
            if folder.startswith("/tmp/"):
                folders.add(folder)
    outermost = sorted(f for f in folders
                       if not any(f.startswith(g + "/") for g in folders))
    if len(outermost) > _MAX_KEPT:
        raise RuntimeError(f"the interpreter runs from {len(outermost)} folders of /tmp "
                           f"(at most {_MAX_KEPT} can be kept): {outermost}")
    return outermost


def isolation_unavailable(
    isolate: Sequence[str | os.PathLike[str]] = (), env: dict[str, str] | None = None
) -> str | None:
    """Why workers cannot be started in a mount namespace of their own here, or None if they can.

    Runs ``dask worker --help`` exactly as :class:`ProcessCluster` runs its workers with
    ``isolate`` and ``env``: ``unshare --mount`` (root, or the CAP_SYS_ADMIN capability), a
    private tmpfs on /tmp with the interpreter's folders bound back in, the ``isolate``
    directories hidden. The command fails there if, say, a hidden directory holds the
    interpreter.
    """
    if shutil.which("unshare") is None:
        return "the unshare command (util-linux) is not installed"
    env = {**os.environ, **(env or {})}
    command = [*_dask_command(), "worker", "--help"]
    try:
        hidden = [str(Path(p).resolve()) for p in isolate]
        probe = subprocess.run(_isolated(command, _software(env), hidden, "/"), env=env,
                               capture_output=True, timeout=300)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        return f"{' '.join(command)} under unshare --mount did not run: {exc}"
    if probe.returncode:
        return (f"{' '.join(command)} failed under unshare --mount with a private tmpfs on /tmp "
                "(unshare needs root or CAP_SYS_ADMIN; the command, the software it runs): "
                f"{probe.stderr.decode(errors='replace').strip()[-500:]}")
    return None


def _dask_command() -> list[str]:
    """The ``dask`` command of this interpreter's environment."""
    exe = Path(sys.executable).with_name("dask")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "dask"]


def _tail(path: Path, n: int = 1500) -> str:
    """The last ``n`` characters of a log file, or a note that there is none."""
    try:
        return path.read_text(errors="replace")[-n:].strip() or "(empty)"
    except OSError as exc:
        return f"({exc})"


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
    timeout : float, default 300
        Seconds to wait for the scheduler and for the workers to connect: generous, for a
        loaded machine (a worker process that exits fails the wait at once).
    cwd : path-like, optional
        Working directory of the workers (default: this process'), as on another machine
        whose processes start elsewhere.
    isolate : sequence of path-like, optional
        Start every worker in its own mount namespace (``unshare --mount --propagation
        private``, root only) with a private, empty tmpfs on ``/tmp`` and on each of these
        directories: the worker shares no disk with this process there (a node of a
        multi-machine cluster). The folders of /tmp the interpreter runs from (a clone's
        ``.venv``, its ``PYTHONPATH``) are bound back in, as every node has the software.
        :func:`isolation_unavailable` says whether this machine can.

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
        :meth:`start` / :meth:`add_workers`, or a process exits first (the message ends with
        the tail of its log). :meth:`start` then stops every process it started.
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
        timeout: float = 300.0,
        cwd: str | os.PathLike[str] | None = None,
        isolate: Sequence[str | os.PathLike[str]] | None = None,
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
        self.cwd = None if cwd is None else str(cwd)
        self.isolate = None if isolate is None else [str(Path(p).resolve()) for p in isolate]
        self._own_log_dir = log_dir is None
        self.log_dir = Path(log_dir or tempfile.mkdtemp(prefix="sphdist-cluster-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.scheduler_file = self.log_dir / "scheduler.json"
        self.address = ""
        self.scheduler: subprocess.Popen[bytes] | None = None
        self.workers: list[subprocess.Popen[bytes]] = []
        self._started = 0  # workers started so far: the next one's name and log file
        self._logs: list = []
        self._kept: list[str] = []  # the software's folders in /tmp, shown to isolated workers

    # -- lifecycle ----------------------------------------------------------------------
    def _tls_args(self) -> list[str]:
        if self.tls_files is None:
            return []
        ca, cert, key = self.tls_files
        return ["--tls-ca-file", ca, "--tls-cert", cert, "--tls-key", key]

    def _spawn(
        self, args: list[str], log_name: str, *, worker: bool = False
    ) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / log_name, "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        command = _dask_command() + args
        if worker and self.isolate is not None:
            command = _isolated(command, self._kept, self.isolate, self.cwd or "/")
        return subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=self.env,
            cwd=self.cwd if worker and self.isolate is None else None,
            start_new_session=True,  # a Ctrl-C of the caller does not race our shutdown
        )

    def start(self) -> ProcessCluster:
        """Start the scheduler and ``n_workers`` workers; wait until all are connected.

        Whatever fails (a process that exits, a timeout, an interrupt), every process started
        is stopped before the exception propagates.
        """
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        if self.isolate is not None:
            self._kept = _software(self.env)
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
                raise TimeoutError(
                    f"the dask scheduler did not start within {self.timeout} s (exit status "
                    f"{self.scheduler.poll()}); its log: "
                    f"{_tail(self.log_dir / 'scheduler.log')}"
                )
            time.sleep(0.1)
        self.address = json.loads(self.scheduler_file.read_text())["address"]
        self.add_workers(self.n_workers)

    def add_workers(self, n: int) -> None:
        """Start ``n`` more workers and wait until the scheduler sees all of them.

        Raises TimeoutError as soon as one of them exits, with the tail of its log.
        """
        started = []
        for _ in range(n):
            i = self._started
            self._started += 1
            local = (f"/tmp/sphdist-worker-{i}" if self.isolate is not None  # its own /tmp
                     else str(self.log_dir / f"worker-{i}"))
            self.workers.append(self._spawn(
                ["worker", self.address, "--host", "127.0.0.1", "--nthreads",
                 str(self.nthreads), "--nworkers", "1", "--memory-limit", self.memory_limit,
                 "--name", f"worker-{i}", "--no-dashboard",
                 # the worker's HTTP server (/health, /metrics) stays up without a dashboard
                 "--dashboard-address", "127.0.0.1:0",
                 "--nanny" if self.nanny else "--no-nanny",
                 "--local-directory", local,
                 *self._tls_args(), *self.worker_args],
                f"worker-{i}.log", worker=True,
            ))
            started.append((self.workers[-1], f"worker-{i}.log"))
        if not self.workers:  # distributed refuses to wait for 0 (a scheduler alone)
            return
        deadline = time.monotonic() + self.timeout
        with self.client(set_as_default=False) as client:
            while True:
                try:
                    client.wait_for_workers(len(self.workers), timeout=1.0)
                    return
                except TimeoutError:
                    exited = [(p, log) for p, log in started if p.poll() is not None]
                    if exited or time.monotonic() > deadline:
                        what = (f"{len(exited)} of the {n} workers started exited" if exited
                                else f"the workers did not connect within {self.timeout} s")
                        shown = exited or started
                        raise TimeoutError(what + "; " + "; ".join(
                            f"{log}: {_tail(self.log_dir / log)}" for _, log in shown[:2]
                        )) from None

    def replace_exited_workers(self) -> None:
        """Start a new worker for each worker process that has exited (one without a nanny,
        killed), and wait until the scheduler sees as many workers as were started."""
        exited = [p for p in self.workers if p.poll() is not None]
        self.workers = [p for p in self.workers if p.poll() is None]
        self.add_workers(len(exited))  # new names: the scheduler may not have dropped the old
        if not exited:
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
