"""Nearest neighbours on the sphere, one chunk at a time: pure NumPy kernels.

Every embedding is a unit vector, so for two documents the cosine ``v_i^T v_j``, the angle
``theta = arccos(v_i^T v_j)`` and the Euclidean distance ``||v_i - v_j||_2 = sqrt(2 - 2 cos
theta)`` order neighbours the same way: the k nearest are the k largest cosines. The kernels
here score a block of queries against a block of documents and keep the k best of each query
(:func:`top_k_chunk`), and merge two such candidate lists (:func:`top_k_merge`); a whole
collection's k-NN graph is a tree of merges over the document chunks
(:func:`sphdist.core.graph.knn_graph`), never an n x n matrix.

Candidate lists are a pair ``(index, cosine)`` of arrays of shape (n_q, k): int64 document
indices and float64 cosines, each row sorted by decreasing cosine, ties by increasing index;
a row with fewer than k candidates is padded with index -1 and cosine ``-inf``.

The search of a faiss index of unit rows (:func:`faiss_search`, :class:`SearchIndex`) is here
too, importing faiss only when called: a stored index is searched without the estimator that
built it (:class:`sphdist.methods.neighbors.NeighborIndex`, scikit-learn).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from sphdist.errors import DataError, ParameterError

__all__ = ["top_k_chunk", "top_k_merge", "recall_at_k", "angle_degrees", "faiss_search",
           "SearchIndex", "DEFAULT_NPROBE"]

#: Inverted lists visited per query by default (pipelines/results/neighbors.md: recall@10
#: 0.999 with 16 at 1M synthetic documents, r = 100; 20 Newsgroups needs 32 for 0.98).
DEFAULT_NPROBE = 32


def _sort_rows(idx: np.ndarray, cos: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best of each row of ``(idx, cos)``: largest cosine first, ties by smaller index."""
    order = np.lexsort((idx, -cos), axis=-1)[:, :k]
    return np.take_along_axis(idx, order, axis=1), np.take_along_axis(cos, order, axis=1)


def _pad(idx: np.ndarray, cos: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    missing = k - idx.shape[1]
    if missing <= 0:
        return idx, cos
    n_q = idx.shape[0]
    return (np.concatenate([idx, np.full((n_q, missing), -1, dtype=np.int64)], axis=1),
            np.concatenate([cos, np.full((n_q, missing), -np.inf)], axis=1))


def top_k_chunk(
    Q: np.ndarray, V: np.ndarray, k: int, *, offset: int = 0,
    exclude: np.ndarray | None = None, skip: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The k documents of one chunk with the largest cosine to each query.

    Parameters
    ----------
    Q : ndarray of shape (r, n_q), float64
        Queries, as columns (unit vectors).
    V : ndarray of shape (r, n_c), float64
        A chunk of document embeddings, as columns (unit vectors): documents
        ``offset .. offset + n_c - 1`` of the collection.
    k : int
        Candidates kept per query, >= 1.
    offset : int, default 0
        Index of the chunk's first document in the collection.
    exclude : ndarray of shape (n_q,), int64, optional
        Per query, a document index never returned (the query's own document, for a k-NN
        graph of the collection; -1: none).
    skip : ndarray of shape (n_c,), bool, optional
        Documents of the chunk never returned (those without a direction).

    Returns
    -------
    index : ndarray of shape (n_q, k), int64
        Collection indices, padded with -1 when the chunk has fewer than k candidates.
    cosine : ndarray of shape (n_q, k), float64
        ``Q[:, i]^T V[:, j]`` of those documents, padded with ``-inf``; each row decreasing,
        ties by increasing index.

    Notes
    -----
    Memory: the (n_q, n_c) float64 block of cosines, ``8 n_q n_c`` bytes, written by one
    BLAS product into a buffer each thread keeps for its next block (:func:`_scratch`: a
    fresh 64 MiB block costs a quarter of the product's time in page faults). The k largest
    of each row are found without sorting the row (:func:`_k_best`): the columns are split
    into g groups, the k-th largest group maximum is a lower bound of the row's k-th largest
    cosine, and only the groups reaching it are looked at, every cosine at or above the
    bound kept and sorted. Every cosine tied with the k-th is among them, so the result is
    the same for every chunking of the documents (the candidate sets of
    :func:`top_k_merge` are exact, ties included) and bit for bit the cosines of the block.
    """
    Q = np.asarray(Q, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    n_q, n_c = Q.shape[1], V.shape[1]
    S = np.matmul(Q.T, V, out=_scratch(n_q, n_c))  # (n_q, n_c)
    if skip is not None:
        S[:, np.asarray(skip, dtype=bool)] = -np.inf
    if exclude is not None:
        local = np.asarray(exclude, dtype=np.int64) - offset
        rows = np.flatnonzero((local >= 0) & (local < n_c))
        S[rows, local[rows]] = -np.inf
    cols = np.arange(offset, offset + n_c, dtype=np.int64)
    if n_c <= k:
        idx, cos = _sort_rows(np.broadcast_to(cols, S.shape), S, k)
    else:
        idx, cos = _k_best(S, k)
        idx = idx + offset
    idx = np.where(np.isfinite(cos), idx, -1)
    return _pad(idx, cos, k)


_SCRATCH = threading.local()


def _scratch(n_q: int, n_c: int) -> np.ndarray:
    """An (n_q, n_c) float64 C-ordered array of this thread, reused by its next call.

    Its values are garbage; the caller overwrites them. The thread holds the largest such
    array it was asked for until it ends: a local Dask pool's threads end with their graph
    (:func:`sphdist.core.graph.computing`), a distributed worker's threads each keep one
    block, 64 MiB for 2,048 queries x 4,096 documents.
    """
    size = n_q * n_c
    buf = getattr(_SCRATCH, "buf", None)
    if buf is None or buf.size < size:
        buf = _SCRATCH.buf = np.empty(size)
    return buf[:size].reshape(n_q, n_c)


def _k_best(S: np.ndarray, k: int, groups: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k largest entries of ``S`` (n_q, n_c > k): column and value, ties by column.

    Column j < b g (``b = n_c // g``) is in group ``j mod g``, each later column a group of
    its own; M, the (n_q, g + n_c - b g) group maxima, holds k distinct entries of the row
    at or above its k-th largest maximum t, so t is at most the row's k-th largest entry:
    the entries at or above t, found in the groups whose maximum reaches t, hold the k best
    and all their ties. The result is the entries of ``S`` themselves, chosen by the rule of
    :func:`_sort_rows`: bit for bit a full sort's. Time: one pass over S for M (a strided
    reduction), then ``b`` entries per group reaching t (about k groups a row), gathered by
    their flat positions and sorted row by row in an (n_q, c) table, c the most candidates
    of a row.
    """
    n_q, n_c = S.shape
    g = min(n_c, max(groups, 4 * k))
    b = n_c // g
    main = b * g
    M = S[:, :main].reshape(n_q, b, g).max(axis=1)
    if main < n_c:
        M = np.concatenate([M, S[:, main:]], axis=1)
    t = np.partition(M, M.shape[1] - k, axis=1)[:, M.shape[1] - k]
    rows, group = np.nonzero(M >= t[:, None])
    strided = group < g
    # the columns of each group reaching t: j, j + g, ... for the b-wide groups, else itself
    col = (np.where(strided, group, main + group - g)[:, None]
           + np.where(strided[:, None], g * np.arange(b), 0))
    val = S.take(rows[:, None] * n_c + col)  # S is C-ordered: flat positions
    keep = val >= t[rows][:, None]
    keep[~strided, 1:] = False  # a later column once
    row, col, val = rows[np.nonzero(keep)[0]], col[keep], val[keep]  # row by row
    count = np.bincount(row, minlength=n_q)
    rank = np.arange(row.size) - (np.cumsum(count) - count)[row]
    width = max(int(count.max()), k)
    table_idx = np.full((n_q, width), np.iinfo(np.int64).max)
    table_cos = np.full((n_q, width), -np.inf)
    table_idx[row, rank] = col
    table_cos[row, rank] = val
    idx, cos = _sort_rows(table_idx, table_cos, k)
    return np.where(np.isfinite(cos), idx, -1), cos


def top_k_merge(
    a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray], k: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Merge two candidate lists of the same queries into the k best.

    Parameters
    ----------
    a, b : tuple of ndarray
        ``(index, cosine)`` of shape (n_q, k_a) and (n_q, k_b), from :func:`top_k_chunk` or
        this function, over disjoint sets of documents.
    k : int

    Returns
    -------
    tuple of ndarray
        ``(index, cosine)`` of shape (n_q, k), int64 and float64, in the order of
        :func:`top_k_chunk`. Associative and commutative: any tree of merges over the chunks
        gives the same result.
    """
    idx = np.concatenate([a[0], b[0]], axis=1)
    cos = np.concatenate([a[1], b[1]], axis=1)
    idx = np.where(idx < 0, np.iinfo(np.int64).max, idx)  # padding sorts last among -inf
    idx, cos = _sort_rows(idx, cos, k)
    return _pad(np.where(np.isfinite(cos), idx, -1), cos, k)


def recall_at_k(found: np.ndarray, exact: np.ndarray) -> float:
    """Fraction of the exact neighbours that were found, over all queries (recall@k).

    Parameters
    ----------
    found : ndarray of shape (n_q, k), int
        Indices returned by an approximate search (-1: none).
    exact : ndarray of shape (n_q, k), int
        The exact k nearest of each query (-1: none).

    Returns
    -------
    float
        ``sum_i |found_i & exact_i| / sum_i |exact_i|``, in [0, 1]; 1.0 when ``exact`` is empty.

    Examples
    --------
    >>> recall_at_k(np.array([[1, 2], [3, 4]]), np.array([[2, 1], [3, 5]]))
    0.75
    """
    hits = total = 0
    for f, e in zip(np.asarray(found), np.asarray(exact), strict=True):
        e = e[e >= 0]
        hits += np.intersect1d(f[f >= 0], e).size
        total += e.size
    return float(hits / total) if total else 1.0


def angle_degrees(cosine: np.ndarray) -> np.ndarray:
    """Angle in degrees, in [0, 180], of unit vectors with the given cosines (clipped to [-1, 1]).

    >>> angle_degrees(np.array([1.0, 0.0, -1.0000001]))
    array([  0.,  90., 180.])
    """
    return np.degrees(np.arccos(np.clip(np.asarray(cosine, dtype=np.float64), -1.0, 1.0)))


def unit_float32(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``block`` scaled to unit norm, as float32; and which rows have no direction."""
    norms = np.linalg.norm(block, axis=1)
    zero = ~(norms > 0) | ~np.isfinite(norms)
    out = block / np.where(zero, 1.0, norms)[:, None]
    return np.ascontiguousarray(out, dtype=np.float32), zero


def faiss_search(
    index: Any, Q: np.ndarray, k: int, *, n_features: int, nprobe: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The k largest cosines of each query row in a faiss inner-product index of unit rows.

    Parameters
    ----------
    index : faiss.Index
        Flat or IVF (``nprobe`` given), of unit float32 rows.
    Q : ndarray of shape (n_queries, r), float
        Query vectors, one per row; scaled to unit norm.
    k : int
        Neighbours per query, >= 1.
    n_features : int
        r, the dimension of the indexed vectors.
    nprobe : int, optional
        Inverted lists scanned per query (IVF only).

    Returns
    -------
    index : ndarray of shape (n_queries, k), int64
        Ids of the index, nearest first; -1 where fewer than k were found.
    cosine : ndarray of shape (n_queries, k), float64
        Their cosines (float32 precision); ``-inf`` where the index is -1.

    Raises
    ------
    DataError
        If a query has no direction (a zero row) or the wrong dimension.
    ParameterError
        If ``k < 1``.
    """
    import faiss

    if int(k) < 1:
        raise ParameterError(f"k must be >= 1, got {k}.")
    Q = np.atleast_2d(np.asarray(Q, dtype=np.float64))
    if Q.ndim != 2 or Q.shape[1] != n_features:
        raise DataError(f"queries have shape {Q.shape}, expected (n_queries, {n_features}).")
    Qf, zero = unit_float32(Q)
    if zero.any():
        raise DataError(f"query {int(np.flatnonzero(zero)[0])} has no direction (a zero or "
                        "non-finite vector). To resolve this, query with a nonzero vector.")
    params = faiss.SearchParametersIVF(nprobe=nprobe) if nprobe is not None else None
    cos, idx = index.search(Qf, int(k), params=params)
    idx = idx.astype(np.int64)
    cos = np.where(idx >= 0, cos.astype(np.float64), -np.inf)
    return idx, cos


@dataclasses.dataclass
class SearchIndex:
    """A stored faiss index, loaded to be searched (:func:`sphdist.jobs.neighbors.load_index`).

    The search of :class:`sphdist.methods.neighbors.NeighborIndex` without the estimator
    around it (scikit-learn): what ``sphdist neighbors`` needs of an index it did not build.

    Attributes
    ----------
    index_ : faiss.Index
        Flat or IVF, inner product, of unit float32 rows; ids are document numbers.
    kind_ : {"flat", "ivf"}
    nlist_ : int or None
        Inverted lists (None for flat).
    nprobe : int or None
        Lists scanned per query (IVF; None: :data:`DEFAULT_NPROBE`).
    n_samples_fit_ : int
        Documents the index was built from (those left out included).
    n_indexed_ : int
        Documents in the index.
    n_features_in_ : int
        r, the dimension of the vectors.
    rebuild_ : callable, optional
        ``rebuild_(what)``: the error to raise for damage found when searching.
    """

    index_: Any
    kind_: str
    nlist_: int | None
    nprobe: int | None
    n_samples_fit_: int
    n_indexed_: int
    n_features_in_: int
    rebuild_: Callable[[str], Exception] | None = None

    @property
    def nprobe_(self) -> int | None:
        """Lists scanned per query now (``nprobe``, or :data:`DEFAULT_NPROBE`); None for flat."""
        if self.kind_ != "ivf":
            return None
        return min(int(self.nprobe or DEFAULT_NPROBE), int(self.nlist_ or 1))

    def search(self, Q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k largest cosines of each query row: :func:`faiss_search`."""
        return faiss_search(self.index_, Q, k, n_features=self.n_features_in_,
                            nprobe=self.nprobe_)
