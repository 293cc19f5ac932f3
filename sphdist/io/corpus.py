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
``label_names``, ``n_empty``, ``corpus_id`` (random, set at writing), ``chunk_nnz`` (values
per document chunk), ``chunk_sha256`` (per document chunk, the sha256 of the little-endian
bytes of its data, indices and indptr), ``sha256`` (the same digest of ``idf``, ``labels`` and
``empty``), ``chunked_sha256`` (one digest per stored chunk of ``doc_ids`` and
``vocabulary``, :func:`~sphdist.io._checked.chunk_sha256`, so that the ids of a few documents
are read and checked without the others, :meth:`Corpus.ids`; apart from ``sha256``, whose
entries the previous version reads as one digest each) and ``fingerprint`` (sha256 of the
canonical JSON of all of these but ``chunked_sha256``: it covers the data through the
digests, and is the one the previous version computes).

Integrity: every chunk is stored and zstd-compressed with its content checksum. Each document
chunk read is checked against its ``chunk_sha256`` and ``chunk_nnz``, each 1-D array against its
``sha256``; a missing chunk file, a flipped bit or edited values raise
:class:`~sphdist.errors.CorpusFormatError` naming the file, never read as zeros. The
fingerprint is recomputed from the attributes at opening, so a resume on a corpus whose data
(with their digests) or attributes changed is refused. Opening checks the attributes against the
arrays (integer shape, ``nnz``, ``n_empty``, the lengths of ``idf`` and the per-document arrays,
the ``n_features`` of the feature scheme), and its arrays and attributes against the
corpus' schema (their dtypes, ``FEATURE_SCHEME``, ``TFIDF``; :mod:`sphdist.io._schema`:
no stray array, no attribute of another JSON type). Values a fit cannot use are refused
when read, naming the document: NaN, Inf, a document whose squared values overflow float64,
a non-finite idf.
Corpora written before the digests of ``doc_ids`` and ``vocabulary`` are read with one
warning naming the re-ingest. Corpora written before the digests (same format version 1, no
``chunk_sha256``) are read as before: their stored fingerprint is used, chunks of ``data``,
``indices`` and ``idf`` must be stored, and ``nnz`` and the dtype of ``data`` are checked
against every chunk's metadata at opening.

A dense 2-D zarr array of shape (n_samples, n_features) (numeric UCI-style data), or a group
holding such an array ``X`` and optional integer labels ``y``, is accepted as input too
(:class:`DenseInput`); it is read in the papers' orientation, transposed.

This module reads the format; :mod:`sphdist.io.corpus_writer` writes it (chunk by chunk into a
staging directory, committed atomically by a rename at the end, so an interrupted ingest never
leaves a ``corpus.zarr`` that looks complete).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from sphdist.errors import CorpusFormatError, Remedy, Text, remedy
from sphdist.io import _input
from sphdist.io._checked import (
    ChunkedVector,
    read_checked,
    read_chunk_checked,
    recorded_digest,
    require_finite,
)
from sphdist.io._dense import DenseInput
from sphdist.io._fs import location
from sphdist.io._input import (
    _REMEDY,
    _check_dtypes,
    _checked_array,
    _chunk_key,
    _Input,
    _integer,
    _load_block,
    _open_group,
    _opened,
    _required,
    data_fingerprint,
)
from sphdist.io._schema import (
    BOOL,
    INT,
    LIST,
    MAPPING,
    NULL,
    NUMBER,
    STR,
    Array,
    Attr,
    check_arrays,
    check_attrs,
    under,
)
from sphdist.io._zarr import read_tag, wrong_kind

if TYPE_CHECKING:  # dask and SciPy where X is read (to_dask, read_chunk); the ids, labels
    # and empty flags a neighbour query reads without them
    import dask.array as da
    import scipy.sparse as sp

__all__ = [
    "FORMAT_VERSION",
    "KIND",
    "Corpus",
    "DenseInput",
    "open_input",
    "open_corpus",
]

FORMAT_VERSION = 1
KIND = "corpus"  # the group attribute sphdist.kind

#: The arrays beside the chunks (group ``X``), :func:`~sphdist.io._schema.check_arrays`.
_ARRAYS: dict[str, Array] = {
    "doc_ids": Array("TUO", 1, "one string id per document"),
    "empty": Array("b", 1, "one bool per document"),
    "idf": Array("f", 1, "one float idf weight per feature"),
    "labels": Array("iu", 1, "one integer label code per document"),
    "vocabulary": Array("TUO", 1, "one string term per feature"),
}

#: The attribute ``feature_scheme`` of a corpus (and ``corpus.feature_scheme`` of a model):
#: how text became features (:meth:`sphdist.text.tfidf.TextOptions.feature_scheme`).
FEATURE_SCHEME: dict[str, Attr] = {
    "type": Attr((STR,), "the kind of features (hashing or vocabulary)"),
    "n_features": Attr((INT,), "the number of features"),
    "lowercase": Attr((BOOL,), "whether text is lowercased"),
    "token_pattern": Attr((STR,), "the regular expression of a token"),
    "ngram_range": Attr((LIST,), "the shortest and longest n-gram", items=(INT,), length=2),
    "analyzer": Attr((STR,), "the analyzer"),
    "stop_words": Attr((STR, NULL), "the stop-word list"),
    "strip_accents": Attr((STR, NULL), "the accent stripping"),
    "min_df": Attr((NUMBER,), "the least document frequency of a term kept"),
    "max_df": Attr((NUMBER,), "the greatest document frequency of a term kept"),
    "max_features": Attr((INT, NULL), "the most terms kept"),
    "select": Attr((STR, NULL), "the term selection"),
    "n_select": Attr((INT, NULL), "the number of terms selected"),
    "alternate_sign": Attr((BOOL,), "whether hashed features alternate their sign"),
}

#: The attribute ``tfidf`` of a corpus (and ``corpus.tfidf`` of a model): the weighting.
TFIDF: dict[str, Attr] = {
    "smooth_idf": Attr((BOOL,), "whether the idf is smoothed"),
    "sublinear_tf": Attr((BOOL,), "whether tf is sublinear"),
    "norm": Attr((STR, NULL), "the norm of a document"),
    "remove": Attr((LIST,), "the parts of news posts removed", items=(STR,)),
}

#: The attributes of a corpus whose JSON type :func:`~sphdist.io._schema.check_attrs`
#: checks at opening (the others are checked with their values, below).
_ATTRS: dict[str, Attr] = {
    "feature_scheme": Attr((MAPPING,), "how text became features", required=True),
    **under("feature_scheme", FEATURE_SCHEME),
    "tfidf": Attr((MAPPING, NULL), "the tf-idf weighting"),
    **under("tfidf", TFIDF),
}

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

    def __init__(self, path: str | os.PathLike[str], *, _opened: tuple[str, Any] | None = None):
        self.path = location(path)
        #: where the chunks are read: ``path``, or the version its manifest names (an object
        #: store, :meth:`sphdist.io.Target.readable`); ``_opened``: what :func:`open_input`
        #: opened already (the store is read once)
        self.location, group = _opened or _open_group(self.path)
        attrs = dict(group.attrs) if isinstance(group, zarr.Group) else {}
        tag = read_tag(group)
        if tag.get("kind") in ("model", "embedding"):
            raise CorpusFormatError(wrong_kind(self.path, tag["kind"], KIND))
        if tag.get("kind") != KIND:
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
        version = tag.get("format_version")
        if version != FORMAT_VERSION or isinstance(version, bool):
            kind = {"str": "string", "float": "number"}.get(type(version).__name__, "value")
            said = (f"is the {kind} {version!r}, not the integer {FORMAT_VERSION} this sphdist "
                    "reads (was the attribute edited?)" if str(version) == str(FORMAT_VERSION)
                    else f"{version!r} is not supported (this sphdist reads version "
                    f"{FORMAT_VERSION})")
            raise CorpusFormatError(
                f"{self.path}: corpus format version {said}. To resolve this, re-ingest the "
                "source with this version of sphdist."
            )
        self._group = group
        self.attrs = attrs
        check_attrs(attrs, _ATTRS, path=self.path, kind=KIND, error=CorpusFormatError,
                    remedy=self._rebuild)
        try:
            m, n = attrs["shape"]
            self.shape: tuple[int, int] = (
                _integer(self.path, "shape[0]", m), _integer(self.path, "shape[1]", n)
            )
            self.nnz: int = _integer(self.path, "nnz", attrs["nnz"])
            bounds = attrs["chunk_boundaries"]
            for j, b in enumerate(bounds):
                _integer(self.path, f"chunk_boundaries[{j}]", b)
            self.chunk_boundaries = np.asarray(bounds, dtype=np.int64)
            self.feature_scheme: dict[str, Any] = dict(attrs["feature_scheme"])
            self.tfidf: dict[str, Any] = attrs.get("tfidf") or {}
            self.label_names: list[str] | None = attrs.get("label_names")
            if self.label_names is not None and not (
                    isinstance(self.label_names, list)
                    and all(isinstance(x, str) for x in self.label_names)):
                raise TypeError(f"label_names={self.label_names!r:.60} is not a list of strings")
            self.n_empty: int = _integer(self.path, "n_empty", attrs.get("n_empty", 0), 0, n)
            self.fingerprint: str = str(attrs["fingerprint"])
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, CorpusFormatError):
                raise
            raise CorpusFormatError(
                f"{self.path}: corpus metadata is incomplete or malformed ({type(exc).__name__}: "
                f"{exc}). To resolve this, re-ingest the corpus."
            ) from exc
        hashed = self.feature_scheme.get("n_features", self.shape[0])
        if hashed != self.shape[0]:
            raise CorpusFormatError(
                f"{self.path}: attribute shape says m = {self.shape[0]} features but "
                f"feature_scheme says n_features = {hashed!r}. To resolve this, {_REMEDY}."
            )
        b = self.chunk_boundaries
        if (
            min(self.shape) < 0 or b.ndim != 1 or b.size < 1 or b[0] != 0
            or b[-1] != self.shape[1] or np.any(np.diff(b) < 0) or self.nnz < 0
        ):
            raise CorpusFormatError(
                f"{self.path}: chunk_boundaries {b.tolist()[:5]}... do not partition the "
                f"{self.shape[1]} documents. To resolve this, re-ingest the corpus."
            )
        #: per chunk (sha256, nnz) recorded at writing; None for a corpus written before them
        self._expected: tuple[tuple[str, int], ...] | None = None
        self._digests: dict[str, Any] = {}
        self._warned: set[str] = set()
        if "chunk_sha256" in attrs:
            self._expected, self._digests = self._recorded_digests(attrs)
            self.fingerprint = data_fingerprint(attrs)
        chunked = attrs.get("chunked_sha256")
        if isinstance(chunked, dict):
            self._digests.update({k: [str(x) for x in v] if isinstance(v, list) else []
                                  for k, v in chunked.items()})
        self._check_lengths()

    def _recorded_digests(
        self, attrs: dict[str, Any]
    ) -> tuple[tuple[tuple[str, int], ...], dict[str, str]]:
        sha, nnz, digests = attrs.get("chunk_sha256"), attrs.get("chunk_nnz"), attrs.get("sha256")
        if (
            not isinstance(sha, list) or not isinstance(nnz, list) or not isinstance(digests, dict)
            or len(sha) != self.n_chunks or len(nnz) != self.n_chunks
        ):
            raise CorpusFormatError(
                f"{self.path}: attributes chunk_sha256, chunk_nnz and sha256 do not describe the "
                f"{self.n_chunks} document chunks. To resolve this, {_REMEDY}."
            )
        nnz = [_integer(self.path, f"chunk_nnz[{i}]", v) for i, v in enumerate(nnz)]
        if sum(nnz) != self.nnz:
            raise CorpusFormatError(
                f"{self.path}: attribute nnz={self.nnz} but the chunks hold {sum(nnz)} values "
                f"(chunk_nnz). To resolve this, {_REMEDY}."
            )
        return tuple(zip(map(str, sha), nnz, strict=True)), {
            k: [str(x) for x in v] if isinstance(v, list) else str(v) for k, v in digests.items()
        }

    def _check_lengths(self) -> None:
        """Refuse arrays outside the schema and attributes that disagree with their metadata.

        The schema is :data:`_ARRAYS` (:func:`~sphdist.io._schema.check_arrays`); no chunk is
        read.
        """
        m, n = self.shape
        unsafe = set()  # arrays the safe-codec check refuses: refused, as such, when read
        for name, length, what in (
            ("idf", m, "m"), ("vocabulary", m, "m"), ("doc_ids", n, "n"), ("empty", n, "n"),
            ("labels", n, "n"),
        ):
            try:
                arr = _checked_array(self._group, name, str(self.path), name)
            except KeyError:
                continue  # absent
            except CorpusFormatError:
                unsafe.add(name)  # unreadable metadata: refused when it is read
                continue
            if arr.shape != (length,):
                raise CorpusFormatError(
                    f"{self.path}: {name} has shape {arr.shape} but attribute shape says "
                    f"{what} = {length}. To resolve this, {_REMEDY}."
                )
        arrays = {}
        try:
            names = list(self._group.array_keys())
        except Exception:  # noqa: BLE001 - a member's metadata unreadable: refused when read
            names = []
        for name in set(names) - unsafe:
            try:
                arrays[name] = self._group[name]
            except Exception:  # noqa: BLE001 - as above
                continue
        check_arrays(arrays, _ARRAYS, path=self.path, kind=KIND, error=CorpusFormatError,
                     remedy=self._rebuild, beside=" and the chunks under X")
        if self._expected is not None:
            return
        total = 0  # a corpus written before the digests: the metadata of every chunk
        for i in range(self.n_chunks):
            try:
                data = self._group[f"{_chunk_key(i)}/data"]
            except Exception:  # absent or unreadable metadata: refused when the chunk is read
                continue
            _check_dtypes(str(self.path), i, data.dtype)
            total += data.shape[0]
        if total != self.nnz:
            raise CorpusFormatError(
                f"{self.path}: attribute nnz={self.nnz} but the chunks hold {total} values. "
                f"To resolve this, {_REMEDY}."
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

    def _optional(self, name: str, required: bool = True) -> np.ndarray | None:
        try:
            arr = _checked_array(self._group, name, str(self.path), name)
        except KeyError:
            return None
        # labels and empty of a corpus written before every chunk was stored may leave out a
        # chunk equal to the fill value (all 0, all False)
        return read_checked(
            arr, str(self.path), name, error=CorpusFormatError, remedy=_REMEDY,
            sha256=self._digest(name), required=required or self._expected is not None,
        )

    def _rebuild(self) -> Text:
        """The remedy of a corpus refused: re-ingest it (the ingest, in a message)."""
        again = Remedy("ingest", {"source": ["SOURCE"]},
                       {"output": str(self.path), "overwrite": True})
        return f"{_REMEDY} (" + remedy(again) + ")"

    def _digest(self, name: str) -> Any:
        """The recorded digest of array ``name``; a warning, once, for a store without one."""
        return recorded_digest(
            self.path, name, self._digests, self.attrs.get("sphdist"), self._warned,
            error=CorpusFormatError, remedy=self._rebuild,
            warn=name in ("doc_ids", "vocabulary"),  # older corpora digested the others
        )

    def ids(self) -> ChunkedVector:
        """The document ids, read chunk by chunk on demand (only the chunks used).

        Returns
        -------
        ChunkedVector
            Of length n, values str; each chunk checked against the recorded digest of
            ``doc_ids`` when it is read.

        Raises
        ------
        CorpusFormatError
            If the array is missing, unsafe, of the wrong length, or (when a chunk is read)
            that chunk is missing, damaged or does not match its digest.
        """
        arr = _required(_opened(self._group, "doc_ids", str(self.path)), self.path, "doc_ids")
        if arr.ndim != 1 or arr.shape[0] != self.n_documents:
            raise CorpusFormatError(f"{self.path}: doc_ids has shape {arr.shape} for "
                                    f"{self.n_documents} documents. To resolve this, {_REMEDY}.")
        sha = self._digest("doc_ids")
        return ChunkedVector(arr.shape[0], arr.chunks[0], lambda i: read_chunk_checked(
            arr, i, str(self.path), "doc_ids", error=CorpusFormatError, remedy=_REMEDY,
            sha256=sha if isinstance(sha, list) else None,
        ), digests=sha if isinstance(sha, list) else None)

    @property
    def idf(self) -> np.ndarray | None:
        """Ndarray of shape (m,), float64: idf weight per feature, or None.

        Raises
        ------
        CorpusFormatError
            If a value is NaN or Inf (naming the feature), or the array is damaged.
        """
        idf = self._optional("idf")
        if idf is None:
            return None
        return require_finite(idf, str(self.path), "idf", error=CorpusFormatError,
                              remedy=_REMEDY)

    @property
    def labels(self) -> np.ndarray | None:
        """Ndarray of shape (n,), int32: label code per document (-1: unknown), or None."""
        return self._optional("labels", required=False)

    @property
    def doc_ids(self) -> np.ndarray:
        """Ndarray of shape (n,), str: document identifiers."""
        return _required(self._optional("doc_ids"), self.path, "doc_ids")

    @property
    def empty(self) -> np.ndarray:
        """Ndarray of shape (n,), bool: True where the document column is all zero."""
        return _required(self._optional("empty", required=False), self.path, "empty")

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
            If the chunk is missing, corrupted, stored with codecs other than the safe ones
            (:data:`sphdist.io._zarr.SAFE_CODECS`), or its CSC arrays are inconsistent
            (lengths, decreasing column pointers, feature indices outside ``[0, m)``).
        DataError
            If a value is NaN or Inf, or the squared values of a document overflow float64
            (naming the document and the feature, :mod:`sphdist.io._values`).
        """
        expected = None if self._expected is None else self._expected[i]
        return _input._read_chunk(self.location, i, self.n_features, self.chunks[i], expected)

    def to_dask(self) -> da.Array:
        """Return X as a lazy, column-chunked dask array.

        Returns
        -------
        dask.array.Array of shape (m, n), float64
            One block per document chunk (``chunks == ((m,), self.chunks)``), each a
            ``scipy.sparse.csc_matrix`` read from the store when the task runs.
        """
        import dask.array as da
        import scipy.sparse as sp

        m = self.n_features
        return da.map_blocks(
            _load_block,
            self.location,
            self.chunks,
            m,
            self._expected,
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
    opened = _open_group(path)  # once: one manifest read, one metadata read
    node = opened[1]
    if isinstance(node, zarr.Group) and "sphdist" in node.attrs:
        return Corpus(path, _opened=opened)
    return DenseInput(path, _opened=opened)


def open_corpus(path: str | os.PathLike[str]) -> Corpus:
    """Open a sparse ``corpus.zarr``; see :class:`Corpus`."""
    return Corpus(path)
