"""Many short strings held as their UTF-8 bytes end to end, not as a Python string each.

Here, below both the storage layer (a corpus writer's document ids, :mod:`sphdist.io._zarr`)
and the text layer (a listed tree's paths, :mod:`sphdist.text.sources`), so that both hold
strings the same way without either importing the other's modules (nor zarr: the listing does
not need it). NumPy only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

__all__ = ["PackedStrings"]

#: Strings decoded at once when the packed strings are iterated over (:meth:`__iter__`).
_ITER_BLOCK = 4096


class PackedStrings:
    """Strings held as their UTF-8 bytes end to end: about 8 bytes a string besides them.

    A Python string of 25 characters is 74 bytes and 8 of pointer in a list or tuple; packed,
    it is its 25 bytes, 4 of byte length and 4 of length in characters (issue 43: a corpus
    writer's document ids, the paths of a listed tree of 144,000 documents).

    Parameters
    ----------
    values : iterable of str, optional
        The first strings (:meth:`extend`).
    errors : {"strict", "surrogatepass"}, default "strict"
        How lone surrogates are encoded. ``"strict"`` refuses them, as zarr's ``vlen-utf8``
        codec does: what is stored with :func:`sphdist.io._zarr.write_vector` (which takes
        only these). ``"surrogatepass"`` keeps any ``str`` (file names that are not UTF-8
        arrive as lone surrogates, ``os.fsdecode``), and gives it back as it was.

    Notes
    -----
    Equal when they hold the same strings (and ``errors``); the hash covers the bytes, so a
    value used as a key (a frozen dataclass holding one) must not be extended after.
    """

    def __init__(self, values: Iterable[Any] = (), *, errors: str = "strict") -> None:
        if errors not in ("strict", "surrogatepass"):
            raise ValueError(f"errors={errors!r}: 'strict' or 'surrogatepass'")
        self.errors = errors
        self._utf8 = bytearray()
        self._sizes: list[np.ndarray] = []  # UTF-8 bytes of each string (int32), per extend
        self._lengths: list[np.ndarray] = []  # characters of each string (int32), per extend
        self.extend(values)

    def extend(self, values: Iterable[Any]) -> None:
        """Append the strings of ``values`` (an iterable of ``str``; others by their str).

        Raises
        ------
        UnicodeEncodeError
            If a string holds a lone surrogate and ``errors`` is ``"strict"``; nothing is
            appended then.
        """
        items = [v if type(v) is str else str(v) for v in values]
        if not items:
            return
        data = [v.encode("utf-8", self.errors) for v in items]
        # int32: a string of 2 GiB or more is no id, term or path (numpy raises, never wraps)
        self._sizes.append(np.fromiter(map(len, data), dtype=np.int32, count=len(data)))
        self._lengths.append(np.fromiter(map(len, items), dtype=np.int32, count=len(items)))
        for d in data:
            self._utf8 += d

    def __len__(self) -> int:
        return sum(s.shape[0] for s in self._sizes)

    @property
    def utf8(self) -> memoryview:
        """The strings' UTF-8 bytes, end to end (a read-only view)."""
        return memoryview(self._utf8).toreadonly()

    def ends(self) -> tuple[np.ndarray, np.ndarray]:
        """The end of each string in :attr:`utf8` (int64), and its length in characters (int64)."""
        if len(self._sizes) != 1:
            sizes = np.concatenate(self._sizes) if self._sizes else np.zeros(0, np.int32)
            lengths = np.concatenate(self._lengths) if self._lengths else sizes
            self._sizes, self._lengths = [sizes], [lengths]
        return np.cumsum(self._sizes[0], dtype=np.int64), self._lengths[0].astype(np.int64)

    def block(self, a: int, b: int) -> np.ndarray:
        """Strings ``a`` to ``b`` (exclusive) as a 1-D object array of ``str``."""
        ends, _ = self.ends()
        starts = np.concatenate([ends[a - 1:a] if a else [0], ends[a:b - 1]]).astype(np.int64)
        view, errors = memoryview(self._utf8), self.errors
        return np.fromiter((str(view[i:j], "utf-8", errors) for i, j in zip(starts, ends[a:b],
                                                                            strict=True)),
                           dtype=object, count=max(0, b - a))

    def __iter__(self) -> Iterator[str]:
        """The strings in order, decoded :data:`_ITER_BLOCK` at a time."""
        n = len(self)
        for a in range(0, n, _ITER_BLOCK):
            yield from self.block(a, min(a + _ITER_BLOCK, n)).tolist()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PackedStrings):
            return NotImplemented
        return (self.errors == other.errors and self._utf8 == other._utf8
                and np.array_equal(self.ends()[0], other.ends()[0]))

    def __hash__(self) -> int:
        return hash((self.errors, bytes(self._utf8), self.ends()[0].tobytes()))

    def __repr__(self) -> str:
        return f"PackedStrings({len(self)} strings, {len(self._utf8)} bytes)"
