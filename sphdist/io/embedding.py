"""The ``embedding.zarr`` format: embeddings of documents by a fitted model (``sphdist transform``).

::

    embedding.zarr/              zarr v3 group
      V           (r, n)         float64   column j: unit-norm embedding of document j
      degenerate  (n,)           bool      True where U^T x_j = 0 (V[:, j] is then e_1)
      doc_ids     (n,)           str       the corpus' document ids
      labels      (n,)           int32     the corpus' label codes (absent: unknown)

with attributes ``sphdist = {"kind": "embedding", "format_version": 1}``, ``model``
(``path``, ``u_sha256``), ``corpus`` (``path``, ``fingerprint``, ``shape``), ``label_names``,
``n_degenerate``, ``method`` and ``sha256`` (``V``, ``degenerate`` and ``doc_ids``: one digest
per stored chunk, :func:`~sphdist.io._checked.chunk_sha256`, those of V and ``degenerate``
computed by the tasks that write the chunks; ``labels``: one digest; checked when they are
read, each chunk of V by the task that reads it, which also checks that its columns are finite
unit vectors; embeddings written before a digest was recorded are read with one warning).

:class:`EmbeddingWriter` builds the group in a sibling staging directory, the tasks write their
chunks of V into it (:func:`write_embedding_block`), and :meth:`EmbeddingWriter.commit` makes it
visible with an atomic rename (:mod:`sphdist.io._posix`). Exporting and searching embeddings is
:mod:`sphdist.jobs.embedding`.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from sphdist.errors import ModelFormatError, Remedy, remedy
from sphdist.io._atomic import Output, open_output
from sphdist.io._checked import (
    EVERY_DIGEST,
    ChunkedVector,
    chunk_sha256,
    content_sha256,
    read_chunk_checked,
    recorded_digest,
    require_written,
)
from sphdist.io._fs import anchored
from sphdist.io._schema import INT, LIST, MAPPING, NULL, STR, Array, Attr, check_shape
from sphdist.io._tagged import TaggedStore
from sphdist.io._zarr import (
    CHECKSUMMED,
    WRITE_CONFIG,
    json_clean,
    regular_chunks,
    write_array,
    write_vector,
)

if TYPE_CHECKING:
    import dask.array as da

__all__ = [
    "FORMAT_VERSION", "KIND", "Embedding", "EmbeddingWriter", "open_embedding",
    "write_embedding_block",
]

FORMAT_VERSION = 1
KIND = "embedding"  # the group attribute sphdist.kind


def _zarr_chunk(chunks: tuple[int, ...]) -> int:
    """Columns per zarr chunk: the widest document chunk.

    Even chunks (all but the last the same) each start a zarr chunk, so a task writes one
    document chunk; V of uneven chunks (an ingest's chunks cut by their text) is written in
    blocks of this width instead (:func:`write_embedding_block`), not in chunks of their
    greatest common divisor, which could be one column per document.

    >>> _zarr_chunk((128, 128, 44)), _zarr_chunk((25, 25, 40))
    (128, 40)
    """
    return max(1, max(chunks, default=1))


class EmbeddingWriter:
    """Build an ``embedding.zarr`` in a staging directory; :meth:`commit` makes it visible.

    Parameters
    ----------
    output : Output or path-like
        The held output (:func:`sphdist.io.open_output`), whose :meth:`Output.commit` is the
        commit: refused if its lock is no longer held. A path: the writer holds it itself,
        from here until :meth:`commit` or the end of the block (refused with
        OutputLockedError if another writer holds it).
    n_components : int
        r.
    chunks : tuple of int
        Documents per chunk of the corpus. Even, tasks write one chunk each (through
        :func:`write_embedding_block`); uneven, blocks of ``chunk`` columns. No two tasks
        share a zarr chunk, so no lock is needed.

    Attributes
    ----------
    chunk : int
        Columns per zarr chunk of V and ``degenerate``: the widest of ``chunks``.
    even : bool
        Whether every document chunk starts a zarr chunk (all of ``chunks`` but the last
        the same): then a task may write one document chunk.

    Notes
    -----
    Use as a context manager: leaving the block without :meth:`commit` removes the staging
    directory. The staging directory must be on a filesystem the workers share.
    """

    def __init__(
        self, output: Output | str | os.PathLike[str], *, n_components: int,
        chunks: tuple[int, ...],
    ):
        self._owned: Any = None
        if not isinstance(output, Output):  # a path: held here, until the commit
            self._owned = open_output(output)
            output = self._owned.__enter__()
        self._output = output
        # absolute, once: the tasks that write the staging tree run in their own directories
        self.path = anchored(output.path)
        self._committed = False
        try:
            self.staging = anchored(output.staging())
            n = int(sum(chunks))
            self.offsets = tuple(int(o) for o in np.concatenate([[0], np.cumsum(chunks)[:-1]]))
            group = zarr.open_group(store=str(self.staging), mode="w-")
            c = self.chunk = _zarr_chunk(tuple(chunks))
            self.even = regular_chunks(tuple(chunks))
            group.create_array("V", shape=(n_components, n), dtype=np.float64,
                               chunks=(n_components, c), compressors=CHECKSUMMED,
                               config=WRITE_CONFIG)
            group.create_array("degenerate", shape=(n,), dtype=bool, chunks=(c,),
                               compressors=CHECKSUMMED, config=WRITE_CONFIG)
        except BaseException:
            self._release()
            raise
        self._group = group

    def _release(self) -> None:
        """Release the output this writer held itself (given a path); once."""
        owned, self._owned = self._owned, None
        if owned is not None:
            owned.__exit__(None, None, None)

    def __enter__(self) -> EmbeddingWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if not self._committed:
                self._output.discard(self.staging)
        finally:
            self._release()

    def commit(
        self, *, doc_ids: np.ndarray, labels: np.ndarray | None,
        label_names: list[str] | None, attrs: dict[str, Any],
        blocks: list[dict[str, list[str]]],
    ) -> Embedding:
        """Write ids, labels and attributes, then commit the staging tree (:meth:`Output.commit`).

        Parameters
        ----------
        blocks : list of dict
            What :func:`write_embedding_block` returned for each document chunk, in the
            order of the chunks: the digests of V and ``degenerate``, recorded (the store
            says every array has one, so they are required).
        doc_ids : ndarray of shape (n,), str
        labels : ndarray of shape (n,), int32, or None
        label_names : list of str or None
        attrs : dict
            More JSON-serialisable attributes (``model``, ``corpus``, ...).

        Returns
        -------
        Embedding

        Raises
        ------
        OutputLockedError
            If the output's lock is no longer held (see :meth:`Output.commit`); nothing is
            committed, and leaving the block removes the staging tree.
        """
        group = self._group
        for name in ("V", "degenerate"):  # the workers wrote them: are they here?
            require_written(group[name], self.path, name)
        digests: dict[str, Any] = {
            "doc_ids": write_vector(group, "doc_ids", np.asarray(doc_ids, dtype=object))}
        for name in ("V", "degenerate"):  # one digest per zarr chunk, in order
            digests[name] = [d for block in blocks for d in block[name]]
        if labels is not None:
            labels = np.asarray(labels, dtype=np.int32)
            write_array(group, "labels", labels)
            digests["labels"] = content_sha256(labels)
        group.attrs.update(json_clean({
            **attrs,
            "sphdist": {"kind": KIND, "format_version": FORMAT_VERSION, **EVERY_DIGEST},
            "label_names": label_names,
            "sha256": digests,
        }))
        try:
            self._output.commit(self.staging)
        finally:
            self._release()
        self._committed = True
        return Embedding(self.path)


def write_embedding_block(
    staging: str, start: int, V: np.ndarray, degenerate: np.ndarray
) -> dict[str, list[str]]:
    """Write columns ``start:start + n_c`` of an embedding being built (runs in a task).

    Parameters
    ----------
    staging : str
        :attr:`EmbeddingWriter.staging`.
    start : int
        First document of the chunk (the first of a zarr chunk).
    V : ndarray of shape (r, n_c), float64
    degenerate : ndarray of shape (n_c,), bool

    Returns
    -------
    dict
        ``V`` and ``degenerate``: the :func:`~sphdist.io._checked.chunk_sha256` of the zarr
        chunks written, in order, for :meth:`EmbeddingWriter.commit`. They depend on the
        values alone, so the same whatever the scheduler.
    """
    group = zarr.open_group(store=staging, mode="r+")
    stop = start + V.shape[1]
    arr_V, arr_d = group["V"], group["degenerate"]
    V = np.asarray(V, dtype=arr_V.dtype)
    degenerate = np.asarray(degenerate, dtype=arr_d.dtype)
    arr_V.with_config(WRITE_CONFIG)[:, start:stop] = V
    arr_d.with_config(WRITE_CONFIG)[start:stop] = degenerate
    return {"V": chunk_sha256(V, arr_V.chunks[1]),
            "degenerate": chunk_sha256(degenerate, arr_d.chunks[0])}


#: The arrays of an embedding (:func:`~sphdist.io._schema.check_arrays`).
_ARRAYS: dict[str, Array] = {
    "V": Array("f", 2, "the unit embeddings V, an (r, n) float64 array", "float64"),
    "degenerate": Array("b", 1, "one bool per document"),
    "doc_ids": Array("TUO", 1, "one string id per document"),
    "labels": Array("iu", 1, "one integer label code per document"),
}

#: The JSON types of an embedding's attributes (:func:`~sphdist.io._schema.check_attrs`).
_ATTRS: dict[str, Attr] = {
    "model": Attr((MAPPING,), "the model that embedded the documents"),
    "model.path": Attr((STR,), "the path of the model"),
    "model.u_sha256": Attr((STR,), "the fingerprint of the model"),
    "corpus": Attr((MAPPING,), "the corpus embedded"),
    "corpus.path": Attr((STR,), "the path of the corpus"),
    "corpus.fingerprint": Attr((STR,), "the fingerprint of the corpus"),
    "corpus.shape": Attr((LIST,), "the corpus' shape [m, n]", items=(INT,), length=2),
    "label_names": Attr((LIST, NULL), "the label names", items=(STR,)),
    "n_degenerate": Attr((INT,), "the number of degenerate documents"),
    "method": Attr((STR,), "the method, in words"),
    "sha256": Attr((MAPPING,), "the sha256 of each array"),
}


class Embedding(TaggedStore):
    """Read handle on an ``embedding.zarr`` written by ``sphdist transform``.

    Parameters
    ----------
    path : path-like

    Raises
    ------
    InputNotFoundError
        If nothing is at ``path``.
    ModelFormatError
        If ``path`` is not a sphdist embedding.
    """

    KIND = KIND
    FORMAT_VERSION = FORMAT_VERSION
    _MISSING = "write one with " + remedy(Remedy(
        "transform", {"model": "MODEL", "input": "CORPUS", "output": "PATH"}))
    _STALE = _REWRITE = "write it again with " + remedy(Remedy(
        "transform", {"model": "MODEL", "input": "CORPUS", "output": "PATH"},
        {"overwrite": True}))
    _ARRAYS = _ARRAYS
    _ATTRS = _ATTRS

    def _recorded_remedy(self) -> None:
        recorded = (self.attrs.get("model"), self.attrs.get("corpus"))
        paths = [p.get("path") if isinstance(p, dict) else None for p in recorded]
        if all(isinstance(p, str) and p for p in paths):  # the job that wrote it
            self._REWRITE = "write it again with " + remedy(Remedy(
                "transform", {"model": paths[0], "input": paths[1], "output": str(self.path)},
                {"overwrite": True}))

    def _check_schema(self) -> None:
        """The schema, and the lengths V implies: one entry per document in every array."""
        super()._check_schema()
        V = self._group.get("V")
        if V is None:
            return
        n = int(V.shape[1])
        for name in ("degenerate", "doc_ids", "labels"):
            check_shape(self._group, name, (n,), f"V has n = {n} columns (documents)",
                        path=self.location, error=ModelFormatError, remedy=self._rebuild)
        shape = (self.attrs.get("corpus") or {}).get("shape")
        if isinstance(shape, list) and shape[1] != n:
            check_shape(self._group, "V", (None, shape[1]),
                        f"attribute corpus.shape says n = {shape[1]} documents",
                        path=self.location, error=ModelFormatError, remedy=self._rebuild)

    def check_components(self, r: int, model: Any) -> None:
        """Refuse a V of other than ``r`` rows: the r of the model that wrote it (metadata only).

        Raises
        ------
        ModelFormatError
            Naming the embedding, the shape of V, the model and the job that writes it again.
        """
        check_shape(self._group, "V", (r, None), f"the model {model} has r = {r} components",
                    path=self.location, error=ModelFormatError, remedy=self._REWRITE)

    @property
    def V(self) -> da.Array:
        """The (r, n) float64 unit columns, lazy: one task per stored chunk reads and checks it.

        Each chunk is checked when read (:func:`~sphdist.io._tagged.read_unit_columns`):
        it decodes, its columns are finite unit vectors, and it matches its recorded digest.
        """
        return self._unit_columns("V", self._digest("V"),
                                  token=("embedding", self.attrs.get("sha256")))

    @property
    def shape(self) -> tuple[int, int]:
        """``(r, n)``: the shape of V, read from its metadata (no values, no dask)."""
        return tuple(int(d) for d in self._array("V").shape)  # type: ignore[return-value]

    def V_columns(self, start: int, stop: int) -> np.ndarray:
        """Columns ``start:stop`` of V as an ndarray of shape (r, stop - start), float64.

        Read now, without dask: only the stored chunks that hold them, each checked as the
        tasks of :attr:`V` check theirs.
        """
        return self._unit_columns_between("V", self._digest("V"), start, stop)

    def _digest(self, name: str) -> Any:
        """The recorded digest of ``name`` (V, degenerate, doc_ids, labels); warned once if none."""
        return recorded_digest(
            self.path, name, self.attrs.get("sha256"), self.attrs.get("sphdist"),
            self.__dict__.setdefault("_warned", set()), error=ModelFormatError,
            remedy=self._REWRITE,
        )

    @property
    def doc_ids(self) -> np.ndarray:
        """Ndarray of shape (n,), object (Python str)."""
        return self._read("doc_ids", self._digest("doc_ids")).astype(object)

    def ids(self) -> ChunkedVector:
        """The document ids, read chunk by chunk on demand, each chunk checked when read."""
        arr = self._array("doc_ids")
        sha = self._digest("doc_ids")
        return ChunkedVector(arr.shape[0], arr.chunks[0], lambda i: self._consistent(
            lambda: read_chunk_checked(arr, i, str(self.location), "doc_ids",
                                       error=ModelFormatError, remedy=self._REWRITE,
                                       sha256=sha if isinstance(sha, list) else None)),
            digests=sha if isinstance(sha, list) else None)

    @property
    def labels(self) -> np.ndarray | None:
        """Ndarray of shape (n,), int32, or None."""
        # labels and degenerate: embeddings written before every chunk was stored left out
        # chunks equal to the fill value (all 0, all False)
        if "labels" not in self._group:
            return None
        return self._read("labels", self._digest("labels"), required=False)

    @property
    def degenerate(self) -> np.ndarray:
        """Ndarray of shape (n,), bool: True where ``U^T x_j = 0``."""
        return self._read("degenerate", self._digest("degenerate"), required=False)


def open_embedding(path: str | os.PathLike[str]) -> Embedding:
    """Open an ``embedding.zarr``; see :class:`Embedding`."""
    return Embedding(path)
