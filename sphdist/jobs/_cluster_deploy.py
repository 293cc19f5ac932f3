"""The distributed side of :func:`~sphdist.jobs.cluster.connect`: a Client, or a LocalCluster.

A Client of a scheduler (:func:`join`), or a LocalCluster of worker processes and its Client
(:func:`local_cluster`), each owned by one ``with`` block. It imports ``distributed`` when
it is imported (about 0.4 s): ``connect`` imports it when a job runs on a cluster, so that a
fit on dask's threads never does. Tests replace its ``Client`` and ``LocalCluster`` here,
where they are used.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import dask
from distributed import Client, LocalCluster
from distributed.security import Security

from sphdist.errors import Text, option
from sphdist.io import storage_options
from sphdist.jobs._cluster_losses import no_workers_bound, no_workers_timeout
from sphdist.jobs._cluster_spec import ClusterSpec
from sphdist.jobs._storage_plugin import StorageOptions

__all__ = ["join", "local_cluster"]

logger = logging.getLogger("sphdist")


def _share_storage_options(client: Client) -> None:
    """Give every worker of ``client`` this process' storage options (the object store's)."""
    options = storage_options()
    if options:
        client.register_plugin(StorageOptions(options))


@contextmanager
def join(address: str, security: Security | bool | None) -> Iterator[Client]:
    """A Client of the scheduler at ``address``, which fails tasks that wait without workers."""
    seconds = no_workers_timeout()
    with dask.config.set({  # read by graph.broadcast's scatter too
        "distributed.scheduler.no-workers-timeout": f"{seconds}s",
    }), Client(address, security=security) as client, no_workers_bound(client, seconds):
        logger.info("connected to scheduler %s (dashboard %s)", address, client.dashboard_link)
        _share_storage_options(client)
        yield client


@contextmanager
def local_cluster(
    spec: ClusterSpec, security: Security | bool | None, silence_logs: int,
) -> Iterator[Client]:
    """The LocalCluster of ``spec`` (its ``n_workers`` processes on 127.0.0.1) and its Client.

    ``security``: credentials, False for none, None for temporary ones of its own;
    ``silence_logs``: the level below which the cluster's log records are dropped.
    """
    with dask.config.set({  # a cluster that keeps losing its workers fails, never waits
        "distributed.scheduler.no-workers-timeout": f"{no_workers_timeout()}s",
        "distributed.scheduler.work-stealing": False,  # a pass's placement holds (graph.py)
    }), LocalCluster(
        n_workers=spec.n_workers,
        threads_per_worker=spec.threads_per_worker,
        processes=True,
        memory_limit=spec.memory_limit,
        host="127.0.0.1",
        dashboard_address=spec.dashboard_address,
        security=Security() if security is False else (security or True),
        silence_logs=silence_logs,
    ) as cluster, Client(cluster, direct_to_workers=True) as client:  # U, totals: one hop
        _share_storage_options(client)
        logger.info(
            "started LocalCluster %s: %d workers x %d threads (%s), dashboard %s",
            cluster.scheduler_address, spec.n_workers, spec.threads_per_worker,
            Text(option("n_workers", spec.n_workers)), client.dashboard_link,
        )
        yield client
