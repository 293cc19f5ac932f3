"""Nearest neighbours at scale: the index of a model's embeddings, batch queries, the k-NN graph.

``sphdist index`` (:func:`build_index`) builds a faiss index
(:class:`sphdist.methods.neighbors.NeighborIndex`: exact flat below
:data:`~sphdist.methods.neighbors.FLAT_MAX` documents, IVF above) of the embeddings a model
gives (its V, or an ``embedding.zarr``) and stores it as an ``index.zarr``
(:mod:`sphdist.io.index`), committed atomically by one writer. ``sphdist neighbors`` finds it
(:func:`find_index`: the ``index`` asked for, else the default path :func:`default_index_path`
beside the model or the embedding) and searches it (:func:`search`), unless ``exact``; a batch of
queries is written as Parquet, JSON Lines or CSV, by the suffix of the output
(:func:`write_hits`); ``all`` writes every document's k nearest others (:func:`knn_graph`),
chunk by chunk on Dask (:func:`sphdist.core.graph.knn_graph`). Every table has the columns
:data:`HIT_COLUMNS`.

The single-query scan without an index is :func:`sphdist.jobs.embedding.nearest_neighbors`.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from sphdist.core.neighbors import SearchIndex, angle_degrees, top_k_chunk, top_k_merge
from sphdist.errors import (
    CorpusMismatchError,
    DataError,
    InputNotFoundError,
    ParameterError,
    Remedy,
    Words,
    option,
    remedy,
)
from sphdist.io import Output, absolute, exists, hold_output, location, open_output
from sphdist.io._policy import refuse_existing
from sphdist.io.index import index_kind, open_index, write_index
from sphdist.io.model import Model, open_model
from sphdist.jobs.embedding import EmbeddingSource, open_embedding_source

__all__ = [
    "HIT_FORMATS",
    "HIT_COLUMNS",
    "NeighborRequest",
    "QueryLines",
    "build_index",
    "check_index",
    "default_index_path",
    "find_index",
    "load_index",
    "search",
    "exact_search",
    "check_k",
    "hits_table",
    "write_hits",
    "knn_graph",
    "query_neighbors",
    "batch_neighbors",
    "queries_of",
    "index_call",
    "neighbors_call",
]

logger = logging.getLogger("sphdist")

#: Output formats of batch queries and of the k-NN graph, by file suffix.
HIT_FORMATS = {".parquet": "parquet", ".jsonl": "jsonl", ".csv": "csv"}
#: The columns of every neighbour table (``queries``, ``queries`` of ids, ``all``):
#: ``query`` (the text, or the id of the query document), ``query_label`` (the query
#: document's label; null for a text), ``rank`` (1-based), ``doc_id`` and ``label`` of the
#: neighbour, ``angle`` (degrees, in [0, 180]) and ``cosine``.
HIT_COLUMNS = ("query", "query_label", "rank", "doc_id", "label", "angle", "cosine")
ON_ERROR = ("fail", "skip")

_QUERY_BATCH = 1024  # queries scored at a time by the exact batch scan
_DOC_SLICE = 16384  # documents per block of cosines in the exact batch scan
_READ_DOCS = 65536  # documents read from the store at a time


def _keywords(arguments: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in arguments.items())


def index_call(arguments: dict[str, Any]) -> str:
    """The call that a remedy of the ``index`` job names, as Python text.

    What :class:`sphdist.errors.PythonForm` words an ``"index"``
    :class:`~sphdist.errors.Remedy` with: :func:`check_index` of its ``output`` where it
    checks (``check``), else :func:`build_index`.

    Examples
    --------
    >>> index_call({"model": "m.zarr", "output": "i.zarr", "check": True})
    "sphdist.jobs.neighbors.check_index(model='m.zarr', path='i.zarr')"
    >>> index_call({"model": "m.zarr", "output": "i.zarr", "overwrite": True})
    "sphdist.jobs.neighbors.build_index(model='m.zarr', output='i.zarr', overwrite=True)"
    """
    arguments = dict(arguments)
    if arguments.pop("check", False):
        arguments = {("path" if k == "output" else k): v for k, v in arguments.items()}
        return f"sphdist.jobs.neighbors.check_index({_keywords(arguments)})"
    return f"sphdist.jobs.neighbors.build_index({_keywords(arguments)})"


def neighbors_call(arguments: dict[str, Any]) -> str:
    """The call that a remedy of the ``neighbors`` job names, as Python text.

    What :class:`sphdist.errors.PythonForm` words a ``"neighbors"``
    :class:`~sphdist.errors.Remedy` with: the function of its mode (:func:`knn_graph` for
    ``all``, :func:`batch_neighbors` for ``queries``, read by :func:`queries_of`, else
    :func:`query_neighbors`), its fields as keywords.

    Examples
    --------
    >>> neighbors_call({"model": "m.zarr", "all": True, "k": 5, "output": "g.csv"})
    "sphdist.jobs.neighbors.knn_graph(model='m.zarr', k=5, output='g.csv')"
    >>> neighbors_call({"model": "m.zarr", "queries": "q.txt", "output": "h.csv"})
    "sphdist.jobs.neighbors.batch_neighbors(model='m.zarr', \
queries=sphdist.jobs.neighbors.queries_of('q.txt'), output='h.csv')"
    """
    arguments = dict(arguments)
    if arguments.pop("all", False):
        name = "knn_graph"
    elif "queries" in arguments:
        name = "batch_neighbors"
    else:
        name = "query_neighbors"
    words = [f"queries=sphdist.jobs.neighbors.queries_of({v!r})" if k == "queries" else
             f"{k}={v!r}" for k, v in arguments.items()]
    return f"sphdist.jobs.neighbors.{name}({', '.join(words)})"


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


def build_index(
    model: str | os.PathLike[str], output: str | os.PathLike[str], *,
    input: str | os.PathLike[str] | None = None, kind: str = "auto", nlist: int | None = None,
    nprobe: int | None = None, train_size: int | None = None, overwrite: bool = False,
    random_state: int = 0,
) -> dict[str, Any]:
    """Build the nearest-neighbour index of a model's embeddings and store it (``sphdist index``).

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

    Returns
    -------
    dict
        ``output``, ``kind``, ``nlist``, ``nprobe``, ``n_documents``, ``n_indexed``,
        ``n_components``, ``nbytes`` (of the serialized index), ``seconds`` (of the build).

    Raises
    ------
    OutputExistsError
        If ``output`` exists and ``overwrite`` is False.
    OutputLockedError
        If another process is writing ``output``.
    ParameterError, DataError
        For parameters :class:`~sphdist.methods.neighbors.NeighborIndex` refuses.
    CorpusMismatchError, InputNotFoundError, ModelFormatError
        See :func:`sphdist.jobs.embedding.open_embedding_source`.

    Notes
    -----
    V is read ``chunk_size`` documents at a time and added to the index, so the build holds
    the index (``(4 r + 8) n`` bytes) plus one chunk, then the serialized copy it writes.
    Documents without a direction are left out of the index.

    The output is held (:func:`sphdist.io.hold_output`) from the start until the commit,
    which is that hold's (:meth:`sphdist.io.Output.commit`).
    """
    with hold_output(output, kind="index", inputs=(model, input)) as held:
        return _build_index(held, model, output, input=input, kind=kind, nlist=nlist,
                            nprobe=nprobe, train_size=train_size, overwrite=overwrite,
                            random_state=random_state)


def _build_index(
    held: Output, model: str | os.PathLike[str], output: str | os.PathLike[str], *,
    input: str | os.PathLike[str] | None, kind: str, nlist: int | None, nprobe: int | None,
    train_size: int | None, overwrite: bool, random_state: int,
) -> dict[str, Any]:
    """:func:`build_index`, its output ``held`` (written through it)."""
    import faiss

    from sphdist.jobs.cluster import task_path
    from sphdist.methods.neighbors import NeighborIndex

    model, input, output = task_path(model), task_path(input), task_path(output, output=True)
    if not overwrite and exists(output):
        refuse_existing(output)
    source = open_embedding_source(model, input, verb="index", rest={"output": str(output)})
    fitted = open_model(model)
    start = time.perf_counter()
    index = NeighborIndex(kind, nlist=nlist, nprobe=nprobe, train_size=train_size,
                          random_state=random_state).fit(source.V.T, exclude=_skip(source))
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
    write_index(held, data, attrs={"index": record, "model": model_rec, "source": source_rec},
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
        The embedding it indexes, as for :func:`build_index`.

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
            f"{stored.path} is the index of another model ({built.get('path')}), not of "
            f"{fitted.path}. To resolve this, rebuild it: {rebuild} (or pass "
            f"{option('exact', True)} to scan the embeddings without an index)."
        )
    src = stored.source
    if src.get("n_documents") != source.n_documents or src.get("origin") != source.origin:
        raise CorpusMismatchError(
            f"{stored.path} indexes {src.get('n_documents')} documents of "
            f"{src.get('path') or 'the training corpus'}, not the {source.n_documents} "
            f"documents searched. To resolve this, rebuild it: {rebuild} (or pass "
            f"{option('exact', True)})."
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
        raise ParameterError(f"pass {option('index')} or {option('exact')}, not both.")
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


def _check_hits(index: Any, source: EmbeddingSource, idx: np.ndarray) -> None:
    """Refuse ids a stored index returned that no document searched has (a damaged index)."""
    bad = idx[(idx >= source.n_documents) | (idx < -1)]
    if not bad.size and source.degenerate is not None:
        hit = idx[idx >= 0]
        bad = hit[np.asarray(source.degenerate)[hit]]
    if bad.size and hasattr(index, "rebuild_"):
        raise index.rebuild_(f"the index returned document {int(bad[0])}, which is not an "
                             f"indexed document of the {source.n_documents} searched")


def hits_table(
    source: EmbeddingSource, queries: Sequence[str], idx: np.ndarray, cos: np.ndarray,
    query_labels: Sequence[str | None] | None = None, *, doc_ids: np.ndarray | None = None,
) -> dict[str, list[Any]]:
    """The rows of search results, columns :data:`HIT_COLUMNS` (as lists).

    Parameters
    ----------
    source : EmbeddingSource
        The documents searched.
    queries : sequence of str
        What each query was: a text, or a document id.
    idx, cos : ndarrays of shape (n_q, k), int64 and float64
        From :func:`search`.
    query_labels : sequence of str or None, optional
        The label of each query document (None: text queries, no label).
    doc_ids : ndarray of shape (n_q, k), object, optional
        The ids of the documents ``idx`` (read by the caller: one query reads the chunks of
        ids that hold its hits); default: read from ``source``.

    Returns
    -------
    dict of str to list
        ``angle`` in degrees, in [0, 180]; rows where fewer than k were found are left out.
    """
    n_q, k = idx.shape
    found = idx >= 0
    q_of = np.repeat(np.arange(n_q), k)[found.ravel()]
    rank = np.tile(np.arange(1, k + 1), n_q)[found.ravel()]
    docs = idx[found]
    c = cos[found]
    return {
        "query": [queries[i] for i in q_of],
        "query_label": [None if query_labels is None else query_labels[i] for i in q_of],
        "rank": rank.astype(np.int64).tolist(),
        "doc_id": [str(d) for d in (source.doc_ids[docs] if doc_ids is None
                                    else np.asarray(doc_ids)[found])],
        "label": source.label_strings(docs),
        "angle": angle_degrees(c).tolist(),
        "cosine": c.astype(np.float64).tolist(),
    }


def _format(output: Path, format: str | None, redo: Callable[[Path], str] | None = None) -> str:
    from sphdist.io import output_format

    return output_format(output, format, HIT_FORMATS, redo=redo)


def _write_table(columns: dict[str, list[Any]], path: Path, fmt: str) -> None:
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        types = {"rank": pa.int64(), "angle": pa.float64(), "cosine": pa.float64()}
        table = pa.table({name: pa.array(values, types.get(name, pa.string()))
                          for name, values in columns.items()})
        pq.write_table(table, str(path))
        return
    names = list(columns)
    if fmt == "csv":
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(names)
            writer.writerows(["" if v is None else repr(v) if isinstance(v, float) else v
                              for v in row] for row in zip(*columns.values(), strict=True))
        return
    with open(path, "w", encoding="utf-8") as f:
        for row in zip(*columns.values(), strict=True):
            f.write(json.dumps(dict(zip(names, row, strict=True))) + "\n")


def write_hits(
    columns: dict[str, list[Any]], output: Output | str | os.PathLike[str], *,
    format: str | None = None, overwrite: bool = False,
) -> dict[str, Any]:
    """Write search results (from :func:`hits_table`) as Parquet or JSON Lines, atomically.

    Parameters
    ----------
    columns : dict of str to list
    output : Output or path-like
        The held table (:func:`sphdist.io.hold_output`: :func:`batch_neighbors` and
        :func:`knn_graph` pass theirs), committed through :meth:`sphdist.io.Output.file`:
        refused if its lock is no longer held. A path (or a URL): held for this call.
    format : {"parquet", "jsonl", "csv"}, optional
        Default: from the suffix of ``output`` (:data:`HIT_FORMATS`); given, it must agree
        with it.
    overwrite : bool, default False

    Returns
    -------
    dict
        ``output``, ``format``, ``n_rows``.

    Raises
    ------
    OutputExistsError
        If ``output`` exists and ``overwrite`` is False.
    OutputLockedError
        If ``output``'s lock is no longer held (or, given a path, another writer holds it);
        nothing is written.
    ParameterError
        If the suffix names another format than ``format``, or, without ``format``, none
        (:func:`sphdist.jobs._outputs.output_format`).
    """
    if not isinstance(output, Output):  # a path: held for this call
        fmt = _format(output, format)
        with open_output(output, kind="file", overwrite=overwrite) as held:
            return write_hits(columns, held, format=fmt, overwrite=overwrite)
    fmt = _format(output.path, format)
    if not overwrite and exists(output.path):
        refuse_existing(output.path)
    with output.file() as staging:
        _write_table(columns, staging, fmt)
    return {"output": str(output.path), "format": fmt,
            "n_rows": len(next(iter(columns.values()), []))}


def knn_graph(
    model: str | os.PathLike[str], output: str | os.PathLike[str],
    request: NeighborRequest | None = None, *, format: str | None = None,
    overwrite: bool = False, query_chunk: int | None = None,
    connect: Callable[[], AbstractContextManager[Any]] | None = None, **fields: Any,
) -> dict[str, Any]:
    """Every document's k nearest other documents, written as a table (``all``).

    Parameters
    ----------
    model : path-like
    output : path-like
        Parquet, JSON Lines or CSV (by its suffix): columns :data:`HIT_COLUMNS`, ``query``
        the document's id and ``query_label`` its label, n * k rows (fewer for documents with
        fewer than k others).
    request : NeighborRequest, optional
        ``all=True`` with ``k``, ``input``, ``index``, ``exact``, ``nprobe``: the index when
        there is one (:func:`find_index`), else, or with ``exact``, the exact graph. Without
        it, those fields as keywords (``knn_graph(model, output, k=10)``).
    format : {"parquet", "jsonl", "csv"}, optional
        As :func:`write_hits`.
    overwrite : bool, default False
    query_chunk : int, optional
        Documents per task; default 2048 for the exact graph, 16384 with an index.
    connect : callable, optional
        Returns the context in which the graph is computed (``sphdist neighbors``: the
        cluster of :func:`sphdist.jobs.cluster.connect`), entered only once the request is
        validated and the index loaded; default: the active scheduler.

    Returns
    -------
    dict
        ``output``, ``format``, ``n_rows``, ``n_documents``, ``k``, ``index`` (path or None),
        ``seconds`` (of the search).

    Raises
    ------
    ParameterError
        If ``k`` exceeds the documents that can be neighbours, the format is unknown, or the
        request is not ``all`` (:class:`NeighborRequest`).
    TypeError
        If both a ``request`` and fields are given.
    OutputExistsError, OutputLockedError, CorpusMismatchError, ModelFormatError
        As :func:`write_hits` and :func:`find_index`.

    Notes
    -----
    Computed by :func:`sphdist.core.graph.knn_graph` on the active Dask scheduler (this
    process' threads, or the cluster of the active client); the driver holds the (n, k)
    results, ``16 n k`` bytes, never an n x n matrix. The output is held
    (:func:`sphdist.io.hold_output`) before anything is read, until its commit.
    """
    read = (model, _asked(request, fields, "input"), _asked(request, fields, "index"))
    with hold_output(output, kind="file", inputs=read) as held:
        return _knn_graph(held, model, output, request, format=format, overwrite=overwrite,
                          query_chunk=query_chunk, connect=connect, **fields)


def _knn_graph(
    held: Output, model: str | os.PathLike[str], output: str | os.PathLike[str],
    request: NeighborRequest | None, *, format: str | None, overwrite: bool,
    query_chunk: int | None, connect: Callable[[], AbstractContextManager[Any]] | None,
    **fields: Any,
) -> dict[str, Any]:
    """:func:`knn_graph`, its output ``held`` (the table is committed through it)."""
    import dask

    from sphdist.core import graph
    from sphdist.jobs.cluster import check_workers_see, task_path

    request = _request(request, fields, "knn_graph", ("all",), all=True)
    k, input, index, exact, nprobe = (request.k, request.input, request.index, request.exact,
                                      request.nprobe)
    # absolute here, once: the workers' working directories are their own
    model, input, output = task_path(model), task_path(input), task_path(output, output=True)
    given = {"model": str(model), **({"input": str(input)} if input is not None else {})}
    fmt = _format(output, format, lambda fixed: remedy(Remedy(
        "neighbors", given, {"all": True, "k": k, "output": str(fixed)})))
    if not overwrite and exists(output):
        refuse_existing(output)
    rest = {"all": True, "k": k, "output": str(output)}
    source = open_embedding_source(model, input, verb="neighbors", rest=rest)
    fitted = open_model(model)
    found, path = find_index(model, source, fitted, input, index=index, exact=exact,
                             nprobe=nprobe)
    skip = _skip(source)
    live = source.n_documents - (0 if skip is None else int(skip.sum()))
    check_k(k, (found.n_indexed_ if found is not None else live) - 1, "other documents")
    _say(found, path)
    start = time.perf_counter()
    chunk = query_chunk or (2048 if found is None else 16384)
    with connect() if connect is not None else contextlib.nullcontext():
        check_workers_see(graph.active_client(),
                          inputs=(model if source.origin == "model" else input,))
        idx, cos = graph.knn_graph(source.V, k, skip=skip, query_chunk=chunk,
                                   search=None if found is None else found.search)
        idx, cos = dask.compute(idx, cos)
    if found is not None:
        _check_hits(found, source, idx)
    if skip is not None:  # documents without a direction have no neighbours
        idx[skip], cos[skip] = -1, -np.inf
    seconds = time.perf_counter() - start
    columns = hits_table(source, [str(d) for d in source.doc_ids], idx, cos,
                         source.label_strings(np.arange(source.n_documents)))
    with held.file() as staging:
        _write_table(columns, staging, fmt)
    return {"output": str(output), "format": fmt, "n_rows": len(columns["rank"]),
            "n_documents": source.n_documents, "k": k,
            "index": None if path is None else str(path), "seconds": seconds}


@dataclasses.dataclass(frozen=True)
class QueryLines:
    """The queries of a ``queries`` file, each with its line number (:func:`queries_of`).

    Attributes
    ----------
    path : str
        The file.
    texts : list of str
        One query per non-blank line, stripped.
    lines : list of int
        The 1-based line number of each query.
    unreadable : dict of int to str
        Position in ``texts`` of each line that is not UTF-8 text, and why (its text there is
        the line decoded with replacement characters); :func:`batch_neighbors` treats them as
        bad queries (``on_error``).
    """

    path: str
    texts: list[str]
    lines: list[int]
    unreadable: dict[int, str] = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.texts)

    def where(self, i: int) -> str:
        """Where query ``i`` is, for a message: ``"q.txt line 3"``."""
        return f"{self.path} line {self.lines[i]}"


#: The modes of a :class:`NeighborRequest`: one text, one document, a batch of texts, a batch
#: of documents, every document (the k-NN graph).
MODES = ("query", "doc_id", "queries", "ids", "all")


@dataclasses.dataclass(frozen=True)
class NeighborRequest:
    """What a neighbour search is asked: exactly one of four queries, and how to search.

    :func:`query_neighbors` answers ``query`` or ``doc_id``, :func:`batch_neighbors`
    ``queries``, :func:`knn_graph` ``all``; each also takes the fields as keywords.

    Parameters
    ----------
    query : str, optional
        A text, embedded with the model's feature scheme and idf.
    doc_id : str, optional
        The id of a document of the collection searched.
    queries : sequence of str, or QueryLines, optional
        Many texts, or with ``ids`` many document ids (:func:`queries_of` reads a file).
    ids : bool, default False
        The ``queries`` are document ids.
    all : bool, default False
        Every document's k nearest other documents (the k-NN graph).
    k : int, default 10
        Neighbours per query.
    include_self : bool, default False
        With a document query (``doc_id``, or ``queries`` with ``ids``): count the document
        itself (angle 0) among its k; by default the k are other documents.
    input : path-like, optional
        The documents searched: the model's training corpus (default: the path it recorded)
        or an ``embedding.zarr``.
    index : path-like, optional
        The ``index.zarr`` to search; default :func:`default_index_path`, when it exists.
    exact : bool, default False
        Scan every embedding even when an index exists.
    nprobe : int, optional
        Lists an IVF index scans per query; default the one stored with it.

    Raises
    ------
    ParameterError
        If not exactly one of ``query``, ``doc_id``, ``queries`` and ``all`` is given,
        ``ids`` without ``queries``, or ``include_self`` without a document query.

    Examples
    --------
    >>> NeighborRequest(doc_id="doc7", k=5).mode
    'doc_id'
    >>> NeighborRequest(queries=["doc1", "doc2"], ids=True, include_self=True).mode
    'ids'
    """

    query: str | None = None
    doc_id: str | None = None
    queries: Sequence[str] | QueryLines | None = None
    ids: bool = False
    all: bool = False
    k: int = 10
    include_self: bool = False
    input: str | os.PathLike[str] | None = None
    index: str | os.PathLike[str] | None = None
    exact: bool = False
    nprobe: int | None = None

    def __post_init__(self) -> None:
        asked = [name for name in ("query", "doc_id", "queries")
                 if getattr(self, name) is not None] + (["all"] if self.all else [])
        if len(asked) != 1:
            raise ParameterError(
                "a neighbour request asks exactly one of query (a text), doc_id (a document), "
                f"queries (many) and all (every document), got {asked or 'none'}. To resolve "
                "this, pass one.")
        if self.ids and self.queries is None:
            raise ParameterError("ids=True says what the queries are: it needs queries. To "
                                 "resolve this, pass queries=[...] or leave out ids.")
        if self.include_self and self.mode not in ("doc_id", "ids"):
            raise ParameterError(
                "include_self=True applies to a document query (doc_id, or queries with "
                "ids=True): a text query is no document of the collection, and all already "
                "leaves each document out of its own neighbours. To resolve this, leave it out.")

    @property
    def mode(self) -> str:
        """Which of :data:`MODES` is asked."""
        if self.queries is not None:
            return "ids" if self.ids else "queries"
        if self.query is not None:
            return "query"
        return "doc_id" if self.doc_id is not None else "all"


def _request(request: NeighborRequest | None, fields: dict[str, Any], function: str,
             modes: tuple[str, ...], **defaults: Any) -> NeighborRequest:
    """The request of a job: ``request``, or one of ``fields`` (keywords of before)."""
    if request is None:
        request = NeighborRequest(**{**defaults, **fields})
    elif fields:
        raise TypeError(f"{function}() takes a NeighborRequest or its fields, not both: "
                        f"{sorted(fields)}")
    if request.mode not in modes:
        raise ParameterError(f"{function}() answers {' or '.join(modes)} requests, not "
                             f"{request.mode}. To resolve this, call the function of that "
                             "mode (query_neighbors, batch_neighbors or knn_graph).")
    return request


def _asked(request: NeighborRequest | None, fields: dict[str, Any], name: str) -> Any:
    """A field of a job's request, as given (a request, or its fields), not yet validated.

    What the job reads, for the output policy of its hold (:func:`sphdist.io.hold_output`),
    which is applied before the request is checked.
    """
    if request is not None:
        return getattr(request, name, None)
    return fields.get(name)


def queries_of(path: str | os.PathLike[str]) -> QueryLines:
    """The queries of a ``queries`` file: one per non-blank line (UTF-8), stripped.

    Lines are split at line feeds (a carriage return before one is dropped, as is a UTF-8
    byte order mark); a line that is not UTF-8 text is kept as a bad query
    (:attr:`QueryLines.unreadable`) so that ``on_error`` decides, as for a query the model
    cannot embed.

    Returns
    -------
    QueryLines

    Raises
    ------
    InputNotFoundError
        If the file does not exist.
    ParameterError
        If ``path`` is a directory, or the file holds no query.
    DataError
        If the file is binary (it holds a NUL byte): the message gives its offset.
    """
    from sphdist.io import open_file

    remedy = "To resolve this, pass a text file with one query per line."
    if not exists(path):
        raise InputNotFoundError(f"{path}: no such queries file. {remedy}")
    try:
        with open_file(path, "rb") as f:
            data = f.read()
    except IsADirectoryError:
        raise ParameterError(f"{path} is a directory, not a queries file. {remedy}") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise DataError(
            f"{path} is a binary file, not text (a NUL byte at offset {nul}): a queries file "
            f"holds one query per line, in UTF-8. {remedy}"
        )
    texts: list[str] = []
    lines: list[int] = []
    unreadable: dict[int, str] = {}
    for number, raw in enumerate(data.removeprefix(b"\xef\xbb\xbf").split(b"\n"), start=1):
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            unreadable[len(texts)] = (f"the line is not UTF-8 text (byte 0x{raw[exc.start]:02x} "
                                      f"at column {exc.start + 1})")
            text = raw.decode("utf-8", errors="replace").strip()
        if text:
            texts.append(text)
            lines.append(number)
    if not texts:
        raise ParameterError(
            f"{path} holds no query (every line is blank). To resolve this, write one query "
            "per line."
        )
    return QueryLines(str(path), texts, lines, unreadable)


def _ids_problems(source: EmbeddingSource, doc_ids: Sequence[str]
                  ) -> tuple[np.ndarray, dict[int, tuple[type[Exception], str]]]:
    """Positions of ``doc_ids`` in ``source`` (-1: none), and what is wrong with each bad one.

    A bad id is unknown (:class:`ParameterError`) or names a document without a direction
    (:class:`DataError`), as :func:`sphdist.jobs.embedding.document_embedding` says.
    """
    order = np.argsort(source.doc_ids.astype(str), kind="stable")
    sorted_ids = source.doc_ids.astype(str)[order]
    wanted = np.asarray(list(doc_ids), dtype=str)
    at = np.searchsorted(sorted_ids, wanted)
    ok = (at < sorted_ids.size) & (sorted_ids[np.minimum(at, sorted_ids.size - 1)] == wanted)
    positions = np.where(ok, order[np.minimum(at, sorted_ids.size - 1)], -1).astype(np.int64)
    problems: dict[int, tuple[type[Exception], str]] = {}
    examples = ", ".join(map(repr, source.doc_ids[:3].tolist()))
    for i in np.flatnonzero(~ok):
        problems[int(i)] = (ParameterError, f"no document has id {doc_ids[i]!r} (ids look like "
                                            f"{examples}; see `sphdist export`)")
    if source.degenerate is not None:
        for i in np.flatnonzero(ok & source.degenerate[np.maximum(positions, 0)]):
            problems[int(i)] = (DataError, f"document {doc_ids[i]!r} is empty (no feature in "
                                           "common with the model), so its embedding is a "
                                           "placeholder, not a direction")
    return positions, problems


def _columns_of(source: EmbeddingSource, positions: np.ndarray) -> np.ndarray:
    """V[:, positions] as (r, len(positions)) float64, each stored chunk read once."""
    order = np.argsort(positions, kind="stable")
    block = np.asarray(source.V[:, positions[order]].compute(), dtype=np.float64)
    out = np.empty_like(block)
    out[:, order] = block
    return out


def _open(model: Any, input: Any, rest: dict[str, Any], index: Any, exact: bool,
          nprobe: int | None) -> tuple[Model, EmbeddingSource, Any, Path | None]:
    source = open_embedding_source(model, input, verb="neighbors", rest=rest)  # roles first
    fitted = open_model(model)
    found, path = find_index(model, source, fitted, input, index=index, exact=exact,
                             nprobe=nprobe)
    return fitted, source, found, path


def _say(found: Any, path: Path | None) -> None:
    """Log which index is searched (once the request is known to be valid)."""
    if path is not None:
        logger.info(Words(f"searching the index %s (%s%s); {option('exact', True)} scans "
                          "every embedding instead"),
                    path, found.kind_,
                    f", nprobe {found.nprobe_} of {found.nlist_} lists" if found.nlist_ else "")


def query_neighbors(
    model: str | os.PathLike[str], request: NeighborRequest | None = None, **fields: Any,
) -> dict[str, Any]:
    """The k nearest documents of one text or document (``sphdist neighbors``).

    Without an index (none given, none at :func:`default_index_path`, or ``exact``) this is the
    exact scan :func:`sphdist.jobs.embedding.nearest_neighbors`, as it always was (at most k:
    fewer when the collection is smaller); with one, its search, and ``k`` larger than the
    indexed documents is refused.

    Parameters
    ----------
    model : path-like
    request : NeighborRequest, optional
        A ``query`` or a ``doc_id``, with ``k``, ``include_self``, ``input``, ``index``,
        ``exact``, ``nprobe``; without it, those fields as keywords
        (``query_neighbors(model, doc_id="doc7", k=10)``).

    Returns
    -------
    dict
        ``query``, ``doc_id``, ``query_label`` (the label of the ``doc_id`` document; None for
        a text), ``k``, ``neighbors`` (list of dict, nearest first: the rows of the tables of
        :func:`batch_neighbors`, with their columns :data:`HIT_COLUMNS`: ``query`` (the text,
        or the ``doc_id``), ``query_label``, ``rank``, ``doc_id``, ``label``, ``angle`` in
        degrees, ``cosine``) and, when an index was searched, ``index`` (its path).

    Raises
    ------
    ParameterError
        If the request is neither a ``query`` nor a ``doc_id``, ``include_self`` with a
        ``query`` (:class:`NeighborRequest`), an unknown ``doc_id``, or ``k`` too large for
        the index.
    TypeError
        If both a ``request`` and fields are given.
    DataError
        For a query without a direction (empty, or no term of the model) or an empty document.
    CorpusMismatchError, ModelFormatError, InputNotFoundError
        See :func:`find_index` and :func:`open_embedding_source`.
    """
    from sphdist.jobs.embedding import document_embedding, embed_texts, nearest_neighbors

    request = _request(request, fields, "query_neighbors", ("query", "doc_id"))
    query, doc_id, k, include_self = (request.query, request.doc_id, request.k,
                                      request.include_self)
    input, index, exact, nprobe = request.input, request.index, request.exact, request.nprobe
    rest = {"doc_id": doc_id} if doc_id is not None else {"query": str(query)}
    fitted, source, found, path = _open(model, input, rest, index, exact, nprobe)
    own = None
    if doc_id is not None:
        own, vector = document_embedding(source, doc_id)
    else:
        vector = embed_texts(fitted, [str(query)])[:, 0]
    exclude = None if include_self else own
    report: dict[str, Any] = {
        "query": query, "doc_id": doc_id,
        "query_label": None if own is None else source.label_strings(np.array([own]))[0],
        "k": k,
    }
    asked = [str(query) if doc_id is None else doc_id]
    if found is None:
        hits = nearest_neighbors(source, vector, k, exclude=exclude)
        idx = np.array([[h["index"] for h in hits]], dtype=np.int64).reshape(1, -1)
        cos = np.array([[h["cosine"] for h in hits]], dtype=np.float64).reshape(1, -1)
        ids = np.array([[h["doc_id"] for h in hits]], dtype=object).reshape(1, -1)
    else:
        check_k(k, found.n_indexed_ - (exclude is not None))
        _say(found, path)
        idx, cos = search(source, vector[:, None], k, index=found,
                          exclude=None if exclude is None else np.array([exclude]))
        ids = source.ids.take(np.where(idx >= 0, idx, 0))  # only the chunks holding the hits
    columns = hits_table(source, asked, idx, cos, [report["query_label"]], doc_ids=ids)
    report["neighbors"] = [dict(zip(columns, row, strict=True))
                           for row in zip(*columns.values(), strict=True)]
    if found is not None:
        report["index"] = str(path)
    return report


def batch_neighbors(
    model: str | os.PathLike[str], output: str | os.PathLike[str],
    request: NeighborRequest | None = None, *, format: str | None = None,
    overwrite: bool = False, on_error: str = "fail", **fields: Any,
) -> dict[str, Any]:
    """The k nearest documents of many texts or documents, written as a table.

    Parameters
    ----------
    model : path-like
    output : path-like
        Parquet, JSON Lines or CSV (by its suffix; ``format`` must agree): columns
        :data:`HIT_COLUMNS`, angle in degrees.
    request : NeighborRequest, optional
        ``queries``: texts (embedded as :func:`sphdist.jobs.embedding.embed_texts`) or, with
        ``ids``, document ids of the documents searched (each one's neighbours are other
        documents unless ``include_self``); :func:`queries_of` reads them from a file with
        their line numbers, which the messages then name. ``k``, ``input``, ``index``,
        ``exact``, ``nprobe`` as :func:`query_neighbors`; without an index the queries are
        answered by one exact scan (:func:`exact_search`). Without a request, its fields as
        keywords (``batch_neighbors(model, output, queries=[...], k=10)``).
    format : {"parquet", "jsonl", "csv"}, optional
    overwrite : bool, default False
    on_error : {"fail", "skip"}, default "fail"
        A bad query (a text sharing no term with the model, an unknown id, the id of an empty
        document, a line that is not UTF-8): refused, naming its line and nothing written
        (``"fail"``), or left out of the table and listed in ``skipped`` (``"skip"``).

    Returns
    -------
    dict
        ``output``, ``format``, ``n_rows``, ``n_queries`` (answered), ``k``, ``index`` (path
        or None), ``seconds`` (of the search), ``n_skipped`` and ``skipped`` (list of dict:
        ``line``, the 1-based line of the file, or position in the list, ``query`` and
        ``reason``).

    Raises
    ------
    ParameterError
        No query, an unknown id (``on_error="fail"``), every query bad (``"skip"``), ``k``
        larger than the documents that can be neighbours, a format the suffix does not name,
        a request without ``queries`` or ``include_self`` without ``ids``
        (:class:`NeighborRequest`), an unknown ``on_error``; ``output`` is an input:
        the model, the embedding, the index or the queries file (:func:`queries_of`), before
        anything is read (the output is held, :func:`sphdist.io.hold_output`, until its
        commit).
    DataError
        A query without a direction, a line that is not UTF-8 (``on_error="fail"``: the
        message names its line and the remedy).
    OutputExistsError, OutputLockedError, CorpusMismatchError, ModelFormatError
    """
    read = (model, _asked(request, fields, "input"), _asked(request, fields, "index"),
            getattr(_asked(request, fields, "queries"), "path", None))  # a queries file too
    with hold_output(output, kind="file", inputs=read) as held:
        return _batch_neighbors(held, model, output, request, format=format,
                                overwrite=overwrite, on_error=on_error, **fields)


def _batch_neighbors(
    held: Output, model: str | os.PathLike[str], output: str | os.PathLike[str],
    request: NeighborRequest | None, *, format: str | None, overwrite: bool, on_error: str,
    **fields: Any,
) -> dict[str, Any]:
    """:func:`batch_neighbors`, its output ``held`` (the table is committed through it)."""
    from sphdist.jobs.embedding import embed_texts

    if on_error not in ON_ERROR:
        raise ParameterError(f"on_error={on_error!r}: expected one of {list(ON_ERROR)}.")
    request = _request(request, fields, "batch_neighbors", ("queries", "ids"))
    queries, ids, k, include_self = (request.queries, request.ids, request.k,
                                     request.include_self)
    input, index, exact, nprobe = request.input, request.index, request.exact, request.nprobe
    output = held.path  # as named, normalised once (open_output)
    lines = queries if isinstance(queries, QueryLines) else None
    texts = list(queries.texts if lines is not None else queries)
    file = lines.path if lines is not None else "FILE"
    given = {"model": str(model), **({"input": str(input)} if input is not None else {})}
    asked = {"queries": str(file), **({"ids": True} if ids else {})}
    fmt = _format(output, format, lambda fixed: remedy(Remedy(
        "neighbors", given, {**asked, "output": str(fixed)})))
    if not texts:
        raise ParameterError("no query given. To resolve this, pass at least one query.")
    if not overwrite and exists(output):
        refuse_existing(output)
    rest = {**asked, "output": str(output)}
    fitted, source, found, path = _open(model, input, rest, index, exact, nprobe)
    problems: dict[int, tuple[type[Exception], str]] = {
        i: (DataError, why) for i, why in (lines.unreadable if lines is not None else {}).items()}
    if ids:
        positions, bad = _ids_problems(source, texts)
        problems = {**bad, **problems}
    else:
        Q, degenerate = embed_texts(fitted, texts, return_degenerate=True)
        for i in np.flatnonzero(degenerate):
            problems.setdefault(int(i), (DataError, (
                f"query {texts[i][:60]!r} shares no term with the model's features, so it has "
                "no direction on the sphere")))
    skipped = _bad_queries(problems, texts, lines, on_error)
    keep = np.array([i not in problems for i in range(len(texts))], dtype=bool)
    kept = [t for t, ok in zip(texts, keep, strict=True) if ok]
    exclude = query_labels = None
    if ids:
        positions = positions[keep]
        Q = _columns_of(source, positions)
        exclude = None if include_self else positions
        query_labels = source.label_strings(positions)
    else:
        Q = Q[:, keep]
    skip = _skip(source)
    live = source.n_documents - (0 if skip is None else int(skip.sum()))
    n = found.n_indexed_ if found is not None else live
    check_k(k, n - (exclude is not None))
    _say(found, path)
    start = time.perf_counter()
    idx, cos = search(source, Q, k, index=found, exclude=exclude)
    seconds = time.perf_counter() - start
    result = write_hits(hits_table(source, kept, idx, cos, query_labels), held, format=fmt,
                        overwrite=overwrite)
    return {**result, "n_queries": len(kept), "k": k,
            "index": None if path is None else str(path), "seconds": seconds,
            "n_skipped": len(skipped), "skipped": skipped}


def _bad_queries(
    problems: dict[int, tuple[type[Exception], str]], texts: list[str],
    lines: QueryLines | None, on_error: str,
) -> list[dict[str, Any]]:
    """The bad queries as ``skipped`` lists them, or the refusal of the first (``"fail"``)."""
    def where(i: int) -> str:
        return lines.where(i) if lines is not None else f"query {i + 1}"

    def line(i: int) -> int:
        return lines.lines[i] if lines is not None else i + 1

    order = sorted(problems)
    if order and on_error == "fail":
        first = order[0]
        cls, why = problems[first]
        others = (f" ({len(order)} of {len(texts)} queries are bad, at "
                  f"{'lines' if lines is not None else 'positions'} "
                  f"{', '.join(str(line(i)) for i in order[:10])}"
                  f"{', ...' if len(order) > 10 else ''})") if len(order) > 1 else ""
        raise cls(
            f"{where(first)}: {why}{others}. To resolve this, fix or remove that "
            f"{'line' if lines is not None else 'query'}, or pass "
            f"{option('on_error', 'skip')} to leave such queries out and list them."
        )
    if order and len(order) == len(texts):
        raise ParameterError(
            f"every query is bad ({len(texts)} of {len(texts)}; {where(order[0])}: "
            f"{problems[order[0]][1]}); nothing was written. To resolve this, "
            "fix the queries."
        )
    return [{"line": line(i), "query": texts[i], "reason": problems[i][1]} for i in order]
