r"""Nearest-neighbour benchmark (issue 23): recall, latency, build time, the k-NN graph, RSS.

On a fitted model (default: synthetic 1M documents at r = 100, and 20 Newsgroups):

* **queries**: 1,000 held-out texts (the first lines of a corpus the model never saw,
  ``--queries-jsonl``), embedded as ``sphdist neighbors --query`` does
  (:func:`sphdist.jobs.embedding.embed_texts`); their exact 10 nearest documents come from the
  exact float64 scan (:func:`sphdist.jobs.neighbors.exact_search`), the reference of every
  recall@10;
* **parameters chosen by measurement**: flat indexes of the first 100k..n documents (query
  time grows with n: the flat/IVF threshold), IVF indexes of ``--nlist`` lists, each searched
  with every ``--nprobe`` (recall@10, median per-query latency in a batch of 1,000 over
  ``--repeats`` batches, median single-query latency), trained on 40 vectors per list;
* **the command as a user runs it**: ``sphdist index -m MODEL`` (defaults) and
  ``sphdist neighbors -m MODEL --all -k 10 -o knn.parquet`` in fresh processes under
  ``/usr/bin/time``: wall time and peak RSS; the index' size on disk; one
  ``sphdist neighbors --doc-id`` (start-up, index load, search) against ``sphdist --version``;
  the build time against the fit's (``--fit-seconds``: the wall time of ``sphdist fit`` on the
  same machine);
* **the exact peer**: scikit-learn's ``NearestNeighbors(algorithm="brute", metric="cosine")``
  on the same embedding (n, r), its ``kneighbors`` of ``--peer-queries`` documents timed and
  scaled to n (the whole graph would take hours), and sphdist's exact scan of the same
  documents; the recall of the IVF graph against it.

The load average (``uptime``) is recorded before every measurement: the machine is shared.

Usage::

    python pipelines/neighbors_benchmark.py --fit-seconds 1148     # 1M + 20 Newsgroups
    python pipelines/neighbors_benchmark.py --skip-1m              # 20 Newsgroups only
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import click
import numpy as np

REPO = Path(__file__).resolve().parents[1]
BENCH = Path(os.environ.get("SPHDIST_BENCH_DIR", REPO / "work" / "bench"))  # the corpora, models
SPHDIST = str(Path(sys.executable).with_name("sphdist"))


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def _load() -> float:
    return os.getloadavg()[0]


def timed_command(args: list[str]) -> dict:
    """Run ``sphdist ARGS`` under /usr/bin/time: wall seconds, peak RSS (GiB), stdout."""
    load = _load()
    out = subprocess.run(["/usr/bin/time", "-f", "TIME %e %M", SPHDIST, *args],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"sphdist {' '.join(args)} failed:\n{out.stderr}")
    line = [x for x in out.stderr.splitlines() if x.startswith("TIME ")][-1].split()
    return {"command": "sphdist " + " ".join(args), "wall_s": float(line[1]),
            "peak_rss_gib": int(line[2]) / 2**20, "load": load, "stdout": out.stdout.strip()}


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def _per_query_batch(index, Q: np.ndarray, k: int, repeats: int) -> float:
    """Median over ``repeats`` batches of the batch' seconds / number of queries."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        index.search(Q, k)
        times.append((time.perf_counter() - start) / Q.shape[0])
    return statistics.median(times)


def _single(index, Q: np.ndarray, k: int, n: int = 50) -> float:
    """Median seconds of one query searched alone."""
    times = []
    for i in range(min(n, Q.shape[0])):
        start = time.perf_counter()
        index.search(Q[i:i + 1], k)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, model: Path, queries_jsonl: Path, *, n_queries: int, nlists: list[int],
            nprobes: list[int], flat_sizes: list[int], repeats: int, peer_queries: int,
            fit_seconds: float | None, work: Path, index_path: Path) -> dict:
    from sklearn.neighbors import NearestNeighbors

    from sphdist.core.neighbors import recall_at_k
    from sphdist.jobs.embedding import embed_texts, open_embedding_source
    from sphdist.jobs.neighbors import exact_search
    from sphdist.methods.neighbors import NeighborIndex

    rec: dict = {"name": name, "model": str(model), "uptime_start": uptime()}
    source = open_embedding_source(model)
    r, n = source.V.shape
    rec.update(n_documents=n, n_components=r)
    print(f"[{name}] n={n} r={r}; {uptime()}", flush=True)
    with open(queries_jsonl) as f:
        texts = [json.loads(line)["text"] for line in itertools.islice(f, n_queries)]
    Q = embed_texts(model, texts)  # (r, n_q)
    Qr = np.ascontiguousarray(Q.T)
    start = time.perf_counter()
    exact_idx, _ = exact_search(source, Q, 10)
    rec["exact_scan"] = {"queries": Q.shape[1], "seconds": time.perf_counter() - start,
                         "load": _load()}
    X = np.asarray(source.V.T.compute(), dtype=np.float64)  # (n, r) for the sweeps and peers
    skip = source.degenerate
    rec["flat"] = []
    for size in [s for s in flat_sizes if s < n] + [n]:
        start = time.perf_counter()
        flat = NeighborIndex("flat").fit(X[:size], exclude=None if skip is None else skip[:size])
        build = time.perf_counter() - start
        row = {"n": size, "build_s": build, "batch_ms": 1e3 * _per_query_batch(flat, Qr, 10,
                                                                             repeats),
               "single_ms": 1e3 * _single(flat, Qr, 10), "load": _load()}
        if size == n:
            row["recall@10"] = recall_at_k(flat.search(Qr, 10)[0], exact_idx)
        rec["flat"].append(row)
        print(f"[{name}] flat {row}", flush=True)
        del flat
    rec["ivf"] = []
    for nlist in nlists:
        if 40 * nlist > n:
            continue
        start = time.perf_counter()
        ivf = NeighborIndex("ivf", nlist=nlist).fit(X, exclude=skip)
        build = time.perf_counter() - start
        for nprobe in nprobes:
            if nprobe > nlist or (rec["ivf"] and rec["ivf"][-1]["nlist"] == nlist
                                  and rec["ivf"][-1]["recall@10"] > 0.995):
                continue  # beyond a recall of 0.995 only the time grows
            ivf.set_params(nprobe=nprobe)
            row = {"nlist": nlist, "nprobe": nprobe, "build_s": build,
                   "recall@10": recall_at_k(ivf.search(Qr, 10)[0], exact_idx),
                   "batch_ms": 1e3 * _per_query_batch(ivf, Qr, 10, repeats),
                   "single_ms": 1e3 * _single(ivf, Qr, 10), "load": _load()}
            rec["ivf"].append(row)
            print(f"[{name}] ivf {row}", flush=True)
        del ivf

    # nprobe chosen by measurement: the smallest reaching recall@10 >= 0.95 at the default nlist
    from sphdist.methods.neighbors import FLAT_MAX, default_nlist

    rows = [row for row in rec["ivf"] if row["nlist"] == default_nlist(n)]
    good = [row["nprobe"] for row in rows if row["recall@10"] >= 0.95]
    rec["chosen_nprobe"] = min(good) if good else max((row["nprobe"] for row in rows),
                                                      default=None)
    chosen = ["--nprobe", str(rec["chosen_nprobe"])] if n > FLAT_MAX and rec["chosen_nprobe"] \
        else []

    # the commands, as a user runs them (defaults), in fresh processes
    if index_path.exists():
        shutil.rmtree(index_path)
    rec["index_command"] = timed_command(["index", "-m", str(model), "-o", str(index_path),
                                          *chosen, "--json"])
    rec["index_command"]["report"] = json.loads(rec["index_command"].pop("stdout"))
    rec["index_bytes_on_disk"] = du(index_path)
    if fit_seconds:
        rec["fit_seconds"] = fit_seconds
        rec["build_over_fit"] = rec["index_command"]["wall_s"] / fit_seconds
    doc = str(source.doc_ids[12345 % n])
    rec["version_command"] = timed_command(["--version"])
    rec["single_query_command"] = timed_command(["neighbors", "-m", str(model), "--index",
                                                 str(index_path), "--doc-id", doc, "-k", "10"])
    knn = work / f"{name}.knn.parquet"
    rec["graph_command"] = timed_command(["neighbors", "-m", str(model), "--all", "-k", "10",
                                          "--index", str(index_path), "-o", str(knn),
                                          "--overwrite", "--json"])
    rec["graph_command"]["report"] = json.loads(rec["graph_command"].pop("stdout"))

    # the exact peer on a sample of documents; the graph's recall against it
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    live = np.flatnonzero(~skip) if skip is not None else np.arange(n)
    sample = np.sort(rng.choice(live, size=min(peer_queries, live.size), replace=False))
    nn = NearestNeighbors(n_neighbors=11, algorithm="brute", metric="cosine")
    start = time.perf_counter()
    nn.fit(X[live])
    _, peer = nn.kneighbors(X[sample], n_neighbors=11)
    peer_s = time.perf_counter() - start
    peer = live[peer]
    peer_others = np.array([[j for j in row if j != i][:10] for row, i in zip(peer, sample,
                                                                              strict=True)])
    start = time.perf_counter()
    ours, _ = exact_search(source, np.ascontiguousarray(X[sample].T), 10, exclude=sample)
    ours_s = time.perf_counter() - start
    table = pq.read_table(knn, columns=["query_doc_id", "doc_id"]).to_pydict()
    position = {d: i for i, d in enumerate(source.doc_ids)}
    graph = np.full((n, 10), -1, dtype=np.int64)
    q = np.fromiter((position[d] for d in table["query_doc_id"]), dtype=np.int64)
    d = np.fromiter((position[x] for x in table["doc_id"]), dtype=np.int64)
    rank = np.asarray(pq.read_table(knn, columns=["rank"])["rank"]) - 1
    graph[q, rank] = d
    rec["peer"] = {
        "queries": int(sample.size), "sklearn_s": peer_s,
        "sklearn_graph_s_scaled": peer_s * n / sample.size, "sphdist_exact_s": ours_s,
        "sphdist_exact_graph_s_scaled": ours_s * n / sample.size,
        "exact_agree_recall": recall_at_k(ours, peer_others),
        "graph_recall@10_vs_sklearn": recall_at_k(graph[sample], peer_others),
        "load": _load(),
    }
    print(f"[{name}] peer {rec['peer']}", flush=True)
    rec["uptime_end"] = uptime()
    return rec


def _table(rows: list[dict], cols: list[tuple[str, str, str]]) -> list[str]:
    out = ["| " + " | ".join(c[1] for c in cols) + " |",
           "|" + "|".join("---:" for _ in cols) + "|"]
    for row in rows:
        out.append("| " + " | ".join(format(row.get(c[0], ""), c[2]) if row.get(c[0]) is not None
                                     else "-" for c in cols) + " |")
    return out


def report(records: list[dict]) -> str:
    lines = ["# Nearest neighbours: recall, latency, build time, k-NN graph (issue 23)", "",
             "Generated by `python pipelines/neighbors_benchmark.py` (see its docstring). "
             "Times on the shared 2-core machine; the load average is recorded with each "
             "measurement. Queries: 1,000 held-out texts embedded by the model; recall@10 "
             "against the exact float64 scan.", ""]
    for rec in records:
        n, name = rec["n_documents"], rec["name"]
        ic, gc = rec["index_command"], rec["graph_command"]
        lines += [f"## {name}: n = {n:,}, r = {rec['n_components']}", "",
                  f"- start: `{rec['uptime_start']}`; end: `{rec['uptime_end']}`", ""]
        lines += ["### Flat (exact) index: query time grows with n", ""]
        lines += _table(rec["flat"], [("n", "documents", ","), ("build_s", "build s", ".2f"),
                                      ("batch_ms", "ms/query, batch of 1,000", ".3f"),
                                      ("single_ms", "ms, single query", ".2f"),
                                      ("recall@10", "recall@10", ".4f"),
                                      ("load", "load", ".1f")])
        lines += ["", "### IVF: nlist x nprobe", ""]
        lines += _table(rec["ivf"], [("nlist", "nlist", "d"), ("nprobe", "nprobe", "d"),
                                     ("build_s", "build s (train + add)", ".1f"),
                                     ("recall@10", "recall@10", ".4f"),
                                     ("batch_ms", "ms/query, batch of 1,000", ".3f"),
                                     ("single_ms", "ms, single query", ".2f"),
                                     ("load", "load", ".1f")])
        r = ic["report"]
        how = (f"ivf, nlist {r['nlist']}, nprobe {r['nprobe']}" if r["kind"] == "ivf"
               else "flat")
        p = rec["peer"]
        lines += ["", "### The commands, as a user runs them (defaults)", "",
                  "| measure | value |", "|---|---:|",
                  f"| `sphdist index` ({how}) wall | {ic['wall_s']:.1f} s (load "
                  f"{ic['load']:.1f}) |",
                  f"| index build inside it (train + add) | {r['seconds']:.1f} s |",
                  f"| `sphdist index` peak RSS | {ic['peak_rss_gib']:.2f} GiB |",
                  f"| index size on disk | {rec['index_bytes_on_disk'] / 2**20:.1f} MiB |"]
        if rec.get("fit_seconds"):
            lines.append(f"| build / fit wall time | {rec['build_over_fit']:.3f} "
                         f"({ic['wall_s']:.1f} s / {rec['fit_seconds']:.0f} s) |")
        lines += [
            f"| `sphdist neighbors --doc-id` (one query, index) wall | "
            f"{rec['single_query_command']['wall_s']:.2f} s, peak RSS "
            f"{rec['single_query_command']['peak_rss_gib']:.2f} GiB |",
            f"| `sphdist --version` wall (start-up) | {rec['version_command']['wall_s']:.2f} s |",
            f"| `sphdist neighbors --all -k 10` ({n:,} x 10 graph, index) wall | "
            f"{gc['wall_s']:.1f} s (search {gc['report']['seconds']:.1f} s; load "
            f"{gc['load']:.1f}) |",
            f"| `sphdist neighbors --all` peak RSS | {gc['peak_rss_gib']:.2f} GiB |",
            f"| exact float64 scan, 1,000 queries | {rec['exact_scan']['seconds']:.1f} s |",
            "", "### Exact peer: scikit-learn NearestNeighbors(brute, cosine)", "",
            f"On {p['queries']:,} sampled documents (the whole {n:,}-document graph would take "
            "hours); times scaled to n:", "",
            "| measure | value |", "|---|---:|",
            f"| scikit-learn fit + kneighbors, {p['queries']:,} documents | "
            f"{p['sklearn_s']:.1f} s (x n: {p['sklearn_graph_s_scaled'] / 60:.1f} min) |",
            f"| sphdist exact scan, same documents | {p['sphdist_exact_s']:.1f} s (x n: "
            f"{p['sphdist_exact_graph_s_scaled'] / 60:.1f} min) |",
            f"| sphdist exact vs scikit-learn (recall@10) | {p['exact_agree_recall']:.4f} |",
            f"| sphdist index graph vs scikit-learn (recall@10) | "
            f"{p['graph_recall@10_vs_sklearn']:.4f} |",
            f"| graph time / scikit-learn's (scaled) | "
            f"{gc['wall_s'] / p['sklearn_graph_s_scaled']:.3f} |", ""]
    return "\n".join(lines) + "\n"


@click.command()
@click.option("--model-1m", type=click.Path(path_type=Path),
              default=BENCH / "synthetic-1000k.model.zarr", show_default=True)
@click.option("--queries-1m", type=click.Path(path_type=Path),
              default=BENCH / "new-100k-seed1.jsonl", show_default=True)
@click.option("--model-news", type=click.Path(path_type=Path),
              default=BENCH / "20newsgroups-vocabulary.float64.model.zarr", show_default=True)
@click.option("--fit-seconds", type=float, help="Wall time of the 1M model's `sphdist fit`.")
@click.option("--skip-1m", is_flag=True)
@click.option("--repeats", default=3, show_default=True)
@click.option("--peer-queries", default=1000, show_default=True)
@click.option("--work", type=click.Path(path_type=Path), default=Path("/tmp/knnbench"),
              show_default=True, help="Where the k-NN graphs are written.")
@click.option("--output-dir", type=click.Path(path_type=Path),
              default=REPO / "pipelines" / "results", show_default=True)
def main(model_1m, queries_1m, model_news, fit_seconds, skip_1m, repeats, peer_queries, work,
         output_dir) -> None:
    """Run the benchmark; write neighbors.md and neighbors.json under --output-dir."""
    work.mkdir(parents=True, exist_ok=True)
    records = []
    news_queries = work / "news-queries.jsonl"
    if not news_queries.exists():  # 1,000 texts of the test split, read from the archive
        import tarfile

        from sphdist.datasets import newsgroups_archive

        with tarfile.open(newsgroups_archive()) as tar:
            members = [m for m in tar.getmembers()
                       if m.isfile() and m.name.startswith("20news-bydate-test/")]
            rng = np.random.default_rng(0)
            picks = rng.choice(len(members), 1000, replace=False)
            with open(news_queries, "w") as f:
                for i in picks:
                    text = tar.extractfile(members[i]).read().decode("latin-1")
                    f.write(json.dumps({"text": text}) + "\n")
    records.append(measure(
        "20newsgroups", model_news, news_queries, n_queries=1000, nlists=[64, 128, 256],
        nprobes=[4, 8, 16, 32], flat_sizes=[], repeats=repeats, peer_queries=peer_queries,
        fit_seconds=None, work=work, index_path=work / "20newsgroups.index.zarr"))
    if not skip_1m:
        records.append(measure(
            "synthetic-1000k", model_1m, queries_1m, n_queries=1000, nlists=[1024, 2048],
            nprobes=[16, 32, 64, 128], flat_sizes=[200_000], repeats=repeats,
            peer_queries=peer_queries, fit_seconds=fit_seconds, work=work,
            index_path=model_1m.with_name(model_1m.name.removesuffix(".zarr") + ".index.zarr")))
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "neighbors.json").write_text(json.dumps(records, indent=1, default=float))
    text = report(records)
    (output_dir / "neighbors.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
