"""Neighbours of queries: one text or document, or a batch of them written as a table.

:class:`QueryRequest` answers one ``query`` or ``doc_id``; :class:`BatchNeighborsRequest`
many, read from a ``queries`` file by :func:`queries_of` (each with its line, which the
messages name), a bad query refused or skipped as ``on_error`` says.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from sphdist.errors import DataError, InputNotFoundError, ParameterError, Remedy, option
from sphdist.io import Output, exists, open_file
from sphdist.jobs._lifecycle import located
from sphdist.jobs.embedding import (
    EmbeddingSource,
    document_embedding,
    embed_texts,
    ids_like,
    nearest_neighbors,
)
from sphdist.jobs.neighbors._base import SearchRequest, _say, _skip, check_k, search
from sphdist.jobs.neighbors._hits import HIT_FORMATS, hits_table, write_hits
from sphdist.jobs.neighbors._request import QueryLines

ON_ERROR = ("fail", "skip")


#: Bytes of a queries file read at a time (a NUL in one ends the read: a binary file).
_READ_BLOCK = 1 << 20


def queries_of(path: str | os.PathLike[str]) -> QueryLines:
    """The queries of a ``queries`` file: one per non-blank line (UTF-8), stripped.

    Lines are split at line feeds (a carriage return before one is dropped, as is a UTF-8
    byte order mark); a line that is not UTF-8 text is kept as a bad query
    (:attr:`QueryLines.unreadable`) so that ``on_error`` decides, as for a query the model
    cannot embed.

    Returns
    -------
    QueryLines

    Raises
    ------
    InputNotFoundError
        If the file does not exist.
    ParameterError
        If ``path`` is a directory, or the file holds no query.
    DataError
        If the file is binary (it holds a NUL byte): the message gives its offset.
    """
    remedy = "To resolve this, pass a text file with one query per line."
    nul = -1
    if not exists(path):
        raise InputNotFoundError(f"{path}: no such queries file. " + remedy)
    try:
        blocks: list[bytes] = []
        offset = 0
        with open_file(path, "rb") as f:  # by blocks: /dev/zero is refused at its first one
            while block := f.read(_READ_BLOCK):
                nul = block.find(b"\0")
                if nul >= 0:
                    nul += offset
                    break
                blocks.append(block)
                offset += len(block)
        data = b"".join(blocks)
    except IsADirectoryError:
        raise ParameterError(f"{path} is a directory, not a queries file. " + remedy) from None
    if nul >= 0:
        raise DataError(
            f"{path} is a binary file, not text (a NUL byte at offset {nul}): a queries file "
            "holds one query per line, in UTF-8. " + remedy
        )
    texts: list[str] = []
    lines: list[int] = []
    unreadable: dict[int, str] = {}
    for number, raw in enumerate(data.removeprefix(b"\xef\xbb\xbf").split(b"\n"), start=1):
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            unreadable[len(texts)] = (f"the line is not UTF-8 text (byte 0x{raw[exc.start]:02x} "
                                      f"at column {exc.start + 1})")
            text = raw.decode("utf-8", errors="replace").strip()
        if text:
            texts.append(text)
            lines.append(number)
    if not texts:
        raise ParameterError(
            f"{path} holds no query (every line is blank). To resolve this, write one query "
            "per line."
        )
    return QueryLines(str(path), texts, lines, unreadable)


#: Bad ids of a batch that are given the nearest ids in their message (:func:`ids_like`).
_SUGGESTED = 10


def _ids_problems(source: EmbeddingSource, doc_ids: Sequence[str]
                  ) -> tuple[np.ndarray, dict[int, tuple[type[Exception], str]]]:
    """Positions of ``doc_ids`` in ``source`` (-1: none), and what is wrong with each bad one.

    A bad id is unknown (:class:`ParameterError`) or names a document without a direction
    (:class:`DataError`), as :func:`sphdist.jobs.embedding.document_embedding` says.
    """
    all_ids = source.doc_ids.astype(str)
    order = np.argsort(all_ids, kind="stable")
    sorted_ids = all_ids[order]
    wanted = np.asarray(list(doc_ids), dtype=str)
    at = np.searchsorted(sorted_ids, wanted)
    ok = (at < sorted_ids.size) & (sorted_ids[np.minimum(at, sorted_ids.size - 1)] == wanted)
    positions = np.where(ok, order[np.minimum(at, sorted_ids.size - 1)], -1).astype(np.int64)
    problems: dict[int, tuple[type[Exception], str]] = {}
    for n, i in enumerate(np.flatnonzero(~ok)):
        # the nearest ids of the first few: a batch of ids from another corpus would search
        # the collection once per id (up to 0.1 s each at 20,000 ids)
        like = ids_like(str(wanted[i]), all_ids, sorted_ids) + "; " if n < _SUGGESTED else ""
        problems[int(i)] = (ParameterError, f"no document has id {doc_ids[i]!r} ({like}see "
                                            "`sphdist export`)")
    if source.degenerate is not None:
        for i in np.flatnonzero(ok & source.degenerate[np.maximum(positions, 0)]):
            problems[int(i)] = (DataError, f"document {doc_ids[i]!r} is empty (no feature in "
                                           "common with the model), so its embedding is a "
                                           "placeholder, not a direction")
    return positions, problems


def _columns_of(source: EmbeddingSource, positions: np.ndarray) -> np.ndarray:
    """V[:, positions] as (r, len(positions)) float64, each stored chunk read once."""
    order = np.argsort(positions, kind="stable")
    block = np.asarray(source.V[:, positions[order]].compute(), dtype=np.float64)
    out = np.empty_like(block)
    out[:, order] = block
    return out


@dataclasses.dataclass(frozen=True)
class QueryRequest(SearchRequest):
    """``sphdist neighbors --query/--doc-id``: the k nearest documents of one text or document.

    Run by :func:`sphdist.jobs.run`, which returns the report below; nothing is written.
    Without an index (none given, none at :func:`default_index_path`, or ``exact``) this is the
    exact scan :func:`sphdist.jobs.embedding.nearest_neighbors` (at most k: fewer when the
    collection is smaller); with one, its search, and ``k`` larger than the indexed documents
    is refused.

    Parameters
    ----------
    model : path-like
    query, doc_id : str, optional
        One text, or the id of one document of the collection searched: exactly one.
    k, include_self, input, index, exact, nprobe
        As :class:`NeighborRequest` (``run(QueryRequest(model, doc_id="doc7", k=10))``).

    Raises
    ------
    ParameterError
        When built: if not exactly one of ``query`` and ``doc_id`` is given, or
        ``include_self`` with a ``query`` (:class:`NeighborRequest`).

    Notes
    -----
    :func:`~sphdist.jobs.run` returns a dict: ``query``, ``doc_id``, ``query_label`` (the
    label of the ``doc_id`` document; None for a text), ``k``, ``neighbors`` (list of dict,
    nearest first: the rows of the tables of :class:`BatchNeighborsRequest`, with their
    columns :data:`HIT_COLUMNS`: ``query`` (the text, or the ``doc_id``), ``query_label``,
    ``rank``, ``doc_id``, ``label``, ``angle`` in degrees, ``cosine``) and, when an index was
    searched, ``index`` (its path). Running it raises ParameterError for an unknown
    ``doc_id`` or ``k`` too large for the index; DataError for a query without a direction
    (empty, or no term of the model) or an empty document; CorpusMismatchError,
    ModelFormatError, InputNotFoundError as :func:`find_index` and
    :func:`~sphdist.jobs.embedding.open_embedding_source`.
    """

    writes: ClassVar[str | None] = None

    _: dataclasses.KW_ONLY
    query: str | None = None
    doc_id: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.query is None and self.doc_id is None:  # NeighborRequest: one of four
            raise ParameterError("no query given. To resolve this, pass a query (a text) or "
                                 "a doc_id (a document).")
        self.asks(query=self.query, doc_id=self.doc_id)  # its checks

    def asked(self) -> dict[str, Any]:
        """The document or the text asked."""
        return {"doc_id": self.doc_id} if self.doc_id is not None else {"query": str(self.query)}

    def execute(self, held: None, prepared: tuple[Any, ...]) -> dict[str, Any]:
        """Embed the query (or read the document's embedding) and find its neighbours."""
        fitted, source, found, path = prepared
        query, doc_id, k = self.query, self.doc_id, self.k
        own = None
        if doc_id is not None:
            own, vector = document_embedding(source, doc_id)
        else:
            vector = embed_texts(fitted, [str(query)])[:, 0]
        exclude = None if self.include_self else own
        report: dict[str, Any] = {
            "query": query, "doc_id": doc_id,
            "query_label": None if own is None else source.label_strings(np.array([own]))[0],
            "k": k,
        }
        asked = [str(query) if doc_id is None else doc_id]
        if found is None:
            hits = nearest_neighbors(source, vector, k, exclude=exclude)
            idx = np.array([[h["index"] for h in hits]], dtype=np.int64).reshape(1, -1)
            cos = np.array([[h["cosine"] for h in hits]], dtype=np.float64).reshape(1, -1)
            ids = np.array([[h["doc_id"] for h in hits]], dtype=object).reshape(1, -1)
        else:
            check_k(k, found.n_indexed_ - (exclude is not None))
            _say(found, path)
            idx, cos = search(source, vector[:, None], k, index=found,
                              exclude=None if exclude is None else np.array([exclude]))
            ids = source.ids.take(np.where(idx >= 0, idx, 0))  # only the chunks holding the hits
        columns = hits_table(source, asked, idx, cos, [report["query_label"]], doc_ids=ids)
        report["neighbors"] = [dict(zip(columns, row, strict=True))
                               for row in zip(*columns.values(), strict=True)]
        if found is not None:
            report["index"] = str(path)
        return report


@dataclasses.dataclass(frozen=True)
class BatchNeighborsRequest(SearchRequest):
    """``sphdist neighbors --queries``: the k nearest documents of many queries, as a table.

    Run by :func:`sphdist.jobs.run`, which returns a dict: ``output``, ``format``, ``n_rows``,
    ``n_queries`` (answered), ``k``, ``index`` (path or None), ``seconds`` (of the search),
    ``n_skipped`` and ``skipped`` (list of dict: ``line``, the 1-based line of the file, or
    position in the list, ``query`` and ``reason``).

    Parameters
    ----------
    model : path-like
    output : path-like or None
        Parquet, JSON Lines or CSV (by its suffix; ``format`` must agree): columns
        :data:`HIT_COLUMNS`, angle in degrees. None: nothing is written, and ``run`` returns
        the rows as ``neighbors`` (:meth:`execute`).
    queries : sequence of str, or QueryLines
        Texts (embedded as :func:`sphdist.jobs.embedding.embed_texts`) or, with ``ids``,
        document ids of the documents searched (each one's neighbours are other documents
        unless ``include_self``); :func:`queries_of` reads them from a file with their line
        numbers, which the messages then name.
    ids, k, include_self, input, index, exact, nprobe
        As :class:`NeighborRequest`; without an index the queries are answered by one exact
        scan (:func:`exact_search`).
    format : {"parquet", "jsonl", "csv"}, optional
    on_error : {"fail", "skip"}, default "fail"
        A bad query (a text sharing no term with the model, an unknown id, the id of an empty
        document, a line that is not UTF-8): refused, naming its line and nothing written
        (``"fail"``), or left out of the table and listed in ``skipped`` (``"skip"``).
    overwrite : bool, default False

    Raises
    ------
    ParameterError
        No query, ``include_self`` without ``ids`` (:class:`NeighborRequest`), an unknown
        ``on_error`` (when built); a format the suffix does not name (when run, after the
        output policy).

    Notes
    -----
    Run, it raises, besides what :func:`sphdist.jobs.run` raises for every command (an
    ``output`` that is an input: the model, the embedding, the index or the queries file):
    ParameterError for an unknown id (``on_error="fail"``), every query bad (``"skip"``), ``k``
    larger than the documents that can be neighbours; DataError for a query without a
    direction or a line that is not UTF-8 (``on_error="fail"``: the message names its line and
    the remedy); CorpusMismatchError, ModelFormatError as :func:`find_index`.
    """

    formats: ClassVar[dict[str, str]] = HIT_FORMATS

    output: Any
    queries: Sequence[str] | QueryLines
    ids: bool = False
    format: str | None = None
    on_error: str = "fail"
    overwrite: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "output", located(self.output))
        if self.on_error not in ON_ERROR:
            raise ParameterError(f"on_error={self.on_error!r}: expected one of {list(ON_ERROR)}.")
        self.asks(queries=self.queries, ids=self.ids)  # its checks
        if not self.texts:
            raise ParameterError("no query given. To resolve this, pass at least one query.")

    @property
    def lines(self) -> QueryLines | None:
        """The queries file read (:func:`queries_of`), or None for a list of queries."""
        return self.queries if isinstance(self.queries, QueryLines) else None

    @property
    def texts(self) -> list[str]:
        """The queries, in order."""
        return list(self.lines.texts if self.lines is not None else self.queries)

    def remedy(self, say: str = "", **changes: Any) -> Remedy:
        """The same batch changed, as ``sphdist neighbors --queries FILE`` words it."""
        fixed = dataclasses.replace(self, **{"format": None, **changes}) if changes else self
        given = {"model": str(fixed.model),
                 **({"input": str(fixed.input)} if fixed.input is not None else {})}
        return Remedy("neighbors", given, fixed.asked(), say)

    def inputs(self) -> tuple[Any, ...]:
        """The model, the documents, the index and the queries file, where given."""
        return (*super().inputs(), None if self.lines is None else self.lines.path)

    def asked(self) -> dict[str, Any]:
        """The queries file (or ``FILE`` for a list), ``ids``, and the output, where given."""
        asked = {"queries": str(self.lines.path if self.lines is not None else "FILE"),
                 **({"ids": True} if self.ids else {})}
        return {**asked, **({} if self.output is None else {"output": str(self.output)})}

    @property
    def writes(self) -> str | None:  # type: ignore[override]
        """``"file"``; None without an ``output``: :func:`~sphdist.jobs.run` returns the rows."""
        return None if self.output is None else "file"

    def execute(self, held: Output | None, prepared: tuple[Any, ...]) -> dict[str, Any]:
        """Answer every good query and commit the table through ``held``.

        Without an output (``held`` None), the rows are returned instead: ``neighbors``
        (list of dict, one per row, keys :data:`HIT_COLUMNS`, as :class:`QueryRequest`'s) and
        ``n_rows``, with the summary (``sphdist neighbors --queries FILE`` without
        ``--output`` prints them).
        """
        table, report = self.answer(prepared)
        if held is None:
            rows = [dict(zip(table, values, strict=True))
                    for values in zip(*table.values(), strict=True)]
            return {"neighbors": rows, "n_rows": len(rows), **report}
        return {**write_hits(table, held, format=self.written), **report}

    def answer(self, prepared: tuple[Any, ...]) -> tuple[dict[str, list[Any]], dict[str, Any]]:
        """The table of every good query's neighbours (:func:`hits_table`), and its summary.

        Parameters
        ----------
        prepared : tuple
            What :meth:`prepare` returned.

        Returns
        -------
        table : dict of str to list
            Columns :data:`HIT_COLUMNS`.
        report : dict
            ``n_queries``, ``k``, ``index``, ``seconds``, ``n_skipped``, ``skipped``.
        """
        fitted, source, found, path = prepared
        texts, lines, ids, k = self.texts, self.lines, self.ids, self.k
        problems: dict[int, tuple[type[Exception], str]] = {
            i: (DataError, why)
            for i, why in (lines.unreadable if lines is not None else {}).items()}
        if ids:
            positions, bad = _ids_problems(source, texts)
            problems = {**bad, **problems}
        else:
            Q, degenerate = embed_texts(fitted, texts, return_degenerate=True)
            for i in np.flatnonzero(degenerate):
                problems.setdefault(int(i), (DataError, (
                    f"query {texts[i][:60]!r} shares no term with the model's features, so it "
                    "has no direction on the sphere")))
        skipped = _bad_queries(problems, texts, lines, self.on_error)
        keep = np.array([i not in problems for i in range(len(texts))], dtype=bool)
        kept = [t for t, ok in zip(texts, keep, strict=True) if ok]
        exclude = query_labels = None
        if ids:
            positions = positions[keep]
            Q = _columns_of(source, positions)
            exclude = None if self.include_self else positions
            query_labels = source.label_strings(positions)
        else:
            Q = Q[:, keep]
        skip = _skip(source)
        live = source.n_documents - (0 if skip is None else int(skip.sum()))
        n = found.n_indexed_ if found is not None else live
        check_k(k, n - (exclude is not None))
        _say(found, path)
        start = time.perf_counter()
        idx, cos = search(source, Q, k, index=found, exclude=exclude)
        seconds = time.perf_counter() - start
        return hits_table(source, kept, idx, cos, query_labels), {
            "n_queries": len(kept), "k": k, "index": None if path is None else str(path),
            "seconds": seconds, "n_skipped": len(skipped), "skipped": skipped}


def _bad_queries(
    problems: dict[int, tuple[type[Exception], str]], texts: list[str],
    lines: QueryLines | None, on_error: str,
) -> list[dict[str, Any]]:
    """The bad queries as ``skipped`` lists them, or the refusal of the first (``"fail"``)."""
    def where(i: int) -> str:
        return lines.where(i) if lines is not None else f"query {i + 1}"

    def line(i: int) -> int:
        return lines.lines[i] if lines is not None else i + 1

    order = sorted(problems)
    if order and on_error == "fail":
        first = order[0]
        cls, why = problems[first]
        others = (f" ({len(order)} of {len(texts)} queries are bad, at "
                  f"{'lines' if lines is not None else 'positions'} "
                  f"{', '.join(str(line(i)) for i in order[:10])}"
                  f"{', ...' if len(order) > 10 else ''})") if len(order) > 1 else ""
        raise cls(
            f"{where(first)}: {why}{others}. To resolve this, fix or remove that "
            f"{('line' if lines is not None else 'query')}, or pass " + option("on_error", 'skip')
            + " to leave such queries out and list them."
        )
    if order and len(order) == len(texts):
        raise ParameterError(
            f"every query is bad ({len(texts)} of {len(texts)}; {where(order[0])}: "
            f"{problems[order[0]][1]}); nothing was written. To resolve this, "
            "fix the queries."
        )
    return [{"line": line(i), "query": texts[i], "reason": problems[i][1]} for i in order]
