"""The ``sphdist`` command line: thin wrappers over the public API, no maths here.

Errors a user can cause (:class:`sphdist.errors.SphdistError`, and OS errors such as a full or
read-only disk) are printed as one line, ``Error: ...``, with exit status 1 and no traceback
unless ``--debug`` is given; bad option values are usage errors with exit status 2.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import click
import numpy as np

from .errors import SphdistError

logger = logging.getLogger("sphdist")

_STEP_MODES = ("exact", "palm", "theory")


class _StepSize(click.ParamType):
    """A step size: a non-negative number or one of the modes."""

    name = "FLOAT|exact|palm|theory"

    def convert(self, value: Any, param: Any, ctx: Any) -> float | str:
        if isinstance(value, (int, float)) or value in _STEP_MODES:
            return value
        try:
            number = float(value)
        except ValueError:
            self.fail(f"{value!r} is neither a number nor one of {', '.join(_STEP_MODES)}.")
        if not np.isfinite(number) or number < 0:
            self.fail(f"{value!r} must be a finite number >= 0.")
        return number


class _Group(click.Group):
    """Turns sphdist errors into one-line messages (exit 1) unless --debug."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (SphdistError, OSError) as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            message = str(exc) if isinstance(exc, SphdistError) else f"{type(exc).__name__}: {exc}"
            raise click.ClickException(message) from None


def _setup_logging(level: str, quiet: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.handlers[:] = [handler]
    logger.setLevel(logging.WARNING if quiet else getattr(logging, level.upper()))
    logger.propagate = False


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
    show_default=True, help="Verbosity of the progress lines on stderr.",
)
@click.option("--quiet", "-q", is_flag=True, help="Only warnings and errors on stderr.")
@click.version_option(package_name="sphdist")
@click.pass_context
def main(ctx: click.Context, debug: bool, log_level: str, quiet: bool) -> None:
    """Distributed Spherical PCA: embed large text collections on the unit sphere."""
    ctx.obj = {"debug": debug}
    _setup_logging(log_level, quiet)


@main.command()
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
    from .datasets import newsgroups_archive
    from .ingest import ingest as run_ingest

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


@main.command()
@click.option("--input", "-i", "input_", required=True, type=click.Path(path_type=Path),
              help="corpus.zarr or dense 2-D zarr array.")
@click.option("--output", "-o", type=click.Path(path_type=Path),
              help="model.zarr to write [default: <input>.model.zarr beside the input].")
@click.option("--n-components", "-r", type=click.IntRange(min=1), default=20, show_default=True,
              help="Dimension r of the embedding.")
@click.option("--max-iter", type=click.IntRange(min=0), default=100, show_default=True)
@click.option("--tol", type=click.FloatRange(min=0), default=1e-4, show_default=True,
              help="Stop when the relative objective change is below this.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the initialisation.")
@click.option("--lam", type=_StepSize(), default="exact", show_default=True,
              help="V-step parameter (Eq. 3.12): a number >= 2 or exact|palm|theory.")
@click.option("--mu", type=_StepSize(), default="exact", show_default=True,
              help="U-step parameter (Eq. 3.11): a number >= 0 or exact|palm|theory.")
@click.option("--init", type=click.Choice(["random", "svd"]), default="random",
              show_default=True)
@click.option("--resume", is_flag=True, help="Continue from the checkpoint at --output.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --output.")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=1, show_default=True,
              help="Write the model every N iterations (and at the end).")
@click.option("--scheduler-address", envvar="DASK_SCHEDULER_ADDRESS",
              help="Existing Dask scheduler [env DASK_SCHEDULER_ADDRESS]; default: start a "
                   "LocalCluster.")
@click.option("--n-workers", type=click.IntRange(min=1),
              help="LocalCluster worker processes [default: one per core].")
@click.option("--threads-per-worker", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--memory-limit", default="auto", show_default=True,
              help="LocalCluster memory limit per worker (bytes or e.g. 4GiB).")
def fit(
    input_: Path, output: Path | None, n_components: int, max_iter: int, tol: float, seed: int,
    lam: float | str, mu: float | str, init: str, resume: bool, overwrite: bool,
    checkpoint_every: int, scheduler_address: str | None, n_workers: int | None,
    threads_per_worker: int, memory_limit: str,
) -> None:
    """Fit Spherical PCA to a corpus on a Dask cluster, checkpointing every iteration."""
    from .cluster import connect
    from .corpus import open_input
    from .solver import check_params
    from .workflow import fit_corpus

    # fail on bad input before starting a cluster
    shape = open_input(input_).shape
    check_params(n_components, shape, lam=lam, mu=mu, max_iter=max_iter, tol=tol, init=init)
    if output is None:
        output = input_.with_name(input_.name.removesuffix(".zarr") + ".model.zarr")
    limit: str | int = int(memory_limit) if memory_limit.isdigit() else memory_limit
    with connect(
        scheduler_address, n_workers=n_workers, threads_per_worker=threads_per_worker,
        memory_limit=limit,
    ):
        model = fit_corpus(
            input_, output, n_components=n_components, lam=lam, mu=mu, max_iter=max_iter,
            tol=tol, init=init, random_state=seed, checkpoint_every=checkpoint_every,
            resume=resume, overwrite=overwrite,
        )
    seconds = model.attrs["seconds"][1:]
    click.echo(
        f"wrote {output}: r={n_components}, {model.n_iter} iterations"
        f"{' (converged)' if model.attrs['converged'] else ''}, objective "
        f"{model.objective[-1]:.10g}, "
        f"{(sum(seconds) / len(seconds)) if seconds else float('nan'):.2f} s/iteration"
    )


@main.command()
@click.option("--model", "-m", required=True, type=click.Path(path_type=Path))
@click.option("--input", "-i", "input_", required=True, type=click.Path(path_type=Path),
              help="The corpus the model was fitted on (for its labels).")
@click.option("--n-clusters", "-k", type=click.IntRange(min=1),
              help="k of k-means [default: number of labels].")
@click.option("--n-init", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def evaluate(
    model: Path, input_: Path, n_clusters: int | None, n_init: int, seed: int, as_json: bool
) -> None:
    """k-means on the embedding; clustering accuracy (Hungarian matching) and NMI."""
    from .workflow import evaluate_model

    result = evaluate_model(
        model, input_, n_clusters=n_clusters, n_init=n_init, random_state=seed
    )
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(
            f"accuracy {result['accuracy']:.4f}  NMI {result['nmi']:.4f}  "
            f"({result['n_documents']} documents, k={result['n_clusters']}, "
            f"r={result['n_components']}, {result['n_iter']} iterations)"
        )


if __name__ == "__main__":  # pragma: no cover
    main()
