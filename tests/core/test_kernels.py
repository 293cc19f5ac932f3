"""Kernels against a dense NumPy implementation of Liu et al. (2019) Eq. 3.11-3.12."""

import sys
import weakref

import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp

from sphdist.core import kernels, partials

from ..reference import random_corpus


@pytest.fixture
def rng():
    return np.random.default_rng(42)


@pytest.fixture(params=["sparse", "dense"])
def chunk(request):
    X = random_corpus(60, 25, density=0.2, seed=3, n_empty=2)
    return X if request.param == "sparse" else X.toarray()


def test_polar_factor_maximises_trace_eq_3_11(rng):
    M = rng.standard_normal((30, 4))
    U = kernels.polar_factor(M)
    np.testing.assert_allclose(U.T @ U, np.eye(4), atol=1e-12)
    # scipy's polar decomposition M = U P gives the same orthonormal factor (Lemma 1)
    U_ref, _ = scipy.linalg.polar(M)
    np.testing.assert_allclose(U, U_ref, atol=1e-12)
    for _ in range(20):  # no other orthonormal matrix achieves a larger trace(U^T M)
        W = kernels.random_orthonormal(30, 4, np.random.RandomState(int(rng.integers(1 << 30))))
        assert np.trace(W.T @ M) <= np.trace(U.T @ M) + 1e-12


@pytest.mark.parametrize("mu", [0.0, 3.5, None])
def test_u_step_matches_eq_3_11(rng, mu):
    X = rng.standard_normal((20, 40))
    U = np.linalg.qr(rng.standard_normal((20, 3)))[0]
    V = rng.standard_normal((3, 40))
    V /= np.linalg.norm(V, axis=0)
    got = kernels.u_step(U, X @ V.T, V @ V.T, mu)
    M = X @ V.T if mu is None else 2 * (X - U @ V) @ V.T + mu * U
    Y, _, Zt = np.linalg.svd(M, full_matrices=False)
    np.testing.assert_allclose(got, Y @ Zt, atol=1e-12)


@pytest.mark.parametrize("lam", [2.0, 2.2, 1e5])
def test_v_step_matches_eq_3_12(rng, lam):
    A = rng.standard_normal((4, 15))
    V_prev = rng.standard_normal((4, 15))
    V_prev /= np.linalg.norm(V_prev, axis=0)
    V, degenerate = kernels.v_step(A, V_prev, lam)
    q = 2 * A + (lam - 2) * V_prev
    np.testing.assert_allclose(V, q / np.linalg.norm(q, axis=0), atol=1e-14)
    assert not degenerate.any()


def test_v_step_zero_direction_keeps_a_unit_vector(rng):
    A = rng.standard_normal((3, 5))
    A[:, [1, 4]] = 0.0
    V0, deg0 = kernels.v_step(A, None, 2.0)
    np.testing.assert_array_equal(deg0, [False, True, False, False, True])
    np.testing.assert_array_equal(V0[:, 1], [1.0, 0.0, 0.0])
    V_prev = rng.standard_normal((3, 5))
    V_prev /= np.linalg.norm(V_prev, axis=0)
    V1, deg1 = kernels.v_step(A, V_prev, 2.0)
    np.testing.assert_array_equal(V1[:, [1, 4]], V_prev[:, [1, 4]])
    assert np.all(np.isfinite(V1))
    np.testing.assert_allclose(np.linalg.norm(V1, axis=0), 1.0, atol=1e-14)


def test_pass_of_one_chunk_partials_match_dense(chunk, rng):
    Xd = chunk.toarray() if sp.issparse(chunk) else chunk
    U = np.linalg.qr(rng.standard_normal((60, 3)))[0]
    V_prev = rng.standard_normal((3, 25))
    V_prev /= np.linalg.norm(V_prev, axis=0)
    out = kernels.pass_block([chunk], U, [V_prev], lam=2.5)
    q = 2 * U.T @ Xd + 0.5 * V_prev
    V = q / np.linalg.norm(q, axis=0)
    np.testing.assert_allclose(out["V"][0], V, atol=1e-14)
    np.testing.assert_allclose(partials.densify(out["XVt"]), Xd @ V.T, atol=1e-13)
    np.testing.assert_allclose(out["VVt"], V @ V.T, atol=1e-13)
    assert out["sq_norm_X"] == pytest.approx(np.sum(Xd**2), rel=1e-14)
    assert out["dV_sq"] == pytest.approx(np.sum((V - V_prev) ** 2), rel=1e-12)


def test_objective_from_partials_equals_direct_norm(chunk, rng):
    Xd = chunk.toarray() if sp.issparse(chunk) else chunk
    U = np.linalg.qr(rng.standard_normal((60, 4)))[0]
    out = kernels.pass_block([chunk], U)
    f = kernels.objective(out["sq_norm_X"], U, partials.densify(out["XVt"]), Xd.shape[1])
    assert f == pytest.approx(np.linalg.norm(Xd - U @ out["V"][0]) ** 2, rel=1e-12)
    assert out["n_degenerate"] == 2  # the two empty documents
    # the features the chunk contains: a stored entry in the row (sparse), every row (dense)
    occurs = Xd.any(axis=1) if sp.issparse(chunk) else np.ones(60, dtype=bool)
    np.testing.assert_array_equal(out["occurs"], occurs)


def test_project_chunk_is_a_power_step(chunk, rng):
    Xd = chunk.toarray() if sp.issparse(chunk) else chunk
    Q = np.linalg.qr(rng.standard_normal((60, 5)))[0]
    out = kernels.project_chunk(chunk, Q)
    np.testing.assert_allclose(out["XVt"], Xd @ Xd.T @ Q, atol=1e-12)
    np.testing.assert_allclose(out["VVt"], Q.T @ Xd @ Xd.T @ Q, atol=1e-12)


def test_partials_combine_sums_nested_lists_in_order(rng):
    parts = [
        {"XVt": rng.standard_normal((5, 2)), "VVt": rng.standard_normal((2, 2)),
         "sq_norm_X": float(i), "dV_sq": 1.0, "n_degenerate": i}
        for i in range(5)
    ]
    total = partials.partials_agg([[parts[0], [parts[1], parts[2]]], [parts[3]], parts[4]])
    np.testing.assert_allclose(total["XVt"], sum(p["XVt"] for p in parts))
    assert total["sq_norm_X"] == 10.0
    assert total["n_degenerate"] == 10
    assert total["dV_sq"] == 5.0


def test_lipschitz_constant_eq_4_15():
    r, n, sq = 3, 10, 7.0
    expected = 2 * (r + n + np.sqrt(r) * np.sqrt(n) + np.sqrt(sq))
    assert kernels.lipschitz_constant(r, n, sq) == pytest.approx(expected, rel=1e-15)


def test_random_orthonormal_is_orthonormal_and_seeded():
    a = kernels.random_orthonormal(50, 6, np.random.RandomState(1))
    b = kernels.random_orthonormal(50, 6, np.random.RandomState(1))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a.T @ a, np.eye(6), atol=1e-13)


def _with_condition(rng, m, r, cond):
    """An m x r matrix with singular values geometrically from 1 to 1 / cond."""
    Y = np.linalg.qr(rng.standard_normal((m, r)))[0]
    Z = np.linalg.qr(rng.standard_normal((r, r)))[0]
    return (Y * np.geomspace(1.0, 1.0 / cond, r)) @ Z.T, Y @ Z.T


@pytest.mark.parametrize("cond", [1.0, 1e2, 9e2])
def test_polar_factor_gram_route_matches_svd_route(rng, cond):
    M, expected = _with_condition(rng, 3000, 12, cond)
    svd = kernels.polar_factor(M, "svd")
    gram = kernels.polar_factor(M, "gram")
    np.testing.assert_allclose(svd, expected, atol=1e-12)
    # the Gram route loses about eps * cond^2 (Higham 2008, Sec. 8.1)
    assert np.abs(gram - expected).max() <= 50 * np.finfo(float).eps * cond**2
    np.testing.assert_allclose(gram.T @ gram, np.eye(12), atol=100 * np.finfo(float).eps * cond**2)


@pytest.mark.parametrize("rank_deficient", [False, True])
def test_polar_factor_gram_falls_back_to_svd_when_ill_conditioned(rng, rank_deficient):
    M, _ = _with_condition(rng, 500, 6, 1e6)
    if rank_deficient:
        M[:, 5] = M[:, 0]
    gram = kernels.polar_factor(M, "gram")
    np.testing.assert_array_equal(gram, kernels.polar_factor(M, "svd"))
    np.testing.assert_allclose(gram.T @ gram, np.eye(6), atol=1e-10)


def test_polar_factor_auto_and_bad_method(rng):
    tall = rng.standard_normal((64 * 3, 3))
    np.testing.assert_array_equal(kernels.polar_factor(tall, "auto"),
                                  kernels.polar_factor(tall, "gram"))
    short = rng.standard_normal((64 * 3 - 1, 3))
    np.testing.assert_array_equal(kernels.polar_factor(short, "auto"),
                                  kernels.polar_factor(short, "svd"))
    with pytest.raises(ValueError, match="qr"):
        kernels.polar_factor(tall, "qr")


@pytest.mark.parametrize("fmt", ["csc", "csr", "dense", "csc-float32"])
def test_spmm_accumulate_adds_into_out(rng, fmt):
    X = random_corpus(40, 30, density=0.2, seed=5, n_empty=1)
    Xd = X.toarray()
    X_c = {"csc": X, "csr": X.tocsr(), "dense": Xd, "csc-float32": X.astype(np.float32)}[fmt]
    W = rng.standard_normal((30, 4))
    start = rng.standard_normal((40, 4))
    out = start.copy()
    got = partials.spmm_accumulate(X_c, W, out)
    assert got is out
    Xref = Xd.astype(np.float32).astype(np.float64) if fmt.endswith("float32") else Xd
    np.testing.assert_allclose(out, start + Xref @ W, atol=1e-13)


def test_row_major_copies_only_sorted_csc_chunks():
    X = random_corpus(40, 30, density=0.2, seed=5, n_empty=1).tocsc()
    assert X.has_sorted_indices
    copy = partials.row_major(X)
    assert copy.format == "csr" and copy.has_sorted_indices
    np.testing.assert_array_equal(copy.toarray(), X.toarray())
    unsorted = X.copy()
    for j in range(unsorted.shape[1]):  # every column's stored entries reversed
        a, b = unsorted.indptr[j], unsorted.indptr[j + 1]
        unsorted.indices[a:b] = unsorted.indices[a:b][::-1].copy()
        unsorted.data[a:b] = unsorted.data[a:b][::-1].copy()
    unsorted.has_sorted_indices = False
    assert partials.row_major(unsorted) is unsorted
    dense = X.toarray()
    assert partials.row_major(dense) is dense


def test_spmm_accumulate_csr_and_csc_routes_add_the_same_bits(rng):
    X = random_corpus(300, 200, density=0.1, seed=6, n_empty=2).tocsc()
    W = rng.standard_normal((200, 5))
    start = rng.standard_normal((300, 5))
    by_columns, by_rows = start.copy(), start.copy()
    partials.spmm_accumulate(X, W, by_columns)
    partials.spmm_accumulate(partials.row_major(X), W, by_rows)
    assert by_rows.tobytes() == by_columns.tobytes()
    np.testing.assert_allclose(by_rows, start + X.toarray() @ W, atol=1e-12)


@pytest.mark.parametrize("lam", [2.0, 2.5])
def test_pass_block_row_major_route_keeps_the_bits_of_the_column_route(rng, monkeypatch, lam):
    X = random_corpus(500, 240, density=0.05, seed=8, n_empty=0).tocsc()
    chunks = [X[:, a:a + 60] for a in range(0, 240, 60)]  # four sorted CSC chunks, one block
    U = np.linalg.qr(rng.standard_normal((500, 6)))[0]
    V_prev = [rng.standard_normal((6, 60)) for _ in chunks]
    V_prev = [v / np.linalg.norm(v, axis=0) for v in V_prev]
    calls = []

    def counted(X_c):
        calls.append(X_c.format if sp.issparse(X_c) else "dense")
        return partials.row_major(X_c)

    monkeypatch.setattr(kernels, "row_major", counted)
    rows = kernels.pass_block(chunks, U, V_prev, lam=lam)
    assert calls.count("csc") >= len(chunks)  # every chunk went through its row-major copy
    monkeypatch.setattr(kernels, "row_major", lambda X_c: X_c)  # the column route of before
    columns = kernels.pass_block(chunks, U, V_prev, lam=lam)
    for key in ("XVt", "VVt"):
        assert np.asarray(partials.densify(rows[key])).tobytes() == \
            np.asarray(partials.densify(columns[key])).tobytes()
    assert all(a.tobytes() == b.tobytes() for a, b in zip(rows["V"], columns["V"], strict=True))
    assert (rows["sq_norm_X"], rows["dV_sq"]) == (columns["sq_norm_X"], columns["dV_sq"])
    np.testing.assert_allclose(np.hstack(rows["V"]), _dense_pass(chunks, U, V_prev, lam)[1],
                               atol=1e-13)
    embedded = kernels.embed_block(chunks[1], U)  # the transform's V-step: pass_block's bits
    assert embedded.tobytes() == kernels.pass_block([chunks[1]], U)["V"][0].tobytes()


def _dense_pass(chunks, U, V_prev, lam):
    """Eq. 3.12 and the partials on the dense concatenation of the chunks."""
    X = np.hstack([c.toarray() if sp.issparse(c) else c for c in chunks])
    q = 2 * U.T @ X + (0.0 if V_prev is None else (lam - 2) * np.hstack(V_prev))
    norms = np.linalg.norm(q, axis=0)
    V = q / np.where(norms == 0, 1.0, norms)
    V[0, norms == 0] = 1.0  # an empty document at initialisation: e_1
    return X, V


def test_pass_block_sums_partials_of_its_chunks(rng):
    X = random_corpus(60, 40, density=0.2, seed=9, n_empty=0)
    chunks = [X[:, :7], X[:, 7:8], X[:, 8:40].toarray()]
    U = np.linalg.qr(rng.standard_normal((60, 3)))[0]
    V_prev = [rng.standard_normal((3, c.shape[1])) for c in chunks]
    V_prev = [v / np.linalg.norm(v, axis=0) for v in V_prev]
    out = kernels.pass_block(chunks, U, V_prev, lam=2.5)
    Xd, V = _dense_pass(chunks, U, V_prev, 2.5)
    assert [v.shape[1] for v in out["V"]] == [7, 1, 32]
    np.testing.assert_allclose(np.hstack(out["V"]), V, atol=1e-14)
    np.testing.assert_allclose(out["XVt"], Xd @ V.T, atol=1e-13)
    np.testing.assert_allclose(out["VVt"], V @ V.T, atol=1e-13)
    assert out["sq_norm_X"] == pytest.approx(np.sum(Xd**2), rel=1e-14)
    assert out["dV_sq"] == pytest.approx(np.sum((V - np.hstack(V_prev)) ** 2), rel=1e-12)


def test_pass_block_float32_keeps_float64_partials(rng):
    X = random_corpus(60, 40, density=0.2, seed=9, n_empty=1)
    chunks = [X[:, :20], X[:, 20:]]
    U = np.linalg.qr(rng.standard_normal((60, 3)))[0]
    out = kernels.pass_block(chunks, U, None, dtype=np.float32)
    Xd, V = _dense_pass(chunks, U, None, 2.0)
    assert all(v.dtype == np.float32 for v in out["V"])
    assert out["XVt"].dtype == out["VVt"].dtype == np.float64
    np.testing.assert_allclose(np.hstack(out["V"]), V, atol=1e-6)
    np.testing.assert_allclose(out["XVt"], Xd @ V.T, atol=1e-5)
    assert out["n_degenerate"] == 1


def _bits(a):
    """The exact bit patterns of a float64 array (distinguishes -0.0 and NaN payloads)."""
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


def _blocky_chunks(seed, m=400, n_chunks=6, cols=9):
    """Signed CSC chunks, each on its own ~40 features, with explicit stored zeros and -0.0."""
    rs = np.random.RandomState(seed)
    chunks = []
    for _ in range(n_chunks):
        rows = np.sort(rs.choice(m, 40, replace=False))
        X = sp.random(40, cols, density=0.3, format="csc", random_state=rs)
        X.data = rs.standard_normal(X.data.size)
        X.data[:3] = [0.0, -0.0, -0.0]  # products -0.0 * v: the accumulator must stay +0.0
        full = sp.csc_matrix((X.data, rows[X.indices], X.indptr), shape=(m, cols))
        chunks.append(full)
    return chunks


def test_row_sparse_block_partial_is_bitwise_the_dense_one(rng):
    chunks = _blocky_chunks(1)
    U = np.linalg.qr(rng.standard_normal((400, 5)))[0]
    V_prev = [rng.standard_normal((5, c.shape[1])) for c in chunks]
    dense = kernels.pass_block(chunks, U, V_prev, lam=3.0, partials="dense")
    rows = kernels.pass_block(chunks, U, V_prev, lam=3.0, partials="rows")
    assert isinstance(dense["XVt"], np.ndarray)
    assert isinstance(rows["XVt"], partials.RowSparse)
    # the stored rows are exactly the features the chunks touch
    touched = np.unique(np.concatenate([c.indices for c in chunks]))
    np.testing.assert_array_equal(rows["XVt"].rows, touched)
    np.testing.assert_array_equal(_bits(rows["XVt"].toarray()), _bits(dense["XVt"]))
    # no -0.0 anywhere, although -0.0 products were added (the premise of the bitwise sums)
    assert not np.any(np.signbit(dense["XVt"]) & (dense["XVt"] == 0))
    # against a dense NumPy product written here: X V^T over the block
    X = np.hstack([c.toarray() for c in chunks])
    V = np.hstack(rows["V"])
    np.testing.assert_allclose(rows["XVt"].toarray(), X @ V.T, atol=1e-12)
    np.testing.assert_array_equal(_bits(rows["VVt"]), _bits(dense["VVt"]))
    # dask's memory accounting (sys.getsizeof) sees the stored rows
    assert sys.getsizeof(rows["XVt"]) >= rows["XVt"].values.nbytes + touched.size * 8


def test_a_pass_on_the_occurring_features_is_bitwise_the_pass_on_all_rows(rng):
    """The one renumbering: U on the k features that occur (rows), chunks renumbered onto them."""
    chunks = _blocky_chunks(4, n_chunks=3)
    rows = np.unique(np.concatenate([c.indices for c in chunks]))
    U_k = np.linalg.qr(rng.standard_normal((rows.size, 5)))[0]
    U = np.zeros((400, 5))
    U[rows] = U_k  # zero on the features no chunk has
    for fmt in ("dense", "rows"):
        full = kernels.pass_onto(chunks, U, partials=fmt)
        on_rows = kernels.pass_onto(chunks, U_k, rows=rows, partials=fmt)
        got = partials.densify(on_rows["XVt"])
        assert got.shape == (rows.size, 5) and on_rows["occurs"].all()
        np.testing.assert_array_equal(_bits(got), _bits(partials.densify(full["XVt"])[rows]))
        np.testing.assert_array_equal(_bits(on_rows["VVt"]), _bits(full["VVt"]))
        for a, b in zip(on_rows["V"], full["V"], strict=True):
            np.testing.assert_array_equal(_bits(a), _bits(b))
    outside = [chunks[0]]
    with pytest.raises(ValueError, match="outside the fitted features"):
        kernels.pass_onto(outside, U_k[:3], rows=rows[:3])


def test_auto_partial_is_dense_when_rows_exceed_half_of_m(rng):
    U = np.linalg.qr(rng.standard_normal((400, 5)))[0]
    narrow = kernels.pass_block(_blocky_chunks(2, n_chunks=2), U, None)  # <= 80 of 400 rows
    wide = kernels.pass_block(_blocky_chunks(2, n_chunks=12), U, None)  # most of the 400
    assert isinstance(narrow["XVt"], partials.RowSparse)
    assert isinstance(wide["XVt"], np.ndarray)
    dense_chunk = [_blocky_chunks(2, n_chunks=1)[0].toarray()]
    assert isinstance(kernels.pass_block(dense_chunk, U, None, partials="rows")["XVt"], np.ndarray)
    with pytest.raises(ValueError, match="partials"):
        kernels.pass_block(dense_chunk, U, None, partials="sparse")


@pytest.mark.parametrize("tree", ["flat", "nested"])
def test_row_sparse_tree_sum_is_bitwise_the_dense_fold(rng, tree):
    U = np.linalg.qr(rng.standard_normal((400, 5)))[0]
    chunks = _blocky_chunks(3, n_chunks=12)
    blocks = [chunks[i:i + 2] for i in range(0, 12, 2)]  # 6 block partials
    fmts = ["rows", "rows", "dense", "rows", "auto", "rows"]  # mixed formats too
    sparse_parts = [
        kernels.pass_block(b, U, None, partials=f) for b, f in zip(blocks, fmts, strict=True)
    ]
    dense_parts = [kernels.pass_block(b, U, None, partials="dense") for b in blocks]
    dense_parts = [partials.partials_chunk(p) for p in dense_parts]
    sparse_parts = [partials.partials_chunk(p) for p in sparse_parts]

    def shape(p):
        return p if tree == "flat" else [[p[0], [p[1], p[2]]], [p[3]], p[4], p[5]]

    got = partials.partials_agg(shape(sparse_parts))
    # the dense fold, written out in list order
    expected = dense_parts[0]["XVt"]
    for p in dense_parts[1:]:
        expected = expected + p["XVt"]
    np.testing.assert_array_equal(_bits(partials.densify(got["XVt"])), _bits(expected))
    assert got["sq_norm_X"] == partials.partials_agg(shape(dense_parts))["sq_norm_X"]
    # all-row-sparse partials on <= half of m stay row-sparse through the tree
    only_rows = partials.partials_agg([[sparse_parts[0]], sparse_parts[1]])  # <= 160 of 400
    assert isinstance(only_rows["XVt"], partials.RowSparse)


def test_row_sparse_sum_keeps_the_rounding_order():
    # 1e16 + 1 - 1e16 depends on the order of the additions: the fold must be t0 + t1 + t2
    def part(row, value):
        return {"XVt": partials.RowSparse(np.array([row]), np.array([[value]]), (4, 1)),
                "VVt": np.zeros((1, 1)), "sq_norm_X": 0.0, "dV_sq": 0.0, "n_degenerate": 0}

    parts = [part(2, 1e16), part(2, 1.0), part(1, 5.0), part(2, -1e16), part(2, 1.0)]
    got = partials.densify(partials.partials_combine(parts)["XVt"]).ravel()
    dense = [partials.densify(p["XVt"]) for p in parts]
    expected = (((dense[0] + dense[1]) + dense[2]) + dense[3]) + dense[4]
    np.testing.assert_array_equal(_bits(got), _bits(expected.ravel()))
    assert got[2] == 1.0 and got[0] == 0.0 and not np.signbit(got[0])


@pytest.mark.parametrize("method", ["svd", "gram"])
def test_polar_factor_singular_values_are_the_nuclear_norm(rng, method):
    # Sun et al. (2011), V3 and Eq. 12: alpha n = tr(U^T X H) = ||X H||_* at U = polar(X H)
    M = rng.standard_normal((200, 3))
    U, S = kernels.polar_factor(M, method, return_singular_values=True)
    np.testing.assert_allclose(S, np.linalg.svd(M, compute_uv=False), rtol=1e-10)
    np.testing.assert_allclose(np.trace(U.T @ M), S.sum(), rtol=1e-12)
    np.testing.assert_array_equal(U, kernels.polar_factor(M, method))


def test_chunk_partials_match_dense_products(chunk, rng):
    V = rng.standard_normal((3, chunk.shape[1]))
    got = kernels.chunk_partials(chunk, V, 2)
    D = chunk.toarray() if sp.issparse(chunk) else chunk
    np.testing.assert_allclose(got["XVt"], D @ V.T, atol=1e-12)
    np.testing.assert_allclose(got["VVt"], V @ V.T, atol=1e-12)
    assert got["sq_norm_X"] == pytest.approx(float((D**2).sum()), rel=1e-13)
    assert got["n_degenerate"] == 2 and got["dV_sq"] == 0.0


def test_partials_combine_sums_any_keys_in_order():
    parts = [{"XVt": np.full((2, 1), v), "abs_G": v, "n": 1, "H": None} for v in (1e16, 1.0, -1e16)]
    total = partials.partials_agg([partials.partials_chunk(p) for p in parts])
    assert "H" not in total and total["n"] == 3
    assert total["abs_G"] == (1e16 + 1.0) - 1e16
    np.testing.assert_array_equal(total["XVt"], np.full((2, 1), (1e16 + 1.0) - 1e16))


def test_a_fold_adds_into_its_own_running_sum_and_leaves_the_parts_as_they_were():
    """Issue 29 item 5: a tree node's dense X V^T sum is one array of its own, added into in
    place (no new (k, r) array per input), bitwise the whole group's sum; no part changes."""
    rng = np.random.default_rng(0)
    parts = [{"XVt": rng.standard_normal((50, 4)), "VVt": rng.standard_normal((4, 4)),
              "sq_norm_X": float(i), "V": [i]} for i in range(5)]
    before = [{k: np.copy(v) for k, v in p.items()} for p in parts]
    total = None
    for p in parts:
        previous = None if total is None else total["XVt"]
        total = partials.partials_fold(total, p)
        if previous is None:  # the first step copies: the part's own array is never added into
            assert total["XVt"] is not p["XVt"]
        else:  # every later step adds into the node's array
            assert total["XVt"] is previous
    whole = partials.partials_combine([partials.partials_chunk(p) for p in parts])
    assert total.keys() == whole.keys()
    for key in whole:
        np.testing.assert_array_equal(total[key], whole[key], strict=True)
    expected = parts[0]["XVt"]
    for p in parts[1:]:
        expected = expected + p["XVt"]  # the dense left fold of before, new array per input
    assert total["XVt"].tobytes() == expected.tobytes()
    for p, b in zip(parts, before, strict=True):
        for key in p:
            np.testing.assert_array_equal(p[key], b[key])


@pytest.mark.parametrize("partials_format", ["auto", "rows", "dense"])
@pytest.mark.parametrize("density", [0.02, 0.5])  # a row-sparse "auto" partial, a dense one
def test_pass_block_of_an_iterator_is_bitwise_the_pass_of_the_list(partials_format, density):
    """A block's chunks taken one at a time (a streamed X) give every bit of the list, and a
    dense partial holds at most the chunk processed and the one being taken; a row-sparse
    one needs every chunk's features first, so it holds them all."""
    m, r, sizes = 60, 4, [5, 3, 7, 5]
    X = random_corpus(m, sum(sizes), density=density, seed=2, n_empty=1)
    bounds = np.cumsum([0, *sizes])
    chunks = [sp.csc_matrix(X[:, a:b]) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    U = np.linalg.qr(np.random.default_rng(3).standard_normal((m, r)))[0]
    V_prev = [np.random.default_rng(4 + i).standard_normal((r, n)) for i, n in enumerate(sizes)]
    V_prev = [v / np.linalg.norm(v, axis=0) for v in V_prev]
    options = {"lam": 0.5, "partials": partials_format, "keep_V": True}
    ref = kernels.pass_block(chunks, U, V_prev, **options)
    alive, most = [], [0]

    def taken():
        for X_c in chunks:
            copy = sp.csc_matrix(X_c, copy=True)
            alive.append(weakref.ref(copy.data))
            most[0] = max(most[0], sum(a() is not None for a in alive))
            yield copy
            del copy

    got = kernels.pass_block(taken(), U, V_prev, **options)
    for key in ("XVt", "VVt"):
        assert type(got[key]) is type(ref[key])
        np.testing.assert_array_equal(partials.densify(got[key]).view(np.int64),
                                      partials.densify(ref[key]).view(np.int64))
    for key in ("sq_norm_X", "dV_sq", "n_degenerate"):
        assert got[key] == ref[key]
    np.testing.assert_array_equal(got["occurs"], ref["occurs"])
    for v, w in zip(got["V"], ref["V"], strict=True):
        np.testing.assert_array_equal(v.view(np.int64), w.view(np.int64))
    dense = isinstance(ref["XVt"], np.ndarray)
    assert dense == (partials_format == "dense" or (partials_format == "auto" and density > 0.1))
    assert most[0] == (2 if dense else len(sizes)), most


@pytest.mark.parametrize("lam", [2.0, 2.5])
@pytest.mark.parametrize("fmt", sorted(partials.PARTIAL_FORMATS))
def test_held_chunks_give_a_pass_the_bits_of_their_csc_chunks_without_a_copy(
        rng, monkeypatch, lam, fmt):
    """Issue 40 item 4: a held chunk is kept row-major (partials.RowMajor) once; every pass
    renumbers it onto U's rows and takes its CSR matrix without copying its entries, with the
    bits of the CSC chunk renumbered and copied every pass."""
    X = random_corpus(500, 240, density=0.03, seed=11, n_empty=3).tocsc()
    chunks = [X[:, a:a + 60] for a in range(0, 240, 60)]
    held = [partials.held_chunk(c, max_extra=10.0) for c in chunks]
    assert all(isinstance(h, partials.RowMajor) for h in held)
    for c, h in zip(chunks, held, strict=True):  # the CSC chunk back, entry for entry
        back = h.tocsc()
        for name in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(back, name), getattr(c, name))
    occurs = partials.occurring(chunks)
    np.testing.assert_array_equal(partials.occurring(held), occurs)
    rows = np.union1d(np.flatnonzero(occurs), [0, 499])  # the fit's rows: more than occur
    U = np.linalg.qr(rng.standard_normal((rows.size, 6)))[0]
    V_prev = None if lam == 2.0 else [
        v / np.linalg.norm(v, axis=0) for v in (rng.standard_normal((6, 60)) for _ in chunks)]
    copies = []

    def recorded(X_c):
        copies.append((X_c, partials.row_major(X_c)))
        return copies[-1][1]

    monkeypatch.setattr(kernels, "row_major", recorded)
    kw = dict(rows=rows, lam=lam, partials=fmt)
    ref = kernels.pass_onto(chunks, U, V_prev, **kw)
    copies.clear()
    got = kernels.pass_onto(iter(held), U, V_prev, **kw)
    data = [h.data for h in held]
    assert copies and all(any(np.shares_memory(csr.data, d) for d in data)
                          and isinstance(src, partials.RowMajor) for src, csr in copies)
    for key in ("XVt", "VVt"):
        assert np.asarray(partials.densify(got[key])).tobytes() == \
            np.asarray(partials.densify(ref[key])).tobytes()
    assert type(got["XVt"]) is type(ref["XVt"])
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got["V"], ref["V"], strict=True))
    for key in ("sq_norm_X", "dV_sq", "n_degenerate"):
        assert got[key] == ref[key]
    np.testing.assert_array_equal(got["occurs"], ref["occurs"])
    # the embedding and the power iteration of init="svd" read held chunks too
    assert kernels.embed_block(held[1], U, rows=rows).tobytes() == \
        kernels.embed_block(chunks[1], U, rows=rows).tobytes()
    Q = np.linalg.qr(rng.standard_normal((500, 4)))[0]
    a, b = kernels.project_chunk(held[2], Q), kernels.project_chunk(chunks[2], Q)
    assert all(np.asarray(a[k]).tobytes() == np.asarray(b[k]).tobytes() for k in a)
    with pytest.raises(ValueError, match="outside the fitted features"):
        partials.renumber([held[0]], rows[1:])  # a feature of the chunk left out


def test_held_chunk_keeps_the_row_major_form_within_its_extra_bytes():
    X = random_corpus(500, 240, density=0.03, seed=11, n_empty=3).tocsc()
    raw = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    form = partials.RowMajor.from_csc(X)
    extra = form.nbytes / raw - 1.0
    assert isinstance(partials.held_chunk(X, max_extra=extra + 1e-9), partials.RowMajor)
    assert partials.held_chunk(X, max_extra=extra - 1e-3) is X
    assert partials.held_chunk(X, max_extra=None) is X
    assert sys.getsizeof(form) >= form.nbytes  # what dask's memory accounting sees
    dense = X.toarray()
    assert partials.held_chunk(dense) is dense
    unsorted = X.copy()
    unsorted.indices[:2] = unsorted.indices[:2][::-1].copy()
    unsorted.has_sorted_indices = False
    assert partials.held_chunk(unsorted, max_extra=10.0) is unsorted
