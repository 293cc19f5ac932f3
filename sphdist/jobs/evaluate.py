"""The evaluate job: k-means and k-NN on an embedding, scored against the documents' labels.

The function behind ``sphdist evaluate``; pipelines call it directly.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from sphdist.errors import (
    CorpusFormatError,
    DataError,
    ParameterError,
    Remedy,
    Text,
    option,
    remedy,
)
from sphdist.io import is_remote
from sphdist.io.corpus import open_corpus
from sphdist.io.model import open_model
from sphdist.jobs.embedding import open_embedding_source
from sphdist.jobs.info import plural, shown_objective, warn_if_stopped
from sphdist.metrics import evaluate_embedding, knn_accuracy
from sphdist.text.sources import first_fields, source_format

__all__ = ["evaluate_model"]


def evaluate_model(
    model: str | os.PathLike[str], input: str | os.PathLike[str] | None = None, *,
    knn_k: int | None = 10, **kmeans: Any
) -> dict[str, Any]:
    """k-means and k-NN on the embedding of a set of documents, scored against their labels.

    :func:`sphdist.metrics.evaluate_embedding` (the protocol of Liu et al. 2019, Sec. 5.2) on
    the embedding and labels of the training corpus (the model's stored V), of an
    ``embedding.zarr`` written by ``sphdist transform``, or of held-out documents ingested
    like the model (``like=``, embedded on the fly).

    Parameters
    ----------
    model : path-like
        A ``model.zarr``.
    input : path-like, optional
        The documents (for their embedding and labels): the corpus the model was fitted on
        (default: the path the model recorded); an ``embedding.zarr`` written by ``sphdist
        transform`` with this model (its labels are the corpus'); or another corpus in the
        model's feature space and idf (ingested with ``like`` the model), embedded by the exact
        V-step ``v_j = U^T x_j / ||U^T x_j||_2`` (Liu et al. 2019, Eq. 3.12 with lam = 2), as
        ``transform`` would store it.
    knn_k : int or None, default 10
        k of the k-NN label accuracy (:func:`sphdist.metrics.knn_accuracy`: cosine,
        stratified 5-fold, on at most 20,000 documents, seeded by ``random_state``); None:
        k-means only (no ``knn_*`` keys).
    **kmeans
        ``n_clusters``, ``n_init``, ``random_state`` of
        :func:`~sphdist.metrics.evaluate_embedding` (defaults: the number of labels, 10, 0).

    Returns
    -------
    dict
        ``accuracy``, ``nmi`` (fractions in [0, 1]), ``knn_accuracy`` (fraction in [0, 1], or
        None), ``knn_reason`` (only where ``knn_accuracy`` is None: why, in words, with the
        remedy), ``knn_k``, ``knn_folds``, ``knn_documents``, ``n_documents``, ``n_clusters``,
        ``n_components``, ``n_iter``, ``objective`` (final value of the fit, clipped at 0:
        :func:`sphdist.jobs.info.shown_objective`), ``input`` (the documents' path) and
        ``embedding``: ``"model"`` (the training corpus' V), ``"embedding"`` (an
        ``embedding.zarr``) or ``"corpus"`` (embedded on the fly).

    Raises
    ------
    ParameterError
        If ``model`` and ``input`` look swapped, or ``input`` is a model
        (:func:`sphdist.jobs.info.check_roles`).
    CorpusMismatchError
        If ``input`` is a corpus in another feature space (the remedy re-ingests it like
        the model), or an embedding written with another model.
    InputNotFoundError
        If ``input`` is not given and the corpus the model recorded is no longer there (the
        remedy passes it as ``input``).
    ModelFormatError
        If ``input`` is the training corpus and ``model`` a checkpoint without V.
    DataError
        If the documents have no labels.
    CorpusFormatError
        If a label code is outside the ``label_names`` (naming the document).
    ParameterError
        If ``n_clusters`` is more than the labelled documents.

    Notes
    -----
    The checkpoint of a fit that stopped before ``max_iter`` without converging is evaluated
    with a warning on the ``sphdist`` logger (:func:`sphdist.jobs.info.warn_if_stopped`).
    Embedding on the fly reads every chunk of the corpus once, on the active Dask scheduler;
    k-means then holds V, r n float64, in memory, as for the training corpus.
    """
    if input is not None:
        _refuse_raw_text(model, input)
    source = open_embedding_source(model, input, verb="evaluate", rest={}, embed=True)
    fitted = open_model(model)
    where = input if input is not None else fitted.corpus.get("path")
    labels = source.labels
    if labels is None:
        raise _no_labels(model, where, source.origin)
    _check_labels(labels, source.label_names, source.doc_ids, where)
    known = labels[labels >= 0]
    k = kmeans.get("n_clusters")
    if k is not None and not 1 <= k <= known.size:
        again = Remedy("evaluate", {"model": str(model),
                                    **({} if input is None else {"input": str(input)})},
                       {"n_clusters": int(np.unique(known).size)})
        raise ParameterError(
            option("n_clusters", k)
            + f" is more clusters than the {known.size} labelled documents of {where}. To "
            f"resolve this, choose 1 <= k <= {known.size}, e.g. the number of labels: "
            + remedy(again) + "."
        )
    warn_if_stopped(fitted, "evaluate")
    V = source.V
    embedding = np.asarray(V.compute()).T
    result = evaluate_embedding(embedding, labels, **kmeans)
    if knn_k is not None:
        result.update(knn_accuracy(embedding, labels, n_neighbors=knn_k,
                                   random_state=kmeans.get("random_state", 0)))
        if result["knn_accuracy"] is None:
            result["knn_reason"] = _why_no_knn(result, known, source.label_names)
    result.update(
        n_components=int(V.shape[0]), n_iter=fitted.n_iter,
        objective=shown_objective(fitted.objective[-1]), input=str(where),
        embedding=source.origin,
    )
    return result


def _why_no_knn(report: dict[str, Any], known: np.ndarray, names: list[str] | None) -> str:
    """Why :func:`sphdist.metrics.knn_accuracy` scored nothing, and what would score it.

    A ``str`` in the Python API's words; a :class:`~sphdist.errors.Text` where it names a
    parameter, which the command line words with its option.

    Its two cases: the rarest label has one document (no stratified split), or k is more
    than the documents of the smallest training fold.

    Examples
    --------
    >>> _why_no_knn({"knn_k": 10, "knn_folds": 1, "knn_documents": 7}, np.array([0, 0, 1]),
    ...             ["a", "b"])
    "label 'b' has a single document, and stratified folds need 2 of each label"
    >>> _why_no_knn({"knn_k": 10, "knn_folds": 2, "knn_documents": 8}, np.array([0, 1] * 4),
    ...             None)
    'knn_k=10 is more than the 4 documents of a training fold; choose k <= 4'
    """
    k, folds, n = report["knn_k"], report["knn_folds"], report["knn_documents"]
    if folds < 2:
        codes, counts = np.unique(known, return_counts=True)
        single = codes[counts == 1]
        if names is not None:
            label = ", ".join(repr(names[int(c)]) for c in single[:3])
        else:
            label = ", ".join(str(int(c)) for c in single[:3])
        more = f" and {single.size - 3} more" if single.size > 3 else ""
        return (f"label{'s' if single.size > 1 else ''} {label}{more} "
                f"{'have' if single.size > 1 else 'has'} a single document, and stratified "
                "folds need 2 of each label")
    training = n - -(-n // folds)  # the smallest training fold
    return Text(option("knn_k", k)
                + f" is more than the {training} documents of a training fold; choose k <= "
                f"{training}")


def _refuse_raw_text(model: Any, input: Any) -> None:
    """Refuse a text file (JSON Lines, CSV, Parquet, tar) given as ``input``.

    The message gives the ingest, like the model, that makes it a corpus in the model's
    features (a :class:`~sphdist.errors.Remedy`).
    """
    if is_remote(input) or not Path(input).is_file():
        return
    fmt = source_format(input)
    if fmt is None:
        return
    out = str(Path(input).with_name((Path(input).name.split(".")[0] or "documents") + ".zarr"))
    field = "label" if "label" in first_fields(input, fmt) or fmt == "tar" else "NAME"
    ingest = Remedy("ingest", {"source": [str(input)]},
                    {"like": str(model), **({"label_field": field} if fmt != "tar" else {}),
                     "output": out})
    again = Remedy("evaluate", {"model": str(model), "input": out})
    raise CorpusFormatError(
        (f"{input}: raw text ({fmt}), not a corpus: evaluate scores the embedding of ingested "
         "documents. To resolve this, ingest it in the model's features and labels with "
         + remedy(ingest)) + (" (NAME: the field or column of the labels)" if field == "NAME"
                               else "") + (", then " + remedy(again) + ".")
    )


def _no_labels(model: Any, where: Any, origin: str) -> DataError:
    """The error for documents without labels, with the remedy for their source's kind."""
    attrs: dict[str, Any] = {}
    if origin in ("model", "corpus"):
        try:
            attrs = open_corpus(where).attrs
        except Exception:  # noqa: BLE001 - the generic remedy below
            attrs = {}
    fmt = (attrs.get("ingest") or {}).get("format")
    if fmt not in ("jsonl", "csv", "parquet"):
        return DataError(
            f"{where} has no labels. To resolve this, ingest a labelled source (one folder "
            "per label, or " + option("label_field")
            + " naming the field of JSON Lines, CSV or Parquet documents that holds the label) "
            "to evaluate clustering."
        )
    described = attrs.get("source")
    sources = [described] if isinstance(described, str) else list(described or ["SOURCE"])
    field = "label" if "label" in first_fields(sources[0], fmt) else "NAME"
    out = f"{str(where).rstrip('/').rsplit('.zarr', 1)[0]}.labelled.zarr"  # beside the corpus
    ingest = Remedy("ingest", {"source": [str(s) for s in sources]},
                    {"like": str(model), "label_field": field, "output": out})
    again = Remedy("evaluate", {"model": str(model), "input": out})
    return DataError(
        (f"{where} has no labels: its {fmt} documents were ingested without "
         + option("label_field")
         + ". To resolve this, ingest them with their labels in the model's features, "
         + remedy(ingest))
        + (" (NAME: the field or column of the labels)" if field == "NAME" else "")
        + (", then " + remedy(again) + ".")
    )


def _check_labels(
    labels: np.ndarray, names: list[str] | None, doc_ids: np.ndarray, where: Any
) -> None:
    """Refuse label codes outside ``[-1, len(label_names))`` (-1: unknown)."""
    if names is None:
        return  # codes without names (a dense input's y): nothing to check them against
    bad = np.flatnonzero((labels < -1) | (labels >= len(names)))
    if bad.size:
        j = int(bad[0])
        raise CorpusFormatError(
            f"{where}: document {j} ({doc_ids[j]}) has label code {int(labels[j])}, "
            f"outside its {len(names)} label_names {names[:10]} "
            f"({plural(bad.size, 'such document')}). To resolve this, re-ingest the corpus."
        )
