"""Thread scaling of the pass kernel: 1 -> 2 threads, and where the GIL is held.

On one machine ``sphdist fit`` runs its passes on dask's threaded scheduler: two threads, each
running :func:`sphdist.core.kernels.pass_block` on its own block of chunks. Two threads finish
twice the work of one in the same time only where the kernel releases the GIL. This measures,
on chunks of a stored corpus restricted to their occurring features (as the fit's iterations
are), the kernel and each of its steps, with the same total work done by one thread and by two
threads (each on half of the chunks):

* ``pass_block`` -- the whole kernel (V-step, ``X V^T`` and ``V V^T`` partials);
* ``U^T X`` -- SciPy's ``csr @ dense`` (``X_c.T @ U``);
* ``X V^T`` -- SciPy's ``csc_matvecs`` accumulating into one array (:func:`spmm_accumulate`);
* ``V-step`` -- NumPy: ``q / ||q||`` (:func:`sphdist.core.kernels.v_step`);
* ``V V^T`` -- BLAS on one thread per task;
* ``renumber`` -- NumPy fancy indexing of the chunk's rows (:func:`partials.renumber`);
* ``fused (numba)`` -- for comparison, one compiled loop doing ``U^T x_j``, the normalisation
  and ``x_j v_j^T`` per document without the GIL (numba: the ``bench`` extra); its partial is
  checked against ``pass_block``'s.

Speed-up = one thread's seconds for the whole list of chunks / two threads' seconds for the
same list split in two (2.0: the step never holds the GIL). Run from the repository root::

    .venv/bin/python pipelines/thread_scaling.py work/bench/synthetic-100k.zarr

It writes ``pipelines/results/thread_scaling.{md,json}``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import click
import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def _fused_kernel() -> Any:
    import numba

    @numba.njit(nogil=True, cache=False)
    def fused(indptr, indices, data, U, XVt, V):  # pragma: no cover - compiled
        n = indptr.size - 1
        r = U.shape[1]
        a = np.empty(r)
        for j in range(n):
            a[:] = 0.0
            for p in range(indptr[j], indptr[j + 1]):
                i, x = indices[p], data[p]
                for t in range(r):
                    a[t] += x * U[i, t]
            s = 0.0
            for t in range(r):
                s += a[t] * a[t]
            norm = np.sqrt(s)
            for t in range(r):
                a[t] /= norm
            V[:, j] = a
            for p in range(indptr[j], indptr[j + 1]):
                i, x = indices[p], data[p]
                for t in range(r):
                    XVt[i, t] += x * a[t]

    return fused


def _timed(func: Any, work: list[Any], n_threads: int, repeat: int) -> float:
    """Best wall seconds of ``func`` over ``work``, split into ``n_threads`` contiguous parts."""
    parts = [work[i::n_threads] for i in range(n_threads)]
    best = np.inf
    for _ in range(repeat):
        threads = [threading.Thread(target=func, args=(part,)) for part in parts]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        best = min(best, time.perf_counter() - t0)
    return best


@click.command()
@click.argument("corpus", type=click.Path(exists=True, path_type=Path))
@click.option("-r", "--n-components", "r", default=100, show_default=True)
@click.option("--n-chunks", default=16, show_default=True, help="Chunks read into memory.")
@click.option("--repeat", default=3, show_default=True, help="Best of this many runs.")
@click.option("--output", type=click.Path(path_type=Path), default=RESULTS / "thread_scaling")
def main(corpus: Path, r: int, n_chunks: int, repeat: int, output: Path) -> None:
    """Measure 1- and 2-thread seconds of the pass kernel and its steps on CORPUS."""
    from threadpoolctl import threadpool_limits

    from sphdist.core import kernels, partials
    from sphdist.io.corpus import Corpus

    source = Corpus(corpus)
    full = [source.read_chunk(i) for i in range(min(n_chunks, source.n_chunks))]
    features = np.flatnonzero(partials.occurring(full))
    chunks = partials.renumber(full, features)
    k = features.size
    U = kernels.random_orthonormal(k, r, np.random.RandomState(0))
    As = [np.ascontiguousarray(np.asarray(c.T @ U).T) for c in chunks]
    Vs = [kernels.v_step(A, None, 2.0)[0] for A in As]
    fused = _fused_kernel()

    def run_fused(part: list[Any]) -> None:
        XVt = np.zeros((k, r))
        for c in part:
            fused(c.indptr, c.indices, c.data, U, XVt, np.empty((r, c.shape[1])))

    steps = {
        "pass_block": lambda part: kernels.pass_block([chunks[i] for i in part], U,
                                                      keep_V=False),
        "U^T X (SciPy csr @ dense)": lambda part: [np.asarray(chunks[i].T @ U) for i in part],
        "X V^T (SciPy csc_matvecs)": lambda part: [
            partials.spmm_accumulate(chunks[i], Vs[i].T, np.zeros((k, r))) for i in part],
        "V-step (NumPy)": lambda part: [kernels.v_step(As[i], None, 2.0) for i in part],
        "V V^T (BLAS)": lambda part: [Vs[i] @ Vs[i].T for i in part],
        "renumber (NumPy indexing)": lambda part: [
            partials.renumber([full[i]], features) for i in part],
        "fused (numba, nogil)": lambda part: run_fused([chunks[i] for i in part]),
    }
    # the fused kernel gives pass_block's partial, bitwise here
    XVt = np.zeros((k, r))
    for c in chunks:
        fused(c.indptr, c.indices, c.data, U, XVt, np.empty((r, c.shape[1])))
    ref = partials.densify(kernels.pass_block(chunks, U, keep_V=False)["XVt"])
    work = list(range(len(chunks)))
    rows = []
    with threadpool_limits(limits=1, user_api="blas"):
        for name, func in steps.items():
            one = _timed(func, work, 1, repeat)
            two = _timed(func, work, 2, repeat)
            rows.append({"step": name, "one_thread_s": one, "two_threads_s": two,
                         "speedup": one / two})
            click.echo(f"{name}: {one:.3f} s / {two:.3f} s = {one / two:.2f}x", err=True)
    result = {
        "command": "python pipelines/thread_scaling.py " + " ".join(sys.argv[1:]),
        "corpus": str(corpus), "chunks": len(chunks), "documents": sum(c.shape[1] for c in chunks),
        "nnz": int(sum(c.nnz for c in chunks)), "occurring_features": int(k), "r": r,
        "load": list(os.getloadavg()), "fused_max_abs_diff": float(np.abs(XVt - ref).max()),
        "rows": rows,
    }
    output.with_suffix(".json").write_text(json.dumps(result, indent=1))
    lines = [
        "# Thread scaling of the pass kernel (1 -> 2 threads)", "",
        f"Generated by `{result['command']}`: {result['chunks']} chunks of `{corpus.name}` "
        f"({result['documents']:,} documents, {result['nnz']:,} nonzeros, "
        f"{k:,} occurring features), r = {r}, best of {repeat}; the same work on one thread "
        "and split over two; 1-minute load average "
        f"{result['load'][0]:.2f}. Speed-up 2.0 = the step never holds the GIL; 1.0 = it "
        "holds it throughout.", "",
        "| step | 1 thread s | 2 threads s | speed-up |", "|---|---:|---:|---:|",
        *(f"| {row['step']} | {row['one_thread_s']:.3f} | {row['two_threads_s']:.3f} | "
          f"{row['speedup']:.2f} |" for row in rows),
        "", f"The fused kernel's X V^T differs from pass_block's by at most "
        f"{result['fused_max_abs_diff']:.1e} (max abs).",
    ]
    output.with_suffix(".md").write_text("\n".join(lines) + "\n")
    click.echo(output.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
