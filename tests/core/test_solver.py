"""The Dask solver against the dense reference, across chunk layouts and step-size modes."""

import dataclasses

import dask
import dask.array
import numpy as np
import pytest
import scipy.sparse as sp

from sphdist.core import graph, kernels, solver
from sphdist.core.partials import RowSparse, densify
from sphdist.errors import DataError, ParameterError

from ..reference import (
    LAYOUTS,
    algorithm1,
    chunked,
    random_corpus,
    random_start,
    topical_corpus,
)

M, N, R = 80, 120, 4


@pytest.fixture(scope="module")
def X():
    return random_corpus(M, N, density=0.08, seed=7, n_empty=3)


pytestmark = pytest.mark.usefixtures("sync_scheduler")


def _V(Xc, state):
    """V_k of a state, computed (the stateless iteration keeps none)."""
    return solver.embedding(Xc, state).compute()


def _U0(seed=0):
    return kernels.random_orthonormal(M, R, np.random.RandomState(seed))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize(
    "lam, mu, ref",
    [("exact", "exact", dict(lam=2.0, mu=None)),
     (2.5, 7.0, dict(lam=2.5, mu=7.0)),
     ("theory", "theory", dict(lam=None, mu=None, lc=True))],
)
def test_objective_history_equals_dense_reference(X, layout, lam, mu, ref):
    Xc = chunked(X, LAYOUTS[layout](N))
    state = solver.fit(Xc, R, lam=lam, mu=mu, max_iter=8, tol=0, random_state=0)
    expected, U, V = algorithm1(X, _U0(), n_iter=8, **ref)
    np.testing.assert_allclose(state.objective, expected, rtol=1e-10)
    np.testing.assert_allclose(state.U_full, U, atol=1e-9)
    np.testing.assert_allclose(_V(Xc, state), V, atol=1e-9)


def test_dense_blocks_give_the_same_fit(X):
    sparse = solver.fit(chunked(X, [50, 70]), R, max_iter=5, tol=0, random_state=0)
    dense = solver.fit(chunked(X.toarray(), [50, 70]), R, max_iter=5, tol=0, random_state=0)
    np.testing.assert_allclose(sparse.objective, dense.objective, rtol=1e-12)


@pytest.mark.parametrize("lam, mu", [("exact", "exact"), ("palm", "palm"), ("theory", "theory")])
def test_constraints_hold_and_objective_never_increases(X, lam, mu):
    seen = []
    Xc = chunked(X, [30] * 4)

    def check(state):
        assert np.abs(state.U.T @ state.U - np.eye(R)).max() <= 1e-10
        V = _V(Xc, state)
        assert np.abs(np.linalg.norm(V, axis=0) - 1.0).max() <= 1e-10
        seen.append(state.iteration)

    state = solver.fit(
        Xc, R, lam=lam, mu=mu, max_iter=15, tol=0, random_state=1, callback=check,
    )
    assert seen == list(range(16))
    assert np.all(np.diff(state.objective) <= 1e-9 * state.objective[0])
    # empty documents: q = 0 only when lam = 2; otherwise q = (lam - 2) v keeps v
    assert state.n_degenerate == (3 if lam == "exact" else 0)
    assert np.all(np.isfinite(_V(Xc, state)))


def test_exact_block_minimisation_decreases_faster_than_theory(X):
    exact = solver.fit(chunked(X, [60, 60]), R, max_iter=10, tol=0, random_state=0)
    theory = solver.fit(
        chunked(X, [60, 60]), R, lam="theory", mu="theory", max_iter=10, tol=0, random_state=0
    )
    assert exact.objective[0] == theory.objective[0]
    assert exact.objective[-1] < theory.objective[-1]


def test_tol_stops_on_relative_change(X):
    state = solver.fit(chunked(X, [60, 60]), R, max_iter=500, tol=1e-3, random_state=0)
    f = np.asarray(state.objective)
    assert state.converged
    assert abs(f[-2] - f[-1]) / f[-2] < 1e-3
    assert np.all(np.abs(np.diff(f[:-1])) / f[:-2] >= 1e-3)


def test_bitwise_identical_across_schedulers(X):
    Xc = chunked(X, [13] * 9 + [3])
    a = solver.fit(Xc, R, max_iter=5, tol=0, random_state=3, split_every=3)
    with dask.config.set(scheduler="threads", num_workers=4):
        b = solver.fit(Xc, R, max_iter=5, tol=0, random_state=3, split_every=3)
    assert a.objective == b.objective
    np.testing.assert_array_equal(_bits(a.U_full), _bits(b.U_full))
    np.testing.assert_array_equal(_V(Xc, a), _V(Xc, b))


def test_svd_init_spans_the_leading_singular_subspace(X):
    U0 = solver.svd_init(chunked(X, [40] * 3), R, np.random.RandomState(0),
                            n_power_iter=6, split_every=8)
    Y = np.linalg.svd(X.toarray(), full_matrices=False)[0][:, :R]
    cosines = np.linalg.svd(Y.T @ U0, compute_uv=False)  # cosines of the principal angles
    assert cosines.min() > 0.99
    np.testing.assert_allclose(U0.T @ U0, np.eye(R), atol=1e-12)


def test_svd_init_starts_lower_than_random(X):
    Xc = chunked(X, [60, 60])
    svd = solver.fit(Xc, R, init="svd", max_iter=0, random_state=0)
    rnd = solver.fit(Xc, R, init="random", max_iter=0, random_state=0)
    assert svd.objective[0] < rnd.objective[0]


@pytest.mark.parametrize("pass_blocks", [1, 2, 8])
def test_one_read_of_every_chunk_per_iteration(X, pass_blocks, monkeypatch):
    monkeypatch.setattr(graph, "PASS_BLOCKS", pass_blocks)  # blocks of 5, 2-3 or 1 chunks
    reads = []
    Xc = chunked(X, [24] * 5).map_blocks(
        lambda b: (reads.append(1), b)[1], dtype=float, meta=sp.csc_matrix((0, 0))
    )
    solver.fit(Xc, R, max_iter=4, tol=0, random_state=0)
    # initialisation: a scan of the indices (the features the random U_0 is drawn on) and the
    # first pass; then one pass per iteration
    assert len(reads) == 5 * (2 + 4)
    reads.clear()
    solver.fit(Xc, R, max_iter=4, tol=0, random_state=0,
               accelerate=False, U0=np.eye(X.shape[0], R))
    assert len(reads) == 5 * (1 + 4)  # a warm start needs no scan


def test_random_start_is_drawn_on_the_occurring_features_only(X):
    """U_0 is zero on features no document has: the first pass runs on the k occurring rows."""
    keep = np.ones(X.shape[0])
    keep[::3] = 0.0  # a third of the features occur nowhere
    X_gap = sp.csc_matrix(sp.diags(keep) @ X)
    X_gap.eliminate_zeros()
    state = solver.fit(chunked(X_gap, [40] * 3), R, max_iter=0, random_state=0)
    occurring = np.flatnonzero(X_gap.getnnz(axis=1) > 0)
    X_gap = X_gap.toarray()
    assert isinstance(state.U, RowSparse) and state.U.shape == (X.shape[0], R)
    np.testing.assert_array_equal(state.U.rows, occurring)
    assert state.U.values.shape == (occurring.size, R)
    np.testing.assert_allclose(state.U.values.T @ state.U.values, np.eye(R), atol=1e-12)
    assert not state.U_full[::3].any()
    # V_0 = normalise(U_0^T X) against the dense reference
    V0 = state.U_full.T @ X_gap
    norms = np.linalg.norm(V0, axis=0)
    V0 = np.where(norms > 0, V0 / np.where(norms > 0, norms, 1.0), np.eye(R)[:, :1])  # e_1
    f0 = np.linalg.norm(X_gap - state.U_full @ V0) ** 2
    assert state.objective[0] == pytest.approx(f0, rel=1e-10)


@pytest.mark.parametrize("pass_blocks", [1, 3, 100])
def test_any_grouping_of_chunks_equals_dense_reference(X, pass_blocks, monkeypatch):
    monkeypatch.setattr(graph, "PASS_BLOCKS", pass_blocks)
    Xc = chunked(X, LAYOUTS["irregular"](N))
    state = solver.fit(Xc, R, max_iter=6, tol=0, random_state=0)
    expected, U, V = algorithm1(X, _U0(), n_iter=6, lam=2.0, mu=None)
    np.testing.assert_allclose(state.objective, expected, rtol=1e-10)
    np.testing.assert_allclose(state.U, U, atol=1e-9)
    np.testing.assert_allclose(_V(Xc, state), V, atol=1e-9)


@pytest.mark.parametrize("lam, mu", [("exact", "exact"), (2.5, 7.0)])
def test_gram_polar_route_follows_dense_reference(lam, mu):
    # tall enough for the Gram route to be taken by "auto" too (m >= 64 r)
    Xt = random_corpus(400, 60, density=0.1, seed=2, n_empty=0)
    U0 = kernels.random_orthonormal(400, 3, np.random.RandomState(0))
    ref = dict(lam=2.0, mu=None) if lam == "exact" else dict(lam=lam, mu=mu)
    expected, U, V = algorithm1(Xt, U0, n_iter=6, **ref)
    for polar in ("gram", "auto"):
        Xc = chunked(Xt, [25, 35])
        state = solver.fit(
            Xc, 3, lam=lam, mu=mu, max_iter=6, tol=0, random_state=0, polar=polar,
        )
        np.testing.assert_allclose(state.objective, expected, rtol=1e-10)
        np.testing.assert_allclose(state.U_full, U, atol=1e-8)
        np.testing.assert_allclose(_V(Xc, state), V, atol=1e-8)


def test_float32_compute_stays_close_to_float64(X):
    Xc = chunked(X, [50, 70])
    f64 = solver.fit(Xc, R, max_iter=6, tol=0, random_state=0)
    f32 = solver.fit(Xc, R, max_iter=6, tol=0, random_state=0, dtype=np.float32)
    V = solver.embedding(Xc, f32, dtype=np.float32).compute()
    assert V.dtype == np.float32 and f32.U.dtype == f32.XVt.dtype == np.float64
    np.testing.assert_allclose(f32.objective, f64.objective, rtol=1e-5)
    np.testing.assert_allclose(f32.U, f64.U, atol=1e-4)
    assert np.abs(np.linalg.norm(V.astype(np.float64), axis=0) - 1.0).max() <= 1e-6
    np.testing.assert_allclose(f32.U.T @ f32.U, np.eye(R), atol=1e-12)


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(n_components=0), "n_components=0"), (dict(n_components=M + 1), "n_components"),
     (dict(lam=1.5), "lam=1.5"), (dict(mu=-1.0), "mu=-1.0"), (dict(lam="fast"), "lam='fast'"),
     (dict(max_iter=-1), "max_iter"), (dict(tol=float("nan")), "tol"),
     (dict(init="pca"), "init"), (dict(dtype=np.int64), "dtype"), (dict(polar="qr"), "polar"),
     (dict(split_every=1), "split_every")],
)
def test_bad_parameters_raise(X, kwargs, match):
    args = dict(n_components=R) | kwargs
    with pytest.raises(ParameterError, match=match):
        solver.fit(chunked(X, [N]), args.pop("n_components"), **args)


def test_nan_in_x_raises(X):
    bad = X.toarray()
    bad[3, 5] = np.nan
    with pytest.raises(DataError, match="NaN or Inf"):
        solver.fit(chunked(bad, [N]), R, max_iter=1)


def _bits(a):
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


@pytest.mark.parametrize("split_every", [2, 8])
def test_row_sparse_partials_give_bitwise_the_dense_fit(split_every):
    Xs = topical_corpus()
    Xc = chunked(Xs, [12] * 8)
    kw = dict(max_iter=4, tol=0, random_state=1, split_every=split_every)
    dense = solver.fit(Xc, 3, partials="dense", **kw)
    for partials in ("rows", "auto"):
        for scheduler in ("sync", "threads"):
            with dask.config.set(scheduler=scheduler, num_workers=3):
                got = solver.fit(Xc, 3, partials=partials, **kw)
            assert got.objective == dense.objective
            np.testing.assert_array_equal(_bits(got.U_full), _bits(dense.U_full))
            np.testing.assert_array_equal(_bits(densify(got.XVt)), _bits(densify(dense.XVt)))
            np.testing.assert_array_equal(_V(Xc, got), _V(Xc, dense))
    # and the dense route itself follows the dense NumPy reference
    U0 = random_start(Xs, 3, 1)  # the solver's random start
    expected, U, _ = algorithm1(Xs, U0, n_iter=4, lam=2.0, mu=None)
    np.testing.assert_allclose(dense.objective, expected, rtol=1e-10)
    np.testing.assert_allclose(dense.U_full, U, atol=1e-9)


def test_partials_format_is_validated(X):
    with pytest.raises(ParameterError, match="partials"):
        solver.fit(chunked(X, [60, 60]), R, max_iter=1, partials="sparse")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_resume_of_a_kept_V_read_back_as_float64_is_bitwise(X, dtype):
    """Issue 31 item 8: a checkpoint stores V_k as float64 (``model.zarr/V``), while the
    uninterrupted float32 fit carries V_k in float32; the palm V-step
    ``q = 2 U^T x_j + (lam - 2) v_j`` (Liu et al. 2019, Eq. 3.12) must see the same float32
    V_k either way, or the resumed iterates differ in the last bits."""
    Xc = chunked(X, [24] * 5)
    kw = dict(lam="palm", mu="palm", dtype=dtype, tol=0, random_state=0)
    full = solver.fit(Xc, R, max_iter=8, **kw)
    part = solver.fit(Xc, R, max_iter=5, **kw)
    assert part.V.dtype == dtype
    stored = part.V.compute().astype(np.float64)  # what the checkpoint gives back
    state = dataclasses.replace(
        part, V=dask.array.from_array(stored, chunks=part.V.chunks),
        XVt=np.array(part.XVt), VVt=np.array(part.VVt),
    )
    resumed = solver.fit(Xc, R, max_iter=8, state=state, **kw)
    assert resumed.objective == full.objective
    np.testing.assert_array_equal(_bits(resumed.U_full), _bits(full.U_full))
    assert resumed.V.dtype == dtype
    np.testing.assert_array_equal(resumed.V.compute(), full.V.compute())
