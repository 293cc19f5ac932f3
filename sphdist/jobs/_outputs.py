"""The format of an output file, told by its suffix: one rule for every command that writes one.

The export, the batch neighbour queries and the plots write files whose name says what they
hold: ``out.csv`` is CSV, ``e.svg`` is SVG. :func:`output_format` reads the format from the
suffix, accepts a ``format`` that agrees with it (or names the format of a file whose suffix
says none, such as ``embeddings``), and refuses a suffix that names another format or none
of those the job writes, naming them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

from sphdist.errors import ParameterError, option, remedies
from sphdist.io import location

__all__ = ["output_format"]


def output_format(
    output: str | os.PathLike[str], format: str | None, formats: Mapping[str, str], *,
    redo: Callable[[Path], str] | None = None,
) -> str:
    """The format to write ``output`` in: the one its suffix names.

    Parameters
    ----------
    output : path-like
        The file to write (a path or a URL).
    format : str, optional
        The format asked for; None: from the suffix.
    formats : mapping of str to str
        Suffix (lower case, with the dot) to format, in the order they are offered.
    redo : callable, optional
        Given a corrected output path, the job that writes it, for the remedy: the marker of
        a :class:`~sphdist.errors.Remedy` (:func:`sphdist.errors.remedy`), or a command.

    Returns
    -------
    str
        A value of ``formats``.

    Raises
    ------
    ParameterError
        If the suffix names a format other than ``format``, or, without ``format``, names
        none of ``formats``; the message lists the formats and their suffixes.

    Examples
    --------
    >>> fmts = {".parquet": "parquet", ".csv": "csv"}
    >>> output_format("out.CSV", None, fmts), output_format("embeddings", "csv", fmts)
    ('csv', 'csv')
    >>> output_format("out.csv", "parquet", fmts)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    sphdist.errors.ParameterError: out.csv is named as a csv file, but format='parquet' ...
    """
    path = location(output)
    suffix = path.suffix.lower()
    told = formats.get(suffix)
    if told is not None and format is not None and format != told:
        fixed = path.with_name(path.stem + _suffix_of(format, formats))
        return _refuse(
            f"{path} is named as a {told} file, but {option('format', format)} was "
            f"asked for. To resolve this, ",
            f"name it {fixed}, or leave out {option('format')} ({told} is written).", fixed, redo)
    if told is not None:
        return told
    if format is not None and format in formats.values():
        return format
    first = next(iter(formats))
    fixed = path.with_name((path.stem if suffix else path.name) + first)
    by_format: dict[str, list[str]] = {}
    for sfx, fmt in formats.items():
        by_format.setdefault(fmt, []).append(f"*{sfx}")
    offered = ", ".join(f"{fmt} ({', '.join(sfx)})" for fmt, sfx in by_format.items())
    head = (f"{path}: the suffix {path.suffix!r} names none of the formats written here: "
            f"{offered}" if suffix else
            f"{path} has no suffix to tell its format (the formats written here: {offered})")
    return _refuse(f"{head}. To resolve this, ", f"name the output by its format, e.g. {fixed}.",
                   fixed, redo)


def _suffix_of(format: str, formats: Mapping[str, str]) -> str:
    return next((sfx for sfx, fmt in formats.items() if fmt == format), f".{format}")


def _refuse(head: str, remedy: str, fixed: Path, redo: Callable[[Path], str] | None) -> str:
    if redo is not None:
        again = redo(fixed)  # a remedy's marker (sphdist.errors.remedy), or a command
        remedy = remedy.rstrip(".") + (f": {again}." if remedies(again) else f": `{again}`.")
    raise ParameterError(head + remedy)
