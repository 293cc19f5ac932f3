"""Liu et al. (2019) Algorithm 1 on Dask: column-chunked X, one pass over X per iteration.

Each iteration k -> k+1 is

1. **U-step, on the driver** (Eq. 3.11): ``U_{k+1} = polar(M)`` from the reduced partials
   ``X V_k^T`` (m, r) and ``V_k V_k^T`` (r, r) of the previous pass (:func:`kernels.u_step`);
2. **one pass over X**: the document chunks are grouped into blocks of consecutive chunks
   (:func:`graph.pass_blocks`, a function of the chunk layout only: at least
   ``min(n_chunks, 32)`` blocks, one per 32,768 documents beyond); one task per block, none
   waiting for another, reads each of its chunks once and computes their new ``V_c``
   (Eq. 3.12) together with ``sum_c X_c V_c^T``, ``sum_c V_c V_c^T`` and the objective terms,
   accumulated in place in one float64 array in chunk order (:func:`kernels.pass_block`);
   the blocks' partials are added in a fixed tree of fan-in ``split_every``
   (:func:`graph.tree_sum`), so the result does not depend on the scheduler, the number of
   workers or task completion order, every block can run at once, and the partials held at
   once are bounded by the tasks running and the tree (:func:`peak_bytes`), not by n; the
   new V (when kept) stays chunked like X.
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
import numbers
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import dask.array as da
import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

from sphdist.core import graph, kernels
from sphdist.core.params import PARAMS, STEP_MODES, FitConfig
from sphdist.core.partials import RowSparse, densify
from sphdist.errors import CheckpointMismatchError, DataError

__all__ = [
    "FitState", "FitConfig", "check_params", "check_shape", "svd_init", "initialize", "resume",
    "iterate", "fit", "embedding", "stateless", "holds_last_V", "STEP_MODES",
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
    U : ndarray of shape (m, r), or RowSparse of shape (m, r); float64
        ``U_k``, orthonormal columns. A :class:`~sphdist.core.partials.RowSparse` when the
        iteration runs on the features that occur in X alone (its rows; every other row of
        ``U_k`` is zero): the exact U-step ``U_{k+1} = polar(X V_k^T)`` is zero off the rows
        of ``X V_k^T`` (:func:`iterate`). :attr:`U_full` is the (m, r) ndarray.
    V : dask.array.Array of shape (r, n), or None
        ``V_k``, unit columns, chunked like the document chunks of X, when the iteration
        keeps it (a step with lam != 2, or ``keep_V``); None for the stateless exact
        iteration, where ``V_k = normalise(U_k^T X)`` (:func:`embedding`).
    XVt : ndarray or RowSparse of shape (m, r), float64, or None
        ``X V_k^T``: on U's rows when U is a RowSparse; a RowSparse on the features that
        occur in X, with U on all m rows, after the pass that found them (a start from an
        SVD or a warm start, whose next U-step restricts U to them); None in a checkpoint
        that stores U alone (the next pass recomputes it).
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
    beta, beta_bar : float
        Extrapolation weight of the accelerated U-step and its cap (:func:`iterate`).
    held_V : dask.array.Array of shape (r, n), or None
        The stateless iteration's ``V_k = normalise(U_k^T X)`` as the pass that computed
        ``f_k`` made it, persisted, when the fit holds it for the final model (``hold_V``
        of :func:`fit`); None otherwise. Not part of the iteration (the next pass neither
        reads nor records it); :func:`embedding` returns it instead of making another pass.
    """

    iteration: int
    U: np.ndarray | RowSparse
    V: da.Array | None
    XVt: np.ndarray | RowSparse | None
    VVt: np.ndarray | None
    sq_norm_X: float
    objective: list[float]
    u_step_norm: list[float]
    v_step_norm: list[float]
    seconds: list[float]
    n_degenerate: int = 0
    converged: bool = False
    beta: float = 0.5
    beta_bar: float = 1.0
    held_V: da.Array | None = None

    @property
    def U_full(self) -> np.ndarray:
        """Ndarray of shape (m, r), float64: ``U_k`` in the whole feature space."""
        return densify(self.U)

    @property
    def relative_change(self) -> float:
        """``|f_{k-1} - f_k| / |f_{k-1}|`` of the last iteration (nan at k = 0)."""
        if len(self.objective) < 2:
            return float("nan")
        prev, cur = self.objective[-2], self.objective[-1]
        return abs(prev - cur) / abs(prev) if prev != 0 else 0.0


def _values(A: Any) -> Any:
    """The stored rows of a :class:`RowSparse` (the (k, r) ndarray), an ndarray as it is."""
    return A.values if isinstance(A, RowSparse) else A


def _restrict(A: np.ndarray, rows: np.ndarray) -> RowSparse:
    """The (m, r) ndarray A, zero off ``rows``, as a :class:`RowSparse` on them."""
    return RowSparse(rows, A[rows], A.shape)


def check_params(
    n_components: Any, shape: tuple[int, int], *, caller: str = "sphdist.core.solver.fit",
    **params: Any,
) -> FitConfig:
    """The :class:`FitConfig` of a fit of X of ``shape``, validated against the table and X.

    Parameters
    ----------
    n_components : int
        r, with ``1 <= r <= min(m, n)``.
    shape : tuple of int
        (m features, n documents).
    caller : str, default "sphdist.core.solver.fit"
        Named in the message.
    **params
        Any of the other names of :data:`sphdist.core.params.SOLVER_PARAMS`; the others take
        the table's defaults (:meth:`FitConfig.build`).

    Returns
    -------
    FitConfig

    Raises
    ------
    ParameterError
        Naming the first value out of range and its valid range.
    TypeError
        If a name is not a solver parameter.

    Notes
    -----
    Inside :func:`sphdist._validation.validated` (scikit-learn's
    ``skip_parameter_validation``) the caller has validated the table's constraints, and only
    ``n_components`` is checked against the shape (:func:`sphdist._validation.check_bound`).
    """
    return check_shape(FitConfig.build(caller, n_components=n_components, **params), shape)


def check_shape(config: FitConfig, shape: tuple[int, int]) -> FitConfig:
    """``config``, after checking that its r fits X of ``shape``: ``1 <= r <= min(m, n)``.

    What depends on the data; the table's constraints were checked where ``config`` was
    built (:meth:`FitConfig.build`, :meth:`FitConfig.checked`).

    Raises
    ------
    ParameterError
        If ``n_components`` exceeds ``min(m, n)`` (:func:`sphdist._validation.check_bound`).
    """
    m, n = shape
    if not 1 <= config.n_components <= min(m, n):  # the message's module imports scikit-learn
        from sphdist._validation import check_bound

        check_bound("n_components", config.n_components, min(m, n),
                    f" for X with {m} features and {n} documents")
    return config


def _random_state(seed: Any) -> np.random.RandomState:
    """scikit-learn's ``check_random_state``, without importing scikit-learn (about 1 s).

    None: NumPy's global RandomState; an int: a new ``RandomState(seed)``; a RandomState: itself.

    >>> _random_state(0).standard_normal() == np.random.RandomState(0).standard_normal()
    True
    """
    if seed is None or seed is np.random:
        return np.random.mtrand._rand
    if isinstance(seed, numbers.Integral):
        return np.random.RandomState(seed)
    if isinstance(seed, np.random.RandomState):
        return seed
    raise ValueError(f"{seed!r} cannot be used to seed a numpy.random.RandomState instance")


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
    n_power_iter: int, split_every: int, n_oversamples: int = 10,
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
    n_power_iter : int
        Power iterations; the method makes ``n_power_iter + 1`` passes over X (the
        ``n_power_iter`` of Spherical PCA's ``init="svd"`` and of the angular methods, as
        :func:`dask.array.linalg.svd_compressed` names it).
    split_every : int
        Fan-in of the reduction tree.
    n_oversamples : int, default 10
        Extra basis vectors (Halko et al. 2011, Sec. 4.2).

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
    for i in range(n_power_iter + 1):
        parts = graph.per_chunk(kernels.project_chunk, X, graph.broadcast(Q), "ik")
        total = graph.sum_parts(parts, split_every)
        if i < n_power_iter:
            Q, _ = np.linalg.qr(total["XVt"])
    # Rayleigh-Ritz on the last basis: T = Q^T X X^T Q
    evals, W = np.linalg.eigh(total["VVt"])
    order = np.argsort(evals)[::-1][:n_components]
    return Q @ W[:, order]


def initialize(
    X: da.Array, n_components: int, *, U0: np.ndarray | None = None, keep_V: bool = False,
    find_features: bool = False, spill: Callable[[int, da.Array], Any] | None = None,
    check_memory: Callable[[int], None] | None = None, **params: Any,
) -> FitState:
    """Iteration 0: ``U_0`` and ``V_0 = normalise(U_0^T X)``, in one pass (plus SVD passes).

    Parameters
    ----------
    X : dask.array.Array of shape (m, n), float64
        Column-chunked corpus (documents as columns), scipy.sparse or ndarray blocks.
    n_components : int
        r.
    U0 : ndarray of shape (m, r), optional
        Start from this U instead (warm start); orthonormalised by its polar factor.
    keep_V : bool, default False
        Keep ``V_0`` on the cluster (persisted) for a V-step that needs it (lam != 2).
    find_features : bool, default False
        Run on the features that occur in X alone. The random U_0 is drawn on them whatever
        this flag (its other rows are zero; they would meet no entry of X), found by a scan
        of the chunks' indices before the pass (:func:`graph.occurring_features`), and kept
        as a :class:`~sphdist.core.partials.RowSparse` on them with this flag; a warm start
        or ``init="svd"`` starts on all m rows, and then the pass finds them (``state.XVt``
        is a RowSparse on them) for :func:`iterate` to restrict U to.
    spill : callable, optional
        Where a kept ``V_0`` goes (:func:`iterate`).
    check_memory : callable, optional
        Called with the number of rows U will have (k occurring features, or m) before U_0
        is allocated; raises to refuse the fit (:func:`peak_bytes` estimates what it needs).
    **params
        Names of :data:`sphdist.core.params.SOLVER_PARAMS` (:meth:`FitConfig.build`): the
        initialisation reads ``init`` (``"random"``: a Haar-random orthonormal U_0;
        ``"svd"``: the leading left singular vectors, Sun et al. 2011, step V0, costing
        ``n_power_iter + 1`` extra passes), ``random_state`` and ``n_power_iter``, the pass
        ``split_every``, ``dtype`` and ``partials``.

    Returns
    -------
    FitState
        At iteration 0, with ``objective[0] = ||X - U_0 V_0||_F^2``.

    Raises
    ------
    ParameterError
        If a parameter is out of range.
    DataError
        If X contains NaN or Inf.
    """
    config = FitConfig.build("sphdist.core.solver.initialize", n_components=n_components,
                             **params)
    return _initialize(X, config, U0=U0, keep_V=keep_V, find_features=find_features,
                       spill=spill, check_memory=check_memory)


def _initialize(
    X: da.Array, config: FitConfig, *, U0: np.ndarray | None, keep_V: bool,
    find_features: bool, spill: Callable[[int, da.Array], Any] | None,
    check_memory: Callable[[int], None] | None = None, hold_V: bool = False,
) -> FitState:
    """:func:`initialize` with its configuration built (``hold_V``: :func:`fit`)."""
    t0 = time.perf_counter()
    m, r = X.shape[0], config.n_components
    rs = _random_state(config.random_state)
    if check_memory is not None and (U0 is not None or config.init == "svd"):
        check_memory(m)  # these start on all m rows
    if U0 is not None:
        U = kernels.polar_factor(np.asarray(U0, dtype=np.float64))
    elif config.init == "svd":
        U = svd_init(X, r, rs, n_power_iter=config.n_power_iter, split_every=config.split_every)
    else:
        # the random start on the features that occur (found by a scan of X's indices, no
        # products): U_0's other rows would meet no entry of X, and drawing k of the m rows
        # makes the first pass as cheap as the iterations' (45,580 of 2**18 rows on the
        # synthetic corpora)
        rows = _features(graph.occurring_features(X, config.split_every))
        if rows is not None and rows.size < r:
            rows = None  # fewer occurring features than components: all m rows
        if check_memory is not None:
            check_memory(m if rows is None or not find_features else rows.size)
        U = kernels.random_orthonormal(m if rows is None else rows.size, r, rs)
        if rows is not None:
            U = RowSparse(rows, U, (m, r))
            if not find_features:  # a path that keeps all m rows
                U = U.toarray()
    state = FitState(
        iteration=0, U=U, V=None, XVt=None, VVt=None, sq_norm_X=0.0, objective=[],
        u_step_norm=[], v_step_norm=[], seconds=[],
    )
    state = _full_pass(
        X, state, config, keep_V=keep_V, find_features=find_features,
        spill=None if spill is None else functools.partial(spill, 0), hold_V=hold_V,
    )
    state.seconds = [time.perf_counter() - t0]
    return state


def _full_pass(
    X: da.Array, state: FitState, config: FitConfig, *, keep_V: bool, find_features: bool,
    spill: graph.Spill | None = None, hold_V: bool = False,
) -> FitState:
    """The pass with ``U_k`` that starts a fit (k = 0) or resumes one (k > 0).

    Returns the state with ``V_k`` (if kept), the partials and ``f_k`` appended to the
    objective history. With ``find_features`` and U on all m rows, the pass finds the
    features that occur in X: at k > 0 (a fit that restricts itself to them) U and X V^T are
    restricted to them at once, as the uninterrupted run had them; at k = 0 ``f_0`` is that
    of the whole ``U_0``, and X V^T is kept on them for the first U-step to restrict U
    (:func:`iterate`). With ``hold_V`` (and not ``keep_V``) the pass's V is persisted as
    ``held_V``.
    """
    V, total = graph.block_pass(
        X, state.U, None, lam=2.0, config=config, keep_V=keep_V or hold_V,
        spill=spill if keep_V else None,
    )
    sq, U, XVt = total["sq_norm_X"], state.U, total["XVt"]
    finite = np.all(np.isfinite(_values(XVt)))
    if np.isinf(sq) and finite:
        raise DataError(
            "the sum of squares of X (||X||_F^2) overflows float64. To resolve this, rescale "
            "the documents (e.g. to unit norm, as tf-idf does) before fitting."
        )
    if sq == 0:  # no document has a direction: V and the objective are undefined
        raise DataError(
            "X is all zero (||X||_F = 0): no document has a direction, so there is nothing "
            "to fit. To resolve this, check the input (the chunks of a dense array that were "
            "never written read as zeros)."
        )
    if not np.isfinite(sq) or not finite:
        raise DataError(
            "X contains NaN or Inf values (||X||_F^2 or X V^T is not finite). To resolve this, "
            "clean the input data before fitting."
        )
    rows = None
    if find_features and not isinstance(U, RowSparse):
        rows = _features(total["occurs"])
    if rows is not None and state.iteration > 0:
        U, XVt = _restrict(U, rows), _restrict(XVt, rows)
    f = kernels.objective(sq, _values(U), _values(XVt), X.shape[1])
    if rows is not None and state.iteration == 0:
        XVt = _restrict(XVt, rows)
    return dataclasses.replace(
        state, U=U, V=V if keep_V else None, XVt=XVt, VVt=total["VVt"], sq_norm_X=sq,
        objective=[*state.objective, f], n_degenerate=total["n_degenerate"],
        held_V=None if keep_V else V,
    )


def _features(occurring: np.ndarray) -> np.ndarray | None:
    """Indices of the occurring features, or None when every feature occurs."""
    features = np.flatnonzero(occurring)
    return None if features.size == occurring.size else features


def resume(
    X: da.Array, state: FitState, config: FitConfig, *, keep_V: bool, find_features: bool,
    hold_V: bool = False,
) -> FitState:
    """The state of a checkpoint that stores ``U_k`` alone, completed by one pass over X.

    Parameters
    ----------
    X : dask.array.Array of shape (m, n), float64
        The corpus the checkpoint was fitted on.
    state : FitState
        A checkpoint at iteration k: ``U`` (m, r) and the histories; ``V``, ``XVt`` and
        ``VVt`` are recomputed.
    config : FitConfig
        The fit's parameters (the pass reads ``split_every``, ``dtype`` and
        ``partials``).
    keep_V, find_features
        As the fit that wrote the checkpoint had them (:func:`fit`).
    hold_V : bool, default False
        Persist the pass's V as ``held_V`` (:func:`fit`).

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
        X, dataclasses.replace(state, objective=state.objective[:-1]), config, keep_V=keep_V,
        find_features=find_features, hold_V=hold_V,
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
    X: da.Array, state: FitState, config: FitConfig, *,
    spill: Callable[[int, da.Array], Any] | None = None, hold_V: bool = False,
) -> FitState:
    """One iteration of Algorithm 1: U-step on the driver, then one pass over X.

    Parameters
    ----------
    X : dask.array.Array of shape (m, n), float64
        The same column-chunked X the state was computed from.
    state : FitState
        Iteration k.
    config : FitConfig
        The fit's parameters: the steps ``lam`` and ``mu`` of Eq. 3.12 and Eq. 3.11 (module
        docstring), ``polar`` (the route of the U-step's polar factor,
        :func:`kernels.polar_factor`), ``tol`` (``converged`` is set when
        ``|f_k - f_{k+1}| / |f_k| < tol``), ``accelerate`` (below) and the pass's
        ``split_every``, ``dtype`` and ``partials``.
    spill : callable, optional
        For an iteration that keeps V: ``spill(k + 1, V)`` stores ``V_{k+1}`` outside worker
        memory (:func:`sphdist.core.graph.block_pass`); default persisted on the workers.
    hold_V : bool, default False
        For the stateless iteration: persist the V of the pass that computes ``f_{k+1}`` as
        ``held_V`` (:func:`fit`); the V of a rejected extrapolated pass is dropped before
        the plain pass runs, so one V at most is held.

    Returns
    -------
    FitState
        Iteration k + 1 (a new object; ``state`` is not modified).

    Notes
    -----
    The exact U-step (``mu="exact"``) of a state whose ``X V_k^T`` is a RowSparse runs on its
    rows, the features that occur in X: ``U_{k+1} = polar(X V_k^T)`` is zero on the others.

    ``accelerate`` extrapolates the exact U-step (stateless iteration with ``mu="exact"``,
    k >= 1): ``P = polar(X V_k^T)``, ``E = polar(P + beta (P - U_k))``; the pass is made with
    E and E is kept if ``f(E) <= f_k``, with beta grown (``min(beta_bar, 1.05 beta)``,
    ``beta_bar = min(1, 1.01 beta_bar)``); otherwise a second pass is made with P (the plain
    step, which never increases the objective) and ``beta_bar = beta``, ``beta = beta / 1.5``
    (the safeguard and step-size rules of Ang and Gillis 2019). Monotone by construction;
    14-20 % fewer passes to tol 1e-4 on 20 Newsgroups
    (``pipelines/results/iterations_to_tol.md``).
    """
    t0 = time.perf_counter()
    n = X.shape[1]
    L_c = kernels.lipschitz_constant(state.U.shape[1], n, state.sq_norm_X)
    mu = _mu_value(config.mu, state.VVt, L_c)
    U_prev, XVt = state.U, state.XVt
    dropped = 0.0  # ||U_k||_F^2 on the rows the restriction drops
    if mu is None and isinstance(XVt, RowSparse):
        if not isinstance(U_prev, RowSparse):  # U_0 on all m rows: the first U-step restricts
            dropped = float(np.sum(np.delete(U_prev, XVt.rows, axis=0) ** 2))
            U_prev = _restrict(U_prev, XVt.rows)
    else:
        U_prev, XVt = densify(U_prev), densify(XVt)
    P_prev = _values(U_prev)
    # one BLAS thread: the U-step's GEMMs are then bitwise the same on any driver, and a
    # loaded or shared driver does not thrash (4x faster at m = 2**18, r = 100 under load 9)
    with threadpool_limits(limits=1, user_api="blas"):
        P = kernels.u_step(P_prev, _values(XVt), state.VVt, mu, config.polar)
    keep_V = state.V is not None
    hold_V = hold_V and not keep_V

    def on_rows(A: np.ndarray) -> Any:  # U in U_k's row space
        return RowSparse(U_prev.rows, A, U_prev.shape) if isinstance(U_prev, RowSparse) else A

    def one_pass(A: np.ndarray) -> tuple[Any, dict[str, Any], float]:
        V, total = graph.block_pass(
            X, on_rows(A), state.V, lam=_lam_value(config.lam, L_c), config=config,
            keep_V=keep_V or hold_V,
            spill=None if spill is None or not keep_V else functools.partial(
                spill, state.iteration + 1),
        )
        return V, total, kernels.objective(state.sq_norm_X, A, _values(total["XVt"]), n)

    beta, beta_bar = state.beta, state.beta_bar
    if config.accelerate and not keep_V and mu is None and state.iteration >= 1:
        with threadpool_limits(limits=1, user_api="blas"):
            E = kernels.polar_factor(P + beta * (P - P_prev), config.polar)
        V, total, f = one_pass(E)
        if f <= state.objective[-1]:  # the extrapolated step is kept: never a rise
            P, beta, beta_bar = E, min(beta_bar, 1.05 * beta), min(1.0, 1.01 * beta_bar)
        else:  # the plain step, which never increases the objective
            V = None  # a held V of the rejected pass is not kept beside the plain pass's
            V, total, f = one_pass(P)
            beta, beta_bar = beta / 1.5, beta
    else:
        V, total, f = one_pass(P)
    step = np.sqrt(np.sum((P - P_prev) ** 2) + dropped) if dropped else np.linalg.norm(
        P - P_prev
    )
    new = dataclasses.replace(
        state,
        iteration=state.iteration + 1, U=on_rows(P), V=V if keep_V else None,
        held_V=V if hold_V else None, XVt=total["XVt"], VVt=total["VVt"],
        objective=[*state.objective, f],
        u_step_norm=[*state.u_step_norm, float(step)],
        v_step_norm=[*state.v_step_norm,
                     float(np.sqrt(total["dV_sq"])) if keep_V else float("nan")],
        seconds=[*state.seconds, time.perf_counter() - t0],
        n_degenerate=total["n_degenerate"], beta=beta, beta_bar=beta_bar,
    )
    new.converged = bool(new.relative_change < config.tol)
    return new


def stateless(lam: Any, keep_V: bool = False) -> bool:
    """Whether the iteration keeps no V between passes: exact V-step (lam = 2), V not asked.

    With lam = 2, Eq. 3.12 is ``v_j = normalise(U_{k+1}^T x_j)`` (Liu et al. 2019): V_{k+1}
    depends on U_{k+1} and X alone, so a pass computes each chunk's V, uses it for the
    partials and drops it.
    """
    return not keep_V and (lam == "exact" or (not isinstance(lam, str) and float(lam) == 2.0))


def holds_last_V(X: da.Array, config: FitConfig) -> bool:
    """Whether :func:`fit`'s ``hold_V`` takes effect: the last pass's V can be the final V.

    Parameters
    ----------
    X : dask.array.Array of shape (m, n)
        The fit's column-chunked X.
    config : FitConfig
        The fit's parameters (``lam``, ``device``).

    Returns
    -------
    bool
        True for the stateless iteration (:func:`stateless`, Liu et al. 2019, Eq. 3.12 with
        ``lam = 2``) on the CPU over sparse chunks, whose pass computes V bitwise as
        :func:`embedding` does; False otherwise: on dense chunks the pass's V and the
        embedding's kernel round differently, so the final V stays the recomputed one, and a
        fit that keeps V between passes has it anyway.
    """
    return stateless(config.lam) and config.device == "cpu" and sp.issparse(X._meta)


def embedding(
    X: da.Array, state: FitState, *, dtype: Any = np.float64, device: str = "cpu"
) -> da.Array:
    """``V_k`` of a state, as a lazy dask array chunked like the documents of X.

    Parameters
    ----------
    X : dask.array.Array of shape (m, n), float64
        The corpus of the fit.
    state : FitState
        Any iteration k.
    dtype : numpy.float64 or numpy.float32, default float64
        The fit's compute dtype.
    device : {"cpu", "cuda"}, default "cpu"
        Where the chunks of ``normalise(U_k^T X)`` are computed (:func:`graph.embedding`).

    Returns
    -------
    dask.array.Array of shape (r, n), ``dtype``
        ``state.V`` when the iteration kept it; ``state.held_V``, the V the pass that
        computed ``f_k`` made, when the fit held it (:func:`fit`'s ``hold_V``; no pass over
        X); else ``normalise(U_k^T X)`` chunk by chunk
        (:func:`sphdist.core.graph.embedding`): bitwise the V of the pass that computed
        ``f_k`` (the same kernel, :func:`sphdist.core.kernels.embed_block`, on the CPU).
        Storing it writes each chunk's columns from the task that computed them.
    """
    if state.V is not None:
        return state.V
    if state.held_V is not None and device == "cpu":
        return state.held_V
    if X.numblocks[0] != 1:
        X = X.rechunk({0: -1})
    return graph.embedding(X, state.U, dtype=dtype, device=device)


def fit(
    X: da.Array, n_components: int | None = None, *, config: FitConfig | None = None,
    state: FitState | None = None,
    U0: np.ndarray | None = None, callback: Callable[[FitState], None] | None = None,
    keep_V: bool = False, spill: Callable[[int, da.Array], Any] | None = None,
    check_memory: Callable[[int], None] | None = None, hold_V: bool = False, **params: Any,
) -> FitState:
    """Run Algorithm 1 of Liu et al. (2019) on a column-chunked X.

    Parameters
    ----------
    X : dask.array.Array of shape (m, n), float64
        Documents as columns, chunked along columns only (one block along the feature axis),
        blocks scipy.sparse (CSC preferred) or ndarray.
    n_components : int, optional
        r, ``1 <= r <= min(m, n)``; with the ``**params``, or else ``config``.
    config : FitConfig, optional
        Every parameter at once, built (and validated against the table) by the caller
        (:meth:`FitConfig.build`, :meth:`FitConfig.checked`): only r is checked here, against
        X's shape (:func:`check_shape`). Instead of ``n_components`` and ``**params``.
    state : FitState, optional
        Resume from this state (a loaded checkpoint) instead of initialising.
    U0 : ndarray of shape (m, r), optional
        Warm start (ignored when ``state`` is given).
    callback : callable, optional
        Called with the state after initialisation and after every iteration (checkpoints,
        progress lines).
    keep_V : bool, default False
        Keep ``V_k`` on the cluster between iterations even with lam = 2, to record
        ``||V_{k+1} - V_k||_F`` (``v_step_norm``). Always kept for lam != 2, whose V-step
        needs it.
    spill : callable, optional
        Where a kept V goes between iterations (:func:`iterate`): the fit job writes it to a
        scratch zarr array chunk by chunk (:class:`sphdist.io.model.ScratchV`), so worker
        memory stays flat in n for every step size. Default: persisted on the workers.
    check_memory : callable, optional
        ``check_memory(k)``, with k the rows of U (the occurring features, or m), before the
        first allocation of size ``k r``: U_0's, or the first pass of a resumed ``state``. It
        raises to refuse the fit; the fit job estimates the peak with :func:`peak_bytes`.
    hold_V : bool, default False
        For the stateless iteration on the CPU: every pass persists the V it computes (on
        the workers, ``d r n`` bytes in all), as ``held_V`` of its state, and drops the
        previous pass's before it runs, so the final state carries the V of its last pass
        and :func:`embedding` needs no further pass over X (bitwise the same V). Ignored
        where V is kept anyway, with ``device="cuda"`` and for dense chunks (whose V the
        pass and the embedding round differently). The fit job asks it when X is
        held in memory and X and V fit the memory budget together.
    **params
        The other parameters, names of :data:`sphdist.core.params.SOLVER_PARAMS`, each with
        the constraint and default of its row of :data:`sphdist.core.params.PARAMS`, built
        once into a :class:`FitConfig` (:func:`check_params`) that every step reads:
        ``lam``, ``mu`` (the steps, module docstring), ``max_iter``, ``tol`` (stop when the
        relative objective change ``|f_{k-1} - f_k| / |f_{k-1}|`` is below it), ``init``,
        ``random_state``, ``n_power_iter`` (:func:`initialize`), ``split_every`` (fan-in of the
        reduction tree of the blocks' partials, :func:`graph.tree_sum`), ``dtype`` (compute
        dtype of ``U^T X_c`` and the V-step, and storage dtype of V; ``X V^T``, ``V V^T``,
        the objective and U stay float64),
        ``polar`` (:func:`kernels.polar_factor`), ``partials`` (format of the ``X V^T``
        block partials; bitwise the same result for all three), ``accelerate`` (the
        extrapolated U-step of :func:`iterate`, for lam and mu "exact").

    Returns
    -------
    FitState
        The last iteration. Its ``V`` is None for the stateless iteration: the embedding is
        :func:`embedding` of the state (``held_V`` with ``hold_V``), computed (or stored) by
        the caller.

    Raises
    ------
    ParameterError
        If a parameter is out of range.
    TypeError
        If both or neither of ``n_components`` and ``config`` are given, or ``**params``
        with ``config``.
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
    and the polar factor shrink from m to k rows (U is a RowSparse on them;
    :attr:`FitState.U_full` restores the m rows).
    Columns whose ``U^T x_j`` is zero get ``e_1`` (the kept path keeps ``V_k``'s column
    instead; both give ``e_1`` to an empty document). ``v_step_norm`` is NaN there.

    Memory per worker (w workers; t threads each; B blocks of at most
    ``graph.MAX_BLOCK_DOCUMENTS`` = 32768 documents (:func:`graph.pass_blocks`), one task each,
    all of them independent; G chunks per block; P = :func:`graph.partials_held` (B,
    ``split_every``, t), the partials alive at once: ``ceil(log_s B) + 2 t + 1``; d =
    itemsize of ``dtype``; c_X = bytes of one chunk, about ``12 nnz_c``; k = distinct
    features of the partials, <= m / 2 with ``partials="auto"`` on the full feature space,
    and k = m once the iteration runs on the occurring features or with
    ``partials="dense"``)::

        RSS_worker ~ R_0                       Python, dask, NumPy/SciPy (~0.3 GiB)
                   + d m r                     U, broadcast once per iteration
                   + 8 k r P                   the running blocks' accumulators, the
                                               finished partials waiting for their fold
                                               and one running sum per level of the tree
                                               (each node folds its inputs in as they
                                               arrive, :func:`graph.tree_sum`)
                   + 8 k r C                   the copies of a sum the tree's combine and
                                               aggregate steps make, and the driver's
                                               dense, aligned copy of the total (C =
                                               ``TREE_COPIES`` = 6, measured: a one-block
                                               fit at r = 200, k = 38,195 peaked 4.9
                                               partials above the other terms)
                   + G c_X (1 + t)             the chunks of the blocks it runs (X
                                               streamed, every pass after the first:
                                               at most 2 c_X t, each task reading its
                                               chunks one at a time for its dense
                                               partial, graph.streamed_chunks)
                   [+ X_w]                     its share of X, only when X is held in memory
                                               (``sphdist.jobs.cluster.holds_in_memory``),
                                               at most 12.5 % more kept row-major
                                               (``graph.hold``), its chunks then never
                                               copied by a pass
                   [+ 2 d r n / w]             V_k and V_{k+1} of its documents, only
                                               when V is kept (lam != 2 or keep_V) in
                                               worker memory (no ``spill``)
                   [+ d r n / w]               the held V of the last pass (``hold_V``)

    With the stateless iteration and X streamed every term but P is independent of n, and P
    grows by one partial per level of the tree alone (2 levels at 1M documents and fan-in 8,
    3 at 10M); k is bounded by m (m is then the number of occurring features), G by the block
    size, and the chunks a streamed pass holds by the threads once U is on the occurring
    features (the first pass, on all m rows, keeps a block's G chunks for its row-sparse
    partial). On dask's threaded scheduler in one process (the default on one machine) the
    driver and the single "worker" are the same process, w = 1. The driver holds
    about six (m, r) float64 arrays (U_k, U_{k+1}, X V^T, M and temporaries of the U-step):
    ``~ 48 m r`` bytes (after the first pass, m the occurring features). The benchmark
    (``pipelines/benchmark.py``) compares this with measured peak RSS.
    """
    if config is None:
        if n_components is None:
            raise TypeError("fit() needs n_components (with the other parameters) or config")
        config = check_params(n_components, X.shape, **params)
    elif n_components is not None or params:
        raise TypeError("fit() takes config or n_components and parameters, not both")
    else:
        config = check_shape(config.checked(), X.shape)
    if X.numblocks[0] != 1:
        X = X.rechunk({0: -1})
    # one BLAS thread on the driver for the whole fit: the rounding of U_0's polar factor, the
    # U-steps' GEMMs and the objective's dot products then never depends on how many threads
    # BLAS would take here (threads in this process, a LocalCluster's client, an external
    # cluster's), so the result is a function of X and the parameters alone
    with threadpool_limits(limits=1, user_api="blas"):
        return _fit(X, config, state=state, U0=U0, callback=callback, keep_V=keep_V,
                    spill=spill, check_memory=check_memory, hold_V=hold_V)


def _fit(
    X: da.Array, config: FitConfig, *, state: FitState | None, U0: np.ndarray | None,
    callback: Callable[[FitState], None] | None, keep_V: bool,
    spill: Callable[[int, da.Array], Any] | None,
    check_memory: Callable[[int], None] | None = None, hold_V: bool = False,
) -> FitState:
    """The body of :func:`fit`, with X rechunked and BLAS on one thread."""
    keep_V = not stateless(config.lam, keep_V)
    hold_V = hold_V and not keep_V and holds_last_V(X, config)
    # the stateless exact iteration with the exact U-step runs on the occurring features:
    # X V^T is zero on every other row, so U_{k+1} = polar(X V_k^T) is zero there too
    find_features = not keep_V and config.mu == "exact"
    if state is None:
        state = _initialize(X, config, U0=U0, keep_V=keep_V, find_features=find_features,
                            spill=spill, check_memory=check_memory, hold_V=hold_V)
        if callback is not None:
            callback(state)
    else:
        running = state.iteration < config.max_iter and not state.converged
        if check_memory is not None and running:
            rows = getattr(state.U, "rows", None)  # a RowSparse U: its k rows
            check_memory(state.U.shape[0] if rows is None else rows.size)
        if state.XVt is None and running:
            state = resume(X, state, config, keep_V=keep_V, find_features=find_features,
                           hold_V=hold_V)
        elif not keep_V:
            state = dataclasses.replace(state, V=None)  # a checkpoint that stored V_k too
    while state.iteration < config.max_iter and not state.converged:
        state = dataclasses.replace(state, held_V=None)  # not the last: its V is let go
        state = iterate(X, state, config, spill=spill, hold_V=hold_V)
        if callback is not None:
            callback(state)
    return state


#: Bytes of a process before the fit allocates anything: Python, dask, NumPy/SciPy (R_0).
BASE_BYTES = 300 * 2**20

#: Dense (k, r) float64 copies of a pass's sum beyond the partials held (C in :func:`fit`'s
#: Notes): the tree's combine and aggregate outputs and the driver's densified, aligned
#: total. Measured (``tests/jobs/test_memory_estimate.py``): a one-block fit at r = 200
#: peaked 4.9 such copies above the other terms.
TREE_COPIES = 6


class PeakMemory(NamedTuple):
    """The fit's estimated peak memory, in bytes, without ``BASE_BYTES`` and a held X."""

    driver: int
    """The U-step on the driver: about six (k, r) float64 arrays."""
    worker: int
    """One worker during a pass: U, the partials alive in the tree, the chunks."""


def peak_bytes(
    n_rows: int, n_components: int, *, dtype: Any = np.float64,
    split_every: int = PARAMS["split_every"].default,
    n_blocks: int = 1, chunk_bytes: int = 0, block_chunks: int = 1, threads: int = 1,
) -> PeakMemory:
    """Estimate the fit's peak memory from its sizes, before anything is allocated.

    The formula of :func:`fit`'s Notes, with every partial of a pass on one worker (the
    threaded scheduler in one process, or the worst placement on a cluster).

    Parameters
    ----------
    n_rows : int
        k, the rows of U: the occurring features on the stateless exact path, else m.
    n_components : int
        r.
    dtype : numpy.float64 or numpy.float32, default float64
        The fit's compute dtype (U's broadcast); the partials and the driver stay float64.
    split_every : int, default 8
        Fan-in of the tree that sums the blocks' partials (:func:`graph.tree_sum`).
    n_blocks : int, default 1
        B, the blocks of a pass (:func:`graph.pass_blocks`).
    chunk_bytes : int, default 0
        c_X, bytes of the largest chunk of X in memory (CSC values, indices and pointers).
    block_chunks : int, default 1
        G, the chunks of one block (at most ``graph.MAX_BLOCK_DOCUMENTS`` documents).
    threads : int, default 1
        t, threads of the worker (of this process on the threaded scheduler).

    Returns
    -------
    PeakMemory
        ``driver = 48 k r`` and ``worker = d k r + 8 k r (P + C) + G c_X (1 + t)``, in
        bytes, with P = :func:`graph.partials_held` (B, ``split_every``, t) and C =
        :data:`TREE_COPIES`. On the threaded scheduler
        one process holds both, plus :data:`BASE_BYTES` and X when X is held in memory.

    Examples
    --------
    >>> peak = peak_bytes(45_580, 100, chunk_bytes=5 * 2**20, n_blocks=25, threads=2)
    >>> round((BASE_BYTES + peak.driver + peak.worker) / 2**30, 2)  # 100k documents, 2 threads
    0.99
    """
    k, r = int(n_rows), int(n_components)
    d = np.dtype(dtype).itemsize
    held = graph.partials_held(n_blocks, split_every, threads)
    driver = 48 * k * r
    worker = d * k * r + 8 * k * r * (held + TREE_COPIES) + int(block_chunks) * int(chunk_bytes) * (
        1 + int(threads)
    )
    return PeakMemory(driver=driver, worker=worker)
