"""A dense 2-D zarr array as model input (:class:`DenseInput`), beside a sparse corpus.

Opened by :func:`sphdist.io.corpus.open_input`, which says which of the two a path holds.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from sphdist.errors import CorpusFormatError
from sphdist.io._checked import ChunkedVector, require_chunks
from sphdist.io._fs import location
from sphdist.io._input import _fingerprint, _Input, _open_group
from sphdist.io._values import check_dense_values

if TYPE_CHECKING:  # dask and SciPy where X is read (to_dask, read_chunk); the ids, labels
    # and empty flags a neighbour query reads without them
    import dask.array as da

__all__ = ["DenseInput"]


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
        If it holds no 2-D numeric array, a complex one, or one with a chunk file missing
        (zarr would read it as the fill value).

    Notes
    -----
    The data are used in the papers' orientation, X of shape (n_features, n_samples), without
    any normalisation; the document chunks are the zarr chunks along the sample axis.
    """

    feature_scheme: dict[str, Any] = {"type": "dense"}
    tfidf: dict[str, Any] = {}
    idf = None
    label_names = None

    def __init__(self, path: str | os.PathLike[str], *, _opened: tuple[str, Any] | None = None):
        self.path = location(path)
        _, node = _opened or _open_group(self.path)
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
        if array.dtype.kind == "c":  # float64 would drop the imaginary part
            raise CorpusFormatError(
                f"{self.path}: holds {array.dtype} values; Spherical PCA fits real data. To "
                "resolve this, store a real array (the real part, or the magnitude np.abs)."
            )
        require_chunks(array, str(self.path), "X" if self._array_path else "the array",
                       error=CorpusFormatError,
                       remedy="write the array again with every chunk stored (a chunk that is "
                       "all zero too: zarr.config.set({'array.write_empty_chunks': True}))")
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

    def ids(self) -> ChunkedVector:
        """:attr:`doc_ids` as a :class:`~sphdist.io._checked.ChunkedVector`."""
        return ChunkedVector.of(self.doc_ids)

    @property
    def empty(self) -> np.ndarray:
        """Ndarray of shape (n,), bool: True where a sample is all zero (computed)."""
        return ~np.asarray(self.to_dask().any(axis=0).compute())

    def to_dask(self) -> da.Array:
        """Return X of shape (n_features, n_samples), float64, chunked along samples."""
        import dask.array as da

        x = da.from_zarr(self._array, chunks=(self.chunks, self.shape[0]))
        x = x.astype(np.float64).map_blocks(
            _check_finite_rows, str(self.path), dtype=np.float64, meta=np.empty((0, 0)),
        )
        return x.T


def _check_finite_rows(block: np.ndarray, path: str, block_info=None) -> np.ndarray:
    """``block`` if every sample is finite and its squares sum in float64, else DataError."""
    start = block_info[0]["array-location"][0][0] if block_info else 0
    check_dense_values(block, path, lambda row: f"sample {start + row}",
                       "clean the data before fitting")
    return block
