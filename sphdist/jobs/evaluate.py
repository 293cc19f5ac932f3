"""The evaluate job: k-means on a fitted embedding, scored against the corpus labels.

The function behind ``sphdist evaluate``; pipelines call it directly.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from sphdist.errors import CorpusFormatError, CorpusMismatchError, DataError, ParameterError
from sphdist.io.corpus import open_input
from sphdist.io.model import open_model
from sphdist.jobs.info import check_roles, plural, shown_objective, warn_if_stopped
from sphdist.metrics import evaluate_embedding

__all__ = ["evaluate_model"]


def evaluate_model(
    model: str | os.PathLike[str], input: str | os.PathLike[str], **kmeans: Any
) -> dict[str, Any]:
    """k-means on a fitted embedding, scored against the corpus labels.

    :func:`sphdist.metrics.evaluate_embedding` (the protocol of Liu et al. 2019, Sec. 5.2) on
    the model's stored embedding and the corpus' labels.

    Parameters
    ----------
    model : path-like
        A ``model.zarr``.
    input : path-like
        The corpus it was fitted on (for the labels).
    **kmeans
        ``n_clusters``, ``n_init``, ``random_state`` of
        :func:`~sphdist.metrics.evaluate_embedding` (defaults: the number of labels, 10, 0).

    Returns
    -------
    dict
        ``accuracy``, ``nmi`` (fractions in [0, 1]), ``n_documents``, ``n_clusters``,
        ``n_components``, ``n_iter``, ``objective`` (final value, clipped at 0:
        :func:`sphdist.jobs.info.shown_objective`).

    Raises
    ------
    ParameterError
        If ``model`` and ``input`` look swapped, or ``input`` is a model
        (:func:`sphdist.jobs.info.check_roles`).
    CorpusMismatchError
        If the model was fitted on another corpus.
    DataError
        If the corpus has no labels.
    CorpusFormatError
        If a label code is outside the corpus' ``label_names`` (naming the document).
    ParameterError
        If ``n_clusters`` is more than the labelled documents.

    Notes
    -----
    The checkpoint of a fit that stopped before ``max_iter`` without converging is evaluated
    with a warning on the ``sphdist`` logger (:func:`sphdist.jobs.info.warn_if_stopped`).
    """
    check_roles("evaluate", model, input)
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
    _check_labels(labels, source, input)
    known = labels[labels >= 0]
    k = kmeans.get("n_clusters")
    if k is not None and not 1 <= k <= known.size:
        raise ParameterError(
            f"n_clusters={k} (-k {k}) is more clusters than the {known.size} labelled documents "
            f"of {input}. To resolve this, choose 1 <= k <= {known.size}, e.g. the number of "
            f"labels: `sphdist evaluate --model {model} --input {input} -k "
            f"{np.unique(known).size}`."
        )
    V = fitted.V()  # a checkpoint without V is refused here
    warn_if_stopped(fitted, "evaluate")
    result = evaluate_embedding(np.asarray(V.compute()).T, labels, **kmeans)
    result.update(
        n_components=int(V.shape[0]), n_iter=fitted.n_iter,
        objective=shown_objective(fitted.objective[-1]),
    )
    return result


def _check_labels(labels: np.ndarray, source: Any, input: Any) -> None:
    """Refuse label codes outside ``[-1, len(label_names))`` (-1: unknown)."""
    names = source.label_names
    if names is None:
        return  # codes without names (a dense input's y): nothing to check them against
    bad = np.flatnonzero((labels < -1) | (labels >= len(names)))
    if bad.size:
        j = int(bad[0])
        raise CorpusFormatError(
            f"{input}: document {j} ({source.doc_ids[j]}) has label code {int(labels[j])}, "
            f"outside its {len(names)} label_names {names[:10]} "
            f"({plural(bad.size, 'such document')}). To resolve this, re-ingest the corpus."
        )
