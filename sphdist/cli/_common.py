"""Pieces shared by the command modules: error handling, logging, parameter types.

Errors a user can cause (:class:`sphdist.errors.SphdistError`, and OS errors such as a full or
read-only disk) are printed as one line, ``Error: ...``, with exit status 1 and no traceback
unless ``--debug`` is given; bad option values are usage errors with exit status 2.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib
import json
import logging
import os
import signal
import stat
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from numbers import Integral
from typing import Any

import click

from sphdist.cli._remedies import render_for, rendered
from sphdist.core.params import PARAMS, Choice, Param, Range, describe
from sphdist.errors import Interrupted, SphdistError, Text
from sphdist.io import is_remote, is_storage_failure, location, storage_error
from sphdist.jobs import _cluster_checks
from sphdist.jobs._cluster_spec import ClusterConflictError, ClusterSpec

logger = logging.getLogger("sphdist")

def _range(interval: Range) -> click.ParamType:
    """IntRange / FloatRange with the ends of a :class:`~sphdist.core.params.Range`."""
    kind = click.IntRange if interval.type is Integral else click.FloatRange
    return kind(
        min=interval.left, max=interval.right,
        min_open=interval.closed in ("right", "neither"),
        max_open=interval.closed in ("left", "neither"),
    )


class _NumberOrChoice(click.ParamType):
    """A number in a range, or one of some words (a union of an Interval and StrOptions)."""

    def __init__(self, number: click.ParamType, choices: list[str], words: str):
        self.number, self.choices, self.words = number, choices, words
        number_name = "INTEGER" if isinstance(number, click.IntRange) else "FLOAT"
        self.name = f"{number_name}|{'|'.join(choices)}"

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return f"[{self.name}]"

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        if value in self.choices:
            return value
        try:
            return self.number.convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"{value!r} is not {self.words}.", param, ctx)


def param_type(param: Param) -> click.ParamType:
    """The click type of a fit parameter, derived from its spec (no scikit-learn imported).

    :class:`~sphdist.core.params.Range` -> ``IntRange`` / ``FloatRange`` with the same open or
    closed ends, :class:`~sphdist.core.params.Choice` -> ``click.Choice``, a range or words
    (``lam``, ``mu``) -> one type taking either; what a command line cannot express (None, a
    RandomState) is left out.

    Parameters
    ----------
    param : sphdist.core.params.Param
        A row of :data:`sphdist.core.params.PARAMS` (or of a job's table).

    Returns
    -------
    click.ParamType
    """
    ranges = [c for c in param.spec if isinstance(c, Range)]
    choices = sorted(o for c in param.spec if isinstance(c, Choice) for o in c.options)
    if ranges and choices:
        return _NumberOrChoice(_range(ranges[0]), choices, describe(param.spec))
    if ranges:
        return _range(ranges[0])
    return click.Choice(choices)


def param_option(
    name: str, *decls: str, table: dict[str, Param] | None = None, **overrides: Any
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A click option for the fit parameter ``name``: type, default and help from the table.

    Parameters
    ----------
    name : str
        A key of ``table``.
    *decls : str
        Option names (default ``--<name with dashes>``); the function argument is ``name``.
    table : dict, optional
        The parameter table; default :data:`sphdist.core.params.PARAMS`.
    **overrides
        Other arguments of :func:`click.option` (e.g. another ``default``).
    """
    param = (PARAMS if table is None else table)[name]
    kind = param_type(param)
    help_ = param.help
    if isinstance(kind, _NumberOrChoice):
        help_ += f" Must be {kind.words}."
    options: dict[str, Any] = dict(
        type=kind, default=param.default, show_default=True, help=help_
    )
    return click.option(*(decls or (f"--{name.replace('_', '-')}",)), name, **(options | overrides))


class StorePath(click.ParamType):
    """A local path or a URL (``s3://bucket/model.zarr``), as :func:`sphdist.io._fs.location`."""

    name = "path"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """The path-like handle; an unknown protocol is a usage error."""
        try:
            path = location(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if ctx is not None and param is not None and param.name == "output":
            ctx.meta["sphdist.output"] = str(path)  # named by an OS error of a write (Group)
        if ctx is not None and is_remote(path):  # named if the object store fails (Group)
            ctx.meta.setdefault("sphdist.urls", []).append(str(path))
        return path


#: The type of every option that names a corpus, model, embedding or output file.
STORE_PATH = StorePath()


class CommandList(click.Group):
    """A group whose ``--help`` gives each command's whole first sentence.

    click cuts it to the terminal's width less the names, mid-sentence, with "...".
    """

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands, each with the whole first sentence of its help (wrapped, not cut)."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class Group(CommandList):
    """Turns sphdist errors into one-line messages (exit 1) unless --debug.

    An interrupted job (Ctrl-C, or SIGTERM: :class:`Terminated`) prints what it left in the
    same one line and exits with the conventional status, 128 + the signal (130, 143).

    With ``--json`` (:func:`json_option`), every error -- a usage error (exit 2) too -- is
    also one JSON object on stdout (:func:`error_report`); stderr keeps the one ``Error:`` line
    and the exit status is the same.

    Its commands are loaded lazily, as click's documentation does it ("Lazily Loading
    Subcommands"): ``lazy_subcommands`` maps each command's name to the ``"module.attr"`` of
    its click command, imported when the command is first asked for, so that ``sphdist
    neighbors`` imports :mod:`sphdist.cli.use` (and what it uses), not the modules of
    ``ingest`` or ``fit``. :attr:`commands` imports them all, so it is always the whole table.
    Every command also takes ``--debug`` and ``-q`` after its name (:func:`accept_global_flags`).
    """

    def __init__(self, *args: Any, lazy_subcommands: Mapping[str, str] | None = None,
                 **kwargs: Any):
        #: Command name -> ``"module.attr"`` of the click command, imported on first use.
        self.lazy_subcommands: dict[str, str] = dict(lazy_subcommands or {})
        self._loaded: dict[str, click.Command] = {}
        super().__init__(*args, **kwargs)

    @property
    def commands(self) -> dict[str, click.Command]:  # type: ignore[override]
        """Every command, the lazy ones imported (click's table, for click and tools)."""
        for name in sorted(self.lazy_subcommands):
            self._lazy_load(name)
        return self._loaded

    @commands.setter
    def commands(self, value: dict[str, click.Command]) -> None:
        self._loaded = value

    def _lazy_load(self, name: str) -> click.Command:
        """The command ``name``, its module imported the first time."""
        if name not in self._loaded:
            module, _, attr = self.lazy_subcommands[name].rpartition(".")
            command = getattr(importlib.import_module(module), attr)
            if not isinstance(command, click.Command) or command.name != name:
                raise RuntimeError(f"{module}.{attr} is not the click command {name!r}")
            accept_global_flags(command)
            self._loaded[name] = command
        return self._loaded[name]

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        self._loaded[name or cmd.name or ""] = cmd  # no import of the lazy commands' modules

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_subcommands:
            return self._lazy_load(cmd_name)
        return self._loaded.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self._loaded) | set(self.lazy_subcommands))

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta[_ARGV] = list(args)  # for a parse error that comes before --json is read
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        with _terminate_as_interrupt() as received:
            try:
                return self._invoke(ctx)
            except KeyboardInterrupt:  # a job that does not say what it left: click's words
                if ctx.obj and ctx.obj.get("debug"):
                    raise
                click.echo("Aborted!", err=True)
                raise click.exceptions.Exit(128 + received()) from None
            except click.ClickException as exc:
                if getattr(exc, "interrupted", False):  # the conventional status, 128 + signal
                    exc.exit_code = 128 + received()
                raise

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # stdout closed by its reader (`sphdist info X | head -2`)
            if ctx.obj and ctx.obj.get("debug") or not _stdout_is_a_pipe():
                raise
            _end_quietly_on_closed_pipe()
        except click.exceptions.ClickException as exc:  # usage errors
            _echo_error(ctx, exc.format_message(), type(exc).__name__)
            raise
        except (click.exceptions.Exit, click.Abort):
            raise
        except Interrupted as exc:  # Ctrl-C, where the job says what it left (else "Aborted!")
            if ctx.obj and ctx.obj.get("debug"):
                raise
            error = _error(ctx, render_for(ctx, exc), "Interrupted")
            error.interrupted = True  # type: ignore[attr-defined]
            raise error from None
        except (SphdistError, OSError) as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            if not isinstance(exc, SphdistError) and _urls(ctx):  # the object store failed
                raise _error(ctx, _store_failure(ctx, exc)) from None
            worded = None if isinstance(exc, SphdistError) else _os_words(exc)
            message = (render_for(ctx, exc) if isinstance(exc, SphdistError)
                       else worded or f"{type(exc).__name__}: {exc}")
            if not isinstance(exc, SphdistError) and not worded and exc.errno in _OS_REMEDIES:
                output = ctx.meta.get("sphdist.output")  # a write's error names a chunk key
                if output and not str(exc.filename or "").startswith(output):
                    message = f"{output}: {message}"
                message += f". To resolve this, {_OS_REMEDIES[exc.errno]}"
            raise _error(ctx, message, type(exc).__name__) from None
        except (MemoryError, EOFError) as exc:  # EOFError: click would print "Aborted!"
            if ctx.obj and ctx.obj.get("debug"):
                raise
            kind = MemoryError if isinstance(exc, MemoryError) else EOFError
            raise _error(
                ctx, f"{kind.__name__}: {exc}. To resolve this, {_REMEDIES[kind]}", kind.__name__
            ) from None
        except Exception as exc:  # an object store's client (botocore, aiohttp) failed
            if ctx.obj and ctx.obj.get("debug"):
                raise
            if _no_worker_left(exc):  # the fit says it itself, with its --resume
                raise _error(ctx, _no_workers_message(exc), "NoWorkerError") from None
            if not _urls(ctx) or not is_storage_failure(exc):
                raise
            raise _error(ctx, _store_failure(ctx, exc)) from None


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread where Ctrl-C raises :class:`KeyboardInterrupt`.

    Batch schedulers (SLURM, Kubernetes, systemd) stop a job with SIGTERM and a grace period;
    raised as an interrupt, it takes the path of Ctrl-C: a fit keeps its last checkpoint and
    says the ``--resume`` that continues it, every held output releases its lock and removes
    its staging, and the command exits with 128 + 15.
    """


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[Callable[[], int]]:
    """SIGTERM raised as :class:`Terminated` while the block runs; yields the signal's number.

    The yielded function gives the signal that interrupted the block: SIGTERM once its handler
    ran, else SIGINT (Ctrl-C, which Python raises as KeyboardInterrupt itself). Outside the
    main thread (a test's runner in a thread) signals cannot be handled: nothing is installed.
    """
    received = [signal.SIGINT]

    def on_sigterm(signum: int, frame: Any) -> None:
        received[0] = signal.SIGTERM
        raise Terminated()

    if threading.current_thread() is not threading.main_thread():
        yield lambda: int(received[0])
        return
    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield lambda: int(received[0])
    finally:
        signal.signal(signal.SIGTERM, previous)


def _no_worker_left(exc: BaseException) -> bool:
    """:func:`sphdist.jobs.cluster.no_worker_left`; False while ``distributed`` is not imported."""
    if "distributed" not in sys.modules:  # no cluster ran: neither it nor jobs.cluster is loaded
        return False
    from sphdist.jobs.cluster import no_worker_left  # dask: only once a cluster ran (above)

    return no_worker_left(exc)


def _no_workers_message(exc: Any) -> str:
    """One line for a job whose cluster had no worker (all lost, or none started)."""
    return (
        f"the Dask cluster had no worker for {float(getattr(exc, 'timeout', 0) or 0):.0f} s, "
        "so the job's tasks could not run (every worker lost, or none started); nothing was "
        "written. To resolve this, start workers for the scheduler (`dask worker "
        "SCHEDULER_ADDRESS`), or see in their logs why they ended, then run the command again."
    )


def _stdout_is_a_pipe() -> bool:
    try:
        mode = os.fstat(sys.stdout.fileno()).st_mode
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's buffer)
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


#: The exit status of a command whose output pipe was closed: 128 + SIGPIPE, as a shell
#: reports a Unix tool that the closed pipe ended (``yes | head -1`` under ``pipefail``).
CLOSED_PIPE_STATUS = 141


def _end_quietly_on_closed_pipe() -> None:
    """Exit with :data:`CLOSED_PIPE_STATUS` and no message, as Unix tools do on a closed pipe.

    stdout is pointed at /dev/null first, so that the interpreter's last flush of the
    unwritten output does not fail again at exit (the recipe of Python's ``signal`` docs).
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    raise click.exceptions.Exit(CLOSED_PIPE_STATUS)


def _late_debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and isinstance(ctx.obj, dict):
        ctx.obj["debug"] = True


def _late_quiet(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        logger.setLevel(max(logger.level, logging.WARNING))


def accept_global_flags(command: click.Command) -> None:
    """Let ``command`` (and each command of a group) take ``--debug`` and ``-q`` after its name.

    ``sphdist fit ... -q`` means ``sphdist -q fit ...``: both set the same state as the
    options of :func:`sphdist.cli.main`. A command that has a ``-q`` of its own
    (``neighbors -q QUERY``) takes ``--quiet`` only.
    """
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            accept_global_flags(sub)
        return
    taken = {opt for param in command.params for opt in param.opts}
    quiet = [o for o in ("--quiet", "-q") if o not in taken]
    if "--debug" not in taken:
        command.params.append(click.Option(
            ["--debug"], is_flag=True, expose_value=False, is_eager=True, callback=_late_debug,
            help="Show full tracebacks on errors (as `sphdist --debug`)."))
    if quiet:
        command.params.append(click.Option(
            quiet, is_flag=True, expose_value=False, is_eager=True, callback=_late_quiet,
            help="Only warnings and errors on stderr (as `sphdist -q`)."))


#: ``ctx.meta`` keys: the value of --json once it is read, the words after ``sphdist``.
_JSON, _ARGV = "sphdist.json", "sphdist.argv"


def json_option(help: str = "Print one JSON object on stdout.") -> Callable[..., Any]:
    """The ``--json`` flag of a command (argument ``as_json``), read before its other options.

    What :class:`Group` reads to print an error as JSON; eager, so that a bad value of another
    option is reported as JSON wherever ``--json`` stands on the line.
    """

    def record(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
        ctx.meta[_JSON] = value
        return value

    return click.option("--json", "as_json", is_flag=True, is_eager=True, callback=record,
                        help=help)


def _wants_json(ctx: click.Context) -> bool:
    if _JSON in ctx.meta:
        return bool(ctx.meta[_JSON])
    words = ctx.meta.get(_ARGV) or []  # --json not read yet: the command line did not parse
    return "--json" in (words[:words.index("--")] if "--" in words else words)


def error_report(message: str, type_: str) -> dict[str, Any]:
    """The JSON object of an error: ``error`` (the message), ``type``, ``remedy``.

    ``remedy`` is the text after "To resolve this, " (None if the message has none).

    Examples
    --------
    >>> error_report("x: no model. To resolve this, fit one.", "InputNotFoundError")["remedy"]
    'fit one.'
    """
    _, found, remedy = message.partition("To resolve this, ")
    return {"error": message, "type": type_, "remedy": remedy if found else None}


def _echo_error(ctx: click.Context, message: str, type_: str) -> None:
    if _wants_json(ctx):
        echo_json(error_report(message, type_))


def _error(ctx: click.Context, message: str, type_: str = "StorageError") -> click.ClickException:
    """The one-line error to raise, after its JSON object when --json was given."""
    _echo_error(ctx, message, type_)
    return click.ClickException(message)


def _urls(ctx: click.Context) -> list[str]:
    """The URLs the command was given (:class:`StorePath`), in order."""
    return ctx.meta.get("sphdist.urls") or []


def _store_failure(ctx: click.Context, exc: BaseException) -> str:
    return str(storage_error(_urls(ctx)[0], exc))


_REMEDIES = {  # the last resort, for errors no layer turned into a SphdistError
    MemoryError: "check the input's shape (`sphdist info INPUT`) and the sizes given (-r, "
                 "--n-features, --chunk-size) against this machine's memory",
    EOFError: "check that the input files are complete (a .gz file: `gzip -t FILE`)",
}


_OS_REMEDIES = {  # errno -> remedy, for OS errors on outputs
    errno.ENOSPC: "free space there or choose another --output; nothing half-written was left",
    errno.EDQUOT: "free space there or choose another --output; nothing half-written was left",
    errno.EROFS: "choose an --output on a writable filesystem",
    errno.EACCES: "choose an --output you may write to (or fix its permissions)",
    errno.EPERM: "choose an --output you may write to (or fix its permissions)",
}


def _os_words(exc: OSError) -> str | None:
    """One sentence and a remedy for an OS error on a path that says nothing by its number.

    A name too long for the filesystem (often the ``<output>.lock`` or staging name sphdist
    puts beside an output, longer than the output's own), and a path through a loop of
    symbolic links (which ``mkdir`` reports as ``File exists``); None for any other error.
    """
    name = exc.filename
    if name is None:
        return None
    code = exc.errno
    if code == errno.EEXIST:
        try:
            os.stat(name)
        except OSError as looped:
            code = looped.errno
    if code == errno.ENAMETOOLONG:
        return (f"{name}: the name is too long for the filesystem (most allow 255 bytes; "
                "beside an output sphdist writes longer names: <output>.lock, <output>.old, "
                "a staging name). To resolve this, choose a shorter name")
    if code == errno.ELOOP:
        return (f"{name}: the path runs through a loop of symbolic links. To resolve this, "
                f"fix or remove the link (`ls -l {name}`), or choose another path")
    return None


class _AboveTheBars(logging.StreamHandler):  # type: ignore[type-arg]
    """A log handler that writes each line with ``tqdm.write``: above any progress bar.

    A plain stream handler writes into the middle of a bar being drawn (``fit: 0%|...|
    0/4 [00:00]X (97.13 MiB) is held ...``); ``tqdm.write`` clears the bars, writes the line
    and draws them again below it (what ``tqdm.contrib.logging.logging_redirect_tqdm`` does
    for a block of code, here for the whole command). Before tqdm is imported no bar can be
    on the screen: the line is written as a plain handler writes it, without importing tqdm.
    """

    def emit(self, record: logging.LogRecord) -> None:
        if "tqdm" not in sys.modules:  # no bar can be drawn: a plain line (tqdm not imported)
            super().emit(record)
            return
        from tqdm import tqdm

        try:
            tqdm.write(self.format(record), file=self.stream)
            self.flush()
        except RecursionError:  # as logging.StreamHandler
            raise
        except Exception:
            self.handleError(record)


class _CommandLineWords(logging.Formatter):
    """Formats a log line with its :class:`~sphdist.errors.Text` in the command line's words."""

    def format(self, record: logging.LogRecord) -> str:
        args = record.args if isinstance(record.args, tuple) else ()
        if isinstance(record.msg, Text) or any(isinstance(a, Text) for a in args):
            record = rendered(record)
        return super().format(record)


def setup_logging(level: str, quiet: bool) -> None:
    """Log lines of the ``sphdist`` logger on stderr, above any progress bar, at ``level``."""
    handler = _AboveTheBars(sys.stderr)
    handler.setFormatter(_CommandLineWords("%(message)s"))
    logger.handlers[:] = [handler]
    logger.setLevel(logging.WARNING if quiet else getattr(logging, level.upper()))
    logger.propagate = False


def progress_enabled() -> bool:
    """Whether to draw progress bars: stderr is a terminal and INFO lines are shown."""
    return sys.stderr.isatty() and logger.getEffectiveLevel() <= logging.INFO


def progress_mode() -> bool | str:
    """The ``mode`` of :func:`sphdist._progress.progress` for a command's long work.

    A tqdm bar on a terminal (True), INFO lines on the ``sphdist`` logger otherwise ("log":
    a batch job's log shows the work advancing), nothing with ``-q`` or ``--log-level
    warning`` (False).
    """
    if logger.getEffectiveLevel() > logging.INFO:
        return False
    return True if sys.stderr.isatty() else "log"


def echo_json(payload: dict[str, Any]) -> None:
    """Print one JSON object on stdout (numpy scalars become plain numbers)."""
    click.echo(json.dumps(
        payload, default=lambda o: o.item() if hasattr(o, "item") else str(o)
    ))


def _checked(name: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback refusing a value with :mod:`sphdist.jobs.cluster`'s check ``name``.

    An option's own default is not checked (it is valid, and the check imports distributed).
    The checks are those of :mod:`sphdist.jobs._cluster_checks`, which imports dask and
    distributed only when one runs (:mod:`sphdist.jobs.cluster` imports dask).
    """

    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None or (
            param.name is not None
            and ctx.get_parameter_source(param.name) is click.core.ParameterSource.DEFAULT
        ):
            return value
        try:
            getattr(_cluster_checks, name)(value)
        except SphdistError as exc:
            raise click.BadParameter(render_for(ctx, exc), ctx, param) from None
        return value

    return callback


#: The options of :func:`cluster_options`: the argument of each, in the order of ``--help``.
CLUSTER_OPTIONS = ("scheduler_address", "n_workers", "threads_per_worker", "memory_limit",
                   "tls_ca_file", "tls_cert", "tls_key")
#: What ``cluster_options(local_cluster=True)`` adds (``sphdist fit``'s LocalCluster).
LOCAL_CLUSTER_OPTIONS = ("dashboard_address", "insecure_local_cluster")


def _cluster_option_decorators(local_cluster: bool) -> list[Callable[..., Any]]:
    """The click options of :func:`cluster_options`, innermost last (as they are applied)."""
    options = [
        click.option("--scheduler-address", envvar="DASK_SCHEDULER_ADDRESS",
                     callback=_checked("check_scheduler_address"),
                     help="Existing Dask scheduler [env DASK_SCHEDULER_ADDRESS]; default: run "
                          "on this machine."),
        click.option("--n-workers", type=click.IntRange(min=0),
                     help="Worker processes of a LocalCluster [default: 0, dask's threads in "
                          "this process, whatever the size of the corpus]."),
        click.option("--threads-per-worker", type=click.IntRange(min=1), default=1,
                     show_default=True,
                     help="Threads per LocalCluster worker (each task runs one BLAS thread)."),
        click.option("--memory-limit", default="auto", show_default=True,
                     callback=_checked("check_memory_limit"),
                     help="LocalCluster memory limit per worker (bytes or e.g. 4GiB)."),
        click.option("--tls-ca-file", type=click.Path(), envvar="SPHDIST_TLS_CA_FILE",
                     help="CA certificate (PEM) of a tls:// scheduler [env SPHDIST_TLS_CA_FILE]."),
        click.option("--tls-cert", type=click.Path(), envvar="SPHDIST_TLS_CERT",
                     help="Client certificate (PEM) [env SPHDIST_TLS_CERT]."),
        click.option("--tls-key", type=click.Path(), envvar="SPHDIST_TLS_KEY",
                     help="Client private key (PEM) [env SPHDIST_TLS_KEY]."),
    ]
    if local_cluster:
        options += [
            click.option(
                "--dashboard-address", default="127.0.0.1:0", show_default=True,
                callback=_checked("check_dashboard_address"),
                help="LocalCluster dashboard; loopback unless e.g. 0.0.0.0:8787 is asked for.",
            ),
            click.option(
                "--insecure-local-cluster", is_flag=True,
                help="Start the LocalCluster without TLS: faster per iteration "
                     "(cluster/README.md), but any process on this machine can then run code "
                     "in its workers.",
            ),
        ]
    return options


def cluster_options(
    command: Callable[..., Any] | None = None, *, local_cluster: bool = False
) -> Any:
    """The cluster options of a command, handed to it as one ``cluster`` argument, a ClusterSpec.

    Adds --scheduler-address, --n-workers, --threads-per-worker, --memory-limit and --tls-*
    (with ``local_cluster``: --dashboard-address and --insecure-local-cluster too, ``sphdist
    fit``'s) and passes the command ``cluster=``:class:`sphdist.jobs.cluster.ClusterSpec` of
    their values instead of the values. The same options, with the same meaning, for every
    command that runs on Dask; a value :mod:`sphdist.jobs.cluster` cannot use is a usage
    error (exit 2) naming the option, and so are the combinations the spec refuses
    (``--n-workers`` beside a scheduler address, TLS files without the CA and certificate),
    rendered here as the flags the user typed.

    Use as ``@cluster_options`` or ``@cluster_options(local_cluster=True)``.
    """
    if command is None:
        return functools.partial(cluster_options, local_cluster=local_cluster)
    names = CLUSTER_OPTIONS + (LOCAL_CLUSTER_OPTIONS if local_cluster else ())

    @functools.wraps(command)
    def with_spec(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in names}
        kwargs["cluster"] = cluster_spec(click.get_current_context(), values)
        return command(*args, **kwargs)

    for option in reversed(_cluster_option_decorators(local_cluster)):
        with_spec = option(with_spec)
    return with_spec


def cluster_spec(ctx: click.Context, values: dict[str, Any]) -> Any:
    """The :class:`~sphdist.jobs.cluster.ClusterSpec` of the cluster options' ``values``.

    Its refusals of a combination are usage errors worded in the flags of the command line
    (and the environment variable, where the scheduler address came from there).
    """
    try:
        return ClusterSpec(
            address=values["scheduler_address"], n_workers=values["n_workers"],
            threads_per_worker=values["threads_per_worker"],
            memory_limit=values["memory_limit"],
            dashboard_address=values.get("dashboard_address", "127.0.0.1:0"),
            tls_ca_file=values["tls_ca_file"], tls_cert=values["tls_cert"],
            tls_key=values["tls_key"], insecure=bool(values.get("insecure_local_cluster")),
        )
    except ClusterConflictError as exc:
        if exc.fields[0] != "n_workers":  # the TLS files
            raise click.UsageError(
                "TLS needs --tls-ca-file and --tls-cert (and --tls-key).") from None
        address, n_workers = exc.spec["address"], exc.spec["n_workers"]
        from_env = (ctx.get_parameter_source("scheduler_address")
                    is click.core.ParameterSource.ENVIRONMENT)
        where = "DASK_SCHEDULER_ADDRESS is set" if from_env else "--scheduler-address is given"
        raise click.UsageError(
            f"--n-workers {n_workers} starts a LocalCluster on this machine, but {where} "
            f"({address}): a job runs on one or the other. To resolve this, leave out "
            "--n-workers to run on that scheduler, or "
            + ("unset DASK_SCHEDULER_ADDRESS" if from_env else "leave out --scheduler-address")
            + " to start the LocalCluster.", ctx) from None


@contextlib.contextmanager
def connect_options(spec: Any) -> Iterator[Any]:
    """:func:`sphdist.jobs.cluster.connect` of the ``spec`` of :func:`cluster_options`.

    The embedded cluster's own log records (a failed task's traceback block) are dropped
    unless ``--log-level debug``: the error reaches the user as the one ``Error:`` line. An
    embedded LocalCluster's worker processes never take Ctrl-C, and a Ctrl-C while it starts
    takes effect once it has started (:func:`sphdist.jobs.cluster.connect`): this process
    takes it, says what it left in one line and stops them.
    """
    from sphdist.jobs.cluster import connect  # dask, distributed: when a job runs

    silence_logs = logging.WARNING if logger.isEnabledFor(logging.DEBUG) else logging.CRITICAL
    asyncio_logger = logging.getLogger("asyncio")
    if _UNRETRIEVED_CLIENT_WAIT not in asyncio_logger.filters:
        asyncio_logger.addFilter(_UNRETRIEVED_CLIENT_WAIT)
    with connect(spec, silence_logs=silence_logs) as client:
        yield client


class _UnretrievedClientWait(logging.Filter):
    """Drops asyncio's "Task exception was never retrieved" of a Client's internal wait.

    When Ctrl-C stops ``client.gather``, distributed leaves the task that waits for the
    futures to end with its own ``AllExit`` exception; asyncio logs it, with a traceback,
    when the task is collected. It says nothing to the user, whose one ``Error:`` line says
    where the fit stopped.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        kind = record.exc_info[0] if record.exc_info else None
        return not (kind is not None and kind.__name__ == "AllExit"
                    and kind.__module__.startswith("distributed"))


_UNRETRIEVED_CLIENT_WAIT = _UnretrievedClientWait()

