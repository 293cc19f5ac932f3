"""The writer of an output: its lock, its staging and its commit, held in one block.

Where a store lives is decided once, by :func:`~sphdist.io._targets.open_target`, which returns
one of the two implementations of the versioned-store protocol
(:class:`~sphdist.io._store.Target`): :class:`~sphdist.io._posix.PosixTarget` (rename +
``flock``) or :class:`~sphdist.io._object.ObjectTarget` (manifest + lease). Single files are
written with :func:`~sphdist.io._files.atomic_path`.

One writer: :func:`open_output` holds the output's lock for a block and gives an
:class:`Output`, through which the writer stages, commits (a store's version, or one file:
:meth:`Output.file`) and cleans up; :func:`hold_output` does the same for a job's block and
says what a Ctrl-C left. The job passes its Output down to its writer: :meth:`Output.commit`
is the only commit of a held output. Given what it writes (``kind``) and what
the command reads (``inputs``), :func:`open_output` applies the output policy once
(:mod:`sphdist.io._policy`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Hashable, Iterable, Iterator
from pathlib import Path
from typing import Any

from sphdist.errors import Interrupted, OutputLockedError
from sphdist.io._files import (
    atomic_path,
    load_array,
    open_file,
    publish_file,
    remove,
    staged_file,
)
from sphdist.io._fs import exists, fsync_tree
from sphdist.io._lock import Hold
from sphdist.io._object import ObjectTarget
from sphdist.io._policy import check_output_kind, check_output_place, found_at, refuse_existing
from sphdist.io._posix import PosixTarget
from sphdist.io._store import MANIFEST, CommitState, Target
from sphdist.io._targets import open_target

__all__ = [
    "Target", "PosixTarget", "ObjectTarget", "open_target", "Output", "open_output",
    "output_lock", "hold_output", "lock_holder", "CommitState", "commit_state",
    "readable_path", "committed", "commit_identity", "staging_path", "discard", "atomic_path",
    "fsync_tree", "MANIFEST", "exists", "open_file", "load_array", "remove", "staged_file",
    "publish_file",
    "check_output_place", "check_output_kind", "found_at", "refuse_existing",
]

class Output:
    """A writer's hold on its output (:func:`open_output`): the lock, staging and the commit.

    Attributes
    ----------
    target : Target
        Where the output lives.
    path : pathlib.Path or upath.UPath
        The output, as named.
    """

    def __init__(self, target: Target, hold: Hold) -> None:
        self.target, self.path, self._hold = target, target.path, hold
        self._held = True  # until the block of open_output that gave it ends
        self._files: set[Path] = set()  # what file() staged: committed as one file

    def committed(self) -> bool:
        """Whether a complete version is there (see :meth:`Target.committed`)."""
        return self.target.committed()

    def identity(self) -> Hashable | None:
        """The committed version now (see :meth:`Target.identity`)."""
        return self.target.identity()

    def staging(self) -> Path:
        """A fresh location for the next version."""
        return self.target.staging()

    def scratch(self) -> Path:
        """The writer's scratch directory."""
        return self.target.scratch()

    @contextlib.contextmanager
    def file(self) -> Iterator[Path]:
        """Write the output as one file (an export, a table, a figure), committed at the end.

        The caller writes the complete file to the yielded path (by any means: ``savefig``,
        ``np.save``, ``to_parquet``, ``open``); when the block ends normally it is committed
        through :meth:`commit` (so only while this writer holds the output). If the block or
        the commit raises, the temporary is removed and the output is as it was.

        Yields
        ------
        pathlib.Path
            A temporary file with the output's suffix (:func:`sphdist.io._files.staged_file`).

        Raises
        ------
        OutputLockedError
            As :meth:`commit`: nothing is committed.
        OSError
            If the block wrote nothing at the yielded path, or the rename (upload) fails.
        """
        with staged_file(self.path) as staging:
            self._files.add(staging)
            try:
                yield staging
                self.commit(staging)
            finally:
                self._files.discard(staging)

    def commit(self, staging: Path) -> None:
        """Commit ``staging``, unless this writer no longer holds the output's lock.

        The only commit of a writer that holds its output: the lock is checked here, just
        before the commit. A file staged by :meth:`file` is published as the output's one
        file (:func:`sphdist.io._files.publish_file`); anything else is a version of the
        store (:meth:`Target.commit`).

        Parameters
        ----------
        staging : pathlib.Path or upath.UPath
            What :meth:`staging` (or :meth:`file`) gave, complete.

        Raises
        ------
        OutputLockedError
            If the block of :func:`open_output` that gave this Output has ended (its lock was
            released), or the lock was lost (an expired lease); nothing is committed.
        """
        self._check_held("committed", "the commit")
        if staging in self._files:
            publish_file(staging, self.path)
        else:
            self.target.commit(staging)

    def discard(self, path: Path) -> None:
        """Remove an uncommitted staging tree or the scratch directory."""
        self.target.discard(path)

    def _check_held(self, done: str, before: str) -> None:
        """Raise OutputLockedError unless this writer still holds the output's lock."""
        if not self._held:
            raise OutputLockedError(
                f"{self.path} was not {done}: its writer's hold on it ended (the lock was "
                f"released) before {before}, so another writer may be writing it. To "
                f"resolve this, write it again, holding it until {before}."
            )
        self._hold.check()

    def recover(self) -> None:
        """Put back what an interrupted commit left, while this writer holds the output.

        Raises
        ------
        OutputLockedError
            If the hold has ended or was lost (as :meth:`commit`): nothing is moved.
        """
        self._check_held("recovered", "the recovery")
        self.target.recover()

    def remove_stale(self) -> None:
        """Remove killed writers' staging trees and scratch (the lock proves them stale).

        Raises
        ------
        OutputLockedError
            If the hold has ended or was lost (as :meth:`commit`): nothing is removed.
        """
        self._check_held("cleaned", "the removal")
        self.target.remove_stale()


@contextlib.contextmanager
def open_output(
    path: str | os.PathLike[str] | Target, *, kind: str | None = None,
    inputs: Iterable[Any] = (), overwrite: bool | None = None,
) -> Iterator[Output]:
    """Hold the output ``path`` for a writer: its lock for the block, staging and commit.

    Not reentrant: a second hold of the same output, in this process or another, is refused.
    Released on exit whatever happens; the kernel releases an ``flock`` if the process dies,
    and a lease expires.

    With ``kind``, the output policy is applied once, here (:func:`check_output_place` before
    the lock is taken, so nothing is created inside what is refused, and
    :func:`check_output_kind` under it): an output is never an input of the same command,
    never inside or around an input or another store, never at a name sphdist keeps for
    another output (``.lock``, ``.old``...), and what is there already is replaced only if it
    is of the same kind.

    Parameters
    ----------
    path : path-like or Target
        The output (file or directory), existing or not. A local parent directory is created
        if missing (as a writer would).
    kind : {"corpus", "model", "embedding", "index", "file"}, optional
        What the writer writes (``"file"``: one file, an export, a table, a figure). Default:
        no policy (a caller that checked already).
    inputs : iterable of path-like, optional
        What the same command reads (None entries are skipped; a glob pattern counts for the
        paths it matches).
    overwrite : bool, optional
        False: refuse, under the lock, an output that is committed already
        (:func:`refuse_existing`, the one wording of that refusal). True: it is replaced at
        the commit. Default: not looked at (a caller that decides later).

    Yields
    ------
    Output

    Raises
    ------
    OutputLockedError
        If another writer holds it; the message names the holder (host, pid, command,
        since) and the remedies.
    OSError
        If the lock file cannot be created (a read-only or missing location).
    ParameterError
        If ``path`` names no entry of its own (``.``, ``..``, ``/``), or is refused by
        :func:`check_output_place`.
    OutputExistsError
        If something of another kind is at ``path`` (:func:`check_output_kind`), or, with
        ``overwrite=False``, anything committed there (:func:`refuse_existing`).
    """
    target = open_target(path)
    if kind is not None:
        check_output_place(target.path, kind, inputs)
    hold = target.acquire()
    try:
        if kind is not None:
            check_output_kind(target, kind)
        if overwrite is False and (exists(target.path) if kind == "file" else target.committed()):
            refuse_existing(target)  # a file is no versioned store: no manifest to look for
        output = Output(target, hold)
        try:
            yield output
        except BaseException:  # Ctrl-C, SIGTERM, a failure: what the writer staged is garbage
            with contextlib.suppress(Exception):  # a write that zarr's I/O thread finished
                target.remove_stale()  # after the writer's own cleanup; still under the lock
            raise
        finally:
            output._held = False
    finally:
        hold.release()


#: The name the rest of the package and its tests used for :func:`open_output`.
output_lock = open_output


#: The commit at an output that could not be read before its writer ran.
_UNKNOWN = object()


def _left_behind(target: Any, before: Any) -> str:
    """What a writer of ``target`` stopped by Ctrl-C left there (``before``: the commit then)."""
    try:
        now = _UNKNOWN if before is _UNKNOWN else commit_identity(target)
    except Exception:  # the store fails: say what is sure
        now = _UNKNOWN
    if now is _UNKNOWN:
        return (f"interrupted (Ctrl-C) while writing {target}, which is committed only when "
                "complete. To resolve this, run the command again.")
    if now != before:
        return f"interrupted (Ctrl-C) after {target} was committed: it is complete."
    return (
        f"interrupted (Ctrl-C): nothing was written, {target} "
        f"{'does not exist' if before is None else 'is as it was'} (an output is committed "
        "only when complete). To resolve this, run the command again."
    )


@contextlib.contextmanager
def hold_output(
    path: str | os.PathLike[str] | Target, *, kind: str | None = None,
    inputs: Iterable[Any] = (), overwrite: bool | None = None,
) -> Iterator[Output]:
    """Hold the output ``path`` for a job's block (:func:`open_output`), saying what a Ctrl-C left.

    For a job that passes the :class:`Output` it holds down to its writer (whose commit is
    then :meth:`Output.commit`): the lock is taken before the job looks at the output
    (whether it exists, ``overwrite``) and released after its commit, or its failure.

    Parameters
    ----------
    path : path-like or Target
        The output, as the job was given it.
    kind : str, optional
        What is written (see :func:`open_output`).
    inputs : iterable of path-like
        What the job reads, for the output policy.
    overwrite : bool, optional
        As :func:`open_output`: False refuses an output already there, under the lock.

    Yields
    ------
    Output

    Raises
    ------
    Interrupted
        On a Ctrl-C (:class:`KeyboardInterrupt`) in the block, saying what is at the output:
        nothing was written, unless the commit was done.
    OutputLockedError, OutputExistsError, ParameterError
        As :func:`open_output`.
    """
    try:
        before = commit_identity(path)
    except Exception:  # a failing store: the writer says so; Ctrl-C then says less
        before = _UNKNOWN
    try:
        with open_output(path, kind=kind, inputs=inputs, overwrite=overwrite) as output:
            yield output
    except Interrupted:
        raise
    except KeyboardInterrupt as exc:
        raise Interrupted(_left_behind(path, before)) from exc


# -- one call on a path (for writers and readers that hold no Output) ------------------------


def readable_path(path: str | os.PathLike[str]) -> Path:
    """The directory a reader of ``path`` opens (:meth:`Target.readable`); changes nothing."""
    return open_target(path).readable()


def commit_state(path: str | os.PathLike[str]) -> CommitState:
    """What is committed, staged or interrupted at ``path`` (:meth:`Target.state`)."""
    return open_target(path).state()


def committed(path: str | os.PathLike[str]) -> bool:
    """Whether a complete version of ``path`` is there (:meth:`Target.committed`)."""
    return open_target(path).committed()


def commit_identity(path: str | os.PathLike[str]) -> Hashable | None:
    """What identifies the version committed at ``path`` now (:meth:`Target.identity`)."""
    return open_target(path).identity()


def staging_path(path: str | os.PathLike[str]) -> Path:
    """A fresh location to build ``path``'s next version in (:meth:`Target.staging`)."""
    return open_target(path).staging()


def discard(path: str | os.PathLike[str]) -> None:
    """Remove an uncommitted staging tree or scratch directory, ignoring a missing one."""
    target = open_target(path)
    target.discard(target.path)


def lock_holder(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The writer recorded as holding ``path``'s lock: host, pid, command, since; or None."""
    return open_target(path).holder()
