r"""NumPy/SciPy kernels of Angular Decomposition (Sun et al. 2011) on one chunk of documents.

Pure functions of in-memory arrays; nothing here imports dask. The papers' orientation is used:
a chunk ``X_c`` has shape (m features, n_c documents), ``U`` (m, r), and the embedding rows of
the chunk ``H_c`` (n_c, r) (Sun et al. write ``X ~ alpha U H^T``, one row of H per document).
Symbols follow Sun, Ding, Luo, Tang, *Angular Decomposition*, IJCAI 2011
(``../shared/seeds/001_b7627b751b2be62b.txt``).

Each ``*_chunk`` kernel returns a dict with the per-chunk arrays (kept chunked on the cluster)
and a ``"sums"`` dict of partials that :func:`sums_chunk` / :func:`sums_combine` /
:func:`sums_agg` add up in a fixed tree (the ``<op>_chunk`` / ``_combine`` / ``_agg`` triple of
``dask.array.reduction``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from sphdist.core.kernels import _sq_norm, flatten_partials

__all__ = [
    "normalise_rows",
    "graph_gradient",
    "sq_norm_chunk",
    "ad_pass_chunk",
    "graph_gradient_chunk",
    "graph_init_chunk",
    "graph_update_chunk",
    "gram_sq_norm_pair",
    "sums_chunk",
    "sums_combine",
    "sums_agg",
]

#: A row of norm at or below this is treated as zero (an empty document).
_TINY = np.finfo(np.float64).tiny

#: Entries of ``X_c^T X_d`` formed at once by :func:`gram_sq_norm_pair` (32 MiB of float64).
_PAIR_BLOCK_ENTRIES = 1 << 22


def normalise_rows(A: np.ndarray) -> tuple[np.ndarray, int]:
    """Scale every row of A to unit L2 norm.

    Parameters
    ----------
    A : ndarray of shape (n_c, r), float64
        Rows to normalise.

    Returns
    -------
    H : ndarray of shape (n_c, r), float64
        ``A_i / ||A_i||``; a row with ``||A_i|| = 0`` (an empty document, or one orthogonal to
        span(U)) becomes ``e_1``, which is as optimal as any unit row there (the objective does
        not depend on it). Every row has unit norm.
    n_degenerate : int
        Number of such zero rows.
    """
    norms = np.sqrt(np.einsum("ij,ij->i", A, A))
    zero = norms <= _TINY
    with np.errstate(invalid="ignore"):  # inf/inf for Inf input; reported by the caller
        H = A / np.where(zero, 1.0, norms)[:, None]
    if zero.any():
        H[zero] = 0.0
        H[zero, 0] = 1.0
    return H, int(zero.sum())


def graph_gradient(
    H: np.ndarray, SH: np.ndarray, HtH: np.ndarray, alpha: float
) -> tuple[np.ndarray, np.ndarray, float]:
    """Steps G2 and the search direction of G3 for a block of rows of H.

    Parameters
    ----------
    H : ndarray of shape (n_c, r), float64
        Rows of the current H.
    SH : ndarray of shape (n_c, r), float64
        The same rows of ``S H`` (S the n x n similarity matrix, H all n rows).
    HtH : ndarray of shape (r, r), float64
        ``H^T H`` over all n rows.
    alpha : float
        The scale of step G1 (Eq. 22).

    Returns
    -------
    G : ndarray of shape (n_c, r), float64
        ``alpha^2 (H H^T H)_i - alpha (S H)_i - lambda_i h_i``, the bracket of Eq. 24 (the
        gradient of the Lagrangian of Eq. 11 up to the factor 4).
    lam : ndarray of shape (n_c,), float64
        The Lagrange multipliers of Eq. 23,
        ``lambda_i = alpha^2 (H H^T H H^T)_ii - alpha (S H H^T)_ii``.
    scale : float
        ``sum |alpha^2 H H^T H| + sum |alpha S H|``, the size of the terms G is the difference
        of (to tell a zero G from rounding).
    """
    HHtH = alpha**2 * (H @ HtH)  # rows of alpha^2 H H^T H
    aSH = alpha * SH
    lam = np.einsum("ij,ij->i", HHtH, H) - np.einsum("ij,ij->i", aSH, H)
    G = HHtH - aSH - lam[:, None] * H
    return G, lam, float(np.abs(HHtH).sum() + np.abs(aSH).sum())


def sq_norm_chunk(X_c: Any) -> dict[str, Any]:
    """``{"sums": {"sq_norm_X": ||X_c||_F^2}}`` for a chunk (a finiteness check)."""
    return {"sums": {"sq_norm_X": _sq_norm(X_c)}}


def ad_pass_chunk(X_c: Any, U: np.ndarray) -> dict[str, Any]:
    """One read of a chunk for Angular Decomposition of vector data: step V2 and V3's partial.

    Parameters
    ----------
    X_c : scipy.sparse matrix or ndarray of shape (m, n_c), float64
        Document columns of the chunk.
    U : ndarray of shape (m, r), float64
        Current U, orthonormal columns.

    Returns
    -------
    dict
        ``"H"``: ndarray (n_c, r), the rows ``normalise(X_c^T U)`` (Sun et al. 2011, Eq. 14);
        ``"sums"``: ``"XH"`` (m, r) ``X_c H_c`` (Eq. 18's matrix), ``"HtH"`` (r, r)
        ``H_c^T H_c``, ``"sq_norm_X"`` ``||X_c||_F^2``, ``"n_degenerate"``.
    """
    A = np.asarray(X_c.T @ U)
    H, n_degenerate = normalise_rows(A)
    return {
        "H": H,
        "sums": {
            "XH": np.asarray(X_c @ H),
            "HtH": H.T @ H,
            "sq_norm_X": _sq_norm(X_c),
            "n_degenerate": n_degenerate,
        },
    }


def graph_gradient_chunk(
    X_c: Any, H_c: np.ndarray, P: np.ndarray, HtH: np.ndarray, alpha: float
) -> dict[str, Any]:
    """Steps G2-G3 for a chunk, linear kernel ``S = X^T X``, without forming S.

    Parameters
    ----------
    X_c : scipy.sparse matrix or ndarray of shape (m, n_c), float64
        Document columns of the chunk.
    H_c : ndarray of shape (n_c, r), float64
        The chunk's rows of H.
    P : ndarray of shape (m, r), float64
        ``X H`` over all documents, so that the chunk's rows of ``S H`` are ``X_c^T P``.
    HtH : ndarray of shape (r, r), float64
        ``H^T H``.
    alpha : float
        Step G1's scale (Eq. 22).

    Returns
    -------
    dict
        ``"G"``: ndarray (n_c, r), the bracket of Eq. 24 (:func:`graph_gradient`);
        ``"sums"``: ``"abs_G"`` ``sum |G_ij|`` and ``"abs_H"`` ``sum |H_ij|`` over the chunk
        (the step size rule of Sun et al. 2011 after Eq. 24), ``"scale"`` (see
        :func:`graph_gradient`).
    """
    SH = np.asarray(X_c.T @ P)
    G, _, scale = graph_gradient(H_c, SH, HtH, alpha)
    return {
        "G": G,
        "sums": {
            "abs_G": float(np.abs(G).sum()), "abs_H": float(np.abs(H_c).sum()),
            "scale": scale,
        },
    }


def _graph_rows(X_c: Any, A: np.ndarray) -> dict[str, Any]:
    """The chunk's new rows ``H_c = normalise(A)`` and their partials ``X_c H_c``, ``H_c^T H_c``."""
    H, n_degenerate = normalise_rows(A)
    return {
        "H": H,
        "sums": {"P": np.asarray(X_c @ H), "HtH": H.T @ H, "n_degenerate": n_degenerate},
    }


def graph_init_chunk(X_c: Any, U: np.ndarray) -> dict[str, Any]:
    """Step G0 for a chunk, linear kernel: ``H_0`` from ``V Sigma^{1/2}``, and its partials.

    Parameters
    ----------
    X_c : scipy.sparse matrix or ndarray of shape (m, n_c), float64
        Document columns of the chunk.
    U : ndarray of shape (m, r), float64
        Leading left singular vectors of X, ``X = U Sigma' V^T``.

    Returns
    -------
    dict
        ``"H"``: ndarray (n_c, r), the rows of ``X_c^T U`` scaled to unit length.
        ``X_c^T U`` is the chunk's rows of ``V Sigma'``, which is ``V Sigma^{1/2}`` for the
        eigendecomposition ``S = X^T X = V Sigma V^T`` (``Sigma = Sigma'^2``);
        ``"sums"``: ``"P"`` (m, r) ``X_c H_c``, ``"HtH"`` (r, r) ``H_c^T H_c``,
        ``"n_degenerate"``.
    """
    return _graph_rows(X_c, np.asarray(X_c.T @ U))


def graph_update_chunk(
    X_c: Any, H_c: np.ndarray, G_c: np.ndarray, eta: float
) -> dict[str, Any]:
    """Step G3 for a chunk, and the partials of the next G1-G2, linear kernel.

    Parameters
    ----------
    X_c : scipy.sparse matrix or ndarray of shape (m, n_c), float64
        Document columns of the chunk.
    H_c, G_c : ndarray of shape (n_c, r), float64
        Current rows of H and of the bracket of Eq. 24.
    eta : float
        Step size of Eq. 24.

    Returns
    -------
    dict
        ``"H"``: ndarray (n_c, r), ``normalise(H_c - eta G_c)`` (Eq. 24, then rows scaled
        back to the unit sphere, see :class:`sphdist.methods.angular.GraphAngularDecomposition`);
        ``"sums"``: ``"P"`` (m, r) ``X_c H_c``, ``"HtH"`` (r, r) ``H_c^T H_c``,
        ``"n_degenerate"``.
    """
    return _graph_rows(X_c, H_c - eta * G_c)


def gram_sq_norm_pair(X_c: Any, X_d: Any) -> np.ndarray:
    """``||X_c^T X_d||_F^2`` for two chunks, in column blocks of bounded size.

    Parameters
    ----------
    X_c, X_d : scipy.sparse matrix or ndarray of shape (m, n_c) and (m, n_d), float64
        Two chunks of document columns.

    Returns
    -------
    ndarray of shape (1, 1), float64
        The sum of squares of the (c, d) block of ``S = X^T X``; summed over all pairs of
        chunks it is ``||S||_F^2`` (the constant term of Sun et al. 2011, Eq. 11).

    Notes
    -----
    At most about 4 Mi entries of ``X_c^T X_d`` (32 MiB) exist at once.
    """
    n_c, n_d = X_c.shape[1], X_d.shape[1]
    step = max(1, _PAIR_BLOCK_ENTRIES // max(1, n_c))
    total = 0.0
    Xct = X_c.T.tocsr() if sp.issparse(X_c) else X_c.T
    for a in range(0, n_d, step):
        B = Xct @ X_d[:, a : a + step]
        B = B.toarray() if sp.issparse(B) else np.asarray(B)
        total += float(np.vdot(B, B))
    return np.array([[total]])


def sums_chunk(part: dict[str, Any], axis: Any = None, keepdims: bool = False) -> dict:
    """The summable partials of one chunk's result (drops the per-chunk arrays)."""
    return dict(part["sums"])


def sums_combine(parts: Any, axis: Any = None, keepdims: bool = False) -> dict:
    """Sum a (possibly nested) list of partials dicts in list order (bitwise reproducible)."""
    flat = flatten_partials(parts)
    total = dict(flat[0])
    for part in flat[1:]:
        for key, value in part.items():
            total[key] = total[key] + value
    return total


def sums_agg(parts: Any, axis: Any = None, keepdims: bool = False) -> dict:
    """Final step of the tree sum: the same as :func:`sums_combine`."""
    return sums_combine(parts)
