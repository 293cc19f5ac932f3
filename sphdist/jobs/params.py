"""The fit job's parameters: the solver's table and the job's own settings.

The solver's parameters are one table, :data:`sphdist.core.params.PARAMS`; the settings that
only the fit job has (how often it checkpoints, how often it restarts after a worker loss) are
:data:`JOB_PARAMS` here, in the same form, so that ``sphdist fit`` derives their options the
same way (:func:`sphdist.cli._common.param_option`). A fit's plan carries the solver's
:class:`~sphdist.core.params.FitConfig` and the job's :class:`JobSettings`, whose defaults are
the two tables'. What the job reads of the solver's table
is imported here too (``PARAMS``, ``SOLVER_PARAMS``, ``defaults``, ``validate``), so that the
job has one module of parameters.

Whether a checkpoint resumes is a matter of parameters too, decided here without reading
anything: :data:`RESUME_KEYS` (what must match) and :func:`decide_output` (resume, start
afresh or refuse, with the fits that resolve a refusal; the fit job makes each a
:class:`sphdist.errors.Remedy` with :func:`sphdist.io._refit.fit_remedy`).

Like :mod:`sphdist.core.params`, this module imports neither scikit-learn nor dask (the command
line reads it to build its options).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
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
    current_names,
    defaults,
    validate,
)
from sphdist.errors import CheckpointMismatchError, OutputExistsError, Text, option

if TYPE_CHECKING:
    from sphdist.io.model import Model

__all__ = [
    "JOB_PARAMS", "RESUME_KEYS", "N_COMPONENTS", "JobSettings", "keywords", "validated",
    "decide_output", "OutputDecision", "OutputRemedy",
]

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


def keywords(function: str, params: dict[str, Any]) -> tuple[FitConfig, JobSettings]:
    """The FitConfig and JobSettings of a fit's keyword arguments, not validated.

    Parameters
    ----------
    function : str
        The function given them, for the messages (``"fit_corpus"``).
    params : dict
        Its keyword arguments: fields of :class:`JobSettings` (popped from it) and names of
        :data:`sphdist.core.params.SOLVER_PARAMS` (or their former names,
        :func:`sphdist.core.params.current_names`).

    Returns
    -------
    FitConfig, JobSettings

    Raises
    ------
    TypeError
        If a keyword is neither, or ``n_components`` is missing.
    """
    job = {name: params.pop(name) for name in _JOB_FIELDS if name in params}
    params = current_names(params, function)
    unknown = set(params) - set(SOLVER_PARAMS)
    if unknown:
        raise TypeError(f"{function}() got unexpected keyword arguments {sorted(unknown)}")
    if "n_components" not in params:
        raise TypeError(f"{function}() missing required keyword argument 'n_components'")
    return FitConfig(**params), JobSettings(**job)


_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(JobSettings))


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


@dataclasses.dataclass(frozen=True)
class OutputRemedy:
    """A fit that resolves a refusal of the output: what it does there and with what.

    The fit job makes it a :class:`sphdist.errors.Remedy` of the output
    (:func:`sphdist.io._refit.fit_remedy`).

    Attributes
    ----------
    action : {"resume", "overwrite"}
        Continue the checkpoint at the output, or replace it.
    input : path-like
        The corpus of that fit.
    params : dict
        Its parameters (:data:`RESUME_KEYS` and the other names of
        :data:`sphdist.core.params.SOLVER_PARAMS`).
    say : str
        What it does, in words (``"continue it"``, ``"replace it"``).
    """

    action: str
    input: Any
    params: dict[str, Any]
    say: str


@dataclasses.dataclass(frozen=True)
class OutputDecision:
    """What a fit does with a model already at its output (:func:`decide_output`).

    Attributes
    ----------
    action : {"fresh", "resume", "refuse"}
        Start afresh (nothing there, or ``overwrite``), continue its checkpoint, or refuse.
    error : type or None
        The refusal's exception (:class:`~sphdist.errors.OutputExistsError`,
        :class:`~sphdist.errors.CheckpointMismatchError`); None unless refused.
    found : str or Text
        What is at the output: the message's words after its path, or, for an
        :class:`~sphdist.errors.OutputExistsError`, after ``already exists:``
        (:func:`sphdist.io.refuse_existing` words that refusal).
    remedies : tuple of OutputRemedy
        The fits that resolve the refusal, the one nearest to what was asked first.
    """

    action: str
    error: type[Exception] | None = None
    found: str | Text = ""
    remedies: tuple[OutputRemedy, ...] = ()


def decide_output(
    previous: Model | None, fingerprint: str, input: Any, params: dict[str, Any], *,
    resume: bool, overwrite: bool,
) -> OutputDecision:
    """Whether a fit resumes, starts afresh or is refused at an output; pure.

    Parameters
    ----------
    previous : Model or None
        The checkpoint at the output (only its ``corpus``, ``params``, ``n_iter`` and
        ``converged`` are read), or None.
    fingerprint : str
        The fingerprint of the corpus to fit.
    input : path-like
        Its path, for the messages and remedies.
    params : dict
        The fit's parameters, as stored (:data:`RESUME_KEYS` and ``max_iter``).
    resume, overwrite : bool
        What was asked (:class:`~sphdist.jobs.params.JobSettings`).

    Returns
    -------
    OutputDecision
        Resumed only when asked, with the same corpus and the same :data:`RESUME_KEYS`;
        refused with :class:`~sphdist.errors.OutputExistsError` when a model is there and
        neither was asked, with :class:`~sphdist.errors.CheckpointMismatchError` when a
        resume was asked of another corpus' or other parameters' checkpoint; each refusal
        with the asked fit replacing the output and the continuation of what is there.
    """
    if previous is None or (overwrite and not resume):
        return OutputDecision("fresh")
    same_corpus = previous.corpus.get("fingerprint") == fingerprint
    recorded = _recorded_params(previous)
    changed = {k: (recorded[k], params[k]) for k in RESUME_KEYS
               if _resume_value(k, recorded[k]) != _resume_value(k, params[k])}
    if same_corpus and not changed and resume:
        return OutputDecision("resume")
    asked = functools.partial(OutputRemedy, "overwrite", input, params)
    theirs = functools.partial(  # the fit that is there, continued
        OutputRemedy, "resume", input if same_corpus else previous.corpus.get("path", "CORPUS"),
        {**params, **recorded},
    )
    detail = Text(", ").join(option(k) + f": {a!r} -> {b!r}" for k, (a, b) in changed.items())
    other_corpus = (
        f"{previous.corpus.get('path')!r} (fingerprint "
        f"{previous.corpus.get('fingerprint', '?')[:12]}), not {{}} {input} (fingerprint "
        f"{fingerprint[:12]})"
    )
    if resume and not same_corpus:
        return OutputDecision(
            "refuse", CheckpointMismatchError, f"was fitted on {other_corpus.format('on')}",
            (theirs("resume with the original corpus"), asked(f"start a new fit of {input}")),
        )
    if resume:
        return OutputDecision(
            "refuse", CheckpointMismatchError, "was written with other parameters (" + detail + ")",
            (theirs("resume with the checkpoint's parameters"), asked("start the fit asked for")),
        )
    if same_corpus and not changed:
        if not previous.converged and previous.n_iter < params["max_iter"]:
            return OutputDecision(
                "refuse", OutputExistsError, f"this fit, stopped at iteration {previous.n_iter}",
                (theirs("continue it"), asked("replace it")),
            )
        what = f"this fit, finished at iteration {previous.n_iter}"
        if not previous.converged:  # at its max_iter: more iterations would continue it
            what += (" (" + option("resume", True) + " with a larger " + option("max_iter")
                     + " continues it)")
        return OutputDecision("refuse", OutputExistsError, what, (asked("replace it"),))
    what = (("a fit with other parameters (" + detail + ")") if same_corpus
            else f"a fit of {other_corpus.format('of')}")
    return OutputDecision("refuse", OutputExistsError, what,
                          (asked("replace it"), theirs("continue that fit")))


def _recorded_params(model: Model) -> dict[str, Any]:
    """The :data:`RESUME_KEYS` values ``model`` was fitted with (defaults where not recorded)."""
    return {
        key: model.params.get(key, _BEFORE_RECORDED.get(
            key, PARAMS[key].default if key in PARAMS else None
        ))
        for key in RESUME_KEYS
    }


def _resume_value(key: str, value: Any) -> Any:
    # a warm start is the same warm start when its U is the same, wherever the model lies now
    if key == "init_from" and isinstance(value, dict):
        return value.get("u_sha256")
    return value
