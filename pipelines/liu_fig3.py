"""Liu et al. 2019, Fig. 3: convergence of Algorithm 1 — step norms and objective per iteration.

Runs :class:`sphdist.SphericalPCA` for a fixed number of iterations (``tol=0``) on the Table 1
matrix of the paper's five newsgroups (200 documents per group, 500 words by mutual
information, tf-idf, unit rows; r = 5) and plots, per iteration k,
``||U_{k+1} - U_k||_F`` (``u_step_norm_``), ``||V_{k+1} - V_k||_F`` (``v_step_norm_``) and
the objective ``||X - U V||_F^2`` (``objective_``). The paper does not say which data its
Fig. 3 used. Two step-size settings are drawn: ``"theory"`` (lam, mu > L_c, the linearized
steps the convergence theorems cover) and ``"exact"`` (sphdist's default, exact block
minimisation).

Usage::

    SPHDIST_DATA_HOME=../shared/data .venv/bin/python pipelines/liu_fig3.py

Writes ``liu_fig3.png`` and ``liu_fig3.md`` to ``--out-dir``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import _experiments as ex
import click
import dask
import numpy as np
from threadpoolctl import threadpool_limits

from sphdist import SphericalPCA

SETTINGS = (("theory", "theory"), ("exact", "exact"))


def plot(curves: dict[str, SphericalPCA], path: Path) -> None:
    """Three panels as the paper's Fig. 3 (log scale), one line per step-size setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for label, model in curves.items():
        k = np.arange(1, model.n_iter_ + 1)
        axes[0].semilogy(k, model.u_step_norm_, label=label)
        axes[1].semilogy(k, model.v_step_norm_, label=label)
        axes[2].plot(np.arange(model.objective_.size), model.objective_, label=label)
    titles = (r"$\|U_{k+1} - U_k\|_F$", r"$\|V_{k+1} - V_k\|_F$", r"objective $\|X - UV\|_F^2$")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_title(title)
        ax.set_xlabel("iteration k")
        ax.grid(alpha=0.3)
        ax.legend(title="lam, mu")
    fig.suptitle("Liu et al. 2019, Fig. 3: Spherical PCA on 20 Newsgroups (5 groups, r = 5)")
    ex.save_figure(fig, path)


@click.command()
@click.option("--n-iter", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--n-components", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--data-home", type=click.Path(path_type=Path), default=None)
@click.option("--out-dir", type=click.Path(path_type=Path), default=ex.RESULTS,
              show_default=True)
def main(n_iter, n_components, seed, data_home, out_dir):
    """Reproduce Liu et al. 2019, Fig. 3 on the paper's five newsgroups."""
    docs = ex.read_newsgroups((data_home or ex.data_home()) / "20news-bydate.tar.gz")
    groups = ex.NEWSGROUP_ORDER[:5]
    texts, y = ex.sample_documents(docs, groups, 200, np.random.default_rng(seed))
    X, _ = ex.mi_tfidf(texts, y, 500, mi_method="counts", seed=seed)
    curves = {}
    with dask.config.set(scheduler="synchronous"), threadpool_limits(1):
        for lam, mu in SETTINGS:
            curves[f"{lam}"] = SphericalPCA(
                n_components=n_components, lam=lam, mu=mu, max_iter=n_iter, tol=0.0,
                random_state=seed,
            ).fit(X)
    plot(curves, out_dir / "liu_fig3.png")
    lines = ["# Liu et al. 2019, Fig. 3 — convergence of Algorithm 1", "",
             f"Command: `python pipelines/liu_fig3.py {' '.join(sys.argv[1:])}`", "",
             f"X: {X.shape[0]} documents x {X.shape[1]} words (paper's 5 groups, seed {seed}), "
             f"r = {n_components}, {n_iter} iterations from the same random U_0.", "",
             "| lam, mu | f_0 | f_10 | f_final | increases of f | "
             "‖ΔU‖ at k=1, 10, last | ‖ΔV‖ at k=1, 10, last |",
             "|---|---:|---:|---:|---:|---|---|"]
    for label, m in curves.items():
        f = m.objective_
        inc = int(np.sum(np.diff(f) > 1e-12 * f[:-1]))
        u, v = m.u_step_norm_, m.v_step_norm_
        lines.append(
            f"| {label} | {f[0]:.3f} | {f[min(10, f.size - 1)]:.3f} | {f[-1]:.3f} | {inc} | "
            f"{u[0]:.2e}, {u[min(9, u.size - 1)]:.2e}, {u[-1]:.2e} | "
            f"{v[0]:.2e}, {v[min(9, v.size - 1)]:.2e}, {v[-1]:.2e} |"
        )
    lines += ["", "![Fig. 3](liu_fig3.png)", ""]
    ex.write_text(out_dir / "liu_fig3.md", "\n".join(lines))
    ex.write_json(out_dir / "liu_fig3.json", {
        label: {"objective": m.objective_.tolist(), "u_step_norm": m.u_step_norm_.tolist(),
                "v_step_norm": m.v_step_norm_.tolist()} for label, m in curves.items()})
    click.echo("\n".join(lines))


if __name__ == "__main__":
    main()
