"""Where ingested documents come from: listing a source and reading it partition by partition.

A source is planned once in the driver (:func:`plan`): the files are listed, plain JSON Lines
files are scanned for line offsets, Parquet footers are read, and the documents are cut into
*partitions*, picklable descriptions that a worker turns into documents with
:meth:`Partition.records`. A record is ``(doc_id, text, label)``; a document that cannot be
used is a :class:`Bad` naming the file and line (or row, or archive member) and the reason.
Nothing here tokenises: that is :mod:`sphdist.text.ingest`'s job.
"""

from __future__ import annotations

import array
import codecs
import csv
import glob as globmod
import gzip
import io
import json
import logging
import os
import posixpath
import stat
import tarfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from sphdist._packed import PackedStrings
from sphdist.errors import DataError, InputNotFoundError, ParameterError, message_of, option
from sphdist.io import (
    exists,
    glob,
    is_remote,
    is_storage_failure,
    location,
    open_file,
    storage_error,
)
from sphdist.text._documents import (
    Bad,
    Reading,
    Record,
    check_raw,
    check_text,
    gunzip,
    not_utf8,
    stream_errors,
)

logger = logging.getLogger("sphdist")

FORMATS = ("dir", "tar", "jsonl", "csv", "parquet")
_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".json", ".json.gz")
_CSV_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".tsv.gz")
_PARQUET_SUFFIXES = (".parquet", ".pq")
_SCAN_BLOCK = 1 << 24  # bytes read at a time when scanning JSON Lines for line offsets




class Partition:
    """A piece of a source read by one task; ``n_docs`` is None when unknown before reading.

    Its paths are as the user gave them (they name documents in ids and messages); a task
    opens them against ``base``, the working directory of the process that planned the
    source (:func:`plan`), since a worker's own may be another (issue 44 item 8).
    """

    n_docs: int | None
    base: str

    def file(self, path: str) -> str:
        """``path`` as a task opens it: against :attr:`base` unless absolute or a URL."""
        return path if not self.base or is_remote(path) else os.path.join(self.base, path)

    def records(self, reading: Reading) -> Iterator[Record | Bad]:  # pragma: no cover
        """Yield the documents of the partition, in corpus order."""
        raise NotImplementedError


# -- directory trees and tar archives ---------------------------------------------------------
def _member_id(name: str) -> str:
    return posixpath.normpath(name).lstrip("/")


def label_of(doc_id: str) -> str:
    """The label of a file document: the name of the folder holding it."""
    return doc_id.rsplit("/", 2)[-2]


@dataclass(frozen=True)
class DirPartition(Partition):
    """Files of a directory tree, by relative id.

    ``ids`` may be any sequence of ``str``: they are held packed (:class:`PackedStrings`, their
    UTF-8 bytes end to end, lone surrogates kept), about 30 bytes an id instead of 80 as a
    Python string in a tuple. The plan holds every partition from the listing to the commit:
    144,000 paths were 11 MB of Python strings through the whole ingest (issue 43).
    """

    root: str
    ids: PackedStrings
    base: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.ids, PackedStrings):
            object.__setattr__(self, "ids", PackedStrings(self.ids, errors="surrogatepass"))

    @property
    def n_docs(self) -> int:  # type: ignore[override]
        """Number of documents."""
        return len(self.ids)

    def records(self, reading: Reading) -> Iterator[Record | Bad]:
        """Yield ``(id, text, label, where)`` for each file, or a :class:`Bad`.

        A file whose resolved path (symbolic links followed) is outside the source folder is
        never opened: it is a :class:`Bad` (checked here, at read time, so that a link put in
        place after listing is caught too).
        """
        root = os.path.realpath(self.file(self.root))
        for doc_id in self.ids:
            path = os.path.join(self.root, doc_id)
            bad = not_utf8(doc_id, path)
            if bad is not None:
                yield bad
                continue
            real = os.path.realpath(self.file(path))
            if not _inside(real, root):
                yield Bad(path, f"a symbolic link to {real}, outside the source folder "
                                f"{root}: not read")
                continue
            try:
                size = os.stat(real).st_size
                if size > reading.max_bytes:
                    yield Bad(path, f"document of {size} bytes exceeds the limit of "
                                    f"{reading.max_bytes} bytes (max_document_bytes)")
                    continue
                with open(real, "rb") as f:
                    content = f.read()
            except OSError as exc:
                yield Bad(path, f"could not be read ({type(exc).__name__}: {exc.strerror})")
                continue
            if doc_id.endswith(".gz"):
                content = gunzip(path, content, reading)
                if isinstance(content, Bad):
                    yield content
                    continue
            text = check_raw(path, content, reading)
            yield text if isinstance(text, Bad) else (doc_id, text, label_of(doc_id), path)


@dataclass(frozen=True)
class TarPartition(Partition):
    """Members of a tar archive; the archive is read sequentially, once per partition.

    ``ids`` (in id order) and the ``offsets`` of their members in the archive may be any
    sequences: they are held packed, as :class:`DirPartition`'s ids (the ids' UTF-8 bytes, the
    offsets as int64 in an ``array``), not a tuple of a Python string and int per member.
    """

    path: str
    ids: PackedStrings
    offsets: array.array  # offset of each id's member in the archive ("q": int64)
    base: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.ids, PackedStrings):
            object.__setattr__(self, "ids", PackedStrings(self.ids, errors="surrogatepass"))
        if not isinstance(self.offsets, array.array):
            object.__setattr__(self, "offsets", array.array("q", self.offsets))
        if len(self.offsets) != len(self.ids):
            raise ValueError(f"{len(self.ids)} ids for {len(self.offsets)} member offsets")

    @property
    def n_docs(self) -> int:  # type: ignore[override]
        """Number of documents."""
        return len(self.ids)

    def records(self, reading: Reading) -> Iterator[Record | Bad]:
        """Yield ``(id, text, label, where)`` in id order (a partition's members are buffered)."""
        wanted = dict(zip(self.ids, self.offsets, strict=True))
        found: dict[str, bytes | Bad] = {}
        with tarfile.open(self.file(self.path), "r:*") as archive:
            for member in archive:
                if len(found) == len(wanted):
                    break
                name = _member_id(member.name)
                if member.isfile() and wanted.get(name) == member.offset:
                    where = f"{self.path}:{member.name}"
                    if member.size > reading.max_bytes:
                        found[name] = Bad(where, f"document of {member.size} bytes exceeds the "
                                                 f"limit of {reading.max_bytes} bytes "
                                                 "(max_document_bytes)")
                    else:
                        found[name] = archive.extractfile(member).read()  # type: ignore
        del wanted
        for doc_id in self.ids:
            content = found.get(doc_id)
            where = f"{self.path}:{doc_id}"
            bad = not_utf8(doc_id, where, "member")
            if bad is not None:
                yield bad
            elif content is None:
                yield Bad(where, "member listed at the start could not be read again (was the "
                                 "archive modified while it was ingested?)")
            elif isinstance(content, Bad):
                yield content
            else:
                if doc_id.endswith(".gz"):
                    content = gunzip(where, content, reading)
                text = content if isinstance(content, Bad) else check_raw(where, content, reading)
                yield text if isinstance(text, Bad) else (doc_id, text, label_of(doc_id),
                                                          where)


def _inside(real: str, root: str) -> bool:
    """Whether the resolved path ``real`` is ``root`` or below it (both resolved)."""
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


def _list_directory(root: Path) -> tuple[list[str], list[tuple[str, Bad]]]:
    """Ids of the documents of a directory tree, and the files that cannot be documents.

    Documents are regular files and links to files (sorted later). Symbolic links to files are
    listed (then read only if they resolve inside ``root``, see :meth:`DirPartition.records`; a
    broken link or a link loop cannot be read and is a bad document too); symbolic links to
    folders are never followed (``os.walk`` default): a warning names them. Other special
    files (FIFOs, sockets, devices) are never opened: each is returned as ``(id, Bad)``, a bad
    document (``on_error``), never dropped silently.
    """
    def _raise(exc: OSError) -> None:
        raise exc

    ids, dir_links, special = [], [], []
    for dirpath, dirnames, filenames in os.walk(root, onerror=_raise):
        rel = Path(dirpath).relative_to(root)
        dir_links.extend(str(Path(dirpath, d)) for d in dirnames
                         if os.path.islink(os.path.join(dirpath, d)))
        for name in filenames:
            doc_id = (rel / name).as_posix()
            if "/" not in doc_id:
                continue
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
                ids.append(doc_id)
            else:
                what = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                        else "a character device" if stat.S_ISCHR(mode)
                        else "a block device" if stat.S_ISBLK(mode) else "not a regular file")
                special.append((doc_id, Bad(os.path.join(dirpath, name),
                                            f"{what}, not a file: not read")))
    if dir_links:
        logger.warning(
            "%s: %d symbolic link(s) to folders not followed (their files are not ingested), "
            "e.g. %s. To ingest those files, copy them into the source folder.",
            root, len(dir_links), "; ".join(sorted(dir_links)[:5]),
        )
    return ids, special


def _tar_member_kind(member: tarfile.TarInfo) -> str:
    """What a tar member that is neither a regular file nor a folder is, in words."""
    if member.issym():
        return f"a symbolic link to {member.linkname}"
    if member.islnk():
        return f"a hard link to {member.linkname}"
    return ("a character device" if member.ischr() else "a block device" if member.isblk()
            else "a FIFO" if member.isfifo() else f"a member of tar type {member.type!r}")


def _list_tar(path: Path) -> tuple[dict[str, int], list[tuple[str, Bad]]]:
    """Map each document id to the offset of its (last) member in the archive.

    Also returns the members inside a label folder that are neither regular files nor
    folders (links, devices, FIFOs) as ``(id, Bad)``: never read (members are read by name,
    never extracted or followed), but bad documents (``on_error``), not dropped silently.
    """
    try:
        offsets, special = {}, {}
        with tarfile.open(path, "r:*") as archive:
            for member in archive:
                doc_id = _member_id(member.name)
                if "/" not in doc_id or member.isdir():
                    continue
                if member.isfile():
                    offsets[doc_id] = member.offset
                    special.pop(doc_id, None)
                else:
                    offsets.pop(doc_id, None)  # the last member of a name is the document
                    special[doc_id] = Bad(f"{path}:{member.name}",
                                          f"{_tar_member_kind(member)}, not a file: not read")
        return offsets, list(special.items())
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise DataError(
            f"{path}: neither a directory nor a readable tar archive ({type(exc).__name__}: "
            f"{exc}). To resolve this, pass a folder or a .tar/.tar.gz archive of text files, "
            "or name the format (" + option("format", 'jsonl|csv|parquet') + ")."
        ) from exc


def _select(
    path: Path, doc_ids: list[str], categories: Iterable[str] | None,
    max_docs_per_label: int | None, seed: int,
) -> list[str]:
    """The kept ids (sorted), after the category filter and per-label sampling."""
    by_label: dict[str, list[str]] = {}
    for doc_id in sorted(doc_ids):
        by_label.setdefault(label_of(doc_id), []).append(doc_id)
    if categories is None:
        names = sorted(by_label)
    else:
        names = sorted(set(categories))
        unknown = [c for c in names if c not in by_label]
        if unknown:
            raise ParameterError(
                f"categories {unknown} are not labels of {path}; the available labels are "
                f"{sorted(by_label)}."
            )
    kept = []
    for name in names:
        ids = by_label[name]
        if max_docs_per_label is not None and len(ids) > max_docs_per_label:
            rng = np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])
            picked = np.sort(rng.choice(len(ids), size=max_docs_per_label, replace=False))
            ids = [ids[i] for i in picked]
        kept.extend(ids)
    return sorted(kept)


# -- JSON Lines --------------------------------------------------------------------------------
def _open_binary(path: str):
    if is_remote(path):  # an object store: fsspec's file, decompressed by gzip here too
        raw = io.BufferedReader(open_file(path), _SCAN_BLOCK)  # readline(size), as open()'s
        return gzip.GzipFile(fileobj=raw, mode="rb") if path.endswith(".gz") else raw
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


@dataclass(frozen=True)
class JsonlPartition(Partition):
    """Lines ``first_line`` to ``first_line + n_lines - 1`` (1-based) of a JSON Lines file.

    ``start`` is the byte offset of ``first_line`` in a plain file; a gzip file is one
    partition (``n_lines`` None: to the end).
    """

    path: str
    start: int = 0
    first_line: int = 1
    n_lines: int | None = None
    n_docs: int | None = None
    base: str = field(default="", kw_only=True)

    def records(self, reading: Reading) -> Iterator[Record | Bad]:
        """Yield ``(id, text, label, where)`` per non-blank line, or a :class:`Bad`."""
        text_field, label_field, id_field = (
            reading.text_field, reading.label_field, reading.id_field
        )
        line_no = self.first_line - 1
        with _open_binary(self.file(self.path)) as f, stream_errors(self.path, lambda: line_no):
            if self.start:
                f.seek(self.start)
            while self.n_lines is None or line_no < self.first_line - 1 + self.n_lines:
                raw = f.readline(reading.max_bytes + 2)
                if not raw:
                    break
                line_no += 1
                where = f"{self.path}:{line_no}"
                if line_no == 1 and raw.startswith(codecs.BOM_UTF8):
                    raw = raw[len(codecs.BOM_UTF8):]  # a byte-order mark, as Notepad writes
                if len(raw) > reading.max_bytes and len(raw.rstrip(b"\r\n")) > reading.max_bytes:
                    rest = len(raw)
                    while not raw.endswith(b"\n"):  # skip the rest of the long line
                        raw = f.readline(1 << 20)
                        if not raw:
                            break
                        rest += len(raw)
                    yield Bad(where, f"line of {rest} bytes exceeds the limit of "
                                     f"{reading.max_bytes} bytes (max_document_bytes)")
                    continue
                if not raw.strip():
                    continue  # blank lines separate nothing in JSON Lines: not documents
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    yield Bad(where, f"bytes {exc.start}-{exc.end} of the line are not valid "
                                     "UTF-8 (JSON Lines must be UTF-8)")
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    # some of json's messages end in "at", awaiting the position
                    why = exc.msg.removesuffix(" at")
                    yield Bad(where, f"not JSON ({why} at column {exc.colno})")
                    continue
                except RecursionError:  # json's C decoder recurses once per level
                    yield Bad(where, "a JSON value nested too deeply to read (RecursionError); "
                                     "a document is an object of flat fields")
                    continue
                except ValueError as exc:  # an integer past Python's int-string limit
                    why = str(exc).split(";")[0]  # less its advice to raise the limit
                    yield Bad(where, f"a JSON number of more digits than Python reads ({why})")
                    continue
                if not isinstance(obj, dict):
                    yield Bad(where, f"a JSON {type(obj).__name__}, not an object with a "
                                     f"{text_field!r} field")
                    continue
                if text_field not in obj:
                    yield Bad(where, f"no {text_field!r} field (fields: {sorted(obj)[:10]}); "
                                     "name the text field with " + option("text_field"))
                    continue
                text = check_text(where, obj[text_field], reading, f"{text_field!r} field")
                if isinstance(text, Bad):
                    yield text
                    continue
                label = _scalar_field(obj, label_field, "label", where)
                doc_id = _scalar_field(obj, id_field, "id", where)
                if isinstance(label, Bad) or isinstance(doc_id, Bad):
                    yield label if isinstance(label, Bad) else doc_id
                    continue
                if b"\\u" in raw:  # only a \u escape can make a lone surrogate in JSON
                    bad = _surrogate(where, ((text_field, text), (label_field, label),
                                             (id_field, doc_id)))
                    if bad is not None:
                        yield bad
                        continue
                if doc_id is None and reading.default_id_field is not None:
                    yield _default_id(obj, reading.default_id_field), text, label, where
                    continue
                yield (where if doc_id is None else doc_id), text, label, where


def _surrogate(where: str, fields: Iterable[tuple[str | None, str | None]]) -> Bad | None:
    r"""A :class:`Bad` if a field's value holds a lone surrogate (JSON's ``"\ud800"`` escape).

    One rule for the text, the label and the id: such a string is not Unicode text, UTF-8
    (the corpus, ``info``, ``export``) cannot store it, so the document is refused here.
    """
    for name, value in fields:
        if value is None:
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return Bad(where, f"the {name!r} field holds a lone surrogate "
                              f"{value[exc.start]!r} at character {exc.start + 1}, which is "
                              "not Unicode text (UTF-8 cannot store it)")
    return None


def _default_id(obj: dict, name: str) -> str | None:
    """The value of the field ``name`` as an id, or None where it is not a usable one."""
    value = obj.get(name)
    if value is None or isinstance(value, (dict, list)):
        return None
    value = str(value)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: never stored (ids are then path:line)
        return None
    return value


def _scalar_field(obj: dict, name: str | None, role: str, where: str) -> str | Bad | None:
    """The optional field ``name`` of a JSON object as a string (None if no field is named)."""
    if name is None:
        return None
    if name not in obj:  # a field name, not a bad value: on_error='skip' would skip them all
        fields = sorted(obj)[:10]
        return Bad(where, f"no {name!r} field ({role}); its fields are {fields}",
                   remedy=(f"name the {role} field with " + option(f'{role}_field', 'NAME')
                           + f" (one of {fields}), or leave out " + option(f'{role}_field')
                           + " (if only some documents lack it, " + option("on_error", 'skip')
                           + " leaves those out and counts them)"))
    value = obj.get(name)
    if value is None or isinstance(value, (dict, list)):
        return Bad(where, f"the {name!r} field ({role}) is missing, null or not a scalar")
    return str(value)


def _scan_lines(path: str, lines_per_partition: int) -> tuple[list[JsonlPartition], int]:
    """Cut a plain JSON Lines file into partitions of whole lines; return them and n lines."""
    size = lines_per_partition
    starts = [0]  # byte offset of the first line of every partition
    n_newlines = offset = 0
    last = b"\n"
    with open_file(path) as f:
        while block := f.read(_SCAN_BLOCK):
            newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
            # partition p >= 1 starts after the newline of global index p * size - 1
            first, stop = n_newlines, n_newlines + newlines.shape[0]
            p = np.arange(-(-(first + 1) // size), stop // size + 1, dtype=np.int64)
            starts.extend((offset + newlines[p * size - 1 - first] + 1).tolist())
            n_newlines = stop
            offset += len(block)
            last = block[-1:]
    n_lines = n_newlines + (last != b"\n")  # a last line without a newline counts
    parts = []
    for p, start in enumerate(starts):
        first_line = p * size + 1
        count = min(size, n_lines - first_line + 1)
        if count > 0:
            parts.append(JsonlPartition(path, start, first_line, count, None))
    return parts, n_lines


# -- CSV and Parquet ----------------------------------------------------------------------------
def _check_columns(path: str, columns: Sequence[str], reading: Reading) -> list[str]:
    wanted = [c for c in (reading.text_field, reading.label_field, reading.id_field) if c]
    missing = [c for c in wanted if c not in columns]
    if missing:
        raise DataError(
            f"{path}: no column {missing[0]!r} (columns: {list(columns)[:20]}). To resolve "
            "this, name the columns with " + option("text_field") + ", " + option("label_field")
            + " and " + option("id_field") + "."
        )
    return wanted


def _frame_records(frame, path: str, first_row: int, reading: Reading, what: str):
    """Records of a pandas DataFrame whose first row is row ``first_row`` (1-based)."""
    texts = frame[reading.text_field].tolist()
    labels = frame[reading.label_field].tolist() if reading.label_field else None
    ids = frame[reading.id_field].tolist() if reading.id_field else None
    for i, text in enumerate(texts):
        yield _row_record(f"{path}:{what} {first_row + i}", f"{path}:{first_row + i}", text,
                          None if labels is None else labels[i],
                          None if ids is None else ids[i], reading)


def _row_record(where: str, default_id: str, text: Any, label: Any, doc_id: Any,
                reading: Reading) -> Record | Bad:
    """The record of one row (``label``/``doc_id`` None when there is no such column)."""
    text = check_text(where, None if _isna(text) else text, reading,
                      f"{reading.text_field!r} value")
    if isinstance(text, Bad):
        return text
    if reading.label_field:
        if _isna(label):
            return Bad(where, f"the {reading.label_field!r} value (label) is missing")
        label = str(label)
    if reading.id_field:
        if _isna(doc_id):
            return Bad(where, f"the {reading.id_field!r} value (id) is missing")
        doc_id = str(doc_id)
    else:
        doc_id = default_id
    return doc_id, text, label, where


def _isna(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


@dataclass(frozen=True)
class CsvPartition(Partition):
    """One CSV (or tab-separated) file, streamed a row at a time (row 1 follows the header).

    A row whose number of fields is not the header's (a separator in an unquoted field, a row
    cut short) is a :class:`Bad`: it is never read as a shorter document. Blank lines are
    skipped and not counted as rows, as pandas does.
    """

    path: str
    n_docs: int | None = None
    base: str = field(default="", kw_only=True)

    def records(self, reading: Reading) -> Iterator[Record | Bad]:
        """Yield ``(id, text, label, where)`` per row, or a :class:`Bad`."""
        sep = "\t" if ".tsv" in self.path else ","
        if csv.field_size_limit() < _CSV_FIELD_LIMIT:  # a document is bounded by max_bytes
            csv.field_size_limit(_CSV_FIELD_LIMIT)
        row = line = 0  # rows yielded; the last physical line read
        try:
            with (_open_binary(self.file(self.path)) as raw,
                  stream_errors(self.path, lambda: row, "row")):
                # utf-8-sig: a byte-order mark before the header is not part of its first name
                reader = csv.reader(io.TextIOWrapper(raw, encoding="utf-8-sig", newline=""),
                                    delimiter=sep)
                header = next((h for h in reader if h), None)
                if header is None:
                    return
                _check_columns(self.path, header, reading)
                columns = [header.index(c) if c else None for c in
                           (reading.text_field, reading.label_field, reading.id_field)]
                line = reader.line_num
                for fields in reader:
                    start, line = line + 1, reader.line_num
                    if not fields:
                        continue
                    row += 1
                    where = f"{self.path}:row {row}"
                    if len(fields) != len(header):
                        yield _wrong_field_count(where, len(fields), len(header), start, sep)
                        continue
                    text, label, doc_id = (None if c is None else fields[c] for c in columns)
                    yield _row_record(where, f"{self.path}:{row}", text, label, doc_id, reading)
        except UnicodeDecodeError as exc:
            raise DataError(
                f"{self.path}: not valid UTF-8 after row {row} ({exc.reason}). To "
                "resolve this, re-encode the file as UTF-8."
            ) from None
        except csv.Error as exc:
            raise DataError(
                f"{self.path}: not a readable CSV file near row {row + 1} (line {line + 1}: "
                f"{exc}). To resolve this, fix the file, or check " + option("text_field") + "/"
                + option("label_field") + "/" + option("id_field") + "."
            ) from None


#: ``csv.field_size_limit`` while reading (the module's default, 131,072 characters, would end
#: the file at the first long document instead of refusing that document alone)
_CSV_FIELD_LIMIT = 2**31 - 1


def _wrong_field_count(where: str, n: int, expected: int, line: int, sep: str) -> Bad:
    what = "a tab" if sep == "\t" else "a comma"
    why = (f"{n} fields, the header has {expected} (line {line}; "
           + (f"{what} in a field that is not quoted?)" if n > expected
              else "a row cut short, or a separator missing?)"))
    return Bad(where, why, remedy=(
        f"quote every field that holds {what} (in double quotes), or fix or remove that row, "
        "or pass " + option("on_error", 'skip') + " to leave such rows out and count them"))


@dataclass(frozen=True)
class ParquetPartition(Partition):
    """Row groups of a Parquet file, whose first row is ``first_row`` (1-based)."""

    path: str
    row_groups: tuple[int, ...] = ()
    first_row: int = 1
    n_docs: int | None = None
    base: str = field(default="", kw_only=True)

    def records(self, reading: Reading) -> Iterator[Record | Bad]:
        """Yield ``(id, text, label, where)`` per row, or a :class:`Bad`."""
        import pyarrow.parquet as pq

        wanted = [c for c in (reading.text_field, reading.label_field, reading.id_field) if c]
        first = self.first_row
        with open_file(self.file(self.path)) as raw, pq.ParquetFile(raw) as f:
            for group in self.row_groups:
                frame = f.read_row_group(group, columns=wanted).to_pandas()
                yield from _frame_records(frame, self.path, first, reading, "row")
                first += len(frame)


# -- planning -----------------------------------------------------------------------------------
@dataclass
class Plan:
    """A source cut into partitions."""

    format: str
    partitions: list[Partition]
    n_documents: int | None  # None when unknown before reading (gzip, CSV)
    n_available: int | None = None
    paths: list[str] = field(default_factory=list)
    #: Entries of a folder or tar source that cannot be documents (links in an archive,
    #: devices, FIFOs): found when listing, bad documents (``on_error``) never read.
    unreadable: list[Bad] = field(default_factory=list)


def _based(planned: Plan) -> Plan:
    """``planned`` with every partition's paths opened against this working directory."""
    base = os.getcwd()
    planned.partitions = [replace(p, base=base) for p in planned.partitions]
    return planned


def _has_glob(text: str) -> bool:
    return any(c in text for c in "*?[")


def _guess_format(path: Path) -> str | None:
    name = path.name.lower()
    for fmt, suffixes in (("tar", _TAR_SUFFIXES), ("jsonl", _JSONL_SUFFIXES),
                          ("csv", _CSV_SUFFIXES), ("parquet", _PARQUET_SUFFIXES)):
        if name.endswith(suffixes):
            return fmt
    return None


def _expand(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Path]:
    items = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    paths: list[Path] = []
    for item in items:
        text = str(item) if is_remote(item) else os.fspath(item)
        if is_remote(text):
            paths.extend(_expand_url(text))
        elif _has_glob(text) and not Path(text).exists():
            matches = sorted(globmod.glob(text, recursive=True))
            if not matches:
                raise InputNotFoundError(
                    f"{text}: no file matches this pattern. To resolve this, check the path and "
                    "quote the pattern so the shell does not expand it."
                )
            paths.extend(Path(m) for m in matches)
        else:
            path = Path(text)
            if not path.exists():
                raise InputNotFoundError(
                    f"{path}: no such file or directory. To resolve this, pass a folder or a tar "
                    "archive of text files, JSON Lines, CSV or Parquet files (or a quoted glob "
                    "pattern of them)."
                )
            paths.append(path)
    return paths


def _expand_url(text: str) -> list[Path]:
    """The files a URL (or a quoted URL pattern) names, in an object store."""
    try:
        urls = glob(text) if _has_glob(text) else ([text] if exists(text) else [])
    except Exception as exc:
        if not is_storage_failure(exc):
            raise
        raise storage_error(text, exc) from None
    if not urls:
        raise InputNotFoundError(
            f"{text}: no such object{' matches this pattern' if _has_glob(text) else ''}. To "
            "resolve this, check the URL (list what is there with `aws s3 ls` and the same "
            "AWS_ENDPOINT_URL), and quote a pattern so the shell does not expand it."
        )
    paths = [location(url) for url in urls]
    if any(p.is_dir() for p in paths):
        raise ParameterError(
            f"{text}: a folder in an object store. To resolve this, pass its JSON Lines, CSV "
            f"or Parquet files with a quoted pattern, e.g. '{text.rstrip('/')}/*.jsonl.gz' "
            "(folder and tar sources are read from a local or shared filesystem)."
        )
    return paths


def plan(
    source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    format: str | None,
    reading: Reading,
    partition_size: int,
    categories: Sequence[str] | None = None,
    max_docs_per_label: int | None = None,
    seed: int = 0,
) -> Plan:
    """List ``source`` and cut it into partitions of about ``partition_size`` documents.

    Raises
    ------
    InputNotFoundError
        A path (or every match of a pattern) is missing.
    DataError
        The source holds no document, is not of the format named, or lacks a column.
    ParameterError
        Unknown format or category, or options that do not apply to the format.
    """
    paths = _expand(source)
    for p in paths:  # a pipe (a process substitution <(...)) or a device is read only once
        if not is_remote(p) and not (p.is_file() or p.is_dir()):
            raise ParameterError(
                f"{p}: not a regular file or folder (a pipe such as a process substitution "
                "<(...), or a device): ingest reads its source twice (once to count the "
                "features, once to weight them). To resolve this, save it to a file first, "
                "e.g. `COMMAND > docs.jsonl`, then `sphdist ingest docs.jsonl -o corpus.zarr`."
            )
    if format is None:
        if len(paths) == 1 and paths[0].is_dir():
            format = "dir"
        else:
            guesses = {_guess_format(p) for p in paths}
            format = guesses.pop() if len(guesses) == 1 else None
            if format is None:
                format = "tar" if len(paths) == 1 else None
            if format is None:
                raise ParameterError(
                    f"cannot tell the format of {[str(p) for p in paths][:5]} from the file "
                    "names. To resolve this, pass " + option("format", '|'.join(FORMATS)) + "."
                )
    if format not in FORMATS:
        raise ParameterError(f"format={format!r}: expected one of {list(FORMATS)}.")
    sampling = categories is not None or max_docs_per_label is not None
    if format in ("dir", "tar"):
        if any(is_remote(p) for p in paths):
            raise ParameterError(
                f"{paths[0]}: {format} sources are read from a local or shared filesystem. To "
                "resolve this, store the documents as JSON Lines, CSV or Parquet files in the "
                "bucket, or copy the archive to local disk first."
            )
        if len(paths) != 1:
            raise ParameterError(
                f"a {format} source is one path, got {len(paths)}. To resolve this, pass one "
                "folder or archive."
            )
        return _plan_files(paths[0], format, partition_size, categories, max_docs_per_label,
                           seed)
    if sampling:
        raise ParameterError(
            "categories and max_docs_per_label apply to folder and tar sources (labels from "
            "folder names). To resolve this, filter the records before ingesting."
        )
    files = [p for p in paths if p.is_file()]
    for p in paths:
        if p.is_dir():
            raise ParameterError(
                f"{p}: a directory given as a {format} source. To resolve this, pass its files "
                f"with a quoted pattern, e.g. '{p}/*.{format}'."
            )
    partitions: list[Partition] = []
    n_documents: int | None = 0
    if format == "jsonl":
        for p in files:
            if str(p).endswith(".gz"):
                partitions.append(JsonlPartition(str(p)))
                n_documents = None
            else:
                parts, n_lines = _scan_lines(str(p), partition_size)
                partitions.extend(parts)
                if n_documents is not None:
                    n_documents += n_lines
    elif format == "csv":
        import pandas as pd

        for p in files:
            try:
                with stream_errors(str(p), lambda: 0, "row"):  # the header of a .csv.gz
                    columns = pd.read_csv(str(p), nrows=0,
                                          sep="\t" if ".tsv" in p.name else ",").columns
            except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
                raise DataError(f"{p}: not a readable CSV file (" + message_of(exc)
                                + "). To resolve this, pass a UTF-8 CSV file with a header "
                                "row.") from None
            except pd.errors.EmptyDataError:
                columns = None  # an empty file: no documents
            if columns is not None:
                _check_columns(str(p), list(columns), reading)
                partitions.append(CsvPartition(str(p)))
        n_documents = None
    else:
        import pyarrow.parquet as pq

        for p in files:
            try:
                with open_file(p) as raw, pq.ParquetFile(raw) as f:
                    meta = f.metadata
                    _check_columns(str(p), f.schema_arrow.names, reading)
            except DataError:
                raise
            except Exception as exc:  # pyarrow raises ArrowInvalid, OSError, ...
                raise DataError(f"{p}: not a readable Parquet file ({type(exc).__name__}: "
                                f"{exc}). To resolve this, pass Parquet files.") from None
            group, first = [], 1
            rows = 0
            for g in range(meta.num_row_groups):
                group.append(g)
                rows += meta.row_group(g).num_rows
                if rows >= partition_size or g == meta.num_row_groups - 1:
                    partitions.append(ParquetPartition(str(p), tuple(group), first, rows))
                    first += rows
                    group, rows = [], 0
            n_documents = (n_documents or 0) + meta.num_rows
    return _based(Plan(format, partitions, n_documents, paths=[str(p) for p in files]))


def field_names(src: Plan) -> set[str]:
    """The fields of the first record (or columns of the first file) of a planned source.

    JSON Lines records, CSV or Parquet files; empty for folders and archives, or what cannot
    be read.
    """
    if not src.partitions or src.format not in ("jsonl", "csv", "parquet"):
        return set()
    return first_fields(src.partitions[0].path, src.format)  # type: ignore[attr-defined]


def source_format(path: str | os.PathLike[str]) -> str | None:
    """The format a source file's name says: ``"jsonl"``, ``"csv"``, ``"parquet"``, ``"tar"``.

    None where the name says none.
    """
    return _guess_format(Path(path))


def first_fields(path: str | os.PathLike[str], format: str | None) -> set[str]:
    """The fields of the first record of a JSON Lines file, or the columns of a CSV or Parquet.

    Empty for another format, or what cannot be read.

    Parameters
    ----------
    path : path-like or URL
    format : {"jsonl", "csv", "parquet"} or None
    """
    path = str(path)
    try:
        if format == "csv":
            import pandas as pd

            return set(pd.read_csv(path, nrows=0, sep="\t" if ".tsv" in path else ",").columns)
        if format == "parquet":
            import pyarrow.parquet as pq

            with open_file(path) as raw, pq.ParquetFile(raw) as f:
                return set(f.schema_arrow.names)
        if format != "jsonl":
            return set()
        with _open_binary(path) as f:
            for _ in range(100):  # the first record, past blank lines
                line = f.readline(1 << 20)
                if not line:
                    break
                if line.strip():
                    obj = json.loads(line)
                    return set(obj) if isinstance(obj, dict) else set()
    except Exception:  # noqa: BLE001 - reading the documents reports what is wrong
        return set()
    return set()


def _plan_files(path: Path, format: str, partition_size: int, categories, max_docs_per_label,
                seed) -> Plan:
    if format == "dir":
        if not path.is_dir():
            raise DataError(f"{path}: not a directory. To resolve this, pass a folder, or "
                            "name the format of the file with " + option("format") + ".")
        ids, special = _list_directory(path)
        offsets = None
    else:
        offsets, special = _list_tar(path)
        ids = list(offsets)
    if not ids:
        raise DataError(
            f"{path}: no documents found. Documents are files inside a folder named after "
            "their label (e.g. 20news-bydate-train/sci.space/60154); files at the top level "
            "are ignored. To resolve this, pass a source with that layout."
        )
    kept = _select(path, ids, categories, max_docs_per_label, seed)
    partitions: list[Partition] = []
    for lo in range(0, len(kept), partition_size):
        piece = kept[lo:lo + partition_size]
        if offsets is None:
            partitions.append(DirPartition(str(path), piece))
        else:
            partitions.append(TarPartition(str(path), piece, [offsets[d] for d in piece]))
    wanted = None if categories is None else set(categories)
    unreadable = [bad for doc_id, bad in sorted(special)
                  if wanted is None or label_of(doc_id) in wanted]
    return _based(Plan(format, partitions, len(kept), n_available=len(ids), paths=[str(path)],
                       unreadable=unreadable))
