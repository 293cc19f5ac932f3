r"""Angular Decomposition of vector data (Sun, Ding, Luo and Tang, IJCAI 2011), steps V0-V3.

Orientation: the estimator follows scikit-learn, X of shape (n_samples, n_features). Inside, the
papers' X of shape (m features, n documents) is used, documents as columns, chunked along the
documents exactly like :class:`sphdist.SphericalPCA` (NumPy, scipy.sparse or dask input), and
the Spherical PCA kernels do the work: step V2 is the V-step of Liu et al. (2019) at lam = 2
(:func:`sphdist.core.kernels.v_step`), step V3 the polar factor of ``X H``
(:func:`sphdist.core.kernels.polar_factor`), one pass over the chunks per iteration
(:mod:`sphdist.core.graph`).

:class:`AngularDecomposition`
    Eq. 4: ``min ||X - alpha U H^T||_F^2`` s.t. ``U^T U = I``, ``(H H^T)_ii = 1``; steps V0-V3
    (SVD start, alpha of Eq. 12, H of Eq. 14, U of Eq. 17-18).

The graph version is :mod:`sphdist.methods.graph_angular`, the brute-force baseline
:mod:`sphdist.methods.bae`. The truncated SVD of the sparse chunked X (steps V0, G0 and BAE) is
:func:`sphdist.core.solver.svd_init`, a randomized range finder built from the same chunk
kernels as Spherical PCA (dask-ml's ``TruncatedSVD`` does not accept scipy.sparse chunks).

References
----------
.. [1] Sun, D., Ding, C., Luo, B. and Tang, J. (2011). Angular Decomposition. IJCAI.
.. [2] Liu, K., Li, Q., Wang, H. and Tang, G. (2019). Spherical Principal Component Analysis. SDM.
.. [3] Halko, N., Martinsson, P.-G. and Tropp, J. A. (2011). Finding Structure with Randomness:
   Probabilistic Algorithms for Constructing Approximate Matrix Decompositions. SIAM Review.
"""

from __future__ import annotations

from numbers import Real
from typing import Any

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils import check_random_state

from sphdist._validation import Number, at_least, check_bound
from sphdist.core import angular_kernels as ak
from sphdist.core import graph, kernels
from sphdist.core.params import PARAMS
from sphdist.core.solver import svd_init
from sphdist.methods._base import (
    EmbeddingMixin,
    SparseInput,
    SphereModel,
    check_finite,
    fit_context,
)

__all__ = ["AngularDecomposition", "SVD_PARAMETER_CONSTRAINTS"]

#: Fan-in of the reduction tree of the partials: Spherical PCA's default.
SPLIT_EVERY = PARAMS["split_every"].default

#: The parameters of the randomized SVD of steps V0 / G0 (and BAE), and of the iterations.
SVD_PARAMETER_CONSTRAINTS: dict[str, list[Any]] = {
    "n_components": [at_least(1)],
    "random_state": ["random_state"],
    "chunk_size": [None, at_least(1)],
    "n_oversamples": [at_least(0)],
    "n_power_iter": [at_least(0)],
}
ITERATION_CONSTRAINTS: dict[str, list[Any]] = {
    "max_iter": [at_least(1)],
    "tol": [Number(Real, 0, None, closed="left")],
}


def chunked_input(est: Any, X: Any) -> da.Array:
    """The papers' X of the input (:func:`graph.document_chunks`), n_components checked.

    Raises
    ------
    ParameterError
        If ``est.n_components`` exceeds ``min(n_samples, n_features)``.
    """
    Xt = graph.document_chunks(X, est.chunk_size)
    m, n = Xt.shape
    check_bound(
        "n_components", est.n_components, min(m, n), f" for X with {n} samples and {m} features"
    )
    return Xt


def leading_left(X: da.Array, est: Any) -> np.ndarray:
    """Steps V0/G0: leading left singular vectors of X (randomized range finder on chunks).

    Parameters
    ----------
    X : dask.array.Array of shape (m, n), float64
        Documents as columns.
    est : estimator
        With ``n_components``, ``random_state``, ``n_power_iter``, ``n_oversamples``.

    Returns
    -------
    ndarray of shape (m, r), float64
        Orthonormal columns (:func:`sphdist.core.solver.svd_init`).

    Raises
    ------
    DataError
        If X holds NaN or Inf (dask input; NumPy / SciPy input is validated before).
    """
    try:
        U = svd_init(
            X, est.n_components, check_random_state(est.random_state),
            n_power_iter=est.n_power_iter, n_oversamples=est.n_oversamples,
            split_every=SPLIT_EVERY,
        )
    except np.linalg.LinAlgError:  # NaN / Inf in X (NumPy / SciPy input is validated before)
        check_finite(_sq_norm_X(X), "||X||_F^2")
        raise
    if not np.all(np.isfinite(U)):
        check_finite(_sq_norm_X(X), "||X||_F^2")
    return U


def _sq_norm_X(X: da.Array) -> float:
    return graph.sum_parts(graph.per_chunk(ak.sq_norm_chunk, X), SPLIT_EVERY)["sq_norm_X"]


def rows_pass(X: da.Array, U: np.ndarray, r: int) -> tuple[da.Array, dict[str, Any]]:
    """Step V2 (Eq. 14) in one pass: the rows ``normalise(X^T U)`` and their partials.

    Returns
    -------
    H : dask.array.Array of shape (n, r), float64
        Persisted, chunked like the documents.
    total : dict
        The summed partials of :func:`sphdist.core.angular_kernels.ad_pass_chunk`.
    """
    parts = graph.per_chunk(ak.ad_pass_chunk, X, graph.broadcast(U), "ik")
    return graph.persist_rows_and_sum(parts, X, r, ["H"], SPLIT_EVERY)


def converged(objective: list[float], tol: float) -> bool:
    """Whether the relative change of the last two objective values is at most ``tol``."""
    if len(objective) < 2:
        return False
    prev, cur = objective[-2], objective[-1]
    return abs(prev - cur) <= tol * abs(prev)


def _vector_ad(X: da.Array, est: Any) -> dict[str, Any]:
    """Steps V0-V3 of Sun et al. (2011) on a column-chunked X; one pass per iteration."""
    n = X.shape[1]
    U = leading_left(X, est)  # V0: U_0 (H_0 = V Sigma = X^T U_0 only enters alpha_1)
    objective: list[float] = []
    for _ in range(est.max_iter):
        # V1 (Eq. 12) gives alpha >= 0 (tr(U_0^T X H_0) = ||X^T U_0||^2 at the start, the
        # nuclear norm of X H afterwards), so V2 does not depend on its value:
        # V2 (Eq. 14): H = rows of X^T U scaled to unit length; with V3's X H in the same pass
        H, total = rows_pass(X, U, est.n_components)
        if not objective:
            sq_norm_X = total["sq_norm_X"]
            check_finite(sq_norm_X, "||X||_F^2")
        # V3 (Eq. 17-18): U = A B^T from SVD(X H) = A Sigma B^T, the polar factor of X H
        U, s = kernels.polar_factor(total["XVt"], "svd", return_singular_values=True)
        # Eq. 12 for the new (U, H): alpha = tr(U^T X H) / n = sum(s) / n, and Eq. 13 with
        # unit rows of H: ||X - alpha U H^T||^2 = ||X||^2 - 2 alpha tr(U^T X H) + alpha^2 n
        alpha = float(s.sum()) / n
        objective.append(sq_norm_X - 2.0 * alpha * float(s.sum()) + alpha**2 * n)
        if converged(objective, est.tol):
            break
    return {
        "U": U, "H": H, "alpha": alpha, "objective": objective,
        "n_degenerate": total["n_degenerate"],
    }


def embedding(H: da.Array, X: Any) -> Any:
    """``H`` as the input's kind: a dask array for dask input, else computed."""
    return H if isinstance(X, da.Array) else H.compute()


def set_fitted(est: Any, out: dict[str, Any], X: Any) -> None:
    """The fitted attributes of an Angular Decomposition result ``out`` (vector or graph)."""
    H = out["H"]
    est.embedding_ = embedding(H, X) if isinstance(H, da.Array) else H
    est.alpha_ = out["alpha"]
    est.objective_ = np.asarray(out["objective"])
    est.residual_ = float(est.objective_[-1])
    est.n_iter_ = len(est.objective_)
    est.n_degenerate_ = out["n_degenerate"]
    est._n_features_out = est.n_components


class AngularDecomposition(
    EmbeddingMixin, SphereModel, SparseInput, ClassNamePrefixFeaturesOutMixin, TransformerMixin,
    BaseEstimator,
):
    r"""Angular Decomposition of vector data, ``X^T ~ alpha U H^T`` (Sun et al. 2011, Eq. 4).

    Solves ``min ||X^T - alpha U H^T||_F^2`` s.t. ``U^T U = I``, ``(H H^T)_ii = 1`` (X here in
    scikit-learn orientation, so ``X^T`` is the papers' m x n matrix) by the closed-form block
    updates of Sec. 3.1, in the paper's order:

    * V0: ``U_0`` = the r leading left singular vectors of ``X^T`` (randomized range finder,
      :func:`sphdist.core.solver.svd_init`), ``H_0 = V Sigma = X U_0``;
    * V1 (Eq. 12): ``alpha = tr(U^T X^T H) / n``;
    * V2 (Eq. 14): ``h_i = U^T x_i / ||U^T x_i||``, every row of H on the unit sphere;
    * V3 (Eq. 17-18): ``U = A B^T`` from ``SVD(X^T H) = A Sigma B^T``.

    Every step is an exact block minimiser (alpha >= 0 throughout), so the objective never
    increases. Each iteration reads every chunk of X once: one task per chunk computes
    ``X_c^T U``, its normalised rows and ``X_c H_c``; the (m, r) partials are summed in a tree
    and V3's SVD runs on the driver.

    Parameters
    ----------
    n_components : int, default 2
        r, the dimension of the embedding (the sphere is ``S^{r-1}``);
        ``1 <= r <= min(n_samples, n_features)``.
    max_iter : int, default 100
        Maximum number of V1-V3 iterations, >= 1.
    tol : float, default 1e-6
        Stop when the relative decrease of the objective falls to or below it.
    random_state : int, RandomState instance or None, default None
        Seed of the randomized SVD of step V0.
    chunk_size : int, optional
        Samples per chunk for NumPy / SciPy input (dask input keeps its chunks, or is rechunked
        to this); default :func:`sphdist.core.graph.default_chunk_size`.
    n_oversamples : int, default 10
        Extra basis vectors of the randomized SVD (Halko et al. 2011, Sec. 4.2).
    n_power_iter : int, default 4
        Power iterations of the randomized SVD (``n_power_iter + 1`` passes over X).

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features), float64
        ``U^T`` after the last V3 step; orthonormal rows.
    embedding_ : ndarray or dask array of shape (n_samples, n_components), float64
        H of the last V2 step: unit rows (a dask array, chunked like the samples, for dask
        input). A sample with ``U^T x = 0`` (an empty document) gets ``e_1``.
    alpha_ : float
        Eq. 12 for the returned ``(U, H)``: ``tr(U^T X^T H) / n``, >= 0 (the optimal scale).
    objective_ : ndarray of shape ``(n_iter_,)``, float64
        ``||X^T - alpha U H^T||_F^2`` (Eq. 4) after iteration ``t = 1..n_iter_``, with alpha of
        Eq. 12 for that iteration's ``(U, H)``; equal to Eq. 13,
        ``||X||_F^2 - n alpha^2``. Non-increasing (up to rounding).
    residual_ : float
        ``objective_[-1]``, the residual of Eq. 4 compared in Sun et al. (2011), Table 1.
    n_iter_ : int
        Iterations run.
    n_degenerate_ : int
        Samples whose ``U^T x`` was zero in the last iteration.
    n_features_in_ : int
        Number of features seen in ``fit``.

    See Also
    --------
    sphdist.BAE : the brute-force baseline, whose embedding is this estimator's first V2 step.
    sphdist.SphericalPCA : Liu et al. (2019), the same constraints without alpha.

    Notes
    -----
    Memory on the driver: O(n_features * n_components) floats. Since V2 and V3 do not
    depend on alpha (> 0), the iterates ``(U, H)`` coincide with those of
    ``SphericalPCA(init="svd", lam="exact", mu="exact")`` started from the same ``U_0``;
    alpha only rescales the reconstruction.

    Examples
    --------
    >>> import numpy as np
    >>> from sphdist.methods.angular import AngularDecomposition
    >>> X = np.random.default_rng(0).random((40, 10))
    >>> X /= np.linalg.norm(X, axis=1, keepdims=True)
    >>> ad = AngularDecomposition(n_components=3, random_state=0).fit(X)
    >>> bool(np.allclose(np.linalg.norm(ad.embedding_, axis=1), 1.0))
    True
    >>> bool(np.all(np.diff(ad.objective_) <= 1e-12))
    True
    """

    _parameter_constraints: dict = {**SVD_PARAMETER_CONSTRAINTS, **ITERATION_CONSTRAINTS}
    _lazy_input = True
    _scale = "alpha_"  # inverse_transform: alpha Y U^T, the model of Eq. 4

    def __init__(
        self,
        n_components: int = 2,
        *,
        max_iter: int = 100,
        tol: float = 1e-6,
        random_state: Any = None,
        chunk_size: int | None = None,
        n_oversamples: int = 10,
        n_power_iter: int = 4,
    ):
        self.n_components = n_components
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.chunk_size = chunk_size
        self.n_oversamples = n_oversamples
        self.n_power_iter = n_power_iter

    @fit_context
    def fit(self, X: Any, y: Any = None) -> AngularDecomposition:
        """Fit the decomposition (steps V0-V3).

        Parameters
        ----------
        X : {ndarray, sparse matrix, dask array} of shape (n_samples, n_features)
            Training data, one sample (document) per row; the paper assumes unit rows
            (e.g. tf-idf), but any rows work.
        y : ignored

        Returns
        -------
        self : AngularDecomposition
            The fitted estimator.

        Raises
        ------
        ParameterError
            If a parameter is out of range (a ``ValueError``).
        DataError
            If dask input holds NaN or Inf (NumPy / SciPy input: ``ValueError``).
        """
        X = self._validate(X, reset=True)
        out = _vector_ad(chunked_input(self, X), self)
        self.components_ = out["U"].T
        set_fitted(self, out, X)
        return self
