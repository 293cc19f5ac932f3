"""Which ingestion defaults a text user should get (issue 14 §1).

On the 20 Newsgroups archive (all 20 groups, headers, footers and quotes removed as the main job
does), for each feature setting this ingests the archive once with sphdist (one process), then
on the *same stored features* (X read back from the corpus.zarr) runs, for every r and seed:

- Spherical PCA (``sphdist.SphericalPCA``, exact steps, tol 1e-4, random init, seed s),
- the LSA recipe (``TruncatedSVD(r, random_state=s)`` -> ``Normalizer`` -> k-means),
- BAE (``sphdist.BAE(r, random_state=s)``: truncated SVD, unit rows — sphdist's own LSA),

then k-means (k = 20, n_init = 10, random_state = s) on each embedding, scored by
``sphdist.metrics.evaluate_embedding`` (accuracy with Hungarian matching, NMI). Beside them,
scikit-learn's documented recipe straight from the raw texts: ``TfidfVectorizer(max_df=0.5,
min_df=5, stop_words="english")`` -> ``TruncatedSVD`` -> ``Normalizer`` -> ``KMeans`` (and the
same with ``sublinear_tf=True``).

Settings (sphdist ingest options; every option is passed explicitly, so the settings keep their
meaning now that e is the default of ``sphdist ingest``):

a. the defaults before issue 14: 2**18 hashed features, no stop words;
b. hashed + ``--stop-words english --sublinear-tf``;
c. hashed + stop words + sublinear + ``--min-df 5 --max-df 0.5``: the ingest refuses df
   pruning with hashing (the error is recorded); ``c*`` *emulates* it exactly from b's stored
   corpus: hashed features (buckets) with df < 5 or df > 0.5 n are zeroed and every document
   re-normalised, which is what bucket-df pruning in pass 1 would store (idf depends only on
   df and n, so kept buckets keep their idf). Its "ingest" seconds are b's plus the pruning;
d. ``--vocabulary --stop-words english --min-df 5 --max-df 0.5``;
e. d + ``--sublinear-tf``.

Everything runs in one process with one thread (dask synchronous scheduler,
``threadpool_limits(1)``), so the seconds are single-core figures and comparable between
methods. The load average before and after is recorded.

The archive is ``20news-bydate.tar.gz`` in the data home (``$SPHDIST_DATA_HOME``, default
``../shared/data`` next to the repository; :func:`_experiments.data_home`).

Usage (from the repository root; about 22 min on one core)::

    .venv/bin/python pipelines/text_defaults.py

Writes ``text_defaults.md`` and ``text_defaults.json`` (atomically) to ``--out-dir`` (default
``pipelines/results``); the corpora go to ``--work-dir`` (default ``work/text_defaults``).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import _experiments as ex
import click
import dask
import numpy as np
import scipy.sparse as sp
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.preprocessing import Normalizer, normalize
from threadpoolctl import threadpool_limits

from sphdist import BAE, SphericalPCA
from sphdist.datasets import newsgroups_archive
from sphdist.errors import SphdistError
from sphdist.io.corpus import open_corpus
from sphdist.jobs import run
from sphdist.jobs.ingest import IngestRequest
from sphdist.metrics import evaluate_embedding
from sphdist.text.ingest import TextSpec

REMOVE = ("headers", "footers", "quotes")

#: setting -> (description, ingest keyword arguments). "c*" is derived from "b" (see above).
SETTINGS: dict[str, tuple[str, dict]] = {  # every option explicit: the defaults changed
    "a": ("defaults: 2^18 hashed, no stop words",
          {"vocabulary": False, "stop_words": None, "sublinear_tf": False}),
    "b": ("hashed + --stop-words english --sublinear-tf",
          {"vocabulary": False, "stop_words": "english", "sublinear_tf": True}),
    "c": ("hashed + stop words + sublinear + --min-df 5 --max-df 0.5",
          {"vocabulary": False, "stop_words": "english", "sublinear_tf": True, "min_df": 5,
           "max_df": 0.5}),
    "d": ("--vocabulary --stop-words english --min-df 5 --max-df 0.5",
          {"vocabulary": True, "stop_words": "english", "min_df": 5, "max_df": 0.5,
           "sublinear_tf": False}),
    "e": ("--vocabulary --stop-words english --min-df 5 --max-df 0.5 --sublinear-tf",
          {"vocabulary": True, "stop_words": "english", "min_df": 5, "max_df": 0.5,
           "sublinear_tf": True}),
}


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def read_corpus(path: Path) -> tuple[sp.csr_matrix, np.ndarray]:
    """X in scikit-learn orientation (n_documents, m), CSR, and the label codes."""
    corpus = open_corpus(path)
    X = sp.hstack([corpus.read_chunk(i) for i in range(corpus.n_chunks)], format="csc")
    return X.T.tocsr(), np.asarray(corpus.labels)


def prune_hashed(X: sp.csr_matrix, min_df: int = 5, max_df: float = 0.5) -> sp.csr_matrix:
    """Zero the features (hashed buckets) outside [min_df, max_df * n] and re-normalise rows.

    As ``CountVectorizer``: a float ``max_df`` prunes df > max_df * n, an int ``min_df`` prunes
    df < min_df. Rows (documents) keep unit L2 norm, or stay zero.
    """
    n = X.shape[0]
    df = np.bincount(X.indices, minlength=X.shape[1])
    keep = (df >= min_df) & (df <= max_df * n)
    X = X @ sp.diags(keep.astype(np.float64))
    X.eliminate_zeros()
    return normalize(X, copy=False).tocsr()


def score(Z: np.ndarray, y: np.ndarray, seed: int) -> dict:
    """k-means (k = 20, n_init 10, seeded) on Z: accuracy, NMI and its seconds."""
    t0 = time.perf_counter()
    res = evaluate_embedding(Z, y, n_clusters=20, n_init=10, random_state=seed)
    return {"accuracy": res["accuracy"], "nmi": res["nmi"],
            "kmeans_seconds": time.perf_counter() - t0}


def run_methods(X, y, ranks, seeds, methods, tol, log, bae_seed=0,
                chunk_size=4096) -> list[dict]:
    """Embed X with every method for every r and seed and score k-means on each."""
    records = []
    bae_cache: dict[int, np.ndarray] = {}
    for r in ranks:
        for seed in seeds:
            for method in methods:
                t0 = time.perf_counter()
                extra = {}
                if method == "spca":
                    est = SphericalPCA(n_components=r, tol=tol, random_state=seed,
                                       chunk_size=chunk_size).fit(X)
                    Z = np.asarray(est.embedding_)
                    extra = {"n_iter": int(est.n_iter_), "objective": float(est.objective_[-1]),
                             "n_degenerate": int(est.n_degenerate_)}
                elif method == "lsa":
                    Z = TruncatedSVD(n_components=r, random_state=seed).fit_transform(X)
                    Z = Normalizer(copy=False).fit_transform(Z)
                elif method == "bae":
                    # BAE's randomized SVD is computed once per r (seed bae_seed); k-means is
                    # still seeded per seed. Its SVD on 2**18 hashed features takes minutes
                    # single-threaded, so repeating it per seed is not affordable here.
                    if r not in bae_cache:
                        bae_cache[r] = np.asarray(BAE(n_components=r, random_state=bae_seed,
                                                      chunk_size=chunk_size)
                                                  .fit_transform(X))
                        extra = {"bae_svd_computed": True}
                    else:
                        extra = {"bae_svd_computed": False}
                    Z = bae_cache[r]
                else:
                    raise ValueError(method)
                fit_s = time.perf_counter() - t0
                rec = {"method": method, "r": r, "seed": seed, "fit_seconds": fit_s, **extra,
                       **score(np.asarray(Z, dtype=np.float64), y, seed)}
                log(f"    {method:5s} r={r:3d} seed={seed} acc {rec['accuracy']:.3f} "
                    f"nmi {rec['nmi']:.3f} fit {fit_s:.1f}s km {rec['kmeans_seconds']:.1f}s"
                    + (f" iters {rec['n_iter']}" if "n_iter" in rec else ""))
                records.append(rec)
    return records


def summarise(records: list[dict]) -> list[dict]:
    """Mean, sample std, min and max of accuracy and NMI per (method, r)."""
    out = []
    keys = list(dict.fromkeys((r["method"], r["r"]) for r in records))
    for method, r in keys:
        rs = [x for x in records if x["method"] == method and x["r"] == r]
        acc = np.array([x["accuracy"] for x in rs])
        nmi = np.array([x["nmi"] for x in rs])
        row = {"method": method, "r": r, "n": len(rs),
               "acc_mean": float(acc.mean()), "acc_std": float(acc.std(ddof=1)) if len(rs) > 1
               else 0.0, "acc_min": float(acc.min()), "acc_max": float(acc.max()),
               "nmi_mean": float(nmi.mean()), "nmi_std": float(nmi.std(ddof=1)) if len(rs) > 1
               else 0.0, "nmi_min": float(nmi.min()), "nmi_max": float(nmi.max()),
               "fit_seconds": float(np.mean([x["fit_seconds"] for x in rs
                                             if x.get("bae_svd_computed", True)])),
               "kmeans_seconds": float(np.mean([x["kmeans_seconds"] for x in rs]))}
        if method == "spca":
            row["n_iter"] = float(np.mean([x["n_iter"] for x in rs]))
        out.append(row)
    return out


def pm(mean, std):
    """``mean ± std`` to three decimals."""
    return f"{mean:.3f} ± {std:.3f}"


def markdown(result: dict) -> str:
    """The results as a markdown report."""
    L = ["# Text defaults on 20 Newsgroups (issue 14 §1)", "",
         f"Command: `{result['command']}`", "",
         "All 20 groups, 18,846 documents, headers/footers/quotes removed (as the main job). "
         "k-means k = 20, n_init = 10, seeded like the method; mean ± sample std over seeds "
         f"{result['seeds']}. One process, one thread (dask synchronous, "
         "threadpool_limits(1)): seconds are single-core. Spherical PCA: exact steps, random "
         f"init, tol {result['tol']}, chunk_size {result['chunk_size']} documents (SphericalPCA "
         "and BAE; "
         "their default for in-memory input, 64 MiB / (8 m) = 32 documents at m = 2^18, is "
         "many times slower). LSA: TruncatedSVD(r) -> Normalizer -> KMeans on the same "
         "stored X. BAE: sphdist.BAE on the same X; its randomized SVD is computed once per r "
         "(random_state 0) and k-means is seeded per seed, so BAE's spread is k-means' only.",
         "",
         f"Load average (1, 5, 15 min) at start {result['loadavg_start']}, at end "
         f"{result['loadavg_end']} (2 cores shared with other work). {result['environment']}.",
         "", "## Features", "",
         "| setting | options | m | nnz | empty docs | ingest s |", "|---|---|---:|---:|---:|---:|"]
    for key, s in result["settings"].items():
        if "error" in s:
            L.append(f"| {key} | {s['description']} | refused: `{s['error']}` | | | |")
            continue
        L.append(f"| {key} | {s['description']} | {s['m']:,} (kept {s['m_used']:,}) | "
                 f"{s['nnz']:,} | {s['n_empty']} | {s['ingest_seconds']:.1f} |")
    L += ["", "## Clustering (accuracy / NMI, mean ± std over seeds; seconds = embedding fit, "
          "mean per seed; k-means seconds separately)", "",
          "| setting | r | Spherical PCA acc | SPCA NMI | SPCA fit s (iters) | LSA acc | LSA NMI "
          "| LSA fit s | BAE acc | BAE NMI | BAE fit s | k-means s |",
          "|---|---:|---|---|---:|---|---|---:|---|---|---:|---:|"]
    for key, s in result["settings"].items():
        if "summary" not in s:
            continue
        for r in result["ranks"]:
            rows = {x["method"]: x for x in s["summary"] if x["r"] == r}
            cells = [key, str(r)]
            for m in ("spca", "lsa", "bae"):
                x = rows.get(m)
                if x is None:
                    cells += ["–", "–", "–"]
                    continue
                fs = f"{x['fit_seconds']:.1f}" + (f" ({x['n_iter']:.0f})" if m == "spca" else "")
                cells += [pm(x["acc_mean"], x["acc_std"]), pm(x["nmi_mean"], x["nmi_std"]), fs]
            km = np.mean([x["kmeans_seconds"] for x in rows.values()])
            cells.append(f"{km:.1f}")
            L.append("| " + " | ".join(cells) + " |")
    ref = result.get("reference")
    if ref:
        L += ["", "## scikit-learn's recipe from the raw texts (reference point)", "",
              f"Texts read and cleaned in {ref['read_seconds']:.1f} s (same 18,846 documents).",
              "", "| vectorizer | m | vectorize s | r | acc | NMI | SVD s | k-means s |",
              "|---|---:|---:|---:|---|---|---:|---:|"]
        for v in ref["variants"]:
            for x in v["summary"]:
                L.append(f"| {v['description']} | {v['m']:,} | {v['vectorize_seconds']:.1f} | "
                         f"{x['r']} | {pm(x['acc_mean'], x['acc_std'])} | "
                         f"{pm(x['nmi_mean'], x['nmi_std'])} | {x['fit_seconds']:.1f} | "
                         f"{x['kmeans_seconds']:.1f} |")
    L += ["", f"Total wall time {result['wall_seconds']:.0f} s.", ""]
    return "\n".join(L)


@click.command()
@click.option("--settings", default="a,b,c,d,e", show_default=True,
              help="Comma-separated settings (a..e; c also runs the emulation c*).")
@click.option("--ranks", default="20,100", show_default=True)
@click.option("--seeds", default="0,1,2", show_default=True)
@click.option("--methods", default="spca,lsa,bae", show_default=True)
@click.option("--tol", type=float, default=1e-4, show_default=True)
@click.option("--chunk-size", type=int, default=4096, show_default=True,
              help="Documents per chunk for SphericalPCA and BAE (the corpus' chunk size).")
@click.option("--reference/--no-reference", default=True, show_default=True,
              help="Also run scikit-learn's recipe on the raw texts.")
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("work/text_defaults"),
              show_default=True, help="Where the corpora are written.")
@click.option("--out-dir", type=click.Path(path_type=Path), default=ex.RESULTS,
              show_default=True)
def main(settings, ranks, seeds, methods, tol, chunk_size, reference, work_dir, out_dir):
    """Spherical PCA, LSA and BAE on 20 Newsgroups under several ingest settings."""
    def log(msg):
        click.echo(msg, err=True)

    settings = [s.strip() for s in settings.split(",") if s.strip()]
    ranks = [int(r) for r in ranks.split(",")]
    seeds = [int(s) for s in seeds.split(",")]
    methods = [m.strip() for m in methods.split(",")]
    work_dir.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    result = {"command": "python " + " ".join(sys.argv), "ranks": ranks, "seeds": seeds,
              "tol": tol, "chunk_size": chunk_size, "loadavg_start": loadavg(),
              "environment": ex.environment(),
              "settings": {}}
    t_start = time.perf_counter()
    archive = newsgroups_archive(ex.data_home())

    def save():
        result["loadavg_end"] = loadavg()
        result["wall_seconds"] = time.perf_counter() - t_start
        ex.write_json(out_dir / "text_defaults.json", result)
        ex.write_text(out_dir / "text_defaults.md", markdown(result))

    with dask.config.set(scheduler="synchronous"), threadpool_limits(1):
        for key in settings:
            desc, kwargs = SETTINGS[key]
            log(f"setting {key}: {desc} (load {loadavg()})")
            path = work_dir / f"{key}.corpus.zarr"
            t0 = time.perf_counter()
            try:
                corpus = run(IngestRequest(archive, path, overwrite=True,
                                           text=TextSpec(remove=REMOVE, **kwargs)))
            except SphdistError as exc:
                result["settings"][key] = {"description": desc, "error": str(exc)}
                log(f"  refused: {exc}")
                if key == "c":
                    b_path = work_dir / "b.corpus.zarr"
                    if not b_path.exists():
                        log("  c*: needs b's corpus; run b first")
                        continue
                    t0 = time.perf_counter()
                    Xb, y = read_corpus(b_path)
                    X = prune_hashed(Xb, 5, 0.5)
                    prune_s = time.perf_counter() - t0
                    b_ingest = result["settings"].get("b", {}).get("ingest_seconds", float("nan"))
                    s = {"description": "c* (emulated): b's hashed corpus, buckets with df < 5 "
                         "or df > 0.5 n zeroed, documents re-normalised",
                         "m": X.shape[1], "m_used": int(np.unique(X.indices).size),
                         "nnz": int(X.nnz), "n_empty": int((X.getnnz(axis=1) == 0).sum()),
                         "ingest_seconds": b_ingest + prune_s, "prune_seconds": prune_s}
                    log(f"  c*: m_used {s['m_used']}, nnz {s['nnz']}, empty {s['n_empty']}")
                    s["records"] = run_methods(X, y, ranks, seeds, methods, tol, log,
                                           chunk_size=chunk_size)
                    s["summary"] = summarise(s["records"])
                    result["settings"]["c*"] = s
                    save()
                continue
            ingest_s = time.perf_counter() - t0
            X, y = read_corpus(path)
            s = {"description": desc, "m": X.shape[1], "m_used": int(np.unique(X.indices).size),
                 "nnz": int(X.nnz), "n_empty": int(corpus.n_empty), "ingest_seconds": ingest_s,
                 "n_documents": X.shape[0]}
            log(f"  ingested in {ingest_s:.1f}s: {X.shape}, nnz {X.nnz}, empty {s['n_empty']}")
            s["records"] = run_methods(X, y, ranks, seeds, methods, tol, log,
                                           chunk_size=chunk_size)
            s["summary"] = summarise(s["records"])
            result["settings"][key] = s
            save()
        if reference:
            log(f"reference: scikit-learn recipe from the raw texts (load {loadavg()})")
            t0 = time.perf_counter()
            docs = ex.read_newsgroups(archive, remove=("headers", "footers", "quotes"))
            texts = [text for group in docs for text in docs[group]]
            groups = [group for group in docs for _ in docs[group]]
            names, y = np.unique(groups, return_inverse=True)
            ref = {"read_seconds": time.perf_counter() - t0, "n_documents": len(texts),
                   "variants": []}
            for sub in (False, True):
                desc = ('TfidfVectorizer(max_df=0.5, min_df=5, stop_words="english"'
                        + (", sublinear_tf=True" if sub else "") + ")")
                t0 = time.perf_counter()
                X = TfidfVectorizer(max_df=0.5, min_df=5, stop_words="english",
                                    sublinear_tf=sub).fit_transform(texts)
                v = {"description": desc, "m": X.shape[1],
                     "vectorize_seconds": time.perf_counter() - t0}
                log(f"  {desc}: {X.shape} in {v['vectorize_seconds']:.1f}s")
                v["records"] = run_methods(X, y, ranks, seeds, ["lsa"], tol, log)
                v["summary"] = summarise(v["records"])
                ref["variants"].append(v)
                result["reference"] = ref
                save()
    save()
    click.echo(markdown(result))


if __name__ == "__main__":
    main()
