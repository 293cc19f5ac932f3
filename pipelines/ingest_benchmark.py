r"""Ingestion benchmark: peak memory flat in the number of documents, throughput vs scikit-learn.

For each size (default 100,000 and 1,000,000 synthetic documents, ``sphdist.text.synth`` JSON Lines,
``--doc-length`` tokens on average) the pipeline runs an ingest (``IngestRequest``; hashing, 2**18
features, labels and ids) in a fresh subprocess and samples the resident set size of that
process and all its children (the worker processes) with psutil every 50 ms: the peak of the sum
is the peak RSS of the ingestion. At every size it also runs, in a fresh subprocess,
single-process scikit-learn on the same lines (``json.loads`` of every line,
``HashingVectorizer(n_features=2**18, alternate_sign=False, norm=None).transform``,
``TfidfTransformer().fit_transform``, all in memory; its peak RSS is measured the same way)
and reports the throughput ratio (documents per second) at that size; at the smallest size
it also runs sphdist with one worker. The load average of the machine is recorded next to every
measurement: the machine may be shared.

Writes ``ingest_benchmark.md`` and ``ingest_benchmark.json`` under ``--output-dir``.

Usage::

    .venv/bin/python pipelines/ingest_benchmark.py                       # 100k and 1M
    .venv/bin/python pipelines/ingest_benchmark.py --sizes 2000,20000 \
        --output-dir /tmp/bench                                           # a quick run
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[1]


def _ingest_child(source: str, output: str, workers: int) -> None:
    import contextlib

    import dask

    from sphdist.jobs import run
    from sphdist.jobs.cluster import connect
    from sphdist.jobs.ingest import IngestRequest
    from sphdist.text.ingest import SourceSpec, TextSpec

    # as `sphdist ingest --n-workers`: 1 is this process, N a LocalCluster of N processes
    scheduler = (dask.config.set(scheduler="synchronous") if workers == 1
                 else connect(n_workers=workers) if workers > 1 else contextlib.nullcontext())
    start = time.perf_counter()
    with scheduler:
        corpus = run(IngestRequest(SourceSpec(source, label_field="label", id_field="id"), output,
                                   overwrite=True, text=TextSpec(vocabulary=False, stop_words=None,
                                   sublinear_tf=False)))  # as scikit-learn's
    # HashingVectorizer + TfidfTransformer
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "n_documents": corpus.n_documents,
                      "nnz": corpus.nnz, "n_chunks": corpus.n_chunks}))


def _sklearn_child(source: str) -> None:
    from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

    start = time.perf_counter()
    with open(source, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    counts = HashingVectorizer(n_features=2**18, alternate_sign=False, norm=None).transform(texts)
    X = TfidfTransformer().fit_transform(counts)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "n_documents": X.shape[0], "nnz": int(X.nnz)}))


def _measure(args: list[str]) -> dict:
    """Run ``args`` in a fresh process; return its JSON result and the tree's peak RSS."""
    import psutil

    load_before = os.getloadavg()
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE,
                            cwd=REPO, text=True)
    root = psutil.Process(proc.pid)
    peak = 0
    cpu_seen: dict[int, float] = {}  # CPU seconds of every process of the tree, last sample
    while proc.poll() is None:
        total = 0
        try:
            for p in [root, *root.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                    times = p.cpu_times()
                    cpu_seen[p.pid] = times.user + times.system
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        peak = max(peak, total)
        time.sleep(0.05)
    out = proc.stdout.read() if proc.stdout else ""
    if proc.returncode:
        raise click.ClickException(f"{args} failed with status {proc.returncode}")
    result = json.loads(out.strip().splitlines()[-1])
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime)
    # processes of a fork server are its children, not ours: the rusage of the waited-for
    # children misses them, the samples of the tree do not (less their last 50 ms)
    cpu = max(cpu, sum(cpu_seen.values()))
    result.update(peak_rss_bytes=peak, wall_seconds=time.perf_counter() - start,
                  cpu_seconds=cpu,
                  loadavg_before=list(load_before), loadavg_after=list(os.getloadavg()))
    result["docs_per_second"] = result["n_documents"] / result["seconds"]
    return result


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f}"


@click.group(invoke_without_command=True)
@click.option("--sizes", default="100000,1000000", show_default=True,
              help="Comma-separated numbers of documents.")
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option("--doc-length", type=click.IntRange(min=1), default=120, show_default=True,
              help="Mean tokens per synthetic document (120: ~100 distinct terms).")
@click.option("--n-topics", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--repeats", type=click.IntRange(min=1), default=2, show_default=True,
              help="Throughput runs at the smallest size (alternating scikit-learn and "
                   "sphdist); the fastest of each is kept, which damps the noise of a shared "
                   "machine.")
@click.option("--workdir", type=click.Path(path_type=Path),
              help="Scratch directory for the JSON Lines and corpora (default: a temp dir, "
                   "removed at the end).")
@click.option("--output-dir", type=click.Path(path_type=Path),
              default=REPO / "pipelines" / "results", show_default=True)
@click.option("--from-json", "from_json", type=click.Path(exists=True, path_type=Path),
              help="Only rewrite the markdown from a JSON report of an earlier run.")
@click.pass_context
def main(ctx, sizes, workers, doc_length, n_topics, seed, repeats, workdir, output_dir,
         from_json):
    """Measure peak RSS at each size and throughput against scikit-learn."""
    if ctx.invoked_subcommand is not None:
        return
    if from_json is not None:
        report = json.loads(from_json.read_text())
        _write_result(output_dir / "ingest_benchmark.md", _markdown(report))
        return
    from sphdist.jobs import run
    from sphdist.jobs.synth import SynthRequest

    sizes = sorted(int(s) for s in sizes.split(","))
    own = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="ingest-bench-")) if own else workdir
    workdir.mkdir(parents=True, exist_ok=True)
    runs, baseline = [], {}
    try:
        for n in sizes:
            source = workdir / f"synth-{n}.jsonl"
            summary = run(SynthRequest(output=source, n_docs=n, n_topics=n_topics, seed=seed,
                                       doc_length=doc_length, overwrite=True))
            click.echo(f"synth {n}: {summary.seconds:.1f} s, "
                       f"{summary.nnz / n:.1f} distinct terms/doc", err=True)
            trials = repeats if n == sizes[0] else 1
            sk_trials, ours = [], []
            for _ in range(trials):
                result = _measure(["sklearn", str(source)])
                click.echo(f"sklearn {n}: {result}", err=True)
                sk_trials.append(result)
                if n == sizes[0]:
                    result = _measure(["ingest", str(source), str(workdir / "one.zarr"), "1"])
                    click.echo(f"sphdist_1_worker {n}: {result}", err=True)
                    baseline.setdefault("sphdist_1_worker_trials", []).append(result)
                    shutil.rmtree(workdir / "one.zarr", ignore_errors=True)
                result = _measure(["ingest", str(source), str(workdir / f"c{n}.zarr"),
                                   str(workers)])
                click.echo(f"sphdist {workers} workers {n}: {result}", err=True)
                ours.append(result)
                shutil.rmtree(workdir / f"c{n}.zarr", ignore_errors=True)
            run = min(ours, key=lambda r: r["seconds"])
            sk = min(sk_trials, key=lambda r: r["seconds"])
            run.update(size=n, distinct_terms_per_doc=summary.nnz / n,
                       jsonl_bytes=source.stat().st_size, sklearn=sk,
                       throughput_ratio_vs_sklearn=run["docs_per_second"]
                       / sk["docs_per_second"],
                       cpu_ratio_sklearn_to_sphdist=sk["cpu_seconds"] / run["cpu_seconds"],
                       same_matrix_nnz=sk["nnz"] == run["nnz"])
            runs.append(run)
            source.unlink()
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    baseline["sphdist_1_worker"] = min(baseline["sphdist_1_worker_trials"],
                                       key=lambda r: r["seconds"])
    first = runs[0]
    report = {
        "sizes": sizes, "workers": workers, "doc_length": doc_length, "n_topics": n_topics,
        "seed": seed, "repeats": repeats, "runs": runs, "baseline": baseline,
        "same_matrix_nnz": all(r["same_matrix_nnz"] for r in runs),
        "rss_ratio_largest_to_smallest": runs[-1]["peak_rss_bytes"] / runs[0]["peak_rss_bytes"],
        "throughput_ratio_vs_sklearn": {str(r["size"]): r["throughput_ratio_vs_sklearn"]
                                        for r in runs},
        "throughput_ratio_1_worker_vs_sklearn": baseline["sphdist_1_worker"]["docs_per_second"]
        / first["sklearn"]["docs_per_second"],
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
    }
    output_dir.mkdir(parents=True, exist_ok=True)
    _write_result(output_dir / "ingest_benchmark.json", json.dumps(report, indent=2) + "\n")
    _write_result(output_dir / "ingest_benchmark.md", _markdown(report))
    click.echo(_markdown(report))


def _write_result(path: Path, text: str) -> None:
    """Write a results file atomically (a reader sees the old report or the new one)."""
    from sphdist.io import atomic_path

    with atomic_path(path) as tmp:
        tmp.write_text(text)


def _markdown(report: dict) -> str:
    w = report["workers"]
    one = report["baseline"]["sphdist_1_worker"]
    lines = [
        "# Ingestion benchmark",
        "",
        f"Synthetic JSON Lines documents (`sphdist.text.synth`, {report['n_topics']} topics, "
        f"{report['doc_length']} tokens on average, seed {report['seed']}); hashing, 2**18 "
        f"features; {report['machine']['cpus']} CPUs. Peak RSS: sum over the ingesting process "
        "and its worker processes, sampled every 50 ms, each size in a fresh process. Load "
        "average (1 min) before and after each run: the machine may be shared with other work.",
        "",
        "| run | documents | distinct terms / doc | seconds | documents / s | peak RSS (GiB) "
        "| CPU seconds (process tree) | CPU µs / document | cores used | load avg before → after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]

    def row(name, r, distinct="") -> str:
        return (f"| {name} | {r['n_documents']:,} | {distinct} | {r['seconds']:.1f} | "
                f"{r['docs_per_second']:,.0f} | {_gib(r['peak_rss_bytes'])} | "
                f"{r['cpu_seconds']:.1f} | {1e6 * r['cpu_seconds'] / r['n_documents']:.0f} | "
                f"{r['cpu_seconds'] / r['wall_seconds']:.2f} | "
                f"{r['loadavg_before'][0]:.1f} → {r['loadavg_after'][0]:.1f} |")

    for r in report["runs"]:
        if r["size"] == report["sizes"][0]:
            lines.append(row("scikit-learn, 1 process, in memory", r["sklearn"]))
            lines.append(row("sphdist ingest, 1 worker", one))
        else:
            lines.append(row("scikit-learn, 1 process, in memory", r["sklearn"]))
        lines.append(row(f"sphdist ingest, {w} workers", r, f"{r['distinct_terms_per_doc']:.1f}"))
    lines += [
        "",
        f"- Peak RSS ratio, sphdist, {report['sizes'][-1]:,} / {report['sizes'][0]:,} "
        f"documents: **{report['rss_ratio_largest_to_smallest']:.2f}** (target ≤ 1.2).",
    ]
    for r in report["runs"]:
        lines.append(
            f"- {r['size']:,} documents: throughput, sphdist on {w} workers / scikit-learn on "
            f"one process: **{r['throughput_ratio_vs_sklearn']:.2f}x** (target > 1.5x); CPU "
            f"seconds, scikit-learn / sphdist: {r['cpu_ratio_sklearn_to_sphdist']:.2f}; peak "
            f"RSS, scikit-learn / sphdist: "
            f"{r['sklearn']['peak_rss_bytes'] / r['peak_rss_bytes']:.2f}; same nonzeros as "
            f"scikit-learn's matrix: {r['same_matrix_nnz']}."
        )
    lines += [
        f"- sphdist on 1 worker / scikit-learn, {report['sizes'][0]:,} documents: "
        f"{report['throughput_ratio_1_worker_vs_sklearn']:.2f}x.",
        f"- {report['sizes'][-1]:,} documents ingested in {report['runs'][-1]['seconds']:.0f} s.",
        "- seconds: the timed region of each subprocess (after its imports; sphdist's includes "
        "starting the worker processes). CPU seconds: user + system of the whole subprocess "
        "tree, imports included in both. \"cores "
        "used\" is CPU seconds / wall seconds of the subprocess (start-up included): below the "
        "number of workers when the machine is busy with other work.",
        f"- Rows at {report['sizes'][0]:,} documents: fastest of {report['repeats']} alternating "
        "runs each; larger sizes: one run each.",
        "",
        "sphdist's time includes writing the corpus.zarr (compressed chunks) and the spilled "
        "counts; scikit-learn's holds every text and the whole matrix in memory and writes "
        "nothing.",
        "",
    ]
    return "\n".join(lines)


# -- the default ingest (issue 29, item 6): text defaults, the default pool, 1M documents ----------
def _default_child(source: str, output: str, mode: str) -> None:
    """``sphdist ingest SOURCE --label-field label``'s call, every other option at its default.

    ``mode`` "default": the pool the ingest chooses (processes for a large source); "threads":
    dask's threads, as before issue 29.6; "processes": the ingest's own pool of processes
    whatever the source's size (its thresholds set to 0).
    """
    import contextlib
    import hashlib

    import dask

    import sphdist.text.ingest as ingest_module
    from sphdist.jobs import run
    from sphdist.jobs.ingest import IngestRequest
    from sphdist.text.ingest import SourceSpec

    if mode == "processes":
        ingest_module.PROCESSES_FROM_DOCUMENTS = ingest_module.PROCESSES_FROM_BYTES = 0

    scheduler = (dask.config.set(scheduler="threads") if mode == "threads"
                 else contextlib.nullcontext())
    start = time.perf_counter()
    with scheduler:
        corpus = run(IngestRequest(SourceSpec(source, label_field="label"), output, overwrite=True))
    seconds = time.perf_counter() - start
    bits = hashlib.sha256(json.dumps([corpus.attrs["chunk_sha256"], corpus.attrs["sha256"]],
                                     sort_keys=True).encode()).hexdigest()
    meta = corpus.attrs["ingest"]
    print(json.dumps({"seconds": seconds, "n_documents": corpus.n_documents,
                      "n_features": corpus.n_features, "nnz": corpus.nnz,
                      "scheduler": meta.get("scheduler"), "workers": meta.get("workers"),
                      "task_processes": meta.get("task_processes"),
                      "stored_sha256": bits}))


def _tfidf_child(source: str) -> None:
    """scikit-learn's ``TfidfVectorizer`` with sphdist's text defaults, all in memory."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    from sphdist.text.defaults import INGEST_DEFAULTS

    start = time.perf_counter()
    with open(source, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    vectorizer = TfidfVectorizer(min_df=INGEST_DEFAULTS["min_df"],
                                 max_df=INGEST_DEFAULTS["max_df"],
                                 stop_words=INGEST_DEFAULTS["stop_words"],
                                 sublinear_tf=INGEST_DEFAULTS["sublinear_tf"])
    X = vectorizer.fit_transform(texts)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "n_documents": X.shape[0],
                      "n_features": X.shape[1], "nnz": int(X.nnz)}))


@main.command("defaults")
@click.option("--sizes", default="1000000", show_default=True,
              help="Comma-separated numbers of documents.")
@click.option("--modes", default="sklearn,default,threads", show_default=True,
              help="Runs, in this order: sklearn (TfidfVectorizer), default (the pool ingest "
                   "chooses), threads (dask's threads), processes (ingest's own pool of "
                   "processes, whatever the size).")
@click.option("--update", is_flag=True,
              help="Add these runs, as a new series, to the existing ingest_default.json.")
@click.option("--doc-length", type=click.IntRange(min=1), default=120, show_default=True)
@click.option("--n-topics", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--workdir", type=click.Path(path_type=Path),
              help="Scratch directory (default: a temp dir, removed at the end).")
@click.option("--output-dir", type=click.Path(path_type=Path),
              default=REPO / "pipelines" / "results", show_default=True)
@click.option("--from-json", "from_json", type=click.Path(exists=True, path_type=Path),
              help="Only rewrite the markdown from a JSON report of an earlier run.")
def defaults(sizes, modes, update, doc_length, n_topics, workdir, output_dir, from_json):
    """`sphdist ingest` at its defaults beside scikit-learn's TfidfVectorizer (ingest_default.md).

    One run of each mode per series, in the order given, on ``sphdist synth --format jsonl``
    documents; the load average before and after every run.
    """
    if from_json is not None:
        report = json.loads(from_json.read_text())
        _write_result(output_dir / "ingest_default.md", _default_markdown(report))
        return
    from sphdist.jobs import run
    from sphdist.jobs.synth import SynthRequest

    own = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="ingest-default-")) if own else workdir
    workdir.mkdir(parents=True, exist_ok=True)
    report = {"doc_length": doc_length, "n_topics": n_topics, "trials": [], "commands": [],
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version()}}
    if update:
        report = json.loads((output_dir / "ingest_default.json").read_text())
    series = 1 + max((t["series"] for t in report["trials"]), default=0)
    report["commands"].append(" ".join(["pipelines/ingest_benchmark.py", *sys.argv[1:]]))
    try:
        for n in sorted(int(x) for x in sizes.split(",")):
            source = workdir / f"synth-{n}.jsonl"
            run(SynthRequest(output=source, n_docs=n, n_topics=n_topics, seed=0,
                             doc_length=doc_length, overwrite=True))
            for mode in modes.split(","):
                if mode == "sklearn":
                    result = _measure(["tfidf", str(source)])
                else:
                    result = _measure(["ingest-default", str(source),
                                       str(workdir / f"{mode}.zarr"), mode])
                    shutil.rmtree(workdir / f"{mode}.zarr", ignore_errors=True)
                result.update(size=n, mode=mode, series=series,
                              jsonl_bytes=source.stat().st_size)
                report["trials"].append(result)
                click.echo(f"{mode} {n}: {result}", err=True)
            source.unlink()
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    output_dir.mkdir(parents=True, exist_ok=True)
    _write_result(output_dir / "ingest_default.json", json.dumps(report, indent=2) + "\n")
    _write_result(output_dir / "ingest_default.md", _default_markdown(report))
    click.echo(_default_markdown(report))


_MODE_NAMES = {"sklearn": "scikit-learn TfidfVectorizer, 1 process",
               "default": "sphdist ingest, default pool",
               "threads": "sphdist ingest, dask threads (the default before)",
               "processes": "sphdist ingest, its own pool of processes"}


def _default_markdown(report: dict) -> str:
    lines = [
        "# Ingest at its defaults: the default pool beside scikit-learn's TfidfVectorizer",
        "",
        f"`sphdist synth --format jsonl` documents ({report['n_topics']} topics, "
        f"{report['doc_length']} tokens on average, seed 0), ingested as `sphdist ingest "
        "SOURCE --label-field label` (a learned vocabulary, min_df 5, max_df 0.5, English stop "
        "words, sublinear tf; ids from the `id` field) in a fresh process; scikit-learn's "
        "`TfidfVectorizer` with the same options on the same file, in memory, one process. "
        f"{report['machine']['cpus']} CPUs; peak RSS: the process and its children, sampled "
        "every 50 ms. Runs in the order of the table (a series: one run of each), with the "
        "load average (1 min) before and after each: the machine is shared, and a run's wall "
        "time depends on the load more than on anything measured here; CPU µs per document "
        "depend on it far less.",
        "",
        "| series | documents | run | seconds | documents / s | peak RSS (GiB) | CPU s (tree) "
        "| CPU µs / doc | cores used | features | nnz | load before → after |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    trials = report["trials"]
    for r in trials:
        n_ran = r.get("task_processes")  # recorded since the pool is handed each task alone
        ran = (f"; tasks ran in {n_ran} process{'es' if n_ran != 1 else ''}"
               if n_ran is not None else "")
        name = _MODE_NAMES[r["mode"]] + (f" ({r['scheduler']}, {r['workers']}{ran})"
                                         if r["mode"] in ("default", "processes") else "")
        cpu = r["cpu_seconds"]
        lines.append(
            f"| {r['series']} | {r['size']:,} | {name} | {r['seconds']:.1f} | "
            f"{r['docs_per_second']:,.0f} | {_gib(r['peak_rss_bytes'])} | {cpu:.1f} | "
            f"{1e6 * cpu / r['n_documents']:.0f} | {cpu / r['wall_seconds']:.2f} | "
            f"{r['n_features']:,} | {r['nnz']:,} | "
            f"{r['loadavg_before'][0]:.1f} → {r['loadavg_after'][0]:.1f} |")
    lines.append("")
    for n in sorted({r["size"] for r in trials}):
        latest = max(r["series"] for r in trials if r["size"] == n)
        best = {}
        for mode in _MODE_NAMES:  # the latest series of this size: the code as it is now
            runs = [r for r in trials
                    if r["size"] == n and r["mode"] == mode and r["series"] == latest]
            if runs:
                best[mode] = min(runs, key=lambda r: r["seconds"])
        sk, de, th = best.get("sklearn"), best.get("default"), best.get("threads")
        if sk is not None and de is not None:
            lines.append(
                f"- {n:,} documents, series {latest}, fastest run of each: the default pool / "
                "scikit-learn: "
                f"**{de['docs_per_second'] / sk['docs_per_second']:.2f}x** the throughput, "
                f"{de['peak_rss_bytes'] / sk['peak_rss_bytes']:.2f}x the peak RSS; same "
                f"features and nonzeros as scikit-learn: "
                f"{(de['n_features'], de['nnz']) == (sk['n_features'], sk['nnz'])}.")
        pr = best.get("processes")
        if pr is not None and sk is not None and th is not None:
            lines.append(
                f"- {n:,} documents, series {latest}, fastest run of each: its own pool of "
                f"{pr['workers']} processes / scikit-learn: "
                f"**{pr['docs_per_second'] / sk['docs_per_second']:.2f}x** the throughput; "
                f"/ dask's threads: {th['seconds'] / pr['seconds']:.2f}x as fast.")
        if de is not None and th is not None:
            digests = {r["stored_sha256"] for r in trials
                       if r["size"] == n and r["mode"] != "sklearn"}
            lines.append(
                f"- {n:,} documents, series {latest}, fastest run of each: the default pool is "
                f"{th['seconds'] / de['seconds']:.2f}x as fast as dask's threads; every "
                f"sphdist run stored the same corpus, bit for bit (chunk and array digests): "
                f"{len(digests) == 1}.")
    lines += [
        "- seconds: the timed region of each subprocess (after its imports; sphdist's "
        "includes starting its pool, writing the corpus.zarr and the spilled counts). CPU s: "
        "user + system of the subprocess tree (the pool's workers are children of a fork "
        "server: sampled every 50 ms). \"cores used\": CPU s / wall seconds of the subprocess.",
        "",
        *[f"- {note}" for note in report.get("notes", [])],
        "",
        "Produced by (each command adds a series with `--update`): "
        + "; ".join(f"`.venv/bin/python {c}`" for c in report.get("commands", [])) + ".",
        "",
    ]
    return "\n".join(lines)


@main.command("ingest-default", hidden=True)
@click.argument("source")
@click.argument("output")
@click.argument("mode")
def _default_cmd(source, output, mode):
    _default_child(source, output, mode)


@main.command("tfidf", hidden=True)
@click.argument("source")
def _tfidf_cmd(source):
    _tfidf_child(source)


@main.command("ingest", hidden=True)
@click.argument("source")
@click.argument("output")
@click.argument("workers", type=int)
def _ingest_cmd(source, output, workers):
    _ingest_child(source, output, workers)


@main.command("sklearn", hidden=True)
@click.argument("source")
def _sklearn_cmd(source):
    _sklearn_child(source)


if __name__ == "__main__":
    main()
