"""Liu et al. 2019, Fig. 2: two cones told apart by angle, k-means on raw data vs on Spherical PCA.

The data (§5.1): 200 points in R^3, half in the wedge between the plane X = Z and the Z axis
(directions ``(sin t, 0, cos t)``, t uniform in [0, 45°]), half in the wedge between Y = Z and
the Z axis (``(0, sin t, cos t)``), each scaled by a length uniform in ``--radius`` (the paper
gives no lengths; a wide range is what makes Euclidean k-means fail) plus isotropic Gaussian
noise of ``--noise``. k-means (k = 2) runs on the raw points and on the Spherical PCA embedding
V (r = 2, unit vectors, as in the paper: U of shape 3 x 2, V of shape 2 x 200).

Usage::

    .venv/bin/python pipelines/liu_fig2.py [--trials 20] [--seed 0]

Writes ``liu_fig2.png`` (the first trial, three panels as in the paper) and ``liu_fig2.md``
(accuracy and NMI over ``--trials`` data draws) to ``--out-dir``.
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
from sphdist.metrics import clustering_accuracy, normalized_mutual_info


def two_cones(n: int, rng: np.random.Generator, radius=(0.1, 2.0), noise=0.02,
              max_angle=np.pi / 4) -> tuple[np.ndarray, np.ndarray]:
    """The synthetic data of Liu et al. §5.1: ``n // 2`` points per wedge.

    Returns
    -------
    X : ndarray of shape (n, 3), float64
    y : ndarray of shape (n,), int64
        0 for the X = Z wedge, 1 for the Y = Z wedge.
    """
    half = n // 2
    t = rng.uniform(0.0, max_angle, size=2 * half)
    rho = rng.uniform(*radius, size=2 * half)
    y = np.repeat([0, 1], half)
    X = np.zeros((2 * half, 3))
    X[:, 2] = np.cos(t)
    X[y == 0, 0] = np.sin(t[y == 0])
    X[y == 1, 1] = np.sin(t[y == 1])
    X = X * rho[:, None] + noise * rng.standard_normal(X.shape)
    return X, y


def _kmeans(Z, seed):
    from sklearn.cluster import KMeans

    return KMeans(n_clusters=2, n_init=10, random_state=seed).fit_predict(Z)


def plot(X, y, pred_raw, V, pred_spca, scores, path: Path) -> None:
    """Three panels: the data by group, k-means on raw X, k-means on the embedding V."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = np.array(["tab:blue", "tab:red"])
    fig = plt.figure(figsize=(14, 4.6))
    ax = fig.add_subplot(1, 3, 1, projection="3d")
    ax.scatter(*X.T, c=colors[y], s=10)
    ax.set_title("data: two wedges (true groups)")
    ax2 = fig.add_subplot(1, 3, 2, projection="3d")
    ax2.scatter(*X.T, c=colors[pred_raw], s=10)
    ax2.set_title(f"k-means on raw X: acc {scores['raw'][0]:.3f}")
    for a in (ax, ax2):
        a.set_xlabel("X")
        a.set_ylabel("Y")
        a.set_zlabel("Z")
        a.view_init(elev=20, azim=45)
    ax3 = fig.add_subplot(1, 3, 3)
    theta = np.linspace(0, 2 * np.pi, 200)
    ax3.plot(np.cos(theta), np.sin(theta), color="0.8", lw=0.8)
    ax3.scatter(V[:, 0], V[:, 1], c=colors[pred_spca], s=10)
    ax3.set_aspect("equal")
    ax3.set_title(f"k-means on Spherical PCA V (r = 2): acc {scores['spca'][0]:.3f}")
    ax3.set_xlabel("v1")
    ax3.set_ylabel("v2")
    fig.suptitle("Liu et al. 2019, Fig. 2 (colours: clusters; left: groups)")
    ex.save_figure(fig, path)


@click.command()
@click.option("--n-points", type=click.IntRange(min=4), default=200, show_default=True)
@click.option("--trials", type=click.IntRange(min=1), default=20, show_default=True)
@click.option("--radius", nargs=2, type=float, default=(0.1, 2.0), show_default=True,
              help="Range of the point lengths.")
@click.option("--noise", type=click.FloatRange(min=0), default=0.02, show_default=True)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--out-dir", type=click.Path(path_type=Path), default=ex.RESULTS,
              show_default=True)
def main(n_points, trials, radius, noise, seed, out_dir):
    """Reproduce Liu et al. 2019, Fig. 2 and tabulate accuracies over several data draws."""
    rows = []
    with dask.config.set(scheduler="synchronous"), threadpool_limits(1):
        for trial in range(trials):
            rng = np.random.default_rng(seed + trial)
            X, y = two_cones(n_points, rng, radius, noise)
            pred_raw = _kmeans(X, seed + trial)
            V = np.asarray(SphericalPCA(n_components=2, random_state=seed + trial)
                           .fit_transform(X))
            pred_spca = _kmeans(V, seed + trial)
            scores = {
                "raw": (clustering_accuracy(y, pred_raw),
                        normalized_mutual_info(y, pred_raw)),
                "spca": (clustering_accuracy(y, pred_spca),
                         normalized_mutual_info(y, pred_spca)),
            }
            rows.append(scores)
            if trial == 0:
                plot(X, y, pred_raw, V, pred_spca, scores, out_dir / "liu_fig2.png")
    acc = {k: np.array([r[k][0] for r in rows]) for k in ("raw", "spca")}
    nmi = {k: np.array([r[k][1] for r in rows]) for k in ("raw", "spca")}
    lines = [
        "# Liu et al. 2019, Fig. 2 — two wedges, k-means on raw data vs on Spherical PCA", "",
        f"Command: `python pipelines/liu_fig2.py {' '.join(sys.argv[1:])}`", "",
        f"{n_points} points, lengths uniform in [{radius[0]}, {radius[1]}], noise {noise}; "
        f"{trials} data draws (seeds {seed}..{seed + trials - 1}); k-means k = 2, 10 restarts. "
        "The paper shows one draw as a picture and prints no accuracy.", "",
        "| input of k-means | accuracy (mean ± std) | min | NMI (mean ± std) | "
        "first draw (the PNG) |",
        "|---|---:|---:|---:|---:|",
    ]
    for key, label in (("raw", "raw X (3-D)"), ("spca", "Spherical PCA V (r = 2)")):
        lines.append(f"| {label} | {ex.fmt_pm(acc[key].mean(), acc[key].std())} | "
                     f"{acc[key].min():.3f} | {ex.fmt_pm(nmi[key].mean(), nmi[key].std())} | "
                     f"{rows[0][key][0]:.3f} |")
    lines += ["", "![Fig. 2](liu_fig2.png)", ""]
    ex.write_text(out_dir / "liu_fig2.md", "\n".join(lines))
    click.echo("\n".join(lines))


if __name__ == "__main__":
    main()
