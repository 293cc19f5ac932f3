"""Text -> tf-idf -> ``corpus.zarr``: the ingestion stage, partition-parallel on Dask.

Sources (:mod:`sphdist.text.sources`): a directory tree or tar archive (``.tar``, ``.tar.gz``,
...) of one file per document, labelled by the folder holding it (the 20 Newsgroups "bydate"
archive is one); JSON Lines files (one or many, a glob, optionally gzip-compressed) with a text
field and optional label and id fields; CSV and Parquet files with a text column.

:func:`ingest` turns a source into the papers' matrix X of shape (m features, n documents)
with scikit-learn's text semantics, in two passes over *partitions* of the source that run as
Dask tasks (on a ``distributed`` client when one is active, else on a local process pool):

1. **count** (one task per partition): read and check the documents, optionally strip
   news headers, footers and quoted replies (scikit-learn's own functions), tokenise and count
   (``HashingVectorizer(alternate_sign=False, norm=None)`` or ``CountVectorizer``), spill the
   counts of every chunk to a scratch directory next to the output, and return the
   partition's document frequencies, which the driver reduces;
2. **weight** (one task per chunk): idf exactly as ``TfidfTransformer(smooth_idf=True)``
   fits it on all documents (or the idf of ``like``), optional sublinear tf, every column
   scaled to unit L2 norm; the driver writes the chunks in corpus order through
   :class:`sphdist.io.corpus.CorpusWriter`, which commits the corpus atomically at the end.

Documents are tokenised once; only the document frequencies (and, for a learned vocabulary,
its terms) and a bounded window of chunks are ever in memory.
"""

from __future__ import annotations

import codecs
import collections
import concurrent.futures
import contextlib
import itertools
import logging
import multiprocessing
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dask
import numpy as np
import scipy.sparse as sp
import zarr
from tqdm import tqdm
from zarr.codecs import ZstdCodec

from sphdist.errors import DataError, InputNotFoundError, OutputExistsError, ParameterError
from sphdist.io import _atomic
from sphdist.io.corpus import Corpus, CorpusWriter, store_chunk
from sphdist.text.sources import FORMATS, Bad, Partition, Plan, Reading, plan
from sphdist.text.tfidf import (
    DEFAULT_TOKEN_PATTERN,
    TextOptions,
    check_int,
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
    _STRIPPERS = None
else:
    # in the order fetch_20newsgroups applies them, whatever the order of `remove`
    _STRIPPERS = {
        "headers": strip_newsgroup_header,
        "footers": strip_newsgroup_footer,
        "quotes": strip_newsgroup_quoting,
    }

__all__ = ["FORMATS", "ON_ERROR", "REMOVE_OPTIONS", "ingest", "read_like"]

logger = logging.getLogger("sphdist")

#: The values ``remove`` may hold, in the order they are applied.
REMOVE_OPTIONS = ("headers", "footers", "quotes")
#: What to do with a document that cannot be ingested.
ON_ERROR = ("fail", "skip")
_N_EXAMPLES = 5  # skipped documents named in the summary
_SMALL_SOURCE = 20_000  # documents: below, the default is to run in this process
#: Codec of the stored chunks: zstd at level 1 (zarr's default is level 3) stored a
#: 4096-document chunk of the synthetic benchmark corpus 40% faster (5.6 vs 9.3 µs per
#: document) for 6% more bytes; any zstd reader reads it.
_CHUNK_CODEC = ZstdCodec(level=1)


# -- the public function ------------------------------------------------------------------------
def ingest(
    source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    format: str | None = None,
    text_field: str = "text",
    label_field: str | None = None,
    id_field: str | None = None,
    categories: Sequence[str] | None = None,
    max_docs_per_label: int | None = None,
    seed: int = 0,
    n_features: int = 2**18,
    vocabulary: bool = False,
    min_df: int | float = 1,
    max_df: int | float = 1.0,
    max_features: int | None = None,
    select: str | None = None,
    n_select: int = 500,
    lowercase: bool = True,
    token_pattern: str = DEFAULT_TOKEN_PATTERN,
    stop_words: str | None = None,
    strip_accents: str | None = None,
    sublinear_tf: bool = False,
    remove: Sequence[str] = (),
    like: str | os.PathLike[str] | None = None,
    encoding: str = "latin-1",
    on_error: str = "fail",
    max_document_bytes: int = 10_000_000,
    chunk_size: int = 4096,
    partition_size: int | None = None,
    n_workers: int | None = None,
    overwrite: bool = False,
    progress: bool | str = False,
) -> Corpus:
    r"""Build a tf-idf ``corpus.zarr`` from a text collection, in bounded memory.

    Parameters
    ----------
    source : path-like, glob pattern, or sequence of them
        A directory or tar archive of one file per document (label = name of the folder
        holding the file; files at the top level are ignored, as in
        ``sklearn.datasets.load_files``; id = path relative to the source, ``/``-separated);
        or JSON Lines, CSV (``.tsv``: tab-separated) or Parquet files. Patterns (``*``, ``?``,
        ``[``) are expanded and sorted; documents keep the order of the files and lines.
    output : path-like
        Where to write the corpus (a zarr v3 directory; see :mod:`sphdist.io.corpus`).
    format : {"dir", "tar", "jsonl", "csv", "parquet"}, optional
        Default: from the path (a directory, the file suffixes, else a tar archive).
    text_field, label_field, id_field : str
        Field (JSON Lines) or column (CSV, Parquet) of the text, the label (optional; any
        scalar, used as a string) and the document id (optional; default ``path:line`` or
        ``path:row``).
    categories : sequence of str, optional
        Directory / tar sources: keep only the documents with these labels.
    max_docs_per_label : int, optional
        Directory / tar sources: keep at most this many documents per label, drawn uniformly
        without replacement with ``numpy.random.default_rng([seed,
        zlib.crc32(label.encode())])``.
    seed : int, default 0
        Non-negative seed of that sampling.
    n_features : int, default 2**18
        Hashed features m (rows of X), hashing scheme.
    vocabulary : bool, default False
        Learn a vocabulary (sorted terms, stored in the corpus) instead of hashing.
    min_df, max_df : int or float, default 1 and 1.0
        Vocabulary scheme: keep terms in at least ``min_df`` and at most ``max_df``
        documents (a float is a fraction of the documents), as ``CountVectorizer``.
    max_features : int, optional
        Vocabulary scheme: keep the ``max_features`` terms of highest total count, after
        ``min_df``/``max_df``, as ``CountVectorizer``.
    select : {"mutual-info"}, optional
        Vocabulary scheme with labels: then keep the ``n_select`` terms of highest mutual
        information between their presence and the label (Liu et al. 2019, §5.2); see
        :func:`sphdist.text.tfidf.mutual_information`. Ties go to the earlier term.
    n_select : int, default 500
    lowercase, token_pattern, stop_words, strip_accents, sublinear_tf
        scikit-learn's options of the same names (``stop_words`` None or ``"english"``;
        ``strip_accents`` None, ``"ascii"`` or ``"unicode"``).
    remove : sequence of str, default ()
        Any of ``"headers"``, ``"footers"``, ``"quotes"``: parts of each document removed before
        tokenising, as ``sklearn.datasets.fetch_20newsgroups(remove=...)``.
    like : path-like, optional
        A ``corpus.zarr`` or ``model.zarr``: take its feature scheme, tf-idf options, idf and
        vocabulary instead of fitting them, so that the new documents are weighted as the
        documents the model was fitted on. The feature and weighting options above are then
        ignored.
    encoding : str, default "latin-1"
        Encoding of directory and tar documents (latin-1 decodes any byte, as
        ``fetch_20newsgroups``; ``"utf-8"`` refuses undecodable bytes). JSON Lines and CSV are
        read as UTF-8.
    on_error : {"fail", "skip"}, default "fail"
        A document that cannot be used (undecodable bytes, binary content, longer than
        ``max_document_bytes``, a line that is not a JSON object or has no text field, a
        null text or label) raises :class:`DataError` naming the file and line; with
        ``"skip"`` it is left out, counted (``attrs["ingest"]["n_skipped"]``, with the first
        few named in ``skipped_examples``) and reported in a warning.
    max_document_bytes : int, default 10_000_000
        Longest accepted document, in bytes (characters for CSV and Parquet values).
    chunk_size : int, default 4096
        Documents per stored chunk and per spilled count matrix.
    partition_size : int, optional
        Documents per partition (one task of the counting pass), rounded up to a multiple of
        ``chunk_size``; default ``4 * chunk_size``. A gzip JSON Lines file or a CSV file is one
        partition.
    n_workers : int, optional
        Worker processes of the local pool. Default: the active ``distributed`` client if
        there is one, else one process per core when the source has more than one partition
        and more than 20,000 documents (or an unknown number). ``1`` runs everything in this
        process.
    overwrite : bool, default False
        Replace an existing ``output``.
    progress : bool or "log", default False
        True: tqdm progress bars on stderr (documents done / total when known); ``"log"``:
        plain lines on the ``sphdist`` logger at every tenth of the work (for logs that are
        not a terminal).

    Returns
    -------
    Corpus
        The committed corpus. ``X`` has shape (m, n), float64, documents in source order
        (directory / tar sources: sorted by id), chunks of ``chunk_size`` columns (shorter at
        the end of a partition). Also stored: ``idf`` (m,) float64; ``doc_ids`` (n,) str;
        ``labels`` (n,) int32 codes into ``label_names`` (sorted) when labels exist;
        ``empty`` (n,) bool; ``vocabulary`` (m,) str for the vocabulary scheme; attributes
        ``feature_scheme``, ``tfidf``, ``source`` and ``ingest`` (the summary: counts of
        documents, skipped, blank, empty, timings).

    Raises
    ------
    InputNotFoundError
        If ``source`` (or every match of a pattern), or ``like``, does not exist.
    DataError
        If a document cannot be used and ``on_error="fail"`` (the message names the file and
        line, row or member, and how to proceed), if the source holds no document (or all
        were skipped), is not of its format, lacks the text column, or if pruning leaves no
        term.
    ParameterError
        If a parameter is out of range or does not apply (e.g. ``select`` without labels or
        without ``vocabulary``), or a category is not a label of the source.
    CorpusFormatError, ModelFormatError
        If ``like`` is neither a corpus with an idf nor a model with one.
    OutputExistsError
        If ``output`` exists and ``overwrite`` is False.
    OSError
        If reading or writing fails. On any error nothing is left at ``output``.

    Notes
    -----
    With :math:`c_{ij}` the count of the tokens of document :math:`j` mapped to feature
    :math:`i` (hashed, colliding tokens summed; or the vocabulary term), :math:`n` the number of
    ingested documents and :math:`\mathrm{df}_i` the number of them with :math:`c_{ij} > 0`,

    .. math::

        \mathrm{idf}_i = \ln\frac{1 + n}{1 + \mathrm{df}_i} + 1, \qquad
        X_{ij} = \frac{t(c_{ij})\,\mathrm{idf}_i}{\lVert t(c_{\cdot j}) \odot \mathrm{idf}
        \rVert_2},

    with :math:`t(c) = c`, or :math:`1 + \ln c` for ``sublinear_tf``: that is
    ``TfidfVectorizer(...).fit_transform(texts).T`` (vocabulary scheme) or
    ``TfidfTransformer().fit_transform(HashingVectorizer(alternate_sign=False,
    norm=None).transform(texts)).T``, with the same floating-point operations. Columns of
    documents without a token are exactly zero and flagged in ``empty`` (they are kept, and
    counted in the summary, never dropped).

    Memory: the driver holds the document frequencies (``n_features * 8`` bytes, or the
    vocabulary's terms with two counts each, times the labels for ``select``), O(n) ids and
    labels, and at most ``2 * workers`` partition results or chunks; a worker holds one chunk
    of documents and its counts (a tar partition: the partition's raw documents). The spilled
    counts take about 12 bytes per nonzero on disk next to the output, and are removed at the
    end. Cost: every document is read, decoded and tokenised once; a tar archive is read once
    per partition (gzip cannot seek). Workers write the spilled counts and the stored chunks
    next to ``output``: on a distributed cluster that directory must be on a filesystem the
    workers share, and the source must be readable by them. Local worker processes are
    forked (Linux, when no other Python thread runs in the calling process), else started with
    "spawn": call ``ingest`` from a script under ``if __name__ == "__main__":``.

    Directory sources: a file whose resolved path (symbolic links followed) lies outside the
    source folder is never read; it is a bad document (``on_error``: an error naming the link,
    or skipped and counted). Links to files inside the folder are documents under the link's
    id; links to folders are not followed (a warning names them).

    Examples
    --------
    >>> from sphdist.datasets import NEWSGROUPS_PAPER_CATEGORIES, newsgroups_archive
    >>> corpus = ingest(newsgroups_archive(), "news5.zarr",  # doctest: +SKIP
    ...                 categories=NEWSGROUPS_PAPER_CATEGORIES, max_docs_per_label=200)
    >>> corpus.shape  # doctest: +SKIP
    (262144, 1000)
    >>> ingest("docs/*.jsonl.gz", "docs.zarr", label_field="label",  # doctest: +SKIP
    ...        vocabulary=True, min_df=5, select="mutual-info", n_select=500)
    """
    start_time = time.perf_counter()
    remove = _check_remove(remove)
    chunk_size = check_int("chunk_size", chunk_size, 1)
    seed = check_int("seed", seed, 0)
    max_document_bytes = check_int("max_document_bytes", max_document_bytes, 1)
    if partition_size is None:
        partition_size = 4 * chunk_size
    partition_size = -(-check_int("partition_size", partition_size, 1) // chunk_size) * chunk_size
    if n_workers is not None:
        n_workers = check_int("n_workers", n_workers, 1)
    if max_docs_per_label is not None:
        max_docs_per_label = check_int("max_docs_per_label", max_docs_per_label, 1)
    try:
        codecs.lookup(encoding)
    except (LookupError, TypeError):
        raise ParameterError(f"encoding={encoding!r} is not a known text encoding (e.g. "
                             "'utf-8', 'latin-1').") from None
    if on_error not in ON_ERROR:
        raise ParameterError(f"on_error={on_error!r}: expected one of {list(ON_ERROR)}.")
    if isinstance(categories, str):
        raise ParameterError(
            f"categories={categories!r} is a single string. To resolve this, pass a list of "
            f"label names, e.g. categories=[{categories!r}]."
        )
    if like is not None:
        options, like_idf, remove, like_info = read_like(like)
    else:
        options = TextOptions(
            vocabulary=bool(vocabulary), n_features=n_features, lowercase=lowercase,
            token_pattern=token_pattern, stop_words=stop_words, strip_accents=strip_accents,
            min_df=min_df, max_df=max_df, max_features=max_features, select=select,
            n_select=n_select, sublinear_tf=sublinear_tf,
        )
        like_idf = like_info = None
    output = Path(output)
    if output.exists() and not overwrite:  # fail before reading a large source
        raise OutputExistsError(
            f"{output} already exists. To resolve this, choose another output path or pass "
            "--overwrite (overwrite=True)."
        )
    reading = Reading(encoding=encoding, max_bytes=max_document_bytes, text_field=text_field,
                      label_field=label_field, id_field=id_field)
    src = plan(source, format=format, reading=reading, partition_size=partition_size,
               categories=categories, max_docs_per_label=max_docs_per_label, seed=seed)
    labelled = src.format in ("dir", "tar") or label_field is not None
    if options.select is not None and not labelled:
        raise ParameterError(
            "select='mutual-info' needs labels. To resolve this, name the label field "
            "(--label-field), or drop --select."
        )
    if not src.partitions:
        raise DataError(f"{source}: no documents found (empty files). To resolve this, pass "
                        "a source with at least one document.")
    job = _CountJob(options=options, remove=remove, reading=reading, on_error=on_error,
                    chunk_size=chunk_size, need_class_df=options.select is not None,
                    spill="")
    spill = Path(f"{_atomic.staging_path(output)}-spill")
    with _executor(n_workers, src) as (run, workers), \
            _scratch(spill) as spill_dir:
        job = _replace(job, spill=str(spill_dir))
        total = _reduce_counts(run, src, job, workers, progress)
        n = total.n_docs
        _report_skipped(total, on_error)
        if n == 0:
            raise DataError(
                f"{source}: no documents to ingest ({total.n_skipped} skipped). To resolve "
                "this, pass a source with at least one usable document."
            )
        m, idf, vocab, mapping = _features(options, total, n, like_idf)
        np.save(spill_dir / "idf.npy", idf)
        if mapping is not None:
            np.save(spill_dir / "vocabulary.npy", mapping)
        label_names = sorted(total.label_counts) if labelled else None
        scheme = options.feature_scheme(m)
        if like_info is not None:
            scheme = like_info["feature_scheme"]
        with CorpusWriter(
            output, n_features=m, feature_scheme=scheme, tfidf=options.tfidf(remove),
            label_names=label_names, vocabulary=vocab, overwrite=overwrite,
        ) as writer:
            # workers weight the chunks and store them into the staging directory; the
            # driver records them in order (chunk "X" is created first: no race on it)
            zarr.open_group(store=str(writer.staging), mode="r+").require_group("X")
            weigh = _WeightJob(
                spill=str(spill_dir), staging=str(writer.staging), n_features=m,
                learned=mapping is not None, sublinear_tf=options.sublinear_tf,
                label_names=tuple(label_names) if label_names is not None else None,
            )
            tasks = [(weigh, k, c) for k, c in enumerate(total.chunks)]
            with _bar(n, "pass 2/2: tf-idf", progress) as bar:
                for stored, ids, codes in run(_weight_chunk, tasks):
                    writer.append_stored_chunk(stored, ids, codes)
                    bar.update(len(ids))
            summary = {
                "format": src.format,
                "categories": sorted(set(categories)) if categories is not None else None,
                "max_docs_per_label": max_docs_per_label,
                "seed": seed,
                "sampling": "numpy.random.default_rng([seed, zlib.crc32(label.encode())])"
                ".choice(n_label, max_docs_per_label, replace=False) per label",
                "chunk_size": chunk_size,
                "partition_size": partition_size,
                "n_partitions": len(src.partitions),
                "workers": workers,
                "n_available": src.n_available,
                "n_documents": n,
                "n_blank_text": total.n_blank,
                "n_skipped": total.n_skipped,
                "skipped_examples": total.examples,
                "on_error": on_error,
                "text_options": options.describe(),
                "encoding": encoding,
                "fields": {"text": text_field, "label": label_field, "id": id_field},
                "like": like_info and {k: like_info[k] for k in ("path", "fingerprint")},
                "seconds": None,
            }
            summary["seconds"] = round(time.perf_counter() - start_time, 3)
            corpus = writer.commit(idf, extra_attrs={"source": _describe(source),
                                                     "ingest": summary})
    if corpus.n_empty:
        logger.info("%d of %d documents have no token: their columns are zero (flagged in "
                    "corpus.empty)", corpus.n_empty, n)
    return corpus


def _describe(source: Any) -> str | list[str]:
    if isinstance(source, (str, os.PathLike)):
        return str(source)
    return [str(s) for s in source]


def _check_remove(remove: Sequence[str]) -> tuple[str, ...]:
    if isinstance(remove, str):
        raise ParameterError(
            f"remove={remove!r} is a single string. To resolve this, pass a tuple, e.g. "
            f"remove=({remove!r},)."
        )
    unknown = sorted(set(remove) - set(REMOVE_OPTIONS))
    if unknown:
        raise ParameterError(
            f"remove holds {unknown}; expected a subset of {list(REMOVE_OPTIONS)}."
        )
    if remove and _STRIPPERS is None:  # pragma: no cover
        raise ImportError(
            "remove= needs scikit-learn's strip_newsgroup_header/footer/quoting "
            "(sklearn.datasets._twenty_newsgroups), which this scikit-learn lacks. To resolve "
            "this, install a scikit-learn version that has them, or pass remove=()."
        )
    return tuple(r for r in REMOVE_OPTIONS if r in remove)


# -- --like ---------------------------------------------------------------------------------
def read_like(
    path: str | os.PathLike[str],
) -> tuple[TextOptions, np.ndarray, tuple[str, ...], dict[str, Any]]:
    """Read the feature scheme, tf-idf options, idf and vocabulary of a corpus or model.

    Parameters
    ----------
    path : path-like
        A ``corpus.zarr`` (attributes ``feature_scheme``, ``tfidf``; arrays ``idf``,
        ``vocabulary``) or a ``model.zarr`` (``attrs["corpus"]["feature_scheme"/"tfidf"]``,
        arrays ``idf`` and optionally ``vocabulary``).

    Returns
    -------
    options : TextOptions
        With ``fixed_vocabulary`` set for the vocabulary scheme.
    idf : ndarray of shape (m,), float64
    remove : tuple of str
        The news cleaning applied.
    info : dict
        ``path``, ``fingerprint`` and the stored ``feature_scheme``.

    Raises
    ------
    InputNotFoundError
        If ``path`` does not exist.
    CorpusFormatError, ModelFormatError
        If it is neither, or lacks an idf or (vocabulary scheme) a vocabulary.
    """
    from sphdist.errors import CorpusFormatError, ModelFormatError

    path = Path(path)
    if not path.exists():
        raise InputNotFoundError(f"{path}: no such corpus or model (--like). To resolve this, "
                                 "pass the corpus.zarr or model.zarr to imitate.")
    try:
        group = zarr.open_group(store=str(path), mode="r")
    except Exception as exc:
        raise CorpusFormatError(f"{path}: not a zarr group ({type(exc).__name__}). To resolve "
                                "this, pass a corpus.zarr or model.zarr to --like.") from exc
    attrs = dict(group.attrs)
    kind = (attrs.get("sphdist") or {}).get("kind")
    if kind == "corpus":
        meta, error = attrs, CorpusFormatError
    elif kind == "model":
        meta, error = attrs.get("corpus") or {}, ModelFormatError
    else:
        raise CorpusFormatError(f"{path}: neither a sphdist corpus nor a model (sphdist.kind "
                                f"is {kind!r}). To resolve this, pass a corpus.zarr or "
                                "model.zarr to --like.")
    scheme, tfidf = meta.get("feature_scheme") or {}, meta.get("tfidf") or {}
    if scheme.get("type") not in ("hashing", "vocabulary") or "idf" not in group:
        raise error(f"{path}: has no tf-idf text features to imitate (feature scheme "
                    f"{scheme.get('type')!r}, idf {'present' if 'idf' in group else 'absent'}). "
                    "To resolve this, pass a corpus or model built from text by sphdist ingest.")
    idf = np.asarray(group["idf"][:], dtype=np.float64)
    fixed = None
    if scheme["type"] == "vocabulary":
        if "vocabulary" not in group:
            raise error(f"{path}: vocabulary scheme but no stored vocabulary. To resolve this, "
                        "pass the corpus.zarr the model was fitted on.")
        fixed = tuple(str(w) for w in group["vocabulary"][:])
    options = TextOptions(
        vocabulary=scheme["type"] == "vocabulary",
        n_features=int(scheme.get("n_features", idf.shape[0])),
        lowercase=scheme.get("lowercase", True),
        token_pattern=scheme.get("token_pattern", DEFAULT_TOKEN_PATTERN),
        stop_words=scheme.get("stop_words"),
        strip_accents=scheme.get("strip_accents"),
        sublinear_tf=bool(tfidf.get("sublinear_tf", False)),
        fixed_vocabulary=fixed,
    )
    remove = tuple(tfidf.get("remove", ()))
    info = {"path": str(path), "fingerprint": meta.get("fingerprint"), "feature_scheme": scheme}
    return options, idf, remove, info


# -- pass 1: count ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _CountJob:
    options: TextOptions
    remove: tuple[str, ...]
    reading: Reading
    on_error: str
    chunk_size: int
    need_class_df: bool
    spill: str


def _replace(job: _CountJob, **changes: Any) -> _CountJob:
    from dataclasses import replace

    return replace(job, **changes)


@dataclass
class _Counts:
    """Statistics of some partitions: what pass 1 returns and the driver reduces."""

    n_docs: int = 0
    n_blank: int = 0
    n_skipped: int = 0
    examples: list[str] = field(default_factory=list)
    label_counts: dict[str, int] = field(default_factory=dict)  # documents per label
    chunks: list[str] = field(default_factory=list)  # spill files, in corpus order
    df: np.ndarray | None = None  # fixed feature space: (m,) int64
    terms: np.ndarray | None = None  # learned vocabulary: sorted terms (t,) str
    term_df: np.ndarray | None = None  # (t,) int64
    term_tf: np.ndarray | None = None  # (t,) float64 total counts
    class_names: np.ndarray | None = None  # sorted labels (k,) str, for select
    class_df: np.ndarray | None = None  # (t, k) int64 (learned) or (m, k) (fixed)

    def merge(self, other: _Counts) -> _Counts:
        """Add ``other`` (the next partitions, in order) into this one."""
        self.n_docs += other.n_docs
        self.n_blank += other.n_blank
        self.n_skipped += other.n_skipped
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

    def _merge_terms(self, other: _Counts) -> None:
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


def _clean(text: str, remove: tuple[str, ...]) -> str:
    for part in remove:
        text = _STRIPPERS[part](text)  # type: ignore[index]
    return text


def _count_partition(job: _CountJob, index: int, part: Partition) -> _Counts:
    """Pass 1 on one partition: read, check, tokenise, spill counts per chunk, count dfs."""
    out = _Counts()
    buffer: list[tuple[str, str, str | None]] = []
    for record in part.records(job.reading):
        if isinstance(record, Bad):
            if job.on_error == "fail":
                raise DataError(
                    f"{record.message()}. To resolve this, fix or remove that document, or "
                    "pass --on-error skip (on_error='skip') to leave such documents out and "
                    "count them."
                )
            out.n_skipped += 1
            if len(out.examples) < _N_EXAMPLES:
                out.examples.append(record.message())
            continue
        buffer.append(record)
        if len(buffer) == job.chunk_size:
            out.merge(_count_chunk(job, index, len(out.chunks), buffer))
            buffer = []
    if buffer:
        out.merge(_count_chunk(job, index, len(out.chunks), buffer))
    return out


def _count_chunk(job: _CountJob, index: int, k: int, docs: list) -> _Counts:
    opts = job.options
    ids = np.asarray([d[0] for d in docs], dtype=str)
    texts = [_clean(d[1], job.remove) for d in docs]
    labels = [d[2] for d in docs]
    out = _Counts(n_docs=len(docs), n_blank=sum(not t.strip() for t in texts))
    if labels[0] is not None:
        names, sizes = np.unique(np.asarray(labels, dtype=str), return_counts=True)
        out.label_counts = dict(zip(names.tolist(), sizes.tolist(), strict=True))
    path = os.path.join(job.spill, f"{index:06d}-{k:05d}.npz")
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
    else:
        if opts.fixed_vocabulary is not None:
            counts = opts.count_vectorizer(list(opts.fixed_vocabulary)).transform(texts).tocsr()
        else:
            counts = opts.hashing_vectorizer().transform(texts).tocsr()
        counts.sum_duplicates()
        out.df = np.bincount(counts.indices, minlength=counts.shape[1]).astype(np.int64)
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
    np.savez(path, data=counts.data.astype(np.float64), indices=counts.indices.astype(np.int32),
             indptr=counts.indptr.astype(np.int64), shape=np.asarray(counts.shape),
             ids=ids, **extra)
    out.chunks = [path]
    return out


def _reduce_counts(run, src: Plan, job: _CountJob, workers: int,
                   progress: bool | str) -> _Counts:
    total = _Counts()
    with _bar(src.n_documents, "pass 1/2: count", progress) as bar:
        tasks = [(job, i, p) for i, p in enumerate(src.partitions)]
        for counts in run(_count_partition, tasks):
            total.merge(counts)
            bar.update(counts.n_docs + counts.n_skipped)
    return total


def _report_skipped(total: _Counts, on_error: str) -> None:
    if total.n_skipped:
        logger.warning(
            "skipped %d document(s) that could not be ingested (on_error=%r), e.g. %s",
            total.n_skipped, on_error, "; ".join(total.examples[:3]),
        )


def _features(options: TextOptions, total: _Counts, n: int, like_idf: np.ndarray | None):
    """Return m, idf (m,), the vocabulary (list or None), and the learned vocabulary array."""
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
        raise ParameterError(
            f"max_df={options.max_df!r} corresponds to fewer documents than "
            f"min_df={options.min_df!r} ({high} < {low} of {n}). To resolve this, lower min_df "
            "or raise max_df."
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
            f"no term is left of the {terms.shape[0]} found (min_df={options.min_df!r}, "
            f"max_df={options.max_df!r}). To resolve this, lower min_df or raise max_df, or "
            "check stop_words and token_pattern."
        )
    vocab = terms[keep]
    return vocab.shape[0], smooth_idf(df[keep], n), vocab.tolist(), vocab


# -- pass 2: weight -----------------------------------------------------------------------------
@dataclass(frozen=True)
class _WeightJob:
    spill: str
    staging: str
    n_features: int
    learned: bool
    sublinear_tf: bool
    label_names: tuple[str, ...] | None


def _weight_chunk(job: _WeightJob, index: int, path: str):
    """Pass 2 on one spilled chunk: final features, tf-idf, unit columns, stored as ``index``.

    Returns the :class:`sphdist.io.corpus.StoredChunk`, the ids and the label codes.
    """
    idf = np.load(os.path.join(job.spill, "idf.npy"), mmap_mode="r")
    with np.load(path) as f:
        counts = sp.csr_matrix((f["data"], f["indices"], f["indptr"]), shape=tuple(f["shape"]))
        ids = f["ids"]
        labels = f["labels"] if "labels" in f else None
        terms = f["terms"] if job.learned else None
    if terms is not None:
        vocab = np.load(os.path.join(job.spill, "vocabulary.npy"), mmap_mode="r")
        counts = _to_vocabulary(counts, terms, vocab)
    X = weight(counts, np.asarray(idf), job.sublinear_tf)
    codes = None
    if job.label_names is not None:
        codes = np.searchsorted(np.asarray(job.label_names), labels).astype(np.int32)
    stored = store_chunk(job.staging, index, X, job.n_features, compressors=_CHUNK_CODEC)
    os.remove(path)
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


# -- running partitions on Dask -------------------------------------------------------------------
class _LogProgress:
    """Progress as plain log lines, at every tenth of ``total`` (every partition if unknown)."""

    def __init__(self, total: int | None, desc: str):
        self.total, self.desc, self.done, self.next = total, desc, 0, 0.1
        self.start = time.perf_counter()

    def __enter__(self) -> _LogProgress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if exc_info[0] is None:
            self._log()

    def update(self, n: int) -> None:
        self.done += n
        if self.total is None or self.done >= self.next * self.total:
            if self.total is not None and self.done < self.total:
                self._log()
            while self.total and self.next * self.total <= self.done:
                self.next += 0.1

    def _log(self) -> None:
        of = f"/{self.total}" if self.total is not None else ""
        logger.info("%s: %d%s documents, %.0f s", self.desc, self.done, of,
                    time.perf_counter() - self.start)


def _bar(total: int | None, desc: str, progress: bool | str):
    if progress == "log":
        return _LogProgress(total, desc)
    return tqdm(total=total, desc=desc, unit="doc", disable=not progress, dynamic_ncols=True)


def _active_client():
    if "distributed" not in sys.modules:  # no client without it; importing it costs ~1 s
        return None
    try:
        from distributed import default_client
    except ImportError:  # pragma: no cover
        return None
    try:
        return default_client()
    except ValueError:
        return None


@contextlib.contextmanager
def _executor(n_workers: int | None, src: Plan):
    """Yield ``(run, workers)``: ``run(fn, args_list)`` yields ``fn(*args)`` in order.

    Default: the active distributed client; else, for a source of more than
    ``_SMALL_SOURCE`` documents (or of unknown size) in more than one partition, a pool of one
    process per core; else this process.

    Tasks are dask delayed calls, ``2 * workers`` in flight (see :func:`_runner`). Local
    worker processes are forked when that is safe (see :func:`_start_method`), else spawned.
    """
    client = _active_client() if n_workers is None else None
    if client is not None:
        workers = max(1, len(client.scheduler_info().get("workers", {})))
        yield _runner({}, 2 * workers), workers
        return
    n_partitions = len(src.partitions)
    if n_workers is None and src.n_documents is not None and src.n_documents <= _SMALL_SOURCE:
        n_workers = 1  # starting processes would cost more than they save
    workers = min(n_workers or os.cpu_count() or 1, n_partitions)
    # the scheduler functions themselves: dask.compute(scheduler="sync") would import
    # distributed (about 1 s) only to look for a client
    import dask.local
    import dask.multiprocessing

    if workers <= 1:
        yield _runner({"scheduler": dask.local.get_sync}, 1), 1
        return
    method = _start_method()
    with concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context(method)
    ) as pool:
        if method == "fork":
            # start every worker now, from this (only) thread: the first submit forks them all
            with warnings.catch_warnings():
                # Python >= 3.12 warns about fork() when the process has OS threads; the only
                # ones here are BLAS/OpenMP pools (no Python thread runs, checked above)
                warnings.simplefilter("ignore", DeprecationWarning)
                pool.submit(int).result()
        yield _runner({"scheduler": dask.multiprocessing.get, "pool": pool},
                      2 * workers), workers


def _start_method() -> str:
    """How local workers start: "fork" when safe, else "spawn".

    "fork" (Linux, when no other Python thread runs in this process: no lock can be copied
    held) starts the workers at once, importing nothing; "spawn" makes each worker import
    sphdist, scikit-learn and dask again, about 2 s of CPU per worker.
    """
    if (sys.platform == "linux" and "fork" in multiprocessing.get_all_start_methods()
            and threading.active_count() == 1):
        return "fork"
    return "spawn"


def _runner(compute_kwargs: dict[str, Any], in_flight: int) -> Callable:
    """``run(fn, args_list)`` yields ``fn(*args)`` in order, ``in_flight`` tasks at a time.

    Each task is its own dask computation, submitted from a pool of ``in_flight`` threads, so
    that a worker that finishes takes the next task at once (no barrier between groups of
    tasks) while at most ``in_flight`` results wait in the driver.
    """
    def run(fn: Callable, args_list: list[tuple]) -> Iterator[Any]:
        def compute(args):
            (result,) = dask.compute(dask.delayed(fn, pure=False)(*args), **compute_kwargs)
            return result

        pending: collections.deque = collections.deque()
        tasks = iter(args_list)
        with concurrent.futures.ThreadPoolExecutor(in_flight) as ahead:
            try:
                for args in itertools.islice(tasks, in_flight):
                    pending.append(ahead.submit(compute, args))
                while pending:
                    result = pending.popleft().result()
                    for args in itertools.islice(tasks, 1):
                        pending.append(ahead.submit(compute, args))
                    yield result
            finally:
                for future in pending:
                    future.cancel()

    return run


@contextlib.contextmanager
def _scratch(path: Path) -> Iterator[Path]:
    """A scratch directory for the spilled counts, removed on exit whatever happens."""
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        _atomic.discard(path)
