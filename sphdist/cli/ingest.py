"""``sphdist ingest``: raw text to a tf-idf corpus.zarr."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from sphdist._words import plural
from sphdist.cli._common import STORE_PATH, connect_options, json_option
from sphdist.datasets import newsgroups_archive
from sphdist.jobs import run
from sphdist.jobs._cluster_spec import ClusterSpec
from sphdist.text.defaults import DEFAULT_N_FEATURES, INGEST_DEFAULTS, MAX_CHUNK_SIZE, MAX_FEATURES
from sphdist.text.sources import FORMATS

logger = logging.getLogger("sphdist")

_N_FEATURES = click.IntRange(min=1, max=MAX_FEATURES)
_DOCUMENTS = click.IntRange(min=1, max=MAX_CHUNK_SIZE)  # a chunk or partition size


#: Options that define the features and weights: ``--like`` takes them from its model.
_FEATURE_OPTIONS = (
    "n_features", "vocabulary", "min_df", "max_df", "max_features", "select", "n_select",
    "stop_words", "strip_accents", "no_lowercase", "token_pattern", "sublinear_tf",
)


def _progress() -> bool | str:
    """A bar on a terminal, plain log lines otherwise, nothing when quiet."""
    if logger.getEffectiveLevel() > logging.INFO:
        return False
    return True if sys.stderr.isatty() else "log"


class _DocumentCount(click.ParamType):
    """A document-frequency bound: an integer count or a float fraction in [0, 1]."""

    name = "INT|FLOAT"

    def convert(self, value, param, ctx):
        if isinstance(value, (int, float)):
            return value
        try:
            return int(value)
        except ValueError:
            pass
        try:
            number = float(value)
        except ValueError:
            self.fail(f"{value!r} is neither an integer nor a float.")
        if not 0.0 <= number <= 1.0:
            self.fail(f"{value!r}: a float must be a fraction in [0, 1].")
        return number


@click.command()
@click.argument("source", required=False, nargs=-1)
@click.option("--output", "-o", required=True, type=STORE_PATH,
              help="corpus.zarr to write.")
@click.option("--format", "fmt", type=click.Choice(list(FORMATS)),
              help="Source format (default: from the path).")
@click.option("--text-field", default="text", show_default=True,
              help="JSON Lines field / CSV or Parquet column of the text.")
@click.option("--label-field", help="Field / column of the label (optional; with --like, "
              "the field its corpus was ingested with, when the documents have it).")
@click.option("--id-field", help="Field / column of the document id (default: JSON Lines' "
              "`id` field when every record has one, unique; else path:line).")
@click.option("--categories", help="Comma-separated labels to keep (folder / tar sources).")
@click.option("--max-docs-per-label", type=click.IntRange(min=1),
              help="Sample at most this many documents per label (folder / tar sources).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the per-label sampling.")
@click.option("--vocabulary/--hashing", default=INGEST_DEFAULTS["vocabulary"], show_default=True,
              help="Features: learn a vocabulary (the terms, stored in the corpus, so "
                   "components read as words), or hash the tokens into --n-features features "
                   "(no vocabulary on the driver: for collections whose distinct terms do not "
                   "fit in its memory; each fit step then costs n_features x r).")
@click.option("--n-features", type=_N_FEATURES,
              help=f"--hashing: hashed feature space size m [default: {DEFAULT_N_FEATURES}].")
@click.option("--min-df", type=_DocumentCount(),
              help="Vocabulary: keep terms in at least this many documents (float: fraction) "
                   f"[default: {INGEST_DEFAULTS['min_df']}; a collection of fewer than 10 "
                   "documents needs --min-df 1 --max-df 1.0].")
@click.option("--max-df", type=_DocumentCount(),
              help="Vocabulary: keep terms in at most this many documents (float: fraction) "
                   f"[default: {INGEST_DEFAULTS['max_df']}].")
@click.option("--max-features", type=click.IntRange(min=1),
              help="Vocabulary: keep the terms of highest total count.")
@click.option("--select", type=click.Choice(["mutual-info"]),
              help="Vocabulary with labels: keep the --n-select terms of highest mutual "
                   "information with the label (Liu et al. 2019, §5.2).")
@click.option("--n-select", type=click.IntRange(min=1), default=500, show_default=True,
              help="Number of terms --select keeps (the paper keeps 500).")
@click.option("--stop-words", type=click.Choice(["english", "none"]),
              default=INGEST_DEFAULTS["stop_words"], show_default=True,
              help="Stop words dropped before counting (scikit-learn's English list), or none.")
@click.option("--strip-accents", type=click.Choice(["ascii", "unicode"]),
              help="Remove accents as scikit-learn's vectorizers do (ascii: fast, unicode: all).")
@click.option("--no-lowercase", is_flag=True, help="Keep the case of the tokens.")
@click.option("--token-pattern", default=r"(?u)\b\w\w+\b", show_default=True,
              help="Regular expression of a token (scikit-learn's token_pattern).")
@click.option("--sublinear-tf/--no-sublinear-tf", default=INGEST_DEFAULTS["sublinear_tf"],
              show_default=True, help="Weight 1 + ln(tf) instead of the raw count tf.")
@click.option("--remove-headers/--keep-headers", default=None,
              help="Strip headers, signature footers and quoted replies (scikit-learn's "
                   "remove=('headers', 'footers', 'quotes')), or keep them [default: keep; "
                   "with --like, as the model's corpus was ingested]. Documents this leaves "
                   "without a token are counted in a warning; an ingest it leaves empty fails.")
@click.option("--like", type=STORE_PATH,
              help="corpus.zarr or model.zarr whose features, tf-idf options, idf and "
                   "vocabulary to reuse (for documents to transform with that model); "
                   "--remove-headers/--keep-headers override its cleaning.")
@click.option("--encoding", default="latin-1", show_default=True,
              help="Encoding of folder / tar documents (JSON Lines and CSV are UTF-8).")
@click.option("--on-error", type=click.Choice(["fail", "skip"]), default="fail",
              show_default=True,
              help="A document that cannot be used (undecodable, binary, too long, a bad "
                   "line, a symbolic link out of a source folder): stop with an error naming "
                   "it, or skip it and count it.")
@click.option("--max-doc-bytes", type=click.IntRange(min=1), default=10_000_000,
              show_default=True,
              help="Longest accepted document, in bytes (after decompression): the bound on "
                   "the memory one document takes while it is tokenised, about 15 times its "
                   "size. A longer one is a bad document (--on-error).")
@click.option("--chunk-size", type=_DOCUMENTS, default=4096, show_default=True,
              help="Documents per stored chunk, at most: a chunk also ends before a "
                   "document that would take its text past 16 Mi characters.")
@click.option("--partition-size", type=_DOCUMENTS,
              help="Documents per counting task (default 4 chunks).")
@click.option("--n-workers", "--workers", "workers", type=click.IntRange(min=1),
              help="Worker processes of a local Dask cluster (default: this machine's cores, "
                   "threads, or a pool of processes for 50,000 documents or more on 4 cores or "
                   "more; 1: one task at a time in this process).")
@click.option("--scheduler-address", envvar="DASK_SCHEDULER_ADDRESS",
              help="Run on an existing Dask scheduler [env DASK_SCHEDULER_ADDRESS].")
@click.option("--overwrite", is_flag=True, help="Replace an existing output.")
@json_option("Print the summary as one JSON object.")
def ingest(source: tuple[str, ...], output: Path, like: Path | None, workers: int | None,
           scheduler_address: str | None, overwrite: bool, as_json: bool,
           **options: Any) -> None:
    """Turn text into a tf-idf corpus.zarr.

    SOURCE: a folder tree or .tar.gz (label = parent folder), JSON Lines (.gz), CSV or Parquet
    files; several paths or quoted glob patterns. SOURCE defaults to the 20 Newsgroups archive
    in the data home ($SPHDIST_DATA_HOME).

    Defaults for text: a learned vocabulary of the terms in at least 5 documents and at most
    half of them, English stop words dropped, sublinear tf (on 20 Newsgroups they raised
    Spherical PCA's clustering accuracy from 0.24 to 0.43 over 2^18 hashed features; see
    pipelines/results/text_defaults.md). --hashing [--n-features N] hashes instead.
    """
    from sphdist.jobs.ingest import IngestRequest  # scikit-learn: not for --help (test_startup)

    if like is not None:
        ctx = click.get_current_context()
        given = [name for name in _FEATURE_OPTIONS
                 if ctx.get_parameter_source(name) != click.core.ParameterSource.DEFAULT]
        if given:
            raise click.UsageError(
                f"--like takes the features and tf-idf options from {like}; drop "
                + ", ".join("--" + g.replace("_", "-") for g in given) + "."
            )
    sources = list(source) if source else [str(newsgroups_archive())]
    src, text = _specs(sources[0] if len(sources) == 1 else sources, **options)
    request = IngestRequest(src, output, text=text, like=like,
                            chunk_size=options["chunk_size"],
                            partition_size=options["partition_size"], overwrite=overwrite,
                            progress=_progress())
    corpus = run(request, on=_scheduler(scheduler_address, workers))
    meta = corpus.attrs.get("ingest", {})
    summary = {
        "output": str(output), "n_documents": corpus.n_documents,
        "n_features": corpus.n_features, "nnz": corpus.nnz, "n_chunks": corpus.n_chunks,
        "n_empty": corpus.n_empty, "n_labels": len(corpus.label_names or []),
        **{k: meta.get(k) for k in ("n_skipped", "skipped_examples", "n_blank_text",
                                    "n_partitions", "workers", "scheduler", "seconds",
                                    "format")},
    }
    if as_json:
        click.echo(json.dumps(summary))
        return
    click.echo(
        f"wrote {output}: {plural(corpus.n_documents, 'document')}, "
        f"{plural(corpus.n_features, 'feature')}, nnz {corpus.nnz}, "
        f"{plural(corpus.n_chunks, 'chunk')}, {corpus.n_empty} empty, "
        f"{plural(len(corpus.label_names or []), 'label')}, {summary['n_skipped']} skipped"
    )


def _specs(paths: Any, *, fmt: str | None, categories: str | None, stop_words: str,
           no_lowercase: bool, remove_headers: bool | None, max_doc_bytes: int,
           chunk_size: int, partition_size: int | None, **options: Any) -> tuple[Any, Any]:
    """The :class:`SourceSpec` and :class:`TextSpec` of the command's options."""
    from sphdist.text.ingest import REMOVE_OPTIONS, SourceSpec, TextSpec  # scikit-learn, too

    source_fields = {f.name for f in dataclasses.fields(SourceSpec)}
    src = SourceSpec(
        paths, format=fmt, max_document_bytes=max_doc_bytes,
        categories=[c.strip() for c in categories.split(",")] if categories else None,
        **{k: v for k, v in options.items() if k in source_fields},
    )
    text = TextSpec(
        stop_words=None if stop_words == "none" else stop_words, lowercase=not no_lowercase,
        remove=None if remove_headers is None else REMOVE_OPTIONS if remove_headers else (),
        **{k: v for k, v in options.items() if k not in source_fields},
    )
    return src, text


def _scheduler(address: str | None, n_workers: int | None) -> Any:
    """Where dask runs the ingest's tasks: a scheduler, a LocalCluster, or this process."""
    if address or (n_workers or 1) > 1:
        return connect_options(ClusterSpec(address, n_workers=None if address else n_workers))
    if n_workers == 1:
        import dask

        return dask.config.set(scheduler="synchronous")
    return contextlib.nullcontext()  # the ingest chooses: threads or its process pool


@click.command()
@click.option("--n-docs", required=True, type=click.IntRange(min=1), help="Documents to draw.")
@click.option("--n-topics", required=True, type=click.IntRange(min=1),
              help="Topics (= labels, the dominant topic of each document).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the generator: the same seed writes the same collection.")
@click.option("--doc-length", type=click.IntRange(min=1), default=100, show_default=True,
              help="Mean tokens per document (Poisson).")
@click.option("--vocab-size", type=click.IntRange(min=1), default=50_000, show_default=True,
              help="Distinct words (Zipfian ranks).")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "csv", "corpus"]),
              help="jsonl: raw text lines {id, label, text}; csv: the same as columns id, "
                   "label, text (.gz after either compresses); corpus: a tf-idf corpus.zarr, "
                   "as `sphdist ingest --hashing --stop-words none --no-sublinear-tf` of "
                   "those lines would write [default: from the suffix of --output; given, it "
                   "must agree with it].")
@click.option("--n-features", type=_N_FEATURES, default=2**18, show_default=True,
              help="Hashed features (--format corpus).")
@click.option("--vocabulary", is_flag=True,
              help="Corpus with the learned-vocabulary scheme instead of hashing.")
@click.option("--chunk-size", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Documents per generated and stored chunk.")
@click.option("--output", "-o", required=True, type=STORE_PATH,
              help="File or store to write: *.jsonl, *.csv (each also .gz) or *.zarr (a "
                   "corpus).")
@click.option("--overwrite", is_flag=True, help="Replace an existing output.")
@json_option("Print the summary as one JSON object.")
def synth(
    n_docs: int, n_topics: int, seed: int, doc_length: int, vocab_size: int, fmt: str | None,
    n_features: int, vocabulary: bool, chunk_size: int, output: Path, overwrite: bool,
    as_json: bool,
) -> None:
    """Write a seeded synthetic collection: Zipfian words, topic mixtures, known labels."""
    from sphdist.jobs.synth import SynthRequest  # SciPy, tqdm: not for --help (test_startup)

    summary = run(SynthRequest(
                               n_docs=n_docs, n_topics=n_topics, seed=seed, doc_length=doc_length,
                               vocab_size=vocab_size, n_features=n_features, vocabulary=vocabulary,
        chunk_size=chunk_size, output=output, format=fmt, overwrite=overwrite,
                               progress=sys.stderr.isatty() and logger.level <= logging.INFO))
    if as_json:
        click.echo(json.dumps(summary.to_dict()))
    else:
        click.echo(
            f"wrote {output}: {plural(summary.n_docs, 'document')}, "
            f"{plural(summary.n_topics, 'topic')}, "
            f"{summary.nnz / summary.n_docs:.1f} distinct features per document, "
            f"{summary.seconds:.1f} s"
        )
