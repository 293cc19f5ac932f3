"""The top-k kernels and the k-NN graph against a dense NumPy reference, across chunk layouts."""

import dask.array as da
import numpy as np
import pytest

from sphdist.core import graph
from sphdist.core.neighbors import recall_at_k, top_k_chunk, top_k_merge


def _unit_columns(r, n, seed):
    V = np.random.default_rng(seed).normal(size=(r, n))
    return V / np.linalg.norm(V, axis=0)


def _dense_top_k(Q, V, k, exclude=None, skip=None):
    """Reference: every cosine, sorted by (-cosine, index); -1 / -inf padding."""
    S = Q.T @ V
    if skip is not None:
        S[:, skip] = -np.inf
    if exclude is not None:
        for i, j in enumerate(exclude):
            if j >= 0:
                S[i, j] = -np.inf
    idx = np.empty((S.shape[0], k), dtype=np.int64)
    cos = np.empty((S.shape[0], k))
    for i, row in enumerate(S):
        order = np.lexsort((np.arange(row.size), -row))[:k]
        order = np.concatenate([order, np.full(k - order.size, -1)])
        idx[i] = np.where(order >= 0, order, -1)
        cos[i] = np.where(order >= 0, row[np.maximum(order, 0)], -np.inf)
    idx[~np.isfinite(cos)] = -1
    return idx, cos


@pytest.mark.parametrize("bounds", [[0, 50], [0, 10, 20, 30, 40, 50], [0, 7, 8, 31, 50],
                                    [0, 1, 2, 3, 50]], ids=["one", "regular", "irregular",
                                                            "singletons"])
def test_top_k_chunks_merged_equal_the_dense_reference(bounds):
    Q, V = _unit_columns(6, 9, 1), _unit_columns(6, 50, 2)
    k = 7
    exclude = np.array([3, -1, 49, 0, 10, 11, 12, 13, 14])
    skip = np.zeros(50, dtype=bool)
    skip[[5, 6, 30]] = True
    parts = [top_k_chunk(Q, V[:, a:b], k, offset=a, exclude=exclude, skip=skip[a:b])
             for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    out = parts[0]
    for p in parts[1:]:
        out = top_k_merge(out, p, k)
    ref = _dense_top_k(Q, V, k, exclude, skip)
    np.testing.assert_array_equal(out[0], ref[0])
    np.testing.assert_allclose(out[1], ref[1], rtol=0, atol=1e-14)


def test_ties_are_broken_by_document_index_in_every_layout():
    V = np.repeat(_unit_columns(4, 3, 5), 4, axis=1)  # each direction four times
    Q = V[:, [0, 5]]
    ref = _dense_top_k(Q, V, 6)
    for bounds in ([0, 12], [0, 5, 12], [0, 1, 7, 12]):
        parts = [top_k_chunk(Q, V[:, a:b], 6, offset=a)
                 for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        out = parts[0]
        for p in parts[1:]:
            out = top_k_merge(out, p, 6)
        np.testing.assert_array_equal(out[0], ref[0])


@pytest.mark.parametrize("n_docs", [1037, 2560], ids=["groups-and-rest", "groups-only"])
def test_wide_blocks_with_ties_equal_the_dense_reference(n_docs):
    """Blocks wider than the 256 groups of the k-best search, ties at the k-th cosine."""
    V = _unit_columns(4, n_docs // 4 + 1, 6)
    V = np.repeat(V, 4, axis=1)[:, :n_docs]  # each direction four times: ties everywhere
    Q = np.concatenate([V[:, [0, 9, n_docs - 1]], _unit_columns(4, 5, 7)], axis=1)
    skip = np.zeros(n_docs, dtype=bool)
    skip[[1, 700]] = True
    exclude = np.array([0, 9, -1, -1, -1, -1, -1, 3])
    ref = _dense_top_k(Q, V, 10, exclude, skip)
    for bounds in ([0, n_docs], [0, 999, n_docs]):
        parts = [top_k_chunk(Q, V[:, a:b], 10, offset=a, exclude=exclude, skip=skip[a:b])
                 for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        out = parts[0]
        for p in parts[1:]:
            out = top_k_merge(out, p, 10)
        np.testing.assert_array_equal(out[0], ref[0])
        np.testing.assert_allclose(out[1], ref[1], rtol=0, atol=1e-14)


def _adversarial(case, rng):
    """Queries (r, 9) and a document chunk (r, n_c) whose cosines tie or nearly tie."""
    if case == "random":
        return _unit_columns(50, 9, 11), _unit_columns(50, 1037, 12)
    if case == "duplicates":  # every direction five times: ties at the k-th cosine
        V = np.repeat(_unit_columns(8, 300, 13), 5, axis=1)[:, :1301]
        return V[:, [0, 5, 17, 600, 1300, 2, 3, 4, 1]], V
    if case == "near-ties":  # directions a few ulps apart: cosines differing in the last bits
        base = np.repeat(_unit_columns(30, 200, 14), 6, axis=1)
        V = base * (1 + rng.integers(-3, 4, size=base.shape) * np.finfo(float).eps)
        return V[:, :9] * (1 + np.finfo(float).eps), V
    if case == "r=1":  # every cosine +1 or -1: half the chunk tied with the k-th
        V = np.where(rng.random((1, 2100)) < 0.5, -1.0, 1.0)
        return V[:, :9], V
    if case == "r=2":
        angle = rng.integers(0, 40, size=2300) * (np.pi / 20)  # 40 directions on the circle
        V = np.stack([np.cos(angle), np.sin(angle)])
        return V[:, :9], V
    if case == "one-direction":  # every document the same: every cosine tied
        V = np.repeat(_unit_columns(5, 1, 15), 1500, axis=1)
        return V[:, :9], V
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["random", "duplicates", "near-ties", "r=1", "r=2",
                                  "one-direction"])
@pytest.mark.parametrize("k", [1, 10, 70])
def test_top_k_chunk_is_the_blocks_product_sorted_in_full_bit_for_bit(case, k):
    """The k best of a chunk are those of a full sort of the chunk's own product, bit for bit.

    The reference scores the block with the same BLAS product (``Q.T @ V`` of the same
    shapes: the bits of a product depend on its shape) and sorts every row in full: the
    group search of the k best must return exactly its indices and cosines, ties included,
    also where most documents are skipped (fewer than k candidates: -1 / -inf).
    """
    rng = np.random.default_rng(16)
    Q, V = _adversarial(case, rng)
    n_c = V.shape[1]
    skips = [None, rng.random(n_c) < 0.99]
    exclude = np.array([0, 5, -1, -1, n_c - 1, 2, 3, 4, 1]) + 100
    for skip in skips:
        idx, cos = top_k_chunk(Q, V, k, offset=100, exclude=exclude, skip=skip)
        ref_idx, ref_cos = _dense_top_k(Q, V, k, exclude - 100, skip)
        ref_idx = np.where(ref_idx >= 0, ref_idx + 100, -1)
        np.testing.assert_array_equal(idx, ref_idx)
        np.testing.assert_array_equal(cos.view(np.int64), ref_cos.view(np.int64))


def test_fewer_candidates_than_k_are_padded():
    Q, V = _unit_columns(3, 2, 0), _unit_columns(3, 4, 1)
    idx, cos = top_k_chunk(Q, V, 6, skip=np.array([False, True, False, False]))
    assert (idx[:, 3:] == -1).all() and np.isneginf(cos[:, 3:]).all()
    assert sorted(idx[0, :3].tolist()) == [0, 2, 3]


@pytest.mark.parametrize("chunks", [(40,), (10, 10, 10, 10), (13, 1, 20, 6)])
@pytest.mark.parametrize("query_chunk", [40, 7])
def test_exact_knn_graph_equals_the_dense_reference(chunks, query_chunk, sync_scheduler):
    V = _unit_columns(5, 40, 3)
    skip = np.zeros(40, dtype=bool)
    skip[[2, 17]] = True
    idx, cos = graph.knn_graph(da.from_array(V, chunks=(5, chunks)), 4, skip=skip,
                               query_chunk=query_chunk, split_every=2)
    idx, cos = idx.compute(), cos.compute()
    ref = _dense_top_k(V, V, 4, exclude=np.arange(40), skip=skip)
    np.testing.assert_array_equal(idx, ref[0])
    np.testing.assert_allclose(cos, ref[1], rtol=0, atol=1e-14)
    assert not (idx == np.arange(40)[:, None]).any()  # never the document itself


def test_knn_graph_through_a_search_drops_the_query_itself(sync_scheduler):
    V = _unit_columns(5, 30, 4)

    def search(Q, k):  # an exact search that returns the query itself first
        return _dense_top_k(Q.T, V, k)

    idx, cos = graph.knn_graph(da.from_array(V, chunks=(5, 8)), 3, search=search, query_chunk=9)
    ref = _dense_top_k(V, V, 3, exclude=np.arange(30))
    np.testing.assert_array_equal(idx.compute(), ref[0])


def test_recall_at_k_counts_the_exact_neighbours_found():
    exact = np.array([[1, 2, 3], [4, 5, -1]])
    assert recall_at_k(exact, exact) == 1.0
    assert recall_at_k(np.array([[3, 9, 1], [5, 8, -1]]), exact) == pytest.approx(3 / 5)
