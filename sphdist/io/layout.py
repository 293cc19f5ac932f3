"""The ``layout.zarr`` format: 2-D coordinates of a model's documents and their k-NN graph.

::

    layout.zarr/                 zarr v3 group
      xy          (2, n)         float64   column j: the map coordinates of document j (NaN
                                           for a document without a direction, left out)
      neighbors   (k, n)         int64     column j: the positions of document j's k nearest
                                           other documents in r dimensions, nearest first
                                           (-1 where there are fewer)
      cosine      (k, n)         float64   their cosines

every array in chunks of 65,536 documents, with attributes
``sphdist = {"kind": "layout", "format_version": 1}``, ``model`` (``path``, ``u_sha256``: the
model whose embedding was laid out), ``source`` (``origin`` model or embedding, ``path``,
``n_documents``, ``v_sha256``: the sha256 of the recorded digests of the V laid out, so a
layout is refused for any other V, :meth:`Layout.check_fresh`), ``layout`` (``method``,
``k``, ``seed``, ``n_iter``, ``index``, ``kept_10nn``, ``seconds``, the library's version) and
``sha256`` (one :func:`~sphdist.io._checked.chunk_sha256` digest per chunk of each array,
checked when read).

:func:`write_layout` builds the group in a sibling staging directory and commits it through
the held :class:`~sphdist.io.Output` (a rename on a disk, a manifest in an object store), so a
reader sees a complete layout or none. The job that computes one is :mod:`sphdist.jobs.layout`.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

import numpy as np
import zarr

from sphdist.errors import ModelFormatError, Remedy, Text, remedy
from sphdist.io._atomic import Output
from sphdist.io._checked import chunk_sha256
from sphdist.io._schema import INT, MAPPING, NULL, NUMBER, STR, Array, Attr, check_shape
from sphdist.io._tagged import TaggedStore
from sphdist.io._zarr import CHECKSUMMED, WRITE_CONFIG, json_clean

__all__ = ["FORMAT_VERSION", "KIND", "Layout", "open_layout", "write_layout", "v_identity"]

FORMAT_VERSION = 1
KIND = "layout"  # the group attribute sphdist.kind
_CHUNK = 1 << 16  # documents per stored chunk

_ARRAYS = {"xy": np.float64, "neighbors": np.int64, "cosine": np.float64}

#: What a layout holds (:func:`~sphdist.io._schema.check_arrays`), read back.
_SCHEMA: dict[str, Array] = {
    "xy": Array("f", 2, "the map coordinates, a (2, n) float64 array", "float64"),
    "neighbors": Array("i", 2, "the positions of each document's k nearest, a (k, n) int64 "
                       "array", "int64"),
    "cosine": Array("f", 2, "their cosines, a (k, n) float64 array", "float64"),
}

#: The JSON types of a layout's attributes (:func:`~sphdist.io._schema.check_attrs`).
_ATTRS: dict[str, Attr] = {
    "model": Attr((MAPPING,), "the model whose embedding was laid out"),
    "model.path": Attr((STR, NULL), "the path of the model"),
    "model.u_sha256": Attr((STR,), "the fingerprint of the model"),
    "source": Attr((MAPPING,), "the documents laid out"),
    "source.origin": Attr((STR,), "where the embeddings came from (model or embedding)"),
    "source.path": Attr((STR, NULL), "the path of the embedding"),
    "source.n_documents": Attr((INT,), "the number of documents"),
    "source.v_sha256": Attr((STR, NULL), "the identity of the V laid out"),
    "layout": Attr((MAPPING,), "the record of the layout"),
    "layout.k": Attr((INT,), "the neighbours per document"),
    "layout.seed": Attr((INT,), "the seed"),
    "layout.n_iter": Attr((INT,), "the t-SNE steps"),
    "layout.method": Attr((STR,), "the method, in words"),
    "layout.kept_10nn": Attr((NUMBER, NULL), "the share of 10 nearest neighbours kept"),
    "sha256": Attr((MAPPING,), "the sha256 of each chunk of each array"),
}


def _write(**overrides: Any) -> Text:
    """The layout job, as a remedy."""
    return remedy(Remedy("layout", {"model": "MODEL"}, {"output": "LAYOUT", **overrides}))


def v_identity(digests: Any) -> str | None:
    """The identity of a stored V: hex sha256 of its recorded chunk digests, None if none.

    >>> v_identity(["ab", "cd"]) == v_identity(["ab", "cd"]), v_identity(None)
    (True, None)
    """
    if not isinstance(digests, list) or not digests:
        return None
    return hashlib.sha256(json.dumps(digests).encode()).hexdigest()


def write_layout(
    out: Output, *, xy: np.ndarray, neighbors: np.ndarray, cosine: np.ndarray,
    attrs: dict[str, Any],
) -> Layout:
    """Write a layout through the held ``out`` and commit it atomically.

    Parameters
    ----------
    out : Output
        The held ``layout.zarr`` (:func:`sphdist.jobs.run` holds it).
    xy : ndarray of shape (2, n), float64
    neighbors : ndarray of shape (k, n), int64
    cosine : ndarray of shape (k, n), float64
    attrs : dict
        ``model``, ``source`` and ``layout`` (see the module's layout); JSON-serialisable.

    Returns
    -------
    Layout

    Raises
    ------
    OutputLockedError
        If ``out``'s lock is no longer held; nothing is committed.
    """
    values = {"xy": xy, "neighbors": neighbors, "cosine": cosine}
    staging = out.staging()
    try:
        group = zarr.open_group(store=str(staging), mode="w-")
        digests = {}
        for name, dtype in _ARRAYS.items():
            a = np.ascontiguousarray(values[name], dtype=dtype)
            c = max(1, min(_CHUNK, a.shape[1]))
            arr = group.create_array(name, shape=a.shape, dtype=dtype, chunks=(a.shape[0], c),
                                     compressors=CHECKSUMMED, config=WRITE_CONFIG)
            arr[...] = a
            digests[name] = chunk_sha256(a, c)
        group.attrs.update(json_clean({
            **attrs, "sha256": digests,
            "sphdist": {"kind": KIND, "format_version": FORMAT_VERSION},
        }))
        out.commit(staging)
    except BaseException:
        out.discard(staging)
        raise
    return Layout(out.path)


class Layout(TaggedStore):
    """Read handle on a ``layout.zarr`` written by ``sphdist layout``.

    Parameters
    ----------
    path : path-like

    Raises
    ------
    InputNotFoundError
        If nothing is at ``path`` (the message names the command that writes one).
    ModelFormatError
        If ``path`` is not a sphdist layout, or an array of it is missing or unsafe.
    """

    KIND = KIND
    FORMAT_VERSION = FORMAT_VERSION
    _MISSING = "write one with " + _write()
    _STALE = _REWRITE = "write it again with " + _write(overwrite=True)
    _ARRAYS = _SCHEMA
    _ATTRS = _ATTRS

    def _recorded_remedy(self) -> None:
        model, source = self.attrs.get("model"), self.attrs.get("source")
        path = model.get("path") if isinstance(model, dict) else None
        given = source.get("path") if isinstance(source, dict) else None
        if isinstance(path, str) and path:
            target = {"model": path, **({"input": given} if isinstance(given, str) and given
                                        else {})}
            self._REWRITE = "write it again with " + remedy(Remedy(
                "layout", target, {"output": str(self.path), "overwrite": True}))

    def _check_schema(self) -> None:
        """The schema, and the shapes the record implies: 2 x n, k x n and k x n."""
        super()._check_schema()
        n = (self.attrs.get("source") or {}).get("n_documents")
        k = (self.attrs.get("layout") or {}).get("k")
        check = {"path": self.location, "error": ModelFormatError, "remedy": self._REWRITE}
        documents = (f"attribute source.n_documents says n = {n} documents" if n is not None
                     else "")
        check_shape(self._group, "xy", (2, n), documents or "a layout holds 2 coordinates per "
                    "document", **check)
        if k is not None or n is not None:
            said = " and ".join(x for x in (
                f"attribute layout.k says k = {k}" if k is not None else "", documents) if x)
            for name in ("neighbors", "cosine"):
                check_shape(self._group, name, (k, n), said, **check)

    @property
    def rebuild(self) -> Text:
        """The remedy of every refusal: the command that writes this layout again."""
        return self._REWRITE

    @property
    def record(self) -> dict[str, Any]:
        """The ``layout`` attribute: method, k, seed, n_iter, kept_10nn, ..."""
        return dict(self.attrs.get("layout") or {})

    @property
    def n_documents(self) -> int:
        """n, from the metadata of ``xy``."""
        return int(self._array("xy").shape[1])

    def read(self, name: str) -> np.ndarray:
        """All of ``name`` (``xy``, ``neighbors`` or ``cosine``), each chunk checked.

        Returns
        -------
        ndarray of shape (2, n) or (k, n)
            Bitwise as stored.

        Raises
        ------
        ModelFormatError
            If a chunk is missing, does not decode or does not match its recorded digest.
        """
        digests = (self.attrs.get("sha256") or {}).get(name)
        if not isinstance(digests, list):
            raise ModelFormatError(f"{self.location}: no digest of {name} recorded. To "
                                   "resolve this, " + self.rebuild + ".")
        return self._read(name, digests)

    def check_fresh(self, *, u_sha256: str, v_sha256: str | None, n_documents: int,
                    what: str) -> None:
        """Refuse a layout of another fit or another V than the one given.

        Parameters
        ----------
        u_sha256 : str
            The fingerprint of the model now (:attr:`sphdist.io.model.Model.fingerprint`).
        v_sha256 : str or None
            :func:`v_identity` of the V laid out now (None: not compared).
        n_documents : int
        what : str
            The model or embedding, for the message.

        Raises
        ------
        ModelFormatError
            If the layout was computed from another model (refitted since), another V, or
            another number of documents; the message names the command that rebuilds it.
        """
        model = self.attrs.get("model") or {}
        source = self.attrs.get("source") or {}
        stale = None
        if model.get("u_sha256") != u_sha256:
            stale = f"it was computed from another fit than {what} (refitted since)"
        elif v_sha256 is not None and source.get("v_sha256") not in (None, v_sha256):
            stale = f"it was computed from other embeddings than those of {what} now"
        elif self.n_documents != n_documents:
            stale = (f"it lays out {self.n_documents} documents, {what} has {n_documents}")
        if stale:
            raise ModelFormatError(f"{self.path} is older than its model: {stale}. To resolve "
                                   "this, " + self.rebuild + ".")


def open_layout(path: str | os.PathLike[str]) -> Layout:
    """Open a ``layout.zarr``; see :class:`Layout`."""
    return Layout(path)
