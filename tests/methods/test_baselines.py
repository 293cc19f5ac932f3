"""R1PCA and KSVD against dense NumPy references of their papers' algorithms.

References written here (orientation: samples as COLUMNS inside the references, as in the papers):

* R1-PCA, Ding, Zhou, He & Zha (ICML 2006), Algorithm R1-PCA: U0 = PCA, c = median residual,
  Huber weights w_i = min(1, c / s_i), C_r = sum_i w_i x_i x_i^T, U <- orthonormalize(C_r U)
  (or U <- top-k eigenvectors of C_r for the exact re-weighted least-squares variant).
* K-SVD, Aharon, Elad & Bruckstein (2006), Fig. 2, with T0 = 1 (where OMP is exact: the atom of
  largest |d^T y|, coefficient d^T y): atom-by-atom rank-1 SVD update of the restricted
  residual, unused atoms replaced by the worst represented signal.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.decomposition import PCA
from sklearn.utils.estimator_checks import parametrize_with_checks

from sphdist.errors import ParameterError
from sphdist.methods.baselines import KSVD, R1PCA, huber_objective


@parametrize_with_checks(
    [R1PCA(n_components=1), KSVD(n_components=3, n_nonzero_coefs=1, random_state=0)]
)
def test_sklearn_estimator_contract(estimator, check):
    check(estimator)


# ----------------------------------------------------------------------------- R1-PCA


def r1pca_reference(X, k, n_iter, update="subspace", c="median", center=True):
    """Dense R1-PCA; returns (U (D, k), objective history)."""
    Xt = np.asarray(X, dtype=np.float64).T  # (D, N): samples as columns
    if center:
        Xt = Xt - Xt.mean(axis=1, keepdims=True)
    evals, evecs = np.linalg.eigh(Xt @ Xt.T)
    U = evecs[:, np.argsort(evals)[::-1][:k]]

    def residuals(U):
        return np.linalg.norm(Xt - U @ (U.T @ Xt), axis=0)

    def rho(s, c):  # Huber, Ding et al.: s^2 if s <= c else 2cs - c^2
        return np.sum(np.where(s <= c, s**2, 2 * c * s - c**2)) if c > 0 else np.sum(s)

    s = residuals(U)
    c = np.median(s) if c == "median" else c
    history = [rho(s, c)]
    for _ in range(n_iter):
        w = np.ones_like(s) if c == np.inf else np.minimum(1.0, c / np.maximum(s, 1e-300))
        C = (Xt * w) @ Xt.T
        if update == "subspace":
            U = np.linalg.qr(C @ U)[0]
        else:
            evals, evecs = np.linalg.eigh(C)
            U = evecs[:, np.argsort(evals)[::-1][:k]]
        s = residuals(U)
        history.append(rho(s, c))
    return U, np.array(history)


def subspace_distance(A_rows, B_rows):
    """Largest sine of the principal angles between row spaces (orthonormal rows)."""
    return np.linalg.norm(A_rows.T - B_rows.T @ (B_rows @ A_rows.T), 2)


def planted_subspace(seed, n=200, m=12, k=2, n_out=0, noise=0.05):
    rng = np.random.default_rng(seed)
    B = np.linalg.qr(rng.normal(size=(m, k)))[0]
    X = (rng.normal(size=(n, k)) * np.linspace(3, 2, k)) @ B.T + noise * rng.normal(size=(n, m))
    if n_out:
        out = rng.normal(size=(n_out, m))
        X[:n_out] = 8 * out / np.linalg.norm(out, axis=1, keepdims=True)
    return X, B.T


@pytest.mark.parametrize("update", ["subspace", "eigh"])
@pytest.mark.parametrize("center", [True, False])
@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_r1pca_equals_the_dense_reference(update, center, kind):
    X, _ = planted_subspace(0, n=80, m=10, k=3, n_out=8)
    if kind == "sparse":
        X = sp.csr_matrix(np.where(np.abs(X) < 0.5, 0.0, X))
    Xd = X.toarray() if kind == "sparse" else X
    U, history = r1pca_reference(Xd, 3, 6, update=update, center=center)
    model = R1PCA(3, update=update, center=center, max_iter=6, tol=0, random_state=0).fit(X)
    assert model.n_iter_ == 6
    np.testing.assert_allclose(model.objective_, history, rtol=1e-9)
    np.testing.assert_allclose(model.components_.T @ model.components_, U @ U.T, atol=1e-8)
    Xc = Xd - Xd.mean(axis=0) if center else Xd
    s = np.linalg.norm(Xc - Xc @ U @ U.T, axis=1)
    assert model.r1_norm_[-1] == pytest.approx(s.sum(), rel=1e-9)
    V0 = np.linalg.svd(Xc, full_matrices=False)[2][:3]  # PCA start
    s0 = np.linalg.norm(Xc - Xc @ V0.T @ V0, axis=1)
    assert model.c_ == pytest.approx(np.median(s0), rel=1e-9)


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_r1pca_constraints_and_transform(kind):
    X, _ = planted_subspace(1, n_out=10)
    X = sp.csr_matrix(X) if kind == "sparse" else X
    model = R1PCA(3, random_state=0).fit(X)
    U = model.components_
    np.testing.assert_allclose(U @ U.T, np.eye(3), atol=1e-12)
    Xd = X.toarray() if kind == "sparse" else X
    np.testing.assert_allclose(model.mean_, Xd.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(model.transform(X), (Xd - model.mean_) @ U.T, atol=1e-10)
    np.testing.assert_allclose(
        model.inverse_transform(model.transform(X)),
        model.mean_ + (Xd - model.mean_) @ U.T @ U, atol=1e-10,
    )
    assert np.all((model.weights_ > 0) & (model.weights_ <= 1))
    # components are the eigenvectors of the robust covariance, in decreasing order
    Xc = Xd - model.mean_
    C = (Xc * model.weights_[:, None]).T @ Xc
    ritz = np.diag(U @ C @ U.T)
    assert np.all(np.diff(ritz) <= 1e-9 * ritz[0])
    np.testing.assert_allclose(U @ C @ U.T, np.diag(ritz), atol=1e-8 * ritz[0])


def test_r1pca_without_outliers_is_pca():
    # Exactly low-rank data: PCA's subspace has zero residuals and R1-PCA keeps it.
    rng = np.random.default_rng(2)
    X = rng.normal(size=(100, 3)) @ rng.normal(size=(3, 9)) + rng.normal(size=9)
    pca = PCA(3).fit(X)
    model = R1PCA(3).fit(X)
    assert subspace_distance(model.components_, pca.components_) < 1e-8
    # With noise and c = inf every weight is 1: the iteration is PCA's.
    Xn, _ = planted_subspace(3, noise=0.3)
    pca = PCA(2).fit(Xn)
    model = R1PCA(2, c=np.inf).fit(Xn)
    assert subspace_distance(model.components_, pca.components_) < 1e-8
    np.testing.assert_allclose(np.abs(model.components_ @ pca.components_.T), np.eye(2),
                               atol=1e-8)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("update", ["subspace", "eigh"])
def test_r1pca_is_robust_to_gross_outliers(seed, update):
    X, B = planted_subspace(seed, n_out=20)  # 10% outliers of norm 8 in random directions
    pca = np.linalg.svd(X, full_matrices=False)[2][:2]
    model = R1PCA(2, update=update, center=False).fit(X)
    d_r1, d_pca = subspace_distance(model.components_, B), subspace_distance(pca, B)
    assert d_r1 < 0.3 * d_pca
    assert model.weights_[:20].max() < model.weights_[20:].min()


@pytest.mark.parametrize("update", ["eigh", "subspace"])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("c", ["median", 0.0])
def test_r1pca_objective_is_non_increasing(update, k, c):
    # "eigh": majorization-minimization, proved. "subspace": proved for k = 1; for k = 3 this
    # checks the observed behaviour (see R1PCA's Notes).
    X, _ = planted_subspace(4, n=150, m=10, k=3, n_out=15, noise=0.2)
    model = R1PCA(k, update=update, c=c, max_iter=30, tol=0).fit(X)
    obj = model.objective_
    assert model.n_iter_ == 30
    assert np.all(np.diff(obj) <= 1e-10 * obj[0])
    assert obj[-1] < obj[0]
    if c == 0.0:  # the objective is the R1 norm itself
        np.testing.assert_allclose(model.r1_norm_, obj)


def test_r1pca_tol_stops_early():
    X, _ = planted_subspace(5, n_out=10)
    model = R1PCA(2, tol=1e-3, max_iter=200).fit(X)
    assert model.n_iter_ < 200
    assert len(model.objective_) == model.n_iter_ + 1


def test_huber_objective():
    s = np.array([0.5, 1.0, 4.0])
    assert huber_objective(s, 1.0) == pytest.approx(0.25 + 1.0 + (8.0 - 1.0))
    assert huber_objective(s, 0.0) == pytest.approx(5.5)
    assert huber_objective(s, np.inf) == pytest.approx(0.25 + 1 + 16)


@pytest.mark.parametrize(
    "params, match",
    [
        ({"n_components": 0}, "n_components"),
        ({"n_components": 13}, "n_components"),
        ({"n_components": 2, "c": -1.0}, "c="),
        ({"n_components": 2, "c": "mean"}, "c="),
        ({"n_components": 2, "update": "power"}, "update"),
        ({"n_components": 2, "tol": -1}, "tol"),
        ({"n_components": 2, "max_iter": -1}, "max_iter"),
    ],
)
def test_r1pca_bad_parameters_raise(params, match):
    X, _ = planted_subspace(0)
    with pytest.raises(ParameterError, match=match):
        R1PCA(**params).fit(X)


# ----------------------------------------------------------------------------- K-SVD


def ksvd_t0_1_reference(Xt, D, n_iter):
    """Dense K-SVD with T0 = 1 on Y = Xt (m, n), from the initial dictionary D (m, K)."""
    Y, D = Xt.copy(), D.copy()
    norms = np.linalg.norm(Y, axis=0)
    K, n = D.shape[1], Y.shape[1]
    errors, n_replaced = [], 0
    for _ in range(n_iter):
        corr = D.T @ Y
        best = np.argmax(np.abs(corr), axis=0)
        G = np.zeros((K, n))
        G[best, np.arange(n)] = corr[best, np.arange(n)]
        taken = np.zeros(n, dtype=bool)
        for k in range(K):
            omega = np.flatnonzero(G[k])
            R = Y - D @ G
            if omega.size == 0:
                err = np.sum(R**2, axis=0)
                err[taken] = -1
                i = np.argmax(err)
                if err[i] > 0:
                    D[:, k] = Y[:, i] / norms[i]
                    taken[i] = True
                    n_replaced += 1
                continue
            E = R[:, omega] + np.outer(D[:, k], G[k, omega])
            u, sv, vt = np.linalg.svd(E, full_matrices=False)
            D[:, k] = u[:, 0]
            G[k, omega] = sv[0] * vt[0]
        errors.append(np.sum((Y - D @ G) ** 2))
    return D, np.array(errors), n_replaced


def planted_dictionary(seed, m=16, K=20, n=400, T0=2):
    rng = np.random.default_rng(seed)
    D = rng.normal(size=(m, K))
    D /= np.linalg.norm(D, axis=0)
    G = np.zeros((K, n))
    for i in range(n):
        idx = rng.choice(K, T0, replace=False)
        G[idx, i] = rng.choice([-1, 1], T0) * (1 + rng.random(T0))
    return (D @ G).T, D


@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_ksvd_equals_the_t0_1_reference(kind):
    # Two directions repeated 20 times (scaled) and 20 random samples: initial atoms drawn from
    # the same direction coincide, so some go unused and are replaced.
    rng = np.random.default_rng(1)
    C = rng.normal(size=(2, 5))
    X = np.r_[np.repeat(C, 20, axis=0) * rng.uniform(0.5, 2, size=(40, 1)),
              rng.normal(size=(20, 5))]
    Xin = sp.csr_matrix(X) if kind == "sparse" else X
    D0 = KSVD(12, n_nonzero_coefs=1, max_iter=0, random_state=1).fit(Xin).components_.T
    D, errors, n_replaced = ksvd_t0_1_reference(X.T, D0, 4)
    assert n_replaced > 0
    model = KSVD(12, n_nonzero_coefs=1, max_iter=4, random_state=1).fit(Xin)
    np.testing.assert_allclose(model.reconstruction_err_, errors, rtol=1e-9)
    # atoms agree up to sign (a singular vector's sign is arbitrary)
    signs = np.sign(np.sum(model.components_ * D.T, axis=1))
    np.testing.assert_allclose(model.components_, signs[:, None] * D.T, atol=1e-9)


def test_ksvd_atoms_codes_and_errors():
    X, _ = planted_dictionary(1, n=200)
    model = KSVD(20, n_nonzero_coefs=3, max_iter=8, random_state=0).fit(X)
    np.testing.assert_allclose(np.linalg.norm(model.components_, axis=1), 1.0, rtol=1e-12)
    codes = model.transform(X)
    assert codes.shape == (200, 20)
    assert (codes != 0).sum(axis=1).max() <= 3
    # OMP's coefficients are the least-squares fit on their support.
    for i in range(0, 200, 17):
        S = np.flatnonzero(codes[i])
        coef = np.linalg.lstsq(model.components_[S].T, X[i], rcond=None)[0]
        np.testing.assert_allclose(codes[i, S], coef, atol=1e-8)
    np.testing.assert_allclose(model.inverse_transform(codes), codes @ model.components_)
    # the dictionary update never increases the error left by the sparse coding
    assert np.all(model.reconstruction_err_ <= model.coding_err_ * (1 + 1e-12))
    np.testing.assert_allclose(model.transform(sp.csr_matrix(X)), codes, atol=1e-10)


def test_ksvd_error_is_non_increasing_with_kept_codes():
    X, _ = planted_dictionary(2, n=200)
    model = KSVD(20, n_nonzero_coefs=2, max_iter=12, keep_better_codes=True,
                 random_state=0).fit(X)
    err = model.reconstruction_err_
    assert np.all(np.diff(err) <= 1e-12 * err[0])
    assert np.all(model.coding_err_[1:] <= err[:-1] * (1 + 1e-12))
    assert err[-1] < 0.5 * err[0]


def test_ksvd_recovers_a_planted_dictionary():
    # Aharon et al. 2006's synthetic experiment in small: an atom counts as recovered when some
    # learned atom has |<d, d_true>| > 0.99. K-SVD is local; it need not recover all of them.
    X, D = planted_dictionary(0)
    model = KSVD(20, n_nonzero_coefs=2, max_iter=40, random_state=0).fit(X)
    recovered = np.abs(model.components_ @ D).max(axis=0) > 0.99
    assert recovered.mean() >= 0.8
    assert model.reconstruction_err_[-1] < 0.1 * model.coding_err_[0]


def test_ksvd_max_coherence_clears_duplicates():
    # T0 = 1 on signals that are scaled planted atoms: without clearing, K-SVD can settle with
    # two atoms on one direction; clearing replaces the duplicate.
    X, D = planted_dictionary(0, m=12, K=12, n=400, T0=1)
    model = KSVD(12, n_nonzero_coefs=1, max_iter=15, max_coherence=0.99, random_state=0).fit(X)
    C = np.abs(model.components_ @ model.components_.T) - np.eye(12)
    assert C.max() <= 0.99
    assert (np.abs(model.components_ @ D).max(axis=0) > 0.99).all()


@pytest.mark.parametrize(
    "params, match",
    [
        ({"n_components": 0}, "n_components"),
        ({"n_components": 4, "n_nonzero_coefs": 5}, "n_nonzero_coefs"),
        ({"n_components": 30, "n_nonzero_coefs": 17}, "n_nonzero_coefs"),
        ({"n_components": 4, "max_iter": -2}, "max_iter"),
    ],
)
def test_ksvd_bad_parameters_raise(params, match):
    X, _ = planted_dictionary(0, n=20)
    with pytest.raises(ParameterError, match=match):
        KSVD(**params).fit(X)
