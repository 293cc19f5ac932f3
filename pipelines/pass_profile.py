"""Where one fit's iterations spend their wall time: the driver's serial part against the pass.

    python pipelines/pass_profile.py -- fit --input CORPUS --output MODEL -r 100 [...]

A development measurement for issue 29 item 3 (the user path's figure is ``benchmark.py
scaling``). Runs ``sphdist fit`` with the given arguments in this process and prints one JSON
line per pass: the driver's CPU seconds inside the iteration (``time.thread_time`` of the main
thread: the U-step, the graph, the scheduling -- the part no core count shortens), the wall
seconds from the pass's start to its first block task, the span of its tasks, and from its
last task to the pass's end; on a distributed cluster also the seconds the workers spent
transferring and (de)serialising, from distributed's task stream.
"""

from __future__ import annotations

import functools
import json
import sys
import time

from dask.callbacks import Callback

import sphdist.core.graph as graph
import sphdist.core.kernels as kernels
import sphdist.core.solver as solver

CPU: dict[str, float] = {}
PASSES: list[dict] = []


def _cpu(mod, name):
    func = getattr(mod, name)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        start = time.thread_time()
        try:
            return func(*args, **kwargs)
        finally:
            CPU[name] = CPU.get(name, 0.0) + time.thread_time() - start
    setattr(mod, name, wrapper)


class _Tasks(Callback):
    def __init__(self):
        self.started, self.spans = {}, []

    def _pretask(self, key, dsk, state):
        self.started[key] = time.perf_counter()

    def _posttask(self, key, result, dsk, state, worker_id):
        name = key[0] if isinstance(key, tuple) else str(key)
        self.spans.append((name, self.started.pop(key, None), time.perf_counter()))


TASKS = _Tasks()
_block_pass = graph.block_pass


def _profiled_pass(*args, **kwargs):
    cpu, wall = time.thread_time(), time.perf_counter()
    client = graph.active_client()
    TASKS.spans.clear()
    if client is None:
        result = _block_pass(*args, **kwargs)
        end = time.perf_counter()
        spans = [(s, e) for name, s, e in TASKS.spans if s is not None]
        blocks = [e - s for name, s, e in TASKS.spans
                  if s is not None and name.startswith("sphdist-pass-")]
        extra = {}
    else:
        from distributed import get_task_stream
        with get_task_stream(client) as stream:
            result = _block_pass(*args, **kwargs)
        end = time.perf_counter()
        offset = time.time() - time.perf_counter()
        spans, blocks, kinds = [], [], {}
        for task in stream.data:
            for ss in task["startstops"]:
                kinds[ss["action"]] = kinds.get(ss["action"], 0.0) + ss["stop"] - ss["start"]
                if ss["action"] == "compute":
                    spans.append((ss["start"] - offset, ss["stop"] - offset))
                    key = str(task["key"])
                    if "sphdist-pass-" in key and "sum" not in key:
                        blocks.append(ss["stop"] - ss["start"])
        extra = {"worker_seconds": {k: round(v, 3) for k, v in kinds.items()}}
    first = min(s for s, _ in spans) if spans else end
    last = max(e for _, e in spans) if spans else end
    PASSES.append({
        "pass": len(PASSES), "wall_s": round(end - wall, 3),
        "driver_cpu_s": round(time.thread_time() - cpu, 3),
        "to_first_task_s": round(first - wall, 3), "tasks_span_s": round(last - first, 3),
        "after_last_task_s": round(end - last, 3), "block_tasks": len(blocks),
        "block_s_mean": round(sum(blocks) / max(len(blocks), 1), 3),
        "block_s_max": round(max(blocks, default=0.0), 3), **extra,
    })
    print(json.dumps(PASSES[-1]), flush=True)
    return result


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] == "--":
        args = args[1:]
    for mod, name in [(solver, "iterate"), (kernels, "polar_factor"), (graph, "pass_graph")]:
        _cpu(mod, name)
    graph.block_pass = _profiled_pass
    TASKS.register()
    from sphdist.cli import main as cli
    start = time.perf_counter()
    try:
        cli(args, standalone_mode=False)
    except SystemExit:
        pass
    iters = max(len(PASSES) - 1, 1)
    print(json.dumps({"summary": True, "wall_s": round(time.perf_counter() - start, 2),
                      "driver_cpu_per_iteration_s": {k: round(v / iters, 4)
                                                     for k, v in CPU.items()}}), flush=True)


if __name__ == "__main__":
    main()
