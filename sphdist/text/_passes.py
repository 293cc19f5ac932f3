"""The two passes of an ingest (:mod:`sphdist.jobs.ingest`): the tasks, run where Dask puts them.

Pass 1 (:func:`count_partition`, one task per partition of the source) reads, checks, cleans and
tokenises the documents, spills the counts of every chunk next to the output and returns the
partition's statistics (:class:`Counts`), which the driver merges in partition order and turns
into the features and idf (:func:`features`). Pass 2 (:func:`weight_chunk`, one task per spilled
chunk) weights a chunk (tf-idf, unit columns) and stores it in the corpus' staging directory.
Every function here is a plain function of picklable arguments: it runs in this process or on
a ``distributed`` worker alike.
"""

from __future__ import annotations

import array
import gc
import glob
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from zarr.codecs import ZstdCodec

from sphdist.errors import DataError, option
from sphdist.io import join, load_array, open_file, remove
from sphdist.io.corpus_writer import store_chunk
from sphdist.text.sources import Bad, JsonlPartition, Partition, Reading, plan
from sphdist.text.tfidf import (
    TextOptions,
    limit_features,
    mutual_information,
    smooth_idf,
    weight,
)

try:  # a private module of scikit-learn: the functions fetch_20newsgroups(remove=...) applies
    from sklearn.datasets._twenty_newsgroups import (
        strip_newsgroup_footer,
        strip_newsgroup_header,
        strip_newsgroup_quoting,
    )
except ImportError:  # pragma: no cover - moved or renamed in some scikit-learn release
    STRIPPERS = None
else:
    # in the order fetch_20newsgroups applies them, whatever the order of `remove`
    STRIPPERS = {
        "headers": strip_newsgroup_header,
        "footers": strip_newsgroup_footer,
        "quotes": strip_newsgroup_quoting,
    }

__all__ = [
    "BATCH_CHARS", "CHUNK_CHARS", "STRIPPERS", "CountJob", "Counts", "WeightJob", "clean",
    "count_partition", "emptied_by", "features", "ignore_interrupts", "repeated_ids",
    "save_strings", "weight_chunk",
]

_N_EXAMPLES = 5  # skipped documents named in the summary
#: Characters of text a count task tokenises at once (and so holds, with one document):
#: 1 Mi, about 500 newsgroup posts, so that a chunk of 4,096 large files is not held whole
#: (issue 43: the 223 MB of ``/usr/share/doc`` were). scikit-learn's tokeniser holds about
#: 36 bytes per distinct term of each document of the batch besides (a Python list of ints).
BATCH_CHARS = 1 << 20
#: Characters of text (after the news cleaning, as tokenised) a chunk holds at most, unless one
#: document alone holds more: a chunk ends before the document that would take it past this
#: bound, as it ends at ``chunk_size`` documents. 16 Mi, twice the most text of a 4,096-document
#: chunk of 20 Newsgroups (8.2 Mi characters), so that such collections keep chunks of
#: ``chunk_size`` documents; a tree of large files is cut into chunks of about 16 MB of text
#: instead of 4,096 files (issue 43: 10 and 40 files of 2 MB were one chunk each, whose
#: nonzeros, 0.7 and 2.8 million, the counting and the weighting held whole).
CHUNK_CHARS = 1 << 24
#: Codec of the stored chunks: zstd at level 1 (zarr's default is level 3) stored a
#: 4096-document chunk of the synthetic benchmark corpus 40% faster (5.6 vs 9.3 µs per
#: document) for 6% more bytes; any zstd reader reads it.
_CHUNK_CODEC = ZstdCodec(level=1, checksum=True)
#: Nonzeros of a chunk re-indexed at once (:func:`_to_vocabulary`): a bounded temporary
#: instead of a copy of the chunk's indices.
_BLOCK = 1 << 16


def ignore_interrupts() -> None:
    """Start of a worker process of the ingest's pool: Ctrl-C is the driver's to handle.

    A terminal sends SIGINT to every process of its foreground group; the driver waits for
    the running tasks and cleans up, so a worker finishes its task instead of printing a
    traceback.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


# -- pass 1: count ------------------------------------------------------------------------------
#: Documents a counting task reads between two reports of its progress (:attr:`CountJob.progress`).
PROGRESS_EVERY = 256


@dataclass(frozen=True)
class CountJob:
    options: TextOptions
    remove: tuple[str, ...]
    reading: Reading
    on_error: str
    chunk_size: int
    need_class_df: bool
    spill: str
    #: (partition, ordinal of the document among the partition's usable ones, message) of
    #: the documents to leave out and count as skipped: those repeating an earlier id
    #: (:func:`repeated_ids`, with ``on_error="skip"``).
    drop: tuple[tuple[int, int, str], ...] = ()
    #: Characters of text tokenised at once (:class:`_ChunkCounter`): the bound on the text a
    #: task holds, with one document (itself bounded by ``Reading.max_bytes``).
    batch_chars: int = BATCH_CHARS
    #: Characters of text a chunk holds at most (:data:`CHUNK_CHARS`), unless one document
    #: alone holds more: the bound on the counts a task holds, besides ``chunk_size``.
    chunk_chars: int = CHUNK_CHARS
    #: Called with the documents read (kept or skipped) every :data:`PROGRESS_EVERY` of them
    #: and at the end of a partition, by tasks that run in the driver's process (threads,
    #: dask's synchronous scheduler); None where the tasks run elsewhere (it does not travel
    #: to another process), and the driver counts a partition's documents when it ends.
    progress: Callable[[int], None] | None = field(default=None, compare=False, repr=False)


@dataclass
class Counts:
    """Statistics of some partitions: what pass 1 returns and the driver reduces."""

    n_docs: int = 0
    n_blank: int = 0
    n_emptied: int = 0  # documents with a token before the news cleaning and none after
    n_skipped: int = 0
    #: JSON Lines read with ``Reading.default_id_field``: documents without that field
    n_without_id: int = 0
    examples: list[str] = field(default_factory=list)
    label_counts: dict[str, int] = field(default_factory=dict)  # documents per label
    chunks: list[str] = field(default_factory=list)  # spill files, in corpus order
    df: np.ndarray | None = None  # fixed feature space: (m,) int64
    terms: np.ndarray | None = None  # learned vocabulary: sorted terms (t,) object (str)
    term_df: np.ndarray | None = None  # (t,) int64
    term_tf: np.ndarray | None = None  # (t,) float64 total counts
    class_names: np.ndarray | None = None  # sorted labels (k,) str, for select
    class_df: np.ndarray | None = None  # (t, k) int64 (learned) or (m, k) (fixed)
    id_hashes: np.ndarray | None = None  # (n_docs,) uint64: id_hash of each document's id
    partition_docs: list[int] = field(default_factory=list)  # documents of each partition

    def merge(self, other: Counts) -> Counts:
        """Add ``other`` (the next partitions, in order) into this one."""
        self.n_docs += other.n_docs
        if other.id_hashes is not None:
            self.id_hashes = other.id_hashes if self.id_hashes is None else np.concatenate(
                [self.id_hashes, other.id_hashes])
        self.partition_docs += other.partition_docs
        self.n_blank += other.n_blank
        self.n_emptied += other.n_emptied
        self.n_skipped += other.n_skipped
        self.n_without_id += other.n_without_id
        self.examples = (self.examples + other.examples)[:_N_EXAMPLES]
        for name, count in other.label_counts.items():
            self.label_counts[name] = self.label_counts.get(name, 0) + count
        self.chunks += other.chunks
        if other.df is not None:
            self.df = other.df if self.df is None else self.df + other.df
        if other.terms is not None:
            self._merge_terms(other)
        elif other.class_df is not None:  # fixed feature space
            self.class_names, self.class_df = _merge_classes(
                self.class_names, self.class_df, None, other.class_names, other.class_df, None,
                rows=other.class_df.shape[0],
            )
        return self

    def has_token(self) -> bool:
        """Whether any counted document holds a token of the feature space."""
        if self.terms is not None:
            return self.terms.shape[0] > 0
        return self.df is not None and bool(self.df.any())

    def _merge_terms(self, other: Counts) -> None:
        if self.terms is None:
            self.terms, self.term_df, self.term_tf = other.terms, other.term_df, other.term_tf
            self.class_names, self.class_df = other.class_names, other.class_df
            return
        terms, inverse = np.unique(np.concatenate([self.terms, other.terms]),
                                   return_inverse=True)
        t = terms.shape[0]
        a, b = inverse[: self.terms.shape[0]], inverse[self.terms.shape[0]:]
        df = np.zeros(t, dtype=np.int64)
        tf = np.zeros(t, dtype=np.float64)
        df[a] += self.term_df
        df[b] += other.term_df
        tf[a] += self.term_tf
        tf[b] += other.term_tf
        if other.class_df is not None:
            self.class_names, self.class_df = _merge_classes(
                self.class_names, self.class_df, a, other.class_names, other.class_df, b, rows=t
            )
        self.terms, self.term_df, self.term_tf = terms, df, tf


def _merge_classes(names_a, df_a, rows_a, names_b, df_b, rows_b, rows):
    """Sum two (rows x classes) tables whose rows are scattered by ``rows_*`` (None: same)."""
    names = np.union1d(names_a if names_a is not None else np.array([], dtype=str), names_b)
    out = np.zeros((rows, names.shape[0]), dtype=np.int64)
    for nm, table, where in ((names_a, df_a, rows_a), (names_b, df_b, rows_b)):
        if table is None:
            continue
        cols = np.searchsorted(names, nm)
        if where is None:
            out[:, cols] += table
        else:
            out[where[:, None], cols[None, :]] += table
    return names, out


def clean(text: str, remove: tuple[str, ...]) -> str:
    """``text`` without the news ``remove`` parts, as ``fetch_20newsgroups(remove=...)``.

    Parameters
    ----------
    text : str
        One document.
    remove : tuple of {"headers", "footers", "quotes"}
        Applied in this order (pass them in ``REMOVE_OPTIONS`` order for scikit-learn's).

    Returns
    -------
    str
        The text after scikit-learn's ``strip_newsgroup_header/footer/quoting``.
    """
    for part in remove:
        text = STRIPPERS[part](text)  # type: ignore[index]
    return text


def emptied_by(remove: list[str], sources: list[str], ingest: dict[str, Any],
               n: int = 200) -> bool:
    """Whether the news cleaning ``remove`` empties most of the first documents of a source.

    The first ``n`` documents of ``sources`` are read as the corpus recorded (format, fields,
    encoding: its ``ingest`` attribute): one-line JSON Lines, CSV or Parquet texts have no
    header block, and scikit-learn's header stripper leaves nothing of them. If reading fails,
    the format decides (JSON Lines, CSV and Parquet hold no mail headers). The hint of a
    re-ingest's remedy (:func:`sphdist.jobs.embedding.reingest_remedy`).
    """
    fmt, fields = ingest.get("format"), ingest.get("fields") or {}
    try:
        reading = Reading(encoding=ingest.get("encoding") or "latin-1",
                          text_field=fields.get("text") or "text",
                          label_field=fields.get("label"), id_field=fields.get("id"))
        if fmt == "jsonl":  # the first lines only: planning scans every line of the files
            first = sorted(glob.glob(sources[0])) or [sources[0]]
            partitions = [JsonlPartition(first[0], 0, 1, n)]
        else:
            partitions = plan(sources, format=fmt, reading=reading, partition_size=n).partitions
        texts = [r[1] for r in partitions[0].records(reading)
                 if isinstance(r, tuple) and r[1].strip()][:n]
        order = tuple(r for r in ("headers", "footers", "quotes") if r in remove)
        emptied = sum(not clean(t, order).strip() for t in texts)
    except Exception:  # noqa: BLE001 - only a hint for the remedy; the ingest reports errors
        return fmt in ("jsonl", "csv", "parquet")
    return 2 * emptied > len(texts)


def id_hash(doc_id: str) -> int:
    """A 64-bit digest of a document id, the same in every process: CRC-32 and Adler-32.

    Only a filter (0.7 µs per id, a third of blake2b's): :func:`repeated_ids` confirms every
    candidate by comparing the ids themselves, so a collision costs a read, never a document.
    """
    data = doc_id.encode("utf-8", "surrogatepass")
    return (zlib.crc32(data) << 32) | zlib.adler32(data)


def count_partition(job: CountJob, index: int, part: Partition) -> Counts:
    """Pass 1 on one partition: read, check, tokenise, spill counts per chunk, count dfs.

    The documents are tokenised as they are read, in batches of at most
    :attr:`CountJob.batch_chars` characters (:class:`_ChunkCounter`): the texts a task holds
    at once are one batch, whatever the number of documents of a chunk. The documents read
    are reported to :attr:`CountJob.progress`, when given, every :data:`PROGRESS_EVERY`.

    Chunks: the partition's documents are cut every :attr:`CountJob.chunk_size` of them
    (partitions are multiples of it, so these cuts are the same whatever the partitioning),
    and a chunk also ends before a document that would take its text past
    :attr:`CountJob.chunk_chars` characters (a longer document is a chunk of its own); the
    characters count from the last cut of either kind. Both depend on the documents alone:
    the same chunks whatever the partitions, workers or scheduler.
    """
    out = Counts()
    drop = {k: message for p, k, message in job.drop if p == index}
    chunk = _ChunkCounter(job)
    hashes = array.array("Q")  # 8 bytes a document, not a Python int each (issue 43)
    ordinal = -1  # of the usable documents, as repeated_ids numbers them
    read = 0  # documents read since the last report of progress
    in_cell = 0  # documents since the last cut every chunk_size documents
    # the terms of the chunks counted so far, packed while the next chunk is counted (a few
    # bytes a term instead of a Python string each: issue 43, 200,000 terms held through
    # every chunk of 40 large files were 13 MB more than the first chunk held)
    terms: _PackedStrings | None = None

    def spill() -> None:
        nonlocal chunk, terms
        full, chunk = chunk, _ChunkCounter(job)
        counts = full.spill(join(job.spill, f"{index:06d}-{len(out.chunks):05d}.npz"))
        n_docs, n_chars = full.n_docs, full.text_chars
        del full
        if terms is not None:
            out.terms, terms = terms.block(0, len(terms)), None
        out.merge(counts)
        del counts
        if out.terms is not None:
            terms, out.terms = _packed_strings(_packed("terms", out.terms), "terms"), None
        _collect_vocabularies(n_docs, n_chars, job)

    for record in part.records(job.reading):
        read += 1
        if job.progress is not None and read == PROGRESS_EVERY:
            job.progress(read)
            read = 0
        if isinstance(record, Bad):
            if job.on_error == "fail":
                raise record.error()
            out.n_skipped += 1
            if len(out.examples) < _N_EXAMPLES:
                out.examples.append(record.message())
            continue
        ordinal += 1
        if ordinal in drop:  # repeats an earlier id
            out.n_skipped += 1
            if len(out.examples) < _N_EXAMPLES:
                out.examples.append(drop[ordinal])
            continue
        if record[0] is None:  # no default id field: the id is path:line
            out.n_without_id += 1
            record = (record[3], *record[1:])
        hashes.append(id_hash(record[0]))
        text = clean(record[1], job.remove)
        if chunk.n_docs and chunk.text_chars + len(text) > job.chunk_chars:
            spill()  # this document would take the chunk past its bound of text
        chunk.add(record, text)
        del record, text  # the chunk holds the text only until its batch is tokenised
        in_cell += 1
        if in_cell == job.chunk_size:
            spill()
            in_cell = 0
    if chunk.n_docs:
        spill()
    if terms is not None:
        out.terms = terms.block(0, len(terms))
    out.id_hashes = np.array(hashes, dtype=np.uint64)
    out.partition_docs = [out.n_docs]
    if job.progress is not None and read:
        job.progress(read)
    return out


#: Documents and characters counted in this process since the last
#: :func:`_collect_vocabularies` collection.
_uncollected = [0, 0]


def _collect_vocabularies(n_docs: int, n_chars: int, job: CountJob) -> None:
    """Free the vocabularies scikit-learn's tokeniser left in reference cycles: once a chunk.

    ``CountVectorizer.fit_transform`` builds its vocabulary in a ``defaultdict`` whose
    ``default_factory`` is the dict's own ``__len__``: a reference cycle, so the dict, its term
    strings and its ints (about 100 bytes per distinct term of a batch) outlive the call until
    a full collection. The dict lives through the whole batch, so it is in the oldest
    generation when it is dropped, and Python runs a full collection only once the objects of
    that generation have grown by a quarter: the garbage grew with the run (issue 43: 529 MB
    of RSS after pass 1 on 144,000 small documents against 336 MB on 36,000; with a full
    collection after every chunk, 270 MB flat from the first partition). A full collection
    after each full chunk (``chunk_size`` documents or ``chunk_chars`` characters of text)
    bounds it to the batches of one chunk per running task. Its cost is the tracked objects
    of the process (about 0.1 s with dask, zarr and scikit-learn imported): a chunk that
    ended with its partition (``n_docs`` documents, ``n_chars`` characters) collects only
    once a chunk's worth of documents or text was counted since the last collection in this
    process, so many small partitions do not each pay for one.
    """
    _uncollected[0] += n_docs
    _uncollected[1] += n_chars
    if _uncollected[0] >= job.chunk_size or _uncollected[1] >= job.chunk_chars:
        _uncollected[:] = [0, 0]
        gc.collect()


def repeated_ids(
    partitions: Sequence[Partition], reading: Reading, total: Counts
) -> list[tuple[int, int, Bad]]:
    """The documents whose id an earlier document (in corpus order) already has.

    Runs on the driver after pass 1: the ids' digests (``total.id_hashes``) are sorted to
    find the candidates, whose ids are then read again from their partitions (only those)
    and compared exactly, so a collision of digests is never taken for a repeat.

    Parameters
    ----------
    partitions : sequence of Partition
        The partitions pass 1 counted, in order.
    reading : Reading
    total : Counts
        Pass 1's merged counts, with ``id_hashes`` and ``partition_docs``.

    Returns
    -------
    list of (partition, ordinal, Bad)
        In corpus order; ``ordinal`` numbers the partition's usable documents from 0 (as
        :attr:`CountJob.drop`); the :class:`Bad` names the document, its id and the first
        document with that id. Empty when every id is unique.

    Notes
    -----
    Cost: sorting n 8-byte digests; only when digests repeat, reading the partitions that
    hold them once more.
    """
    h = total.id_hashes
    if h is None or h.shape[0] < 2:
        return []
    order = np.argsort(h, kind="stable")
    same = np.flatnonzero(h[order][1:] == h[order][:-1])
    if not same.size:
        return []
    candidates = np.unique(np.concatenate([order[same], order[same + 1]]))
    starts = np.concatenate([[0], np.cumsum(total.partition_docs)])
    owner = np.searchsorted(starts, candidates, side="right") - 1
    found: dict[int, tuple[str, str, int, int]] = {}  # ordinal in the corpus -> id, where
    for p in np.unique(owner).tolist():
        wanted = set((candidates[owner == p] - starts[p]).tolist())
        k = -1
        for record in partitions[p].records(reading):
            if isinstance(record, Bad):
                continue
            k += 1
            if k in wanted:
                doc_id = record[3] if record[0] is None else record[0]
                found[int(starts[p]) + k] = (doc_id, record[3], p, k)
    first: dict[str, str] = {}
    repeats = []
    for j in sorted(found):
        doc_id, where, p, k = found[j]
        if doc_id not in first:
            first[doc_id] = where
            continue
        repeats.append((p, k, Bad(where, f"duplicate id {doc_id!r}, the id of {first[doc_id]}",
                                  remedy=_REPEATED_ID_REMEDY)))
    return repeats


_REPEATED_ID_REMEDY = (
    "give every document its own id (" + option("id_field")
    + " naming a field of unique values, or no " + option("id_field")
    + ": ids are then path:line or path:row), or pass " + option("on_error", 'skip')
    + " to keep the first document of each id and count the others as skipped"
)


class _ChunkCounter:
    """The counts of one chunk of documents, tokenised in batches as the documents arrive.

    :meth:`add` keeps a document's text until the batch holds :attr:`CountJob.batch_chars`
    characters, then tokenises the batch (scikit-learn's vectorizer, as on the whole chunk) and
    keeps only its counts; :meth:`spill` merges the batches' counts into those of the chunk,
    equal, entry for entry, to the vectorizer's on all its documents at once, and writes them.
    A task so holds one batch of text (at most ``batch_chars`` characters, or one document)
    and the counts of one chunk, instead of the texts of a whole chunk.
    """

    def __init__(self, job: CountJob):
        self.job = job
        self.n_docs = self.n_blank = self.n_emptied = 0
        self.ids: list[str] = []
        self.labels: list[str | None] = []
        self.wheres: list[str] = []
        self.texts: list[str] = []  # the batch: cleaned texts, and raw ones to check emptying
        self.raw: list[str] = []
        self.chars = 0  # of the batch
        self.text_chars = 0  # of the chunk (:attr:`CountJob.chunk_chars`)
        self.batches: list[sp.csr_matrix] = []  # counts; learned: columns numbered by `terms`
        #: learned vocabulary: the chunk's terms so far -> their column, in order of arrival
        #: (one string per term, shared by the batches, as CountVectorizer's own dictionary)
        self.terms: dict[str, int] = {}

    def add(self, record: tuple[str, str, str | None, str], text: str) -> None:
        """Count a document: ``record`` as read, ``text`` its text cleaned (:func:`clean`)."""
        doc_id, raw, label, where = record
        self.n_docs += 1
        self.n_blank += not text.strip()
        self.ids.append(doc_id)
        self.labels.append(label)
        self.wheres.append(where)
        self.texts.append(text)
        if self.job.remove:
            self.raw.append(raw)
        self.chars += len(text)
        self.text_chars += len(text)
        if self.chars >= self.job.batch_chars:
            self._tokenise()

    def _tokenise(self) -> None:
        """Count the batch's tokens and let go of its texts."""
        if not self.texts:
            return
        texts, raw = self.texts, self.raw
        self.texts, self.raw, self.chars = [], [], 0
        opts = self.job.options
        if opts.vocabulary and opts.fixed_vocabulary is None:
            vectorizer = opts.count_vectorizer()
            try:
                counts = vectorizer.fit_transform(texts).tocsr()
                known = self.terms
                column = np.fromiter(  # the batch's terms -> the chunk's columns
                    (known.setdefault(t, len(known)) for t in vectorizer.get_feature_names_out()),
                    dtype=np.int32)  # terms of a chunk: fewer than 2**31
                values = counts.data  # int64 counts of one document's tokens: int32 holds them
                if values.size and values.max() <= np.iinfo(np.int32).max:
                    values = values.astype(np.int32)  # 4 bytes a nonzero less until the spill
                counts = sp.csr_matrix((values, column[counts.indices], counts.indptr),
                                       shape=(counts.shape[0], len(known)))
                del values
                del vectorizer, column
            except ValueError:  # no token at all in this batch ("empty vocabulary")
                counts = sp.csr_matrix((len(texts), len(self.terms)), dtype=np.float64)
            tokens = opts.hashing_vectorizer()  # any token counts, as in an unpruned vocabulary
        else:
            if opts.fixed_vocabulary is not None:
                tokens = opts.count_vectorizer(list(opts.fixed_vocabulary))
            else:
                tokens = opts.hashing_vectorizer()
            counts = tokens.transform(texts).tocsr()
        del texts
        if self.job.remove:  # documents the cleaning emptied: tokens in the raw text, none left
            empty = np.flatnonzero(np.diff(counts.indptr) == 0)
            if empty.size:
                found = tokens.transform([raw[i] for i in empty]).tocsr()
                self.n_emptied += int(np.count_nonzero(np.diff(found.indptr)))
        self.batches.append(counts)

    def _counts(self) -> tuple[sp.csr_matrix, np.ndarray | None]:
        """The chunk's counts (canonical CSR) and, for a learned vocabulary, its sorted terms.

        The batches are copied one by one into the chunk's arrays (12 bytes a nonzero) and let
        go of: at most a batch's worth more is held than the result.
        """
        self._tokenise()
        batches, self.batches = self.batches, []
        terms = rank = None
        if self.job.options.vocabulary and self.job.options.fixed_vocabulary is None:
            terms = _strings(list(self.terms))  # in order of arrival
            self.terms = {}
            order = np.argsort(terms)
            terms = terms[order]  # sorted, as CountVectorizer's features
            rank = np.empty(order.shape[0], dtype=np.int32)  # column -> sorted position
            rank[order] = np.arange(order.shape[0], dtype=np.int32)
            del order
        width = terms.shape[0] if terms is not None else batches[0].shape[1]
        nnz = sum(c.nnz for c in batches)
        # the indices first, each batch then keeping only its values, then the values: the
        # batches' arrays are let go of as the chunk's are filled (not both held whole)
        indices = np.empty(nnz, dtype=np.int32)  # features: fewer than 2**31
        indptr = np.zeros(self.n_docs + 1, dtype=np.int64)
        values: list[np.ndarray | None] = []
        row = end = 0
        for k in range(len(batches)):
            counts = batches[k]
            batches[k] = None  # type: ignore[call-overload]
            n, rows = counts.nnz, counts.shape[0]
            indices[end:end + n] = counts.indices if rank is None else rank[counts.indices]
            indptr[row + 1:row + rows + 1] = counts.indptr[1:] + end
            values.append(counts.data)
            row, end = row + rows, end + n
            del counts
        del batches
        data = np.empty(nnz, dtype=np.float64)
        end = 0
        for k in range(len(values)):
            batch, values[k] = values[k], None
            data[end:end + batch.shape[0]] = batch  # counts: exact in float64
            end += batch.shape[0]
            del batch
        counts = sp.csr_matrix((data, indices, indptr), shape=(self.n_docs, width))
        counts.sum_duplicates()
        return counts, terms

    def spill(self, path: str) -> Counts:
        """Write the chunk's counts at ``path``; return its statistics."""
        job, labels = self.job, self.labels
        counts, terms = self._counts()
        out = Counts(n_docs=self.n_docs, n_blank=self.n_blank, n_emptied=self.n_emptied)
        extra: dict[str, np.ndarray] = {}
        if terms is not None:
            out.terms = terms
            extra.update(_packed("terms", terms))
            out.term_df = np.bincount(counts.indices, minlength=terms.shape[0]).astype(np.int64)
            out.term_tf = np.asarray(counts.sum(axis=0), dtype=np.float64).ravel()
        else:
            out.df = np.bincount(counts.indices, minlength=counts.shape[1]).astype(np.int64)
        if labels[0] is not None:
            names, sizes = np.unique(np.asarray(labels, dtype=str), return_counts=True)
            out.label_counts = dict(zip(names.tolist(), sizes.tolist(), strict=True))
            extra.update(_packed("labels", labels))
        if job.need_class_df:
            names, codes = np.unique(np.asarray(labels, dtype=str), return_inverse=True)
            onehot = sp.csr_matrix((np.ones(self.n_docs), (codes, np.arange(self.n_docs))),
                                   shape=(names.shape[0], self.n_docs))
            presence = counts.copy()
            presence.data[:] = 1.0
            out.class_names = names
            out.class_df = np.asarray((onehot @ presence).T.todense(), dtype=np.int64)
        if job.reading.default_id_field is not None and self.wheres != self.ids:
            extra.update(_packed("wheres", self.wheres))  # path:line, in case
        with open_file(path, "wb") as f:  # beside the output: local, shared or in the object store
            np.savez(f, data=np.asarray(counts.data, dtype=np.float64),
                     indices=np.asarray(counts.indices, dtype=np.int32),
                     indptr=np.asarray(counts.indptr, dtype=np.int64),
                     shape=np.asarray(counts.shape),
                     **_packed("ids", self.ids), **extra)
        out.chunks = [path]
        return out


def _strings(values: Sequence[str]) -> np.ndarray:
    """``values`` as a 1-D object array of ``str``: each string holds its own length.

    Not numpy's fixed-width ``str`` (``<U``): that stores every string in the width of the
    longest, 4 bytes a character, so one 1,024-character token made the 569,194 terms of
    ``/usr/share/doc`` 2.3 GB (issue 43). Object arrays sort, compare and search as ``str``
    (code points) do, in the order of ``<U`` arrays.
    """
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _packed(name: str, values: Sequence[str]) -> dict[str, np.ndarray]:
    """Arrays of a ``.npz`` holding ``values``: their UTF-8 bytes end to end, and the ends.

    What :func:`_unpacked` reads back, without pickles: ``{name}_utf8`` (uint8) and
    ``{name}_ends`` (int64 byte offsets of each string's end). Lone surrogates pass through.
    The strings are encoded joined, once: no bytes object per string is held (a chunk of
    large files has hundreds of thousands of terms; issue 43).
    """
    blob = "".join(values).encode("utf-8", "surrogatepass")
    lengths = np.fromiter(  # UTF-8 bytes of each: its characters when ASCII
        (len(v) if v.isascii() else len(v.encode("utf-8", "surrogatepass")) for v in values),
        dtype=np.int64, count=len(values))
    return {f"{name}_utf8": np.frombuffer(blob, dtype=np.uint8),
            f"{name}_ends": np.cumsum(lengths, dtype=np.int64)}


def _unpacked(arrays, name: str) -> np.ndarray:
    """The strings :func:`_packed` stored under ``name`` in ``arrays``, as :func:`_strings`.

    Decoded one by one into the array: no list of the strings or of their offsets is held
    beside it.
    """
    packed = _packed_strings(arrays, name)
    return packed.block(0, len(packed))


@dataclass(frozen=True)
class _PackedStrings:
    """Strings as :func:`_packed` stores them (UTF-8 bytes end to end, and the ends).

    Decoded a block at a time (:meth:`block`): a few bytes a string until then, not a Python
    string each.
    """

    blob: bytes
    ends: np.ndarray  # (n,) int64

    def __len__(self) -> int:
        return self.ends.shape[0]

    def block(self, a: int, b: int) -> np.ndarray:
        """Strings ``a`` to ``b`` (exclusive), as :func:`_strings`."""
        ends = self.ends[a:b]
        starts = np.concatenate([self.ends[a - 1:a] if a else [0], ends[:-1]]).astype(np.int64)
        blob = self.blob
        return np.fromiter((blob[i:j].decode("utf-8", "surrogatepass")
                            for i, j in zip(starts, ends, strict=True)),
                           dtype=object, count=ends.shape[0])


def _packed_strings(arrays, name: str) -> _PackedStrings:
    """The strings :func:`_packed` stored under ``name`` in ``arrays``, kept packed."""
    return _PackedStrings(np.asarray(arrays[f"{name}_utf8"]).tobytes(),
                          np.asarray(arrays[f"{name}_ends"], dtype=np.int64))


def save_strings(path: str, values: Sequence[str]) -> None:
    """Write ``values`` (a learned vocabulary) at ``path`` (a ``.npz``) for :func:`weight_chunk`."""
    with open_file(path, "wb") as f:
        np.savez(f, **_packed("values", values))


def features(options: TextOptions, total: Counts, n: int, like_idf: np.ndarray | None, *,
             remedy: str = ("pass " + option("min_df", 1) + " " + option("max_df", 1.0))):
    """Return m, idf (m,), the vocabulary (list or None), and the learned vocabulary array.

    ``remedy`` ends the error raised when ``min_df``/``max_df`` leave no term: how to keep them.
    """
    if like_idf is not None:
        vocab = list(options.fixed_vocabulary) if options.fixed_vocabulary else None
        return like_idf.shape[0], like_idf, vocab, None
    if not options.vocabulary:
        df = total.df if total.df is not None else np.zeros(options.n_features, np.int64)
        return options.n_features, smooth_idf(df, n), None, None
    terms = total.terms if total.terms is not None else _strings([])
    df = total.term_df if total.term_df is not None else np.zeros(0, np.int64)
    tf = total.term_tf if total.term_tf is not None else np.zeros(0)
    high = options.max_df if isinstance(options.max_df, int) else options.max_df * n
    low = options.min_df if isinstance(options.min_df, int) else options.min_df * n
    if high < low:
        raise DataError(
            f"too few documents ({n}) for min_df={options.min_df!r} and max_df="
            f"{options.max_df!r}: a term would have to be in at least {low:g} and at most "
            f"{high:g} of them. To resolve this, keep every term: " + remedy + "."
        )
    keep = limit_features(df, tf, n, options)
    if options.select is not None and total.class_df is not None:
        class_df = total.class_df[keep]
        sizes = np.array([total.label_counts[c] for c in total.class_names.tolist()])
        mi = mutual_information(class_df, sizes)
        order = np.argsort(-mi, kind="stable")[: options.n_select]
        chosen = np.zeros(int(keep.sum()), dtype=bool)
        chosen[order] = True
        keep_idx = np.flatnonzero(keep)[chosen]
        keep = np.zeros_like(keep)
        keep[keep_idx] = True
    if not keep.any():
        raise DataError(
            f"no term is left of the {terms.shape[0]} found in the {n} documents: none is in "
            f"at least min_df={options.min_df!r} and at most max_df={options.max_df!r} of "
            "them. To resolve this, keep every term: " + remedy + "."
        )
    vocab = terms[keep]
    return vocab.shape[0], smooth_idf(df[keep], n), vocab.tolist(), vocab


# -- pass 2: weight -----------------------------------------------------------------------------
@dataclass(frozen=True)
class WeightJob:
    spill: str
    staging: str
    n_features: int
    learned: bool
    sublinear_tf: bool
    label_names: tuple[str, ...] | None
    #: Store ``path:line`` ids instead of the default id field's values (not every document
    #: has one, or they repeat).
    wheres: bool = False


def weight_chunk(job: WeightJob, index: int, path: str):
    """Pass 2 on one spilled chunk: final features, tf-idf, unit columns, stored as ``index``.

    Returns the :class:`sphdist.io.corpus_writer.StoredChunk`, the ids and the label codes.
    """
    idf = load_array(join(job.spill, "idf.npy"))
    with load_array(path) as f:
        counts = sp.csr_matrix((f["data"], f["indices"], f["indptr"]), shape=tuple(f["shape"]))
        ids = _unpacked(f, "wheres" if job.wheres and "wheres_ends" in f else "ids")
        labels = _unpacked(f, "labels") if "labels_ends" in f else None
        terms = _packed_strings(f, "terms") if job.learned else None
    if terms is not None:
        with load_array(join(job.spill, "vocabulary.npz")) as f:
            vocab = _packed_strings(f, "values")
        counts = _to_vocabulary(counts, terms, vocab)
        del terms, vocab
    X = weight(counts, np.asarray(idf), job.sublinear_tf)
    codes = None
    if job.label_names is not None:
        codes = np.searchsorted(_strings(job.label_names), labels).astype(np.int32)
    stored = store_chunk(job.staging, index, X, job.n_features, compressors=_CHUNK_CODEC)
    remove(path)
    return stored, ids.tolist(), codes


def _to_vocabulary(counts: sp.csr_matrix, terms, vocab):
    """Re-index chunk counts from its local (sorted) terms to the sorted global vocabulary.

    ``terms`` and ``vocab`` are object arrays of ``str`` (:func:`_strings`) or
    :class:`_PackedStrings`; ``counts.data`` is modified (as
    :func:`~sphdist.text.tfidf.weight` modifies it next).
    """
    m = len(vocab)
    column = _columns(terms, vocab)
    indices = np.asarray(counts.indices, dtype=np.int32)
    for a in range(0, indices.shape[0], _BLOCK):  # in place: no second array of the indices
        indices[a:a + _BLOCK] = column[indices[a:a + _BLOCK]]
    del column
    dropped = indices < 0
    if dropped.any():  # terms not kept: removed in place, the others keep their order
        counts.data[dropped] = 0.0  # counts are >= 1: only these are zeros
        indices[dropped] = 0
    del dropped
    # local terms and vocabulary are both sorted: the mapping keeps indices sorted
    out = sp.csr_matrix((counts.data, indices, counts.indptr), shape=(counts.shape[0], m))
    out.eliminate_zeros()
    return out


#: Terms decoded at once when a chunk's terms are matched to the vocabulary (:func:`_columns`).
_TERM_BLOCK = 1 << 14


def _columns(terms, vocab, block: int = _TERM_BLOCK) -> np.ndarray:
    """The position of each of ``terms`` in ``vocab`` (both sorted), -1 where it is not there.

    A merge of the two sorted sequences, ``block`` strings of each decoded at a time (from
    :class:`_PackedStrings`, or slices of object arrays): a weighting task holds the packed
    vocabulary (its UTF-8 bytes and ends, about 15 bytes a term) instead of a Python string
    a term (about 64 bytes; issue 43: the 159,604 kept terms of 40 large files were 10 MB in
    each task). Returns an (t,) int32 array (features < 2**31).
    """
    t, m = len(terms), len(vocab)
    column = np.full(t, -1, dtype=np.int32)
    ta = va = 0
    tb = vb = None
    while ta < t and va < m:
        if tb is None:
            tb = _block(terms, ta, min(ta + block, t))
        if vb is None:
            vb = _block(vocab, va, min(va + block, m))
        pos = np.searchsorted(vb, tb)
        hit = pos < vb.shape[0]
        hit[hit] = vb[pos[hit]] == tb[hit]
        column[ta + np.flatnonzero(hit)] = va + pos[hit]
        last_t, last_v = tb[-1], vb[-1]
        if last_t <= last_v:  # no later vocabulary block holds one of these terms
            ta, tb = ta + tb.shape[0], None
        if last_v <= last_t:  # no later term is in this vocabulary block
            va, vb = va + vb.shape[0], None
    return column


def _block(strings, a: int, b: int) -> np.ndarray:
    """Strings ``a`` to ``b`` of an object array or a :class:`_PackedStrings`."""
    return strings.block(a, b) if isinstance(strings, _PackedStrings) else strings[a:b]
