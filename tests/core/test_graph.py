"""The Dask plumbing (sphdist.core.graph) against dense NumPy references, across chunk layouts.

Every graph runs on the synchronous scheduler (and, where the order of a sum matters, on the
threaded one too); the references are plain NumPy on the whole matrix, or sums written out in
the order the tree of fan-in ``split_every`` must take.
"""

import logging
import math
import threading
import time
import weakref

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from dask.callbacks import Callback

from sphdist.core import graph, kernels
from sphdist.core.params import FitConfig
from sphdist.core.partials import (
    RowSparse,
    densify,
    partials_agg,
    partials_chunk,
    partials_combine,
)

from ..reference import LAYOUTS, chunked, random_corpus

M, N, R = 40, 60, 3

pytestmark = pytest.mark.usefixtures("sync_scheduler")


@pytest.fixture(scope="module")
def X():
    return random_corpus(M, N, density=0.1, seed=5, n_empty=2)


def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("split_every", [2, 3, 8])
def test_tree_sum_equals_the_plain_sum(X, layout, split_every):
    Q = np.linalg.qr(np.random.default_rng(0).standard_normal((M, R)))[0]
    Xc = chunked(X, LAYOUTS[layout](N))
    parts = graph.per_chunk(kernels.project_chunk, Xc, graph.broadcast(Q), "ik")
    (total,) = dask.compute(graph.tree_sum(parts, split_every))
    D = X.toarray()
    np.testing.assert_allclose(total["XVt"], D @ D.T @ Q, atol=1e-12)
    np.testing.assert_allclose(total["VVt"], Q.T @ D @ D.T @ Q, atol=1e-12)
    assert total["sq_norm_X"] == pytest.approx(float((D**2).sum()), rel=1e-13)


def _fold_tree(values, split_every):
    """The reference order: consecutive groups of split_every, summed left to right, level by
    level, until one value is left."""
    level = list(values)
    while len(level) > 1:
        level = [sum(level[i + 1:i + split_every], level[i]) for i in range(0, len(level),
                                                                               split_every)]
    return level[0]


@pytest.mark.parametrize("n_parts, split_every", [(1, 2), (5, 2), (9, 3), (10, 3), (27, 3)])
def test_tree_sum_keeps_the_fixed_order_of_the_tree(n_parts, split_every):
    # values whose sum depends on the order of the additions
    values = [(1e16, 1.0, -1e16, 3.0, 1e-3)[i % 5] * (1 + i) for i in range(n_parts)]
    parts = da.concatenate([  # one dict per block, as per_chunk and block_pass make them
        da.from_delayed(dask.delayed({"s": v}), shape=(1,), dtype=object,
                        meta=np.empty((0,), dtype=object))
        for v in values
    ])
    expected = _fold_tree(values, split_every)
    for scheduler in ("sync", "threads"):
        with dask.config.set(scheduler=scheduler, num_workers=4):
            (total,) = dask.compute(graph.tree_sum(parts, split_every))
        assert _bits(total["s"]) == _bits(expected)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("split_every", [2, 8])
def test_block_pass_reads_every_chunk_once_and_follows_eq_3_12(X, layout, split_every):
    sizes = LAYOUTS[layout](N)
    reads = []
    Xc = chunked(X, sizes).map_blocks(
        lambda b: (reads.append(1), b)[1], dtype=float, meta=sp.csc_matrix((0, 0))
    )
    U = np.linalg.qr(np.random.default_rng(1).standard_normal((M, R)))[0]
    config = FitConfig.build(n_components=R, split_every=split_every)
    V, total = graph.block_pass(Xc, U, None, lam=2.0, config=config)
    assert len(reads) == len(sizes)
    D = X.toarray()
    Q = U.T @ D  # Eq. 3.12 at initialisation: v_j = normalise(U^T x_j), e_1 where it is 0
    norms = np.linalg.norm(Q, axis=0)
    expected = np.where(norms > 0, Q / np.where(norms > 0, norms, 1.0), np.eye(R)[:, [0]])
    assert V.chunks[1] == tuple(sizes)
    np.testing.assert_allclose(V.compute(), expected, atol=1e-12)
    np.testing.assert_allclose(total["XVt"], D @ expected.T, atol=1e-12)
    np.testing.assert_allclose(total["VVt"], expected @ expected.T, atol=1e-12)
    assert total["n_degenerate"] == int((norms == 0).sum())
    assert total["XVt"].flags.c_contiguous and total["XVt"].flags.aligned


@pytest.mark.parametrize(
    "kind", ["numpy", "csr", "dask-dense", "dask-float32", "dask-rechunked"]
)
def test_document_chunks_is_the_transpose_chunked_along_samples(X, kind):
    A = sp.csr_matrix(X.T)  # (n_samples, n_features)
    dense = A.toarray()
    chunk_size = {"numpy": 7, "csr": 13, "dask-rechunked": 11}.get(kind)
    source = {
        "numpy": dense,
        "csr": A,
        "dask-dense": da.from_array(dense, chunks=((20, 40), M)),
        "dask-float32": da.from_array(dense.astype(np.float32), chunks=((30, 30), M)),
        "dask-rechunked": da.from_array(dense, chunks=((20, 40), M)),
    }[kind]
    Xt = graph.document_chunks(source, chunk_size)
    assert Xt.dtype == np.float64 and Xt.numblocks[0] == 1
    got = Xt.compute()
    got = got.toarray() if sp.issparse(got) else got
    np.testing.assert_array_equal(got, dense.T.astype(dense.dtype if kind != "dask-float32"
                                                      else np.float32).astype(np.float64))
    if chunk_size is not None:
        assert set(Xt.chunks[1][:-1]) == {chunk_size}
    elif kind.startswith("dask"):
        assert Xt.chunks[1] == source.chunks[0]


def test_default_chunk_size_targets_the_bytes_of_a_dense_chunk():
    assert graph.default_chunk_size(1000) * 1000 * 8 <= 64 << 20
    assert (graph.default_chunk_size(1000) + 1) * 1000 * 8 > 64 << 20
    assert graph.default_chunk_size(10**9) == 1


def test_default_chunk_size_of_sparse_input_follows_its_stored_bytes():
    m = 2**18  # a dense row: 2 MiB, so 32 rows per chunk; a sparse one: what it stores
    assert graph.default_chunk_size(m) == 32
    assert graph.default_chunk_size(m, nnz=100 * 5000, n_samples=5000) == 4096
    per_row = 100_000 * 12 + 8  # 100,000 values, int32 indices, an int64 pointer
    heavy = graph.default_chunk_size(m, nnz=100_000 * 50, n_samples=50)
    assert heavy * per_row <= 64 << 20 < (heavy + 1) * per_row
    assert graph.default_chunk_size(m, nnz=0, n_samples=10) == 4096


def test_in_memory_sparse_input_is_chunked_by_its_stored_bytes():
    rng = np.random.default_rng(0)
    X = sp.random(10_000, 2**18, density=20 / 2**18, format="csr", random_state=rng)
    Xt = graph.document_chunks(X, None)
    assert Xt.chunks[1] == (4096, 4096, 10_000 - 8192)
    assert (sp.csc_matrix(Xt.compute()) != X.T.tocsc()).nnz == 0


def test_block_bounds_cover_chunks_in_order():
    for n_chunks in (1, 2, 7, 49, 245):
        for max_blocks in (1, 2, 8, 300):
            bounds = graph.block_bounds(n_chunks, max_blocks)
            assert len(bounds) <= max_blocks
            assert [a for a, _ in bounds[1:]] == [b for _, b in bounds[:-1]]
            assert bounds[0][0] == 0 and bounds[-1][1] == n_chunks


def test_block_bounds_bound_the_documents_one_task_holds():
    rng = np.random.default_rng(0)
    for _ in range(50):
        sizes = rng.integers(1, 20_000, size=rng.integers(1, 80)).tolist()
        for max_blocks in (1, 3, 8):
            bounds = graph.block_bounds(len(sizes), max_blocks, sizes, 32768)
            assert [a for a, _ in bounds[1:]] == [b for _, b in bounds[:-1]]
            assert bounds[0][0] == 0 and bounds[-1][1] == len(sizes)
            for a, b in bounds:  # within the bound, or one chunk that alone exceeds it
                assert sum(sizes[a:b]) <= 32768 or b - a == 1
            if sum(sizes) <= 32768:  # small corpora: the count bound alone decides
                assert bounds == graph.block_bounds(len(sizes), max_blocks)


@pytest.mark.parametrize("n_chunks", [1, 5, 31, 32, 33, 147, 245, 2442])
def test_a_pass_offers_a_block_per_chunk_up_to_32_and_one_per_32768_documents(n_chunks):
    sizes = [4096] * (n_chunks - 1) + [1000]
    bounds = graph.pass_blocks(sizes)
    assert [a for a, _ in bounds[1:]] == [b for _, b in bounds[:-1]]
    assert bounds[0][0] == 0 and bounds[-1][1] == n_chunks
    assert len(bounds) >= min(n_chunks, graph.PASS_BLOCKS)
    assert all(sum(sizes[a:b]) <= graph.MAX_BLOCK_DOCUMENTS for a, b in bounds)
    assert len(bounds) >= sum(sizes) / graph.MAX_BLOCK_DOCUMENTS


def _pass_keys(graph_dict, prefix="sphdist-pass-"):
    return [k for k in graph_dict if isinstance(k, tuple) and isinstance(k[0], str)
            and k[0].startswith(prefix) and not k[0].endswith("-V")]


@pytest.mark.parametrize("keep_V", [False, True])
@pytest.mark.parametrize("sizes", [[5] * 12, [3] * 40, [1, 9, 2, 30, 7, 11]])
def test_a_pass_over_B_blocks_is_B_tasks_with_no_path_between_any_two(sizes, keep_V):
    """Issue 29 item 1: every block of a pass can run at the same time as every other."""
    n = sum(sizes)
    Xs = random_corpus(M, n, density=0.1, seed=3)
    Xc = chunked(Xs, sizes)
    U = np.linalg.qr(np.random.default_rng(1).standard_normal((M, R)))[0]
    config = FitConfig.build(n_components=R, split_every=3)
    V, total = graph.pass_graph(Xc, U, None, lam=2.0, config=config, keep_V=keep_V)
    dsk = {}
    for collection in [total] if V is None else [V, total]:
        dsk.update(collection.__dask_graph__())
    blocks = _pass_keys(dsk)
    assert len(blocks) == len(graph.pass_blocks(sizes))
    assert len({k[0] for k in blocks}) == 1  # one name, shown by the dashboard
    deps = {k: dask.core.get_dependencies(dsk, k) for k in dsk}
    for b in blocks:  # the block's ancestors: its chunks and U, never another block
        seen, stack = set(), list(deps[b])
        while stack:
            k = stack.pop()
            if k not in seen:
                seen.add(k)
                stack.extend(deps.get(k, ()))
        assert not seen & set(blocks), b
    # and the partials are summed in the tree over the blocks, in block order
    (got,) = dask.compute(total)
    D = Xs.toarray()
    Q = U.T @ D
    norms = np.linalg.norm(Q, axis=0)
    V_ref = np.where(norms > 0, Q / np.where(norms > 0, norms, 1.0), np.eye(R)[:, [0]])
    np.testing.assert_allclose(densify(got["XVt"]), D @ V_ref.T, atol=1e-12)


class _PartialsHeld(Callback):
    """The most partials alive at once: the distinct X V^T arrays the threaded scheduler
    holds as results, plus one accumulator per running task."""

    def __init__(self):
        super().__init__()
        self.most = 0

    def _posttask(self, key, result, dsk, state, worker_id):
        held = {id(v["XVt"]) for v in state["cache"].values()
                if isinstance(v, dict) and "XVt" in v}
        self.most = max(self.most, len(held) + len(state["running"]) + 1)


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("split_every", [2, 8])
def test_partials_held_at_once_stay_within_the_bound_however_many_blocks(
    split_every, threads, monkeypatch
):
    """Every block in flight, memory still bounded: every node of the tree folds its inputs in
    as they arrive, so the partials alive at once are one running sum per level, the tasks
    running and the blocks finished ahead of their turn (graph.partials_held): not the
    s - 1 finished inputs per level the earlier tree held, and never one per block.

    A block sleeps 20 ms, as a real block takes longer than a fold (its products against one
    addition of two partials); with blocks as cheap as a fold, free threads run blocks ahead
    of the fold chain."""
    monkeypatch.setattr(graph, "PASS_BLOCKS", 10**6)  # a block a chunk: many blocks, cheaply
    pass_onto = kernels.pass_onto

    def block(*args, **kwargs):
        time.sleep(0.02)
        return pass_onto(*args, **kwargs)

    monkeypatch.setattr(kernels, "pass_onto", block)
    U = np.linalg.qr(np.random.default_rng(1).standard_normal((M, R)))[0]
    config = FitConfig.build(n_components=R, split_every=split_every)
    seen = {}
    for n_blocks in (8, 80):
        Xc = chunked(random_corpus(M, 2 * n_blocks, density=0.1, seed=3), [2] * n_blocks)
        assert len(graph.pass_blocks(Xc.chunks[1])) == n_blocks
        _, total = graph.pass_graph(Xc, U, None, lam=2.0, config=config, keep_V=False)
        count = _PartialsHeld()
        with dask.config.set(scheduler="threads", num_workers=threads), count:
            dask.compute(total)
        seen[n_blocks] = count.most
        levels = math.ceil(math.log(n_blocks, split_every))
        bound = graph.partials_held(n_blocks, split_every, threads)
        assert bound == levels + 2 * threads + 1  # one running sum per level, no more
        assert count.most <= bound, seen
    assert seen[80] < 80 / 4  # far from one partial per block


@pytest.mark.parametrize("split_every", [2, 3, 8])
def test_the_folding_tree_gives_bitwise_the_sum_of_dask_reduction(split_every):
    """tree_sum folds each node's inputs one at a time; the bits are those of the
    da.reduction tree it replaced (the same grouping, a left fold either way), so
    checkpoints written before resume to the bit."""
    rng = np.random.default_rng(7)
    m, r = 50, 3
    for n_parts in (1, 2, 7, 8, 9, 27, 64, 65, 100):
        parts = []
        for i in range(n_parts):
            rows = np.sort(rng.choice(m, size=int(rng.integers(1, m)), replace=False))
            values = rng.standard_normal((rows.size, r)) * 10.0 ** rng.integers(-8, 8)
            xvt = RowSparse(rows, values, (m, r)) if i % 3 else RowSparse(
                rows, values, (m, r)).toarray()
            parts.append({"XVt": xvt, "VVt": rng.standard_normal((r, r)),
                          "sq_norm_X": float(rng.standard_normal()) * 1e3,
                          "occurs": rng.random(m) < 0.2, "n_degenerate": i, "V": [i]})
        arr = da.concatenate([
            da.from_delayed(dask.delayed(p), shape=(1,), dtype=object,
                            meta=np.empty((0,), dtype=object)) for p in parts
        ])
        reduced = da.reduction(
            arr, partials_chunk, partials_agg, combine=partials_combine, axis=0,
            keepdims=False, concatenate=False, split_every=split_every, dtype=object,
            meta=np.empty((), dtype=object),
        )
        (want,), (got,) = dask.compute(reduced), dask.compute(graph.tree_sum(arr, split_every))
        assert set(got) == set(want) == {"XVt", "VVt", "sq_norm_X", "occurs", "n_degenerate"}
        for key in want:
            a, b = densify(want[key]), densify(got[key])
            assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), (n_parts, key)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_persist_rows_and_sum_keeps_rows_chunked_like_the_documents(X, layout):
    sizes = LAYOUTS[layout](N)
    Xc = chunked(X, sizes)
    W = np.random.default_rng(2).standard_normal((M, R))

    def rows(X_c, W):
        H = np.asarray(X_c.T @ W)
        return {"H": H, "XVt": np.asarray(X_c @ H), "count": X_c.shape[1]}

    parts = graph.per_chunk(rows, Xc, graph.broadcast(W), "ik")
    H, total = graph.persist_rows_and_sum(parts, Xc, R, ["H"], split_every=2)
    D = X.toarray()
    assert H.chunks == (tuple(sizes), (R,))
    np.testing.assert_allclose(H.compute(), D.T @ W, atol=1e-12)
    np.testing.assert_allclose(total["XVt"], D @ D.T @ W, atol=1e-12)
    assert total["count"] == N


def test_pairs_sum_is_the_sum_over_all_pairs_of_chunks(X):
    D = X.toarray()
    got = graph.pairs_sum(lambda a, b: np.array([[float(np.sum(a.T @ b))]]),
                          chunked(X, [10, 20, 30]))
    assert got == pytest.approx(float(np.sum(D.T @ D)), rel=1e-12)


def test_map_rows_keeps_the_row_chunks_of_dask_input():
    A = np.random.default_rng(3).standard_normal((25, 6))
    U = np.linalg.qr(np.random.default_rng(4).standard_normal((6, 2)))[0]
    lazy = graph.map_rows(lambda B, U: np.asarray(B @ U), da.from_array(A, chunks=(10, 3)), U)
    assert isinstance(lazy, da.Array) and lazy.chunks == ((10, 10, 5), (2,))
    np.testing.assert_allclose(lazy.compute(), A @ U, atol=1e-14)
    np.testing.assert_allclose(graph.map_rows(lambda B, U: B @ U, A, U), A @ U, atol=1e-14)


def test_broadcast_without_a_cluster_is_the_array_itself():
    U = np.arange(6.0).reshape(3, 2)
    B = graph.broadcast(U)
    assert B.numblocks == (1, 1)
    np.testing.assert_array_equal(B.compute(), U)


def test_compute_counts_every_block_once_in_order(X, caplog):
    Xc = chunked(X, LAYOUTS["irregular"](N))
    counts = graph.per_chunk(lambda X_c: np.array([X_c.shape[1]]), Xc, dtype=np.int64)
    with caplog.at_level(logging.INFO, logger="sphdist"):
        got = graph.compute(counts, "count", mode="log")
    np.testing.assert_array_equal(got, LAYOUTS["irregular"](N))
    last = [r.getMessage() for r in caplog.records if r.getMessage().startswith("count")][-1]
    assert "4/4 chunks" in last


def test_a_distributed_client_gives_bitwise_the_local_pass_and_counts(X, scheduler):
    from distributed import Client

    Xc = chunked(X, LAYOUTS["irregular"](N))
    U = np.linalg.qr(np.random.default_rng(5).standard_normal((M, R)))[0]
    kw = dict(lam=2.0, config=FitConfig.build(n_components=R, split_every=2))
    V_local, local = graph.block_pass(Xc, U, None, **kw)
    other = chunked(random_corpus(M, N, density=0.1, seed=6), LAYOUTS["irregular"](N))
    counts = graph.per_chunk(lambda X_c, U: np.array([X_c.shape[1]]), other,
                             graph.broadcast(U), "ik", dtype=np.int64)
    with Client(scheduler):  # U is scattered to the workers; the graphs keep it there
        V, total = graph.block_pass(Xc, U, None, **kw)
        V2, total2 = graph.block_pass(Xc, U, V, **{**kw, "lam": 3.0})  # reads the persisted V
        got = graph.compute(counts, "count")
        np.testing.assert_array_equal(V.compute(), V_local.compute())
        assert V2.shape == V.shape and total2["dV_sq"] > 0
    np.testing.assert_array_equal(got, LAYOUTS["irregular"](N))
    np.testing.assert_array_equal(_bits(total["XVt"]), _bits(local["XVt"]))
    np.testing.assert_array_equal(_bits(total["VVt"]), _bits(local["VVt"]))


@pytest.fixture(scope="module")
def two_workers():
    """An in-process LocalCluster of two one-thread workers, work stealing off (so every task
    runs where the scheduler first placed it)."""
    from distributed import LocalCluster

    with dask.config.set({"distributed.scheduler.work-stealing": False}), LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


def test_contiguous_owners_gives_runs_in_proportion_to_the_weights():
    assert graph.contiguous_owners(10, [1, 1]) == [0] * 5 + [1] * 5
    assert graph.contiguous_owners(7, [1, 2, 4]) == [0, 1, 1, 2, 2, 2, 2]
    assert graph.contiguous_owners(3, [1] * 5) == [0, 2, 4]  # fewer items than owners
    assert graph.contiguous_owners(0, [1, 1]) == []


def test_a_cluster_pass_folds_each_block_where_it_ran_and_keeps_the_bits(X, two_workers):
    from distributed import Client, get_task_stream, wait

    Xc = chunked(X, [6] * 10)  # a block a chunk: 10 blocks, 5 to each worker
    U = np.linalg.qr(np.random.default_rng(5).standard_normal((M, R)))[0]
    kw = dict(lam=2.0, config=FitConfig.build(n_components=R, split_every=4), keep_V=False)
    _, local = graph.block_pass(Xc, U, None, **kw)
    assert graph.block_workers(10) is None  # no placement on the local schedulers
    with Client(two_workers) as client:
        owners = graph.block_workers(10)
        held = graph.hold(Xc)
        wait(held)
        who = {key: w for key, w in client.who_has().items()
               if isinstance(key, tuple) and key[0].startswith("sphdist-held-")}
        with get_task_stream(client) as stream:
            _, total = graph.block_pass(held, U, None, **kw)
    workers = sorted(set(owners))
    assert len(workers) == 2 and owners == [workers[0]] * 5 + [workers[1]] * 5
    # every chunk of the held X on the worker of its block, so no chunk crosses
    assert {int(key[-1]): tuple(w) for key, w in who.items()} == {
        j: (owners[j],) for j in range(10)
    }
    ran = {t["key"]: t["worker"] for t in stream.data}
    blocks = {k[1]: w for k, w in ran.items() if k[0].startswith("sphdist-pass-")}
    assert blocks == dict(enumerate(owners))
    # the tree [[0..3], [4..7], [8, 9]] then [[0, 1, 2]]: each fold runs where the input it
    # adds is, so only the running sum of the group that crosses the run boundary moves
    folds = {k[1:]: w for k, w in ran.items() if k[0].startswith("sphdist-sum-")}
    level0 = {(0, g, j): owners[4 * g + j] for g, n in enumerate([4, 4, 2]) for j in range(n)}
    level1 = {(1, 0, 0): owners[3], (1, 0, 1): owners[7], (1, 0, 2): owners[9]}
    assert folds == {**level0, **level1}
    fetched = [t for t in stream.data if t["key"][0].startswith("sphdist-sum-")
               and any(s["action"] == "transfer" for s in t["startstops"])]
    assert [t["key"][1:] for t in fetched] == [(0, 1, 1), (1, 0, 1)]
    np.testing.assert_array_equal(_bits(total["XVt"]), _bits(local["XVt"]))
    np.testing.assert_array_equal(_bits(total["VVt"]), _bits(local["VVt"]))


def test_building_a_pass_culls_no_graph_and_the_held_x_is_one_layer(X, two_workers, monkeypatch):
    # the driver's serial work per pass: dask.delayed optimises and culls the graph of every
    # Delayed it finds inside a list argument, and a held X of one layer per chunk made every
    # pass's to_delayed cull n_chunks + 1 layers (0.4 s a pass at 1M on a LocalCluster)
    import importlib

    from distributed import Client, wait

    delayed_module = importlib.import_module("dask.delayed")  # the module, not the function

    culls = []
    finalize = delayed_module._finalize_args_collections
    monkeypatch.setattr(delayed_module, "_finalize_args_collections",
                        lambda *a: culls.append(1) or finalize(*a))
    Xc = chunked(X, [6] * 10)
    U = np.linalg.qr(np.random.default_rng(5).standard_normal((M, R)))[0]
    rows = np.arange(M)
    kw = dict(lam=2.0, config=FitConfig.build(n_components=R, split_every=4), keep_V=False)
    _, local = graph.block_pass(Xc, RowSparse(rows, U, (M, R)), None, **kw)
    with Client(two_workers):
        held = graph.hold(Xc)
        wait(held)
        assert len(held.__dask_graph__().layers) == 1
        assert held.__dask_keys__() == [[(held.name, 0, j) for j in range(10)]]
        _, total = graph.block_pass(held, RowSparse(rows, U, (M, R)), None, **kw)
    assert culls == []
    np.testing.assert_array_equal(_bits(total["XVt"].values), _bits(local["XVt"].values))
    np.testing.assert_array_equal(_bits(total["VVt"]), _bits(local["VVt"]))


class _Alive:
    """Chunks read and not yet freed (their data arrays), and the most alive at once."""

    def __init__(self):
        self.lock, self.now, self.most, self.reads = threading.Lock(), 0, 0, 0

    def _freed(self):
        with self.lock:
            self.now -= 1

    def load(self, block_info=None):
        """Chunk j of a corpus of 4-document chunks, read as a store read it: a new array."""
        j = block_info[None]["chunk-location"][1]
        X_c = sp.random(M, 4, density=0.4, format="csc", random_state=1000 + j)
        weakref.finalize(X_c.data, self._freed)
        with self.lock:
            self.now += 1
            self.reads += 1
            self.most = max(self.most, self.now)
        return X_c


def _streamed(alive, n_chunks):
    """X as a corpus store gives it: one dependency-free read task per chunk."""
    return da.map_blocks(alive.load, chunks=((M,), (4,) * n_chunks), dtype=np.float64,
                         meta=sp.csc_matrix((0, 0)), name=f"corpus-{n_chunks}")


@pytest.mark.parametrize("threads", [1, 2])
def test_a_streamed_pass_holds_chunks_per_thread_not_per_block(threads):
    """Issue 29 item 2: the chunks of a streamed X alive at once do not grow with the chunks
    of a block (1 at 100k documents, 8 at 10M). The block task reads its chunks itself and,
    its partial dense once the first chunk covers half of U's rows, lets each go once its
    products are added: at most two per running task (the one processed, the one read),
    with blocks of 1 chunk or of 8. As task inputs, a block's 8 chunks were all alive while
    it ran, and free threads read the next blocks' ahead (old code: 8 or more)."""
    U = np.linalg.qr(np.random.default_rng(1).standard_normal((M, R)))[0]
    config = FitConfig.build(n_components=R, split_every=8)
    most = {}
    for n_chunks in (16, 256):  # blocks of 1 chunk, and of 8 (graph.pass_blocks)
        alive = _Alive()
        X = _streamed(alive, n_chunks)
        assert graph.streamed_chunks(X) is not None
        G = max(b - a for a, b in graph.pass_blocks(X.chunks[1]))
        assert G == (1 if n_chunks == 16 else 8)
        with dask.config.set(scheduler="threads", num_workers=threads):
            _, total = graph.block_pass(X, U, None, lam=2.0, config=config, keep_V=False)
        assert alive.reads == n_chunks  # every chunk read once, by its block's task
        most[n_chunks] = alive.most
        # the same bits as the pass over the chunks held in memory (task inputs)
        held = X.persist()
        assert graph.streamed_chunks(held) is None
        _, ref = graph.block_pass(held, U, None, lam=2.0, config=config, keep_V=False)
        for key in ("XVt", "VVt"):
            np.testing.assert_array_equal(_bits(densify(total[key])),
                                          _bits(densify(ref[key])))
        assert total["sq_norm_X"] == ref["sq_norm_X"]
        np.testing.assert_array_equal(total["occurs"], ref["occurs"])
    assert most[256] <= 2 * threads, most


def test_chunks_computed_from_other_tasks_are_not_streamed(X):
    """Only dependency-free chunk tasks (reads) run inside the block task: a chunk computed
    from another task (here a slice of a concatenation) stays a task input."""
    assert graph.streamed_chunks(chunked(X, [20, 20, 20])) is None
    assert graph.streamed_chunks(chunked(X, [20, 20, 20]).persist()) is None


def _read_chunk(block_info=None):
    """Chunk j of a 6-document corpus chunking, read as a store reads it (a new array)."""
    j = block_info[None]["chunk-location"][1]
    return sp.random(M, 6, density=0.3, format="csc", random_state=2000 + j)


@pytest.mark.parametrize("where", ["sync", "cluster"])
def test_a_held_x_keeps_its_chunks_row_major_with_the_bits_of_the_streamed_x(where, request):
    """Issue 40 item 4: hold() keeps each chunk it reads row-major (partials.RowMajor), made
    once by the read task (on a cluster, on the worker of its block); the passes, the
    embedding and the power iteration over it give the bits of the streamed X, and the held
    X computes to X."""
    from distributed import futures_of, wait

    X = da.map_blocks(_read_chunk, chunks=((M,), (6,) * 10), dtype=np.float64,
                      meta=sp.csc_matrix((0, 0)), name="corpus-held-test")
    assert graph.streamed_chunks(X) is not None
    occurs = np.zeros(M, dtype=bool)
    for j in range(10):
        occurs[_read_chunk({None: {"chunk-location": (0, j)}}).indices] = True
    rows = np.flatnonzero(occurs)
    rng = np.random.default_rng(3)
    U = np.linalg.qr(rng.standard_normal((M, R)))[0]
    config = FitConfig.build(n_components=R, split_every=3)

    def passes(Xh):
        out = []
        for U_k in (U, RowSparse(rows, U[rows], (M, R))):
            V, total = graph.block_pass(Xh, U_k, None, lam=2.0, config=config, keep_V=True)
            out += [V.compute(), densify(total["XVt"]), total["VVt"], total["sq_norm_X"],
                    total["occurs"]]
        out.append(graph.embedding(Xh, RowSparse(rows, U[rows], (M, R)),
                                   dtype=np.float64).compute())
        parts = graph.per_chunk(kernels.project_chunk, Xh, graph.broadcast(U), "ik")
        out += [graph.sum_parts(parts, 3)["XVt"], Xh.compute().toarray()]
        return out

    ref = passes(X)
    if where == "sync":
        held = graph.hold(X, 3, max_extra=10.0)
        kinds = {type(v).__name__ for v in held.__dask_graph__().values()}
        got = passes(held)
    else:
        from distributed import Client

        with Client(request.getfixturevalue("two_workers")) as client:
            held = graph.hold(X, 3, max_extra=10.0)
            wait(futures_of(held))
            owners = graph.block_workers(len(graph.pass_blocks(X.chunks[1])), 3)
            blocks = graph.pass_blocks(X.chunks[1])
            who = {key[-1]: tuple(w) for key, w in client.who_has(futures_of(held)).items()}
            assert who == {j: (owners[b],) for b, (a, z) in enumerate(blocks)
                           for j in range(a, z)}
            kinds = {kind for names in client.run(lambda dask_worker: sorted(
                {type(v).__name__ for k, v in dask_worker.data.items()
                 if isinstance(k, tuple) and k[0].startswith("sphdist-held-")})).values()
                     for kind in names}
            got = passes(held)
    assert kinds == {"RowMajor"}
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_array_equal(_bits(a) if np.asarray(a).dtype.kind == "f" else a,
                                      _bits(b) if np.asarray(b).dtype.kind == "f" else b)
