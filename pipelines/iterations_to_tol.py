"""Iterations, passes and seconds to tolerance of Spherical PCA on 20 Newsgroups (issue 13 §5).

Liu et al. (2019) Algorithm 1 with exact steps (lam = 2, ``mu=None``: ``U = polar(X V^T)``,
``v_j = normalise(U^T x_j)``), run **in memory** from the chunk kernels of
:mod:`sphdist.core.kernels` on the whole sparse X (m features x n documents, CSC), on all
18,846 documents (headers, footers, quotes removed), r in {20, 100}, tol 1e-4 on
``|f_{k-1} - f_k| / |f_{k-1}|``, max_iter 200, seeds 0..4, for ``init="random"`` and
``init="svd"`` with ``n_power_iter`` 1..4 (the subspace iteration of
:func:`sphdist.core.solver.svd_init`, :func:`svd_stages`), and for the plain step and two
monotone accelerations (:class:`Extrapolated`, :class:`Anderson`).

Feature sets: ``vocab`` = ``TfidfVectorizer(stop_words="english", sublinear_tf=True,
min_df=5, max_df=0.5)`` on the texts of ``_experiments.read_newsgroups`` (the recipe of
``text_defaults.md``); ``hashed`` = what the main job ingests today (``sphdist.text.ingest``
defaults: 2**18 hashed features), read back as ``text_defaults.read_corpus`` does, with U on
the features that occur (issue 13 §3; the other rows of U are zero after the first U-step and
never enter the objective, so the iteration is the same).

Cost = **passes over X** (``X^T U`` and ``X V^T``: one iteration of the distributed solver)
and seconds (one thread, initialisation included), plus per-iteration unit costs (minimum of
interleaved repetitions, :func:`unit_costs`). Each embedding (rows of V^T) is scored by
k-means (k = 20, n_init = 10) with :func:`sphdist.metrics.evaluate_embedding`.
:func:`check_against_product` first checks that this loop's objective history equals
``SphericalPCA(tol=0, max_iter=5).objective_`` to 1e-10 relative, and aborts otherwise.

Usage (from the repository root; ~30 min on one core of the loaded 2-core box)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python pipelines/iterations_to_tol.py
    .venv/bin/python pipelines/iterations_to_tol.py --quick     # ~1-2 minute smoke run

Writes ``iterations_to_tol.{md,json,png}`` to ``--out-dir`` (default ``pipelines/results``).

References
----------
.. [1] Liu, K., Li, Q., Wang, H. and Tang, G. (2019). Spherical Principal Component Analysis. SDM.
.. [2] Halko, N., Martinsson, P.-G. and Tropp, J. A. (2011). Finding Structure with Randomness.
   SIAM Review 53(2), Alg. 4.4 and 5.3.
.. [3] Ang, A. M. S. and Gillis, N. (2019). Accelerating Nonnegative Matrix Factorization
   Algorithms Using Extrapolation. Neural Computation 31(2), 417-439.
.. [4] Walker, H. F. and Ni, P. (2011). Anderson Acceleration for Fixed-Point Iterations.
   SIAM J. Numer. Anal. 49(4), 1715-1735.
.. [5] Journee, M., Nesterov, Y., Richtarik, P. and Sepulchre, R. (2010). Generalized Power
   Method for Sparse Principal Component Analysis. JMLR 11, 517-553.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import _experiments as ex
import click
import dask
import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.utils import check_random_state
from threadpoolctl import threadpool_limits

from sphdist import SphericalPCA
from sphdist.core import kernels
from sphdist.datasets import newsgroups_archive
from sphdist.metrics import evaluate_embedding

REMOVE = ("headers", "footers", "quotes")
LAM = 2.0  # the exact V-step (Liu et al. 2019, Eq. 3.12 with lam = 2)
POLAR = "auto"  # the route the solver's U-step takes (kernels.polar_factor)


# -- the in-memory Algorithm 1 ----------------------------------------------------------------
class Problem:
    """X (m features x n documents) in memory, and a counter of the passes made over it.

    Parameters
    ----------
    X : scipy.sparse matrix of shape (m, n), float64
        Documents as columns.
    """

    def __init__(self, X: sp.spmatrix) -> None:
        self.X = sp.csc_matrix(X, dtype=np.float64)
        self.Xr = self.X.tocsr()  # rows = features: X @ W gathers, no scattered writes
        self.m, self.n = self.X.shape
        self.sq_norm_X = float(self.X.data @ self.X.data)
        self.passes = self.polars = 0

    def project(self, Q: np.ndarray) -> np.ndarray:
        """``Q^T X`` (k, n), C order: the first half of a pass."""
        return np.ascontiguousarray(np.asarray(self.X.T @ Q).T)

    def times(self, B: np.ndarray) -> np.ndarray:
        """``X B^T`` (m, k) for B of shape (k, n): the second half of a pass (counted)."""
        self.passes += 1
        return np.asarray(self.Xr @ np.ascontiguousarray(B.T))

    def step(self, U: np.ndarray, V_prev: np.ndarray | None) -> tuple:
        """One pass at U: ``V = normalise(U^T X)`` (Eq. 3.12), ``G = X V^T`` and f(U).

        Returns
        -------
        V : ndarray (r, n); G : ndarray (m, r); f : float
            ``f = ||X - U V||_F^2 = ||X||^2 - 2 <U, G> + n`` (:func:`kernels.objective`).
            G is the gradient of ``g(U) = sum_j ||U^T x_j||`` (``f = ||X||^2 + n - 2 g``).
        """
        V, _ = kernels.v_step(self.project(U), V_prev, LAM)
        G = self.times(V)
        return V, G, kernels.objective(self.sq_norm_X, U, G, self.n)


def svd_stages(P: Problem, r: int, seed: int, n_iter: int) -> list[tuple]:
    """U_0 of ``init="svd"`` for every ``n_power_iter`` in 0..n_iter, from one subspace run.

    The subspace iteration of :func:`sphdist.core.solver.svd_init` (Halko et al. 2011,
    Alg. 4.4 with QR, then Rayleigh-Ritz, Alg. 5.3) on the in-memory X, with the Gaussian
    drawn as the solver draws it (``check_random_state(seed).standard_normal((m, r + 10))``).
    The run for ``n_power_iter = j`` is a prefix of the run for 4, so one run gives all.

    Returns
    -------
    list of (U_0, seconds, passes)
        Entry j: the U_0 of ``n_power_iter = j`` (m, r), the seconds it costs alone (passes and
        QRs up to stage j plus stage j's Rayleigh-Ritz only) and its passes (j + 1).
    """
    rs = check_random_state(seed)
    k = min(r + 10, P.m, P.n)
    t0 = time.perf_counter()
    Q, _ = np.linalg.qr(rs.standard_normal(size=(P.m, k)))
    spent, out = 0.0, []
    for i in range(n_iter + 1):
        B = P.project(Q)
        Y = P.times(B)  # X X^T Q
        T = B @ B.T  # Q^T X X^T Q
        spent += time.perf_counter() - t0
        t0 = time.perf_counter()
        evals, W = np.linalg.eigh(T)
        U0 = Q @ W[:, np.argsort(evals)[::-1][:r]]
        out.append((U0, spent + time.perf_counter() - t0, i + 1))
        t0 = time.perf_counter()
        if i < n_iter:
            Q, _ = np.linalg.qr(Y)
    return out


@dataclass
class Run:
    """The record of one fit: each accepted iterate's objective, and what it had cost."""

    t0: float
    objective: list[float] = field(default_factory=list)
    passes: list[int] = field(default_factory=list)  # passes over X made when f was reached
    polars: list[int] = field(default_factory=list)  # polar factors computed by then
    seconds: list[float] = field(default_factory=list)  # since the start of the init
    rejected: int = 0
    converged: bool = False
    V: np.ndarray | None = None

    def record(self, f: float, P: Problem) -> None:
        """Append the objective of an accepted iterate and the cost so far."""
        self.objective.append(f)
        self.passes.append(P.passes)
        self.polars.append(P.polars)
        self.seconds.append(time.perf_counter() - self.t0)

    def done(self, tol: float) -> bool:
        """``|f_{k-1} - f_k| / |f_{k-1}| < tol`` on the last two accepted iterates."""
        if len(self.objective) < 2:
            return False
        prev, cur = self.objective[-2], self.objective[-1]
        self.converged = abs(prev - cur) < tol * abs(prev)
        return self.converged


def polar(P: Problem, M: np.ndarray) -> np.ndarray:
    """``polar(M)`` by the solver's U-step (:func:`kernels.u_step`, ``mu=None``), counted."""
    P.polars += 1
    return kernels.u_step(M, M, None, None, POLAR)


def plain_step(P: Problem, U: np.ndarray, V: np.ndarray, G: np.ndarray, f: float,
               run: Run) -> tuple:
    """Algorithm 1, exact steps: ``U <- polar(X V^T)``, then a pass (``V <- normalise(U^T X)``)."""
    U = polar(P, G)
    return (U, *P.step(U, V))


class Extrapolated:
    """A safeguarded extrapolated U with adaptive beta (Ang & Gillis 2019, Alg. 2 schedule).

    Iteration k >= ``start`` (before it, the plain step), from U_k with ``f_k`` and
    ``G_k = X V_k^T`` of the pass at U_k::

        P = polar(G_k)                                   # the plain step, no pass
        E = polar(P + beta (P - U_k))                    # extrapolated, no pass
        V_E, G_E, f_E = pass(E)                          # one pass
        if f_E <= f_k:  accept E;  beta = min(beta_bar, gamma beta);
                        beta_bar = min(beta_cap, gamma_bar beta_bar)
        else:           pass(P), accept P (the wasted pass counts);
                        beta_bar = beta;  beta = beta / eta

    Parameters
    ----------
    beta0, eta, gamma, gamma_bar, beta_cap : float
        Ang & Gillis' defaults: 0.5, 1.5, 1.05, 1.01 and 1.
    start : int, default 1
        Plain iterations before the first extrapolation (the first step from U_0 is large).
    """

    def __init__(self, beta0: float = 0.5, eta: float = 1.5, gamma: float = 1.05,
                 gamma_bar: float = 1.01, beta_cap: float = 1.0, start: int = 1) -> None:
        self.beta, self.beta_bar = beta0, beta_cap
        self.eta, self.gamma, self.gamma_bar, self.beta_cap = eta, gamma, gamma_bar, beta_cap
        self.start, self.k = start, 0

    def __call__(self, P, U, V, G, f, run):
        """One iteration: ``(U, V, G, f)_k -> (U, V, G, f)_{k+1}`` (class docstring)."""
        self.k += 1
        if self.k <= self.start:
            return plain_step(P, U, V, G, f, run)
        F = polar(P, G)
        P.polars += 1
        E = kernels.polar_factor(F + self.beta * (F - U), POLAR)
        VE, GE, fE = P.step(E, V)
        if fE <= f:
            self.beta = min(self.beta_bar, self.gamma * self.beta)
            self.beta_bar = min(self.beta_cap, self.gamma_bar * self.beta_bar)
            return E, VE, GE, fE
        run.rejected += 1
        self.beta_bar, self.beta = self.beta, self.beta / self.eta
        return (F, *P.step(F, V))


class Anderson:
    """Safeguarded Anderson acceleration (type II) of the U fixed-point map.

    The exact iteration is the fixed-point map ``F(U) = polar(G(U))`` with ``G(U) = X V^T``,
    ``V = normalise(U^T X)`` (one pass). Iteration k, from U_k with ``f_k`` and ``G_k``::

        F_k = polar(G_k);  R_k = F_k - U_k                # the plain step and its residual
        dF, dR = the last `depth` differences of F and R   # empty at the start / after a restart
        if dR is empty:  pass(F_k), accept F_k
        gamma = (dR^T dR + reg tr(dR^T dR) I)^{-1} dR^T R_k
        E = polar(F_k - dF gamma)                          # Anderson type II, retracted
        V_E, G_E, f_E = pass(E)                            # one pass
        if f_E <= f_k - 2 (<G_k, F_k> - <G_k, U_k>):      # at least the plain step's
            accept E                                       #   guaranteed decrease (below)
        else:
            pass(F_k), accept F_k, clear dF and dR         # the wasted pass counts

    The bound: after the exact V-step ``f(U) = ||X||^2 + n - 2 g(U)`` with
    ``g(U) = sum_j ||U^T x_j||`` convex and ``G(U)`` its gradient, so
    ``g(F_k) >= g(U_k) + <G_k, F_k - U_k>`` (the argument of Journee et al. 2010 for the
    generalized power method): the plain step decreases f at least that much, and an accepted
    E decreases it at least as much. Memory: ``2 (depth + 1)`` (m, r) arrays on the driver.

    Parameters
    ----------
    depth : int, default 2
        Differences kept (Anderson's m).
    reg : float, default 1e-10
        Tikhonov regularisation of the small least-squares problem, relative to its trace.
    """

    def __init__(self, depth: int = 2, reg: float = 1e-10) -> None:
        self.depth, self.reg = depth, reg
        self.dF: list[np.ndarray] = []
        self.dR: list[np.ndarray] = []
        self.F_prev = self.R_prev = None

    def __call__(self, P, U, V, G, f, run):
        """One iteration: ``(U, V, G, f)_k -> (U, V, G, f)_{k+1}`` (class docstring)."""
        F = polar(P, G)
        R = F - U
        if self.F_prev is not None:
            self.dF = (self.dF + [F - self.F_prev])[-self.depth:]
            self.dR = (self.dR + [R - self.R_prev])[-self.depth:]
        self.F_prev, self.R_prev = F, R
        if self.dR:
            H = np.array([[np.vdot(a, b) for b in self.dR] for a in self.dR])
            gam = np.linalg.solve(H + self.reg * np.trace(H) * np.eye(len(self.dR)),
                                  np.array([np.vdot(a, R) for a in self.dR]))
            Y = F.copy()
            for g_i, d_i in zip(gam, self.dF, strict=True):
                Y -= g_i * d_i
            P.polars += 1
            E = kernels.polar_factor(Y, POLAR)
            bound = f - 2.0 * (np.vdot(G, F) - np.vdot(G, U))
            VE, GE, fE = P.step(E, V)
            if fE <= bound:
                return E, VE, GE, fE
            run.rejected += 1
            self.dF, self.dR = [], []
        return (F, *P.step(F, V))


#: method name -> a factory of the step ``(P, U_k, V_k, G_k, f_k, run) -> (U, V, G, f)_{k+1}``
METHODS = {"plain": lambda: plain_step, "ext": Extrapolated, "aa": Anderson}


def fit(P: Problem, U0: np.ndarray, method: str = "plain", *, tol: float, max_iter: int,
        t_init: float = 0.0, p_init: int = 0, **options) -> Run:
    """Algorithm 1 (exact steps) from U_0 with the step of ``method``, to ``tol``.

    Parameters
    ----------
    P : Problem
    U0 : ndarray of shape (m, r), float64
        Orthonormal columns.
    method : {"plain", "ext", "aa"}
    tol, max_iter : float, int
        Stop when ``|f_{k-1} - f_k| / |f_{k-1}| < tol`` or after ``max_iter`` iterations.
    t_init, p_init : float, int
        Seconds and passes the initialisation already cost (counted in the record).
    **options
        Passed to the step's class (:class:`Extrapolated`, :class:`Anderson`).

    Returns
    -------
    Run
        With ``V`` the final V (r, n).
    """
    run = Run(t0=time.perf_counter() - t_init)
    P.passes, P.polars = p_init, 0
    step = METHODS[method](**options)
    V, G, f = P.step(U0, None)
    run.record(f, P)
    U = U0
    for _ in range(max_iter):
        U, V, G, f = step(P, U, V, G, f, run)
        run.record(f, P)
        if run.done(tol):
            break
    run.V = V
    return run


# -- the check against the product ------------------------------------------------------------
def check_against_product(log, *, m: int = 300, n: int = 400, r: int = 7, seed: int = 3,
                          rtol: float = 1e-10) -> dict:
    """Compare this loop's objective history with ``SphericalPCA(tol=0, max_iter=5).objective_``.

    On a random sparse nonnegative X (m x n, 5 % dense, unit columns, one empty document), for
    ``init="random"`` and ``init="svd"`` (``n_power_iter`` 2). Raises ``SystemExit`` on a
    relative difference above ``rtol``.
    """
    rng = np.random.default_rng(seed)
    X = sp.random(m, n, density=0.05, random_state=rng, format="csc")
    X = sp.csc_matrix(X @ sp.diags(1.0 / np.maximum(sp.linalg.norm(X, axis=0), 1e-300)))
    X = sp.csc_matrix(X @ sp.diags(np.r_[0.0, np.ones(n - 1)]))  # document 0 empty
    X.eliminate_zeros()
    P = Problem(X)
    out = {}
    for init in ("random", "svd"):
        est = SphericalPCA(n_components=r, random_state=seed, tol=0, max_iter=5, init=init,
                           n_power_iter=2)
        with dask.config.set(scheduler="synchronous"):
            ref = est.fit(X.T.tocsr()).objective_
        if init == "random":
            U0 = kernels.random_orthonormal(m, r, check_random_state(seed))
        else:
            U0 = svd_stages(P, r, seed, 2)[2][0]
        mine = np.asarray(fit(P, U0, tol=0.0, max_iter=5).objective)
        err = float(np.max(np.abs(mine - ref) / np.abs(ref))) if mine.shape == ref.shape \
            else float("inf")
        out[init] = {"max_relative_difference": err, "n_values": int(ref.size)}
        log(f"check init={init}: {ref.size} objective values, max relative difference "
            f"{err:.1e} (SphericalPCA.objective_ {ref[0]:.6f} .. {ref[-1]:.6f})")
        if not err <= rtol:
            raise SystemExit(f"Error: the in-memory loop differs from SphericalPCA (init={init}):"
                             f" {mine} vs {ref}.")
    return out


# -- features ---------------------------------------------------------------------------------
def features(name: str, archive: Path, work_dir: Path) -> tuple[sp.csc_matrix, np.ndarray, dict]:
    """X (m x n, CSC, documents as columns), the label codes, and a description."""
    t0 = time.perf_counter()
    if name == "vocab":
        docs = ex.read_newsgroups(archive, remove=REMOVE)
        texts = [text for group in docs for text in docs[group]]
        groups = [group for group in docs for _ in docs[group]]
        _, y = np.unique(groups, return_inverse=True)
        Xd = TfidfVectorizer(stop_words="english", sublinear_tf=True, min_df=5,
                             max_df=0.5).fit_transform(texts)
        desc = ('TfidfVectorizer(stop_words="english", sublinear_tf=True, min_df=5, '
                "max_df=0.5) on _experiments.read_newsgroups(remove=headers, footers, quotes)")
        m_full = Xd.shape[1]
    elif name == "hashed":
        from text_defaults import read_corpus

        from sphdist.jobs import run
        from sphdist.jobs.ingest import IngestRequest
        from sphdist.text.ingest import TextSpec

        path = work_dir / "hashed.corpus.zarr"
        run(IngestRequest(archive, path, overwrite=True, text=TextSpec(
                          remove=REMOVE, vocabulary=False, stop_words=None, sublinear_tf=False,
                          )))  # the defaults before issue 14
        Xd, y = read_corpus(path)
        m_full = Xd.shape[1]
        Xd = Xd[:, np.unique(Xd.indices)]  # the features that occur (module docstring)
        desc = ("sphdist ingest defaults as the main job (2^18 hashed features, tf-idf, unit "
                "rows), U on the features that occur")
    else:
        raise ValueError(name)
    X = sp.csc_matrix(Xd.T, dtype=np.float64)
    info = {"description": desc, "m": int(X.shape[0]), "m_full": int(m_full),
            "n": int(X.shape[1]), "nnz": int(X.nnz),
            "n_empty": int((X.getnnz(axis=0) == 0).sum()),
            "seconds": time.perf_counter() - t0}
    return X, np.asarray(y), info


# -- the study --------------------------------------------------------------------------------
def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def parse_plan(text: str) -> list[tuple[str, list[str]]]:
    """``"plain:random,svd1;aa:random"`` -> ``[("plain", ["random", "svd1"]), ("aa", [...])]``."""
    plan = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        method, _, inits = part.partition(":")
        inits = [i.strip() for i in inits.split(",") if i.strip()]
        if method not in METHODS or not inits or any(
                i != "random" and not (i.startswith("svd") and i[3:].isdigit()) for i in inits):
            raise click.BadParameter(f"{part!r}: expected METHOD:INIT[,INIT...] with METHOD one "
                                     f"of {sorted(METHODS)} and INIT random or svd<n_iter>, "
                                     "e.g. 'plain:random,svd1;aa:random'.", param_hint="--plan")
        plan.append((method, inits))
    return plan


def run_setting(P: Problem, y: np.ndarray, r: int, seeds: list[int], plan, *, tol: float,
                max_iter: int, log) -> list[dict]:
    """Every (method, init) of the plan for every seed on one (feature set, r), scored."""
    records = []
    svd_max = max([int(i[3:]) for _, inits in plan for i in inits if i != "random"],
                  default=-1)
    for seed in seeds:
        t0 = time.perf_counter()
        inits = {"random": (kernels.random_orthonormal(P.m, r, check_random_state(seed)),
                            time.perf_counter() - t0, 0)}
        if svd_max >= 0:
            for j, stage in enumerate(svd_stages(P, r, seed, svd_max)):
                inits[f"svd{j}"] = stage
        for method, names in plan:
            for init in names:
                U0, t_init, p_init = inits[init]
                run = fit(P, U0, method, tol=tol, max_iter=max_iter, t_init=t_init,
                          p_init=p_init)
                t1 = time.perf_counter()
                score = evaluate_embedding(run.V.T, y, n_clusters=20, n_init=10,
                                           random_state=seed)
                rec = {"r": r, "seed": seed, "method": method, "init": init,
                       "n_iter": len(run.objective) - 1, "passes": run.passes[-1],
                       "init_passes": p_init, "init_seconds": t_init,
                       "polars": run.polars[-1], "seconds": run.seconds[-1],
                       "objective": run.objective[-1], "converged": run.converged,
                       "rejected": run.rejected, "monotone": bool(np.all(
                           np.diff(run.objective) <= 1e-12 * abs(run.objective[0]))),
                       "accuracy": score["accuracy"],
                       "nmi": score["nmi"], "kmeans_seconds": time.perf_counter() - t1,
                       "history": {"objective": run.objective, "passes": run.passes,
                                   "seconds": run.seconds}}
                log(f"    r={r:3d} seed={seed} {method:5s} {init:6s} iters {rec['n_iter']:3d} "
                    f"passes {rec['passes']:3d} (rej {run.rejected}) {rec['seconds']:6.2f}s "
                    f"f {rec['objective']:.3f} acc {rec['accuracy']:.3f} nmi {rec['nmi']:.3f}")
                records.append(rec)
    return records


def _pm(values, scale: float = 1.0, digits: int = 3) -> str:
    v = np.asarray(values, dtype=float) * scale
    sd = v.std(ddof=1) if v.size > 1 else 0.0
    return f"{v.mean():.{digits}f} ± {sd:.{digits}f}"


def summarise(records: list[dict]) -> list[dict]:
    """One row per (r, method, init): medians, ranges, means ± sample std over the seeds.

    ``rel_objective``: ``(f - f_best) / f_best`` with f_best the lowest objective any run
    reached at this r. ``passes_to_target``: passes until f first fell to the median final
    objective of plain/random at this r (today's quality); None where a run stopped above it.
    """
    rows = []
    for r in sorted({x["r"] for x in records}):
        rs = [x for x in records if x["r"] == r]
        best = min(x["objective"] for x in rs)
        base = [x["objective"] for x in rs if x["method"] == "plain" and x["init"] == "random"]
        target = float(np.median(base)) if base else None
        for key in dict.fromkeys((x["method"], x["init"]) for x in rs):
            xs = [x for x in rs if (x["method"], x["init"]) == key]
            to_target = []
            for x in xs:
                h = x["history"]
                hit = [p for p, f in zip(h["passes"], h["objective"], strict=True)
                       if target is not None and f <= target]
                to_target.append(hit[0] if hit else None)
            reached = [p for p in to_target if p is not None]
            rows.append({
                "r": r, "method": key[0], "init": key[1], "n": len(xs), "f_best": best,
                "target": target,
                **{f"{k}_{s}": float(fn([x[k] for x in xs]))
                   for k in ("n_iter", "passes", "seconds", "polars")
                   for s, fn in (("median", np.median), ("min", np.min), ("max", np.max))},
                "rel_objective": [(x["objective"] - best) / best for x in xs],
                "accuracy": [x["accuracy"] for x in xs], "nmi": [x["nmi"] for x in xs],
                "passes_to_target": to_target,
                "passes_to_target_median": float(np.median(reached)) if reached else None,
                "rejected": int(sum(x["rejected"] for x in xs)),
                "converged": int(sum(x["converged"] for x in xs)),
                "monotone": int(sum(x["monotone"] for x in xs)),
            })
    return rows


def table(rows: list[dict], costs: dict | None = None) -> list[str]:
    """The markdown table of one feature set (``costs``: r -> :func:`unit_costs`)."""
    L = ["| r | init | method | iterations | passes | seconds | modelled s | polar factors | "
         "(f − f_best)/f_best ×10⁴ | accuracy | NMI | passes to today's f | wasted passes |",
         "|---:|---|---|---|---|---|---:|---:|---|---|---|---:|---:|"]
    for x in rows:
        c = (costs or {}).get(str(x["r"]))
        model = f"{modelled_seconds(x, c):.2f}" if c else "–"
        tt = x["passes_to_target_median"]
        n_hit = sum(p is not None for p in x["passes_to_target"])
        L.append(
            f"| {x['r']} | {x['init']} | {x['method']} | "
            f"{x['n_iter_median']:.0f} ({x['n_iter_min']:.0f}–{x['n_iter_max']:.0f}) | "
            f"{x['passes_median']:.0f} ({x['passes_min']:.0f}–{x['passes_max']:.0f}) | "
            f"{x['seconds_median']:.2f} ({x['seconds_min']:.2f}–{x['seconds_max']:.2f}) | "
            f"{model} | {x['polars_median']:.0f} | {_pm(x['rel_objective'], 1e4, 1)} | "
            f"{_pm(x['accuracy'])} | {_pm(x['nmi'])} | "
            + (f"{tt:.0f}" + ("" if n_hit == x["n"] else f" ({n_hit}/{x['n']})")
               if tt is not None else "–")
            + f" | {x['rejected']} |")
    return L


def unit_costs(P: Problem, r: int, *, seed: int = 0, reps: int = 5, svd_n_iter: int = 4,
               log=print) -> dict:
    """Seconds of a pass, a polar factor, one plain / ext / aa iteration and the inits.

    Minimum of ``reps`` interleaved repetitions (the least disturbed by other jobs), each from
    (a copy of) the state after 4 plain iterations, seed ``seed``, random init; ext and aa
    primed so that they extrapolate. ``svd_init``: seconds of each stage (min of 2 runs).
    """
    U = kernels.random_orthonormal(P.m, r, check_random_state(seed))
    V, G, f = P.step(U, None)
    run = Run(t0=time.perf_counter())
    aa, ext = Anderson(), Extrapolated()
    ext.k = ext.start  # its next call extrapolates
    for k in range(4):
        if k >= 2:
            aa(P, U, V, G, f, run)  # its history: F of iterates 2 and 3
        U, V, G, f = plain_step(P, U, V, G, f, run)
    jobs = {"pass": lambda: P.step(U, V), "polar": lambda: polar(P, G),
            "random_init": lambda: kernels.random_orthonormal(P.m, r, check_random_state(seed)),
            "plain": lambda: plain_step(P, U, V, G, f, run)}
    stateful = {"ext": ext, "aa": aa}
    best = dict.fromkeys([*jobs, *stateful], float("inf"))
    for _ in range(reps):
        for name, job in jobs.items():
            t0 = time.perf_counter()
            job()
            best[name] = min(best[name], time.perf_counter() - t0)
        for name, step in stateful.items():
            step = copy.deepcopy(step)
            t0 = time.perf_counter()
            step(P, U, V, G, f, run)
            best[name] = min(best[name], time.perf_counter() - t0)
    best["svd_init"] = np.min([[st[1] for st in svd_stages(P, r, seed, svd_n_iter)]
                               for _ in range(2)], axis=0).tolist()
    best["rejected_during_timing"] = run.rejected
    log(f"    unit costs r={r}: " + ", ".join(
        f"{k} {v:.3f}s" for k, v in best.items() if isinstance(v, float)))
    return best


def modelled_seconds(row: dict, costs: dict) -> float:
    """Seconds to tol from the unit costs: init + first pass + the iterations of the row.

    Uses the median iteration count; ext and aa take the plain step in their first iteration
    (and after a rejection, counted as a plain iteration plus a pass).
    """
    init = (costs["random_init"] if row["init"] == "random"
            else costs["svd_init"][int(row["init"][3:])])
    it = row["n_iter_median"]
    if row["method"] == "plain":
        return init + costs["pass"] + it * costs["plain"]
    extra = row["rejected"] / row["n"]
    return (init + costs["pass"] + (1 + extra) * costs["plain"] + extra * costs["pass"]
            + max(it - 1 - extra, 0) * costs[row["method"]])


def markdown(result: dict) -> str:
    """The results as a markdown report."""
    L = ["# Iterations to tolerance: initialisation and monotone acceleration (issue 13, item 5)",
         "", f"Command: `{result['command']}`", "",
         f"20 Newsgroups, all {result['n_documents']:,} documents, 20 groups, headers/footers/"
         "quotes removed. Liu et al. (2019) Algorithm 1 with exact steps, in memory from "
         f"`sphdist.core.kernels` (one thread), tol {result['tol']:g} on |f_(k-1) − f_k| / "
         f"|f_(k-1)|, max_iter {result['max_iter']}, seeds {result['seeds']}. "
         "**passes** = reads of X (one per iteration, + n_power_iter + 1 for init=svd, + each "
         "rejected extrapolation); **seconds** = wall time from the start of the "
         "initialisation to the stop (one thread, shared machine: compare passes first); "
         "**polar factors** = (m, r) polar factors computed (the U-step's; ext and aa add one "
         "per accelerated iteration). f_best = the lowest objective any run reached at that "
         "feature set and r. *passes to today's f* = passes until f first fell to the median "
         "final objective of plain/random (today's default), median over seeds (k/n: only k "
         "runs got there before stopping). k-means k = 20, n_init 10, seeded like the fit, on "
         "the rows of Vᵀ (`sphdist.metrics.evaluate_embedding`); mean ± sample std over seeds.",
         "", "Methods: **plain** = Algorithm 1 (today's solver); **ext** = extrapolated U "
         "with adaptive beta, accepted if f does not rise (`Extrapolated`); **aa** = "
         "Anderson acceleration, depth 2, accepted if f falls at least by the plain step's "
         "guaranteed decrease (`Anderson`); both take the plain step otherwise. Inits: random "
         "(Haar U_0) and svdN (init='svd', n_power_iter = N).", "",
         f"Load average (1, 5, 15 min): start {result['loadavg_start']}, end "
         f"{result['loadavg_end']}; per block below. {result['environment']}.", "",
         "Check against the product (`SphericalPCA(tol=0, max_iter=5).objective_` on a "
         "random 300 x 400 matrix): " + ", ".join(
             f"init={k}: max relative difference {v['max_relative_difference']:.1e} over "
             f"{v['n_values']} values" for k, v in result["check"].items()) + ".", "",
         "## Features", "", "| set | X | m (of) | nnz | empty docs | build s |",
         "|---|---|---:|---:|---:|---:|"]
    for name, s in result["sets"].items():
        f = s["features"]
        L.append(f"| {name} | {f['description']} | {f['m']:,} ({f['m_full']:,}) | "
                 f"{f['nnz']:,} | {f['n_empty']} | {f['seconds']:.1f} |")
    for name, s in result["sets"].items():
        L += ["", f"## {name}", "", "Load average at the start of each r: "
              + ", ".join(f"r = {r}: {la}" for r, la in s["loadavg"].items()) + ".", ""]
        L += table(s["summary"], s.get("unit_costs"))
        if s.get("unit_costs"):
            L += ["", "Unit costs (seconds, minimum of 5 interleaved repetitions from the state "
                  "after 4 plain iterations, seed 0; *modelled s* above = init + first pass + "
                  "median iterations x the method's iteration):", "",
                  "| r | pass | polar factor | plain iteration | ext iteration | aa iteration "
                  "| random U_0 | svd init, n_power_iter 0..4 |",
                  "|---:|---:|---:|---:|---:|---:|---:|---|"]
            for r, c in s["unit_costs"].items():
                L.append(f"| {r} | {c['pass']:.3f} | {c['polar']:.3f} | {c['plain']:.3f} | "
                         f"{c['ext']:.3f} | {c['aa']:.3f} | {c['random_init']:.3f} | "
                         + ", ".join(f"{v:.2f}" for v in c["svd_init"]) + " |")
    if result.get("unit_costs_command"):
        L += ["", f"Unit costs re-measured by `{result['unit_costs_command']}`, load average "
              f"{result['unit_costs_loadavg']} (before, and after each set)."]
    L += ["", f"![objective gap against passes, seed {result['seeds'][0]}]"
          "(iterations_to_tol.png)", "", f"Total wall time {result['wall_seconds']:.0f} s.", ""]
    return "\n".join(L)


def plot(result: dict, path: Path) -> None:
    """(f - f_best) / f_best against passes, first seed, one panel per (set, r)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(name, r) for name, s in result["sets"].items()
              for r in sorted({x["r"] for x in s["records"]})]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), squeeze=False)
    seed = result["seeds"][0]
    for ax, (name, r) in zip(axes[0], panels, strict=True):
        recs = [x for x in result["sets"][name]["records"] if x["r"] == r]
        best = min(x["objective"] for x in recs)
        for x in recs:
            if x["seed"] != seed:
                continue
            h = x["history"]
            gap = np.maximum((np.asarray(h["objective"]) - best) / best, 1e-7)
            style = {"plain": "-", "ext": "--", "aa": ":"}[x["method"]]
            ax.semilogy(h["passes"], gap, style, marker=".", ms=3,
                        label=f"{x['method']} {x['init']}")
        ax.set_title(f"{name}, r = {r}")
        ax.set_xlabel("passes over X")
        ax.set_ylim(1e-5, 1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("(f − f_best) / f_best")
    axes[0][-1].legend(fontsize=7, loc="upper right")
    ex.save_figure(fig, path)


QUICK = {"sets": "vocab", "ranks": "20", "seeds": "0,1",
         "plan": "plain:random,svd1,svd4;ext:random,svd1;aa:random,svd1"}
PLAN = "plain:random,svd1,svd2,svd3,svd4;ext:random;aa:random,svd1"


def remeasure_unit_costs(out_dir: Path, work_dir: Path, log) -> None:
    """``--unit-costs-only``: measure :func:`unit_costs` into an existing result."""
    path = out_dir / "iterations_to_tol.json"
    if not path.is_file():
        raise click.ClickException(
            f"{path} not found. To resolve this, run `python pipelines/iterations_to_tol.py "
            f"--out-dir {out_dir}` first.")
    result = json.loads(path.read_text())
    result["unit_costs_command"] = "python " + " ".join(sys.argv)
    result["unit_costs_loadavg"] = [loadavg()]
    work_dir.mkdir(parents=True, exist_ok=True)
    with threadpool_limits(limits=1):
        for name, s in result["sets"].items():
            X, _, _ = features(name, newsgroups_archive(ex.data_home()), work_dir)
            P = Problem(X)
            s["unit_costs"] = {str(r): unit_costs(P, r, log=log) for r in result["ranks"]}
            result["unit_costs_loadavg"].append(loadavg())
    ex.write_json(path, result)
    ex.write_text(out_dir / "iterations_to_tol.md", markdown(result))
    click.echo(markdown(result))


@click.command()
@click.option("--sets", default="vocab,hashed", show_default=True,
              help="Feature sets, comma-separated: vocab, hashed.")
@click.option("--ranks", default="20,100", show_default=True, help="r values, comma-separated.")
@click.option("--seeds", default="0,1,2,3,4", show_default=True, help="Seeds, comma-separated.")
@click.option("--plan", default=PLAN, show_default=True,
              help="METHOD:INIT,...;... with METHOD plain/ext/aa, INIT random or svdN "
                   "(init='svd', n_power_iter = N).")
@click.option("--tol", type=click.FloatRange(min=0), default=1e-4, show_default=True,
              help="Stop when |f_(k-1) - f_k| / |f_(k-1)| < tol.")
@click.option("--max-iter", type=click.IntRange(min=1), default=200, show_default=True,
              help="Iterations after the initialisation, at most.")
@click.option("--quick", is_flag=True,
              help=f"Smoke run (~1 min): {QUICK['sets']}, r = {QUICK['ranks']}, seeds "
                   f"{QUICK['seeds']}, plan {QUICK['plan']}.")
@click.option("--unit-costs-only", is_flag=True,
              help="Only (re)measure the unit costs of the sets and ranks in OUT_DIR's "
                   "iterations_to_tol.json and rewrite its md/json (~3 min).")
@click.option("--work-dir", type=click.Path(path_type=Path),
              default=Path("work/iterations_to_tol"), show_default=True,
              help="Where the hashed corpus is written.")
@click.option("--out-dir", type=click.Path(path_type=Path), default=ex.RESULTS,
              show_default=True, help="Where iterations_to_tol.{md,json,png} are written.")
def main(sets, ranks, seeds, plan, tol, max_iter, quick, unit_costs_only, work_dir, out_dir):
    """Iterations, passes and seconds to tol for Spherical PCA inits and accelerations."""
    def log(msg):
        click.echo(msg, err=True)

    if unit_costs_only:
        return remeasure_unit_costs(out_dir, work_dir, log)

    if quick:
        sets, ranks, seeds, plan = QUICK["sets"], QUICK["ranks"], QUICK["seeds"], QUICK["plan"]
    names = [s.strip() for s in sets.split(",") if s.strip()]
    bad = [s for s in names if s not in ("vocab", "hashed")]
    if bad:
        raise click.BadParameter(f"{bad}: choose from vocab, hashed (e.g. --sets vocab).",
                                 param_hint="--sets")
    ranks = [int(r) for r in ranks.split(",")]
    seeds = [int(s) for s in seeds.split(",")]
    plan = parse_plan(plan)
    archive = newsgroups_archive(ex.data_home())
    work_dir.mkdir(parents=True, exist_ok=True)
    result = {"command": "python " + " ".join(sys.argv), "tol": tol, "max_iter": max_iter,
              "seeds": seeds, "ranks": ranks, "plan": plan, "loadavg_start": loadavg(),
              "environment": ex.environment(), "sets": {}}
    t_start = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)

    def save():  # after every block, so an interrupted run keeps what it measured
        result["loadavg_end"] = loadavg()
        result["wall_seconds"] = time.perf_counter() - t_start
        ex.write_json(out_dir / "iterations_to_tol.json", result)
        ex.write_text(out_dir / "iterations_to_tol.md", markdown(result))
        plot(result, out_dir / "iterations_to_tol.png")

    with threadpool_limits(limits=1):
        result["check"] = check_against_product(log)
        for name in names:
            X, y, info = features(name, archive, work_dir)
            result["n_documents"] = info["n"]
            log(f"{name}: m {info['m']} (of {info['m_full']}), nnz {info['nnz']}, "
                f"{info['seconds']:.1f}s (load {loadavg()})")
            P = Problem(X)
            s = result["sets"][name] = {"features": info, "loadavg": {}, "records": []}
            for r in ranks:
                s["loadavg"][r] = loadavg()
                s["records"] += run_setting(P, y, r, seeds, plan, tol=tol, max_iter=max_iter,
                                            log=log)
                s["summary"] = summarise(s["records"])
                save()
            s["unit_costs"] = {str(r): unit_costs(P, r, log=log) for r in ranks}
            save()
    save()
    click.echo(markdown(result))


if __name__ == "__main__":
    main()
