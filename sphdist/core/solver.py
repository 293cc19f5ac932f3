"""Liu et al. (2019) Algorithm 1 on Dask: column-chunked X, one pass over X per iteration.

Each iteration k -> k+1 is

1. **U-step, on the driver** (Eq. 3.11): ``U_{k+1} = polar(M)`` from the reduced partials
   ``X V_k^T`` (m, r) and ``V_k V_k^T`` (r, r) of the previous pass (:func:`kernels.u_step`);
2. **one pass over X**: the document chunks are grouped into at most ``max_partials`` blocks
   of consecutive chunks (:func:`block_bounds`, a function of the chunk count only); one task
   per block reads each of its chunks once and returns their new ``V_c`` (Eq. 3.12) together
   with ``sum_c X_c V_c^T``, ``sum_c V_c V_c^T`` and the objective terms, accumulated in place
   in one float64 array in chunk order (:func:`kernels.pass_block`); the block partials
   are summed in a fixed tree of fan-in ``split_every``, so the result does not depend on the
   number of workers or on task completion order; the new V stays on the cluster, chunked like
   X. U is broadcast to the workers once per iteration.

   ``X V^T`` partials are **row-sparse** by default (``partials="auto"``): a block's
   ``sum_c X_c V_c^T`` is nonzero only on the features that occur in its chunks, so it is kept
   as those rows (:class:`kernels.RowSparse`), the tree adds partials on the union of their
   rows, and the driver densifies the result once (:func:`kernels.densify`). The values are
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
    A fixed value; lam must be >= 2 (the V-block constant), mu >= 0 (mu = 0 is not monotone).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import dask
import dask.array as da
import numpy as np
from sklearn.utils import check_random_state
from threadpoolctl import threadpool_limits

from sphdist.core import kernels
from sphdist.errors import DataError, ParameterError

__all__ = [
    "FitState", "check_params", "initialize", "iterate", "fit", "block_bounds", "STEP_MODES",
]

STEP_MODES = ("exact", "palm", "theory")
#: Most documents one pass task holds at once (8 chunks of the default 4096).
MAX_BLOCK_DOCUMENTS = 32768
_PALM_FACTOR = 1.1


@dataclasses.dataclass
class FitState:
    """Everything Algorithm 1 carries from one iteration to the next (a checkpoint).

    Attributes
    ----------
    iteration : int
        Completed iterations k (0 after initialisation).
    U : ndarray of shape (m, r), float64
        ``U_k``, orthonormal columns.
    V : dask.array.Array of shape (r, n), float64
        ``V_k``, unit columns, chunked like the document chunks of X (persisted).
    XVt : ndarray of shape (m, r), float64
        ``X V_k^T``.
    VVt : ndarray of shape (r, r), float64
        ``V_k V_k^T``.
    sq_norm_X : float
        ``||X||_F^2``.
    objective : list of float
        ``||X - U_i V_i||_F^2`` for i = 0..k (k + 1 values).
    u_step_norm, v_step_norm : list of float
        ``||U_i - U_{i-1}||_F`` and ``||V_i - V_{i-1}||_F`` for i = 1..k (k values).
    seconds : list of float
        Wall time of each iteration i = 0..k, in seconds (not part of the maths).
    n_degenerate : int
        Columns of ``V_k`` whose ``q`` was zero (kept from the previous iterate).
    converged : bool
        Whether the relative objective decrease fell below ``tol``.
    """

    iteration: int
    U: np.ndarray
    V: da.Array
    XVt: np.ndarray
    VVt: np.ndarray
    sq_norm_X: float
    objective: list[float]
    u_step_norm: list[float]
    v_step_norm: list[float]
    seconds: list[float]
    n_degenerate: int = 0
    converged: bool = False

    @property
    def relative_change(self) -> float:
        """``|f_{k-1} - f_k| / |f_{k-1}|`` of the last iteration (nan at k = 0)."""
        if len(self.objective) < 2:
            return float("nan")
        prev, cur = self.objective[-2], self.objective[-1]
        return abs(prev - cur) / abs(prev) if prev != 0 else 0.0


def _check_step(name: str, value: Any, minimum: float) -> None:
    if isinstance(value, str):
        if value not in STEP_MODES:
            raise ParameterError(
                f"{name}={value!r} is not a step-size mode. To resolve this, use one of "
                f"{', '.join(map(repr, STEP_MODES))} or a number >= {minimum:g}."
            )
        return
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise ParameterError(f"{name} must be a number or one of {STEP_MODES}, got {value!r}.")
    if not np.isfinite(value) or value < minimum:
        raise ParameterError(
            f"{name}={value!r} is out of range. To resolve this, use a finite value >= "
            f"{minimum:g} (or one of {', '.join(map(repr, STEP_MODES))})."
        )


def check_params(
    n_components: Any, shape: tuple[int, int], *, lam: Any, mu: Any, max_iter: Any, tol: Any,
    init: Any, dtype: Any = np.float64, polar: Any = "auto", max_partials: Any = 8,
    partials: Any = "auto",
) -> None:
    """Validate solver parameters against the shape of X.

    Parameters
    ----------
    n_components : int
        r, with ``1 <= r <= min(m, n)``.
    shape : tuple of int
        (m features, n documents).
    lam, mu : float or str
        Step sizes (module docstring); lam >= 2, mu >= 0.
    max_iter : int
        >= 0.
    tol : float
        >= 0, relative objective decrease.
    init : str
        ``"random"`` or ``"svd"``.
    dtype : numpy.float64 or numpy.float32
        Compute dtype of the pass.
    polar : str
        ``"svd"``, ``"gram"`` or ``"auto"``.
    max_partials : int
        >= 1.
    partials : str
        ``"auto"``, ``"rows"`` or ``"dense"``.

    Raises
    ------
    ParameterError
        Naming the first value out of range and its valid range.
    """
    m, n = shape
    if isinstance(n_components, bool) or not isinstance(n_components, (int, np.integer)):
        raise ParameterError(f"n_components must be an integer, got {n_components!r}.")
    if not 1 <= n_components <= min(m, n):
        raise ParameterError(
            f"n_components={n_components} is out of range for X with {m} features and {n} "
            f"documents. To resolve this, choose 1 <= n_components <= {min(m, n)}."
        )
    _check_step("lam", lam, 2.0)
    _check_step("mu", mu, 0.0)
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 0:
        raise ParameterError(f"max_iter must be an integer >= 0, got {max_iter!r}.")
    if not isinstance(tol, (int, float, np.number)) or not np.isfinite(tol) or tol < 0:
        raise ParameterError(f"tol must be a finite number >= 0, got {tol!r}.")
    if init not in ("random", "svd"):
        raise ParameterError(f"init must be 'random' or 'svd', got {init!r}.")
    if _dtype(dtype) is None:
        raise ParameterError(f"dtype must be float64 or float32, got {dtype!r}.")
    if polar not in kernels.POLAR_METHODS:
        raise ParameterError(
            f"polar={polar!r} is not a polar-factor route. To resolve this, use one of "
            f"{', '.join(map(repr, kernels.POLAR_METHODS))}."
        )
    if (
        isinstance(max_partials, bool) or not isinstance(max_partials, (int, np.integer))
        or max_partials < 1
    ):
        raise ParameterError(f"max_partials must be an integer >= 1, got {max_partials!r}.")
    if partials not in kernels.PARTIAL_FORMATS:
        raise ParameterError(
            f"partials={partials!r} is not a partial format. To resolve this, use one of "
            f"{', '.join(map(repr, kernels.PARTIAL_FORMATS))}."
        )


def _dtype(dtype: Any) -> np.dtype | None:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        return None
    return dt if dt in (np.dtype(np.float64), np.dtype(np.float32)) else None


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


def _scattered(U: np.ndarray) -> Any:
    """U as a dask.delayed: broadcast once to every worker when a cluster is active.

    Every block task of the pass depends on this one key, so each worker receives U once per
    iteration (pushed up front by ``broadcast=True``, not fetched on first use).
    """
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):
        return dask.delayed(U, name=f"sphdist-U-{uuid.uuid4().hex}")  # no hashing of U
    return dask.delayed(client.scatter(U, hash=False, broadcast=True))


def _on_cluster(U: np.ndarray) -> da.Array:
    """U as a one-block dask array, scattered once to the cluster when one is active."""
    try:
        from distributed import default_client

        client = default_client()
    except (ImportError, ValueError):
        return da.from_array(U, chunks=U.shape, name=False)  # no hashing of m x r floats
    future = client.scatter(U, hash=False)
    return da.from_delayed(dask.delayed(future), shape=U.shape, dtype=U.dtype)


def _reduce_partials(parts: da.Array, split_every: int) -> da.Array:
    return da.reduction(
        parts,
        kernels.partials_chunk,
        kernels.partials_agg,
        combine=kernels.partials_combine,
        axis=0,
        keepdims=False,
        concatenate=False,
        split_every=split_every,
        dtype=object,
        meta=np.empty((), dtype=object),
    )


def block_bounds(
    n_chunks: int, max_partials: int, chunk_sizes: Sequence[int] | None = None,
    max_block_documents: int = MAX_BLOCK_DOCUMENTS,
) -> list[tuple[int, int]]:
    """Group consecutive chunks into blocks: at most ``max_partials``, unless that is too big.

    Parameters
    ----------
    n_chunks : int
        Document chunks of X.
    max_partials : int
        Upper bound on the number of blocks (each yields one (m, r) partial per pass) while
        every block stays within ``max_block_documents``.
    chunk_sizes : sequence of int, optional
        Documents per chunk (``X.chunks[1]``). Given, a block never holds more than
        ``max_block_documents`` documents (a single larger chunk is a block of its own), so
        the chunks one task holds at once stay bounded however large n grows.
    max_block_documents : int, default 32768
        See ``chunk_sizes``.

    Returns
    -------
    list of (int, int)
        ``[start, stop)`` chunk ranges of ``ceil(n_chunks / max_partials)`` chunks each, cut
        earlier where the document bound requires. A function of the chunk layout only, so
        the summation order of a pass never depends on the cluster.

    Examples
    --------
    >>> block_bounds(5, 2)
    [(0, 3), (3, 5)]
    >>> block_bounds(4, 1, chunk_sizes=[4096] * 4, max_block_documents=8192)
    [(0, 2), (2, 4)]
    >>> block_bounds(3, 1, chunk_sizes=[50_000, 10, 10], max_block_documents=8192)
    [(0, 1), (1, 3)]
    """
    size = max(1, -(-n_chunks // max(1, max_partials)))
    if chunk_sizes is None:
        return [(a, min(a + size, n_chunks)) for a in range(0, n_chunks, size)]
    bounds, start, docs = [], 0, 0
    for i, n_i in enumerate(chunk_sizes):
        if i > start and (i - start >= size or docs + n_i > max_block_documents):
            bounds.append((start, i))
            start, docs = i, 0
        docs += n_i
    if n_chunks:
        bounds.append((start, n_chunks))
    return bounds


def _take_V(part: dict[str, Any], i: int) -> np.ndarray:
    return part["V"][i]


def _tree_sum(leaves: list[Any], split_every: int, name: str) -> Any:
    """Sum delayed partials in a fixed tree of fan-in ``split_every``, in list order."""
    level, depth = leaves, 0
    while len(level) > 1:
        level = [
            dask.delayed(kernels.partials_combine, pure=False)(
                level[i:i + split_every], dask_key_name=(f"{name}-sum{depth}", i)
            )
            for i in range(0, len(level), split_every)
        ]
        depth += 1
    return level[0]


def _pass(
    X: da.Array, U: np.ndarray, V_prev: da.Array | None, lam: float, split_every: int,
    max_partials: int = 8, dtype: Any = np.float64, partials: str = "auto",
) -> tuple[da.Array, dict[str, Any]]:
    """One pass over X: new V (persisted) and the summed partials.

    Consecutive chunks are grouped into at most ``max_partials`` blocks (:func:`block_bounds`);
    one task per block reads its chunks once each and accumulates their partials in one
    float64 array (:func:`kernels.pass_block`), row-sparse or dense (``partials``); the block
    partials are summed in a fixed tree of fan-in ``split_every``, and the driver densifies
    ``X V^T`` once.
    """
    dtype = np.dtype(dtype)
    r = U.shape[1]
    name = f"sphdist-pass-{uuid.uuid4().hex}"
    U_d = _scattered(np.asarray(U, dtype=dtype))
    xs = X.to_delayed().ravel()
    vs = None if V_prev is None else V_prev.to_delayed().ravel()
    sizes = X.chunks[1]
    meta = np.empty((0, 0), dtype=dtype)
    leaves, V_blocks = [], []
    for b, (start, stop) in enumerate(block_bounds(len(xs), max_partials, sizes)):
        part = dask.delayed(kernels.pass_block, pure=False)(
            list(xs[start:stop]), U_d, None if vs is None else list(vs[start:stop]),
            lam=lam, dtype=dtype, partials=partials, dask_key_name=(name, b),
        )
        leaves.append(
            dask.delayed(kernels.partials_chunk, pure=False)(
                part, dask_key_name=(f"{name}-partial", b)
            )
        )
        V_blocks += [
            da.from_delayed(
                dask.delayed(_take_V, pure=False)(part, j - start, dask_key_name=(f"{name}-V", j)),
                shape=(r, sizes[j]), dtype=dtype, meta=meta,
            )
            for j in range(start, stop)
        ]
    V = da.concatenate(V_blocks, axis=1)
    V, total = dask.persist(V, _tree_sum(leaves, split_every, name))
    (total,) = dask.compute(total)
    # aligned copies: distributed may hand back an (m, r) array at an odd address, and NumPy's
    # matmul skips BLAS for unaligned operands, which changed the U-step's rounding (and so
    # every later bit) between a cluster and the local schedulers
    total["XVt"] = np.require(kernels.densify(total["XVt"]), np.float64, ["C", "A"])
    total["VVt"] = np.require(total["VVt"], np.float64, ["C", "A"])
    return V, total


def _power_pass(X: da.Array, Q: np.ndarray, split_every: int) -> dict[str, Any]:
    parts = da.blockwise(
        kernels.project_chunk, "j", X, "ij", _on_cluster(Q), "ik",
        concatenate=True, adjust_chunks={"j": 1},
        dtype=object, meta=np.empty((0,), dtype=object),
    )
    (total,) = dask.compute(_reduce_partials(parts, split_every))
    return total


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
        total = _power_pass(X, Q, split_every)
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
        Chunks are grouped into at most this many blocks of consecutive chunks, one task and
        one (m, r) partial each (:func:`block_bounds`).
    dtype : numpy.float64 or numpy.float32, default float64
        Compute dtype of ``U^T X_c`` and storage dtype of V; partials are summed in float64.
    partials : {"auto", "rows", "dense"}, default "auto"
        Format of the ``X V^T`` block partials on the cluster (:func:`kernels.pass_block`):
        row-sparse on the features a block touches, dense (m, r), or row-sparse while at most
        half of m. Bitwise the same result; ``"auto"`` moves far fewer bytes.

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
    m, n = X.shape
    rs = check_random_state(random_state)
    if U0 is not None:
        U = kernels.polar_factor(np.asarray(U0, dtype=np.float64))
    elif init == "svd":
        U = svd_init(X, n_components, rs, n_iter=init_n_iter, split_every=split_every)
    else:
        U = kernels.random_orthonormal(m, n_components, rs)
    V, total = _pass(X, U, None, 2.0, split_every, max_partials, dtype, partials)
    sq = total["sq_norm_X"]
    if not np.isfinite(sq) or not np.all(np.isfinite(total["XVt"])):
        raise DataError(
            "X contains NaN or Inf values (||X||_F^2 is not finite). To resolve this, clean "
            "the input data before fitting."
        )
    return FitState(
        iteration=0, U=U, V=V, XVt=total["XVt"], VVt=total["VVt"], sq_norm_X=sq,
        objective=[kernels.objective(sq, U, total["XVt"], n)],
        u_step_norm=[], v_step_norm=[], seconds=[time.perf_counter() - t0],
        n_degenerate=total["n_degenerate"],
    )


def iterate(
    X: da.Array, state: FitState, *, lam: Any = "exact", mu: Any = "exact", tol: float = 1e-4,
    split_every: int = 8, max_partials: int = 8, dtype: Any = np.float64, polar: str = "auto",
    partials: str = "auto",
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

    Returns
    -------
    FitState
        Iteration k + 1 (a new object; ``state`` is not modified).
    """
    t0 = time.perf_counter()
    m, n = X.shape
    r = state.U.shape[1]
    L_c = kernels.lipschitz_constant(r, n, state.sq_norm_X)
    # one BLAS thread: the U-step's GEMMs are then bitwise the same on any driver, and a
    # loaded or shared driver does not thrash (4x faster at m = 2**18, r = 100 under load 9)
    with threadpool_limits(limits=1, user_api="blas"):
        U = kernels.u_step(state.U, state.XVt, state.VVt, _mu_value(mu, state.VVt, L_c), polar)
    V, total = _pass(
        X, U, state.V, _lam_value(lam, L_c), split_every, max_partials, dtype, partials
    )
    f = kernels.objective(state.sq_norm_X, U, total["XVt"], n)
    new = dataclasses.replace(
        state,
        iteration=state.iteration + 1, U=U, V=V, XVt=total["XVt"], VVt=total["VVt"],
        objective=[*state.objective, f],
        u_step_norm=[*state.u_step_norm, float(np.linalg.norm(U - state.U))],
        v_step_norm=[*state.v_step_norm, float(np.sqrt(total["dV_sq"]))],
        seconds=[*state.seconds, time.perf_counter() - t0],
        n_degenerate=total["n_degenerate"],
    )
    new.converged = bool(new.relative_change < tol)
    return new


def fit(
    X: da.Array, n_components: int, *, lam: Any = "exact", mu: Any = "exact",
    max_iter: int = 100, tol: float = 1e-4, init: str = "random", random_state: Any = None,
    init_n_iter: int = 4, split_every: int = 8, state: FitState | None = None,
    U0: np.ndarray | None = None, callback: Callable[[FitState], None] | None = None,
    max_partials: int = 8, dtype: Any = np.float64, polar: str = "auto",
    partials: str = "auto",
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
        At most this many (m, r) partials per pass: chunks are grouped into blocks of
        consecutive chunks (:func:`block_bounds`), each accumulated by one task.
    dtype : numpy.float64 or numpy.float32, default float64
        Compute dtype of ``U^T X_c`` and the V-step, and storage dtype of V. ``X V^T``,
        ``V V^T``, the objective and U on the driver stay float64.
    polar : {"auto", "svd", "gram"}, default "auto"
        Route of the U-step's polar factor (:func:`kernels.polar_factor`).
    partials : {"auto", "rows", "dense"}, default "auto"
        Format of the ``X V^T`` block partials (:func:`initialize`); the result is bitwise the
        same for all three.

    Returns
    -------
    FitState
        The last iteration.

    Raises
    ------
    ParameterError
        If a parameter is out of range.
    DataError
        If X contains NaN or Inf.

    Notes
    -----
    Memory per worker (w workers, one thread each; B = number of blocks,
    ``len(block_bounds(n_chunks, max_partials, chunk_sizes))``; G chunks per block (at most
    ``MAX_BLOCK_DOCUMENTS`` = 32768 documents, so this term does not grow with n); d = itemsize of
    ``dtype``; c_X = bytes of one chunk, about ``12 nnz_c``; k_b = distinct features of a
    block, k_t those of a tree node's blocks, both <= m / 2 with ``partials="auto"``, and
    k_b = k_t = m with ``partials="dense"``)::

        RSS_worker ~ R_0                       Python, dask, NumPy/SciPy (~0.25 GiB)
                   + d m r                     U, broadcast once per iteration
                   + 8 k_b r (1 + P)           the block accumulator, and P block partials
                                               held until summed: P <= ceil(B / w), and
                                               P = min(B, split_every) + 1 on the worker that
                                               runs a combine of the tree
                   + 8 k_t r                   the sum of a combine of the tree
                   + 2 d r n / w               V_k and V_{k+1} of its documents
                   + G c_X                     the chunks of one block

    Everything but the V term is independent of n (k_b and k_t are bounded by the vocabulary
    and by m). The driver holds about six (m, r) float64 arrays (U_k, U_{k+1}, X V^T, M and
    temporaries of the U-step) and the received row-sparse sum: ``~ 48 m r + 8 k_t r``
    bytes. The benchmark (``pipelines/benchmark.py``) compares this with measured peak RSS.
    """
    check_params(
        n_components, X.shape, lam=lam, mu=mu, max_iter=max_iter, tol=tol, init=init,
        dtype=dtype, polar=polar, max_partials=max_partials, partials=partials,
    )
    if X.numblocks[0] != 1:
        X = X.rechunk({0: -1})
    if state is None:
        state = initialize(
            X, n_components, init=init, random_state=random_state,
            init_n_iter=init_n_iter, split_every=split_every, U0=U0,
            max_partials=max_partials, dtype=dtype, partials=partials,
        )
        if callback is not None:
            callback(state)
    while state.iteration < max_iter and not state.converged:
        state = iterate(
            X, state, lam=lam, mu=mu, tol=tol, split_every=split_every,
            max_partials=max_partials, dtype=dtype, polar=polar, partials=partials,
        )
        if callback is not None:
            callback(state)
    return state
