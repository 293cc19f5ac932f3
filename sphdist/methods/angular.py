r"""Angular Decomposition and its brute-force baseline (Sun, Ding, Luo, Tang, IJCAI 2011).

Orientation: the estimators follow scikit-learn, X of shape (n_samples, n_features). Inside,
the papers' X of shape (m features, n documents) is used, documents as columns, chunked along
the documents exactly like :class:`sphdist.SphericalPCA` (NumPy, scipy.sparse or dask input).
Equation numbers refer to ``../shared/seeds/001_b7627b751b2be62b.txt``.

Three estimators:

:class:`AngularDecomposition`
    Vector data, Eq. 4: ``min ||X - alpha U H^T||_F^2`` s.t. ``U^T U = I``, ``(H H^T)_ii = 1``;
    steps V0-V3 (SVD start, alpha of Eq. 12, H of Eq. 14, U of Eq. 17-18), one pass over the
    chunks of X per iteration.
:class:`GraphAngularDecomposition`
    Graph data, Eq. 11: ``min ||S - alpha H H^T||_F^2`` s.t. ``(H H^T)_ii = 1``; steps G0-G3
    (Eq. 22-24). The linear kernel ``S = X^T X`` is never formed (``S H = X^T (X H)``); RBF and
    precomputed similarities are dense n x n matrices on the driver.
:class:`BAE`
    The brute-force angular embedding of Sec. 2.3: truncated SVD (or eigendecomposition of S),
    then every document's embedding scaled to unit length; its residual is Eq. 25 (vector) or
    Eq. 26 (graph).

The truncated SVD of the sparse chunked X (steps V0, G0 and BAE) is :func:`sphdist.core.solver.
svd_init`, a randomized range finder built from the same chunk kernels as Spherical PCA
(dask-ml's ``TruncatedSVD`` does not accept scipy.sparse chunks).
"""

from __future__ import annotations

import numbers
from typing import Any

import dask
import dask.array as da
import numpy as np
import scipy.linalg
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from sphdist.core import angular_kernels as ak
from sphdist.core.solver import svd_init
from sphdist.errors import DataError, ParameterError
from sphdist.methods.spherical_pca import default_chunk_size

__all__ = [
    "AngularDecomposition",
    "GraphAngularDecomposition",
    "BAE",
    "eigen_embedding",
    "gram_sq_norm",
    "rbf_similarity",
    "sun_gamma",
]

_SPLIT_EVERY = 8
_KERNELS = ("linear", "rbf", "precomputed")
#: The bracket of Eq. 24 counts as zero below this fraction of the size of its terms.
_STATIONARY = 1e-10
#: Rows of ``V Sigma^{1/2}`` below this fraction of the largest row are rounding (S_ii = 0).
_ZERO_ROW = 1e-10


# -- dask plumbing (papers' orientation: X is (m, n), column-chunked) -----------------------


def _document_chunks(X: Any, chunk_size: int | None) -> da.Array:
    """X (n_samples, n_features) -> papers' X (n_features, n_samples), chunked along samples.

    In-memory (NumPy / SciPy) input is persisted, so that on a distributed cluster its chunks
    are sent to the workers once, not with every pass.
    """
    if isinstance(X, da.Array):
        Xt = X.T.astype(np.float64)
        if chunk_size is not None:
            Xt = Xt.rechunk({1: chunk_size})
        return Xt.rechunk({0: -1})
    n, m = X.shape
    size = chunk_size or default_chunk_size(m)
    if sp.issparse(X):
        Xt = sp.csc_matrix(X.T, dtype=np.float64)
        bounds = [*range(0, n, size), n]
        blocks = [
            da.from_delayed(
                dask.delayed(Xt[:, a:b]), shape=(m, b - a), dtype=np.float64,
                meta=sp.csc_matrix((0, 0), dtype=np.float64),
            )
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
        return da.concatenate(blocks, axis=1).persist()
    return da.from_array(np.asarray(X, dtype=np.float64).T, chunks=(m, size)).persist()


def _on_cluster(A: np.ndarray) -> da.Array:
    """A small driver array as a one-block dask array, scattered once when a client is active."""
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):
        return da.from_array(A, chunks=A.shape, name=False)
    future = client.scatter(A, hash=False)
    return da.from_delayed(dask.delayed(future), shape=A.shape, dtype=A.dtype)


def _per_chunk(func: Any, X: da.Array, *args: Any, **kwargs: Any) -> da.Array:
    """``func(X_c, *chunk args)`` for every document chunk -> object array of result dicts.

    ``args`` alternate arrays and index strings as in :func:`dask.array.blockwise`, with "i"
    the feature axis (one block), "j" the documents and "k" the components.
    """
    return da.blockwise(
        func, "j", X, "ij", *args, concatenate=True, adjust_chunks={"j": 1},
        dtype=object, meta=np.empty((0,), dtype=object), **kwargs,
    )


def _take(part: dict[str, Any], key: str) -> np.ndarray:
    return part[key]


def _rows(parts: da.Array, key: str, X: da.Array, r: int) -> da.Array:
    """The (n, r) array of per-chunk rows ``part[key]``, chunked like the documents of X."""
    return da.blockwise(
        _take, "jk", parts, "j", key=key, new_axes={"k": r}, adjust_chunks={"j": X.chunks[1]},
        dtype=np.float64, meta=np.empty((0, 0), dtype=np.float64),
    )


def _sums(parts: da.Array) -> da.Array:
    return da.reduction(
        parts, ak.sums_chunk, ak.sums_agg, combine=ak.sums_combine, axis=0, keepdims=False,
        concatenate=False, split_every=_SPLIT_EVERY, dtype=object,
        meta=np.empty((), dtype=object),
    )


def _run(parts: da.Array, X: da.Array, r: int, *keys: str) -> tuple[Any, ...]:
    """Persist the per-chunk arrays ``keys`` and compute the summed partials, in one graph."""
    arrays = [_rows(parts, key, X, r) for key in keys]
    *arrays, total = dask.persist(*arrays, _sums(parts))
    (total,) = dask.compute(total)
    return (*arrays, total)


def _check_finite(value: float, what: str) -> None:
    if not np.isfinite(value):
        raise DataError(
            f"{what} is not finite: X contains NaN or Inf values. To resolve this, clean the "
            "input data before fitting."
        )


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
    pairs = da.blockwise(
        ak.gram_sq_norm_pair, "cd", X, "ic", X, "id", concatenate=True,
        adjust_chunks={"c": 1, "d": 1}, dtype=np.float64, meta=np.empty((0, 0)),
    )
    return float(pairs.sum().compute())


# -- the algorithms, papers' orientation ------------------------------------------------


def _check_common(est: Any, m: int, n: int) -> None:
    r = est.n_components
    if isinstance(r, bool) or not isinstance(r, numbers.Integral):
        raise ParameterError(f"n_components must be an integer, got {r!r}.")
    if not 1 <= r <= min(m, n):
        raise ParameterError(
            f"n_components={r} is out of range for X with {n} samples and {m} features. To "
            f"resolve this, choose 1 <= n_components <= {min(m, n)}."
        )
    for name in ("max_iter", "n_oversamples", "n_power_iter"):
        value = getattr(est, name, 1)
        minimum = 1 if name == "max_iter" else 0
        if (
            isinstance(value, bool) or not isinstance(value, numbers.Integral)
            or value < minimum
        ):
            raise ParameterError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    tol = getattr(est, "tol", 0.0)
    if (
        isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not np.isfinite(tol)
        or tol < 0
    ):
        raise ParameterError(f"tol must be a finite number >= 0, got {tol!r}.")
    cs = est.chunk_size
    if cs is not None and (
        isinstance(cs, bool) or not isinstance(cs, numbers.Integral) or cs < 1
    ):
        raise ParameterError(f"chunk_size must be None or an integer >= 1, got {cs!r}.")


def _leading_left(X: da.Array, est: Any) -> np.ndarray:
    """Steps V0/G0: leading left singular vectors of X (randomized range finder on chunks)."""
    try:
        U = svd_init(
            X, est.n_components, check_random_state(est.random_state),
            n_iter=est.n_power_iter, n_oversamples=est.n_oversamples, split_every=_SPLIT_EVERY,
        )
    except np.linalg.LinAlgError:  # NaN / Inf in X (NumPy / SciPy input is validated before)
        _check_finite(_sq_norm_X(X), "||X||_F^2")
        raise
    if not np.all(np.isfinite(U)):
        _check_finite(_sq_norm_X(X), "||X||_F^2")
    return U


def _sq_norm_X(X: da.Array) -> float:
    (total,) = dask.compute(_sums(_per_chunk(ak.sq_norm_chunk, X)))
    return total["sq_norm_X"]


def _converged(objective: list[float], tol: float) -> bool:
    if len(objective) < 2:
        return False
    prev, cur = objective[-2], objective[-1]
    return abs(prev - cur) <= tol * abs(prev)


def _vector_ad(X: da.Array, est: Any) -> dict[str, Any]:
    """Steps V0-V3 of Sun et al. (2011) on a column-chunked X; one pass per iteration."""
    m, n = X.shape
    U = _leading_left(X, est)  # V0: U_0 (H_0 = V Sigma = X^T U_0 only enters alpha_1)
    U_d = _on_cluster(U)
    objective: list[float] = []
    for _ in range(est.max_iter):
        # V1 (Eq. 12) gives alpha >= 0 (tr(U_0^T X H_0) = ||X^T U_0||^2 at the start, the
        # nuclear norm of X H afterwards), so V2 does not depend on its value:
        # V2 (Eq. 14): H = rows of X^T U scaled to unit length; with V3's X H in the same pass
        parts = _per_chunk(ak.ad_pass_chunk, X, U_d, "ik")
        H, total = _run(parts, X, est.n_components, "H")
        if not objective:
            sq_norm_X = total["sq_norm_X"]
            _check_finite(sq_norm_X, "||X||_F^2")
        # V3 (Eq. 17-18): U = A B^T from SVD(X H) = A Sigma B^T
        A, s, Bt = scipy.linalg.svd(total["XH"], full_matrices=False, lapack_driver="gesdd")
        U = A @ Bt
        U_d = _on_cluster(U)
        # Eq. 12 for the new (U, H): alpha = tr(U^T X H) / n = sum(s) / n, and Eq. 13 with
        # unit rows of H: ||X - alpha U H^T||^2 = ||X||^2 - 2 alpha tr(U^T X H) + alpha^2 n
        alpha = float(s.sum()) / n
        objective.append(sq_norm_X - 2.0 * alpha * float(s.sum()) + alpha**2 * n)
        if _converged(objective, est.tol):
            break
    return {
        "U": U, "H": H, "alpha": alpha, "objective": objective,
        "n_degenerate": total["n_degenerate"],
    }


class _LinearGraph:
    """``S = X^T X`` on a column-chunked X: S H = X^T (X H), never S (Sun et al. 2011, Eq. 5)."""

    def __init__(self, X: da.Array, U0: np.ndarray, r: int):
        self.X, self.r = X, r
        # G0: H_0 = unit rows of X^T U_0 (= V Sigma^{1/2} of S = X^T X)
        parts = _per_chunk(ak.graph_init_chunk, X, _on_cluster(U0), "ik")
        self.H, total = _run(parts, X, r, "H")
        self._store(total)
        self.sq_norm_S = gram_sq_norm(X)
        _check_finite(self.sq_norm_S, "||X^T X||_F^2")

    def _store(self, total: dict[str, Any]) -> None:
        self.P, self.HtH = total["P"], total["HtH"]
        self.n_degenerate = total["n_degenerate"]
        self.trace_HSH = float(np.vdot(self.P, self.P))  # tr(H^T S H) = ||X H||_F^2

    def gradient(self, alpha: float) -> tuple[float, float, float]:
        parts = _per_chunk(
            ak.graph_gradient_chunk, self.X, self.H, "jk", _on_cluster(self.P), "ik",
            HtH=self.HtH, alpha=alpha,
        )
        self.G, total = _run(parts, self.X, self.r, "G")
        return total["abs_G"], total["abs_H"], total["scale"]

    def update(self, eta: float) -> None:
        parts = _per_chunk(
            ak.graph_update_chunk, self.X, self.H, "jk", self.G, "jk", eta=eta
        )
        self.H, total = _run(parts, self.X, self.r, "H")
        self._store(total)


class _DenseGraph:
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
        self.G, _, scale = ak.graph_gradient(self.H, self.SH, self.HtH, alpha)
        return float(np.abs(self.G).sum()), float(np.abs(self.H).sum()), scale

    def update(self, eta: float) -> None:
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
        if stationary or _converged(objective, est.tol):
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


# -- estimators ------------------------------------------------------------------------


def _validate(est: Any, X: Any, reset: bool) -> Any:
    if isinstance(X, da.Array):
        if X.ndim != 2:
            raise DataError(f"X must be 2-dimensional, got a dask array of shape {X.shape}.")
        if reset:
            est.n_features_in_ = X.shape[1]
        elif X.shape[1] != est.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but {type(est).__name__} is expecting "
                f"{est.n_features_in_} features as input."
            )
        return X
    return validate_data(est, X, accept_sparse=["csr", "csc"], dtype=np.float64, reset=reset)


def _normalised_projection(X_block: Any, U: np.ndarray) -> np.ndarray:
    H, _ = ak.normalise_rows(np.asarray(X_block @ U))
    return H


def _transform(est: Any, X: Any) -> Any:
    U = est.components_.T
    X = _validate(est, X, reset=False)
    if isinstance(X, da.Array):
        return X.rechunk({1: -1}).map_blocks(
            _normalised_projection, U, chunks=(X.chunks[0], (U.shape[1],)),
            dtype=np.float64, meta=np.empty((0, 0)),
        )
    return _normalised_projection(X, U)


def _embedding(H: da.Array, X: Any) -> Any:
    return H if isinstance(X, da.Array) else H.compute()


def _set_fitted(est: Any, out: dict[str, Any], X: Any) -> None:
    """The fitted attributes of :func:`_vector_ad` / :func:`_graph_ad`'s result ``out``."""
    H = out["H"]
    est.embedding_ = _embedding(H, X) if isinstance(H, da.Array) else H
    est.alpha_ = out["alpha"]
    est.objective_ = np.asarray(out["objective"])
    est.residual_ = float(est.objective_[-1])
    est.n_iter_ = len(est.objective_)
    est.n_degenerate_ = out["n_degenerate"]
    est._n_features_out = est.n_components


class _SparseTags:
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # fit (and transform) accept CSR / CSC and dask input
        return tags


class _KernelTags(_SparseTags):
    """The tags of the estimators with a ``kernel`` parameter (S given for "precomputed")."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.kernel == "precomputed"
        return tags


class AngularDecomposition(
    _SparseTags, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator
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
        to this); default :func:`sphdist.methods.spherical_pca.default_chunk_size`.
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
    objective_ : ndarray of shape (n_iter_,), float64
        ``||X^T - alpha U H^T||_F^2`` (Eq. 4) after iteration t = 1..n_iter_, with alpha of
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
    BAE : the brute-force baseline, whose embedding is this estimator's first V2 step.
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
        X = _validate(self, X, reset=True)
        Xt = _document_chunks(X, self.chunk_size)
        _check_common(self, *Xt.shape)
        out = _vector_ad(Xt, self)
        self.components_ = out["U"].T
        _set_fitted(self, out, X)
        return self

    def fit_transform(self, X: Any, y: Any = None) -> Any:
        """Fit and return ``embedding_`` (H of the last V2 step).

        Parameters
        ----------
        X : {ndarray, sparse matrix, dask array} of shape (n_samples, n_features)
            Training data.
        y : ignored

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_components), float64
            Unit rows.
        """
        return self.fit(X).embedding_

    def transform(self, X: Any) -> Any:
        """Embed new samples with the fitted U: step V2 (Eq. 14) for each new sample.

        With U and alpha > 0 fixed, ``argmin_{||h|| = 1} ||x - alpha U h||^2`` is
        ``h = U^T x / ||U^T x||`` (Sun et al. 2011, Eq. 14 for one column).

        Parameters
        ----------
        X : {ndarray, sparse matrix, dask array} of shape (n_samples, n_features)
            New samples in the fitted feature space.

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_components), float64
            Unit rows (``e_1`` where ``U^T x = 0``). Dask input stays lazy and keeps its row
            chunks. On the training data this is the next V2 step, which may differ slightly
            from ``embedding_`` (the V2 step before the last U).
        """
        check_is_fitted(self)
        return _transform(self, X)

    def inverse_transform(self, Y: Any) -> np.ndarray:
        """Map embeddings back to feature space, ``alpha Y U^T`` (the model of Eq. 4).

        Parameters
        ----------
        Y : ndarray of shape (n_samples, n_components), float64
            Embeddings.

        Returns
        -------
        ndarray of shape (n_samples, n_features), float64
            ``alpha_ * Y @ components_``.
        """
        check_is_fitted(self)
        Y = np.asarray(Y, dtype=np.float64)
        return self.alpha_ * Y @ self.components_


class GraphAngularDecomposition(_KernelTags, ClassNamePrefixFeaturesOutMixin, BaseEstimator):
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
    objective_ : ndarray of shape (n_iter_,), float64
        ``||S - alpha H H^T||_F^2`` (Eq. 11) after iteration t = 1..n_iter_, alpha of Eq. 22
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
    >>> from sphdist.methods.angular import GraphAngularDecomposition
    >>> X = np.random.default_rng(0).random((30, 6))
    >>> X /= np.linalg.norm(X, axis=1, keepdims=True)
    >>> gad = GraphAngularDecomposition(n_components=2, kernel="rbf", max_iter=20).fit(X)
    >>> gad.embedding_.shape
    (30, 2)
    >>> bool(np.allclose(np.linalg.norm(gad.embedding_, axis=1), 1.0))
    True
    """

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
        _check_graph_params(self)
        X = _validate(self, X, reset=True)
        self.gamma_ = None
        if self.kernel == "linear":
            Xt = _document_chunks(X, self.chunk_size)
            _check_common(self, *Xt.shape)
            graph: Any = _LinearGraph(Xt, _leading_left(Xt, self), self.n_components)
        else:
            S = _similarity(self, X)
            _check_common(self, S.shape[0], S.shape[0])
            graph = _DenseGraph(S, self.n_components)
        _set_fitted(self, _graph_ad(graph, self), X)
        return self

    def fit_transform(self, X: Any, y: Any = None) -> Any:
        """Fit and return ``embedding_``.

        Parameters
        ----------
        X : {ndarray, sparse matrix, dask array} of shape (n_samples, n_features)
            As in :meth:`fit`.
        y : ignored

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_components), float64
            H with unit rows.
        """
        return self.fit(X).embedding_


def _check_graph_params(est: Any) -> None:
    if est.kernel not in _KERNELS:
        raise ParameterError(
            f"kernel={est.kernel!r} is not supported. To resolve this, use one of "
            f"{', '.join(map(repr, _KERNELS))}."
        )
    gamma = est.gamma
    if gamma is not None and (
        isinstance(gamma, bool) or not isinstance(gamma, numbers.Real)
        or not np.isfinite(gamma) or gamma <= 0
    ):
        raise ParameterError(f"gamma must be None or a finite number > 0, got {gamma!r}.")
    step = getattr(est, "step_size", 1.0)
    if (
        isinstance(step, bool) or not isinstance(step, numbers.Real) or not np.isfinite(step)
        or step <= 0
    ):
        raise ParameterError(f"step_size must be a finite number > 0, got {step!r}.")


def _similarity(est: Any, X: Any) -> np.ndarray:
    """The dense S of ``kernel="rbf"`` / ``"precomputed"`` (sets ``est.gamma_``)."""
    if isinstance(X, da.Array):
        X = X.compute()
    if est.kernel == "rbf":
        S, est.gamma_ = rbf_similarity(X, est.gamma)
        return S
    S = X.toarray() if sp.issparse(X) else np.array(X, dtype=np.float64)
    if S.ndim != 2 or S.shape[0] != S.shape[1]:
        raise DataError(
            f"kernel='precomputed' needs a square similarity matrix, got shape {S.shape}. To "
            "resolve this, pass S of shape (n_samples, n_samples)."
        )
    _check_finite(float(np.vdot(S, S)), "||S||_F^2")
    scale = max(float(np.abs(S).max()), np.finfo(np.float64).tiny)
    asym = float(np.abs(S - S.T).max())
    if asym > 1e-10 * scale:
        raise DataError(
            f"The precomputed similarity matrix is not symmetric (max |S - S^T| = {asym:.3g}). "
            "To resolve this, pass (S + S.T) / 2."
        )
    return S


class BAE(_KernelTags, ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    r"""Brute-force angular embedding (Sun et al. 2011, Sec. 2.3), the baseline of Table 1.

    Vector data (``kernel=None``): the rank-r truncated SVD ``X^T ~ U Sigma V^T`` (X in
    scikit-learn orientation), then every row of ``V Sigma = X U`` scaled to unit length:
    ``q_i = U^T x_i / ||U^T x_i||``. The SVD is the randomized range finder
    :func:`sphdist.core.solver.svd_init` on the column-chunked (sparse) X, plus one pass for the
    embedding and the residual (Eq. 25).

    Graph data (``kernel`` given, as in :class:`GraphAngularDecomposition`): the r leading
    eigenpairs ``S ~ V Sigma V^T``, then the rows of ``V Sigma^{1/2}`` scaled to unit length;
    the residual is Eq. 26. For the linear kernel this embedding equals the vector one (the
    eigenvectors of ``X X^T`` are the left singular vectors of X, scikit-learn orientation).

    Parameters
    ----------
    n_components : int, default 2
        r, ``1 <= r <= min(n_samples, n_features)``.
    kernel : {None, "linear", "rbf", "precomputed"}, default None
        None for vector data (Eq. 25), otherwise the similarity of the graph (Eq. 26).
    gamma : float, optional
        RBF width; default :func:`sun_gamma`.
    random_state : int, RandomState instance or None, default None
        Seed of the randomized SVD.
    n_oversamples : int, default 10
        Extra basis vectors of the randomized SVD (Halko et al. 2011, Sec. 4.2).
    n_power_iter : int, default 4
        Power iterations of the randomized SVD.
    chunk_size : int, optional
        Samples per chunk for NumPy / SciPy input.

    Attributes
    ----------
    embedding_ : ndarray or dask array of shape (n_samples, n_components), float64
        Q, unit rows (``e_1`` for a sample with ``U^T x = 0``).
    components_ : ndarray of shape (n_components, n_features), float64
        ``U^T``, the leading right singular vectors of X (scikit-learn orientation);
        orthonormal rows. Absent for ``kernel="rbf"`` / ``"precomputed"``.
    beta_ : float
        The scale minimising the residual: ``tr(U^T X^T Q) / n`` (Eq. 25) or
        ``tr(Q^T S Q) / tr(Q Q^T Q Q^T)`` (Eq. 26).
    residual_ : float
        Vector data: ``min_beta ||X^T - beta U Q^T||_F^2`` (Eq. 25), directly comparable with
        :attr:`AngularDecomposition.residual_`. Graph data: ``min_beta ||S - beta Q Q^T||_F^2``
        (Eq. 26), comparable with :attr:`GraphAngularDecomposition.residual_`.
    gamma_ : float or None
        The RBF width used (None otherwise).
    n_degenerate_ : int
        Samples whose embedding was zero before normalising.
    n_features_in_ : int
        Number of features seen in ``fit``.

    Examples
    --------
    >>> import numpy as np
    >>> from sphdist.methods.angular import BAE
    >>> X = np.random.default_rng(0).random((40, 10))
    >>> bae = BAE(n_components=3, random_state=0).fit(X)
    >>> bool(np.allclose(np.linalg.norm(bae.transform(X), axis=1), 1.0))
    True
    """

    def __init__(
        self,
        n_components: int = 2,
        *,
        kernel: str | None = None,
        gamma: float | None = None,
        random_state: Any = None,
        n_oversamples: int = 10,
        n_power_iter: int = 4,
        chunk_size: int | None = None,
    ):
        self.n_components = n_components
        self.kernel = kernel
        self.gamma = gamma
        self.random_state = random_state
        self.n_oversamples = n_oversamples
        self.n_power_iter = n_power_iter
        self.chunk_size = chunk_size

    def fit(self, X: Any, y: Any = None) -> BAE:
        """Compute the embedding and its residual.

        Parameters
        ----------
        X : {ndarray, sparse matrix, dask array} of shape (n_samples, n_features)
            Samples as rows (the similarity matrix S for ``kernel="precomputed"``).
        y : ignored

        Returns
        -------
        self : BAE
            The fitted estimator.

        Raises
        ------
        ParameterError
            If a parameter is out of range.
        DataError
            As :meth:`GraphAngularDecomposition.fit` for graph data; NaN or Inf in dask
            input.
        """
        if self.kernel is not None:
            _check_graph_params(self)
        X = _validate(self, X, reset=True)
        self.gamma_ = None
        if self.kernel in (None, "linear"):
            Xt = _document_chunks(X, self.chunk_size)
            _check_common(self, *Xt.shape)
            U = _leading_left(Xt, self)
            parts = _per_chunk(ak.ad_pass_chunk, Xt, _on_cluster(U), "ik")
            Q, total = _run(parts, Xt, self.n_components, "H")
            sq_norm_X = total["sq_norm_X"]
            _check_finite(sq_norm_X, "||X||_F^2")
            n = Xt.shape[1]
            if self.kernel is None:
                # Eq. 25: beta = tr(U^T X Q) / n (unit rows of Q), J5 = ||X||^2 - n beta^2
                self.beta_ = float(np.vdot(U, total["XH"])) / n
                self.residual_ = sq_norm_X - n * self.beta_**2
            else:
                # Eq. 26 with tr(Q^T S Q) = ||X Q||^2 and S never formed
                trace, QtQ = float(np.vdot(total["XH"], total["XH"])), total["HtH"]
                q = float(np.vdot(QtQ, QtQ))
                self.beta_ = trace / q
                self.residual_ = gram_sq_norm(Xt) - trace**2 / q
            self.components_ = U.T
            self.embedding_ = _embedding(Q, X)
            self.n_degenerate_ = total["n_degenerate"]
        else:
            S = _similarity(self, X)
            _check_common(self, S.shape[0], S.shape[0])
            g = _DenseGraph(S, self.n_components)  # G0's H_0 is Q
            Q, self.n_degenerate_ = g.H, g.n_degenerate
            q = float(np.vdot(g.HtH, g.HtH))
            self.beta_ = g.trace_HSH / q
            self.residual_ = g.sq_norm_S - g.trace_HSH**2 / q
            self.embedding_ = Q
        self._n_features_out = self.n_components
        return self

    def fit_transform(self, X: Any, y: Any = None) -> Any:
        """Fit and return ``embedding_``.

        Parameters
        ----------
        X : {ndarray, sparse matrix, dask array} of shape (n_samples, n_features)
            As in :meth:`fit`.
        y : ignored

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_components), float64
            Q, unit rows.
        """
        return self.fit(X).embedding_

    def transform(self, X: Any) -> Any:
        """Embed new samples: ``q = U^T x / ||U^T x||`` (Sec. 2.3 for one sample).

        Parameters
        ----------
        X : {ndarray, sparse matrix, dask array} of shape (n_samples, n_features)
            New samples.

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_components), float64
            Unit rows; equal to ``embedding_`` on the training data.

        Raises
        ------
        ParameterError
            For ``kernel="rbf"`` or ``"precomputed"`` (no out-of-sample map).
        """
        check_is_fitted(self)
        if self.kernel not in (None, "linear"):
            raise ParameterError(
                f"BAE(kernel={self.kernel!r}) has no transform for new samples. To resolve "
                "this, use fit_transform on all samples."
            )
        return _transform(self, X)
