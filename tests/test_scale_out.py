"""Scale out (issue 29 item 1): every block of a pass runs at once on a cluster of many workers.

The pass used to be at most 8 accumulation chains, each task waiting for the previous one of
its chain, so at most 8 pass tasks ever ran at once, on 16 cores or 100 workers alike. Now every
block is its own task, independent of the others, and their partials are summed in a fixed
tree; this counts, on the scheduler, the pass tasks processing at once on 16 one-thread
worker processes, and checks the result bitwise against dask's threads in this process.
"""

import dask
import numpy as np
import pytest

from sphdist.core import graph
from sphdist.io.model import open_model
from sphdist.jobs import run
from sphdist.jobs.cluster import connect
from sphdist.jobs.fit import FitRequest
from sphdist.jobs.synth import SynthRequest

pytestmark = pytest.mark.cluster

N_WORKERS = 16


class _PassTasksProcessing:
    """A scheduler plugin: the most ``sphdist-pass`` block tasks in 'processing' at once."""

    name = "sphdist-count-pass-tasks"

    def __init__(self):
        self.now, self.most = set(), 0

    @staticmethod
    def _is_block(key):
        name = key[0] if isinstance(key, tuple) else str(key)
        return name.startswith("sphdist-pass-") and not name.endswith("-V")

    def transition(self, key, start, finish, *args, **kwargs):
        if not self._is_block(key):
            return
        if finish == "processing":
            self.now.add(key)
            self.most = max(self.most, len(self.now))
        else:
            self.now.discard(key)


def test_every_block_of_a_pass_is_processing_at_once_on_16_workers(tmp_path):
    """40 chunks of 100 documents make 40 blocks (graph.pass_blocks: a block a chunk up to
    32 chunks), as many as the 600k-document corpus of the issue's report gave 19 of, in a
    corpus that is made in a second: what is counted is the width of the graph, not the
    size of its tasks. X is held in the workers' memory, so each pass's blocks are all
    ready when it starts."""
    from distributed import default_client
    from distributed.diagnostics.plugin import SchedulerPlugin

    corpus = tmp_path / "corpus.zarr"
    run(SynthRequest(output=corpus, n_docs=4000, n_topics=5, seed=3, format="corpus",
                     n_features=2**12, chunk_size=100))
    assert len(graph.pass_blocks([100] * 40)) == 40
    kwargs = dict(n_components=4, max_iter=2, tol=0, random_state=0, callback=None)
    # worker processes forked from a fork server that has imported distributed, numpy, pandas
    # (distributed preloads them): 16 spawned workers importing them ran past the start
    # timeout on a loaded 2-core machine; a fork of this process, whose earlier tests left
    # threads running, hung in the full suite
    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}), connect(
        n_workers=N_WORKERS, threads_per_worker=1
    ):
        client = default_client()
        assert len(client.scheduler_info()["workers"]) == N_WORKERS
        plugin = type("Counter", (_PassTasksProcessing, SchedulerPlugin), {})()
        client.cluster.scheduler.add_plugin(plugin)  # the scheduler runs in this process
        wide = run(FitRequest(corpus, tmp_path / "wide.zarr", **kwargs))
    print(f"pass tasks processing at once: {plugin.most}")
    assert plugin.most >= 14, plugin.most  # 8 with the chains of before
    with connect(n_workers=0):
        threads = run(FitRequest(corpus, tmp_path / "threads.zarr", **kwargs))
    assert wide.objective == threads.objective  # every float, bitwise
    np.testing.assert_array_equal(wide.U, threads.U)
    np.testing.assert_array_equal(open_model(tmp_path / "wide.zarr").V().compute(),
                                  threads.V().compute())
