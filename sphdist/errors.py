"""One exception hierarchy for sphdist, whose messages are data.

Every error a user can cause derives from :class:`SphdistError` and from the builtin that
describes it best, so ``except ValueError`` keeps working for callers that do not know sphdist
(the pattern of ``zarr.errors``). Messages name the offending file, value or document and say how
to resolve the problem; the CLI prints them as one line and exits non-zero.

A message is a :class:`Text`: a ``str`` in the Python API's words that keeps its parts, plain
text and the structured ones: a parameter named with :func:`option` and a job that resolves the
error named with :func:`remedy` (a :class:`Remedy`: the job, its target paths and its
parameters by their Python names). ``str(exc)`` is the Python words (keyword arguments and
calls); the command line renders the same parts with the options of its click commands
(:mod:`sphdist.cli._remedies`), and ``exc.remedies`` gives the jobs as data. No
markers inside strings, no module below :mod:`sphdist.cli` spells a flag, and this module
imports nothing of sphdist: a module that words its job's call in its own way registers that
wording here (:func:`words_for`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, SupportsIndex

__all__ = [
    "Remedy",
    "Param",
    "Text",
    "option",
    "remedy",
    "render",
    "remedies",
    "message_of",
    "words_for",
    "PythonForm",
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

logger = logging.getLogger("sphdist.errors")


@dataclasses.dataclass(frozen=True)
class Remedy:
    """A job that resolves an error: what it does, on which paths, with which parameters.

    Attributes
    ----------
    action : str
        The job, by the name of its ``sphdist`` command (``"fit"``).
    target : Mapping
        Its paths by parameter name, in order (``{"input": ..., "output": ...}``).
    overrides : Mapping
        Its other arguments by their Python names, in order (``{"resume": True,
        "n_components": 5}``): a bool is a switch, anything else a value.
    say : str, default ""
        What it does, in words (``"continue it"``), for the sentence around it.
    call : str, default ""
        The public Python name of the job's request, run by ``sphdist.jobs.run``
        (``"sphdist.jobs.transform.TransformRequest"``); empty: :data:`CALLS`' entry of
        ``action``.
    """

    action: str
    target: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    say: str = ""
    call: str = ""

    def arguments(self) -> dict[str, Any]:
        """The target paths and the overrides, one mapping in order."""
        return {**self.target, **self.overrides}


#: The public Python name of each action's request, where its :class:`Remedy` does not give
#: its own (:attr:`Remedy.call`; a request's remedy does, :meth:`sphdist.jobs.Request.remedy`).
#: Names only: nothing is imported.
CALLS: dict[str, str] = {
    "fit": "sphdist.jobs.fit.FitRequest",
    "evaluate": "sphdist.jobs.evaluate.EvaluateRequest",
    "info": "sphdist.jobs.info.InfoRequest",
    "transform": "sphdist.jobs.transform.TransformRequest",
    "plot convergence": "sphdist.jobs.plotting.PlotConvergenceRequest",
    "plot embedding": "sphdist.jobs.plotting.PlotEmbeddingRequest",
    "export": "sphdist.jobs.export.ExportRequest",
    "ingest": "sphdist.jobs.ingest.IngestRequest.of",
    "index": "sphdist.jobs.neighbors.IndexRequest",
    "layout": "sphdist.jobs.layout.LayoutRequest",
    "map": "sphdist.jobs.map_page.MapRequest",
}

#: Wordings registered by the module that owns a job or an option (:func:`words_for`).
_CALL_WORDS: dict[str, Callable[[dict[str, Any]], str]] = {}
_OPTION_WORDS: dict[str, Callable[[Any], str]] = {}


def words_for(action: str | None = None, *,
              option: str | None = None) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Register the Python words of an action's remedies, or of a group option.

    The module that owns the job words its call (``arguments -> text``: the neighbour jobs
    call the function of their mode) or the option's setter (``value -> text``: the
    ``sphdist`` group's ``storage_option``); :class:`PythonForm` uses it, and where none is
    registered the generic call of :data:`CALLS`. Dependency runs downwards: the owner
    imports this module, never the reverse.

    Parameters
    ----------
    action : str, optional
        An action (``"neighbors"``).
    option : str, optional
        A parameter name (``"storage_option"``).
    """
    def register(function: Callable[..., str]) -> Callable[..., str]:
        if action is not None:
            _CALL_WORDS[action] = function
        if option is not None:
            _OPTION_WORDS[option] = function
        return function

    return register


class _Unset:
    """The value of a parameter named without one.

    One instance, kept by copies and pickles: a message travels from a task to the driver,
    and ``is _UNSET`` must hold there too.
    """

    def __repr__(self) -> str:
        return "<unset>"

    def __reduce__(self) -> str:
        return "_UNSET"  # pickle, copy and deepcopy give this module's instance back


_UNSET: Any = _Unset()


@dataclasses.dataclass(frozen=True)
class Param:
    """A parameter named in a message: its Python name, and its value or none (``_UNSET``)."""

    name: str
    value: Any = _UNSET


@dataclasses.dataclass(frozen=True)
class _Jobs:
    """Jobs named in a message, in order: one pasteable chain (``a && b`` on the command line)."""

    fixes: tuple[Remedy, ...]


_Part = str | Param | _Jobs


class _Form(Protocol):
    """How :func:`render` words the structured parts of a message."""

    #: What joins the jobs of a chain.
    THEN: str

    def option(self, name: str, value: Any = _UNSET) -> str:
        """A parameter, with its value or not."""

    def remedy(self, fix: Remedy) -> str:
        """A job, as something to paste (without the backticks)."""


def _keywords(arguments: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in arguments.items())


class PythonForm:
    """The Python API's words: keyword arguments and calls."""

    THEN = "; "

    def option(self, name: str, value: Any = _UNSET) -> str:
        """``name`` or ``name=value`` (an option with a registered setter: its call)."""
        if name in _OPTION_WORDS:
            return _OPTION_WORDS[name](None if value is _UNSET else value)
        return name if value is _UNSET else f"{name}={value!r}"

    def remedy(self, fix: Remedy) -> str:
        """``sphdist.jobs.run(sphdist.jobs.transform.TransformRequest(model='m.zarr', ...))``."""
        if fix.action in _CALL_WORDS:  # a job whose call its module words (by its mode)
            return _CALL_WORDS[fix.action](fix.arguments())
        call = fix.call or CALLS.get(fix.action, fix.action)
        return f"sphdist.jobs.run({call}({_keywords(fix.arguments())}))"


def _word(part: _Part, form: _Form) -> str:
    if isinstance(part, Param):
        return form.option(part.name, part.value)
    if isinstance(part, _Jobs):
        return "`" + form.THEN.join(form.remedy(f) for f in part.fixes) + "`"
    return part


def _as_parts(value: Any) -> tuple[_Part, ...]:
    if isinstance(value, Text):
        return value.parts
    if isinstance(value, _Jobs | Param):
        return (value,)
    return (str(value),)


class Text(str):
    """A message that keeps its parts: a ``str`` in the Python API's words.

    It reads as the Python words anywhere a ``str`` does (``str(exc)``, a log line, a stored
    attribute, JSON); :func:`render` words its parts in another form (the command line's).
    ``+``, :meth:`join` and the stripping methods keep the parts; formatting it into an
    f-string or ``%`` gives the plain Python words (build messages with ``+``).

    Parameters
    ----------
    parts : str or iterable of str, Param and jobs, default ""
        The text.

    Examples
    --------
    >>> why = ("pass " + option("memory_budget", "4GiB") + " or choose another "
    ...        + option("output"))
    >>> str(why), why.params()
    ("pass memory_budget='4GiB' or choose another output", ('memory_budget', 'output'))
    """

    parts: tuple[_Part, ...]

    def __new__(cls, parts: Any = "") -> Text:
        """The Python words of ``parts``, which are kept as :attr:`parts`."""
        if isinstance(parts, str):
            kept: tuple[_Part, ...] = _as_parts(parts)
        else:
            kept = tuple(p for part in parts for p in _as_parts(part))
        merged: list[_Part] = []
        for part in kept:  # adjacent plain strings as one
            if isinstance(part, str) and merged and isinstance(merged[-1], str):
                merged[-1] += part
            elif part != "":
                merged.append(part)
        form = PythonForm()
        self = super().__new__(cls, "".join(_word(p, form) for p in merged))
        self.parts = tuple(merged)
        return self

    def __reduce__(self) -> tuple[Any, ...]:  # pickled by its parts (a worker's error)
        return (Text, (self.parts,))

    def __add__(self, other: Any) -> Text:
        if not isinstance(other, str | Param | _Jobs):
            return NotImplemented
        return Text((self, other))

    def __radd__(self, other: Any) -> Text:
        if not isinstance(other, str):
            return NotImplemented
        return Text((other, self))

    def join(self, items: Iterable[Any]) -> Text:  # type: ignore[override]
        """``self`` between the ``items``, their parts kept."""
        parts: list[Any] = []
        for i, item in enumerate(items):
            parts += [self, item] if i else [item]
        return Text(parts)

    def _ends(self, chars: str | None, left: bool, right: bool) -> Text:
        parts = list(self.parts)
        if left and parts and isinstance(parts[0], str):
            parts[0] = parts[0].lstrip(chars)
        if right and parts and isinstance(parts[-1], str):
            parts[-1] = parts[-1].rstrip(chars)
        return Text(parts)

    def strip(self, chars: str | None = None) -> Text:  # type: ignore[override]
        """``str.strip`` of the plain text at either end."""
        return self._ends(chars, True, True)

    def rstrip(self, chars: str | None = None) -> Text:  # type: ignore[override]
        """``str.rstrip`` of the plain text at the end."""
        return self._ends(chars, False, True)

    def lstrip(self, chars: str | None = None) -> Text:  # type: ignore[override]
        """``str.lstrip`` of the plain text at the start."""
        return self._ends(chars, True, False)

    def removesuffix(self, suffix: str) -> Text:  # type: ignore[override]
        """``str.removesuffix`` of the plain text at the end."""
        parts = list(self.parts)
        if parts and isinstance(parts[-1], str):
            parts[-1] = parts[-1].removesuffix(suffix)
        return Text(parts)

    def capitalize_first(self) -> Text:
        """The first letter in upper case (a sentence that starts with a clause)."""
        parts = list(self.parts)
        if parts and isinstance(parts[0], str) and parts[0]:
            parts[0] = parts[0][0].upper() + parts[0][1:]
        return Text(parts)

    def __getitem__(self, key: SupportsIndex | slice) -> str:
        return str(self)[key]

    def params(self) -> tuple[str, ...]:
        """The names of the parameters named, in order."""
        return tuple(p.name for p in self.parts if isinstance(p, Param))

    def remedies(self) -> tuple[Remedy, ...]:
        """The jobs named, in order."""
        return tuple(f for p in self.parts if isinstance(p, _Jobs) for f in p.fixes)


def option(name: str, value: Any = _UNSET) -> Text:
    """A parameter named in a message, with a value or not.

    Parameters
    ----------
    name : str
        The parameter's Python name (``"overwrite"``, ``"memory_budget"``).
    value : optional
        Its value (``True`` for a switch); without it, the parameter alone.

    Returns
    -------
    Text
        ``memory_budget='4GiB'`` (or ``output``) in the Python words; the command line words
        it ``--memory-budget 4GiB`` (or ``--output``).

    Examples
    --------
    >>> str("pass " + option("memory_budget", "4GiB"))
    "pass memory_budget='4GiB'"
    """
    return Text((Param(name, value),))


def remedy(fix: Remedy, *then: Remedy) -> Text:
    """A job named in a message, worded as a call or a command, in backticks.

    Parameters
    ----------
    fix : Remedy
    *then : Remedy
        Jobs to run after it, in order: one pasteable chain (``a && b`` on the command line).

    Returns
    -------
    Text

    Examples
    --------
    >>> str("continue it: " + remedy(Remedy("evaluate", {"model": "m.zarr"})))
    "continue it: `sphdist.jobs.run(sphdist.jobs.evaluate.EvaluateRequest(model='m.zarr'))`"
    """
    return Text((_Jobs((fix, *then)),))


def message_of(message: Any) -> Text:
    """The message of an exception (or a text) with its parts: what a wrapper passes on.

    An exception raised with a :class:`Text` gives it back; any other, ``str(exc)``.
    """
    if isinstance(message, BaseException):
        first = message.args[0] if len(message.args) == 1 else None
        return first if isinstance(first, Text) else Text(str(message))
    return message if isinstance(message, Text) else Text(str(message))


def render(message: Any, form: _Form | None = None) -> str:
    """``message`` with its parameters and remedies worded in ``form``.

    Parameters
    ----------
    message : str, Text or BaseException
        A message (an exception: the text it was raised with).
    form : _Form, optional
        Default :class:`PythonForm`; the command line passes its own.

    Returns
    -------
    str
    """
    form = PythonForm() if form is None else form
    return "".join(_word(p, form) for p in message_of(message).parts)


def remedies(message: Any) -> tuple[Remedy, ...]:
    """The :class:`Remedy` objects named in a message or an exception, in order."""
    return message_of(message).remedies()


class _Rendered:
    """:attr:`message` (its parts) and :attr:`remedies` of an exception raised with a Text."""

    args: tuple[Any, ...]

    @property
    def message(self) -> Text:
        """The message as raised, with its parts."""
        return message_of(self)

    @property
    def remedies(self) -> tuple[Remedy, ...]:
        """The jobs that resolve the error, in the order the message gives them."""
        return self.message.remedies()

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


class SphdistError(_Rendered, Exception):
    """Base class of every error sphdist raises on purpose.

    ``str(exc)`` words its parameters and remedies for a Python caller (:func:`render`);
    ``exc.remedies`` holds them as :class:`Remedy` objects, ``exc.message`` the parts.
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
