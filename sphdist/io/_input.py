"""What every model input shares, and the reading of a corpus' document chunks.

The base of the two read handles (:class:`_Input`: X of shape (m features, n documents)),
opening an input at its last complete version (:func:`_open_group`), the corpus fingerprint
(:func:`data_fingerprint`), and the checked read of one document chunk of a ``corpus.zarr``
(:func:`_read_chunk`: dtypes, CSC structure, values and the recorded digest, each checked),
which the tasks of a streamed pass run (:func:`_load_block`). The layout is
:mod:`sphdist.io.corpus`'s.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from sphdist.errors import CorpusFormatError, DataError, Remedy, option, remedy
from sphdist.io._atomic import readable_path
from sphdist.io._checked import (
    content_sha256,
    read_checked,
)
from sphdist.io._fs import location
from sphdist.io._values import check_csc_values
from sphdist.io._zarr import checked_array, open_node

if TYPE_CHECKING:  # dask and SciPy where X is read (to_dask, read_chunk); the ids, labels
    # and empty flags a neighbour query reads without them
    import scipy.sparse as sp

__all__ = ["data_fingerprint"]


def _chunk_key(i: int) -> str:
    return f"X/{i:05d}"


_REMEDY = "re-ingest the corpus"

#: The attributes the fingerprint of a corpus with digests covers (the data through the digests).
_FINGERPRINTED = (
    "sphdist", "shape", "nnz", "chunk_boundaries", "feature_scheme", "tfidf", "label_names",
    "n_empty", "corpus_id", "chunk_nnz", "chunk_sha256", "sha256",
)


def _fingerprint(meta: dict[str, Any], idf: np.ndarray | None) -> str:
    """sha256 of the canonical JSON of the corpus metadata and the idf bytes."""
    h = hashlib.sha256(json.dumps(meta, sort_keys=True).encode())
    if idf is not None:
        h.update(np.ascontiguousarray(idf, dtype="<f8").tobytes())
    return h.hexdigest()


def data_fingerprint(attrs: dict[str, Any]) -> str:
    """Fingerprint of a corpus with digests: sha256 of the JSON of :data:`_FINGERPRINTED`.

    ``attrs`` must be JSON-clean (as stored); the per-chunk digests make it cover the data.
    The tag's promise of digests (:data:`~sphdist.io._checked.EVERY_DIGEST`) is left out: it
    says how the store is checked, not what it holds, and a corpus written before it keeps
    its fingerprint.
    """
    covered = {k: attrs.get(k) for k in _FINGERPRINTED}
    if isinstance(covered["sphdist"], dict):
        covered["sphdist"] = {k: v for k, v in covered["sphdist"].items() if k != "digests"}
    return _fingerprint(covered, None)


def _integer(path: Path, name: str, value: Any, low: int = 0, high: int | None = None) -> int:
    """``value`` if it is an integer in [low, high], else a CorpusFormatError naming it."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low or (
        high is not None and value > high
    ):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise CorpusFormatError(
            f"{path}: attribute {name}={value!r} is not an integer {bound}. To resolve this, "
            f"{_REMEDY}."
        )
    return int(value)


def _open_group(path: str | os.PathLike[str]) -> tuple[str, zarr.Group | zarr.Array]:
    """Where ``path`` is read (its last complete version) and the zarr node opened there."""
    path = location(path)
    where = readable_path(path)
    return str(where), open_node(
        where,
        missing=f"{path}: no such file or directory. To resolve this, check the path, or create "
        "a corpus with " + remedy(Remedy("ingest", {"source": ["SOURCE"]}, {"output": "PATH"}))
        + ".",
        unreadable=lambda exc: f"{path}: not a zarr v3 group or array ({type(exc).__name__}: "
        f"{exc}). To resolve this, pass a corpus written by `sphdist ingest` or a dense 2-D "
        "zarr array.",
        error=CorpusFormatError, group=False,
    )


def _checked_array(group: zarr.Group, name: str, path: str, what: str) -> zarr.Array:
    """``group[name]``, a plain array with safe codecs (KeyError if absent)."""
    return checked_array(group, name, path, what, error=CorpusFormatError,
                         remedy="re-ingest the corpus")


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
                "options (e.g. " + option("remove_headers", True)
                + " on very short texts) and re-ingest."
            )


def _opened(group: zarr.Group, name: str, path: str) -> zarr.Array | None:
    try:
        return _checked_array(group, name, path, name)
    except KeyError:
        return None


def _required(values: Any, path: Path, name: str) -> Any:
    if values is None:
        raise CorpusFormatError(f"{path}: the array {name} is missing. To resolve this, {_REMEDY}.")
    return values


def _check_dtypes(path: str, i: int, data: np.dtype, indices: np.dtype | None = None,
                  indptr: np.dtype | None = None) -> None:
    """Refuse a chunk whose data are not float64 or whose indices / indptr are not integers."""
    for name, dtype, ok in (
        ("data", data, data == np.float64),
        ("indices", indices, indices is None or indices.kind in "iu"),
        ("indptr", indptr, indptr is None or indptr.kind in "iu"),
    ):
        if not ok:
            raise CorpusFormatError(
                f"{path}: document chunk {i} ({_chunk_key(i)}/{name}) has dtype {dtype}, "
                f"expected {'float64' if name == 'data' else 'an integer'}. To resolve this, "
                f"{_REMEDY}."
            )


def _read_chunk(
    path: str, i: int, m: int, n_i: int, expected: tuple[str, int] | None = None
) -> sp.csc_matrix:
    # runs in worker tasks: the client must unpickle the error, and zarr's exceptions (kept in
    # __cause__ / __context__) do not unpickle, so the error leaves without them
    try:
        return _read_chunk_checked(path, i, m, n_i, expected)
    except (CorpusFormatError, DataError) as exc:
        error = exc
    error.__cause__ = error.__context__ = None
    raise error


def _read_chunk_arrays(
    path: str, i: int, expected: tuple[str, int] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """data, indices, indptr of chunk ``i``: every chunk file stored, decoded, as recorded."""
    what = f"document chunk {i}"
    try:
        g = zarr.open_group(store=path, path=_chunk_key(i), mode="r")
        arrays = [_checked_array(g, name, path, what) for name in ("data", "indices", "indptr")]
    except (KeyError, FileNotFoundError) as exc:
        raise CorpusFormatError(
            f"{path}: document chunk {i} ({_chunk_key(i)}) is missing or unreadable "
            f"({type(exc).__name__}). To resolve this, re-ingest the corpus."
        ) from None
    _check_dtypes(path, i, *(a.dtype for a in arrays))
    data, indices, indptr = (
        # without digests (an older corpus), indptr of a chunk of empty documents is all zero
        # and may have been left out as the fill value
        read_checked(
            a, path, f"{what} ({_chunk_key(i)})", error=CorpusFormatError,
            remedy=_REMEDY,
            required=expected is not None or name != "indptr" or arrays[0].shape[0] > 0,
        )
        for a, name in zip(arrays, ("data", "indices", "indptr"), strict=True)
    )
    return data, indices, indptr


def _check_digest(
    path: str, i: int, expected: tuple[str, int] | None, *arrays: np.ndarray
) -> None:
    """Refuse chunk ``i`` unless its nnz and sha256 are the ones recorded at writing."""
    if expected is None:
        return
    sha256, nnz = expected
    if arrays[0].shape[0] != nnz or content_sha256(*arrays) != sha256:
        raise CorpusFormatError(
            f"{path}: document chunk {i} ({_chunk_key(i)}) does not match its recorded "
            f"chunk_sha256 and chunk_nnz ({arrays[0].shape[0]} values, {nnz} recorded): the "
            f"stored values were changed or damaged. To resolve this, {_REMEDY}."
        )


def _read_chunk_checked(
    path: str, i: int, m: int, n_i: int, expected: tuple[str, int] | None
) -> sp.csc_matrix:
    data, indices, indptr = _read_chunk_arrays(path, i, expected)
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
    check_csc_values(
        data, indices, indptr, path, lambda j: f"document {_chunk_start(path, i) + j} (chunk {i})",
        "clean the source and re-ingest it",
    )
    _check_digest(path, i, expected, data, indices, indptr)  # last: the checks above name more
    import scipy.sparse as sp

    return sp.csc_matrix((data, indices, indptr), shape=(m, n_i))


def _chunk_start(path: str, i: int) -> int:
    try:
        bounds = zarr.open_group(store=path, mode="r").attrs["chunk_boundaries"]
        return int(bounds[i])
    except Exception:  # only for the message
        return 0


def _load_block(
    path: str, chunks: tuple[int, ...], m: int,
    expected: tuple[tuple[str, int], ...] | None, block_id=None,
) -> sp.csc_matrix:
    i = block_id[1]
    return _read_chunk(path, i, m, chunks[i], None if expected is None else expected[i])
