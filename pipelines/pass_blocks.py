"""How many blocks a pass should have: sphdist's own pass, timed on n threads, per block count.

    python pipelines/pass_blocks.py CORPUS [--threads 2,16] [--blocks 32,64,128] [--passes 3]

A development experiment for issue 29 item 3 (not a user path: the benchmark of that is
``benchmark.py scaling``). The corpus is read into memory once (the fit's held path); then,
for every value of :data:`sphdist.core.graph.PASS_BLOCKS` (the blocks a pass offers, about
``n_chunks / PASS_BLOCKS`` chunks each), ``--passes`` passes of
:func:`sphdist.core.graph.block_pass` -- the fit's own graph, partials and tree, U a random
orthonormal (k, r) on the k occurring features, r = 100, ``lam = 2`` -- run on dask's threaded
scheduler with n threads, every thread of the process pinned to the first n cores. Prints one
JSON line per (blocks, threads): the blocks, the passes' wall seconds, the process's CPU
seconds per pass, and a digest of the summed partials (the same for every thread count of
one block count: the bits depend on the blocks, never on the threads).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import time

import click
import dask
import numpy as np

from sphdist.core import graph, kernels
from sphdist.core.params import FitConfig
from sphdist.core.partials import RowSparse
from sphdist.io.corpus import Corpus


def _pin(n: int) -> None:
    """Every thread of this process on the first n cores."""
    cores = sorted(os.sched_getaffinity(0) | set(range(os.cpu_count() or 1)))[:n]
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:
            pass


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@click.command()
@click.argument("corpus")
@click.option("--threads", default="2,16", show_default=True)
@click.option("--blocks", default="32,64,128", show_default=True)
@click.option("--passes", default=3, show_default=True)
def main(corpus: str, threads: str, blocks: str, passes: int) -> None:
    X = Corpus(corpus).to_dask().persist(scheduler="threads")
    config = FitConfig.build(n_components=100)
    rows = np.flatnonzero(graph.occurring_features(X, config.split_every))
    U = RowSparse(rows, kernels.random_orthonormal(rows.size, 100, np.random.RandomState(0)),
                  (X.shape[0], 100))
    for n_blocks in [int(b) for b in blocks.split(",")]:
        graph.PASS_BLOCKS = n_blocks
        for n in [int(t) for t in threads.split(",")]:
            _pin(n)
            walls, cpus, digest = [], [], None
            with dask.config.set(scheduler="threads", num_workers=n):
                for _ in range(passes):
                    _pin(n)
                    wall, cpu = time.perf_counter(), _cpu()
                    _, total = graph.block_pass(X, U, None, lam=2.0, config=config,
                                                keep_V=False)
                    walls.append(time.perf_counter() - wall)
                    cpus.append(_cpu() - cpu)
                    digest = hashlib.sha256(np.asarray(total["XVt"].values).tobytes()).hexdigest()
            print(json.dumps({
                "pass_blocks": n_blocks, "tasks": len(graph.pass_blocks(X.chunks[1])),
                "threads": n, "wall_s": [round(w, 3) for w in walls],
                "cpu_s": [round(c, 3) for c in cpus], "XVt_sha256": digest[:16],
                "load": os.getloadavg(),
            }), flush=True)


if __name__ == "__main__":
    main()
