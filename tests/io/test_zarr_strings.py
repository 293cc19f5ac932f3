"""String vectors (document ids, vocabularies) stored as zarr stores them, in bounded memory.

zarr's ``vlen-utf8`` codec held about 200 bytes an id to write a chunk of 2**17 ids (numpy
strings, then Python strings, then one bytes object each, then joined): 27 MB at once, the
peak of an ingest's commit of 144,000 small documents (issue 43). :func:`write_vector`
encodes the chunks itself now; the stored bytes must be zarr's.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import zarr

import sphdist.io._zarr as zarr_io
from sphdist.io._checked import chunk_sha256, content_sha256
from sphdist.io._zarr import CHECKSUMMED, WRITE_CONFIG, PackedStrings, write_vector

IDS = ["a", "", "caf\u00e9/d\u00e9j\u00e0.txt", "\U0001f600 emoji", "x" * 300, "b/1.txt",
       "\u4e2d\u6587", "", "last"]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _zarrs_own(root: Path, values: np.ndarray, chunk: int) -> None:
    """What zarr itself writes for ``values`` in ``write_vector``'s array."""
    group = zarr.open_group(store=str(root), mode="w")
    arr = group.create_array("v", shape=values.shape, dtype=str, chunks=(chunk,),
                             compressors=CHECKSUMMED, config=WRITE_CONFIG)
    arr[:] = values


@pytest.mark.parametrize("n", [1, 4, 9])
@pytest.mark.parametrize("dtype", [object, str])
def test_strings_are_stored_as_zarr_stores_them_byte_for_byte(tmp_path, monkeypatch, n, dtype):
    """Chunks of 4 strings (the last one padded), non-ASCII, empty and long strings, numpy
    ``O`` and ``U``: every stored file equals zarr's own, and reads back as the values."""
    monkeypatch.setattr(zarr_io, "_VECTOR_CHUNK", 4)
    values = np.asarray(IDS[:n], dtype=dtype)
    ours = zarr.open_group(store=str(tmp_path / "ours"), mode="w")
    digests = write_vector(ours, "v", values)
    _zarrs_own(tmp_path / "theirs", values, min(4, n))
    theirs = _files(tmp_path / "theirs" / "v")
    assert len(theirs) == 1 + -(-n // 4)  # the metadata and each chunk
    assert _files(tmp_path / "ours" / "v") == theirs
    back = zarr.open_group(store=str(tmp_path / "ours"), mode="r")["v"][:]
    assert back.tolist() == IDS[:n]
    assert digests == chunk_sha256(back, min(4, n)) == chunk_sha256(values, min(4, n))
    packed = PackedStrings()  # held packed, extended in pieces, as a corpus writer holds ids
    packed.extend(values[:2])
    packed.extend(values[2:])
    assert len(packed) == n and packed.block(1, n).tolist() == IDS[1:n]
    group = zarr.open_group(store=str(tmp_path / "packed"), mode="w")
    assert write_vector(group, "v", packed) == digests
    assert _files(tmp_path / "packed" / "v") == theirs


def test_no_strings_packed_are_stored_as_an_empty_array(tmp_path):
    group = zarr.open_group(store=str(tmp_path / "e"), mode="w")
    digests = write_vector(group, "v", PackedStrings())
    assert digests == write_vector(group, "w", np.asarray([], dtype=object))
    assert group["v"].shape == (0,) and group["v"][:].tolist() == []


def test_a_lone_surrogate_is_refused_as_zarr_refuses_it(tmp_path):
    group = zarr.open_group(store=str(tmp_path / "s"), mode="w")
    with pytest.raises(UnicodeEncodeError):
        write_vector(group, "v", np.asarray(["ok", "bad \ud800"], dtype=object))
    packed = PackedStrings()
    with pytest.raises(UnicodeEncodeError):
        packed.extend(["ok", "bad \ud800"])
    assert len(packed) == 0
    kept = PackedStrings(["ok", "bad \ud800"], errors="surrogatepass")  # a listing's names
    assert list(kept) == ["ok", "bad \ud800"] and kept == PackedStrings(kept, errors=kept.errors)
    with pytest.raises(ValueError, match="strict"):  # never stored as invalid UTF-8
        write_vector(group, "w", kept)
    assert "w" not in group  # refused before anything is written


def test_two_chunks_of_ids_are_stored_and_digested_in_a_few_bytes_an_id(tmp_path):
    """2**17 + 1,000 ids of 25 characters (two chunks): the write holds about the encoded
    chunk (29 bytes an id), not 200 bytes an id; their digests a block of them."""
    n = 2**17 + 1_000
    values = np.asarray([f"label{k % 20:02d}/{k:012d}.txt" for k in range(n)], dtype=object)
    group = zarr.open_group(store=str(tmp_path / "ids"), mode="w")
    write_vector(group, "warm", values[:10])  # imports and first-use caches: not measured
    tracemalloc.start()
    try:
        write_vector(group, "ids", values)
        written = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        digest = content_sha256(values)
        digested = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert written < 80 * 2**17, written  # before: 31 MB (about 240 bytes an id)
    assert digested < 1 * 2**20, digested  # before: 8 MB (a list, a joined string, its bytes)
    assert digest == content_sha256(np.asarray(values.tolist(), dtype=str))
    back = zarr.open_group(store=str(tmp_path / "ids"), mode="r")["ids"]
    assert back.chunks == (2**17,)
    assert back[:].tolist() == values.tolist()


def test_ids_held_packed_take_a_few_bytes_each_and_are_stored_in_a_few_more(tmp_path):
    """A corpus writer's ids: 2**17 + 1,000 of 25 characters held in about 30 bytes each
    (82 as Python strings in a list), stored and digested without a Python string each."""
    n = 2**17 + 1_000
    ids = [f"label{k % 20:02d}/{k:012d}.txt" for k in range(n)]
    group = zarr.open_group(store=str(tmp_path / "ids"), mode="w")
    warm = PackedStrings()
    warm.extend(ids[:10])
    write_vector(group, "warm", warm)
    tracemalloc.start()
    try:
        packed = PackedStrings()
        for a in range(0, n, 4096):  # as chunks arrive
            packed.extend(ids[a:a + 4096])
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        digests = write_vector(group, "ids", packed)
        written = tracemalloc.get_traced_memory()[1] - held
    finally:
        tracemalloc.stop()
    assert held < 40 * n, held
    assert written < 80 * 2**17, written
    assert digests == chunk_sha256(np.asarray(ids, dtype=object), 2**17)
    assert group["ids"][:].tolist() == ids
