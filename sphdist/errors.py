"""One exception hierarchy for sphdist.

Every error a user can cause derives from :class:`SphdistError` and from the builtin that
describes it best, so ``except ValueError`` keeps working for callers that do not know sphdist
(the pattern of ``zarr.errors``). Messages name the offending file, value or document and say how
to resolve the problem; the CLI prints them as one line and exits non-zero.
"""

from __future__ import annotations

__all__ = [
    "SphdistError",
    "InputNotFoundError",
    "CorpusFormatError",
    "ModelFormatError",
    "CheckpointMismatchError",
    "CorpusMismatchError",
    "OutputExistsError",
    "OutputLockedError",
    "ParameterError",
    "DataError",
    "WorkersLostError",
    "InsufficientMemoryError",


    "StoreReplacedError",
    "DeviceError",
    "Interrupted",
]


class SphdistError(Exception):
    """Base class of every error sphdist raises on purpose."""


class InputNotFoundError(SphdistError, FileNotFoundError):
    """An input path (archive, corpus, model, data home) does not exist."""


class CorpusFormatError(SphdistError, ValueError):
    """A path is not a sphdist corpus (or dense array) this version can read."""


class ModelFormatError(SphdistError, ValueError):
    """A path is not a complete sphdist model / checkpoint this version can read."""


class CheckpointMismatchError(SphdistError, ValueError):
    """``--resume`` found a checkpoint written for another corpus or other parameters."""


class CorpusMismatchError(SphdistError, ValueError):
    """A model is used with a corpus other than the one it was fitted on."""


class OutputExistsError(SphdistError, FileExistsError):
    """An output path exists and overwriting it was not requested."""


class OutputLockedError(SphdistError, RuntimeError):
    """Another process is writing the output (it holds its lock, :func:`sphdist.io.output_lock`)."""


class ParameterError(SphdistError, ValueError):
    """A parameter value is out of its documented range."""


class DataError(SphdistError, ValueError):
    """Input data violates a precondition (NaN or Inf values, no documents, no labels)."""


class WorkersLostError(SphdistError, RuntimeError):
    """Workers kept dying (memory, pre-emption) after every allowed restart of a fit."""


class InsufficientMemoryError(SphdistError, MemoryError):
    """A job's estimated peak memory exceeds what the machine or its workers have.

    Raised before the large allocation, with the estimate, the memory available and the
    command of a job that fits (:func:`sphdist.core.solver.peak_bytes`).
    """


class StoreReplacedError(SphdistError, RuntimeError):
    """A store was replaced by a writer's commit while it was being read; reading it again works."""


class StorageError(SphdistError, OSError):
    """An object store refused or failed a request (no bucket, credentials, the service)."""


class DeviceError(SphdistError, RuntimeError):
    """The compute device asked for cannot run here (``device="cuda"`` without CuPy or a GPU)."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped a job; the message says what it left at its output and how to go on.

    A :class:`KeyboardInterrupt` (``except KeyboardInterrupt`` still catches it, ``except
    Exception`` does not), not a :class:`SphdistError`: the user stopped the job, nothing failed.
    """
