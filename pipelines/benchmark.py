"""Performance at scale: ``sphdist fit`` as a user runs it, a bare SpMM floor, and its peers.

For each corpus -- 20 Newsgroups with ``sphdist ingest``'s default features, a learned
vocabulary (the recipe of ``pipelines/results/text_defaults.md``: English stop words,
sublinear tf, min_df 5, max_df 0.5), and synthetic
collections of ``--sizes`` documents (``sphdist synth``: 2**18 hashed features, ~100 nonzeros
per document, 20 topics) -- this measures, in one run on one machine, one job at a time, each
in its own process tree with a time limit (and killed above a memory limit), the load average
recorded before each:

* **ingest** (``sphdist ingest`` / ``sphdist synth``; cached under ``--work-dir``);
* **bare**: one single-process SpMM pass over the same chunks (:mod:`_bench_jobs`), the floor
  an iteration is compared with;
* **sphdist**: the CLI, ``sphdist fit --input corpus.zarr --output model.zarr -r R``, every
  other option at its default (tol 1e-4, a checkpoint a minute): wall seconds to the
  committed model, iterations and seconds per iteration (read from the model), bytes written
  per iteration (``/proc/<pid>/io`` of the fit's processes between its iteration log lines),
  the committed checkpoint's size, peak RSS of the driver and of every worker process
  (:mod:`_bench_monitor`), and the scheduler the fit reports in its log; where that fit of a
  synthetic corpus started no worker process (the in-process path), a second fit with
  ``--n-workers <cores>`` weighs the workers;
* **peers**, each a whole process reading the same corpus.zarr: scikit-learn
  ``TruncatedSVD`` (randomized, n_iter=5) + ``normalize``, gensim ``LsiModel``, sphdist's
  ``BAE`` (:mod:`_bench_jobs`); time and peak RSS as ratios to sphdist's.

The report (``--output``: ``.md``, ``.json``, ``.png``; :mod:`_bench_report`) is rewritten
after every job, so an interrupted run keeps what it measured, and states each target of
issue 13 with its figure. Run from the repository root (peers: ``pip install -e ".[bench]"``;
20 Newsgroups: ``SPHDIST_DATA_HOME``), small first::

    .venv/bin/python pipelines/benchmark.py run --sizes 20000 --max-iter 3 --output x/smoke
    .venv/bin/python pipelines/benchmark.py run      # 20 Newsgroups x 2, 100k .. 2M

``--peer-max-docs gensim=250000`` (repeatable) keeps a slow peer off the large corpora; a
later ``run --jobs peers`` of them, merged with ``render --merge``, adds them.
``render`` rewrites the report from a results JSON.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_monitor import error_of, load_average, run_monitored  # noqa: E402
from _bench_report import PEERS, merge, ok, plot, write_report  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "pipelines" / "results"
#: the sphdist command beside this interpreter (a virtual environment's), else the one on PATH
#: (a ``pip install --target`` with its bin/ on PATH, as the device machine's script does)
SPHDIST = (str(Path(sys.executable).with_name("sphdist"))
           if Path(sys.executable).with_name("sphdist").exists()
           else shutil.which("sphdist") or "sphdist")
JOBS_PY = str(Path(__file__).with_name("_bench_jobs.py"))
ITER_LINE = re.compile(r"^iter\s+(\d+)\s")
SCHEDULER_LINE = re.compile(r"cluster|scheduler|thread|process", re.IGNORECASE)
DASHBOARD = re.compile(r",?\s*\(?dashboard \S+")
MEASURED = ("wall_s", "load_before", "driver_peak_rss_gib", "worker_peak_rss_gib",
            "n_workers_seen", "max_workers_alive", "summed_peak_rss_gib",
            "simultaneous_peak_rss_gib", "total_write_bytes", "wait4_maxrss_gib", "processes")
NOTES = [
    "`benchmark.py run --fit-args '...'` passes options of `sphdist fit` to every fit of a run. "
    "`DASK_SCHEDULER_ADDRESS` and `SPHDIST_TLS_*` are removed from the environment of every "
    "job, so each fit chooses its scheduler as it does by default: dask's threads in its own "
    "process, X held in memory when it fits the memory budget (a quarter of the available "
    "memory) and streamed from the store otherwise. The corpora of `--streamed-sizes` are "
    "fitted a second time with `--memory-budget 0` (X streamed), those of `--cluster-sizes` a "
    "third time with `--n-workers <cores>` (a LocalCluster of worker processes): the rows "
    "marked so.",
]


def _env() -> dict[str, str]:
    """The jobs' environment: this one without a scheduler address or TLS files."""
    return {k: v for k, v in os.environ.items()
            if k != "DASK_SCHEDULER_ADDRESS" and not k.startswith("SPHDIST_TLS_")}


def _measured(res: dict[str, Any]) -> dict[str, Any]:
    return {k: res[k] for k in MEASURED}


def du(path: Path) -> int:
    """Apparent size in bytes of the files under ``path`` (0 if it is absent)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:  # a checkpoint being replaced
                pass
    return total


def corpus_plan(sizes: list[int], newsgroups: bool, seed: int) -> list[tuple[str, list[str]]]:
    """``(name, sphdist arguments)`` of every corpus, small first (the output path apart)."""
    plan = []
    if newsgroups:  # sphdist ingest's defaults: a learned vocabulary (the hashed variant of
        # the earlier benchmark is in the git history of pipelines/results/benchmark.md)
        plan.append(("20newsgroups-vocabulary",
                     ["ingest", "--remove-headers", "--stop-words", "english", "--sublinear-tf",
                      "--vocabulary", "--min-df", "5", "--max-df", "0.5"]))
    for n in sorted(sizes):
        plan.append((f"synthetic-{n // 1000}k" if n % 1000 == 0 else f"synthetic-{n}",
                     ["synth", "--n-docs", str(n), "--n-topics", "20", "--seed", str(seed),
                      "--doc-length", "120", "--format", "corpus", "--n-features", str(2**18)]))
    return plan


def build_corpus(name: str, args: list[str], work_dir: Path, *, reingest: bool,
                 timeout: float, mem_limit: float) -> dict[str, Any]:
    """Write (or reuse) ``work_dir/<name>.zarr``; its ingest figures and shape."""
    path, meta = work_dir / f"{name}.zarr", work_dir / f"{name}.ingest.json"
    if not reingest and path.exists() and meta.exists():
        cached = json.loads(meta.read_text())
        if cached.get("command") == args:
            return cached | {"cached": True}
    shutil.rmtree(path, ignore_errors=True)
    res = run_monitored([SPHDIST, *args, "-o", str(path)], timeout=timeout,
                        mem_limit_gib=mem_limit, env=_env(), cwd=REPO)
    entry: dict[str, Any] = {"command": args, **_measured(res)}
    if error_of(res):
        return entry | {"error": error_of(res)}
    info = json.loads(subprocess.run([SPHDIST, "info", "--json", str(path)], env=_env(),
                                     capture_output=True, text=True, check=True).stdout)
    entry.update(n_features=info["shape"][0], n_documents=info["shape"][1], nnz=info["nnz"],
                 n_chunks=info["chunks"]["n_chunks"])
    del entry["processes"]
    meta.write_text(json.dumps(entry))
    return entry


def python_job(kind: str, *, timeout: float, mem_limit: float, **kwargs: Any) -> dict[str, Any]:
    """One job of :mod:`_bench_jobs` under the monitor: its own figures and the measured."""
    res = run_monitored([sys.executable, JOBS_PY, kind, json.dumps(kwargs)], timeout=timeout,
                        mem_limit_gib=mem_limit, env=_env(), cwd=REPO)
    found = [line for line in res["stdout"] if line.startswith("{")]
    if error_of(res) or not found:
        return {"error": error_of(res) or "no result printed", "load_before": res["load_before"],
                "wall_s": res["wall_s"]}
    return {**json.loads(found[-1]), **_measured(res)}


def _read_model(model: Path) -> dict[str, Any]:
    """Iterations, convergence and the seconds history, from the committed model."""
    try:
        from sphdist.io.model import open_model

        m = open_model(model)
        seconds = [float(s) for s in m.attrs["seconds"]]
        out = {"n_iter": m.n_iter, "converged": bool(m.attrs["converged"]),
               "objective": [float(f) for f in m.objective], "seconds": seconds}
    except Exception as exc:  # the model API may change under the solver's rewrite: use info
        info = json.loads(subprocess.run([SPHDIST, "info", "--json", str(model)], env=_env(),
                                         capture_output=True, text=True, check=True).stdout)
        return {"n_iter": info["n_iter"], "converged": info["converged"],
                "s_per_iter": info["solver_seconds_per_iteration"], "model_read_error": repr(exc)}
    it = np.asarray(seconds[1:])
    return out | {"init_s": seconds[0],
                  "s_per_iter": float(it.mean()) if it.size else None,
                  "s_per_iter_median": float(np.median(it)) if it.size else None}


def _short(line: str) -> str:
    """A scheduler log line without its dashboard and its reasons (after ';' or '(')."""
    line = DASHBOARD.sub("", line).split(";")[0]
    return line[: line.rfind(" (")] if line.count("(") > line.count(")") else line


def fit_job(path: Path, model: Path, *, r: int, max_iter: int | None, fit_args: list[str],
            timeout: float, mem_limit: float, keep: bool = False,
            launcher: list[str] | None = None) -> dict[str, Any]:
    """``sphdist fit`` as a user runs it, measured; the model is removed unless ``keep``.

    ``launcher`` is put before the command (``taskset -c 0,1``: a fit on two cores).
    """
    args = ["fit", "--input", str(path), "--output", str(model), "-r", str(r),
            *(["--max-iter", str(max_iter)] if max_iter is not None else []), *fit_args]
    shutil.rmtree(model, ignore_errors=True)
    marks: list[dict[str, Any]] = []

    def on_line(t: float, line: str, watch: Any) -> None:
        found = ITER_LINE.match(line)
        if found:
            marks.append({"t": round(t, 3), "iteration": int(found[1]),
                          "written": watch.written(), "committed": du(model)})

    res = run_monitored([*(launcher or []), SPHDIST, *args], timeout=timeout,
                        mem_limit_gib=mem_limit, env=_env(), cwd=REPO, on_line=on_line)
    setup = []
    for _, line in res["stderr"]:
        if ITER_LINE.match(line):
            break
        setup.append(line)
    entry: dict[str, Any] = {
        "command": [*(launcher or []), "sphdist", *args], **_measured(res), "marks": marks,
        "log_head": setup[:10],
        "scheduler": next((_short(ln) for ln in setup if SCHEDULER_LINE.search(ln)), None),
        "log_tail": [line for _, line in res["stderr"][-3:]],
    }
    if error_of(res):
        return entry | {"error": error_of(res)}
    entry.update(_read_model(model))
    # checkpoint k is written between the lines of iterations k and k + 1 (the callback that
    # logs a state runs before its checkpoint); checkpoint 0 also holds the initialisation's
    # writes, so the typical checkpoint is the median over k >= 1 where there is one
    written = np.asarray([m["written"] for m in marks], dtype=float)
    per_iter = np.diff(written)
    typical = per_iter[1:] if per_iter.size > 1 else per_iter
    committed = [m["committed"] for m in marks[2:] if m["committed"]]
    entry.update(
        checkpoint_bytes_per_interval=per_iter.tolist(),
        first_checkpoint_bytes=float(per_iter[0]) if per_iter.size else None,
        checkpoint_bytes_per_iteration=float(np.median(typical)) if typical.size else None,
        committed_checkpoint_bytes=float(np.median(committed)) if committed else None,
        final_write_bytes=float(res["total_write_bytes"] - written[-1]) if marks else None,
        model_bytes=du(model), corpus_bytes=du(path),
    )
    if not keep:
        shutil.rmtree(model, ignore_errors=True)
    return entry


def transform_job(model: Path, work_dir: Path, n_docs: int, seed: int, *, timeout: float,
                  mem_limit: float) -> dict[str, Any]:
    """New documents embedded as a user does: ``synth`` text, ``ingest --like``, ``transform``.

    ``n_docs`` documents of another seed are written as JSON Lines (cached), ingested with the
    model's features and idf (``sphdist ingest --like MODEL``) and embedded (``sphdist
    transform``); each step is a process measured apart.
    """
    text = work_dir / f"new-{n_docs // 1000}k-seed{seed}.jsonl"
    if not text.exists():
        subprocess.run([SPHDIST, "synth", "--n-docs", str(n_docs), "--n-topics", "20", "--seed",
                        str(seed), "--doc-length", "120", "-o", str(text)], env=_env(),
                       check=True, capture_output=True)
    new, out = text.with_suffix(".zarr"), text.with_suffix(".embedding.zarr")
    entry: dict[str, Any] = {"documents": n_docs}
    for step, args in (("ingest", ["ingest", str(text), "--like", str(model), "-o", str(new),
                                   "--overwrite"]),
                       ("transform", ["transform", "-m", str(model), "-i", str(new), "-o",
                                      str(out), "--overwrite"])):
        res = run_monitored([SPHDIST, *args], timeout=timeout, mem_limit_gib=mem_limit,
                            env=_env(), cwd=REPO)
        entry[step] = {"command": ["sphdist", *args], **_measured(res)}
        if error_of(res):
            entry[step]["error"] = error_of(res)
            break
    entry["embedding_bytes"] = du(out)
    shutil.rmtree(out, ignore_errors=True)
    return entry


def startup_job(repeat: int = 7) -> dict[str, Any]:
    """Wall seconds of ``sphdist --help`` as a process, ``repeat`` times, and the load."""
    load, seconds = load_average(), []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([SPHDIST, "--help"], capture_output=True, check=True, env=_env())
        seconds.append(time.perf_counter() - t0)
    return {"seconds": seconds, "median_s": float(np.median(seconds)), "load_before": load}


def _commit() -> str:
    """The commit measured.

    ``SPHDIST_BENCH_COMMIT`` where the tree has no git (the copy sent to the device machine).
    """
    if os.environ.get("SPHDIST_BENCH_COMMIT"):
        return os.environ["SPHDIST_BENCH_COMMIT"]

    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True).stdout
    dirty = " with uncommitted changes" if git("status", "--porcelain", "--", "sphdist").strip() \
        else ""
    return git("rev-parse", "--short", "HEAD").strip() + dirty


def _peer_limits(ctx: Any, param: Any, value: tuple[str, ...]) -> dict[str, int]:
    limits = {}
    for item in value:
        peer, _, n = item.partition("=")
        if peer not in PEERS or not n.isdigit():
            raise click.BadParameter(f"{item!r}: expected PEER=DOCUMENTS, PEER one of {PEERS}")
        limits[peer] = int(n)
    return limits


def _sizes(ctx: Any, param: Any, value: str) -> list[int]:
    try:
        return [int(float(v)) for v in value.split(",") if v.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"{value!r}: expected comma-separated integers") from exc


@click.group()
def cli() -> None:
    """Benchmark of sphdist at scale (see the module docstring)."""


@cli.command("run")
@click.option("--sizes", default="100000,250000,1000000,2000000", callback=_sizes,
              show_default=True, help="Synthetic corpus sizes (documents), comma-separated.")
@click.option("--streamed-sizes", default="100000,1000000,2000000", callback=_sizes,
              show_default=True,
              help="Synthetic sizes also fitted with --memory-budget 0 (X streamed).")
@click.option("--cluster-sizes", default="1000000", callback=_sizes, show_default=True,
              help="Synthetic sizes also fitted on a LocalCluster (--n-workers <cores>).")
@click.option("--transform-sizes", default="10000000", callback=_sizes, show_default=True,
              help="Synthetic sizes whose model then embeds 100k new documents (transform).")
@click.option("--newsgroups/--no-newsgroups", default=True, show_default=True,
              help="Include 20 Newsgroups (ingest's default features, a vocabulary).")
@click.option("-r", "--n-components", "r", default=100, show_default=True,
              help="r of every method.")
@click.option("--max-iter", type=int, default=None,
              help="Pass --max-iter to sphdist fit (default: the CLI's own; for smoke runs).")
@click.option("--fit-args", default="", help="More options of sphdist fit (one string).")
@click.option("--seed", default=0, show_default=True,
              help="Seed of the synthetic corpora and of every method.")
@click.option("--peers", default=",".join(PEERS), show_default=True,
              help="Comma-separated subset of " + ", ".join(PEERS) + " (empty: none).")
@click.option("--jobs", default="bare,sphdist,peers", show_default=True,
              help="Which measurements to run on every corpus (a later run of some can be merged "
                   "with `render --merge`).")
@click.option("--peer-max-docs", multiple=True, callback=_peer_limits,
              help="PEER=N: run PEER only on corpora of at most N documents (repeatable).")
@click.option("--fit-timeout", default=3600.0, show_default=True, help="Seconds per fit.")
@click.option("--peer-timeout", default=1800.0, show_default=True, help="Seconds per peer.")
@click.option("--mem-limit-gib", type=float, default=round(0.8 * os.sysconf("SC_PAGE_SIZE")
                                               * os.sysconf("SC_PHYS_PAGES") / 2**30),
              show_default=True, help="Kill a job whose processes hold more than this.")
@click.option("--reingest", is_flag=True, help="Rebuild cached corpora.")
@click.option("--work-dir", type=click.Path(path_type=Path), default=REPO / "work" / "bench",
              show_default=True)
@click.option("--output", type=click.Path(path_type=Path), default=RESULTS / "benchmark",
              show_default=True, help="Output stem: writes .md, .json and .png.")
def run(sizes, streamed_sizes, cluster_sizes, transform_sizes, newsgroups, r, max_iter,
        fit_args, seed, peers, jobs, peer_max_docs, fit_timeout, peer_timeout, mem_limit_gib,
        reingest, work_dir, output) -> None:
    """Build (or reuse) the corpora, measure sphdist and its peers, write the report."""
    jobs = {j for j in jobs.split(",") if j}
    peers = [p for p in peers.split(",") if p] if "peers" in jobs else []
    for given, known, hint in ((set(peers), PEERS, "--peers"),
                               (jobs, ("bare", "sphdist", "peers"), "--jobs")):
        if given - set(known):
            raise click.BadParameter(f"unknown {sorted(given - set(known))}; choose from "
                                     f"{', '.join(known)}", param_hint=hint)
    work_dir.mkdir(parents=True, exist_ok=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "command": "python pipelines/benchmark.py " + shlex.join(sys.argv[1:]),
        "commit": _commit(), "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB",
        "r": r, "max_iter": max_iter, "fit_args": shlex.split(fit_args), "seed": seed,
        "peers": peers, "peer_max_docs": peer_max_docs, "load_start": load_average(),
        "streamed_sizes": streamed_sizes, "cluster_sizes": cluster_sizes,
        "corpora": {}, "notes": list(NOTES),
    }
    limits = {"mem_limit": mem_limit_gib}
    if "sphdist" in jobs:
        results["startup"] = startup_job()
    for name, args in corpus_plan(sizes, newsgroups, seed):
        entry: dict[str, Any] = {"peers": {}}
        results["corpora"][name] = entry
        click.echo(f"[{name}] corpus", err=True)
        entry["ingest"] = build_corpus(name, args, work_dir, reingest=reingest,
                                       timeout=3600, **limits)
        write_report(results, output)
        if "error" in entry["ingest"]:
            continue
        path = work_dir / f"{name}.zarr"
        if "bare" in jobs:
            click.echo(f"[{name}] bare SpMM pass", err=True)
            entry["bare"] = python_job("bare", timeout=fit_timeout, **limits, path=str(path),
                                       r=r, seed=seed)
            write_report(results, output)
        fit = {"path": path, "model": work_dir / f"{name}.model.zarr", "r": r,
               "max_iter": max_iter, "timeout": fit_timeout, **limits}
        n_docs = entry["ingest"]["n_documents"]
        if "sphdist" in jobs:
            click.echo(f"[{name}] sphdist fit", err=True)
            entry["sphdist"] = fit_job(**fit, fit_args=results["fit_args"],
                                       keep=n_docs in transform_sizes)
            write_report(results, output)
            if n_docs in transform_sizes and ok(entry["sphdist"]):
                click.echo(f"[{name}] sphdist transform of 100k new documents", err=True)
                entry["transform"] = transform_job(fit["model"], work_dir, 100_000, seed + 1,
                                                   timeout=fit_timeout, **limits)
                shutil.rmtree(fit["model"], ignore_errors=True)
                write_report(results, output)
        if "sphdist" in jobs and n_docs in streamed_sizes:
            # the other side of --memory-budget: X read from the store every pass
            click.echo(f"[{name}] sphdist fit --memory-budget 0", err=True)
            entry["sphdist_streamed"] = fit_job(
                **fit, fit_args=[*results["fit_args"], "--memory-budget", "0"])
            write_report(results, output)
        if "sphdist" in jobs and n_docs in cluster_sizes:
            # the LocalCluster a user asks for with --n-workers: what its processes cost
            click.echo(f"[{name}] sphdist fit --n-workers {os.cpu_count()}", err=True)
            entry["sphdist_cluster"] = fit_job(
                **fit, fit_args=[*results["fit_args"], "--n-workers", str(os.cpu_count())])
            write_report(results, output)
        for peer in peers:
            if n_docs > peer_max_docs.get(peer, n_docs):
                entry["peers"][peer] = {"error": f"not run (--peer-max-docs "
                                                 f"{peer}={peer_max_docs[peer]})"}
                continue
            click.echo(f"[{name}] {peer}", err=True)
            entry["peers"][peer] = python_job(peer, timeout=peer_timeout, **limits,
                                              path=str(path), r=r, seed=seed)
            write_report(results, output)
    results["load_end"] = load_average()
    write_report(results, output)
    plot(results, output)
    click.echo(output.with_suffix(".md").read_text())


#: The 16-core rows of the scaling table (issue 29 item 3), measured on a 16-core machine by
#: the command :func:`_scaling_command` prints for them.
SCALING_16_CORES = {"threads": [1, 2, 4, 8, 16], "clusters": ["4x4", "16x1"]}


def _scaling_command(n_docs: int, threads: list[int], clusters: list[str], output: str) -> str:
    return (f"python pipelines/benchmark.py scaling --n-docs {n_docs} --threads "
            f"{','.join(map(str, threads))} --clusters {','.join(clusters)} --output {output}")


def _cpus_by_core(cpus: list[int] | None = None,
                  sysfs: Path = Path("/sys/devices/system/cpu")) -> list[int]:
    """The CPUs of this process, one of every physical core first, their hyperthread siblings after.

    Read from ``sysfs/cpu*/topology`` (package and core ids); where that is missing, the CPUs
    in number order. So n threads get n physical cores while there are that many: two threads
    on ``cpu0`` and ``cpu1`` may otherwise share one core. ``cpus``: this process's affinity
    unless given.
    """
    cpus = sorted(os.sched_getaffinity(0) if cpus is None else cpus)
    seen, firsts, seconds = set(), [], []
    for cpu in cpus:
        topology = sysfs / f"cpu{cpu}" / "topology"
        try:
            core = tuple((topology / name).read_text().strip()
                         for name in ("physical_package_id", "core_id"))
        except OSError:
            return cpus
        (seconds if core in seen else firsts).append(cpu)
        seen.add(core)
    return firsts + seconds


def _on_cores(n: int) -> list[str]:
    """A launcher that runs a command on ``n`` cores: one CPU of each physical core first.

    ``taskset``, else Python's ``os.sched_setaffinity`` before an exec (no util-linux).
    """
    cpus = _cpus_by_core()[:n]
    if shutil.which("taskset"):
        return ["taskset", "-c", ",".join(map(str, cpus))]
    return [sys.executable, "-c", f"import os, sys; os.sched_setaffinity(0, {cpus!r}); "
            "os.execvp(sys.argv[1], sys.argv[1:])"]


def _cluster_shape(text: str) -> tuple[int, int]:
    workers, threads = text.lower().split("x")
    return int(workers), int(threads)


def scaling_rows(runs: list[dict[str, Any]]) -> list[str]:
    """The scaling table's markdown rows: a measured run, or a row 'not measured'."""
    base = next((r for r in runs if r.get("threads") == 1 and r.get("s_per_iter")), None)
    two = next((r for r in runs if r.get("threads") == 2 and r.get("s_per_iter")), None)
    rows = []
    for run in runs:
        if "not_measured" in run:
            rows.append(f"| {run['label']} | not measured (the command below) | | | | | | |")
            continue
        if "error" in run:
            rows.append(f"| {run['label']} | error: {run['error']} | | | | | | |")
            continue
        it, med = run.get("s_per_iter"), run.get("s_per_iter_median")
        speed = (f"{base['s_per_iter'] / it:.2f}x" if base and it else "")
        speed_2 = (f"{two['s_per_iter'] / it:.2f}x" if two and it else "")
        rows.append(
            f"| {run['label']} | {run['n_iter']} | {it:.2f} (median {med:.2f}) | "
            f"{run['init_s']:.1f} | {run['wall_s']:.1f} | {speed} | {speed_2} | "
            f"{' / '.join(f'{x:.1f}' for x in run['load_before'])} |"
        )
    return rows


def write_scaling(results: dict[str, Any], output: Path) -> None:
    """``output``.md and .json of a scaling run."""
    output.with_suffix(".json").write_text(json.dumps(results, indent=1, default=str))
    objectives = {tuple(r["objective"]) for r in results["runs"] if r.get("objective")}
    lines = [
        f"# Scaling of one fit: {results['corpus']}",
        "",
        f"Generated by `{results['command']}` at commit {results['commit']} on "
        f"{results['machine']}, {results['started']}; 1/5/15-minute load average "
        f"{' / '.join(f'{x:.1f}' for x in results['load_start'])} at the start and "
        f"{' / '.join(f'{x:.1f}' for x in results.get('load_end', []))} at the end (each run's "
        "load before it is in its row). Each run is `sphdist fit --input CORPUS --output "
        f"MODEL {' '.join(results['fit_args'])}` in its own process, every other option at "
        "its default; n threads = dask's threaded scheduler on n CPUs (`taskset -c`, one CPU "
        "of each physical core first, hyperthread siblings after: sphdist takes the "
        "process's CPU affinity), W x T = "
        "`--n-workers W --threads-per-worker T` (a LocalCluster). s / iteration: the "
        "iterations' wall seconds from the model (checkpoints included), init: the scan and "
        "the first pass, whole fit: the command's wall seconds, start-up and the final write "
        "included. Speed-up: one thread's (or two threads') s / iteration over the row's. The "
        "runs go from the most cores to the fewest, so a run cut short by a time limit loses "
        "the costliest rows.",
        "",
        "| run | iterations | s / iteration | init s | whole fit s | speed-up vs 1 thread | "
        "vs 2 threads | load before (1/5/15 min) |",
        "|---|---:|---|---:|---:|---:|---:|---|",
        *scaling_rows(results["runs"]),
        "",
        *[f"Not measured here (this machine has {results['machine']}): the rows of a 16-core "
          f"machine, measured there by `{command}`.\n"
          for command in sorted({r["not_measured"] for r in results["runs"]
                                 if "not_measured" in r})],
        ("Every measured run gave the same objective history, bitwise."
         if len(objectives) == 1 else
         f"The measured runs gave {len(objectives)} different objective histories."
         if objectives else ""),
        *[f"\n{note}" for note in results.get("notes", [])],
    ]
    output.with_suffix(".md").write_text("\n".join(lines) + "\n")


@cli.command("scaling")
@click.option("--n-docs", default=1_000_000, show_default=True,
              help="Documents of the synthetic corpus (sphdist synth, 20 topics, seed 0, "
                   "120 tokens, 2**18 features).")
@click.option("--threads", default="1,2", show_default=True,
              help="Thread counts to measure on this machine (at most its cores).")
@click.option("--clusters", default="", show_default=True,
              help="LocalClusters to measure, as WORKERSxTHREADS (e.g. 4x4,16x1).")
@click.option("-r", "--n-components", "r", default=100, show_default=True)
@click.option("--fit-args", default="--tol 1e-4 --seed 0", show_default=True,
              help="More options of sphdist fit (one string).")
@click.option("--fit-timeout", default=3600.0, show_default=True, help="Seconds per fit.")
@click.option("--mem-limit-gib", type=float, default=round(0.8 * os.sysconf("SC_PAGE_SIZE")
              * os.sysconf("SC_PHYS_PAGES") / 2**30, 1), show_default=True)
@click.option("--work-dir", type=click.Path(path_type=Path), default=REPO / "work" / "bench",
              show_default=True)
@click.option("--output", type=click.Path(path_type=Path), default=RESULTS / "scaling",
              show_default=True)
@click.option("--note", "notes", multiple=True, help="A line added to the report's notes.")
def scaling(n_docs, threads, clusters, r, fit_args, fit_timeout, mem_limit_gib, work_dir,
            output, notes) -> None:
    """The scaling table (issue 29 item 3): one fit on 1, 2, ... threads and LocalClusters.

    The 16-core rows this machine cannot run are printed as 'not measured', with the one
    command that measures them on a 16-core machine.
    """
    cores = len(os.sched_getaffinity(0))
    threads_list = [int(t) for t in threads.split(",") if t]
    if max(threads_list, default=1) > cores:
        raise click.BadParameter(f"this machine has {cores} cores", param_hint="--threads")
    cluster_list = [c for c in clusters.split(",") if c]
    work_dir.mkdir(parents=True, exist_ok=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    ((name, args),) = corpus_plan([n_docs], False, 0)
    results: dict[str, Any] = {
        "command": "python pipelines/benchmark.py scaling " + shlex.join(sys.argv[2:]),
        "commit": _commit(), "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {cores} cores, "
                   f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB",
        "corpus": f"{name} (`sphdist {' '.join(args)}`)", "r": r,
        "fit_args": ["-r", str(r), *shlex.split(fit_args)], "load_start": load_average(),
        "runs": [], "notes": list(notes),
    }
    click.echo(f"[{name}] corpus", err=True)
    ingest = build_corpus(name, args, work_dir, reingest=False, timeout=7200,
                          mem_limit=mem_limit_gib)
    if "error" in ingest:
        raise click.ClickException(f"the corpus could not be made: {ingest['error']}")
    fit = {"path": work_dir / f"{name}.zarr", "model": work_dir / f"{name}.scaling.zarr",
           "r": r, "max_iter": None, "timeout": fit_timeout, "mem_limit": mem_limit_gib}
    plan: list[tuple[str, dict[str, Any]]] = [
        (f"{t} thread{'s' if t > 1 else ''} (this machine)",
         {"threads": t, "launcher": _on_cores(t), "extra": []})
        for t in threads_list
    ] + [
        (f"LocalCluster {c} (this machine)",
         {"cluster": c, "launcher": None,
          "extra": ["--n-workers", str(_cluster_shape(c)[0]),
                    "--threads-per-worker", str(_cluster_shape(c)[1])]})
        for c in cluster_list
    ]
    # the most cores first (threads before a LocalCluster of as many): the cheapest runs
    plan.sort(key=lambda item: -(item[1].get("threads")
                                 or _cluster_shape(item[1]["cluster"])[0]
                                 * _cluster_shape(item[1]["cluster"])[1]))
    for label, how in plan:
        click.echo(f"[{name}] {label}", err=True)
        run = fit_job(**fit, fit_args=[*shlex.split(fit_args), *how["extra"]],
                      launcher=how["launcher"])
        run = {k: v for k, v in run.items() if k not in ("marks", "log_head", "log_tail")}
        results["runs"].append({"label": label, **{k: how[k] for k in ("threads", "cluster")
                                                   if k in how}, **run})
        write_scaling(results, output)
    if cores < 16:
        command = _scaling_command(1_000_000, SCALING_16_CORES["threads"],
                                   SCALING_16_CORES["clusters"], "pipelines/results/scaling-16")
        results["runs"] += [
            {"label": f"{t} thread{'s' if t > 1 else ''} (16-core machine, 1M documents)",
             "not_measured": command} for t in SCALING_16_CORES["threads"]
        ] + [
            {"label": f"LocalCluster {c} (16-core machine, 1M documents)",
             "not_measured": command} for c in SCALING_16_CORES["clusters"]
        ]
    results["load_end"] = load_average()
    write_scaling(results, output)
    click.echo(output.with_suffix(".md").read_text())


@cli.command("render")
@click.option("--results", type=click.Path(path_type=Path, exists=True),
              default=RESULTS / "benchmark.json", show_default=True)
@click.option("--merge", "others", multiple=True, type=click.Path(path_type=Path, exists=True),
              help="Results JSON of another run: its jobs that this one lacks or failed are "
                   "added, with a note (repeatable).")
@click.option("--note", "notes", multiple=True, help="A line added to the report's notes.")
def render(results: Path, others: tuple[Path, ...], notes: tuple[str, ...]) -> None:
    """Rewrite the .md, .png and .json from a results JSON."""
    data = json.loads(results.read_text())
    for other in others:
        merge(data, json.loads(other.read_text()))
    data["notes"] = [*data.get("notes", []), *notes]
    stem = results.with_suffix("")
    write_report(data, stem)
    plot(data, stem)
    click.echo(stem.with_suffix(".md").read_text())


if __name__ == "__main__":
    cli()
