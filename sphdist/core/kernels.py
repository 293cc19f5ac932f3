r"""NumPy/SciPy kernels of Spherical PCA on one chunk of documents, and on the driver.

Pure functions of in-memory arrays; nothing here imports dask or zarr. The papers' orientation
is used throughout: a chunk ``X_c`` has shape (m features, n_c documents), ``U`` (m, r),
``V_c`` (r, n_c). Symbols follow Liu et al. (2019), *Spherical Principal Component Analysis*
(SIAM SDM):

* model ``min ||X - UV||_F^2`` s.t. ``U^T U = I``, ``||v_j||_2 = 1`` (Eq. 2.3-2.4);
* U-step (Eq. 3.11): ``M = 2 (X - U_k V_k) V_k^T + mu U_k``, ``U_{k+1} = Y Z^T`` with
  ``[Y, S, Z] = svd(M)`` (Lemma 1, the polar factor of M);
* V-step (Eq. 3.12): ``q = 2 U_{k+1}^T x_j + (lam - 2) v_j``, ``v_j = q / ||q||_2``.

The distributed solver evaluates the V-step of one iteration and the partial products the next
U-step needs, ``X_c V_c^T`` (m, r) and ``V_c V_c^T`` (r, r), in one pass over ``X_c``
(:func:`pass_block`), which :mod:`sphdist.core.partials` sums in a tree. A block's
``X_c V_c^T`` is row-sparse (only features that occur in its chunks have nonzero rows), so
:func:`pass_block` may return it as a :class:`~sphdist.core.partials.RowSparse`. With the
exact V-step the pass keeps no V (:func:`embed_block` recomputes it from U when it is
stored), and it may run on the features that occur in the corpus alone (:func:`pass_onto`).
Both restrictions are one mechanism, :func:`~sphdist.core.partials.renumber`.

One kernel for both devices: the chunk kernels take the array module from their arrays
(:func:`sphdist.core._device.array_module`: NumPy/SciPy, or CuPy/``cupyx.scipy.sparse`` for
chunks on a CUDA device), and :func:`pass_block` / :func:`embed_block` with
``device="cuda"`` move each chunk there (:func:`sphdist.core._device.to_device`) after the
host-side index work (which features occur, the renumbering) and hand their results back to
the host; the U-step, the objective and the partial sums stay on the host in float64.

Since ``U^T U = I`` and every ``||v_j|| = 1``, ``||UV||_F^2 = n`` and the objective needs no
extra pass (:func:`objective`)::

    ||X - UV||_F^2 = ||X||_F^2 - 2 <U, X V^T> + n.

References
----------
.. [1] Liu, K., Li, Q., Wang, H. and Tang, G. (2019). Spherical Principal Component Analysis. SDM.
.. [2] Halko, N., Martinsson, P.-G. and Tropp, J. A. (2011). Finding Structure with Randomness:
   Probabilistic Algorithms for Constructing Approximate Matrix Decompositions. SIAM Review.
.. [3] Sun, D., Ding, C., Luo, B. and Tang, J. (2011). Angular Decomposition. IJCAI.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import scipy.linalg
from threadpoolctl import threadpool_limits

from sphdist.core import _device
from sphdist.core.partials import (
    PARTIAL_FORMATS,
    RowMajor,
    RowSparse,
    occurring,
    partial_rows,
    renumber,
    row_major,
    spmm_accumulate,
)

__all__ = [
    "polar_factor",
    "POLAR_METHODS",
    "u_step",
    "v_step",
    "pass_block",
    "pass_onto",
    "chunk_features",
    "embed_block",
    "chunk_partials",
    "project_chunk",
    "objective",
    "lipschitz_constant",
    "random_orthonormal",
]

#: ``||q||_2`` at or below this is treated as zero (an empty document): the column is kept.
_TINY = np.finfo(np.float64).tiny


POLAR_METHODS = ("svd", "gram", "auto")

#: ``gram`` falls back to the SVD when ``cond(M)^2`` exceeds this (its error is ~eps cond^2).
_GRAM_MAX_COND_SQ = 1e6
#: ``auto`` takes the Gram route from this many rows per column on.
_GRAM_MIN_ROWS_PER_COL = 64


def polar_factor(
    M: np.ndarray, method: str = "svd", *, return_singular_values: bool = False
) -> Any:
    """Orthonormal polar factor of M: ``argmax_{U^T U = I} trace(U^T M)``.

    Parameters
    ----------
    M : ndarray of shape (m, r), float64
        With m >= r.
    method : {"svd", "gram", "auto"}, default "svd"
        ``"svd"``: ``Y Z^T`` from the thin SVD ``M = Y S Z^T`` (Liu et al. 2019, Lemma 1),
        O(m r^2) with a large constant (about 3 s at m = 2**18, r = 100 on one core).
        ``"gram"``: ``M (M^T M)^{-1/2}`` from the eigendecomposition of the r x r Gram matrix
        (Higham 2008, *Functions of Matrices*, Sec. 8.1: ``M = U_p H`` with
        ``H = (M^T M)^{1/2}``), two O(m r^2) GEMMs; its error is about ``eps cond(M)^2``, so
        it falls back to the SVD when ``cond(M)^2 > 1e6`` or M is rank deficient.
        ``"auto"``: ``"gram"`` when ``m >= 64 r``, else ``"svd"``.
    return_singular_values : bool, default False
        Also return the singular values S of M (decreasing); ``sum(S) = trace(U^T M)`` is the
        nuclear norm of M (Sun et al. 2011 take alpha of Eq. 12 from it after step V3).

    Returns
    -------
    U : ndarray of shape (m, r), float64
        The orthonormal polar factor (Liu et al. 2019, Lemma 1 and Eq. 3.11).
    S : ndarray of shape (r,), float64
        Only with ``return_singular_values``.

    Raises
    ------
    ValueError
        If ``method`` is not one of :data:`POLAR_METHODS`.

    Notes
    -----
    Runs on the driver. Both routes agree to about ``eps cond(M)^2`` (tested).

    Examples
    --------
    >>> M = np.array([[3.0, 0.0], [0.0, 2.0], [0.0, 0.0]])
    >>> polar_factor(M, "gram")
    array([[1., 0.],
           [0., 1.],
           [0., 0.]])
    """
    if method not in POLAR_METHODS:
        raise ValueError(f"method must be one of {POLAR_METHODS}, got {method!r}")
    m, r = M.shape
    if method == "auto":
        method = "gram" if m >= _GRAM_MIN_ROWS_PER_COL * r else "svd"
    if method == "gram":
        G = M.T @ M
        evals, W = np.linalg.eigh((G + G.T) * 0.5)
        if evals[0] > 0 and evals[-1] <= _GRAM_MAX_COND_SQ * evals[0]:
            root = np.sqrt(evals)
            U = M @ ((W / root) @ W.T)
            return (U, root[::-1]) if return_singular_values else U
    Y, S, Zt = scipy.linalg.svd(M, full_matrices=False, lapack_driver="gesdd")
    return (Y @ Zt, S) if return_singular_values else Y @ Zt


def u_step(
    U: np.ndarray, XVt: np.ndarray, VVt: np.ndarray, mu: float | None, polar: str = "svd"
) -> np.ndarray:
    """The U-step of Algorithm 1: the new U from the reduced partial products.

    Parameters
    ----------
    U : ndarray of shape (m, r), float64
        Current U_k, orthonormal columns.
    XVt : ndarray of shape (m, r), float64
        ``X V_k^T``, summed over all chunks.
    VVt : ndarray of shape (r, r), float64
        ``V_k V_k^T``, summed over all chunks.
    mu : float or None
        Proximal parameter mu >= 0 of Eq. 3.11. ``None`` selects the exact block minimiser
        ``polar(X V_k^T)``: on ``U^T U = I`` the objective is
        ``||X||^2 - 2 trace(U^T X V^T) + ||V||^2``, linear in U, so its minimiser is the polar
        factor of ``X V^T`` (Lemma 1).
    polar : {"svd", "gram", "auto"}, default "svd"
        Route of the polar factor (:func:`polar_factor`).

    Returns
    -------
    ndarray of shape (m, r), float64
        ``U_{k+1} = Y Z^T`` from ``svd(M)``, ``M = 2 (X V_k^T - U_k V_k V_k^T) + mu U_k``
        (Liu et al. 2019, Eq. 3.11).
    """
    if mu is None:
        return polar_factor(XVt, polar)
    M = 2.0 * (XVt - U @ VVt) + mu * U
    return polar_factor(M, polar)


def v_step(
    A: np.ndarray, V_prev: np.ndarray | None, lam: float
) -> tuple[np.ndarray, np.ndarray]:
    """The V-step of Algorithm 1 for a chunk of documents.

    Parameters
    ----------
    A : ndarray of shape (r, n_c), float64 or float32
        ``U_{k+1}^T X_c``; a ``cupy.ndarray`` computes on its device (the same code).
    V_prev : ndarray of shape (r, n_c), float64, or None
        Current ``V_k`` columns (unit norm). ``None`` at initialisation, where the step is
        ``v_j = normalise(U^T x_j)``.
    lam : float
        Proximal parameter lam >= 2 of Eq. 3.12.

    Returns
    -------
    V : ndarray of shape (r, n_c), A's dtype, on A's device
        ``v_j = q / ||q||_2`` with ``q = 2 A_j + (lam - 2) v_j`` (Liu et al. 2019, Eq. 3.12).
        Every column has unit L2 norm.
    degenerate : ndarray of shape (n_c,), bool
        True where ``||q||_2 == 0`` (an empty document, or one orthogonal to span(U)); such a
        column keeps ``V_prev``'s column, or ``e_1`` at initialisation, so it stays a defined
        unit vector and never NaN.
    """
    xp = _device.array_module(A)
    q = 2.0 * A if V_prev is None else 2.0 * A + (lam - 2.0) * V_prev
    norms = xp.sqrt(xp.einsum("ij,ij->j", q, q))
    degenerate = norms <= _TINY
    # Inf in X gives inf/inf here; the solver reports non-finite input as a DataError
    with np.errstate(invalid="ignore"):
        V = q / xp.where(degenerate, 1.0, norms)
    if degenerate.any():
        if V_prev is None:
            V[:, degenerate] = 0.0
            V[0, degenerate] = 1.0
        else:
            V[:, degenerate] = V_prev[:, degenerate]
    return V, degenerate


def _sq_norm(X_c: Any) -> float:
    if isinstance(X_c, RowMajor):  # a held chunk: summed in its CSC order when it was kept
        return X_c.sq_norm
    # an overflow gives inf, which the solver reports as a DataError (no RuntimeWarning)
    with np.errstate(over="ignore"):
        if _device.issparse(X_c):
            data = X_c.data
            return float(data @ data)
        return float(_device.array_module(X_c).vdot(X_c, X_c).real)


def pass_block(
    X_blocks: Iterable[Any], U: np.ndarray, V_prev_blocks: list[np.ndarray] | None = None, *,
    lam: float = 2.0, dtype: Any = np.float64, partials: str = "auto", keep_V: bool = True,
    device: str = "cpu",
) -> dict[str, Any]:
    """One read of consecutive chunks: their V-step and the partials of the next U-step.

    Parameters
    ----------
    X_blocks : iterable of scipy.sparse matrix or ndarray, each of shape (m, n_c)
        Consecutive document chunks (CSC is the efficient sparse format; a held X's chunks are
        :class:`~sphdist.core.partials.RowMajor`, whose renumbering and row-major copy cost
        O(k) and give the same bits), in U's row space
        (:func:`pass_onto` renumbers them onto U's rows), taken one at a time: an iterator
        that reads them (:func:`sphdist.core.graph.pass_graph` on a streamed X) has only the
        chunks the partial's format needs alive at once (see Notes).
    U : ndarray of shape (m, r), float64 or float32
        ``U_{k+1}``, orthonormal columns.
    V_prev_blocks : list of ndarray of shape (r, n_c), or None
        ``V_k`` of each chunk; None at initialisation, and for the exact step (lam = 2),
        whose V-step ``v_j = normalise(U^T x_j)`` does not depend on ``V_k``.
    lam : float, default 2.0
        Proximal parameter of Eq. 3.12.
    dtype : {numpy.float64, numpy.float32}, default float64
        Compute dtype of ``U^T X_c``, the V-step and the returned ``V``. The partials are
        always accumulated in float64.
    partials : {"auto", "rows", "dense"}, default "auto"
        Format of the ``"XVt"`` partial. ``"rows"``: a :class:`RowSparse` on the features
        the chunks contain (:func:`~sphdist.core.partials.partial_rows`), when every chunk is
        CSC; ``"dense"``: an (m, r) ndarray; ``"auto"``: ``"rows"`` while those are at most
        half of m. Either way the values are bitwise the same (the same additions into the
        same +0.0-initialised rows).
    keep_V : bool, default True
        Return the new V columns; False drops them once the partials are accumulated (the
        stateless pass: nothing of size n leaves the task).
    device : {"cpu", "cuda"}, default "cpu"
        Where the products and the V-step run. ``"cuda"``: each chunk, renumbered onto its
        partial's rows on the host, is copied to the device (:func:`_device.to_device`),
        ``U^T X_c`` and the V-step run there with the same code (cuSPARSE SpMM), U on the
        block's rows is gathered from one device copy per task, the partials are accumulated
        on the device in float64 and everything returned is copied back to the host.

    Returns
    -------
    dict
        ``"V"`` (with ``keep_V``): list of ndarray (r, n_c) of ``dtype``, the new ``V_{k+1}``
        per chunk (Eq. 3.12); ``"XVt"``: ndarray (m, r) or :class:`RowSparse`, float64,
        ``sum_c X_c V_c^T``; ``"VVt"``: ndarray (r, r), float64, ``sum_c V_c V_c^T``;
        ``"sq_norm_X"`` (``||X_c||_F^2``), ``"dV_sq"`` (``||V_{k+1} - V_k||_F^2``, 0 without
        ``V_k``) and ``"n_degenerate"`` (columns with ``q = 0``, :func:`v_step`), summed over
        the chunks; ``"occurs"``: the (m,) bool mask of the features the chunks contain
        (:func:`~sphdist.core.partials.occurring`, OR-ed by
        :func:`~sphdist.core.partials.partials_combine`, which adds bool arrays).

    Raises
    ------
    ValueError
        If ``partials`` is not one of :data:`PARTIAL_FORMATS`.
    sphdist.errors.DeviceError
        With ``device="cuda"`` and no CuPy (:func:`_device.cupy_module`).
    cupy.cuda.memory.OutOfMemoryError
        With ``device="cuda"``, when a chunk and its products do not fit the device's free
        memory (:func:`_device.is_out_of_memory` tells it apart; the fit job turns it into an
        :class:`~sphdist.errors.InsufficientMemoryError` with the resume command).

    Notes
    -----
    Per chunk two products with ``X_c`` (``X_c^T U`` and ``X_c V^T``), 4 nnz(X_c) r flops,
    on the host from the chunk's row-major copy (:func:`~sphdist.core.partials.row_major`:
    U and the accumulator streamed, the same bits, one more nnz-sized copy of the chunk
    at a time). The chunks are processed and summed in list order, so the result depends on
    the grouping of chunks into blocks, never on where or when the task runs. One (m, r) float64
    accumulator serves the whole block (:func:`spmm_accumulate`); BLAS is limited to one
    thread inside (threadpoolctl), so a worker thread never oversubscribes its core. Memory:
    ``m r (8 + itemsize)`` bytes for the accumulator and U, plus V and the chunks held; with
    a row-sparse partial the accumulator is ``8 k r`` bytes, k the block's distinct features.
    The chunks held: a row-sparse partial's rows are the features of every chunk of the
    block, so all its chunks are taken before the first is processed; a dense partial (asked,
    or ``"auto"`` once the first chunks cover more than half of U's rows: after the first pass
    U is on the corpus's occurring features, 96% of which one chunk of 4096 documents covers
    at 1M documents) takes the rest one at a
    time, each let go once its products are added, so with an iterator over X_blocks the
    chunks alive at once no longer grow with the block (8 chunks at 10M documents, 1 at
    100k). The same chunks, products and additions in the same order either way: the same
    bits. On a device the accumulator, U and one chunk at a time (with its products) are in
    device memory.
    """
    if partials not in PARTIAL_FORMATS:
        raise ValueError(f"partials must be one of {PARTIAL_FORMATS}, got {partials!r}")
    dtype = np.dtype(dtype)
    m, r = U.shape
    U = np.asarray(U, dtype=dtype)
    # the partial's rows need the features of every chunk, unless the first chunks already
    # make it dense (rows only grow): then the rest is streamed, one chunk held at a time
    # a device takes CSC chunks (a held chunk's row-major form is the host's)
    chunks = iter(X_blocks) if device == "cpu" else map(_as_csc, X_blocks)
    held, occurs = [], None
    for X_c in chunks:
        held.append(X_c)
        occurs = occurring([X_c]) if occurs is None else occurs | occurring([X_c])
        if partial_rows(held, occurs, partials) is None:
            break
    if occurs is None:
        occurs = occurring(held)
    rows = partial_rows(held, occurs, partials)  # not None: every chunk is in held
    n_held = len(held)
    xp = np
    if device != "cpu":  # U on the block's rows, as the renumbered chunks the device gets
        xp = _device.cupy_module()
        U = _device.shared_copy(U, device)
        U = U if rows is None else U[xp.asarray(rows)]
    part: dict[str, Any] = {
        "XVt": xp.zeros((m if rows is None else rows.size, r)), "VVt": xp.zeros((r, r)),
        "sq_norm_X": 0.0, "dV_sq": 0.0, "n_degenerate": 0, "occurs": occurs,
    }
    Vs = []
    with threadpool_limits(limits=1, user_api="blas"):
        for i, X_c in enumerate(_drained(held, chunks)):
            if i >= n_held:  # a streamed chunk: its features join the mask
                occurs |= occurring([X_c])
            target = X_c if rows is None else renumber([X_c], rows)[0]
            V_prev = None if V_prev_blocks is None else V_prev_blocks[i]
            if device != "cpu":  # one copy of the chunk: U is on its rows already
                X_c = target = _device.to_device(target, device)
                V_prev = None if V_prev is None else _device.to_device(V_prev, device)
            V = _chunk_pass(X_c, target, U, V_prev, lam, dtype, part)
            if keep_V:
                Vs.append(_device.to_host(V))
    part["XVt"], part["VVt"] = _device.to_host(part["XVt"]), _device.to_host(part["VVt"])
    if rows is not None:
        part["XVt"] = RowSparse(rows, part["XVt"], (m, r))
    if keep_V:
        part["V"] = Vs
    return part


def _as_csc(X_c: Any) -> Any:
    """A held chunk (:class:`RowMajor`) as the CSC chunk it was made of; any other as it is."""
    return X_c.tocsc() if isinstance(X_c, RowMajor) else X_c


def _drained(held: list[Any], rest: Iterator[Any]) -> Iterator[Any]:
    """The chunks of ``held``, then those of ``rest``: each let go of once it is handed out."""
    held.reverse()
    while held:
        yield held.pop()
    yield from rest


def _chunk_pass(
    X_c: Any, target: Any, U: np.ndarray, V_prev: np.ndarray | None, lam: float,
    dtype: np.dtype, part: dict[str, Any],
) -> np.ndarray:
    """One chunk of :func:`pass_block`: its V-step, its partials added into ``part``.

    ``target`` is ``X_c`` on the rows of ``part["XVt"]``; returns the new V of the chunk. The
    arrays are all on the host or all on the device (``part``'s arrays too): the array module
    is U's.
    """
    xp = _device.array_module(U)
    V_prev = None if V_prev is None else xp.ascontiguousarray(V_prev)
    # on the host, row-major copies: both products stream their large operand (U, the
    # accumulator), with the same bits (row_major)
    X_r = row_major(X_c) if xp is np else X_c
    V, degenerate = _chunk_v(X_r, U, V_prev, lam, dtype)
    V64 = V.astype(np.float64, copy=False)
    part["VVt"] += V64 @ V64.T
    if xp is np:
        spmm_accumulate(X_r if target is X_c else row_major(target), V64.T, part["XVt"])
    else:  # cuSPARSE SpMM on CSR rows (no transposed op: no atomics), added in float64
        rows_major = target.tocsr()  # older cupyx astype takes no copy=: cast if needed
        if rows_major.dtype != np.float64:
            rows_major = rows_major.astype(np.float64)
        part["XVt"] += rows_major @ V64.T
    part["sq_norm_X"] += _sq_norm(X_c)
    if V_prev is not None:
        part["dV_sq"] += float(xp.sum((V64 - V_prev) ** 2))
    part["n_degenerate"] += int(degenerate.sum())
    return V


def pass_onto(
    X_blocks: Iterable[Any], U: np.ndarray, V_prev_blocks: list[np.ndarray] | None = None, *,
    rows: np.ndarray | None = None, **options: Any,
) -> dict[str, Any]:
    """:func:`pass_block` of chunks renumbered onto U's rows: the task of one block of a pass.

    Parameters
    ----------
    X_blocks : iterable of scipy.sparse matrix or ndarray, each of shape (m, n_c)
        The block's chunks, renumbered one at a time as :func:`pass_block` takes them.
    U : ndarray of shape (m, r), or (k, r) with ``rows``
        As for :func:`pass_block`.
    V_prev_blocks, **options
        As for :func:`pass_block`.
    rows : ndarray of shape (k,), int64, optional
        The features U's rows stand for (the features that occur in the corpus); the chunks
        are renumbered onto them (:func:`~sphdist.core.partials.renumber`), so the partials
        live in U's k-row space.

    Raises
    ------
    ValueError
        If a chunk contains a feature outside ``rows`` (see :func:`pass_block` for more).

    Returns
    -------
    dict
        :func:`pass_block` of the (renumbered) chunks. The blocks' results are summed by the
        pass's tree (:func:`sphdist.core.graph.tree_sum`), in block order, so the sum is a
        function of the blocks, never of the task's place or time (Liu et al. 2019,
        Eq. 3.11 needs only their total).
    """
    if rows is not None:  # chunk by chunk, so an iterator stays one
        X_blocks = (renumber([X_c], rows)[0] for X_c in X_blocks)
    return pass_block(X_blocks, U, V_prev_blocks, **options)


def _chunk_v(
    X_c: Any, U: np.ndarray, V_prev: np.ndarray | None, lam: float, dtype: np.dtype
) -> tuple[np.ndarray, np.ndarray]:
    """The V-step of one chunk in ``dtype`` (U already in ``dtype``, on X_c's device): Eq. 3.12."""
    xp = _device.array_module(U)
    X_d = X_c if X_c.dtype == dtype else X_c.astype(dtype)
    # C order for A and V_prev: the rounding of the V-step and of V V^T then never depends on
    # the memory layout V_prev arrived in (a checkpoint, a persisted chunk)
    A = xp.ascontiguousarray(xp.asarray(X_d.T @ U).T)
    V, degenerate = v_step(A, V_prev, lam)
    return V.astype(dtype, copy=False), degenerate


def chunk_features(X_c: Any) -> dict[str, np.ndarray]:
    """``{"occurs": mask}``: the (m,) bool mask of the features with a stored entry in X_c.

    Summed by :func:`sphdist.core.partials.partials_combine` (``+`` of bool arrays is OR), so
    the tree sum over the chunks gives the features that occur in the corpus. Every feature
    counts as occurring for a chunk that is not CSC (:func:`sphdist.core.partials.occurring`).
    """
    return {"occurs": occurring([X_c])}


def embed_block(
    X_c: Any, U: np.ndarray, *, dtype: Any = np.float64, rows: np.ndarray | None = None,
    device: str = "cpu",
) -> np.ndarray:
    """``V_c = normalise(U^T X_c)``: the exact V-step of one chunk (lam = 2, Eq. 3.12).

    Parameters
    ----------
    X_c : scipy.sparse matrix or ndarray of shape (m, n_c), float64
        Document columns of the chunk.
    U : ndarray of shape (m, r), or (k, r) with ``rows``
        Orthonormal columns.
    dtype : {numpy.float64, numpy.float32}, default float64
        Compute dtype, as in :func:`pass_block`.
    rows : ndarray of shape (k,), int64, optional
        As in :func:`pass_onto`.
    device : {"cpu", "cuda"}, default "cpu"
        Where ``U^T X_c`` and the normalisation run (:func:`pass_block`); the result is
        copied back to the host.

    Returns
    -------
    ndarray of shape (r, n_c), ``dtype``
        Bitwise the ``V`` that :func:`pass_block` computes with the same U on the CPU (unit
        columns; a document with ``U^T x_j = 0`` gets ``e_1``); on a device the same entries
        are summed in the same order, so bitwise as far as cuSPARSE reduces each row of the
        chunk's CSR in a fixed order (checked on a GPU by ``tests/core/test_device.py``).

    Raises
    ------
    sphdist.errors.DeviceError
        With ``device="cuda"`` and no CuPy.
    """
    dtype = np.dtype(dtype)
    if rows is not None:
        (X_c,) = renumber([X_c], rows)
    U = np.asarray(U, dtype=dtype)
    if device != "cpu":
        X_c, U = _device.to_device(_as_csc(X_c), device), _device.shared_copy(U, device)
    else:  # as pass_block's chunks: U read row after row, the same bits (row_major)
        X_c = row_major(X_c)
    with threadpool_limits(limits=1, user_api="blas"):
        V, _ = _chunk_v(X_c, U, None, 2.0, dtype)
    return _device.to_host(V)


def chunk_partials(X_c: Any, V: np.ndarray, n_degenerate: int = 0) -> dict[str, Any]:
    """The summable partials of a chunk and its embedding columns V (no V-step).

    Parameters
    ----------
    X_c : scipy.sparse matrix or ndarray of shape (m, n_c), float64
        Document columns of the chunk.
    V : ndarray of shape (r, n_c), float64
        The chunk's columns of V (or of any (r, n) factor).
    n_degenerate : int, default 0
        Counted columns (:func:`v_step`), passed through.

    Returns
    -------
    dict
        ``"XVt"`` ndarray (m, r) ``X_c V^T``, ``"VVt"`` ndarray (r, r) ``V V^T``, ``"sq_norm_X"``
        ``||X_c||_F^2``, ``"dV_sq"`` 0.0, ``"n_degenerate"``; summed by
        :func:`~sphdist.core.partials.partials_combine`.
    """
    X_c = _as_csc(X_c)
    XVt, VVt = np.asarray(X_c @ V.T), V @ V.T
    return {"XVt": XVt, "VVt": VVt, "sq_norm_X": _sq_norm(X_c), "dV_sq": 0.0,
            "n_degenerate": n_degenerate}


def project_chunk(X_c: Any, Q: np.ndarray) -> dict[str, Any]:
    """Partials of one subspace (power) iteration on ``X X^T`` for a chunk.

    Parameters
    ----------
    X_c : scipy.sparse matrix or ndarray of shape (m, n_c), float64
        Document columns of the chunk.
    Q : ndarray of shape (m, k), float64
        Current orthonormal basis.

    Returns
    -------
    dict
        :func:`chunk_partials` of ``B = Q^T X_c``: ``"XVt"`` (m, k) ``X_c X_c^T Q``,
        ``"VVt"`` (k, k) ``Q^T X_c X_c^T Q``, ``"sq_norm_X"``, ``"dV_sq"`` (0),
        ``"n_degenerate"`` (0), so that the same reduction (:func:`partials_agg`) sums them.

    Notes
    -----
    Summed over chunks these give one step of the randomized range finder (Halko et al.
    2011, Alg. 4.4) and its Rayleigh-Ritz matrix, used for ``init="svd"`` (Sun et al. 2011,
    step V0: U_0 = the leading left singular vectors of X).
    """
    X_c = _as_csc(X_c)  # a held chunk: the products of the CSC chunk, in its order
    return chunk_partials(X_c, np.asarray(X_c.T @ Q).T)


def objective(sq_norm_X: float, U: np.ndarray, XVt: np.ndarray, n: int) -> float:
    """``||X - UV||_F^2`` from quantities the pass already has.

    Parameters
    ----------
    sq_norm_X : float
        ``||X||_F^2``.
    U : ndarray of shape (m, r), float64
        The U the V of ``XVt`` was computed with (orthonormal columns).
    XVt : ndarray of shape (m, r), float64
        ``X V^T`` summed over all chunks.
    n : int
        Number of documents (every column of V has unit norm).

    Returns
    -------
    float
        ``||X||_F^2 - 2 <U, X V^T> + n`` (Liu et al. 2019, Eq. 3.6 under the constraints of
        Eq. 2.4), in squared feature units.
    """
    return float(sq_norm_X - 2.0 * np.vdot(U, XVt) + n)


def lipschitz_constant(r: int, n: int, sq_norm_X: float) -> float:
    """The Lipschitz bound L_c of Liu et al. (2019), Prop. 1, Eq. 4.15.

    Parameters
    ----------
    r : int
        Number of components.
    n : int
        Number of documents.
    sq_norm_X : float
        ``||X||_F^2``.

    Returns
    -------
    float
        ``2 (||U||_F^2 + ||V||_F^2 + ||U||_F ||V||_F + ||X||_F)`` with the constrained
        ``||U||_F^2 = r`` and ``||V||_F^2 = n``.

    Examples
    --------
    >>> round(lipschitz_constant(20, 200_000, 200_000.0))
    404934
    """
    return 2.0 * (r + n + np.sqrt(r * n) + np.sqrt(sq_norm_X))


def random_orthonormal(m: int, r: int, random_state: np.random.RandomState) -> np.ndarray:
    """A random m x r matrix with orthonormal columns (Haar-distributed).

    Parameters
    ----------
    m, r : int
        Shape, with m >= r.
    random_state : numpy.random.RandomState
        Source of the Gaussian draws.

    Returns
    -------
    ndarray of shape (m, r), float64
        The orthonormal polar factor ``G (G^T G)^{-1/2}`` of a Gaussian matrix G
        (:func:`polar_factor`, ``"auto"``), which is uniform on the Stiefel manifold, as Q of
        a sign-fixed QR is (Mezzadri 2007; Chikuse 2003, Thm. 2.2.1).

    Notes
    -----
    At m = 2**18, r = 100 the Gram route takes two GEMMs (about 0.3 s on one core) where the
    Householder QR took about 3 s; its rounding depends on BLAS's thread count, so callers
    that must be reproducible on any machine (the solver) limit BLAS to one thread.

    Examples
    --------
    >>> U = random_orthonormal(500, 3, np.random.RandomState(0))
    >>> bool(np.allclose(U.T @ U, np.eye(3)))
    True
    """
    G = random_state.standard_normal(size=(m, r))
    return polar_factor(G, "auto")
