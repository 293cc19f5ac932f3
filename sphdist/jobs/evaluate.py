"""The evaluate job: k-means on a fitted embedding, scored against the corpus labels.

The function behind ``sphdist evaluate``; pipelines call it directly.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from sphdist.errors import CorpusMismatchError, DataError
from sphdist.io.corpus import open_input
from sphdist.io.model import open_model
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
    result = evaluate_embedding(V.T, labels, **kmeans)
    result.update(
        n_components=int(V.shape[0]), n_iter=fitted.n_iter, objective=fitted.objective[-1]
    )
    return result
