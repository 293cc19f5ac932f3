"""``sphdist plot convergence`` and ``sphdist plot embedding``: PNG figures of a model."""

from __future__ import annotations

from pathlib import Path

import click

from sphdist._words import plural
from sphdist.cli._common import STORE_PATH, CommandList, echo_json, json_option

_OVERWRITE = click.option("--overwrite", is_flag=True, help="Replace an existing --output.")


@click.group(cls=CommandList)
def plot() -> None:
    """Figures of a fitted model (PNG, SVG, PDF or JPEG, by the suffix of --output)."""


@plot.command()
@click.option("--model", "-m", required=True, type=STORE_PATH,
              help="The fitted model.zarr.")
@click.option("--output", "-o", type=STORE_PATH,
              help="Figure to write, in the format its suffix names: *.png, *.svg, *.pdf or "
                   "*.jpg [default: <model>.convergence.png beside the model].")
@_OVERWRITE
@json_option()
def convergence(model: Path, output: Path | None, overwrite: bool, as_json: bool) -> None:
    """Objective, ||U_k - U_{k-1}||_F and ||V_k - V_{k-1}||_F per iteration (Liu et al. Fig. 3)."""
    from sphdist.jobs import plotting, run  # zarr, fsspec: never for --help (test_startup)

    output = run(plotting.PlotConvergenceRequest(model, output, overwrite=overwrite))
    if as_json:
        echo_json({"output": str(output)})
    else:
        click.echo(f"wrote {output}")


@plot.command()
@click.option("--model", "-m", required=True, type=STORE_PATH,
              help="The fitted model.zarr.")
@click.option("--input", "-i", "input_", type=STORE_PATH,
              help="The training corpus (labels) [default: the path the model recorded] or an "
                   "embedding.zarr.")
@click.option("--output", "-o", type=STORE_PATH,
              help="Figure to write, in the format its suffix names: *.png, *.svg, *.pdf or "
                   "*.jpg [default: <model>.embedding.png beside the model].")
@click.option("--max-points", type=click.IntRange(min=1), default=5000, show_default=True,
              help="Plot a reproducible sample of at most this many documents.")
@click.option("--seed", type=click.IntRange(min=0, max=2**32 - 1), default=0, show_default=True,
              help="Seed of the subsample of documents drawn.")
@_OVERWRITE
@json_option()
def embedding(
    model: Path, input_: Path | None, output: Path | None, max_points: int, seed: int,
    overwrite: bool, as_json: bool,
) -> None:
    """Documents on the sphere coloured by label (3-D for r = 3, else a PCA projection)."""
    from sphdist.jobs import plotting, run  # zarr, fsspec: never for --help (test_startup)

    request = plotting.PlotEmbeddingRequest(model, output, input=input_,
                                            max_points=max_points, seed=seed,
                                            overwrite=overwrite)
    report = run(request)
    output = request.output
    if as_json:
        echo_json(report)
    else:
        click.echo(
            f"wrote {output}: {report['n_points']} of "
            f"{plural(report['n_documents'], 'document')}, {report['projection']}"
            + (f" ({report['n_left_out']} without a direction left out: "
               f"{report['n_empty']} empty, {report['n_degenerate']} degenerate)"
               if report["n_left_out"] and report["n_empty"] is not None else "")
        )
