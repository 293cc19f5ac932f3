"""The evaluate job: k-means and k-NN on an embedding, scored against the documents' labels.

``sphdist evaluate`` is :class:`EvaluateRequest`, run by :func:`sphdist.jobs.run` (pipelines
build the same request); it writes nothing and returns its scores.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from sphdist._validation import at_least, check_param
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
from sphdist.jobs._lifecycle import Request, located
from sphdist.jobs.embedding import open_embedding_source
from sphdist.jobs.info import plural, shown_objective, warn_if_stopped
from sphdist.metrics import evaluate_embedding, knn_accuracy
from sphdist.text.sources import first_fields, source_format

__all__ = ["EvaluateRequest"]


@dataclasses.dataclass(frozen=True)
class EvaluateRequest(Request):
    """``sphdist evaluate``: k-means and k-NN on an embedding, scored against its labels.

    :func:`sphdist.metrics.evaluate_embedding` (the protocol of Liu et al. 2019, Sec. 5.2) on
    the embedding and labels of the training corpus (the model's stored V), of an
    ``embedding.zarr`` written by ``sphdist transform``, or of held-out documents ingested
    like the model (``like=``, embedded on the fly). Run it with :func:`sphdist.jobs.run`:
    ``run(EvaluateRequest("m.zarr", "test.zarr"))`` returns the scores; nothing is written.

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
    n_clusters : int, optional
        k of k-means; default the number of labels of the documents.
    n_init : int, default 10
        k-means restarts (the best objective is kept).
    random_state : int, default 0
        Seed of k-means and of the k-NN accuracy's folds and sample.
    knn_k : int or None, default 10
        k of the k-NN label accuracy (:func:`sphdist.metrics.knn_accuracy`: cosine,
        stratified 5-fold, on at most 20,000 documents); None: k-means only (no ``knn_*``
        keys).
    knn_min_label_size : int, default 2
        The k-NN accuracy leaves out the documents of labels with fewer documents than this
        (neither scored nor neighbours; ``min_label_size`` of
        :func:`~sphdist.metrics.knn_accuracy`), so a collection with labels of a single
        document is scored on the others. 1 keeps every label: the accuracy is then not
        scored where a label has a single document (``knn_reason`` says so).

    Raises
    ------
    ParameterError
        When built: if ``n_clusters``, ``n_init`` or ``knn_k`` is not a positive int (or
        None where allowed), ``random_state`` not an int >= 0, or ``knn_min_label_size`` is
        less than 1.
    ValueError
        When built: if a path is empty or names an unknown protocol.

    Notes
    -----
    :func:`~sphdist.jobs.run` returns a dict: ``accuracy``, ``nmi`` (fractions in [0, 1]),
    ``knn_accuracy`` (fraction in [0, 1], or None), ``knn_reason`` (only where
    ``knn_accuracy`` is None: why, in words, with the option that scores it where one does),
    ``knn_k``, ``knn_folds``, ``knn_documents`` and ``knn_labels`` (scored),
    ``knn_left_out_documents`` and ``knn_left_out_labels`` (left out for having fewer than
    ``knn_min_label_size`` documents), ``knn_min_label_size``, ``knn_left_out`` (only where
    some were left out: which, in words), ``n_documents``, ``n_clusters``, ``n_components``,
    ``n_iter``, ``objective`` (final value of the fit, clipped at 0:
    :func:`sphdist.jobs.info.shown_objective`), ``input`` (the documents' path) and
    ``embedding``: ``"model"`` (the training corpus' V), ``"embedding"`` (an
    ``embedding.zarr``) or ``"corpus"`` (embedded on the fly). Running it raises:

    - ParameterError, if ``model`` and ``input`` look swapped, or ``input`` is a model
      (:func:`sphdist.jobs.info.check_roles`), or ``n_clusters`` is more than the labelled
      documents;
    - CorpusMismatchError, if ``input`` is a corpus in another feature space (the remedy
      re-ingests it like the model), or an embedding written with another model;
    - InputNotFoundError, if ``input`` is not given and the corpus the model recorded is no
      longer there (the remedy passes it as ``input``);
    - ModelFormatError, if ``input`` is the training corpus and ``model`` a checkpoint
      without V;
    - DataError, if the documents have no labels;
    - CorpusFormatError, if ``input`` is raw text (the remedy ingests it), or a label code is
      outside the ``label_names`` (naming the document).

    The checkpoint of a fit that stopped before ``max_iter`` without converging is evaluated
    with a warning on the ``sphdist`` logger (:func:`sphdist.jobs.info.warn_if_stopped`).
    Embedding on the fly reads every chunk of the corpus once, on the active Dask scheduler;
    k-means then holds V, r n float64, in memory, as for the training corpus.

    References
    ----------
    Liu, K., Li, Q., Wang, H., & Tang, G. (2019). Spherical principal component analysis.
    SIAM International Conference on Data Mining, Sec. 5.2.
    """

    command: ClassVar[str] = "evaluate"
    writes: ClassVar[str | None] = None
    targets: ClassVar[tuple[str, ...]] = ("model", "input")

    model: Any
    input: Any = None
    _: dataclasses.KW_ONLY
    n_clusters: int | None = None
    n_init: int = 10
    random_state: int = 0
    knn_k: int | None = 10
    knn_min_label_size: int = 2

    def __post_init__(self) -> None:
        for name in ("model", "input"):
            object.__setattr__(self, name, located(getattr(self, name)))
        for name, allowed in (("n_clusters", (None,)), ("n_init", ()), ("knn_k", (None,))):
            check_param(name, getattr(self, name), at_least(1), *allowed,
                        caller="EvaluateRequest")
        check_param("random_state", self.random_state, at_least(0), caller="EvaluateRequest")
        if self.knn_k is not None and self.knn_min_label_size < 1:
            raise ParameterError(
                option("knn_min_label_size", self.knn_min_label_size)
                + " leaves nothing to count. To resolve this, choose 1 (keep every label) or "
                "more, e.g. " + option("knn_min_label_size", 2) + "."
            )

    def inputs(self) -> tuple[Any, ...]:
        """The model and the documents, where given."""
        return (self.model, self.input)

    def prepare(self) -> tuple[Any, Any, Any]:
        """The documents' embedding source, the model and the documents' path, checked.

        Opens the model, the documents' labels and the embedding's metadata (reads no V).
        """
        model, input = self.model, self.input
        if input is not None:
            _refuse_raw_text(self)
        source = open_embedding_source(model, input, verb="evaluate", rest={}, embed=True)
        fitted = open_model(model)
        where = input if input is not None else fitted.corpus.get("path")
        labels = source.labels
        if labels is None:
            raise _no_labels(self, where, source.origin)
        _check_labels(labels, source.label_names, source.doc_ids, where)
        known = labels[labels >= 0]
        k = self.n_clusters
        if k is not None and k > known.size:
            raise ParameterError(
                option("n_clusters", k)
                + f" is more clusters than the {known.size} labelled documents of {where}. To "
                f"resolve this, choose 1 <= k <= {known.size}, e.g. the number of labels: "
                + remedy(self.remedy(n_clusters=int(np.unique(known).size))) + "."
            )
        return source, fitted, where

    def execute(self, held: None, prepared: tuple[Any, Any, Any]) -> dict[str, Any]:
        """Embed (or read) V, run k-means and the k-NN accuracy, and score them."""
        source, fitted, where = prepared
        labels = source.labels
        known = labels[labels >= 0]
        warn_if_stopped(fitted, "evaluate")
        V = source.V
        embedding = np.asarray(V.compute()).T
        result = evaluate_embedding(embedding, labels, n_clusters=self.n_clusters,
                                    n_init=self.n_init, random_state=self.random_state)
        if self.knn_k is not None:
            result.update(knn_accuracy(embedding, labels, n_neighbors=self.knn_k,
                                       min_label_size=self.knn_min_label_size,
                                       random_state=self.random_state))
            if result["knn_left_out_labels"]:
                result["knn_left_out"] = _left_out(result, known, source.label_names)
            if result["knn_accuracy"] is None:
                result["knn_reason"] = _why_no_knn(result, known, source.label_names)
        result.update(
            n_components=int(V.shape[0]), n_iter=fitted.n_iter,
            objective=shown_objective(fitted.objective[-1]), input=str(where),
            embedding=source.origin,
        )
        return result


def _label_list(codes: np.ndarray, names: list[str] | None, shown: int = 3) -> str:
    """``'a', 'b', 'c' and 8 more``: the first ``shown`` labels of ``codes`` by name."""
    words = [repr(names[int(c)]) if names is not None else str(int(c)) for c in codes[:shown]]
    more = f" and {codes.size - shown} more" if codes.size > shown else ""
    return ", ".join(words) + more


def _fewer_than(size: int) -> str:
    """``a single document`` (2), ``fewer than 5 documents``."""
    return "a single document" if size == 2 else f"fewer than {size} documents"


def _left_out(report: dict[str, Any], known: np.ndarray, names: list[str] | None) -> str:
    """Which labels :func:`sphdist.metrics.knn_accuracy` left out, and their documents.

    Examples
    --------
    >>> _left_out({"knn_left_out_labels": 2, "knn_left_out_documents": 2,
    ...            "knn_min_label_size": 2}, np.array([0, 0, 1, 2]), ["a", "b", "c"])
    "2 labels with a single document left out ('b', 'c'; 2 documents)"
    """
    size, n_labels = report["knn_min_label_size"], report["knn_left_out_labels"]
    codes, counts = np.unique(known, return_counts=True)
    rare = codes[counts < size]
    # labels thinned below size by the sample of max_documents, beside those rare in all
    thinned = n_labels - rare.size
    return (f"{plural(n_labels, 'label')} with {_fewer_than(size)}"
            + (f" ({thinned} of them in the sample scored)" if thinned > 0 else "")
            + f" left out ({_label_list(rare, names) + '; ' if rare.size else ''}"
            f"{plural(report['knn_left_out_documents'], 'document')})")


def _why_no_knn(report: dict[str, Any], known: np.ndarray, names: list[str] | None) -> str:
    """Why :func:`sphdist.metrics.knn_accuracy` scored nothing, and what would score it.

    A ``str`` in the Python API's words; a :class:`~sphdist.errors.Text` where it names a
    parameter, which the command line words with its option.

    Its three cases: fewer than two labels have ``knn_min_label_size`` documents (a lower
    size that leaves two is named), a label scored has one document (``knn_min_label_size``
    1: size 2 is named), or k is more than the documents of the smallest training fold.

    Examples
    --------
    >>> str(_why_no_knn({"knn_k": 10, "knn_folds": 1, "knn_documents": 7, "knn_labels": 2,
    ...                  "knn_min_label_size": 1}, np.array([0, 0, 1]), ["a", "b"]))
    "label 'b' has a single document, and stratified folds need 2 of each label; \
knn_min_label_size=2 scores the others without it"
    >>> _why_no_knn({"knn_k": 10, "knn_folds": 2, "knn_documents": 8, "knn_labels": 2,
    ...              "knn_min_label_size": 2}, np.array([0, 1] * 4), None)
    'knn_k=10 is more than the 4 documents of a training fold; choose k <= 4'
    """
    k, folds, n = report["knn_k"], report["knn_folds"], report["knn_documents"]
    size = report["knn_min_label_size"]
    codes, counts = np.unique(known, return_counts=True)
    if report["knn_labels"] < 2:
        second = int(np.sort(counts)[-2]) if counts.size >= 2 else 0  # 2nd largest label
        if 2 <= second < size:  # a lower size leaves two labels
            enough = codes[counts >= size]
            kept = counts >= second
            return Text(("no label has" if enough.size == 0
                         else f"only label {_label_list(enough, names)} has")
                        + f" {size} documents or more, and k-NN accuracy needs 2 labels; "
                        + option("knn_min_label_size", second)
                        + f" scores {plural(int(kept.sum()), 'label')} "
                        f"({plural(int(counts[kept].sum()), 'document')})")
        enough = codes[counts >= 2]
        return (("no label has" if enough.size == 0
                 else f"only label {_label_list(enough, names)} has")
                + " 2 documents or more, and k-NN accuracy needs 2 labels of 2 documents or "
                "more each: label more of the documents to score it")
    if folds < 2:  # knn_min_label_size=1: labels of a single document kept
        single = codes[counts == 1]
        many = single.size > 1
        return Text(f"label{'s' if many else ''} {_label_list(single, names)} "
                    f"{'have' if many else 'has'} a single document, and stratified folds need "
                    "2 of each label; " + option("knn_min_label_size", 2)
                    + f" scores the others without {'them' if many else 'it'}")
    training = n - -(-n // folds)  # the smallest training fold
    return Text(option("knn_k", k)
                + f" is more than the {training} documents of a training fold; choose k <= "
                f"{training}")


def _refuse_raw_text(request: EvaluateRequest) -> None:
    """Refuse a text file (JSON Lines, CSV, Parquet, tar) given as ``input``.

    The message gives the ingest, like the model, that makes it a corpus in the model's
    features (a :class:`~sphdist.errors.Remedy`), then the evaluation of that corpus.
    """
    model, input = request.model, request.input
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
    again = request.remedy(input=out)
    raise CorpusFormatError(
        (f"{input}: raw text ({fmt}), not a corpus: evaluate scores the embedding of ingested "
         "documents. To resolve this, ingest it in the model's features and labels with "
         + remedy(ingest)) + (" (NAME: the field or column of the labels)" if field == "NAME"
                               else "") + (", then " + remedy(again) + ".")
    )


def _no_labels(request: EvaluateRequest, where: Any, origin: str) -> DataError:
    """The error for documents without labels, with the remedy for their source's kind."""
    model = request.model
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
    again = request.remedy(input=out)
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
