"""The zarr plumbing every sphdist store shares: opening, the format tag, the safe-codec check.

``corpus.zarr``, ``model.zarr`` and ``embedding.zarr`` are zarr v3 groups tagged with the group
attribute ``sphdist = {"kind": ..., "format_version": ...}``. This module opens a path read-only
(:func:`open_node`, :func:`open_tagged`), reads the tag (:func:`read_tag`), and refuses any array
that is not a plain zarr v3 array with codecs from :data:`SAFE_CODECS` (:func:`check_array`,
:func:`checked_array`, :func:`check_members`): nothing sphdist reads can execute code. It also
holds the small writing helpers the three formats share (:func:`write_array`,
:func:`write_vector`, :func:`json_clean`). The checked reads are :mod:`sphdist.io._checked`'s,
the read handle of a tagged store :mod:`sphdist.io._tagged`'s.

Damaged data is refused, never read as zeros (zarr returns an array's fill value for a chunk
that has no file): every array is written with zstd's content checksum and with every chunk
stored, even one equal to the fill value (:data:`CHECKSUMMED`, :data:`WRITE_CONFIG`), and
:func:`read_checked` refuses a missing chunk file, a chunk the codec cannot decode (a flipped
bit fails the checksum) and values that do not match their recorded sha256
(:func:`content_sha256`).
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import zarr
from zarr.codecs import VLenUTF8Codec, ZstdCodec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from sphdist._packed import PackedStrings
from sphdist.errors import (
    InputNotFoundError,
    ModelFormatError,
    Remedy,
    SphdistError,
    option,
    remedy,
)
from sphdist.io._checked import chunk_sha256
from sphdist.io._fs import is_storage_failure, location, storage_error
from sphdist.io._targets import open_target

__all__ = [
    "SAFE_CODECS",
    "open_node",
    "read_tag",
    "open_tagged",
    "wrong_kind",
    "check_array",
    "checked_array",
    "check_members",
    "write_array",
    "write_vector",
    "PackedStrings",
    "json_clean",
    "regular_chunks",
    "CHECKSUMMED",
    "WRITE_CONFIG",
    "checksummed",
]

logger = logging.getLogger("sphdist")

#: zarr v3 codecs sphdist reads: none of them can execute code (no pickle, no object dtype).
SAFE_CODECS = frozenset({
    "bytes", "zstd", "blosc", "gzip", "crc32c", "transpose", "vlen-utf8", "sharding_indexed",
})

_VECTOR_CHUNK = 1 << 17  # elements per chunk of a 1-D array
#: Strings encoded at once by :func:`write_vector` (:func:`_write_strings`).
_STRING_BLOCK = 1 << 12

#: The compressor sphdist writes: zarr's default zstd, with the frame's content checksum, so a
#: flipped bit in a stored chunk fails the read instead of changing a value.
CHECKSUMMED = ZstdCodec(level=0, checksum=True)

#: Array configuration of every write: store every chunk, even one equal to the fill value, so
#: that a chunk without a file is always damage.
WRITE_CONFIG = {"write_empty_chunks": True}

#: Largest ``| ||v_j|| - 1 |`` accepted of a stored unit column (the V of a model or an
#: embedding; the V of a float32 fit is normalised in float32).
UNIT_TOLERANCE = 1e-4


def open_node(
    path: str | os.PathLike[str], *, missing: str, unreadable: Callable[[Exception], str],
    error: type[SphdistError], group: bool,
) -> zarr.Group | zarr.Array:
    """Open ``path`` read-only as a zarr group (or, with ``group=False``, a group or an array).

    Parameters
    ----------
    path : path-like
    missing : str
        Message of the :class:`~sphdist.errors.InputNotFoundError` when nothing is at ``path``.
    unreadable : callable
        Message of ``error`` when zarr cannot open it, from zarr's exception (which is kept as
        ``__cause__``).
    error : type
        The format error of the caller (``CorpusFormatError``, ``ModelFormatError``).
    group : bool
        Open only a group (``zarr.open_group``) or a group or an array (``zarr.open``).

    Returns
    -------
    zarr.Group or zarr.Array
    """
    path = location(path)
    try:  # in an object store, a prefix without metadata is a killed writer's debris
        found = open_target(path).committed()
    except Exception as exc:
        if not is_storage_failure(exc):
            raise
        raise storage_error(path, exc) from None
    if not found:
        raise InputNotFoundError(missing)
    try:
        if group:
            return zarr.open_group(store=str(path), mode="r")
        return zarr.open(store=str(path), mode="r")
    except Exception as exc:  # zarr raises several types for "not zarr"
        raise error(unreadable(exc)) from exc


def read_tag(node: zarr.Group | zarr.Array) -> dict[str, Any]:
    """The ``sphdist`` group attribute (``kind``, ``format_version``), or {} if there is none."""
    tag = node.attrs.get("sphdist") if isinstance(node, zarr.Group) else None
    return tag if isinstance(tag, dict) else {}


#: kind -> the remedy when another sphdist kind is where that kind was expected (a corpus
#: given as a model, as the output of a fit, ...): what to pass, and how to make one.
_KINDS: dict[str, Callable[[Path], str]] = {
    "corpus": lambda p: "pass a corpus.zarr written by " + remedy(Remedy(
        "ingest", {"source": ["SOURCE"]}, {"output": "PATH"})),
    "model": lambda p: (
        "pass a model.zarr, written by " + remedy(Remedy(
            "fit", {"input": "CORPUS", "output": "MODEL.zarr"}, {"n_components": 20}))
        + (" (as the " + option("output")
           + f" of a fit, choose a new path: {p.name} is never overwritten by a model)")
    ),
    "embedding": lambda p: "pass an embedding.zarr, written by " + remedy(Remedy(
        "transform", {"model": "MODEL", "input": "CORPUS", "output": "EMBEDDING.zarr"})),
    "layout": lambda p: "pass a layout.zarr, written by " + remedy(Remedy(
        "layout", {"model": "MODEL"}, {"output": "LAYOUT.zarr"})),
}


def wrong_kind(path: Path, found: str, wanted: str) -> str:
    """The message for a sphdist ``found`` (a corpus, ...) where a ``wanted`` was expected.

    >>> print(wrong_kind(Path("c.zarr"), "corpus", "embedding"))  # doctest: +ELLIPSIS
    c.zarr is a sphdist corpus, not a sphdist embedding. To resolve this, pass an embedding.zarr...
    """
    return (
        f"{path} is a sphdist {found}, not a sphdist {wanted}. To resolve this, "
        + _KINDS[wanted](path) + "."
    )


def open_tagged(
    path: str | os.PathLike[str], kind: str, version: int, *, missing: str, stale: str,
) -> zarr.Group:
    """Open ``path`` read-only as a sphdist group of ``kind`` and format ``version``.

    Parameters
    ----------
    path : path-like
    kind : str
        ``"model"`` or ``"embedding"``.
    version : int
        The format version this sphdist reads.
    missing, stale : str
        Complete "To resolve this, ..." when nothing is at ``path`` and when its tag names
        another kind or format version.

    Returns
    -------
    zarr.Group

    Raises
    ------
    InputNotFoundError
        If nothing is at ``path``.
    ModelFormatError
        If it is not a zarr v3 group, or not tagged ``kind`` of ``version`` (another sphdist
        kind is named as such: ``c.zarr is a sphdist corpus, not a sphdist model``).
    """
    path = location(path)
    group = open_node(
        path, missing=f"{path}: no such {kind}. To resolve this, " + missing + ".",
        unreadable=lambda exc: f"{path}: not a zarr v3 group ({type(exc).__name__}: {exc}).",
        error=ModelFormatError, group=True,
    )
    tag = read_tag(group)
    found = tag.get("kind")
    if found != kind and found in _KINDS:
        raise ModelFormatError(wrong_kind(path, found, kind))
    if found != kind or tag.get("format_version") != version:
        raise ModelFormatError(
            f"{path}: not a sphdist {kind} of format version {version} "
            f"(found {tag!r}). To resolve this, {stale}."
        )
    return group


def check_array(
    arr: zarr.Array, path: str, what: str, *, error: type[SphdistError], remedy: str,
) -> zarr.Array:
    """Return ``arr`` if it is a zarr v3 array of a plain dtype stored with :data:`SAFE_CODECS`.

    Plain dtypes: bool, integers, floats, and UTF-8 strings (zarr's ``vlen-utf8``).

    Raises
    ------
    error
        Naming ``path``, ``what``, the format, dtype and codecs found, and ``remedy``.
    """
    meta = arr.metadata
    codecs = [c.to_dict().get("name") for c in getattr(meta, "codecs", ())]
    if (
        meta.zarr_format != 3
        or arr.dtype.kind not in "biufT"
        and not (arr.dtype.kind == "O" and codecs[:1] == ["vlen-utf8"])
        or not set(codecs) <= SAFE_CODECS
    ):
        raise error(
            f"{path}: {what} is stored as zarr v{meta.zarr_format}, dtype {arr.dtype}, codecs "
            f"{codecs}; sphdist reads only zarr v3 numeric or UTF-8 arrays with the codecs "
            f"{sorted(SAFE_CODECS)} (nothing that can execute code). To resolve this, " + remedy
            + "."
        )
    return arr


def checked_array(
    group: zarr.Group, name: str, path: str, what: str, *,
    error: type[SphdistError], remedy: str,
) -> zarr.Array:
    """``group[name]`` if it is an array that passes :func:`check_array`.

    Raises
    ------
    KeyError
        If there is no array ``name``.
    error
        If its metadata is unreadable (an unknown codec, malformed JSON) or it fails the check.
    """
    try:
        arr = group[name]
    except KeyError:
        raise
    except Exception as exc:  # unknown codec, malformed metadata, ...
        raise error(
            f"{path}: {what} ({name}) is unreadable ({type(exc).__name__}: {exc}). To resolve "
            "this, " + remedy + "."
        ) from None
    if not isinstance(arr, zarr.Array):
        raise KeyError(name)
    return check_array(arr, path, f"{what} ({name})", error=error, remedy=remedy)


def check_members(
    group: zarr.Group, path: str, *, error: type[SphdistError], remedy: str,
) -> dict[str, zarr.Group | zarr.Array]:
    """Parse the metadata of every array under ``group`` now and :func:`check_array` each.

    For stores with a handful of arrays (a model, an embedding): an unknown codec, a stray
    node or a zarr v2 array is refused at opening, before any chunk is read.

    Returns
    -------
    dict
        Every node under ``group`` by its path (``"U"``, ``"state/XVt"``), as opened now.

    Raises
    ------
    error
        Naming ``path`` and ``remedy``.
    """
    nodes = {}
    for name, node in _members(group, path, error=error, remedy=remedy):
        if isinstance(node, zarr.Array):
            check_array(node, path, f"array {name}", error=error, remedy=remedy)
        nodes[name] = node
    return nodes


_METADATA_KEYS = ("zarr.json", ".zgroup", ".zattrs", ".zmetadata")


def _members(
    group: zarr.Group, path: str, *, error: type[SphdistError], remedy: str, prefix: str = "",
) -> Iterator[tuple[str, zarr.Group | zarr.Array]]:
    """Every node under ``group``, opened one at a time, depth first, in name order.

    zarr's ``Group.members`` opens the members concurrently and leaves the others running when
    one fails to open; at exit they printed "Task was destroyed but it is pending!" (or a
    traceback) after the error line. Here a failure stops the walk with nothing under way.
    """
    store = group.store_path.store

    async def names() -> list[str]:
        return [k async for k in store.list_dir(group.store_path.path)]

    for key in sorted(set(sync(names())) - set(_METADATA_KEYS)):
        name = f"{prefix}{key}"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                node = group[key]
        except Exception as exc:  # unknown codec, malformed metadata, a stray object
            raise error(
                f"{path}: unreadable array metadata at {name} ({type(exc).__name__}: {exc}). "
                "Only zarr's built-in codecs are read, never pickled objects. To resolve "
                "this, " + remedy + "."
            ) from None
        yield name, node
        if isinstance(node, zarr.Group):
            yield from _members(node, path, error=error, remedy=remedy, prefix=f"{name}/")


def write_array(group: zarr.Group, name: str, values: np.ndarray) -> None:
    """Store ``values`` as one chunk at ``group[name]`` (zstd with checksum, every chunk)."""
    arr = group.create_array(
        name, shape=values.shape, dtype=values.dtype, chunks=values.shape,
        compressors=CHECKSUMMED, config=WRITE_CONFIG,
    )
    arr[...] = values


def write_vector(group: zarr.Group, name: str, values: np.ndarray | PackedStrings) -> list[str]:
    """Store a 1-D array at ``group[name]`` in chunks of at most 2**17 elements.

    Strings (numpy ``U`` or ``O`` dtype, or :class:`PackedStrings`) are stored as zarr's
    variable-length UTF-8 type, the one with a v3 specification; other dtypes as they are.

    Returns
    -------
    list of str
        :func:`chunk_sha256` of the values, one digest per stored chunk: the caller records
        it (the ``sha256`` attribute of the store) and readers check it
        (:func:`read_checked`, :func:`read_chunk_checked`).
    """
    if isinstance(values, PackedStrings):
        return _write_packed(group, name, values)
    chunk = max(1, min(values.shape[0], _VECTOR_CHUNK))
    arr = group.create_array(
        name, shape=values.shape, dtype=str if values.dtype.kind in "UO" else values.dtype,
        chunks=(chunk,), compressors=CHECKSUMMED,
        config=WRITE_CONFIG,
    )
    if values.shape[0] and values.dtype.kind in "UO":
        _write_strings(arr, values, chunk)
    elif values.shape[0]:
        arr[:] = values
    return chunk_sha256(values, chunk)


def _write_packed(group: zarr.Group, name: str, values: PackedStrings) -> list[str]:
    """:func:`write_vector` of :class:`PackedStrings`: the same array, bytes and digests.

    Each chunk is encoded from the packed bytes (as :func:`_write_strings` encodes strings)
    and digested as :func:`~sphdist.io._checked.content_sha256` digests its strings (their
    lengths in characters, little-endian int64, then their UTF-8 bytes): no Python string
    of them is made.
    """
    import hashlib

    if values.errors != "strict":  # lone surrogates would be stored as invalid UTF-8
        raise ValueError("PackedStrings(errors='strict') only: zarr's vlen-utf8 is UTF-8")
    n = len(values)
    chunk = max(1, min(n, _VECTOR_CHUNK))
    arr = group.create_array(name, shape=(n,), dtype=str, chunks=(chunk,),
                             compressors=CHECKSUMMED, config=WRITE_CONFIG)
    codecs = arr.metadata.codecs
    ends, lengths = values.ends()
    utf8 = values.utf8
    zstd = numcodecs.Zstd(level=codecs[1].level, checksum=codecs[1].checksum)
    buffer = default_buffer_prototype().buffer
    digests = []
    for i, a in enumerate(range(0, max(n, 1), chunk)):
        b = min(a + chunk, n)
        first = int(ends[a - 1]) if a else 0
        h = hashlib.sha256(lengths[a:b].astype("<i8").tobytes())
        h.update(utf8[first:int(ends[b - 1]) if b else 0])
        digests.append(h.hexdigest())
        if not n:
            break
        encoded = bytearray(chunk.to_bytes(4, "little"))
        start = first
        for c in range(a, b, _STRING_BLOCK):  # a block of ints at a time, not a list of all
            for end in ends[c:min(c + _STRING_BLOCK, b)].tolist():
                encoded += (end - start).to_bytes(4, "little")
                encoded += utf8[start:end]
                start = end
        encoded += bytes(4 * (chunk - (b - a)))  # the last chunk: padded, as zarr pads it
        blob = zstd.encode(encoded)
        del encoded
        key = arr.metadata.encode_chunk_key((i,))
        sync((arr.store_path / key).set(buffer.from_bytes(blob)))
    return digests


def _write_strings(arr: zarr.Array, values: np.ndarray, chunk: int) -> None:
    """Store the strings ``values`` in ``arr`` (``vlen-utf8`` then zstd): zarr's bytes, in less.

    Each zarr chunk is encoded here as zarr's ``vlen-utf8`` codec encodes it (the number of
    strings, then each string's UTF-8 length and bytes, little-endian uint32 lengths; the
    last chunk padded to the chunk's length with empty strings, zarr's fill value),
    :data:`_STRING_BLOCK` strings at a time, compressed by the array's own zstd codec and
    stored under the chunk's key: the bytes zarr writes (``tests/io/test_zarr_strings.py``
    compares them), in about twice the encoded chunk instead of about 240 bytes per
    string (zarr converts the chunk to numpy strings and back to Python strings, encodes a
    bytes object per string and joins them: 31 MB at once for 2**17 ids of 25 characters,
    the peak of an ingest's commit of 144,000 documents; issue 43). An array with other
    codecs is written by zarr.

    Raises
    ------
    UnicodeEncodeError
        If a string holds a lone surrogate (as zarr's codec raises).
    """
    codecs = arr.metadata.codecs
    if (len(codecs) != 2 or not isinstance(codecs[0], VLenUTF8Codec)
            or not isinstance(codecs[1], ZstdCodec)):
        arr[:] = values
        return
    zstd = numcodecs.Zstd(level=codecs[1].level, checksum=codecs[1].checksum)
    buffer = default_buffer_prototype().buffer
    for i, a in enumerate(range(0, values.shape[0], chunk)):
        n = min(chunk, values.shape[0] - a)
        encoded = bytearray(chunk.to_bytes(4, "little"))
        for b in range(a, a + n, _STRING_BLOCK):
            for value in values[b:min(b + _STRING_BLOCK, a + n)].tolist():
                data = str(value).encode("utf-8")
                encoded += len(data).to_bytes(4, "little")
                encoded += data
        encoded += bytes(4 * (chunk - n))  # the last chunk: padded with empty strings, as zarr
        blob = zstd.encode(encoded)
        del encoded
        key = arr.metadata.encode_chunk_key((i,))
        sync((arr.store_path / key).set(buffer.from_bytes(blob)))


def json_clean(value: Any) -> Any:
    """Round-trip through JSON so numpy scalars and tuples become plain types."""
    return json.loads(
        json.dumps(value, default=lambda o: o.item() if hasattr(o, "item") else str(o))
    )


def regular_chunks(chunks: tuple[int, ...]) -> bool:
    """True if ``chunks`` are equal but for a last one no larger (a regular zarr chunking)."""
    return all(c == chunks[0] for c in chunks[:-1]) and chunks[-1] <= chunks[0]


def checksummed(compressors: Any = "auto") -> Any:
    """``compressors`` with zstd's content checksum switched on.

    ``"auto"`` (zarr's default, zstd) becomes :data:`CHECKSUMMED`; a :class:`ZstdCodec`
    without the checksum gets it, at the same level; anything else is returned as it is.
    The stored values are the same either way.
    """
    if isinstance(compressors, str) and compressors == "auto":
        return CHECKSUMMED
    if isinstance(compressors, ZstdCodec) and not compressors.checksum:
        return ZstdCodec(level=compressors.level, checksum=True)
    return compressors
