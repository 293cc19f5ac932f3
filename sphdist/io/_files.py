"""Single files (exports, reports, figures, a source's arrays): write atomically, read, remove.

One module for every operation on one file, local or in an object store. A local path is
handled with the operating system's calls (a flushed temporary renamed into place, a
memory-mapped ``.npy``); a URL (``s3://``, ``memory://``, ``file://``) through fsspec (one PUT,
or a multipart upload completed at close: readers never see a part of it). Versioned stores
(a corpus, a model...) are :mod:`sphdist.io._store`'s.

A file's name says what it holds: ``out.csv`` is CSV, ``e.svg`` is SVG.
:func:`output_format`, one rule for every command that writes a file (the export, the batch
neighbour queries, the plots, a synthetic text collection), reads the format from the suffix,
accepts a ``format`` that agrees with it (or names the format of a file whose suffix says
none, such as ``embeddings``), and refuses a suffix that names another format or none of
those the job writes, naming them.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from sphdist.errors import ParameterError, option, remedies
from sphdist.io._fs import filesystem, fsync_directory, is_remote, location
from sphdist.io._posix import PosixTarget

__all__ = [
    "atomic_path", "staged_file", "publish_file", "open_file", "load_array", "remove",
    "output_format",
]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Write one file atomically, holding no lock: yield a temporary path, then publish it.

    For a file no other writer can be writing (a pipeline's report). A writer of a sphdist
    output holds it and writes through :meth:`sphdist.io.Output.file` instead, whose commit
    is :meth:`sphdist.io.Output.commit` (the hold checked just before it).

    The caller writes the complete file to the yielded path (by any means: ``savefig``,
    ``np.save``, ``to_parquet``, ``open``); on normal exit it is published at ``path``
    (:func:`publish_file`), so a reader sees the previous complete file or the new complete
    file, never a part. If the block raises, the temporary is removed, ``path`` is left as it
    was, and the exception propagates.

    Parameters
    ----------
    path : path-like
        The file to write; its parent directory must exist. Whatever is there is replaced.

    Yields
    ------
    pathlib.Path
        As :func:`staged_file`.

    Raises
    ------
    OSError
        If the block wrote nothing at the yielded path, or the rename (upload) fails.
    """
    with staged_file(path) as tmp:
        yield tmp
        publish_file(tmp, path)


@contextlib.contextmanager
def staged_file(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary file to write ``path``'s next version in; removed when the block ends.

    Publishing it (:func:`publish_file`) is the caller's, inside the block: after the block
    the temporary is gone whether it was published or not (a failure leaves ``path`` as it
    was).

    Parameters
    ----------
    path : path-like
        The file to be written (local, or a URL).

    Yields
    ------
    pathlib.Path
        Locally ``<dir>/.<name>.tmp-<random><suffix>``: same directory (hence the same
        filesystem) and same suffix as ``path``, so writers that infer the format from the
        suffix still do. For a URL, a local file with the same suffix in a temporary
        directory.
    """
    if is_remote(path):
        with tempfile.TemporaryDirectory(prefix="sphdist-upload-") as folder:
            yield Path(folder) / f"part{location(path).suffix}"
        return
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:12]}{target.suffix}")
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)  # published (renamed away), or not to be


def publish_file(tmp: Path, path: str | os.PathLike[str]) -> None:
    """Make the complete file ``tmp`` (from :func:`staged_file`) the file at ``path``, atomically.

    A local file is flushed to disk and renamed onto ``path`` with :func:`os.replace` (atomic
    on POSIX), and the directory entry is flushed; a local directory at ``path`` (an
    overwrite) is replaced through a commit of :class:`~sphdist.io._posix.PosixTarget`. A URL
    is uploaded in one PUT (or a multipart upload completed at its end).

    Parameters
    ----------
    tmp : pathlib.Path
        The written temporary.
    path : path-like
        The file it becomes.

    Raises
    ------
    OSError
        If nothing was written at ``tmp``, or the rename (upload) fails; ``path`` is then as
        it was.
    """
    if is_remote(path):
        if not tmp.exists():
            raise OSError(f"{path}: nothing was written to upload")
        fs, inner = filesystem(location(path))
        fs.put_file(str(tmp), inner)
        return
    target = Path(path)
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    if target.is_dir() and not target.is_symlink():
        PosixTarget(target).commit(tmp)  # a file replacing a directory (an overwrite)
    else:
        os.replace(tmp, target)
    fsync_directory(target.parent)


def open_file(path: str | os.PathLike[str], mode: str = "rb") -> Any:
    """A binary file object on ``path``: the builtin ``open``, or fsspec's for a URL.

    Writing to a URL uploads the file when it is closed (one PUT, or a multipart upload
    completed at close: readers never see a part of it).

    Parameters
    ----------
    path : path-like
    mode : str, default "rb"

    Returns
    -------
    file object
    """
    if not is_remote(path):
        return open(path, mode)
    import fsspec

    return fsspec.open(str(location(path)), mode).open()


def load_array(path: str | os.PathLike[str]) -> Any:
    """``np.load`` of a ``.npy``/``.npz`` file: memory-mapped locally, read whole from a URL.

    Parameters
    ----------
    path : path-like

    Returns
    -------
    numpy.ndarray or numpy.lib.npyio.NpzFile
    """
    import numpy as np

    if is_remote(path):
        with open_file(path) as f:
            return np.load(io.BytesIO(f.read()))
    if str(path).endswith(".npy"):
        return np.load(path, mmap_mode="r")
    return np.load(path)


def remove(path: str | os.PathLike[str]) -> None:
    """Delete one file (local or in an object store); a missing one is not an error.

    Parameters
    ----------
    path : path-like
    """
    if not is_remote(path):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        return
    fs, inner = filesystem(location(path))
    with contextlib.suppress(FileNotFoundError):
        fs.rm_file(inner)


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
        Given a corrected output path, the job that writes it, for the remedy: a
        :class:`~sphdist.errors.Remedy` named in a message (:func:`sphdist.errors.remedy`),
        or a command.

    Returns
    -------
    str
        A value of ``formats``.

    Raises
    ------
    ParameterError
        If the suffix names a format other than ``format``, or a kind of file that is none
        of ``formats`` (``out.jsonl`` with ``format="csv"``), or, without ``format``, names
        none of ``formats``; the message lists the formats and their suffixes. A name
        without a suffix (``embeddings``) is written in ``format``.

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
            f"{path} is named as a {told} file, but " + option("format", format)
            + " was asked for. To resolve this, ",
            f"name it {fixed}, or leave out " + option("format") + f" ({told} is written).",
            fixed, redo)
    if told is not None:
        return told
    if format is not None and _OTHER_KIND.fullmatch(suffix):  # out.jsonl as csv (issue 44)
        fixed = path.with_name(path.stem + _suffix_of(format, formats))
        return _refuse(
            f"{path} is named as a {suffix} file, but " + option("format", format)
            + " was asked for. To resolve this, ",
            f"name it {fixed} (or another name without {suffix}).", fixed, redo)
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


#: A suffix that names a kind of file (``.jsonl``, ``.gz``, ``.txt``), unlike a name's last dot
#: before digits (``run.2026-12-03``): a format asked for must not contradict it.
_OTHER_KIND = re.compile(r"\.[a-z][a-z0-9]*")


def _suffix_of(format: str, formats: Mapping[str, str]) -> str:
    return next((sfx for sfx, fmt in formats.items() if fmt == format), f".{format}")


def _refuse(head: str, remedy: str, fixed: Path, redo: Callable[[Path], str] | None) -> str:
    if redo is not None:
        again = redo(fixed)  # a remedy (sphdist.errors.remedy), or a command
        remedy = remedy.rstrip(".") + (": " + again + "." if remedies(again)
                                       else f": `{again}`.")
    raise ParameterError(head + remedy)
