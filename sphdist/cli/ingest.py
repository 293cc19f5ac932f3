"""``sphdist ingest``: raw text to a tf-idf corpus.zarr."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import click

logger = logging.getLogger("sphdist")


@click.command()
@click.argument("source", required=False, type=click.Path(path_type=Path))
@click.option("--output", "-o", required=True, type=click.Path(path_type=Path),
              help="corpus.zarr to write.")
@click.option("--categories", help="Comma-separated labels to keep (default: all).")
@click.option("--max-docs-per-label", type=click.IntRange(min=1),
              help="Sample at most this many documents per label.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the per-label sampling.")
@click.option("--n-features", type=click.IntRange(min=1), default=2**18, show_default=True,
              help="Hashed feature space size m.")
@click.option("--remove-headers", is_flag=True,
              help="Strip headers, signature footers and quoted replies (scikit-learn's "
                   "remove=('headers', 'footers', 'quotes')).")
@click.option("--chunk-size", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Documents per stored chunk.")
@click.option("--overwrite", is_flag=True, help="Replace an existing output.")
def ingest(
    source: Path | None, output: Path, categories: str | None, max_docs_per_label: int | None,
    seed: int, n_features: int, remove_headers: bool, chunk_size: int, overwrite: bool,
) -> None:
    """Turn a tree or .tar.gz of text files (label = parent folder) into a tf-idf corpus.zarr.

    SOURCE defaults to the 20 Newsgroups archive in the data home ($SPHDIST_DATA_HOME).
    """
    from ..datasets import newsgroups_archive
    from ..ingest import ingest as run_ingest

    corpus = run_ingest(
        source if source is not None else newsgroups_archive(),
        output,
        categories=[c.strip() for c in categories.split(",")] if categories else None,
        max_docs_per_label=max_docs_per_label, seed=seed, n_features=n_features,
        remove=("headers", "footers", "quotes") if remove_headers else (),
        chunk_size=chunk_size, overwrite=overwrite,
        progress=sys.stderr.isatty() and logger.level <= logging.INFO,
    )
    click.echo(
        f"wrote {output}: {corpus.n_documents} documents, {corpus.n_features} features, "
        f"nnz {corpus.nnz}, {corpus.n_chunks} chunks, {corpus.n_empty} empty, "
        f"{len(corpus.label_names or [])} labels"
    )



COMMANDS = [ingest]
