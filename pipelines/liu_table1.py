"""Liu et al. 2019, Table 1: clustering 20 Newsgroups with each embedding, paper beside ours.

Protocol (§5.2 of the paper, with the choices it leaves open stated):

- groups: 5, 10, 15, 20. The five are the paper's (comp.graphics, rec.motorcycles,
  rec.sport.baseball, sci.space, talk.politics.mideast); the paper does not list its 10 and
  15, so the first 10 / 15 of :data:`_experiments.NEWSGROUP_ORDER` are used (the five, then the
  others alphabetically);
- 200 documents sampled per group (train and test splits pooled), headers stripped by
  scikit-learn's ``strip_newsgroup_header`` (they contain the group name);
- 500 words with the highest mutual information between word presence and label
  (``CountVectorizer(stop_words="english", min_df=2)`` candidates), tf-idf with unit rows;
- every method embeds into r dimensions (the paper does not state r; default r = number of
  groups), then k-means (k = number of groups, 10 restarts) is scored by accuracy and NMI;
- repeated ``--reps`` times (paper: 10), each with a new sample and seed; mean ± std.

Usage (from the repository root)::

    SPHDIST_DATA_HOME=../shared/data .venv/bin/python pipelines/liu_table1.py --reps 10

Writes ``liu_table1.md``, ``liu_table1.png`` and ``liu_table1.json`` to ``--out-dir``
(default ``pipelines/results``), refreshed after every group count.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import _experiments as ex
import click
import dask
import numpy as np
from threadpoolctl import threadpool_limits


def plot(summaries: dict[int, dict], path: Path) -> None:
    """Accuracy and NMI against the number of groups: ours (error bars) and the paper's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), layout="constrained")
    groups = sorted(summaries)
    keys = list(dict.fromkeys(k for s in summaries.values() for k in s))
    for i, key in enumerate(keys):
        color = f"C{i}"
        for ax, stat, pi in ((axes[0], "acc", 0), (axes[1], "nmi", 1)):
            g_ok = [g for g in groups if summaries[g].get(key, {}).get("n", 0)]
            if g_ok:
                ax.errorbar(g_ok, [summaries[g][key][f"{stat}_mean"] for g in g_ok],
                            yerr=[summaries[g][key][f"{stat}_std"] for g in g_ok],
                            color=color, marker="o", capsize=3, label=ex.METHODS[key].label,
                            lw=2.5 if key == "spca" else 1.2)
            if key in ex.LIU_TABLE1[5]:
                pg = [g for g in groups if g in ex.LIU_TABLE1]
                ax.plot(pg, [ex.LIU_TABLE1[g][key][pi] for g in pg],
                        color=color, ls="--", marker="x", alpha=0.7)
    for ax, title in zip(axes, ("clustering accuracy", "NMI (arithmetic normalisation)"),
                         strict=True):
        ax.set_xlabel("number of groups")
        ax.set_title(title)
        ax.set_xticks(groups)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Liu et al. 2019, Table 1: k-means on embeddings of 20 Newsgroups\n"
                 "solid o: ours (mean ± std over repetitions); dashed ×: the paper's")
    ex.save_figure(fig, path)


def render(summaries, args, skipped, elapsed, records=()) -> str:
    """The markdown report."""
    lines = ["# Liu et al. 2019, Table 1 — 20 Newsgroups clustering, ours vs the paper", "",
             f"Command: `{args['command']}`", "",
             f"{args['reps']} repetitions (paper: 10), {args['docs']} documents per group, "
             f"{args['n_words']} words by mutual information ({args['mi_method']}), tf-idf, unit "
             f"rows; r = {args['r'] or 'number of groups'}; k-means with k = number of groups, "
             f"10 restarts; headers removed ({', '.join(args['remove'])}). Mean ± sample std "
             "over repetitions; the paper prints means only.", ""]
    for g, summary in summaries.items():
        lines += [f"## {g} groups", "", f"Groups: {', '.join(ex.NEWSGROUP_ORDER[:g])}", ""]
        lines += ex.score_table(summary, ex.LIU_TABLE1.get(g), args["reps"]) + [""]
        failed = [r for r in records if r.get("groups") == g and "error" in r]
        if failed:
            lines += ["Failed repetitions: " + "; ".join(
                f"{r['method']} (seed {r['seed']}): {r['error']}" for r in failed), ""]
    if skipped:
        lines += ["Methods not run (not available in this checkout):", ""]
        lines += [f"- {k}: {why}" for k, why in skipped.items()] + [""]
    lines += [f"Total wall time {elapsed:.0f} s. {ex.environment()}.", ""]
    return "\n".join(lines)


@click.command()
@click.option("--groups", default="5,10,15,20", show_default=True,
              help="Comma-separated numbers of groups.")
@click.option("--reps", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--docs-per-group", type=click.IntRange(min=2), default=200, show_default=True)
@click.option("--n-words", type=click.IntRange(min=2), default=500, show_default=True)
@click.option("--n-components", type=click.IntRange(min=1), default=None,
              help="r; default the number of groups.")
@click.option("--methods", default=None,
              help=f"Comma-separated subset of {','.join(ex.METHODS)}; default all available.")
@click.option("--mi-method", type=click.Choice(["sklearn", "counts"]), default="sklearn",
              show_default=True, help="mutual_info_classif, or the same MI from counts (fast).")
@click.option("--remove", default="headers", show_default=True,
              help="Comma-separated parts stripped: headers, footers, quotes.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--data-home", type=click.Path(path_type=Path), default=None,
              help="Folder with 20news-bydate.tar.gz; default $SPHDIST_DATA_HOME.")
@click.option("--out-dir", type=click.Path(path_type=Path), default=ex.RESULTS,
              show_default=True)
@click.option("--threads", type=click.IntRange(min=1), default=1, show_default=True,
              help="BLAS threads.")
@click.option("--replot", is_flag=True,
              help="Only re-render the table and figure from --out-dir/liu_table1.json.")
def main(groups, reps, docs_per_group, n_words, n_components, methods, mi_method, remove, seed,
         data_home, out_dir, threads, replot):
    """Reproduce Liu et al. 2019, Table 1 (20 Newsgroups) with the paper's figures beside ours."""
    if replot:
        saved = json.loads((out_dir / "liu_table1.json").read_text())
        recs = saved["records"]
        summaries = {g: ex.summarise([r for r in recs if r["groups"] == g])
                     for g in sorted({r["groups"] for r in recs})}
        ex.write_text(out_dir / "liu_table1.md", render(
            summaries, saved["args"], saved["skipped"], saved.get("elapsed", float("nan")),
            recs))
        plot(summaries, out_dir / "liu_table1.png")
        return
    t_start = time.perf_counter()
    group_counts = [int(g) for g in groups.split(",")]
    if any(not 2 <= g <= len(ex.NEWSGROUP_ORDER) for g in group_counts):
        raise click.BadParameter("each number of groups must be in 2..20", param_hint="--groups")
    chosen, skipped = ex.resolve_methods(methods.split(",") if methods else None)
    remove_parts = tuple(p for p in remove.split(",") if p)
    archive = (data_home or ex.data_home()) / "20news-bydate.tar.gz"
    click.echo(f"reading {archive} ...", err=True)
    docs = ex.read_newsgroups(archive, remove_parts)
    args = {"command": "python pipelines/liu_table1.py " + " ".join(sys.argv[1:]),
            "reps": reps, "docs": docs_per_group, "n_words": n_words, "r": n_components,
            "mi_method": mi_method, "remove": remove_parts}
    summaries: dict[int, dict] = {}
    records: list[dict] = []
    with dask.config.set(scheduler="synchronous"), threadpool_limits(threads):
        for g in group_counts:
            names = ex.NEWSGROUP_ORDER[:g]
            group_records = []
            for rep in range(reps):
                rep_seed = seed + 1000 * g + rep
                rng = np.random.default_rng(rep_seed)
                texts, y = ex.sample_documents(docs, names, docs_per_group, rng)
                t0 = time.perf_counter()
                X, _ = ex.mi_tfidf(texts, y, n_words, mi_method=mi_method, seed=rep_seed)
                click.echo(f"{g} groups, rep {rep}: X {X.shape}, "
                           f"{int((~X.any(axis=1)).sum())} empty rows, "
                           f"selection {time.perf_counter() - t0:.1f} s", err=True)
                recs = ex.evaluate_methods(chosen, X, y, n_components=n_components or g,
                                           seed=rep_seed, log=lambda s: click.echo(s, err=True))
                for r in recs:
                    r["groups"] = g
                group_records += recs
            records += group_records
            summaries[g] = ex.summarise(group_records)
            out_dir.mkdir(parents=True, exist_ok=True)
            elapsed = time.perf_counter() - t_start
            ex.write_text(out_dir / "liu_table1.md", render(summaries, args, skipped, elapsed,
                                                             records))
            ex.write_json(out_dir / "liu_table1.json", {"args": args, "records": records,
                                                        "skipped": skipped, "elapsed": elapsed})
            plot(summaries, out_dir / "liu_table1.png")
    click.echo((out_dir / "liu_table1.md").read_text())


if __name__ == "__main__":
    main()
