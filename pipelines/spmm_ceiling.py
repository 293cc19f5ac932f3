"""The machine's ceiling for one pass: a bare per-chunk SpMM on 1, 2, ... threads.

    python pipelines/spmm_ceiling.py CORPUS [THREADS]     # THREADS e.g. 2,4,8,16

Every chunk of the corpus (CSC, documents as columns) is read into memory first; then one
bare pass -- each chunk's ``X_c (X_c^T U)`` with a random orthonormal U of all m rows,
r = 100 -- runs on a ``ThreadPoolExecutor`` of n threads, BLAS held to one thread, and is
timed. SciPy's sparse products release the GIL, so this is what the cores and the memory
give a pass with no scheduler, no partials and no reduction: the reference for sphdist's
own pass on n threads (issue 29 item 3; figures in pipelines/results/scaling-16.md). Prints
one JSON line per thread count.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

from sphdist.io.corpus import Corpus


def main(path: str, threads: list[int]) -> None:
    corpus = Corpus(path)
    start = time.perf_counter()
    chunks = [corpus.read_chunk(i) for i in range(corpus.n_chunks)]
    out = {"chunks": len(chunks), "read_s": time.perf_counter() - start}
    U = np.linalg.qr(np.random.RandomState(0).standard_normal((corpus.shape[0], 100)))[0]

    def bare(X_c):
        return X_c @ np.asarray(X_c.T @ U)

    with threadpool_limits(limits=1):
        for n in threads:
            with ThreadPoolExecutor(n) as pool:
                start = time.perf_counter()
                list(pool.map(bare, chunks))
                out[f"threads_{n}_s"] = time.perf_counter() - start
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], [int(t) for t in (sys.argv[2] if len(sys.argv) > 2 else "1,2").split(",")])
