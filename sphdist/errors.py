"""One exception hierarchy for sphdist.

Every error a user can cause derives from :class:`SphdistError` and from the builtin that
describes it best, so ``except ValueError`` keeps working for callers that do not know sphdist
(the pattern of ``zarr.errors``). Messages name the offending file, value or document and say how
to resolve the problem; the CLI prints them as one line and exits non-zero.

Remedies are structured, not command lines: a message names a parameter with :func:`option`
and a job that resolves the error with :func:`remedy` (a :class:`Remedy`: the job, its
target paths and its parameters by their Python names). ``str(exc)`` words them for a Python
caller, as keyword arguments and function calls (:func:`render`, :class:`PythonForm`); the
command line renders the same message with the options of its click commands
(:mod:`sphdist.cli._remedies`). No module below :mod:`sphdist.cli` spells a flag.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = [
    "Remedy",
    "option",
    "remedy",
    "render",
    "remedies",
    "PythonForm",
    "Words",
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


@dataclasses.dataclass(frozen=True)
class Remedy:
    """A job that resolves an error: what it does, on which paths, with which parameters.

    Attributes
    ----------
    action : str
        The job, by the name of its ``sphdist`` command (``"fit"``); its Python form is
        :data:`_REQUESTS`' entry run by ``sphdist.jobs.run`` (``sphdist.jobs.fit.FitRequest``),
        or :data:`_FUNCTIONS`'.
    target : Mapping
        Its paths by parameter name, in order (``{"input": ..., "output": ...}``).
    overrides : Mapping
        Its other arguments by their Python names, in order (``{"resume": True,
        "n_components": 5}``): a bool is a switch, anything else a value.
    say : str, default ""
        What it does, in words (``"continue it"``), for the sentence around it.
    """

    action: str
    target: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    say: str = ""

    def arguments(self) -> dict[str, Any]:
        """The target paths and the overrides, one mapping in order."""
        return {**self.target, **self.overrides}


#: The Python function of each :attr:`Remedy.action` (what :class:`PythonForm` calls).
_FUNCTIONS = {
    "evaluate": "sphdist.jobs.evaluate.evaluate_model",
}

#: The actions that are requests run by ``sphdist.jobs.run``: the request class of each.
_REQUESTS = {"fit": "sphdist.jobs.fit.FitRequest",
             "transform": "sphdist.jobs.transform.TransformRequest",
             "plot convergence": "sphdist.jobs.plotting.PlotConvergenceRequest",
             "plot embedding": "sphdist.jobs.plotting.PlotEmbeddingRequest",
             "export": "sphdist.jobs.export.ExportRequest"}

#: The actions whose call is worded by a function of their module (arguments -> text): the
#: ingest job's options are fields of its ``SourceSpec`` and ``TextSpec``; the index job
#: builds or checks, the neighbors job calls the function of its mode.
_CALLS = {"ingest": "sphdist.text.ingest.ingest_call",
          "index": "sphdist.jobs.neighbors.index_call",
          "neighbors": "sphdist.jobs.neighbors.neighbors_call"}

#: The options of the ``sphdist`` group itself, by the function that words the Python call
#: that sets them (value -> text): ``--storage-option KEY=VALUE`` is
#: :func:`sphdist.io.set_storage_options` in this process.
_SETTERS = {"storage_option": "sphdist.io._fs.storage_option_call"}

#: Delimiters of a structured part of a message (Unicode private use: never in a path).
_OPEN, _CLOSE = "\ue000", "\ue001"
_PART = re.compile(f"{_OPEN}(.*?){_CLOSE}", re.DOTALL)
_UNSET = object()


def _jsonable(value: Any) -> Any:
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return str(value)  # a path, a URL, a dtype


def option(name: str, value: Any = _UNSET) -> str:
    """A parameter named in a message, with a value or not, for :func:`render` to word.

    Parameters
    ----------
    name : str
        The parameter's Python name (``"overwrite"``, ``"memory_budget"``).
    value : optional
        Its value (``True`` for a switch); without it, the parameter alone.

    Returns
    -------
    str
        A marker to put in the message; ``str(exc)`` shows it as ``memory_budget='4GiB'``
        (or ``output``), the command line as ``--memory-budget 4GiB`` (or ``--output``).

    Examples
    --------
    >>> render(f"pass {option('memory_budget', '4GiB')} or choose another {option('output')}")
    "pass memory_budget='4GiB' or choose another output"
    """
    part: dict[str, Any] = {"option": name}
    if value is not _UNSET:
        part["value"] = _jsonable(value)
        if part["value"] != value or type(part["value"]) is not type(value):
            part["repr"] = repr(value)  # the Python words of a value JSON changes
    return _OPEN + json.dumps(part) + _CLOSE


def remedy(fix: Remedy, *then: Remedy) -> str:
    """A job named in a message, for :func:`render` to word as a call or a command.

    Parameters
    ----------
    fix : Remedy
    *then : Remedy
        Jobs to run after it, in order: one pasteable chain (``a && b`` on the command line).

    Examples
    --------
    >>> render("continue it: " + remedy(Remedy("fit", {"input": "c.zarr", "output": "m.zarr"},
    ...                                        {"resume": True, "n_components": 5})))
    "continue it: `sphdist.jobs.run(sphdist.jobs.fit.FitRequest(input='c.zarr', output='m.zarr', \
resume=True, n_components=5))`"
    """
    chain = [{"action": f.action, "target": _jsonable(f.target),
              "overrides": _jsonable(f.overrides), "say": f.say} for f in (fix, *then)]
    part = {"remedy": chain[0]} if not then else {"chain": chain}
    return _OPEN + json.dumps(part) + _CLOSE


class _Form(Protocol):
    """How :func:`render` words the structured parts of a message."""

    def option(self, name: str, value: Any = _UNSET) -> str:
        """A parameter, with its value or not."""

    def remedy(self, fix: Remedy) -> str:
        """A job, as something to paste (without the backticks)."""

    #: What joins the jobs of a chain.
    THEN: str


class PythonForm:
    """The Python API's words: keyword arguments and calls of :data:`_FUNCTIONS`."""

    THEN = "; "

    def option(self, name: str, value: Any = _UNSET) -> str:
        """``name`` or ``name=value`` (an option of the ``sphdist`` group: its setter's call)."""
        if name in _SETTERS:
            module, _, function = _SETTERS[name].rpartition(".")
            return str(getattr(importlib.import_module(module), function)(
                None if value is _UNSET else value))
        return name if value is _UNSET else f"{name}={value!r}"

    def remedy(self, fix: Remedy) -> str:
        """``sphdist.jobs.run(sphdist.jobs.fit.FitRequest(input='c.zarr', output='m.zarr'))``."""
        if fix.action in _CALLS:  # a job whose options are grouped in specs
            module, _, name = _CALLS[fix.action].rpartition(".")
            return str(getattr(importlib.import_module(module), name)(fix.arguments()))
        arguments = ", ".join(f"{k}={v!r}" for k, v in fix.arguments().items())
        if fix.action in _REQUESTS:
            return f"sphdist.jobs.run({_REQUESTS[fix.action]}({arguments}))"
        return f"{_FUNCTIONS.get(fix.action, fix.action)}({arguments})"


def _parts(message: str, form: _Form) -> str:
    def one(match: re.Match[str]) -> str:
        part = json.loads(match.group(1))
        if "remedy" in part:
            return "`" + form.remedy(Remedy(**part["remedy"])) + "`"
        if "chain" in part:
            return "`" + form.THEN.join(form.remedy(Remedy(**f)) for f in part["chain"]) + "`"
        if "repr" in part and isinstance(form, PythonForm):
            return f"{part['option']}={part['repr']}"
        return form.option(part["option"], part.get("value", _UNSET))

    return _PART.sub(one, message)


def render(message: Any, form: _Form | None = None) -> str:
    """``message`` with its parameters and remedies worded in ``form``.

    Parameters
    ----------
    message : str or BaseException
        A message with the markers of :func:`option` and :func:`remedy` (an exception: the
        text it was raised with).
    form : _Form, optional
        Default :class:`PythonForm`; the command line passes its own.

    Returns
    -------
    str
    """
    text = template(message) if isinstance(message, BaseException | Words) else str(message)
    return _parts(text, PythonForm() if form is None else form)


def template(exc: Any) -> str:
    """The message ``exc`` was raised with, its markers unrendered (a wrapper passes it on).

    Also the text of a :class:`Words`; anything else: ``str(exc)``.
    """
    if isinstance(exc, SphdistError | Interrupted | Words):
        return exc.template
    return str(exc)


class Words(str):
    """A message with markers: a ``str`` in the Python API's words that keeps its template.

    What a log line is given (as its message or an argument): it reads as the Python API's
    words anywhere a ``str`` does, and the command line's log handler renders
    :attr:`template` in its own (:mod:`sphdist.cli._remedies`). Slicing or formatting it
    gives a plain ``str`` of the Python words.

    Parameters
    ----------
    template : str
        The text, with the markers of :func:`option` and :func:`remedy`.

    Examples
    --------
    >>> why = Words(f"{option('memory_budget')} sets it")
    >>> why, why.template == f"{option('memory_budget')} sets it"
    ('memory_budget sets it', True)
    """

    template: str

    def __new__(cls, template: str) -> Words:
        """The Python words of ``template``, which is kept as :attr:`template`."""
        self = super().__new__(cls, _parts(str(template), PythonForm()))
        self.template = str(getattr(template, "template", template))
        return self


def remedies(message: Any) -> tuple[Remedy, ...]:
    """The :class:`Remedy` objects named in a message or an exception, in order."""
    text = template(message) if isinstance(message, BaseException) else str(message)
    found = (json.loads(m.group(1)) for m in _PART.finditer(text))
    return tuple(Remedy(**fix) for part in found
                 for fix in ([part["remedy"]] if "remedy" in part else part.get("chain", [])))


class _Rendered:
    """``str()`` in the Python API's words; :attr:`template` and :attr:`remedies` kept."""

    @property
    def template(self) -> str:
        """The message as raised, with the markers of :func:`option` and :func:`remedy`."""
        return super().__str__()  # type: ignore[misc]

    @property
    def remedies(self) -> tuple[Remedy, ...]:
        """The jobs that resolve the error, in the order the message gives them."""
        return remedies(self.template)

    def __str__(self) -> str:
        return _parts(self.template, PythonForm())


class SphdistError(_Rendered, Exception):
    """Base class of every error sphdist raises on purpose.

    ``str(exc)`` words its parameters and remedies for a Python caller (:func:`render`);
    :attr:`remedies` holds them as :class:`Remedy` objects.
    """


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


class Interrupted(_Rendered, KeyboardInterrupt):
    """Ctrl-C stopped a job; the message says what it left at its output and how to go on.

    A :class:`KeyboardInterrupt` (``except KeyboardInterrupt`` still catches it, ``except
    Exception`` does not), not a :class:`SphdistError`: the user stopped the job, nothing failed.
    """
