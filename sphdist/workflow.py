"""The jobs sphdist runs on stored data: fit a corpus with checkpoints, evaluate a model.

These are the functions behind ``sphdist fit`` and ``sphdist evaluate``; batch jobs and
pipelines call them directly. They run on whatever Dask scheduler is active (see
:func:`sphdist.cluster.connect`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from . import _atomic, solver
from .corpus import open_input
from .errors import (
    CheckpointMismatchError,
    CorpusMismatchError,
    DataError,
    OutputExistsError,
    ParameterError,
)
from .metrics import evaluate_embedding
from .store import Model, load_checkpoint, open_model, save_checkpoint

__all__ = ["fit_corpus", "evaluate_model", "RESUME_KEYS"]

logger = logging.getLogger("sphdist")

#: Parameters that change the sequence of iterates: a checkpoint resumes only if they match.
RESUME_KEYS = ("n_components", "lam", "mu", "init", "random_state", "init_n_iter", "split_every")


def _log_iteration(state: solver.FitState) -> None:
    logger.info(
        "iter %4d  objective %.10g  rel_change %.3e  %.2fs%s",
        state.iteration, state.objective[-1], state.relative_change, state.seconds[-1],
        "  (converged)" if state.converged else "",
    )


def fit_corpus(
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    n_components: int,
    lam: float | str = "exact",
    mu: float | str = "exact",
    max_iter: int = 100,
    tol: float = 1e-4,
    init: str = "random",
    random_state: int | None = 0,
    init_n_iter: int = 4,
    split_every: int = 8,
    checkpoint_every: int = 1,
    resume: bool = False,
    overwrite: bool = False,
    callback: Callable[[solver.FitState], None] | None = _log_iteration,
) -> Model:
    """Fit Spherical PCA to a stored corpus, checkpointing to ``output``.

    Parameters
    ----------
    input : path-like
        A ``corpus.zarr`` or a dense 2-D zarr array (see :mod:`sphdist.corpus`).
    output : path-like
        The ``model.zarr`` to write (see :mod:`sphdist.store`).
    n_components : int
        r, ``1 <= r <= min(m, n)``.
    lam, mu, max_iter, tol, init, init_n_iter, split_every
        Solver parameters, see :func:`sphdist.solver.fit`.
    random_state : int or None, default 0
        Seed of the initialisation (stored with the model).
    checkpoint_every : int, default 1
        Write the model every this many iterations (and always at the end).
    resume : bool, default False
        Continue from the checkpoint at ``output`` if there is one (else start afresh). The
        resumed run reaches the same U, V and objective history as an uninterrupted one.
    overwrite : bool, default False
        Replace an existing ``output`` when not resuming.
    callback : callable or None
        Called with the solver state after every iteration; default logs one line
        (iteration, objective, relative change, seconds) to the ``sphdist`` logger.

    Returns
    -------
    Model
        The final model, read back from ``output``.

    Raises
    ------
    OutputExistsError
        If ``output`` exists and neither ``resume`` nor ``overwrite`` is set.
    CheckpointMismatchError
        If the checkpoint at ``output`` was written for another corpus or other parameters.
    ParameterError, DataError, CorpusFormatError, InputNotFoundError
        For invalid parameters or input.
    """
    source = open_input(input)
    X = source.to_dask()
    if checkpoint_every < 1:
        raise ParameterError(f"checkpoint_every must be >= 1, got {checkpoint_every}.")
    params = {
        "n_components": n_components, "lam": lam, "mu": mu, "max_iter": max_iter, "tol": tol,
        "init": init, "random_state": random_state, "init_n_iter": init_n_iter,
        "split_every": split_every,
    }
    corpus_info = {
        "path": str(Path(input).resolve()), "fingerprint": source.fingerprint,
        "shape": list(X.shape), "feature_scheme": source.feature_scheme,
        "tfidf": source.tfidf,
    }
    state = None
    _atomic.discard_stale(output)  # staging trees of a killed run are never read
    previous = load_checkpoint(output)
    if previous is not None and resume:
        if previous.corpus.get("fingerprint") != source.fingerprint:
            raise CheckpointMismatchError(
                f"{output} was fitted on {previous.corpus.get('path')!r} (fingerprint "
                f"{previous.corpus.get('fingerprint', '?')[:12]}), not on {input} (fingerprint "
                f"{source.fingerprint[:12]}). To resolve this, resume with the original "
                "corpus, or start a new fit with another --output (or --overwrite)."
            )
        changed = {
            k: (previous.params.get(k), params[k]) for k in RESUME_KEYS
            if previous.params.get(k) != params[k]
        }
        if changed:
            detail = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items())
            raise CheckpointMismatchError(
                f"{output} was written with other parameters ({detail}). To resolve this, "
                "resume with the same parameters, or start a new fit with another --output "
                "(or --overwrite)."
            )
        state = previous.state(source.chunks)
        state.converged = bool(state.iteration > 0 and state.relative_change < tol)
        logger.info("resuming %s from iteration %d", output, state.iteration)
    elif previous is not None and not overwrite:
        raise OutputExistsError(
            f"{output} already exists. To resolve this, pass --resume to continue it, "
            "--overwrite to replace it, or choose another --output."
        )

    def on_state(s: solver.FitState) -> None:
        if callback is not None:
            callback(s)
        if s.iteration % checkpoint_every == 0 or s.converged or s.iteration >= max_iter:
            save_checkpoint(output, s, params=params, corpus=corpus_info, idf=source.idf)

    # on_state saves the last state too: the loop ends converged or at max_iter
    solver.fit(
        X, n_components, lam=lam, mu=mu, max_iter=max_iter, tol=tol, init=init,
        random_state=random_state, init_n_iter=init_n_iter, split_every=split_every,
        state=state, callback=on_state,
    )
    return open_model(output)


def evaluate_model(
    model: str | os.PathLike[str],
    input: str | os.PathLike[str],
    *,
    n_clusters: int | None = None,
    n_init: int = 10,
    random_state: Any = 0,
) -> dict[str, Any]:
    """k-means on a fitted embedding, scored against the corpus labels.

    Parameters
    ----------
    model : path-like
        A ``model.zarr``.
    input : path-like
        The corpus it was fitted on (for the labels).
    n_clusters : int, optional
        k; default the number of labels.
    n_init : int, default 10
        k-means restarts.
    random_state : int, RandomState or None, default 0
        Seed of k-means.

    Returns
    -------
    dict
        ``accuracy``, ``nmi`` (fractions in [0, 1]), ``n_documents``, ``n_clusters``,
        ``n_components``, ``n_iter``, ``objective`` (final value).

    Raises
    ------
    CorpusMismatchError
        If the model was fitted on another corpus.
    DataError
        If the corpus has no labels.
    """
    fitted = open_model(model)
    source = open_input(input)
    if fitted.corpus.get("fingerprint") != source.fingerprint:
        raise CorpusMismatchError(
            f"{model} was fitted on {fitted.corpus.get('path')!r}, not on {input}. To resolve "
            "this, evaluate with the corpus the model was fitted on."
        )
    labels = source.labels
    if labels is None:
        raise DataError(
            f"{input} has no labels. To resolve this, ingest a labelled source (one folder "
            "per label) to evaluate clustering."
        )
    V = np.asarray(fitted.V().compute())
    result = evaluate_embedding(
        V.T, labels, n_clusters=n_clusters, n_init=n_init, random_state=random_state
    )
    result.update(
        n_components=int(V.shape[0]), n_iter=fitted.n_iter, objective=fitted.objective[-1]
    )
    return result
