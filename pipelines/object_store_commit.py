"""Time of one checkpoint commit on local disk and in an S3 bucket (issue 16).

The checkpoint is a real one: U after two iterations of ``sphdist fit -r 100`` on the 100k
synthetic corpus (``sphdist synth --n-docs 100000 --n-topics 20``, 2**18 hashed features),
with its histories and idf, as the fit writes it every iteration. It is written with
:func:`sphdist.io.model.save_checkpoint` (arrays, then the commit: a rename locally, the
manifest object and the removal of the previous version in the bucket) ``--repeats`` times to
each target, alternating, and the same whole fit (``--max-iter 3``, a checkpoint every iteration)
is run once to each. The S3 server is moto's, started here on 127.0.0.1 (the loopback has no
network latency: a real bucket adds its round trips, about 10-50 ms each).

Usage::

    python pipelines/object_store_commit.py [--work-dir work/object_store] [--repeats 5]

Writes ``pipelines/results/object_store_commit.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "pipelines" / "results"
SPHDIST = str(Path(sys.executable).with_name("sphdist"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _moto(port: int, log: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_"))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
    )
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/data.json", timeout=1)
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"moto did not start; see {log}")


def _run(*args: str, env: dict[str, str] | None = None) -> float:
    t0 = time.perf_counter()
    subprocess.run([SPHDIST, "--log-level", "warning", *args], check=True, env=env)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, default=REPO / "work" / "object_store")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    work = args.work_dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    corpus = work / "synthetic-100k.zarr"
    if not corpus.exists():
        _run("synth", "--n-docs", "100000", "--n-topics", "20", "--seed", "0", "--format",
             "corpus", "-o", str(corpus))
    fit_args = ["-r", "100", "--tol", "0", "--seed", "0"]
    start = work / "start.zarr"
    if not start.exists():
        _run("fit", "-i", str(corpus), "-o", str(start), *fit_args, "--max-iter", "2")

    port = _free_port()
    server = _moto(port, work / "moto.log")
    bucket = f"sphdist-{uuid.uuid4().hex[:12]}"
    os.environ.update({
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_EC2_METADATA_DISABLED": "true",
    })
    try:
        import fsspec

        from sphdist.io.model import open_model, save_checkpoint

        fsspec.filesystem("s3").mkdir(bucket)
        model = open_model(start)
        state = model.state((model.shape[2],))  # U and the histories (a stateless fit's)
        record = dict(params=model.params, corpus=model.corpus, idf=model.idf)
        targets = {"local disk": str(work / "checkpoint.zarr"),
                   "S3 (moto, loopback)": f"s3://{bucket}/checkpoint.zarr"}
        seconds: dict[str, list[float]] = {name: [] for name in targets}
        for _ in range(args.repeats):
            for name, target in targets.items():
                t0 = time.perf_counter()
                save_checkpoint(target, state, **record)
                seconds[name].append(time.perf_counter() - t0)
        fits = {}
        for name, target in (("local disk", str(work / "fit.zarr")),
                             ("S3 (moto, loopback)", f"s3://{bucket}/fit.zarr")):
            wall = _run("fit", "-i", str(corpus), "-o", target, *fit_args, "--max-iter", "3",
                        "--checkpoint-interval", "0", "--overwrite")
            fitted = open_model(target)
            fits[name] = {"wall_s": wall, "s_per_iteration": fitted.attrs["seconds"]}
    finally:
        server.terminate()
        server.wait(timeout=30)
    load = os.getloadavg()
    m, r = state.U_full.shape
    result = {
        "corpus": str(corpus), "m": m, "r": r,
        "checkpoint_seconds": seconds, "fits": fits, "load_average_end": load,
        "python": sys.version.split()[0],
    }
    (RESULTS / "object_store_commit.json").write_text(json.dumps(result, indent=2))
    lines = [
        "# One checkpoint commit: local disk vs an S3 bucket (issue 16)", "",
        "Command: `python pipelines/object_store_commit.py` (regenerates this file and the "
        ".json). The 100k synthetic corpus, r = 100; U after 2 iterations "
        f"({m:,} x {r}), written by `save_checkpoint` {args.repeats} times to each target in "
        "turn. The S3 server is moto's on 127.0.0.1: no network latency, so a real bucket "
        "adds its round trips.", "",
        f"Load average (1, 5, 15 min) at the end: {[round(x, 2) for x in load]}; 2 cores.", "",
        "| target | median s | min s | max s |", "|---|---:|---:|---:|",
    ]
    for name, values in seconds.items():
        lines.append(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | "
                     f"{max(values):.2f} |")
    lines += ["", "Whole `sphdist fit --max-iter 3` (a checkpoint every iteration, then V):", "",
              "| output | wall s | s per iteration (initialisation first; each with its "
              "checkpoint) |", "|---|---:|---|"]
    for name, fit in fits.items():
        per = ", ".join(f"{x:.2f}" for x in fit["s_per_iteration"])
        lines.append(f"| {name} | {fit['wall_s']:.1f} | {per} |")
    (RESULTS / "object_store_commit.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
