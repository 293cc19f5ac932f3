"""What a document is and how its raw bytes are checked, for every source format.

A record is ``(doc_id, text, label, where)`` (where: the file and line, row or member, for
messages); a document that cannot be used is a :class:`Bad` naming
the file and line (or row, or archive member) and the reason. :mod:`sphdist.text.sources` reads
the sources through these checks.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sphdist.errors import DataError, ParameterError, Text, option

__all__ = [
    "Bad", "Reading", "Record", "printable", "not_utf8", "check_raw", "check_text", "gunzip",
    "stream_errors",
]


@dataclass(frozen=True)
class Bad:
    """A document that cannot be ingested: ``where`` (file:line, member, row) and ``why``."""

    where: str
    why: str | Text
    #: What fixes it, when that is not "fix or remove that document" (a field no document has).
    remedy: str | Text | None = None

    def message(self) -> str | Text:
        r"""The one-line error message (bytes of a file name that are not UTF-8 as ``\xff``)."""
        why = self.why if isinstance(self.why, Text) else printable(self.why)
        return printable(f"{self.where}: ") + why

    def error(self) -> DataError:
        """The refusal of this document under ``on_error="fail"``, with the remedy."""
        return DataError(
            self.message() + ". To resolve this, " + (
                self.remedy or ("fix or remove that document, or pass "
                                + option("on_error", 'skip')
                                + " to leave such documents out and count them.")
            ) + ("." if self.remedy else "")
        )


def printable(name: str) -> str:
    r"""``name`` with the bytes a file name held that are not UTF-8 shown as ``\xff``.

    Python decodes such bytes of a file name to lone surrogates (``surrogateescape``), which
    cannot be printed, logged or stored as UTF-8.

    >>> print(printable(os.fsdecode(b"news/bad\xe9.txt")))
    news/bad\xe9.txt
    """
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def not_utf8(doc_id: str, where: str, what: str = "file") -> Bad | None:
    """A :class:`Bad` at ``where`` if the id of a file (or archive member) is not UTF-8."""
    if printable(doc_id) == doc_id:
        return None
    return Bad(where, f"the {what} name is not valid UTF-8 (document ids and labels are stored "
                      f"as UTF-8; rename the {what} or its folder to UTF-8)")


@dataclass(frozen=True)
class Reading:
    """How raw documents are checked and decoded (shared by every partition of a source)."""

    encoding: str = "latin-1"
    max_bytes: int = 10_000_000
    text_field: str = "text"
    label_field: str | None = None
    id_field: str | None = None
    #: JSON Lines without ``id_field``: the field whose value is a record's id when it has one
    #: (a record without it has ``None``; :class:`sphdist.jobs.ingest.IngestRequest` then decides
    #: between these ids and ``path:line`` for all the documents).
    default_id_field: str | None = None


def check_raw(where: str, content: bytes, reading: Reading) -> str | Bad:
    """Decode the bytes of one document, refusing binary and oversized content."""
    if len(content) > reading.max_bytes:
        return Bad(where, f"document of {len(content)} bytes exceeds the limit of "
                          f"{reading.max_bytes} bytes (max_document_bytes)")
    nul = content.find(b"\x00")
    if nul >= 0:
        return Bad(where, f"binary content (NUL byte at offset {nul}), not text")
    try:
        return content.decode(reading.encoding)
    except UnicodeDecodeError as exc:
        return Bad(where, f"bytes {exc.start}-{exc.end} ({content[exc.start:exc.end]!r}) are "
                          f"not valid {reading.encoding} ({exc.reason})")
    except LookupError as exc:
        raise ParameterError(f"encoding={reading.encoding!r}: {exc}.") from None


def gunzip(where: str, content: bytes, reading: Reading) -> bytes | Bad:
    """The bytes of a gzip-compressed document (a file or member named ``*.gz``).

    Folder and tar documents whose name ends in ``.gz`` are decompressed, as JSON Lines and CSV
    files are; at most ``reading.max_bytes`` bytes are decompressed (a larger document is a
    :class:`Bad`, as an uncompressed one), and damaged data is a :class:`Bad` naming the file.
    """
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(content), mode="rb") as f:
            data = f.read(reading.max_bytes + 1)
    except (OSError, EOFError, zlib.error) as exc:
        return Bad(where, f"named .gz but not readable gzip data ({type(exc).__name__}: {exc})")
    if len(data) > reading.max_bytes:
        return Bad(where, f"document of more than {reading.max_bytes} bytes once decompressed "
                          "exceeds the limit (max_document_bytes)")
    return data


def check_text(where: str, text: Any, reading: Reading, what: str) -> str | Bad:
    if text is None:
        return Bad(where, f"the {what} is null")
    if not isinstance(text, str):
        return Bad(where, f"the {what} is a {type(text).__name__}, not a string")
    if len(text) > reading.max_bytes:
        return Bad(where, f"document of {len(text)} characters exceeds the limit of "
                          f"{reading.max_bytes} (max_document_bytes)")
    if "\x00" in text:
        return Bad(where, "binary content (NUL character), not text")
    return text


#: ``(doc_id, text, label, where)``; ``doc_id`` is None for a JSON Lines record without the
#: ``default_id_field`` (its id is then ``where``, ``path:line``).
Record = tuple[str | None, str, str | None, str]


@contextlib.contextmanager
def stream_errors(
    path: str, line: Callable[[], int], unit: str = "line"
) -> Iterator[None]:
    """Turn a damaged compressed stream into a DataError naming ``path`` and the line reached.

    gzip raises ``EOFError`` for a truncated file (which click would print as a bare
    ``Aborted!``), ``gzip.BadGzipFile`` or ``zlib.error`` for damaged bytes.
    """
    try:
        yield
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DataError(
            f"{path}: the compressed data end or break after {unit} {line()} "
            f"({type(exc).__name__}: {exc}): the file is truncated or damaged. To resolve this, "
            f"check it with `gzip -t {path}`, then re-create or re-download it."
        ) from None
