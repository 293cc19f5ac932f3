"""The k-NN graph (``sphdist neighbors --all``): every document's k nearest other documents.

:func:`knn_graph` searches the index when there is one
(:func:`~sphdist.jobs.neighbors.find_index`), else computes the exact graph, chunk by chunk on
Dask (:func:`sphdist.core.graph.knn_graph`), and writes it as one table, of the formats and
columns of :func:`~sphdist.jobs.neighbors.write_hits`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from sphdist.errors import Remedy, remedy
from sphdist.io import Output, exists, hold_output
from sphdist.io._policy import refuse_existing
from sphdist.io.model import open_model
from sphdist.jobs.embedding import open_embedding_source
from sphdist.jobs.neighbors._base import _check_hits, _say, _skip, check_k, find_index
from sphdist.jobs.neighbors._hits import _format, _write_table, hits_table
from sphdist.jobs.neighbors._request import NeighborRequest, _asked, _request


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

    # here, not above: they import dask, which one query must not (tests/cli/test_startup.py)
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
