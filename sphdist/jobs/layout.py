"""The layout job: 2-D map coordinates of every document, from sphdist's own k-NN graph.

``sphdist layout`` is :class:`LayoutRequest`, run by :func:`sphdist.jobs.run`. It computes
each document's k nearest other documents exactly as ``sphdist neighbors --all`` does (the
index when there is one, :func:`sphdist.jobs.neighbors.find_index`, else the exact graph on
Dask, :func:`sphdist.core.graph.knn_graph`), then lays the graph out in 2-D with openTSNE
(:func:`tsne_layout`: t-SNE with uniform affinities on the k-NN graph, Linderman et al. 2019,
Böhm et al. 2022), and stores coordinates and graph in a ``layout.zarr``
(:mod:`sphdist.io.layout`) beside the model (:func:`default_layout_path`). ``sphdist map``
draws it (:mod:`sphdist.jobs.map_page`).

Why openTSNE and not umap-learn's ``precomputed_knn``: on 20 Newsgroups (18,846 documents, r =
100, the same 10-NN graph) the t-SNE layout kept 36% of each document's 10 nearest neighbours
on the map, UMAP from the same graph 17% and UMAP with its own NN-descent 16% (the first two
principal axes: 1%); openTSNE took about twice UMAP's time from the same graph, and needs no
numba (``pipelines/map_bench.py``, ``pipelines/results/map.md``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

from sphdist._validation import check_int
from sphdist.errors import InputNotFoundError, Remedy, remedy
from sphdist.io import Output, absolute, exists, location, stored_kind
from sphdist.io.embedding import open_embedding
from sphdist.io.layout import Layout, open_layout, v_identity, write_layout
from sphdist.io.model import open_model
from sphdist.jobs._lifecycle import Request, located
from sphdist.jobs.embedding import EmbeddingSource
from sphdist.jobs.neighbors._graph import GraphSearch
from sphdist.metrics import neighbourhood_kept

__all__ = ["LayoutRequest", "default_layout_path", "tsne_layout", "source_identity",
           "open_fresh_layout"]

logger = logging.getLogger("sphdist")

_HINT_INDEX = 50_000  # documents above which the exact graph's log line suggests an index


def default_layout_path(model: Any, input: Any = None, origin: str = "model") -> Path:
    """Where ``sphdist layout`` writes, and ``sphdist map`` looks, by default.

    ``<model>.layout.zarr`` beside the model for its training corpus,
    ``<embedding>.layout.zarr`` beside an ``embedding.zarr``.

    >>> str(default_layout_path("m/news.model.zarr"))
    'm/news.model.layout.zarr'
    >>> str(default_layout_path("m/a.zarr", "e/b.zarr", origin="embedding"))
    'e/b.layout.zarr'
    """
    base = location(input if origin == "embedding" and input is not None else model)
    return base.with_name(base.name.removesuffix(".zarr") + ".layout.zarr")


def source_identity(model: Any, source: EmbeddingSource, input: Any) -> str | None:
    """The identity of the V ``source`` reads (:func:`sphdist.io.layout.v_identity`)."""
    store = open_model(model) if source.origin == "model" else open_embedding(input)
    return v_identity((store.attrs.get("sha256") or {}).get("V"))


def tsne_layout(neighbors: np.ndarray, *, seed: int = 0, n_iter: int = 375,
                n_jobs: int = 1) -> np.ndarray:
    """2-D coordinates of a k-NN graph: t-SNE with uniform affinities (openTSNE).

    Parameters
    ----------
    neighbors : ndarray of shape (n, k), int
        Row i: the positions of point i's k nearest other points; -1 where there are fewer.
    seed : int, default 0
        Seed of the spectral initialisation and the optimisation: the same seed and graph
        give the same coordinates.
    n_iter : int, default 375
        Gradient steps: a third with early exaggeration 12, the rest without.
    n_jobs : int, default 1
        openTSNE's threads. The coordinates do not depend on them: openTSNE computes each
        point's gradient in its own slot and sums over points in one thread (the same bits
        with 1 and 2 threads, Barnes-Hut and FFT, ``tests/jobs/test_layout_map.py``).

    Returns
    -------
    ndarray of shape (n, 2), float64

    Notes
    -----
    The affinity of i to each of its k_i neighbours is ``1 / k_i``, symmetrised as
    ``P = (A + A^T) / 2`` and normalised to sum 1: openTSNE's ``affinity.Uniform`` with mean
    symmetrisation, built here so that rows with fewer than k neighbours are allowed. The
    initialisation is the spectral embedding of P (openTSNE's ``initialization.spectral``;
    random where a point has no neighbour). Memory: ``O(n k)``; time: Barnes-Hut below
    10,000 points, above the FFT-interpolated gradient (Linderman et al. 2019), about linear
    in n.
    """
    from openTSNE import TSNEEmbedding, affinity, initialization

    n, k = neighbors.shape
    rows = np.repeat(np.arange(n), k)
    cols = np.asarray(neighbors, dtype=np.int64).ravel()
    valid = cols >= 0
    degree = np.maximum((neighbors >= 0).sum(axis=1), 1)
    A = sp.csr_matrix(((1.0 / degree)[rows[valid]], (rows[valid], cols[valid])), shape=(n, n))
    P = ((A + A.T) / 2).tocsr()
    if n < 3:  # nothing to lay out: a line
        return np.column_stack([np.arange(n, dtype=np.float64), np.zeros(n)])
    if (np.diff(P.indptr) == 0).any():
        init = initialization.random(n, random_state=seed)
    else:
        init = initialization.spectral(P, random_state=seed)
    aff = affinity.PrecomputedAffinities(P)
    # openTSNE's own choice ("auto"), made here so that it logs nothing: Barnes-Hut below
    # 10,000 points, the FFT-interpolated gradient above
    method = "bh" if n < 10_000 else "fft"
    embedding = TSNEEmbedding(init, aff, n_jobs=n_jobs, random_state=seed,
                              negative_gradient_method=method)
    early = max(1, n_iter // 3)
    embedding = embedding.optimize(early, exaggeration=12, momentum=0.5)
    embedding = embedding.optimize(max(1, n_iter - early), momentum=0.8)
    return np.asarray(embedding, dtype=np.float64)


@dataclasses.dataclass(frozen=True)
class LayoutRequest(Request):
    """``sphdist layout``: 2-D coordinates of every document, from the k-NN graph.

    Run by :func:`sphdist.jobs.run`, which returns a dict: ``output``, ``n_documents``,
    ``n_laid_out`` (documents with a direction), ``k``, ``index`` (path or None), ``method``,
    ``kept_10nn`` (:func:`sphdist.metrics.neighbourhood_kept` of the map, at k = 10 or k),
    ``graph_seconds``, ``layout_seconds``.

    Parameters
    ----------
    model : path-like
        A ``model.zarr`` holding V.
    output : path-like, optional
        The ``layout.zarr`` to write; default :func:`default_layout_path`.
    input : path-like, optional
        The documents: the training corpus (default: the path the model recorded) or an
        ``embedding.zarr``.
    k : int, default 10
        Neighbours per document in the graph laid out and stored (the map highlights them).
    index, exact, nprobe
        As :class:`~sphdist.jobs.neighbors.KnnGraphRequest`: the index when there is one,
        else (or with ``exact``) the exact graph.
    seed : int, default 0
        Seed of the layout: the same seed and graph give the same coordinates.
    n_iter : int, default 375
        t-SNE gradient steps (:func:`tsne_layout`).
    overwrite : bool, default False

    Raises
    ------
    ParameterError
        If ``k`` or ``n_iter`` is out of range (when built); run: if ``k`` exceeds the
        documents that can be neighbours.

    Notes
    -----
    Run, it raises, besides what :func:`sphdist.jobs.run` raises for every command, what
    :func:`~sphdist.jobs.embedding.open_embedding_source` raises for the model and documents
    (a model without an embedding, a corpus that is not its training corpus), before anything
    is held. Documents without a direction (empty, or ``U^T x = 0``) are left out: NaN
    coordinates, no neighbours. Memory on the driver: the (n, k) graph and the sparse
    affinities, ``O(n k)``.
    """

    command: ClassVar[str] = "layout"
    writes: ClassVar[str] = "layout"
    targets: ClassVar[tuple[str, ...]] = ("model", "input", "output")

    model: Any
    output: Any = None
    input: Any = None
    k: int = 10
    index: Any = None
    exact: bool = False
    nprobe: int | None = None
    seed: int = 0
    n_iter: int = 375
    overwrite: bool = False

    def __post_init__(self) -> None:
        for name in ("model", "input", "index"):
            object.__setattr__(self, name, located(getattr(self, name)))
        if self.output is None:
            origin = "embedding" if self.input is not None and _is_embedding(self.input) \
                else "model"
            object.__setattr__(self, "output",
                               default_layout_path(self.model, self.input, origin))
        object.__setattr__(self, "output", located(self.output))
        check_int("k", self.k, 1, caller="LayoutRequest")
        check_int("n_iter", self.n_iter, 2, caller="LayoutRequest")
        check_int("seed", self.seed, 0, caller="LayoutRequest")

    def inputs(self) -> tuple[Any, ...]:
        """The model, the documents and the index, where given."""
        return (self.model, self.input, self.index)

    def prepare(self) -> GraphSearch:
        """The embeddings and the index searched, opened and checked (no cluster)."""
        return GraphSearch.open(self.model, self.input, k=self.k, index=self.index,
                                exact=self.exact, nprobe=self.nprobe, verb="layout",
                                rest={"output": str(self.output)})

    def execute(self, held: Output, search: GraphSearch) -> dict[str, Any]:
        """The k-NN graph on Dask, its layout, and the commit through ``held``."""
        import openTSNE

        model, input, source, fitted = search.model, search.input, search.source, search.fitted
        found, path, skip = search.found, search.path, search.skip
        start = time.perf_counter()
        idx, cos = search.knn(self.k)
        idx = np.asarray(idx, dtype=np.int64)
        cos = np.asarray(cos, dtype=np.float64)
        n = source.n_documents
        keep = np.ones(n, bool) if skip is None else ~skip
        idx = np.where(keep[np.maximum(idx, 0)] & (idx >= 0), idx, -1)  # no placeholder
        graph_s = time.perf_counter() - start
        if found is None and n > _HINT_INDEX:
            index = remedy(Remedy("index", {"model": str(self.model), **(
                {"input": str(self.input)} if self.input is not None else {})}))
            logger.info("layout: the exact graph scans every pair of documents; " + index
                        + " first makes it the index' search (at 100,000 documents: 23 s "
                        "instead of 74 s, pipelines/results/map.md)")
        logger.info("layout: the %d-NN graph of %d documents in %.1f s; laying it out "
                    "(openTSNE, %d steps)", self.k, n, graph_s, self.n_iter)
        start = time.perf_counter()
        live = np.flatnonzero(keep)
        where = np.full(n, -1, dtype=np.int64)
        where[live] = np.arange(live.size)
        sub = np.where(idx[live] >= 0, where[np.maximum(idx[live], 0)], -1)
        xy = np.full((n, 2), np.nan)
        # one thread: two give the same coordinates but no time (100,000 documents: 53.8 s
        # on one, 56.3 s on two at load 3; 134.6 s and 150.6 s at load 7-10; openTSNE
        # 1.0.4's FFT gradient is mostly serial), and 15 times the wall time below 10,000
        # points on a loaded 2-core machine (Barnes-Hut, 400 points)
        xy[live] = tsne_layout(sub, seed=self.seed, n_iter=self.n_iter, n_jobs=1)
        layout_s = time.perf_counter() - start
        kept = neighbourhood_kept(idx, xy, min(10, self.k))
        record = {
            "method": "openTSNE: t-SNE, uniform affinities on the k-NN graph, spectral init",
            "library": f"openTSNE {openTSNE.__version__}", "k": self.k, "seed": self.seed,
            "n_iter": self.n_iter, "index": None if path is None else absolute(path),
            "kept_10nn": None if np.isnan(kept) else kept, "graph_seconds": graph_s,
            "layout_seconds": layout_s, "n_laid_out": int(live.size),
        }
        write_layout(held, xy=xy.T, neighbors=idx.T, cosine=np.nan_to_num(cos.T, neginf=-2.0),
                     attrs={
                         "model": {"path": absolute(model), "u_sha256": fitted.fingerprint},
                         "source": {"origin": source.origin,
                                    "path": absolute(input) if source.origin == "embedding"
                                    else None,
                                    "n_documents": n,
                                    "v_sha256": source_identity(model, source, input)},
                         "layout": record,
                     })
        logger.info("layout: %d documents laid out in %.1f s; %.0f%% of their %d nearest "
                    "neighbours kept on the map", live.size, layout_s,
                    100 * (kept if not np.isnan(kept) else 0), min(10, self.k))
        return {"output": str(self.output), "n_documents": n, **record}


def _is_embedding(path: Any) -> bool:
    """Whether ``path`` holds a sphdist embedding (for the default output's name)."""
    try:
        return stored_kind(path) == "embedding"
    except Exception:  # noqa: BLE001 - unreadable: the job's own checks say why
        return False


def open_fresh_layout(model: Any, source: EmbeddingSource, input: Any,
                      layout: Any = None, *, verb: str = "map") -> Layout:
    """The layout of ``source``, refused if missing or older than its model.

    Parameters
    ----------
    model, input : path-like
        As given to the job (``input`` None: the training corpus).
    source : EmbeddingSource
        The embeddings opened by the job.
    layout : path-like, optional
        Default :func:`default_layout_path`.
    verb : str
        The job that asked, for the messages.

    Returns
    -------
    Layout

    Raises
    ------
    InputNotFoundError
        If no layout is there; the message holds the command that writes it.
    ModelFormatError
        If the layout was computed from another fit, another V or another number of
        documents (:meth:`sphdist.io.layout.Layout.check_fresh`), or is damaged.
    """
    path = location(layout) if layout is not None else default_layout_path(
        model, input, source.origin)
    if not exists(path):
        again = LayoutRequest(model, path if layout is not None else None, input=input)
        raise InputNotFoundError(
            f"{path}: no layout of {(model if source.origin == 'model' else input)}; {verb} "
            "draws the coordinates `sphdist layout` computes. To resolve this, run "
            + remedy(again.remedy()) + " first.")
    stored = open_layout(path)
    stored.check_fresh(u_sha256=open_model(model).fingerprint,
                       v_sha256=source_identity(model, source, input),
                       n_documents=source.n_documents,
                       what=str(model if source.origin == "model" else input))
    return stored
