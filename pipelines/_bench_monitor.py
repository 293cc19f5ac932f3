"""One measured job of ``pipelines/benchmark.py``: a command in its own process tree, watched.

:func:`run_monitored` starts a command in a new session and, until it exits, polls its whole
process tree (the process and every descendant, found with :mod:`psutil`) every ``interval``
seconds. Per process it reads from ``/proc/<pid>/status`` the peak resident set size the
kernel keeps (``VmHWM``: exact, however short the peak, as long as the process is polled once
after it) and the current one (``VmRSS``), and from ``/proc/<pid>/io`` the bytes it caused to
be written to storage (``write_bytes``: counted when the page cache is dirtied, so a file
written and deleted before writeback still counts). Descendants are classed by their command
line: the workers of a ``LocalCluster`` are ``multiprocessing`` spawn children
(``spawn_main``), its resource tracker is a helper. On exit the process is reaped with
:func:`os.wait4`, whose ``ru_oublock`` is the bytes written by the whole tree (every
descendant its parent reaped) and ``ru_maxrss`` the largest peak RSS in it: the cross-checks
of the polled figures. A job past its time limit, or whose tree holds more than the memory
limit at a poll, is killed (``SIGKILL`` to its process group) and reported as such.

Every line the job writes on stderr is kept with its time since the start; ``on_line`` is
called with it as it arrives (``benchmark.py`` snapshots the tree's bytes written at each
iteration line of ``sphdist fit``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import psutil

GIB = 2**30


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages of the machine."""
    return [round(x, 2) for x in os.getloadavg()]


def _status_kib(pid: int) -> tuple[int, int] | None:
    """``(VmRSS, VmHWM)`` of a process in KiB, or None once it is gone (or a zombie)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS", "VmHWM")))
    except (OSError, ValueError):
        return None
    if len(fields) < 2:
        return None
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def _write_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("write_bytes:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def role(cmdline: Sequence[str]) -> str:
    """``worker`` (a multiprocessing spawn/fork child), ``helper`` or ``child``."""
    cmd = " ".join(cmdline)
    if "resource_tracker" in cmd or "forkserver import main" in cmd:
        return "helper"
    if "spawn_main" in cmd or "--multiprocessing-fork" in cmd:
        return "worker"
    return "child"


class TreeWatch:
    """The peak RSS and bytes written of every process of one tree, polled.

    Parameters
    ----------
    root : int
        Process id of the job (the ``driver``).
    """

    def __init__(self, root: int):
        self.root = root
        self.procs: dict[int, dict[str, Any]] = {}
        self.simultaneous_kib = 0  # max over polls of the summed current RSS of the tree
        self.max_workers_alive = 0  # a restarted worker is a new pid: more seen than alive
        self._lock = threading.Lock()

    def _tree(self) -> list[int]:
        try:
            children = psutil.Process(self.root).children(recursive=True)
        except psutil.Error:
            return [self.root]
        for child in children:
            rec = self.procs.setdefault(child.pid, {"pid": child.pid, "role": "child", "cmd": "",
                                                    "peak_kib": 0, "write_bytes": 0})
            if rec["role"] == "child":  # seen between fork and exec it has its parent's cmdline
                try:
                    cmdline = child.cmdline()
                except psutil.Error:
                    continue
                rec.update(role=role(cmdline), cmd=" ".join(cmdline)[:120])
        return [self.root, *(c.pid for c in children)]

    def poll(self) -> int:
        """Read every live process of the tree once; the summed current RSS, KiB."""
        with self._lock:
            self.procs.setdefault(self.root, {"pid": self.root, "role": "driver", "cmd": "",
                                              "peak_kib": 0, "write_bytes": 0})
            total = alive = 0
            for pid in self._tree():
                kib = _status_kib(pid)
                if kib is None:
                    continue
                rec = self.procs[pid]
                alive += rec["role"] == "worker"
                rec["peak_kib"] = max(rec["peak_kib"], kib[1])
                total += kib[0]
                written = _write_bytes(pid)
                if written is not None:
                    rec["write_bytes"] = max(rec["write_bytes"], written)
            self.simultaneous_kib = max(self.simultaneous_kib, total)
            self.max_workers_alive = max(self.max_workers_alive, alive)
            return total

    def written(self) -> int:
        """Bytes written so far by the tree: the last reading of every process ever seen."""
        with self._lock:
            for pid, rec in self.procs.items():
                now = _write_bytes(pid)
                if now is not None:
                    rec["write_bytes"] = max(rec["write_bytes"], now)
            return sum(rec["write_bytes"] for rec in self.procs.values())

    def summary(self) -> dict[str, Any]:
        """Peaks by role (GiB) and the per-process records."""
        procs = sorted(self.procs.values(), key=lambda p: p["pid"])
        gib = {p["pid"]: p["peak_kib"] * 1024 / GIB for p in procs}
        workers = [gib[p["pid"]] for p in procs if p["role"] == "worker"]
        return {
            "driver_peak_rss_gib": gib.get(self.root),
            "worker_peak_rss_gib": workers,
            "n_workers_seen": len(workers),
            "max_workers_alive": self.max_workers_alive,
            "summed_peak_rss_gib": sum(gib.values()),
            "simultaneous_peak_rss_gib": self.simultaneous_kib * 1024 / GIB,
            "processes": [
                {"pid": p["pid"], "role": p["role"], "cmd": p["cmd"],
                 "peak_rss_gib": round(gib[p["pid"]], 4), "write_bytes": p["write_bytes"]}
                for p in procs
            ],
        }


def _reader(stream: Any, t0: float, sink: list[Any], on_line: Callable | None, timed: bool):
    for raw in stream:
        line = raw.rstrip("\n")
        t = time.perf_counter() - t0
        sink.append([round(t, 3), line] if timed else line)
        if on_line is not None:
            try:
                on_line(t, line)
            except Exception as exc:  # keep draining the pipe, or the job would block on it
                sink.append([round(t, 3), f"(benchmark: reading this line failed: {exc!r})"])


def run_monitored(
    cmd: Sequence[str], *, timeout: float, mem_limit_gib: float | None = None,
    env: dict[str, str] | None = None, cwd: str | os.PathLike[str] | None = None,
    on_line: Callable[[float, str, TreeWatch], None] | None = None, interval: float = 0.2,
) -> dict[str, Any]:
    """Run ``cmd`` to its end (or its limit), watching its process tree.

    Parameters
    ----------
    cmd : sequence of str
        The command line.
    timeout : float
        Seconds before the job's process group is killed.
    mem_limit_gib : float, optional
        Kill the job when its tree's summed current RSS exceeds this (GiB).
    env, cwd : optional
        Environment and working directory of the job.
    on_line : callable, optional
        ``on_line(seconds_since_start, line, watch)`` for every stderr line, as it arrives.
    interval : float, default 0.2
        Seconds between polls of the tree.

    Returns
    -------
    dict
        ``returncode``, ``wall_s``, ``stopped`` (None, or why the job was killed),
        ``stdout`` (list of lines), ``stderr`` (``[seconds, line]`` pairs), ``load_before``,
        ``total_write_bytes`` and ``wait4_maxrss_gib`` (from :func:`os.wait4`), and
        :meth:`TreeWatch.summary`.
    """
    load = load_average()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        list(cmd), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
        start_new_session=True,
    )
    watch = TreeWatch(proc.pid)
    out: list[str] = []
    err: list[Any] = []
    cb = (lambda t, line: on_line(t, line, watch)) if on_line is not None else None
    threads = [threading.Thread(target=_reader, args=(proc.stdout, t0, out, None, False)),
               threading.Thread(target=_reader, args=(proc.stderr, t0, err, cb, True))]
    for th in threads:
        th.daemon = True
        th.start()
    stopped = None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        total_kib = watch.poll()
        elapsed = time.perf_counter() - t0
        if stopped is None and elapsed > timeout:
            stopped = f"timed out after {timeout:.0f} s"
        elif stopped is None and mem_limit_gib and total_kib * 1024 > mem_limit_gib * GIB:
            stopped = f"stopped: its processes held more than {mem_limit_gib:g} GiB"
        if stopped is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(interval)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    for th in threads:
        th.join(timeout=10)
    return {
        "returncode": proc.returncode, "wall_s": wall, "stopped": stopped, "stdout": out,
        "stderr": err, "load_before": load,
        "total_write_bytes": usage.ru_oublock * 512, "wait4_maxrss_gib": usage.ru_maxrss / 2**20,
        **watch.summary(),
    }


def error_of(result: dict[str, Any]) -> str | None:
    """Why a monitored job gave no result: its stop reason or last stderr line, else None."""
    if result["stopped"]:
        return result["stopped"]
    if result["returncode"] != 0:
        tail = [line for _, line in result["stderr"] if line.strip()][-1:]
        return (tail[0] if tail else f"exit status {result['returncode']}")[:300]
    return None
