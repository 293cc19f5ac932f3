"""Text -> tf-idf -> ``corpus.zarr``: the ingestion stage, partition-parallel on Dask.

Sources (:mod:`sphdist.text.sources`): a directory tree or tar archive (``.tar``, ``.tar.gz``,
...) of one file per document, labelled by the folder holding it (the 20 Newsgroups "bydate"
archive is one); JSON Lines files (one or many, a glob, optionally gzip-compressed) with a text
field and optional label and id fields; CSV and Parquet files with a text column.

``sphdist ingest`` (:class:`~sphdist.jobs.ingest.IngestRequest`, whose work is :func:`write`)
turns a source (a :class:`SourceSpec`) into the papers' matrix X of shape (m features, n
documents) with scikit-learn's text semantics (a :class:`TextSpec`), in two
passes over *partitions* of the source that run as ``dask.delayed`` tasks on the scheduler
dask uses here: the active ``distributed`` client (``sphdist.jobs.cluster.connect``, as
``sphdist fit`` runs), else dask's local scheduler (threads, unless the caller's
``dask.config`` names another). The tasks are in :mod:`sphdist.text._passes`:

1. **count** (one task per partition): read and check the documents, optionally strip
   news headers, footers and quoted replies (scikit-learn's own functions), tokenise and count
   (``HashingVectorizer(alternate_sign=False, norm=None)`` or ``CountVectorizer``), spill the
   counts of every chunk to a scratch directory next to the output, and return the
   partition's document frequencies, which the driver reduces in partition order;
2. **weight** (one task per chunk): idf exactly as ``TfidfTransformer(smooth_idf=True)``
   fits it on all documents (or the idf of ``like``), optional sublinear tf, every column
   scaled to unit L2 norm; the driver writes the chunks in corpus order through
   :class:`sphdist.io.corpus_writer.CorpusWriter`, which commits the corpus atomically at the end.

Documents are tokenised once; only the document frequencies (and, for a learned vocabulary,
its terms) and a bounded window of chunks are ever in memory.
"""

from __future__ import annotations

import codecs
import contextlib
import dataclasses
import itertools
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from sphdist._processes import fork_context
from sphdist._progress import progress as _progress
from sphdist._validation import Number, check_int, check_param
from sphdist.errors import (
    CorpusFormatError,
    DataError,
    InputNotFoundError,
    ModelFormatError,
    ParameterError,
    Text,
    WorkersLostError,
    option,
    remedy,
)
from sphdist.io import (
    Output,
    anchored,
    discard,
    exists,
    is_remote,
    join,
    location,
    open_file,
    open_stored,
    require_finite,
    stored_kind,
)
from sphdist.io.corpus import Corpus
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.text import _passes
from sphdist.text._messages import Emptied, documents, ingest_remedy, text_arguments
from sphdist.text._passes import (
    STRIPPERS,
    CountJob,
    Counts,
    WeightJob,
    count_partition,
    features,
    ignore_interrupts,
    repeated_ids,
    save_strings,
    weight_chunk,
)
from sphdist.text.defaults import INGEST_DEFAULTS
from sphdist.text.sources import FORMATS, Plan, Reading, field_names, plan
from sphdist.text.tfidf import (
    DEFAULT_TOKEN_PATTERN,
    MAX_CHUNK_SIZE,
    TextOptions,
    ingest_options,
)

__all__ = ["FORMATS", "ON_ERROR", "REMOVE_OPTIONS", "SourceSpec", "TextSpec", "write",
           "local_pool", "read_like", "check_sizes"]

logger = logging.getLogger("sphdist")

#: The values ``remove`` may hold, in the order they are applied.
REMOVE_OPTIONS = ("headers", "footers", "quotes")
#: What to do with a document that cannot be ingested.
ON_ERROR = ("fail", "skip")
_DOCUMENTS = Number(Integral, 1, MAX_CHUNK_SIZE, closed="both")  # a chunk or partition size
#: JSON Lines without ``id_field``: the field that holds the ids when every record has one
#: (``sphdist synth --format jsonl`` writes it).
DEFAULT_ID_FIELD = "id"


# -- what to read, and how to turn it into features ---------------------------------------------
@dataclasses.dataclass(frozen=True)
class SourceSpec:
    """What an ingest reads: the documents of a source and how to read them.

    Parameters
    ----------
    paths : path-like, URL, glob pattern, or sequence of them
        A directory or tar archive of one file per document (label = name of the folder
        holding the file; files at the top level are ignored, as in
        ``sklearn.datasets.load_files``; id = path relative to the source, ``/``-separated);
        or JSON Lines, CSV (``.tsv``: tab-separated) or Parquet files. Patterns (``*``, ``?``,
        ``[``) are expanded and sorted; documents keep the order of the files and lines.
    format : {"dir", "tar", "jsonl", "csv", "parquet"}, optional
        Default: from the path (a directory, the file suffixes, else a tar archive).
    text_field, label_field, id_field : str
        Field (JSON Lines) or column (CSV, Parquet) of the text, the label (optional; any
        scalar, used as a string) and the document id (optional; default: for JSON Lines, the
        :data:`DEFAULT_ID_FIELD` (``"id"``) field when every record has one and no two are
        equal, else ``path:line``; ``path:row`` for CSV and Parquet). Ids must be unique: a
        document whose ``id_field`` value an earlier one has is a bad document (``on_error``:
        refused naming both, or skipped and counted, the first kept). With an ingest's
        ``like``, the fields the imitated corpus was ingested with replace the defaults here,
        where the source has them.
    categories : sequence of str, optional
        Directory / tar sources: keep only the documents with these labels.
    max_docs_per_label : int, optional
        Directory / tar sources: keep at most this many documents per label, drawn uniformly
        without replacement with ``numpy.random.default_rng([seed,
        zlib.crc32(label.encode())])``.
    seed : int, default 0
        Non-negative seed of that sampling.
    encoding : str, default "latin-1"
        Encoding of directory and tar documents (latin-1 decodes any byte, as
        ``fetch_20newsgroups``; ``"utf-8"`` refuses undecodable bytes). JSON Lines and CSV are
        read as UTF-8.
    on_error : {"fail", "skip"}, default "fail"
        A document that cannot be used (undecodable bytes, binary content, longer than
        ``max_document_bytes``, a line that is not a JSON object or has no text field, a
        null text or label, a repeated id, a JSON value nested too deeply to read, a number
        of more than 4,300 digits, a lone surrogate in its text, label or id (not Unicode
        text: UTF-8 cannot store it), a ``*.gz`` file that is not gzip data, a member of
        a tar archive that is a link or a device, a FIFO or device in a folder) raises
        :class:`~sphdist.errors.DataError` naming the file and line (or member); with
        ``"skip"`` it is left out, counted (``attrs["ingest"]["n_skipped"]``, with the first
        few named in ``skipped_examples``) and reported in a warning.
    max_document_bytes : int, default 10_000_000
        Longest accepted document, in bytes (characters for CSV and Parquet values; bytes
        after decompression for ``*.gz`` files): the bound on the memory one document takes
        while it is tokenised, about 15 times its size (scikit-learn's analyzer holds one
        Python string per token). The other text a counting task holds at once is one batch
        of at most ``sphdist.text._passes.BATCH_CHARS`` (1 Mi) characters.

    Raises
    ------
    ParameterError
        If ``seed``, ``max_document_bytes`` or ``max_docs_per_label`` is out of range,
        ``encoding`` is not a text encoding, ``on_error`` is neither value, or ``categories``
        is a single string.

    Notes
    -----
    Directory sources: a file whose resolved path (symbolic links followed) lies outside the
    source folder is never read; it is a bad document (``on_error``: an error naming the link,
    or skipped and counted). Links to files inside the folder are documents under the link's
    id; links to folders are not followed (a warning names them).
    """

    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
    format: str | None = None
    text_field: str = "text"
    label_field: str | None = None
    id_field: str | None = None
    categories: Sequence[str] | None = None
    max_docs_per_label: int | None = None
    seed: int = 0
    encoding: str = "latin-1"
    on_error: str = "fail"
    max_document_bytes: int = 10_000_000

    def __post_init__(self) -> None:
        _set(self, "seed", check_int("seed", self.seed, 0))
        _set(self, "max_document_bytes",
             check_int("max_document_bytes", self.max_document_bytes, 1))
        if self.max_docs_per_label is not None:
            _set(self, "max_docs_per_label",
                 check_int("max_docs_per_label", self.max_docs_per_label, 1))
        try:
            codecs.lookup(self.encoding)
        except (LookupError, TypeError):
            raise ParameterError(f"encoding={self.encoding!r} is not a known text encoding "
                                 "(e.g. 'utf-8', 'latin-1').") from None
        if self.on_error not in ON_ERROR:
            raise ParameterError(f"on_error={self.on_error!r}: expected one of {list(ON_ERROR)}.")
        if isinstance(self.categories, str):
            raise ParameterError(
                f"categories={self.categories!r} is a single string. To resolve this, pass a "
                f"list of label names, e.g. categories=[{self.categories!r}]."
            )

    def reading(self) -> Reading:
        """How each document is read and checked (the fields, encoding and size limit)."""
        return Reading(encoding=self.encoding, max_bytes=self.max_document_bytes,
                       text_field=self.text_field, label_field=self.label_field,
                       id_field=self.id_field,
                       default_id_field=DEFAULT_ID_FIELD if self.id_field is None else None)

    def flags(self) -> dict[str, Any]:
        """The ``sphdist ingest`` options that select these documents, defaults left out."""
        return {
            "format": self.format,
            "text_field": self.text_field if self.text_field != "text" else None,
            "label_field": self.label_field, "id_field": self.id_field,
            "categories": self.categories, "max_docs_per_label": self.max_docs_per_label,
            "seed": self.seed if self.max_docs_per_label else None,
        }


def _set(spec: Any, name: str, value: Any) -> None:
    """Set a field of a frozen dataclass, for the values ``__post_init__`` normalises."""
    object.__setattr__(spec, name, value)


@dataclasses.dataclass(frozen=True)
class TextSpec:
    """How an ingest turns text into features and weights (scikit-learn's options).

    The defaults are :data:`sphdist.text.defaults.INGEST_DEFAULTS` (a learned vocabulary of
    the terms in at least 5 documents and at most half of them, English stop words dropped,
    sublinear tf), measured in ``pipelines/results/text_defaults.md``. Validated when
    An ingest resolves them (:meth:`options`), except ``remove``, checked here.

    Parameters
    ----------
    vocabulary : bool, default True
        Learn a vocabulary (sorted terms, stored in the corpus, so components read as words);
        False hashes the tokens into ``n_features`` features instead (the hashing scheme): no
        vocabulary is held on the driver, for collections whose distinct terms do not fit
        in its memory, but every fit step then works on an ``n_features x r`` matrix U.
    n_features : int, optional
        Hashing scheme only (``vocabulary=False``): hashed features m (rows of X),
        ``1 <= n_features <= 2**31 - 2`` (scikit-learn's ``HashingVectorizer``), and at most
        what this machine's memory holds at 32 bytes per feature (document frequencies and idf
        on the driver). Default 2**18 with hashing; refused with a vocabulary.
    min_df, max_df : int or float, optional
        Vocabulary scheme: keep terms in at least ``min_df`` and at most ``max_df``
        documents (a float is a fraction of the documents), as ``CountVectorizer``. Default
        5 and 0.5; not applicable to hashing. A collection of fewer than 10 documents needs
        ``min_df=1, max_df=1.0``.
    max_features : int, optional
        Vocabulary scheme: keep the ``max_features`` terms of highest total count, after
        ``min_df``/``max_df``, as ``CountVectorizer``.
    select : {"mutual-info"}, optional
        Vocabulary scheme with labels: then keep the ``n_select`` terms of highest mutual
        information between their presence and the label (Liu et al. 2019, §5.2); see
        :func:`sphdist.text.tfidf.mutual_information`. Ties go to the earlier term.
    n_select : int, default 500
        Terms kept by ``select``.
    lowercase, token_pattern, stop_words, strip_accents, sublinear_tf
        scikit-learn's options of the same names (``stop_words`` None or ``"english"``,
        default ``"english"``; ``strip_accents`` None, ``"ascii"`` or ``"unicode"``;
        ``token_pattern`` a regular expression with at most one capturing group;
        ``sublinear_tf`` default True: tf is replaced by ``1 + ln(tf)``).
    remove : sequence of str, optional
        Any of ``"headers"``, ``"footers"``, ``"quotes"``: parts of each document removed before
        tokenising, as ``sklearn.datasets.fetch_20newsgroups(remove=...)`` (stored in
        :data:`REMOVE_OPTIONS` order). Default: none, or with an ingest's ``like`` the
        cleaning recorded there (pass ``()`` to keep the headers of documents that have none to
        remove). Documents left without a token by the removal are counted
        (``attrs["ingest"]["n_emptied_by_remove"]``) and reported in a warning.

    Raises
    ------
    ParameterError
        If ``remove`` is a single string or holds another value.
    ImportError
        If ``remove`` is not empty and scikit-learn lacks its news-cleaning functions.
    """

    vocabulary: bool = INGEST_DEFAULTS["vocabulary"]
    n_features: int | None = None
    min_df: int | float | None = None
    max_df: int | float | None = None
    max_features: int | None = None
    select: str | None = None
    n_select: int = 500
    lowercase: bool = True
    token_pattern: str = DEFAULT_TOKEN_PATTERN
    stop_words: str | None = INGEST_DEFAULTS["stop_words"]
    strip_accents: str | None = None
    sublinear_tf: bool = INGEST_DEFAULTS["sublinear_tf"]
    remove: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.remove is not None:
            object.__setattr__(self, "remove", _check_remove(self.remove))

    def options(self) -> TextOptions:
        """The resolved options (defaults filled in, every value validated).

        Raises
        ------
        ParameterError
            If a value is out of range or does not apply to the feature scheme (e.g.
            ``n_features`` with a vocabulary, ``min_df`` with hashing), each message naming
            the option that fixes it; ``token_pattern`` does not compile or has several
            capturing groups.
        """
        return ingest_options(
            vocabulary=bool(self.vocabulary), n_features=self.n_features, min_df=self.min_df,
            max_df=self.max_df, max_features=self.max_features, select=self.select,
            n_select=self.n_select, lowercase=self.lowercase, token_pattern=self.token_pattern,
            stop_words=self.stop_words, strip_accents=self.strip_accents,
            sublinear_tf=self.sublinear_tf,
        )


# -- the public function ------------------------------------------------------------------------
def check_sizes(chunk_size: int, partition_size: int | None) -> tuple[int, int]:
    """``chunk_size`` and ``partition_size`` validated, the latter rounded up to a multiple.

    Raises
    ------
    ParameterError
        If either is not an integer in [1, 2**31 - 1].

    Examples
    --------
    >>> check_sizes(4096, None), check_sizes(100, 250)
    ((4096, 16384), (100, 300))
    """
    chunk_size = int(check_param("chunk_size", chunk_size, _DOCUMENTS))
    if partition_size is None:
        partition_size = 4 * chunk_size
    partition_size = int(check_param("partition_size", partition_size, _DOCUMENTS))
    return chunk_size, -(-partition_size // chunk_size) * chunk_size


def write(
    held: Output,
    source: SourceSpec,
    *,
    text: TextSpec,
    like: str | os.PathLike[str] | None,
    liked: tuple[TextOptions, Any, tuple[str, ...], dict[str, Any]] | None,
    chunk_size: int,
    partition_size: int,
    overwrite: bool,
    progress: bool | str,
) -> Corpus:
    """Build the tf-idf corpus of ``source`` in the held output, and commit it.

    The work of ``sphdist ingest`` (:class:`sphdist.jobs.ingest.IngestRequest`, which validates
    the parameters, reads ``like`` once, holds the output and decides whether it may be
    replaced); the parameters, the result and the errors are the request's.

    Parameters
    ----------
    held : Output
        The output, held (:func:`sphdist.jobs.run`).
    source : SourceSpec
    text : TextSpec
    like : path-like or None
    liked : tuple or None
        What :func:`read_like` read of ``like`` (None without it).
    chunk_size, partition_size : int
        Validated; ``partition_size`` a multiple of ``chunk_size``.
    overwrite : bool
        Whether the corpus there is replaced (the corpus writer's commit).
    progress : bool or "log"

    Returns
    -------
    Corpus
    """
    start_time = time.perf_counter()
    paths, on_error, inherit_remove = source.paths, source.on_error, text.remove is None
    remove = text.remove or ()
    given = source.flags()  # what selects the documents, for the commands the messages suggest
    if liked is not None:
        options, like_idf, inherited, like_info = liked
        if inherit_remove:
            remove = inherited
        given["like"] = like
    else:
        options = text.options()
        like_idf = like_info = None
        given.update(text_arguments(options, text.min_df, text.max_df))
        if not options.vocabulary:
            _check_feature_memory(options.n_features)
    given["remove_headers"] = bool(remove) and not (like is not None and inherit_remove)
    output = held.path  # as named, normalised once (open_output)
    reading = source.reading()
    src = plan(paths, format=source.format, reading=reading, partition_size=partition_size,
               categories=source.categories, max_docs_per_label=source.max_docs_per_label,
               seed=source.seed)
    if like_info is not None and like_info.get("fields"):
        source = _carry_fields(source, src, like_info["fields"], like)
        reading = source.reading()
    labelled = src.format in ("dir", "tar") or source.label_field is not None
    if options.select is not None and not labelled:
        raise ParameterError(
            option("select", 'mutual-info')
            + " needs labels. To resolve this, name the label field (" + option("label_field")
            + "), or drop " + option("select") + "."
        )
    if not src.partitions:
        raise DataError(f"{paths}: no documents found (empty files). To resolve this, pass "
                        "a source with at least one document.")
    if src.unreadable and on_error == "fail":  # a link or device in a folder or archive
        raise src.unreadable[0].error()
    held.remove_stale()  # an interrupted ingest's staging and spilled counts:
    # this one holds the output's lock, which proves them stale
    staging = held.staging()  # a fresh name of the held output's: its spilled counts' too
    # the tasks' paths: absolute, as the driver means them (a worker's directory is its own)
    spill = anchored(staging.with_name(f"{staging.name}-spill"))
    with _scheduler(src, output) as pool, _scratch(spill) as spill_dir:
        scheduler, workers = pool.scheduler, pool.workers
        run = _in_order(2 * workers, pool.settle, pool.executor)
        job = CountJob(options=options, remove=remove, reading=reading, on_error=on_error,
                       chunk_size=chunk_size, chunk_chars=_passes.CHUNK_CHARS,
                       need_class_df=options.select is not None, spill=str(spill_dir))
        total = _reduce_counts(run, src, job, progress, scheduler)
        id_field, wheres = _id_field(source, src, total)
        repeated = [] if wheres else repeated_ids(src.partitions, reading, total)
        if repeated and id_field != source.id_field:  # the default field's ids repeat
            logger.warning(
                "the %r field does not hold unique ids (%s): document ids are path:line "
                "instead. To use a field of unique ids, name it with %s",
                id_field, Text(repeated[0][2].why), Text(option("id_field", "NAME")))
            repeated, id_field, wheres = [], None, True
        repeat = f"{documents(len(repeated))} repeat{'s' if len(repeated) == 1 else ''}"
        if repeated and on_error == "fail":
            first = repeated[0][2]
            raise dataclasses.replace(first, why=f"{first.why} ({repeat} an earlier id)").error()
        if repeated:  # count again without them, so that the idf counts only the kept
            logger.info("%s an earlier id: counting again without them (on_error=%r)", repeat,
                        on_error)
            job = dataclasses.replace(job, drop=tuple(
                (p, k, bad.message()) for p, k, bad in repeated))
            total = _reduce_counts(run, src, job, progress, scheduler)
        total.id_hashes = None
        if src.unreadable:  # found when listing: skipped and counted as any bad document
            total.merge(Counts(n_skipped=len(src.unreadable),
                               examples=[bad.message() for bad in src.unreadable[:5]]))
        n = total.n_docs
        _report_skipped(total, on_error)
        if n == 0:
            raise DataError(
                f"{paths}: no documents to ingest ({total.n_skipped} skipped). To resolve "
                "this, pass a source with at least one usable document."
            )
        emptied = Emptied(paths, output, given, remove, like if inherit_remove else None,
                          total.n_emptied, n)
        if not total.has_token():
            raise emptied.error()
        emptied.warn()
        keep_all = ingest_remedy(paths, output, given, min_df=1, max_df=1.0)
        m, idf, vocab, mapping = features(options, total, n, like_idf, remedy=remedy(keep_all))
        # every term found and its counts: the kept ones are the vocabulary from here on
        total.terms = total.term_df = total.term_tf = total.class_df = total.df = None
        if mapping is not None:
            vocab = mapping  # held once: an array of the kept terms (not a list beside it)
        with open_file(join(spill_dir, "idf.npy"), "wb") as f:
            np.save(f, idf)
        if mapping is not None:
            save_strings(join(spill_dir, "vocabulary.npz"), mapping)
        label_names = sorted(total.label_counts) if labelled else None
        scheme = options.feature_scheme(m)
        if like_info is not None:
            scheme = like_info["feature_scheme"]
        learned = mapping is not None
        writer = CorpusWriter(
            held, n_features=m, feature_scheme=scheme, tfidf=options.tfidf(remove),
            label_names=label_names, vocabulary=vocab, overwrite=overwrite,
        )
        vocab = mapping = None  # stored by the writer: not held through pass 2
        with writer:
            # workers weight the chunks and store them into the staging directory; the
            # driver records them in order (chunk "X" is created first: no race on it)
            zarr.open_group(store=str(writer.staging), mode="r+").require_group("X")
            weigh = WeightJob(
                spill=str(spill_dir), staging=str(anchored(writer.staging)), n_features=m,
                learned=learned, sublinear_tf=options.sublinear_tf,
                label_names=tuple(label_names) if label_names is not None else None,
                wheres=wheres,
            )
            tasks = [(weigh, k, c) for k, c in enumerate(total.chunks)]
            with _progress(n, "pass 2/2: tf-idf", unit="document", mode=progress) as bar:
                for stored, ids, codes in run(weight_chunk, tasks):
                    writer.append_stored_chunk(stored, ids, codes)
                    bar.update(len(ids))
            summary = _summary(source, src, total, remove=remove, options=options,
                               chunk_size=chunk_size, partition_size=partition_size,
                               workers=workers, like_info=like_info)
            summary["scheduler"] = scheduler
            summary["task_processes"] = len(run.pids)
            summary["fields"]["id"] = id_field
            summary["seconds"] = round(time.perf_counter() - start_time, 3)
            corpus = writer.commit(idf, extra_attrs={"source": _describe(paths),
                                                     "ingest": summary})
    if corpus.n_empty:
        logger.info("%d of %s %s no token: their columns are zero (flagged in "
                    "corpus.empty)", corpus.n_empty, documents(n),
                    "has" if corpus.n_empty == 1 else "have")
    return corpus


def _id_field(source: SourceSpec, src: Plan, total: Counts) -> tuple[str | None, bool]:
    """The field the ids came from, and whether to store ``path:line`` ids instead.

    JSON Lines without ``id_field``: the ids are the :data:`DEFAULT_ID_FIELD` values when every
    document has one (the caller still checks that they are unique), else ``path:line`` for
    every document (an information line says why, when only some have one).
    """
    if source.id_field is not None or src.format != "jsonl" or not total.n_docs:
        return source.id_field, False
    if total.n_without_id == 0:
        return DEFAULT_ID_FIELD, False
    if total.n_without_id < total.n_docs:
        logger.info("%d of %s have no usable %r field: document ids are path:line. To use a "
                    "field of ids, name it with %s", total.n_without_id,
                    documents(total.n_docs), DEFAULT_ID_FIELD, Text(option("id_field", "NAME")))
    return None, True


def _summary(source: SourceSpec, src: Plan, total: Counts, *, remove: tuple[str, ...],
             options: TextOptions, chunk_size: int, partition_size: int, workers: int,
             like_info: dict[str, Any] | None) -> dict[str, Any]:
    """The ``ingest`` attribute of the corpus (``seconds`` filled in at the commit)."""
    categories = source.categories
    return {
        "format": src.format,
        "categories": sorted(set(categories)) if categories is not None else None,
        "max_docs_per_label": source.max_docs_per_label,
        "seed": source.seed,
        "sampling": "numpy.random.default_rng([seed, zlib.crc32(label.encode())])"
        ".choice(n_label, max_docs_per_label, replace=False) per label",
        "chunk_size": chunk_size,
        "partition_size": partition_size,
        "n_partitions": len(src.partitions),
        "workers": workers,
        "n_available": src.n_available,
        "n_documents": total.n_docs,
        "n_blank_text": total.n_blank,
        "n_emptied_by_remove": total.n_emptied,
        "remove": list(remove),
        "n_skipped": total.n_skipped,
        "skipped_examples": total.examples,
        "on_error": source.on_error,
        "text_options": options.describe(),
        "encoding": source.encoding,
        "fields": {"text": source.text_field, "label": source.label_field,
                   "id": source.id_field},
        "like": like_info and {k: like_info[k] for k in ("path", "fingerprint")},
        "seconds": None,
    }


#: Driver memory per hashed feature: the document frequencies of a partition, their running
#: sum and the new sum (int64 each), and the idf (float64).
_BYTES_PER_FEATURE = 32


def _check_feature_memory(n_features: int) -> None:
    """Refuse a hashed feature space whose per-feature arrays exceed this machine's memory."""
    import psutil

    need, total = _BYTES_PER_FEATURE * n_features, psutil.virtual_memory().total
    if need > total:
        raise ParameterError(
            option("n_features", n_features)
            + f" needs about {need / 2 ** 30:.1f} GiB for the document frequencies and idf ("
            f"{_BYTES_PER_FEATURE} bytes per feature), more than the {total / 2 ** 30:.1f} "
            "GiB of this machine. To resolve this, hash into fewer features, e.g. "
            + option("n_features", 2**20) + "."
        )


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
    if remove and STRIPPERS is None:  # pragma: no cover
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
    path = location(path)
    if not exists(path):
        raise InputNotFoundError(f"{path}: no such corpus or model (" + option("like")
                                 + "). To resolve this, pass the corpus.zarr or model.zarr to "
                                 "imitate.")
    kind = stored_kind(path)
    if kind not in ("corpus", "model"):
        raise CorpusFormatError(f"{path}: neither a sphdist corpus nor a model (sphdist.kind "
                                f"is {kind!r}). To resolve this, pass a corpus.zarr or "
                                "model.zarr to " + option("like") + ".")
    stored = open_stored(path, kind)  # validated, arrays read through the safe-codec check
    if kind == "corpus":
        meta, error = stored.attrs, CorpusFormatError
    else:
        meta, error = stored.attrs.get("corpus") or {}, ModelFormatError
    scheme, tfidf = meta.get("feature_scheme") or {}, meta.get("tfidf") or {}
    idf = stored.idf
    if scheme.get("type") not in ("hashing", "vocabulary") or idf is None:
        raise error(f"{path}: has no tf-idf text features to imitate (feature scheme "
                    f"{scheme.get('type')!r}, idf {'absent' if idf is None else 'present'}). "
                    "To resolve this, pass a corpus or model built from text by sphdist ingest.")
    idf = require_finite(np.asarray(idf, dtype=np.float64), str(path), "idf", error=error,
                         remedy="re-ingest the corpus" if kind == "corpus" else "refit the model")
    fixed = None
    if scheme["type"] == "vocabulary":
        vocabulary = stored.vocabulary
        if vocabulary is None:
            raise error(f"{path}: vocabulary scheme but no stored vocabulary. To resolve this, "
                        "pass the corpus.zarr the model was fitted on.")
        fixed = tuple(str(w) for w in vocabulary)
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
    info = {"path": str(path), "fingerprint": meta.get("fingerprint"), "feature_scheme": scheme,
            "fields": _like_fields(stored, kind, meta)}
    return options, idf, remove, info


def _like_fields(stored: Any, kind: str, meta: dict[str, Any]) -> dict[str, Any] | None:
    """The fields (text, label, id) the corpus of ``like`` was ingested with, if known.

    A model records its corpus's path and fingerprint: the fields are read from that corpus
    when it is still there and is still the one the model was fitted on.
    """
    if kind == "corpus":
        return (stored.attrs.get("ingest") or {}).get("fields")
    path = meta.get("path")
    try:
        if not path or not exists(path) or stored_kind(path) != "corpus":
            return None
        corpus = open_stored(path, "corpus")
        if corpus.fingerprint != meta.get("fingerprint"):
            return None
        return (corpus.attrs.get("ingest") or {}).get("fields")
    except Exception:  # noqa: BLE001 - fields are a convenience; the model is what is checked
        return None


def _carry_fields(source: SourceSpec, src: Plan, fields: dict[str, Any],
                  like: Any) -> SourceSpec:
    """``source`` with the fields of the ``like`` corpus it does not name, where it has them.

    A field the source's first record (or its columns) lacks is not carried: held-out
    documents without labels are ingested without labels, as before.
    """
    names = field_names(src)
    carried = {}
    for role, default in (("text", "text"), ("label", None), ("id", None)):
        theirs, ours = fields.get(role), getattr(source, f"{role}_field")
        if theirs and ours == default and theirs != ours and theirs in names:
            carried[f"{role}_field"] = theirs
    if not carried:
        return source
    logger.info("fields as %s was ingested: %s", like, ", ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in carried.items()))
    return dataclasses.replace(source, **carried)


#: The schedulers whose tasks run in the driver's process (:class:`_Pool`'s ``scheduler``):
#: their counting tasks advance the pass-1 bar as they read (:attr:`CountJob.progress`).
_IN_PROCESS = ("threads", "sync", "synchronous", "single-threaded")


def _reduce_counts(run: Callable, src: Plan, job: CountJob, progress: bool | str,
                   scheduler: str) -> Counts:
    """Pass 1 on every partition, the counts merged in partition order.

    The bar counts documents as the tasks read them where they run in this process
    (``scheduler`` in :data:`_IN_PROCESS`), else a partition's documents once it ends.
    """
    import threading

    total = Counts()
    with _progress(src.n_documents, "pass 1/2: count", unit="document",
                   mode=progress) as bar:
        lock = threading.Lock()  # tasks of a thread pool report at once

        def advance(n: int) -> None:
            with lock:
                bar.update(n)

        ticking = bool(progress) and scheduler in _IN_PROCESS
        if ticking:
            job = dataclasses.replace(job, progress=advance)
        tasks = [(job, i, p) for i, p in enumerate(src.partitions)]
        for counts in run(count_partition, tasks):
            total.merge(counts)
            if not ticking:
                bar.update(counts.n_docs + counts.n_skipped)
    return total


def _report_skipped(total: Counts, on_error: str) -> None:
    if total.n_skipped:
        logger.warning(
            "skipped %d document(s) that could not be ingested (%s), e.g. %s",
            total.n_skipped, Text(option("on_error", on_error)),
            Text("; ".join(total.examples[:3])),
        )


# -- where the tasks run: dask's scheduler of the calling context, else a pool of this machine --
#: A local source of at least this many documents is ingested by a pool of processes (below:
#: threads, which start nothing), on a machine of at least :data:`PROCESSES_FROM_CPUS` cores.
#: None: never. Tokenising holds the GIL, so threads keep about one core busy. Measured on 16
#: idle cores at 100,000 documents (pipelines/results/ingest_default_16.md): the pool of 16
#: processes took 8.9 s, dask's threads 24.7 s and the ingest's own threads 23.0 s
#: (scikit-learn's TfidfVectorizer in one process: 12.0 s), the same corpus bit for bit, at
#: 4.8 GiB peak RSS against 1.0. On the shared 2-core machine, at loads of 8 to 15, the pool
#: was no faster than threads (77-97 s against 58-74 s at 100,000 documents): the kernel's
#: autogroup gives a session one share of the cores whatever its number of processes, so a
#: second process bought nothing there and cost its start (a fork server importing
#: scikit-learn, ~2.5 CPU s); at load 3-5 it was 1.19x faster at 200,000 and slower at 1M
#: (pipelines/results/ingest_default.md, series 4-7).
PROCESSES_FROM_DOCUMENTS: int | None = 50_000
#: The same for a source whose documents are counted only by reading it (gzip JSON Lines, CSV),
#: by the bytes of its files (25,000,000: 50,000 documents of 500 bytes); None: never.
PROCESSES_FROM_BYTES: int | None = 25_000_000
#: Fewest cores (dask's ``num_workers``, else ``os.cpu_count()``) on which a large source is
#: ingested by processes: 4, between the 2 where they did not pay and the 16 where they were
#: 2.6x as fast as threads (the cores in between not measured).
PROCESSES_FROM_CPUS = 4


def local_pool(n_documents: int | None, n_bytes: int, *, cpus: int,
               local: bool = True) -> str:
    """The pool of this machine that runs an ingest: ``"threads"`` or ``"processes"``.

    Tokenising holds Python's GIL, so threads keep about one core busy; processes use them all
    but cost a start (a fork server that imports the tokeniser once, then forks each worker)
    and pickling each partition's counts back. They are chosen when there are at least
    :data:`PROCESSES_FROM_CPUS` cores and the source is large enough: at least
    :data:`PROCESSES_FROM_DOCUMENTS` documents, or,
    when the count is unknown before reading (``n_documents`` None), at least
    :data:`PROCESSES_FROM_BYTES` bytes of files. A source or output in an object store keeps to
    threads (the storage options of this process are not a worker process's). The corpus is the
    same, bit for bit, either way. Worker processes import the main module again (Python's
    multiprocessing): a script that runs an ingest on a large source must do so under
    ``if __name__ == "__main__":`` (else :class:`~sphdist.errors.WorkersLostError` says so).

    Parameters
    ----------
    n_documents : int or None
        Documents of the source, when known from listing it.
    n_bytes : int
        Bytes of its files (0 when unknown, e.g. a folder).
    cpus : int
        Cores to use: dask's ``num_workers`` setting, else this machine's (``os.cpu_count()``).
    local : bool, default True
        Whether the source and the output are on a local (or shared) filesystem.

    Returns
    -------
    str

    >>> local_pool(1_000_000, 0, cpus=2)  # 2 cores: threads
    'threads'
    >>> local_pool(18_846, 0, cpus=16), local_pool(1_000_000, 0, cpus=16)
    ('threads', 'processes')
    >>> local_pool(None, 50_000_000, cpus=16), local_pool(1_000_000, 0, cpus=16, local=False)
    ('processes', 'threads')
    """
    threshold, size = ((PROCESSES_FROM_DOCUMENTS, n_documents) if n_documents is not None
                       else (PROCESSES_FROM_BYTES, n_bytes))
    large = threshold is not None and size >= threshold
    many = cpus >= max(2, PROCESSES_FROM_CPUS)
    return "processes" if large and many and local else "threads"


@dataclasses.dataclass
class _Pool:
    """Where an ingest's tasks run, as :func:`_scheduler` yields it.

    ``executor``: the ingest's own pool (a ``concurrent.futures`` executor the tasks are
    submitted to directly), None when the tasks go to dask's scheduler of the calling context;
    ``settle()`` waits for the own pool's running tasks and cancels the others (None when the
    pool is not the ingest's own).
    """

    scheduler: str
    workers: int
    settle: Callable[[], None] | None = None
    executor: Any = None


@contextlib.contextmanager
def _scheduler(src: Plan, output: Any) -> Iterator[_Pool]:
    """Where the tasks run, for the block.

    The active ``distributed`` client, or the scheduler the caller's ``dask.config`` names,
    as they are; else a pool of this machine's cores (:func:`local_pool`) owned by the block,
    shut down on exit.
    """
    import dask

    from sphdist.core.graph import active_client

    client = active_client()
    if client is not None:
        yield _Pool("distributed", max(1, len(client.scheduler_info().get("workers", {}))))
        return
    named = dask.config.get("scheduler", None)
    if callable(named):  # a scheduler's get, as connect() names the threads: its module's name
        named = {"dask.threaded": "threads", "dask.local": "sync"}.get(
            getattr(named, "__module__", ""), getattr(named, "__name__", repr(named)))
    if named is not None:
        single = named in ("sync", "synchronous", "single-threaded")
        workers = 1 if single else int(dask.config.get("num_workers", None)
                                       or os.cpu_count() or 1)
        yield _Pool(str(named), workers)
        return
    from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

    cpus = int(dask.config.get("num_workers", None) or os.cpu_count() or 1)
    local = not is_remote(output) and not any(is_remote(p) for p in src.paths)
    kind = local_pool(src.n_documents, _source_bytes(src), cpus=cpus, local=local)
    if kind == "processes":
        pool: Any = ProcessPoolExecutor(cpus, mp_context=_fork_server(),
                                        initializer=ignore_interrupts)
    else:
        pool = ThreadPoolExecutor(cpus, thread_name_prefix="sphdist-ingest")

    def settle() -> None:
        pool.shutdown(wait=True, cancel_futures=True)

    try:
        yield _Pool(kind, cpus, settle, pool)
    finally:
        settle()


def _source_bytes(src: Plan) -> int:
    """Bytes of a source's files (0 for a folder or what cannot be sized)."""
    total = 0
    for path in src.paths:
        with contextlib.suppress(OSError, TypeError):
            if not is_remote(path) and os.path.isfile(path):
                total += os.path.getsize(path)
    return total


def _fork_server() -> Any:
    """A multiprocessing context whose workers fork from a server that imported the tokeniser.

    Where this ingest starts the fork server, it imports the tokenising code and the tasks'
    wrapper (this module) once: each worker forks from it with nothing left to import (no
    fork of this multi-threaded process). The server is started as for a LocalCluster's
    workers (:func:`sphdist._processes.fork_context`: they never take a Ctrl-C); spawn where
    there is no fork server (Windows).
    """
    return fork_context(["sphdist.text.ingest"])


def _in_order(window: int, settle: Callable[[], None] | None = None,
              executor: Any = None) -> _InOrder:
    """``run(fn, tasks)``: ``fn(*args)`` of every task, results yielded in task order.

    With ``executor`` (the ingest's own pool, a ``concurrent.futures`` executor): a sliding
    window; ``window`` tasks are submitted at first, and each time the driver takes a result
    (the first in task order, when it has ended) the next task is submitted *before* the
    result is yielded, so the pool stays fed while the driver reduces it (merges the counts,
    records a chunk) and while a slow task holds up the results behind it. Without one: one
    ``dask.delayed`` per task, ``window`` tasks per ``dask.compute`` (on the client or local
    scheduler of the calling context). Either way at most ``window`` results wait in the
    driver and its reductions see them in task order whatever the order they finish in, so
    the output is the same, bit for bit. A task's error is raised, the first in task order,
    once no task still runs (none still writes next to the output while the driver cleans
    up): after its window has ended, or after ``settle`` (given: it waits for the running
    tasks and cancels the others); an interruption (Ctrl-C) calls ``settle`` too. The
    returned runner's ``pids`` collects the process ids that ran tasks.
    """
    return _InOrder(window, settle, executor)


@dataclasses.dataclass
class _InOrder:
    """The runner :func:`_in_order` returns."""

    window: int
    settle: Callable[[], None] | None = None
    executor: Any = None
    #: process ids that ran a task (more than one: a pool of processes did the work)
    pids: set[int] = dataclasses.field(default_factory=set)

    def __call__(self, fn: Callable, tasks: Sequence[tuple]) -> Iterator[Any]:
        from concurrent.futures.process import BrokenProcessPool

        batches = self._sliding if self.executor is not None else self._windows
        try:
            for failed, value, pid in batches(fn, tasks):
                self.pids.add(pid)
                if failed:
                    if self.settle is not None:
                        self.settle()
                    raise value
                yield value
        except BrokenProcessPool as exc:
            if self.settle is not None:
                self.settle()
            raise WorkersLostError(
                f"the ingest's worker processes stopped ({type(exc).__name__}): a process "
                "pool's workers import the main module again (Python's multiprocessing), "
                "so a script that runs an ingest at its top level runs it again in each of "
                "them. To resolve this, put the script's code under `if __name__ == "
                "\"__main__\":`, or run the tasks on threads: `with "
                "dask.config.set(scheduler=\"threads\"): run(IngestRequest(...))`."
            ) from None
        except BaseException:
            if self.settle is not None:
                self.settle()
            raise

    def _sliding(self, fn: Callable, tasks: Sequence[tuple]) -> Iterator[tuple]:
        from collections import deque

        todo = iter(tasks)
        running: deque[Any] = deque()

        def feed() -> None:
            for args in itertools.islice(todo, self.window - len(running)):
                running.append(self.executor.submit(_outcome, fn, *args))

        feed()
        while running:
            outcome = running.popleft().result()
            if not outcome[0]:  # a failure ends the run: nothing more to start
                feed()  # before the driver reduces this result: the pool never waits for it
            yield outcome

    def _windows(self, fn: Callable, tasks: Sequence[tuple]) -> Iterator[tuple]:
        import dask

        for start in range(0, len(tasks), self.window):
            batch = [dask.delayed(_outcome)(fn, *args,
                                            dask_key_name=f"{fn.__name__}-{uuid.uuid4().hex}")
                     for args in tasks[start:start + self.window]]
            yield from dask.compute(*batch)


def _outcome(fn: Callable, *args: Any) -> tuple[bool, Any, int]:
    """``(False, fn(*args), pid)``, or ``(True, the exception, pid)``: a task that never fails.

    Its graph never fails; ``pid`` is the process that ran it.
    """
    try:
        return False, fn(*args), os.getpid()
    except Exception as exc:  # noqa: BLE001 - raised by the driver, in task order
        return True, exc, os.getpid()


@contextlib.contextmanager
def _scratch(path: Path) -> Iterator[Path]:
    """A scratch directory for the spilled counts, removed on exit whatever happens."""
    if not is_remote(path):  # an object store has no directories
        path.mkdir(parents=True)
    try:
        yield path
    finally:
        discard(path)
