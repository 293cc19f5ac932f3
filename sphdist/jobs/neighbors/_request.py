"""What a neighbour search is asked: :class:`NeighborRequest`, and the queries of a file.

One frozen request for the four searches (a text, a document, a batch of either, every
document), whose checks every neighbour job applies; :class:`QueryLines` is what a ``queries``
file holds (read by :func:`sphdist.jobs.neighbors.queries_of`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

from sphdist.errors import ParameterError


@dataclasses.dataclass(frozen=True)
class QueryLines:
    """The queries of a ``queries`` file, each with its line number (:func:`queries_of`).

    Attributes
    ----------
    path : str
        The file.
    texts : list of str
        One query per non-blank line, stripped.
    lines : list of int
        The 1-based line number of each query.
    unreadable : dict of int to str
        Position in ``texts`` of each line that is not UTF-8 text, and why (its text there is
        the line decoded with replacement characters); :class:`BatchNeighborsRequest` treats them as
        bad queries (``on_error``).
    """

    path: str
    texts: list[str]
    lines: list[int]
    unreadable: dict[int, str] = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.texts)

    def where(self, i: int) -> str:
        """Where query ``i`` is, for a message: ``"q.txt line 3"``."""
        return f"{self.path} line {self.lines[i]}"


# The modes of a NeighborRequest: documented where the package re-exports it (__init__.py).
MODES = ("query", "doc_id", "queries", "ids", "all")


@dataclasses.dataclass(frozen=True)
class NeighborRequest:
    """What a neighbour search is asked: exactly one of four queries, and how to search.

    :class:`QueryRequest` answers ``query`` or ``doc_id``, a :class:`BatchNeighborsRequest`
    ``queries`` and a :class:`KnnGraphRequest` ``all``; each checks its fields with this one.

    Parameters
    ----------
    query : str, optional
        A text, embedded with the model's feature scheme and idf.
    doc_id : str, optional
        The id of a document of the collection searched.
    queries : sequence of str, or QueryLines, optional
        Many texts, or with ``ids`` many document ids (:func:`queries_of` reads a file).
    ids : bool, default False
        The ``queries`` are document ids.
    all : bool, default False
        Every document's k nearest other documents (the k-NN graph).
    k : int, default 10
        Neighbours per query.
    include_self : bool, default False
        With a document query (``doc_id``, or ``queries`` with ``ids``): count the document
        itself (angle 0) among its k; by default the k are other documents.
    input : path-like, optional
        The documents searched: the model's training corpus (default: the path it recorded)
        or an ``embedding.zarr``.
    index : path-like, optional
        The ``index.zarr`` to search; default :func:`default_index_path`, when it exists.
    exact : bool, default False
        Scan every embedding even when an index exists.
    nprobe : int, optional
        Lists an IVF index scans per query; default the one stored with it.

    Raises
    ------
    ParameterError
        If not exactly one of ``query``, ``doc_id``, ``queries`` and ``all`` is given,
        ``ids`` without ``queries``, or ``include_self`` without a document query.

    Examples
    --------
    >>> NeighborRequest(doc_id="doc7", k=5).mode
    'doc_id'
    >>> NeighborRequest(queries=["doc1", "doc2"], ids=True, include_self=True).mode
    'ids'
    """

    query: str | None = None
    doc_id: str | None = None
    queries: Sequence[str] | QueryLines | None = None
    ids: bool = False
    all: bool = False
    k: int = 10
    include_self: bool = False
    input: str | os.PathLike[str] | None = None
    index: str | os.PathLike[str] | None = None
    exact: bool = False
    nprobe: int | None = None

    def __post_init__(self) -> None:
        asked = [name for name in ("query", "doc_id", "queries")
                 if getattr(self, name) is not None] + (["all"] if self.all else [])
        if len(asked) != 1:
            raise ParameterError(
                "a neighbour request asks exactly one of query (a text), doc_id (a document), "
                f"queries (many) and all (every document), got {asked or 'none'}. To resolve "
                "this, pass one.")
        if self.ids and self.queries is None:
            raise ParameterError("ids=True says what the queries are: it needs queries. To "
                                 "resolve this, pass queries=[...] or leave out ids.")
        if self.include_self and self.mode not in ("doc_id", "ids"):
            raise ParameterError(
                "include_self=True applies to a document query (doc_id, or queries with "
                "ids=True): a text query is no document of the collection, and all already "
                "leaves each document out of its own neighbours. To resolve this, leave it out.")

    @property
    def mode(self) -> str:
        """Which of :data:`MODES` is asked."""
        if self.queries is not None:
            return "ids" if self.ids else "queries"
        if self.query is not None:
            return "query"
        return "doc_id" if self.doc_id is not None else "all"
