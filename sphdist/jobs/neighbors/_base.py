"""What the neighbour jobs share: the stored index of a model's embeddings, and the search.

:class:`IndexRequest` builds a faiss index (:class:`sphdist.methods.neighbors.NeighborIndex`) and
stores it (:mod:`sphdist.io.index`); :func:`check_index` reads it whole; :func:`load_index`
opens it for a search after checking it indexes the documents searched; :func:`find_index`
picks the one a search uses (the one asked for, else :func:`default_index_path`).
:func:`search` answers many queries by the index, or exactly (:func:`exact_search`, one scan
of the embeddings); :func:`check_k` refuses a ``k`` larger than the candidates.
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from sphdist.core.neighbors import SearchIndex, top_k_chunk, top_k_merge
from sphdist.errors import CorpusMismatchError, ParameterError, Remedy, Text, option, remedy
from sphdist.io import Output, absolute, exists, location
from sphdist.io.index import index_kind, open_index, write_index
from sphdist.io.model import Model, open_model
from sphdist.jobs._cluster_paths import task_path
from sphdist.jobs._lifecycle import Request, located
from sphdist.jobs.embedding import EmbeddingSource, open_embedding_source
from sphdist.jobs.neighbors._request import NeighborRequest

logger = logging.getLogger("sphdist")

_QUERY_BATCH = 1024  # queries scored at a time by the exact batch scan
_DOC_SLICE = 16384  # documents per block of cosines in the exact batch scan
_READ_DOCS = 65536  # documents read from the store at a time


def default_index_path(model: str | os.PathLike[str], input: str | os.PathLike[str] | None = None,
                       origin: str = "model") -> Path:
    """Where ``sphdist index`` writes, and ``sphdist neighbors`` looks, by default.

    ``<model>.index.zarr`` beside the model for its training corpus, ``<embedding>.index.zarr``
    beside an ``embedding.zarr``.

    >>> str(default_index_path("m/news.model.zarr"))
    'm/news.model.index.zarr'
    >>> str(default_index_path("m/news.model.zarr", "e/new.emb.zarr", origin="embedding"))
    'e/new.emb.index.zarr'
    """
    base = location(input if origin == "embedding" and input is not None else model)
    return base.with_name(base.name.removesuffix(".zarr") + ".index.zarr")


def _record(fitted: Model, source: EmbeddingSource, input: Any) -> tuple[dict, dict]:
    # absolute: the remedies that name them are read from any directory
    model = {"path": absolute(fitted.path), "u_sha256": fitted.fingerprint}
    where = absolute(input) if source.origin == "embedding" and input is not None else None
    return model, {"origin": source.origin, "path": where, "n_documents": source.n_documents}


def _skip(source: EmbeddingSource) -> np.ndarray | None:
    return None if source.degenerate is None else np.asarray(source.degenerate, dtype=bool)


@dataclasses.dataclass(frozen=True)
class IndexRequest(Request):
    """``sphdist index``: the nearest-neighbour index of a model's embeddings, stored.

    Run by :func:`sphdist.jobs.run`, which returns a dict: ``output``, ``kind``, ``nlist``,
    ``nprobe``, ``n_documents``, ``n_indexed``, ``n_components``, ``nbytes`` (of the serialized
    index), ``seconds`` (of the build).

    Parameters
    ----------
    model : path-like
        A ``model.zarr`` (converged: it holds V).
    output : path-like
        The ``index.zarr`` to write (a path or a URL).
    input : path-like, optional
        An ``embedding.zarr`` of this model (``sphdist transform``) to index instead of the
        model's training documents (see :func:`sphdist.jobs.embedding.open_embedding_source`).
    kind, nlist, nprobe, train_size, random_state
        Of :class:`sphdist.methods.neighbors.NeighborIndex`; ``nprobe`` is stored with the
        index and used by every search unless overridden.
    overwrite : bool, default False
        Replace an existing ``output``.

    Notes
    -----
    Run, it raises, besides what :func:`sphdist.jobs.run` raises for every command:
    ParameterError or DataError for parameters
    :class:`~sphdist.methods.neighbors.NeighborIndex` refuses; CorpusMismatchError,
    InputNotFoundError or ModelFormatError as :func:`sphdist.jobs.embedding.open_embedding_source`.

    V is read ``chunk_size`` documents at a time and added to the index, so the build holds
    the index (``(4 r + 8) n`` bytes) plus one chunk, then the serialized copy it writes.
    Documents without a direction are left out of the index.
    """

    command: ClassVar[str] = "index"
    writes: ClassVar[str] = "index"
    targets: ClassVar[tuple[str, ...]] = ("model", "input", "output")

    model: Any
    output: Any
    input: Any = None
    kind: str = "auto"
    nlist: int | None = None
    nprobe: int | None = None
    train_size: int | None = None
    overwrite: bool = False
    random_state: int = 0

    def __post_init__(self) -> None:
        for name in self.targets:
            object.__setattr__(self, name, located(getattr(self, name)))

    def inputs(self) -> tuple[Any, ...]:
        """The model and, if given, the embedding indexed."""
        return (self.model, self.input)

    def execute(self, held: Output, prepared: None) -> dict[str, Any]:
        """Add V to the index chunk by chunk, serialize it and commit it through ``held``."""
        import faiss

        # scikit-learn (the estimator that builds the index): one query must not import it
        # (tests/cli/test_startup.py)
        from sphdist.methods.neighbors import NeighborIndex

        model, input = task_path(self.model), task_path(self.input)
        output = task_path(self.output, output=True)
        source = open_embedding_source(model, input, verb="index", rest={"output": str(output)})
        fitted = open_model(model)
        start = time.perf_counter()
        index = NeighborIndex(self.kind, nlist=self.nlist, nprobe=self.nprobe,
                              train_size=self.train_size, random_state=self.random_state,
                              ).fit(source.V.T, exclude=_skip(source))
        seconds = time.perf_counter() - start
        if index.kind_ == "ivf":  # searched, never reconstructed: no id map (16 n bytes) to load
            index.index_.set_direct_map_type(faiss.DirectMap.NoMap)  # on every read
        data = faiss.serialize_index(index.index_)
        model_rec, source_rec = _record(fitted, source, input)
        record = {
            "kind": index.kind_, "nlist": index.nlist_, "nprobe": index.nprobe_,
            "n_documents": index.n_samples_fit_, "n_indexed": index.n_indexed_,
            "n_components": index.n_features_in_, "metric": "inner_product",
            "faiss_version": faiss.__version__, "seconds": seconds,
        }
        write_index(held, data, attrs={"index": record, "model": model_rec,
                                       "source": source_rec},
                    ids=source.ids)  # a copy of the ids, to find a doc_id without reading them
        return {"output": str(output), **{k: record[k] for k in (
            "kind", "nlist", "nprobe", "n_documents", "n_indexed", "n_components")},
            "nbytes": int(data.nbytes), "seconds": seconds}


def check_index(
    model: str | os.PathLike[str], path: str | os.PathLike[str], *,
    input: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """The full check of a stored index (``sphdist index``'s check); writes nothing.

    Every read of an index checks its size, a sampled digest and its structure
    (:meth:`sphdist.io.index.StoredIndex.load`); this reads every byte against the recorded
    ``faiss_sha256`` and every id (each a document of the model's embeddings, none twice), and
    checks that it is the index of ``model``'s documents, and that its copy of the document
    ids and their lookup table are those of the documents
    (:meth:`sphdist.io.index.StoredIndex.verify`).

    Parameters
    ----------
    model : path-like
    path : path-like
        The ``index.zarr``.
    input : path-like, optional
        The embedding it indexes, as for :class:`IndexRequest`.

    Returns
    -------
    dict
        ``path``, ``nbytes``, ``n_indexed``, ``faiss_sha256``, ``doc_ids`` (True where the
        index holds a copy of the ids, checked), ``ok`` (True).

    Raises
    ------
    InputNotFoundError, ModelFormatError, CorpusMismatchError
        As :func:`load_index`, and for bytes that do not match ``faiss_sha256`` or an id
        outside the documents or repeated.
    """
    source = open_embedding_source(model, input, verb="index",
                                   rest={"output": str(path), "check": True})
    fitted = open_model(model)
    ids = source.ids  # the corpus' or embedding's (load_index puts the index' copy instead)
    load_index(path, fitted, source, input)  # the record against the model, the cheap checks
    report = open_index(path).verify(n_components=fitted.shape[1],
                                     n_documents=source.n_documents, doc_ids=ids)
    return {**report, "ok": True}


def load_index(
    path: str | os.PathLike[str], fitted: Model, source: EmbeddingSource,
    input: str | os.PathLike[str] | None = None, *, nprobe: int | None = None,
) -> Any:
    """Open a stored index, check that it indexes ``source`` of ``fitted``, and load it.

    Where the index holds a copy of the ids of ``source`` (:meth:`StoredIndex.ids
    <sphdist.io.index.StoredIndex.ids>`), ``source.ids`` is replaced by it: a ``doc_id``
    is then found by the index' lookup table, and the ids of the hits read in chunks of
    8,192, instead of reading the ids of the corpus in order.

    Parameters
    ----------
    path : path-like
        An ``index.zarr``.
    fitted : Model
    source : EmbeddingSource
        The documents the index must hold (:func:`open_embedding_source`).
    input : path-like, optional
        The ``input`` that opened ``source``, for the remedy.
    nprobe : int, optional
        Override of the stored ``nprobe``.

    Returns
    -------
    SearchIndex
        Its ``nprobe`` the stored one or the override (the search of
        :class:`~sphdist.methods.neighbors.NeighborIndex`, without scikit-learn).

    Raises
    ------
    InputNotFoundError
        If nothing is at ``path``.
    ModelFormatError
        If it is not a sphdist index, or damaged (:meth:`sphdist.io.index.StoredIndex.load`:
        the size or sampled digest of the memory-mapped file, bytes faiss cannot read, an
        index whose dimension, count, metric, kind, nlist or nprobe disagree with its record
        and the model).
    CorpusMismatchError
        If it was built from another model, or from other documents than ``source``; the
        remedy rebuilds it (or passes ``exact``).
    """
    stored = open_index(path)
    rebuild = remedy(Remedy(
        "index", {"model": str(fitted.path),
                  **({"input": str(input)} if source.origin == "embedding" else {})},
        {"output": str(stored.path), "overwrite": True}))
    built = stored.model
    if built.get("u_sha256") != fitted.fingerprint:
        raise CorpusMismatchError(
            (f"{stored.path} is the index of another model ({built.get('path')}), not of "
             f"{fitted.path}. To resolve this, rebuild it: " + rebuild + " (or pass ")
            + option("exact", True) + " to scan the embeddings without an index)."
        )
    src = stored.source
    if src.get("n_documents") != source.n_documents or src.get("origin") != source.origin:
        raise CorpusMismatchError(
            f"{stored.path} indexes {src.get('n_documents')} documents of "
            f"{src.get('path') or 'the training corpus'}, not the {source.n_documents} "
            f"documents searched. To resolve this, rebuild it: {rebuild} (or pass "
            + option("exact", True) + ")."
        )
    record = stored.record
    faiss_index = stored.load(n_components=fitted.shape[1], n_documents=source.n_documents,
                              nprobe=nprobe)
    copied = stored.ids(source.ids)
    if copied is not None:
        source.ids = copied
    return SearchIndex(
        faiss_index, kind_=record["kind"], nlist_=record.get("nlist"),
        nprobe=nprobe or record.get("nprobe"), n_samples_fit_=int(record["n_documents"]),
        n_indexed_=int(faiss_index.ntotal), n_features_in_=int(record["n_components"]),
        rebuild_=stored.refuse,  # the error of damage found when searching
    )


def find_index(
    model: str | os.PathLike[str], source: EmbeddingSource, fitted: Model,
    input: str | os.PathLike[str] | None = None, *, index: str | os.PathLike[str] | None = None,
    exact: bool = False, nprobe: int | None = None,
) -> tuple[Any, Path | None]:
    """The index ``sphdist neighbors`` searches: ``index``, else the default one if it exists.

    Returns
    -------
    (SearchIndex or None, Path or None)
        None when ``exact``, or when no index was given and none is at
        :func:`default_index_path` (the exact scan then runs, as before indexes existed).

    Raises
    ------
    ParameterError
        If both ``index`` and ``exact`` are given.
    InputNotFoundError, ModelFormatError, CorpusMismatchError
        See :func:`load_index` (a default path holding something that is not an index is
        refused too: it is not silently ignored).
    """
    if exact and index is not None:
        raise ParameterError("pass " + option("index") + " or " + option("exact") + ", not both.")
    if exact:
        return None, None
    if index is None:
        path = default_index_path(model, input, source.origin)
        if index_kind(path) is None and not exists(path):
            return None, None
    else:
        path = location(index)
    return load_index(path, fitted, source, input, nprobe=nprobe), path


def check_k(k: int, available: int, what: str = "documents") -> None:
    """Refuse ``k`` larger than the ``available`` candidates.

    Raises
    ------
    ParameterError
        Naming k and the number available, with the remedy.
    """
    if k > available:
        raise ParameterError(
            f"-k {k} is larger than the {available} {what} that can be neighbours. To resolve "
            f"this, pass -k {max(available, 1)} or less."
        )


def exact_search(
    source: EmbeddingSource, Q: np.ndarray, k: int, *, exclude: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The exact k nearest documents of many queries: one scan of the embeddings.

    Parameters
    ----------
    source : EmbeddingSource
    Q : ndarray of shape (r, n_q), float64
        Unit queries as columns.
    k : int
    exclude : ndarray of shape (n_q,), int64, optional
        Per query, a document never returned (-1: none).

    Returns
    -------
    (index, cosine) : ndarrays of shape (n_q, k), int64 and float64
        As :func:`sphdist.core.neighbors.top_k_chunk`; documents without a direction are never
        returned.

    Notes
    -----
    V is read once, ``65536`` documents at a time; memory ``8 * 1024 * 16384`` bytes of
    cosines at a time plus the (n_q, k) results.
    """
    r, n = source.shape
    n_q = Q.shape[1]
    skip = _skip(source)
    best = (np.full((n_q, k), -1, dtype=np.int64), np.full((n_q, k), -np.inf))
    for a in range(0, n, _READ_DOCS):
        b = min(a + _READ_DOCS, n)
        block = source.columns(a, b)
        for s in range(a, b, _DOC_SLICE):
            e = min(s + _DOC_SLICE, b)
            for q in range(0, n_q, _QUERY_BATCH):
                qe = min(q + _QUERY_BATCH, n_q)
                part = top_k_chunk(
                    Q[:, q:qe], block[:, s - a:e - a], k, offset=s,
                    exclude=None if exclude is None else exclude[q:qe],
                    skip=None if skip is None else skip[s:e],
                )
                merged = top_k_merge((best[0][q:qe], best[1][q:qe]), part, k)
                best[0][q:qe], best[1][q:qe] = merged
    return best


def search(
    source: EmbeddingSource, Q: np.ndarray, k: int, *, index: Any = None,
    exclude: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest documents of the columns of Q: by ``index`` if given, else exactly.

    Parameters
    ----------
    source : EmbeddingSource
    Q : ndarray of shape (r, n_q), float64
    k : int
    index : NeighborIndex, optional
        From :func:`find_index`.
    exclude : ndarray of shape (n_q,), int64, optional
        Per query, a document never returned (its own, for a document query; -1: none).

    Returns
    -------
    (index, cosine) : ndarrays of shape (n_q, k), int64 and float64
        Nearest first; -1 and ``-inf`` where fewer than k were found.
    """
    if index is None:
        return exact_search(source, Q, k, exclude=exclude)
    idx, cos = index.search(Q.T, k + (exclude is not None))
    _check_hits(index, source, idx)
    if exclude is not None:
        cos = np.where(idx == np.asarray(exclude)[:, None], -np.inf, cos)
        idx = np.where(np.isfinite(cos), idx, -1)
        empty = (np.full((Q.shape[1], 0), -1, dtype=np.int64), np.zeros((Q.shape[1], 0)))
        idx, cos = top_k_merge((idx, cos), empty, k)
    return idx, cos


@dataclasses.dataclass(frozen=True)
class SearchRequest(Request):
    """What the searches of queries share: the model, and how and where they search.

    The base of :class:`~sphdist.jobs.neighbors.QueryRequest` (one query) and
    :class:`~sphdist.jobs.neighbors.BatchNeighborsRequest` (many), which add their queries
    (and the batch its output) and :meth:`~sphdist.jobs.Request.execute`. Built, it locates
    the model, the documents and the index once; :meth:`asks` checks the queries with these
    fields (:class:`NeighborRequest`), :meth:`prepare` opens what is searched.

    Parameters
    ----------
    model : path-like
    k, include_self, input, index, exact, nprobe
        As :class:`NeighborRequest`; keywords.
    """

    command: ClassVar[str] = "neighbors"
    targets: ClassVar[tuple[str, ...]] = ("model", "input")

    model: Any
    _: dataclasses.KW_ONLY
    k: int = 10
    include_self: bool = False
    input: Any = None
    index: Any = None
    exact: bool = False
    nprobe: int | None = None

    def __post_init__(self) -> None:
        for name in ("model", "input", "index"):
            object.__setattr__(self, name, located(getattr(self, name)))

    def asks(self, **queries: Any) -> NeighborRequest:
        """The :class:`NeighborRequest` of ``queries`` searched as this request says: its checks.

        Raises
        ------
        ParameterError
            As :class:`NeighborRequest`.
        """
        return NeighborRequest(**queries, k=self.k, include_self=self.include_self,
                               input=self.input, index=self.index, exact=self.exact,
                               nprobe=self.nprobe)

    def inputs(self) -> tuple[Any, ...]:
        """The model, the documents and the index, where given."""
        return (self.model, self.input, self.index)

    def prepare(self) -> tuple[Model, EmbeddingSource, Any, Path | None]:
        """The model, the embeddings and the index searched (:func:`find_index`), checked.

        Returns
        -------
        tuple
            The model, the embeddings (:func:`~sphdist.jobs.embedding.open_embedding_source`),
            the loaded index or None (an exact scan), and its path or None.
        """
        source = open_embedding_source(self.model, self.input, verb="neighbors",
                                       rest=self.asked())  # roles first
        fitted = open_model(self.model)
        found, path = find_index(self.model, source, fitted, self.input, index=self.index,
                                 exact=self.exact, nprobe=self.nprobe)
        return fitted, source, found, path

    @abc.abstractmethod
    def asked(self) -> dict[str, Any]:
        """The queries (and the output) asked, as a refusal's remedies name them."""


def _check_hits(index: Any, source: EmbeddingSource, idx: np.ndarray) -> None:
    """Refuse ids a stored index returned that no document searched has (a damaged index)."""
    bad = idx[(idx >= source.n_documents) | (idx < -1)]
    if not bad.size and source.degenerate is not None:
        hit = idx[idx >= 0]
        bad = hit[np.asarray(source.degenerate)[hit]]
    if bad.size and hasattr(index, "rebuild_"):
        raise index.rebuild_(f"the index returned document {int(bad[0])}, which is not an "
                             f"indexed document of the {source.n_documents} searched")


def _say(found: Any, path: Path | None) -> None:
    """Log which index is searched (once the request is known to be valid)."""
    if path is not None:
        logger.info(Text("searching the index %s (%s%s); " + option("exact", True)
                         + " scans every embedding instead"),
                    path, found.kind_,
                    f", nprobe {found.nprobe_} of {found.nlist_} lists" if found.nlist_ else "")
