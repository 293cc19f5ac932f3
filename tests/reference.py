"""Dense NumPy reference of Liu et al. (2019) Algorithm 1, written independently of sphdist.

Every formula is the paper's, on the full matrix: Eq. 3.11 for U, Eq. 3.12 for V, and the
objective ||X - UV||_F^2 computed directly (not from partial products).
"""

from __future__ import annotations

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp

from sphdist.core import kernels


def polar(M):
    Y, _, Zt = np.linalg.svd(M, full_matrices=False)
    return Y @ Zt


def normalise_columns(Q, fallback):
    norms = np.linalg.norm(Q, axis=0)
    zero = norms == 0
    V = Q / np.where(zero, 1.0, norms)
    V[:, zero] = fallback[:, zero]
    return V


def algorithm1(X, U0, *, lam, mu, n_iter, lc=False, accelerate=None):
    """Return (objective history, U, V); mu=None is exact block minimisation.

    ``accelerate`` (default: on for the exact steps, as sphdist's default) extrapolates the
    exact U-step from the second iteration on, as in Ang and Gillis (2019): with
    ``P = polar(X V^T)``, try ``E = polar(P + beta (P - U))`` and keep it when the objective
    does not rise (beta grows by 1.05 up to beta_bar, which grows by 1.01 up to 1), else take
    P (beta_bar = beta, beta shrinks by 1.5); beta starts at 0.5, beta_bar at 1.
    """
    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    m, n = X.shape
    r = U0.shape[1]
    e1 = np.zeros((r, n))
    e1[0] = 1.0
    U = U0
    V = normalise_columns(U.T @ X, e1)
    history = [np.linalg.norm(X - U @ V) ** 2]
    L_c = 2 * (r + n + np.sqrt(r * n) + np.linalg.norm(X))
    if accelerate is None:
        accelerate = mu is None and lam == 2.0 and not lc
    beta, beta_bar = 0.5, 1.0
    for k in range(n_iter):
        mu_k = L_c if lc else mu
        lam_k = L_c if lc else lam
        if mu_k is None:
            P = polar(X @ V.T)
        else:
            P = polar(2 * (X - U @ V) @ V.T + mu_k * U)  # Eq. 3.11
        if accelerate and k >= 1:
            E = polar(P + beta * (P - U))
            V_E = normalise_columns(2 * E.T @ X + (lam_k - 2) * V, V)
            f_E = np.linalg.norm(X - E @ V_E) ** 2
            if f_E <= history[-1]:
                U, V = E, V_E
                beta, beta_bar = min(beta_bar, 1.05 * beta), min(1.0, 1.01 * beta_bar)
                history.append(f_E)
                continue
            beta, beta_bar = beta / 1.5, beta
        U = P
        V = normalise_columns(2 * U.T @ X + (lam_k - 2) * V, V)  # Eq. 3.12
        history.append(np.linalg.norm(X - U @ V) ** 2)
    return np.array(history), U, V


def random_corpus(m, n, density=0.05, seed=0, n_empty=1):
    """Sparse m x n CSC with unit columns and `n_empty` all-zero columns."""
    X = sp.random(m, n, density=density, format="csc", random_state=seed)
    X.data = np.abs(X.data)
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=0))).ravel()
    X = sp.csc_matrix(X @ sp.diags(1.0 / np.where(norms == 0, 1.0, norms)))
    if n_empty:
        keep = np.ones(n)
        keep[np.linspace(0, n - 1, n_empty).astype(int)] = 0.0
        X = sp.csc_matrix(X @ sp.diags(keep))
        X.eliminate_zeros()
    return X


def random_start(X, r, seed):
    """The solver's random U_0 for X: Haar on the features that occur, zero on the others."""
    occurring = np.flatnonzero(sp.csr_matrix(X).getnnz(axis=1) > 0)
    U0 = np.zeros((X.shape[0], r))
    U0[occurring] = kernels.random_orthonormal(occurring.size, r, np.random.RandomState(seed))
    return U0


def chunked(X, sizes):
    """Column-chunked dask array of CSC (or dense) blocks with the given chunk sizes."""
    m, n = X.shape
    assert sum(sizes) == n
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    meta = sp.csc_matrix((0, 0)) if sp.issparse(X) else np.empty((0, 0))
    blocks = [
        da.from_delayed(
            dask.delayed(X[:, a:b].copy()), shape=(m, b - a), dtype=np.float64, meta=meta
        )
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    return da.concatenate(blocks, axis=1)


LAYOUTS = {
    "one-chunk": lambda n: [n],
    "regular": lambda n: [n // 4] * 3 + [n - 3 * (n // 4)],
    "irregular": lambda n: [1, 7, n // 2, n - 8 - n // 2],
    "single-documents-at-ends": lambda n: [1, n - 2, 1],
}


def topical_corpus(m=300, n=96, seed=5):
    """Documents in groups of 24, each group on its own 40 of the m features (row-sparse)."""
    rs = np.random.RandomState(seed)
    cols = []
    for g in range(n // 24):
        rows = np.sort(rs.choice(m, 40, replace=False))
        B = random_corpus(40, 24, density=0.2, seed=seed + g, n_empty=1)
        cols.append(sp.csc_matrix((B.data, rows[B.indices], B.indptr), shape=(m, 24)))
    return sp.csc_matrix(sp.hstack(cols))
