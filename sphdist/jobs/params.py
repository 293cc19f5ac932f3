"""The fit job's parameters: the solver's table and the job's own settings.

The solver's parameters are one table, :data:`sphdist.core.params.PARAMS`; the settings that
only the fit job has (how often it checkpoints, how often it restarts after a worker loss) are
:data:`JOB_PARAMS` here, in the same form, so that ``sphdist fit`` derives their options the
same way (:func:`sphdist.cli._common.param_option`). :class:`sphdist.jobs.fit.FitRequest` has a
field for each row of the two tables, whose defaults are the tables'. What the job reads of the
solver's table is imported here too (``PARAMS``, ``SOLVER_PARAMS``, ``SolverParameters``,
``defaults``, ``validate``), so that the job has one module of parameters.

Whether a checkpoint resumes is a matter of parameters too: :data:`RESUME_KEYS` (what must
match), read from a checkpoint by :func:`recorded_params` and compared as
:func:`resume_value` says (:meth:`sphdist.jobs.fit.FitRequest.continues` decides).

Like :mod:`sphdist.core.params`, this module imports neither scikit-learn nor dask (the command
line reads it to build its options).
"""

from __future__ import annotations

import contextlib
import sys
from contextlib import AbstractContextManager
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

from sphdist.core.params import (  # noqa: F401  (the job's view of the solver's table)
    PARAMS,
    RESUME_PARAMS,
    SOLVER_PARAMS,
    FitConfig,
    Param,
    Range,
    SolverParameters,
    current_names,
    defaults,
    validate,
)

if TYPE_CHECKING:
    from sphdist.io.model import Model

__all__ = [
    "JOB_PARAMS", "RESUME_KEYS", "N_COMPONENTS", "validated", "recorded_params", "resume_value",
]

#: The fit job's own parameters (:class:`sphdist.jobs.fit.FitRequest`, ``sphdist fit``).
JOB_PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("checkpoint_every", (Range(Integral, 1, None, "left"),), 1,
          "Write the model every N iterations (and at the end), once --checkpoint-interval "
          "has passed since the last write."),
    Param("checkpoint_interval", (Range(Real, 0, None, "left"),), 60.0,
          "Seconds of fitting between two checkpoints at least (a fit that ends sooner writes "
          "only its model); 0: every --checkpoint-every iterations. A resume continues the "
          "last checkpoint to the same bits."),
    Param("retries", (Range(Integral, 0, None, "left"),), 3,
          "Resume from the last checkpoint this many times when a worker dies."),
)}

#: r of a fit job that does not say (``sphdist fit`` without ``-r``): a text embedding's
#: dimension. The estimator's default is the table's row (2, scikit-learn's ``TruncatedSVD``'s);
#: :class:`sphdist.jobs.fit.FitRequest` and :class:`sphdist.core.params.FitConfig` have none (a
#: Python caller says its r).
N_COMPONENTS = 20

#: What a checkpoint must have been written with to be resumed: the solver parameters whose
#: row says so (:data:`sphdist.core.params.RESUME_PARAMS`) and the warm start ``init_from``.
RESUME_KEYS = (*RESUME_PARAMS, "init_from")


def validated() -> AbstractContextManager[None]:
    """:func:`sphdist._validation.validated`: nested fits do not validate again.

    Imported on first use (it imports scikit-learn). A process that has not imported
    scikit-learn (``sphdist fit``) gets a context that does nothing: the solver checks the
    table again (:meth:`~sphdist.core.params.FitConfig.checked`, microseconds) rather than
    import scikit-learn (about 1 s) to be told not to.
    """
    if "sklearn" not in sys.modules:
        return contextlib.nullcontext()
    from sphdist._validation import validated as skip

    return skip()


#: The value a parameter had in checkpoints written before it was recorded (else the default).
#: A checkpoint written before ``dtype`` and ``polar`` were recorded was fitted with their
#: defaults; the ``max_partials`` that checkpoints written before issue 29 record is ignored
#: (the pass no longer has accumulation chains).
_BEFORE_RECORDED = {"accelerate": False}


def recorded_params(model: Model) -> dict[str, Any]:
    """The :data:`RESUME_KEYS` values ``model`` was fitted with (defaults where not recorded)."""
    return {
        key: model.params.get(key, _BEFORE_RECORDED.get(
            key, PARAMS[key].default if key in PARAMS else None
        ))
        for key in RESUME_KEYS
    }


def resume_value(key: str, value: Any) -> Any:
    """``value`` of ``key`` as a resume compares it (a warm start: the sha256 of its U)."""
    # a warm start is the same warm start when its U is the same, wherever the model lies now
    if key == "init_from" and isinstance(value, dict):
        return value.get("u_sha256")
    return value
