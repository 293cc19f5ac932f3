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

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from zarr.codecs import ZstdCodec

from sphdist.errors import DataError, option
from sphdist.io import join, load_array, open_file, remove
from sphdist.io.corpus_writer import store_chunk
from sphdist.text.sources import Bad, Partition, Reading
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
    "STRIPPERS", "CountJob", "Counts", "WeightJob", "clean", "count_partition", "features",
    "ignore_interrupts", "repeated_ids", "weight_chunk",
]

_N_EXAMPLES = 5  # skipped documents named in the summary
#: Codec of the stored chunks: zstd at level 1 (zarr's default is level 3) stored a
#: 4096-document chunk of the synthetic benchmark corpus 40% faster (5.6 vs 9.3 µs per
#: document) for 6% more bytes; any zstd reader reads it.
_CHUNK_CODEC = ZstdCodec(level=1, checksum=True)


def ignore_interrupts() -> None:
    """Start of a worker process of the ingest's pool: Ctrl-C is the driver's to handle.

    A terminal sends SIGINT to every process of its foreground group; the driver waits for
    the running tasks and cleans up, so a worker finishes its task instead of printing a
    traceback.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


# -- pass 1: count ------------------------------------------------------------------------------
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
    terms: np.ndarray | None = None  # learned vocabulary: sorted terms (t,) str
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


def id_hash(doc_id: str) -> int:
    """A 64-bit digest of a document id, the same in every process: CRC-32 and Adler-32.

    Only a filter (0.7 µs per id, a third of blake2b's): :func:`repeated_ids` confirms every
    candidate by comparing the ids themselves, so a collision costs a read, never a document.
    """
    data = doc_id.encode("utf-8", "surrogatepass")
    return (zlib.crc32(data) << 32) | zlib.adler32(data)


def count_partition(job: CountJob, index: int, part: Partition) -> Counts:
    """Pass 1 on one partition: read, check, tokenise, spill counts per chunk, count dfs."""
    out = Counts()
    drop = {k: message for p, k, message in job.drop if p == index}
    buffer: list[tuple[str, str, str | None, str]] = []
    hashes: list[int] = []
    ordinal = -1  # of the usable documents, as repeated_ids numbers them
    for record in part.records(job.reading):
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
        buffer.append(record)
        if len(buffer) == job.chunk_size:
            out.merge(_count_chunk(job, index, len(out.chunks), buffer))
            buffer = []
    if buffer:
        out.merge(_count_chunk(job, index, len(out.chunks), buffer))
    out.id_hashes = np.asarray(hashes, dtype=np.uint64)
    out.partition_docs = [out.n_docs]
    return out


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


def _count_chunk(job: CountJob, index: int, k: int, docs: list) -> Counts:
    opts = job.options
    ids = np.asarray([d[0] for d in docs], dtype=str)
    texts = [clean(d[1], job.remove) for d in docs]
    labels = [d[2] for d in docs]
    out = Counts(n_docs=len(docs), n_blank=sum(not t.strip() for t in texts))
    if labels[0] is not None:
        names, sizes = np.unique(np.asarray(labels, dtype=str), return_counts=True)
        out.label_counts = dict(zip(names.tolist(), sizes.tolist(), strict=True))
    path = join(job.spill, f"{index:06d}-{k:05d}.npz")
    extra: dict[str, np.ndarray] = {}
    if opts.vocabulary and opts.fixed_vocabulary is None:
        vectorizer = opts.count_vectorizer()
        try:
            counts = vectorizer.fit_transform(texts).tocsr()
            terms = np.asarray(vectorizer.get_feature_names_out(), dtype=str)
        except ValueError:  # no token at all in this chunk ("empty vocabulary")
            counts = sp.csr_matrix((len(texts), 0), dtype=np.float64)
            terms = np.zeros(0, dtype=str)
        counts.sum_duplicates()
        out.terms, extra["terms"] = terms, terms
        out.term_df = np.bincount(counts.indices, minlength=terms.shape[0]).astype(np.int64)
        out.term_tf = np.asarray(counts.sum(axis=0), dtype=np.float64).ravel()
        tokens = opts.hashing_vectorizer()  # any token counts, as in an unpruned vocabulary
    else:
        if opts.fixed_vocabulary is not None:
            tokens = opts.count_vectorizer(list(opts.fixed_vocabulary))
        else:
            tokens = opts.hashing_vectorizer()
        counts = tokens.transform(texts).tocsr()
        counts.sum_duplicates()
        out.df = np.bincount(counts.indices, minlength=counts.shape[1]).astype(np.int64)
    if job.remove:  # documents the cleaning emptied: tokens in the raw text, none left
        empty = np.flatnonzero(np.diff(counts.indptr) == 0)
        if empty.size:
            raw = tokens.transform([docs[i][1] for i in empty]).tocsr()
            out.n_emptied = int(np.count_nonzero(np.diff(raw.indptr)))
    if job.need_class_df:
        names, codes = np.unique(np.asarray(labels, dtype=str), return_inverse=True)
        onehot = sp.csr_matrix((np.ones(len(docs)), (codes, np.arange(len(docs)))),
                               shape=(names.shape[0], len(docs)))
        presence = counts.copy()
        presence.data[:] = 1.0
        out.class_names = names
        out.class_df = np.asarray((onehot @ presence).T.todense(), dtype=np.int64)
    if labels[0] is not None:
        extra["labels"] = np.asarray(labels, dtype=str)
    if job.reading.default_id_field is not None and any(d[0] != d[3] for d in docs):
        extra["wheres"] = np.asarray([d[3] for d in docs], dtype=str)  # path:line, in case
    with open_file(path, "wb") as f:  # beside the output: local, shared or in the object store
        np.savez(f, data=counts.data.astype(np.float64), indices=counts.indices.astype(np.int32),
                 indptr=counts.indptr.astype(np.int64), shape=np.asarray(counts.shape),
                 ids=ids, **extra)
    out.chunks = [path]
    return out


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
    terms = total.terms if total.terms is not None else np.zeros(0, dtype=str)
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
        ids = f["wheres"] if job.wheres and "wheres" in f else f["ids"]
        labels = f["labels"] if "labels" in f else None
        terms = f["terms"] if job.learned else None
    if terms is not None:
        vocab = load_array(join(job.spill, "vocabulary.npy"))
        counts = _to_vocabulary(counts, terms, vocab)
    X = weight(counts, np.asarray(idf), job.sublinear_tf)
    codes = None
    if job.label_names is not None:
        codes = np.searchsorted(np.asarray(job.label_names), labels).astype(np.int32)
    stored = store_chunk(job.staging, index, X, job.n_features, compressors=_CHUNK_CODEC)
    remove(path)
    return stored, ids.tolist(), codes


def _to_vocabulary(counts: sp.csr_matrix, terms: np.ndarray, vocab: np.ndarray):
    """Re-index chunk counts from its local (sorted) terms to the sorted global vocabulary."""
    m = vocab.shape[0]
    pos = np.searchsorted(vocab, terms)
    hit = pos < m
    hit[hit] = vocab[pos[hit]] == terms[hit]
    new = np.where(hit, pos, -1)[counts.indices]
    keep = new >= 0
    row = np.repeat(np.arange(counts.shape[0]), np.diff(counts.indptr))[keep]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=counts.shape[0]))])
    # local terms and vocabulary are both sorted: the mapping keeps indices sorted
    return sp.csr_matrix((counts.data[keep], new[keep].astype(np.int32), indptr),
                         shape=(counts.shape[0], m))
