"""``sphdist fit`` and ``sphdist evaluate``: the Spherical PCA job and its clustering scores."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import numpy as np

from sphdist._words import plural
from sphdist.cli._common import (
    STORE_PATH,
    _checked,
    cluster_options,
    connect_options,
    echo_json,
    json_option,
    param_option,
    progress_enabled,
)
from sphdist.cli._remedies import render_for
from sphdist.jobs import run
from sphdist.jobs.params import JOB_PARAMS, N_COMPONENTS

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


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def iterations_left(objective: list[float], tol: float, max_iter: int) -> float:
    """Iterations until the relative objective change falls below ``tol``, from its trend.

    Parameters
    ----------
    objective : list of float
        The objective history f_0..f_k.
    tol : float
        The stopping threshold on ``|f_{i-1} - f_i| / |f_{i-1}|``.
    max_iter : int
        The last iteration the fit may run.

    Returns
    -------
    float
        ``log(tol / c_k) / log(rho)`` with c_k the last relative change and rho the geometric
        mean ratio of the last three, capped at ``max_iter - k``; ``max_iter - k`` while fewer
        than three changes are known or they do not decrease.

    Examples
    --------
    >>> iterations_left([100.0, 50.0, 45.0, 44.55, 44.5054], 1e-4, 100)
    2.0
    """
    k = len(objective) - 1
    cap = float(max(0, max_iter - k))
    f = np.asarray(objective, dtype=np.float64)
    if k < 3 or tol <= 0 or np.any(f[:-1] == 0):
        return cap
    change = np.abs(np.diff(f)) / np.abs(f[:-1])
    last = change[-3:]
    if np.any(last <= 0) or last[-1] < tol:
        return 0.0 if last[-1] < tol else cap
    rho = (last[-1] / last[0]) ** 0.5
    if not rho < 1:
        return cap
    return float(min(cap, np.ceil(np.log(tol / last[-1]) / np.log(rho))))


def _now() -> float:
    """The wall clock of :class:`FitProgress`, in seconds."""
    return time.perf_counter()


class FitProgress:
    """Per-iteration progress of a fit: a tqdm bar on a terminal, else plain log lines.

    Parameters
    ----------
    max_iter : int
        The iteration the fit stops at at the latest.
    tol : float, default 0.0
        The relative objective change the fit stops below; the ETA is to the iteration where
        the observed rate of decrease of that change reaches it (:func:`iterations_left`),
        at most ``max_iter``.
    bar : bool
        Draw a bar on stderr (:func:`sphdist._progress.progress`: iterations, elapsed time,
        objective ``f``, relative change, s/iteration, ETA; within 80 columns); else log one
        INFO line per iteration on the ``sphdist`` logger.

    Notes
    -----
    Called with the solver state after the initialisation (iteration 0, or the iteration a
    resumed fit starts from) and after every iteration. The seconds of an iteration are the
    wall time since the previous call, so they include the checkpoint written in between
    (the solver's own ``state.seconds`` leave it out); the ETA assumes the remaining
    iterations take the mean of those of this run (:attr:`seconds_per_iteration`). A call
    for an iteration not after the previous one (a retry resuming from a checkpoint) starts
    the clock again.
    """

    def __init__(self, max_iter: int, bar: bool, tol: float = 0.0):
        self.max_iter = max_iter
        self.tol = tol
        self._lines = not bar  # one log line per iteration (a counter of tenths is too sparse)
        self._last: tuple[int, float] | None = None  # the previous call: iteration, clock
        self._seconds: list[float] = []
        self.bar: Any = None  # drawn at the first state: a refused fit draws none

    def __call__(self, state: Any) -> None:
        """Show ``state`` (a :class:`sphdist.core.solver.FitState`): the bar, or a log line."""
        from sphdist._progress import progress  # tqdm: a fit's, not a query's (test_startup)
        from sphdist.jobs.info import shown_objective  # zarr: --help never draws a fit

        if self.bar is None:
            # short, so that an 80-column line ends with the whole ETA (tqdm cuts at the
            # width): at most 76 columns besides the bar (10,000 iterations, 1:23:45 gone,
            # f 1.23457e+306, 123 s/it, ETA 12:34:56)
            self.bar = progress(self.max_iter, "fit", unit="it", mode=not self._lines,
                                bar_format="{desc} {n}/{total} |{bar}| {elapsed}{postfix}")
        objective = shown_objective(state.objective[-1])
        now, seconds = _now(), state.seconds[-1]  # the initialisation: the solver's seconds
        if self._last is not None and state.iteration > self._last[0]:
            seconds = (now - self._last[1]) / (state.iteration - self._last[0])
            self._seconds.append(seconds)
        self._last = (state.iteration, now)
        per_it = self.seconds_per_iteration
        per_it = float("nan") if per_it is None else per_it
        eta = per_it * iterations_left(state.objective, self.tol, self.max_iter)
        if state.converged:
            eta = 0.0
        self.bar.n = state.iteration
        if not self._lines:
            rate = "?" if not math.isfinite(per_it) else (
                f"{per_it:.2f}" if per_it < 100 else f"{per_it:.0f}")
            self.bar.set_postfix_str(
                f"f {objective:.6g} rel {state.relative_change:.2e} {rate}s/it "
                + ("converged" if state.converged else f"ETA {_clock(eta)}"),
                refresh=True,
            )
            return
        logger.info(
            "iter %4d  objective %.10g  rel_change %.3e  %.2fs  eta %s%s",
            state.iteration, objective, state.relative_change, seconds,
            _clock(eta), "  (converged)" if state.converged else "",
        )

    @property
    def seconds_per_iteration(self) -> float | None:
        """Mean wall time between iterations of this run, checkpoints included, in seconds.

        None before the first iteration after the start.
        """
        return float(np.mean(self._seconds)) if self._seconds else None

    def close(self) -> None:
        """Close the bar (if drawn)."""
        if self.bar is not None:
            self.bar.close()



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
@click.option("--init-from", type=STORE_PATH, default=None,
              help="Warm start: U_0 from this model.zarr (same features and r); --init and "
                   "--seed are then not used.")
@click.option("--resume", is_flag=True,
              help="Continue from the checkpoint at --output.")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing --output (never one another process is writing). "
                   "The previous model is replaced at the first checkpoint, not at the end: "
                   "to keep serving it during a refit, fit to a new --output.")
@param_option("checkpoint_every", table=JOB_PARAMS)
@param_option("checkpoint_interval", table=JOB_PARAMS)
@click.option("--memory-budget", default="auto", show_default=True,
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
    from sphdist.jobs.fit import FitRequest  # dask, zarr: never for --help (test_startup)
    from sphdist.jobs.info import shown_objective, solver_seconds_per_iteration

    old_n_power_iter = params.pop("init_n_iter")  # --init-n-iter, until the next release
    if old_n_power_iter is not None:
        params["n_power_iter"] = old_n_power_iter
    if output is None:
        output = input_.with_name(input_.name.removesuffix(".zarr") + ".model.zarr")
    n_components = params["n_components"]
    progress = FitProgress(params["max_iter"], bar=progress_enabled(), tol=params["tol"])
    try:  # the parameters validated, the input opened and the output decided on and held
        # before the cluster starts; a retry after a worker loss resumes its own checkpoint
        model = run(FitRequest(
            input_, output, resume=resume, overwrite=overwrite, init_from=init_from,
            checkpoint_every=checkpoint_every, checkpoint_interval=checkpoint_interval,
            memory_budget=memory_budget, retries=retries, callback=progress, **params,
        ), on=connect_options(cluster))
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
@click.option("--seed", "random_state", type=click.IntRange(min=0, max=2**32 - 1), default=0,
              show_default=True, help="Seed of k-means.")
@click.option("--knn-k", type=click.IntRange(min=1), default=10, show_default=True,
              help="k of the k-NN label accuracy (cosine, stratified 5-fold, at most 20,000 "
                   "documents).")
@click.option("--knn-min-label-size", type=click.IntRange(min=1), default=2,
              show_default=True,
              help="The k-NN label accuracy leaves out the documents of labels with fewer "
                   "documents than this (and says how many); 1 keeps every label, and a label "
                   "of a single document leaves it unscored.")
@json_option()
def evaluate(
    model: Path, input_: Path | None, n_clusters: int | None, n_init: int, random_state: int,
    knn_k: int, knn_min_label_size: int, as_json: bool,
) -> None:
    """k-means on an embedding: accuracy (Hungarian matching), NMI; and k-NN label accuracy."""
    from sphdist.jobs.evaluate import EvaluateRequest  # scikit-learn: never for --help

    result = run(EvaluateRequest(
        model, input_, n_clusters=n_clusters, n_init=n_init, random_state=random_state,
        knn_k=knn_k, knn_min_label_size=knn_min_label_size,
    ))
    if result.get("knn_reason"):
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
        if result.get("knn_left_out") and result["knn_labels"] >= 2:
            click.echo(
                f"{result['knn_k']}-NN accuracy on {plural(result['knn_documents'], 'document')}"
                f" of {plural(result['knn_labels'], 'label')}: {result['knn_left_out']}."
            )
        if result.get("knn_reason"):
            click.echo(f"{result['knn_k']}-NN accuracy not scored: {result['knn_reason']}.")

