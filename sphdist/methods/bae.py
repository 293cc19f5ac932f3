r"""Brute-force angular embedding, BAE (Sun, Ding, Luo and Tang, IJCAI 2011, Sec. 2.3).

The baseline of Sun et al.'s Table 1: a truncated SVD (vector data) or eigendecomposition of
the similarity matrix (graph data), then every document's embedding scaled to unit length; its
residual is Eq. 25 (vector) or Eq. 26 (graph). Orientation: scikit-learn's, X of shape
(n_samples, n_features). The SVD is step V0 of :mod:`sphdist.methods.angular` on the document
chunks, the graph side that of :mod:`sphdist.methods.graph_angular`.

References
----------
.. [1] Sun, D., Ding, C., Luo, B. and Tang, J. (2011). Angular Decomposition. IJCAI.
.. [2] Halko, N., Martinsson, P.-G. and Tropp, J. A. (2011). Finding Structure with Randomness:
   Probabilistic Algorithms for Constructing Approximate Matrix Decompositions. SIAM Review.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin

from sphdist.methods._base import (
    EmbeddingMixin,
    KernelTags,
    SphereTransform,
    check_finite,
    fit_context,
)
from sphdist.methods.angular import (
    SVD_PARAMETER_CONSTRAINTS,
    chunked_input,
    embedding,
    leading_left,
    rows_pass,
)
from sphdist.methods.graph_angular import (
    GRAPH_PARAMETER_CONSTRAINTS,
    DenseGraph,
    gram_sq_norm,
    similarity,
)

__all__ = ["BAE"]


class BAE(
    EmbeddingMixin, SphereTransform, KernelTags, ClassNamePrefixFeaturesOutMixin,
    TransformerMixin, BaseEstimator,
):
    r"""Brute-force angular embedding (Sun et al. 2011, Sec. 2.3), the baseline of Table 1.

    Vector data (``kernel=None``): the rank-r truncated SVD ``X^T ~ U Sigma V^T`` (X in
    scikit-learn orientation), then every row of ``V Sigma = X U`` scaled to unit length:
    ``q_i = U^T x_i / ||U^T x_i||``. The SVD is the randomized range finder
    :func:`sphdist.core.solver.svd_init` on the column-chunked (sparse) X, plus one pass for the
    embedding and the residual (Eq. 25).

    Graph data (``kernel`` given, as in :class:`sphdist.GraphAngularDecomposition`): the r leading
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
        RBF width; default :func:`sphdist.methods.graph_angular.sun_gamma`.
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
        :attr:`sphdist.AngularDecomposition.residual_`. Graph data:
        ``min_beta ||S - beta Q Q^T||_F^2`` (Eq. 26), comparable with
        :attr:`sphdist.GraphAngularDecomposition.residual_`.
    gamma_ : float or None
        The RBF width used (None otherwise).
    n_degenerate_ : int
        Samples whose embedding was zero before normalising.
    n_features_in_ : int
        Number of features seen in ``fit``.

    Examples
    --------
    >>> import numpy as np
    >>> from sphdist import BAE
    >>> X = np.random.default_rng(0).random((40, 10))
    >>> bae = BAE(n_components=3, random_state=0).fit(X)
    >>> bool(np.allclose(np.linalg.norm(bae.transform(X), axis=1), 1.0))
    True
    """

    _parameter_constraints: dict = {
        **SVD_PARAMETER_CONSTRAINTS, **GRAPH_PARAMETER_CONSTRAINTS,
        "kernel": [None, *GRAPH_PARAMETER_CONSTRAINTS["kernel"]],
    }
    _lazy_input = True
    #: transform (q = U^T x / ||U^T x||, Sec. 2.3 for one sample) needs U: vector data or the
    #: linear kernel; RBF and precomputed similarities have no out-of-sample map
    _transform_kernels = (None, "linear")

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

    @fit_context
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
        X = self._validate(X, reset=True)
        self.gamma_ = None
        if self.kernel in (None, "linear"):
            Xt = chunked_input(self, X)
            U = leading_left(Xt, self)
            Q, total = rows_pass(Xt, U, self.n_components)
            sq_norm_X = total["sq_norm_X"]
            check_finite(sq_norm_X, "||X||_F^2")
            n = Xt.shape[1]
            if self.kernel is None:
                # Eq. 25: beta = tr(U^T X Q) / n (unit rows of Q), J5 = ||X||^2 - n beta^2
                self.beta_ = float(np.vdot(U, total["XVt"])) / n
                self.residual_ = sq_norm_X - n * self.beta_**2
            else:
                # Eq. 26 with tr(Q^T S Q) = ||X Q||^2 and S never formed
                trace, QtQ = float(np.vdot(total["XVt"], total["XVt"])), total["VVt"]
                q = float(np.vdot(QtQ, QtQ))
                self.beta_ = trace / q
                self.residual_ = gram_sq_norm(Xt) - trace**2 / q
            self.components_ = U.T
            self.embedding_ = embedding(Q, X)
            self.n_degenerate_ = total["n_degenerate"]
        else:
            g = DenseGraph(similarity(self, X), self.n_components)  # G0's H_0 is Q
            Q, self.n_degenerate_ = g.H, g.n_degenerate
            q = float(np.vdot(g.HtH, g.HtH))
            self.beta_ = g.trace_HSH / q
            self.residual_ = g.sq_norm_S - g.trace_HSH**2 / q
            self.embedding_ = Q
        self._n_features_out = self.n_components
        return self
