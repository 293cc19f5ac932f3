"""The ``corpus.zarr`` format: a sparse tf-idf matrix stored in chunks of documents.

This is the only module that knows the corpus layout. The matrix X follows the papers'
orientation, **m features x n documents**, documents as columns, and is stored as one CSC piece
per column chunk::

    corpus.zarr/                    zarr v3 group
      zarr.json                     attributes (below)
      X/00000/data     (nnz_0,)     float64   nonzero values of chunk 0
      X/00000/indices  (nnz_0,)     int32     their feature (row) indices
      X/00000/indptr   (n_0 + 1,)   int64     CSC column pointers of chunk 0
      X/00001/...                   one subgroup per chunk, in document order
      idf              (m,)         float64   idf weight of every feature (absent: no tf-idf)
      doc_ids          (n,)         str       document identifiers (file path in the archive)
      labels           (n,)         int32     label codes into ``label_names`` (absent: unknown)
      empty            (n,)         bool      True where the document column is all zero
      vocabulary       (m,)         str       feature names (vocabulary scheme only)

Group attributes: ``sphdist = {"kind": "corpus", "format_version": 1}``, ``shape = [m, n]``,
``nnz``, ``chunk_boundaries`` (document offsets, ``[0, n_0, n_0 + n_1, ..., n]``),
``feature_scheme`` (``{"type": "hashing", "n_features": m, ...}`` or
``{"type": "vocabulary", "n_features": m}``), ``tfidf`` (the weighting options),
``label_names``, ``n_empty``, ``corpus_id`` (random, set at writing) and ``fingerprint``
(sha256 of the other attributes and the idf).

A dense 2-D zarr array of shape (n_samples, n_features) (numeric UCI-style data), or a group
holding such an array ``X`` and optional integer labels ``y``, is accepted as input too
(:class:`DenseInput`); it is read in the papers' orientation, transposed.

Writing goes through :class:`CorpusWriter`: chunk by chunk into a staging directory, committed
atomically by a rename at the end, so an interrupted ingest never leaves a ``corpus.zarr`` that
looks complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import dask.array as da
import numpy as np
import scipy.sparse as sp
import zarr

from sphdist.errors import CorpusFormatError, DataError, InputNotFoundError, OutputExistsError
from sphdist.io import _atomic

__all__ = [
    "FORMAT_VERSION",
    "Corpus",
    "CorpusWriter",
    "DenseInput",
    "StoredChunk",
    "open_input",
    "open_corpus",
    "store_chunk",
]

FORMAT_VERSION = 1
_KIND = "corpus"


def _chunk_key(i: int) -> str:
    return f"X/{i:05d}"


def _fingerprint(meta: dict[str, Any], idf: np.ndarray | None) -> str:
    """sha256 of the canonical JSON of the corpus metadata and the idf bytes."""
    h = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
    if idf is not None:
        h.update(np.ascontiguousarray(idf, dtype="<f8").tobytes())
    return h.hexdigest()


def _open_group(path: str | os.PathLike[str]) -> zarr.Group:
    path = Path(path)
    if not path.exists():
        raise InputNotFoundError(
            f"{path}: no such file or directory. To resolve this, check the path, or create a "
            "corpus with `sphdist ingest SOURCE --output PATH`."
        )
    try:
        node = zarr.open(store=str(path), mode="r")
    except Exception as exc:  # zarr raises several types for "not zarr"
        raise CorpusFormatError(
            f"{path}: not a zarr v3 group or array ({type(exc).__name__}: {exc}). To resolve "
            "this, pass a corpus written by `sphdist ingest` or a dense 2-D zarr array."
        ) from exc
    return node


class _Input:
    """What every model input has: X of shape (m features, n documents)."""

    shape: tuple[int, int]

    @property
    def n_features(self) -> int:
        """Number of features m (rows of X)."""
        return self.shape[0]

    @property
    def n_documents(self) -> int:
        """Number of documents n (columns of X)."""
        return self.shape[1]

    def require_documents(self) -> None:
        """Refuse an input with no document that has a nonzero value.

        Raises
        ------
        DataError
            If every document column is empty (or there is none): nothing to fit.
        """
        n_empty = int(getattr(self, "n_empty", 0))
        if self.n_documents - n_empty < 1:
            raise DataError(
                f"{self.path}: all {self.n_documents} documents are empty (no nonzero value), "
                "so there is nothing to fit. To resolve this, check the source and the ingest "
                "options (e.g. --remove-headers on very short texts) and re-ingest."
            )


class Corpus(_Input):
    """Read handle on a sparse ``corpus.zarr`` (see the module docstring for the layout).

    Parameters
    ----------
    path : path-like
        The corpus directory.

    Raises
    ------
    InputNotFoundError
        If ``path`` does not exist.
    CorpusFormatError
        If ``path`` is not a sphdist corpus, or its format version is not supported.

    Notes
    -----
    Opening reads only the group metadata; chunks are read on demand by :meth:`read_chunk` or by
    the tasks of :meth:`to_dask`.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        group = _open_group(self.path)
        attrs = dict(group.attrs) if isinstance(group, zarr.Group) else {}
        tag = attrs.get("sphdist")
        tag = tag if isinstance(tag, dict) else {}
        if tag.get("kind") != _KIND:
            raise CorpusFormatError(
                f"{self.path}: not a sphdist corpus (group attribute sphdist.kind is "
                f"{tag.get('kind')!r}). To resolve this, create one with `sphdist ingest`."
            )
        if "format_version" not in tag:
            raise CorpusFormatError(
                f"{self.path}: corpus has no format version (group attribute "
                "sphdist.format_version is missing). To resolve this, re-ingest the source with "
                "`sphdist ingest`."
            )
        if tag.get("format_version") != FORMAT_VERSION:
            raise CorpusFormatError(
                f"{self.path}: corpus format version {tag.get('format_version')!r} is not "
                f"supported (this sphdist reads version {FORMAT_VERSION}). To resolve this, "
                "re-ingest the source with this version of sphdist."
            )
        self._group = group
        self.attrs = attrs
        try:
            m, n = attrs["shape"]
            self.shape: tuple[int, int] = (int(m), int(n))
            self.nnz: int = int(attrs["nnz"])
            self.chunk_boundaries = np.asarray(attrs["chunk_boundaries"], dtype=np.int64)
            self.feature_scheme: dict[str, Any] = dict(attrs["feature_scheme"])
            self.tfidf: dict[str, Any] = attrs.get("tfidf") or {}
            self.label_names: list[str] | None = attrs.get("label_names")
            self.n_empty: int = int(attrs.get("n_empty", 0))
            self.fingerprint: str = str(attrs["fingerprint"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CorpusFormatError(
                f"{self.path}: corpus metadata is incomplete or malformed ({type(exc).__name__}: "
                f"{exc}). To resolve this, re-ingest the corpus."
            ) from exc
        b = self.chunk_boundaries
        if (
            min(self.shape) < 0 or b.ndim != 1 or b.size < 1 or b[0] != 0
            or b[-1] != self.shape[1] or np.any(np.diff(b) < 0) or self.nnz < 0
        ):
            raise CorpusFormatError(
                f"{self.path}: chunk_boundaries {b.tolist()[:5]}... do not partition the "
                f"{self.shape[1]} documents. To resolve this, re-ingest the corpus."
            )

    # -- metadata -------------------------------------------------------------------------
    @property
    def n_chunks(self) -> int:
        """Number of document chunks."""
        return len(self.chunk_boundaries) - 1

    @property
    def chunks(self) -> tuple[int, ...]:
        """Documents per chunk, in order."""
        return tuple(int(c) for c in np.diff(self.chunk_boundaries))

    def _optional(self, name: str) -> np.ndarray | None:
        try:
            arr = _checked_array(self._group, name, str(self.path), name)
        except KeyError:
            return None
        return np.asarray(arr[:])

    @property
    def idf(self) -> np.ndarray | None:
        """Ndarray of shape (m,), float64: idf weight per feature, or None."""
        return self._optional("idf")

    @property
    def labels(self) -> np.ndarray | None:
        """Ndarray of shape (n,), int32: label code per document (-1: unknown), or None."""
        return self._optional("labels")

    @property
    def doc_ids(self) -> np.ndarray:
        """Ndarray of shape (n,), str: document identifiers."""
        return np.asarray(_checked_array(self._group, "doc_ids", str(self.path), "doc_ids")[:])

    @property
    def empty(self) -> np.ndarray:
        """Ndarray of shape (n,), bool: True where the document column is all zero."""
        return np.asarray(_checked_array(self._group, "empty", str(self.path), "empty")[:])

    @property
    def vocabulary(self) -> np.ndarray | None:
        """Ndarray of shape (m,), str: feature names (vocabulary scheme), or None."""
        return self._optional("vocabulary")

    # -- data -----------------------------------------------------------------------------
    def read_chunk(self, i: int) -> sp.csc_matrix:
        """Read document chunk ``i`` as a CSC matrix.

        Parameters
        ----------
        i : int
            Chunk index, ``0 <= i < n_chunks``.

        Returns
        -------
        scipy.sparse.csc_matrix of shape (m, n_i), float64
            Columns ``chunk_boundaries[i]:chunk_boundaries[i + 1]`` of X.

        Raises
        ------
        CorpusFormatError
            If the chunk is missing, corrupted, stored with codecs other than
            :data:`SAFE_CODECS`, or its CSC arrays are inconsistent (lengths, decreasing
            column pointers, feature indices outside ``[0, m)``).
        DataError
            If a value is NaN or Inf (naming the document and the feature).
        """
        return _read_chunk(str(self.path), i, self.n_features, self.chunks[i])

    def to_dask(self) -> da.Array:
        """Return X as a lazy, column-chunked dask array.

        Returns
        -------
        dask.array.Array of shape (m, n), float64
            One block per document chunk (``chunks == ((m,), self.chunks)``), each a
            ``scipy.sparse.csc_matrix`` read from the store when the task runs.
        """
        m = self.n_features
        return da.map_blocks(
            _load_block,
            str(self.path),
            self.chunks,
            m,
            chunks=((m,), self.chunks),
            dtype=np.float64,
            meta=sp.csc_matrix((0, 0), dtype=np.float64),
            name=f"sphdist-corpus-{self.fingerprint[:16]}",
        )

    def __repr__(self) -> str:
        return (
            f"Corpus({str(self.path)!r}, shape={self.shape}, nnz={self.nnz}, "
            f"n_chunks={self.n_chunks}, scheme={self.feature_scheme.get('type')!r})"
        )


#: zarr v3 codecs sphdist reads: none of them can execute code (no pickle, no object dtype).
SAFE_CODECS = frozenset({
    "bytes", "zstd", "blosc", "gzip", "crc32c", "transpose", "vlen-utf8", "sharding_indexed",
})


def _checked_array(group: zarr.Group, name: str, path: str, what: str) -> zarr.Array:
    """``group[name]`` if it is a zarr v3 array of a plain dtype and safe codecs.

    Raises KeyError if absent; CorpusFormatError if it is anything else.
    """
    try:
        arr = group[name]
    except KeyError:
        raise
    except Exception as exc:  # unknown codec, malformed metadata, ...
        raise CorpusFormatError(
            f"{path}: {what} ({name}) is unreadable ({type(exc).__name__}: {exc}). To resolve "
            "this, re-ingest the corpus."
        ) from None
    if not isinstance(arr, zarr.Array):
        raise KeyError(name)
    meta = arr.metadata
    codecs = [c.to_dict().get("name") for c in getattr(meta, "codecs", ())]
    if (
        meta.zarr_format != 3
        or arr.dtype.kind not in "biufT"
        and not (arr.dtype.kind == "O" and codecs[:1] == ["vlen-utf8"])
        or not set(codecs) <= SAFE_CODECS
    ):
        raise CorpusFormatError(
            f"{path}: {what} ({name}) is stored as zarr v{meta.zarr_format}, dtype "
            f"{arr.dtype}, codecs {codecs}; sphdist reads only zarr v3 numeric or UTF-8 arrays "
            f"with the codecs {sorted(SAFE_CODECS)} (nothing that can execute code). To "
            "resolve this, re-ingest the corpus."
        )
    return arr


def _read_chunk(path: str, i: int, m: int, n_i: int) -> sp.csc_matrix:
    # runs in worker tasks: the client must unpickle the error, and zarr's exceptions (kept in
    # __cause__ / __context__) do not unpickle, so the error leaves without them
    try:
        return _read_chunk_checked(path, i, m, n_i)
    except (CorpusFormatError, DataError) as exc:
        error = exc
    error.__cause__ = error.__context__ = None
    raise error


def _read_chunk_checked(path: str, i: int, m: int, n_i: int) -> sp.csc_matrix:
    what = f"document chunk {i}"
    try:
        g = zarr.open_group(store=path, path=_chunk_key(i), mode="r")
        arrays = [_checked_array(g, name, path, what) for name in ("data", "indices", "indptr")]
        data, indices, indptr = (a[:] for a in arrays)
    except (KeyError, FileNotFoundError) as exc:
        raise CorpusFormatError(
            f"{path}: document chunk {i} ({_chunk_key(i)}) is missing or unreadable "
            f"({type(exc).__name__}). To resolve this, re-ingest the corpus."
        ) from None
    except CorpusFormatError:
        raise
    except Exception as exc:  # a truncated or corrupted chunk file: the codec fails
        raise CorpusFormatError(
            f"{path}: document chunk {i} ({_chunk_key(i)}) is corrupted "
            f"({type(exc).__name__}: {exc}). To resolve this, re-ingest the corpus."
        ) from None
    if (
        indptr.shape != (n_i + 1,)
        or indptr[0] != 0
        or indptr[-1] != data.shape[0]
        or indices.shape != data.shape
    ):
        raise CorpusFormatError(
            f"{path}: document chunk {i} has inconsistent CSC arrays (indptr of length "
            f"{indptr.shape[0]} for {n_i} documents, {data.shape[0]} values, "
            f"{indices.shape[0]} indices). To resolve this, re-ingest the corpus."
        )
    if n_i and np.any(np.diff(indptr) < 0):
        j = int(np.flatnonzero(np.diff(indptr) < 0)[0])
        raise CorpusFormatError(
            f"{path}: document chunk {i} has a decreasing column pointer at document {j} of the "
            f"chunk (indptr[{j}]={indptr[j]} > indptr[{j + 1}]={indptr[j + 1]}). To resolve "
            "this, re-ingest the corpus."
        )
    if indices.size and (indices.min() < 0 or indices.max() >= m):
        bad = int(indices[(indices < 0) | (indices >= m)][0])
        raise CorpusFormatError(
            f"{path}: document chunk {i} has feature index {bad}, outside [0, {m}). To resolve "
            "this, re-ingest the corpus."
        )
    finite = np.isfinite(data)
    if not finite.all():
        pos = int(np.flatnonzero(~finite)[0])
        first = int(np.searchsorted(indptr, pos, side="right")) - 1
        chunk_start = _chunk_start(path, i)
        raise DataError(
            f"{path}: document {chunk_start + first} (chunk {i}) holds a non-finite value "
            f"({data[pos]}) at feature {int(indices[pos])}. To resolve this, clean the source "
            "and re-ingest it."
        )
    return sp.csc_matrix((data, indices, indptr), shape=(m, n_i))


def _chunk_start(path: str, i: int) -> int:
    try:
        bounds = zarr.open_group(store=path, mode="r").attrs["chunk_boundaries"]
        return int(bounds[i])
    except Exception:  # only for the message
        return 0


def _load_block(path: str, chunks: tuple[int, ...], m: int, block_id=None) -> sp.csc_matrix:
    i = block_id[1]
    return _read_chunk(path, i, m, chunks[i])


class DenseInput(_Input):
    """Read handle on a dense 2-D zarr array of shape (n_samples, n_features).

    Parameters
    ----------
    path : path-like
        A zarr v3 array, or a group holding an array ``X`` and optionally integer labels ``y``
        of shape (n_samples,).

    Raises
    ------
    InputNotFoundError
        If ``path`` does not exist.
    CorpusFormatError
        If it holds no 2-D numeric array.

    Notes
    -----
    The data are used in the papers' orientation, X of shape (n_features, n_samples), without
    any normalisation; the document chunks are the zarr chunks along the sample axis.
    """

    feature_scheme: dict[str, Any] = {"type": "dense"}
    tfidf: dict[str, Any] = {}
    idf = None
    label_names = None

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        node = _open_group(self.path)
        self.labels: np.ndarray | None = None
        if isinstance(node, zarr.Group):
            if "X" not in node:
                raise CorpusFormatError(
                    f"{self.path}: a zarr group that is neither a sphdist corpus nor holds a "
                    "dense array 'X'. To resolve this, pass a corpus written by `sphdist ingest` "
                    "or a 2-D zarr array of shape (n_samples, n_features)."
                )
            array = node["X"]
            if not isinstance(array, zarr.Array):
                raise CorpusFormatError(
                    f"{self.path}: looks like a corpus (it has a group 'X') but has no sphdist "
                    "format tag (group attribute sphdist.format_version). To resolve this, "
                    "re-ingest the source with `sphdist ingest`."
                )
            if "y" in node:
                self.labels = np.asarray(node["y"][:]).astype(np.int32)
            self._array_path = "X"
        else:
            array = node
            self._array_path = None
        if array.ndim != 2 or not np.issubdtype(array.dtype, np.number):
            raise CorpusFormatError(
                f"{self.path}: expected a 2-D numeric array of shape (n_samples, n_features), "
                f"found shape {array.shape} and dtype {array.dtype}."
            )
        n, m = array.shape
        self.shape = (int(m), int(n))
        self._array = array
        self.nnz = int(m) * int(n)
        self.n_empty = 0
        meta = {"kind": "dense", "shape": list(self.shape), "zarr": array.metadata.to_dict()}
        self.fingerprint = _fingerprint(json.loads(json.dumps(meta, default=str)), None)

    @property
    def chunks(self) -> tuple[int, ...]:
        """Samples per chunk, in order (the zarr chunks along axis 0)."""
        n, c = self.shape[1], self._array.chunks[0]
        return tuple(min(c, n - s) for s in range(0, n, c))

    @property
    def chunk_boundaries(self) -> np.ndarray:
        """Ndarray of shape (n_chunks + 1,), int64: sample offsets of the chunks."""
        return np.concatenate([[0], np.cumsum(self.chunks)]).astype(np.int64)

    @property
    def doc_ids(self) -> np.ndarray:
        """Ndarray of shape (n,), str: the sample indices as strings."""
        return np.arange(self.n_documents).astype(str)

    @property
    def empty(self) -> np.ndarray:
        """Ndarray of shape (n,), bool: True where a sample is all zero (computed)."""
        return ~np.asarray(self.to_dask().any(axis=0).compute())

    def to_dask(self) -> da.Array:
        """Return X of shape (n_features, n_samples), float64, chunked along samples."""
        x = da.from_zarr(self._array, chunks=(self.chunks, self.shape[0]))
        x = x.astype(np.float64).map_blocks(
            _check_finite_rows, str(self.path), dtype=np.float64, meta=np.empty((0, 0)),
        )
        return x.T


def _check_finite_rows(block: np.ndarray, path: str, block_info=None) -> np.ndarray:
    """Raise DataError naming the first sample of ``block`` holding NaN or Inf."""
    finite = np.isfinite(block)
    if not finite.all():
        row, col = (int(v[0]) for v in np.nonzero(~finite))
        start = block_info[0]["array-location"][0][0] if block_info else 0
        raise DataError(
            f"{path}: sample {start + row} holds a non-finite value ({block[row, col]}) at "
            f"feature {col}. To resolve this, clean the data before fitting."
        )
    return block


def open_input(path: str | os.PathLike[str]) -> Corpus | DenseInput:
    """Open a sparse ``corpus.zarr`` or a dense 2-D zarr array as model input.

    Parameters
    ----------
    path : path-like
        Corpus directory, dense zarr array, or group with a dense array ``X``.

    Returns
    -------
    Corpus or DenseInput
        Both give ``shape`` (m, n), ``chunks``, ``labels``, ``fingerprint`` and ``to_dask()``.

    Raises
    ------
    InputNotFoundError
        If ``path`` does not exist.
    CorpusFormatError
        If ``path`` is neither.
    """
    node = _open_group(path)
    if isinstance(node, zarr.Group) and "sphdist" in node.attrs:
        return Corpus(path)
    return DenseInput(path)


def open_corpus(path: str | os.PathLike[str]) -> Corpus:
    """Open a sparse ``corpus.zarr``; see :class:`Corpus`."""
    return Corpus(path)


class StoredChunk(NamedTuple):
    """A document chunk written by :func:`store_chunk`: its index, nonzeros, empty columns."""

    index: int
    nnz: int
    empty: np.ndarray  # (n_c,) bool


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
        that readers accept.

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
    for name, values in (
        ("data", X_c.data),
        ("indices", X_c.indices.astype(np.int32)),
        ("indptr", X_c.indptr.astype(np.int64)),
    ):
        arr = group.create_array(
            f"{key}/{name}", shape=values.shape, dtype=values.dtype,
            chunks=(max(1, values.shape[0]),), compressors=compressors,
        )
        if values.shape[0]:
            arr[:] = values
    return StoredChunk(index, int(X_c.nnz), np.diff(X_c.indptr) == 0)


class CorpusWriter:
    """Write a ``corpus.zarr`` chunk by chunk, committing it atomically at the end.

    Parameters
    ----------
    path : path-like
        Final location of the corpus.
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
        Replace an existing ``path`` on :meth:`commit`.

    Raises
    ------
    OutputExistsError
        If ``path`` exists and ``overwrite`` is False.

    Notes
    -----
    Only one chunk is held in memory at a time, plus the per-document ids and labels
    (O(n) small values). Use as a context manager: leaving the block without :meth:`commit`
    (an exception, an interrupt) removes the staging directory and leaves ``path`` untouched.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        n_features: int,
        feature_scheme: dict[str, Any],
        tfidf: dict[str, Any] | None = None,
        label_names: Sequence[str] | None = None,
        vocabulary: Sequence[str] | None = None,
        overwrite: bool = False,
    ):
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise OutputExistsError(
                f"{self.path} already exists. To resolve this, choose another --output or "
                "pass --overwrite."
            )
        self.n_features = int(n_features)
        self.feature_scheme = dict(feature_scheme)
        self.tfidf = dict(tfidf or {})
        self.label_names = list(label_names) if label_names is not None else None
        self.vocabulary = list(vocabulary) if vocabulary is not None else None
        self._staging = _atomic.staging_path(self.path)
        self._group = zarr.open_group(store=str(self._staging), mode="w-")
        self._boundaries = [0]
        self._doc_ids: list[str] = []
        self._labels: list[np.ndarray] = []
        self._empty: list[np.ndarray] = []
        self._nnz = 0
        self._committed = False

    def __enter__(self) -> CorpusWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._committed:
            self.abort()

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
        self._boundaries.append(self._boundaries[-1] + stored.empty.shape[0])
        self._nnz += stored.nnz
        self._doc_ids.extend(str(d) for d in doc_ids)
        self._empty.append(stored.empty)
        if labels is not None:
            self._labels.append(np.asarray(labels, dtype=np.int32))

    def _write_1d(self, name: str, values: np.ndarray) -> None:
        # strings as zarr's variable-length UTF-8 type, the one with a v3 specification
        dtype = str if values.dtype.kind in "UO" else values.dtype
        arr = self._group.create_array(
            name, shape=values.shape, dtype=dtype,
            chunks=(max(1, min(values.shape[0], 1 << 17)),),
        )
        if values.shape[0]:
            arr[:] = values

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
        """
        n = self._boundaries[-1]
        self._write_1d("doc_ids", np.asarray(self._doc_ids, dtype=object))
        empty = np.concatenate(self._empty) if self._empty else np.zeros(0, dtype=bool)
        self._write_1d("empty", empty)
        if self._labels:
            labels = np.concatenate(self._labels)
            if labels.shape[0] != n:
                raise ValueError("labels were given for some chunks but not for others")
            self._write_1d("labels", labels)
        if idf is not None:
            idf = np.asarray(idf, dtype=np.float64)
            if idf.shape != (self.n_features,):
                raise ValueError(f"idf has shape {idf.shape}, expected ({self.n_features},)")
            self._write_1d("idf", idf)
        if self.vocabulary is not None:
            self._write_1d("vocabulary", np.asarray(self.vocabulary, dtype=str))
        meta = {
            "sphdist": {"kind": _KIND, "format_version": FORMAT_VERSION},
            "shape": [self.n_features, n],
            "nnz": self._nnz,
            "chunk_boundaries": self._boundaries,
            "feature_scheme": self.feature_scheme,
            "tfidf": self.tfidf,
            "label_names": self.label_names,
            "n_empty": int(empty.sum()),
            "corpus_id": uuid.uuid4().hex,
        }
        meta["fingerprint"] = _fingerprint(meta, idf)
        self._group.attrs.update({**(extra_attrs or {}), **meta})
        _atomic.commit_directory(self._staging, self.path)
        self._committed = True
        return Corpus(self.path)

    def abort(self) -> None:
        """Discard everything written so far; ``path`` is left as it was."""
        _atomic.discard(self._staging)
        self._committed = True
