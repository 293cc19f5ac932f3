"""The stateless exact iteration: equal to the path that keeps V, resumable from U alone,
restricted to the occurring features, and holding nothing of size n on the cluster."""

import dataclasses

import dask
import numpy as np
import pytest
import scipy.sparse as sp

from sphdist.core import graph, solver
from sphdist.core.params import FitConfig
from sphdist.core.partials import RowSparse
from sphdist.errors import CheckpointMismatchError

from ..reference import (
    LAYOUTS,
    algorithm1,
    chunked,
    random_corpus,
    random_start,
    topical_corpus,
)

R = 3


@pytest.fixture(scope="module")
def X():
    return topical_corpus(m=600, n=120)


def _checkpoint(state):
    """What a checkpoint of the stateless fit stores: U_k (m, r) and the histories."""
    return solver.FitState(
        iteration=state.iteration, U=state.U_full.copy(), V=None, XVt=None, VVt=None,
        sq_norm_X=state.sq_norm_X, objective=list(state.objective),
        u_step_norm=list(state.u_step_norm), v_step_norm=list(state.v_step_norm),
        seconds=list(state.seconds), n_degenerate=state.n_degenerate,
        converged=state.converged, beta=state.beta, beta_bar=state.beta_bar,
    )


pytestmark = pytest.mark.usefixtures("sync_scheduler")


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("corpus", ["topical", "random"])
def test_objective_history_equals_the_path_that_keeps_V(X, layout, corpus):
    X = X if corpus == "topical" else random_corpus(80, 120, density=0.08, seed=7, n_empty=3)
    Xc = chunked(X, LAYOUTS[layout](X.shape[1]))
    kw = dict(max_iter=12, tol=0, random_state=0, accelerate=False)  # the kept path is plain
    stateless = solver.fit(Xc, R, **kw)
    kept = solver.fit(Xc, R, keep_V=True, **kw)
    assert kept.V is not None and stateless.V is None
    np.testing.assert_allclose(stateless.objective, kept.objective, rtol=1e-12, atol=0)
    np.testing.assert_allclose(stateless.U_full, kept.U, atol=1e-10)
    V = solver.embedding(Xc, stateless).compute()
    np.testing.assert_allclose(V, kept.V.compute(), atol=1e-10)


def test_restricted_to_the_occurring_features_and_equal_to_the_dense_reference(X):
    occurring = np.flatnonzero(np.diff(sp.csr_matrix(X).indptr))
    assert occurring.size < X.shape[0] / 2
    Xc = chunked(X, [24] * 5)
    state = solver.fit(Xc, R, max_iter=6, tol=0, random_state=0)
    # U, its broadcast and X V^T on k rows
    assert isinstance(state.U, RowSparse) and isinstance(state.XVt, RowSparse)
    np.testing.assert_array_equal(state.U.rows, occurring)
    np.testing.assert_array_equal(state.XVt.rows, occurring)
    assert state.U.values.shape == state.XVt.values.shape == (occurring.size, R)
    U = state.U_full
    assert U.shape == (X.shape[0], R)
    assert not np.delete(U, occurring, axis=0).any()
    np.testing.assert_allclose(U.T @ U, np.eye(R), atol=1e-12)
    U0 = random_start(X, R, 0)
    expected, U_ref, V_ref = algorithm1(X, U0, n_iter=6, lam=2.0, mu=None)
    np.testing.assert_allclose(state.objective, expected, rtol=1e-10)
    np.testing.assert_allclose(U, U_ref, atol=1e-9)
    np.testing.assert_allclose(solver.embedding(Xc, state).compute(), V_ref, atol=1e-9)


def test_a_step_size_that_needs_V_is_not_restricted(X):
    state = solver.fit(chunked(X, [60, 60]), R, mu=5.0, max_iter=3, tol=0, random_state=0)
    assert isinstance(state.U, np.ndarray) and state.U.shape == (X.shape[0], R)
    assert isinstance(state.XVt, np.ndarray)


@pytest.mark.parametrize("stop_after", [0, 1, 4])
@pytest.mark.parametrize("pass_blocks", [1, 3, 32])
def test_resume_from_U_alone_is_bitwise_the_uninterrupted_run(
    X, stop_after, pass_blocks, monkeypatch
):
    monkeypatch.setattr(graph, "PASS_BLOCKS", pass_blocks)  # blocks of 5, 2 or 1 chunks
    Xc = chunked(X, [24] * 5)
    kw = dict(tol=0, random_state=0)
    full = solver.fit(Xc, R, max_iter=7, **kw)
    part = solver.fit(Xc, R, max_iter=stop_after, **kw)
    resumed = solver.fit(Xc, R, max_iter=7, state=_checkpoint(part), **kw)
    assert resumed.objective == full.objective
    assert resumed.u_step_norm == full.u_step_norm
    np.testing.assert_array_equal(resumed.U_full.view(np.int64), full.U_full.view(np.int64))
    np.testing.assert_array_equal(
        solver.embedding(Xc, resumed).compute(), solver.embedding(Xc, full).compute()
    )


def test_a_start_on_all_rows_is_restricted_at_the_first_u_step(X):
    """init="svd" fills all m rows of U_0: the first pass finds the occurring features (X V_0^T
    row-sparse on them), f_0 is the whole U_0's, and U_1 lives on those rows; the dropped rows
    of U_0 count in the first step norm."""
    occurring = np.flatnonzero(np.diff(sp.csr_matrix(X).indptr))
    Xc = chunked(X, [24] * 5)
    start = solver.fit(Xc, R, init="svd", max_iter=0, random_state=0)
    assert isinstance(start.U, np.ndarray) and isinstance(start.XVt, RowSparse)
    np.testing.assert_array_equal(start.XVt.rows, occurring)
    D = X.toarray()
    Q = start.U.T @ D  # V_0 = normalise(U_0^T X), Eq. 3.12 at lam = 2 (e_1 where it is 0)
    norms = np.linalg.norm(Q, axis=0)
    V0 = np.where(norms > 0, Q / np.where(norms > 0, norms, 1.0), np.eye(R)[:, :1])
    np.testing.assert_allclose(start.XVt.toarray(), D @ V0.T, atol=1e-12)
    one = solver.fit(Xc, R, init="svd", max_iter=1, tol=0, random_state=0)
    assert isinstance(one.U, RowSparse)
    np.testing.assert_array_equal(one.U.rows, occurring)
    np.testing.assert_allclose(one.u_step_norm[0], np.linalg.norm(one.U_full - start.U),
                               rtol=1e-12)
    U1 = np.linalg.svd(start.XVt.toarray(), full_matrices=False)  # polar(X V_0^T), Eq. 3.11
    np.testing.assert_allclose(one.U_full, U1[0] @ U1[2], atol=1e-10)


def test_resume_on_other_data_is_refused(X):
    Xc = chunked(X, [24] * 5)
    part = solver.fit(Xc, R, max_iter=2, tol=0, random_state=0)
    edited = X.copy()
    edited.data[5] *= 1.5
    with pytest.raises(CheckpointMismatchError, match="iteration 2"):
        solver.fit(chunked(edited, [24] * 5), R, max_iter=4, tol=0,
                   state=_checkpoint(part))


def test_nothing_of_size_n_stays_on_the_cluster_between_iterations():
    distributed = pytest.importorskip("distributed")
    m, n, r = 60, 6000, 4
    X = random_corpus(m, n, density=0.05, seed=3, n_empty=0)
    held = []
    with dask.config.set(scheduler=None), distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None,
    ) as cluster, distributed.Client(cluster) as client:
        Xc = chunked(X, [500] * 12).persist()
        distributed.wait(Xc)
        x_keys = {k for k in client.has_what().values() for k in k}

        def held_bytes():
            who, sizes = client.who_has(), client.nbytes(summary=False)
            return sum(sizes.get(k, 0) for k, where in who.items() if where and k not in x_keys)

        state = solver.fit(Xc, r, max_iter=4, tol=0, random_state=0,
                           callback=lambda s: held.append(held_bytes()))
        kept = []
        solver.fit(Xc, r, max_iter=4, tol=0, random_state=0, keep_V=True,  # V persisted:
                   callback=lambda s: (distributed.wait(s.V), kept.append(held_bytes())))
    assert state.iteration == 4 and len(held) == 5
    V_bytes = 8 * r * n
    assert max(held) < V_bytes / 4, held  # U (m r) at most, never V
    assert min(kept) >= V_bytes  # the control: the kept path holds V


def test_degenerate_documents_get_e1_in_both_paths():
    X = random_corpus(30, 40, density=0.1, seed=4, n_empty=4)
    Xc = chunked(X, [10] * 4)
    state = solver.fit(Xc, 2, max_iter=3, tol=0, random_state=0)
    V = solver.embedding(Xc, state).compute()
    empty = ~np.asarray(X.astype(bool).sum(axis=0)).ravel().astype(bool)
    assert empty.sum() >= 4 and empty.sum() == state.n_degenerate
    np.testing.assert_array_equal(V[:, empty], np.eye(2)[:, [0]].repeat(empty.sum(), axis=1))


def test_a_rejected_extrapolation_takes_the_plain_step_and_shrinks_beta(X):
    Xc = chunked(X, [24] * 5)
    state = solver.fit(Xc, R, max_iter=2, tol=0, random_state=0)
    wild = dataclasses.replace(state, beta=1e3, beta_bar=1.0)  # E far beyond the plain step
    config = FitConfig.build(n_components=R, tol=0)  # accelerate: the table's default, on
    plain = solver.iterate(Xc, wild, dataclasses.replace(config, accelerate=False))
    got = solver.iterate(Xc, wild, config)
    assert got.objective == plain.objective  # the plain step, never a rise
    np.testing.assert_array_equal(got.U_full, plain.U_full)
    assert (got.beta, got.beta_bar) == (1e3 / 1.5, 1e3)
    kept = solver.iterate(Xc, state, config)  # beta 0.5 from the fit
    assert kept.objective[-1] <= state.objective[-1]
    assert kept.beta > state.beta or kept.objective == plain.objective
