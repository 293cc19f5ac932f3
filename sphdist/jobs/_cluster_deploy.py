"""The distributed side of :func:`~sphdist.jobs.cluster.connect`: a Client, or a LocalCluster.

A Client of a scheduler (:func:`join`), or a LocalCluster of worker processes and its Client
(:func:`local_cluster`), each owned by one ``with`` block. It imports ``distributed`` when
it is imported (about 0.4 s): ``connect`` imports it when a job runs on a cluster, so that a
fit on dask's threads never does. Tests replace its ``Client`` and ``LocalCluster`` here,
where they are used.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dask
from dask.utils import parse_timedelta
from distributed import Client, LocalCluster
from distributed.comm import connect as comm_connect
from distributed.comm.addressing import parse_address, parse_host_port
from distributed.comm.core import CommClosedError
from distributed.security import Security

from sphdist.errors import ParameterError, Text, option
from sphdist.io import storage_options
from sphdist.jobs._cluster_checks import ADDRESS_REMEDY
from sphdist.jobs._cluster_losses import (
    no_workers_timeout,
    scheduler_bounds,
    worker_ttl,
    worker_ttl_bound,
)
from sphdist.jobs._cluster_spec import ClusterSpec
from sphdist.jobs._storage_plugin import StorageOptions

__all__ = ["join", "local_cluster", "check_is_scheduler"]

logger = logging.getLogger("sphdist")


def _share_storage_options(client: Client) -> None:
    """Give every worker of ``client`` this process' storage options (the object store's)."""
    options = storage_options()
    if options:
        client.register_plugin(StorageOptions(options))


def _connect_seconds() -> float:
    """The setting ``distributed.comm.timeouts.connect``, in seconds (30 s by default)."""
    return float(parse_timedelta(dask.config.get("distributed.comm.timeouts.connect"),
                                 default="seconds"))


async def _identity(address: str, connection_args: dict[str, Any], seconds: float) -> Any:
    """Connect (distributed's handshake), ask the peer what it is (``identity``), hang up.

    distributed's ``connect`` bounds the TCP connection by ``seconds`` but waits for the
    handshake's reply for good; here the whole exchange is bounded (``seconds`` more).
    """
    async def exchange() -> Any:
        comm = await comm_connect(address, timeout=seconds, **connection_args)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    return await asyncio.wait_for(exchange(), 2 * seconds)


def _http_answer(address: str, seconds: float) -> str | None:
    """What answers an HTTP request at a ``tcp://`` address: its status line and server, or None.

    Sent only to an address that failed distributed's handshake (never to a scheduler).
    """
    scheme, location = parse_address(address)
    if scheme != "tcp":
        return None
    host, port = parse_host_port(location)
    try:
        with socket.create_connection((host, port), timeout=seconds) as sock:
            sock.sendall(f"HEAD / HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 4096:
                more = sock.recv(4096)
                if not more:
                    break
                head += more
    except OSError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    if not lines[0].startswith("HTTP/"):
        return None
    server = [line.split(":", 1)[1].strip() for line in lines[1:]
              if line.lower().startswith("server:")]
    return lines[0].strip() + (f", Server: {server[0]}" if server else "")


def check_is_scheduler(address: str, security: Security | bool | None) -> None:
    """Refuse an address where no Dask scheduler answers, saying what did, in bounded time.

    A Client of an address that accepts connections but does not speak distributed's protocol
    waits for good (an HTTP server: the dashboard's port given for the scheduler's), or fails
    with a ``MemoryError`` (an HTTP proxy's reply read as a frame length of 3.07 EiB). The
    address is asked for its identity with distributed's own handshake, bounded by
    ``distributed.comm.timeouts.connect`` (issue 44 item 1).

    Parameters
    ----------
    address : str
        The scheduler address, checked by :func:`~sphdist.jobs.cluster.check_scheduler_address`.
    security : distributed.security.Security or bool or None
        The credentials of the Client to come (False or None: none).

    Raises
    ------
    ParameterError
        If something answers that is not a Dask scheduler (its HTTP status line and server
        are named when it is an HTTP server), or nothing answers the handshake in time.
    OSError
        If nothing accepts the connection (distributed's ``Timed out trying to connect``).
    """
    seconds = _connect_seconds()
    args = (security if isinstance(security, Security) else Security()).get_connection_args(
        "client")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # a loop of its own, always
        future = pool.submit(asyncio.run, _identity(address, args, seconds))
        try:
            reply = future.result()
        except asyncio.TimeoutError:
            what = f"accepted the connection but did not answer distributed's handshake in " \
                   f"{2 * seconds:g} s"
        except CommClosedError as exc:
            what = f"closed the connection during distributed's handshake ({exc})"
        except OSError:
            raise  # nothing accepted the connection: distributed's message says so
        except Exception as exc:  # its reply, read as distributed's frames, made no sense
            logger.debug("the handshake with %s failed: %r", address, exc)
            what = "answered distributed's handshake with bytes that are not its protocol"
            if parse_address(address)[0] == "inproc":  # ValueError: no such listener
                what = "is an in-process address (inproc://), and nothing in this process " \
                       "listens at it"
        else:
            kind = reply.get("type") if isinstance(reply, dict) else None
            if kind == "Scheduler":
                return
            what = f"answered as a {kind}, not a scheduler" if kind else \
                f"answered with {type(reply).__name__}, not a scheduler's identity"
    http = _http_answer(address, min(seconds, 10.0))
    if http:
        what += f"; it is an HTTP server ({http}), such as a Dask dashboard, whose port is " \
                "not the scheduler's (8787 and 8786 by default)"
    raise ParameterError(
        f"{address} is not a Dask scheduler: it {what}. To resolve this, " + ADDRESS_REMEDY + "."
    )


@contextmanager
def join(address: str, security: Security | bool | None) -> Iterator[Client]:
    """A Client of the scheduler at ``address``, bounded for the block (``scheduler_bounds``).

    The scheduler fails tasks that wait without workers and removes frozen workers.
    """
    check_is_scheduler(address, security)
    seconds = no_workers_timeout()
    with dask.config.set({  # read by graph.broadcast's scatter too
        "distributed.scheduler.no-workers-timeout": f"{seconds}s",
    }), Client(address, security=security) as client, \
            scheduler_bounds(client, seconds, worker_ttl()):
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
    ) as cluster, Client(cluster, direct_to_workers=True) as client, \
            worker_ttl_bound(client, worker_ttl()):  # U, totals: one hop; frozen: removed
        _share_storage_options(client)
        logger.info(
            "started LocalCluster %s: %d workers x %d threads (%s), dashboard %s",
            cluster.scheduler_address, spec.n_workers, spec.threads_per_worker,
            Text(option("n_workers", spec.n_workers)), client.dashboard_link,
        )
        yield client
