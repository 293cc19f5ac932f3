"""Performance at scale: sphdist against a bare SpMM pass and its peers, on the same corpora.

For each corpus (synthetic collections of ``--sizes`` documents from
:func:`sphdist.text.synth.synth`,
2**18 hashed features, ~100 nonzeros per document; and the 20 Newsgroups archive) this measures,
in one run on one machine:

* **ingest**: seconds and peak RSS to write the ``corpus.zarr``;
* **sphdist** (Spherical PCA by :func:`sphdist.jobs.fit.fit_corpus`, the job ``sphdist fit``
  runs, r components, a 2-worker x 1-thread ``LocalCluster``; the model is written at
  iteration 0 and at the end, outside the per-iteration seconds): seconds per iteration,
  iterations and seconds to a relative objective change below ``--tol``, passes over X per
  iteration (chunk-read tasks in the scheduler's task stream divided by chunks and passes),
  peak RSS of every worker and of the driver;
* **bare SpMM pass**: ``A = X_c^T U`` and ``X_c A^T`` over the same chunks with SciPy in the
  driver process (one thread, chunks already in memory; read time reported apart) -- the floor
  an iteration is compared with;
* **peers**, each in its own process: scikit-learn ``TruncatedSVD`` (randomized, in memory),
  gensim ``LsiModel`` (one pass, same r), dask-ml ``TruncatedSVD`` and sphdist's ``BAE``
  (:class:`sphdist.BAE`, on the same kind of cluster). Time and peak RSS are reported
  as ratios to sphdist's time to tolerance and peak RSS.

Every measured job runs in a fresh subprocess (so peak RSS is its own) with a time limit; a peer
that fails or times out is reported with its error, not dropped. The system load average
(``os.getloadavg``) is recorded before every job: the machine may be shared.

Run from the repository root (small sizes first)::

    .venv/bin/python pipelines/benchmark.py --sizes 20000 --iterations 5
    .venv/bin/python pipelines/benchmark.py            # 100k, 250k, 500k, 1M + 20 Newsgroups

Writes ``pipelines/results/benchmark.{md,json,png}``; corpora are cached under
``work/bench/`` (``--work-dir``) with their ingest figures.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "pipelines" / "results"
N_FEATURES = 2**18
PEERS = ("sklearn", "gensim", "daskml", "bae")


def _peak_rss_gib() -> float:
    """Peak resident set size of this process, GiB (Linux ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ---------------------------------------------------------------------------------------------
# jobs (each runs in its own process: `benchmark.py job KIND ARGS_JSON`, prints one JSON line)
# ---------------------------------------------------------------------------------------------
def job_ingest(path: str, n_docs: int | None, seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    if n_docs is None:
        from sphdist.datasets import newsgroups_archive
        from sphdist.text.ingest import ingest

        corpus = ingest(
            newsgroups_archive(), path, remove=("headers", "footers", "quotes"),
            n_features=N_FEATURES, overwrite=True, seed=seed,
        )
    else:
        from sphdist.io.corpus import Corpus
        from sphdist.text.synth import synth

        synth(path, n_docs=n_docs, n_topics=20, seed=seed, doc_length=120, format="corpus",
              n_features=N_FEATURES, chunk_size=4096, overwrite=True)
        corpus = Corpus(path)
    return {
        "ingest_s": time.perf_counter() - t0, "ingest_peak_rss_gib": _peak_rss_gib(),
        "n_documents": corpus.shape[1], "n_features": corpus.shape[0], "nnz": corpus.nnz,
        "n_chunks": corpus.n_chunks,
    }


def _worker_peak_rss() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _cluster(n_workers: int):
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=n_workers, threads_per_worker=1, processes=True, memory_limit="8GiB",
        host="127.0.0.1", dashboard_address="127.0.0.1:0",
    )
    return cluster, Client(cluster)


def bare_spmm(corpus: Any, r: int, seed: int) -> dict[str, float]:
    """One bare SciPy pass: ``A = X_c^T U`` then ``X_c A^T`` per chunk, one thread."""
    from threadpoolctl import threadpool_limits

    from sphdist.core.kernels import random_orthonormal

    m = corpus.shape[0]
    U = random_orthonormal(m, r, np.random.RandomState(seed))
    read = spmm = 0.0
    with threadpool_limits(limits=1):
        for i in range(corpus.n_chunks):
            t0 = time.perf_counter()
            X_c = corpus.read_chunk(i)
            t1 = time.perf_counter()
            A = np.asarray(X_c.T @ U)
            np.asarray(X_c @ A)
            spmm += time.perf_counter() - t1
            read += t1 - t0
    return {"bare_spmm_s": spmm, "bare_read_s": read}


def job_sphdist(
    path: str, r: int, iterations: int, tol: float, seed: int, n_workers: int,
    max_partials: int, split_every: int, dtype: str, polar: str, bare: bool,
    partials: str = "auto",
) -> dict[str, Any]:
    from distributed import get_task_stream

    from sphdist.core import kernels
    from sphdist.io.corpus import Corpus
    from sphdist.jobs.fit import fit_corpus

    corpus = Corpus(path)
    out: dict[str, Any] = {"load_before": _load()}
    if bare:
        out.update(bare_spmm(corpus, r, seed))
    u_step_s: list[float] = []
    u_step = kernels.u_step

    def timed_u_step(*args: Any, **kwargs: Any) -> np.ndarray:
        t0 = time.perf_counter()
        U = u_step(*args, **kwargs)
        u_step_s.append(time.perf_counter() - t0)
        return U

    kernels.u_step = timed_u_step
    cluster, client = _cluster(n_workers)
    progress = Path(path).with_suffix(".progress.json")

    states: list[Any] = []
    model = Path(path).with_suffix(".model.zarr")

    def record(state: Any) -> None:  # what a run stopped early still tells
        states[:] = [state]
        progress.write_text(json.dumps({
            "iteration": state.iteration, "seconds": state.seconds,
            "objective": state.objective, "u_step_s": u_step_s,
            "worker_peak_rss_gib": sorted(client.run(_worker_peak_rss).values()),
            "driver_peak_rss_gib": _peak_rss_gib(), "load": _load(), **out,
        }))

    try:
        X = corpus.to_dask()
        t0 = time.perf_counter()
        with get_task_stream(client) as ts:
            fit_corpus(
                path, model, n_components=r, max_iter=iterations, tol=0.0, random_state=seed,
                max_partials=max_partials, split_every=split_every, dtype=dtype, polar=polar,
                partials=partials, checkpoint_every=iterations + 1, overwrite=True,
                callback=record,
            )
        wall = time.perf_counter() - t0
        (state,) = states
        reads = sum(1 for t in ts.data if str(t["key"]).find(X.name) >= 0)
        workers = client.run(_worker_peak_rss)
    finally:
        client.close()
        cluster.close()
        shutil.rmtree(model, ignore_errors=True)
    f = np.asarray(state.objective)
    rel = np.abs(np.diff(f)) / np.abs(f[:-1])
    below = np.flatnonzero(rel < tol)
    seconds = np.asarray(state.seconds)
    it_tol = int(below[0]) + 1 if below.size else None
    out.update(
        seconds=state.seconds, objective=state.objective, u_step_s=u_step_s, wall_s=wall,
        s_per_iter=float(np.mean(seconds[1:])) if len(seconds) > 1 else None,
        init_s=float(seconds[0]), iterations_to_tol=it_tol,
        time_to_tol_s=float(seconds[: it_tol + 1].sum()) if it_tol else None,
        passes_per_iteration=reads / corpus.n_chunks / (state.iteration + 1),
        chunk_reads=reads, worker_peak_rss_gib=sorted(workers.values()),
        driver_peak_rss_gib=_peak_rss_gib(), load_after=_load(),
        params=dict(max_partials=max_partials, split_every=split_every, dtype=dtype,
                    polar=polar, n_workers=n_workers, partials=partials),
    )
    return out


def _in_memory(path: str) -> Any:
    """X as one CSR (n documents x m features), scikit-learn's orientation."""
    import scipy.sparse as sp

    from sphdist.io.corpus import Corpus

    corpus = Corpus(path)
    Xc = sp.hstack([corpus.read_chunk(i) for i in range(corpus.n_chunks)], format="csc")
    return Xc.T.tocsr()


def job_sklearn(path: str, r: int, seed: int) -> dict[str, Any]:
    from sklearn.decomposition import TruncatedSVD

    t0 = time.perf_counter()
    X = _in_memory(path)
    t1 = time.perf_counter()
    TruncatedSVD(n_components=r, algorithm="randomized", random_state=seed).fit_transform(X)
    return {"load_s": t1 - t0, "fit_s": time.perf_counter() - t1,
            "peak_rss_gib": _peak_rss_gib()}


def job_gensim(path: str, r: int, seed: int) -> dict[str, Any]:
    import logging

    from gensim.matutils import Sparse2Corpus
    from gensim.models import LsiModel

    logging.getLogger("gensim").setLevel(logging.WARNING)
    t0 = time.perf_counter()
    X = _in_memory(path)
    t1 = time.perf_counter()
    LsiModel(
        Sparse2Corpus(X, documents_columns=False), num_topics=r, id2word=None, onepass=True,
        chunksize=20000, random_seed=seed,
    )
    return {"load_s": t1 - t0, "fit_s": time.perf_counter() - t1,
            "peak_rss_gib": _peak_rss_gib()}


def job_daskml(path: str, r: int, seed: int, n_workers: int) -> dict[str, Any]:
    from dask_ml.decomposition import TruncatedSVD

    from sphdist.io.corpus import Corpus

    cluster, client = _cluster(n_workers)
    try:
        X = Corpus(path).to_dask().T  # (n, m), sparse blocks, like SphericalPCA's dask input
        t0 = time.perf_counter()
        model = TruncatedSVD(n_components=r, algorithm="randomized", random_state=seed)
        model.fit(X)
        fit_s = time.perf_counter() - t0
        workers = client.run(_worker_peak_rss)
    finally:
        client.close()
        cluster.close()
    return {"fit_s": fit_s, "peak_rss_gib": max(workers.values()) + _peak_rss_gib(),
            "worker_peak_rss_gib": sorted(workers.values())}


def job_bae(path: str, r: int, seed: int, n_workers: int) -> dict[str, Any]:
    from sphdist.io.corpus import Corpus
    from sphdist.methods.bae import BAE

    cluster, client = _cluster(n_workers)
    try:
        X = Corpus(path).to_dask().T
        t0 = time.perf_counter()
        BAE(n_components=r, random_state=seed).fit(X)
        fit_s = time.perf_counter() - t0
        workers = client.run(_worker_peak_rss)
    finally:
        client.close()
        cluster.close()
    return {"fit_s": fit_s, "worker_peak_rss_gib": sorted(workers.values()),
            "driver_peak_rss_gib": _peak_rss_gib()}


def run_levers(
    name: str, path: Path, n_chunks: int, *, r: int, iterations: int, tol: float, seed: int,
    n_workers: int, max_partials: int, split_every: int, on_result: Any = None,
) -> dict[str, Any]:
    """The lever variants on one corpus, each in its own process, after one bare SpMM pass."""
    from sphdist.io.corpus import Corpus

    base = dict(path=str(path), r=r, iterations=iterations, tol=tol, seed=seed,
                n_workers=n_workers, split_every=split_every, bare=False)
    variants = {
        "one dense partial per chunk (pre-change structure)":
            dict(max_partials=n_chunks, dtype="float64", polar="auto", partials="dense"),
        f"blocks (max_partials={max_partials}), float64, polar gram, dense partials":
            dict(max_partials=max_partials, dtype="float64", polar="auto", partials="dense"),
        "blocks, float64, polar gram, row-sparse partials (default)":
            dict(max_partials=max_partials, dtype="float64", polar="auto", partials="auto"),
        "blocks, row-sparse, float32 compute": dict(max_partials=max_partials,
                                                    dtype="float32", polar="auto"),
        "blocks, row-sparse, polar by SVD": dict(max_partials=max_partials, dtype="float64",
                                                 polar="svd"),
    }
    bare = bare_spmm(Corpus(path), r, seed)
    out: dict[str, Any] = {"corpus": name, "bare_spmm_s": bare["bare_spmm_s"], "runs": {}}
    for label, v in variants.items():
        click.echo(f"[levers] {label}", err=True)
        out["runs"][label] = run_job("sphdist", 3600, **base, **v)
        if on_result is not None:
            on_result(out)
    return out


JOBS = {"ingest": job_ingest, "sphdist": job_sphdist, "sklearn": job_sklearn,
        "gensim": job_gensim, "daskml": job_daskml, "bae": job_bae}


def run_job(kind: str, timeout: float, **kwargs: Any) -> dict[str, Any]:
    """Run one job in a fresh process; its result, or ``{"error": ...}``."""
    load = _load()
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "job", kind, json.dumps(kwargs)],
            capture_output=True, text=True, timeout=timeout, cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "load_before": load}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()][-1:]
        return {"error": (tail[0] if tail else f"exit status {proc.returncode}")[:300],
                "load_before": load, "elapsed_s": time.perf_counter() - t0}
    result = json.loads(lines[-1])
    result.setdefault("load_before", load)
    return result


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def _fmt(x: Any, nd: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return f"{x:.{nd}f}"


def _sphdist_peak(s: dict[str, Any]) -> float | None:
    if "error" in s:
        return None
    return float(sum(s["worker_peak_rss_gib"]) + s["driver_peak_rss_gib"])


def _peer_cells(peer: dict[str, Any] | None, s: dict[str, Any]) -> tuple[str, str]:
    if peer is None:
        return "not run", "-"
    if "error" in peer:
        return f"failed: {peer['error']}", "-"
    base_t = s.get("time_to_tol_s") or (s["init_s"] + sum(s["seconds"][1:]))
    t = peer["fit_s"]
    if "worker_peak_rss_gib" in peer:
        mem = sum(peer["worker_peak_rss_gib"]) + peer.get("driver_peak_rss_gib", 0.0)
    else:
        mem = peer["peak_rss_gib"]
    base_m = _sphdist_peak(s)
    return (f"{t:.1f} s ({t / base_t:.2f}x)",
            f"{mem:.2f} GiB ({mem / base_m:.2f}x)" if base_m else f"{mem:.2f} GiB")


def write_report(results: dict[str, Any], out: Path) -> None:
    from sphdist.io import atomic_path

    corpora = results["corpora"]
    lines = [
        "# sphdist at scale: iteration cost, memory and peers",
        "",
        f"Generated by `pipelines/benchmark.py` on {results['started']} "
        f"({results['machine']}). r = {results['r']}, {results['iterations']} iterations, "
        f"tol = {results['tol']:g}, 2**18 hashed features, LocalCluster of "
        f"{results['n_workers']} workers x 1 thread. Load average (1, 5, 15 min) at start: "
        f"{results['load_start']}, at end: {results.get('load_end', '(running)')} "
        "(shared machine: absolute times carry that noise; ratios are measured in the same run).",
        "",
        "## sphdist",
        "",
        "| corpus | documents | nnz | chunks | ingest s | s/iter mean (median) | bare SpMM s | "
        "iter / bare SpMM, mean (median) | iter / (SpMM + read) | passes / iter | "
        "iters to tol | s to tol | worker peak RSS GiB | driver peak RSS GiB | U-step s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, c in corpora.items():
        s = c.get("sphdist", {"error": "not run yet"})
        ing = c.get("ingest", {})
        if "error" in s:
            lines.append(f"| {name} | {ing.get('n_documents', '-')} | | | | failed: "
                         f"{s['error']} ||||||||||")
            continue
        spi = s["s_per_iter"]
        med = float(np.median(s["seconds"][1:]))
        to_tol = s["iterations_to_tol"] or f"> {results['iterations']}"
        lines.append(
            f"| {name} | {ing.get('n_documents')} | {ing.get('nnz')} | {ing.get('n_chunks')} | "
            f"{_fmt(ing.get('ingest_s'), 1)} | {_fmt(spi)} ({_fmt(med)}) | "
            f"{_fmt(s['bare_spmm_s'])} | "
            f"{_fmt(spi / s['bare_spmm_s'])} ({_fmt(med / s['bare_spmm_s'])}) | "
            f"{_fmt(spi / (s['bare_spmm_s'] + s['bare_read_s']))} | "
            f"{_fmt(s['passes_per_iteration'])} | {to_tol} | "
            f"{_fmt(s['time_to_tol_s'], 1)} | "
            f"{', '.join(_fmt(w) for w in s['worker_peak_rss_gib'])} | "
            f"{_fmt(s['driver_peak_rss_gib'])} | {_fmt(float(np.mean(s['u_step_s'] or [0])))} |"
        )
    lines += [
        "",
        "*iter / bare SpMM*: mean seconds per iteration (2 workers) divided by one single-process,"
        " one-thread SciPy pass computing `U^T X_c` and `X_c V_c^T` over the same chunks held in "
        "memory; *iter / (SpMM + read)* also counts reading the chunks from the store, which an "
        "iteration does. *passes / iter*: chunk-read tasks in the scheduler's task stream / "
        "(chunks x (iterations + 1)).",
        "",
        "## Peers (time and peak RSS as ratios to sphdist)",
        "",
        "sphdist's time is its time to tolerance (initialisation included; all iterations if the"
        " tolerance was not reached), its memory the sum of the peak RSS of its workers and "
        "driver. Peers fit in one process (in memory) unless noted.",
        "",
        "| corpus | sklearn TruncatedSVD time | sklearn memory | gensim LsiModel time | "
        "gensim memory | dask-ml TruncatedSVD time | dask-ml memory | sphdist BAE time | "
        "BAE memory |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, c in corpora.items():
        s = c.get("sphdist", {"error": "not run yet"})
        if "error" in s:
            continue
        cells = []
        for peer in PEERS:
            cells += list(_peer_cells(c.get("peers", {}).get(peer), s))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for note in results.get("notes", []):
        lines += ["", note]
    levers = results.get("levers")
    if levers:
        lines += ["", "## Levers (same corpus, same run)", "",
                  "| variant | s/iter | iter / bare SpMM | worker peak RSS GiB | "
                  "mean U-step s | final objective |", "|---|---|---|---|---|---|"]
        for name, s in levers["runs"].items():
            if "error" in s:
                lines.append(f"| {name} | failed: {s['error']} |||||")
                continue
            lines.append(
                f"| {name} | {_fmt(s['s_per_iter'])} | "
                f"{_fmt(s['s_per_iter'] / levers['bare_spmm_s'])} | "
                f"{', '.join(_fmt(w) for w in s['worker_peak_rss_gib'])} | "
                f"{_fmt(float(np.mean(s['u_step_s'] or [0])), 3)} | {s['objective'][-1]!r} |"
            )
        lines += ["", f"Lever corpus: {levers['corpus']}; bare SpMM pass "
                  f"{levers['bare_spmm_s']:.2f} s.", "",
                  "*final objective* is printed with all its digits: variants with the same "
                  "grouping of chunks and float64 compute must agree bitwise (the polar route "
                  "and float32 change the arithmetic; one partial per chunk changes the order "
                  "of the sums). *dense partials*: every block returns an (m, r) float64 "
                  "`X V^T` partial (210 MB at m = 2**18, r = 100), summed densely up the tree "
                  "and sent densely to the driver. *row-sparse partials*: a block returns only "
                  "the rows of the features its chunks contain (sorted indices + rows), the tree "
                  "adds them on the union of rows, and the driver densifies once; a partial "
                  "whose rows exceed m / 2 stays dense."]
    with atomic_path(out.with_suffix(".md")) as tmp:
        tmp.write_text("\n".join(lines) + "\n")
    with atomic_path(out.with_suffix(".json")) as tmp:
        tmp.write_text(json.dumps(results, indent=1))


def plot(results: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sphdist.io import atomic_path

    synth = [(c["ingest"]["n_documents"], c) for name, c in results["corpora"].items()
             if name.startswith("synthetic") and "error" not in c.get("sphdist", {"error": 1})]
    synth.sort(key=lambda t: t[0])
    if not synth:
        return
    n = np.array([t[0] for t in synth])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax1.plot(n, [c["sphdist"]["s_per_iter"] for _, c in synth], "o-", label="sphdist s/iteration")
    ax1.plot(n, [c["sphdist"]["bare_spmm_s"] for _, c in synth], "s--",
             label="bare SpMM pass (1 process)")
    for peer, marker in (("sklearn", "^"), ("gensim", "v"), ("bae", "D")):
        pts = [(k, c["peers"][peer]["fit_s"]) for k, (_, c) in zip(n, synth, strict=True)
               if peer in c.get("peers", {}) and "fit_s" in c["peers"][peer]]
        if pts:
            ax1.plot(*zip(*pts, strict=True), marker + ":", label=f"{peer} fit (total)")
    tol = [(k, c["sphdist"]["time_to_tol_s"]) for k, (_, c) in zip(n, synth, strict=True)
           if c["sphdist"]["time_to_tol_s"]]
    if tol:
        ax1.plot(*zip(*tol, strict=True), "o-", label="sphdist time to tol (total)")
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel("documents")
    ax1.set_ylabel("seconds")
    ax1.legend(fontsize=7)
    ax1.set_title("time")
    ax2.plot(n, [max(c["sphdist"]["worker_peak_rss_gib"]) for _, c in synth], "o-",
             label="sphdist max worker peak RSS")
    ax2.plot(n, [c["sphdist"]["driver_peak_rss_gib"] for _, c in synth], "s-",
             label="sphdist driver peak RSS")
    for peer, marker in (("sklearn", "^"), ("gensim", "v")):
        pts = [(k, c["peers"][peer]["peak_rss_gib"]) for k, (_, c) in zip(n, synth, strict=True)
               if peer in c.get("peers", {}) and "peak_rss_gib" in c["peers"][peer]]
        if pts:
            ax2.plot(*zip(*pts, strict=True), marker + ":", label=f"{peer} peak RSS")
    ax2.set_xscale("log")
    ax2.set_xlabel("documents")
    ax2.set_ylabel("GiB")
    ax2.legend(fontsize=7)
    ax2.set_title("peak memory")
    fig.suptitle(f"sphdist scaling, r = {results['r']}, 2**18 features, "
                 f"{results['n_workers']} workers")
    fig.tight_layout()
    with atomic_path(out.with_suffix(".png")) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------
@click.group()
def cli() -> None:
    """Benchmark of sphdist at scale (see the module docstring)."""


@cli.command("job", hidden=True)
@click.argument("kind", type=click.Choice(sorted(JOBS)))
@click.argument("args")
def job(kind: str, args: str) -> None:
    """Run one measured job in this process and print its result as one JSON line."""
    result = JOBS[kind](**json.loads(args))
    click.echo(json.dumps(result))


def _sizes(ctx: Any, param: Any, value: str) -> list[int]:
    try:
        return [int(float(v)) for v in value.split(",") if v.strip()]
    except ValueError as exc:
        raise click.BadParameter(f"{value!r}: expected comma-separated integers") from exc


@cli.command("run")
@click.option("--sizes", default="100000,250000,500000,1000000", callback=_sizes,
              show_default=True, help="Synthetic corpus sizes (documents), comma-separated.")
@click.option("--newsgroups/--no-newsgroups", default=True, show_default=True,
              help="Include the 20 Newsgroups archive (all 20 groups).")
@click.option("--n-components", "r", default=100, show_default=True)
@click.option("--iterations", default=20, show_default=True)
@click.option("--tol", default=1e-4, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--n-workers", default=2, show_default=True)
@click.option("--max-partials", default=8, show_default=True)
@click.option("--split-every", default=8, show_default=True)
@click.option("--peers", default=",".join(PEERS), show_default=True,
              help="Comma-separated subset of " + ", ".join(PEERS) + " (empty: none).")
@click.option("--peer-timeout", default=900.0, show_default=True,
              help="Seconds before a peer job is stopped and reported as timed out.")
@click.option("--levers/--no-levers", default=True, show_default=True,
              help="Also run lever variants (one partial per chunk, dense vs row-sparse partials, "
                   "float32, SVD polar factor) "
                   "on the smallest synthetic corpus.")
@click.option("--work-dir", type=click.Path(path_type=Path), default=REPO / "work" / "bench",
              show_default=True)
@click.option("--output", type=click.Path(path_type=Path), default=RESULTS / "benchmark",
              show_default=True, help="Output stem: writes .md, .json and .png.")
def run(sizes, newsgroups, r, iterations, tol, seed, n_workers, max_partials, split_every,
        peers, peer_timeout, levers, work_dir, output) -> None:
    """Ingest (or reuse) the corpora, measure sphdist and its peers, write the report."""
    peers = [p for p in peers.split(",") if p]
    unknown = set(peers) - set(PEERS)
    if unknown:
        raise click.BadParameter(f"unknown peers {sorted(unknown)}", param_hint="--peers")
    work_dir.mkdir(parents=True, exist_ok=True)
    output.parent.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB",
        "r": r, "iterations": iterations, "tol": tol, "seed": seed, "n_workers": n_workers,
        "load_start": _load(), "corpora": {}, "notes": [],
    }
    angular_ready = Path("/work/notes/angular_ready.md").exists()
    if "bae" in peers and not angular_ready:
        peers.remove("bae")
        results["notes"].append("sphdist BAE: not run (sphdist.methods.angular was not ready).")
    todo = [(f"synthetic-{n // 1000}k", n) for n in sizes]
    if newsgroups:
        todo.append(("20newsgroups", None))
    # phase 1: ingest and sphdist on every corpus; phase 2: lever variants; phase 3: peers.
    # The report is rewritten after every job, so an interrupted run keeps what it measured.
    paths = {}
    for name, n_docs in todo:
        path = work_dir / f"{name}.zarr"
        meta = work_dir / f"{name}.ingest.json"
        entry: dict[str, Any] = {"peers": {}}
        results["corpora"][name] = entry
        if path.exists() and meta.exists():
            entry["ingest"] = json.loads(meta.read_text()) | {"cached": True}
        else:
            click.echo(f"[{name}] ingest", err=True)
            entry["ingest"] = run_job("ingest", 3600, path=str(path), n_docs=n_docs, seed=seed)
            if "error" in entry["ingest"]:
                entry["sphdist"] = entry["ingest"]
                write_report(results, output)
                continue
            meta.write_text(json.dumps(entry["ingest"]))
        paths[name] = path
        click.echo(f"[{name}] sphdist fit", err=True)
        entry["sphdist"] = run_job(
            "sphdist", 3600, path=str(path), r=r, iterations=iterations, tol=tol, seed=seed,
            n_workers=n_workers, max_partials=max_partials, split_every=split_every,
            dtype="float64", polar="auto", bare=True,
        )
        write_report(results, output)
    lever_name = f"synthetic-{min(sizes) // 1000}k" if sizes else None
    if levers and lever_name in paths:
        results["levers"] = run_levers(
            lever_name, paths[lever_name], results["corpora"][lever_name]["ingest"]["n_chunks"],
            r=r, iterations=min(iterations, 3), tol=tol, seed=seed, n_workers=n_workers,
            max_partials=max_partials, split_every=split_every,
            on_result=lambda _: write_report(results, output),
        )
    for name, path in paths.items():
        for peer in peers:
            click.echo(f"[{name}] {peer}", err=True)
            kwargs: dict[str, Any] = {"path": str(path), "r": r, "seed": seed}
            if peer in ("daskml", "bae"):
                kwargs["n_workers"] = n_workers
            results["corpora"][name]["peers"][peer] = run_job(peer, peer_timeout, **kwargs)
            write_report(results, output)
    results["load_end"] = _load()
    write_report(results, output)
    plot(results, output)
    click.echo(output.with_suffix(".md").read_text())


@cli.command("peers")
@click.option("--corpus", "names", multiple=True, required=True,
              help="Corpus name as in the report (e.g. synthetic-100k); repeatable.")
@click.option("--peers", default=",".join(PEERS), show_default=True)
@click.option("--n-components", "r", default=100, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--n-workers", default=2, show_default=True)
@click.option("--peer-timeout", default=900.0, show_default=True)
@click.option("--work-dir", type=click.Path(path_type=Path), default=REPO / "work" / "bench",
              show_default=True)
@click.option("--output", type=click.Path(path_type=Path),
              default=RESULTS / "benchmark_peers.json", show_default=True)
def peers_command(names, peers, r, seed, n_workers, peer_timeout, work_dir, output) -> None:
    """Run only the peers on already-ingested corpora (merged into the report by `render`)."""
    from sphdist.io import atomic_path

    done = json.loads(output.read_text()) if output.exists() else {}
    for name in names:
        path = work_dir / f"{name}.zarr"
        for peer in [p for p in peers.split(",") if p]:
            click.echo(f"[{name}] {peer}", err=True)
            kwargs: dict[str, Any] = {"path": str(path), "r": r, "seed": seed}
            if peer in ("daskml", "bae"):
                kwargs["n_workers"] = n_workers
            done.setdefault(name, {})[peer] = run_job(peer, peer_timeout, **kwargs)
            with atomic_path(output) as tmp:
                tmp.write_text(json.dumps(done, indent=1))


@cli.command("levers")
@click.option("--corpus", "name", required=True, help="Corpus name, e.g. synthetic-100k.")
@click.option("--iterations", default=3, show_default=True)
@click.option("--n-components", "r", default=100, show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--n-workers", default=2, show_default=True)
@click.option("--max-partials", default=8, show_default=True)
@click.option("--split-every", default=8, show_default=True)
@click.option("--work-dir", type=click.Path(path_type=Path), default=REPO / "work" / "bench",
              show_default=True)
@click.option("--output", type=click.Path(path_type=Path),
              default=RESULTS / "benchmark_levers.json", show_default=True)
def levers_command(name, iterations, r, seed, n_workers, max_partials, split_every, work_dir,
                   output) -> None:
    """Run only the lever variants on an ingested corpus (merged into the report by `render`)."""
    n_chunks = json.loads((work_dir / f"{name}.ingest.json").read_text())["n_chunks"]
    run_levers(
        name, work_dir / f"{name}.zarr", n_chunks, r=r, iterations=iterations, tol=1e-4,
        seed=seed, n_workers=n_workers, max_partials=max_partials, split_every=split_every,
        on_result=lambda res: output.write_text(json.dumps(res, indent=1)),
    )


@cli.command("render")
@click.option("--results", type=click.Path(path_type=Path), default=RESULTS / "benchmark.json",
              show_default=True)
@click.option("--merge-peers", type=click.Path(path_type=Path), default=None,
              help="A JSON written by `peers`, merged into the results first.")
@click.option("--merge-levers", type=click.Path(path_type=Path), default=None,
              help="A JSON written by `levers`, merged into the results first.")
@click.option("--merge-results", type=click.Path(path_type=Path), multiple=True,
              help="Another results JSON of `run` whose corpora are added (repeatable).")
@click.option("--note", "notes", multiple=True, help="A line added under the peers table.")
def render(results: Path, merge_peers: Path | None, merge_levers: Path | None,
           merge_results: tuple[Path, ...], notes: tuple[str, ...]) -> None:
    """Rewrite the .md and .png (and .json) from a results JSON."""
    data = json.loads(results.read_text())
    for other in merge_results:
        more = json.loads(other.read_text())
        for name, entry in more["corpora"].items():
            if "error" in data["corpora"].get(name, {}).get("sphdist", {"error": "absent"}):
                data["corpora"][name] = entry
        data["notes"] = [*data.get("notes", []),
                         f"Corpora {', '.join(more['corpora'])} measured in a second run started "
                         f"{more['started']}, load average at start {more['load_start']}."]
    data["notes"] = [*data.get("notes", []), *notes]
    if merge_levers is not None and merge_levers.exists():
        data["levers"] = json.loads(merge_levers.read_text())
    if merge_peers is not None and merge_peers.exists():
        for name, found in json.loads(merge_peers.read_text()).items():
            if name in data["corpora"]:
                data["corpora"][name].setdefault("peers", {}).update(found)
    stem = results.with_suffix("")
    write_report(data, stem)
    plot(data, stem)
    click.echo(stem.with_suffix(".md").read_text())


if __name__ == "__main__":
    cli()
