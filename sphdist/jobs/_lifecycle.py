"""One job lifecycle: a command is a frozen request, and :func:`run` does the rest.

A job that writes an output is a frozen dataclass, a :class:`Request`: its fields are the
command's parameters, checked when it is built (values only: no file is opened) and its paths
located then, once. What the job does is the request's :meth:`Request.execute`, given the
output it holds and the inputs its :meth:`Request.prepare` opened. Everything around that is
the same for every command and is done here, by :func:`run`, in this order:

1. the output policy, on names alone: the output is never an input of the command, never
   inside or around an input or another store, never a name sphdist keeps for another output
   (:func:`sphdist.io._policy.check_output_place`), and what its name says against the
   request (:meth:`Request.check_name`: the format a suffix names);
2. the inputs, opened and checked once (:meth:`Request.prepare`: their metadata, never the
   data), before anything is held or any cluster starts, so that a wrong input costs
   nothing; a refusal about an input comes first, as its remedies already say
   ``overwrite`` where an output is there;
3. the one overwrite decision (:meth:`Request.decide`), early, and again under the lock:
   what is at the output is of the request's kind
   (:func:`~sphdist.io._policy.check_output_kind`) and is replaced only with ``overwrite``
   (:func:`~sphdist.io._policy.refuse_existing`, the one wording of it), or, for a request
   that can continue it (a fit's ``resume``), continued;
4. the hold (:func:`sphdist.io.hold_output`: the lock, from before the output is looked at
   under it until after the commit), the place the work runs (``on``: a Dask cluster's
   context, entered under the hold and left before it ends), the work on the held output
   (:meth:`Request.execute`, whose writer commits through the :class:`~sphdist.io.Output` it
   is given), and the report of a Ctrl-C (:class:`~sphdist.errors.Interrupted`, saying what
   is at the output).

A remedy is a request too: the same request changed (:meth:`Request.replace`, as
scikit-learn's ``clone(est).set_params(**changes)``), which an error carries
(:meth:`Request.remedy`) and each interface words in its own terms (the command line as the
command, the Python API as the call).

A command that writes nothing (``evaluate``, ``info``: a report) is a request too, whose
:attr:`Request.writes` is None: :func:`run` opens its inputs and runs its work, and holds
nothing.

A new command is a request (its fields, :attr:`Request.command`, :attr:`Request.writes`,
:meth:`Request.inputs`, :meth:`Request.prepare`) and its :meth:`Request.execute`; nothing else.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import os
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any, ClassVar

from sphdist.errors import Remedy, remedy
from sphdist.io import Output, committed, exists, hold_output, location, output_format
from sphdist.io._policy import check_output_kind, check_output_place, refuse_existing

__all__ = ["Request", "run", "located"]


def located(path: str | os.PathLike[str] | None) -> Any:
    """``path`` located once, as a request keeps it (:func:`sphdist.io.location`); None stays.

    A local path stays as the user wrote it (relative stays relative, so messages name it so);
    a URL becomes a :class:`upath.UPath`. Looks at no file.
    """
    return None if path is None else location(path)


class Request(abc.ABC):
    """What a command writes, from what, with which parameters: built once, never changed.

    Subclasses are frozen dataclasses with an ``output`` and an ``overwrite`` field (declared
    there, in the command's own order of parameters; a report, :attr:`writes` None, has
    neither); they set
    :attr:`command` and :attr:`writes`, and implement :meth:`inputs` and :meth:`execute` (and
    :meth:`prepare` where the job opens inputs). :func:`run` does the rest.
    """

    #: The ``sphdist`` command that runs this request (``"transform"``, ``"plot embedding"``).
    command: ClassVar[str]
    #: What it writes: ``"corpus"``, ``"model"``, ``"embedding"``, ``"index"``, ``"layout"`` or
    #: ``"file"``; None for a report (:meth:`execute` returns it, nothing is held).
    writes: ClassVar[str | None]
    #: The fields a remedy names even at their default value (the paths), in order.
    targets: ClassVar[tuple[str, ...]] = ()
    #: Fields that say how this run shows its work, not what it computes: never in a remedy.
    quiet: ClassVar[tuple[str, ...]] = ("progress",)
    #: The formats of a file output, by suffix (:func:`sphdist.io.output_format`); None: the
    #: output's name says no format.
    formats: ClassVar[Mapping[str, str] | None] = None

    #: The output (a subclass' field; a report has none).
    output: Any
    #: Whether an output already there is replaced (a subclass' field; a report has none).
    overwrite: bool

    def inputs(self) -> tuple[Any, ...]:
        """What the command reads (paths, or None where an input is not given)."""
        return ()

    @property
    def written(self) -> str | None:
        """The format written: the ``format`` field, or the one the output's suffix names.

        None for a request without :attr:`formats`. The refusal of a suffix that names another
        format, or none, carries the request with a corrected output as its remedy.
        """
        if self.formats is None:
            return None
        asked = getattr(self, "format", None)  # a request with a format field: cleared below
        cleared = {} if asked is None else {"format": None}
        return output_format(self.output, asked, self.formats,
                             redo=lambda fixed: remedy(self.remedy(output=fixed, **cleared)))

    def check_name(self) -> None:
        """Refuse what the output's name says against the request (:attr:`written`).

        The format a file's suffix names (a ``.csv`` asked for as Parquet): looked at after
        the output policy and before the overwrite decision; reads nothing.
        """
        self.written  # noqa: B018 - raises

    def prepare(self) -> Any:
        """Open and check the inputs, once, before the output is held (default: nothing).

        Reads, never writes; whatever it returns is handed to :meth:`execute`.
        """
        return None

    def decide(self, prepared: Any, held: Output | None = None) -> Any:
        """The overwrite decision: refuse an output already there unless ``overwrite``.

        Made early, before the hold (``held`` None: cheap, never waiting for a writer), and
        again under the lock (``held``); what it returns then is what :meth:`execute` is
        given. A request that can also continue what is there (a fit's ``resume``) decides
        here, in its own words.

        Raises
        ------
        OutputExistsError
            If the output is there and not to be replaced
            (:func:`~sphdist.io._policy.refuse_existing`).
        """
        output = self.output if held is None else held.target
        there = exists(self.output) if self.writes == "file" else committed(output)
        if there and not self.overwrite:
            refuse_existing(output)
        return prepared

    @abc.abstractmethod
    def execute(self, held: Output | None, prepared: Any) -> Any:
        """The command's own work, writing through ``held`` (whose commit is the only one).

        ``held`` is None for a report (:attr:`writes` None), which returns what it found.
        """

    def replace(self, **changes: Any) -> Request:
        """The same request with ``changes`` (:func:`dataclasses.replace`): validated again."""
        return dataclasses.replace(self, **changes)

    def remedy(self, say: str = "", **changes: Any) -> Remedy:
        """The request changed by ``changes``, as the remedy an error carries.

        The paths (:attr:`targets`) are named always, every other field only where it differs
        from its default, in the order of the fields; fields in :attr:`quiet` never.
        """
        fixed = self.replace(**changes) if changes else self
        target, overrides = {}, {}
        for field in dataclasses.fields(fixed):
            value = getattr(fixed, field.name)
            if field.name in self.quiet or not field.init:
                continue
            if field.name in self.targets:
                if value is not None:
                    target[field.name] = str(value)
            elif field.default is dataclasses.MISSING or value != field.default:
                overrides[field.name] = str(value) if isinstance(value, os.PathLike) else value
        return Remedy(self.command, target, overrides, say, call=self.public_name())

    @classmethod
    def public_name(cls) -> str:
        """The dotted name a user imports the request by (``sphdist.jobs.neighbors.IndexRequest``).

        Its module's path up to the first private part (a package re-exports what its private
        modules define), then the class: what the Python words of its remedies call.
        """
        parts = cls.__module__.split(".")
        public = next((i for i, part in enumerate(parts) if part.startswith("_")), len(parts))
        return ".".join([*parts[:public], cls.__qualname__])


def run(request: Request, *, on: AbstractContextManager[Any] | None = None) -> Any:
    """Run ``request``: the policy, its inputs, the overwrite decision, the hold, the work.

    Parameters
    ----------
    request : Request
        The command to run, validated when it was built.
    on : context manager, optional
        Where the work runs, entered once the output is held and decided on, so that a
        refused or locked output starts no cluster (the command line's cluster,
        :func:`sphdist.jobs.cluster.connect`); default: the Dask scheduler active now.

    Returns
    -------
    object
        What :meth:`Request.execute` returns (the written store or a report). A report
        (:attr:`Request.writes` None) skips the output's steps: its inputs are opened
        (:meth:`Request.prepare`) and its work runs, holding nothing.

    Raises
    ------
    ParameterError
        If the output is refused by the output policy (an input, nested, a companion's name).
    OutputExistsError
        If something of another kind is at the output, or the output exists and
        ``request.overwrite`` is False (before anything is held, and again under the lock).
    OutputLockedError
        If another writer holds the output.
    Interrupted
        On Ctrl-C, saying what is at the output (nothing was written, unless it was committed).
    SphdistError
        Whatever the request's :meth:`~Request.prepare` and :meth:`~Request.execute` raise.
    """
    if request.writes is None:  # a report: no output to place, decide on or hold
        prepared = request.prepare()
        with on if on is not None else contextlib.nullcontext():
            return request.execute(None, prepared)
    inputs: Iterable[Any] = request.inputs()
    check_output_place(request.output, request.writes, inputs)
    check_output_kind(request.output, request.writes)
    request.check_name()
    prepared = request.decide(request.prepare())
    with hold_output(request.output, kind=request.writes, inputs=inputs) as held:
        prepared = request.decide(prepared, held)
        with on if on is not None else contextlib.nullcontext():
            return request.execute(held, prepared)
