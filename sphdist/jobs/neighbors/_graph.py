"""The k-NN graph (``sphdist neighbors --all``): every document's k nearest other documents.

:class:`KnnGraphRequest` searches the index when there is one
(:func:`~sphdist.jobs.neighbors.find_index`), else computes the exact graph, chunk by chunk on
Dask (:func:`sphdist.core.graph.knn_graph`), and writes it as one table, of the formats and
columns of :func:`~sphdist.jobs.neighbors.write_hits`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, ClassVar

import numpy as np

from sphdist.errors import Remedy
from sphdist.io import Output
from sphdist.io.model import open_model
from sphdist.jobs._cluster_paths import check_workers_see, task_path
from sphdist.jobs._lifecycle import Request, located
from sphdist.jobs.embedding import open_embedding_source
from sphdist.jobs.neighbors._base import _check_hits, _say, _skip, check_k, find_index
from sphdist.jobs.neighbors._hits import HIT_FORMATS, _write_table, hits_table
from sphdist.jobs.neighbors._request import NeighborRequest


@dataclasses.dataclass(frozen=True)
class KnnGraphRequest(Request):
    """``sphdist neighbors --all``: every document's k nearest other documents, as a table.

    Run by :func:`sphdist.jobs.run`, which returns a dict: ``output``, ``format``, ``n_rows``,
    ``n_documents``, ``k``, ``index`` (path or None), ``seconds`` (of the search).

    Parameters
    ----------
    model : path-like
    output : path-like
        Parquet, JSON Lines or CSV (by its suffix): columns :data:`HIT_COLUMNS`, ``query``
        the document's id and ``query_label`` its label, n * k rows (fewer for documents with
        fewer than k others).
    k : int, default 10
        Neighbours per document.
    input, index, exact, nprobe
        As :class:`NeighborRequest`: the index when there is one (:func:`find_index`), else,
        or with ``exact``, the exact graph.
    format : {"parquet", "jsonl", "csv"}, optional
        As :func:`write_hits`.
    overwrite : bool, default False
    query_chunk : int, optional
        Documents per task; default 2048 for the exact graph, 16384 with an index.

    Raises
    ------
    ParameterError
        If the format is unknown or the suffix of ``output`` names another (when run, after
        the output policy).

    Notes
    -----
    Run, it raises, besides what :func:`sphdist.jobs.run` raises for every command,
    ParameterError if ``k`` exceeds the documents that can be neighbours, and
    CorpusMismatchError or ModelFormatError as :func:`find_index`; all before the cluster
    :func:`~sphdist.jobs.run` is given starts.

    Computed by :func:`sphdist.core.graph.knn_graph` on the active Dask scheduler (this
    process' threads, or the cluster of the active client); the driver holds the (n, k)
    results, ``16 n k`` bytes, never an n x n matrix.
    """

    command: ClassVar[str] = "neighbors"
    writes: ClassVar[str] = "file"
    targets: ClassVar[tuple[str, ...]] = ("model", "input")
    formats: ClassVar[dict[str, str]] = HIT_FORMATS

    model: Any
    output: Any
    k: int = 10
    input: Any = None
    index: Any = None
    exact: bool = False
    nprobe: int | None = None
    format: str | None = None
    overwrite: bool = False
    query_chunk: int | None = None
    def __post_init__(self) -> None:
        for name in ("model", "input", "index", "output"):
            object.__setattr__(self, name, located(getattr(self, name)))
        NeighborRequest(all=True, k=self.k, input=self.input, index=self.index,
                        exact=self.exact, nprobe=self.nprobe)  # its checks

    def remedy(self, say: str = "", **changes: Any) -> Remedy:
        """The same graph changed, as ``sphdist neighbors --all`` words it (``k`` always)."""
        fixed = dataclasses.replace(self, **{"format": None, **changes}) if changes else self
        given = {"model": str(fixed.model),
                 **({"input": str(fixed.input)} if fixed.input is not None else {})}
        return Remedy("neighbors", given, {"all": True, "k": fixed.k,
                                           "output": str(fixed.output)}, say)

    def inputs(self) -> tuple[Any, ...]:
        """The model, the documents and the index, where given."""
        return (self.model, self.input, self.index)

    def prepare(self) -> tuple[Any, ...]:
        """The embeddings and the index searched, opened and checked (no cluster)."""
        # absolute here, once: the workers' working directories are their own
        model, input = task_path(self.model), task_path(self.input)
        output = task_path(self.output, output=True)
        rest = {"all": True, "k": self.k, "output": str(output)}
        source = open_embedding_source(model, input, verb="neighbors", rest=rest)
        fitted = open_model(model)
        found, path = find_index(model, source, fitted, input, index=self.index,
                                 exact=self.exact, nprobe=self.nprobe)
        skip = _skip(source)
        live = source.n_documents - (0 if skip is None else int(skip.sum()))
        check_k(self.k, (found.n_indexed_ if found is not None else live) - 1,
                "other documents")
        _say(found, path)
        return model, input, output, source, found, path, skip

    def execute(self, held: Output, prepared: tuple[Any, ...]) -> dict[str, Any]:
        """Search every document's neighbours on Dask and commit the table through ``held``."""
        import dask

        # dask: one query imports this module and must not import it (test_startup.py)
        from sphdist.core import graph

        model, input, output, source, found, path, skip = prepared
        start = time.perf_counter()
        chunk = self.query_chunk or (2048 if found is None else 16384)
        check_workers_see(graph.active_client(),
                          inputs=(model if source.origin == "model" else input,))
        idx, cos = graph.knn_graph(source.V, self.k, skip=skip, query_chunk=chunk,
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
            _write_table(columns, staging, self.written)
        return {"output": str(output), "format": self.written,
                "n_rows": len(columns["rank"]), "n_documents": source.n_documents,
                "k": self.k, "index": None if path is None else str(path),
                "seconds": seconds}
