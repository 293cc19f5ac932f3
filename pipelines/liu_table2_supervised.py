"""A supervised ceiling for Table 2's small data sets (glass, diabetes).

10-fold stratified cross-validated accuracy of classifiers that *see the labels*, beside the
paper's best *unsupervised* (k-means) accuracy (Liu et al. 2019, Table 2). Single thread. Data
from ``<data home>/uci/`` (``$SPHDIST_DATA_HOME``, default ``../shared/data``). Cited in
``liu_table2_variants.md``.

Usage (from the repository root; about 10 s)::

    .venv/bin/python pipelines/liu_table2_supervised.py

Writes ``liu_table2_supervised.md`` to ``--out-dir``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import _experiments as ex
import click
import pandas as pd
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_score
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

MODELS = {
    "1-NN (z-scored)": lambda: make_pipeline(StandardScaler(), KNeighborsClassifier(1)),
    "logistic regression (z-scored)": lambda: make_pipeline(
        StandardScaler(), LogisticRegression(max_iter=2000)),
    "random forest (300 trees)": lambda: RandomForestClassifier(300, random_state=0, n_jobs=1),
}


@click.command()
@click.option("--out-dir", type=click.Path(path_type=Path), default=ex.RESULTS,
              show_default=True)
def main(out_dir):
    """Print (and write) 10-fold CV accuracy on glass and diabetes beside the paper's best."""
    uci = ex.data_home() / "uci"
    lines = ["# Liu et al. 2019, Table 2: a supervised reference for glass and diabetes", "",
             "Command: `python pipelines/liu_table2_supervised.py`. 10-fold stratified CV "
             "(shuffled, random_state 0), mean ± std over folds; one thread.", "",
             "| data | " + " | ".join(MODELS) + " | paper's best unsupervised acc |",
             "|---|" + "---:|" * (len(MODELS) + 1)]
    with threadpool_limits(1), warnings.catch_warnings():
        # glass' smallest class has 9 members, fewer than the 10 folds
        warnings.filterwarnings("ignore", message="The least populated class")
        for name in ("glass", "diabetes"):
            frame = pd.read_csv(uci / f"{name}.csv")
            y = frame.pop("label").to_numpy()
            X = frame.to_numpy(float)
            cv = StratifiedKFold(10, shuffle=True, random_state=0)
            cells = []
            for make in MODELS.values():
                s = cross_val_score(make(), X, y, cv=cv)
                cells.append(f"{s.mean():.3f} ± {s.std():.3f}")
            best = max(acc for acc, _ in ex.LIU_TABLE2[name][1].values())
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {best:.3f} |")
    ex.write_text(out_dir / "liu_table2_supervised.md", "\n".join(lines) + "\n")
    click.echo("\n".join(lines))


if __name__ == "__main__":
    main()
