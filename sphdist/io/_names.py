"""What outputs are called: their kinds in words, a path as a comparable key, a free name.

The output policy (:mod:`sphdist.io._policy`) and the lock (:mod:`sphdist.io._lock`) both
refuse an output and suggest another in the same words (:func:`elsewhere`); both compare
paths as keys (:func:`key_of`), and the policy local paths by the folders they lead through
too (:func:`place_of`: a second mount of a folder is that folder). This module is what they
share, below both.
"""

from __future__ import annotations

import os
import re
import stat
import uuid
from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import Any

from sphdist.errors import ParameterError, option
from sphdist.io._fs import exists, local_path, location, protocol_of

__all__ = ["KINDS", "key_of", "place_of", "elsewhere", "check_named"]

#: The kinds of output, in messages: what it is, and what writes it.
KINDS = {
    "corpus": ("a sphdist corpus", "sphdist ingest` or `sphdist synth", "corpus.zarr"),
    "model": ("a sphdist model", "sphdist fit", "model.zarr"),
    "embedding": ("a sphdist embedding", "sphdist transform", "embedding.zarr"),
    "index": ("a sphdist index", "sphdist index", "index.zarr"),
    "layout": ("a sphdist layout", "sphdist layout", "layout.zarr"),
    "file": ("a file", "", ""),
}


def key_of(path: Any) -> str:
    """``path`` as comparable text: a resolved local path, or ``protocol://bucket/key``."""
    local = local_path(path)
    if local is not None:
        return os.path.realpath(local)
    protocol = protocol_of(path)
    rest = re.sub("/+", "/", str(path).split("://", 1)[1]).strip("/")
    return f"{'s3' if protocol == 's3a' else protocol}://{rest}"


def place_of(
    path: Any, seen: dict[str, Hashable] | None = None,
) -> tuple[Hashable, ...] | None:
    """Where a local ``path`` leads, as one identity per step from the root; None for a URL.

    The path is resolved as the OS resolves it (:func:`os.path.realpath`: each symbolic link,
    then the ``..`` after it), and each step named by what it is: a folder that exists by its
    ``(st_dev, st_ino)``, which a second mount of it (``mount --bind``) shares while its name
    does not; anything else (a file, nothing yet) by the identity of the step before and its
    name. Two paths lead to the same place if their last identities are equal, and one is
    inside the other if the other's last identity is one of its steps.

    Parameters
    ----------
    path : path-like
        A local path (relative to the working directory), or a URL.
    seen : dict, optional
        Identities already found, by resolved folder: shared between the calls of one
        comparison, so that many paths in one folder cost one ``stat`` of each folder.

    Returns
    -------
    tuple of hashable, or None
        The identities of the root, each folder below it and the path itself, in order.
    """
    local = local_path(path)
    if local is None:
        return None
    seen = {} if seen is None else seen
    parts = Path(os.path.realpath(local)).parts
    steps: list[Hashable] = []
    current = ""
    for part in parts:
        current = os.path.join(current, part) if current else part
        if current not in seen:
            try:
                found = os.stat(current)
            except (OSError, ValueError):
                found = None
            if found is not None and stat.S_ISDIR(found.st_mode) and found.st_ino:
                seen[current] = ("folder", found.st_dev, found.st_ino)
            else:  # a file, nothing, or a filesystem without inode numbers: by its name
                seen[current] = (steps[-1] if steps else None, part)
        steps.append(seen[current])
    return tuple(steps)


def elsewhere(path: Any, kind: str, beside: str, taken: Iterable[str] = ()) -> str:
    """Another output to suggest: the kind's usual name, or ``<stem>-2<suffix>``, in ``beside``."""
    where = location(path)
    name = where.name
    stem, dot, suffix = name.partition(".")
    candidates = [KINDS[kind][2] or (name if beside != str(where.parent) else ""),
                  f"{stem}-2{dot}{suffix}", f"{stem}-new{dot}{suffix}"]
    taken = set(taken)
    for candidate in filter(None, candidates):
        other = (beside.rstrip("/") + "/" + candidate if "://" in beside
                 else candidate if beside in ("", ".") else os.path.join(beside, candidate))
        if key_of(other) not in taken and not exists(other):
            return other
    return beside.rstrip("/") + "/" + f"{stem}-{uuid.uuid4().hex[:6]}{dot}{suffix}"


def check_named(target: Any) -> None:
    """Refuse an output path that names no entry of its own (``.``, ``..``, ``dir/..``).

    Raises
    ------
    ParameterError
        The message names the path and an output inside it to choose instead.
    """
    if Path(str(target)).name in ("", ".."):  # a URL too (a UPath is no os.PathLike)
        raise ParameterError(
            f"{target}: an output path names no file or directory of its own (it is a "
            "directory to write into). To resolve this, name the output in it, e.g. "
            + option("output", Path(target) / 'model.zarr') + "."
        )
