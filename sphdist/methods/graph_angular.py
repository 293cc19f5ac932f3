r"""Angular Decomposition of graph data (Sun, Ding, Luo and Tang, IJCAI 2011), steps G0-G3.

Orientation: the estimator follows scikit-learn, X of shape (n_samples, n_features) (or the
similarity matrix S of shape (n_samples, n_samples) for ``kernel="precomputed"``).

:class:`GraphAngularDecomposition`
    Eq. 11: ``min ||S - alpha H H^T||_F^2`` s.t. ``(H H^T)_ii = 1``; steps G0-G3 (Eq. 22-24).
    The linear kernel ``S = X^T X`` (papers' orientation) is never formed
    (``S H = X^T (X H)``, on the document chunks of X, :mod:`sphdist.core.graph`); RBF and
    precomputed similarities are dense n x n matrices on the driver.

Also here: the similarity matrices (:func:`rbf_similarity` with the width rule
:func:`sun_gamma` of Sec. 4.1), the eigen-embedding of step G0 (:func:`eigen_embedding`) and
``||X^T X||_F^2`` on chunks (:func:`gram_sq_norm`), which :class:`sphdist.BAE` shares.

References
----------
.. [1] Sun, D., Ding, C., Luo, B. and Tang, J. (2011). Angular Decomposition. IJCAI.
"""

from __future__ import annotations

from numbers import Real
from typing import Any

import dask.array as da
import numpy as np
import scipy.linalg
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin
from sklearn.metrics.pairwise import euclidean_distances

from sphdist._validation import Number, StrOptions, check_bound
from sphdist.core import angular_kernels as ak
from sphdist.core import graph
from sphdist.errors import DataError
from sphdist.methods._base import EmbeddingMixin, KernelTags, check_finite, fit_context
from sphdist.methods.angular import (
    ITERATION_CONSTRAINTS,
    SPLIT_EVERY,
    SVD_PARAMETER_CONSTRAINTS,
    chunked_input,
    converged,
    leading_left,
    rows_pass,
    set_fitted,
)

__all__ = [
    "GraphAngularDecomposition",
    "GRAPH_PARAMETER_CONSTRAINTS",
    "eigen_embedding",
    "gram_sq_norm",
    "rbf_similarity",
    "similarity",
    "sun_gamma",
    "DenseGraph",
]

#: The bracket of Eq. 24 counts as zero below this fraction of the size of its terms.
_STATIONARY = 1e-10
#: Rows of ``V Sigma^{1/2}`` below this fraction of the largest row are rounding (S_ii = 0).
_ZERO_ROW = 1e-10

#: ``kernel`` and ``gamma``, shared with :class:`sphdist.BAE`.
GRAPH_PARAMETER_CONSTRAINTS: dict[str, list[Any]] = {
    "kernel": [StrOptions({"linear", "rbf", "precomputed"})],
    "gamma": [None, Number(Real, 0, None, closed="neither")],
}


def gram_sq_norm(X: da.Array) -> float:
    """``||X^T X||_F^2`` of a column-chunked X without forming ``X^T X``.

    Parameters
    ----------
    X : dask.array.Array of shape (m, n), float64
        Documents as columns, one block along the features.

    Returns
    -------
    float
        ``||S||_F^2`` for the linear kernel ``S = X^T X`` (the constant of Sun et al. 2011,
        Eq. 11), summed over all pairs of document chunks.

    Notes
    -----
    ``n_chunks^2`` tasks, each reading two chunks and forming ``X_c^T X_d`` in blocks of at
    most 32 MiB; the work grows as n^2 (it is done once per fit).
    """
    return graph.pairs_sum(ak.gram_sq_norm_pair, X)


# -- the algorithm, papers' orientation ---------------------------------------------------


class _LinearGraph:
    """``S = X^T X`` on a column-chunked X: S H = X^T (X H), never S (Sun et al. 2011, Eq. 5)."""

    def __init__(self, X: da.Array, U0: np.ndarray, r: int):
        self.X, self.r = X, r
        # G0: H_0 = unit rows of X^T U_0 (= V Sigma^{1/2} of S = X^T X)
        self.H, total = rows_pass(X, U0, r)
        self._store(total)
        self.sq_norm_S = gram_sq_norm(X)
        check_finite(self.sq_norm_S, "||X^T X||_F^2")

    def _store(self, total: dict[str, Any]) -> None:
        self.P, self.HtH = total["XVt"], total["VVt"]  # X H and H^T H
        self.n_degenerate = total["n_degenerate"]
        self.trace_HSH = float(np.vdot(self.P, self.P))  # tr(H^T S H) = ||X H||_F^2

    def gradient(self, alpha: float) -> tuple[float, float, float]:
        parts = graph.per_chunk(
            ak.graph_gradient_chunk, self.X, self.H, "jk", graph.broadcast(self.P), "ik",
            HtH=self.HtH, alpha=alpha,
        )
        self.G, total = graph.persist_rows_and_sum(parts, self.X, self.r, ["G"], SPLIT_EVERY)
        return total["abs_G"], total["abs_H"], total["scale"]

    def update(self, eta: float) -> None:
        parts = graph.per_chunk(
            ak.graph_update_chunk, self.X, self.H, "jk", self.G, "jk", eta=eta
        )
        self.H, total = graph.persist_rows_and_sum(parts, self.X, self.r, ["H"], SPLIT_EVERY)
        self._store(total)


class DenseGraph:
    """An explicit n x n similarity matrix S on the driver (RBF or precomputed)."""

    def __init__(self, S: np.ndarray, r: int):
        self.S = S
        self.H, self.n_degenerate = ak.normalise_rows(eigen_embedding(S, r))  # G0
        self.sq_norm_S = float(np.vdot(S, S))
        self._store()

    def _store(self) -> None:
        self.SH = self.S @ self.H
        self.HtH = self.H.T @ self.H
        self.trace_HSH = float(np.vdot(self.H, self.SH))

    def gradient(self, alpha: float) -> tuple[float, float, float]:
        """Step G2 and the bracket of Eq. 24; returns ``sum |G|``, ``sum |H|`` and its scale."""
        self.G, _, scale = ak.graph_gradient(self.H, self.SH, self.HtH, alpha)
        return float(np.abs(self.G).sum()), float(np.abs(self.H).sum()), scale

    def update(self, eta: float) -> None:
        """Step G3 (Eq. 24) with step ``eta``, rows scaled back to unit length."""
        self.H, self.n_degenerate = ak.normalise_rows(self.H - eta * self.G)
        self._store()


def eigen_embedding(S: np.ndarray, r: int) -> np.ndarray:
    """``V Sigma^{1/2}`` of the r leading eigenpairs of a symmetric S (Sun et al. 2011, G0).

    Parameters
    ----------
    S : ndarray of shape (n, n), float64
        Symmetric similarity matrix.
    r : int
        Number of eigenpairs, ``1 <= r <= n``.

    Returns
    -------
    ndarray of shape (n, r), float64
        Columns ``sqrt(max(sigma_l, 0)) v_l`` for the r algebraically largest eigenvalues
        ``sigma_l``, in decreasing order. Rows smaller than ``1e-10`` times the largest row
        (documents with ``S_ii = 0``, whose exact row is zero) are set to exactly zero.

    Notes
    -----
    Dense LAPACK ``syevr`` on the driver: O(n^2) memory, O(n^2 r) time or more.
    """
    n = S.shape[0]
    evals, V = scipy.linalg.eigh(S, subset_by_index=[n - r, n - 1])
    H = V[:, ::-1] * np.sqrt(np.clip(evals[::-1], 0.0, None))
    norms = np.linalg.norm(H, axis=1)
    H[norms <= _ZERO_ROW * norms.max()] = 0.0
    return H


def _graph_objective(g: Any) -> tuple[float, float]:
    """Eq. 22's alpha for the current H, and Eq. 11 there: ``||S||^2 - tr(H^T S H)^2 / q``."""
    q = float(np.vdot(g.HtH, g.HtH))  # tr(H H^T H H^T) = ||H^T H||_F^2
    if q == 0.0:
        raise DataError(
            "The initial embedding is zero: the similarity matrix has no positive eigenvalue "
            "among the leading ones (e.g. X is all zeros). To resolve this, check the input."
        )
    alpha = g.trace_HSH / q
    return alpha, g.sq_norm_S - 2.0 * alpha * g.trace_HSH + alpha**2 * q


def _graph_ad(g: Any, est: Any) -> dict[str, Any]:
    """Steps G1-G3 of Sun et al. (2011) on a graph backend (:class:`_LinearGraph` or dense)."""
    objective: list[float] = []
    alpha, _ = _graph_objective(g)
    for _ in range(est.max_iter):
        # G1 (Eq. 22) is ``alpha``; G2 (Eq. 23) and the bracket of Eq. 24 in one step
        abs_G, abs_H, scale = g.gradient(alpha)
        # G3 (Eq. 24), eta = step * sum|H| / sum|dL/dH|, then back onto the unit sphere. A
        # bracket that is zero to rounding is a KKT point; the rule would scale the rounding
        # noise up to a full step, so H stays
        stationary = abs_G <= _STATIONARY * scale
        g.update(0.0 if stationary else est.step_size * abs_H / abs_G)
        alpha, f = _graph_objective(g)
        objective.append(f)
        if stationary or converged(objective, est.tol):
            break
    return {"H": g.H, "alpha": alpha, "objective": objective, "n_degenerate": g.n_degenerate}


# -- similarity matrices ---------------------------------------------------------------


def sun_gamma(D: np.ndarray) -> float:
    """The RBF width rule of Sun et al. (2011), Sec. 4.1.

    Parameters
    ----------
    D : ndarray of shape (n, n), float64
        Euclidean distances ``||x_i - x_j||`` (zero diagonal), n >= 2.

    Returns
    -------
    float
        ``gamma = 0.7 / d^2`` with ``d = sum_ij ||x_i - x_j|| / (n (n - 1))``, the mean
        distance between two distinct samples, in inverse squared feature units.

    Raises
    ------
    DataError
        If all samples coincide (d = 0) or n < 2.

    Examples
    --------
    >>> import numpy as np
    >>> round(sun_gamma(np.array([[0.0, 2.0], [2.0, 0.0]])), 3)
    0.175
    """
    n = D.shape[0]
    d = float(D.sum()) / (n * (n - 1)) if n > 1 else 0.0
    if not d > 0:
        raise DataError(
            f"The RBF width rule needs two distinct samples; the mean pairwise distance of "
            f"the {n} samples is {d!r}. To resolve this, pass gamma explicitly or more data."
        )
    return 0.7 / d**2


def rbf_similarity(X: Any, gamma: float | None = None) -> tuple[np.ndarray, float]:
    """The RBF similarity matrix of Sun et al. (2011), Sec. 4.1, dense on the driver.

    Parameters
    ----------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features), float64
        Samples as rows (scikit-learn orientation).
    gamma : float, optional
        Kernel width in inverse squared feature units; default :func:`sun_gamma`.

    Returns
    -------
    S : ndarray of shape (n_samples, n_samples), float64
        ``S_ij = exp(-gamma ||x_i - x_j||^2)``; unit diagonal.
    gamma : float
        The width used.

    Notes
    -----
    Memory: two n x n float64 matrices at peak, ``2 n^2 * 8`` bytes (n = 20 000 needs
    6.4 GB).
    """
    D = euclidean_distances(X)
    gamma = sun_gamma(D) if gamma is None else float(gamma)
    np.square(D, out=D)
    D *= -gamma
    np.exp(D, out=D)
    return D, gamma


def similarity(est: Any, X: Any) -> np.ndarray:
    """The dense S of ``kernel="rbf"`` / ``"precomputed"`` (sets ``est.gamma_``).

    Parameters
    ----------
    est : estimator
        With ``kernel``, ``gamma`` and ``n_components`` (checked against n_samples).
    X : {ndarray, sparse matrix, dask array} of shape (n_samples, n_features)
        Samples, or S itself for ``kernel="precomputed"``.

    Returns
    -------
    ndarray of shape (n_samples, n_samples), float64
        Symmetric.

    Raises
    ------
    DataError
        If a precomputed S is not square, not symmetric or not finite.
    ParameterError
        If ``n_components`` exceeds n_samples.
    """
    if isinstance(X, da.Array):
        X = X.compute()
    if est.kernel == "rbf":
        S, est.gamma_ = rbf_similarity(X, est.gamma)
    else:
        S = _precomputed(X)
    n = S.shape[0]
    check_bound("n_components", est.n_components, n, f" for S of {n} samples")
    return S


def _precomputed(X: Any) -> np.ndarray:
    S = X.toarray() if sp.issparse(X) else np.array(X, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise DataError(
            f"kernel='precomputed' needs a square similarity matrix, got shape {S.shape}. To "
            "resolve this, pass S of shape (n_samples, n_samples)."
        )
    check_finite(float(np.vdot(S, S)), "||S||_F^2")
    scale = max(float(np.abs(S).max()), np.finfo(np.float64).tiny)
    asym = float(np.abs(S - S.T).max())
    if asym > 1e-10 * scale:
        raise DataError(
            f"The precomputed similarity matrix is not symmetric (max |S - S^T| = {asym:.3g}). "
            "To resolve this, pass (S + S.T) / 2."
        )
    return S


# -- the estimator ---------------------------------------------------------------------


class GraphAngularDecomposition(
    EmbeddingMixin, KernelTags, ClassNamePrefixFeaturesOutMixin, BaseEstimator
):
    r"""Angular Decomposition of graph data, ``S ~ alpha H H^T`` (Sun et al. 2011, Eq. 11).

    Solves ``min ||S - alpha H H^T||_F^2`` s.t. ``(H H^T)_ii = 1`` by steps G0-G3 of Sec. 3.2:

    * G0: ``V Sigma^{1/2}`` from the r leading eigenpairs ``S ~ V Sigma V^T`` (negative
      eigenvalues clipped to 0), rows scaled to unit length (ours, see below);
    * G1 (Eq. 22): ``alpha = tr(H^T S H) / tr(H H^T H H^T)``;
    * G2 (Eq. 23): ``lambda_i = alpha^2 (H H^T H H^T)_ii - alpha (S H H^T)_ii``;
    * G3 (Eq. 24): ``H <- H - eta [alpha^2 H H^T H - alpha S H - Lambda H]`` with
      ``eta = step_size * sum|H_ij| / sum|[...]_ij|`` (the paper's rule, step_size = 0.01),
      followed by scaling every row of H back to unit length.

    Two scalings to unit rows are ours. (1) After G3: the bracket is orthogonal to each unit
    row ``h_i`` (that is what Eq. 23 makes it), so the step keeps ``||h_i|| = 1`` only to
    first order; without the scaling rows drift off the sphere by ``O(eta^2)``. (2) After G0:
    the unscaled ``H_0 = V Sigma^{1/2}`` is the unconstrained optimum, where ``alpha = 1``,
    ``H H^T H = S H`` and Eq. 23 gives ``lambda = 0``, so the bracket of Eq. 24 is exactly
    zero and the step rule (a step of fixed length ``step_size * sum|H_ij|`` along the
    bracket's direction) would only amplify rounding noise. The iteration therefore starts
    from the feasible point with the same directions, which is the BAE embedding (Sec. 2.3).
    A bracket below ``1e-10`` of the size of its terms counts as zero (a KKT point) and ends
    the iteration. The paper proves no monotone decrease for G3 (it shows one in
    experiments, Fig. 2); ``objective_`` records what happens.

    ``kernel="linear"`` is ``S = X X^T`` in scikit-learn orientation (``S_ij = x_i^T x_j``,
    Eq. 5; unit diagonal for unit rows). S is never formed: ``S H = X (X^T H)`` (papers'
    ``X^T (X H)``), ``tr(H^T S H) = ||X^T H||_F^2`` and ``H^T H`` come from the same chunked
    products, and G0 is the randomized SVD of X (``H_0 = V Sigma = X U_0``). Each iteration
    reads every chunk of X twice (``P = X^T H`` must be reduced before ``X P`` can be formed).
    ``||S||_F^2``, needed only for the objective values, is summed over pairs of chunks once
    per fit (work ~ n^2).

    ``kernel="rbf"`` (``S_ij = exp(-gamma ||x_i - x_j||^2)``, gamma of Sun et al. Sec. 4.1 by
    default, :func:`sun_gamma`) and ``kernel="precomputed"`` (X is S) hold S as a dense
    n x n float64 matrix on the driver: ``n^2 * 8`` bytes (twice that while building the RBF
    matrix), e.g. 800 MB for n = 10 000. Use them for moderate n.

    Parameters
    ----------
    n_components : int, default 2
        r; ``1 <= r <= n_samples`` (and ``<= n_features`` for the linear kernel).
    kernel : {"linear", "rbf", "precomputed"}, default "linear"
        How S is obtained from X.
    gamma : float, optional
        RBF width (inverse squared feature units); default :func:`sun_gamma`. Only for
        ``kernel="rbf"``.
    max_iter : int, default 100
        Maximum number of G1-G3 iterations, >= 1.
    tol : float, default 1e-6
        Stop when the relative change of the objective falls to or below it.
    random_state : int, RandomState instance or None, default None
        Seed of the randomized SVD of G0 (linear kernel; the dense eigensolver is
        deterministic).
    chunk_size : int, optional
        Samples per chunk (linear kernel), as in :class:`AngularDecomposition`.
    n_oversamples : int, default 10
        Extra basis vectors of the randomized SVD (linear kernel).
    n_power_iter : int, default 4
        Power iterations of the randomized SVD (linear kernel).
    step_size : float, default 0.01
        The factor of the step-size rule after Eq. 24 (> 0).

    Attributes
    ----------
    embedding_ : ndarray or dask array of shape (n_samples, n_components), float64
        H after the last G3 step; unit rows (a dask array for dask input with the linear
        kernel).
    alpha_ : float
        Eq. 22 for the returned H.
    objective_ : ndarray of shape ``(n_iter_,)``, float64
        ``||S - alpha H H^T||_F^2`` (Eq. 11) after iteration ``t = 1..n_iter_``, alpha of Eq. 22
        for that H.
    residual_ : float
        ``objective_[-1]``: the residual of Eq. 11 compared in Sun et al. (2011), Table 1.
    gamma_ : float or None
        The RBF width used (None for other kernels).
    n_iter_ : int
        Iterations run.
    n_degenerate_ : int
        Rows of H that were zero before the last rescaling (set to ``e_1``).
    n_features_in_ : int
        Number of features (n_samples for ``kernel="precomputed"``) seen in ``fit``.

    Notes
    -----
    The method is transductive: there is no ``transform`` for new samples.

    Examples
    --------
    >>> import numpy as np
    >>> from sphdist import GraphAngularDecomposition
    >>> X = np.random.default_rng(0).random((30, 6))
    >>> X /= np.linalg.norm(X, axis=1, keepdims=True)
    >>> gad = GraphAngularDecomposition(n_components=2, kernel="rbf", max_iter=20).fit(X)
    >>> gad.embedding_.shape
    (30, 2)
    >>> bool(np.allclose(np.linalg.norm(gad.embedding_, axis=1), 1.0))
    True
    """

    _parameter_constraints: dict = {
        **SVD_PARAMETER_CONSTRAINTS, **ITERATION_CONSTRAINTS, **GRAPH_PARAMETER_CONSTRAINTS,
        "step_size": [Number(Real, 0, None, closed="neither")],
    }
    _lazy_input = True

    def __init__(
        self,
        n_components: int = 2,
        *,
        kernel: str = "linear",
        gamma: float | None = None,
        max_iter: int = 100,
        tol: float = 1e-6,
        random_state: Any = None,
        chunk_size: int | None = None,
        n_oversamples: int = 10,
        n_power_iter: int = 4,
        step_size: float = 0.01,
    ):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.chunk_size = chunk_size
        self.n_oversamples = n_oversamples
        self.n_power_iter = n_power_iter
        self.step_size = step_size

    @fit_context
    def fit(self, X: Any, y: Any = None) -> GraphAngularDecomposition:
        """Fit the decomposition (steps G0-G3).

        Parameters
        ----------
        X : {ndarray, sparse matrix, dask array} of shape (n_samples, n_features)
            Samples as rows; for ``kernel="precomputed"`` the symmetric similarity matrix S
            of shape (n_samples, n_samples).
        y : ignored

        Returns
        -------
        self : GraphAngularDecomposition
            The fitted estimator.

        Raises
        ------
        ParameterError
            If a parameter is out of range.
        DataError
            If S (precomputed) is not square and symmetric, the RBF rule has no two distinct
            samples, the leading eigenvalues are all <= 0, or dask input holds NaN or Inf.
        """
        X = self._validate(X, reset=True)
        self.gamma_ = None
        if self.kernel == "linear":
            Xt = chunked_input(self, X)
            g: Any = _LinearGraph(Xt, leading_left(Xt, self), self.n_components)
        else:
            g = DenseGraph(similarity(self, X), self.n_components)
        set_fitted(self, _graph_ad(g, self), X)
        return self
