"""Baselines of Liu et al. (2019), Table 1, that scikit-learn does not provide.

* :class:`R1PCA`: rotational invariant L1-norm PCA (Ding, Zhou, He & Zha, "R1-PCA: Rotational
  Invariant L1-norm Principal Component Analysis for Robust Subspace Factorization", ICML 2006).
* :class:`KSVD`: the K-SVD dictionary (Aharon, Elad & Bruckstein, "K-SVD: An Algorithm for
  Designing Overcomplete Dictionaries for Sparse Representation", IEEE Trans. Signal Processing
  54(11), 2006), sparse coding by orthogonal matching pursuit.

The other baselines of Table 1 are scikit-learn's own, used directly by the pipelines: k-means
(:class:`sklearn.cluster.KMeans`), PCA (:class:`sklearn.decomposition.TruncatedSVD` /
:class:`~sklearn.decomposition.PCA`) and NMF with multiplicative updates
(``sklearn.decomposition.NMF(solver="mu")``).

Orientation: scikit-learn's, X of shape (n_samples, n_features), dense or ``scipy.sparse``.
Internally the papers' orientation is used (samples as columns: Ding et al.'s x_i, Aharon et
al.'s Y = [y_1 ... y_N]).

References
----------
.. [1] Ding, C., Zhou, D., He, X. and Zha, H. (2006). R1-PCA: Rotational Invariant L1-norm
   Principal Component Analysis for Robust Subspace Factorization. ICML.
.. [2] Aharon, M., Elad, M. and Bruckstein, A. (2006). K-SVD: An Algorithm for Designing
   Overcomplete Dictionaries for Sparse Representation. IEEE Trans. Signal Processing 54(11).
.. [3] Liu, K., Li, Q., Wang, H. and Tang, G. (2019). Spherical Principal Component Analysis. SDM.
"""

from __future__ import annotations

import warnings
from numbers import Real
from typing import Any

import numpy as np
import scipy.linalg
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.linear_model import orthogonal_mp_gram
from sklearn.utils import check_random_state
from sklearn.utils.extmath import svd_flip
from sklearn.utils.validation import check_array, check_is_fitted

from sphdist._validation import Number, StrOptions, at_least, check_bound
from sphdist.methods._base import SparseInput, affine_coordinates, fit_context
from sphdist.methods.spherelets import _row_sq_dists, centered_top_directions

__all__ = ["R1PCA", "KSVD"]


def huber_objective(s: np.ndarray, c: float) -> float:
    """Ding et al.'s Huber objective ``sum_i rho_c(s_i)``; the R1 norm ``sum_i s_i`` if c = 0.

    Parameters
    ----------
    s : ndarray of shape (n_samples,), float64
        Residual norms ``s_i = ||x_i - U U^T x_i||_2 >= 0``.
    c : float
        Huber threshold, >= 0 (``np.inf`` gives the PCA objective ``sum_i s_i^2``).

    Returns
    -------
    float
        ``sum_i rho_c(s_i)`` with ``rho_c(s) = s^2`` for ``s <= c`` and ``2 c s - c^2`` otherwise
        (Ding et al. 2006, their Huber M-estimator form); for ``c = 0`` the R1 norm
        ``sum_i s_i``.

    Examples
    --------
    >>> huber_objective(np.array([1.0, 3.0]), 2.0)  # 1 + (2*2*3 - 4)
    9.0
    >>> huber_objective(np.array([1.0, 3.0]), 0.0)
    4.0
    """
    s = np.asarray(s, dtype=np.float64)
    if c == 0:
        return float(s.sum())
    if not np.isfinite(c):
        return float(np.sum(s**2))
    return float(np.where(s <= c, s**2, 2 * c * s - c**2).sum())


class R1PCA(SparseInput, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Rotational invariant L1-norm PCA (R1-PCA), Ding, Zhou, He & Zha (ICML 2006).

    Finds the k-dimensional subspace (orthonormal U, ``components_ = U^T``) minimising a robust
    sum of the Euclidean residual norms ``s_i = ||x_i - U U^T x_i||_2`` (the R1 norm
    ``sum_i s_i`` of Ding et al., rotational invariant unlike the entry-wise L1 norm) in
    its Huber form ``sum_i rho_c(s_i)`` (:func:`huber_objective`). The solution is the top-k
    eigenvectors of the re-weighted ("robust") covariance ``C_r = sum_i w_i x_i x_i^T``.

    Implemented variant (Ding et al. 2006, Algorithm "R1-PCA", a subspace iteration):

    1. ``U`` = the top-k principal directions (ordinary PCA);
    2. ``c`` = the median of the residuals ``s_i`` of that PCA solution (``c="median"``), fixed
       for the rest of the fit;
    3. repeat: Huber weights ``w_i = 1`` if ``s_i <= c`` else ``c / s_i`` (i.e. proportional to
       ``1 / max(s_i, c)``); ``U <- C_r U``; ``U <- orthonormalize(U)`` (QR) -- one
       subspace-iteration step per re-weighting (``update="subspace"``);
    4. stop when the subspace moves less than ``tol`` (``||U U^T - U' U'^T||_F / sqrt(2)``, the
       2-norm of the sines of the principal angles) or after ``max_iter`` iterations, then
       rotate U to the eigenvectors of ``U^T C_r U`` (Rayleigh-Ritz; the subspace is unchanged).

    ``update="eigh"`` replaces step 3's single subspace-iteration step by the exact top-k
    eigenvectors of ``C_r`` (iteratively re-weighted least squares). ``c=0`` gives the pure R1
    weights ``w_i = 1 / s_i`` (floored at ``1e-12`` times the RMS sample norm).

    Parameters
    ----------
    n_components : int
        k, the dimension of the subspace; ``1 <= k <= min(n_samples, n_features)``.
    c : "median" or float, default "median"
        Huber threshold in the units of X: ``"median"`` as in Ding et al., a number >= 0 to fix
        it (``0``: pure R1 weights; ``np.inf``: all weights 1, i.e. ordinary PCA).
    update : {"subspace", "eigh"}, default "subspace"
        One subspace-iteration step per re-weighting (the paper), or the exact eigenvectors of
        the weighted covariance (forms a dense (n_features, n_features) matrix).
    center : bool, default True
        Subtract the sample mean (computed once, implicitly for sparse X) before everything
        else. Ding et al. assume centred data; ``False`` fits a linear subspace through 0.
    max_iter : int, default 100
        Maximum number of re-weighting iterations.
    tol : float, default 1e-6
        Stop when the subspace moves less than this (see step 4), >= 0. The move is computed
        as ``sqrt(k - ||U^T U'||_F^2)``, resolvable down to about 1e-8; a smaller tol runs
        ``max_iter`` iterations.
    random_state : int, RandomState instance or None, default None
        Seed of ARPACK's start vector in the initial PCA of sparse X.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features), float64
        ``U^T``: orthonormal rows, the robust principal directions in decreasing order of the
        weighted variance, signs fixed by :func:`sklearn.utils.extmath.svd_flip`.
    mean_ : ndarray of shape (n_features,), float64
        The subtracted mean (zeros when ``center=False``).
    c_ : float
        The Huber threshold used, in the units of X.
    weights_ : ndarray of shape (n_samples,), float64
        Final Huber weights of the training samples, in (0, 1]; small for outliers.
    objective_ : ndarray of shape ``(n_iter_ + 1,)``, float64
        ``huber_objective(s, c_)`` at the PCA start and after every iteration.
    r1_norm_ : ndarray of shape ``(n_iter_ + 1,)``, float64
        ``sum_i s_i`` at the same points.
    n_iter_ : int
        Iterations run.
    n_features_in_ : int
        Number of features seen in ``fit``.

    Notes
    -----
    Monotonicity. ``rho_c(s)`` is a concave function of ``s^2`` whose derivative is proportional
    to ``w(s) = 1 / max(s, c)``, so the weighted least-squares problem
    ``min_U sum_i w_i s_i(U)^2`` (weights of the current U) majorises the objective. With
    ``update="eigh"`` every step minimises that majoriser exactly, hence ``objective_`` is
    non-increasing (proved; for c = 0 up to ``n * 1e-12 * RMS`` from the floor). With
    ``update="subspace"`` the same holds whenever one subspace-iteration step does not decrease
    ``tr(U^T C_r U)`` for the positive semi-definite ``C_r``: true for k = 1 by the log-convexity
    of ``u^T C^p u`` in p, observed in all our trials for k > 1, not proved here. ``r1_norm_`` is
    not guaranteed to decrease for c > 0 (it is the objective only for c = 0). ``c`` is fixed
    after the start, as in the algorithm above; re-estimating it every iteration would change the
    objective between iterations.

    Cost per iteration: two products with X (O(nnz(X) k)) for ``"subspace"``; for ``"eigh"``
    a dense (n_features, n_features) weighted covariance (8 n_features^2 bytes) and its
    eigendecomposition.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2)) @ rng.normal(size=(2, 10))  # a plane in R^10
    >>> X[:20] = 8 * rng.normal(size=(20, 10))  # 10% gross outliers
    >>> model = R1PCA(n_components=2, center=False).fit(X)
    >>> bool(model.weights_[:20].max() < model.weights_[20:].min())  # outliers down-weighted
    True
    """

    _parameter_constraints: dict = {
        "n_components": [at_least(1)],
        "c": [StrOptions({"median"}), Number(Real, 0, np.inf, closed="both")],
        "update": [StrOptions({"subspace", "eigh"})],
        "center": "no_validation",
        "max_iter": [at_least(0)],
        "tol": [Number(Real, 0, np.inf, closed="both")],
        "random_state": "no_validation",
    }

    def __init__(
        self,
        n_components: int,
        *,
        c: float | str = "median",
        update: str = "subspace",
        center: bool = True,
        max_iter: int = 100,
        tol: float = 1e-6,
        random_state: Any = None,
    ):
        self.n_components = n_components
        self.c = c
        self.update = update
        self.center = center
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state

    @fit_context
    def fit(self, X: Any, y: Any = None) -> R1PCA:
        """Fit the robust subspace (Ding et al. 2006, Algorithm R1-PCA; see the class docstring).

        Parameters
        ----------
        X : {ndarray, sparse matrix} of shape (n_samples, n_features)
            Training data, one sample per row; sparse X is centred implicitly.
        y : ignored

        Returns
        -------
        self : R1PCA
            The fitted estimator.

        Raises
        ------
        ParameterError
            If a parameter is out of its documented range, or ``n_components`` exceeds
            ``min(n_samples, n_features)`` (a ``ValueError``).
        ValueError
            If X holds NaN or Inf.
        """
        X = self._validate(X, reset=True)
        n, m = X.shape
        k = check_bound(
            "n_components", self.n_components, min(n, m), f" (n_samples = {n}, n_features = {m})"
        )
        mu = (
            np.asarray(X.mean(axis=0), dtype=np.float64).ravel() if self.center
            else np.zeros(m)
        )
        sq = np.maximum(_row_sq_dists(X, mu), 0.0)

        def project(U: np.ndarray) -> np.ndarray:  # (X - 1 mu^T) U
            return np.asarray(X @ U) - mu @ U

        def residuals(XU: np.ndarray) -> np.ndarray:  # s_i = ||x_i - U U^T x_i||
            return np.sqrt(np.maximum(sq - np.einsum("ij,ij->i", XU, XU), 0.0))

        def weighted_product(w: np.ndarray, B: np.ndarray) -> np.ndarray:  # (X-1mu^T)^T W B
            WB = w[:, None] * B
            return np.asarray(X.T @ WB) - np.outer(mu, WB.sum(axis=0))

        def weighted_cov(w: np.ndarray) -> np.ndarray:  # C_r, dense (m, m)
            if sp.issparse(X):
                C = np.asarray((X.T @ X.multiply(w[:, None]).tocsr()).toarray())
                xw = np.asarray(X.T @ w).ravel()
                return C - np.outer(mu, xw) - np.outer(xw, mu) + w.sum() * np.outer(mu, mu)
            Xc = X - mu
            return (Xc * w[:, None]).T @ Xc

        U = centered_top_directions(X, mu, k, random_state=self.random_state).T
        XU = project(U)
        s = residuals(XU)
        floor = 1e-12 * np.sqrt(max(sq.mean(), np.finfo(float).tiny))
        c = float(np.median(s)) if isinstance(self.c, str) else float(self.c)
        c_eff = max(c, floor)

        def weights(s: np.ndarray) -> np.ndarray:
            w = np.ones_like(s)
            big = s > c_eff
            w[big] = c_eff / s[big]  # empty when c is inf
            return w

        objective = [huber_objective(s, c)]
        r1 = [float(s.sum())]
        n_iter = 0
        for _ in range(self.max_iter):
            w = weights(s)
            if self.update == "subspace":
                U_new, R = np.linalg.qr(weighted_product(w, XU))
                U_new = U_new * np.where(np.diag(R) < 0, -1.0, 1.0)
            else:
                _, evecs = np.linalg.eigh(weighted_cov(w))
                U_new = evecs[:, ::-1][:, :k]
            move = np.sqrt(max(k - np.linalg.norm(U.T @ U_new) ** 2, 0.0))
            U = U_new
            XU = project(U)
            s = residuals(XU)
            objective.append(huber_objective(s, c))
            r1.append(float(s.sum()))
            n_iter += 1
            if move < self.tol:
                break
        w = weights(s)
        B = U.T @ weighted_product(w, XU)  # U^T C_r U, Rayleigh-Ritz
        evecs = np.linalg.eigh((B + B.T) / 2)[1][:, ::-1]
        _, Vt = svd_flip(None, (U @ evecs).T, u_based_decision=False)
        self.components_ = np.ascontiguousarray(Vt)
        self.mean_ = mu
        self.c_ = c
        self.weights_ = w
        self.objective_ = np.asarray(objective)
        self.r1_norm_ = np.asarray(r1)
        self.n_iter_ = n_iter
        self._n_features_out = k
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Coordinates in the robust subspace, ``(x - mean_) U``.

        Parameters
        ----------
        X : {ndarray, sparse matrix} of shape (n_samples, n_features)
            Samples in the fitted feature space.

        Returns
        -------
        ndarray of shape (n_samples, n_components), float64
            ``U^T (x_i - mean_)`` per row.

        Raises
        ------
        ValueError
            If X has another number of features than in ``fit``, or holds NaN or Inf.
        """
        return affine_coordinates(self, X, self.mean_)[1]

    def inverse_transform(self, X: Any) -> np.ndarray:
        """Points of the subspace from their coordinates, ``X U^T + mean_``.

        Parameters
        ----------
        X : ndarray of shape (n_samples, n_components), float64
            Coordinates, as returned by :meth:`transform`.

        Returns
        -------
        ndarray of shape (n_samples, n_features), float64
            ``mean_ + U U^T (x - mean_)`` for coordinates of x.
        """
        check_is_fitted(self)
        Y = check_array(X, dtype=np.float64)
        return Y @ self.components_ + self.mean_


_OMP_EARLY_STOP = "Orthogonal matching pursuit ended prematurely"


def _omp(D: np.ndarray, DtY: np.ndarray, n_nonzero_coefs: int) -> np.ndarray:
    """Sparse codes (K, N) of the signals with correlations ``DtY = D^T Y`` (K, N), by OMP."""
    with warnings.catch_warnings():
        # OMP stops before n_nonzero_coefs atoms when the residual is already explained (e.g. a
        # zero signal, or an exactly sparse one): the codes are still correct.
        warnings.filterwarnings("ignore", message=_OMP_EARLY_STOP, category=RuntimeWarning)
        G = orthogonal_mp_gram(D.T @ D, DtY, n_nonzero_coefs=n_nonzero_coefs)
    return np.asarray(G, dtype=np.float64).reshape(D.shape[1], -1)


def _top_left_singular_vector(E: np.ndarray, fallback: np.ndarray) -> np.ndarray:
    """Top left singular vector u_1 of E (m, p), from the smaller Gram matrix.

    Sign: largest entry positive. ``fallback`` when E = 0. Then ``s_1 v_1 = E^T u_1``.
    """
    m, p = E.shape
    small = E.T @ E if p < m else E @ E.T
    w, z = scipy.linalg.eigh(small, subset_by_index=[small.shape[0] - 1] * 2)
    if not w[0] > 0:
        return fallback
    u = E @ z[:, 0] if p < m else z[:, 0]
    u /= np.linalg.norm(u)
    return u if u[np.argmax(np.abs(u))] > 0 else -u


def _replace_by_worst_sample(
    D: np.ndarray, k: int, R: np.ndarray, Y: np.ndarray, norms: np.ndarray, taken: np.ndarray
) -> None:
    """Atom k := the nonzero sample with the largest residual not yet taken (in place).

    ``R`` is the residual ``Y - D Gamma`` (m, n); the chosen sample is marked in ``taken``.
    Nothing changes when every such residual is zero.
    """
    err = np.einsum("ij,ij->j", R, R)
    err[taken | (norms == 0)] = -1.0
    i = int(np.argmax(err))
    if err[i] > 0:
        D[:, k] = Y[:, i] / norms[i]
        taken[i] = True


class KSVD(SparseInput, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """K-SVD dictionary learning, Aharon, Elad & Bruckstein (2006).

    Solves ``min_{D, Gamma} ||Y - D Gamma||_F^2`` s.t. ``||gamma_i||_0 <= T0`` for every
    sample (Aharon et al. 2006, the K-SVD problem; papers' orientation: Y = X^T of shape
    (n_features, n_samples), D of shape (n_features, K) with unit-norm atoms) by alternating:

    * sparse coding: every sample by orthogonal matching pursuit with at most T0 atoms
      (:func:`sklearn.linear_model.orthogonal_mp_gram`);
    * dictionary update (Aharon et al., the K-SVD dictionary update stage), atom by atom in order,
      using the codes already updated: for the samples ``omega_k`` that use atom k, the
      restricted residual ``E_k^R = (Y - sum_{j != k} d_j gamma^j)[:, omega_k]`` is replaced by
      its best rank-1 approximation ``s_1 u_1 v_1^T`` (SVD): ``d_k = u_1``,
      ``gamma^k[omega_k] = s_1 v_1 = (E_k^R)^T u_1``; the support of the codes is kept. u_1 is
      the top eigenvector of the smaller Gram matrix of E_k^R (the same vector as the SVD's, up
      to sign; the sign is chosen so that its largest entry is positive);
    * an atom no sample uses is replaced by the worst represented sample (largest residual
      norm), normalised (Aharon et al.'s treatment of unused atoms).

    Parameters
    ----------
    n_components : int
        K, the number of atoms; may exceed n_features (an overcomplete dictionary).
    n_nonzero_coefs : int, optional
        T0, the most atoms per sample, ``1 <= T0 <= min(K, n_features)``; default
        ``max(1, min(K, n_features // 10))`` (scikit-learn's OMP default, 10% of n_features).
    max_iter : int, default 10
        Number of (sparse coding, dictionary update) iterations.
    keep_better_codes : bool, default False
        Keep a sample's code from the previous iteration when OMP's new code reconstructs it
        worse with the current dictionary. Our addition, off by default (the plain algorithm):
        OMP is greedy, so the sparse coding step alone can increase the error; with this
        safeguard ``reconstruction_err_`` is non-increasing by construction. In our trials on
        planted dictionaries it converges more slowly than the plain algorithm.
    max_coherence : float, optional
        If set (e.g. 0.99), after every dictionary update an atom whose ``|d_j^T d_k|`` with an
        earlier atom exceeds it is replaced like an unused atom and its coefficients are
        zeroed (the "clear dictionary" heuristic of common K-SVD implementations, not of the
        paper); this can increase the error at that iteration. Default: off.
    random_state : int, RandomState instance or None, default None
        Seed of the initial dictionary (K distinct training samples, normalised; Gaussian atoms
        when there are fewer nonzero samples than K).

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features), float64
        ``D^T``: the atoms as unit-norm rows.
    reconstruction_err_ : ndarray of shape ``(n_iter_,)``, float64
        ``||Y - D Gamma||_F^2`` after each dictionary update, in squared units of X.
    coding_err_ : ndarray of shape ``(n_iter_,)``, float64
        The same after each sparse coding step (before the update).
    n_nonzero_coefs_ : int
        T0 used.
    n_iter_ : int
        Iterations run (= max_iter).
    n_cleared_ : int
        Atoms replaced because of ``max_coherence`` (0 when it is None).
    n_features_in_ : int
        Number of features seen in ``fit``.

    Notes
    -----
    ``fit`` densifies X (n_samples * n_features * 8 bytes): the residual ``Y - D Gamma`` is dense.
    "Small data is enough" for the baseline of Liu et al. Table 1. ``transform`` keeps sparse X
    sparse (it needs only ``X D``).

    Monotonicity: each atom update is an exact minimisation over ``(d_k, gamma^k[omega_k])`` with
    the rest fixed, and replacing an unused atom does not change ``D Gamma``, so the dictionary
    update never increases the error (``reconstruction_err_[t] <= coding_err_[t]``); the sparse
    coding step does not increase it when ``keep_better_codes=True``, so then
    ``reconstruction_err_`` is non-increasing (without ``max_coherence``). Like the paper's
    algorithm this is a local method: on planted dictionaries it recovers most, not always all,
    atoms (Aharon et al.'s synthetic experiment measures the same on a 20 x 50 dictionary).

    Cost per iteration: scikit-learn's OMP codes one sample at a time (about 0.1-0.4 ms per
    sample at K = 20-30 on one core), and for each atom a Gram matrix of size
    ``min(n_features, |omega_k|)`` and its top eigenpair.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(0).normal(size=(40, 6))
    >>> model = KSVD(n_components=8, n_nonzero_coefs=2, random_state=0).fit(X)
    >>> codes = model.transform(X)
    >>> codes.shape, int((codes != 0).sum(axis=1).max())
    ((40, 8), 2)
    """

    _parameter_constraints: dict = {
        "n_components": [at_least(1)],
        "n_nonzero_coefs": [None, at_least(1)],
        "max_iter": [at_least(0)],
        "keep_better_codes": "no_validation",
        "max_coherence": "no_validation",
        "random_state": "no_validation",
    }

    def __init__(
        self,
        n_components: int,
        *,
        n_nonzero_coefs: int | None = None,
        max_iter: int = 10,
        keep_better_codes: bool = False,
        max_coherence: float | None = None,
        random_state: Any = None,
    ):
        self.n_components = n_components
        self.n_nonzero_coefs = n_nonzero_coefs
        self.max_iter = max_iter
        self.keep_better_codes = keep_better_codes
        self.max_coherence = max_coherence
        self.random_state = random_state

    @fit_context
    def fit(self, X: Any, y: Any = None) -> KSVD:
        """Learn the dictionary (Aharon et al. 2006, the K-SVD algorithm).

        Parameters
        ----------
        X : {ndarray, sparse matrix} of shape (n_samples, n_features)
            Training signals, one per row (densified, see Notes).
        y : ignored

        Returns
        -------
        self : KSVD
            The fitted estimator.

        Raises
        ------
        ParameterError
            If a parameter is out of its documented range, or ``n_nonzero_coefs`` exceeds
            ``min(n_components, n_features)`` (a ``ValueError``).
        ValueError
            If X holds NaN or Inf.
        """
        X = self._validate(X, reset=True)
        n, m = X.shape
        K = int(self.n_components)
        T0 = self.n_nonzero_coefs
        if T0 is None:
            T0 = max(1, min(K, m // 10))
        T0 = check_bound(
            "n_nonzero_coefs", T0, min(K, m), f" (n_components = {K}, n_features = {m})"
        )
        n_iter = int(self.max_iter)
        rng = check_random_state(self.random_state)
        Y = (X.toarray() if sp.issparse(X) else np.array(X)).T  # (m, n), papers' orientation
        norms = np.linalg.norm(Y, axis=0)
        nonzero = np.flatnonzero(norms > 0)
        pick = rng.choice(nonzero, size=min(K, nonzero.size), replace=False)
        D = np.empty((m, K))
        D[:, : pick.size] = Y[:, pick] / norms[pick]
        extra = rng.standard_normal((m, K - pick.size))
        D[:, pick.size :] = extra / np.linalg.norm(extra, axis=0)

        Gamma = np.zeros((K, n))
        coding_err, recon_err = [], []
        n_cleared = 0
        for it in range(n_iter):
            new = _omp(D, D.T @ Y, T0)
            if self.keep_better_codes and it > 0:
                R_old, R_new = Y - D @ Gamma, Y - D @ new
                err_old = np.einsum("ij,ij->j", R_old, R_old)
                worse = np.einsum("ij,ij->j", R_new, R_new) > err_old
                new[:, worse] = Gamma[:, worse]
            Gamma = new
            R = Y - D @ Gamma
            coding_err.append(float(np.einsum("ij,ij->", R, R)))
            taken = np.zeros(n, dtype=bool)
            for k in range(K):
                omega = np.flatnonzero(Gamma[k])
                if omega.size == 0:  # unused atom: the worst represented sample
                    _replace_by_worst_sample(D, k, R, Y, norms, taken)
                    continue
                E = R[:, omega] + np.outer(D[:, k], Gamma[k, omega])
                D[:, k] = _top_left_singular_vector(E, D[:, k])
                Gamma[k, omega] = D[:, k] @ E
                R[:, omega] = E - np.outer(D[:, k], Gamma[k, omega])
            if self.max_coherence is not None:
                n_cleared += self._clear(D, Gamma, R, Y, norms)
            recon_err.append(float(np.einsum("ij,ij->", R, R)))
        self.components_ = np.ascontiguousarray(D.T)
        self.coding_err_ = np.asarray(coding_err)
        self.reconstruction_err_ = np.asarray(recon_err)
        self.n_nonzero_coefs_ = T0
        self.n_iter_ = n_iter
        self.n_cleared_ = n_cleared
        self._n_features_out = K
        return self

    def _clear(self, D, Gamma, R, Y, norms) -> int:
        """Replace atoms too coherent with an earlier one by the worst represented sample."""
        cleared = 0
        taken = np.zeros(Y.shape[1], dtype=bool)
        for k in range(1, D.shape[1]):
            if np.abs(D[:, :k].T @ D[:, k]).max() <= self.max_coherence:
                continue
            omega = np.flatnonzero(Gamma[k])
            R[:, omega] += np.outer(D[:, k], Gamma[k, omega])
            Gamma[k] = 0.0
            _replace_by_worst_sample(D, k, R, Y, norms, taken)
            cleared += 1
        return cleared

    def transform(self, X: Any) -> np.ndarray:
        """Sparse codes by OMP with the learned dictionary.

        Parameters
        ----------
        X : {ndarray, sparse matrix} of shape (n_samples, n_features)
            Signals in the fitted feature space (sparse X is not densified).

        Returns
        -------
        ndarray of shape (n_samples, n_components), float64
            ``Gamma^T``: at most ``n_nonzero_coefs_`` nonzeros per row, the OMP solution of
            ``min ||x - gamma D^T||`` s.t. ``||gamma||_0 <= T0``.

        Raises
        ------
        ValueError
            If X has another number of features than in ``fit``, or holds NaN or Inf.
        """
        X = self._transform_input(X)
        D = self.components_.T
        DtY = np.asarray(X @ D).T
        return _omp(D, DtY, self.n_nonzero_coefs_).T

    def inverse_transform(self, X: Any) -> np.ndarray:
        """Signals from codes, ``codes @ components_``.

        Parameters
        ----------
        X : ndarray of shape (n_samples, n_components), float64
            Codes, as returned by :meth:`transform`.

        Returns
        -------
        ndarray of shape (n_samples, n_features), float64
            ``(D Gamma)^T``.
        """
        check_is_fitted(self)
        return check_array(X, dtype=np.float64) @ self.components_
