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
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import dask
from dask.utils import parse_timedelta
from distributed import Client, LocalCluster
from distributed.comm import connect as comm_connect
from distributed.comm.addressing import parse_address, parse_host_port
from distributed.comm.core import CommClosedError
from distributed.security import Security
from distributed.utils import get_mp_context

from sphdist._processes import START_METHOD, start_fork_server
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


#: The signals that stop a command (Ctrl-C; a batch scheduler's SIGTERM), held back while a
#: LocalCluster starts (:func:`_signals_held`).
_HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM received in the block take effect when it ends.

    distributed's LocalCluster cannot be stopped part-way through its start: a
    KeyboardInterrupt there leaves its worker processes starting, and distributed's exit
    handler then fails to close the cluster (``AssertionError: Status.init`` tracebacks). A
    Ctrl-C (or SIGTERM) while the cluster starts is recorded, and raised once the started
    cluster is held by the caller's ``with`` block, which closes it: the command stops a
    few seconds after the Ctrl-C, as it would later on. Outside the main thread (where
    signals cannot be handled) nothing is held.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        if signum not in received:
            received.append(signum)

    previous = {sig: signal.getsignal(sig) for sig in _HELD_SIGNALS}
    previous = {sig: handler for sig, handler in previous.items() if handler is not None}
    for sig in previous:
        signal.signal(sig, hold)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in received:  # the handler of before runs here: KeyboardInterrupt, ...
            signal.raise_signal(sig)


@contextmanager
def local_cluster(
    spec: ClusterSpec, security: Security | bool | None, silence_logs: int,
) -> Iterator[Client]:
    """The LocalCluster of ``spec`` (its ``n_workers`` processes on 127.0.0.1) and its Client.

    ``security``: credentials, False for none, None for temporary ones of its own;
    ``silence_logs``: the level below which the cluster's log records are dropped.

    The worker processes never take SIGINT (:func:`sphdist._processes.start_fork_server`):
    a Ctrl-C at a terminal, sent to the whole process group, is this process' to take, which
    closes the cluster as the block ends. A Ctrl-C or SIGTERM while the cluster starts takes
    effect once it has started (:func:`_signals_held`).
    """
    with dask.config.set({  # a cluster that keeps losing its workers fails, never waits
        "distributed.scheduler.no-workers-timeout": f"{no_workers_timeout()}s",
        "distributed.scheduler.work-stealing": False,  # a pass's placement holds (graph.py)
        "distributed.worker.multiprocessing-method": START_METHOD,
    }), ExitStack() as stack:
        with _signals_held():  # what the stack holds is closed if a signal came meanwhile
            # the workers fork from a server that imported distributed's preload once
            # (get_mp_context sets it) and never take a Ctrl-C (sphdist._processes)
            get_mp_context()
            start_fork_server()
            cluster = stack.enter_context(LocalCluster(
                n_workers=spec.n_workers,
                threads_per_worker=spec.threads_per_worker,
                processes=True,
                memory_limit=spec.memory_limit,
                host="127.0.0.1",
                dashboard_address=spec.dashboard_address,
                security=Security() if security is False else (security or True),
                silence_logs=silence_logs,
            ))
            client = stack.enter_context(Client(cluster, direct_to_workers=True))
        stack.enter_context(worker_ttl_bound(client, worker_ttl()))  # frozen: removed
        _share_storage_options(client)  # U, totals: one hop (direct_to_workers)
        logger.info(
            "started LocalCluster %s: %d workers x %d threads (%s), dashboard %s",
            cluster.scheduler_address, spec.n_workers, spec.threads_per_worker,
            Text(option("n_workers", spec.n_workers)), client.dashboard_link,
        )
        yield client
