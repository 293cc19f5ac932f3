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
        Documents per task; default 2048 for the exact graph, 4096 with an index.

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
        output = task_path(self.output, output=True)
        search = GraphSearch.open(self.model, self.input, k=self.k, index=self.index,
                                  exact=self.exact, nprobe=self.nprobe, verb="neighbors",
                                  rest={"all": True, "k": self.k, "output": str(output)})
        return output, search

    def execute(self, held: Output, prepared: tuple[Any, ...]) -> dict[str, Any]:
        """Search every document's neighbours on Dask and commit the table through ``held``."""
        output, search = prepared
        source = search.source
        start = time.perf_counter()
        idx, cos = search.knn(self.k, query_chunk=self.query_chunk)
        seconds = time.perf_counter() - start
        columns = hits_table(source, [str(d) for d in source.doc_ids], idx, cos,
                             source.label_strings(np.arange(source.n_documents)))
        with held.file() as staging:
            _write_table(columns, staging, self.written)
        return {"output": str(output), "format": self.written,
                "n_rows": len(columns["rank"]), "n_documents": source.n_documents,
                "k": self.k, "index": None if search.path is None else str(search.path),
                "seconds": seconds}


@dataclasses.dataclass(frozen=True)
class GraphSearch:
    """What a job over every document's k nearest others searches, opened and checked.

    Shared by ``sphdist neighbors --all`` (:class:`KnnGraphRequest`) and ``sphdist layout``
    (:class:`sphdist.jobs.layout.LayoutRequest`): the same graph, the same checks.

    Attributes
    ----------
    model, input : str or None
        As the workers read them (:func:`~sphdist.jobs._cluster_paths.task_path`).
    source : EmbeddingSource
        The embeddings searched, n documents.
    fitted : Model
        The model, opened.
    found : index or None
        The stored index searched (:func:`find_index`); None: the exact graph.
    path : Path or None
        Where ``found`` is stored.
    skip : ndarray of shape (n,), bool, or None
        The documents without a direction (no neighbours, never a neighbour).
    """

    model: Any
    input: Any
    source: Any
    fitted: Any
    found: Any
    path: Any
    skip: np.ndarray | None

    @classmethod
    def open(cls, model: Any, input: Any, *, k: int, index: Any, exact: bool,
             nprobe: int | None, verb: str, rest: dict[str, Any]) -> GraphSearch:
        """Open the embeddings, the model and the index, and check ``k`` (no cluster).

        Parameters
        ----------
        model, input, index : path-like or None
        k : int
            Neighbours per document.
        exact, nprobe
            As :func:`find_index`.
        verb : str
            The job, for the messages.
        rest : dict
            The job's other options, for the remedies (as :func:`open_embedding_source`).

        Raises
        ------
        ParameterError
            If ``k`` exceeds the documents that can be neighbours.
        CorpusMismatchError, ModelFormatError
            As :func:`open_embedding_source` and :func:`find_index`.
        """
        # absolute here, once: the workers' working directories are their own
        model, input = task_path(model), task_path(input)
        source = open_embedding_source(model, input, verb=verb, rest=rest)
        fitted = open_model(model)
        found, path = find_index(model, source, fitted, input, index=index, exact=exact,
                                 nprobe=nprobe)
        skip = _skip(source)
        live = source.n_documents - (0 if skip is None else int(skip.sum()))
        check_k(k, (found.n_indexed_ if found is not None else live) - 1, "other documents")
        _say(found, path)
        return cls(model, input, source, fitted, found, path, skip)

    def knn(self, k: int, *, query_chunk: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Every document's k nearest other documents, on the active Dask scheduler.

        Parameters
        ----------
        k : int
        query_chunk : int, optional
            Documents per task; default 2048 for the exact graph, 4096 with an index.

        Returns
        -------
        idx : ndarray of shape (n, k), int
            Neighbour positions, nearest first; -1 where there is none (a document without a
            direction has none).
        cos : ndarray of shape (n, k), float
            Their cosine similarities; -inf where there is none.

        Raises
        ------
        ModelFormatError
            If the index returned a document that is not one of those searched (damaged).
        InputNotFoundError
            If a worker of the cluster does not see the model or the embeddings as this
            process does (:func:`~sphdist.jobs._cluster_paths.check_workers_see`).
        """
        import dask

        # dask: one query imports this module and must not import it (test_startup.py)
        from sphdist.core import graph

        check_workers_see(graph.active_client(),
                          inputs=(self.model if self.source.origin == "model" else self.input,))
        chunk = query_chunk or (2048 if self.found is None else 4096)
        idx, cos = graph.knn_graph(self.source.V, k, skip=self.skip, query_chunk=chunk,
                                   search=None if self.found is None else self.found.search)
        idx, cos = dask.compute(idx, cos)
        if self.found is not None:
            _check_hits(self.found, self.source, idx)
        if self.skip is not None:  # documents without a direction have no neighbours
            idx[self.skip], cos[self.skip] = -1, -np.inf
        return idx, cos
