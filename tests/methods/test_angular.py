"""Angular Decomposition (Sun et al. 2011) and BAE against dense NumPy references.

The references below iterate the paper's equations on full matrices, in the papers'
orientation (X of shape (m features, n documents)): steps V0-V3 (Eq. 12, 14, 17-18), steps
G0-G3 (Eq. 22-24, rows scaled back to unit length after G3 as sphdist documents), and BAE
(Sec. 2.3) with its residuals Eq. 25-26. The estimators take X of shape (n_samples,
n_features). The randomized SVD is made exact by ``n_oversamples >= n_features`` (its basis
then spans the whole feature space), so results agree to rounding, up to the sign of each
component.
"""

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.utils.estimator_checks import parametrize_with_checks

from sphdist import BAE, AngularDecomposition, GraphAngularDecomposition
from sphdist.errors import DataError, ParameterError

from ..reference import LAYOUTS, chunked, random_corpus

M, N, R = 30, 48, 3
N_EMPTY = 2
EXACT = {"n_oversamples": M}  # randomized SVD basis = all of R^m: exact leading vectors

# Checks of scikit-learn's contract the estimators are known to fail, with the reason (strict
# xfails). Empty: every applicable check passes.
EXPECTED_FAILED_CHECKS: dict[str, str] = {}


@parametrize_with_checks(
    [
        AngularDecomposition(n_components=2, max_iter=5, random_state=0),
        GraphAngularDecomposition(n_components=2, max_iter=5, random_state=0),
        BAE(n_components=2, random_state=0),
    ],
    expected_failed_checks=lambda estimator: EXPECTED_FAILED_CHECKS,
)
def test_sklearn_estimator_contract(estimator, check):
    check(estimator)


pytestmark = pytest.mark.usefixtures("sync_scheduler")


# -- dense references (papers' orientation, X is m x n) ----------------------------------


def unit_rows(A):
    """Rows scaled to unit length; a zero row (or rounding of one: S_ii = 0) becomes e_1."""
    norms = np.linalg.norm(A, axis=1)
    zero = norms <= 1e-10 * norms.max()
    H = A / np.where(zero, 1.0, norms)[:, None]
    H[zero] = np.eye(A.shape[1])[0]
    return H


def leading_svd(X, r):
    U, s, Vt = np.linalg.svd(X, full_matrices=False)
    return U[:, :r], s[:r], Vt[:r].T


def ref_vector_ad(X, r, n_iter):
    """Steps V0-V3; history of ||X - alpha U H^T||^2 with alpha of Eq. 12 after each iteration."""
    n = X.shape[1]
    U, s, V = leading_svd(X, r)
    H = V * s  # V0: H_0 = V Sigma
    history = []
    for _ in range(n_iter):
        alpha = np.trace(U.T @ X @ H) / n  # V1, Eq. 12
        assert alpha > 0
        # V2, Eq. 14 as written: H_ij = (U^T X)_ji / sqrt((X^T U U^T X)_ii)
        d = np.sqrt(np.diag(X.T @ U @ U.T @ X))
        H = unit_rows(np.where(d[:, None] > 0, (U.T @ X).T / np.where(d > 0, d, 1)[:, None], 0))
        A, _, Bt = np.linalg.svd(X @ H, full_matrices=False)  # V3, Eq. 18
        U = A @ Bt  # Eq. 17
        alpha = np.trace(U.T @ X @ H) / n
        history.append(np.linalg.norm(X - alpha * U @ H.T) ** 2)
    return np.array(history), U, H, alpha


def leading_eig(S, r):
    w, V = np.linalg.eigh(S)
    return w[::-1][:r], V[:, ::-1][:, :r]


def ref_graph_ad(S, r, n_iter, step=0.01):
    """Steps G0-G3; history of ||S - alpha H H^T||^2 with alpha of Eq. 22 after each G3.

    G0's V Sigma^{1/2} is scaled to unit rows (there the bracket of Eq. 24 is zero)."""
    w, V = leading_eig(S, r)
    H = unit_rows(V * np.sqrt(np.clip(w, 0, None)))  # G0
    history = []
    for _ in range(n_iter):
        HH = H @ H.T
        alpha = np.trace(H.T @ S @ H) / np.trace(HH @ HH)  # G1, Eq. 22
        lam = alpha**2 * np.diag(HH @ HH) - alpha * np.diag(S @ HH)  # G2, Eq. 23
        grad = alpha**2 * HH @ H - alpha * S @ H - lam[:, None] * H  # bracket of Eq. 24
        eta = step * np.abs(H).sum() / np.abs(grad).sum()
        H = unit_rows(H - eta * grad)  # G3, then back onto the sphere
        HH = H @ H.T
        alpha = np.trace(H.T @ S @ H) / np.trace(HH @ HH)
        history.append(np.linalg.norm(S - alpha * HH) ** 2)
    return np.array(history), H, alpha


def ref_bae_vector(X, r):
    U, s, V = leading_svd(X, r)
    Q = unit_rows(V * s)
    B = U @ Q.T
    beta = np.vdot(X, B) / np.vdot(B, B)  # argmin_beta ||X - beta U Q^T||^2, Eq. 25
    return U, Q, np.linalg.norm(X - beta * B) ** 2


def ref_bae_graph(S, r):
    w, V = leading_eig(S, r)
    Q = unit_rows(V * np.sqrt(np.clip(w, 0, None)))
    B = Q @ Q.T
    beta = np.vdot(S, B) / np.vdot(B, B)  # Eq. 26
    return Q, np.linalg.norm(S - beta * B) ** 2


def rbf_reference(X):
    """Sun et al. Sec. 4.1 on the samples as columns of X."""
    D = np.linalg.norm(X[:, :, None] - X[:, None, :], axis=0)
    n = X.shape[1]
    gamma = 0.7 / (D.sum() / (n * (n - 1))) ** 2
    return np.exp(-gamma * D**2), gamma


def assert_embedding_equal(E, H, atol, empty=None):
    """E equals H up to the sign of each column; rows of empty documents are e_1 in both
    (a fixed vector, not flipped with the columns)."""
    signs = np.sign(np.sum(E * H, axis=0))
    regular = np.ones(len(E), bool) if empty is None else ~empty
    np.testing.assert_allclose(E[regular] * signs, H[regular], atol=atol)
    if empty is not None:
        np.testing.assert_array_equal(E[empty], np.eye(E.shape[1])[np.zeros(empty.sum(), int)])


def align(A, B):
    """A with the sign of each column flipped to match B."""
    return A * np.sign(np.sum(A * B, axis=0))


# -- data and input layouts ----------------------------------------------------------------


@pytest.fixture(scope="module")
def Xt():
    """Papers' X: m x n CSC, unit columns, N_EMPTY empty documents."""
    return random_corpus(M, N, density=0.2, seed=3, n_empty=N_EMPTY)


@pytest.fixture(scope="module")
def empty(Xt):
    rows = np.diff(Xt.indptr) == 0
    assert rows.sum() >= N_EMPTY
    return rows


@pytest.fixture(scope="module")
def Xg():
    """As Xt without empty documents: the graph iteration moves an empty document's row
    (fixed to e_1, which does not flip with the components), so its result is only defined
    up to that choice."""
    return random_corpus(M, N, density=0.2, seed=4, n_empty=0)


def _inputs(Xt):
    Xs = sp.csr_matrix(Xt.T)
    dense = Xs.toarray()
    return {
        "numpy": (dense, None),
        "csr-one-chunk": (Xs, None),
        "csr-regular": (Xs, 13),
        "dask-sparse-irregular": (chunked(Xt, LAYOUTS["irregular"](N)).T, None),
        "dask-dense-single-documents-at-ends": (
            da.from_array(dense, chunks=(tuple(LAYOUTS["single-documents-at-ends"](N)), M)),
            None,
        ),
    }


KINDS = sorted(_inputs(random_corpus(M, N, n_empty=0)))


def _np(a):
    return a.compute() if isinstance(a, da.Array) else np.asarray(a)


# -- AngularDecomposition (vector data) ------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_vector_ad_equals_dense_reference(Xt, empty, kind):
    X, chunk_size = _inputs(Xt)[kind]
    n_iter = 6
    model = AngularDecomposition(
        R, max_iter=n_iter, tol=0.0, random_state=0, chunk_size=chunk_size, **EXACT
    ).fit(X)
    history, U, H, alpha = ref_vector_ad(Xt.toarray(), R, n_iter)
    assert model.n_iter_ == n_iter
    np.testing.assert_allclose(model.objective_, history, rtol=1e-10)
    assert model.residual_ == model.objective_[-1]
    np.testing.assert_allclose(model.alpha_, alpha, rtol=1e-10)
    Ut = model.components_.T
    np.testing.assert_allclose(align(Ut, U), U, atol=1e-9)
    E = _np(model.embedding_)
    assert isinstance(model.embedding_, da.Array) == kind.startswith("dask")
    assert_embedding_equal(E, H, 1e-9, empty)
    assert model.n_degenerate_ == empty.sum()


def test_vector_ad_constraints_and_monotone_objective(Xt):
    X = sp.csr_matrix(Xt.T)
    model = AngularDecomposition(R, max_iter=60, tol=0.0, random_state=1, chunk_size=11).fit(X)
    C = model.components_
    np.testing.assert_allclose(C @ C.T, np.eye(R), atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(model.embedding_, axis=1), 1.0, atol=1e-12)
    assert model.alpha_ > 0
    # every step V1-V3 is an exact block minimiser (Sun et al. Sec. 3.1, Lemmas 1-2)
    obj = model.objective_
    assert np.all(np.diff(obj) <= 1e-12 * obj[0])
    assert obj[-1] < obj[0]
    # the recorded objective is Eq. 4 at the returned parameters
    direct = np.linalg.norm(Xt.toarray() - model.alpha_ * C.T @ model.embedding_.T) ** 2
    np.testing.assert_allclose(model.residual_, direct, rtol=1e-12)


def test_vector_ad_tol_stops_early(Xt):
    model = AngularDecomposition(R, max_iter=500, tol=1e-4, random_state=0).fit(Xt.T)
    assert 1 < model.n_iter_ < 500
    assert abs(model.objective_[-2] - model.objective_[-1]) <= 1e-4 * model.objective_[-2]


def test_vector_ad_transform_is_eq14_with_the_fitted_u(Xt):
    X = sp.csr_matrix(Xt.T)
    model = AngularDecomposition(R, max_iter=5, random_state=0).fit(X)
    expected = unit_rows(X.toarray() @ model.components_.T)
    np.testing.assert_allclose(model.transform(X), expected, atol=1e-12)
    Xd = da.from_array(X.toarray(), chunks=((10, 38), M))
    Y = model.transform(Xd)
    assert isinstance(Y, da.Array) and Y.chunks == ((10, 38), (R,))
    np.testing.assert_allclose(Y.compute(), expected, atol=1e-12)
    back = model.inverse_transform(expected)
    np.testing.assert_allclose(back, model.alpha_ * expected @ model.components_)


def test_ad_beats_bae_from_the_same_svd(Xt):
    """Sun et al. Table 1's claim, here a theorem: BAE's (U_0, Q) is AD's first V2 point."""
    X = Xt.T
    ad = AngularDecomposition(R, max_iter=20, random_state=0, **EXACT).fit(X)
    bae = BAE(R, random_state=0, **EXACT).fit(X)
    assert ad.residual_ < bae.residual_


# -- BAE -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_bae_vector_equals_svd_then_normalise(Xt, empty, kind):
    X, chunk_size = _inputs(Xt)[kind]
    model = BAE(R, random_state=0, chunk_size=chunk_size, **EXACT).fit(X)
    U, Q, residual = ref_bae_vector(Xt.toarray(), R)
    E = _np(model.embedding_)
    assert_embedding_equal(E, Q, 1e-10, empty)
    np.testing.assert_allclose(align(model.components_.T, U), U, atol=1e-10)
    np.testing.assert_allclose(model.residual_, residual, rtol=1e-10)
    np.testing.assert_allclose(_np(model.transform(X)), E, atol=1e-12)
    assert model.n_degenerate_ == empty.sum()


def test_bae_default_randomized_svd_is_close(Xt):
    """With the default 10 oversamples and 4 power iterations, not exact but close."""
    model = BAE(R, random_state=0).fit(Xt.T)
    _, _, residual = ref_bae_vector(Xt.toarray(), R)
    assert residual <= model.residual_ <= residual * (1 + 1e-3)


@pytest.mark.parametrize("kernel", ["linear", "precomputed", "rbf"])
def test_bae_graph_equals_eigendecomposition_then_normalise(Xt, empty, kernel):
    X = Xt.toarray()
    if kernel == "rbf":
        S, gamma = rbf_reference(X)
    else:
        S, gamma = X.T @ X, None
    Q, residual = ref_bae_graph(S, R)
    data = S if kernel == "precomputed" else sp.csr_matrix(Xt.T)
    model = BAE(R, kernel=kernel, random_state=0, chunk_size=13, **EXACT).fit(data)
    E = _np(model.embedding_)
    # an empty document is a point like any other for the RBF kernel (S_ii = 1)
    assert_embedding_equal(E, Q, 1e-9, None if kernel == "rbf" else empty)
    np.testing.assert_allclose(model.residual_, residual, rtol=1e-10)
    if gamma is not None:
        np.testing.assert_allclose(model.gamma_, gamma, rtol=1e-12)


# -- GraphAngularDecomposition -------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_graph_linear_equals_dense_reference_without_forming_s(Xg, kind):
    X, chunk_size = _inputs(Xg)[kind]
    n_iter = 8
    model = GraphAngularDecomposition(
        R, kernel="linear", max_iter=n_iter, tol=0.0, random_state=0, chunk_size=chunk_size,
        **EXACT,
    ).fit(X)
    Xd = Xg.toarray()
    history, H, alpha = ref_graph_ad(Xd.T @ Xd, R, n_iter)
    np.testing.assert_allclose(model.objective_, history, rtol=1e-9)
    np.testing.assert_allclose(model.alpha_, alpha, rtol=1e-9)
    E = _np(model.embedding_)
    assert_embedding_equal(E, H, 1e-8)
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-12)


def test_graph_linear_equals_explicit_s(Xg):
    X = sp.csr_matrix(Xg.T)
    params = dict(max_iter=15, tol=0.0, random_state=0, **EXACT)
    implicit = GraphAngularDecomposition(R, kernel="linear", chunk_size=7, **params).fit(X)
    S = (X @ X.T).toarray()
    explicit = GraphAngularDecomposition(R, kernel="precomputed", **params).fit(S)
    np.testing.assert_allclose(implicit.objective_, explicit.objective_, rtol=1e-9)
    E, F = _np(implicit.embedding_), explicit.embedding_
    assert_embedding_equal(E, F, 1e-8)


def test_graph_rbf_equals_dense_reference(Xt):
    n_iter = 10
    model = GraphAngularDecomposition(R, kernel="rbf", max_iter=n_iter, tol=0.0).fit(Xt.T)
    S, gamma = rbf_reference(Xt.toarray())
    history, H, alpha = ref_graph_ad(S, R, n_iter)
    np.testing.assert_allclose(model.gamma_, gamma, rtol=1e-12)
    np.testing.assert_allclose(model.objective_, history, rtol=1e-9)
    assert_embedding_equal(model.embedding_, H, 1e-8)
    assert model.alpha_ > 0


def test_graph_constraints_and_decrease(Xt):
    """Unit rows after every G3; the paper shows (not proves) the decrease, so only the
    overall decrease against the start (and against BAE) is asserted."""
    S, _ = rbf_reference(Xt.toarray())
    model = GraphAngularDecomposition(R, kernel="precomputed", max_iter=40, tol=0.0).fit(S)
    np.testing.assert_allclose(np.linalg.norm(model.embedding_, axis=1), 1.0, atol=1e-12)
    assert model.alpha_ > 0
    assert model.objective_[-1] < model.objective_[0]
    bae = BAE(R, kernel="precomputed").fit(S)
    assert model.residual_ < bae.residual_
    direct = np.linalg.norm(S - model.alpha_ * model.embedding_ @ model.embedding_.T) ** 2
    np.testing.assert_allclose(model.residual_, direct, rtol=1e-12)


# -- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "estimator",
    [
        AngularDecomposition(n_components=M + 1),
        AngularDecomposition(max_iter=0),
        AngularDecomposition(tol=-1.0),
        AngularDecomposition(chunk_size=0),
        GraphAngularDecomposition(kernel="cosine"),
        GraphAngularDecomposition(kernel="rbf", gamma=-1.0),
        GraphAngularDecomposition(step_size=0.0),
        BAE(n_components=0),
        BAE(n_oversamples=-1),
    ],
    ids=repr,
)
def test_parameter_errors(Xt, estimator):
    with pytest.raises(ParameterError):
        estimator.fit(Xt.T)


def test_data_errors(Xt):
    S = np.arange(16.0).reshape(4, 4)
    with pytest.raises(DataError, match="not symmetric"):
        GraphAngularDecomposition(kernel="precomputed").fit(S)
    with pytest.raises(DataError, match="square"):
        BAE(kernel="precomputed").fit(np.ones((4, 3)))
    bad = Xt.T.toarray()
    bad[5, 2] = np.nan
    with pytest.raises(DataError, match="NaN"):
        AngularDecomposition(R).fit(da.from_array(bad, chunks=(20, M)))
    with pytest.raises(ParameterError, match="no transform"):
        BAE(R, kernel="rbf").fit(Xt.T).transform(Xt.T)
