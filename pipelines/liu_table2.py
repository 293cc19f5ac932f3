"""Liu et al. 2019, Table 2 on any numeric labelled data set (CSV or dense zarr).

Each data set given on the command line is read by :func:`_experiments.load_labelled` (a CSV
with a header row and a label column — default the last — or a zarr group with ``X`` and
``y``), its columns scaled (``--scale``, default min-max to [0, 1], which keeps NMF
applicable) and its rows scaled to unit L2 norm (``--unit-rows``; the paper does not describe
its preprocessing). Every method embeds into r dimensions (default r = number of classes),
k-means (k = number of classes, 10 restarts) is scored by accuracy and NMI, and that is
repeated ``--reps`` times with different seeds (the data stay the same). Where a data set's
name (file name without suffix, or ``--name``) is one of the paper's — glass, diabetes, mfeat,
isolet — the paper's figures are printed beside ours.

Usage::

    .venv/bin/python pipelines/liu_table2.py --write-example-csv work/csv
    .venv/bin/python pipelines/liu_table2.py work/csv/iris.csv work/csv/wine.csv --reps 10

Writes ``liu_table2.md``, ``liu_table2.png`` and ``liu_table2.json`` to ``--out-dir``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import _experiments as ex
import click
import dask
import numpy as np
from threadpoolctl import threadpool_limits

#: scikit-learn's bundled classification data sets (no download), for --write-example-csv.
BUNDLED = ("iris", "wine", "breast_cancer", "digits")


def export_bundled_csv(folder: Path) -> list[Path]:
    """Write scikit-learn's bundled labelled data sets as CSV (features, then ``label``).

    Returns
    -------
    list of Path
        The files written, ``<folder>/<name>.csv``.
    """
    import sklearn.datasets as skd

    paths = []
    for name in BUNDLED:
        frame = getattr(skd, f"load_{name}")(as_frame=True).frame.rename(
            columns={"target": "label"})
        path = folder / f"{name}.csv"
        ex.write_text(path, frame.to_csv(index=False))
        paths.append(path)
    return paths


def plot(results: dict[str, dict], path: Path) -> None:
    """Bars of accuracy and NMI per data set and method; the paper's as black ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    keys = list(dict.fromkeys(k for r in results.values() for k in r["summary"]))
    fig, axes = plt.subplots(2, 1, figsize=(max(6, 2.2 * len(names) * len(keys) / 4), 7),
                             sharex=True)
    width = 0.8 / max(1, len(keys))
    for ax, stat, pi in ((axes[0], "acc", 0), (axes[1], "nmi", 1)):
        for j, key in enumerate(keys):
            xs, ms, ss = [], [], []
            for i, name in enumerate(names):
                s = results[name]["summary"].get(key, {})
                if s.get("n"):
                    xs.append(i + (j - (len(keys) - 1) / 2) * width)
                    ms.append(s[f"{stat}_mean"])
                    ss.append(s[f"{stat}_std"])
                paper = (ex.liu_table2_paper(name) or (None, None))[1]
                if paper and key in paper[1]:
                    x = i + (j - (len(keys) - 1) / 2) * width
                    ax.plot([x - width / 2, x + width / 2], [paper[1][key][pi]] * 2, color="k")
            ax.bar(xs, ms, width, yerr=ss, capsize=2, color=f"C{j}",
                   label=ex.METHODS[key].label)
        ax.set_ylabel("accuracy" if stat == "acc" else "NMI")
        ax.set_ylim(0, 1)
        ax.grid(axis="y", alpha=0.3)
    axes[1].set_xticks(range(len(names)),
                       [f"{n} ({results[n]['n_classes']})" for n in names])
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(6, len(keys)), fontsize=8)
    axes[0].set_title("Liu et al. 2019, Table 2 protocol (bars: ours, mean ± std; "
                      "black ticks: the paper's, where the data set is one of its own)")
    ex.save_figure(fig, path)


@click.command()
@click.argument("data", nargs=-1, type=click.Path(path_type=Path))
@click.option("--label-column", default=None, help="CSV label column; default the last.")
@click.option("--name", "names", multiple=True,
              help="Table name per data set (repeat, in order); default the file name.")
@click.option("--scale", type=click.Choice(["minmax", "standard", "none"]), default="minmax",
              show_default=True)
@click.option("--unit-rows/--no-unit-rows", default=True, show_default=True)
@click.option("--reps", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--n-components", type=click.IntRange(min=1), default=None,
              help="r; default the number of classes (at most the number of features).")
@click.option("--methods", default=None,
              help=f"Comma-separated subset of {','.join(ex.METHODS)}; default all available.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--out-dir", type=click.Path(path_type=Path), default=ex.RESULTS,
              show_default=True)
@click.option("--write-example-csv", type=click.Path(path_type=Path), default=None,
              help="Write scikit-learn's bundled iris/wine/breast_cancer/digits as CSV to this "
                   "folder and exit.")
def main(data, label_column, names, scale, unit_rows, reps, n_components, methods, seed,
         out_dir, write_example_csv):
    """Cluster each labelled DATA set (CSV or dense zarr) with every method, Table 2 style."""
    if write_example_csv is not None:
        for p in export_bundled_csv(write_example_csv):
            click.echo(p)
        return
    if not data:
        raise click.UsageError("give at least one data set (CSV file or zarr group)")
    if names and len(names) != len(data):
        raise click.BadParameter("give one --name per data set", param_hint="--name")
    t_start = time.perf_counter()
    chosen, skipped = ex.resolve_methods(methods.split(",") if methods else None)
    results: dict[str, dict] = {}
    with dask.config.set(scheduler="synchronous"), threadpool_limits(1):
        for i, path in enumerate(data):
            ds = ex.load_labelled(path, label_column=label_column,
                                  name=names[i] if names else None)
            X = ex.prepare_vectors(ds.X, scale, unit_rows)
            k = int(np.unique(ds.y).size)
            r = min(n_components or k, X.shape[1])
            click.echo(f"{ds.name}: X {X.shape}, {k} classes, r = {r}", err=True)
            records = []
            for rep in range(reps):
                click.echo(f" rep {rep}", err=True)
                records += ex.evaluate_methods(chosen, X, ds.y, n_components=r,
                                               seed=seed + rep,
                                               log=lambda s: click.echo(s, err=True))
            results[ds.name] = {"path": str(path), "shape": list(X.shape), "n_classes": k,
                                "r": r, "records": records,
                                "summary": ex.summarise(records)}
    lines = ["# Liu et al. 2019, Table 2 protocol — labelled tables, ours vs the paper", "",
             f"Command: `python pipelines/liu_table2.py {' '.join(sys.argv[1:])}`", "",
             f"Columns scaled: {scale}; rows to unit L2 norm: {unit_rows}. r = "
             f"{n_components or 'number of classes'}; k-means with k = number of classes, 10 "
             f"restarts; {reps} repetitions (seeds {seed}..{seed + reps - 1}; data fixed). "
             f"K-SVD with T0 = {ex.KSVD_T0}. Mean ± sample std.", ""]
    for name, res in results.items():
        key, paper = ex.liu_table2_paper(name) or (None, None)
        lines += [f"## {name} ({res['n_classes']} classes, {res['shape'][0]} samples x "
                  f"{res['shape'][1]} features, r = {res['r']})", "",
                  f"Source: `{res['path']}`. Paper's figures: "
                  f"{'Table 2, ' + key if paper else 'none (not a paper data set)'}"
                  ".", ""]
        lines += ex.score_table(res["summary"], paper[1] if paper else None, reps) + [""]
    if skipped:
        lines += ["Methods not run (not available in this checkout):", ""]
        lines += [f"- {k}: {why}" for k, why in skipped.items()] + [""]
    ex.write_report(out_dir, "liu_table2", "Table 2", lines, results, plot, t_start)


if __name__ == "__main__":
    main()
