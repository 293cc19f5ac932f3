"""``sphdist transform``, ``export``, ``index``, ``neighbors``: using a fitted embedding."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sphdist._words import plural
from sphdist.cli._common import (
    CLUSTER_OPTIONS,
    STORE_PATH,
    cluster_options,
    connect_options,
    echo_json,
    json_option,
    param_option,
    progress_mode,
)
from sphdist.errors import ParameterError
from sphdist.jobs import run

if TYPE_CHECKING:
    from sphdist.jobs.cluster import ClusterSpec

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
@param_option("device")
@cluster_options
@_JSON
def transform(
    model: Path, input_: Path, output: Path, overwrite: bool, device: str,
    cluster: ClusterSpec, as_json: bool,
) -> None:
    """Embed the documents of a corpus with a fitted model (the exact V-step, on Dask)."""
    # dask, zarr and fsspec: when the command runs, never for --help (test_startup.py)
    from sphdist.jobs.transform import TransformRequest

    # every refusal (swapped paths, a mismatched corpus, an existing output, no device) comes
    # before any cluster starts; on one machine it runs in this process, as a fit does
    request = TransformRequest(model, input_, output, overwrite=overwrite, device=device,
                               progress=progress_mode())
    emb = run(request, on=connect_options(cluster))
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
@click.option("--format", "-f", "format_", type=click.Choice(["parquet", "npy", "csv"]),
              help="parquet or csv: columns doc_id, label, e0..e{r-1}; npy: array (n, r) + "
                   "<stem>.ids.csv (doc_id, label per row) [default: from the suffix of "
                   "--output; given, it must agree with it].")
@click.option("--output", "-o", required=True, type=STORE_PATH,
              help="File to write: *.parquet, *.npy (with <stem>.ids.csv beside it) or *.csv.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --output.")
@_JSON
def export(
    model: Path, input_: Path | None, format_: str | None, output: Path, overwrite: bool,
    as_json: bool,
) -> None:
    """Write the embeddings with their document ids (Parquet, CSV or .npy, by the suffix)."""
    # zarr and fsspec: when the command runs, never for --help (test_startup.py)
    from sphdist.jobs.export import ExportRequest

    report = run(ExportRequest(model, output, format=format_, input=input_,
                               overwrite=overwrite))
    extra = f" (+ ids in {report['sidecar']})" if "sidecar" in report else ""
    _report(report, as_json, f"wrote {output}: {plural(report['n_documents'], 'document')} x "
                             f"{report['n_components']} components, {report['format']}{extra}")


@click.command()
@_MODEL
@_EMBEDDED
@click.option("--output", "-o", type=STORE_PATH,
              help="index.zarr to write [default: <model>.index.zarr beside the model, or "
                   "<embedding>.index.zarr beside an --input embedding: where `sphdist "
                   "neighbors` looks].")
@click.option("--kind", type=click.Choice(["auto", "flat", "ivf"]), default="auto",
              show_default=True,
              help="flat: exact inner-product scan; ivf: inverted file (approximate, fast at "
                   "scale); auto: flat up to 100,000 documents, ivf above.")
@click.option("--nlist", type=click.IntRange(min=1),
              help="Inverted lists of an ivf index [default: sqrt(n), a power of two].")
@click.option("--nprobe", type=click.IntRange(min=1),
              help="Lists an ivf index scans per query, stored with it (`neighbors --nprobe` "
                   "overrides it) [default: 32].")
@click.option("--overwrite", is_flag=True, help="Replace an existing --output.")
@click.option("--check", is_flag=True,
              help="Build nothing: verify the index at --output against the model (every "
                   "byte against its sha256, its structure, every id; each search checks "
                   "only its size, a sample and its structure).")
@_JSON
def index(
    model: Path, input_: Path | None, output: Path | None, kind: str, nlist: int | None,
    nprobe: int | None, overwrite: bool, check: bool, as_json: bool,
) -> None:
    """Build the nearest-neighbour index (faiss) of a model's embeddings."""
    # zarr and fsspec: when the command runs, never for --help (test_startup.py)
    from sphdist.io import stored_kind
    from sphdist.jobs import neighbors as jobs

    if output is None:

        origin = "embedding" if input_ is not None and stored_kind(input_) == "embedding" \
            else "model"
        output = jobs.default_index_path(model, input_, origin)
    if check:
        if overwrite or nlist or nprobe or kind != "auto":
            raise ParameterError(
                "--check verifies an index and builds nothing, so --kind, --nlist, --nprobe "
                f"and --overwrite do nothing with it. To resolve this, run `sphdist index "
                f"--model {model} --output {output} --check`.")
        report = jobs.check_index(model, output, input=input_)
        _report(report, as_json, f"{report['path']}: ok, {plural(report['n_indexed'], 'document')}"
                                 f" indexed, {report['nbytes'] / 2**20:.1f} MiB verified"
                                 + ("; the copy of the document ids and its lookup table too"
                                    if report.get("doc_ids") else ""))
        return
    report = run(jobs.IndexRequest(model, output, input=input_, kind=kind, nlist=nlist,
                                   nprobe=nprobe, overwrite=overwrite))
    how = (f"ivf, {report['nlist']} lists, nprobe {report['nprobe']}"
           if report["kind"] == "ivf" else "flat, exact")
    _report(report, as_json, f"wrote {report['output']}: {plural(report['n_indexed'], 'document')}"
                             f" indexed ({how}), {report['nbytes'] / 2**20:.1f} MiB, "
                             f"{report['seconds']:.1f} s")


#: The options of ``neighbors`` that do something only in some modes: option -> (the modes,
#: why it does nothing elsewhere). The modes: query, doc_id, queries, ids (--queries --ids), all.
_NEIGHBOR_OPTIONS = {
    "ids": ({"queries", "ids"}, "it says what the lines of --queries are"),
    "include_self": ({"doc_id", "ids"}, "it applies to --doc-id and --queries FILE --ids only "
                                        "(it counts the query document among its k)"),
    "output": ({"queries", "ids", "all"}, "the neighbours of one query are printed"),
    "format_": ({"queries", "ids", "all"}, "the neighbours of one query are printed"),
    "overwrite": ({"queries", "ids", "all"}, "the neighbours of one query are printed"),
    "on_error": ({"queries", "ids"}, "it decides what a bad line of --queries does"),
    **{name: ({"all"}, "only --all runs on Dask") for name in CLUSTER_OPTIONS},
}


def _refuse_idle_options(ctx: click.Context, mode: str, exact: bool) -> None:
    """Refuse an option given on the command line that does nothing in ``mode``.

    The remedy is the command line without it.
    """
    source = click.core.ParameterSource.COMMANDLINE
    idle = [(name, why) for name, (modes, why) in _NEIGHBOR_OPTIONS.items()
            if mode not in modes and ctx.get_parameter_source(name) is source]
    if exact and ctx.get_parameter_source("nprobe") is source:
        idle.append(("nprobe", "--exact searches no index"))
    if not idle:
        return
    import shlex

    params = {p.name: p for p in ctx.command.params}
    name, why = idle[0]
    flag = max(params[name].opts, key=len)
    shown = {"query": "--query", "doc_id": "--doc-id", "queries": "--queries",
             "ids": "--queries --ids", "all": "--all"}[mode]
    context = "with --exact" if name == "nprobe" else f"with {shown}"
    words = _without(ctx.meta.get("sphdist.argv") or [], [params[n] for n, _ in idle])
    raise click.UsageError(
        f"{flag} does nothing {context}: {why}. To resolve this, leave it out: "
        f"`{shlex.join(['sphdist', *map(str, words)])}`."
    )


def _without(argv: list[str], params: list[click.Parameter]) -> list[str]:
    """The words of ``argv`` without the options ``params`` and their values."""
    flags = {opt: p for p in params for opt in p.opts}
    words, i = [], 0
    while i < len(argv):
        word = argv[i]
        name = word.split("=", 1)[0] if word.startswith("--") else word
        if name in flags:
            takes_value = not getattr(flags[name], "is_flag", False) and "=" not in word
            i += 2 if takes_value else 1
            continue
        words.append(word)
        i += 1
    return words


@click.command()
@_MODEL
@_EMBEDDED
@click.option("--query", "-q", help="Text to embed with the model's feature scheme and idf.")
@click.option("--doc-id", help="Id of a document of --input.")
@click.option("--queries", type=STORE_PATH,
              help="File of queries, one per line: texts, or document ids with --ids; the "
                   "results go to --output, or are printed without it.")
@click.option("--ids", is_flag=True, help="The lines of --queries are document ids.")
@click.option("--on-error", type=click.Choice(["fail", "skip"]),
              help="With --queries: a bad line (a text sharing no term with the model, an "
                   "unknown id, not UTF-8): stop with an error naming its line, or skip it "
                   "and list it [default: fail].")
@click.option("--all", "all_", is_flag=True,
              help="Every document's k nearest other documents (the k-NN graph), to --output; "
                   "on Dask (the cluster options).")
@click.option("-k", "k", type=click.IntRange(min=1), default=10, show_default=True,
              help="Number of neighbours.")
@click.option("--include-self", is_flag=True,
              help="With --doc-id or --queries --ids: count the document itself (angle 0) "
                   "among the k; by default the k are other documents.")
@click.option("--index", "index_", type=STORE_PATH,
              help="index.zarr to search [default: the one `sphdist index` writes for the "
                   "model or --input embedding, when it exists].")
@click.option("--exact", is_flag=True, help="Scan every embedding, even when an index exists.")
@click.option("--nprobe", type=click.IntRange(min=1),
              help="Lists an ivf index scans per query [default: the one stored with it].")
@click.option("--output", "-o", type=STORE_PATH,
              help="With --queries (printed without it) or --all: the table to write, "
                   "*.parquet, *.jsonl or *.csv "
                   "(columns query, query_label, rank, doc_id, label, angle in degrees, "
                   "cosine).")
@click.option("--format", "-f", "format_", type=click.Choice(["parquet", "jsonl", "csv"]),
              help="Format of --output [default: from its suffix; given, it must agree "
                   "with it].")
@click.option("--overwrite", is_flag=True, help="Replace an existing --output.")
@cluster_options
@_JSON
@click.pass_context
def neighbors(
    ctx: click.Context, model: Path, input_: Path | None, query: str | None,
    doc_id: str | None, queries: Path | None, ids: bool, on_error: str | None, all_: bool,
    k: int, include_self: bool, index_: Path | None, exact: bool, nprobe: int | None,
    output: Path | None, format_: str | None, overwrite: bool, cluster: ClusterSpec,
    as_json: bool,
) -> None:
    """Nearest documents by angle on the sphere (= by Euclidean distance of the embeddings)."""
    # zarr and fsspec: when the command runs, never for --help (test_startup.py)
    from sphdist.jobs import neighbors as jobs

    given = [name for name, value in (("--query", query), ("--doc-id", doc_id),
                                       ("--queries", queries), ("--all", all_ or None))
             if value is not None]
    if len(given) != 1:
        raise click.UsageError("pass exactly one of --query TEXT, --doc-id ID, --queries FILE "
                               "and --all.")
    mode = {"--query": "query", "--doc-id": "doc_id", "--queries": "ids" if ids else "queries",
            "--all": "all"}[given[0]]
    _refuse_idle_options(ctx, mode, exact)
    if all_ and output is None:
        raise click.UsageError("--all writes a table: pass --output FILE.parquet (or .jsonl, "
                               ".csv).")
    if queries is not None and output is None:  # the rows are printed
        for name, value in (("--format", format_), ("--overwrite", overwrite or None)):
            if value is not None:
                raise click.UsageError(f"{name} is about the file --output names; without "
                                       "--output the neighbours are printed. To resolve "
                                       f"this, pass --output FILE or leave {name} out.")
    request = jobs.NeighborRequest(
        query=query, doc_id=doc_id, queries=None if queries is None else jobs.queries_of(queries),
        ids=ids, all=all_, k=k, include_self=include_self, input=input_, index=index_,
        exact=exact, nprobe=nprobe)
    if queries is not None and output is None:  # the rows on stdout, as for one query
        report = run(jobs.BatchNeighborsRequest(
            model, None, request.queries, ids=ids, k=k, include_self=include_self,
            input=input_, index=index_, exact=exact, nprobe=nprobe, on_error=on_error or "fail"))
        if as_json:
            echo_json(report)
            return
        _print_hits(report["neighbors"], with_query=True)
        if report["skipped"]:
            _list_skipped(report["skipped"], queries)
        return
    if all_:  # the cluster starts once the request is validated and the index loaded
        graph = jobs.KnnGraphRequest(model, output, k=k, input=input_, index=index_,
                                     exact=exact, nprobe=nprobe, format=format_,
                                     overwrite=overwrite)
        report = run(graph, on=connect_options(cluster))
    elif queries is not None:
        report = run(jobs.BatchNeighborsRequest(
            model, output, request.queries, ids=ids, k=k, include_self=include_self,
            input=input_, index=index_, exact=exact, nprobe=nprobe, format=format_,
            on_error=on_error or "fail", overwrite=overwrite))
    if all_ or queries is not None:
        how = f"the index {report['index']}" if report["index"] else "an exact scan"
        _report(report, as_json, f"wrote {report['output']}: {report['n_rows']} neighbours "
                                 f"({report['format']}) by {how} in {report['seconds']:.1f} s")
        if report.get("skipped") and not as_json:
            _list_skipped(report["skipped"], queries)
        return
    hits = run(jobs.QueryRequest(model, query=query, doc_id=doc_id, k=k,
                                 include_self=include_self, input=input_, index=index_,
                                 exact=exact, nprobe=nprobe))
    if as_json:
        echo_json(hits)
        return
    _print_hits(hits["neighbors"])


def _print_hits(rows: list[dict], with_query: bool = False) -> None:
    """The rows of a neighbour table as text columns (a first column ``query`` if asked)."""
    width = max([len(h["doc_id"]) for h in rows] + [6])
    q_width = max([len(h["query"]) for h in rows] + [5]) if with_query else 0
    query = f"{'query':<{q_width}}  " if with_query else ""
    click.echo(f"{query}{'rank':>4}  {'angle':>7}  {'cosine':>8}  {'doc_id':<{width}}  label")
    for h in rows:
        query = f"{h['query']:<{q_width}}  " if with_query else ""
        click.echo(
            f"{query}{h['rank']:>4}  {h['angle']:>6.2f}°  {h['cosine']:>8.5f}  "
            f"{h['doc_id']:<{width}}  {h['label'] or ''}"
        )


_SKIPPED_SHOWN = 20  # skipped queries listed one per line; --json lists them all


def _list_skipped(skipped: list[dict], queries: Path | None) -> None:
    """List the queries ``--on-error skip`` left out, one per line (the first 20)."""
    n = len(skipped)
    click.echo(f"skipped {n} bad {'query' if n == 1 else 'queries'} of {queries} "
               "(--on-error skip):")
    for s in skipped[:_SKIPPED_SHOWN]:
        click.echo(f"  line {s['line']}: {s['reason']}")
    if n > _SKIPPED_SHOWN:
        click.echo(f"  ... and {n - _SKIPPED_SHOWN} more (--json lists them all)")
