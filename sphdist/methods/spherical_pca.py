"""scikit-learn style estimator for Spherical PCA (Liu et al. 2019).

Orientation: this module follows scikit-learn, X of shape (n_samples, n_features). Internally
the papers' X of shape (n_features, n_samples) is used (documents as columns), chunked along
the samples, and handed to :mod:`sphdist.core.solver`.
"""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from sphdist.core import kernels, solver

__all__ = ["SphericalPCA", "default_chunk_size"]


def default_chunk_size(n_features: int, itemsize: int = 8, target_bytes: int = 64 << 20) -> int:
    """Samples per chunk so that a dense chunk of X takes about ``target_bytes``.

    Parameters
    ----------
    n_features : int
        m.
    itemsize : int, default 8
        Bytes per value (float64).
    target_bytes : int, default 64 MiB
        Memory target per dense chunk, in bytes.

    Returns
    -------
    int
        ``max(1, target_bytes // (n_features * itemsize))``.

    Examples
    --------
    >>> default_chunk_size(1000)
    8388
    """
    return max(1, target_bytes // max(1, n_features * itemsize))


def _document_chunks(X: Any, chunk_size: int | None) -> da.Array:
    """X (n_samples, n_features) -> papers' X (n_features, n_samples), chunked along samples."""
    if isinstance(X, da.Array):
        Xt = X.T
        if chunk_size is not None:
            Xt = Xt.rechunk({1: chunk_size})
        return Xt.rechunk({0: -1})
    n, m = X.shape
    size = chunk_size or default_chunk_size(m)
    if sp.issparse(X):
        Xt = sp.csc_matrix(X.T, dtype=np.float64)
        bounds = list(range(0, n, size)) + [n]
        blocks = [
            da.from_delayed(
                dask.delayed(Xt[:, a:b]), shape=(m, b - a), dtype=np.float64,
                meta=sp.csc_matrix((0, 0), dtype=np.float64),
            )
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
        return da.concatenate(blocks, axis=1)
    return da.from_array(np.asarray(X, dtype=np.float64).T, chunks=(m, size))


def _transform_block(X_block: Any, U: np.ndarray) -> np.ndarray:
    V, _ = kernels.v_step(np.asarray(X_block @ U).T, None, 2.0)
    return V.T


class SphericalPCA(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Spherical PCA: ``X^T ~ U V`` with orthonormal U and unit-norm columns of V.

    Fits Liu et al. (2019), Eq. 2.3-2.4, ``min ||X^T - U V||_F^2`` s.t. ``U^T U = I``,
    ``||v_j||_2 = 1``, by Algorithm 1 (alternating linearized minimization) on Dask. The
    embedding of a sample is a point on the unit sphere in R^r, so Euclidean distance between
    embeddings is a monotone function of the angle between them.

    Parameters
    ----------
    n_components : int, default 2
        r, the dimension of the embedding; ``1 <= r <= min(n_samples, n_features)``.
    lam : float or {"exact", "palm", "theory"}, default "exact"
        Proximal parameter of the V-step (Eq. 3.12), >= 2. See :mod:`sphdist.core.solver`.
    mu : float or {"exact", "palm", "theory"}, default "exact"
        Proximal parameter of the U-step (Eq. 3.11), >= 0. ``"exact"`` is exact block
        minimisation ``U = polar(X^T V^T)``.
    max_iter : int, default 100
        Maximum number of iterations.
    tol : float, default 1e-4
        Stop when the relative objective change falls below it.
    init : {"random", "svd"}, default "random"
        Initial U: Haar-random, or the leading left singular vectors (Sun et al. 2011, V0).
    random_state : int, RandomState instance or None, default None
        Seed of the initialisation.
    init_n_iter : int, default 4
        Power iterations of ``init="svd"``.
    chunk_size : int, optional
        Samples per chunk for NumPy / SciPy input (dask input keeps its chunks); default
        :func:`default_chunk_size`.
    split_every : int, default 8
        Fan-in of the reduction tree.
    dtype : {"float64", "float32"}, default "float64"
        Compute dtype of ``U^T x`` and the V-step, and dtype of ``embedding_``; the partial
        products, the objective and ``components_`` stay float64 (see
        :func:`sphdist.core.solver.fit`). float32 halves the memory of V and of U on the workers.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features), float64
        ``U^T``; orthonormal rows.
    embedding_ : ndarray or dask array of shape (n_samples, n_components), of ``dtype``
        ``V^T`` of the fit, unit rows (a dask array for dask input).
    objective_ : ndarray of shape (n_iter_ + 1,), float64
        ``||X^T - U V||_F^2`` after initialisation and after every iteration.
    u_step_norm_, v_step_norm_ : ndarray of shape (n_iter_,), float64
        ``||U_k - U_{k-1}||_F`` and ``||V_k - V_{k-1}||_F``.
    n_iter_ : int
        Iterations run.
    n_degenerate_ : int
        Samples whose V-step direction was zero (e.g. all-zero rows), kept as a defined unit
        vector.
    n_features_in_ : int
        Number of features seen in ``fit``.

    Examples
    --------
    >>> import numpy as np
    >>> from sphdist import SphericalPCA
    >>> X = np.random.default_rng(0).random((50, 8))
    >>> model = SphericalPCA(n_components=3, random_state=0).fit(X)
    >>> bool(np.allclose(np.linalg.norm(model.transform(X), axis=1), 1.0))
    True
    """

    def __init__(
        self,
        n_components: int = 2,
        *,
        lam: float | str = "exact",
        mu: float | str = "exact",
        max_iter: int = 100,
        tol: float = 1e-4,
        init: str = "random",
        random_state: Any = None,
        init_n_iter: int = 4,
        chunk_size: int | None = None,
        split_every: int = 8,
        dtype: str = "float64",
    ):
        self.n_components = n_components
        self.lam = lam
        self.mu = mu
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.random_state = random_state
        self.init_n_iter = init_n_iter
        self.chunk_size = chunk_size
        self.split_every = split_every
        self.dtype = dtype

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # fit and transform accept CSR / CSC (and dask) input
        return tags

    def _validate(self, X: Any, reset: bool) -> Any:
        if isinstance(X, da.Array):
            if reset:
                self.n_features_in_ = X.shape[1]
            return X
        return validate_data(
            self, X, accept_sparse=["csr", "csc"], dtype=np.float64, reset=reset
        )

    def fit(self, X: Any, y: Any = None) -> SphericalPCA:
        """Fit the model.

        Parameters
        ----------
        X : {ndarray, sparse matrix, dask array} of shape (n_samples, n_features)
            Training data, one sample (document) per row.
        y : ignored

        Returns
        -------
        self : SphericalPCA
            The fitted estimator.

        Raises
        ------
        ParameterError
            If a parameter is out of range (a ``ValueError``).
        ValueError
            If X holds NaN or Inf.
        """
        X = self._validate(X, reset=True)
        state = solver.fit(
            _document_chunks(X, self.chunk_size), self.n_components,
            lam=self.lam, mu=self.mu, max_iter=self.max_iter, tol=self.tol, init=self.init,
            random_state=self.random_state, init_n_iter=self.init_n_iter,
            split_every=self.split_every, dtype=self.dtype,
        )
        self.components_ = state.U.T
        embedding = state.V.T
        self.embedding_ = embedding if isinstance(X, da.Array) else embedding.compute()
        self.objective_ = np.asarray(state.objective)
        self.u_step_norm_ = np.asarray(state.u_step_norm)
        self.v_step_norm_ = np.asarray(state.v_step_norm)
        self.n_iter_ = state.iteration
        self.n_degenerate_ = state.n_degenerate
        self._n_features_out = self.n_components
        return self

    def fit_transform(self, X: Any, y: Any = None) -> Any:
        """Fit and return the fitted embedding ``V^T``.

        Parameters
        ----------
        X : {ndarray, sparse matrix, dask array} of shape (n_samples, n_features)
            Training data.
        y : ignored

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_components), float64
            Unit rows: the V of the last iteration (Eq. 3.12), transposed.
        """
        return self.fit(X).embedding_

    def transform(self, X: Any) -> Any:
        """Embed samples by the exact V-step, ``normalise(X U)`` row by row.

        Parameters
        ----------
        X : {ndarray, sparse matrix, dask array} of shape (n_samples, n_features)
            New samples in the fitted feature space.

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_components), float64
            Unit rows (Liu et al. 2019, Eq. 3.12 with lam = 2: ``v = U^T x / ||U^T x||``).
            A sample with ``U^T x = 0`` is mapped to the first basis vector. Dask input stays
            lazy and keeps its row chunks.
        """
        check_is_fitted(self)
        U = self.components_.T
        if isinstance(X, da.Array):
            if X.shape[1] != self.n_features_in_:
                raise ValueError(
                    f"X has {X.shape[1]} features, but SphericalPCA is expecting "
                    f"{self.n_features_in_} features as input."
                )
            return X.rechunk({1: -1}).map_blocks(
                _transform_block, U, chunks=(X.chunks[0], (U.shape[1],)), dtype=np.float64,
                meta=np.empty((0, 0)),
            )
        X = self._validate(X, reset=False)
        return _transform_block(X, U)

    def inverse_transform(self, Y: Any) -> np.ndarray:
        """Map embeddings back to feature space, ``Y U^T``.

        Parameters
        ----------
        Y : ndarray of shape (n_samples, n_components), float64
            Embeddings.

        Returns
        -------
        ndarray of shape (n_samples, n_features), float64
            The rank-r reconstruction ``(U V)^T`` (the model's approximation of X).
        """
        check_is_fitted(self)
        Y = check_array(Y, dtype=np.float64)
        return Y @ self.components_
