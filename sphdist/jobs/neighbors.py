"""Nearest neighbours at scale: the index of a model's embeddings, batch queries, the k-NN graph.

``sphdist index`` (:func:`build_index`) builds a faiss index
(:class:`sphdist.methods.neighbors.NeighborIndex`: exact flat below
:data:`~sphdist.methods.neighbors.FLAT_MAX` documents, IVF above) of the embeddings a model
gives (its V, or an ``embedding.zarr``) and stores it as an ``index.zarr``
(:mod:`sphdist.io.index`), committed atomically by one writer. ``sphdist neighbors`` finds it
(:func:`find_index`: ``--index``, else the default path :func:`default_index_path` beside the
model or the embedding) and searches it (:func:`search`), unless ``--exact``; a batch of
queries is written as Parquet or JSON Lines (:func:`write_hits`); ``--all`` writes every
document's k nearest others (:func:`knn_graph`), chunk by chunk on Dask
(:func:`sphdist.core.graph.knn_graph`).

The single-query scan without an index is :func:`sphdist.jobs.embedding.nearest_neighbors`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import numpy as np

from sphdist.core import graph
from sphdist.core.neighbors import angle_degrees, top_k_chunk, top_k_merge
from sphdist.errors import (
    CorpusMismatchError,
    InputNotFoundError,
    OutputExistsError,
    ParameterError,
)
from sphdist.io import atomic_path, exists, location, locks_output
from sphdist.io.index import index_kind, open_index, write_index
from sphdist.io.model import Model, open_model
from sphdist.jobs.embedding import EmbeddingSource, open_embedding_source
from sphdist.jobs.info import _command

__all__ = [
    "HIT_FORMATS",
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
]

logger = logging.getLogger("sphdist")

#: Output formats of batch queries and of the k-NN graph, by file suffix.
HIT_FORMATS = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl"}

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
    model = {"path": str(fitted.path), "u_sha256": fitted.fingerprint}
    where = str(location(input)) if source.origin == "embedding" and input is not None else None
    return model, {"origin": source.origin, "path": where, "n_documents": source.n_documents}


def _skip(source: EmbeddingSource) -> np.ndarray | None:
    return None if source.degenerate is None else np.asarray(source.degenerate, dtype=bool)


@locks_output("output")
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
    """
    import faiss

    from sphdist.methods.neighbors import NeighborIndex

    output = location(output)
    if not overwrite and exists(output):
        raise OutputExistsError(
            f"{output} already exists. To resolve this, choose another --output or pass "
            "--overwrite."
        )
    source = open_embedding_source(model, input, verb="index", rest=("--output", str(output)))
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
    write_index(output, data, attrs={"index": record, "model": model_rec, "source": source_rec})
    return {"output": str(output), **{k: record[k] for k in (
        "kind", "nlist", "nprobe", "n_documents", "n_indexed", "n_components")},
        "nbytes": int(data.nbytes), "seconds": seconds}


def check_index(
    model: str | os.PathLike[str], path: str | os.PathLike[str], *,
    input: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """The full check of a stored index (``sphdist index --check``); writes nothing.

    Every read of an index checks its size, a sampled digest and its structure
    (:meth:`sphdist.io.index.StoredIndex.load`); this reads every byte against the recorded
    ``faiss_sha256`` and every id (each a document of the model's embeddings, none twice), and
    checks that it is the index of ``model``'s documents.

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
        ``path``, ``nbytes``, ``n_indexed``, ``faiss_sha256``, ``ok`` (True).

    Raises
    ------
    InputNotFoundError, ModelFormatError, CorpusMismatchError
        As :func:`load_index`, and for bytes that do not match ``faiss_sha256`` or an id
        outside the documents or repeated.
    """
    source = open_embedding_source(model, input, verb="index", rest=("--check",))
    fitted = open_model(model)
    load_index(path, fitted, source, input)  # the record against the model, the cheap checks
    report = open_index(path).verify(n_components=fitted.shape[1],
                                     n_documents=source.n_documents)
    return {**report, "ok": True}


def load_index(
    path: str | os.PathLike[str], fitted: Model, source: EmbeddingSource,
    input: str | os.PathLike[str] | None = None, *, nprobe: int | None = None,
) -> Any:
    """Open a stored index, check that it indexes ``source`` of ``fitted``, and load it.

    Parameters
    ----------
    path : path-like
        An ``index.zarr``.
    fitted : Model
    source : EmbeddingSource
        The documents the index must hold (:func:`open_embedding_source`).
    input : path-like, optional
        The ``--input`` that opened ``source``, for the remedy.
    nprobe : int, optional
        Override of the stored ``nprobe``.

    Returns
    -------
    NeighborIndex
        Fitted, its ``nprobe`` the stored one or the override.

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
        remedy rebuilds it (or passes ``--exact``).
    """
    from sphdist.methods.neighbors import NeighborIndex

    stored = open_index(path)
    rebuild = _command("sphdist", "index", "--model", fitted.path,
                       *(["--input", str(input)] if source.origin == "embedding" else []),
                       "--output", str(stored.path), "--overwrite")
    built = stored.model
    if built.get("u_sha256") != fitted.fingerprint:
        raise CorpusMismatchError(
            f"{stored.path} is the index of another model ({built.get('path')}), not of "
            f"{fitted.path}. To resolve this, rebuild it: `{rebuild}` (or pass --exact to "
            "scan the embeddings without an index)."
        )
    src = stored.source
    if src.get("n_documents") != source.n_documents or src.get("origin") != source.origin:
        raise CorpusMismatchError(
            f"{stored.path} indexes {src.get('n_documents')} documents of "
            f"{src.get('path') or 'the training corpus'}, not the {source.n_documents} "
            f"documents searched. To resolve this, rebuild it: `{rebuild}` (or pass --exact)."
        )
    record = stored.record
    index = NeighborIndex(record.get("kind", "auto"), nlist=record.get("nlist"),
                          nprobe=nprobe or record.get("nprobe"))
    index.index_ = stored.load(n_components=fitted.shape[1], n_documents=source.n_documents,
                               nprobe=nprobe)
    index.kind_, index.nlist_ = record["kind"], record.get("nlist")
    index.n_samples_fit_ = int(record["n_documents"])
    index.n_indexed_ = int(index.index_.ntotal)
    index.n_features_in_ = int(record["n_components"])
    index.rebuild_ = stored.refuse  # the error of damage found when searching
    return index


def find_index(
    model: str | os.PathLike[str], source: EmbeddingSource, fitted: Model,
    input: str | os.PathLike[str] | None = None, *, index: str | os.PathLike[str] | None = None,
    exact: bool = False, nprobe: int | None = None,
) -> tuple[Any, Path | None]:
    """The index ``sphdist neighbors`` searches: ``index``, else the default one if it exists.

    Returns
    -------
    (NeighborIndex or None, Path or None)
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
        raise ParameterError("pass --index or --exact, not both.")
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
    r, n = source.V.shape
    n_q = Q.shape[1]
    skip = _skip(source)
    best = (np.full((n_q, k), -1, dtype=np.int64), np.full((n_q, k), -np.inf))
    for a in range(0, n, _READ_DOCS):
        b = min(a + _READ_DOCS, n)
        block = np.asarray(source.V[:, a:b].compute(), dtype=np.float64)
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
    source: EmbeddingSource, queries: list[str], idx: np.ndarray, cos: np.ndarray,
    query_column: str = "query",
) -> dict[str, list[Any]]:
    """Rows ``query, rank, doc_id, label, angle, cosine`` of search results (columns as lists).

    ``angle`` in degrees, in [0, 180]; rows where fewer than k were found are left out.
    """
    n_q, k = idx.shape
    found = idx >= 0
    q_of = np.repeat(np.arange(n_q), k)[found.ravel()]
    rank = np.tile(np.arange(1, k + 1), n_q)[found.ravel()]
    docs = idx[found]
    c = cos[found]
    return {
        query_column: [queries[i] for i in q_of],
        "rank": rank.astype(np.int64).tolist(),
        "doc_id": [str(d) for d in source.doc_ids[docs]],
        "label": source.label_strings(docs),
        "angle": angle_degrees(c).tolist(),
        "cosine": c.astype(np.float64).tolist(),
    }


def _format(output: Path, format: str | None) -> str:
    if format is not None:
        return format
    fmt = HIT_FORMATS.get(output.suffix.lower())
    if fmt is None:
        raise ParameterError(
            f"{output}: cannot tell the format from the suffix {output.suffix!r}. To resolve "
            f"this, name the output *.parquet or *.jsonl, or pass --format parquet."
        )
    return fmt


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
    with open(path, "w", encoding="utf-8") as f:
        for row in zip(*columns.values(), strict=True):
            f.write(json.dumps(dict(zip(names, row, strict=True))) + "\n")


def write_hits(
    columns: dict[str, list[Any]], output: str | os.PathLike[str], *, format: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Write search results (from :func:`hits_table`) as Parquet or JSON Lines, atomically.

    The caller holds the output (:func:`batch_neighbors` is decorated with
    :func:`sphdist.io.locks_output`; the lock is not reentrant).

    Parameters
    ----------
    columns : dict of str to list
    output : path-like
    format : {"parquet", "jsonl"}, optional
        Default: from the suffix of ``output`` (:data:`HIT_FORMATS`).
    overwrite : bool, default False

    Returns
    -------
    dict
        ``output``, ``format``, ``n_rows``.

    Raises
    ------
    OutputExistsError
        If ``output`` exists and ``overwrite`` is False.
    ParameterError
        If the format is neither given nor told by the suffix.
    """
    output = location(output)
    fmt = _format(output, format)
    if not overwrite and exists(output):
        raise OutputExistsError(
            f"{output} already exists. To resolve this, choose another --output or pass "
            "--overwrite."
        )
    with atomic_path(output) as staging:
        _write_table(columns, staging, fmt)
    return {"output": str(output), "format": fmt,
            "n_rows": len(next(iter(columns.values()), []))}


@locks_output("output")
def knn_graph(
    model: str | os.PathLike[str], output: str | os.PathLike[str], *, k: int = 10,
    input: str | os.PathLike[str] | None = None, index: str | os.PathLike[str] | None = None,
    exact: bool = False, nprobe: int | None = None, format: str | None = None,
    overwrite: bool = False, query_chunk: int | None = None,
    connect: Callable[[], AbstractContextManager[Any]] | None = None,
) -> dict[str, Any]:
    """Every document's k nearest other documents, written as a table (``neighbors --all``).

    Parameters
    ----------
    model : path-like
    output : path-like
        Parquet or JSON Lines: columns ``query_doc_id, rank, doc_id, label, angle, cosine``
        (angle in degrees), n * k rows (fewer for documents with fewer than k others).
    k : int, default 10
    input, index, exact, nprobe
        As ``sphdist neighbors`` (:func:`find_index`): the index when there is one, else, or
        with ``exact``, the exact graph.
    format : {"parquet", "jsonl"}, optional
    overwrite : bool, default False
    query_chunk : int, optional
        Documents per task; default 2048 for the exact graph, 16384 with an index.
    connect : callable, optional
        Returns the context in which the graph is computed (``sphdist neighbors --all``: the
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
        If ``k`` exceeds the documents that can be neighbours, or the format is unknown.
    OutputExistsError, OutputLockedError, CorpusMismatchError, ModelFormatError
        As :func:`write_hits` and :func:`find_index`.

    Notes
    -----
    Computed by :func:`sphdist.core.graph.knn_graph` on the active Dask scheduler (this
    process' threads, or the cluster of the active client); the driver holds the (n, k)
    results, ``16 n k`` bytes, never an n x n matrix.
    """
    import dask

    output = location(output)
    fmt = _format(output, format)
    if not overwrite and exists(output):
        raise OutputExistsError(
            f"{output} already exists. To resolve this, choose another --output or pass "
            "--overwrite."
        )
    rest = ("--all", "-k", str(k), "--output", str(output))
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
        idx, cos = graph.knn_graph(source.V, k, skip=skip, query_chunk=chunk,
                                   search=None if found is None else found.search)
        idx, cos = dask.compute(idx, cos)
    if found is not None:
        _check_hits(found, source, idx)
    if skip is not None:  # documents without a direction have no neighbours
        idx[skip], cos[skip] = -1, -np.inf
    seconds = time.perf_counter() - start
    columns = hits_table(source, [str(d) for d in source.doc_ids], idx, cos, "query_doc_id")
    with atomic_path(output) as staging:
        _write_table(columns, staging, fmt)
    return {"output": str(output), "format": fmt, "n_rows": len(columns["rank"]),
            "n_documents": source.n_documents, "k": k,
            "index": None if path is None else str(path), "seconds": seconds}


def queries_of(path: str | os.PathLike[str]) -> list[str]:
    """The queries of a ``--queries`` file: one per non-blank line (UTF-8), stripped.

    Raises
    ------
    InputNotFoundError
        If the file does not exist.
    ParameterError
        If it holds no query.
    """
    from sphdist.io import open_file

    if not exists(path):
        raise InputNotFoundError(
            f"{path}: no such queries file. To resolve this, pass a text file with one query "
            "per line."
        )
    with open_file(path, "rb") as f:
        lines = [line.strip() for line in f.read().decode("utf-8").splitlines()]
    queries = [q for q in lines if q]
    if not queries:
        raise ParameterError(
            f"{path} holds no query (every line is blank). To resolve this, write one query "
            "per line."
        )
    return queries


def _doc_positions(source: EmbeddingSource, doc_ids: list[str]) -> np.ndarray:
    """Positions of ``doc_ids`` in ``source`` (errors as :func:`document_embedding`)."""
    from sphdist.errors import DataError

    order = np.argsort(source.doc_ids.astype(str), kind="stable")
    sorted_ids = source.doc_ids.astype(str)[order]
    wanted = np.asarray(doc_ids, dtype=str)
    at = np.searchsorted(sorted_ids, wanted)
    ok = (at < sorted_ids.size) & (sorted_ids[np.minimum(at, sorted_ids.size - 1)] == wanted)
    if not ok.all():
        bad = doc_ids[int(np.flatnonzero(~ok)[0])]
        examples = ", ".join(map(repr, source.doc_ids[:3].tolist()))
        raise ParameterError(
            f"no document has id {bad!r} (ids look like {examples}). To resolve this, pass "
            "ids from the corpus (see `sphdist export`)."
        )
    positions = order[at].astype(np.int64)
    if source.degenerate is not None and source.degenerate[positions].any():
        bad = doc_ids[int(np.flatnonzero(source.degenerate[positions])[0])]
        raise DataError(
            f"document {bad!r} is empty (no feature in common with the model), so its "
            "embedding is a placeholder, not a direction. To resolve this, leave it out of the "
            "queries."
        )
    return positions


def _columns_of(source: EmbeddingSource, positions: np.ndarray) -> np.ndarray:
    """V[:, positions] as (r, len(positions)) float64, each stored chunk read once."""
    order = np.argsort(positions, kind="stable")
    block = np.asarray(source.V[:, positions[order]].compute(), dtype=np.float64)
    out = np.empty_like(block)
    out[:, order] = block
    return out


def _open(model: Any, input: Any, rest: tuple[str, ...], index: Any, exact: bool,
          nprobe: int | None) -> tuple[Model, EmbeddingSource, Any, Path | None]:
    source = open_embedding_source(model, input, verb="neighbors", rest=rest)  # roles first
    fitted = open_model(model)
    found, path = find_index(model, source, fitted, input, index=index, exact=exact,
                             nprobe=nprobe)
    return fitted, source, found, path


def _say(found: Any, path: Path | None) -> None:
    """Log which index is searched (once the request is known to be valid)."""
    if path is not None:
        logger.info("searching the index %s (%s%s); --exact scans every embedding instead",
                    path, found.kind_,
                    f", nprobe {found.nprobe_} of {found.nlist_} lists" if found.nlist_ else "")


def query_neighbors(
    model: str | os.PathLike[str], *, query: str | None = None, doc_id: str | None = None,
    k: int = 10, include_self: bool = False, input: str | os.PathLike[str] | None = None,
    index: str | os.PathLike[str] | None = None, exact: bool = False,
    nprobe: int | None = None,
) -> dict[str, Any]:
    """The k nearest documents of one text or document (``sphdist neighbors``).

    Without an index (none given, none at :func:`default_index_path`, or ``exact``) this is the
    exact scan :func:`sphdist.jobs.embedding.nearest_neighbors`, as it always was (at most k:
    fewer when the collection is smaller); with one, its search, and ``k`` larger than the
    indexed documents is refused.

    Returns
    -------
    dict
        ``query``, ``doc_id``, ``k``, ``neighbors`` (list of dict: ``rank``, ``index``,
        ``doc_id``, ``label``, ``cosine``, ``angle_deg``, ``distance``) and, when an index was
        searched, ``index`` (its path).

    Raises
    ------
    ParameterError
        If not exactly one of ``query`` and ``doc_id`` is given, an unknown ``doc_id``, or
        ``k`` too large for the index.
    DataError
        For a query without a direction (empty, or no term of the model) or an empty document.
    CorpusMismatchError, ModelFormatError, InputNotFoundError
        See :func:`find_index` and :func:`open_embedding_source`.
    """
    from sphdist.jobs.embedding import document_embedding, embed_texts, nearest_neighbors

    if (query is None) == (doc_id is None):
        raise ParameterError("pass exactly one of --query TEXT and --doc-id ID.")
    rest = ("--doc-id", doc_id) if doc_id is not None else ("--query", str(query))
    fitted, source, found, path = _open(model, input, rest, index, exact, nprobe)
    own = None
    if doc_id is not None:
        own, vector = document_embedding(source, doc_id)
    else:
        vector = embed_texts(fitted, [str(query)])[:, 0]
    exclude = None if include_self else own
    report: dict[str, Any] = {"query": query, "doc_id": doc_id, "k": k}
    if found is None:
        report["neighbors"] = nearest_neighbors(source, vector, k, exclude=exclude)
        return report
    check_k(k, found.n_indexed_ - (exclude is not None))
    _say(found, path)
    idx, cos = search(source, vector[:, None], k, index=found,
                      exclude=None if exclude is None else np.array([exclude]))
    keep = idx[0] >= 0
    idx, cos = idx[0][keep], cos[0][keep]
    labels = source.label_strings(idx)
    ids = source.ids.take(idx)  # only the chunks of ids that hold the hits
    distance = np.sqrt(np.maximum(2.0 - 2.0 * np.clip(cos, -1.0, 1.0), 0.0))
    report["neighbors"] = [
        {"rank": i + 1, "index": int(j), "doc_id": str(ids[i]), "label": labels[i],
         "cosine": float(cos[i]), "angle_deg": float(angle_degrees(cos[i])),
         "distance": float(distance[i])}
        for i, j in enumerate(idx)
    ]
    report["index"] = str(path)
    return report


@locks_output("output")
def batch_neighbors(
    model: str | os.PathLike[str], output: str | os.PathLike[str], *, queries: list[str],
    ids: bool = False, k: int = 10, include_self: bool = False,
    input: str | os.PathLike[str] | None = None, index: str | os.PathLike[str] | None = None,
    exact: bool = False, nprobe: int | None = None, format: str | None = None,
    overwrite: bool = False,
) -> dict[str, Any]:
    """The k nearest documents of many texts or documents, written as a table.

    Parameters
    ----------
    model : path-like
    output : path-like
        Parquet or JSON Lines (by suffix, or ``format``): columns ``query, rank, doc_id,
        label, angle, cosine``, angle in degrees.
    queries : list of str
        Texts (embedded as :func:`sphdist.jobs.embedding.embed_texts`) or, with ``ids``,
        document ids of the documents searched (each one's neighbours are other documents
        unless ``include_self``).
    k : int, default 10
    input, index, exact, nprobe
        As :func:`query_neighbors`; without an index the queries are answered by one exact
        scan (:func:`exact_search`).
    format : {"parquet", "jsonl"}, optional
    overwrite : bool, default False

    Returns
    -------
    dict
        ``output``, ``format``, ``n_rows``, ``n_queries``, ``k``, ``index`` (path or None),
        ``seconds`` (of the search).

    Raises
    ------
    ParameterError
        No query, an unknown id, ``k`` larger than the documents that can be neighbours, an
        unknown format.
    DataError
        A query without a direction (the message names it).
    OutputExistsError, OutputLockedError, CorpusMismatchError, ModelFormatError
    """
    from sphdist.jobs.embedding import embed_texts

    output = location(output)
    fmt = _format(output, format)
    if not queries:
        raise ParameterError("no query given. To resolve this, pass at least one query.")
    if not overwrite and exists(output):
        raise OutputExistsError(
            f"{output} already exists. To resolve this, choose another --output or pass "
            "--overwrite."
        )
    rest = ("--queries", "FILE", "--output", str(output))
    fitted, source, found, path = _open(model, input, rest, index, exact, nprobe)
    exclude = None
    if ids:
        positions = _doc_positions(source, queries)
        Q = _columns_of(source, positions)
        exclude = None if include_self else positions
    else:
        Q = embed_texts(fitted, queries)
    skip = _skip(source)
    live = source.n_documents - (0 if skip is None else int(skip.sum()))
    n = found.n_indexed_ if found is not None else live
    check_k(k, n - (exclude is not None))
    _say(found, path)
    start = time.perf_counter()
    idx, cos = search(source, Q, k, index=found, exclude=exclude)
    seconds = time.perf_counter() - start
    result = write_hits(hits_table(source, queries, idx, cos), output, format=fmt,
                        overwrite=overwrite)
    return {**result, "n_queries": len(queries), "k": k,
            "index": None if path is None else str(path), "seconds": seconds}
