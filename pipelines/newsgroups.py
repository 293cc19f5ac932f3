"""The main job: 20 Newsgroups -> corpus.zarr -> Spherical PCA, beside LSA and BAE.

For the paper's five groups (comp.graphics, rec.motorcycles, rec.sport.baseball, sci.space,
talk.politics.mideast) and for all twenty, on the archive in the data home
(``$SPHDIST_DATA_HOME/20news-bydate.tar.gz``; headers, footers and quotes removed), in one run:

- **Spherical PCA (sphdist)**: ``sphdist ingest``'s defaults (a learned vocabulary of the terms
  in 5 to 50% of the documents, English stop words, sublinear tf-idf), then the stored-corpus
  fit with its default checkpoints (threads in this process for corpora this small, as
  ``sphdist fit`` chooses; a cluster with ``--n-workers``), then k-means on the embedding;
- **BAE (sphdist)** on the same stored features: ``sphdist.BAE`` (truncated SVD, unit rows:
  sphdist's own LSA), then the same k-means;
- **the LSA recipe (scikit-learn)** on the raw cleaned texts, as scikit-learn documents it for
  text clustering: ``TfidfVectorizer(max_df=0.5, min_df=5, stop_words="english")`` ->
  ``TruncatedSVD(r)`` -> ``Normalizer`` -> the same k-means.

k-means: k = number of groups, ``n_init=10``, seeded (:func:`sphdist.metrics.evaluate_embedding`),
scored by clustering accuracy (Hungarian matching) and NMI; beside them the 10-NN label accuracy
(cosine, stratified 5-fold, :func:`sphdist.metrics.knn_accuracy`), which does not depend on the
clusters being balanced. r = 100 by default, the LSA
recipe's documented r; at r = 20 Spherical PCA and LSA were indistinguishable on this archive
(``pipelines/results/text_defaults.md``). Seconds are wall seconds of each step in this process.

Run from the repository root::

    SPHDIST_DATA_HOME=../shared/data .venv/bin/python pipelines/newsgroups.py

Outputs go to ``work/newsgroups-{5,20}/`` (corpus.zarr, model.zarr, and the map of the
Spherical PCA embedding: model.layout.zarr and ``map.html``, as ``sphdist layout`` and
``sphdist map`` write them; open ``work/newsgroups-20/map.html`` in a browser) and a table to
stdout; ``--json`` prints the figures as one JSON object instead.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import _experiments as ex
import click
import numpy as np
import scipy.sparse as sp
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.preprocessing import Normalizer

from sphdist import BAE
from sphdist.datasets import NEWSGROUPS_PAPER_CATEGORIES, newsgroups_archive
from sphdist.jobs import run
from sphdist.jobs.cluster import connect
from sphdist.jobs.evaluate import EvaluateRequest
from sphdist.jobs.fit import FitRequest
from sphdist.jobs.ingest import IngestRequest
from sphdist.jobs.layout import LayoutRequest
from sphdist.jobs.map_page import MapRequest
from sphdist.metrics import evaluate_embedding, knn_accuracy
from sphdist.text.ingest import REMOVE_OPTIONS, SourceSpec, TextSpec

logger = logging.getLogger("sphdist")

#: scikit-learn's documented text-clustering vectorizer (the LSA recipe).
LSA_VECTORIZER = {"max_df": 0.5, "min_df": 5, "stop_words": "english"}


def _scored(method, Z, y, seed, **figures):
    """k-means on the embedding Z (n, r): accuracy, NMI, the seconds it took; 10-NN accuracy."""
    Z = np.asarray(Z, dtype=np.float64)
    t0 = time.perf_counter()
    report = evaluate_embedding(Z, y, random_state=seed)
    kmeans_s = time.perf_counter() - t0
    return {"method": method, **figures, "accuracy": report["accuracy"],
            "nmi": report["nmi"], "kmeans_seconds": kmeans_s,
            "knn_accuracy": knn_accuracy(Z, y, random_state=seed)["knn_accuracy"]}


def spherical_pca(corpus, out, *, n_components, max_iter, tol, seed, scheduler_address,
                  n_workers):
    """The stored-corpus fit (as ``sphdist fit``), then k-means (as ``sphdist evaluate``)."""
    t0 = time.perf_counter()
    # threads in this process (X held in memory), unless a scheduler or --n-workers
    with connect(scheduler_address, n_workers=n_workers, threads_per_worker=1):
        model = run(FitRequest(corpus.path, out / "model.zarr", n_components=n_components,
                               max_iter=max_iter, tol=tol, random_state=seed, overwrite=True))
        fit_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        report = run(EvaluateRequest(model.path, corpus.path, random_state=seed, knn_k=None))
        kmeans_s = time.perf_counter() - t0
        V = model.V().compute().T  # the same embedding, for the 10-NN accuracy
    return {"method": "Spherical PCA (sphdist)", "features": corpus.n_features,
            "n_iter": model.n_iter, "converged": model.attrs["converged"],
            "objective": model.objective[-1], "seconds": fit_s,
            "accuracy": report["accuracy"], "nmi": report["nmi"], "kmeans_seconds": kmeans_s,
            "knn_accuracy": knn_accuracy(V, np.asarray(corpus.labels),
                                         random_state=seed)["knn_accuracy"]}


def bae(corpus, *, n_components, seed):
    """sphdist.BAE on the stored features, read into memory (n, m), then k-means."""
    X = sp.hstack([corpus.read_chunk(i) for i in range(corpus.n_chunks)], format="csc")
    X = X.T.tocsr()
    y = np.asarray(corpus.labels)
    t0 = time.perf_counter()
    Z = BAE(n_components=n_components, random_state=seed).fit_transform(X)
    return _scored("BAE (sphdist, same features)", Z, y, seed, features=X.shape[1],
                   seconds=time.perf_counter() - t0)


def lsa_recipe(texts, y, *, n_components, seed):
    """scikit-learn's recipe on the raw cleaned texts: tf-idf, SVD, unit rows, then k-means."""
    t0 = time.perf_counter()
    X = TfidfVectorizer(**LSA_VECTORIZER).fit_transform(texts)
    vectorize_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    Z = TruncatedSVD(n_components=n_components, random_state=seed).fit_transform(X)
    Z = Normalizer(copy=False).fit_transform(Z)
    return _scored("LSA recipe (scikit-learn, raw texts)", Z, y, seed, features=X.shape[1],
                   seconds=time.perf_counter() - t0, features_seconds=vectorize_s)


class _NoReingestHint(logging.Filter):
    """Drops ingest's warning about documents the news cleaning emptied, and its remedy.

    That warning suggests ingesting again without the cleaning, with ``--overwrite``: for 20
    Newsgroups it is noise (every post has headers; the posts emptied are those that were
    only quoted text or a signature, counted in this job's "N empty" line instead), and,
    pasted, it would replace the corpus this run's model is fitted on. A hint never suggests
    replacing a corpus a model of the same run depends on.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno == logging.WARNING
                    and "no token left after" in str(record.msg))


def ingest_newsgroups(source, output):
    """``sphdist ingest``'s defaults and the news cleaning, ``source`` -> ``output``.

    The corpus of one run (replaced if there); returns the :class:`~sphdist.io.corpus.Corpus`.
    """
    hint = _NoReingestHint()
    logger.addFilter(hint)
    try:
        return run(IngestRequest(
            source, output, text=TextSpec(remove=REMOVE_OPTIONS), overwrite=True,
            progress=sys.stderr.isatty() and logger.isEnabledFor(logging.INFO)))
    finally:
        logger.removeFilter(hint)


def write_map(out, *, seed):
    """``sphdist layout`` and ``sphdist map`` of the run's model: ``out/map.html``."""
    t0 = time.perf_counter()
    layout = run(LayoutRequest(out / "model.zarr", seed=seed, overwrite=True))
    page = run(MapRequest(out / "model.zarr", out / "map.html", seed=seed, overwrite=True))
    logger.info("%s: %d documents laid out (%.0f%% of their 10 nearest neighbours kept), "
                "the map in %s (%.1f MiB), %.1f s", out.name, layout["n_laid_out"],
                100 * (layout["kept_10nn"] or 0), page["output"], page["bytes"] / 2**20,
                time.perf_counter() - t0)
    return {"map": page["output"], "kept_10nn": layout["kept_10nn"],
            "map_seconds": time.perf_counter() - t0}


def run_one(name, categories, work, texts_by_group, *, n_components, seed, draw_map=True,
            **fit):
    out = work / name
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    corpus = ingest_newsgroups(SourceSpec(newsgroups_archive(), categories=categories),
                               out / "corpus.zarr")
    ingest_s = time.perf_counter() - t0
    logger.info("%s: %d documents, %d features, nnz %d, %d empty", name, corpus.n_documents,
                corpus.n_features, corpus.nnz, corpus.n_empty)
    groups = sorted(texts_by_group) if categories is None else sorted(categories)
    texts = [t for g in groups for t in texts_by_group[g]]
    y = np.repeat(np.arange(len(groups)), [len(texts_by_group[g]) for g in groups])
    rows = [
        {**spherical_pca(corpus, out, n_components=n_components, seed=seed, **fit),
         "features_seconds": ingest_s},
        {**bae(corpus, n_components=n_components, seed=seed), "features_seconds": ingest_s},
        lsa_recipe(texts, y, n_components=n_components, seed=seed),
    ]
    for row in rows:
        logger.info("%s %s: accuracy %.4f, NMI %.4f, %.1f s", name, row["method"],
                    row["accuracy"], row["nmi"], row["seconds"])
    return {"corpus": name, "n_documents": corpus.n_documents, "n_empty": corpus.n_empty,
            "n_components": n_components, "seed": seed, "methods": rows,
            **(write_map(out, seed=seed) if draw_map else {})}


def table(results) -> str:
    """The figures as a markdown table: the scores first, right after the method.

    The scores are what the table is for, so they stay in view where a page is narrower than
    the table (the docs' getting-started page scrolls it).
    """
    lines = ["| corpus | method | accuracy | NMI | 10-NN accuracy | documents | features | r | "
             "iterations | features s | embedding s | k-means s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for res in results:
        for row in res["methods"]:
            iters = (f"{row['n_iter']}{'' if row['converged'] else ' (max)'}"
                     if "n_iter" in row else "–")
            lines.append(
                f"| {res['corpus']} | {row['method']} | {row['accuracy']:.4f} | "
                f"{row['nmi']:.4f} | {row['knn_accuracy']:.4f} | {res['n_documents']} | "
                f"{row['features']:,} | {res['n_components']} | {iters} | "
                f"{row['features_seconds']:.1f} | {row['seconds']:.1f} | "
                f"{row['kmeans_seconds']:.1f} |")
    return "\n".join(lines)


@click.command()
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("work"),
              show_default=True, help="Where corpora and models are written.")
@click.option("--groups", type=click.Choice(["5", "20", "both"]), default="both",
              show_default=True, help="The paper's five groups, all twenty, or both.")
@click.option("--n-components", "-r", type=click.IntRange(min=1), default=100,
              show_default=True,
              help="Embedding dimension r of every method (the LSA recipe's documented r).")
@click.option("--max-iter", type=click.IntRange(min=0), default=100, show_default=True,
              help="Spherical PCA: most iterations.")
@click.option("--tol", type=click.FloatRange(min=0), default=1e-4, show_default=True,
              help="Spherical PCA: stop when the relative objective change is below this.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of every method's initialisation and of k-means.")
@click.option("--scheduler-address", envvar="DASK_SCHEDULER_ADDRESS",
              help="Existing Dask scheduler for the Spherical PCA fit.")
@click.option("--n-workers", type=click.IntRange(min=1), default=None,
              help="Worker processes of a LocalCluster [default: threads in this process for "
                   "a corpus that fits in memory, as `sphdist fit`].")
@click.option("--map/--no-map", "draw_map", default=True, show_default=True,
              help="Lay out the Spherical PCA embedding and write its page, map.html, beside "
                   "the model (`sphdist layout`, `sphdist map`).")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def main(work_dir, groups, n_components, max_iter, tol, seed, scheduler_address, n_workers,
         draw_map, as_json):
    """Ingest, embed and cluster 20 Newsgroups (5 groups and all 20) three ways."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("distributed").setLevel(logging.WARNING)
    runs = {"5": [("newsgroups-5", list(NEWSGROUPS_PAPER_CATEGORIES))],
            "20": [("newsgroups-20", None)]}
    selected = runs["5"] + runs["20"] if groups == "both" else runs[groups]
    t0 = time.perf_counter()
    texts_by_group = ex.read_newsgroups(newsgroups_archive(), remove=REMOVE_OPTIONS)
    logger.info("raw texts for the LSA recipe read and cleaned in %.1f s",
                time.perf_counter() - t0)
    results = [
        run_one(name, categories, work_dir, texts_by_group, n_components=n_components,
                seed=seed, max_iter=max_iter, tol=tol, scheduler_address=scheduler_address,
                n_workers=n_workers, draw_map=draw_map)
        for name, categories in selected
    ]
    if as_json:
        click.echo(json.dumps(results, indent=2))
        return
    click.echo("\n" + table(results))
    for res in results:
        if "map" in res:
            click.echo(f"\n{res['corpus']}: the map of its Spherical PCA embedding is "
                       f"{res['map']} (open it in a browser; it needs no network)")


if __name__ == "__main__":
    main()
