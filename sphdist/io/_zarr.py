"""The zarr plumbing every sphdist store shares: opening, the format tag, the safe-codec check.

``corpus.zarr``, ``model.zarr`` and ``embedding.zarr`` are zarr v3 groups tagged with the group
attribute ``sphdist = {"kind": ..., "format_version": ...}``. This module opens a path read-only
(:func:`open_node`, :func:`open_tagged`), reads the tag (:func:`read_tag`), and refuses any array
that is not a plain zarr v3 array with codecs from :data:`SAFE_CODECS` (:func:`check_array`,
:func:`checked_array`, :func:`check_members`): nothing sphdist reads can execute code. It also
holds the small writing helpers the three formats share (:func:`write_array`,
:func:`write_vector`, :func:`json_clean`).

Damaged data is refused, never read as zeros (zarr returns an array's fill value for a chunk
that has no file): every array is written with zstd's content checksum and with every chunk
stored, even one equal to the fill value (:data:`CHECKSUMMED`, :data:`WRITE_CONFIG`), and
:func:`read_checked` refuses a missing chunk file, a chunk the codec cannot decode (a flipped
bit fails the checksum) and values that do not match their recorded sha256
(:func:`content_sha256`).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import math
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import ZstdCodec
from zarr.core.sync import sync

from sphdist.errors import InputNotFoundError, ModelFormatError, SphdistError, StoreReplacedError
from sphdist.io._atomic import open_target
from sphdist.io._fs import is_storage_failure, location, storage_error

__all__ = [
    "SAFE_CODECS",
    "open_node",
    "read_tag",
    "open_tagged",
    "wrong_kind",
    "TaggedStore",
    "check_array",
    "checked_array",
    "check_members",
    "write_array",
    "write_vector",
    "json_clean",
    "regular_chunks",
    "CHECKSUMMED",
    "WRITE_CONFIG",
    "checksummed",
    "content_sha256",
    "chunk_sha256",
    "read_chunk_checked",
    "warn_undigested",
    "ChunkedVector",
    "missing_chunks",
    "require_written",
    "read_checked",
    "require_finite",
    "replaced_error",
]

logger = logging.getLogger("sphdist")

#: zarr v3 codecs sphdist reads: none of them can execute code (no pickle, no object dtype).
SAFE_CODECS = frozenset({
    "bytes", "zstd", "blosc", "gzip", "crc32c", "transpose", "vlen-utf8", "sharding_indexed",
})

_VECTOR_CHUNK = 1 << 17  # elements per chunk of a 1-D array

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
#: given as a model, as the --output of a fit, ...): what to pass, and how to make one.
_KINDS: dict[str, Callable[[Path], str]] = {
    "corpus": lambda p: "pass a corpus.zarr written by `sphdist ingest SOURCE --output PATH`",
    "model": lambda p: (
        "pass a model.zarr, written by `sphdist fit --input CORPUS --output MODEL.zarr` (as the "
        f"--output of a fit, choose a new path: {p.name} is never overwritten by a model)"
    ),
    "embedding": lambda p: (
        "pass an embedding.zarr, written by `sphdist transform --model MODEL --input CORPUS "
        "--output EMBEDDING.zarr`"
    ),
}


def wrong_kind(path: Path, found: str, wanted: str) -> str:
    """The message for a sphdist ``found`` (a corpus, ...) where a ``wanted`` was expected.

    >>> wrong_kind(Path("c.zarr"), "corpus", "embedding")  # doctest: +ELLIPSIS
    'c.zarr is a sphdist corpus, not a sphdist embedding. To resolve this, pass an embedding...'
    """
    return (
        f"{path} is a sphdist {found}, not a sphdist {wanted}. To resolve this, "
        f"{_KINDS[wanted](path)}."
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
        path, missing=f"{path}: no such {kind}. To resolve this, {missing}.",
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


def replaced_error(path: Any) -> StoreReplacedError:
    """The error of a read that met a commit of ``path`` (see :class:`TaggedStore`)."""
    return StoreReplacedError(
        f"{path} was replaced while reading; run it again (another process committed a new "
        "version of it meanwhile)."
    )


class TaggedStore:
    """Read handle on a sphdist group tagged :attr:`KIND` of :attr:`FORMAT_VERSION`.

    Opening checks the tag and every array (:func:`open_tagged`, :func:`check_members`);
    subclasses (a model, an embedding) add the properties of their layout. After a commit
    interrupted between its two renames, the previous complete version (``<path>.old``) is read
    in place (:meth:`sphdist.io.Target.readable`): opening never changes the tree.

    **Readers racing a writer** (issue 24): a handle reads one committed version. In an object
    store it holds the version it opened (versions never change, and the previous one is kept
    for one more commit). A local target is replaced in place by a rename, so every read
    checks afterwards that no commit happened since the opening (:meth:`Target.replaced`);
    an opening that met a commit is done again once, and a read that met one (its values, or
    its error, may come from the new version) raises
    :class:`~sphdist.errors.StoreReplacedError`, "was replaced while reading; run it again",
    never a report of damage.

    Parameters
    ----------
    path : path-like

    Attributes
    ----------
    path : pathlib.Path
        As given.
    location : pathlib.Path
        The directory read: ``path``, or ``<path>.old`` after an interrupted commit, or the
        version an object store's manifest names.
    attrs : dict
        The group attributes.
    """

    KIND: str
    FORMAT_VERSION: int
    _MISSING: str  # "To resolve this, ..." when nothing is at path
    _STALE: str  # ... when the tag names another kind or version
    _REWRITE: str  # ... when an array is unreadable or unsafe

    def __init__(self, path: str | os.PathLike[str]):
        self.path = location(path)
        self._target = open_target(self.path)
        for attempt in (0, 1):  # once more if a commit replaced it while it was opened
            self.location, self._version = self._target.reader()
            try:
                self._open()
            except Exception:
                if not self._target.replaced(self._version, failed=True):
                    raise  # damage, or nothing there: not a commit
                if attempt:
                    raise replaced_error(self.path) from None
                continue
            if not self._target.replaced(self._version, failed=False):
                return
        raise replaced_error(self.path)

    def _consistent(self, read: Callable[[], Any]) -> Any:
        """``read()``, or StoreReplacedError if a commit replaced the version it read."""
        try:
            value = read()
        except Exception:
            if self._target.replaced(self._version, failed=True):
                raise replaced_error(self.path) from None
            raise
        if self._target.replaced(self._version, failed=False):
            raise replaced_error(self.path)
        return value

    def _open(self) -> None:
        """Open and check the version at :attr:`location` (subclasses check more)."""
        group = open_tagged(
            self.location, self.KIND, self.FORMAT_VERSION, missing=self._MISSING,
            stale=self._STALE,
        )
        #: the arrays of the version opened, by path: what it holds is what it held at
        #: opening, whatever a writer commits meanwhile
        self._group = check_members(
            group, str(self.location), error=ModelFormatError, remedy=self._REWRITE
        )
        self.attrs: dict[str, Any] = dict(group.attrs)

    def _array(self, name: str) -> zarr.Array:
        """``group[name]`` after checking that every chunk of it is stored."""

        def read() -> zarr.Array:
            arr = self._group[name]
            require_chunks(arr, str(self.location), name, error=ModelFormatError,
                           remedy=self._REWRITE)
            return arr

        return self._consistent(read)

    def _unit_columns(self, name: str, digests: Any, *, token: Any) -> Any:
        """``group[name]``, an (r, n) array of unit columns, as a lazy dask array.

        One task per stored chunk of columns, which reads and checks that chunk alone
        (:func:`read_unit_columns`) against ``digests`` (the recorded :func:`chunk_sha256`;
        None for a store written before it). ``token`` identifies the stored values (a digest
        of the store), for the name of the dask array.
        """
        import dask.array as da
        from dask.base import tokenize

        arr = self._array(name)
        r, c = arr.chunks
        n = arr.shape[1]
        if digests is not None and not isinstance(digests, list):
            digests = []  # no chunk matches: refused by the first chunk read
        return da.map_blocks(
            read_unit_columns, str(self.location), name, c, self._target, self._version,
            None if digests is None else tuple(digests), self._REWRITE,
            dtype=np.float64,
            chunks=((r,), tuple(min(c, n - s) for s in range(0, n, c)) or (0,)),
            meta=np.empty((0, 0)),
            name=f"sphdist-{self.KIND}-{name}-{tokenize(str(self.location), token, c)}",
        )

    def _unit_columns_between(self, name: str, digests: Any, start: int, stop: int
                              ) -> np.ndarray:
        """Columns ``start:stop`` of ``group[name]`` (as :meth:`_unit_columns`), read now.

        Without dask: only the stored chunks that hold them are read, each checked by
        :func:`read_unit_columns` as the tasks of :meth:`_unit_columns` check theirs (a reader
        of a few columns, such as ``sphdist neighbors --doc-id``, reads a few chunks).

        Returns
        -------
        ndarray of shape (r, stop - start), float64
            ``start`` and ``stop`` clipped to ``0 <= start <= stop <= n``.
        """
        arr = self._array(name)
        r, c = arr.chunks
        n = arr.shape[1]
        start, stop = max(0, int(start)), min(n, int(stop))
        if digests is not None and not isinstance(digests, list):
            digests = []
        blocks = [
            read_unit_columns(str(self.location), name, c, self._target, self._version,
                              None if digests is None else tuple(digests), self._REWRITE,
                              block_id=(0, b))
            for b in range(start // c, -(-stop // c))
        ]
        first = (start // c) * c
        out = np.concatenate(blocks, axis=1) if blocks else np.zeros((r, 0))
        return np.ascontiguousarray(out[:, start - first:stop - first], dtype=np.float64)

    def _read(
        self, name: str, sha256: str | None = None, digest: str = "sha256",
        required: bool = True,
    ) -> np.ndarray:
        """All of ``group[name]`` through :func:`read_checked` (recorded digest ``sha256``)."""
        return self._consistent(lambda: read_checked(
            self._group[name], str(self.location), name, error=ModelFormatError,
            remedy=self._REWRITE, sha256=sha256, digest=digest, required=required,
        ))


def read_unit_columns(
    location: str, name: str, c: int, target: Any, version: Any,
    digests: tuple[str, ...] | None, remedy: str, block_id: Any = None,
) -> np.ndarray:
    """Columns of ``name`` in its zarr chunk ``block_id[1]`` (runs in a task); a bad one is refused.

    The reader of the unit columns of a model's and an embedding's V
    (:meth:`TaggedStore._unit_columns`).

    Parameters
    ----------
    location : str
        The directory of the version read.
    name : str
        The array, of shape (r, n), float64, chunked ``(r, c)``.
    c : int
        Columns per zarr chunk.
    target, version
        The store's :class:`~sphdist.io.Target` and the version the handle opened; a read
        that met a commit raises StoreReplacedError (see :class:`TaggedStore`).
    digests : tuple of str or None
        The recorded :func:`chunk_sha256` of the array, one per chunk (None for a store
        written before it was recorded).
    remedy : str
        Completes "To resolve this, ...".
    block_id : tuple of int
        Given by :func:`dask.array.map_blocks`.

    Returns
    -------
    ndarray of shape (r, c_i), float64
        The columns, bitwise as stored.

    Raises
    ------
    ModelFormatError
        If the chunk does not decode, a column is not a finite unit vector (within
        :data:`UNIT_TOLERANCE`), or the chunk does not match its digest (a column swap keeps
        every column a unit vector).
    StoreReplacedError
        If a commit replaced the store while it was read.
    """
    start = block_id[1] * c
    try:
        arr = zarr.open_array(store=location, path=name, mode="r")
    except Exception:
        if target.replaced(version, failed=True):
            raise replaced_error(target.path) from None
        raise
    error = None
    try:
        block = np.asarray(arr[:, start:start + c])
    except Exception as exc:  # the zstd checksum fails, or the file is truncated
        error = replaced_error(target.path) if target.replaced(version, failed=True) else (
            ModelFormatError(
                f"{location}: {name} (columns {start}:{start + c}) is corrupted "
                f"({type(exc).__name__}: {exc}). To resolve this, {remedy}."
            )
        )
    if error is None and target.replaced(version, failed=False):
        error = replaced_error(target.path)  # the values may be another version's
    if error is not None:
        raise error  # outside the except block: the client must unpickle it without zarr's cause
    with np.errstate(invalid="ignore", over="ignore"):
        off = np.abs(np.sqrt(np.einsum("ij,ij->j", block, block)) - 1.0)
    bad = np.flatnonzero(~(off <= UNIT_TOLERANCE))  # NaN and Inf included
    if bad.size and target.replaced(version, failed=True):
        # a version gone past its grace period reads as zeros (missing chunks), not damage
        raise replaced_error(target.path)
    if bad.size:
        j = int(bad[0])
        column = block[:, j]
        what = (f"holds a non-finite value ({column[~np.isfinite(column)][0]})"
                if not np.isfinite(column).all() else
                f"is not a unit vector (norm {np.linalg.norm(column):.6g})")
        raise ModelFormatError(
            f"{location}: column {start + j} of {name} {what}; the columns of {name} are unit "
            f"vectors. To resolve this, {remedy}."
        )
    if digests is not None and (len(digests) != -(-arr.shape[1] // c) or content_sha256(block)
                                != digests[block_id[1]]):  # last: the
        # checks above name more (a column swap keeps every column a unit vector)
        if target.replaced(version, failed=True):
            raise replaced_error(target.path)
        raise ModelFormatError(
            f"{location}: {name} (columns {start}:{start + c}) does not match its recorded "
            f"sha256 (the stored values were changed or damaged). To resolve this, {remedy}."
        )
    return block


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
            f"{path}: {what} is stored as zarr v{meta.zarr_format}, dtype "
            f"{arr.dtype}, codecs {codecs}; sphdist reads only zarr v3 numeric or UTF-8 arrays "
            f"with the codecs {sorted(SAFE_CODECS)} (nothing that can execute code). To "
            f"resolve this, {remedy}."
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
            f"this, {remedy}."
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
                "Only zarr's built-in codecs are read, never pickled objects. To resolve this, "
                f"{remedy}."
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


def write_vector(group: zarr.Group, name: str, values: np.ndarray) -> list[str]:
    """Store a 1-D array at ``group[name]`` in chunks of at most 2**17 elements.

    Strings (numpy ``U`` or ``O`` dtype) are stored as zarr's variable-length UTF-8 type, the
    one with a v3 specification; other dtypes as they are.

    Returns
    -------
    list of str
        :func:`chunk_sha256` of the values, one digest per stored chunk: the caller records
        it (the ``sha256`` attribute of the store) and readers check it
        (:func:`read_checked`, :func:`read_chunk_checked`).
    """
    chunk = max(1, min(values.shape[0], _VECTOR_CHUNK))
    arr = group.create_array(
        name, shape=values.shape, dtype=str if values.dtype.kind in "UO" else values.dtype,
        chunks=(chunk,), compressors=CHECKSUMMED,
        config=WRITE_CONFIG,
    )
    if values.shape[0]:
        arr[:] = values
    return chunk_sha256(values, chunk)


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


def content_sha256(*arrays: np.ndarray) -> str:
    """Hex sha256 of the values of ``arrays``, one after the other.

    Numbers: their little-endian bytes (C order); for one float64 array this is
    :func:`sphdist.io.model.u_sha256`. Strings (numpy ``U``, ``T`` or ``O`` of str, as zarr
    reads its UTF-8 arrays back): the little-endian int64 lengths of all the strings (in code
    points), then their UTF-8 bytes (lone surrogates passed through), so a dtype change
    between writing and reading leaves the digest as it was, and moving a character from one
    string to the next changes it.

    Examples
    --------
    >>> content_sha256(np.array(["ab", "c"])) == content_sha256(np.array(["ab", "c"], object))
    True
    >>> content_sha256(np.array(["ab", "c"])) == content_sha256(np.array(["a", "bc"]))
    False
    """
    h = hashlib.sha256()
    for values in arrays:
        values = np.asarray(values)
        if values.dtype.kind in "OUT":
            items = values.ravel().tolist()  # str, as zarr reads UTF-8 arrays
            try:
                joined = "".join(items)
            except TypeError:  # an object array of other things: their str
                items = [str(v) for v in items]
                joined = "".join(items)
            h.update(np.fromiter(map(len, items), dtype="<i8", count=len(items)).tobytes())
            h.update(joined.encode("utf-8", "surrogatepass"))
            continue
        h.update(np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<")).tobytes())
    return h.hexdigest()


def chunk_sha256(values: np.ndarray, chunk: int) -> list[str]:
    """:func:`content_sha256` of each ``chunk`` elements of ``values`` along its last axis.

    The digests of an array stored in chunks of ``chunk`` along its last axis (a 1-D vector,
    the document columns of V), so that a reader of one chunk checks that chunk alone.

    Parameters
    ----------
    values : ndarray of shape (..., n)
    chunk : int
        Elements per chunk along the last axis, >= 1.

    Returns
    -------
    list of str
        ``ceil(n / chunk)`` hex digests, in order (one for an empty array).

    Examples
    --------
    >>> v = np.arange(5.0)
    >>> chunk_sha256(v, 2)[2] == content_sha256(v[4:])
    True
    """
    n = values.shape[-1]
    return [content_sha256(values[..., a:a + chunk]) for a in range(0, max(n, 1), chunk)]


def warn_undigested(path: Any, what: str, remedy: str) -> None:
    """Log one WARNING: ``what`` of the store at ``path`` has no recorded digest.

    Stores written by sphdist before every array had a digest are read (their values are
    still checked: finite, unit columns, consistent shapes) but an edit of ``what`` cannot
    be detected; ``remedy`` (completing "To resolve this, ...") writes it again with one.
    """
    logger.warning(
        "%s: %s has no recorded digest (written by an earlier sphdist), so a change to it "
        "cannot be detected. To resolve this, %s.", path, what, remedy,
    )


def _storage_keys(arr: zarr.Array) -> list[str]:
    """Store keys of every chunk (or shard) of ``arr``."""
    grid = arr.cdata_shape if arr.shards is None else tuple(
        math.ceil(s / c) for s, c in zip(arr.shape, arr.shards, strict=True)
    )
    prefix = f"{arr.store_path.path}/" if arr.store_path.path else ""
    return [
        prefix + arr.metadata.encode_chunk_key(coords)
        for coords in itertools.product(*(range(g) for g in grid))
    ]


def missing_chunks(arr: zarr.Array) -> list[str]:
    """Store keys of the chunks of ``arr`` that are not stored (zarr would read the fill value).

    Parameters
    ----------
    arr : zarr.Array

    Returns
    -------
    list of str
        Keys relative to the store root (for a local store, paths under it), in chunk order.
    """
    keys = _storage_keys(arr)
    store = arr.store_path.store

    async def exist() -> list[bool]:
        return list(await asyncio.gather(*(store.exists(k) for k in keys)))

    return [k for k, ok in zip(keys, sync(exist()), strict=True) if not ok]


def require_chunks(
    arr: zarr.Array, path: str, what: str, *, error: type[SphdistError], remedy: str,
) -> None:
    """Refuse ``arr`` if a chunk of it is not stored.

    Raises
    ------
    error
        Naming ``path``, the first missing chunk file, how many are missing, and ``remedy``.
    """
    missing = missing_chunks(arr)
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise error(
            f"{path}: {what}: chunk file {missing[0]}{more} is missing (zarr would read it as "
            f"the fill value {arr.fill_value!r}). To resolve this, {remedy}."
        )


def require_written(arr: zarr.Array, path: Any, what: str, option: str = "--output") -> None:
    """Refuse to commit ``arr`` unless every chunk its tasks wrote is stored where it is read.

    The tasks that compute an array (on a cluster: in the workers) write its chunks
    themselves; a worker that does not share the driver's filesystem writes them somewhere
    else, and the commit would make a store whose chunks read as the fill value. Called on
    the staging array just before the commit.

    Parameters
    ----------
    arr : zarr.Array
        The array, opened in the staging store by this process.
    path : path-like
        The output being committed, for the message.
    what : str
        The array, in words (``"V"``).
    option : str, default "--output"
        The option that names the output, for the remedy.

    Raises
    ------
    StorageError
        Naming ``path``, how many chunk files are missing and the first; nothing is committed.
    """
    from sphdist.errors import StorageError

    missing = missing_chunks(arr)
    if not missing:
        return
    name = Path(str(path)).name
    raise StorageError(
        f"{path}: {len(missing)} of the {math.prod(arr.cdata_shape)} chunk files of {what} that "
        f"the tasks wrote are not where this process reads them (first: {missing[0]}): the "
        "workers do not share this machine's filesystem. Nothing was committed. To resolve "
        "this, write the output where this machine and every worker reach the same files: an "
        f"object store (e.g. {option} s3://BUCKET/{name}) or a filesystem mounted at the same "
        "path on every node."
    )


def read_checked(
    arr: zarr.Array, path: str, what: str, *, error: type[SphdistError], remedy: str,
    sha256: str | list[str] | None = None, digest: str = "sha256", required: bool = True,
) -> np.ndarray:
    """Read all of ``arr``, refusing missing chunks, undecodable chunks and changed values.

    Parameters
    ----------
    arr : zarr.Array
    path, what : str
        The store and the array, for messages.
    error : type
        ``CorpusFormatError`` or ``ModelFormatError``.
    remedy : str
        Completes "To resolve this, ...".
    sha256 : str or list of str, optional
        The recorded :func:`content_sha256` of the values, or their :func:`chunk_sha256`
        (one digest per zarr chunk along the last axis); not checked when None (stores
        written before digests were recorded).
    digest : str, default "sha256"
        The attribute the digest was recorded as, for the message.
    required : bool, default True
        Refuse a chunk that is not stored. False only for arrays of stores written before
        every chunk was stored, where a chunk equal to the fill value (all False, all 0) was
        legitimately left out.

    Returns
    -------
    ndarray
        The values, bitwise as stored.

    Raises
    ------
    error
        If a chunk file is missing, a chunk does not decode (a truncated file, a failed zstd
        checksum), or the values do not match ``sha256``.
    """
    if required:
        require_chunks(arr, path, what, error=error, remedy=remedy)
    try:
        values = np.asarray(arr[...])
    except Exception as exc:  # the codec fails: truncated, or the checksum does not match
        raise error(
            f"{path}: {what} is corrupted ({type(exc).__name__}: {exc}). To resolve this, "
            f"{remedy}."
        ) from None
    if isinstance(sha256, list):
        c = arr.chunks[-1] if arr.ndim else 1
        found = chunk_sha256(values, c) if values.ndim else [content_sha256(values)]
        bad = [i for i, (a, b) in enumerate(itertools.zip_longest(found, sha256)) if a != b]
        if bad:
            raise _changed(path, f"{what} (chunk {bad[0]}, elements {bad[0] * c}:"
                           f"{(bad[0] + 1) * c})", digest, error, remedy)
    elif sha256 is not None and content_sha256(values) != sha256:
        raise _changed(path, what, digest, error, remedy)
    return values


def _changed(path: str, what: str, digest: str, error: type[SphdistError],
             remedy: str) -> SphdistError:
    return error(
        f"{path}: {what} does not match its recorded {digest} (the stored values were "
        f"changed or damaged). To resolve this, {remedy}."
    )


def read_chunk_checked(
    arr: zarr.Array, i: int, path: str, what: str, *, error: type[SphdistError], remedy: str,
    sha256: list[str] | None, digest: str = "sha256",
) -> np.ndarray:
    """Read zarr chunk ``i`` of ``arr`` (along its last axis) alone, checked as read_checked is.

    Parameters
    ----------
    arr : zarr.Array of shape (..., n)
    i : int
        The chunk: elements ``i * c : (i + 1) * c`` of the last axis, c = ``arr.chunks[-1]``.
    path, what, error, remedy, digest
        As :func:`read_checked`.
    sha256 : list of str or None
        The array's recorded :func:`chunk_sha256`; None: not checked (an older store).

    Returns
    -------
    ndarray of shape (..., n_i)
        The values of the chunk, bitwise as stored.

    Raises
    ------
    error
        If the chunk's file is missing, does not decode, or does not match ``sha256[i]`` (or
        ``sha256`` does not have one digest per chunk).
    """
    c = arr.chunks[-1]
    prefix = f"{arr.store_path.path}/" if arr.store_path.path else ""
    key = (prefix + arr.metadata.encode_chunk_key((0,) * (arr.ndim - 1) + (i,))
           if arr.shards is None else None)
    where = f"{what} (chunk {i}, elements {i * c}:{(i + 1) * c})"
    if key is not None and not sync(arr.store_path.store.exists(key)):
        raise error(
            f"{path}: {where}: chunk file {key} is missing (zarr would read it as the fill "
            f"value {arr.fill_value!r}). To resolve this, {remedy}."
        )
    try:
        values = np.asarray(arr[..., i * c:(i + 1) * c])
    except Exception as exc:  # the codec fails: truncated, or the checksum does not match
        raise error(f"{path}: {where} is corrupted ({type(exc).__name__}: {exc}). To resolve "
                    f"this, {remedy}.") from None
    if values.dtype.kind in "TU":  # Python str once, for the digest and the caller
        values = values.astype(object)
    if sha256 is not None and (len(sha256) != arr.cdata_shape[-1]
                               or content_sha256(values) != sha256[i]):
        raise _changed(path, where, digest, error, remedy)
    return values


def require_finite(
    values: np.ndarray, path: str, what: str, *, error: type[SphdistError], remedy: str,
) -> np.ndarray:
    """Return ``values`` (a 1-D array read from a store) if every value is finite.

    Raises
    ------
    error
        Naming ``path``, ``what``, the first non-finite value and its index, and ``remedy``.
    """
    finite = np.isfinite(values)
    if not finite.all():
        i = int(np.flatnonzero(~finite)[0])
        raise error(
            f"{path}: {what} holds a non-finite value ({values[i]}) at feature {i}. To resolve "
            f"this, {remedy}."
        )
    return values


class ChunkedVector:
    """A 1-D array of a store (document ids), read chunk by chunk, only the chunks asked for.

    Each chunk is read once, by ``read_chunk`` (which checks it against its digest,
    :func:`read_chunk_checked`), and kept: the ids of k hits cost at most k chunks, not the
    whole array.

    Parameters
    ----------
    n : int
        Length.
    chunk : int
        Elements per chunk (the zarr chunk), >= 1.
    read_chunk : callable
        ``i -> ndarray of shape (min(chunk, n - i * chunk),)``: chunk i, checked.

    Examples
    --------
    >>> ids = ChunkedVector.of(np.array(["a", "b", "c"], dtype=object))
    >>> ids.take(np.array([2, 0])).tolist(), ids.find(["c", "z"]).tolist(), len(ids)
    (['c', 'a'], [2, -1], 3)
    """

    def __init__(self, n: int, chunk: int, read_chunk: Callable[[int], np.ndarray]):
        self.n, self.chunk, self._read_chunk = int(n), max(1, int(chunk)), read_chunk
        self._chunks: dict[int, np.ndarray] = {}
        self.chunks_read = 0  # how many chunks were read from the store

    @classmethod
    def of(cls, values: np.ndarray) -> ChunkedVector:
        """The vector of in-memory ``values`` (one chunk)."""
        values = np.asarray(values).astype(object)
        return cls(values.shape[0], max(1, values.shape[0]), lambda i: values)

    def __len__(self) -> int:
        return self.n

    def _get(self, i: int) -> np.ndarray:
        if i not in self._chunks:
            self._chunks[i] = np.asarray(self._read_chunk(i)).astype(object, copy=False)
            self.chunks_read += 1
        return self._chunks[i]

    def read(self) -> np.ndarray:
        """All values, ndarray of shape (n,), object."""
        parts = [self._get(i) for i in range(-(-self.n // self.chunk))]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=object)

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Values at ``positions`` (int, each in [0, n)), ndarray of the same shape, object."""
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty(positions.shape, dtype=object)
        which = positions // self.chunk
        for i in np.unique(which).tolist():
            here = which == i
            out[here] = self._get(i)[positions[here] - i * self.chunk]
        return out

    def find(self, values: list[str]) -> np.ndarray:
        """Position of the first element equal to each of ``values``, -1 where none is.

        Chunks are read in order until every value is found (all of them when one is not).

        Returns
        -------
        ndarray of shape (len(values),), int64
        """
        wanted = {str(v) for v in values}
        found: dict[str, int] = {}
        for i in range(-(-self.n // self.chunk)):
            if len(found) == len(wanted):
                break
            chunk = self._get(i)
            if len(wanted) - len(found) <= 8:  # a few: one comparison in C per value
                for v in wanted - set(found):
                    at = np.flatnonzero(chunk == v)
                    if at.size:
                        found[v] = i * self.chunk + int(at[0])
                continue
            for j, v in enumerate(chunk.tolist()):
                if v in wanted and v not in found:
                    found[v] = i * self.chunk + j
        return np.array([found.get(str(v), -1) for v in values], dtype=np.int64)
