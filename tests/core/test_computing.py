"""A failed computation on dask's threads returns only once its running tasks have finished,
so a job's cleanup of a staging directory never races a task still writing into it."""

import threading
import time

import dask
import dask.array as da
import numpy as np
import pytest

from sphdist.core import graph


class _Boom(Exception):
    pass


def test_a_failed_compute_waits_for_the_tasks_still_running(tmp_path):
    started = threading.Event()
    written = tmp_path / "written-by-the-slow-task"

    def block(x, block_info=None):
        if block_info[0]["chunk-location"][0] == 0:
            started.wait(10)  # fail only once the slow sibling runs
            raise _Boom
        started.set()
        time.sleep(0.5)
        written.write_text("late")  # what a chunk writing into a staging directory does
        return x

    x = da.zeros(2, chunks=1).map_blocks(block, dtype=float)
    with dask.config.set(scheduler="threads", num_workers=2), pytest.raises(_Boom):
        with graph.computing():
            x.compute()
    # the caller's cleanup runs here: the slow task has finished, not still writing
    assert written.exists()


def test_computing_gives_the_same_values_and_turns_fusion_off():
    x = da.arange(10, chunks=3) ** 2
    with graph.computing():
        assert dask.config.get("optimization.fuse.active") is False
        np.testing.assert_array_equal(x.compute(), np.arange(10) ** 2)
