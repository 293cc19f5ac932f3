"""Estimator plumbing shared by the methods: parameter and input validation, tags, transform.

Orientation: scikit-learn's, X of shape (n_samples, n_features). Parameters are declared per
class in scikit-learn's ``_parameter_constraints`` and checked by :mod:`sphdist._validation`
(the package's one validation mechanism) when ``fit`` starts (scikit-learn's ``_fit_context``);
a value outside them raises :class:`sphdist._validation.InvalidParameterValueError`, both a
:class:`sphdist.errors.ParameterError` (a ``ValueError``) and scikit-learn's
``InvalidParameterError``.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
from sklearn.base import _fit_context
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from sphdist._validation import ValidatedParams
from sphdist.core import graph, kernels
from sphdist.errors import DataError, ParameterError

__all__ = [
    "SparseInput",
    "KernelTags",
    "EmbeddingMixin",
    "SphereTransform",
    "SphereModel",
    "check_finite",
    "validate_input",
    "unit_rows",
    "affine_coordinates",
    "fit_context",
]

#: The decorator of every ``fit``: scikit-learn's ``_fit_context``, which validates the
#: parameters (:class:`sphdist._validation.ValidatedParams`) unless the caller did, and lets the
#: fit's nested calls skip validating theirs again (``prefer_skip_nested_validation``).
fit_context = _fit_context(prefer_skip_nested_validation=True)


def check_finite(value: float, what: str) -> None:
    """Raise :class:`DataError` when a summed quantity ``what`` of X is NaN or Inf."""
    if not np.isfinite(value):
        raise DataError(
            f"{what} is not finite: X contains NaN or Inf values. To resolve this, clean the "
            "input data before fitting."
        )


def validate_input(
    est: Any, X: Any, reset: bool, ensure_min_samples: int = 1, lazy: bool = True
) -> Any:
    """scikit-learn's ``validate_data`` for NumPy / SciPy input; shape checks for dask input.

    Parameters
    ----------
    est : estimator
        Gets ``n_features_in_`` when ``reset``.
    X : {ndarray, sparse matrix, dask.array.Array} of shape (n_samples, n_features)
        Dask input is not read (it stays lazy).
    reset : bool
        True in ``fit``.
    ensure_min_samples : int, default 1
        For NumPy / SciPy input in ``fit``.
    lazy : bool, default True
        Keep dask input lazy; False reads it into memory like any array-like.

    Returns
    -------
    {ndarray, CSR / CSC matrix, dask.array.Array}
        float64 for NumPy / SciPy input.

    Raises
    ------
    DataError
        If dask input is not 2-dimensional.
    ValueError
        If X has another number of features than in ``fit``, or NumPy / SciPy input holds NaN
        or Inf.
    """
    if lazy and isinstance(X, da.Array):
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
    return validate_data(
        est, X, accept_sparse=["csr", "csc"], dtype=np.float64, reset=reset,
        ensure_min_samples=ensure_min_samples if reset else 1,
    )


class SparseInput(ValidatedParams):
    """Dense, CSR / CSC (and dask) input: scikit-learn's sparse tag, input and parameter checks.

    Mixed in before ``BaseEstimator``; its ``_validate_params`` is that of :class:`ValidatedParams`.
    """

    #: ``ensure_min_samples`` when fitting.
    _min_fit_samples = 1
    #: Whether dask input stays lazy (the chunked methods) or is read into memory.
    _lazy_input = False

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # fit (and transform) accept CSR / CSC and dask input
        return tags

    def _validate(self, X: Any, reset: bool) -> Any:
        return validate_input(self, X, reset, self._min_fit_samples, self._lazy_input)

    def _transform_input(self, X: Any) -> Any:
        """X for ``transform`` and the like: the estimator fitted, X validated against ``fit``."""
        check_is_fitted(self)
        return self._validate(X, reset=False)


class KernelTags(SparseInput):
    """The tags of the estimators with a ``kernel`` parameter (S given for "precomputed")."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.kernel == "precomputed"
        return tags


class EmbeddingMixin:
    """``fit_transform`` of the estimators whose fit computes ``embedding_``."""

    def fit_transform(self, X: Any, y: Any = None) -> Any:
        """Fit and return ``embedding_``, one unit row per sample.

        Parameters
        ----------
        X : {ndarray, sparse matrix, dask array} of shape (n_samples, n_features)
            Training data, as in ``fit``.
        y : ignored

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_components)
            The training embedding (a dask array for dask input where ``fit`` keeps one).
        """
        return self.fit(X).embedding_


def unit_rows(X_block: Any, U: np.ndarray) -> np.ndarray:
    """``normalise(x U)`` per row: the exact V-step of Liu et al. (2019), Eq. 3.12 at lam = 2.

    Parameters
    ----------
    X_block : {ndarray, sparse matrix} of shape (n_b, m), float64
        Samples as rows.
    U : ndarray of shape (m, r), float64
        Orthonormal columns.

    Returns
    -------
    ndarray of shape (n_b, r), float64
        ``U^T x / ||U^T x||`` per sample (also Sun et al. 2011, Eq. 14); ``e_1`` where
        ``U^T x = 0``.
    """
    V, _ = kernels.v_step(np.asarray(X_block @ U).T, None, 2.0)
    return V.T


def affine_coordinates(est: Any, X: Any, origin: np.ndarray) -> tuple[Any, np.ndarray]:
    """Coordinates ``U^T (x_i - origin)`` in the fitted affine subspace, for ``transform``.

    Parameters
    ----------
    est : estimator
        Fitted, with orthonormal rows ``components_ = U^T`` of shape (k, n_features).
    X : {ndarray, sparse matrix} of shape (n_samples, n_features)
        Samples; validated against ``fit`` (sparse X is never centred explicitly).
    origin : ndarray of shape (n_features,), float64
        The subspace's origin (R1-PCA's mean, the centre of Li & Dunson's sphere).

    Returns
    -------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features), float64
        The validated samples.
    coordinates : ndarray of shape (n_samples, k), float64
        ``X U - 1 (U^T origin)^T``.

    Raises
    ------
    ValueError
        If X has another number of features than in ``fit``, or holds NaN or Inf.
    """
    X = est._transform_input(X)
    return X, np.asarray(X @ est.components_.T) - est.components_ @ origin


class SphereTransform:
    """``transform`` of the estimators with orthonormal ``components_ = U^T``: unit rows of X U.

    Mixed in before :class:`SparseInput`.
    """

    #: The values of the ``kernel`` parameter that have an out-of-sample map (None: always).
    _transform_kernels: tuple[str | None, ...] | None = None

    def transform(self, X: Any) -> Any:
        """Embed samples on the unit sphere, ``v = U^T x / ||U^T x||`` row by row.

        With the fitted U this is the exact V-step of Liu et al. (2019), Eq. 3.12 at lam = 2:
        ``argmin_{||v|| = 1} ||x - U v||^2``, which is also step V2 of Sun et al. (2011), Eq. 14,
        for one sample, and the BAE embedding of Sec. 2.3 there.

        Parameters
        ----------
        X : {ndarray, sparse matrix, dask array} of shape (n_samples, n_features)
            New samples in the fitted feature space.

        Returns
        -------
        ndarray or dask array of shape (n_samples, n_components), float64
            Unit rows (:func:`unit_rows`); a sample with ``U^T x = 0`` is mapped to the first
            basis vector. Dask input stays lazy and keeps its row chunks. On the training data
            of an iterative fit this is the next V-step, which may differ slightly from
            ``embedding_`` (the one before the last U).

        Raises
        ------
        ParameterError
            If the estimator's ``kernel`` has no out-of-sample map (``BAE(kernel="rbf")``).
        ValueError
            If X has another number of features than in ``fit`` (or, NumPy / SciPy, NaN or Inf).
        """
        check_is_fitted(self)
        if self._transform_kernels is not None and self.kernel not in self._transform_kernels:
            raise ParameterError(
                f"{type(self).__name__}(kernel={self.kernel!r}) has no transform for new "
                "samples. To resolve this, use fit_transform on all samples."
            )
        return graph.map_rows(unit_rows, validate_input(self, X, reset=False), self.components_.T)


class SphereModel(SphereTransform):
    """:class:`SphereTransform` and its inverse, the fitted model ``X^T ~ scale U V``."""

    #: The fitted attribute holding the scale of the model (None: 1).
    _scale: str | None = None

    def inverse_transform(self, Y: Any) -> np.ndarray:
        """Map embeddings back to feature space, ``scale * Y U^T`` (the model's approximation).

        ``scale`` is 1 for Spherical PCA (``X^T ~ U V``, Liu et al. 2019, Eq. 2.3) and
        ``alpha_`` for Angular Decomposition (``X^T ~ alpha U H^T``, Sun et al. 2011, Eq. 4).

        Parameters
        ----------
        Y : ndarray of shape (n_samples, n_components), float64
            Embeddings.

        Returns
        -------
        ndarray of shape (n_samples, n_features), float64
            ``scale * Y @ components_``: for the training embedding, the rank-r reconstruction
            of X.
        """
        check_is_fitted(self)
        Y = check_array(Y, dtype=np.float64)
        if self._scale is None:
            return Y @ self.components_
        return getattr(self, self._scale) * Y @ self.components_
