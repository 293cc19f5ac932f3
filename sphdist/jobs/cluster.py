"""Connecting to Dask: a scheduler by address, or an embedded LocalCluster.

A real local cluster of ``dask scheduler`` / ``dask worker`` processes is what
``cluster/local.sh`` starts from the shell.

Everything sphdist starts listens on 127.0.0.1 (the dashboard included) unless told otherwise.
Encryption and mutual authentication use TLS certificates (:func:`tls_security`): pass the same
CA, certificate and key to the scheduler, the workers and ``sphdist fit`` (``--tls-ca-file``,
``--tls-cert``, ``--tls-key``); see ``cluster/README.md``.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from distributed import Client, LocalCluster
from distributed.security import Security

from sphdist.errors import InputNotFoundError, ParameterError

__all__ = ["connect", "tls_security"]

logger = logging.getLogger("sphdist")


def tls_security(
    ca_file: str | os.PathLike[str],
    cert_file: str | os.PathLike[str],
    key_file: str | os.PathLike[str] | None = None,
) -> Security:
    """A ``distributed.Security`` that encrypts and authenticates every connection with TLS.

    Parameters
    ----------
    ca_file : path-like
        PEM file of the certificate authority that signed every party's certificate.
    cert_file : path-like
        PEM certificate of this party (it may also hold the private key).
    key_file : path-like, optional
        PEM private key of ``cert_file``, when it is a separate file.

    Returns
    -------
    distributed.security.Security
        With ``require_encryption=True``: the same files serve as client, scheduler and worker
        credentials, so a ``tls://`` scheduler accepts only parties holding a certificate
        signed by the CA.

    Raises
    ------
    InputNotFoundError
        If one of the files does not exist.
    """
    files = {"--tls-ca-file": ca_file, "--tls-cert": cert_file, "--tls-key": key_file}
    for option, path in files.items():
        if path is not None and not Path(path).is_file():
            raise InputNotFoundError(
                f"{path}: no such TLS file ({option}). To resolve this, pass PEM files made as "
                "in cluster/README.md (cluster/make_certs.py writes a CA and a certificate)."
            )
    ca, cert = str(ca_file), str(cert_file)
    key = str(key_file) if key_file is not None else None
    return Security(
        tls_ca_file=ca,
        tls_client_cert=cert, tls_client_key=key,
        tls_scheduler_cert=cert, tls_scheduler_key=key,
        tls_worker_cert=cert, tls_worker_key=key,
        require_encryption=True,
    )


@contextlib.contextmanager
def connect(
    scheduler_address: str | None = None,
    *,
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    memory_limit: str | int = "auto",
    dashboard_address: str = "127.0.0.1:0",
    security: Security | None = None,
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
        Where the LocalCluster's dashboard listens (loopback, a free port); ``":0"`` or
        ``"0.0.0.0:8787"`` exposes it on every interface, which must be asked for.
    security : distributed.security.Security, optional
        TLS credentials (:func:`tls_security`): used to connect to ``scheduler_address``, and
        an embedded LocalCluster then speaks ``tls://`` only.

    Yields
    ------
    distributed.Client
        Registered as the default client, so dask computations run on it.

    Raises
    ------
    ParameterError
        If ``n_workers`` or ``threads_per_worker`` is below 1.
    OSError
        If the scheduler cannot be reached (``TimeoutError`` is an ``OSError``).

    Notes
    -----
    The LocalCluster and everything it listens on bind to 127.0.0.1.
    """
    address = scheduler_address or os.environ.get("DASK_SCHEDULER_ADDRESS")
    if address:
        with Client(address, security=security) as client:
            logger.info("connected to scheduler %s (dashboard %s)", address, client.dashboard_link)
            yield client
        return
    if n_workers is not None and n_workers < 1:
        raise ParameterError(f"n_workers must be >= 1, got {n_workers}.")
    if threads_per_worker < 1:
        raise ParameterError(f"threads_per_worker must be >= 1, got {threads_per_worker}.")
    n_workers = n_workers or os.cpu_count() or 1
    tls = {"security": security, "protocol": "tls://"} if security is not None else {}
    with LocalCluster(
        n_workers=n_workers,
        threads_per_worker=threads_per_worker,
        processes=True,
        memory_limit=memory_limit,
        host="127.0.0.1",
        dashboard_address=dashboard_address,
        **tls,
    ) as cluster, Client(cluster, security=security) as client:
        logger.info(
            "started LocalCluster: %d workers x %d threads, dashboard %s",
            n_workers, threads_per_worker, client.dashboard_link,
        )
        yield client

