"""The value of "where a job runs": :class:`ClusterSpec`, importable without dask.

Its public home is :mod:`sphdist.jobs.cluster` (``from sphdist.jobs.cluster import
ClusterSpec``); it is defined here so that a command line that builds one and runs no Dask
(a neighbour query of one document) imports neither dask nor distributed: only a value that is
not a default is checked, by the checks of ``_cluster_checks.py``, which import them when
they run.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from sphdist.errors import ParameterError
from sphdist.jobs._cluster_checks import (
    check_dashboard_address,
    check_memory_limit,
    check_scheduler_address,
)

__all__ = ["ClusterSpec", "ClusterConflictError"]

#: Where a LocalCluster's dashboard listens unless told otherwise (loopback, a free port).
DEFAULT_DASHBOARD = "127.0.0.1:0"


class ClusterConflictError(ParameterError):
    """Fields of a :class:`ClusterSpec` that cannot be given together, or one without another.

    Attributes
    ----------
    fields : tuple of str
        The fields, in the order the message names them: ``("n_workers", "address")`` (a
        LocalCluster and an existing scheduler), ``("tls_ca_file", "tls_cert")`` (TLS files
        given, but not both of these).
    spec : dict
        The values given, by field.
    """

    def __init__(self, message: str, fields: tuple[str, ...], spec: dict[str, Any]):
        super().__init__(message)
        self.fields, self.spec = fields, spec


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """Where a job's Dask computations run, validated once.

    What :func:`~sphdist.jobs.cluster.connect` takes; ``sphdist`` commands make it of their
    cluster options.

    Parameters
    ----------
    address : str, optional
        Address of a running scheduler (``tcp://host:port``, ``tls://...``). Default: the
        ``DASK_SCHEDULER_ADDRESS`` environment variable, read at connect time; if neither
        is set, the job runs on this machine.
    n_workers : int, optional
        Worker processes of an embedded LocalCluster; default (and 0): dask's threaded
        scheduler in this process. Refused beside ``address``: a job runs on one or the other.
    threads_per_worker : int, default 1
        Threads per LocalCluster worker process, >= 1.
    memory_limit : str or int, default "auto"
        LocalCluster memory limit per worker, in bytes or as a size (``"4GiB"``); 0: none.
    dashboard_address : str, default "127.0.0.1:0"
        Where the LocalCluster's dashboard listens (``host:port``).
    tls_ca_file, tls_cert, tls_key : path-like, optional
        TLS files (PEM) of a ``tls://`` scheduler, or of the LocalCluster: the CA, the
        certificate and its key (when separate); the CA and the certificate go together.
    insecure : bool, default False
        Start the LocalCluster without TLS (it speaks ``tls://`` with temporary credentials
        of its own otherwise); no effect with TLS files or on a scheduler.

    Raises
    ------
    ClusterConflictError
        ``n_workers`` beside ``address``; TLS files without both the CA and the certificate.
    ParameterError
        ``n_workers`` < 0, ``threads_per_worker`` < 1, or an address, dashboard address or
        memory limit that cannot be read (checked only when not the default, by
        :func:`~sphdist.jobs.cluster.check_scheduler_address`,
        :func:`~sphdist.jobs.cluster.check_dashboard_address`,
        :func:`~sphdist.jobs.cluster.check_memory_limit`).

    Examples
    --------
    >>> ClusterSpec(n_workers=2, memory_limit="4GiB").local_cluster
    True
    >>> ClusterSpec().local_cluster
    False
    """

    address: str | None = None
    n_workers: int | None = None
    threads_per_worker: int = 1
    memory_limit: str | int = "auto"
    dashboard_address: str = DEFAULT_DASHBOARD
    tls_ca_file: str | os.PathLike[str] | None = None
    tls_cert: str | os.PathLike[str] | None = None
    tls_key: str | os.PathLike[str] | None = None
    insecure: bool = False

    def __post_init__(self) -> None:
        if self.address and self.n_workers is not None:
            raise ClusterConflictError(
                f"n_workers={self.n_workers} starts a LocalCluster on this machine, but "
                f"address={self.address!r} names a scheduler: a job runs on one or the other. "
                "To resolve this, leave out n_workers to run on that scheduler, or the "
                "address to start the LocalCluster.",
                ("n_workers", "address"), dataclasses.asdict(self),
            )
        if (self.tls_ca_file or self.tls_cert or self.tls_key) and not (
                self.tls_ca_file and self.tls_cert):
            raise ClusterConflictError(
                "TLS needs tls_ca_file and tls_cert (and tls_key when the key is a separate "
                "file). To resolve this, pass both.",
                ("tls_ca_file", "tls_cert"), dataclasses.asdict(self),
            )
        if self.n_workers is not None and self.n_workers < 0:
            raise ParameterError(f"n_workers must be >= 0, got {self.n_workers}.")
        if self.threads_per_worker < 1:
            raise ParameterError(
                f"threads_per_worker must be >= 1, got {self.threads_per_worker}.")
        checks = (("address", None, check_scheduler_address),
                  ("memory_limit", "auto", check_memory_limit),
                  ("dashboard_address", DEFAULT_DASHBOARD, check_dashboard_address))
        for name, default, check in checks:
            value = getattr(self, name)
            if value is not None and value != default:  # a default is valid (no import)
                check(value)

    @property
    def local_cluster(self) -> bool:
        """Whether :func:`~sphdist.jobs.cluster.connect` starts a LocalCluster on this machine.

        Read without the environment: a ``DASK_SCHEDULER_ADDRESS`` set there wins at connect.
        """
        return bool(self.n_workers) and not self.address

    @property
    def tls(self) -> bool:
        """Whether TLS files were given."""
        return bool(self.tls_ca_file)
