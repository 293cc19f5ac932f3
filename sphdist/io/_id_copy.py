"""An index's copy of the document ids it was built from, and its lookup table of hashes.

The arrays ``doc_ids`` and ``doc_id_lookup`` of the ``index.zarr`` format
(:mod:`sphdist.io.index`, which documents the layout and reads them with their digests): the
ids in chunks of :data:`IDS_CHUNK`, and the table of their :func:`id_hashes`, sorted, with the
position of each, in chunks of :data:`LOOKUP_CHUNK`. A query hashes the id asked, finds the
chunks of the table whose range holds it (:func:`lookup_fences`, :func:`id_lookup`) and reads
those alone; the full check compares the table with the copy (:func:`id_copy_problem`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import zarr

from sphdist.io._checked import ChunkedVector, content_sha256
from sphdist.io._zarr import CHECKSUMMED, WRITE_CONFIG

__all__ = ["IDS_CHUNK", "LOOKUP_CHUNK", "id_hashes", "write_id_copy", "lookup_fences",
           "id_lookup", "id_copy_problem"]

IDS_CHUNK = 8192  # ids per chunk of the copy: the ids of one hit cost one such chunk
LOOKUP_CHUNK = 65536  # entries per chunk of doc_id_lookup (1 MiB)


def id_hashes(values: Any) -> np.ndarray:
    """The 64-bit hashes the lookup table of an index sorts: BLAKE2b of each string's UTF-8.

    Parameters
    ----------
    values : iterable of str

    Returns
    -------
    ndarray of shape (len(values),), uint64
        The 8-byte BLAKE2b digest of each value's UTF-8 bytes (lone surrogates passed
        through), read little-endian.

    References
    ----------
    .. [1] J.-P. Aumasson et al., "The BLAKE2 cryptographic hash and message authentication
       code (MAC)", RFC 7693, 2015.

    Examples
    --------
    >>> h = id_hashes(["doc1", "doc2", "doc1"])
    >>> h.dtype, bool(h[0] == h[2]), bool(h[0] == h[1])
    (dtype('uint64'), True, False)
    """
    blake = hashlib.blake2b
    joined = b"".join(blake(str(v).encode("utf-8", "surrogatepass"), digest_size=8).digest()
                      for v in values)
    return np.frombuffer(joined, dtype="<u8").astype(np.uint64)


def write_id_copy(group: zarr.Group, ids: ChunkedVector) -> dict[str, Any]:
    """Store the copy of ``ids`` and its lookup table in ``group``; their record.

    Parameters
    ----------
    group : zarr.Group
        The index being written (its staging directory).
    ids : ChunkedVector
        The n ids (str) of the documents indexed, with their recorded digests.

    Returns
    -------
    dict
        The record ``doc_ids`` of the index: ``chunk_sha256`` (one digest per chunk of the
        copy), ``source_identity`` (``ids.identity``), ``lookup_sha256`` (one per chunk of the
        table), ``lookup_first`` (the first hash of each chunk of the table, 16 hex digits).

    Notes
    -----
    The ids are read one stored chunk at a time and written in chunks of :data:`IDS_CHUNK`;
    memory: ``16 n`` bytes (the hashes and their order) and a chunk.
    """
    n = len(ids)
    c = min(n, IDS_CHUNK)
    arr = group.create_array("doc_ids", shape=(n,), dtype=str, chunks=(c,),
                             compressors=CHECKSUMMED, config=WRITE_CONFIG)
    hashes = np.empty(n, dtype=np.uint64)
    digests: list[str] = []
    pending, seen, done = np.zeros(0, dtype=object), 0, 0
    for part in ids.iter_chunks():
        hashes[seen:seen + part.shape[0]] = id_hashes(part)
        seen += part.shape[0]
        pending = np.concatenate([pending, part])
        while pending.shape[0] >= c or (seen == n and pending.shape[0]):
            block, pending = pending[:c], pending[c:]
            arr[done:done + block.shape[0]] = block
            digests.append(content_sha256(block))  # as chunk_sha256(ids, c)
            done += block.shape[0]
    order = np.argsort(hashes, kind="stable")  # equal hashes: positions in increasing order
    c = min(n, LOOKUP_CHUNK)
    lookup = group.create_array("doc_id_lookup", shape=(2, n), dtype=np.uint64,
                                chunks=(2, c), compressors=CHECKSUMMED, config=WRITE_CONFIG)
    lookup_digests, first = [], []
    for a in range(0, n, c):
        block = np.stack([hashes[order[a:a + c]], order[a:a + c].astype(np.uint64)])
        lookup[:, a:a + c] = block
        lookup_digests.append(content_sha256(block))  # as chunk_sha256(table, c)
        first.append(f"{int(block[0, 0]):016x}")
    return {"chunk_sha256": digests, "source_identity": ids.identity,
            "lookup_sha256": lookup_digests, "lookup_first": first}


def lookup_fences(first: Sequence[str]) -> np.ndarray:
    """The recorded ``lookup_first`` (16 hex digits each) as an (n_chunks,) uint64 array.

    Raises
    ------
    TypeError, ValueError, OverflowError
        If an entry is not a hexadecimal number below 2**64.
    """
    return np.array([int(str(h), 16) for h in first], dtype=np.uint64)


def id_lookup(
    fences: np.ndarray, lookup_chunk: Callable[[int], np.ndarray],
) -> Callable[[list[str]], list[np.ndarray]]:
    """The positions an id may be at, from the chunks of the table that can hold its hash.

    Parameters
    ----------
    fences : ndarray of shape (n_chunks,), uint64
        The first hash of each chunk of the table (:func:`lookup_fences`).
    lookup_chunk : callable
        Chunk i of ``doc_id_lookup``, a (2, c) uint64 array (read and checked by the caller).

    Returns
    -------
    callable
        ``lookup(values)``: for each id, the (k,) int64 positions whose hash equals its hash
        (k = 0 when none; more than one where hashes collide: the caller compares the ids),
        reading only the chunks whose range holds the hash.
    """
    def lookup(values: list[str]) -> list[np.ndarray]:
        out = []
        for h in id_hashes(values):
            # the chunks whose entries can equal h: first <= h, and the next first >= h
            lo = max(int(np.searchsorted(fences, h, side="left")) - 1, 0)
            hi = max(int(np.searchsorted(fences, h, side="right")), lo + 1)
            parts = [c[1, c[0] == h] for c in map(lookup_chunk, range(lo, hi))]
            out.append(np.concatenate(parts).astype(np.int64))
        return out

    return lookup


def id_copy_problem(values: np.ndarray, table: np.ndarray, chunk: int,
                    first: Sequence[str]) -> str | None:
    """What is wrong with a lookup table against the copy of the ids it indexes, or None.

    Parameters
    ----------
    values : ndarray of shape (n,), object (str)
        The copy of the ids, read whole.
    table : ndarray of shape (2, n), uint64
        ``doc_id_lookup``, read whole.
    chunk : int
        Entries per chunk of the table.
    first : sequence of str
        The recorded ``lookup_first``.

    Returns
    -------
    str or None
        The first problem found, in words (for :class:`~sphdist.errors.ModelFormatError`):
        ``first`` not the first hash of each chunk, the hashes unsorted, the positions not
        each document once, a hash not that of the id at its position; None if none.
    """
    if [f"{int(h):016x}" for h in table[0, ::chunk]] != list(first):
        return "lookup_first is not the first hash of each chunk of doc_id_lookup"
    if np.any(table[0, 1:] < table[0, :-1]):
        return "the hashes of doc_id_lookup are not sorted"
    n = values.shape[0]
    if not np.array_equal(np.sort(table[1]), np.arange(n, dtype=np.uint64)):
        return "the positions of doc_id_lookup are not each document once"
    if not np.array_equal(id_hashes(values[table[1].astype(np.int64)]), table[0]):
        return "a hash of doc_id_lookup is not that of the id at its position"
    return None
