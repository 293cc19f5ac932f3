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
"""

from __future__ import annotations

import numpy as np

__all__ = ["top_k_chunk", "top_k_merge", "recall_at_k", "angle_degrees"]


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
    Memory: the (n_q, n_c) float64 block of cosines, ``8 n_q n_c`` bytes. The k largest are
    found with :func:`numpy.argpartition`; a row where the k-th cosine is tied with a cosine
    left out is sorted in full, so the result is the same for every chunking of the
    documents (the candidate sets of :func:`top_k_merge` are exact, ties included).
    """
    S = np.asarray(Q, dtype=np.float64).T @ np.asarray(V, dtype=np.float64)  # (n_q, n_c)
    n_q, n_c = S.shape
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
        part = np.argpartition(-S, k - 1, axis=1)[:, :k]
        kth = np.min(np.take_along_axis(S, part, axis=1), axis=1)
        idx, cos = _sort_rows(cols[part], np.take_along_axis(S, part, axis=1), k)
        tied = np.flatnonzero((S >= kth[:, None]).sum(axis=1) > k)  # rare: ties at the k-th
        for i in tied:
            order = np.lexsort((cols, -S[i]))[:k]
            idx[i], cos[i] = cols[order], S[i, order]
    idx = np.where(np.isfinite(cos), idx, -1)
    return _pad(idx, cos, k)


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
