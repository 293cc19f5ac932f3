"""The fit that writes a model, as a remedy: a fit's parameters in the words of its table.

A refusal about a model (a checkpoint that holds no embedding yet, a model written before its
digests were recorded) and the fit job's own refusals resolve with a fit of the same
parameters (:func:`fit_remedy`). It reads the solver's table alone
(:data:`sphdist.core.params.PARAMS`), so that the model's format (:mod:`sphdist.io.model`)
offers it without importing the fit job (whose own refusals are its request changed,
:meth:`sphdist.jobs.fit.FitRequest.remedy`, in the same words).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sphdist.core.params import PARAMS, SOLVER_PARAMS
from sphdist.errors import Remedy

__all__ = ["fit_remedy"]


def fit_remedy(
    input: Any, output: Any, params: dict[str, Any], *, resume: bool = False,
    overwrite: bool = False, say: str = "", **settings: Any,
) -> Remedy:
    """The fit of ``input`` to ``output`` with ``params``, as a remedy of an error.

    What the fit's refusals offer: a checkpoint's resume, or the asked fit replacing the
    output. The command line renders it as a ``sphdist fit`` command, the Python API as the
    :class:`sphdist.jobs.fit.FitRequest` run by ``sphdist.jobs.run``
    (:func:`sphdist.errors.render`).

    Parameters
    ----------
    input, output : path-like
        The corpus and the ``model.zarr``.
    params : dict
        Names of :data:`sphdist.core.params.SOLVER_PARAMS` (those missing take the table's
        defaults) and ``init_from`` (None, a path, or the ``{"path": ...}`` a model records).
    resume, overwrite : bool, default False
        Continue the checkpoint at ``output``, or replace it.
    say : str, default ""
        What the fit does, in words (:attr:`sphdist.errors.Remedy.say`).
    **settings
        The fit job's own settings to give, after the parameters, as they are (names of
        :data:`sphdist.jobs.params.JOB_PARAMS`; the fit job gives those not at their
        defaults).

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
    "`sphdist.jobs.run(sphdist.jobs.fit.FitRequest(input='c.zarr', output='m.zarr', resume=True, \
n_components=5, lam='palm'))`"
    """
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
    overrides.update(settings)
    return Remedy("fit", {"input": str(input), "output": str(output)}, overrides, say)
