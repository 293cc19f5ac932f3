"""The checks of the cluster options' values: refused before anything starts, purely.

Each parses a value as distributed or dask will (a scheduler address, a dashboard address, a
worker memory limit, a fit's memory budget) and raises a :class:`~sphdist.errors.ParameterError`
naming the value and the remedy. Importing this module imports neither dask nor distributed
(:class:`~sphdist.jobs.cluster.ClusterSpec` is built on the way to commands that run no Dask);
a check imports what it parses with, when it runs. Their public home is
:mod:`sphdist.jobs.cluster`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sphdist.errors import ParameterError, option

__all__ = [
    "check_scheduler_address",
    "check_dashboard_address",
    "check_memory_limit",
    "check_memory_budget",
    "MAX_MEMORY_BUDGET",
]

#: A remedy for a bad scheduler address (the option named by :func:`sphdist.errors.option`).
ADDRESS_REMEDY = (
    "pass the address the scheduler printed when it started (e.g. "
    + option("address", 'tcp://127.0.0.1:8786') + ", see cluster/README.md), or leave out "
    + option("address") + " and unset DASK_SCHEDULER_ADDRESS to run on this machine"
)

#: The largest ``--memory-budget``, in bytes (1 EiB): beyond it a value is a typo (``1e100``).
MAX_MEMORY_BUDGET = 2**60


@contextlib.contextmanager
def _refused(problem: str, remedy: str) -> Iterator[None]:
    """Turn the ValueError or TypeError of a parser into a ParameterError: problem, remedy."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        raise ParameterError(f"{problem} ({exc}). To resolve this, " + remedy + ".") from None


def check_scheduler_address(address: str) -> None:
    """Refuse a scheduler address distributed cannot connect to, before trying.

    Parameters
    ----------
    address : str
        ``scheme://host:port`` (``tcp``, ``tls``, or another scheme distributed knows).

    Raises
    ------
    ParameterError
        If the scheme is unknown or the host and port cannot be parsed (``foo://bar``).
    """
    # distributed (about 0.4 s) is imported by a check that runs, not by the import
    from distributed.comm.addressing import parse_address, parse_host_port
    from distributed.comm.registry import backends

    with _refused(f"scheduler address {address!r} is not one distributed can connect to",
                  ADDRESS_REMEDY):
        scheme, location = parse_address(address, strict=True)
        if scheme not in backends:
            raise ValueError(f"unknown scheme {scheme}://, known: "
                             + ", ".join(f"{s}://" for s in sorted(backends)))
        if scheme in ("tcp", "tls"):
            parse_host_port(location, default_port=8786)


def check_dashboard_address(address: str) -> None:
    """Refuse a dashboard address that is not ``[host]:port`` with a port in [0, 65535].

    Parameters
    ----------
    address : str
        ``host:port``; ``:port`` listens on every interface, port 0 picks a free port.

    Raises
    ------
    ParameterError
        If the port is missing, not an integer or out of range (``127.0.0.1:notaport``).
    """
    from distributed.comm.addressing import parse_host_port  # as check_scheduler_address

    with _refused(f"dashboard address {address!r} is not host:port",
                  "pass e.g. " + option("dashboard_address", '127.0.0.1:8787')
                  + " (or 127.0.0.1:0 for a free port)"):
        _, port = parse_host_port(address)
        if not 0 <= port <= 65535:
            raise ValueError(f"port {port} is not in [0, 65535]")


def check_memory_limit(limit: str | int) -> None:
    """Refuse a worker memory limit distributed cannot read.

    Parameters
    ----------
    limit : str or int
        ``"auto"`` (the machine's memory shared by the workers), bytes, or a number with a unit
        (``"4GiB"``, ``"4e9"``); 0 means no limit.

    Raises
    ------
    ParameterError
        If ``limit`` is not ``"auto"``, a size in bytes or a size with a unit (``4XB``).
    """
    from dask.utils import parse_bytes  # dask is imported by a check that runs, not here

    with _refused(f"memory limit {limit!r} is not a size", "pass bytes or a number with a "
                                                           "unit, e.g. "
                                                           + option("memory_limit", '4GiB')
                                                           + ", or "
                                                           + option("memory_limit", 'auto')):
        if limit != "auto" and parse_bytes(limit) < 0:
            raise ValueError("a limit is not negative")


def check_memory_budget(value: str | int | None) -> int | None:
    """A fit's ``memory_budget`` in bytes: None for the default, else a size such as ``4GiB``.

    Raises
    ------
    ParameterError
        If the value is neither a size nor ``auto`` (an empty value, a unit alone, an
        infinity), or more than ``MAX_MEMORY_BUDGET`` (1 EiB).

    Examples
    --------
    >>> check_memory_budget("4GiB"), check_memory_budget("auto"), check_memory_budget(0)
    (4294967296, None, 0)
    """
    if value is None or value == "auto":
        return None
    from dask.utils import parse_bytes  # as check_memory_limit

    remedy = ("To resolve this, pass bytes or a size such as " + option("memory_budget", '4GiB')
              + " (0 streams X from the store every iteration).")
    try:  # parse_bytes reads "" and "GiB" as one unit, and "1e400" as an infinity
        if isinstance(value, str) and not value.strip()[:1].isdigit():
            raise ValueError(value)
        nbytes = parse_bytes(value) if isinstance(value, str) else int(value)
    except (ValueError, TypeError, OverflowError):
        nbytes = -1
    if nbytes < 0:
        raise ParameterError(f"memory budget {value!r} is not a size. " + remedy)
    if nbytes > MAX_MEMORY_BUDGET:
        raise ParameterError(
            f"memory budget {value!r} is more than any machine's memory (at most 1 EiB, "
            f"{MAX_MEMORY_BUDGET} bytes). " + remedy
        )
    return int(nbytes)
