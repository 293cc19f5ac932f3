"""The ``index.zarr`` format: a nearest-neighbour index of a model's embeddings (``sphdist index``).

::

    index.zarr/                  zarr v3 group
      faiss       (n_bytes,)     uint8     faiss.serialize_index of the index (ids: document
                                           positions in the documents it was built from)

with attributes ``sphdist = {"kind": "index", "format_version": 1}``, ``faiss_sha256`` (the
sha256 of the serialized bytes, checked on every read), ``index`` (``kind`` flat or ivf,
``nlist``, ``nprobe``, ``n_documents``, ``n_indexed``, ``n_components``, ``metric``,
``faiss_version``), ``model`` (``path``, ``u_sha256``: the model whose embedding was indexed)
and ``source`` (``origin`` model or embedding, ``path``, ``n_documents``).

:func:`write_index` builds the group in a sibling staging directory and commits it atomically
(:mod:`sphdist.io._atomic`: a rename on a disk, a manifest in an object store), so a reader
sees a complete index or none; :func:`open_index` refuses another kind, a damaged array, and
bytes that do not match ``faiss_sha256``. Building and searching the index is
:mod:`sphdist.methods.neighbors`; the job that writes one, :mod:`sphdist.jobs.neighbors`.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import zarr

from sphdist.errors import ModelFormatError
from sphdist.io._atomic import exists, open_target
from sphdist.io._fs import location
from sphdist.io._zarr import (
    CHECKSUMMED,
    WRITE_CONFIG,
    TaggedStore,
    content_sha256,
    json_clean,
    open_node,
    read_checked,
    read_tag,
)

__all__ = ["FORMAT_VERSION", "KIND", "StoredIndex", "open_index", "write_index", "index_kind"]

FORMAT_VERSION = 1
KIND = "index"  # the group attribute sphdist.kind
_BYTES_CHUNK = 1 << 24  # 16 MiB of serialized index per zarr chunk

_WRITE = "sphdist index --model MODEL --output INDEX"


def index_kind(path: str | os.PathLike[str]) -> str | None:
    """The ``sphdist.kind`` tag at ``path`` (``"index"``, ``"model"``...), None if none is there."""
    path = location(path)
    if not exists(path):
        return None
    try:
        node = open_node(path, missing="", unreadable=str, error=ModelFormatError, group=True)
    except Exception:  # not a group: the opener says what it is
        return None
    return read_tag(node).get("kind")


def write_index(
    path: str | os.PathLike[str], data: np.ndarray, *, attrs: dict[str, Any],
) -> StoredIndex:
    """Write the serialized index ``data`` and its record, committed atomically to ``path``.

    Parameters
    ----------
    path : path-like
        The ``index.zarr`` to write (a path or a URL); a previous one there is replaced. The
        caller holds :func:`sphdist.io.output_lock` on it.
    data : ndarray of shape (n_bytes,), uint8
        ``faiss.serialize_index`` of the index.
    attrs : dict
        ``index``, ``model`` and ``source`` (see the module's layout); JSON-serialisable.

    Returns
    -------
    StoredIndex

    Notes
    -----
    Memory: ``data`` itself; it is written 16 MiB chunk by chunk, zstd with checksum.
    """
    path = location(path)
    data = np.ascontiguousarray(data, dtype=np.uint8).ravel()
    target = open_target(path)
    staging = target.staging()
    try:
        group = zarr.open_group(store=str(staging), mode="w-")
        arr = group.create_array(
            "faiss", shape=data.shape, dtype=np.uint8,
            chunks=(max(1, min(data.shape[0], _BYTES_CHUNK)),), compressors=CHECKSUMMED,
            config=WRITE_CONFIG,
        )
        arr[:] = data
        group.attrs.update(json_clean({
            **attrs, "faiss_sha256": content_sha256(data),
            "sphdist": {"kind": KIND, "format_version": FORMAT_VERSION},
        }))
        target.commit(staging)
    except BaseException:
        target.discard(staging)
        raise
    return StoredIndex(path)


class StoredIndex(TaggedStore):
    """Read handle on an ``index.zarr`` written by ``sphdist index``.

    Parameters
    ----------
    path : path-like

    Raises
    ------
    InputNotFoundError
        If nothing is at ``path``.
    ModelFormatError
        If ``path`` is not a sphdist index (another sphdist kind is named as such), or an
        array of it is missing or unsafe.
    """

    KIND = KIND
    FORMAT_VERSION = FORMAT_VERSION
    _MISSING = f"write one with `{_WRITE}`"
    _STALE = _REWRITE = f"write it again with `{_WRITE} --overwrite`"

    def __init__(self, path: str | os.PathLike[str]):
        found = index_kind(path)
        if found not in (None, KIND):
            raise ModelFormatError(
                f"{location(path)} is a sphdist {found}, not a sphdist index. To resolve this, "
                f"pass an index written by `{_WRITE}`."
            )
        super().__init__(path)

    @property
    def record(self) -> dict[str, Any]:
        """The ``index`` attribute: kind, nlist, nprobe, n_documents, n_indexed, ..."""
        return dict(self.attrs.get("index") or {})

    @property
    def model(self) -> dict[str, Any]:
        """The ``model`` attribute: ``path`` and ``u_sha256`` of the model indexed."""
        return dict(self.attrs.get("model") or {})

    @property
    def source(self) -> dict[str, Any]:
        """The ``source`` attribute: ``origin``, ``path`` and ``n_documents`` of the documents."""
        return dict(self.attrs.get("source") or {})

    def data(self) -> np.ndarray:
        """The serialized faiss index, ndarray of shape (n_bytes,), uint8.

        Raises
        ------
        ModelFormatError
            If a chunk is missing or does not decode, or the bytes do not match the recorded
            ``faiss_sha256`` (the message names the path and the rebuild command).
        """
        # a path recorded relative to where the index was built names nothing from here
        model, where = _anywhere(self.model.get("path"), "MODEL")
        embedding, also = _anywhere(self.source.get("path"), "EMBEDDING")
        remedy = ("write it again with `sphdist index --model " + model
                  + (f" --input {embedding}" if self.source.get("path") else "")
                  + f" --output {self.path} --overwrite`" + where + also)
        sha = self.attrs.get("faiss_sha256")
        if not isinstance(sha, str):
            raise ModelFormatError(
                f"{self.location}: no faiss_sha256 recorded. To resolve this, {remedy}."
            )
        return read_checked(self._group["faiss"], str(self.location), "faiss",
                            error=ModelFormatError, remedy=remedy, sha256=sha,
                            digest="faiss_sha256")


def _anywhere(path: Any, placeholder: str) -> tuple[str, str]:
    """``path`` if it names the same file from any directory (absolute, a URL), else a placeholder.

    Returns the name for a command, and a note saying what the placeholder stands for.
    """
    if not path:
        return placeholder, ""
    text = str(path)
    if "://" in text or os.path.isabs(text):
        return text, ""
    return placeholder, (f" ({placeholder}: recorded as {text}, relative to the directory the "
                         "index was built in)")


def open_index(path: str | os.PathLike[str]) -> StoredIndex:
    """Open an ``index.zarr``; see :class:`StoredIndex`."""
    return StoredIndex(path)
