"""``dask worker --preload`` module for the fault tests: slow, shuffled chunk reads.

Every read of a corpus chunk sleeps a random time in ``[0, SPHDIST_TEST_READ_DELAY]`` seconds
(default 0), drawn from a generator seeded by the worker's name and process id, so that the
tasks of one pass finish in a different order on every worker and run, and a pass lasts long
enough to kill a process in the middle of it.
"""

from __future__ import annotations

import os
import random
import time
import zlib


def dask_setup(worker) -> None:  # the hook distributed calls on preload
    import sphdist.io._input as corpus  # where a corpus chunk is read

    delay = float(os.environ.get("SPHDIST_TEST_READ_DELAY", "0"))
    if delay <= 0:
        return
    rng = random.Random(zlib.crc32(f"{worker.name}-{os.getpid()}".encode()))
    read = corpus._read_chunk

    def slow_read(*args, **kwargs):
        time.sleep(rng.uniform(0, delay))
        return read(*args, **kwargs)

    corpus._read_chunk = slow_read
