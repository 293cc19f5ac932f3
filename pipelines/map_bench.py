r"""The map of a collection (issue 42): which layout keeps neighbourhoods, and what it costs.

Two parts, each writing its section of ``pipelines/results/map.md`` (and ``map.json``):

* **neighbourhoods** (``--model``, default the main job's 20 Newsgroups model): the fraction
  of each document's 10 nearest neighbours in r dimensions (the exact 10-NN graph) that are
  among its 10 nearest on the map (:func:`sphdist.metrics.neighbourhood_kept`), in one run,
  for: ``sphdist layout`` (openTSNE on sphdist's 10-NN graph), umap-learn from the same graph
  (``precomputed_knn``), umap-learn with its own NN-descent on V (cosine, 15 neighbours, its
  default) and the first two principal axes of V (``sklearn.decomposition.PCA``); with the
  seconds of each;
* **scale** (``--scale N``, e.g. 100000): a synthetic corpus of N documents (``sphdist synth
  --format corpus``), fitted at r = 50, then ``sphdist layout`` and ``sphdist map`` as a user
  runs them, each in a fresh process under ``/usr/bin/time`` (wall seconds, peak RSS), the
  page's size, and the seconds headless Chromium takes from opening the file to the plot
  having drawn every point (Bokeh's views idle, the WebGL glyph holding N points).

The load average (``uptime``) is recorded with every measurement: the machine is shared.
``--screenshot PNG`` also saves what headless Chromium shows of ``--page`` (default: the main
job's 20 Newsgroups map): the picture in the user guide.

Usage::

    SPHDIST_DATA_HOME=../shared/data .venv/bin/python pipelines/map_bench.py
    .venv/bin/python pipelines/map_bench.py --no-neighbourhoods --scale 100000
    .venv/bin/python pipelines/map_bench.py --no-neighbourhoods \
        --screenshot docs/user-guide/map-newsgroups-20.png   # after pipelines/newsgroups.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import click
import numpy as np

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "pipelines" / "results"


def load() -> str:
    """The load averages, as ``uptime`` prints them."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def compare_layouts(model: Path, work: Path, seed: int) -> dict:
    """Each layout's 10-NN kept, one run (see the module's docstring)."""
    from sklearn.decomposition import PCA

    from sphdist.io.layout import open_layout
    from sphdist.io.model import open_model
    from sphdist.jobs import run
    from sphdist.jobs.layout import LayoutRequest
    from sphdist.metrics import neighbourhood_kept

    rows, start_load = [], load()
    t0 = time.perf_counter()
    report = run(LayoutRequest(model, work / "layout.zarr", seed=seed, exact=True,
                               overwrite=True))
    rows.append({"layout": "sphdist layout (openTSNE, sphdist's 10-NN graph)",
                 "kept_10nn": report["kept_10nn"], "seconds": time.perf_counter() - t0,
                 "of_which_graph_s": report["graph_seconds"]})
    stored = open_layout(work / "layout.zarr")
    graph = stored.read("neighbors").T  # the exact 10-NN graph, (n, 10)
    xy = stored.read("xy").T
    live = np.isfinite(xy).all(axis=1)
    V = np.asarray(open_model(model).V().compute()).T[live]  # (n_live, r)
    where = np.full(graph.shape[0], -1)
    where[np.flatnonzero(live)] = np.arange(live.sum())
    ref = np.where(graph[live] >= 0, where[np.maximum(graph[live], 0)], -1)
    t0 = time.perf_counter()
    P = PCA(2, random_state=seed).fit_transform(V)
    rows.append({"layout": "PCA of V (first two principal axes)",
                 "kept_10nn": neighbourhood_kept(ref, P), "seconds": time.perf_counter() - t0})
    t0 = time.perf_counter()
    import umap  # numba compiles at the first import: timed apart

    import_s = time.perf_counter() - t0
    C = np.array([[float(V[i] @ V[j]) if j >= 0 else -1.0 for j in row]
                  for i, row in enumerate(ref)])
    knn_i = np.hstack([np.arange(len(ref))[:, None], ref])
    knn_d = np.hstack([np.zeros((len(ref), 1)), np.sqrt(np.maximum(0, 2 - 2 * C))])
    for name, kwargs in (
            ("umap-learn, precomputed_knn = sphdist's 10-NN graph",
             {"n_neighbors": 11, "precomputed_knn": (knn_i, knn_d, None)}),
            ("umap-learn, its own NN-descent on V (cosine, 15 neighbours)",
             {"n_neighbors": 15, "metric": "cosine"})):
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Y = umap.UMAP(random_state=seed, **kwargs).fit_transform(V)
        rows.append({"layout": name, "kept_10nn": neighbourhood_kept(ref, Y),
                     "seconds": time.perf_counter() - t0})
    return {"model": str(model), "n_documents": int(graph.shape[0]),
            "n_laid_out": int(live.sum()), "r": int(V.shape[1]), "seed": seed, "rows": rows,
            "umap_import_seconds": import_s, "load_start": start_load, "load_end": load()}


def _timed(args: list, cwd: Path) -> dict:
    """``sphdist ARGS`` in a fresh process under /usr/bin/time: wall seconds, peak RSS."""
    cmd = ["/usr/bin/time", "-f", "%e %M", sys.executable, "-c",
           "from sphdist.cli import main; main()", "--quiet", *map(str, args)]
    before = load()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    wall, rss = proc.stderr.strip().splitlines()[-1].split()
    return {"command": "sphdist " + " ".join(map(str, args)), "seconds": float(wall),
            "peak_rss_mib": int(rss) / 1024, "load": before}


def draw_seconds(page: Path, n: int | None = None, screenshot: Path | None = None) -> float:
    """Seconds from opening ``page`` in headless Chromium to every point drawn.

    ``n``: the points expected (default: as many as the page holds); ``screenshot``: a PNG
    of the drawn page is saved there.
    """
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--window-size=1200,900",
                "--enable-unsafe-swiftshader"):
        options.add_argument(arg)
    # a profile of its own, removed with it (Chromium's own, /tmp/org.chromium.Chromium.*, stays)
    profile = tempfile.TemporaryDirectory(prefix="map_bench-chromium-")
    options.add_argument(f"--user-data-dir={profile.name}")
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        driver.set_network_conditions(offline=True, latency=0, throughput=0)
        t0 = time.perf_counter()
        driver.get(page.as_uri())
        while not driver.execute_script("""
            if (typeof Bokeh === 'undefined' || !Bokeh.documents.length) return false;
            const roots = Object.values(Bokeh.index);
            if (!roots.length || !roots.every(v => v.has_finished())) return false;
            const stack = [...roots];
            while (stack.length) {
              const v = stack.pop();
              if (v.model.name === 'points')
                return v.glyph.data_size === (arguments[0] ?? v.model.data_source.length);
              stack.push(...(v.child_views || []));
              if (v.renderer_views) stack.push(...v.renderer_views.values());
            }
            return false;""", n):
            if time.perf_counter() - t0 > 600:
                raise TimeoutError(f"{page} not drawn in 10 minutes")
            time.sleep(0.05)
        seconds = time.perf_counter() - t0
        if screenshot is not None:
            time.sleep(1)  # the tool bar's icons
            driver.save_screenshot(str(screenshot))
        return seconds
    finally:
        driver.quit()
        profile.cleanup()


def scale(n: int, work: Path, seed: int) -> dict:
    """Synth, fit, then layout and map as a user runs them, at n documents."""
    steps = [
        _timed(["synth", "--n-docs", n, "--n-topics", 20, "--vocab-size", 5000, "--format",
                "corpus", "--seed", seed, "-o", "c.zarr"], work),
        _timed(["fit", "-i", "c.zarr", "-o", "m.zarr", "-r", 50, "--max-iter", 20,
                "--seed", seed], work),
        _timed(["layout", "-m", "m.zarr", "--seed", seed], work),  # the exact graph
        _timed(["map", "-m", "m.zarr", "-o", "map.html"], work),
        _timed(["index", "-m", "m.zarr"], work),
        _timed(["layout", "-m", "m.zarr", "--seed", seed, "-o", "with-index.layout.zarr"],
               work),  # the graph: the index' search
    ]
    from sphdist.io.layout import open_layout

    record = open_layout(work / "m.layout.zarr").record
    indexed = open_layout(work / "with-index.layout.zarr").record
    page = work / "map.html"
    draw = draw_seconds(page, n)
    return {"n_documents": n, "steps": steps, "page_mib": page.stat().st_size / 2**20,
            "draw_seconds": draw, "draw_load": load(),
            **{key: record[key] for key in ("graph_seconds", "layout_seconds", "kept_10nn")},
            "with_index": {key: indexed[key] for key in ("graph_seconds", "layout_seconds",
                                                         "kept_10nn")}}


def markdown(results: dict) -> str:
    lines = ["# The map of a collection (issue 42)", "",
             "Written by `pipelines/map_bench.py` on the 2-core development machine; the load "
             "average (1, 5, 15 min) is recorded with each measurement (a shared machine).", ""]
    nb = results.get("neighbourhoods")
    if nb:
        lines += [
            f"## Which layout keeps neighbourhoods: {nb['model']}", "",
            f"{nb['n_laid_out']} of {nb['n_documents']} documents (those with a direction), "
            f"r = {nb['r']}, seed {nb['seed']}; the reference is the exact 10-NN graph by "
            "cosine in r dimensions. *kept*: the mean fraction of each document's 10 nearest "
            "neighbours that are among its 10 nearest on the map (chance: 10 / n). Load "
            f"{nb['load_start']} at the start, {nb['load_end']} at the end; UMAP's first "
            f"import (numba compiling) took {nb['umap_import_seconds']:.1f} s more.", "",
            "| layout | kept (10-NN) | seconds |", "|---|---:|---:|"]
        for row in nb["rows"]:
            lines.append(f"| {row['layout']} | {row['kept_10nn']:.3f} | {row['seconds']:.1f} |")
        lines += ["", "`sphdist layout` uses openTSNE: it keeps about twice as many of each "
                  "document's neighbours as UMAP from the same graph or from its own "
                  "NN-descent, and needs no numba; it runs on one thread (two give the same "
                  "coordinates, but no time: 56.3 s against 53.8 s at 100,000 documents), "
                  "reproducible from its seed. The seconds are wall seconds on a shared machine "
                  "under the load above: compare them with care.",
                  ""]
    for sc in results.get("scale", []) + results.get("scale_before", []):
        title = f"## {sc['n_documents']:,} documents (synthetic, r = 50)"
        if sc.get("label"):
            title += f": {sc['label']}"
        lines += [title, "", "| step | wall s | peak RSS MiB | load |", "|---|---:|---:|---|"]
        for step in sc["steps"]:
            lines.append(f"| `{step['command']}` | {step['seconds']:.1f} | "
                         f"{step['peak_rss_mib']:.0f} | {step['load']} |")
        if "graph_seconds" in sc:
            lines += ["", f"Of the layout's wall time, the exact 10-NN graph (no index: every "
                      f"chunk of queries against every chunk of documents on Dask, n² r) took "
                      f"{sc['graph_seconds']:.0f} s and openTSNE {sc['layout_seconds']:.0f} "
                      f"s; {100 * sc['kept_10nn']:.0f}% of each document's 10 nearest "
                      "neighbours kept on the map."]
        if "with_index" in sc:
            w = sc["with_index"]
            lines += ["", f"With `sphdist index` first (flat, exact at this size), the graph "
                      f"is the index' search: {w['graph_seconds']:.0f} s, openTSNE "
                      f"{w['layout_seconds']:.0f} s, {100 * w['kept_10nn']:.0f}% kept."]
        lines += ["", f"The page: {sc['page_mib']:.1f} MiB; headless Chromium drew every point "
                  f"{sc['draw_seconds']:.1f} s after opening the file (load "
                  f"{sc['draw_load']}; WebGL in software, SwiftShader: no GPU here).", ""]
    if results.get("scale"):
        lines += [
            "What the draw's seconds were (Chromium's CPU profile of a 100,000-point page, "
            "2026-12-03, Bokeh 3.9.2, load 9-13): about 80% was Bokeh painting the WebGL "
            "scatter twice (once when laid out, once more at the next animation frame), each "
            "paint 2.2-2.6 s of SwiftShader behind `blit_webgl`; decoding the data 0.2 s (x, y "
            "and the neighbours are already binary float32 / int32 arrays, the strings JSON). "
            "Marker size 3 instead of 4, opaque points, square markers, no title, fixed ranges "
            "or a fixed size each left a paint at 2.2-2.6 s: on software WebGL the points' "
            "count, not the page, sets the time of a paint. The second paint was Bokeh's "
            "Legend's (3.9.2): its `after_render` asks the plot for a paint and its "
            "ResizeObserver's first call for a layout, both a full repaint of every point at "
            "the next frame after the plot painted when laid out. Since commit ba29e67 the "
            "legend is HTML under the map (each group's colour beside its name), and the "
            "points are painted once (`tests/test_map_browser.py` counts the paints); nothing "
            "was lost: a legend grouped by a column (`legend_field`) never hid one group on a "
            "click (Bokeh's interactive legends work per renderer), it hid every point. At "
            "load 4 the one paint of 100,000 points took 2.9 s of the 5.2 s, the page laid out "
            "1.5 s after opening (Bokeh's `_actual_paint` timed in the page). The two pages of "
            "one 100,000-document layout (`sphdist map` of the tree before, a2b102d, and of "
            "this one), drawn alternately (`draw_seconds`, 2026-12-03 19:18 UTC, load "
            "1.6-1.9): before 3.83, 3.15, 6.58 s; after 2.16, 2.29, 4.15 s: under the 3 s "
            "target at that load but for the last, not at load 4.", "",
            "What the exact graph's seconds are (commit 88218de; r = 50, blocks of 2,048 "
            "queries x 4,096 documents, one BLAS thread per task, two tasks at once): per "
            "block, the float64 product (dgemm) and the search of each row's k best. The "
            "search took 30-35 ms a block (thread CPU, a block of the 30,000-document model, "
            "load 1-2) and takes 18 ms: the group maxima are one strided reduction "
            "(`reshape(n_q, b, g).max(axis=1)`, 5 ms) instead of b passes, the groups reaching "
            "the bound are gathered by their flat positions, and the survivors (about 10.2 a "
            "row) sorted row by row in a small table instead of one lexsort of every "
            "candidate. The product is written into a buffer each thread reuses: 22 ms "
            "instead of 29 ms, a fresh 64 MiB block page-faulting. The graph is the same bit "
            "for bit (indices and cosines compared as integers at 30,000 and 100,000 "
            "documents; `tests/core/test_neighbors_kernels.py` compares a chunk's k best with "
            "a full sort of the chunk's own product on ties, near-ties, r = 1 and 2). The "
            "graph alone, the tree before (a2b102d) and this one alternately, in one run "
            "(CPU s / wall s, load at the start): 30,000 documents, before 8.7 / 11.5 (4.54), "
            "8.4 / 9.9 (4.72), 8.8 / 16.0 (4.51), after 5.0 / 6.3 (4.79), 5.0 / 6.3 (4.55), "
            "5.5 / 9.9 (4.87); 100,000 documents, after 52.6 / 58.3 (4.96), before 80.9 / "
            "125.2 (4.80); earlier, before 92.5 / 108.9 (1.63), after 51.3 / 74.0 (3.36). "
            "The scheduler keeps both cores busy: at 30,000 documents both threads were "
            "inside a block for 9.1 s of the 11.9 s (load 5.2). `sphdist layout -m m.zarr "
            "--seed 0` at 100,000 documents, the two trees alternately (2026-12-03 "
            "19:07-19:17 UTC; wall s, user + sys CPU s, of which the graph's wall s, load at "
            "the start): before 133.0, 102.8 + 13.5, 95.8 (3.52); after 88.8, 91.3 + 5.0, "
            "50.0 (3.33); after 74.6, 85.5 + 6.0, 39.6 (2.75); before 141.0, 111.6 + 18.5, "
            "93.0 (2.05): the 2-minute target met at load 2-3 (the system CPU is the page "
            "faults of a fresh block each task, gone); coordinates, neighbours and cosines "
            "of the two trees' layouts identical bit for bit.", "",
            "Not adopted: candidates from a float32 product, re-scored in float64. sgemm takes "
            "12 ms a block against dgemm's 22, but a float64 cosine is not a function of its "
            "two vectors alone: it depends on where the pair falls in the BLAS's blocking. On "
            "this machine's OpenBLAS 0.3.31 (SkylakeX kernels), recomputing pairs of a 2,048 x "
            "4,096 product (r = 50) in other shapes changed the last bit of 0.5% (a sub-block "
            "at another offset), 3% (gathered rows, in products of 8 rows) and 80% (one row "
            "at a time: gemv) of them; products of 16 rows matched at r <= 300 but changed 93% "
            "at r = 500 (another kernel): an accident of the tiling, nothing to build on. A "
            "re-scored graph would differ from the dgemm block's in the last bits and, at "
            "exact ties, in its neighbours: not today's graph bit for bit. With the search at "
            "18 ms, it would save at most 10 ms of a 40 ms block.", ""]
    return "\n".join(lines)


@click.command()
@click.option("--model", type=click.Path(path_type=Path),
              default=REPO / "work" / "newsgroups-20" / "model.zarr", show_default=True,
              help="The model whose layouts are compared (the main job writes it).")
@click.option("--neighbourhoods/--no-neighbourhoods", default=True, show_default=True)
@click.option("--scale", "sizes", type=click.IntRange(min=100), multiple=True,
              help="Documents of a synthetic collection to lay out and draw (repeatable).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--work-dir", type=click.Path(path_type=Path), default=None,
              help="Where the stores are written [default: a temporary directory].")
@click.option("--page", type=click.Path(path_type=Path),
              default=REPO / "work" / "newsgroups-20" / "map.html", show_default=True,
              help="The page --screenshot shows.")
@click.option("--screenshot", type=click.Path(path_type=Path),
              help="Save a PNG of --page as headless Chromium draws it (1200 x 900).")
@click.option("--before", metavar="LABEL",
              help="Keep the --scale runs of map.json that these replace, under this label "
                   "(e.g. 'before, commit abc1234'), in their own sections (older ones kept).")
def main(model, neighbourhoods, sizes, seed, work_dir, page, screenshot, before):
    """Compare layouts at 20 Newsgroups, and time layout and page at scale."""
    work = Path(work_dir or tempfile.mkdtemp(prefix="map_bench-"))
    work.mkdir(parents=True, exist_ok=True)
    saved = RESULTS / "map.json"
    results = json.loads(saved.read_text()) if saved.exists() else {}
    saved_runs = results.get("scale", [])
    if neighbourhoods:
        results["neighbourhoods"] = compare_layouts(model, work, seed)
        click.echo(json.dumps(results["neighbourhoods"], indent=1))
    if sizes:
        runs = []
        for n in sizes:
            where = work / f"scale-{n}"
            where.mkdir(exist_ok=True)
            runs.append(scale(n, where, seed))
            click.echo(json.dumps(runs[-1], indent=1))
        results["scale"] = runs
        if before:  # the runs replaced, kept under their label, before the older ones
            results["scale_before"] = ([dict(run, label=before) for run in saved_runs]
                                       + results.get("scale_before", []))
    if screenshot is not None:
        click.echo(f"{page} drawn in {draw_seconds(page, screenshot=screenshot):.1f} s: "
                   f"{screenshot}")
    if neighbourhoods or sizes:
        saved.write_text(json.dumps(results, indent=1) + "\n")
        (RESULTS / "map.md").write_text(markdown(results))


if __name__ == "__main__":
    main()
