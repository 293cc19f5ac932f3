"""``sphdist fit`` and ``sphdist evaluate``: the Spherical PCA job and its clustering scores."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sphdist.cli._common import (
    STORE_PATH,
    FitProgress,
    _checked,
    cluster_options,
    connect_options,
    echo_json,
    json_option,
    param_option,
    progress_enabled,
)
from sphdist.jobs.params import JOB_PARAMS, N_COMPONENTS, JobSettings

if TYPE_CHECKING:
    from sphdist.jobs.cluster import ClusterSpec

logger = logging.getLogger("sphdist")


def _removed_max_partials(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """Refuse ``--max-partials``, removed with the accumulation chains it counted (issue 29)."""
    if value is not None:
        raise click.BadParameter(
            "was removed: a pass no longer sums its partials in chains; every block is its "
            "own task, all of them run at once, and their partials are summed in a tree of "
            "fan-in --split-every, which with the threads bounds the memory. To resolve "
            "this, drop --max-partials from the command (for less memory: fewer threads, with "
            "--n-workers 1 --threads-per-worker 1).", ctx, param,
        )


@click.command()
@click.option("--input", "-i", "input_", required=True, type=STORE_PATH,
              help="corpus.zarr or dense 2-D zarr array.")
@click.option("--output", "-o", type=STORE_PATH,
              help="model.zarr to write [default: beside the input, its name with .zarr "
                   "replaced by .model.zarr: big10.zarr -> big10.model.zarr].")
@param_option("n_components", "--n-components", "-r", default=N_COMPONENTS)
@param_option("max_iter")
@param_option("tol")
@param_option("random_state", "--seed")
@param_option("lam")
@param_option("mu")
@param_option("init")
@param_option("n_power_iter")
@click.option("--init-n-iter", type=click.IntRange(min=0), hidden=True,
              deprecated="use --n-power-iter, its name since it was renamed",
              help="Old name of --n-power-iter, accepted until the next release.")
@param_option("split_every")
@click.option("--max-partials", type=int, hidden=True, expose_value=False,
              callback=_removed_max_partials,
              help="Removed: a pass is one task per block, summed in a fixed tree; refused "
                   "with what replaced it (--split-every).")
@param_option("dtype")
@param_option("polar")
@param_option("partials")
@param_option("accelerate", "--accelerate/--no-accelerate", type=bool)
@param_option("device")
@click.option("--init-from", type=STORE_PATH, default=JobSettings.init_from,
              help="Warm start: U_0 from this model.zarr (same features and r); --init and "
                   "--seed are then not used.")
@click.option("--resume", is_flag=True, default=JobSettings.resume,
              help="Continue from the checkpoint at --output.")
@click.option("--overwrite", is_flag=True, default=JobSettings.overwrite,
              help="Replace an existing --output (never one another process is writing).")
@param_option("checkpoint_every", table=JOB_PARAMS)
@param_option("checkpoint_interval", table=JOB_PARAMS)
@click.option("--memory-budget", default=JobSettings.memory_budget, show_default=True,
              callback=_checked("check_memory_budget"),
              help="Most memory X may take, e.g. 4GiB: held in memory (read once) when it fits, "
                   "else streamed from the store every iteration; auto: a quarter of the "
                   "available memory (of the workers' memory limits on a cluster); 0 streams.")
@cluster_options(local_cluster=True)
@param_option("retries", table=JOB_PARAMS)
@json_option()
def fit(
    input_: Path, output: Path | None, init_from: Path | None, resume: bool, overwrite: bool,
    checkpoint_every: int, checkpoint_interval: float, memory_budget: int | None,
    cluster: ClusterSpec, retries: int, as_json: bool, **params: Any,
) -> None:
    """Fit Spherical PCA to a corpus on a Dask cluster, checkpointing once a minute.

    Every --checkpoint-interval seconds (60) the model is written at the end of the iteration,
    and always at the end of the fit; --checkpoint-interval 0 writes every iteration (every
    --checkpoint-every). A fit resumed from any checkpoint reaches the same bits.
    """
    from sphdist.jobs.fit import prepare_fit
    from sphdist.jobs.info import plural, shown_objective, solver_seconds_per_iteration

    # validate the parameters, open the input and decide on the output once, before any
    # cluster starts; a retry after a worker loss resumes this fit's own checkpoint

    old_n_power_iter = params.pop("init_n_iter")  # --init-n-iter, until the next release
    if old_n_power_iter is not None:
        params["n_power_iter"] = old_n_power_iter
    if output is None:
        output = input_.with_name(input_.name.removesuffix(".zarr") + ".model.zarr")
    # the output's lock is held from here until the last checkpoint is committed
    n_components, max_iter = params["n_components"], params["max_iter"]
    with prepare_fit(
        input_, output, checkpoint_every=checkpoint_every,
        checkpoint_interval=checkpoint_interval, resume=resume, overwrite=overwrite,
        init_from=init_from, memory_budget=memory_budget, retries=retries, **params,
    ) as prepared, connect_options(cluster):
        progress = FitProgress(max_iter, bar=progress_enabled(), tol=params["tol"])
        try:
            model = prepared.run(progress)
        finally:
            progress.close()
    seconds = progress.seconds_per_iteration  # wall time, the checkpoints included
    solving = solver_seconds_per_iteration(model)  # the solver's own, as `sphdist info`
    if as_json:
        echo_json({
            "output": str(output), "n_components": n_components, "n_iter": model.n_iter,
            "converged": bool(model.attrs["converged"]),
            "objective": shown_objective(model.objective[-1]),
            "relative_change": (
                abs(model.objective[-2] - model.objective[-1]) / abs(model.objective[-2])
                if len(model.objective) > 1 and model.objective[-2] else None
            ),
            "u_step_norm": (model.attrs["u_step_norm"] or [None])[-1],
            "v_step_norm": (model.attrs["v_step_norm"] or [None])[-1],
            "seconds_per_iteration": seconds,
            "solver_seconds_per_iteration": solving,
            "init_from": model.params.get("init_from"),
        })
        return
    click.echo(
        f"wrote {output}: r={n_components}, {plural(model.n_iter, 'iteration')}"
        f"{' (converged)' if model.attrs['converged'] else ''}, objective "
        f"{shown_objective(model.objective[-1]):.10g}, "
        f"{'-' if seconds is None else format(seconds, '.2f')} s/iteration"
        + ("" if solving is None else f" ({solving:.2f} s solving, the rest writing "
           "checkpoints)")
    )


@click.command()
@click.option("--model", "-m", required=True, type=STORE_PATH,
              help="The model.zarr to evaluate.")
@click.option("--input", "-i", "input_", type=STORE_PATH,
              help="The labelled documents: the training corpus [default: the path the model "
                   "recorded], an embedding.zarr from `sphdist transform`, or a held-out corpus "
                   "ingested with `--like MODEL` (embedded on the fly).")
@click.option("--n-clusters", "-k", type=click.IntRange(min=1),
              help="k of k-means [default: number of labels].")
@click.option("--n-init", type=click.IntRange(min=1), default=10, show_default=True,
              help="k-means restarts (the best inertia is kept).")
@click.option("--seed", type=click.IntRange(min=0, max=2**32 - 1), default=0, show_default=True,
              help="Seed of k-means.")
@click.option("--knn-k", type=click.IntRange(min=1), default=10, show_default=True,
              help="k of the k-NN label accuracy (cosine, stratified 5-fold, at most 20,000 "
                   "documents).")
@json_option()
def evaluate(
    model: Path, input_: Path | None, n_clusters: int | None, n_init: int, seed: int,
    knn_k: int, as_json: bool,
) -> None:
    """k-means on an embedding: accuracy (Hungarian matching), NMI; and k-NN label accuracy."""
    from sphdist.jobs.evaluate import evaluate_model
    from sphdist.jobs.info import plural

    result = evaluate_model(
        model, input_, n_clusters=n_clusters, n_init=n_init, random_state=seed, knn_k=knn_k
    )
    if result.get("knn_reason"):
        from sphdist.cli._remedies import render_for

        result["knn_reason"] = render_for(click.get_current_context(), result["knn_reason"])
    if as_json:
        echo_json(result)
    else:
        how = {"model": "", "embedding": "", "corpus": ", embedded on the fly"}
        click.echo(
            f"accuracy {result['accuracy']:.4f}  NMI {result['nmi']:.4f}  "
            f"{result['knn_k']}-NN accuracy "
            f"{'-' if result['knn_accuracy'] is None else format(result['knn_accuracy'], '.4f')}"
            "  "
            f"({plural(result['n_documents'], 'document')} of {result['input']}"
            f"{how.get(result['embedding'], '')}, k={result['n_clusters']}, "
            f"r={result['n_components']}, {plural(result['n_iter'], 'iteration')})"
        )
        if result.get("knn_reason"):
            click.echo(f"{result['knn_k']}-NN accuracy not scored: {result['knn_reason']}.")



COMMANDS = [fit, evaluate]
