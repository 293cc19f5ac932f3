"""The output policy: what an output may be, where, and what it may replace.

Given what a command writes (its ``kind``) and what it reads (its ``inputs``),
:func:`sphdist.io.open_output` applies this policy once: an output is never an input of the
same command, never inside or around an input or another store, never at another output's
lock, staging or previous-version name, nor where one of those is a symbolic link
(:func:`check_output_place`, before the lock is taken), and replaces (with ``overwrite``) only
what is of its own kind (:func:`check_output_kind`, under the lock; :func:`found_at` says
what is there).
"""

from __future__ import annotations

import fnmatch
import json
import os
import stat
from collections.abc import Iterable, Iterator
from typing import Any, NoReturn

from sphdist.errors import OutputExistsError, ParameterError, option
from sphdist.io._fs import (
    exists,
    filesystem,
    is_storage_failure,
    location,
    protocol_of,
    removal_command,
    storage_error,
)
from sphdist.io._names import KINDS, check_named, elsewhere, key_of, place_of
from sphdist.io._object import version_of
from sphdist.io._store import MANIFEST, Target
from sphdist.io._targets import open_target

__all__ = ["check_output_place", "check_output_kind", "found_at", "refuse_existing"]

#: What sphdist keeps beside an output ``X`` (``X.lock``, ``X.lock.json``, ``X.old``,
#: ``X.scratch``, ``X.tmp-<random>``...): an output is never named so.
_COMPANIONS = {".lock.json": "lock record", ".lock": "lock",
               ".old": "previous version (during a commit)", ".scratch": "temporary arrays"}

def _within(inner: str, outer: str) -> bool:
    """Whether the key ``inner`` is strictly below the key ``outer``."""
    return inner.startswith(outer.rstrip("/") + "/")


def _input_keys(inputs: Iterable[Any]) -> list[tuple[str, str]]:
    """(key, as named) of each input; an object with ``paths`` (a source spec) gives those."""
    found: list[tuple[str, str]] = []
    for item in inputs:
        if item is None:
            continue
        paths = getattr(item, "paths", item)
        one_path = isinstance(paths, str | os.PathLike) or hasattr(paths, "protocol")  # a UPath
        items = [paths] if one_path else list(paths) if isinstance(paths, list | tuple) else []
        for one in items:
            if isinstance(one, str | os.PathLike) or hasattr(one, "protocol"):
                found.append((key_of(one), str(one)))  # not a path (an array): nothing to nest
    return found


def _stores_above(key: str) -> Iterator[str]:
    """The keys of the zarr nodes (a ``zarr.json`` there) above the key ``key``, nearest first."""
    protocol, _, rest = key.rpartition("://")
    parts = rest.split("/")
    for i in range(len(parts) - 1, 0, -1):
        above = "/".join(parts[:i]) or "/"
        if protocol:
            try:
                fs, inner = filesystem(f"{protocol}://{above}/{MANIFEST}")
                present = bool(fs.exists(inner))
            except Exception as exc:
                if not is_storage_failure(exc):
                    raise
                raise storage_error(f"{protocol}://{above}", exc) from None
        else:
            present = os.path.isfile(os.path.join(above, MANIFEST))
        if present:
            yield f"{protocol}://{above}" if protocol else above


def _named_as(path: Any, key: str) -> str:
    """``key`` written as the user wrote ``path`` (relative stays relative where it can)."""
    if protocol_of(path) is not None:
        return key
    text = os.fspath(path)
    return key if os.path.isabs(text) else os.path.relpath(key)


def refuse_existing(
    path: str | os.PathLike[str] | Target, *, found: str = "", remedies: str = "",
) -> NoReturn:
    """Refuse to replace the output at ``path`` without ``overwrite``: the one wording of it.

    Every writer that finds its output already there (and was not asked to replace it)
    raises this, through :func:`sphdist.io.open_output` (``overwrite=False``) or directly,
    so the refusal reads the same whatever writes. A writer that knows more about what is
    there (a fit: the checkpoint it could continue) says it in ``found`` and gives its own
    remedies; choosing another output stays one of them.

    Parameters
    ----------
    path : path-like or Target
        The output, as the user named it (a Target: its path).
    found : str or Text, optional
        What is there, in words, after ``already exists:`` (``"this fit, stopped at
        iteration 3"``). Default: nothing more is said.
    remedies : str or Text, optional
        What resolves the refusal, in words and structured remedies
        (:func:`sphdist.errors.remedy`), which the interface renders. Default: another output,
        or ``overwrite``.

    Raises
    ------
    OutputExistsError
        Always; the message names ``path``, what is there (``found``) and the remedies
        (``remedies``, then another output; or another output, or ``overwrite``).
    """
    named = path.path if isinstance(path, Target) else path
    there = f"{named} already exists" + (": " + found if found else "") + ". To resolve this, "
    if remedies:
        raise OutputExistsError(there + remedies + " (or choose another " + option("output") + ").")
    raise OutputExistsError(
        there + "choose another " + option("output") + " or pass " + option("overwrite", True)
        + "."
    )


def check_output_place(
    path: str | os.PathLike[str], kind: str, inputs: Iterable[Any] = (),
) -> None:
    """Refuse an output that is an input, nests with an input or a store, or is a companion.

    Looks only at names: whether a parent of ``path`` holds a ``zarr.json`` (is a store), and
    whether a name it suggests is free. Writes nothing, so a refused output leaves no lock
    file (or lease) behind.

    Parameters
    ----------
    path : path-like
        The output.
    kind : str
        What is written there (see :func:`open_output`).
    inputs : iterable of path-like
        What the same command reads.

    Raises
    ------
    ParameterError
        If ``path`` names no entry of its own (``.``, ``..``), or a companion of another
        output (``X.lock``, ``X.lock.json``, ``X.old``, ``X.scratch``, ``X.tmp-...``), or if
        one of its own is a symbolic link; is an input of the command, or inside or around
        one, by name or where it leads (symbolic links and the ``..`` after them resolved as
        the OS resolves them; a folder known by its device and inode, so that a second mount
        of it is it: :func:`~sphdist.io._names.place_of`); or is inside a zarr store (a
        corpus, model...), whose next commit would remove it. The message names both paths,
        as given, and another output to choose. Also if ``path`` is a symbolic link, a named
        pipe, a device or a socket: an output is committed by a rename, which would replace the
        link or the device itself (an export to ``/dev/stdout`` with ``overwrite`` once turned the
        machine's ``/dev/stdout`` into a file).
    StorageError
        If the object store fails while its parents are looked at.
    """
    where = location(path)  # once: the names below are all of it
    name = where.name
    for suffix in _COMPANIONS:
        if name.endswith(suffix) and len(name) > len(suffix):
            base = where.with_name(name[: -len(suffix)])
            raise ParameterError(
                f"{path}: a name ending in {suffix} is where sphdist keeps the "
                f"{_COMPANIONS[suffix]} of another output, {base}; writing there would break "
                "that output's commits. To resolve this, choose another name, e.g. "
                + option("output", elsewhere(base, kind, str(base.parent))) + "."
            )
    if ".tmp-" in name:
        raise ParameterError(
            f"{path}: a name holding .tmp- is where sphdist stages another output before its "
            "commit (and removes it as debris). To resolve this, choose another name, e.g. "
            + option("output", elsewhere(path, kind, str(where.parent))) + "."
        )
    _refuse_special_file(path, kind)
    key = key_of(path)  # resolved as the OS resolves it: links, then the `..` after them
    found = _input_keys(inputs)
    taken = [k for k, _ in found]
    seen: dict[str, Any] = {}
    place = place_of(path, seen)  # by folder identity: a second mount of a folder is it
    for other, named in found:
        glob_pattern = any(c in named for c in "*?[") and not exists(named)
        there = place_of(named, seen) if place is not None and not glob_pattern else None
        same = there is not None and there[-1] == place[-1]
        inside = there is not None and there[-1] in place[:-1]
        around = there is not None and place[-1] in there[:-1]
        if other == key or same or (glob_pattern and fnmatch.fnmatchcase(key, other)):
            also = "" if named == str(path) else f" ({named})"
            raise ParameterError(
                f"{path} is also an input of this command{also}: a command never replaces "
                "what it reads. To resolve this, choose another " + option("output") + ", e.g. "
                + option("output", elsewhere(path, kind, str(where.parent), taken)) + "."
            )
        if _within(key, other) or inside:
            outside = os.path.dirname(other) if "://" not in other else other.rsplit("/", 1)[0]
            raise ParameterError(
                f"{path} is inside {named}, an input of this command: an output is never "
                "written inside what the command reads (its next commit would remove it). To "
                "resolve this, choose an " + option("output") + " outside it, e.g. "
                + option("output", _named_as(path, elsewhere(path, kind, outside, taken))) + "."
            )
        if _within(other, key) or around:
            raise ParameterError(
                (f"{path} contains {named}, an input of this command: a command never replaces "
                 "what it reads. To resolve this, choose an " + option("output")
                 + " that does not contain it, e.g. ") + option(
                    'output', _named_as(path, elsewhere(path, kind, other.rsplit('/', 1)[0],
                                                         taken))) + "."
            )
    _refuse_linked_companions(path, kind, found, seen)
    for store in list(_stores_above(key))[-1:]:  # the outermost: what a user named
        outside = store.rsplit("/", 1)[0] or "/"
        raise ParameterError(
            f"{path} is inside {_named_as(path, store)}, a zarr store ({_found_text(store)}): "
            "an output is never written inside another store (its next commit would remove "
            "it). To resolve this, choose an " + option("output") + " outside it, e.g. "
            + option("output", _named_as(path, elsewhere(path, kind, outside, taken))) + "."
        )
    check_named(path)  # last: '.' holding an input is refused for that, in those words


def _refuse_linked_companions(
    path: Any, kind: str, inputs: list[tuple[str, str]], seen: dict[str, Any],
) -> None:
    """Refuse a local output whose lock, record, previous version or scratch is a link.

    sphdist makes none of them a link: one there (made by hand, or planted) would have the
    lock taken, or the temporary arrays written, where it points: in an input, maybe (an
    ``flock`` on a file that filelock 3.x opens with ``O_TRUNC`` empties it).
    """
    where = location(path) if protocol_of(path) is None else None
    if where is None or not where.name:  # a URL; '.' or '..': check_named refuses it
        return
    for suffix, what in _COMPANIONS.items():
        companion = where.with_name(where.name + suffix)
        if not os.path.islink(companion):
            continue
        pointed = os.path.realpath(companion)
        place = place_of(pointed, seen) or ()
        read = next((named for _, named in inputs
                     if (there := place_of(named, seen)) and there[-1] in place), None)
        into = f", into {read}, an input of this command" if read is not None else ""
        raise ParameterError(
            f"{companion} is a symbolic link (to {pointed}), where sphdist keeps the {what} of "
            f"the output {path}: it would write there, through the link{into}. To resolve "
            f"this, remove the link (`{removal_command(companion, directory=False)}`) or "
            "choose another " + option("output") + ", e.g. "
            + option("output", elsewhere(path, kind, str(where.parent))) + "."
        )


def _refuse_special_file(path: Any, kind: str) -> None:
    """Refuse a local output that is a link, a pipe, a device or a socket (see the caller)."""
    if protocol_of(path) is not None:
        return
    text = os.fspath(path)
    try:
        mode = os.lstat(text).st_mode
    except OSError:
        return  # nothing there (or nothing to see): the writer says what is wrong
    beside = str(location(text).parent)  # where another output is suggested
    if stat.S_ISLNK(mode):
        pointed = os.path.realpath(text)
        raise ParameterError(
            f"{text} is a symbolic link (to {pointed}): an output is committed by a rename, "
            "which would replace the link, not write where it points. To resolve this, name "
            "the place itself, e.g. " + option("output", pointed) + ", or another "
            + option("output") + ", e.g. " + option("output", elsewhere(text, kind, beside)) + "."
        )
    what = ("a named pipe" if stat.S_ISFIFO(mode) else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket"
            if stat.S_ISSOCK(mode) else None)
    if what is not None:
        raise ParameterError(
            f"{text} is {what}: an output is written to a new file and renamed into place, "
            f"which would replace {what} rather than write into it. To resolve this, write a "
            "file, e.g. " + option("output", elsewhere(text, kind, beside))
            + ", and copy it from there."
        )


def _found_text(path: Any) -> str:
    """What is at ``path``, in words (see :func:`found_at`)."""
    found = found_at(path)
    if found in KINDS and found != "file":
        return KINDS[found][0]
    return {
        None: "nothing", "file": "a file", "directory": "a directory",
        "zarr": "a zarr store not written by sphdist",
    }.get(found, f"a store tagged {found!r}")


def found_at(path: str | os.PathLike[str] | Target) -> str | None:
    """What is at ``path``: a sphdist kind, or ``"zarr"``, ``"directory"``, ``"file"``, None.

    Parameters
    ----------
    path : path-like or Target

    Returns
    -------
    str or None
        The ``sphdist.kind`` tag of a store (``"corpus"``, ``"model"``...; after a local
        commit interrupted between its renames, the previous version's); ``"zarr"`` for a
        zarr node without one; ``"directory"`` for a directory (or prefix) holding anything
        else; ``"file"`` for anything that is not a directory; None for nothing, an empty
        directory, or a prefix holding only versions no manifest names (a killed writer's).

    Raises
    ------
    StorageError
        If the object store fails.
    """
    target = open_target(path)
    protocol = protocol_of(target.path)
    try:
        where = target.readable()
        fs, inner = filesystem(where)
        if protocol is None:
            inner = os.fspath(where)
        try:
            document = json.loads(fs.cat_file(f"{inner.rstrip('/')}/{MANIFEST}"))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError):
            document = None
        if isinstance(document, dict):
            tag = document.get("attributes", {}).get("sphdist")
            kind = tag.get("kind") if isinstance(tag, dict) else None
            return kind if isinstance(kind, str) else "zarr"
        if protocol is None:
            if os.path.isdir(inner):
                return "directory" if any(os.scandir(inner)) else None
            return "file" if os.path.lexists(inner) else None
        fs.invalidate_cache(inner)
        if fs.isfile(inner):
            return "file"
        if not fs.exists(inner):
            return None
        names = [e.rstrip("/").rsplit("/", 1)[-1] for e in fs.ls(inner, detail=False)]
        # only versions no manifest names: a killed writer's, which the next writer removes
        return "directory" if any(not version_of(n) for n in names) else None
    except Exception as exc:
        if not is_storage_failure(exc) or protocol is None:
            raise
        raise storage_error(target.path, exc) from None


def check_output_kind(path: str | os.PathLike[str] | Target, kind: str) -> None:
    """Refuse to write ``kind`` at ``path`` if something of another kind is there.

    An output replaces (with ``overwrite``) only what its kind of writer wrote: a corpus a
    corpus, a model a model, a file a file; never a store of another kind, a directory, or a
    zarr store sphdist did not write. Called by :func:`open_output` under the output's lock.

    Parameters
    ----------
    path : path-like or Target
    kind : {"corpus", "model", "embedding", "index", "file"}

    Raises
    ------
    OutputExistsError
        If ``path`` holds anything else; the message says what it is, and how to remove it
        by hand if it is really to be replaced.
    StorageError
        If the object store fails.
    """
    target = open_target(path)
    found = found_at(target)
    if found is None or found == kind:
        return
    what, writer, _ = KINDS[kind]
    by = f", as `{writer}` writes it" if writer else ""
    rm = removal_command(target.path, directory=found != "file")
    beside = str(target.path.parent)
    raise OutputExistsError(
        f"{target.path} is {_found_text(target)}, not {what}: this command replaces (with "
        + option("overwrite", True)
        + f") only {what}{by}, never anything else. To resolve this, choose another "
        + option("output") + ", e.g. " + option("output", elsewhere(target.path, kind, beside))
        + f", or, if {target.path} is really to be replaced, remove it by hand first: `{rm}`."
    )
