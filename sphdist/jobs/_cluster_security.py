"""TLS for a cluster: :func:`tls_security`, the ``distributed.Security`` of three PEM files.

Encryption and mutual authentication with an external scheduler use TLS certificates: pass the
same CA, certificate and key to the scheduler, the workers and the job
(:class:`~sphdist.jobs.cluster.ClusterSpec`'s ``tls_ca_file``, ``tls_cert``, ``tls_key``); see
``cluster/README.md``. Its public home is :mod:`sphdist.jobs.cluster`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from sphdist.errors import InputNotFoundError, option

if TYPE_CHECKING:
    from distributed.security import Security

__all__ = ["tls_security"]


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
    files = {"tls_ca_file": ca_file, "tls_cert": cert_file, "tls_key": key_file}
    for name, path in files.items():  # named as ClusterSpec's fields (and the options)
        if path is not None and not Path(path).is_file():
            raise InputNotFoundError(
                f"{path}: no such TLS file (" + option(name)
                + "). To resolve this, pass PEM files made as in cluster/README.md "
                "(cluster/make_certs.py writes a CA and a certificate)."
            )
    ca, cert = str(ca_file), str(cert_file)
    key = str(key_file) if key_file is not None else None
    # distributed (about 0.4 s) is imported where a job connects, never by a fit on threads
    from distributed.security import Security

    return Security(
        tls_ca_file=ca,
        tls_client_cert=cert, tls_client_key=key,
        tls_scheduler_cert=cert, tls_scheduler_key=key,
        tls_worker_cert=cert, tls_worker_key=key,
        require_encryption=True,
    )
