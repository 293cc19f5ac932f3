"""``sphdist layout`` and ``sphdist map``: a 2-D map of a model's documents, and its page."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from sphdist._words import plural
from sphdist.cli._common import (
    STORE_PATH,
    cluster_options,
    connect_options,
    echo_json,
    json_option,
)
from sphdist.jobs import run

if TYPE_CHECKING:
    from sphdist.jobs.cluster import ClusterSpec

_MODEL = click.option("--model", "-m", required=True, type=STORE_PATH, help="model.zarr.")
_INPUT = click.option(
    "--input", "-i", "input_", type=STORE_PATH,
    help="The documents: the training corpus [default: the path the model recorded] or an "
         "embedding.zarr from `sphdist transform`.")
_OVERWRITE = click.option("--overwrite", is_flag=True, help="Replace an existing --output.")
_SEED = click.option("--seed", type=click.IntRange(min=0, max=2**32 - 1), default=0,
                     show_default=True, help="Seed: the same seed gives the same result.")


@click.command()
@_MODEL
@_INPUT
@click.option("--output", "-o", type=STORE_PATH,
              help="layout.zarr to write [default: <model>.layout.zarr beside the model, or "
                   "<embedding>.layout.zarr beside an --input embedding: where `sphdist map` "
                   "looks].")
@click.option("-k", "k", type=click.IntRange(min=1), default=10, show_default=True,
              help="Neighbours per document in the graph laid out (and highlighted on the "
                   "map).")
@click.option("--index", "index_", type=STORE_PATH,
              help="index.zarr to search for the graph [default: the one `sphdist index` "
                   "writes, when it exists].")
@click.option("--exact", is_flag=True, help="The exact graph, even when an index exists.")
@click.option("--nprobe", type=click.IntRange(min=1),
              help="Lists an ivf index scans per query [default: the one stored with it].")
@_SEED
@click.option("--n-iter", type=click.IntRange(min=2), default=375, show_default=True,
              help="t-SNE gradient steps (a third with early exaggeration).")
@_OVERWRITE
@cluster_options
@json_option()
def layout(
    model: Path, input_: Path | None, output: Path | None, k: int, index_: Path | None,
    exact: bool, nprobe: int | None, seed: int, n_iter: int, overwrite: bool,
    cluster: ClusterSpec, as_json: bool,
) -> None:
    """2-D coordinates of every document, from its k-NN graph (openTSNE), stored."""
    from sphdist.jobs.layout import LayoutRequest  # zarr, dask: never for --help (test_startup)

    request = LayoutRequest(model, output, input=input_, k=k, index=index_, exact=exact,
                            nprobe=nprobe, seed=seed, n_iter=n_iter, overwrite=overwrite)
    report = run(request, on=connect_options(cluster))
    if as_json:
        echo_json(report)
        return
    kept = report["kept_10nn"]
    click.echo(f"wrote {report['output']}: {plural(report['n_laid_out'], 'document')} laid "
               f"out from their {k}-NN graph"
               + (f"; {100 * kept:.0f}% of their {min(10, k)} nearest neighbours kept on the "
                  "map" if kept is not None else ""))


@click.command(name="map")
@_MODEL
@_INPUT
@click.option("--output", "-o", required=True, type=STORE_PATH,
              help="The page to write, *.html (self-contained: opens offline); or *.parquet: "
                   "the table Embedding Atlas reads (x, y, text, neighbors).")
@click.option("--layout", "layout_", type=STORE_PATH,
              help="layout.zarr [default: the one `sphdist layout` writes].")
@click.option("--colour", "--color", "colour", type=click.Choice(["auto", "label", "cluster"]),
              default="auto", show_default=True,
              help="Colour by label, or by k-means cluster named by its top terms; auto: "
                   "labels where there are some.")
@click.option("--n-clusters", "-k", type=click.IntRange(min=1), default=20, show_default=True,
              help="Clusters, with --colour cluster.")
@_SEED
@click.option("--title", help="The page's title [default: the model's name].")
@_OVERWRITE
@json_option()
def map_(
    model: Path, input_: Path | None, output: Path, layout_: Path | None, colour: str,
    n_clusters: int, seed: int, title: str | None, overwrite: bool, as_json: bool,
) -> None:
    """One HTML page of every document: hover for its terms, click for its neighbours."""
    from sphdist.jobs.map_page import MapRequest  # zarr, bokeh: never for --help (test_startup)

    report = run(MapRequest(model, output, input=input_, layout=layout_, colour=colour,
                            n_clusters=n_clusters, seed=seed, title=title,
                            overwrite=overwrite))
    if as_json:
        echo_json(report)
        return
    click.echo(f"wrote {output}: {plural(report['n_points'], 'document')} coloured by "
               f"{report['colour']} ({report['n_groups']} groups), "
               f"{report['bytes'] / 2**20:.1f} MiB; "
               + ("open it in a browser" if report["format"] == "html" else
                  f"embedding-atlas {output} --x x --y y --text text --neighbors neighbors"))
