"""The command line's words for the structured remedies of sphdist's errors.

A message below :mod:`sphdist.cli` names parameters by their Python names
(:func:`sphdist.errors.option`) and the jobs that resolve it as
:class:`~sphdist.errors.Remedy` objects (:func:`sphdist.errors.remedy`). :class:`CommandForm`
renders them with the options of the click commands that own them: a parameter as the option
of the command that failed (``--memory-budget 4GiB``), a remedy as a pasteable command of the
command its action names (``sphdist fit --input c.zarr --output m.zarr --resume -r 5``).
The spelling of each option is read off the click objects, never a table: the long option,
or a short one that is a notation of its own rather than the long one's initial (``-r`` for
``--n-components``, ``-k`` for ``--n-clusters``; ``--input``, not ``-i``).
"""

from __future__ import annotations

import copy
import logging
import shlex
from typing import Any

import click

from sphdist.errors import _UNSET, Remedy, Text, render

__all__ = ["CommandForm", "rendered", "command", "render_for", "spelling"]


def spelling(param: click.Parameter) -> str:
    """How the command line writes ``param``: its long option, or its notation.

    Parameters
    ----------
    param : click.Parameter
        An option of a command.

    Returns
    -------
    str
        A short option whose letter is not the initial of the parameter's name (``-r`` of
        ``n_components``), else the first long option, else the first.

    Examples
    --------
    >>> spelling(click.Option(["--n-components", "-r", "n_components"]))
    '-r'
    >>> spelling(click.Option(["--input", "-i", "input_"]))
    '--input'
    """
    name = (param.name or "").strip("_")
    shorts = [o for o in param.opts if not o.startswith("--") and len(o) == 2]
    for short in shorts:
        if name and short[1] != name[0]:
            return short
    longs = [o for o in param.opts if o.startswith("--")]
    return (longs or list(param.opts))[0]


def _text(value: Any, param: click.Parameter | None = None) -> str:
    """A value as the command line writes it.

    ``1`` for a float option's 1.0, where the option reads a number as a float; ``1.0``
    where an integer would mean something else (``--max-df 1.0``, every document, is not
    ``--max-df 1``, one document).
    """
    if isinstance(value, float) and (param is None or isinstance(
            param.type, click.types.FloatParamType)):
        return repr(value).removesuffix(".0")
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _none(param: click.Parameter | None) -> str | None:
    """The choice that spells None (``--stop-words none``), where the option offers one."""
    choices = getattr(getattr(param, "type", None), "choices", None) or ()
    return "none" if "none" in choices else None


#: Python names whose click parameter is named otherwise, because the command passes its value
#: on under the Python name: the fields of :class:`~sphdist.jobs.cluster.ClusterSpec`
#: (:func:`sphdist.cli._common.cluster_spec`) and ``SourceSpec.format`` (``sphdist ingest``'s
#: ``fmt``, not to shadow the builtin). Looked up only where no parameter has the name itself.
ALIASES = {"address": "scheduler_address", "insecure": "insecure_local_cluster",
           "format": "fmt"}


def _find(command: click.Command | None, name: str) -> click.Parameter | None:
    if command is None:
        return None
    for wanted in (name, ALIASES.get(name)):
        for param in command.params:
            if wanted and (param.name == wanted or (param.name or "").rstrip("_") == wanted):
                return param
    return None


def _sub(command: click.Command | None, name: str) -> click.Command | None:
    """The command ``name`` of a group (its module imported, that one only), else None."""
    if not isinstance(command, click.Group):
        return None
    return command.get_command(click.Context(command), name)


class CommandForm:
    """The words of the command line for :func:`sphdist.errors.render`.

    Parameters
    ----------
    command : click.Command or None
        The command that failed: the owner of the parameters a message names.
    root : click.Group
        The ``sphdist`` group, where a remedy's action is looked up.
    """

    THEN = " && "

    def __init__(self, command: click.Command | None, root: click.Group,
                 argv: list[str] | None = None):
        self.command, self.root = command, root
        #: Where the failed command ran, as its line gave it (``--n-workers 1``): kept in a
        #: remedy of the same command, which names no such option itself.
        self.place = _place_words(command, argv or [])

    def _words(self, param: click.Parameter | None, name: str, value: Any) -> list[str]:
        if isinstance(param, click.Argument):
            values = value if isinstance(value, list | tuple) else [value]
            return [shlex.quote(_text(v)) for v in values if v is not _UNSET and v is not None]
        flag = f"--{name.replace('_', '-')}" if param is None else spelling(param)
        if value is _UNSET:
            return [flag]
        if value is None:
            spelled = _none(param)
            return [flag, spelled] if spelled else []
        if isinstance(param, click.Option) and param.is_flag or isinstance(value, bool):
            if value:
                return [flag]
            secondary = getattr(param, "secondary_opts", None) or []
            if secondary:
                return [secondary[0]]
            return [] if param is not None else [f"--no-{name.replace('_', '-')}"]
        if isinstance(value, list | tuple) and getattr(param, "multiple", False):
            return [w for v in value for w in (flag, shlex.quote(_text(v, param)))]
        return [flag, shlex.quote(_text(value, param))]

    def option(self, name: str, value: Any = _UNSET) -> str:
        """The option that sets ``name`` (to ``value``): the failed command's, else the group's.

        The ``sphdist`` group's own options (``--storage-option``) go before the command.
        """
        param = _find(self.command, name) or _find(self.root, name)
        return " ".join(self._words(param, name, value)) or name

    def remedy(self, fix: Remedy) -> str:
        """``sphdist ACTION ...``: the command of ``fix``, arguments in its order."""
        command: click.Command | None = self.root
        for word in fix.action.split():
            command = _sub(command, word)
        words = ["sphdist", fix.action]
        for name, value in fix.arguments().items():
            words += self._words(_find(command, name), name, value)
        if command is not None and command is self.command:
            named = set(fix.arguments())
            words += [w for name, given in self.place if name not in named for w in given]
        return " ".join(words)


#: The options that say where a command runs (its cluster), not what it computes: a remedy
#: that runs the same command again keeps them as the user gave them.
PLACE_OPTIONS = ("scheduler_address", "n_workers", "threads_per_worker", "memory_limit",
                 "tls_ca_file", "tls_cert", "tls_key", "dashboard_address",
                 "insecure_local_cluster")


def _place_words(command: click.Command | None,
                 argv: list[str]) -> list[tuple[str, list[str]]]:
    """The :data:`PLACE_OPTIONS` the line ``argv`` gave ``command``, each with its words."""
    if command is None:
        return []
    params = {o: p for p in command.params if isinstance(p, click.Option)
              and p.name in PLACE_OPTIONS for o in (*p.opts, *p.secondary_opts)}
    found: list[tuple[str, list[str]]] = []
    for i, word in enumerate(argv):
        flag, _, inline = word.partition("=")
        param = params.get(flag)
        if param is None or any(name == param.name for name, _ in found):
            continue
        if param.is_flag or inline:
            value = [spelling(param), shlex.quote(inline)] if inline else [flag]
        elif i + 1 < len(argv):
            value = [spelling(param), shlex.quote(argv[i + 1])]
        else:
            continue
        found.append((str(param.name), value))
    return found


def failed_command(ctx: click.Context) -> click.Command | None:
    """The command of the ``sphdist`` line that ``ctx`` (the group's) ran: its last word named.

    Walks the words of the line (what :class:`~sphdist.cli._common.Group` recorded) down the
    groups; ``ctx.command`` itself when ``ctx`` is a command's own context.
    """
    if not isinstance(ctx.command, click.Group):
        return ctx.command
    name = ctx.invoked_subcommand  # what click resolved (not a global option's value)
    command = _sub(ctx.command, name) if name else None
    words = list(ctx.meta.get("sphdist.argv") or [])
    valued = {o for p in ctx.command.params if isinstance(p, click.Option) and not p.is_flag
              for o in p.opts}  # the group's options that take a value (--log-level info)
    at = next((i for i, w in enumerate(words)
               if w == name and (i == 0 or words[i - 1] not in valued)), len(words))
    rest = words[at + 1:]
    for word in rest:  # a group's own command (``plot embedding``)
        if not isinstance(command, click.Group):
            break
        command = _sub(command, word) or command
    return command


def _root(ctx: click.Context | None) -> click.Group:
    """The group whose commands a remedy names: that of ``ctx``, else ``sphdist``'s.

    ``sphdist``'s own group outside a command, or for a command invoked on its own (a test).
    """
    root = None if ctx is None else ctx.find_root().command
    if isinstance(root, click.Group):
        return root
    # an import cycle: sphdist.cli imports this module (through _common) to build its group
    from sphdist.cli import main

    return main


def render_for(ctx: click.Context, message: Any) -> str:
    """``message`` (a string or an exception) in the words of the command that ``ctx`` ran."""
    return render(message, CommandForm(failed_command(ctx), _root(ctx), _argv(ctx)))


def _argv(ctx: click.Context | None) -> list[str]:
    """The words of the ``sphdist`` line (what the group recorded), else none."""
    return list((ctx.find_root().meta.get("sphdist.argv") or []) if ctx is not None else [])


def _form() -> CommandForm:
    """The form of the command running now (the ``sphdist`` group's, outside one)."""
    ctx = click.get_current_context(silent=True)
    return CommandForm(None if ctx is None else failed_command(ctx), _root(ctx), _argv(ctx))


def command(fix: Remedy | dict[str, Any]) -> str:
    """The pasteable command of a remedy (or of its fields, as :func:`dataclasses.asdict`)."""
    return _form().remedy(fix if isinstance(fix, Remedy) else Remedy(**fix))


def rendered(record: logging.LogRecord) -> logging.LogRecord:
    """A copy of ``record`` with its :class:`~sphdist.errors.Text` in the command line's words.

    What the command line's log formatter shows (:func:`sphdist.cli._common.setup_logging`);
    other handlers (a test's, a user's) see the record as it was logged, in the Python API's
    words.
    """
    args = record.args if isinstance(record.args, tuple) else ()
    form = _form()
    record = copy.copy(record)
    if isinstance(record.msg, Text):
        record.msg = render(record.msg, form)
    if args:
        record.args = tuple(render(a, form) if isinstance(a, Text) else a for a in args)
    return record
