r"""Issue 30's benchmark: ``sphdist fit --device cuda``, the CPU fit, a CuPy randomized SVD.

The same synthetic corpora (2**18 hashed features), r = 100. Run by
``pipelines/gpu_check.sh`` on the GPU machine (it needs CuPy and a CUDA device)::

    python pipelines/gpu_benchmark.py --sizes 1000000,10000000 --cpu-sizes 1000000 \
        --budget-s 420 --output pipelines/results/gpu.md

Per size: the corpus (``sphdist synth --format corpus``, 65,536 documents a chunk, timed
apart), the whole ``sphdist fit --device cuda`` as a user runs it (a process: interpreter
start, reading corpus.zarr, every checkpoint and the final write included; ``--json`` gives
iterations and seconds per iteration), the device's peak memory while it ran (``nvidia-smi``
polled every 0.2 s: every process on the GPU, so the fit's peak plus whatever else was
there), the CPU fit of the same corpus (``--device cpu``, all cores) where ``--cpu-sizes``
asks, and the peer: a randomized SVD (Halko et al. 2011, Alg. 4.4, ``n_iter`` 5, 10
oversamples) in CuPy of the same X held on the device, timed after X is there. A size whose
estimate (the previous size's synth, GPU fit and SVD, scaled by the documents) exceeds what
is left of ``--budget-s`` is skipped and said so: run it alone then
(``GPU_SIZES=10000000 GPU_CPU_SIZES= bash pipelines/gpu_check.sh``). A measurement that
fails (no CuPy, out of memory, past the budget) is a note and dashes in its row. Targets
(issue 30): 10M fit <= 60 s of iterations and <= 3 min whole; 1M <= 15 s whole; iterations
<= 1.5x the randomized SVD's time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SPHDIST = [sys.executable, "-c", "import sys; from sphdist.cli import main; sys.exit(main())"]


def sphdist(*args: str, timeout: float) -> tuple[float, str]:
    """Run ``sphdist ARGS`` as a process; (wall seconds, stdout). Raises on failure."""
    t0 = time.perf_counter()
    done = subprocess.run([*SPHDIST, *args], capture_output=True, text=True, timeout=timeout)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"sphdist {' '.join(args)}: {done.stderr.strip()[-2000:]}")
    return seconds, done.stdout


class GpuMemory:
    """Peak of ``nvidia-smi``'s memory.used (MiB) while the block runs, polled every 0.2 s."""

    def __enter__(self) -> GpuMemory:
        self.peak, self._stop = 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                    capture_output=True, text=True, timeout=5).stdout
                self.peak = max(self.peak, int(out.split()[0]))
            except Exception:
                pass
            self._stop.wait(0.2)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def fit(corpus: Path, model: Path, device: str, r: int, timeout: float) -> dict[str, Any]:
    """The whole ``sphdist fit`` of ``corpus`` on ``device``: wall s, iterations, objective."""
    with GpuMemory() as mem:
        seconds, out = sphdist("--quiet", "fit", "--input", str(corpus), "--output", str(model),
                               "-r", str(r), "--device", device, "--overwrite", "--json",
                               timeout=timeout)
    report = json.loads(out)
    from sphdist.io.model import open_model

    m = open_model(model)
    history = np.asarray(m.attrs.get("seconds") or [], dtype=float)
    return {"whole_s": seconds, "n_iter": report["n_iter"], "converged": report["converged"],
            "objective": float(m.objective[-1]),
            "iterations_s": float(history[1:].sum()) if history.size > 1 else float("nan"),
            "s_per_iteration": report["seconds_per_iteration"], "gpu_peak_mib": mem.peak}


def randomized_svd_s(corpus: Path, r: int, n_iter: int = 5, oversamples: int = 10) -> float:
    """Seconds of a CuPy randomized SVD of X (m, n) held on the device (Halko Alg. 4.4)."""
    import cupy
    import cupyx.scipy.sparse as csp
    import dask
    import scipy.sparse as sp

    from sphdist.io.corpus import open_input

    X = open_input(corpus).to_dask()
    X = sp.hstack(dask.compute(*X.to_delayed().ravel()), format="csr")
    Xd = csp.csr_matrix(X)
    Xt = Xd.T.tocsr()
    del X
    cupy.cuda.Device().synchronize()
    t0 = time.perf_counter()
    rng = cupy.random.default_rng(0)
    Q = Xd @ rng.standard_normal((Xd.shape[1], r + oversamples))
    Q, _ = cupy.linalg.qr(Q)
    for _ in range(n_iter):
        Q, _ = cupy.linalg.qr(Xt @ Q)
        Q, _ = cupy.linalg.qr(Xd @ Q)
    B = (Xt @ Q).T
    _, _, _ = cupy.linalg.svd(B, full_matrices=False)
    cupy.cuda.Device().synchronize()
    seconds = time.perf_counter() - t0
    del Xd, Xt, Q, B
    cupy.get_default_memory_pool().free_all_blocks()
    return seconds


def measure(row: dict[str, Any], notes: list[str], key: str, what: str, func: Any,
            *args: Any, **kwargs: Any) -> None:
    """``row[key] = func(...)``; a failure is a result too: None, and said in ``notes``."""
    try:
        row[key] = func(*args, **kwargs)
    except Exception as exc:
        row[key] = None
        last = (str(exc).strip().splitlines() or [""])[-1][:400]
        notes.append(f"{row['n']:,} documents, {what}: {type(exc).__name__}: {last}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--cpu-sizes", default="1000000")
    parser.add_argument("-r", type=int, default=100)
    parser.add_argument("--budget-s", type=float, default=420.0)
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/sphdist-gpu-bench"))
    parser.add_argument("--output", type=Path, default=REPO / "pipelines/results/gpu.md")
    args = parser.parse_args()
    start = time.perf_counter()

    def left_s() -> float:
        return max(args.budget_s - (time.perf_counter() - start), 1.0)

    sizes = [int(s) for s in args.sizes.split(",") if s]
    cpu_sizes = {int(s) for s in args.cpu_sizes.split(",") if s}
    args.work_dir.mkdir(parents=True, exist_ok=True)
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    rows, notes, last_cost, last_n = [], [], None, None
    for n in sizes:
        left = args.budget_s - (time.perf_counter() - start)
        estimate = None if last_cost is None else last_cost * n / last_n
        if estimate is not None and estimate > left:
            notes.append(f"{n:,} documents skipped: about {estimate:.0f} s estimated "
                         f"(from {last_n:,}), {left:.0f} s of the budget left")
            continue
        t_size = time.perf_counter()
        corpus = args.work_dir / f"synth-{n}.zarr"
        synth_s, _ = sphdist("--quiet", "synth", "--n-docs", str(n), "--n-topics", "20",
                             "--seed", "0", "--format", "corpus", "--n-features", "262144",
                             "--chunk-size", "65536", "-o", str(corpus), "--overwrite",
                             timeout=max(left, 1))
        row: dict[str, Any] = {"n": n, "synth_s": synth_s}
        measure(row, notes, "cuda", "sphdist fit --device cuda", fit, corpus,
                args.work_dir / f"gpu-{n}.zarr", "cuda", args.r, timeout=left_s())
        measure(row, notes, "svd_s", "CuPy randomized SVD", randomized_svd_s, corpus, args.r)
        # what the next size repeats (its CPU fit only if asked): synth, GPU fit, SVD
        last_cost, last_n = time.perf_counter() - t_size, n
        if n in cpu_sizes:
            measure(row, notes, "cpu", "sphdist fit --device cpu", fit, corpus,
                    args.work_dir / f"cpu-{n}.zarr", "cpu", args.r, timeout=left_s())
        rows.append(row)
        write(args.output, gpu, rows, notes, args)
    write(args.output, gpu, rows, notes, args)


def write(path: Path, gpu: str, rows: list[dict[str, Any]], notes: list[str], args: Any) -> None:
    """The results page: one row per size, the targets, and what was skipped."""
    lines = [
        "# `sphdist fit --device cuda` (issue 30)", "",
        f"Generated by `python pipelines/gpu_benchmark.py --sizes {args.sizes} --cpu-sizes "
        f"{args.cpu_sizes} --budget-s {args.budget_s:g}` (run by `pipelines/gpu_check.sh`) on "
        f"{gpu}, {os.cpu_count()} CPU cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}."
        f" r = {args.r}; synthetic corpora of 2**18 hashed features, 65,536 documents a chunk.",
        "",
        "| documents | synth s | GPU fit whole s | GPU iterations | GPU s of iterations | "
        "GPU s/iteration | GPU peak MiB | CuPy randomized SVD s | iterations / SVD | "
        "CPU fit whole s | CPU iterations | CPU s/iteration | objective GPU / CPU - 1 |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        g, c, svd = row.get("cuda"), row.get("cpu"), row.get("svd_s")
        gpu_cols = (f"{g['whole_s']:.1f} | {g['n_iter']}"
                    f"{' (converged)' if g['converged'] else ''} | {g['iterations_s']:.1f} | "
                    f"{g['s_per_iteration']:.2f} | {g['gpu_peak_mib']}"
                    ) if g else "- | - | - | - | -"
        svd_cols = (f"{svd:.2f} | " + (f"{g['iterations_s'] / svd:.2f}" if g else "-")
                    ) if svd else "- | -"
        cpu_cols = (f"{c['whole_s']:.1f} | {c['n_iter']} | {c['s_per_iteration']:.2f} | " + (
            f"{g['objective'] / c['objective'] - 1:.1e}" if g else "-")) if c else "- | - | - | -"
        lines.append(f"| {row['n']:,} | {row['synth_s']:.1f} | {gpu_cols} | {svd_cols} | "
                     f"{cpu_cols} |")
    lines += ["", "Targets: 10M fit <= 60 s of iterations and <= 180 s whole; 1M <= 15 s whole; "
              "iterations <= 1.5x the randomized SVD.", ""]
    lines += [f"- {note}" for note in notes]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
