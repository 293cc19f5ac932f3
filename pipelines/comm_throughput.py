"""What one (k, r) array costs to move between the processes of a LocalCluster: TLS against TCP.

    python pipelines/comm_throughput.py [--rows 45580] [--r 100] [--repeats 4]

A development measurement for issue 29 item 3 (processes against threads). A fit on a
LocalCluster moves U (k x r float64: 36 MB at 1M documents, k = 45,580 occurring features)
from the driver to one worker every pass (``graph.broadcast``), every other worker fetches it
from a peer, and the summed partials of the same size come back to the driver. The embedded
LocalCluster speaks ``tls://`` (``sphdist.jobs.cluster``); this times the three moves on a
2-worker LocalCluster with distributed's temporary TLS credentials and with plain TCP, in
seconds, one JSON line per protocol.
"""

from __future__ import annotations

import json
import os
import time

import click
import numpy as np


def _size(A: np.ndarray) -> int:
    return A.nbytes


def _copy(A: np.ndarray) -> np.ndarray:
    return A + 0.0


def _times(protocol: str, A: np.ndarray, repeats: int) -> dict[str, object]:
    from distributed import Client, LocalCluster
    from distributed.security import Security

    security = Security.temporary() if protocol == "tls" else None
    with LocalCluster(n_workers=2, threads_per_worker=1, protocol=f"{protocol}://",
                      security=security, dashboard_address=None) as cluster, \
            Client(cluster, security=security) as client:
        first, second = sorted(client.nthreads())
        moves: dict[str, list[float]] = {"scatter_s": [], "peer_fetch_s": [], "gather_s": []}
        for _ in range(repeats):
            start = time.perf_counter()
            future = client.scatter(A, workers=[first], hash=False)
            scattered = time.perf_counter()
            client.submit(_size, future, workers=[second], pure=False).result()
            fetched = time.perf_counter()
            client.submit(_copy, future, workers=[first], pure=False).result()
            gathered = time.perf_counter()
            moves["scatter_s"].append(round(scattered - start, 4))
            moves["peer_fetch_s"].append(round(fetched - scattered, 4))
            moves["gather_s"].append(round(gathered - fetched, 4))
    return {"protocol": protocol, "MB": round(A.nbytes / 1e6, 1), **moves,
            "load": os.getloadavg()}


@click.command()
@click.option("--rows", default=45_580, show_default=True)
@click.option("--r", default=100, show_default=True)
@click.option("--repeats", default=4, show_default=True)
def main(rows: int, r: int, repeats: int) -> None:
    A = np.random.default_rng(0).random((rows, r))
    for protocol in ("tls", "tcp"):
        print(json.dumps(_times(protocol, A, repeats)), flush=True)


if __name__ == "__main__":
    main()
