"""What outputs are called: their kinds in words, a path as a comparable key, a free name.

The output policy (:mod:`sphdist.io._policy`) and the lock (:mod:`sphdist.io._lock`) both
refuse an output and suggest another in the same words (:func:`elsewhere`); both compare
paths as keys (:func:`key_of`). This module is what they share, below both.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sphdist.errors import ParameterError, option
from sphdist.io._fs import exists, local_path, location, protocol_of

__all__ = ["KINDS", "key_of", "elsewhere", "check_named"]

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
