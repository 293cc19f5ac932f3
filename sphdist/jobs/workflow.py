"""The jobs sphdist runs on stored data: fit, evaluate, transform.

These are the functions behind ``sphdist fit``, ``sphdist evaluate`` and ``sphdist transform``;
batch jobs and pipelines call them directly. They run on whatever Dask scheduler is active (see
:func:`sphdist.jobs.cluster.connect`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np

from sphdist.core import solver
from sphdist.errors import (
    CheckpointMismatchError,
    CorpusMismatchError,
    DataError,
    OutputExistsError,
    ParameterError,
)
from sphdist.io import _atomic
from sphdist.io.corpus import open_input
from sphdist.io.store import (
    Embedding,
    EmbeddingWriter,
    Model,
    idf_sha256,
    load_checkpoint,
    open_model,
    save_checkpoint,
    u_sha256,
)
from sphdist.metrics import evaluate_embedding

__all__ = [
    "fit_corpus", "evaluate_model", "transform_corpus", "check_compatible", "warm_start",
    "RESUME_KEYS",
]

logger = logging.getLogger("sphdist")

#: Parameters that change the sequence of iterates: a checkpoint resumes only if they match.
RESUME_KEYS = (
    "n_components", "lam", "mu", "init", "random_state", "init_n_iter", "split_every",
    "init_from",
)


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
    init_from: str | os.PathLike[str] | None = None,
    callback: Callable[[solver.FitState], None] | None = _log_iteration,
) -> Model:
    """Fit Spherical PCA to a stored corpus, checkpointing to ``output``.

    Parameters
    ----------
    input : path-like
        A ``corpus.zarr`` or a dense 2-D zarr array (see :mod:`sphdist.io.corpus`).
    output : path-like
        The ``model.zarr`` to write (see :mod:`sphdist.io.store`).
    n_components : int
        r, ``1 <= r <= min(m, n)``.
    lam, mu, max_iter, tol, init, init_n_iter, split_every
        Solver parameters, see :func:`sphdist.core.solver.fit`.
    random_state : int or None, default 0
        Seed of the initialisation (stored with the model).
    checkpoint_every : int, default 1
        Write the model every this many iterations (and always at the end).
    resume : bool, default False
        Continue from the checkpoint at ``output`` if there is one (else start afresh). The
        resumed run reaches the same U, V and objective history as an uninterrupted one.
    overwrite : bool, default False
        Replace an existing ``output`` when not resuming.
    init_from : path-like, optional
        A ``model.zarr`` whose U (m, r) is the warm start U_0 (orthonormalised by its polar
        factor, :func:`sphdist.core.solver.initialize`); ``init`` and ``random_state`` are then not
        used. Its feature space must be the corpus' (same feature scheme; same vocabulary when
        both have one); the idf may differ (a refit on newer documents). Recorded in the
        parameters as ``init_from`` (the sha256 of that U), so ``resume`` continues only the
        same warm start.
    callback : callable or None
        Called with the solver state after every iteration; default logs one line
        (iteration, objective, relative change, seconds) to the ``sphdist`` logger.

    Returns
    -------
    Model
        The final model, read back from ``output``.

    See Also
    --------
    sphdist.jobs.cluster.fit_with_retries : Resume from the last checkpoint when a worker is lost
        (what ``sphdist fit --retries`` uses).

    Raises
    ------
    OutputExistsError
        If ``output`` exists and neither ``resume`` nor ``overwrite`` is set.
    DataError
        If every document of ``input`` is empty (nothing to fit).
    CheckpointMismatchError
        If the checkpoint at ``output`` was written for another corpus or other parameters.
    CorpusMismatchError
        If ``init_from`` was fitted in another feature space.
    ParameterError, DataError, CorpusFormatError, InputNotFoundError, ModelFormatError
        For invalid parameters or input (``ParameterError`` also when the r of ``init_from``
        is not ``n_components``).
    """
    source = open_input(input)
    source.require_documents()
    X = source.to_dask()
    if checkpoint_every < 1:
        raise ParameterError(f"checkpoint_every must be >= 1, got {checkpoint_every}.")
    U0 = None
    if init_from is not None:
        U0 = warm_start(init_from, source, input, n_components)
    params = {
        "n_components": n_components, "lam": lam, "mu": mu, "max_iter": max_iter, "tol": tol,
        "init": init, "random_state": random_state, "init_n_iter": init_n_iter,
        "split_every": split_every,
        "init_from": None if U0 is None else {
            "path": str(Path(init_from).resolve()), "u_sha256": u_sha256(U0),
        },
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
            if _resume_value(k, previous.params.get(k)) != _resume_value(k, params[k])
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
            save_checkpoint(
                output, s, params=params, corpus=corpus_info, idf=source.idf,
                vocabulary=vocabulary,
            )

    vocabulary = getattr(source, "vocabulary", None)  # a Corpus of the vocabulary scheme
    # on_state saves the last state too: the loop ends converged or at max_iter
    solver.fit(
        X, n_components, lam=lam, mu=mu, max_iter=max_iter, tol=tol, init=init,
        random_state=random_state, init_n_iter=init_n_iter, split_every=split_every,
        state=state, U0=U0, callback=on_state,
    )
    return open_model(output)


def _resume_value(key: str, value: Any) -> Any:
    # a warm start is the same warm start when its U is the same, wherever the model lies now
    if key == "init_from" and isinstance(value, dict):
        return value.get("u_sha256")
    return value


def warm_start(
    init_from: str | os.PathLike[str], source: Any, input: Any, n_components: int
) -> np.ndarray:
    """The U of the model at ``init_from``, after checking it fits ``source`` and r.

    Parameters
    ----------
    init_from : path-like
        A ``model.zarr``.
    source : Corpus or DenseInput
        The corpus to fit.
    input : path-like
        Its path, for messages.
    n_components : int
        The r asked for.

    Returns
    -------
    ndarray of shape (m, r), float64

    Raises
    ------
    ParameterError
        If the model's r is not ``n_components``.
    CorpusMismatchError
        If the model was fitted in another feature space (see :func:`check_compatible`).
    """
    previous = open_model(init_from)
    m, r, _ = previous.shape
    if r != n_components:
        raise ParameterError(
            f"--init-from {init_from} has r={r} components, but n_components={n_components} "
            f"was asked. To resolve this, fit with -r {r}, or warm-start from a model with "
            f"{n_components} components."
        )
    check_compatible(previous, source, input, check_idf=False)
    return previous.U


def check_compatible(
    model: Model, source: Any, input: str | os.PathLike[str], *, check_idf: bool = True
) -> None:
    """Check that a corpus lives in the feature space (and weighting) a model was fitted in.

    Parameters
    ----------
    model : Model
        An open ``model.zarr``.
    source : Corpus or DenseInput
        An open input (:func:`sphdist.io.corpus.open_input`).
    input : path-like
        Its path, for the message.
    check_idf : bool, default True
        Also require the same idf (sha256 of its bytes) and tf-idf options, as
        :func:`transform_corpus` does: a document weighted with another idf is not the
        document the model saw. A warm start (``fit_corpus(init_from=...)``) needs only the
        same features.

    Raises
    ------
    CorpusMismatchError
        Naming each difference (number of features, feature scheme, vocabulary, idf, tf-idf
        options) and how to re-ingest the corpus the model's way (``ingest --like``).
    """
    fitted = model.corpus
    problems = []
    m_model = model.shape[0]
    if source.n_features != m_model:
        problems.append(f"{source.n_features} features, the model has {m_model}")
    scheme = fitted.get("feature_scheme")
    if scheme is not None and source.feature_scheme != scheme:
        problems.append(
            f"feature scheme {source.feature_scheme!r}, the model's is {scheme!r}"
        )
    if not problems:
        theirs, ours = getattr(source, "vocabulary", None), model.vocabulary
        if theirs is not None and ours is not None and not np.array_equal(theirs, ours):
            problems.append("another vocabulary than the model's")
    if check_idf and not problems:
        a, b = idf_sha256(source.idf), idf_sha256(model.idf)
        if a != b:
            problems.append(
                f"idf fingerprint {(a or 'none')[:12]}, the model's is {(b or 'none')[:12]}"
            )
        options = fitted.get("tfidf") or {}
        differ = sorted(
            k for k in set(options) & set(source.tfidf) if options[k] != source.tfidf[k]
        )
        if differ:
            problems.append(f"other tf-idf options ({', '.join(differ)})")
    if problems:
        raise CorpusMismatchError(
            f"{input} does not match the model {model.path}: it has {'; '.join(problems)}. "
            f"To resolve this, ingest the documents with `sphdist ingest SOURCE --like "
            f"{model.path} --output NEW.zarr` (the model's feature scheme and idf)."
        )


def transform_corpus(
    model: str | os.PathLike[str],
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    progress: bool = False,
) -> Embedding:
    """Embed the documents of a corpus with a fitted model: the exact V-step, chunk by chunk.

    Parameters
    ----------
    model : path-like
        A ``model.zarr``.
    input : path-like
        A corpus in the model's feature space, with the model's idf (written by ``sphdist
        ingest --like MODEL``, or the training corpus itself).
    output : path-like
        The ``embedding.zarr`` to write (layout in :mod:`sphdist.io.store`), committed atomically.
    overwrite : bool, default False
        Replace an existing ``output``.
    progress : bool, default False
        A tqdm bar on stderr (chunks done / total).

    Returns
    -------
    Embedding
        The written embedding: V of shape (r, n), float64, column j the unit vector
        ``v_j = U^T x_j / ||U^T x_j||_2`` (Liu et al. 2019, Eq. 3.12 with lam = 2, the exact
        minimiser of ``||x_j - U v||_2`` over the unit sphere), with the corpus' document ids
        and labels. A document with ``U^T x_j = 0`` (empty) gets ``e_1`` and is flagged in
        ``degenerate``.

    Raises
    ------
    CorpusMismatchError
        If the corpus' feature scheme, number of features, idf or tf-idf options differ from
        the model's (see :func:`check_compatible`).
    OutputExistsError
        If ``output`` exists and ``overwrite`` is False.
    InputNotFoundError, CorpusFormatError, ModelFormatError
        For a missing or unreadable input.

    Notes
    -----
    One read of every chunk of X, on the active Dask scheduler; each task writes its columns of
    V (r n_c float64) to the staging store, so the driver holds only U (m r floats). For the
    training corpus of a model fitted with lam = "exact" (lam = 2), the result equals the
    model's V: the last pass of the fit computed V by this same step from the stored U.
    """
    fitted = open_model(model)
    source = open_input(input)
    check_compatible(fitted, source, input)
    output = Path(output)
    if output.exists() and not overwrite:
        raise OutputExistsError(
            f"{output} already exists. To resolve this, choose another --output or pass "
            "--overwrite."
        )
    U = fitted.U
    X = source.to_dask()
    if X.numblocks[0] != 1:
        X = X.rechunk({0: -1})
    n = source.n_documents
    with EmbeddingWriter(output, n_components=U.shape[1], chunks=source.chunks) as writer:
        starts = da.from_array(np.asarray(writer.offsets, dtype=np.int64), chunks=1)
        counts = da.blockwise(
            _embed_chunk, "j", X, "ij", _broadcast(U), "ik", starts, "j",
            staging=str(writer.staging), concatenate=True, align_arrays=False,
            adjust_chunks={"j": 1}, dtype=np.int64, meta=np.empty((0,), dtype=np.int64),
        )
        n_degenerate = int(_compute_blocks(counts, progress, "transform").sum())
        return writer.commit(
            doc_ids=source.doc_ids, labels=source.labels, label_names=source.label_names,
            attrs={
                "model": {"path": str(Path(model).resolve()), "u_sha256": fitted.fingerprint},
                "corpus": {
                    "path": str(Path(input).resolve()), "fingerprint": source.fingerprint,
                    "shape": [source.n_features, n],
                },
                "n_degenerate": n_degenerate,
                "method": "exact V-step, Liu et al. 2019 Eq. 3.12 with lam = 2",
            },
        )


def _broadcast(U: np.ndarray) -> da.Array:
    """U as a one-block dask array, sent once to every worker when a cluster is active."""
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):
        return da.from_array(U, chunks=U.shape, name=False)  # no hashing of m x r floats
    future = client.scatter(U, hash=False, broadcast=True)
    return da.from_delayed(dask.delayed(future), shape=U.shape, dtype=U.dtype)


def _embed_chunk(X_c: Any, U: np.ndarray, start: np.ndarray, staging: str) -> np.ndarray:
    """Exact V-step of one chunk, written to the staging embedding; returns [n_degenerate]."""
    from sphdist.core import kernels
    from sphdist.io.store import write_embedding_block

    A = np.asarray(X_c.T @ U).T
    V, degenerate = kernels.v_step(A, None, 2.0)
    write_embedding_block(staging, int(start[0]), V, degenerate)
    return np.array([int(degenerate.sum())], dtype=np.int64)


def _compute_blocks(result: Any, progress: bool, desc: str) -> np.ndarray:
    """Compute a dask array block by block, with a tqdm bar (stderr) when ``progress``."""
    from tqdm import tqdm

    blocks = list(result.to_delayed().ravel())
    try:
        from distributed import as_completed, default_client

        client = default_client()
    except (ImportError, ValueError):
        client = None
    if client is None:  # a local scheduler: dask's own progress bar
        import contextlib
        import sys

        import dask
        from dask.diagnostics import ProgressBar

        bar = ProgressBar(out=sys.stderr) if progress else contextlib.nullcontext()
        with bar:
            values = dask.compute(*blocks)
        return np.concatenate([np.ravel(v) for v in values])
    with tqdm(total=len(blocks), desc=desc, unit="chunk", disable=not progress) as bar:
        futures = client.compute(blocks)
        for _ in as_completed(futures):
            bar.update(1)
        return np.concatenate([np.ravel(f.result()) for f in futures])


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
