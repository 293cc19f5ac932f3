"""Li & Dunson's spherical PCA (spherelets): the best sphere in an affine PCA subspace.

A different "spherical PCA" from Liu et al. (2019): instead of embedding samples on the unit
sphere, it approximates the data by a d-dimensional sphere ``S_V(c, r)`` of centre c and radius r
that lives in a (d+1)-dimensional affine subspace ``c + span(V)`` (Li & Dunson, "Geodesic
distance estimation with spherelets", cited below as "Li & Dunson"). Everything has a closed
form:

* ``V_hat``: the top d+1 eigenvectors of ``(X - 1 x_bar^T)^T (X - 1 x_bar^T)``, i.e. the top
  d+1 principal directions;
* ``c_hat = -eta*/2`` with ``eta* = -H^{-1} omega`` from the least-squares problem
  ``min_{eta, xi} sum_i (z_i^T z_i + eta^T z_i + xi)^2`` over the projected points
  ``z_i = x_bar + V_hat V_hat^T (x_i - x_bar)``;
* ``r_hat = mean_i ||z_i - c_hat||``;
* the projection ``Psi_hat(x) = c_hat + r_hat V_hat V_hat^T (x - c_hat) / ||V_hat V_hat^T
  (x - c_hat)||``.

Orientation: scikit-learn's, X of shape (n_samples, n_features) (Li & Dunson's N x D data
matrix), dense or ``scipy.sparse``. Centering is implicit for sparse X: X is never densified.

References
----------
.. [1] Li, D. and Dunson, D. B. (2019). Geodesic Distance Estimation with Spherelets.
   arXiv:1907.00296.
.. [2] Liu, K., Li, Q., Wang, H. and Tang, G. (2019). Spherical Principal Component Analysis. SDM.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, svds
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils import check_random_state
from sklearn.utils.extmath import svd_flip
from sklearn.utils.validation import check_array, check_is_fitted

from sphdist._validation import StrOptions, at_least, check_bound
from sphdist.errors import ParameterError
from sphdist.methods._base import SparseInput, affine_coordinates, fit_context

__all__ = ["LiDunsonSphericalPCA", "centered_top_directions"]


def _row_sq_norms(X: Any) -> np.ndarray:
    """``||x_i||^2`` per row, without densifying sparse X."""
    if sp.issparse(X):
        return np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    return np.einsum("ij,ij->i", X, X)


def _row_sq_dists(X: Any, c: np.ndarray) -> np.ndarray:
    """``||x_i - c||^2`` per row, without densifying sparse X (may round slightly below 0)."""
    if sp.issparse(X):
        return _row_sq_norms(X) - 2.0 * np.asarray(X @ c).ravel() + c @ c
    return _row_sq_norms(X - c)


def centered_top_directions(
    X: Any, mean: np.ndarray, k: int, *, solver: str = "auto", random_state: Any = None
) -> np.ndarray:
    """Top-k principal directions of ``X - 1 mean^T`` without forming it for sparse X.

    Parameters
    ----------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features), float64
        Data, one sample per row.
    mean : ndarray of shape (n_features,), float64
        The centre subtracted from every row (implicitly for sparse X).
    k : int
        Number of directions, ``1 <= k <= min(n_samples, n_features)``.
    solver : {"auto", "full", "arpack"}, default "auto"
        ``"full"``: LAPACK SVD of the centred dense matrix (sparse X is densified; only for
        small data). ``"arpack"``: ``scipy.sparse.linalg.svds`` on the implicitly centred
        :class:`~scipy.sparse.linalg.LinearOperator` ``v -> X v - 1 (mean^T v)``,
        ``u -> X^T u - mean (1^T u)``. ``"auto"``: ``"arpack"`` for sparse X when
        ``k < min(n_samples, n_features)``, else ``"full"``.
    random_state : int, RandomState instance or None, default None
        Seed of ARPACK's start vector.

    Returns
    -------
    ndarray of shape (k, n_features), float64
        Orthonormal rows: the right singular vectors of ``X - 1 mean^T`` (equivalently the
        eigenvectors of ``(X - 1 mean^T)^T (X - 1 mean^T)``), in decreasing order of singular
        value, signs fixed by :func:`sklearn.utils.extmath.svd_flip` (the largest-magnitude
        entry of each row is positive).

    Raises
    ------
    ParameterError
        If ``solver`` is not one of the above.

    Notes
    -----
    Memory for ``"arpack"``: O(nnz(X) + (n_samples + n_features) k) values; the centred matrix is
    never formed. Within a repeated singular value the directions are any orthonormal basis of
    its eigenspace; the subspace of the top k is unique when the k-th and (k+1)-th singular
    values differ.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [2.0, 0.0], [1.0, 0.1], [1.0, -0.1]])
    >>> centered_top_directions(X, X.mean(axis=0), 1)
    array([[1., 0.]])
    """
    if solver not in ("auto", "full", "arpack"):
        raise ParameterError(
            f"solver={solver!r} is not one of 'auto', 'full', 'arpack'. To resolve this, pass "
            "one of those."
        )
    n, m = X.shape
    mean = np.asarray(mean, dtype=np.float64)
    if solver == "auto":
        solver = "arpack" if sp.issparse(X) and k < min(n, m) else "full"
    if solver == "arpack" and k < min(n, m):
        Xs = X

        def matmat(W: np.ndarray) -> np.ndarray:
            W = np.asarray(W).reshape(m, -1)
            return np.asarray(Xs @ W) - np.outer(np.ones(n), mean @ W)

        def rmatmat(Y: np.ndarray) -> np.ndarray:
            Y = np.asarray(Y).reshape(n, -1)
            return np.asarray(Xs.T @ Y) - np.outer(mean, Y.sum(axis=0))

        op = LinearOperator(
            (n, m), matvec=matmat, rmatvec=rmatmat, matmat=matmat, rmatmat=rmatmat,
            dtype=np.float64,
        )
        v0 = check_random_state(random_state).uniform(-1, 1, min(n, m))
        _, s, Vt = svds(op, k=k, v0=v0, tol=0, solver="arpack")
        Vt = Vt[np.argsort(s)[::-1]]
    else:
        dense = X.toarray() if sp.issparse(X) else np.asarray(X)
        Vt = np.linalg.svd(dense - mean, full_matrices=False)[2][:k]
    _, Vt = svd_flip(None, Vt, u_based_decision=False)
    return np.ascontiguousarray(Vt, dtype=np.float64)


class LiDunsonSphericalPCA(
    SparseInput, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator
):
    """Li & Dunson's spherical PCA: the sphere ``S_V(c, r)`` that best fits the data.

    Fits a d-sphere of centre ``center_`` and radius ``radius_`` in the (d+1)-dimensional
    affine subspace ``center_ + span(components_^T)``, with the closed forms of Li & Dunson
    (see the module docstring): ``V_hat`` the top d+1 principal directions, ``c_hat = -eta*/2``,
    ``r_hat = mean ||z_i - c_hat||``, and the projection ``Psi_hat``.

    Parameters
    ----------
    n_components : int, default 2
        d, the sphere's intrinsic dimension; the affine subspace has dimension d+1, so
        ``1 <= d`` and ``d + 1 <= n_features``.
    svd_solver : {"auto", "full", "arpack"}, default "auto"
        How ``V_hat`` is computed; see :func:`centered_top_directions`. ``"auto"`` keeps sparse
        X sparse (implicit centering with ARPACK).
    random_state : int, RandomState instance or None, default None
        Seed of ARPACK's start vector (the fit is otherwise deterministic).

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,), float64
        ``x_bar``, the sample mean.
    components_ : ndarray of shape (n_components + 1, n_features), float64
        ``V_hat^T``: orthonormal rows, the top d+1 principal directions.
    center_ : ndarray of shape (n_features,), float64
        ``c_hat``, the sphere's centre; it lies in the affine subspace
        ``mean_ + span(components_^T)``.
    radius_ : float
        ``r_hat``, in the units of X.
    fitting_error_ : float
        :meth:`fitting_error` of the training data.
    n_features_in_ : int
        Number of features seen in ``fit``.

    Notes
    -----
    The seed writes the centre's least-squares problem in the ambient space R^D, where
    ``H = sum_i (z_i - z_bar)(z_i - z_bar)^T`` has rank d+1 only: every z_i lies in the affine
    subspace, so the component of eta orthogonal to ``span(V_hat)`` is absorbed by xi and is not
    determined. We solve the same problem in the subspace coordinates
    ``y_i = V_hat^T (x_i - x_bar)`` (``H_y = sum_i (y_i - y_bar)(y_i - y_bar)^T``,
    ``omega_y = sum_i (||y_i||^2 - mean_j ||y_j||^2)(y_i - y_bar)``, ``eta_y = -H_y^{-1} omega_y``,
    ``c_y = -eta_y / 2``) and return ``c_hat = x_bar + V_hat c_y``: the solution of the seed's
    problem whose free component is chosen so that c_hat lies in the affine subspace, where the
    sphere and ``Psi_hat`` live. (Its component in ``span(V_hat)`` equals that of the seed's
    ``-eta*/2`` for every choice.) If ``H_y`` is singular (fewer than d+2 affinely independent
    samples) the least-squares solution of minimum norm is taken.

    Memory: O(nnz(X) + n_samples (d+1)) for sparse X with ``svd_solver="auto"``; ``transform``
    and :meth:`fitting_error` never densify sparse X, while :meth:`project` and
    :meth:`inverse_transform` return dense (n_samples, n_features) arrays.

    Examples
    --------
    >>> import numpy as np
    >>> t = np.linspace(0, 2 * np.pi, 12, endpoint=False)
    >>> X = np.c_[3 + 2 * np.cos(t), -1 + 2 * np.sin(t), np.full(12, 5.0)]  # a circle in R^3
    >>> model = LiDunsonSphericalPCA(n_components=1).fit(X)
    >>> np.round(model.center_, 6) + 0.0, round(model.radius_, 6)
    (array([ 3., -1.,  5.]), 2.0)
    >>> bool(model.fitting_error(X) < 1e-20)
    True
    """

    def __init__(
        self, n_components: int = 2, *, svd_solver: str = "auto", random_state: Any = None
    ):
        self.n_components = n_components
        self.svd_solver = svd_solver
        self.random_state = random_state

    _min_fit_samples = 2
    _parameter_constraints: dict = {
        "n_components": [at_least(1)],
        "svd_solver": [StrOptions({"auto", "full", "arpack"})],
        "random_state": "no_validation",
    }

    @fit_context
    def fit(self, X: Any, y: Any = None) -> LiDunsonSphericalPCA:
        """Fit the sphere (Li & Dunson: V_hat, c_hat = -eta*/2, r_hat).

        Parameters
        ----------
        X : {ndarray, sparse matrix} of shape (n_samples, n_features)
            Training data, one sample per row; sparse X is centred implicitly.
        y : ignored

        Returns
        -------
        self : LiDunsonSphericalPCA
            The fitted estimator.

        Raises
        ------
        ParameterError
            If ``n_components`` is not an integer with ``1 <= n_components`` and
            ``n_components + 1 <= n_features``, or ``svd_solver`` is unknown (a ``ValueError``;
            also scikit-learn's ``InvalidParameterError``).
        ValueError
            If X holds NaN or Inf, or has fewer than 2 samples.
        """
        X = self._validate(X, reset=True)
        n, m = X.shape
        d = check_bound(
            "n_components", self.n_components, m - 1,
            f" for X with n_features = {m} (the sphere of dimension d lives in a "
            "(d+1)-dimensional subspace, so n_components <= n_features - 1)",
        )
        mean = np.asarray(X.mean(axis=0), dtype=np.float64).ravel()
        k = min(d + 1, n)
        Vt = centered_top_directions(
            X, mean, k, solver=self.svd_solver, random_state=self.random_state
        )
        if k < d + 1:  # fewer samples than subspace dimensions: complete the basis
            extra = check_random_state(self.random_state).standard_normal((m, d + 1 - k))
            Q = np.linalg.qr(np.c_[Vt.T, extra])[0]
            Vt = np.r_[Vt, Q[:, k:].T]
        Y = np.asarray(X @ Vt.T) - mean @ Vt.T  # y_i = V^T (x_i - x_bar), (n, d+1)
        Yc = Y - Y.mean(axis=0)
        q = np.einsum("ij,ij->i", Y, Y)
        H = Yc.T @ Yc
        omega = Yc.T @ (q - q.mean())
        eta = -np.linalg.lstsq(H, omega, rcond=None)[0]
        c_y = -eta / 2.0
        self.mean_ = mean
        self.components_ = Vt
        self.center_ = mean + c_y @ Vt
        self.radius_ = float(np.mean(np.linalg.norm(Y - c_y, axis=1)))
        self._n_features_out = d + 1
        self.fitting_error_ = self.fitting_error(X)
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Coordinates on the sphere: ``V_hat^T (x - c_hat) / ||V_hat^T (x - c_hat)||``.

        Parameters
        ----------
        X : {ndarray, sparse matrix} of shape (n_samples, n_features)
            Samples in the fitted feature space.

        Returns
        -------
        ndarray of shape (n_samples, n_components + 1), float64
            Unit rows u with ``Psi_hat(x) = center_ + radius_ * u @ components_`` (Li & Dunson,
            the projection map). A sample whose projection onto the subspace is the centre
            itself is mapped to the first basis vector.

        Raises
        ------
        ValueError
            If X has another number of features than in ``fit``, or holds NaN or Inf.
        """
        _, P = affine_coordinates(self, X, self.center_)  # V_hat^T (x_i - c_hat), (n, d+1)
        norms = np.linalg.norm(P, axis=1)
        U = np.zeros_like(P)
        ok = norms > 0
        U[ok] = P[ok] / norms[ok, None]
        U[~ok, 0] = 1.0
        return U

    def inverse_transform(self, X: Any) -> np.ndarray:
        """Points of the sphere from their coordinates: ``c_hat + r_hat * u V_hat^T``.

        Parameters
        ----------
        X : ndarray of shape (n_samples, n_components + 1), float64
            Coordinates on the sphere, as returned by :meth:`transform` (rows are used as given;
            unit rows give points of the sphere).

        Returns
        -------
        ndarray of shape (n_samples, n_features), float64
            Points in the ambient space.

        Raises
        ------
        ValueError
            If X does not have n_components + 1 columns.
        """
        check_is_fitted(self)
        U = check_array(X, dtype=np.float64)
        if U.shape[1] != self.components_.shape[0]:
            raise ValueError(
                f"X has {U.shape[1]} columns, but the sphere coordinates have "
                f"n_components + 1 = {self.components_.shape[0]}. To resolve this, pass the "
                "output of transform."
            )
        return self.center_ + self.radius_ * (U @ self.components_)

    def project(self, X: Any) -> np.ndarray:
        """The projection ``Psi_hat(x)`` onto the fitted sphere (Li & Dunson).

        Parameters
        ----------
        X : {ndarray, sparse matrix} of shape (n_samples, n_features)
            Samples to project, in the fitted feature space.

        Returns
        -------
        ndarray of shape (n_samples, n_features), float64
            ``c_hat + r_hat V_hat V_hat^T (x - c_hat) / ||V_hat V_hat^T (x - c_hat)||``, the point
            of the sphere closest to x. Dense even for sparse X.

        Raises
        ------
        ValueError
            As :meth:`transform`.
        """
        return self.inverse_transform(self.transform(X))

    def squared_distances(self, X: Any) -> np.ndarray:
        """``||x_i - Psi_hat(x_i)||^2`` per sample, without densifying sparse X.

        Parameters
        ----------
        X : {ndarray, sparse matrix} of shape (n_samples, n_features)
            Samples; sparse X stays sparse (the orthogonal part comes from ``||x - c||^2``).

        Returns
        -------
        ndarray of shape (n_samples,), float64
            Squared Euclidean distance to the sphere, in squared units of X:
            ``||(I - V V^T)(x - c)||^2 + (||V^T (x - c)|| - r)^2`` (the distance orthogonal to the
            subspace plus the radial distance within it).

        Raises
        ------
        ValueError
            As :meth:`transform`.
        """
        X, P = affine_coordinates(self, X, self.center_)
        p = np.linalg.norm(P, axis=1)
        if sp.issparse(X):
            sq = _row_sq_dists(X, self.center_)
            orth = np.maximum(sq - p**2, 0.0)
        else:
            R = (X - self.center_) - P @ self.components_
            orth = np.einsum("ij,ij->i", R, R)
        return orth + (p - self.radius_) ** 2

    def fitting_error(self, X: Any) -> float:
        """The fitting error: mean squared distance to the sphere, ``mean ||x - Psi_hat(x)||^2``.

        Parameters
        ----------
        X : {ndarray, sparse matrix} of shape (n_samples, n_features)
            Samples, e.g. held-out data (``fitting_error_`` is that of the training data).

        Returns
        -------
        float
            In squared units of X; 0 exactly when every sample lies on the fitted sphere.

        Raises
        ------
        ValueError
            As :meth:`transform`.
        """
        return float(np.mean(self.squared_distances(X)))

    def score_samples(self, X: Any) -> np.ndarray:
        """Negative squared distance to the sphere (higher is better, as scikit-learn expects).

        Parameters
        ----------
        X : {ndarray, sparse matrix} of shape (n_samples, n_features)
            Samples to score one by one.

        Returns
        -------
        ndarray of shape (n_samples,), float64
            ``-squared_distances(X)``.

        Raises
        ------
        ValueError
            As :meth:`transform`.
        """
        return -self.squared_distances(X)

    def score(self, X: Any, y: Any = None) -> float:
        """Negative fitting error, ``-fitting_error(X)``.

        Parameters
        ----------
        X : {ndarray, sparse matrix} of shape (n_samples, n_features)
            Samples scored together (scikit-learn's ``score``, e.g. in a grid search).
        y : ignored

        Returns
        -------
        float
            ``-mean ||x - Psi_hat(x)||^2``.

        Raises
        ------
        ValueError
            As :meth:`transform`.
        """
        return -self.fitting_error(X)
