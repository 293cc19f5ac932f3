"""The largest NMI a 2-cluster partition of Pima diabetes (500 / 268) can have at an accuracy.

For each of the paper's diabetes (accuracy, NMI) pairs (Liu et al. 2019, Table 2), every split
of the errors between the two classes is scored with scikit-learn's four NMI normalisations
(arithmetic is sphdist's NMI; max is Xu, Liu & Gong 2003, the paper's reference), and the
largest value is printed beside the paper's. Cited in ``liu_table2_variants.md``.

Usage (from the repository root; a few seconds)::

    .venv/bin/python pipelines/liu_table2_nmi_bound.py

Writes ``liu_table2_nmi_bound.md`` to ``--out-dir``.
"""

from __future__ import annotations

from pathlib import Path

import _experiments as ex
import click
import numpy as np
from sklearn.metrics import normalized_mutual_info_score as nmi

#: Class sizes of Pima Indians Diabetes (``<data home>/uci/diabetes.csv``).
N0, N1 = 500, 268
AVERAGES = ("arithmetic", "max", "min", "geometric")


def nmi_bound(acc: float, n0: int = N0, n1: int = N1) -> np.ndarray:
    """Largest NMI of a 2-cluster partition with accuracy ``acc``, per :data:`AVERAGES`."""
    y = np.r_[np.zeros(n0), np.ones(n1)]
    errors = round((1 - acc) * (n0 + n1))
    best = np.zeros(len(AVERAGES))
    for e0 in range(max(0, errors - n1), min(errors, n0) + 1):
        e1 = errors - e0
        p = np.r_[np.zeros(n0 - e0), np.ones(e0), np.ones(n1 - e1), np.zeros(e1)]
        best = np.maximum(best, [nmi(y, p, average_method=m) for m in AVERAGES])
    return best


@click.command()
@click.option("--out-dir", type=click.Path(path_type=Path), default=ex.RESULTS,
              show_default=True)
def main(out_dir):
    """Print (and write) the NMI bound beside the paper's diabetes figures."""
    lines = ["# Liu et al. 2019, Table 2, diabetes: the paper's NMI against the largest "
             "attainable", "", "Command: `python pipelines/liu_table2_nmi_bound.py`", "",
             "| method | paper acc | paper NMI | max NMI at that acc (arith / max / min / geom) |",
             "|---|---:|---:|---|"]
    for key, (acc, paper_nmi) in ex.LIU_TABLE2["diabetes"][1].items():
        best = nmi_bound(acc)
        lines.append(f"| {key} | {acc:.3f} | {paper_nmi:.3f} | "
                     + " / ".join(f"{b:.3f}" for b in best) + " |")
    ex.write_text(out_dir / "liu_table2_nmi_bound.md", "\n".join(lines) + "\n")
    click.echo("\n".join(lines))


if __name__ == "__main__":
    main()
