"""Liu et al. 2019, Table 2 on the paper's UCI data under several preprocessing variants.

The paper does not say how it preprocessed glass, diabetes, mfeat and isolet. This runs
``pipelines/liu_table2.py`` on the files of ``<data home>/uci/`` (``$SPHDIST_DATA_HOME``,
default ``../shared/data`` next to the repository; see that folder's README) once per variant:

==============  ====================================  =============================
variant         columns / rows                        liu_table2.py options
==============  ====================================  =============================
minmax+unit     min-max to [0, 1] / unit L2 norm       (the defaults)
minmax          min-max / as they are                  ``--no-unit-rows``
zscore+unit     z-scored / unit L2 norm                ``--scale standard``
zscore          z-scored / as they are                 ``--scale standard --no-unit-rows``
raw+unit        as they are / unit L2 norm             ``--scale none``
raw             as they are / as they are              ``--scale none --no-unit-rows``
==============  ====================================  =============================

Each variant runs in two parts, ``small`` (glass, diabetes, mfeat and — for the variants in
``--single-sets`` — each mfeat feature set alone) and ``isolet``, into
``<runs-dir>/<variant>__<part>/liu_table2.{md,json,png}``, with the load average before and
after in ``load.json``. Then (or with ``--collect-only``, from an existing runs folder) it
writes

- ``liu_table2_variants.md`` / ``.json``: every variant beside the paper's figures, the
  distance to the paper per variant, the repetitions, the load average, and the notes of
  ``--notes`` (hand-written conclusions, default ``pipelines/liu_table2_variants_notes.md``);
- ``liu_table2.md`` / ``.json`` / ``.png``: the default variant's two parts as one table.

Usage (from the repository root; about 35 min on one core)::

    .venv/bin/python pipelines/liu_table2_variants.py
    .venv/bin/python pipelines/liu_table2_variants.py --collect-only --runs-dir DIR
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import _experiments as ex
import click

VARIANTS: dict[str, tuple[str, list[str]]] = {
    "minmax+unit": ("min-max columns, unit rows (liu_table2.py's default)", []),
    "minmax": ("min-max columns, rows as they are", ["--no-unit-rows"]),
    "zscore+unit": ("z-scored columns, unit rows", ["--scale", "standard"]),
    "zscore": ("z-scored columns, rows as they are", ["--scale", "standard", "--no-unit-rows"]),
    "raw+unit": ("columns as they are, unit rows", ["--scale", "none"]),
    "raw": ("columns and rows as they are", ["--scale", "none", "--no-unit-rows"]),
}
DEFAULT = "minmax+unit"
MAIN_FILES = ("glass.csv", "diabetes.csv", "mfeat.csv.gz")
SINGLE_SETS = tuple(f"mfeat-{s}.csv.gz" for s in ("factors", "fourier", "karhunen",
                                                  "morphological", "pixel", "zernike"))
DATA_ORDER = ["glass", "diabetes", "mfeat", "isolet"] + [ex.paper_key(f) for f in SINGLE_SETS]
NOTES = Path(__file__).resolve().parent / "liu_table2_variants_notes.md"


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages, rounded."""
    return [round(x, 2) for x in os.getloadavg()]


def run_variant(variant: str, part: str, files: list[Path], reps: int, runs_dir: Path) -> None:
    """Run liu_table2.py on ``files`` under ``variant`` into ``runs_dir/<variant>__<part>``."""
    out = runs_dir / f"{variant}__{part}"
    cmd = [sys.executable, str(ex.REPO / "pipelines" / "liu_table2.py"), *map(str, files),
           *VARIANTS[variant][1], "--reps", str(reps), "--out-dir", str(out)]
    start = loadavg()
    click.echo(f"{time.strftime('%H:%M:%S')} {out.name}: {reps} reps, load {start}", err=True)
    out.mkdir(parents=True, exist_ok=True)
    with open(runs_dir / f"{out.name}.log", "w") as log:
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT, cwd=ex.REPO)
    ex.write_json(out / "load.json", {"start": start, "end": loadavg()})


def _cell(s: dict | None) -> str:
    return f"{s['acc_mean']:.3f} / {s['nmi_mean']:.3f}" if s and s.get("n") else "–"


def _paper(name: str) -> dict[str, tuple[float, float]]:
    found = ex.liu_table2_paper(name)
    return found[1][1] if found else {}


def _command(md: str, folder: Path, uci: Path) -> str:
    """The run's command line from its markdown, with portable paths."""
    line = next((x for x in md.splitlines() if x.startswith("Command:")), "Command: ``")
    cmd = line[len("Command: "):].strip("`")
    cmd = re.sub(r"\S*/uci/", "$SPHDIST_DATA_HOME/uci/", cmd.replace(str(uci) + "/",
                                                                     "$SPHDIST_DATA_HOME/uci/"))
    return re.sub(r"--out-dir \S+", f"--out-dir <runs-dir>/{folder.name}", cmd)


def collect(runs_dir: Path, out_dir: Path, notes: Path | None, uci: Path,
            t_start: float) -> None:
    """Write the variants table and the default variant's merged table from ``runs_dir``."""
    runs: dict[str, dict] = {}
    folders: dict[str, list[Path]] = {}
    for f in sorted(runs_dir.glob("*/liu_table2.json")):
        variant = f.parent.name.split("__")[0]
        runs.setdefault(variant, {}).update(json.loads(f.read_text()))
        folders.setdefault(variant, []).append(f.parent)
    if not runs:
        raise click.UsageError(f"no */liu_table2.json under {runs_dir}")
    variants = [v for v in VARIANTS if v in runs] + sorted(set(runs) - set(VARIANTS))
    datasets = [d for d in DATA_ORDER if any(d in runs[v] for v in variants)]
    datasets += sorted({d for v in variants for d in runs[v]} - set(datasets))

    def reps(v: str, d: str) -> int:
        return max((s.get("n", 0) for s in runs[v][d]["summary"].values()), default=0)

    L = ["# Liu et al. 2019, Table 2 on the paper's UCI data: every preprocessing variant, "
         "the paper beside", "",
         "Command: `python pipelines/liu_table2_variants.py` (runs `pipelines/liu_table2.py` "
         "per variant; `--collect-only --runs-dir DIR` rebuilds this file from the runs).", "",
         "Each cell: accuracy / NMI, mean over the repetitions (k-means k = classes, 10 "
         "restarts, r = classes, seeds 0..reps-1, data fixed; NMI normalised by the "
         "arithmetic mean of the entropies). Paper: Liu et al. 2019, Table 2 (§5.2). AD, BAE "
         "and Li–Dunson are sphdist's extras, not in the paper. `n/a`: not applicable (NMF "
         "needs X >= 0). The paper does not say which mfeat feature set it used: its mfeat "
         "figures are repeated beside each single set.", "", "Variants:", ""]
    L += [f"- `{v}`: {VARIANTS.get(v, (v,))[0]}" for v in variants] + [""]
    L += ["## Spherical PCA and K-means under every variant", "",
          "| data | method | paper | " + " | ".join(variants) + " |",
          "|---|---|---|" + "---|" * len(variants)]
    for d in datasets:
        for m in ("spca", "kmeans"):
            p = _paper(d).get(m)
            cells = [d, ex.METHODS[m].label, f"{p[0]:.3f} / {p[1]:.3f}" if p else "–"]
            cells += [_cell(runs[v].get(d, {}).get("summary", {}).get(m)) for v in variants]
            L.append("| " + " | ".join(cells) + " |")
    L.append("")
    table: dict = {"variants": {v: VARIANTS.get(v, (v,))[0] for v in variants}, "data": {},
                   "distance": {}, "runs": {}}
    for d in datasets:
        present = [v for v in variants if d in runs[v]]
        first = runs[present[0]][d]
        paper = _paper(d)
        L += [f"## {d} ({first['n_classes']} classes, {first['shape'][0]} x "
              f"{first['shape'][1]}, r = {first['r']})", "",
              "| method | paper |" + "".join(f" {v} ({reps(v, d)} reps) |" for v in present),
              "|---|---|" + "---|" * len(present)]
        entry = table["data"][d] = {"n_classes": first["n_classes"], "shape": first["shape"],
                                    "r": first["r"], "paper": paper or None, "ours": {}}
        for m in ex.METHODS:
            if not any(m in runs[v][d]["summary"] for v in present):
                continue
            p = paper.get(m)
            cells = [ex.METHODS[m].label, f"{p[0]:.3f} / {p[1]:.3f}" if p else "–"]
            for v in present:
                s = runs[v][d]["summary"].get(m)
                cells.append(_cell(s) if s and s.get("n") else "n/a")
                if s and s.get("n"):
                    entry["ours"].setdefault(v, {})[m] = {
                        k: s[k] for k in ("acc_mean", "acc_std", "nmi_mean", "nmi_std", "n",
                                          "seconds") if k in s}
            L.append("| " + " | ".join(cells) + " |")
        L.append("")
    L += ["## Distance to the paper", "",
          "Mean absolute difference from the paper, accuracy / NMI, over the paper's six "
          "methods (lower = nearer; single mfeat sets against the paper's mfeat row).", "",
          "| data | " + " | ".join(variants) + " |", "|---|" + "---:|" * len(variants)]
    for d in datasets:
        paper = _paper(d)
        if not paper:
            continue
        cells = [d]
        for v in variants:
            s = runs[v].get(d, {}).get("summary", {})
            ms = [m for m in ex.PAPER_METHODS if s.get(m, {}).get("n")]
            if not ms:
                cells.append("–")
                continue
            da = sum(abs(s[m]["acc_mean"] - paper[m][0]) for m in ms) / len(ms)
            dn = sum(abs(s[m]["nmi_mean"] - paper[m][1]) for m in ms) / len(ms)
            cells.append(f"{da:.3f} / {dn:.3f}")
            table["distance"].setdefault(d, {})[v] = {"acc": da, "nmi": dn,
                                                      "n_methods": len(ms)}
        L.append("| " + " | ".join(cells) + " |")
    L += ["", "## Runs: commands, repetitions, wall time and load average", "",
          "Single BLAS thread, Dask's synchronous scheduler (`liu_table2.py`); load average "
          "(1, 5, 15 min) of the machine before and after each run.", "",
          "| run | reps | wall time | load before | load after | command |",
          "|---|---:|---:|---|---|---|"]
    for v in variants:
        for folder in folders[v]:
            md = (folder / "liu_table2.md").read_text()
            wall = re.search(r"Total wall time (\d+) s", md)
            load_file = folder / "load.json"
            load = json.loads(load_file.read_text()) if load_file.exists() else {}
            n = max(reps(v, d) for d in json.loads((folder / "liu_table2.json").read_text()))
            cmd = _command(md, folder, uci)
            L.append(f"| `{folder.name}` | {n} | {wall.group(1) + ' s' if wall else '?'} | "
                     f"{load.get('start', '?')} | {load.get('end', '?')} | `{cmd}` |")
            table["runs"][folder.name] = {"reps": n, "command": cmd, "load": load,
                                          "wall_seconds": int(wall.group(1)) if wall else None}
    L += ["", f"Collected in {time.perf_counter() - t_start:.0f} s. {ex.environment()}.", ""]
    if notes is not None and notes.exists():
        L += [notes.read_text()]
    ex.write_text(out_dir / "liu_table2_variants.md", "\n".join(L))
    ex.write_json(out_dir / "liu_table2_variants.json", table)
    click.echo("\n".join(L))
    if DEFAULT in runs:
        write_default(folders[DEFAULT], runs[DEFAULT], out_dir, uci)


def write_default(folders: list[Path], results: dict, out_dir: Path, uci: Path) -> None:
    """The default variant's parts as one ``liu_table2.md/.json/.png``."""
    import liu_table2

    order = [d for d in DATA_ORDER if d in results] + [d for d in results
                                                       if d not in DATA_ORDER]
    results = {d: results[d] for d in order}
    walls = []
    for folder in folders:
        md = (folder / "liu_table2.md").read_text()
        wall = re.search(r"Total wall time (\d+) s", md)
        load_file = folder / "load.json"
        load = json.loads(load_file.read_text()) if load_file.exists() else {}
        walls.append(f"`{_command(md, folder, uci)}` ({wall.group(1) + ' s' if wall else '?'}; "
                     f"load average {load.get('start', '?')} before, {load.get('end', '?')} "
                     "after)")
    reps = sorted({max(s.get("n", 0) for s in r["summary"].values()) for r in results.values()})
    lines = ["# Liu et al. 2019, Table 2 on the paper's UCI data (liu_table2.py's defaults), "
             "ours vs the paper", "",
             "Command: `python pipelines/liu_table2_variants.py` (variant `minmax+unit`); it ran",
             ""] + [f"- {w}" for w in walls] + [
             "", "Columns min-max scaled, rows to unit L2 norm, r = number of classes; k-means "
             "with k = number of classes, 10 restarts; repetitions "
             f"{' or '.join(map(str, reps))} (see each table; seeds 0..reps-1, data fixed). "
             f"K-SVD with T0 = {ex.KSVD_T0}. Mean ± sample std. Other preprocessing variants, "
             "and where and why ours differ from the paper: "
             "[liu_table2_variants.md](liu_table2_variants.md).", ""]
    for d in order:
        res = results[d]
        n = max(x.get("n", 0) for x in res["summary"].values())
        key, paper = ex.liu_table2_paper(d) or (None, None)
        source = re.sub(r"^.*/uci/", "$SPHDIST_DATA_HOME/uci/", res["path"])
        lines += [f"## {d} ({res['n_classes']} classes, {res['shape'][0]} samples x "
                  f"{res['shape'][1]} features, r = {res['r']})", "",
                  f"Source: `{source}`. Paper's figures: "
                  f"{'Table 2, ' + key if paper else 'none (not a paper data set)'}.", ""]
        lines += ex.score_table(res["summary"], paper[1] if paper else None, n) + [""]
    lines += [ex.environment() + ".", ""]
    lines += ["![Table 2](liu_table2.png)", ""]
    ex.write_text(out_dir / "liu_table2.md", "\n".join(lines))
    ex.write_json(out_dir / "liu_table2.json", results)
    liu_table2.plot(results, out_dir / "liu_table2.png")


@click.command()
@click.option("--variants", default=",".join(VARIANTS), show_default=True,
              help="Comma-separated variants to run.")
@click.option("--reps", type=click.IntRange(min=1), default=10, show_default=True,
              help="Repetitions on glass, diabetes and mfeat.")
@click.option("--isolet-reps", type=click.IntRange(min=1), default=2, show_default=True,
              help="Repetitions on isolet, except for the default variant.")
@click.option("--default-isolet-reps", type=click.IntRange(min=1), default=5,
              show_default=True, help="Repetitions on isolet for the default variant.")
@click.option("--single-sets", default="minmax+unit,minmax,zscore+unit,zscore",
              show_default=True,
              help="Variants that also run each mfeat feature set alone ('' for none).")
@click.option("--runs-dir", type=click.Path(path_type=Path),
              default=ex.REPO / "work" / "liu_table2_variants", show_default=True,
              help="Where the liu_table2.py runs are written (or read, --collect-only).")
@click.option("--collect-only", is_flag=True,
              help="Run nothing; build the tables from the runs in --runs-dir.")
@click.option("--notes", type=click.Path(path_type=Path), default=NOTES, show_default=True,
              help="Hand-written conclusions appended to liu_table2_variants.md.")
@click.option("--out-dir", type=click.Path(path_type=Path), default=ex.RESULTS,
              show_default=True)
def main(variants, reps, isolet_reps, default_isolet_reps, single_sets, runs_dir,
         collect_only, notes, out_dir):
    """Run liu_table2.py on the paper's UCI files per preprocessing variant; merge the tables."""
    t_start = time.perf_counter()
    uci = ex.data_home() / "uci"
    if not collect_only:
        chosen = [v.strip() for v in variants.split(",") if v.strip()]
        unknown = sorted(set(chosen) - set(VARIANTS))
        if unknown:
            raise click.BadParameter(f"unknown {unknown}; choose from {list(VARIANTS)}",
                                     param_hint="--variants")
        missing = [f for f in (*MAIN_FILES, *SINGLE_SETS, "isolet.csv.gz")
                   if not (uci / f).exists()]
        if missing:
            raise click.UsageError(f"not in {uci}: {', '.join(missing)} (set "
                                   "SPHDIST_DATA_HOME to the folder holding uci/)")
        singles = {v.strip() for v in single_sets.split(",")}
        for v in chosen:
            files = [uci / f for f in MAIN_FILES + (SINGLE_SETS if v in singles else ())]
            run_variant(v, "small", files, reps, runs_dir)
            run_variant(v, "isolet", [uci / "isolet.csv.gz"],
                        default_isolet_reps if v == DEFAULT else isolet_reps, runs_dir)
    collect(runs_dir, out_dir, notes, uci, t_start)


if __name__ == "__main__":
    main()
