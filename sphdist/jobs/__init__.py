"""The jobs sphdist runs on stored data, and the connection to a Dask cluster.

fit, transform, evaluate, export, neighbors, info and plots: what the CLI and batch jobs call.
A job that writes an output is a request (a frozen dataclass of its parameters, such as
:class:`sphdist.jobs.transform.TransformRequest`) run by :func:`run`, which owns the lifecycle
every such job shares (:mod:`sphdist.jobs._lifecycle`).
"""

from sphdist.jobs._lifecycle import Request, run

__all__ = ["Request", "run"]
