"""``sphdist fit --dtype float32`` against float64: what a user would see change.

For each corpus (the cached corpora of ``pipelines/benchmark.py``: 20 Newsgroups with a
learned vocabulary, the default features, and 1M synthetic documents), each dtype and each
seed, ``sphdist fit -r R --dtype D --seed S`` runs as a whole process under the benchmark's
monitor (wall seconds to the committed model, peak RSS), and then from the model:

* the objective ``||X - UV||_F^2`` at the end, and the iterations to tol;
* feasibility: ``max |U^T U - I|`` and ``max_j | ||v_j|| - 1 |`` of the stored V (float32 V is
  stored as float32);
* ``sphdist evaluate``: k-means (k = number of labels) clustering accuracy and NMI.

Run from the repository root after ``pipelines/benchmark.py`` built the corpora::

    .venv/bin/python pipelines/float32.py --seeds 0,1,2 --large-seeds 0

It writes ``pipelines/results/float32.{md,json}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bench_monitor import error_of, load_average, run_monitored  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "pipelines" / "results"
SPHDIST = str(Path(sys.executable).with_name("sphdist"))


def _feasibility(model_path: Path) -> dict[str, Any]:
    from sphdist.io.model import open_model

    model = open_model(model_path)
    U = np.asarray(model.U, dtype=np.float64)
    r = U.shape[1]
    worst = 0.0
    for block in model.V().to_delayed().ravel():
        V = np.asarray(block.compute(), dtype=np.float64)
        worst = max(worst, float(np.abs(np.linalg.norm(V, axis=0) - 1.0).max()))
    return {"n_iter": model.n_iter, "objective": float(model.objective[-1]),
            "orthonormality": float(np.abs(U.T @ U - np.eye(r)).max()),
            "unit_norm": worst, "V_dtype": str(model.V().dtype)}


def _one(corpus: Path, out: Path, r: int, dtype: str, seed: int, n_init: int) -> dict[str, Any]:
    args = [SPHDIST, "fit", "-i", str(corpus), "-o", str(out), "-r", str(r), "--dtype", dtype,
            "--seed", str(seed), "--overwrite"]
    res = run_monitored(args, timeout=7200, mem_limit_gib=20, cwd=REPO)
    entry: dict[str, Any] = {"dtype": dtype, "seed": seed, "wall_s": res["wall_s"],
                             "peak_rss_gib": res["summed_peak_rss_gib"],
                             "load_before": res["load_before"]}
    if error_of(res):
        return entry | {"error": error_of(res)}
    entry |= _feasibility(out)
    scores = subprocess.run([SPHDIST, "evaluate", "-m", str(out), "-i", str(corpus), "--json",
                             "--seed", str(seed), "--n-init", str(n_init)],
                            capture_output=True, text=True, check=True)
    found = json.loads(scores.stdout)
    return entry | {"accuracy": found["accuracy"], "nmi": found["nmi"]}


@click.command()
@click.option("--work-dir", type=click.Path(path_type=Path), default=REPO / "work" / "bench",
              show_default=True, help="Where pipelines/benchmark.py cached its corpora.")
@click.option("--corpora", default="20newsgroups-vocabulary,synthetic-1000k", show_default=True)
@click.option("--seeds", default="0,1,2", show_default=True, help="Seeds of the small corpora.")
@click.option("--large-seeds", default="0", show_default=True,
              help="Seeds of corpora of a million documents or more.")
@click.option("-r", "--n-components", "r", default=100, show_default=True)
@click.option("--output", type=click.Path(path_type=Path), default=RESULTS / "float32")
def main(work_dir: Path, corpora: str, seeds: str, large_seeds: str, r: int,
         output: Path) -> None:
    """Fit every corpus in float64 and float32 with every seed; write the comparison."""
    results: dict[str, Any] = {
        "command": "python pipelines/float32.py " + " ".join(sys.argv[1:]), "r": r,
        "load_start": load_average(), "machine": f"{os.cpu_count()} cores", "corpora": {},
    }
    for name in corpora.split(","):
        corpus = work_dir / f"{name}.zarr"
        large = name.startswith("synthetic")
        rows = results["corpora"][name] = []
        for seed in [int(s) for s in (large_seeds if large else seeds).split(",")]:
            for dtype in ("float64", "float32"):
                click.echo(f"[{name}] {dtype} seed {seed}", err=True)
                rows.append(_one(corpus, work_dir / f"{name}.{dtype}.model.zarr", r, dtype,
                                 seed, n_init=3 if large else 10))
                output.with_suffix(".json").write_text(json.dumps(results, indent=1))
    results["load_end"] = load_average()
    output.with_suffix(".json").write_text(json.dumps(results, indent=1))
    write_report(results, output)


def write_report(results: dict[str, Any], output: Path) -> None:
    """The Markdown table of every fit, and the means per corpus and dtype."""
    lines = [
        "# float32 against float64 (`sphdist fit --dtype`)", "",
        f"Generated by `{results['command']}` on {results['machine']}, r = {results['r']}; "
        f"load average at start {results['load_start']}, at end {results.get('load_end')}. "
        "Seconds are the whole `sphdist fit` process to the committed model; feasibility "
        "from the stored U and V.", "",
        "| corpus | dtype | seed | s | peak RSS GiB | iterations | objective | "
        "max abs(UᵀU − I) | max abs(‖v_j‖ − 1) | accuracy | NMI |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    means = []
    for name, rows in results["corpora"].items():
        for row in rows:
            if "error" in row:
                lines.append(f"| {name} | {row['dtype']} | {row['seed']} | {row['error']} |")
                continue
            lines.append(
                f"| {name} | {row['dtype']} | {row['seed']} | {row['wall_s']:.1f} | "
                f"{row['peak_rss_gib']:.2f} | {row['n_iter']} | {row['objective']:.6f} | "
                f"{row['orthonormality']:.1e} | {row['unit_norm']:.1e} | "
                f"{row['accuracy']:.4f} | {row['nmi']:.4f} |")
        for dtype in ("float64", "float32"):
            ok = [row for row in rows if row["dtype"] == dtype and "error" not in row]
            if ok:
                means.append(
                    f"| {name} | {dtype} | {len(ok)} | {np.mean([o['wall_s'] for o in ok]):.1f}"
                    f" | {np.mean([o['peak_rss_gib'] for o in ok]):.2f} | "
                    f"{np.mean([o['accuracy'] for o in ok]):.4f} | "
                    f"{np.mean([o['nmi'] for o in ok]):.4f} |")
    lines += ["", "Means over seeds:", "",
              "| corpus | dtype | fits | s | peak RSS GiB | accuracy | NMI |",
              "|---|---|---:|---:|---:|---:|---:|", *means]
    output.with_suffix(".md").write_text("\n".join(lines) + "\n")
    click.echo(output.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
