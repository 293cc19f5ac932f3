"""The ``index.zarr`` format: a nearest-neighbour index of a model's embeddings (``sphdist index``).

::

    index.zarr/                  zarr v3 group
      faiss       (n_bytes,)     uint8     faiss.serialize_index of the index (ids: document
                                           positions in the documents it was built from),
                                           one uncompressed chunk: its file faiss/c/0 is the
                                           serialized index byte for byte, memory-mapped

      doc_ids     (n,)           str       the ids of the documents indexed (a copy of the
                                           ids of the corpus or embedding, chunks of 8,192)
      doc_id_lookup (2, n)       uint64    row 0: :func:`id_hashes` of those ids, sorted;
                                           row 1: the position of each (chunks of 65,536)

with attributes ``sphdist = {"kind": "index", "format_version": 1}``, ``faiss_sha256`` (the
sha256 of the serialized bytes: verified when the index is written and by its full check,
:meth:`StoredIndex.verify`), ``faiss_nbytes`` and ``faiss_sample_sha256`` (the size, and the
sha256 of the first and the last MiB: checked on every read), ``index`` (``kind`` flat or ivf,
``nlist``, ``nprobe``, ``n_documents``, ``n_indexed``, ``n_components``, ``metric``,
``faiss_version``),
``model`` (``path``, ``u_sha256``: the model whose embedding was indexed), ``source``
(``origin`` model or embedding, ``path``, ``n_documents``) and ``doc_ids`` (``chunk_sha256``
of the copy, one digest per chunk; ``source_identity``, the
:attr:`~sphdist.io._checked.ChunkedVector.identity` of the ids copied: the copy is read only
for the very ids it was made of; ``lookup_sha256``, one digest per chunk of
``doc_id_lookup``; ``lookup_first``, the first hash of each of its chunks, as 16 hex digits).
``doc_ids`` and ``doc_id_lookup`` are absent from indexes written before them, and from
indexes of ids without recorded digests: a query then finds its document by reading the ids
of the corpus or embedding in order, as before.

**Finding a document** (:meth:`StoredIndex.ids`): the hash of the id asked, a binary search
of ``lookup_first``, one chunk of ``doc_id_lookup`` (each chunk read checked against its
digest) give the positions that may hold it; the chunk of the copy holding each position is
read (checked) and compared: one query reads about 1 MiB of the table and 8,192 ids, and the
ids of its hits only their chunks of 8,192, instead of every chunk of 131,072 ids up to the
document's.

**Reading** (:meth:`StoredIndex.load`): on a local disk the file is memory-mapped by faiss
(``faiss.IO_FLAG_MMAP``), so a query reads the pages of the lists it probes, not the whole
index; its size and sampled digest are checked first, and the loaded index is validated
structurally against its record (:func:`check_structure`: dimension, count, metric, kind,
nlist, nprobe, the lengths of the inverted lists); any faiss exception while reading becomes a
:class:`~sphdist.errors.ModelFormatError` naming the rebuild command. Elsewhere (an object
store), and for indexes written before the sample digest (zstd chunks of 16 MiB), the bytes are
read whole and checked against ``faiss_sha256``. :meth:`StoredIndex.verify` (the index job's
``check``) reads every byte and every id.

:func:`write_index` builds the group in a sibling staging directory and commits it atomically
(:mod:`sphdist.io._store`: a rename on a disk, a manifest in an object store), so a reader
sees a complete index or none. Building and searching the index is
:mod:`sphdist.methods.neighbors`; the job that writes one, :mod:`sphdist.jobs.neighbors`.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from sphdist.errors import ModelFormatError, Remedy, StoreReplacedError, remedy
from sphdist.io._atomic import Output, open_output
from sphdist.io._checked import (
    ChunkedVector,
    content_sha256,
    read_checked,
    read_chunk_checked,
)
from sphdist.io._fs import exists, is_remote, location
from sphdist.io._id_copy import (
    id_copy_problem,
    id_hashes,
    id_lookup,
    lookup_fences,
    write_id_copy,
)
from sphdist.io._schema import INT, LIST, MAPPING, NULL, NUMBER, STR, Array, Attr, check_shape
from sphdist.io._tagged import TaggedStore
from sphdist.io._zarr import WRITE_CONFIG, json_clean, open_node, read_tag

__all__ = [
    "FORMAT_VERSION", "KIND", "StoredIndex", "open_index", "write_index", "index_kind",
    "check_structure", "sample_sha256", "id_hashes",
]

FORMAT_VERSION = 1
KIND = "index"  # the group attribute sphdist.kind
_SAMPLE = 1 << 20  # bytes at each end of the serialized index whose digest every read checks


def _write(**overrides: bool) -> str:
    """The index job that writes an index, named in a message (:func:`sphdist.errors.remedy`)."""
    return remedy(Remedy("index", {"model": "MODEL", "output": "INDEX"}, overrides))


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
    out: Output | str | os.PathLike[str], data: np.ndarray, *, attrs: dict[str, Any],
    ids: ChunkedVector | None = None,
) -> StoredIndex:
    """Write the serialized index ``data`` and its record, committed atomically to ``path``.

    Parameters
    ----------
    out : Output or path-like
        The held ``index.zarr`` (:func:`sphdist.io.open_output`), committed through
        :meth:`~sphdist.io.Output.commit`: refused if its lock is no longer held. A path (or
        a URL): held for this call (refused with OutputLockedError if another writer holds
        it). A previous index there is replaced.
    data : ndarray of shape (n_bytes,), uint8
        ``faiss.serialize_index`` of the index.
    attrs : dict
        ``index``, ``model`` and ``source`` (see the module's layout); JSON-serialisable.
    ids : ChunkedVector, optional
        The ids of the documents indexed (n, str), with their recorded digests: copied into
        the index with their lookup table (``doc_ids``, ``doc_id_lookup``), so that a query
        finds its document and the ids of its hits in a few small chunks. Not copied when
        None, or when the ids have no recorded digests (the copy could not be tied to them).

    Returns
    -------
    StoredIndex

    Raises
    ------
    OutputLockedError
        If ``out``'s lock is no longer held (or, given a path, another writer holds it);
        nothing is committed.

    Notes
    -----
    Memory: ``data`` itself, written as one raw chunk; with ``ids``, the n ids and ``16 n``
    bytes of the table.
    """
    if not isinstance(out, Output):  # a path: held for this call
        with open_output(out) as held:
            return write_index(held, data, attrs=attrs, ids=ids)
    data = np.ascontiguousarray(data, dtype=np.uint8).ravel()
    staging = out.staging()
    try:
        group = zarr.open_group(store=str(staging), mode="w-")
        arr = group.create_array(  # one raw chunk: the file faiss memory-maps
            "faiss", shape=data.shape, dtype=np.uint8, chunks=(max(1, data.shape[0]),),
            compressors=None, config=WRITE_CONFIG,
        )
        arr[:] = data
        copied = {}
        if ids is not None and ids.identity is not None and len(ids):
            copied = {"doc_ids": write_id_copy(group, ids)}
        group.attrs.update(json_clean({
            **attrs, "faiss_sha256": content_sha256(data), "faiss_nbytes": int(data.shape[0]),
            "faiss_sample_sha256": sample_sha256(data), **copied,
            "sphdist": {"kind": KIND, "format_version": FORMAT_VERSION},
        }))
        out.commit(staging)
    except BaseException:
        out.discard(staging)
        raise
    return StoredIndex(out.path)


def sample_sha256(data: Any) -> str:
    """Hex sha256 of the first and the last MiB of ``data`` (bytes-like), and of its length.

    The cheap check of every read of an index: a truncated, extended or replaced file, or one
    whose header (for IVF: the coarse quantizer) or last inverted lists were edited, fails it.

    >>> sample_sha256(b"abc") == sample_sha256(bytearray(b"abc"))
    True
    """
    view = memoryview(data).cast("B")
    n = view.nbytes
    h = hashlib.sha256(n.to_bytes(8, "little"))
    h.update(view[:_SAMPLE])
    h.update(view[max(_SAMPLE, n - _SAMPLE):])
    return h.hexdigest()


def _file_sample_sha256(file: Path, n: int) -> str:
    h = hashlib.sha256(n.to_bytes(8, "little"))
    with open(file, "rb") as f:
        h.update(f.read(_SAMPLE))
        if n > _SAMPLE:
            f.seek(max(_SAMPLE, n - _SAMPLE))
            h.update(f.read())
    return h.hexdigest()


def check_structure(
    index: Any, record: dict[str, Any], *, n_components: int, n_documents: int,
    nprobe: int | None, refuse: Any,
) -> None:
    """Refuse a loaded faiss index that is not the one its record and the model describe.

    Parameters
    ----------
    index : faiss.Index
        As loaded.
    record : dict
        The ``index`` attribute (kind, nlist, nprobe, n_indexed, n_components, metric).
    n_components, n_documents : int
        r of the model, and the documents searched (every id must be below).
    nprobe : int or None
        The lists a search will scan (an override, else the record's).
    refuse : callable
        ``str -> Exception``: the error naming the path and the remedy.

    Raises
    ------
    Exception
        ``refuse(what)`` on the first disagreement: the dimension, the number of vectors, the
        metric, the kind (flat: an id map over an inner-product flat index; ivf: an
        inverted file of ``nlist`` trained lists whose lengths sum to the count), ``nprobe``.

    Notes
    -----
    Reads the header and the ``nlist`` list lengths only (no vector, no id).
    """
    import faiss

    def expect(what: str, found: Any, wanted: Any) -> None:
        if found != wanted:
            raise refuse(f"the faiss index has {what} {found!r} but {wanted!r} is recorded")

    expect("dimension", int(index.d), n_components)
    expect("dimension", int(index.d), record.get("n_components"))
    expect("vector count", int(index.ntotal), record.get("n_indexed"))
    if not 0 < int(index.ntotal) <= n_documents:
        raise refuse(f"the faiss index holds {index.ntotal} vectors for {n_documents} documents")
    expect("metric", int(index.metric_type), int(faiss.METRIC_INNER_PRODUCT))
    kind = record.get("kind")
    inner = faiss.downcast_index(index)
    if kind == "flat":
        if not isinstance(inner, faiss.IndexIDMap2) or not isinstance(
                faiss.downcast_index(inner.index), faiss.IndexFlatIP):
            raise refuse(f"a flat index is an IndexIDMap2 over IndexFlatIP, found "
                         f"{type(inner).__name__}")
        expect("id count", int(inner.id_map.size()), int(index.ntotal))
    elif kind == "ivf":
        if not isinstance(inner, faiss.IndexIVFFlat) or not inner.is_trained:
            raise refuse(f"an ivf index is a trained IndexIVFFlat, found {type(inner).__name__}")
        expect("list count", int(inner.nlist), record.get("nlist"))
        lists = inner.invlists
        total = sum(int(lists.list_size(i)) for i in range(inner.nlist))
        expect("sum of inverted-list lengths", total, int(index.ntotal))
        probe = nprobe if nprobe is not None else record.get("nprobe")
        if isinstance(probe, bool) or not isinstance(probe, int) or probe < 1:
            raise refuse(f"nprobe {probe!r} is not an integer >= 1")
    else:
        raise refuse(f"index kind {kind!r} is neither flat nor ivf")


#: The arrays of an index (:func:`~sphdist.io._schema.check_arrays`).
_ARRAYS: dict[str, Array] = {
    "faiss": Array("u", 1, "the serialized faiss index, one uint8 per byte", "uint8"),
    "doc_ids": Array("TUO", 1, "one string id per document"),
    "doc_id_lookup": Array("u", 2, "the hashes of the ids and their positions, a (2, n) "
                           "uint64 array", "uint64"),
}

#: The JSON types of an index's attributes (:func:`~sphdist.io._schema.check_attrs`).
_ATTRS: dict[str, Attr] = {
    "faiss_sha256": Attr((STR,), "the sha256 of the serialized index"),
    "faiss_nbytes": Attr((INT,), "the size of the serialized index in bytes"),
    "faiss_sample_sha256": Attr((STR,), "the sha256 of its first and last MiB"),
    "index": Attr((MAPPING,), "the record of the index"),
    "index.kind": Attr((STR,), "the kind of index (flat or ivf)"),
    "index.nlist": Attr((INT, NULL), "the number of inverted lists"),
    "index.nprobe": Attr((INT, NULL), "the lists a search scans"),
    "index.n_documents": Attr((INT,), "the number of documents"),
    "index.n_indexed": Attr((INT,), "the number of documents indexed"),
    "index.n_components": Attr((INT,), "the dimension r"),
    "index.metric": Attr((STR,), "the metric"),
    "index.seconds": Attr((NUMBER,), "the seconds the build took"),
    "model": Attr((MAPPING,), "the model whose embedding was indexed"),
    "model.path": Attr((STR, NULL), "the path of the model"),
    "model.u_sha256": Attr((STR,), "the fingerprint of the model"),
    "source": Attr((MAPPING,), "the documents indexed"),
    "source.origin": Attr((STR,), "where the embeddings came from (model or embedding)"),
    "source.path": Attr((STR, NULL), "the path of the embedding"),
    "source.n_documents": Attr((INT,), "the number of documents"),
    "doc_ids": Attr((MAPPING,), "the record of the copy of the ids"),
    "doc_ids.chunk_sha256": Attr((LIST,), "one sha256 per chunk of doc_ids", items=(STR,)),
    "doc_ids.source_identity": Attr((STR, NULL), "the identity of the ids copied"),
    "doc_ids.lookup_sha256": Attr((LIST,), "one sha256 per chunk of doc_id_lookup",
                                  items=(STR,)),
    "doc_ids.lookup_first": Attr((LIST,), "the first hash of each chunk of doc_id_lookup",
                                 items=(STR,)),
}


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
    _MISSING = "write one with " + _write()
    _STALE = _REWRITE = "write it again with " + _write(overwrite=True)
    _ARRAYS = _ARRAYS
    _ATTRS = _ATTRS

    def __init__(self, path: str | os.PathLike[str]):
        found = index_kind(path)
        if found not in (None, KIND):
            raise ModelFormatError(
                f"{location(path)} is a sphdist {found}, not a sphdist index. To resolve "
                "this, pass an index written by " + _write() + "."
            )
        super().__init__(path)

    def _rebuild(self) -> Any:
        return self.rebuild()

    def _check_schema(self) -> None:
        """The schema, and the shapes the record implies (the bytes, the ids and their table)."""
        super()._check_schema()
        check = {"path": self.location, "error": ModelFormatError, "remedy": self.rebuild}
        nbytes = self.attrs.get("faiss_nbytes")
        if nbytes is not None:
            check_shape(self._group, "faiss", (nbytes,),
                        f"attribute faiss_nbytes says {nbytes} bytes", **check)
        n = self.source.get("n_documents")
        if n is not None:
            check_shape(self._group, "doc_ids", (n,),
                        f"attribute source.n_documents says n = {n} documents", **check)
            check_shape(self._group, "doc_id_lookup", (2, n),
                        f"attribute source.n_documents says n = {n} documents", **check)

    @property
    def record(self) -> dict[str, Any]:
        """The ``index`` attribute: kind, nlist, nprobe, n_documents, n_indexed, ..."""
        found = self.attrs.get("index")
        return dict(found) if isinstance(found, dict) else {}

    @property
    def model(self) -> dict[str, Any]:
        """The ``model`` attribute: ``path`` and ``u_sha256`` of the model indexed."""
        found = self.attrs.get("model")
        return dict(found) if isinstance(found, dict) else {}

    @property
    def source(self) -> dict[str, Any]:
        """The ``source`` attribute: ``origin``, ``path`` and ``n_documents`` of the documents."""
        found = self.attrs.get("source")
        return dict(found) if isinstance(found, dict) else {}

    def rebuild(self) -> str:
        """The remedy of every error: the command that writes this index again.

        A model or embedding recorded by a path relative to where the index was built names
        nothing from elsewhere: it is written ``MODEL`` (``EMBEDDING``), with a note saying
        what was recorded.
        """
        model, where = _anywhere(self.model.get("path"), "MODEL")
        embedding, also = _anywhere(self.source.get("path"), "EMBEDDING")
        target = {"model": model, **({"input": embedding} if self.source.get("path") else {}),
                  "output": str(self.path)}
        return ("write it again with " + remedy(Remedy("index", target, {"overwrite": True}))
                + where + also)

    def refuse(self, what: str) -> ModelFormatError:
        """The error for damage ``what``, naming the path and the rebuild command."""
        return ModelFormatError(f"{self.location}: {what}. To resolve this, " + self.rebuild()
                                + ".")

    def data(self) -> np.ndarray:
        """The serialized faiss index, ndarray of shape (n_bytes,), uint8, read whole.

        Raises
        ------
        ModelFormatError
            If a chunk is missing or does not decode, or the bytes do not match the recorded
            ``faiss_sha256`` (the message names the path and the rebuild command).
        """
        sha = self.attrs.get("faiss_sha256")
        if not isinstance(sha, str):
            raise self.refuse("no faiss_sha256 recorded")
        remedy = self.rebuild()
        return self._consistent(lambda: read_checked(
            self._group["faiss"], str(self.location), "faiss", error=ModelFormatError,
            remedy=remedy, sha256=sha, digest="faiss_sha256"))

    def _mapped_file(self) -> Path | None:
        """The file faiss can memory-map (one raw chunk on a local disk), else None."""
        arr = self._group["faiss"]
        codecs = [c.to_dict().get("name") for c in arr.metadata.codecs]
        if (is_remote(self.location) or codecs != ["bytes"] or arr.cdata_shape != (1,)
                or not isinstance(self.attrs.get("faiss_sample_sha256"), str)):
            return None
        return Path(self.location) / "faiss" / "c" / "0"

    def load(self, *, n_components: int, n_documents: int, nprobe: int | None = None) -> Any:
        """The faiss index, memory-mapped where it can be, checked cheaply and structurally.

        Parameters
        ----------
        n_components, n_documents : int
            r of the model and the documents searched (:func:`check_structure`).
        nprobe : int, optional
            The lists a search will scan (default: the recorded ``nprobe``).

        Returns
        -------
        faiss.Index

        Raises
        ------
        ModelFormatError
            If the file's size or sampled digest (or, when read whole, its ``faiss_sha256``)
            is not the recorded one, faiss cannot read it (its exception named), or the index
            is not the one recorded (:func:`check_structure`).

        Notes
        -----
        Memory-mapped: opening reads the header (for IVF, the coarse quantizer, ``4 nlist
        r`` bytes, and the list lengths), 2 MiB for the sampled digest and the pages of the
        lists each search probes. Read whole: the file, then faiss' copy of it.
        """
        import faiss

        file = self._mapped_file()

        def read() -> Any:
            if file is None:
                return faiss.deserialize_index(self.data())
            n = self.attrs.get("faiss_nbytes")
            size = file.stat().st_size if file.is_file() else None
            if size != n:
                raise self.refuse(f"faiss/c/0 has {size} bytes, {n!r} recorded (faiss_nbytes)")
            if _file_sample_sha256(file, n) != self.attrs["faiss_sample_sha256"]:
                raise self.refuse("faiss does not match its recorded faiss_sample_sha256 (the "
                                  "stored bytes were changed or damaged)")
            return faiss.read_index(str(file), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)

        try:
            index = self._consistent(read)
        except (ModelFormatError, StoreReplacedError):
            raise
        except Exception as exc:  # noqa: BLE001 - anything faiss raises reading damaged bytes
            raise self.refuse(f"faiss cannot read the index ({type(exc).__name__}: "
                              f"{str(exc).strip().splitlines()[-1] if str(exc).strip() else ''})"
                              ) from None
        check_structure(index, self.record, n_components=n_components, n_documents=n_documents,
                        nprobe=nprobe, refuse=self.refuse)
        return index

    def ids(self, source: ChunkedVector) -> ChunkedVector | None:
        """The index' copy of the ids ``source`` holds, with its lookup table, or None.

        Parameters
        ----------
        source : ChunkedVector
            The ids of the documents searched (of the corpus or the embedding).

        Returns
        -------
        ChunkedVector or None
            Of length n, values str, read from the index' ``doc_ids`` in chunks of 8,192,
            each checked against its recorded digest when read; :meth:`ChunkedVector.find`
            reads the positions of an id from ``doc_id_lookup`` (each chunk checked) and
            keeps those whose id is the one asked. None when the index holds no copy
            (written before them), or a copy of other ids than ``source`` (another
            ``identity``, or none recorded): those are then read from ``source``.

        Raises
        ------
        ModelFormatError
            When a chunk read is missing, does not decode or does not match its digest, or
            the record of the copy does not describe it (naming the rebuild command).
        """
        record = self.attrs.get("doc_ids")
        if (not isinstance(record, dict) or source.identity is None
                or record.get("source_identity") != source.identity):
            return None
        digests, lookup_digests = record.get("chunk_sha256"), record.get("lookup_sha256")
        first = record.get("lookup_first")
        try:
            arr, table = self._group["doc_ids"], self._group["doc_id_lookup"]
            fences = lookup_fences(first)
        except (KeyError, TypeError, ValueError, OverflowError):
            arr = table = fences = None
        if (arr is None or table is None or arr.shape != (len(source),)
                or table.shape != (2, len(source)) or not isinstance(digests, list)
                or not isinstance(lookup_digests, list) or not isinstance(first, list)
                or len(first) != table.cdata_shape[-1]):
            raise self.refuse("the record doc_ids does not describe the arrays doc_ids and "
                              "doc_id_lookup")
        where, remedy = str(self.location), self.rebuild()
        chunks: dict[int, np.ndarray] = {}

        def lookup_chunk(i: int) -> np.ndarray:
            if i not in chunks:
                chunks[i] = self._consistent(lambda: read_chunk_checked(
                    table, i, where, "doc_id_lookup", error=ModelFormatError, remedy=remedy,
                    sha256=lookup_digests))
            return chunks[i]

        return ChunkedVector(len(source), arr.chunks[0], lambda i: self._consistent(
            lambda: read_chunk_checked(arr, i, where, "doc_ids", error=ModelFormatError,
                                       remedy=remedy, sha256=digests)),
            lookup=id_lookup(fences, lookup_chunk))

    def verify(self, *, n_components: int, n_documents: int,
               doc_ids: ChunkedVector | None = None) -> dict[str, Any]:
        """The full check (the index job's ``check``): every byte, the structure, every id.

        Parameters
        ----------
        n_components, n_documents : int
            As :meth:`load`.
        doc_ids : ChunkedVector, optional
            The ids of the documents searched: the index' copy of them, if it holds one,
            must be equal to them, and its lookup table must be theirs.

        Returns
        -------
        dict
            ``path``, ``nbytes``, ``n_indexed``, ``faiss_sha256`` (verified), ``doc_ids``
            (True where the copy of the ids and its table were checked).

        Raises
        ------
        ModelFormatError
            As :meth:`load`, and if the bytes do not match ``faiss_sha256`` or an id is
            outside ``[0, n_documents)`` or repeated; if the copy of the ids or its table
            do not match their digests, the ids of ``doc_ids``, or each other (hashes unsorted,
            positions not each document once, a hash not of the id at its position).
        """
        import faiss

        data = self.data()  # every byte against faiss_sha256
        if isinstance(self.attrs.get("faiss_sample_sha256"), str) and (
                sample_sha256(data) != self.attrs["faiss_sample_sha256"]
                or data.shape[0] != self.attrs.get("faiss_nbytes")):
            raise self.refuse("faiss does not match its recorded faiss_sample_sha256")
        try:
            index = faiss.deserialize_index(data)
        except Exception as exc:  # noqa: BLE001
            raise self.refuse(f"faiss cannot read the index ({type(exc).__name__})") from None
        check_structure(index, self.record, n_components=n_components, n_documents=n_documents,
                        nprobe=None, refuse=self.refuse)
        ids = _all_ids(faiss.downcast_index(index))
        if ids.size and (ids.min() < 0 or ids.max() >= n_documents):
            bad = int(ids[(ids < 0) | (ids >= n_documents)][0])
            raise self.refuse(f"the index holds id {bad}, outside [0, {n_documents})")
        if np.unique(ids).size != ids.size:
            raise self.refuse("the index holds a document id twice")
        return {"path": str(self.path), "nbytes": int(data.shape[0]),
                "n_indexed": int(index.ntotal), "faiss_sha256": self.attrs["faiss_sha256"],
                "doc_ids": doc_ids is not None and self._verify_ids(doc_ids)}

    def _verify_ids(self, source: ChunkedVector) -> bool:
        """Check every id of the copy and every entry of its table (False: no copy)."""
        copy = self.ids(source)
        if copy is None:
            return False
        record, remedy = self.attrs["doc_ids"], self.rebuild()
        values = copy.read()  # every chunk against its digest
        table = self._consistent(lambda: read_checked(
            self._group["doc_id_lookup"], str(self.location), "doc_id_lookup",
            error=ModelFormatError, remedy=remedy, sha256=record["lookup_sha256"],
            digest="lookup_sha256"))
        problem = id_copy_problem(values, table, self._group["doc_id_lookup"].chunks[-1],
                                  record["lookup_first"])
        if problem:
            raise self.refuse(problem)
        theirs = source.read()  # every id of the corpus or embedding, checked
        if not np.array_equal(values, theirs):
            bad = int(np.flatnonzero(values != theirs)[0])
            raise self.refuse(f"doc_ids holds {values[bad]!r} at {bad}, not the id of that "
                              "document")
        return True


def _all_ids(index: Any) -> np.ndarray:
    """Every id stored in a flat (IndexIDMap2) or IVF index, ndarray of int64."""
    import faiss

    if isinstance(index, faiss.IndexIDMap2):
        return faiss.vector_to_array(index.id_map).astype(np.int64)
    lists = index.invlists
    parts = []
    for i in range(index.nlist):
        size = int(lists.list_size(i))
        if size:
            parts.append(faiss.rev_swig_ptr(lists.get_ids(i), size).astype(np.int64).copy())
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


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
