"""The worker plugin that hands a job's storage options to every worker.

A module of its own so that :mod:`sphdist.jobs.cluster` imports ``distributed`` only when a
job connects to a cluster: a fit on dask's threads never imports it (about 0.4 s).
"""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from sphdist.io import apply_storage_options

__all__ = ["StorageOptions"]


class StorageOptions(WorkerPlugin):
    """Gives every worker the storage options of the job (fsspec configuration).

    The workers read the corpus' chunks and write V straight from and to the object store, so
    they need the endpoint and credentials the driver was given; those from the environment
    (``AWS_*``) or fsspec's configuration files must be set on the workers themselves.
    """

    name = "sphdist-storage-options"

    def __init__(self, options: dict[str, dict[str, Any]]) -> None:
        self.options = options

    def setup(self, worker: Any) -> None:
        """Apply the options in the worker's process (also for workers that join later)."""
        apply_storage_options(self.options)
