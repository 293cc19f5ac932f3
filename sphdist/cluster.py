"""Connecting to Dask: an existing scheduler by address, or an embedded LocalCluster."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator

from distributed import Client, LocalCluster

from .errors import ParameterError

__all__ = ["connect"]

logger = logging.getLogger("sphdist")


@contextlib.contextmanager
def connect(
    scheduler_address: str | None = None,
    *,
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    memory_limit: str | int = "auto",
    dashboard_address: str = "127.0.0.1:0",
) -> Iterator[Client]:
    """A distributed Client for the duration of a ``with`` block.

    Parameters
    ----------
    scheduler_address : str, optional
        Address of a running scheduler (``tcp://host:port``, ``tls://...``). Default: the
        ``DASK_SCHEDULER_ADDRESS`` environment variable; if neither is set, an embedded
        ``LocalCluster`` is started.
    n_workers : int, optional
        Worker processes of the LocalCluster; default one per core.
    threads_per_worker : int, default 1
        Threads per worker process of the LocalCluster.
    memory_limit : str or int, default "auto"
        Memory limit per worker of the LocalCluster, in bytes or as a string ("4GiB").
    dashboard_address : str, default "127.0.0.1:0"
        Where the LocalCluster's dashboard listens (loopback, a free port).

    Yields
    ------
    distributed.Client
        Registered as the default client, so dask computations run on it.

    Raises
    ------
    ParameterError
        If ``n_workers`` or ``threads_per_worker`` is below 1.
    OSError
        If the scheduler cannot be reached.

    Notes
    -----
    The LocalCluster and everything it listens on bind to 127.0.0.1.
    """
    address = scheduler_address or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if address:
        with Client(address) as client:
            logger.info("connected to scheduler %s (dashboard %s)", address, client.dashboard_link)
            yield client
        return
    if n_workers is not None and n_workers < 1:
        raise ParameterError(f"n_workers must be >= 1, got {n_workers}.")
    if threads_per_worker < 1:
        raise ParameterError(f"threads_per_worker must be >= 1, got {threads_per_worker}.")
    n_workers = n_workers or os.cpu_count() or 1
    with LocalCluster(
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        processes=True,
        memory_limit=memory_limit,
        host="127.0.0.1",
        dashboard_address=dashboard_address,
    ) as cluster, Client(cluster) as client:
        logger.info(
            "started LocalCluster: %d workers x %d threads, dashboard %s",
            n_workers, threads_per_worker, client.dashboard_link,
        )
        yield client
