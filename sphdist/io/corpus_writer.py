"""Writing a ``corpus.zarr`` (the layout is described in :mod:`sphdist.io.corpus`).

:class:`CorpusWriter` writes chunk by chunk into a staging directory and commits it atomically
by a rename at the end (:mod:`sphdist.io._posix`), so an interrupted ingest never leaves a
``corpus.zarr`` that looks complete. Workers that build chunks in parallel write them into the
staging directory with :func:`store_chunk`; the driver appends them in order.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp
import zarr

from sphdist.io._atomic import Output, open_output
from sphdist.io._checked import EVERY_DIGEST, content_sha256
from sphdist.io._policy import refuse_existing
from sphdist.io._zarr import (
    WRITE_CONFIG,
    PackedStrings,
    checksummed,
    json_clean,
    write_vector,
)
from sphdist.io.corpus import FORMAT_VERSION, KIND, Corpus, _chunk_key, data_fingerprint

__all__ = ["CorpusWriter", "StoredChunk", "store_chunk"]


class StoredChunk(NamedTuple):
    """A document chunk written by :func:`store_chunk`: index, nonzeros, empty columns, digest."""

    index: int
    nnz: int
    empty: np.ndarray  # (n_c,) bool
    sha256: str = ""  # content_sha256(data, indices, indptr) as stored


def store_chunk(
    staging: str | os.PathLike[str], index: int, X_chunk: sp.spmatrix | sp.sparray,
    n_features: int, compressors: Any = "auto",
) -> StoredChunk:
    """Write document chunk ``index`` into a :class:`CorpusWriter`'s staging directory.

    For writers that build chunks in parallel (workers of ``sphdist.text.ingest``); the driver
    then calls :meth:`CorpusWriter.append_stored_chunk` in chunk order.

    Parameters
    ----------
    staging : path-like
        :attr:`CorpusWriter.staging`, on a filesystem the caller can write.
    index : int
        Chunk index.
    X_chunk : scipy.sparse matrix of shape (n_features, n_c)
        As for :meth:`CorpusWriter.write_chunk`.
    n_features : int
    compressors : zarr codec(s) or "auto", default "auto"
        Compression of the three arrays (zarr's default: zstd). Any codec of the safe list
        that readers accept; zstd is always written with its content checksum
        (:func:`sphdist.io._zarr.checksummed`).

    Returns
    -------
    StoredChunk

    Raises
    ------
    ValueError
        If the shape disagrees or the values are not finite.
    """
    group = zarr.open_group(store=str(staging), mode="r+")
    return _store_chunk(group, index, X_chunk, n_features, compressors)


def _store_chunk(group: zarr.Group, index: int, X_chunk, n_features: int,
                 compressors: Any = "auto") -> StoredChunk:
    X_c = sp.csc_matrix(X_chunk, dtype=np.float64)
    X_c.sort_indices()
    m, n_c = X_c.shape
    if m != n_features:
        raise ValueError(f"chunk has {m} features, expected {n_features}")
    if not np.all(np.isfinite(X_c.data)):
        raise ValueError(f"chunk {index} holds NaN or Inf values")
    key = _chunk_key(index)
    # as they are when they have these types already (no copy of a chunk's indices)
    arrays = (X_c.data, X_c.indices.astype(np.int32, copy=False),
              X_c.indptr.astype(np.int64, copy=False))
    for name, values in zip(("data", "indices", "indptr"), arrays, strict=True):
        arr = group.create_array(
            f"{key}/{name}", shape=values.shape, dtype=values.dtype,
            chunks=(max(1, values.shape[0]),), compressors=checksummed(compressors),
            config=WRITE_CONFIG,
        )
        if values.shape[0]:
            arr[:] = values
    return StoredChunk(
        index, int(X_c.nnz), np.diff(X_c.indptr) == 0, content_sha256(*arrays)
    )


class CorpusWriter:
    """Write a ``corpus.zarr`` chunk by chunk, committing it atomically at the end.

    Parameters
    ----------
    output : Output or path-like
        The held corpus (:func:`sphdist.io.open_output`), committed through
        :meth:`~sphdist.io.Output.commit`: refused if its lock is no longer held. A path:
        the writer holds it itself, from here until :meth:`commit`, :meth:`abort` or the end
        of the block (refused with OutputLockedError if another writer holds it).
    n_features : int
        Number of features m (rows of every chunk).
    feature_scheme : dict
        JSON-serialisable description, with at least ``"type"`` (``"hashing"`` or
        ``"vocabulary"``); stored as the ``feature_scheme`` attribute.
    tfidf : dict, optional
        JSON-serialisable tf-idf options, stored as the ``tfidf`` attribute.
    label_names : sequence of str, optional
        Names of the label codes passed to :meth:`write_chunk`.
    vocabulary : sequence of str, optional
        Feature names, of length ``n_features``.
    overwrite : bool, default False
        Replace an existing ``output`` on :meth:`commit`.

    Raises
    ------
    OutputExistsError
        If ``output`` exists and ``overwrite`` is False.
    OutputLockedError
        Given a path, if another writer holds it.

    Notes
    -----
    Only one chunk is held in memory at a time, plus the per-document ids and labels
    (O(n) small values). Use as a context manager: leaving the block without :meth:`commit`
    (an exception, an interrupt) removes the staging directory and leaves the output untouched.
    """

    def __init__(
        self,
        output: Output | str | os.PathLike[str],
        *,
        n_features: int,
        feature_scheme: dict[str, Any],
        tfidf: dict[str, Any] | None = None,
        label_names: Sequence[str] | None = None,
        vocabulary: Sequence[str] | None = None,
        overwrite: bool = False,
    ):
        self._owned: Any = None
        if not isinstance(output, Output):  # a path: held here until the commit (or refused)
            self._owned = open_output(output, overwrite=overwrite)
            output = self._owned.__enter__()
        self._output = output
        self.path = output.path
        try:
            if output.committed() and not overwrite:  # a held output: looked at here
                refuse_existing(self.path)
            self.n_features = int(n_features)
            self.feature_scheme = dict(feature_scheme)
            self.tfidf = dict(tfidf or {})
            self.label_names = list(label_names) if label_names is not None else None
            self._staging = output.staging()
            self._group = zarr.open_group(store=str(self._staging), mode="w-")
        except BaseException:
            self._release()
            raise
        self._boundaries = [0]
        self._doc_ids = PackedStrings()  # their UTF-8 bytes: a few bytes an id (issue 43)
        self._labels: list[np.ndarray] = []
        self._empty: list[np.ndarray] = []
        self._nnz = 0
        self._chunk_nnz: list[int] = []
        self._chunk_sha256: list[str] = []
        self._committed = False
        # stored now, not held until the commit: a large vocabulary is tens of MB of Python
        # strings (issue 43); its digests are recorded at the commit
        self._vocabulary_sha256: list[str] | None = None
        if vocabulary is not None:
            try:
                self._vocabulary_sha256 = self._write_1d(
                    "vocabulary", np.asarray(vocabulary, dtype=object))
            except BaseException:
                self.abort()
                raise

    def __enter__(self) -> CorpusWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if not self._committed:
                self.abort()
        finally:
            self._release()

    def _release(self) -> None:
        """Release the output this writer held itself (given a path); once."""
        owned, self._owned = self._owned, None
        if owned is not None:
            owned.__exit__(None, None, None)

    def write_chunk(
        self,
        X_chunk: sp.spmatrix | sp.sparray,
        doc_ids: Sequence[str],
        labels: Sequence[int] | np.ndarray | None = None,
    ) -> None:
        """Append one chunk of documents (columns).

        Parameters
        ----------
        X_chunk : scipy.sparse matrix of shape (n_features, n_c)
            The weighted, normalised document columns; converted to CSC float64.
        doc_ids : sequence of str, length n_c
            Identifiers of the documents.
        labels : array-like of int, length n_c, optional
            Label codes (index into ``label_names``); required for every chunk or none.

        Raises
        ------
        ValueError
            If the shapes disagree, or the values are not finite.
        """
        if len(doc_ids) != X_chunk.shape[1]:
            raise ValueError(f"{len(doc_ids)} document ids for {X_chunk.shape[1]} documents")
        stored = _store_chunk(self._group, len(self._boundaries) - 1, X_chunk, self.n_features)
        self.append_stored_chunk(stored, doc_ids, labels)

    @property
    def staging(self) -> Path:
        """The staging directory: :func:`store_chunk` may write chunks into it (workers)."""
        return self._staging

    @property
    def n_chunks(self) -> int:
        """Chunks appended so far (the index of the next one)."""
        return len(self._boundaries) - 1

    def append_stored_chunk(
        self,
        stored: StoredChunk,
        doc_ids: Sequence[str],
        labels: Sequence[int] | np.ndarray | None = None,
    ) -> None:
        """Record chunk ``stored.index``, written into :attr:`staging` by :func:`store_chunk`.

        Parameters
        ----------
        stored : StoredChunk
            What :func:`store_chunk` returned; its index must be :attr:`n_chunks`.
        doc_ids, labels
            As for :meth:`write_chunk`.

        Raises
        ------
        ValueError
            If the chunk is out of order or the lengths disagree.
        """
        if stored.index != self.n_chunks:
            raise ValueError(f"chunk {stored.index} appended as chunk {self.n_chunks}")
        if len(doc_ids) != stored.empty.shape[0]:
            raise ValueError(f"{len(doc_ids)} document ids for {stored.empty.shape[0]} documents")
        self._doc_ids.extend(doc_ids)  # first: a lone surrogate refused, nothing recorded
        self._boundaries.append(self._boundaries[-1] + stored.empty.shape[0])
        self._nnz += stored.nnz
        self._chunk_nnz.append(stored.nnz)
        self._chunk_sha256.append(stored.sha256)
        self._empty.append(stored.empty)
        if labels is not None:
            self._labels.append(np.asarray(labels, dtype=np.int32))

    def _write_1d(self, name: str, values: np.ndarray) -> list[str]:
        return write_vector(self._group, name, values)

    def commit(
        self, idf: np.ndarray | None = None, extra_attrs: dict[str, Any] | None = None
    ) -> Corpus:
        """Write the per-document arrays and attributes, then make the corpus visible.

        Parameters
        ----------
        idf : ndarray of shape (n_features,), float64, optional
            The idf weights applied to the stored matrix.
        extra_attrs : dict, optional
            More JSON-serialisable attributes (e.g. the ingest source).

        Returns
        -------
        Corpus
            The committed corpus, opened for reading.

        Raises
        ------
        ValueError
            If labels were given for some chunks but not others.
        OutputLockedError
            If the output's lock is no longer held (see :meth:`Output.commit`); nothing is
            committed.
        """
        n = self._boundaries[-1]
        ids = self._write_1d("doc_ids", self._doc_ids)
        empty = np.concatenate(self._empty) if self._empty else np.zeros(0, dtype=bool)
        self._write_1d("empty", empty)
        digests: dict[str, Any] = {"empty": content_sha256(empty)}
        # per-chunk digests apart: the previous version hashes every sha256 entry as one digest
        chunked: dict[str, list[str]] = {"doc_ids": ids}
        if self._labels:
            labels = np.concatenate(self._labels)
            if labels.shape[0] != n:
                raise ValueError("labels were given for some chunks but not for others")
            self._write_1d("labels", labels)
            digests["labels"] = content_sha256(labels)
        if idf is not None:
            idf = np.asarray(idf, dtype=np.float64)
            if idf.shape != (self.n_features,):
                raise ValueError(f"idf has shape {idf.shape}, expected ({self.n_features},)")
            self._write_1d("idf", idf)
            digests["idf"] = content_sha256(idf)
        if self._vocabulary_sha256 is not None:
            chunked["vocabulary"] = self._vocabulary_sha256
        meta = {
            "sphdist": {"kind": KIND, "format_version": FORMAT_VERSION, **EVERY_DIGEST},
            "shape": [self.n_features, n],
            "nnz": self._nnz,
            "chunk_boundaries": self._boundaries,
            "feature_scheme": self.feature_scheme,
            "tfidf": self.tfidf,
            "label_names": self.label_names,
            "n_empty": int(empty.sum()),
            "corpus_id": uuid.uuid4().hex,
            "chunk_nnz": self._chunk_nnz,
            "chunk_sha256": self._chunk_sha256,
            "sha256": digests,
            "chunked_sha256": chunked,
        }
        meta = json_clean(meta)
        meta["fingerprint"] = data_fingerprint(meta)
        self._group.attrs.update({**(extra_attrs or {}), **meta})
        try:
            self._output.commit(self._staging)
        finally:
            self._release()
        self._committed = True
        return Corpus(self.path)

    def abort(self) -> None:
        """Discard everything written so far; the output is left as it was."""
        try:
            self._output.discard(self._staging)
        finally:
            self._release()
        self._committed = True
