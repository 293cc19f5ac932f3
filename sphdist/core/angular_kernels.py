r"""NumPy/SciPy kernels of Angular Decomposition (Sun et al. 2011) on one chunk of documents.

Pure functions of in-memory arrays; nothing here imports dask. The papers' orientation is used:
a chunk ``X_c`` has shape (m features, n_c documents), ``U`` (m, r), and the embedding rows of
the chunk ``H_c`` (n_c, r) (Sun et al. write ``X ~ alpha U H^T``, one row of H per document).
Symbols follow Sun, Ding, Luo and Tang, *Angular Decomposition* (IJCAI 2011).

The kernels are those of Spherical PCA wherever the maths is the same: a row of H scaled to
unit length is :func:`sphdist.core.kernels.v_step` at ``lam = 2`` on the transposed rows, and
the partials ``X_c H_c`` and ``H_c^T H_c`` are :func:`sphdist.core.kernels.chunk_partials`'
``"XVt"`` and ``"VVt"`` (``V = H^T``). Every ``*_chunk`` kernel returns one flat dict: the
per-chunk arrays (``"H"``, ``"G"``, kept chunked on the cluster) and the partials that
:func:`sphdist.core.partials.partials_chunk` / ``_combine`` / ``_agg`` add up in a fixed tree.

References
----------
.. [1] Sun, D., Ding, C., Luo, B. and Tang, J. (2011). Angular Decomposition. IJCAI.
.. [2] Liu, K., Li, Q., Wang, H. and Tang, G. (2019). Spherical Principal Component Analysis. SDM.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from sphdist.core.kernels import _sq_norm, chunk_partials, v_step

__all__ = [
    "normalise_rows",
    "graph_gradient",
    "sq_norm_chunk",
    "ad_pass_chunk",
    "graph_gradient_chunk",
    "graph_update_chunk",
    "gram_sq_norm_pair",
]

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
        ``A_i / ||A_i||`` (Sun et al. 2011, Eq. 14); a row with ``||A_i|| = 0`` (an empty
        document, or one orthogonal to span(U)) becomes ``e_1``, which is as optimal as any
        unit row there (the objective does not depend on it). Every row has unit norm. This is
        :func:`sphdist.core.kernels.v_step` with ``lam = 2`` on ``A^T``, bit for bit.
    n_degenerate : int
        Number of such zero rows.
    """
    V, degenerate = v_step(A.T, None, 2.0)  # Liu et al. 2019, Eq. 3.12 at lam = 2, on rows
    return V.T, int(degenerate.sum())


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
    """``{"sq_norm_X": ||X_c||_F^2}`` for a chunk (a finiteness check)."""
    return {"sq_norm_X": _sq_norm(X_c)}


def _rows_chunk(X_c: Any, A: np.ndarray) -> dict[str, Any]:
    """``"H"``: :func:`normalise_rows` of the (n_c, r) rows A, and ``chunk_partials(X_c, H^T)``.

    The rows of the chunk and their partials in one read of the chunk (the steps that end on
    unit rows: V2, G0 and G3); ``"n_degenerate"`` counts the zero rows set to ``e_1``.
    """
    H, n_degenerate = normalise_rows(A)
    return {"H": H, **chunk_partials(X_c, H.T, n_degenerate)}


def ad_pass_chunk(X_c: Any, U: np.ndarray) -> dict[str, Any]:
    """Step V2 (and G0 for the linear kernel) for a chunk, with the partials of step V3.

    Parameters
    ----------
    X_c : scipy.sparse matrix or ndarray of shape (m, n_c), float64
        Document columns of the chunk.
    U : ndarray of shape (m, r), float64
        Current U, orthonormal columns: for V2 the U of the last V3 step, for G0 (and the
        first V2) the leading left singular vectors of X from step V0.

    Returns
    -------
    dict
        ``"H"`` (n_c, r), the rows ``normalise(X_c^T U)`` (Sun et al. 2011, Eq. 14; for G0
        the rows of ``V Sigma^{1/2}`` of ``S = X^T X`` scaled to unit length), and
        :func:`sphdist.core.kernels.chunk_partials` of ``V = H_c^T``: ``"XVt"`` (m, r)
        ``X_c H_c`` (Eq. 18's matrix), ``"VVt"`` (r, r) ``H_c^T H_c``, ``"sq_norm_X"``,
        ``"dV_sq"`` (0), ``"n_degenerate"`` (zero rows set to ``e_1``).
    """
    return _rows_chunk(X_c, np.asarray(X_c.T @ U))


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
        ``"abs_G"`` ``sum |G_ij|`` and ``"abs_H"`` ``sum |H_ij|`` over the chunk
        (the step size rule of Sun et al. 2011 after Eq. 24), ``"scale"`` (see
        :func:`graph_gradient`).
    """
    SH = np.asarray(X_c.T @ P)
    G, _, scale = graph_gradient(H_c, SH, HtH, alpha)
    return {
        "G": G, "abs_G": float(np.abs(G).sum()), "abs_H": float(np.abs(H_c).sum()),
        "scale": scale,
    }


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
        back to the unit sphere, see
        :class:`sphdist.methods.graph_angular.GraphAngularDecomposition`), and its partials
        (:func:`sphdist.core.kernels.chunk_partials`).
    """
    return _rows_chunk(X_c, H_c - eta * G_c)


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
