"""The main job on its embedded default: 20 Newsgroups -> corpus.zarr -> fit -> evaluate.

For the paper's five groups (comp.graphics, rec.motorcycles, rec.sport.baseball, sci.space,
talk.politics.mideast) and for all twenty, this ingests the archive from the data home
(``$SPHDIST_DATA_HOME/20news-bydate.tar.gz``, headers, footers and quotes removed, tf-idf over
2**18 hashed features), fits Spherical PCA with a checkpoint every iteration (threads in this
process for corpora this small, as ``sphdist fit`` chooses; a cluster with ``--n-workers``),
and scores k-means on the embedding (k = number of groups) by accuracy and NMI.

Run from the repository root::

    SPHDIST_DATA_HOME=../shared/data .venv/bin/python pipelines/newsgroups.py

Outputs go to ``work/newsgroups-{5,20}/`` (corpus.zarr, model.zarr) and a summary table to
stdout; ``--json`` prints the figures as one JSON object instead.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import click

from sphdist.datasets import NEWSGROUPS_PAPER_CATEGORIES, newsgroups_archive
from sphdist.jobs.cluster import connect, stored_nbytes
from sphdist.jobs.evaluate import evaluate_model
from sphdist.jobs.fit import fit_corpus
from sphdist.text.ingest import ingest

logger = logging.getLogger("sphdist")


def run_one(name, categories, work, *, n_components, max_iter, tol, seed, scheduler_address,
            n_workers):
    out = work / name
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    corpus = ingest(
        newsgroups_archive(), out / "corpus.zarr", categories=categories,
        remove=("headers", "footers", "quotes"), n_features=2**18, overwrite=True,
        progress=sys.stderr.isatty(),
    )
    ingest_s = time.perf_counter() - t0
    logger.info("%s: %d documents, nnz %d, %d empty", name, corpus.n_documents, corpus.nnz,
                corpus.n_empty)
    t0 = time.perf_counter()
    # as `sphdist fit` chooses: threads in this process for a corpus this small, unless a
    # scheduler or --n-workers is given
    with connect(scheduler_address, n_workers=n_workers, threads_per_worker=1,
                 data_nbytes=stored_nbytes(corpus)):
        model = fit_corpus(
            corpus.path, out / "model.zarr", n_components=n_components, max_iter=max_iter,
            tol=tol, random_state=seed, overwrite=True,
        )
        fit_s = time.perf_counter() - t0
        report = evaluate_model(model.path, corpus.path, random_state=seed)
    seconds = model.attrs["seconds"][1:]
    return {
        "corpus": name, "n_documents": corpus.n_documents, "n_empty": corpus.n_empty,
        "n_components": n_components, "n_iter": model.n_iter,
        "converged": model.attrs["converged"], "objective": model.objective[-1],
        "seconds_per_iteration": sum(seconds) / max(1, len(seconds)),
        "ingest_seconds": ingest_s, "fit_seconds": fit_s,
        "accuracy": report["accuracy"], "nmi": report["nmi"],
    }


@click.command()
@click.option("--work-dir", type=click.Path(path_type=Path), default=Path("work"),
              show_default=True, help="Where corpora and models are written.")
@click.option("--groups", type=click.Choice(["5", "20", "both"]), default="both",
              show_default=True)
@click.option("--n-components", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--max-iter", type=click.IntRange(min=0), default=100, show_default=True)
@click.option("--tol", type=click.FloatRange(min=0), default=1e-4, show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--scheduler-address", envvar="DASK_SCHEDULER_ADDRESS",
              help="Existing scheduler; default a LocalCluster.")
@click.option("--n-workers", type=click.IntRange(min=1), default=None,
              help="Worker processes of a LocalCluster [default: threads in this process for "
                   "a corpus that fits in memory, as `sphdist fit`].")
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def main(work_dir, groups, n_components, max_iter, tol, seed, scheduler_address, n_workers,
         as_json):
    """Ingest, fit and evaluate 20 Newsgroups (5 groups and all 20)."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("distributed").setLevel(logging.WARNING)
    runs = {"5": [("newsgroups-5", list(NEWSGROUPS_PAPER_CATEGORIES))],
            "20": [("newsgroups-20", None)]}
    selected = runs["5"] + runs["20"] if groups == "both" else runs[groups]
    results = []
    for name, categories in selected:
        results.append(run_one(
            name, categories, work_dir, n_components=n_components, max_iter=max_iter,
            tol=tol, seed=seed, scheduler_address=scheduler_address, n_workers=n_workers,
        ))
    if as_json:
        click.echo(json.dumps(results, indent=2))
        return
    click.echo("\n| corpus | documents | r | iterations | s/iteration | objective | "
               "accuracy | NMI |")
    click.echo("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        click.echo(
            f"| {r['corpus']} | {r['n_documents']} | {r['n_components']} | {r['n_iter']}"
            f"{'' if r['converged'] else ' (max)'} | {r['seconds_per_iteration']:.2f} | "
            f"{r['objective']:.1f} | {r['accuracy']:.4f} | {r['nmi']:.4f} |"
        )


if __name__ == "__main__":
    main()
