"""Read handles on tagged sphdist stores, each read checked against concurrent commits.

:class:`TaggedStore` is the base of a model's and an embedding's read handle: opening checks
the tag and every array, reads are checked against the version the handle opened (a commit
meanwhile raises :class:`~sphdist.errors.StoreReplacedError`, :func:`replaced_error`), and
:func:`read_unit_columns` reads unit columns (the V of a model, an embedding) chunk by chunk,
each chunk checked against its recorded sha256 and its norms.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import zarr

from sphdist.errors import ModelFormatError, StoreReplacedError
from sphdist.io._checked import content_sha256, read_checked, require_chunks
from sphdist.io._fs import location
from sphdist.io._schema import Array, Attr, check_arrays, check_attrs
from sphdist.io._targets import open_target
from sphdist.io._zarr import UNIT_TOLERANCE, check_members, open_tagged

__all__ = [
    "TaggedStore",
    "read_unit_columns",
    "replaced_error",
]

logger = logging.getLogger("sphdist")


def replaced_error(path: Any) -> StoreReplacedError:
    """The error of a read that met a commit of ``path`` (see :class:`TaggedStore`)."""
    return StoreReplacedError(
        f"{path} was replaced while reading; run it again (another process committed a new "
        "version of it meanwhile)."
    )


class TaggedStore:
    """Read handle on a sphdist group tagged :attr:`KIND` of :attr:`FORMAT_VERSION`.

    Opening checks the tag and every array (:func:`open_tagged`, :func:`check_members`), and
    the store against the schema of its kind (:attr:`_ARRAYS`, :attr:`_ATTRS`,
    :meth:`_check_schema`);
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
    #: the schema of the kind (:mod:`sphdist.io._schema`): its arrays, its groups and the
    #: JSON types of its attributes, checked at opening (:meth:`_check_schema`)
    _ARRAYS: dict[str, Array] = {}
    _GROUPS: tuple[str, ...] = ()
    _ATTRS: dict[str, Attr] = {}

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
        self._recorded_remedy()
        self._check_schema()

    def _recorded_remedy(self) -> None:
        """Set :attr:`_REWRITE` from what the store records (the job that wrote it), if it can."""

    def _rebuild(self) -> Any:
        """The remedy of a store outside its schema: :attr:`_REWRITE` (a subclass adds more)."""
        return self._REWRITE

    def _check_schema(self) -> None:
        """Refuse a store outside the schema of its kind (metadata only, no chunk is read).

        A node the kind has no place for, an array of another dtype or number of dimensions,
        an attribute of another JSON type (:mod:`sphdist.io._schema`); a subclass adds the
        shapes its attributes imply.
        """
        where = self.location
        check_arrays(self._group, self._ARRAYS, path=where, kind=self.KIND,
                     error=ModelFormatError, remedy=self._rebuild, groups=self._GROUPS)
        check_attrs(self.attrs, self._ATTRS, path=where, kind=self.KIND, error=ModelFormatError,
                    remedy=self._rebuild)

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
        of a few columns, such as a neighbour query of one document, reads a few chunks).

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
                f"{location}: {name} (columns {start}:{start + c}) is corrupted ("
                f"{type(exc).__name__}: {exc}). To resolve this, " + remedy + "."
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
            "vectors. To resolve this, " + remedy + "."
        )
    if digests is not None and (len(digests) != -(-arr.shape[1] // c) or content_sha256(block)
                                != digests[block_id[1]]):  # last: the
        # checks above name more (a column swap keeps every column a unit vector)
        if target.replaced(version, failed=True):
            raise replaced_error(target.path)
        raise ModelFormatError(
            f"{location}: {name} (columns {start}:{start + c}) does not match its recorded "
            "sha256 (the stored values were changed or damaged). To resolve this, " + remedy + "."
        )
    return block
