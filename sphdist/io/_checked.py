"""Damaged data is refused, never read: the digests of stored values and the checked reads.

Every array is written with zstd's content checksum and with every chunk stored, even one equal
to the fill value (:data:`sphdist.io._zarr.CHECKSUMMED`, :data:`sphdist.io._zarr.WRITE_CONFIG`),
and :func:`read_checked` refuses a missing chunk file (:func:`missing_chunks`), a chunk the codec
cannot decode (a flipped bit fails the checksum) and values that do not match their recorded
sha256 (:func:`content_sha256`, :func:`chunk_sha256`). :class:`ChunkedVector` reads a long 1-D
array chunk by chunk, each chunk checked.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.core.sync import sync

from sphdist.errors import SphdistError, StorageError, Text, option

__all__ = [
    "content_sha256",
    "chunk_sha256",
    "read_chunk_checked",
    "warn_undigested",
    "recorded_digest",
    "EVERY_DIGEST",
    "ChunkedVector",
    "missing_chunks",
    "require_chunks",
    "require_written",
    "read_checked",
    "require_finite",
]

logger = logging.getLogger("sphdist")


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
            flat = values.ravel()
            # the lengths, then the characters, :data:`_STRING_BLOCK` strings at a time: no
            # list, joined string or bytes of all of them at once (a chunk of 2**17 ids)
            for a in range(0, flat.shape[0], _STRING_BLOCK):
                items = _str_items(flat[a:a + _STRING_BLOCK])
                h.update(np.fromiter(map(len, items), dtype="<i8", count=len(items)).tobytes())
            for a in range(0, flat.shape[0], _STRING_BLOCK):
                h.update("".join(_str_items(flat[a:a + _STRING_BLOCK])).encode(
                    "utf-8", "surrogatepass"))
            continue
        # the array's buffer itself: no copy of its bytes when it is little-endian and
        # contiguous already (a chunk's arrays)
        h.update(memoryview(np.ascontiguousarray(
            values, dtype=values.dtype.newbyteorder("<")).reshape(-1).view(np.uint8)))
    return h.hexdigest()


#: Strings hashed at once by :func:`content_sha256`.
_STRING_BLOCK = 1 << 12


def _str_items(values: np.ndarray) -> list[str]:
    """``values`` (numpy ``U``, ``T`` or ``O``) as a list of ``str`` (other objects: their str)."""
    items = values.tolist()  # str, as zarr reads UTF-8 arrays
    if all(type(v) is str for v in items):
        return items
    return [str(v) for v in items]


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
        "cannot be detected. To resolve this, %s.", path, what, Text(remedy),
    )


#: The entry of the ``sphdist`` tag of a store whose writer recorded a digest of every array
#: (every store this version writes): a digest missing from it is damage, not age.
EVERY_DIGEST = {"digests": "every array"}


def recorded_digest(
    path: Any, name: str, digests: Any, tag: Any, warned: set[str], *,
    error: type[SphdistError], remedy: str | Text | Callable[[], str | Text],
    warn: bool = True,
) -> Any:
    """The digest recorded for array ``name``; refused or warned once when there is none.

    Parameters
    ----------
    path : path-like
        The store, for the messages.
    name : str
        The array (``"U"``, ``"doc_ids"``).
    digests : dict or None
        The store's record of digests (its ``sha256`` attribute), by array name.
    tag : dict
        The store's ``sphdist`` attribute: with :data:`EVERY_DIGEST`, every array has one.
    warned : set of str
        The arrays warned about already (one warning per store and array); updated.
    error : type
        The exception of the store's kind.
    remedy : str, Text or callable
        Completes "To resolve this, ...": the job that writes the store again (a callable:
        worded only when a message needs it).
    warn : bool, default True
        Warn about an older store's missing digest (False: an array older stores never
        had a digest of, read as before without a word).

    Returns
    -------
    str, list of str or None
        The digest (one per chunk for a chunked array), or None for an older store.

    Raises
    ------
    error
        If the store says every array has a digest and ``name``'s is missing: its record was
        edited or damaged, and a check of ``name`` would be switched off.
    """
    found = digests.get(name) if isinstance(digests, dict) else None
    if found is not None:
        return found
    if callable(remedy):
        remedy = remedy()
    if isinstance(tag, dict) and tag.get("digests") == EVERY_DIGEST["digests"]:
        raise error(
            f"{path}: the digest of {name} is missing from the store's record (attribute "
            "sha256), which says every array has one: the record was edited or damaged, so "
            f"{name} cannot be checked. To resolve this, " + remedy + "."
        )
    if warn and name not in warned:
        warned.add(name)
        warn_undigested(path, name, remedy)
    return None


def _fill(arr: zarr.Array) -> Any:
    """The array's fill value as Python writes it (``0.0``, not ``np.float64(0.0)``)."""
    value = arr.fill_value
    return value.item() if isinstance(value, np.generic) else value


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
            f"{path}: {what}: chunk file {missing[0]}{more} {'are' if more else 'is'} missing "
            f"(zarr would read it as the fill value {_fill(arr)!r}). To resolve this, "
            + remedy + "."
        )


def require_written(arr: zarr.Array, path: Any, what: str, parameter: str = "output") -> None:
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
    parameter : str, default "output"
        The parameter that names the output, for the remedy (:func:`sphdist.errors.option`).

    Raises
    ------
    StorageError
        Naming ``path``, how many chunk files are missing and the first; nothing is committed.
    """
    missing = missing_chunks(arr)
    if not missing:
        return
    name = Path(str(path)).name
    raise StorageError(
        f"{path}: {len(missing)} of the {math.prod(arr.cdata_shape)} chunk files of {what} "
        f"that the tasks wrote are not where this process reads them (first: {missing[0]}): "
        "the workers do not share this machine's filesystem. Nothing was committed. To "
        "resolve this, write the output where this machine and every worker reach the same "
        "files: an object store (e.g. " + option(parameter, f's3://BUCKET/{name}')
        + ") or a filesystem mounted at the same path on every node."
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
            + remedy + "."
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
        f"{path}: {what} does not match its recorded {digest} (the stored values were changed "
        "or damaged). To resolve this, " + remedy + "."
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

    Notes
    -----
    With ``sha256``, whether the chunk's file exists is asked only when the values do not
    match their digest (to name a missing file): a missing chunk reads as the fill value,
    which matches the digest only where the chunk held the fill value, so the values
    returned are the recorded ones either way, in one read of the store instead of two.
    Without, it is asked first: nothing else tells a missing chunk from one of fill values.
    """
    c = arr.chunks[-1]
    prefix = f"{arr.store_path.path}/" if arr.store_path.path else ""
    key = (prefix + arr.metadata.encode_chunk_key((0,) * (arr.ndim - 1) + (i,))
           if arr.shards is None else None)
    where = f"{what} (chunk {i}, elements {i * c}:{(i + 1) * c})"

    def missing() -> SphdistError | None:
        if key is not None and not sync(arr.store_path.store.exists(key)):
            return error(
                f"{path}: {where}: chunk file {key} is missing (zarr would read it as the "
                f"fill value {_fill(arr)!r}). To resolve this, " + remedy + "."
            )
        return None

    if sha256 is None and (refused := missing()) is not None:  # only the file tells
        raise refused
    try:
        values = np.asarray(arr[..., i * c:(i + 1) * c])
    except Exception as exc:  # the codec fails: truncated, or the checksum does not match
        raise error(f"{path}: {where} is corrupted ({type(exc).__name__}: {exc}). To resolve "
                    "this, " + remedy + ".") from None
    if values.dtype.kind in "TU":  # Python str once, for the digest and the caller
        values = values.astype(object)
    if sha256 is not None and (len(sha256) != arr.cdata_shape[-1]
                               or content_sha256(values) != sha256[i]):
        raise missing() or _changed(path, where, digest, error, remedy)
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
            f"{path}: {what} holds a non-finite value ({values[i]}) at feature {i}. To "
            "resolve this, " + remedy + "."
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
    digests : list of str, optional
        The recorded :func:`chunk_sha256` of the values (None: none recorded); their
        :attr:`identity` names these values wherever a copy of them is stored.
    lookup : callable, optional
        ``values -> list of ndarray of int64``: for each value, the positions that may hold it
        (a table of hashes, :mod:`sphdist.io.index`); :meth:`find` then reads only the chunks
        of those positions, and checks each of them against the value.

    Examples
    --------
    >>> ids = ChunkedVector.of(np.array(["a", "b", "c"], dtype=object))
    >>> ids.take(np.array([2, 0])).tolist(), ids.find(["c", "z"]).tolist(), len(ids)
    (['c', 'a'], [2, -1], 3)
    """

    def __init__(self, n: int, chunk: int, read_chunk: Callable[[int], np.ndarray], *,
                 digests: list[str] | None = None,
                 lookup: Callable[[list[str]], list[np.ndarray]] | None = None):
        self.n, self.chunk, self._read_chunk = int(n), max(1, int(chunk)), read_chunk
        self.digests, self.lookup = digests, lookup
        self._chunks: dict[int, np.ndarray] = {}
        self.chunks_read = 0  # how many chunks were read from the store

    @property
    def identity(self) -> str | None:
        """The sha256 of the recorded chunk digests, and of the length and chunk, or None.

        Two vectors with the same identity hold the same values (each chunk read is checked
        against its digest); None when no digest was recorded (an older store).
        """
        if self.digests is None:
            return None
        h = hashlib.sha256(f"{self.n} {self.chunk}".encode())
        for d in self.digests:
            h.update(b"\n" + d.encode())
        return h.hexdigest()

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

    def iter_chunks(self) -> Iterator[np.ndarray]:
        """Each chunk in order, ndarray of object, read (checked) without keeping it."""
        for i in range(-(-self.n // self.chunk)):
            if i in self._chunks:
                yield self._chunks[i]
            else:
                self.chunks_read += 1
                yield np.asarray(self._read_chunk(i)).astype(object, copy=False)

    def read(self) -> np.ndarray:
        """All values, ndarray of shape (n,), object."""
        parts = [self._get(i) for i in range(-(-self.n // self.chunk))]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=object)

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Values at ``positions`` (int, each in [0, n)), ndarray of the same shape, object."""
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty(positions.shape, dtype=object)
        which = positions // self.chunk
        for i in sorted(set(which.ravel().tolist())):  # np.unique would import numpy.ma
            here = which == i
            out[here] = self._get(i)[positions[here] - i * self.chunk]
        return out

    def find(self, values: list[str]) -> np.ndarray:
        """Position of the first element equal to each of ``values``, -1 where none is.

        With a :attr:`lookup`, only the chunks of the positions it names are read, and a
        position counts only if the (checked) value there is the one asked; a value it does
        not place is searched as without one. Without, chunks are read in order until every
        value is found (all of them when one is not).

        Returns
        -------
        ndarray of shape (len(values),), int64
        """
        wanted = {str(v) for v in values}
        found: dict[str, int] = {}
        if self.lookup is not None and wanted:
            asked = sorted(wanted)
            for v, places in zip(asked, self.lookup(asked), strict=True):
                for p in np.sort(np.asarray(places, dtype=np.int64)).tolist():
                    if 0 <= p < self.n and self._get(p // self.chunk)[p % self.chunk] == v:
                        found[v] = p  # the first: every position of the value is a candidate
                        break
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
