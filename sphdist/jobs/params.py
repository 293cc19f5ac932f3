"""The fit job's parameters: the solver's table and the job's own settings.

The solver's parameters are one table, :data:`sphdist.core.params.PARAMS`; the settings that
only the fit job has (how often it checkpoints, how often it restarts after a worker loss) are
:data:`JOB_PARAMS` here, in the same form, so that ``sphdist fit`` derives their options the
same way (:func:`sphdist.cli._common.param_option`). A fit's plan carries the solver's
:class:`~sphdist.core.params.FitConfig` and the job's :class:`JobSettings`, whose defaults are
the two tables'. What the job reads of the solver's table
is imported here too (``PARAMS``, ``SOLVER_PARAMS``, ``defaults``, ``validate``), so that the
job has one module of parameters.

Like :mod:`sphdist.core.params`, this module imports neither scikit-learn nor dask (the command
line reads it to build its options).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from contextlib import AbstractContextManager
from numbers import Integral, Real
from typing import Any

from sphdist.core.params import (  # noqa: F401  (the job's view of the solver's table)
    PARAMS,
    RESUME_PARAMS,
    SOLVER_PARAMS,
    FitConfig,
    Param,
    Range,
    current_names,
    defaults,
    validate,
)
from sphdist.errors import Remedy

__all__ = ["JOB_PARAMS", "RESUME_KEYS", "N_COMPONENTS", "JobSettings", "validated", "fit_remedy"]

#: The fit job's own parameters (:func:`sphdist.jobs.fit.fit_corpus`, ``sphdist fit``).
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
#: :func:`sphdist.jobs.fit.fit_corpus` and :class:`sphdist.core.params.FitConfig` have none (a
#: Python caller says its r).
N_COMPONENTS = 20


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobSettings:
    """How the fit job runs, beside the solver's :class:`~sphdist.core.params.FitConfig`.

    The defaults of :attr:`checkpoint_every`, :attr:`checkpoint_interval` and :attr:`retries`
    are their rows of
    :data:`JOB_PARAMS`; nothing else writes them. Validated by
    :func:`sphdist.jobs.fit.plan_fit` (:meth:`checked`).

    Attributes
    ----------
    checkpoint_every : int
        Write the model every this many iterations (and at the end), once
        :attr:`checkpoint_interval` has passed since the last write.
    checkpoint_interval : float
        In seconds: the least time of fitting between two checkpoints (the last write, or the
        start of the fit); 0 writes at every ``checkpoint_every``-th iteration. Which
        iterations are written changes no bit of the result: a resume continues any of them
        bitwise.
    retries : int
        Restarts from the last checkpoint after a worker loss.
    resume, overwrite : bool
        What to do with a model already at the output.
    init_from : path-like or None
        The model whose U is the warm start.
    memory_budget : int, str or None
        The most memory X may take: bytes, a size (``"4GiB"``), or ``"auto"`` (or None): the
        default of :func:`sphdist.jobs.cluster.holds_in_memory`. In bytes, or None for
        ``"auto"``, once :meth:`checked`.
    """

    checkpoint_every: int = JOB_PARAMS["checkpoint_every"].default
    checkpoint_interval: float = JOB_PARAMS["checkpoint_interval"].default
    retries: int = JOB_PARAMS["retries"].default
    resume: bool = False
    overwrite: bool = False
    init_from: str | os.PathLike[str] | None = None
    memory_budget: int | str | None = "auto"

    def checked(self, caller: str) -> JobSettings:
        """These settings validated, the memory budget in bytes (or None); reads nothing.

        Raises
        ------
        ParameterError
            If ``checkpoint_every``, ``checkpoint_interval`` or ``retries`` is outside
            :data:`JOB_PARAMS`, or
            ``memory_budget`` is not a size
            (:func:`sphdist.jobs.cluster.check_memory_budget`).
        """
        from sphdist.jobs.cluster import check_memory_budget

        validate(
            {"checkpoint_every": self.checkpoint_every,
             "checkpoint_interval": self.checkpoint_interval, "retries": self.retries}, caller,
            JOB_PARAMS,
        )
        return dataclasses.replace(self, memory_budget=check_memory_budget(self.memory_budget))

    def values(self) -> dict[str, Any]:
        """The settings as keywords of :func:`sphdist.jobs.fit.fit_corpus`."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


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


def fit_remedy(
    input: Any, output: Any, params: dict[str, Any], *, resume: bool = False,
    overwrite: bool = False, checkpoint_every: int = JOB_PARAMS["checkpoint_every"].default,
    checkpoint_interval: float = JOB_PARAMS["checkpoint_interval"].default, say: str = "",
) -> Remedy:
    """The fit of ``input`` to ``output`` with ``params``, as a remedy of an error.

    What the fit's refusals offer: a checkpoint's resume, or the asked fit replacing the
    output. The command line renders it as a ``sphdist fit`` command, the Python API as a call
    of :func:`sphdist.jobs.fit.fit_corpus` (:func:`sphdist.errors.render`).

    Parameters
    ----------
    input, output : path-like
        The corpus and the ``model.zarr``.
    params : dict
        Names of :data:`sphdist.core.params.SOLVER_PARAMS` (those missing take the table's
        defaults) and ``init_from`` (None, a path, or the ``{"path": ...}`` a model records).
    resume, overwrite : bool, default False
        Continue the checkpoint at ``output``, or replace it.
    checkpoint_every : int, default 1
        Given unless it is the default.
    checkpoint_interval : float, default 60.0
        Given unless it is the default.
    say : str, default ""
        What the fit does, in words (:attr:`sphdist.errors.Remedy.say`).

    Returns
    -------
    Remedy
        ``n_components`` always, every other parameter where it is not the default (a value
        a command line cannot give, such as ``random_state=None``, left out), ``dtype`` by
        name.

    Examples
    --------
    >>> from sphdist.errors import render, remedy
    >>> fix = fit_remedy("c.zarr", "m.zarr", {"n_components": 5, "lam": "palm"}, resume=True)
    >>> fix.overrides
    {'resume': True, 'n_components': 5, 'lam': 'palm'}
    >>> render(remedy(fix))
    "`sphdist.jobs.fit.fit_corpus(input='c.zarr', output='m.zarr', resume=True, n_components=5, \
lam='palm')`"
    """
    import numpy as np

    overrides: dict[str, Any] = {}
    if resume:
        overrides["resume"] = True
    if overwrite:
        overrides["overwrite"] = True
    for name in SOLVER_PARAMS:
        value = params.get(name, PARAMS[name].default)
        if isinstance(value, np.dtype | type):
            value = np.dtype(value).name
        if not isinstance(value, str | bool | int | float) or (
            name != "n_components" and value == PARAMS[name].default
        ):
            continue
        overrides[name] = value.item() if isinstance(value, np.generic) else value
    init_from = params.get("init_from")
    if init_from:
        overrides["init_from"] = str(init_from["path"] if isinstance(init_from, dict)
                                     else init_from)
    if checkpoint_every != JOB_PARAMS["checkpoint_every"].default:
        overrides["checkpoint_every"] = checkpoint_every
    if checkpoint_interval != JOB_PARAMS["checkpoint_interval"].default:
        overrides["checkpoint_interval"] = checkpoint_interval
    return Remedy("fit", {"input": str(input), "output": str(output)}, overrides, say)
