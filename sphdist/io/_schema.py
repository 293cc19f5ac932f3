"""What every sphdist store may hold: the types of its arrays and attributes, checked at opening.

The digests of a store cover the bytes of its values, not their meaning: an array rewritten as
another dtype with its digest recomputed, a stray array, an attribute of another JSON type all
passed them (issue 43 item 10). Each store kind states its schema here in the same terms (an
:class:`Array` per array name, an :class:`Attr` per attribute path) and its opener calls
:func:`check_arrays` and :func:`check_attrs`: from the arrays' metadata and the group's
attributes alone, no chunk is read. A refusal names the store, the array or attribute, what it
holds and what a store of that kind holds there, and the job that writes the store again.

The values themselves (finite, unit columns, orthonormal) are checked when they are read, by
the readers of each kind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from sphdist.errors import SphdistError, Text

__all__ = [
    "Array",
    "Attr",
    "check_arrays",
    "check_attrs",
    "check_shape",
    "under",
    "INT",
    "NUMBER",
    "BOOL",
    "STR",
    "LIST",
    "MAPPING",
    "NULL",
]

#: The JSON types an attribute may have, by the words a message gives them. ``INT`` is an
#: integer (never a bool, which Python counts as one); ``NUMBER`` an integer or a float.
INT, NUMBER, BOOL, STR, LIST, MAPPING, NULL = (
    "an integer", "a number", "a bool", "a string", "a list", "a mapping", "null")

_EDITED = "the store was edited or is another's"


def _is(value: Any, kind: str) -> bool:
    """Whether ``value`` (as JSON reads it) is of the JSON type ``kind``."""
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == NUMBER:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, {BOOL: bool, STR: str, LIST: list, MAPPING: dict,
                              NULL: type(None)}[kind])


def _found(value: Any) -> str:
    """``value`` in words: its JSON type and (short) value."""
    for kind in (BOOL, INT, NUMBER, STR, LIST, MAPPING, NULL):
        if _is(value, kind):
            break
    else:
        kind = type(value).__name__
    if kind == NULL:
        return "null"
    text = repr(value)
    return f"{kind.split(' ', 1)[1]} {text if len(text) <= 40 else text[:37] + '...'}"


@dataclasses.dataclass(frozen=True)
class Array:
    """What a store holds as one array: its dtype, its number of dimensions, in words.

    Attributes
    ----------
    kinds : str
        The numpy dtype kinds accepted (``"f"`` floats, ``"iu"`` integers, ``"b"`` bool,
        ``"TUO"`` strings).
    ndim : int
        Its number of dimensions.
    holds : str
        What it holds, for the message (``"one integer label code per document"``).
    dtype : str, optional
        The one dtype accepted (``"float64"``), where the kind is not enough.
    """

    kinds: str
    ndim: int
    holds: str
    dtype: str | None = None


@dataclasses.dataclass(frozen=True)
class Attr:
    """What a store holds as one attribute: its JSON types, and of the items of a list.

    Attributes
    ----------
    types : tuple of str
        The JSON types accepted (:data:`INT`, :data:`STR`, ...).
    holds : str
        What it holds, for the message (``"the number of features"``).
    items : tuple of str, optional
        The JSON types of each item, for a list.
    length : int, optional
        The number of items, for a list.
    required : bool, default False
        Refuse a store without it (else an absent attribute is one of an older store).
    """

    types: tuple[str, ...]
    holds: str
    items: tuple[str, ...] = ()
    length: int | None = None
    required: bool = False

    def wanted(self) -> str:
        """The types accepted, in words (``"an integer or null"``)."""
        words = " or ".join(self.types)
        if self.items:
            count = f"{self.length} " if self.length is not None else ""
            words = words.replace(LIST, f"a list of {count}" + " or ".join(
                t.split(" ", 1)[1] + "s" for t in self.items))
        return words

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` is of one of :attr:`types` (its items of :attr:`items`)."""
        if not any(_is(value, t) for t in self.types):
            return False
        if isinstance(value, list) and self.items:
            return (self.length is None or len(value) == self.length) and all(
                any(_is(v, t) for t in self.items) for v in value)
        return True


def under(prefix: str, schema: Mapping[str, Attr]) -> dict[str, Attr]:
    """``schema`` with each path under ``prefix`` (``under("corpus", {"tfidf": ...})``)."""
    return {f"{prefix}.{name}": spec for name, spec in schema.items()}


def check_arrays(
    arrays: Mapping[str, Any], schema: Mapping[str, Array], *, path: Any, kind: str,
    error: type[SphdistError], remedy: str | Text | Callable[[], str | Text],
    groups: Iterable[str] = (), beside: str = "",
) -> None:
    """Refuse an array (or group) the schema has no place for, or of another dtype or ndim.

    Parameters
    ----------
    arrays : mapping
        The nodes of the store by path (``"U"``, ``"state/XVt"``), as opened: zarr arrays,
        or groups (whose paths must be in ``groups``). Their metadata alone is read.
    schema : mapping
        :class:`Array` by path.
    path : path-like
        The store, for the message.
    kind : str
        The store's kind, in words (``"corpus"``).
    error : type
        The exception of the store's kind.
    remedy : str, Text or callable
        Completes "To resolve this, ...": the job that writes the store again (a callable:
        worded only when a message needs it).
    groups : iterable of str
        The paths of the groups it may hold (``"state"``).
    beside : str
        More of what it holds, for the message of a stray node (``" and the chunks under X"``).

    Raises
    ------
    error
        Naming ``path``, the node, what it holds and what a store of ``kind`` holds there.
    """
    groups = set(groups)

    def fix() -> str | Text:
        return remedy() if callable(remedy) else remedy

    for name in sorted(arrays):
        node = arrays[name]
        spec = schema.get(name)
        if spec is None or not hasattr(node, "dtype"):
            if name in groups and not hasattr(node, "dtype"):
                continue
            raise error(
                f"{path}: {name} is no array of a sphdist {kind} (it holds "
                f"{', '.join(schema)}{beside}): {_EDITED}. To resolve this, " + fix() + "."
            )
        dtype = np.dtype(node.dtype)
        if dtype.kind not in spec.kinds or spec.dtype is not None and dtype.name != spec.dtype:
            raise error(
                f"{path}: {name} is stored as {dtype}, where a sphdist {kind} holds "
                f"{spec.holds}: {_EDITED}. To resolve this, " + fix() + "."
            )
        if len(node.shape) != spec.ndim:
            raise error(
                f"{path}: {name} has shape {tuple(node.shape)} ({_dimensions(len(node.shape))}), "
                f"where a sphdist {kind} holds {spec.holds} ({_dimensions(spec.ndim)}): "
                f"{_EDITED}. To resolve this, " + fix() + "."
            )


def _dimensions(ndim: int) -> str:
    """``"1 dimension"``, ``"2 dimensions"``."""
    return f"{ndim} dimension{'' if ndim == 1 else 's'}"


def check_shape(
    arrays: Mapping[str, Any], name: str, wanted: tuple[int | None, ...], because: str, *,
    path: Any, error: type[SphdistError], remedy: str | Text | Callable[[], str | Text],
) -> None:
    """Refuse array ``name`` (if there is one) unless its shape is ``wanted``.

    ``None`` in ``wanted`` accepts any length on that axis; ``because`` says where the lengths
    come from (``"U has r = 2 columns and n = 300 documents are recorded"``).
    """
    node = arrays.get(name)
    if node is None or not hasattr(node, "shape"):
        return
    shape = tuple(int(s) for s in node.shape)
    if len(shape) != len(wanted) or any(w is not None and s != w
                                        for s, w in zip(shape, wanted, strict=True)):
        said = "(" + ", ".join("any" if w is None else str(w) for w in wanted) + \
            ("," if len(wanted) == 1 else "") + ")"
        raise error(
            f"{path}: {name} has shape {shape}, where {because}, it should have shape {said}: "
            f"{_EDITED}. To resolve this, " + (remedy() if callable(remedy) else remedy) + "."
        )


def check_attrs(
    attrs: Mapping[str, Any], schema: Mapping[str, Attr], *, path: Any, kind: str,
    error: type[SphdistError], remedy: str | Text | Callable[[], str | Text],
) -> None:
    """Refuse an attribute of another JSON type than the schema's (or a required one absent).

    Parameters
    ----------
    attrs : mapping
        The group attributes, as JSON reads them.
    schema : mapping
        :class:`Attr` by dotted path (``"params.n_components"``,
        ``"corpus.feature_scheme.ngram_range"``), parents before their children. The
        attribute of a path whose parent is absent is not looked for.
    path, kind, error
        As :func:`check_arrays`.
    remedy : str, Text or callable
        As :func:`check_arrays`; a callable is worded only when a message needs it.

    Raises
    ------
    error
        Naming ``path``, the attribute, the value found and the types a store of ``kind``
        holds there.
    """
    for name, spec in schema.items():
        *parents, key = name.split(".")
        holder: Any = attrs
        for p in parents:
            holder = holder.get(p) if isinstance(holder, Mapping) else None
        if not isinstance(holder, Mapping):
            continue  # the parent is absent (or refused before this)
        if key not in holder:
            if not spec.required:
                continue
            said = "is missing"
        elif spec.accepts(holder[key]):
            continue
        else:
            said = "is the " + _found(holder[key])
        fix = remedy() if callable(remedy) else remedy
        raise error(
            f"{path}: attribute {name} {said}, where a sphdist {kind} holds {spec.holds}, "
            f"{spec.wanted()}: {_EDITED}. To resolve this, " + fix + "."
        )
