"""``sphdist transform``, ``sphdist export``, ``sphdist neighbors``: using a fitted embedding."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from sphdist.cli._common import (
    STORE_PATH,
    cluster_options,
    connect_options,
    echo_json,
    json_option,
    progress_mode,
)

logger = logging.getLogger("sphdist")

_MODEL = click.option("--model", "-m", required=True, type=STORE_PATH,
                      help="model.zarr.")
#: The documents of ``export`` and ``neighbors``: a corpus or an embedding.zarr.
_EMBEDDED = click.option(
    "--input", "-i", "input_", type=STORE_PATH,
    help="The documents: the training corpus [default: the path the model recorded] or an "
         "embedding.zarr from `sphdist transform`.",
)
_JSON = json_option()


def _report(report: dict, as_json: bool, line: str) -> None:
    """Print the command's ``report`` as one JSON object (``--json``), else ``line``."""
    if as_json:
        echo_json(report)
    else:
        click.echo(line)


@click.command()
@_MODEL
@click.option("--input", "-i", "input_", required=True, type=STORE_PATH,
              help="corpus.zarr in the model's feature space (`sphdist ingest --like MODEL`).")
@click.option("--output", "-o", required=True, type=STORE_PATH,
              help="embedding.zarr to write.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --output.")
@cluster_options
@_JSON
def transform(
    model: Path, input_: Path, output: Path, overwrite: bool, scheduler_address: str | None,
    n_workers: int | None, threads_per_worker: int, memory_limit: str, tls_ca_file: str | None,
    tls_cert: str | None, tls_key: str | None, as_json: bool,
) -> None:
    """Embed the documents of a corpus with a fitted model (the exact V-step, on Dask)."""
    from sphdist.jobs.info import plural
    from sphdist.jobs.transform import check_transform, transform_corpus

    # refuse swapped paths, a mismatched corpus or an existing output before any cluster
    # starts; on one machine it runs in this process, as a fit does
    check_transform(model, input_, output, overwrite=overwrite)
    with connect_options(scheduler_address, n_workers, threads_per_worker, memory_limit,
                         tls_ca_file, tls_cert, tls_key):
        emb = transform_corpus(
            model, input_, output, overwrite=overwrite, progress=progress_mode()
        )
    r, n = emb.V.shape
    report = {
        "output": str(output), "n_documents": int(n), "n_components": int(r),
        "n_degenerate": emb.attrs["n_degenerate"], "model": emb.attrs["model"]["path"],
    }
    _report(report, as_json, f"wrote {output}: {plural(n, 'document')} embedded in r={r} "
                             f"dimensions ({report['n_degenerate']} with no feature in common "
                             "with the model)")


@click.command()
@_MODEL
@_EMBEDDED
@click.option("--format", "-f", "format_", type=click.Choice(["parquet", "npy"]),
              default="parquet", show_default=True,
              help="parquet: columns doc_id, label, e0..e{r-1}; npy: array (n, r) + "
                   "<stem>.ids.csv (doc_id, label per row).")
@click.option("--output", "-o", required=True, type=STORE_PATH,
              help="File to write, in --format (npy: with <stem>.ids.csv beside it).")
@click.option("--overwrite", is_flag=True, help="Replace an existing --output.")
@_JSON
def export(
    model: Path, input_: Path | None, format_: str, output: Path, overwrite: bool, as_json: bool
) -> None:
    """Write the embeddings with their document ids (Parquet or .npy)."""
    from sphdist.jobs.embedding import export_embedding
    from sphdist.jobs.info import plural

    report = export_embedding(model, output, format=format_, input=input_, overwrite=overwrite)
    extra = f" (+ ids in {report['sidecar']})" if "sidecar" in report else ""
    _report(report, as_json, f"wrote {output}: {plural(report['n_documents'], 'document')} x "
                             f"{report['n_components']} components, {format_}{extra}")


@click.command()
@_MODEL
@_EMBEDDED
@click.option("--query", "-q", help="Text to embed with the model's feature scheme and idf.")
@click.option("--doc-id", help="Id of a document of --input.")
@click.option("-k", "k", type=click.IntRange(min=1), default=10, show_default=True,
              help="Number of neighbours.")
@click.option("--include-self", is_flag=True,
              help="With --doc-id: count the document itself (angle 0) among the k; by "
                   "default the k are other documents.")
@_JSON
def neighbors(
    model: Path, input_: Path | None, query: str | None, doc_id: str | None, k: int,
    include_self: bool, as_json: bool,
) -> None:
    """Nearest documents by angle on the sphere (= by Euclidean distance of the embeddings)."""
    from sphdist.jobs.embedding import (
        document_embedding,
        embed_texts,
        nearest_neighbors,
        open_embedding_source,
    )

    if (query is None) == (doc_id is None):
        raise click.UsageError("pass exactly one of --query TEXT and --doc-id ID.")
    source = open_embedding_source(
        model, input_, verb="neighbors",
        rest=("--doc-id", doc_id) if doc_id is not None else ("--query", str(query)),
    )
    own = None  # the document of --doc-id, left out unless --include-self
    if doc_id is not None:
        own, vector = document_embedding(source, doc_id)
    else:
        vector = embed_texts(model, [query])[:, 0]  # type: ignore[list-item]
    hits = nearest_neighbors(source, vector, k, exclude=None if include_self else own)
    if as_json:
        echo_json({"query": query, "doc_id": doc_id, "k": k, "neighbors": hits})
        return
    width = max([len(h["doc_id"]) for h in hits] + [6])
    click.echo(f"{'rank':>4}  {'angle':>7}  {'cosine':>8}  {'doc_id':<{width}}  label")
    for h in hits:
        click.echo(
            f"{h['rank']:>4}  {h['angle_deg']:>6.2f}°  {h['cosine']:>8.5f}  "
            f"{h['doc_id']:<{width}}  {h['label'] or ''}"
        )


COMMANDS = [transform, export, neighbors]
