"""The report of ``pipelines/benchmark.py``: tables, the issue's targets, and the plot.

:func:`write_report` writes ``<stem>.md`` and ``<stem>.json`` from the results of a run (it is
called after every job, so an interrupted run keeps what it measured); :func:`plot` writes
``<stem>.png``; :func:`targets` states each target of issue 13 with the figure measured and
whether it was met.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PEERS = ("sklearn", "gensim", "bae")
PEER_NAMES = {"sklearn": "scikit-learn TruncatedSVD + normalize", "gensim": "gensim LsiModel",
              "bae": "sphdist BAE"}


def _f(x: Any, nd: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return f"{x:.{nd}f}"


def _mb(x: Any) -> str:
    return "-" if x is None else f"{x / 1e6:.1f}"


def ok(entry: dict[str, Any] | None) -> bool:
    """Whether a job's entry holds a result (not absent, not an error)."""
    return bool(entry) and "error" not in entry


def _max(xs: list[float] | None) -> float | None:
    return max(xs) if xs else None


def _docs(c: dict[str, Any]) -> int | None:
    return c.get("ingest", {}).get("n_documents")


def bare_ratios(c: dict[str, Any], s: dict[str, Any] | None = None
                ) -> tuple[float | None, float | None]:
    """Mean seconds per iteration (of ``s``, default the default fit) over the bare pass."""
    s, b = s or c.get("sphdist"), c.get("bare")
    if not (ok(s) and ok(b)) or s.get("s_per_iter") is None:
        return None, None
    return s["s_per_iter"] / b["bare_all_rows_s"], s["s_per_iter"] / b["bare_occurring_rows_s"]


def with_workers(c: dict[str, Any]) -> dict[str, Any]:
    """The fit of a corpus that ran on worker processes: the default one, or the forced one."""
    for job in ("sphdist", "sphdist_cluster"):
        if ok(c.get(job)) and c[job].get("n_workers_seen"):
            return c[job]
    return {}


FIT_JOBS = ("sphdist", "sphdist_streamed", "sphdist_cluster")


def fits(corpora: dict[str, Any]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``(row label, corpus entry, fit entry)`` of every fit: the default, then the forced ones."""
    rows = []
    for name, c in corpora.items():
        for job in FIT_JOBS:
            if c.get(job):
                forced = " ".join(c[job].get("command", [])[-2:])
                rows.append((name if job == "sphdist" else f"{name} (`{forced}`)", c, c[job]))
    return rows


def _verdict(met: bool | None) -> str:
    return {True: "**met**", False: "**missed**", None: "not measured"}[met]


def _time_target(name: str, c: dict[str, Any], bound: float) -> dict[str, Any]:
    s, sk = c.get("sphdist"), c.get("peers", {}).get("sklearn")
    ratio = s["wall_s"] / sk["wall_s"] if ok(s) and ok(sk) else None
    conv = "" if not ok(s) else ("" if s.get("converged") else
                                 f" (not converged: stopped at {s.get('n_iter')} iterations)")
    return {
        "target": f"time to a converged embedding <= {bound:.1f}x scikit-learn TruncatedSVD, "
                  f"{name} (start-up included)",
        "figure": None if ratio is None else (
            f"{ratio:.2f}x ({s['wall_s']:.1f} s vs {sk['wall_s']:.1f} s){conv}"),
        "met": None if ratio is None else bool(ratio <= bound and s.get("converged")),
    }


def placement(entry: dict[str, Any] | None) -> str:
    """The fit's log line saying whether X was held in memory or streamed, and its budget."""
    return next((line for line in (entry or {}).get("log_head", [])
                 if "memory budget" in line), "")


def x_gib(c: dict[str, Any]) -> float | None:
    """X's size in memory (CSC values, indices, pointers; ``stored_nbytes``), GiB."""
    ing = c.get("ingest", {})
    if not ing.get("nnz"):
        return None
    return (12 * ing["nnz"] + 8 * (ing["n_documents"] + ing["n_chunks"])) / 2**30


def _peak(entry: dict[str, Any] | None) -> float | None:
    """The largest peak RSS of any one process of a job, GiB."""
    if not ok(entry):
        return None
    return max([entry["driver_peak_rss_gib"], *entry.get("worker_peak_rss_gib", [])])


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each target of issue 21 with the figure measured and met / missed / not measured."""
    corpora = results["corpora"]
    out: list[dict[str, Any]] = [
        _time_target(name, corpora.get(name, {}), bound)
        for name, bound in (("synthetic-100k", 0.5), ("synthetic-250k", 0.5),
                            ("synthetic-1000k", 0.5), ("20newsgroups-vocabulary", 1.0))
    ]
    for name, c in corpora.items():
        if not name.startswith("synthetic") or (_docs(c) or 0) < 250_000 or not ok(c.get("bare")):
            continue
        _, r_occ = bare_ratios(c)
        out.append({
            "target": f"one iteration <= 0.6x a single-core bare pass on the occurring rows, "
                      f"{name}",
            "figure": None if r_occ is None else (
                f"{r_occ:.2f} ({c['sphdist']['s_per_iter']:.2f} s per iteration, checkpoint "
                f"included, vs {c['bare']['bare_occurring_rows_s']:.2f} s)"),
            "met": None if r_occ is None else bool(r_occ <= 0.6),
        })
    small = _peak(corpora.get("synthetic-100k", {}).get("sphdist_streamed"))
    large_c = corpora.get("synthetic-10000k", {})
    large = _peak(large_c.get("sphdist")) if "streamed" in placement(
        large_c.get("sphdist")) else None
    out.append({
        "target": "peak RSS of every process on the streamed path at 10M <= 1.1x that at 100k",
        "figure": None if not (small and large) else
        f"{large / small:.2f}x ({large:.2f} GiB vs {small:.2f} GiB, `--memory-budget 0` at 100k)",
        "met": None if not (small and large) else bool(large / small <= 1.1),
    })
    held = []
    for name, c in corpora.items():
        s, st = c.get("sphdist"), c.get("sphdist_streamed")
        line = placement(s)
        if ok(s) and ok(st) and "held" in line:
            budget = line.split("memory budget of ")[-1].split(" (")[0]
            held.append(f"{name}: peak {_peak(s) - _peak(st):.2f} GiB above the streamed fit's "
                        f"for {x_gib(c):.2f} GiB of X, budget {budget}")
    out.append({
        "target": "in-memory path never above its budget (X held <= --memory-budget)",
        "figure": "; ".join(held) or None, "met": bool(held) or None,
    })
    ten = corpora.get("synthetic-10000k", {}).get("sphdist")
    out.append({
        "target": "10M documents fit on this machine with the defaults",
        "figure": None if not ok(ten) else (
            f"{ten['wall_s'] / 60:.1f} min, {ten.get('n_iter')} iterations"
            f"{' (converged)' if ten.get('converged') else ''}, peak RSS {_peak(ten):.2f} GiB"),
        "met": None if ten is None else bool(ok(ten) and ten.get("converged")),
    })
    startup = results.get("startup")
    out.append({
        "target": "`sphdist --help` <= 0.5 s at load below 2",
        "figure": None if not startup else (
            f"{startup['median_s']:.2f} s median of {len(startup['seconds'])} "
            f"(load {startup['load_before'][0]:.2f})"),
        "met": None if not startup else bool(startup["median_s"] <= 0.5),
    })
    out.append({"target": "resume after a kill bitwise, results bitwise across thread counts, "
                          "worker counts and schedulers, objective never rises",
                "met": None,
                "figure": "checked by the test suite (tests/test_faults.py, "
                          "tests/core/test_solver.py), not by this benchmark"})
    return out


def _peer_cells(peer: dict[str, Any] | None, s: dict[str, Any]) -> list[str]:
    if peer is None:
        return ["not run", "-"]
    if "error" in peer:
        err = peer["error"]
        return [err if err.startswith("not run") else f"failed: {err}", "-"]
    t, mem = peer["wall_s"], peer["summed_peak_rss_gib"]
    return [f"{t:.1f} s ({t / s['wall_s']:.2f}x)",
            f"{mem:.2f} GiB ({mem / s['summed_peak_rss_gib']:.2f}x)"]


def _load1(entry: dict[str, Any] | None) -> str:
    return "-" if not entry or "load_before" not in entry else f"{entry['load_before'][0]:.2f}"


def _corpus_rows(corpora: dict[str, Any]) -> list[str]:
    rows = ["| corpus | documents | features (occurring) | nnz | chunks | ingest s | "
            "ingest peak RSS GiB | built by |", "|---|---|---|---|---|---|---|---|"]
    for name, c in corpora.items():
        ing, b = c.get("ingest", {}), c.get("bare", {})
        if "error" in ing:
            rows.append(f"| {name} | failed: {ing['error']} |||||||")
            continue
        occ = f" ({b['occurring_features']})" if ok(b) else ""
        rows.append(
            f"| {name} | {ing.get('n_documents')} | {ing.get('n_features')}{occ} | "
            f"{ing.get('nnz')} | {ing.get('n_chunks')} | {_f(ing.get('wall_s'), 1)} | "
            f"{_f(ing.get('summed_peak_rss_gib'))} | `sphdist {' '.join(ing['command'])}`"
            f"{' (cached)' if ing.get('cached') else ''} |")
    return rows


def _fit_rows(corpora: dict[str, Any]) -> list[str]:
    rows = ["| corpus | scheduler (the fit's log line) | s to committed model | iterations | "
            "init s | s/iteration mean (median) | bare pass s, all rows / occurring rows | "
            "iteration / bare, all rows / occurring rows |", "|---|---|---|---|---|---|---|---|"]
    for name, c, s in fits(corpora):
        b = c.get("bare", {})
        if "error" in s:
            rows.append(f"| {name} | failed: {s['error']} |||||||")
            continue
        r_all, r_occ = bare_ratios(c, s)
        bare = (f"{b['bare_all_rows_s']:.2f} / {b['bare_occurring_rows_s']:.2f}" if ok(b)
                else b.get("error", "-"))
        rows.append(
            f"| {name} | {s.get('scheduler') or '-'} | {s['wall_s']:.1f} | {s.get('n_iter')}"
            f"{' (converged)' if s.get('converged') else ' (not converged)'} | "
            f"{_f(s.get('init_s'))} | {_f(s.get('s_per_iter'))} "
            f"({_f(s.get('s_per_iter_median'))}) | {bare} | {_f(r_all)} / {_f(r_occ)} |")
    return rows


def _memory_rows(corpora: dict[str, Any], r: int) -> list[str]:
    rows = ["| corpus | workers (alive at once / started) | worker peak RSS GiB (each) | "
            "driver peak RSS GiB | summed peak RSS GiB | simultaneous peak GiB | "
            "checkpoint MB / iteration (written) | first checkpoint MB | committed checkpoint MB | "
            "8 m_occ r MB | final write MB | total written MB | model.zarr MB |", "|---" * 13 + "|"]
    for name, c, s in fits(corpora):
        b = c.get("bare", {})
        if not ok(s):
            continue
        u_bytes = 8 * b["occurring_features"] * r if ok(b) else None
        rows.append(
            f"| {name} | {s.get('max_workers_alive', '-')} / {s['n_workers_seen']} | "
            f"{', '.join(_f(w) for w in s['worker_peak_rss_gib']) or '-'} | "
            f"{_f(s['driver_peak_rss_gib'])} | {_f(s['summed_peak_rss_gib'])} | "
            f"{_f(s['simultaneous_peak_rss_gib'])} | "
            f"{_mb(s.get('checkpoint_bytes_per_iteration'))} | "
            f"{_mb(s.get('first_checkpoint_bytes'))} | "
            f"{_mb(s.get('committed_checkpoint_bytes'))} | {_mb(u_bytes)} | "
            f"{_mb(s.get('final_write_bytes'))} | {_mb(s.get('total_write_bytes'))} | "
            f"{_mb(s.get('model_bytes'))} |")
    return rows


def _peer_rows(corpora: dict[str, Any], peers: list[str]) -> list[str]:
    head = "| corpus | sphdist s | sphdist summed peak RSS GiB | " + " | ".join(
        f"{PEER_NAMES[p]} s | {PEER_NAMES[p]} peak RSS" for p in peers) + " |"
    rows = [head, "|" + "---|" * (3 + 2 * len(peers))]
    for name, c in corpora.items():
        s = c.get("sphdist")
        if not ok(s):
            continue
        cells = [f"{s['wall_s']:.1f}", f"{s['summed_peak_rss_gib']:.2f}"]
        for p in peers:
            cells += _peer_cells(c.get("peers", {}).get(p), s)
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return rows


def _load_rows(corpora: dict[str, Any], peers: list[str]) -> list[str]:
    jobs = ["ingest", "bare", "sphdist", *peers]
    rows = ["| corpus | " + " | ".join(jobs) + " |", "|" + "---|" * (1 + len(jobs))]
    for name, c in corpora.items():
        entries = [c.get(j) if j in ("ingest", "bare", "sphdist") else c.get("peers", {}).get(j)
                   for j in jobs]
        rows.append(f"| {name} | " + " | ".join(
            "cached" if j == "ingest" and e and e.get("cached") else _load1(e)
            for j, e in zip(jobs, entries, strict=True)) + " |")
    return rows


DEFINITIONS = [
    "*s to committed model*: wall seconds of the `sphdist fit` process, from its start to its "
    "exit with model.zarr committed (interpreter start, cluster start, every checkpoint and the "
    "final write included). *iterations*, *init s* and *s/iteration* are read from the model "
    "(`n_iter`, the `seconds` history: entry 0 is the initialisation). *bare pass*: one "
    "single-process, one-thread SciPy pass `A = X_c^T U`, `X_c A^T` over the same chunks (read "
    "time excluded), with U of all m rows (the floor of the earlier benchmark) and with U and "
    "X_c restricted to the rows of the features that occur in the corpus.",
    "*peak RSS*: every process of a job's tree is polled every 0.2 s (psutil for the tree, "
    "`VmHWM` of `/proc/<pid>/status` for the peak, which the kernel keeps exactly); *workers* "
    "are the multiprocessing children of the fit (a LocalCluster's worker processes; 0 when the "
    "fit ran in one process; more started than alive at once means a worker was restarted, and "
    "each process is counted); *summed peak RSS* is the sum of every process's peak (driver, "
    "workers and helpers), *simultaneous peak* the largest sum of current RSS seen at one poll.",
    "*checkpoint MB / iteration*: bytes the fit's processes wrote to storage (`write_bytes` of "
    "`/proc/<pid>/io`, summed over the tree) between consecutive iteration lines of the fit's "
    "log (one checkpoint and one iteration's other writes each), median over the checkpoints "
    "after the first (checkpoint 0, *first checkpoint*, also holds what the initialisation "
    "writes). *committed "
    "checkpoint MB*: size of model.zarr on disk at the iteration lines from 2 on (the last "
    "committed checkpoint, 1 and later), median. *8 m_occ r*: the bytes of U on the occurring "
    "features' rows. "
    "*final write*: bytes written after the last iteration line (last checkpoint, final V, "
    "commit). *total written*: `ru_oublock` of the fit's process tree from `wait4`.",
    "Peers are each one whole process reading the same corpus.zarr (time and peak RSS of the "
    "process, reading X included); the ratios are peer / sphdist. dask-ml's TruncatedSVD was "
    "dropped: it cannot take a dask array of scipy.sparse chunks (`IndexError: Index dimension "
    "must be 1 or 2. Got 0` on 100k, 250k and 20 Newsgroups in the earlier benchmark).",
]


def write_report(results: dict[str, Any], out: Path) -> None:
    """Write ``out.md`` and ``out.json`` (atomically) from the results of a run."""
    from sphdist.io import atomic_path

    corpora, peers = results["corpora"], results["peers"]
    lines = [
        "# sphdist at scale: `sphdist fit` as a user runs it, its peers, and the targets of "
        "issue 21", "",
        f"Generated by `{results['command']}` (commit {results.get('commit', '?')}) started "
        f"{results['started']} on {results['machine']}. r = {results['r']}; `sphdist fit "
        f"--input corpus.zarr --output model.zarr -r {results['r']}"
        f"{' ' + ' '.join(results['fit_args']) if results['fit_args'] else ''}` with every other "
        "option at its default (tol 1e-4, a checkpoint a minute). Load average (1, 5, 15 "
        f"min) at start {results['load_start']}, at end {results.get('load_end', '(running)')}; "
        "the 1-minute load before each job is in the last table. Every job ran in its own "
        "process tree, one at a time.", "",
        "## Targets", "",
        *[f"- {t['target']}: {t['figure'] or '-'}: {_verdict(t['met'])}"
          for t in targets(results)],
        "", "## Corpora", "", *_corpus_rows(corpora),
        "", "## sphdist fit: time", "", *_fit_rows(corpora),
        "", "## sphdist fit: memory and bytes written", "", *_memory_rows(corpora, results["r"]),
        "", "## Peers (time and summed peak RSS; in brackets the ratio peer / sphdist)", "",
        *_peer_rows(corpora, peers),
        "", "## Load average (1 min) before each job", "", *_load_rows(corpora, peers),
        "", "## Definitions", "",
    ]
    for text in [*DEFINITIONS, *results.get("notes", [])]:
        lines += [text, ""]
    with atomic_path(out.with_suffix(".md")) as tmp:
        tmp.write_text("\n".join(lines))
    with atomic_path(out.with_suffix(".json")) as tmp:
        tmp.write_text(json.dumps(results, indent=1))


def _series(synth: list[tuple[int, dict[str, Any]]], get: Any) -> tuple[list, list]:
    pts = []
    for n, c in synth:
        try:
            y = get(c)
        except (KeyError, TypeError):
            continue
        if y is not None:
            pts.append((n, y))
    return [p[0] for p in pts], [p[1] for p in pts]


def plot(results: dict[str, Any], out: Path) -> None:
    """Write ``out.png``: time, peak RSS and checkpoint bytes against documents (synthetic)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sphdist.io import atomic_path

    synth = sorted((_docs(c), c) for name, c in results["corpora"].items()
                   if name.startswith("synthetic") and ok(c.get("sphdist")) and _docs(c))
    if not synth:
        return
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(15, 4.4))
    ax1.plot(*_series(synth, lambda c: c["sphdist"]["wall_s"]), "o-",
             label="sphdist fit, s to committed model")
    ax1.plot(*_series(synth, lambda c: c["sphdist"]["s_per_iter"]), "o--", label="s/iteration")
    ax1.plot(*_series(synth, lambda c: c["bare"]["bare_all_rows_s"]), "s:",
             label="bare SpMM pass, all rows")
    ax1.plot(*_series(synth, lambda c: c["bare"]["bare_occurring_rows_s"]), "s:",
             label="bare SpMM pass, occurring rows")
    for peer, marker in zip(results["peers"], "^vD", strict=False):
        ax1.plot(*_series(synth, lambda c, p=peer: c["peers"][p]["wall_s"]), marker + "-.",
                 label=PEER_NAMES[peer])
    ax2.plot(*_series(synth, lambda c: _max(with_workers(c).get("worker_peak_rss_gib"))), "o-",
             label="sphdist max worker peak (a LocalCluster fit)")
    ax2.plot(*_series(synth, lambda c: c["sphdist"]["driver_peak_rss_gib"]), "s-",
             label="sphdist driver peak")
    ax2.plot(*_series(synth, lambda c: c["sphdist"]["summed_peak_rss_gib"]), "o--",
             label="sphdist summed peaks")
    ax2.plot(*_series(synth, lambda c: _peak(c.get("sphdist_streamed"))), "x-",
             label="sphdist peak, X streamed (--memory-budget 0)")
    for peer, marker in zip(results["peers"], "^vD", strict=False):
        ax2.plot(*_series(synth, lambda c, p=peer: c["peers"][p]["summed_peak_rss_gib"]),
                 marker + "-.", label=PEER_NAMES[peer])
    ax3.plot(*_series(synth, lambda c: c["sphdist"]["checkpoint_bytes_per_iteration"] / 1e6),
             "o-", label="written per iteration")
    ax3.plot(*_series(synth, lambda c: c["sphdist"]["committed_checkpoint_bytes"] / 1e6), "s--",
             label="committed checkpoint on disk")
    for ax, title, unit in ((ax1, "time", "seconds"), (ax2, "peak RSS", "GiB"),
                            (ax3, "checkpoint bytes", "MB")):
        ax.set_xscale("log")
        ax.set_xlabel("documents")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.legend(fontsize=7)
    ax1.set_yscale("log")
    ax2.set_ylim(bottom=0)
    ax3.set_ylim(bottom=0)
    fig.suptitle(f"sphdist fit (CLI, defaults) and peers, r = {results['r']}, "
                 f"2**18 hashed features, synthetic corpora")
    fig.tight_layout()
    with atomic_path(out.with_suffix(".png")) as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)


def merge(results: dict[str, Any], more: dict[str, Any]) -> list[str]:
    """Add to ``results`` the corpora and jobs of ``more`` that ``results`` lacks or failed."""
    added = []
    for name, entry in more["corpora"].items():
        mine = results["corpora"].setdefault(name, {"peers": {}})
        for job in ("ingest", "bare", "sphdist", "sphdist_cluster"):
            if ok(entry.get(job)) and not ok(mine.get(job)):
                mine[job] = entry[job]
                added.append(f"{name} {job}")
        for peer, res in entry.get("peers", {}).items():
            if ok(res) and not ok(mine.setdefault("peers", {}).get(peer)):
                mine["peers"][peer] = res
                added.append(f"{name} {peer}")
    for peer in more.get("peers", []):
        if peer not in results["peers"]:
            results["peers"].append(peer)
    if added:
        results.setdefault("notes", []).append(
            f"Measured in the run started {more['started']} (load at start "
            f"{more['load_start']}) and merged: {', '.join(added)}.")
    return added

