"""scikit-learn style estimator for Spherical PCA (Liu et al. 2019).

Orientation: this module follows scikit-learn, X of shape (n_samples, n_features). Internally
the papers' X of shape (n_features, n_samples) is used (documents as columns), chunked along
the samples (:func:`sphdist.core.graph.document_chunks`), and handed to
:mod:`sphdist.core.solver`.

References
----------
.. [1] Liu, K., Li, Q., Wang, H. and Tang, G. (2019). Spherical Principal Component Analysis. SDM.
.. [2] Sun, D., Ding, C., Luo, B. and Tang, J. (2011). Angular Decomposition. IJCAI.
"""

from __future__ import annotations

import warnings
from typing import Any

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin

from sphdist._validation import FloatDtype, Hidden, Number, StrOptions
from sphdist.core import _device, graph, params, solver
from sphdist.methods._base import EmbeddingMixin, SparseInput, SphereModel, fit_context

__all__ = ["SphericalPCA"]


def _constraints(name: str) -> list[Any]:
    """scikit-learn's constraints of the row ``name`` of :data:`sphdist.core.params.PARAMS`.

    ``_parameter_constraints``, which scikit-learn's estimator checks read: a
    :class:`~sphdist.core.params.Range` is a :class:`sphdist._validation.Number` (its
    ``Interval``, booleans refused), a :class:`~sphdist.core.params.Choice` a ``StrOptions``
    (:class:`sphdist._validation.FloatDtype` for dtypes), other items are as they are.
    """
    out: list[Any] = []
    for item in params.PARAMS[name].spec:
        if isinstance(item, params.Range):
            out.append(Number(item.type, item.left, item.right, closed=item.closed))
        elif isinstance(item, params.Choice):
            out.append(FloatDtype() if item.dtype else StrOptions(set(item.options)))
        else:
            out.append(item)
    return out


#: The signature's defaults: the parameter table's rows (:data:`sphdist.core.params.PARAMS`).
_DEFAULT = params.defaults(list(params.PARAMS))

class SphericalPCA(
    EmbeddingMixin, SphereModel, SparseInput, ClassNamePrefixFeaturesOutMixin, TransformerMixin,
    BaseEstimator,
):
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
    random_state : int, RandomState instance or None, default 0
        Seed of the initialisation. 0, as for ``sphdist fit`` and
        :class:`sphdist.jobs.fit.FitRequest`: every fit path is reproducible from its recorded
        parameters unless asked otherwise (a checkpointed fit must restart to the same
        iterates); pass None for a fresh draw from NumPy's global state.
    n_power_iter : int, default 4
        Power iterations of ``init="svd"`` (``n_power_iter + 1`` passes over X; the name of
        the angular methods and of :func:`dask.array.linalg.svd_compressed`).
    chunk_size : int, optional
        Samples per chunk for NumPy / SciPy input (dask input keeps its chunks); default
        :func:`sphdist.core.graph.default_chunk_size`.
    split_every : int, default 8
        Fan-in of the reduction tree that sums the partials of a pass's blocks (every block
        one task, all of them independent, :func:`sphdist.core.graph.block_pass`).
    dtype : {"float64", "float32"}, default "float64"
        Compute dtype of ``U^T x`` and the V-step, and dtype of ``embedding_``; the partial
        products, the objective and ``components_`` stay float64 (see
        :func:`sphdist.core.solver.fit`). float32 halves the memory of V and of U on the workers.
    polar : {"auto", "svd", "gram"}, default "auto"
        Route of the U-step's polar factor (:func:`sphdist.core.kernels.polar_factor`).
    partials : {"auto", "rows", "dense"}, default "auto"
        Format of the ``X V^T`` block partials; the result is bitwise the same for all three.
    accelerate : bool, default True
        Extrapolated exact U-step with a monotone safeguard (Ang and Gillis 2019;
        :func:`sphdist.core.solver.iterate`); no effect unless lam and mu are "exact".
    device : {"cpu", "cuda"}, default "cpu"
        Where the chunk kernels run (``U^T X``, the V-step, the partial products and the
        final ``embedding_``): ``"cuda"`` needs CuPy (``pip install 'sphdist[gpu]'``) and a
        CUDA device, and computes them with cuSPARSE/cuBLAS
        (:func:`sphdist.core.kernels.pass_block`); the U-step, the objective and
        ``components_`` stay on the host in float64. ``init="svd"`` runs on the CPU.
    init_n_iter : int, default "deprecated"
        Old name of ``n_power_iter``; given, it is used in its place with a
        ``FutureWarning``. Removed in the next release.

    The constraints of every parameter are those of :data:`sphdist.core.params.PARAMS`.

    Attributes
    ----------
    components_ : ndarray of shape (n_components, n_features), float64
        ``U^T``; orthonormal rows.
    embedding_ : ndarray or dask array of shape (n_samples, n_components), of ``dtype``
        The training embedding ``V^T``, unit rows (a dask array for dask input).
    objective_ : ndarray of shape ``(n_iter_ + 1,)``, float64
        ``||X^T - U V||_F^2`` after initialisation and after every iteration.
    u_step_norm_, v_step_norm_ : ndarray of shape ``(n_iter_,)``, float64
        ``||U_k - U_{k-1}||_F`` and ``||V_k - V_{k-1}||_F`` (NaN for the exact V-step, which
        keeps no ``V_{k-1}``).
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
        n_components: int = _DEFAULT["n_components"],
        *,
        lam: float | str = _DEFAULT["lam"],
        mu: float | str = _DEFAULT["mu"],
        max_iter: int = _DEFAULT["max_iter"],
        tol: float = _DEFAULT["tol"],
        init: str = _DEFAULT["init"],
        random_state: Any = _DEFAULT["random_state"],
        n_power_iter: int = _DEFAULT["n_power_iter"],
        chunk_size: int | None = _DEFAULT["chunk_size"],
        split_every: int = _DEFAULT["split_every"],
        dtype: str = _DEFAULT["dtype"],
        polar: str = _DEFAULT["polar"],
        partials: str = _DEFAULT["partials"],
        accelerate: bool = _DEFAULT["accelerate"],
        device: str = _DEFAULT["device"],
        init_n_iter: Any = "deprecated",
    ):
        self.n_components = n_components
        self.lam = lam
        self.mu = mu
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.random_state = random_state
        self.n_power_iter = n_power_iter
        self.chunk_size = chunk_size
        self.split_every = split_every
        self.dtype = dtype
        self.polar = polar
        self.partials = partials
        self.accelerate = accelerate
        self.device = device
        self.init_n_iter = init_n_iter

    _parameter_constraints: dict = {
        **{name: _constraints(name) for name in params.PARAMS},
        # the old name of n_power_iter (sphdist.core.params.RENAMED), for one release
        "init_n_iter": [*_constraints("n_power_iter"), Hidden(StrOptions({"deprecated"}))],
    }

    _lazy_input = True

    @fit_context
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
        DeviceError
            With ``device="cuda"``, if CuPy is not installed or no CUDA device is usable
            (a ``RuntimeError``), before any work.
        """
        _device.check_device(self.device)
        X = self._validate(X, reset=True)
        solver_params = {name: getattr(self, name) for name in params.SOLVER_PARAMS}
        if self.init_n_iter != "deprecated":
            warnings.warn(
                "SphericalPCA: 'init_n_iter' was renamed 'n_power_iter' and is accepted until "
                f"the next release; pass n_power_iter={self.init_n_iter!r}.", FutureWarning,
                stacklevel=2,
            )
            solver_params["n_power_iter"] = self.init_n_iter
        Xc = graph.document_chunks(X, self.chunk_size)
        # an in-memory X: the embedding is gathered anyway, so the last pass's V is held for
        # it instead of a pass over X to recompute it (bitwise the same)
        state = solver.fit(Xc, hold_V=not isinstance(X, da.Array), **solver_params)
        self.components_ = state.U_full.T
        embedding = solver.embedding(Xc, state, dtype=self.dtype, device=self.device).T
        self.embedding_ = embedding if isinstance(X, da.Array) else embedding.compute()
        self.objective_ = np.asarray(state.objective)
        self.u_step_norm_ = np.asarray(state.u_step_norm)
        self.v_step_norm_ = np.asarray(state.v_step_norm)
        self.n_iter_ = state.iteration
        self.n_degenerate_ = state.n_degenerate
        self._n_features_out = self.n_components
        return self
