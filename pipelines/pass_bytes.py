"""Bytes one pass moves between the processes of a cluster, from distributed's own accounting.

    python pipelines/pass_bytes.py measure --input CORPUS --label before
        [--n-workers 2 --threads-per-worker 1]
        [--fit-args '-r 100 --tol 1e-4 --seed 0 --max-iter 3']
    python pipelines/pass_bytes.py render

Issue 40 item 1. ``measure`` runs ``sphdist fit --input CORPUS --output TMP --n-workers W
--threads-per-worker T FIT_ARGS`` in this process (the CLI, as a user runs it, a LocalCluster of
worker processes) and, around every pass (:func:`sphdist.core.graph.block_pass`), reads what
distributed recorded:

* **U out**: the scheduler's ``nbytes`` of the object the pass scattered (U and its rows,
  :func:`sphdist.core.graph.broadcast`), sent by the driver to one worker;
* every **worker-to-worker transfer**: the workers' ``transfer_incoming_log`` (each entry the
  keys fetched from a peer and their bytes), split by what the keys are: U fetched from the
  worker that received it, partials (a block's result or a running sum of the tree), chunks of
  X, chunks of V, anything else;
* **back to the driver**: the workers' ``transfer_outgoing_log`` entries sent to a party that
  is no worker (the scheduler, gathering the pass's total for the client);
* where each block task ran (the task stream) against the worker the pass placed it on
  (:func:`sphdist.core.graph.block_workers`).

The **floor** (issue 40): each worker receives the rows of U that its blocks touch, once a pass,
and sends back one partial of the rows its blocks touch; ``sum_w 2 k_w r itemsize`` bytes, with
``k_w`` the features (of U's rows) that occur in the chunks of the worker's blocks when the
blocks are split among the workers in runs of consecutive blocks, in proportion to their
threads (:func:`sphdist.core.graph.contiguous_owners`); the (r, r) and scalar partials
(~80 kB at r = 100) are left out. The record (``--results``, JSON lines) keeps every pass; the
report (``.md`` beside it) is rewritten from all records, with the load average before and
after each run, and states each pass's total as "N x the floor".
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "pipelines" / "results" / "pass_bytes.jsonl"
KINDS = ("U", "partials", "X", "V", "other")


def _clear_logs(dask_worker: Any) -> None:
    dask_worker.transfer_incoming_log.clear()
    dask_worker.transfer_outgoing_log.clear()


def _read_logs(dask_worker: Any) -> dict[str, Any]:
    def entries(log: Any) -> list[dict[str, Any]]:
        return [{"who": e["who"], "keys": [[_name(k), int(n or 0)] for k, n in e["keys"].items()]}
                for e in log]

    return {"in": entries(dask_worker.transfer_incoming_log),
            "out": entries(dask_worker.transfer_outgoing_log)}


def _name(key: Any) -> str:
    return json.dumps(list(key)) if isinstance(key, tuple) else str(key)


def _scheduler_nbytes(dask_scheduler: Any, keys: list[str]) -> dict[str, int]:
    return {k: int(dask_scheduler.tasks[k].nbytes or 0) for k in keys if k in dask_scheduler.tasks}


def kind(key: str, scattered: set[str]) -> str:
    """What a transferred key is: one of :data:`KINDS`.

    >>> kind('["sphdist-pass-ab", 3]', set()), kind('["sphdist-sum-cd", 0, 1, 2]', set())
    ('partials', 'partials')
    >>> kind('["sphdist-pass-ab-V", 0, 7]', set()), kind('["sphdist-held-x", 0, 7]', set())
    ('V', 'X')
    >>> kind("finalize-hlgfinalizecompute-01", set())  # the total, as the driver gathers it
    'partials'
    >>> kind("tuple-01", {"tuple-01"})
    'U'
    """
    if key in scattered:
        return "U"
    name = json.loads(key)[0] if key.startswith("[") else key
    if name.endswith("-V"):
        return "V"
    if name.startswith(("sphdist-pass-", "sphdist-sum-", "finalize-")):
        return "partials"
    if name.startswith("sphdist-held-") or "corpus" in name or "from-zarr" in name:
        return "X"
    return "other"


def _count_relays(scheduler: Any, relayed: list[tuple[str, int]]) -> None:
    """Wrap the scheduler's ``scatter`` and ``gather`` handlers to count what they relay.

    The bytes they carry between the client and a worker (a second hop beside the worker's
    own), by the scheduler's nbytes of the keys.
    """
    def nbytes(keys: Any) -> int:
        return sum(int(scheduler.tasks[k].nbytes or 0) for k in keys if k in scheduler.tasks)

    for name in ("scatter", "gather"):
        original = scheduler.handlers[name]

        @functools.wraps(original)
        async def wrapped(*args: Any, _original: Any = original, _name: str = name,
                          **kwargs: Any) -> Any:
            result = await _original(*args, **kwargs)
            keys = result if _name == "scatter" else kwargs.get("keys", ())
            relayed.append((_name, nbytes(keys)))
            return result

        scheduler.handlers[name] = wrapped


class _Recorder:
    """Wraps ``graph.block_pass`` and ``graph._scatter`` of this process; one record a pass."""

    def __init__(self) -> None:
        import sphdist.core.graph as graph

        self.graph, self.passes = graph, []
        self.scattered: dict[str, int] = {}
        self.relayed: list[tuple[str, int]] = []
        self._watched: Any = None
        self._block_pass, self._scatter = graph.block_pass, graph._scatter
        graph.block_pass, graph._scatter = self.block_pass, self.scatter

    def scatter(self, client: Any, A: Any) -> Any:
        future = self._scatter(client, A)
        # asked now: the scheduler forgets the key once the pass that holds it is done
        self.scattered.update(client.run_on_scheduler(_scheduler_nbytes, keys=[future.key]))
        return future

    def block_pass(self, X: Any, U: Any, *args: Any, **kwargs: Any) -> Any:
        from distributed import get_task_stream

        client = self.graph.active_client()
        if client is None:
            return self._block_pass(X, U, *args, **kwargs)
        scheduler = getattr(getattr(client, "cluster", None), "scheduler", None)
        if scheduler is not None and scheduler is not self._watched:  # a LocalCluster's
            _count_relays(scheduler, self.relayed)
            self._watched = scheduler
        client.run(_clear_logs)
        self.scattered.clear()
        self.relayed.clear()
        n_blocks = len(self.graph.pass_blocks(X.chunks[1]))
        owners = self.graph.block_workers(n_blocks)
        start = time.perf_counter()
        with get_task_stream(client) as stream:
            result = self._block_pass(X, U, *args, **kwargs)
        wall = time.perf_counter() - start
        logs = client.run(_read_logs)
        config = kwargs.get("config")
        self.passes.append(self.record(logs, dict(self.scattered), owners, stream.data, wall, U,
                                       getattr(config, "split_every", 8)))
        print(json.dumps({k: v for k, v in self.passes[-1].items() if k != "transfers"}),
              flush=True)
        return result

    def fold_owners(self, owners: list[str], split_every: int) -> dict[tuple, str]:
        """The worker each fold of the tree is placed on, keyed (depth, group, j)."""
        placed, out = list(owners), {}
        for depth, groups in enumerate(self.graph.tree_levels(len(owners), split_every)):
            for g, group in enumerate(groups):
                out.update({(depth, g, j): placed[i] for j, i in enumerate(group)})
            placed = [placed[group[-1]] for group in groups]
        return out

    def record(self, logs: dict[str, Any], u_out: dict[str, int], owners: list[str] | None,
               stream: list[dict[str, Any]], wall: float, U: Any,
               split_every: int) -> dict[str, Any]:
        scattered = set(u_out)
        workers = set(logs)
        between = dict.fromkeys(KINDS, 0)
        back = dict.fromkeys(KINDS, 0)
        transfers = []
        for worker, log in logs.items():
            for entry in log["in"]:
                for key, nbytes in entry["keys"]:
                    between[kind(key, scattered)] += nbytes
                    transfers.append([entry["who"], worker, key, nbytes])
            for entry in log["out"]:
                if entry["who"] in workers:
                    continue  # counted by the receiving worker's incoming log
                for key, nbytes in entry["keys"]:
                    back[kind(key, scattered)] += nbytes
                    transfers.append([worker, "driver", key, nbytes])
        ran, folded = {}, {}
        for task in stream:
            key = task["key"]
            if isinstance(key, tuple) and len(key) == 2 and str(key[0]).startswith(
                    "sphdist-pass-") and not str(key[0]).endswith("-V"):
                ran[int(key[1])] = task["worker"]
            elif isinstance(key, tuple) and str(key[0]).startswith("sphdist-sum-"):
                folded[tuple(key[1:])] = task["worker"]
        fold_owners = self.fold_owners(owners, split_every) if owners else {}
        relayed = {name: sum(n for kind_, n in self.relayed if kind_ == name)
                   for name in ("scatter", "gather")}
        moved = (sum(u_out.values()) + sum(between.values()) + sum(back.values())
                 + relayed["scatter"] + relayed["gather"])
        values = getattr(U, "values", U)
        return {
            "pass": len(self.passes), "wall_s": round(wall, 3),
            "k": int(values.shape[0]), "r": int(values.shape[1]),
            "U_out": sum(u_out.values()), "U_out_relayed": relayed["scatter"],
            "back_relayed": relayed["gather"],
            **{f"between_{k}": v for k, v in between.items()},
            **{f"back_{k}": v for k, v in back.items()},
            "total": moved,
            "blocks": len(ran),
            "blocks_off_owner": (sum(ran[b] != owners[b] for b in ran)
                                 if owners and len(owners) > max(ran, default=-1) else None),
            "folds": len(folded),
            "folds_off_owner": sum(w != fold_owners.get(k, w) for k, w in folded.items()),
            "transfers": transfers,
        }


def floor_bytes(corpus: str, n_workers: int, threads_per_worker: int, r: int,
                itemsize: int = 8) -> dict[str, Any]:
    """The issue's floor: ``sum_w 2 k_w r itemsize`` bytes (module docstring).

    Reads every chunk's indices from the store on this process's threads.
    """
    import dask

    from sphdist.core.graph import contiguous_owners, pass_blocks
    from sphdist.io.corpus import open_corpus

    source = open_corpus(corpus)
    sizes = list(source.chunks)
    blocks = pass_blocks(sizes)
    owners = contiguous_owners(len(blocks), [threads_per_worker] * n_workers)

    def mask(i: int) -> np.ndarray:
        chunk = source.read_chunk(i)
        out = np.zeros(chunk.shape[0], dtype=bool)
        out[chunk.indices] = True
        return out

    masks = dask.compute(*[dask.delayed(mask)(i) for i in range(len(sizes))],
                         scheduler="threads")
    k_w = []
    for w in range(n_workers):
        union = np.zeros_like(masks[0])
        for b, (start, stop) in enumerate(blocks):
            if owners[b] == w:
                for i in range(start, stop):
                    union |= masks[i]
        k_w.append(int(union.sum()))
    k = int(np.logical_or.reduce(masks).sum())
    return {"k": k, "k_per_worker": k_w, "blocks": len(blocks),
            "floor": int(sum(2 * kw * r * itemsize for kw in k_w))}


def _commit() -> str:
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=REPO, capture_output=True, text=True).stdout.strip()

    dirty = "+dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
    return git("rev-parse", "--short", "HEAD") + dirty


def _r_of(fit_args: list[str]) -> int:
    for flag in ("-r", "--n-components"):
        if flag in fit_args:
            return int(fit_args[fit_args.index(flag) + 1])
    raise click.UsageError("--fit-args must give -r")


@click.group()
def cli() -> None:
    """Bytes moved per pass (issue 40 item 1)."""


@cli.command()
@click.option("--input", "corpus", required=True, type=click.Path(exists=True))
@click.option("--label", required=True, help="The row's name in the report (before, after).")
@click.option("--n-workers", default=2, show_default=True)
@click.option("--threads-per-worker", default=1, show_default=True)
@click.option("--fit-args", default="-r 100 --tol 1e-4 --seed 0 --max-iter 3", show_default=True)
@click.option("--results", type=click.Path(path_type=Path), default=RESULTS, show_default=True)
@click.option("--commit", default=None,
              help="The commit measured, when the code runs from an export (git archive).")
def measure(corpus: str, label: str, n_workers: int, threads_per_worker: int, fit_args: str,
            results: Path, commit: str | None) -> None:
    """One fit on a LocalCluster, every pass's bytes recorded; appends to RESULTS, renders."""
    args = shlex.split(fit_args)
    r = _r_of(args)
    load_before = os.getloadavg()
    recorder = _Recorder()
    from sphdist.cli import main as sphdist

    with tempfile.TemporaryDirectory(prefix="pass-bytes-") as tmp:
        start = time.perf_counter()
        try:
            sphdist(["fit", "--input", corpus, "--output", f"{tmp}/model.zarr", "-q",
                     "--n-workers", str(n_workers), "--threads-per-worker",
                     str(threads_per_worker), *args], standalone_mode=False)
        except SystemExit as exc:
            if exc.code:
                raise
        wall = time.perf_counter() - start
    load_after = os.getloadavg()
    floor = floor_bytes(corpus, n_workers, threads_per_worker, r)
    record = {
        "label": label, "commit": commit or _commit(), "corpus": os.path.abspath(corpus),
        "n_docs": None, "shape": f"{n_workers}x{threads_per_worker}", "fit_args": fit_args,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "host": f"{platform.machine()}, {os.cpu_count()} cores",
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after], "fit_wall_s": round(wall, 1),
        **floor, "passes": recorder.passes,
    }
    from sphdist.io.corpus import open_corpus

    record["n_docs"] = int(sum(open_corpus(corpus).chunks))
    results.parent.mkdir(parents=True, exist_ok=True)
    with open(results, "a") as f:
        f.write(json.dumps(record) + "\n")
    write_report(results)


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f}"


def report_rows(record: dict[str, Any]) -> list[str]:
    """One row per pass: MB by kind and the total as a multiple of the floor."""
    rows = []
    floor = record["floor"]
    for p in record["passes"]:
        anything = (p["between_X"] + p["between_V"] + p["between_other"] + p["back_X"]
                    + p["back_V"] + p["back_other"] + p["back_U"])
        u_out = p["U_out"] + p.get("U_out_relayed", 0)
        back = p["back_partials"] + p.get("back_relayed", 0)
        rows.append(
            f"| {record['label']} ({record['commit']}) | {record['n_docs']:,} | "
            f"{record['shape']} | {p['pass']} | {_mb(u_out)} + {_mb(p['between_U'])} | "
            f"{_mb(p['between_partials'])} | {_mb(back)} | {_mb(anything)} | "
            f"{_mb(p['total'])} | {_mb(floor)} | **{p['total'] / floor:.2f}x** | "
            f"{p['blocks_off_owner']} / {p['blocks']}, {p.get('folds_off_owner', '')} / "
            f"{p.get('folds', '')} | {p['wall_s']:.1f} | "
            f"{' / '.join(f'{x:.1f}' for x in record['load_before'])} |")
    return rows


def write_report(results: Path) -> None:
    records = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    out = results.with_suffix(".md")
    lines = [
        "# Bytes one pass moves between processes (issue 40 item 1)",
        "",
        "Generated by `python pipelines/pass_bytes.py measure --input CORPUS --label LABEL "
        "[--n-workers W --threads-per-worker T] [--fit-args ...]` (each run appends to "
        f"`{results.name}`, and this file is rewritten from all of them). Each run is `sphdist "
        "fit --input CORPUS --output MODEL --n-workers W --threads-per-worker T FIT_ARGS` (a "
        "LocalCluster of worker processes speaking TLS, as a user starts it) in the script's "
        "process; per pass, from distributed's own accounting: **U out** = the scheduler's "
        "nbytes of the scattered U (driver to one worker) + U fetched between workers "
        "(the workers' `transfer_incoming_log`); **partials between workers** = block results "
        "and running sums of the tree fetched by a worker from another (incoming logs); "
        "**back to the driver** = what workers sent to a party that is no worker "
        "(`transfer_outgoing_log`: the scheduler gathering the total); **anything else** = "
        "chunks of X or V, or other keys, crossing between workers. Where the client scatters "
        "U or gathers the total through the scheduler (distributed's default for a client "
        "that is not a worker), the scheduler relays the bytes: a second hop, counted in U out "
        "and back to the driver (the scheduler's nbytes of the keys its `scatter` and "
        "`gather` handlers carried). The **floor**: each worker "
        "receives the rows of U its blocks touch and sends back one partial on those rows, "
        "`sum_w 2 k_w r 8` bytes, the blocks split among the workers in runs of consecutive "
        "blocks in proportion to their threads (`k_w` read from the corpus). Blocks off owner: "
        "block tasks that ran on another worker than the one the pass placed them on, and "
        "folds of the tree that ran off the worker they were placed on (task stream). "
        "Pass wall s: the pass under the recorder (task stream and logs on), for orientation "
        "only. MB = 10^6 bytes. Pass 0 is the first pass (after the scan of the "
        "features); the others are iterations.",
        "",
        "| run (commit) | documents | W x T | pass | U out MB (to one worker + between) | "
        "partials between workers MB | back to the driver MB | anything else MB | total MB | "
        "floor MB | total / floor | blocks, folds off owner | pass wall s | "
        "load before (1/5/15 min) |",
        "|---|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---|",
    ]
    for record in records:
        lines += report_rows(record)
    lines += ["", "Runs:", ""]
    for record in records:
        lines.append(
            f"- **{record['label']}** ({record['commit']}, {record['date']}, {record['host']}): "
            f"{record['n_docs']:,} documents, `{record['fit_args']}`, {record['shape']}; k = "
            f"{record['k']:,} features (per worker "
            f"{', '.join(f'{x:,}' for x in record['k_per_worker'])}),"
            f" {record['blocks']} blocks; "
            + (f"fit {record['fit_wall_s']} s; " if record.get("fit_wall_s") else
               "stopped after its last pass shown (the load made each pass take minutes); ")
            + f"load {' / '.join(map(str, record['load_before']))} before"
            + (f", {' / '.join(map(str, record['load_after']))} after." if record.get(
                "load_after") else "."))
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())


@cli.command()
@click.option("--results", type=click.Path(path_type=Path, exists=True), default=RESULTS,
              show_default=True)
def render(results: Path) -> None:
    """Rewrite the report from RESULTS."""
    write_report(results)


if __name__ == "__main__":
    sys.exit(cli())
