"""LiDunsonSphericalPCA against a dense NumPy reference of Li & Dunson's closed forms.

The reference below follows Li & Dunson (2019, "Geodesic Distance Estimation with Spherelets")
literally in the ambient space R^D: V_hat from the eigenvectors of (X - 1 x_bar)^T (X - 1 x_bar),
z_i, H, omega, eta* = -H^+ omega, c_hat = -eta*/2, r_hat = mean ||z_i - c_hat||, Psi_hat. H has
rank d+1 in R^D, so the centre is determined only up to a vector orthogonal to span(V_hat); the
reference moves it into the affine subspace x_bar + span(V_hat), which is what the estimator
documents.
Orientation: (n_samples, n_features), as the estimator.
"""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.utils.estimator_checks import parametrize_with_checks

from sphdist.errors import ParameterError
from sphdist.methods.spherelets import LiDunsonSphericalPCA, centered_top_directions


@parametrize_with_checks([LiDunsonSphericalPCA(n_components=1)])
def test_sklearn_estimator_contract(estimator, check):
    check(estimator)


def li_dunson_reference(X, d):
    """Dense Li & Dunson: returns (V (D, d+1), c_seed, c, r, Psi as a function)."""
    X = np.asarray(X, dtype=np.float64)
    N, D = X.shape
    x_bar = X.mean(axis=0)
    S = (X - x_bar).T @ (X - x_bar)
    evals, evecs = np.linalg.eigh(S)
    V = evecs[:, np.argsort(evals)[::-1][: d + 1]]
    P = V @ V.T
    Z = x_bar + (X - x_bar) @ P  # z_i = x_bar + V V^T (x_i - x_bar)
    z_bar = Z.mean(axis=0)
    q = np.sum(Z * Z, axis=1)
    H = (Z - z_bar).T @ (Z - z_bar)
    omega = ((q - q.mean())[:, None] * (Z - z_bar)).sum(axis=0)
    eta = -np.linalg.pinv(H, rtol=1e-9, hermitian=True) @ omega
    c_seed = -eta / 2
    c = c_seed + (np.eye(D) - P) @ (x_bar - c_seed)  # the solution in the affine subspace
    r = np.mean(np.linalg.norm(Z - c, axis=1))

    def psi(Y):
        W = (Y - c) @ P
        return c + r * W / np.linalg.norm(W, axis=1, keepdims=True)

    return V, c_seed, c, r, psi


def sphere_in_subspace(rng, n, D, d, center, radius):
    """n points exactly on a d-sphere of the given centre and radius in a random affine
    (d+1)-subspace of R^D; returns the points and the subspace basis (D, d+1)."""
    B = np.linalg.qr(rng.normal(size=(D, d + 1)))[0]
    U = rng.normal(size=(n, d + 1))
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    return center + radius * U @ B.T, B


def projector(rows):
    return rows.T @ rows


@pytest.fixture(scope="module")
def noisy():
    """Points near a 2-sphere in R^8 (off-subspace and radial noise)."""
    rng = np.random.default_rng(3)
    X, _ = sphere_in_subspace(rng, 60, 8, 2, rng.normal(size=8), 3.0)
    return X + 0.2 * rng.normal(size=X.shape)


@pytest.fixture(scope="module")
def sparse_X():
    return sp.random(80, 30, density=0.2, format="csr", random_state=5, dtype=np.float64)


@pytest.mark.parametrize("d", [1, 2, 4])
def test_fit_equals_the_dense_reference(noisy, d):
    V, c_seed, c, r, psi = li_dunson_reference(noisy, d)
    model = LiDunsonSphericalPCA(n_components=d).fit(noisy)
    np.testing.assert_allclose(projector(model.components_), V @ V.T, atol=1e-9)
    np.testing.assert_allclose(model.mean_, noisy.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(model.center_, c, atol=1e-8)
    assert model.radius_ == pytest.approx(r, rel=1e-10)
    # The estimator's centre has the seed's -eta*/2 component in span(V_hat).
    np.testing.assert_allclose(V.T @ model.center_, V.T @ c_seed, atol=1e-8)
    np.testing.assert_allclose(model.project(noisy), psi(noisy), atol=1e-8)
    dist = np.sum((noisy - psi(noisy)) ** 2, axis=1)
    np.testing.assert_allclose(model.squared_distances(noisy), dist, rtol=1e-8, atol=1e-12)
    assert model.fitting_error_ == pytest.approx(dist.mean(), rel=1e-8)
    np.testing.assert_allclose(model.score_samples(noisy), -dist, rtol=1e-8, atol=1e-12)
    assert model.score(noisy) == pytest.approx(-dist.mean(), rel=1e-8)


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("kind", ["dense", "sparse"])
def test_points_on_a_sphere_are_recovered(d, kind):
    rng = np.random.default_rng(d)
    center, radius = 5 * rng.normal(size=9), 2.5
    X, B = sphere_in_subspace(rng, 50, 9, d, center, radius)
    model = LiDunsonSphericalPCA(n_components=d, random_state=0).fit(
        sp.csr_matrix(X) if kind == "sparse" else X
    )
    np.testing.assert_allclose(projector(model.components_), B @ B.T, atol=1e-8)
    np.testing.assert_allclose(model.center_, center, atol=1e-8)
    assert model.radius_ == pytest.approx(radius, rel=1e-10)
    assert model.fitting_error_ < 1e-12 * radius**2
    np.testing.assert_allclose(model.project(X), X, atol=1e-8)
    # transform: the unit coordinates of (x - c) in the basis components_.
    np.testing.assert_allclose(model.transform(X), (X - center) @ model.components_.T / radius,
                               atol=1e-8)


def test_projection_is_idempotent_and_lands_on_the_sphere(noisy):
    model = LiDunsonSphericalPCA(n_components=2).fit(noisy)
    Y = model.project(noisy)
    np.testing.assert_allclose(model.project(Y), Y, atol=1e-10)
    np.testing.assert_allclose(np.linalg.norm(Y - model.center_, axis=1), model.radius_,
                               rtol=1e-12)
    # Y - c lies in span(V_hat).
    R = (Y - model.center_) - (Y - model.center_) @ projector(model.components_)
    assert np.abs(R).max() < 1e-10
    assert model.fitting_error(Y) < 1e-16 * model.radius_**2


def test_transform_inverse_transform(noisy):
    model = LiDunsonSphericalPCA(n_components=2).fit(noisy)
    U = model.transform(noisy)
    assert U.shape == (60, 3)
    np.testing.assert_allclose(np.linalg.norm(U, axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(
        model.inverse_transform(U), model.center_ + model.radius_ * U @ model.components_
    )
    np.testing.assert_allclose(model.inverse_transform(U), model.project(noisy))
    np.testing.assert_allclose(model.components_ @ model.components_.T, np.eye(3), atol=1e-12)


def test_sample_at_the_centre_maps_to_the_first_basis_vector(noisy):
    model = LiDunsonSphericalPCA(n_components=2).fit(noisy)
    x = model.center_[None, :]
    np.testing.assert_allclose(model.transform(x), [[1.0, 0.0, 0.0]])
    assert model.squared_distances(x)[0] == pytest.approx(model.radius_**2, rel=1e-10)


def _forbid_densify(monkeypatch, X):
    def boom(*args, **kwargs):
        raise AssertionError("sparse X was densified")

    for name in ("toarray", "todense"):
        monkeypatch.setattr(type(X), name, boom)


def test_sparse_equals_dense_without_densifying(sparse_X, monkeypatch):
    dense = LiDunsonSphericalPCA(n_components=3, svd_solver="full").fit(sparse_X.toarray())
    Xd = sparse_X.toarray()
    with monkeypatch.context() as mp:
        _forbid_densify(mp, sparse_X)
        model = LiDunsonSphericalPCA(n_components=3, random_state=0).fit(sparse_X)
        U = model.transform(sparse_X)
        dist = model.squared_distances(sparse_X)
    np.testing.assert_allclose(
        projector(model.components_), projector(dense.components_), atol=1e-8
    )
    np.testing.assert_allclose(model.center_, dense.center_, atol=1e-8)
    assert model.radius_ == pytest.approx(dense.radius_, rel=1e-8)
    np.testing.assert_allclose(U @ model.components_, dense.transform(Xd) @ dense.components_,
                               atol=1e-8)
    np.testing.assert_allclose(dist, dense.squared_distances(Xd), atol=1e-8)
    assert model.fitting_error_ == pytest.approx(dense.fitting_error_, rel=1e-8)
    np.testing.assert_allclose(model.project(sparse_X), dense.project(Xd), atol=1e-8)
    _, _, c, r, psi = li_dunson_reference(Xd, 3)
    np.testing.assert_allclose(model.center_, c, atol=1e-8)
    np.testing.assert_allclose(model.project(sparse_X), psi(Xd), atol=1e-8)


@pytest.mark.parametrize("k", [1, 4])
def test_centered_top_directions_arpack_equals_full(sparse_X, k):
    mean = np.asarray(sparse_X.mean(axis=0)).ravel()
    arpack = centered_top_directions(sparse_X, mean, k, solver="arpack", random_state=0)
    full = centered_top_directions(sparse_X, mean, k, solver="full")
    Xc = sparse_X.toarray() - mean
    evals, evecs = np.linalg.eigh(Xc.T @ Xc)
    ref = evecs[:, np.argsort(evals)[::-1][:k]].T
    for Vt in (arpack, full):
        np.testing.assert_allclose(Vt @ Vt.T, np.eye(k), atol=1e-12)
        np.testing.assert_allclose(np.abs(Vt @ ref.T), np.eye(k), atol=1e-8)
        # svd_flip: the largest-magnitude entry of every row is positive
        assert np.all(Vt[np.arange(k), np.abs(Vt).argmax(axis=1)] > 0)


def test_few_samples_complete_the_basis():
    X = np.random.default_rng(0).normal(size=(3, 10))
    model = LiDunsonSphericalPCA(n_components=4, random_state=0).fit(X)
    np.testing.assert_allclose(model.components_ @ model.components_.T, np.eye(5), atol=1e-12)
    assert np.isfinite(model.radius_)


@pytest.mark.parametrize("n_components", [0, -1, 8, 1.5, True])
def test_bad_n_components_raises(noisy, n_components):
    with pytest.raises(ParameterError, match="n_components"):
        LiDunsonSphericalPCA(n_components=n_components).fit(noisy)


def test_bad_solver_and_shapes_raise(noisy):
    with pytest.raises(ParameterError, match="solver"):
        LiDunsonSphericalPCA(svd_solver="lapack").fit(noisy)
    model = LiDunsonSphericalPCA(n_components=2).fit(noisy)
    with pytest.raises(ValueError, match="features"):
        model.transform(noisy[:, :5])
    with pytest.raises(ValueError, match="columns"):
        model.inverse_transform(np.ones((2, 2)))
    with pytest.raises(ValueError):
        model.transform(np.where(noisy > 0, np.nan, noisy))
