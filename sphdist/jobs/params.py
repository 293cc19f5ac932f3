"""The fit job's parameters: the solver's table and the job's own settings.

The solver's parameters are one table, :data:`sphdist.core.params.PARAMS`; the settings that
only the fit job has (how often it checkpoints, how often it restarts after a worker loss) are
:data:`JOB_PARAMS` here, in the same form, so that ``sphdist fit`` derives their options the
same way (:func:`sphdist.cli._common.param_option`). What the job reads of the solver's table
is imported here too (``PARAMS``, ``SOLVER_PARAMS``, ``defaults``, ``validate``), so that the
job has one module of parameters.

Like :mod:`sphdist.core.params`, this module imports neither scikit-learn nor dask (the command
line reads it to build its options).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from numbers import Integral

from sphdist.core.params import (  # noqa: F401  (the job's view of the solver's table)
    PARAMS,
    RESUME_PARAMS,
    SOLVER_PARAMS,
    Param,
    Range,
    defaults,
    validate,
)

__all__ = ["JOB_PARAMS", "RESUME_KEYS", "validated"]

#: The fit job's own parameters (:func:`sphdist.jobs.fit.fit_corpus`, ``sphdist fit``).
JOB_PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("checkpoint_every", (Range(Integral, 1, None, "left"),), 1,
          "Write the model every N iterations (and at the end)."),
    Param("retries", (Range(Integral, 0, None, "left"),), 3,
          "Resume from the last checkpoint this many times when a worker dies."),
)}

#: What a checkpoint must have been written with to be resumed: the solver parameters whose
#: row says so (:data:`sphdist.core.params.RESUME_PARAMS`) and the warm start ``init_from``.
RESUME_KEYS = (*RESUME_PARAMS, "init_from")


def validated() -> AbstractContextManager[None]:
    """:func:`sphdist._validation.validated`: nested fits do not validate again.

    Imported on first use (it imports scikit-learn).
    """
    from sphdist._validation import validated as skip

    return skip()
