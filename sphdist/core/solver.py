"""Liu et al. (2019) Algorithm 1 on Dask: column-chunked X, one pass over X per iteration.

Each iteration k -> k+1 is

1. **U-step, on the driver** (Eq. 3.11): ``U_{k+1} = polar(M)`` from the reduced partials
   ``X V_k^T`` (m, r) and ``V_k V_k^T`` (r, r) of the previous pass (:func:`kernels.u_step`);
2. **one pass over X**: the document chunks are split into at most ``max_partials``
   accumulation chains of consecutive blocks (:func:`graph.chain_bounds`, a function of the
   chunk layout only); one task per block reads each of its chunks once and computes their
   new ``V_c`` (Eq. 3.12) together with ``sum_c X_c V_c^T``, ``sum_c V_c V_c^T`` and the
   objective terms, accumulated in place in one float64 array in chunk order
   (:func:`kernels.pass_block`), and adds them to its chain's sum (:func:`kernels.pass_onto`);
   the chains' sums are added in a fixed tree of fan-in ``split_every``, so the result does
   not depend on the scheduler, the number of workers or task completion order, and the
   partials held at once do not grow with n; the new V (when kept) stays chunked like X.
   U is broadcast to the workers once per iteration.

   ``X V^T`` partials are **row-sparse** by default (``partials="auto"``): a block's
   ``sum_c X_c V_c^T`` is nonzero only on the features that occur in its chunks, so it is kept
   as those rows (:class:`partials.RowSparse`), the tree adds partials on the union of their
   rows, and the driver densifies the result once (:func:`partials.densify`). The values are
   bitwise those of the dense route; a partial whose rows exceed half of m is dense.

The objective ``||X - U_{k+1} V_{k+1}||_F^2`` follows from the same partials
(:func:`kernels.objective`), so iteration k costs exactly one read of every chunk of X.

Step sizes (``lam``, ``mu``)
----------------------------
``"exact"`` (default for both)
    Exact block minimisation: lam = 2 makes Eq. 3.12 ``v_j = normalise(U^T x_j)``, the exact
    minimiser over the sphere; ``mu="exact"`` takes ``U = polar(X V^T)``, the exact minimiser
    over ``U^T U = I`` (the objective is linear in U there). Each block step minimises the
    objective exactly, so it never increases.
``"palm"``
    Block-wise Lipschitz constants as in proximal alternating linearized minimization
    (Bolte et al. 2014), times 1.1: lam = 1.1 * 2 ||U||_2^2 = 2.2 and
    mu = 1.1 * 2 ||V_k V_k^T||_2, recomputed every iteration. Monotone.
``"theory"``
    lam = mu = L_c of Prop. 1 (Eq. 4.15), the setting of Theorems 1-3. L_c grows like 2n, so
    the steps are tiny at realistic n.
a float
    A fixed value; lam must be >= 2 (the V-block constant), mu >= 0 (mu = 0 is not monotone),
    both at most 2**52 (:data:`sphdist.core.params.MAX_STEP`: beyond it the step moves V or U
    by rounding alone and its arithmetic can overflow).

References
----------
.. [1] Liu, K., Li, Q., Wang, H. and Tang, G. (2019). Spherical Principal Component Analysis. SDM.
.. [2] Bolte, J., Sabach, S. and Teboulle, M. (2014). Proximal Alternating Linearized Minimization
   for Nonconvex and Nonsmooth Problems. Mathematical Programming 146, 459-494.
.. [3] Halko, N., Martinsson, P.-G. and Tropp, J. A. (2011). Finding Structure with Randomness:
   Probabilistic Algorithms for Constructing Approximate Matrix Decompositions. SIAM Review.
.. [4] Sun, D., Ding, C., Luo, B. and Tang, J. (2011). Angular Decomposition. IJCAI.
.. [5] Ang, A. M. S. and Gillis, N. (2019). Accelerating Nonnegative Matrix Factorization
   Algorithms Using Extrapolation. Neural Computation 31(2), 417-439.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

import dask.array as da
import numpy as np
from sklearn.utils import check_random_state
from threadpoolctl import threadpool_limits

from sphdist._validation import check_bound, skip_validation
from sphdist.core import graph, kernels
from sphdist.core import params as params_table
from sphdist.core.params import STEP_MODES
from sphdist.errors import CheckpointMismatchError, DataError

__all__ = [
    "FitState", "check_params", "initialize", "resume", "iterate", "fit", "embedding",
    "stateless", "STEP_MODES",
]

_PALM_FACTOR = 1.1

logger = logging.getLogger("sphdist")


@dataclasses.dataclass
class FitState:
    """Everything Algorithm 1 carries from one iteration to the next.

    Attributes
    ----------
    iteration : int
        Completed iterations k (0 after initialisation).
    U : ndarray of shape (m, r), or (k, r) when ``features`` is set; float64
        ``U_k``, orthonormal columns; with ``features``, its rows of those features (every
        other row of ``U_k`` is zero; :attr:`U_full` is the (m, r) matrix).
    V : dask.array.Array of shape (r, n), or None
        ``V_k``, unit columns, chunked like the document chunks of X, when the iteration
        keeps it (a step with lam != 2, or ``keep_V``); None for the stateless exact
        iteration, where ``V_k = normalise(U_k^T X)`` (:func:`embedding`).
    XVt : ndarray of shape (m, r) (or (k, r) with ``features``), float64, or None
        ``X V_k^T``; None in a checkpoint that stores U alone (the next pass recomputes it).
    VVt : ndarray of shape (r, r), float64, or None
        ``V_k V_k^T``; None as ``XVt``.
    sq_norm_X : float
        ``||X||_F^2``.
    objective : list of float
        ``||X - U_i V_i||_F^2`` for i = 0..k (k + 1 values).
    u_step_norm, v_step_norm : list of float
        ``||U_i - U_{i-1}||_F`` and ``||V_i - V_{i-1}||_F`` for i = 1..k (k values); the V
        step norm is NaN where V_{i-1} was not kept (the stateless iteration).
    seconds : list of float
        Wall time of each iteration i = 0..k, in seconds (not part of the maths).
    n_degenerate : int
        Columns of ``V_k`` whose ``q`` was zero (kept from the previous iterate, or ``e_1``).
    converged : bool
        Whether the relative objective decrease fell below ``tol``.
    features : ndarray of shape (k,), int64, or None
        The features (rows of X) that occur in the corpus, when the iteration runs on them
        alone (:func:`iterate`); None: all m.
    occurring : ndarray of shape (m,), bool, or None
        The features found by the last full-space pass, to restrict to at the next U-step.
    n_features : int
        m (0: ``U.shape[0]``).
    beta, beta_bar : float
        Extrapolation weight of the accelerated U-step and its cap (:func:`iterate`).
    """

    iteration: int
    U: np.ndarray
    V: da.Array | None
    XVt: np.ndarray | None
    VVt: np.ndarray | None
    sq_norm_X: float
    objective: list[float]
    u_step_norm: list[float]
    v_step_norm: list[float]
    seconds: list[float]
    n_degenerate: int = 0
    converged: bool = False
    features: np.ndarray | None = None
    occurring: np.ndarray | None = None
    n_features: int = 0
    beta: float = 0.5
    beta_bar: float = 1.0

    @property
    def U_full(self) -> np.ndarray:
        """Ndarray of shape (m, r), float64: ``U_k`` in the whole feature space."""
        if self.features is None:
            return self.U
        full = np.zeros((self.n_features, self.U.shape[1]))
        full[self.features] = self.U
        return full

    @property
    def relative_change(self) -> float:
        """``|f_{k-1} - f_k| / |f_{k-1}|`` of the last iteration (nan at k = 0)."""
        if len(self.objective) < 2:
            return float("nan")
        prev, cur = self.objective[-2], self.objective[-1]
        return abs(prev - cur) / abs(prev) if prev != 0 else 0.0


def check_params(
    n_components: Any, shape: tuple[int, int], *, caller: str = "sphdist.core.solver.fit",
    **params: Any,
) -> None:
    """Validate solver parameters against :data:`sphdist.core.params.PARAMS` and the shape of X.

    Parameters
    ----------
    n_components : int
        r, with ``1 <= r <= min(m, n)``.
    shape : tuple of int
        (m features, n documents).
    **params
        Any of the other parameters of :func:`fit` (``lam``, ``mu``, ``max_iter``, ``tol``,
        ``init``, ``random_state``, ``init_n_iter``, ``split_every``, ``max_partials``,
        ``dtype``, ``polar``, ``partials``); their constraints are the table's.
    caller : str, default "sphdist.core.solver.fit"
        Named in the message.

    Raises
    ------
    ParameterError
        Naming the first value out of range and its valid range.

    Notes
    -----
    Inside :func:`sphdist._validation.validated` (scikit-learn's
    ``skip_parameter_validation``) the caller has validated the table's constraints, and only
    ``n_components`` is checked against the shape (:func:`sphdist._validation.check_bound`).
    """
    if not skip_validation():
        params_table.validate(
            {"n_components": n_components, **params}, caller=caller
        )
    m, n = shape
    check_bound("n_components", n_components, min(m, n),
                f" for X with {m} features and {n} documents")


def _lam_value(lam: float | str, L_c: float) -> float:
    if lam == "exact":
        return 2.0
    if lam == "palm":
        return _PALM_FACTOR * 2.0
    if lam == "theory":
        return L_c
    return float(lam)


def _mu_value(mu: float | str, VVt: np.ndarray, L_c: float) -> float | None:
    if mu == "exact":
        return None
    if mu == "palm":
        return _PALM_FACTOR * 2.0 * float(np.linalg.norm(VVt, 2))
    if mu == "theory":
        return L_c
    return float(mu)


def svd_init(
    X: da.Array, n_components: int, random_state: np.random.RandomState, *,
    n_iter: int = 4, n_oversamples: int = 10, split_every: int = 8,
) -> np.ndarray:
    """Leading left singular vectors of X by the randomized range finder, on chunks.

    Parameters
    ----------
    X : dask.array.Array of shape (m, n), float64
        Column-chunked, sparse or dense blocks.
    n_components : int
        r.
    random_state : numpy.random.RandomState
        Source of the Gaussian test matrix.
    n_iter : int, default 4
        Power iterations; the method makes ``n_iter + 1`` passes over X.
    n_oversamples : int, default 10
        Extra basis vectors (Halko et al. 2011, Sec. 4.2).
    split_every : int, default 8
        Fan-in of the reduction tree.

    Returns
    -------
    ndarray of shape (m, r), float64
        Orthonormal approximation of the r leading left singular vectors of X: the Sun et al.
        (2011) step V0 ``U_0``, by subspace iteration on ``X X^T`` with QR re-orthonormalisation
        and a final Rayleigh-Ritz step (Halko et al. 2011, Alg. 4.4 and 5.3).
    """
    m, n = X.shape
    k = min(n_components + n_oversamples, m, n)
    Q, _ = np.linalg.qr(random_state.standard_normal(size=(m, k)))
    for i in range(n_iter + 1):
        parts = graph.per_chunk(kernels.project_chunk, X, graph.broadcast(Q), "ik")
        total = graph.sum_parts(parts, split_every)
        if i < n_iter:
            Q, _ = np.linalg.qr(total["XVt"])
    # Rayleigh-Ritz on the last basis: T = Q^T X X^T Q
    evals, W = np.linalg.eigh(total["VVt"])
    order = np.argsort(evals)[::-1][:n_components]
    return Q @ W[:, order]


def initialize(
    X: da.Array, n_components: int, *, init: str = "random", random_state: Any = None,
    init_n_iter: int = 4, split_every: int = 8, U0: np.ndarray | None = None,
    max_partials: int = 8, dtype: Any = np.float64, partials: str = "auto",
    keep_V: bool = False, find_features: bool = False,
    spill: Callable[[int, da.Array], Any] | None = None,
) -> FitState:
    """Iteration 0: ``U_0`` and ``V_0 = normalise(U_0^T X)``, in one pass (plus SVD passes).

    Parameters
    ----------
    X : dask.array.Array of shape (m, n), float64
        Column-chunked corpus (documents as columns), scipy.sparse or ndarray blocks.
    n_components : int
        r.
    init : {"random", "svd"}, default "random"
        ``"random"``: a Haar-random orthonormal U_0; ``"svd"``: the leading left singular
        vectors (Sun et al. 2011, step V0), costing ``init_n_iter + 1`` extra passes.
    random_state : int, RandomState or None
        Seed for the initialisation.
    init_n_iter : int, default 4
        Power iterations of ``init="svd"``.
    split_every : int, default 8
        Fan-in of the reduction tree.
    U0 : ndarray of shape (m, r), optional
        Start from this U instead (warm start); orthonormalised by its polar factor.
    max_partials : int, default 8
        Chunks are split into at most this many accumulation chains of consecutive blocks,
        one (m, r) partial sum each (:func:`graph.chain_bounds`).
    dtype : numpy.float64 or numpy.float32, default float64
        Compute dtype of ``U^T X_c`` and storage dtype of V; partials are summed in float64.
    partials : {"auto", "rows", "dense"}, default "auto"
        Format of the ``X V^T`` block partials on the cluster (:func:`kernels.pass_block`):
        row-sparse on the features a block touches, dense (m, r), or row-sparse while at most
        half of m. Bitwise the same result; ``"auto"`` moves far fewer bytes.
    keep_V : bool, default False
        Keep ``V_0`` on the cluster (persisted) for a V-step that needs it (lam != 2).
    find_features : bool, default False
        Run on the features that occur in X alone (``state.features``). The random U_0 is
        drawn on them whatever this flag (its other rows are zero; they would meet no entry
        of X), found by a scan of the chunks' indices before the pass
        (:func:`graph.occurring_features`); a warm start or ``init="svd"`` starts on all m
        rows, and then the pass finds them (``state.occurring``) for :func:`iterate`.
    spill : callable, optional
        Where a kept ``V_0`` goes (:func:`iterate`).

    Returns
    -------
    FitState
        At iteration 0, with ``objective[0] = ||X - U_0 V_0||_F^2``.

    Raises
    ------
    DataError
        If X contains NaN or Inf.
    """
    t0 = time.perf_counter()
    m = X.shape[0]
    rs = check_random_state(random_state)
    if U0 is not None:
        U = kernels.polar_factor(np.asarray(U0, dtype=np.float64))
    elif init == "svd":
        U = svd_init(X, n_components, rs, n_iter=init_n_iter, split_every=split_every)
    else:
        # the random start on the features that occur (found by a scan of X's indices, no
        # products): U_0's other rows would meet no entry of X, and drawing k of the m rows
        # makes the first pass as cheap as the iterations' (45,580 of 2**18 rows on the
        # synthetic corpora)
        features = _features(graph.occurring_features(X, split_every))
        if features is not None and features.size < n_components:
            features = None  # fewer occurring features than components: all m rows
        U = kernels.random_orthonormal(
            m if features is None else features.size, n_components, rs
        )
        if features is not None and not find_features:  # a path that keeps all m rows
            U_full = np.zeros((m, n_components))
            U_full[features] = U
            U, features = U_full, None
    state = FitState(
        iteration=0, U=U, V=None, XVt=None, VVt=None, sq_norm_X=0.0, objective=[],
        u_step_norm=[], v_step_norm=[], seconds=[], n_features=m,
        features=None if U0 is not None or init == "svd" else features,
    )
    state = _full_pass(
        X, state, keep_V=keep_V, find_features=find_features, split_every=split_every,
        max_partials=max_partials, dtype=dtype, partials=partials,
        spill=None if spill is None else functools.partial(spill, 0),
    )
    state.objective = [state.objective[0]]
    state.seconds = [time.perf_counter() - t0]
    return state


def _full_pass(
    X: da.Array, state: FitState, *, keep_V: bool, find_features: bool, split_every: int,
    max_partials: int, dtype: Any, partials: str, spill: graph.Spill | None = None,
) -> FitState:
    """The pass with ``U_k`` that starts a fit (k = 0) or resumes one (k > 0).

    On the state's ``features`` when it has them (the random start), else on all m rows.
    Returns the state with ``V_k`` (if kept), the partials and ``f_k`` appended to the
    objective history. At k > 0 of a fit that restricts itself to the occurring features,
    the result is restricted at once, as the uninterrupted run had it.
    """
    n = X.shape[1]
    features = state.features
    U = state.U_full if features is None else state.U
    find_features = find_features and features is None
    V, total = graph.block_pass(
        X, U, None, lam=2.0, split_every=split_every, max_partials=max_partials,
        dtype=dtype, partials=partials, keep_V=keep_V, find_features=find_features,
        features=features, spill=spill,
    )
    sq = total["sq_norm_X"]
    if np.isinf(sq) and np.all(np.isfinite(total["XVt"])):
        raise DataError(
            "the sum of squares of X (||X||_F^2) overflows float64. To resolve this, rescale "
            "the documents (e.g. to unit norm, as tf-idf does) before fitting."
        )
    if not np.isfinite(sq) or not np.all(np.isfinite(total["XVt"])):
        raise DataError(
            "X contains NaN or Inf values (||X||_F^2 or X V^T is not finite). To resolve this, "
            "clean the input data before fitting."
        )
    XVt, occurring = total["XVt"], None
    if find_features:
        occurring = total["occurs"]
        if state.iteration > 0:
            features, occurring = _features(occurring), None
            if features is not None:
                U, XVt = U[features], XVt[features]
    return dataclasses.replace(
        state, U=U, V=V, XVt=XVt, VVt=total["VVt"], sq_norm_X=sq,
        objective=[*state.objective, kernels.objective(sq, U, XVt, n)],
        n_degenerate=total["n_degenerate"], features=features, occurring=occurring,
        n_features=X.shape[0],
    )


def _features(occurring: np.ndarray) -> np.ndarray | None:
    """Indices of the occurring features, or None when every feature occurs."""
    features = np.flatnonzero(occurring)
    return None if features.size == occurring.size else features


def resume(
    X: da.Array, state: FitState, *, keep_V: bool, find_features: bool, split_every: int = 8,
    max_partials: int = 8, dtype: Any = np.float64, partials: str = "auto",
) -> FitState:
    """The state of a checkpoint that stores ``U_k`` alone, completed by one pass over X.

    Parameters
    ----------
    X : dask.array.Array of shape (m, n), float64
        The corpus the checkpoint was fitted on.
    state : FitState
        A checkpoint at iteration k: ``U`` (m, r) and the histories; ``V``, ``XVt`` and
        ``VVt`` are recomputed.
    keep_V, find_features
        As the fit that wrote the checkpoint had them (:func:`fit`).
    split_every, max_partials, dtype, partials
        See :func:`initialize`.

    Returns
    -------
    FitState
        Bitwise the state the uninterrupted fit had at iteration k: ``V_k = normalise(U_k^T X)``
        depends on ``U_k`` and X alone (Liu et al. 2019, Eq. 3.12 with lam = 2).

    Raises
    ------
    CheckpointMismatchError
        If the pass does not reproduce the recorded objective ``f_k`` (X is not the corpus
        the checkpoint was fitted on).
    """
    t0 = time.perf_counter()
    recorded = state.objective[-1]
    new = _full_pass(
        X, dataclasses.replace(state, objective=state.objective[:-1]), keep_V=keep_V,
        find_features=find_features, split_every=split_every, max_partials=max_partials,
        dtype=dtype, partials=partials,
    )
    if new.objective[-1] != recorded:
        raise CheckpointMismatchError(
            f"the corpus gives the objective {new.objective[-1]!r} at iteration "
            f"{state.iteration}, the checkpoint recorded {recorded!r}: it was fitted on other "
            "data. To resolve this, resume with the original corpus, or start a new fit."
        )
    logger.info("recomputed iteration %d from its U in %.2fs", state.iteration,
                time.perf_counter() - t0)
    return new


def iterate(
    X: da.Array, state: FitState, *, lam: Any = "exact", mu: Any = "exact", tol: float = 1e-4,
    split_every: int = 8, max_partials: int = 8, dtype: Any = np.float64, polar: str = "auto",
    partials: str = "auto", spill: Callable[[int, da.Array], Any] | None = None,
    accelerate: bool = False,
) -> FitState:
    """One iteration of Algorithm 1: U-step on the driver, then one pass over X.

    Parameters
    ----------
    X : dask.array.Array of shape (m, n), float64
        The same column-chunked X the state was computed from.
    state : FitState
        Iteration k.
    lam, mu : float or {"exact", "palm", "theory"}
        Step sizes of Eq. 3.12 and Eq. 3.11 (module docstring).
    tol : float, default 1e-4
        ``converged`` is set when ``|f_k - f_{k+1}| / |f_k| < tol``.
    split_every : int, default 8
        Fan-in of the reduction tree.
    max_partials, dtype, partials
        See :func:`initialize`.
    polar : {"auto", "svd", "gram"}, default "auto"
        Route of the U-step's polar factor (:func:`kernels.polar_factor`); ``"auto"`` uses
        the r x r Gram matrix when ``m >= 64 r``.
    spill : callable, optional
        For an iteration that keeps V: ``spill(k + 1, V)`` stores ``V_{k+1}`` outside worker
        memory (:func:`sphdist.core.graph.block_pass`); default persisted on the workers.
    accelerate : bool, default False
        Extrapolate the exact U-step (stateless iteration with ``mu="exact"``, k >= 1):
        ``P = polar(X V_k^T)``, ``E = polar(P + beta (P - U_k))``; the pass is made with E
        and E is kept if ``f(E) <= f_k``, with beta grown (``min(beta_bar, 1.05 beta)``,
        ``beta_bar = min(1, 1.01 beta_bar)``); otherwise a second pass is made with P (the
        plain step, which never increases the objective) and ``beta_bar = beta``,
        ``beta = beta / 1.5`` (the safeguard and step-size rules of Ang and Gillis 2019).
        Monotone by construction; 14-20 % fewer passes to tol 1e-4 on 20 Newsgroups
        (``pipelines/results/iterations_to_tol.md``).

    Returns
    -------
    FitState
        Iteration k + 1 (a new object; ``state`` is not modified).
    """
    t0 = time.perf_counter()
    m, n = X.shape
    r = state.U.shape[1]
    L_c = kernels.lipschitz_constant(r, n, state.sq_norm_X)
    U_prev, XVt, features = state.U, state.XVt, state.features
    dropped = 0.0  # ||U_k||_F^2 on the rows the restriction drops
    if state.occurring is not None and mu == "exact":
        features = _features(state.occurring)
        if features is not None:
            dropped = float(np.sum(np.delete(U_prev, features, axis=0) ** 2))
            U_prev, XVt = U_prev[features], XVt[features]
    # one BLAS thread: the U-step's GEMMs are then bitwise the same on any driver, and a
    # loaded or shared driver does not thrash (4x faster at m = 2**18, r = 100 under load 9)
    with threadpool_limits(limits=1, user_api="blas"):
        U = kernels.u_step(U_prev, XVt, state.VVt, _mu_value(mu, state.VVt, L_c), polar)
    keep_V = state.V is not None
    one_pass = functools.partial(
        graph.block_pass, X, V_prev=state.V, lam=_lam_value(lam, L_c),
        split_every=split_every, max_partials=max_partials, dtype=dtype, partials=partials,
        features=features, keep_V=keep_V,
        spill=None if spill is None else functools.partial(spill, state.iteration + 1),
    )
    beta, beta_bar = state.beta, state.beta_bar
    if accelerate and not keep_V and mu == "exact" and state.iteration >= 1:
        with threadpool_limits(limits=1, user_api="blas"):
            E = kernels.polar_factor(U + beta * (U - U_prev), polar)
        V, total = one_pass(E)
        f = kernels.objective(state.sq_norm_X, E, total["XVt"], n)
        if f <= state.objective[-1]:  # the extrapolated step is kept: never a rise
            U, beta, beta_bar = E, min(beta_bar, 1.05 * beta), min(1.0, 1.01 * beta_bar)
        else:  # the plain step, which never increases the objective
            V, total = one_pass(U)
            f = kernels.objective(state.sq_norm_X, U, total["XVt"], n)
            beta, beta_bar = beta / 1.5, beta
    else:
        V, total = one_pass(U)
        f = kernels.objective(state.sq_norm_X, U, total["XVt"], n)
    step = np.sqrt(np.sum((U - U_prev) ** 2) + dropped) if dropped else np.linalg.norm(
        U - U_prev
    )
    new = dataclasses.replace(
        state,
        iteration=state.iteration + 1, U=U, V=V, XVt=total["XVt"], VVt=total["VVt"],
        objective=[*state.objective, f],
        u_step_norm=[*state.u_step_norm, float(step)],
        v_step_norm=[*state.v_step_norm,
                     float(np.sqrt(total["dV_sq"])) if keep_V else float("nan")],
        seconds=[*state.seconds, time.perf_counter() - t0],
        n_degenerate=total["n_degenerate"], features=features, occurring=None, beta=beta,
        beta_bar=beta_bar,
    )
    new.converged = bool(new.relative_change < tol)
    return new


def stateless(lam: Any, keep_V: bool = False) -> bool:
    """Whether the iteration keeps no V between passes: exact V-step (lam = 2), V not asked.

    With lam = 2, Eq. 3.12 is ``v_j = normalise(U_{k+1}^T x_j)`` (Liu et al. 2019): V_{k+1}
    depends on U_{k+1} and X alone, so a pass computes each chunk's V, uses it for the
    partials and drops it.
    """
    return not keep_V and (lam == "exact" or (not isinstance(lam, str) and float(lam) == 2.0))


def embedding(X: da.Array, state: FitState, *, dtype: Any = np.float64) -> da.Array:
    """``V_k`` of a state, as a lazy dask array chunked like the documents of X.

    Parameters
    ----------
    X : dask.array.Array of shape (m, n), float64
        The corpus of the fit.
    state : FitState
        Any iteration k.
    dtype : numpy.float64 or numpy.float32, default float64
        The fit's compute dtype.

    Returns
    -------
    dask.array.Array of shape (r, n), ``dtype``
        ``state.V`` when the iteration kept it, else ``normalise(U_k^T X)`` chunk by chunk
        (:func:`sphdist.core.graph.embedding`): bitwise the V of the pass that computed
        ``f_k``. Storing it writes each chunk's columns from the task that computed them.
    """
    if state.V is not None:
        return state.V
    if X.numblocks[0] != 1:
        X = X.rechunk({0: -1})
    return graph.embedding(X, state.U, dtype=dtype, features=state.features)


def fit(
    X: da.Array, n_components: int, *, lam: Any = "exact", mu: Any = "exact",
    max_iter: int = 100, tol: float = 1e-4, init: str = "random", random_state: Any = None,
    init_n_iter: int = 4, split_every: int = 8, state: FitState | None = None,
    U0: np.ndarray | None = None, callback: Callable[[FitState], None] | None = None,
    max_partials: int = 8, dtype: Any = np.float64, polar: str = "auto",
    partials: str = "auto", accelerate: bool = True, keep_V: bool = False,
    spill: Callable[[int, da.Array], Any] | None = None,
) -> FitState:
    """Run Algorithm 1 of Liu et al. (2019) on a column-chunked X.

    Parameters
    ----------
    X : dask.array.Array of shape (m, n), float64
        Documents as columns, chunked along columns only (one block along the feature axis),
        blocks scipy.sparse (CSC preferred) or ndarray.
    n_components : int
        r, ``1 <= r <= min(m, n)``.
    lam, mu : float or {"exact", "palm", "theory"}, default "exact"
        Step sizes (module docstring).
    max_iter : int, default 100
        Maximum iterations after initialisation.
    tol : float, default 1e-4
        Stop when the relative objective change ``|f_{k-1} - f_k| / |f_{k-1}|`` is below it.
    init : {"random", "svd"}, default "random"
        See :func:`initialize`.
    random_state : int, RandomState or None
        Seed of the initialisation; the iterations are deterministic.
    init_n_iter : int, default 4
        Power iterations for ``init="svd"``.
    split_every : int, default 8
        Fan-in of the reduction tree of the partials.
    state : FitState, optional
        Resume from this state (a loaded checkpoint) instead of initialising.
    U0 : ndarray of shape (m, r), optional
        Warm start (ignored when ``state`` is given).
    callback : callable, optional
        Called with the state after initialisation and after every iteration (checkpoints,
        progress lines).
    max_partials : int, default 8
        At most this many (m, r) partials per pass: accumulation chains of consecutive
        blocks of chunks (:func:`graph.chain_bounds`), each reading its blocks in turn.
    dtype : numpy.float64 or numpy.float32, default float64
        Compute dtype of ``U^T X_c`` and the V-step, and storage dtype of V. ``X V^T``,
        ``V V^T``, the objective and U on the driver stay float64.
    polar : {"auto", "svd", "gram"}, default "auto"
        Route of the U-step's polar factor (:func:`kernels.polar_factor`).
    partials : {"auto", "rows", "dense"}, default "auto"
        Format of the ``X V^T`` block partials (:func:`initialize`); the result is bitwise the
        same for all three.
    accelerate : bool, default True
        Extrapolated U-step with a monotone safeguard (:func:`iterate`), for the exact steps
        (lam and mu "exact"); no effect with other steps.
    keep_V : bool, default False
        Keep ``V_k`` on the cluster between iterations even with lam = 2, to record
        ``||V_{k+1} - V_k||_F`` (``v_step_norm``). Always kept for lam != 2, whose V-step
        needs it.
    spill : callable, optional
        Where a kept V goes between iterations (:func:`iterate`): the fit job writes it to a
        scratch zarr array chunk by chunk (:class:`sphdist.io.model.ScratchV`), so worker
        memory stays flat in n for every step size. Default: persisted on the workers.

    Returns
    -------
    FitState
        The last iteration. Its ``V`` is None for the stateless iteration: the embedding is
        :func:`embedding` of the state, computed (or stored) by the caller.

    Raises
    ------
    ParameterError
        If a parameter is out of range.
    DataError
        If X contains NaN or Inf.

    Notes
    -----
    **The stateless iteration** (the default: lam = 2, ``keep_V=False``). ``V_{k+1} =
    normalise(U_{k+1}^T X)`` (Eq. 3.12 with lam = 2) depends on ``U_{k+1}`` and X alone, so
    each pass computes a chunk's V, adds its partials and drops it: nothing of size n lives on
    the cluster between iterations, and a checkpoint needs ``U_k`` alone (:func:`resume`
    recomputes the rest in one pass, bitwise). With ``mu="exact"`` it also runs on the
    features that occur in X (k of the m rows, found by the first pass): ``X V^T`` is zero on
    the others, so ``U_{k+1} = polar(X V_k^T)`` is too, and U, its broadcast, the partials
    and the polar factor shrink from m to k rows (:attr:`FitState.U_full` restores them).
    Columns whose ``U^T x_j`` is zero get ``e_1`` (the kept path keeps ``V_k``'s column
    instead; both give ``e_1`` to an empty document). ``v_step_norm`` is NaN there.

    Memory per worker (w workers, one thread each; C = ``max_partials`` accumulation chains
    (:func:`graph.chain_bounds`), each reading its blocks of at most
    ``graph.MAX_BLOCK_DOCUMENTS`` = 32768 documents in turn; G chunks per block; d = itemsize
    of ``dtype``; c_X = bytes of one chunk, about ``12 nnz_c``; k_b = distinct features of a
    chain, k_t those of the whole corpus, both <= m / 2 with ``partials="auto"`` on the full
    feature space, and k_b = k_t = m once the iteration runs on the occurring features or
    with ``partials="dense"``)::

        RSS_worker ~ R_0                       Python, dask, NumPy/SciPy (~0.3 GiB)
                   + d m r                     U, broadcast once per iteration
                   + 8 k_b r (2 C_w + 1)       the chains' sums it holds (C_w <= C: the chains
                                               whose last block ran there), each block's own
                                               accumulator, and the new sum while a block
                                               adds its partial to its chain's
                   + 8 k_t r                   the sum of the C chains (one combine)
                   + G c_X (1 + t)             the chunks of the blocks it runs (t: threads)
                   [+ X_w]                     its share of X, only when X is held in memory
                                               (``sphdist.jobs.cluster.holds_in_memory``)
                   [+ 2 d r n / w]             V_k and V_{k+1} of its documents, only
                                               when V is kept (lam != 2 or keep_V) in
                                               worker memory (no ``spill``)

    With the stateless iteration and X streamed every term is independent of n: C is fixed,
    k_b and k_t are bounded by m (m is then the number of occurring features), G by the block
    size. On dask's threaded scheduler in one process (the default on one machine) the
    driver and the single "worker" are the same process, w = 1, C_w = C. The driver holds
    about six (m, r) float64 arrays (U_k, U_{k+1}, X V^T, M and temporaries of the U-step):
    ``~ 48 m r`` bytes (after the first pass, m the occurring features). The benchmark
    (``pipelines/benchmark.py``) compares this with measured peak RSS.
    """
    check_params(
        n_components, X.shape, lam=lam, mu=mu, max_iter=max_iter, tol=tol, init=init,
        random_state=random_state, init_n_iter=init_n_iter, split_every=split_every,
        dtype=dtype, polar=polar, max_partials=max_partials, partials=partials,
        accelerate=accelerate,
    )
    if X.numblocks[0] != 1:
        X = X.rechunk({0: -1})
    # one BLAS thread on the driver for the whole fit: the rounding of U_0's polar factor, the
    # U-steps' GEMMs and the objective's dot products then never depends on how many threads
    # BLAS would take here (threads in this process, a LocalCluster's client, an external
    # cluster's), so the result is a function of X and the parameters alone
    with threadpool_limits(limits=1, user_api="blas"):
        return _fit(
            X, n_components, lam=lam, mu=mu, max_iter=max_iter, tol=tol, init=init,
            random_state=random_state, init_n_iter=init_n_iter, split_every=split_every,
            state=state, U0=U0, callback=callback, max_partials=max_partials, dtype=dtype,
            polar=polar, partials=partials, accelerate=accelerate, keep_V=keep_V, spill=spill,
        )


def _fit(
    X: da.Array, n_components: int, *, lam: Any, mu: Any, max_iter: int, tol: float, init: str,
    random_state: Any, init_n_iter: int, split_every: int, state: FitState | None,
    U0: np.ndarray | None, callback: Callable[[FitState], None] | None, max_partials: int,
    dtype: Any, polar: str, partials: str, accelerate: bool, keep_V: bool,
    spill: Callable[[int, da.Array], Any] | None,
) -> FitState:
    """The body of :func:`fit`, with X rechunked and BLAS on one thread."""
    keep_V = not stateless(lam, keep_V)
    # the stateless exact iteration with the exact U-step runs on the occurring features:
    # X V^T is zero on every other row, so U_{k+1} = polar(X V_k^T) is zero there too
    find_features = not keep_V and mu == "exact"
    passes = {"split_every": split_every, "max_partials": max_partials, "dtype": dtype,
              "partials": partials}
    if state is None:
        state = initialize(
            X, n_components, init=init, random_state=random_state, init_n_iter=init_n_iter,
            U0=U0, keep_V=keep_V, find_features=find_features, spill=spill, **passes,
        )
        if callback is not None:
            callback(state)
    elif state.XVt is None and state.iteration < max_iter and not state.converged:
        state = resume(X, state, keep_V=keep_V, find_features=find_features, **passes)
    elif not keep_V:
        state = dataclasses.replace(state, V=None)  # a checkpoint that stored V_k too
    while state.iteration < max_iter and not state.converged:
        state = iterate(X, state, lam=lam, mu=mu, tol=tol, polar=polar, spill=spill,
                        accelerate=accelerate, **passes)
        if callback is not None:
            callback(state)
    return state
