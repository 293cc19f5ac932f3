"""Text -> tf-idf -> ``corpus.zarr``: the ingestion stage, partition-parallel on Dask.

Sources (:mod:`sphdist.text.sources`): a directory tree or tar archive (``.tar``, ``.tar.gz``,
...) of one file per document, labelled by the folder holding it (the 20 Newsgroups "bydate"
archive is one); JSON Lines files (one or many, a glob, optionally gzip-compressed) with a text
field and optional label and id fields; CSV and Parquet files with a text column.

:func:`ingest` turns a source into the papers' matrix X of shape (m features, n documents)
with scikit-learn's text semantics, in two passes over *partitions* of the source that run as
tasks (on the active ``distributed`` client, else on local worker processes, or in this
process for a small source; the tasks are in :mod:`sphdist.text._passes`):

1. **count** (one task per partition): read and check the documents, optionally strip
   news headers, footers and quoted replies (scikit-learn's own functions), tokenise and count
   (``HashingVectorizer(alternate_sign=False, norm=None)`` or ``CountVectorizer``), spill the
   counts of every chunk to a scratch directory next to the output, and return the
   partition's document frequencies, which the driver reduces;
2. **weight** (one task per chunk): idf exactly as ``TfidfTransformer(smooth_idf=True)``
   fits it on all documents (or the idf of ``like``), optional sublinear tf, every column
   scaled to unit L2 norm; the driver writes the chunks in corpus order through
   :class:`sphdist.io.corpus_writer.CorpusWriter`, which commits the corpus atomically at the end.

Documents are tokenised once; only the document frequencies (and, for a learned vocabulary,
its terms) and a bounded window of chunks are ever in memory.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import dataclasses
import functools
import itertools
import logging
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from numbers import Integral
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from sphdist import io as _atomic  # committed, staging_path, discard
from sphdist._progress import progress as _progress
from sphdist._validation import Number, check_int, check_param
from sphdist.errors import DataError, InputNotFoundError, OutputExistsError, ParameterError
from sphdist.io import exists, is_remote, join, location, locks_output, open_file
from sphdist.io.corpus import Corpus
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.text._messages import Emptied, documents, ingest_command, option_flags
from sphdist.text._passes import (
    STRIPPERS,
    CountJob,
    Counts,
    WeightJob,
    count_partition,
    features,
    repeated_ids,
    weight_chunk,
)
from sphdist.text.sources import FORMATS, Plan, Reading, plan
from sphdist.text.tfidf import (
    DEFAULT_TOKEN_PATTERN,
    MAX_CHUNK_SIZE,
    TextOptions,
    ingest_options,
)

__all__ = ["FORMATS", "ON_ERROR", "REMOVE_OPTIONS", "ingest", "read_like"]

logger = logging.getLogger("sphdist")

#: The values ``remove`` may hold, in the order they are applied.
REMOVE_OPTIONS = ("headers", "footers", "quotes")
#: What to do with a document that cannot be ingested.
ON_ERROR = ("fail", "skip")
_SMALL_SOURCE = 20_000  # documents: below, the default is to run in this process
_DOCUMENTS = Number(Integral, 1, MAX_CHUNK_SIZE, closed="both")  # a chunk or partition size


# -- the public function ------------------------------------------------------------------------
@locks_output("output")  # one writer per output, until the commit
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
    n_features: int | None = None,
    vocabulary: bool = True,
    min_df: int | float | None = None,
    max_df: int | float | None = None,
    max_features: int | None = None,
    select: str | None = None,
    n_select: int = 500,
    lowercase: bool = True,
    token_pattern: str = DEFAULT_TOKEN_PATTERN,
    stop_words: str | None = "english",
    strip_accents: str | None = None,
    sublinear_tf: bool = True,
    remove: Sequence[str] | None = None,
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
        ``path:row``). Ids must be unique: a document whose id an earlier one has is a bad
        document (``on_error``: refused naming both, or skipped and counted, the first kept).
    categories : sequence of str, optional
        Directory / tar sources: keep only the documents with these labels.
    max_docs_per_label : int, optional
        Directory / tar sources: keep at most this many documents per label, drawn uniformly
        without replacement with ``numpy.random.default_rng([seed,
        zlib.crc32(label.encode())])``.
    seed : int, default 0
        Non-negative seed of that sampling.
    n_features : int, optional
        Hashing scheme only (``vocabulary=False``): hashed features m (rows of X),
        ``1 <= n_features <= 2**31 - 2`` (scikit-learn's ``HashingVectorizer``), and at most
        what this machine's memory holds at 32 bytes per feature (document frequencies and idf
        on the driver). Default 2**18 with hashing; refused with a vocabulary.
    vocabulary : bool, default True
        Learn a vocabulary (sorted terms, stored in the corpus, so components read as words);
        False hashes the tokens into ``n_features`` features instead (``--hashing``): no
        vocabulary is held on the driver, for collections whose distinct terms do not fit
        in its memory, but every fit step then works on an ``n_features x r`` matrix U.
    min_df, max_df : int or float, optional
        Vocabulary scheme: keep terms in at least ``min_df`` and at most ``max_df``
        documents (a float is a fraction of the documents), as ``CountVectorizer``. Default
        5 and 0.5 (scikit-learn's text-clustering recipe; ``INGEST_DEFAULTS`` in
        :mod:`sphdist.text.tfidf`, with the measurement behind it); not applicable to
        hashing. A collection of fewer than 10 documents needs ``min_df=1, max_df=1.0``.
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
        tokenising, as ``sklearn.datasets.fetch_20newsgroups(remove=...)``. Default: none, or
        with ``like`` the cleaning recorded there (pass ``()`` to keep the headers of documents
        that have none to remove). Documents left without a token by the removal are counted
        (``attrs["ingest"]["n_emptied_by_remove"]``) and reported in a warning.
    like : path-like, optional
        A ``corpus.zarr`` or ``model.zarr``: take its feature scheme, tf-idf options, idf and
        vocabulary instead of fitting them, so that the new documents are weighted as the
        documents the model was fitted on. The feature and weighting options above are then
        ignored; ``remove``, when given, overrides the recorded cleaning.
    encoding : str, default "latin-1"
        Encoding of directory and tar documents (latin-1 decodes any byte, as
        ``fetch_20newsgroups``; ``"utf-8"`` refuses undecodable bytes). JSON Lines and CSV are
        read as UTF-8.
    on_error : {"fail", "skip"}, default "fail"
        A document that cannot be used (undecodable bytes, binary content, longer than
        ``max_document_bytes``, a line that is not a JSON object or has no text field, a
        null text or label, a repeated id, a JSON value nested too deeply to read, a member of
        a tar archive that is a link or a device, a FIFO or device in a folder) raises
        :class:`DataError` naming the file and line (or member); with ``"skip"`` it is left
        out, counted (``attrs["ingest"]["n_skipped"]``, with the first
        few named in ``skipped_examples``) and reported in a warning.
    max_document_bytes : int, default 10_000_000
        Longest accepted document, in bytes (characters for CSV and Parquet values).
    chunk_size : int, default 4096
        Documents per stored chunk and per spilled count matrix, at most 2**31 - 1.
    partition_size : int, optional
        Documents per partition (one task of the counting pass), rounded up to a multiple of
        ``chunk_size``; default ``4 * chunk_size``. A gzip JSON Lines file or a CSV file is one
        partition.
    n_workers : int, optional
        Local worker processes, started for this call: forked by dask's multiprocessing
        scheduler (Linux, when no other Python thread runs here), else a
        ``distributed.LocalCluster`` on 127.0.0.1. Default: the active ``distributed`` client
        if there is one, else one process per core when the source has more than one
        partition and more than 20,000 documents (or an unknown number). ``1`` runs
        everything in this process.
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
        line, row or member, and how to proceed; a file name that is not UTF-8 is such a
        document), if a compressed file is truncated or damaged, if the source holds no
        document (or all were skipped), is not of its format, lacks the text column, if no
        document has a token (e.g. all emptied by ``remove``), or if ``min_df``/``max_df``
        leave no term (a small collection; the message gives the command that keeps them).
    ParameterError
        If a parameter is out of range or does not apply (e.g. ``select`` without labels or
        without ``vocabulary``, ``n_features`` with it), ``token_pattern`` does not compile
        or has several capturing groups, ``n_features`` exceeds this machine's memory, or a
        category is not a label of the source.
    CorpusFormatError, ModelFormatError
        If ``like`` is neither a corpus with an idf nor a model with one.
    OutputExistsError
        If ``output`` exists and ``overwrite`` is False.
    OutputLockedError
        If another process is writing ``output`` (``overwrite`` does not take it over).
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
    labels (and, during pass 1, an 8-byte digest of each id, to find repeated ids), and at
    most ``2 * workers`` partition results or chunks (tasks are submitted in order,
    ``2 * workers`` ahead, and their results taken in order); a worker holds one chunk
    of documents and its counts (a tar partition: the partition's raw documents). The spilled
    counts take about 12 bytes per nonzero on disk next to the output, and are removed at the
    end. Cost: every document is read, decoded and tokenised once (twice when ids repeat and
    ``on_error="skip"``: pass 1 counts again without the repeats, so that the idf is the one of
    the documents kept); a tar archive is read once per partition (gzip cannot seek). Workers
    write the spilled counts and the stored chunks next to ``output``: on a distributed cluster
    that directory must be on a filesystem the workers share, and the source must be readable by
    them. Local worker processes are forked (Linux, when no other Python thread runs in the
    calling process), else those of a ``LocalCluster``, started with distributed's
    ``multiprocessing-method`` ("spawn" by default): call ``ingest`` from a script under
    ``if __name__ == "__main__":``.

    Directory sources: a file whose resolved path (symbolic links followed) lies outside the
    source folder is never read; it is a bad document (``on_error``: an error naming the link,
    or skipped and counted). Links to files inside the folder are documents under the link's
    id; links to folders are not followed (a warning names them).

    Examples
    --------
    >>> from sphdist.datasets import NEWSGROUPS_PAPER_CATEGORIES, newsgroups_archive
    >>> corpus = ingest(newsgroups_archive(), "news5.zarr",  # doctest: +SKIP
    ...                 categories=NEWSGROUPS_PAPER_CATEGORIES, max_docs_per_label=200)
    >>> corpus.n_documents  # doctest: +SKIP
    1000
    >>> ingest("docs/*.jsonl.gz", "docs.zarr", label_field="label",  # doctest: +SKIP
    ...        select="mutual-info", n_select=500)
    >>> ingest("stream/*.jsonl.gz", "hashed.zarr", vocabulary=False,  # doctest: +SKIP
    ...        n_features=2**20)
    """
    start_time = time.perf_counter()
    inherit_remove = remove is None
    remove = _check_remove(() if remove is None else remove)
    chunk_size = int(check_param("chunk_size", chunk_size, _DOCUMENTS))
    seed = check_int("seed", seed, 0)
    max_document_bytes = check_int("max_document_bytes", max_document_bytes, 1)
    if partition_size is None:
        partition_size = 4 * chunk_size
    partition_size = int(check_param("partition_size", partition_size, _DOCUMENTS))
    partition_size = -(-partition_size // chunk_size) * chunk_size
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
    given = {  # what selects the documents, for the commands the messages suggest
        "format": format, "text_field": text_field if text_field != "text" else None,
        "label_field": label_field, "id_field": id_field, "categories": categories,
        "max_docs_per_label": max_docs_per_label, "seed": seed if max_docs_per_label else None,
    }
    if like is not None:
        options, like_idf, inherited, like_info = read_like(like)
        if inherit_remove:
            remove = inherited
        given["like"] = like
    else:
        options = ingest_options(
            vocabulary=bool(vocabulary), n_features=n_features, lowercase=lowercase,
            token_pattern=token_pattern, stop_words=stop_words, strip_accents=strip_accents,
            min_df=min_df, max_df=max_df, max_features=max_features, select=select,
            n_select=n_select, sublinear_tf=sublinear_tf,
        )
        like_idf = like_info = None
        given.update(option_flags(options, min_df, max_df))
        if not options.vocabulary:
            _check_feature_memory(options.n_features)
    given["remove_headers"] = bool(remove) and not (like is not None and inherit_remove)
    output = location(output)
    if _atomic.committed(output) and not overwrite:  # fail before reading a large source
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
    if src.unreadable and on_error == "fail":  # a link or device in a folder or archive
        raise src.unreadable[0].error()
    job = CountJob(options=options, remove=remove, reading=reading, on_error=on_error,
                    chunk_size=chunk_size, need_class_df=options.select is not None,
                    spill="")
    spill = location(f"{_atomic.staging_path(output)}-spill")
    with _scheduler(n_workers, src) as (run, workers), _scratch(spill) as spill_dir:
        job = dataclasses.replace(job, spill=str(spill_dir))
        total = _reduce_counts(run, src, job, workers, progress)
        repeated = repeated_ids(src.partitions, reading, total)
        repeat = f"{documents(len(repeated))} repeat{'s' if len(repeated) == 1 else ''}"
        if repeated and on_error == "fail":
            first = repeated[0][2]
            raise dataclasses.replace(first, why=f"{first.why} ({repeat} an earlier id)").error()
        if repeated:  # count again without them, so that the idf counts only the kept
            logger.info("%s an earlier id: counting again without them (on_error=%r)", repeat,
                        on_error)
            job = dataclasses.replace(job, drop=tuple(
                (p, k, bad.message()) for p, k, bad in repeated))
            total = _reduce_counts(run, src, job, workers, progress)
        total.id_hashes = None
        if src.unreadable:  # found when listing: skipped and counted as any bad document
            total.merge(Counts(n_skipped=len(src.unreadable),
                               examples=[bad.message() for bad in src.unreadable[:5]]))
        n = total.n_docs
        _report_skipped(total, on_error)
        if n == 0:
            raise DataError(
                f"{source}: no documents to ingest ({total.n_skipped} skipped). To resolve "
                "this, pass a source with at least one usable document."
            )
        emptied = Emptied(source, output, given, remove, like if inherit_remove else None,
                           total.n_emptied, n)
        if not total.has_token():
            raise emptied.error()
        emptied.warn()
        keep_all = ingest_command(source, output, given, min_df=1, max_df=1.0)
        m, idf, vocab, mapping = features(options, total, n, like_idf,
                                          remedy=f"`{keep_all}` (min_df=1, max_df=1.0)")
        for name, values in (("idf.npy", idf), ("vocabulary.npy", mapping)):
            if values is not None:
                with open_file(join(spill_dir, name), "wb") as f:
                    np.save(f, values)
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
            weigh = WeightJob(
                spill=str(spill_dir), staging=str(writer.staging), n_features=m,
                learned=mapping is not None, sublinear_tf=options.sublinear_tf,
                label_names=tuple(label_names) if label_names is not None else None,
            )
            tasks = [(weigh, k, c) for k, c in enumerate(total.chunks)]
            with _progress(n, "pass 2/2: tf-idf", unit="document", mode=progress) as bar:
                for stored, ids, codes in run(weight_chunk, tasks):
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
                "n_emptied_by_remove": total.n_emptied,
                "remove": list(remove),
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
        logger.info("%d of %s %s no token: their columns are zero (flagged in "
                    "corpus.empty)", corpus.n_empty, documents(n),
                    "has" if corpus.n_empty == 1 else "have")
    return corpus


#: Driver memory per hashed feature: the document frequencies of a partition, their running
#: sum and the new sum (int64 each), and the idf (float64).
_BYTES_PER_FEATURE = 32


def _check_feature_memory(n_features: int) -> None:
    """Refuse a hashed feature space whose per-feature arrays exceed this machine's memory."""
    import psutil

    need, total = _BYTES_PER_FEATURE * n_features, psutil.virtual_memory().total
    if need > total:
        raise ParameterError(
            f"n_features={n_features} needs about {need / 2**30:.1f} GiB for the document "
            f"frequencies and idf ({_BYTES_PER_FEATURE} bytes per feature), more than the "
            f"{total / 2**30:.1f} GiB of this machine. To resolve this, hash into fewer "
            f"features, e.g. --n-features {2**20} (n_features=2**20)."
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
    from sphdist.errors import CorpusFormatError, ModelFormatError
    from sphdist.io import open_stored, require_finite, stored_kind

    path = location(path)
    if not exists(path):
        raise InputNotFoundError(f"{path}: no such corpus or model (--like). To resolve this, "
                                 "pass the corpus.zarr or model.zarr to imitate.")
    kind = stored_kind(path)
    if kind not in ("corpus", "model"):
        raise CorpusFormatError(f"{path}: neither a sphdist corpus nor a model (sphdist.kind "
                                f"is {kind!r}). To resolve this, pass a corpus.zarr or "
                                "model.zarr to --like.")
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
    info = {"path": str(path), "fingerprint": meta.get("fingerprint"), "feature_scheme": scheme}
    return options, idf, remove, info


def _reduce_counts(run, src: Plan, job: CountJob, workers: int,
                   progress: bool | str) -> Counts:
    total = Counts()
    with _progress(src.n_documents, "pass 1/2: count", unit="document",
                   mode=progress) as bar:
        tasks = [(job, i, p) for i, p in enumerate(src.partitions)]
        for counts in run(count_partition, tasks):
            total.merge(counts)
            bar.update(counts.n_docs + counts.n_skipped)
    return total


def _report_skipped(total: Counts, on_error: str) -> None:
    if total.n_skipped:
        logger.warning(
            "skipped %d document(s) that could not be ingested (on_error=%r), e.g. %s",
            total.n_skipped, on_error, "; ".join(total.examples[:3]),
        )


# -- where the tasks run --------------------------------------------------------------------------
def _active_client():
    if "distributed" not in sys.modules:  # no client without it; importing it costs ~1 s
        return None
    from distributed import default_client

    try:
        return default_client()
    except ValueError:
        return None


@contextlib.contextmanager
def _scheduler(n_workers: int | None, src: Plan) -> Iterator[tuple[Callable, int]]:
    """Yield ``(run, workers)``: ``run(fn, tasks)`` yields ``fn(*args)`` of every task, in order.

    Where the tasks run: on the active ``distributed`` client when ``n_workers`` is None;
    in this process for a source of at most ``_SMALL_SOURCE`` documents, of one partition, or
    with ``n_workers=1``; else on ``n_workers`` (default one per core) local worker processes:
    dask's multiprocessing scheduler with forked workers when that is safe (:func:`_fork_safe`),
    else a ``distributed.LocalCluster`` on 127.0.0.1, started here and closed on exit.
    """
    client = _active_client() if n_workers is None else None
    if client is not None:
        workers = max(1, len(client.scheduler_info().get("workers", {})))
        yield functools.partial(_in_order, client, 2 * workers), workers
        return
    if n_workers is None and src.n_documents is not None and src.n_documents <= _SMALL_SOURCE:
        n_workers = 1  # starting processes would cost more than they save
    workers = min(n_workers or os.cpu_count() or 1, len(src.partitions))
    if workers <= 1:
        yield (lambda fn, tasks: (fn(*args) for args in tasks)), 1
    elif _fork_safe():
        yield functools.partial(_forked, workers), workers
    else:
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                          host="127.0.0.1", dashboard_address=None) as cluster, \
                Client(cluster, set_as_default=False) as own:
            yield functools.partial(_in_order, own, 2 * workers), workers


def _fork_safe() -> bool:
    """Whether local workers may be forked: Linux, and no other Python thread runs here.

    Checked before the first fork (no lock of another thread can then be copied held; zarr
    resets its I/O thread and loop in a forked child, so the forks of pass 2 are safe too).
    Forked workers start at once, importing nothing; a ``LocalCluster`` spawns processes that
    import distributed, scikit-learn and sphdist again: on 2 shared cores, 100,000 documents
    took 14.0 s with it against 6.5 s forked, and 1.45 times the memory.
    """
    return sys.platform == "linux" and threading.active_count() == 1


def _forked(workers: int, fn: Callable, tasks: list[tuple]) -> Iterator[Any]:
    """``fn(*args)`` of every task on ``workers`` forked processes, yielded in task order.

    dask's multiprocessing scheduler, ``2 * workers`` tasks per computation (so that at most
    that many results wait in the driver), one task per dispatch.
    """
    import dask

    todo = iter(tasks)
    while batch := list(itertools.islice(todo, 2 * workers)):
        with dask.config.set({"multiprocessing.context": "fork"}), warnings.catch_warnings():
            # Python >= 3.12 warns about fork() when the process has OS threads; the only
            # ones here are BLAS/OpenMP pools (no other Python thread runs: see _fork_safe)
            warnings.filterwarnings("ignore", ".* is multi-threaded", DeprecationWarning)
            results = dask.compute(*[dask.delayed(fn, pure=False)(*args) for args in batch],
                                   scheduler="processes", num_workers=workers, chunksize=1)
        yield from results


def _in_order(client: Any, in_flight: int, fn: Callable, tasks: list[tuple]) -> Iterator[Any]:
    """``fn(*args)`` of every task, run on ``client`` and yielded in task order.

    ``in_flight`` tasks are submitted ahead; one more is submitted as each result is taken,
    so that at most ``in_flight`` results wait in the driver and the driver's reductions see
    the results in the same order whatever the order the workers finish in.
    """
    pending: collections.deque = collections.deque()
    todo = iter(tasks)
    try:
        for args in itertools.islice(todo, in_flight):
            pending.append(client.submit(fn, *args, pure=False))
        while pending:
            result = pending.popleft().result()
            for args in itertools.islice(todo, 1):
                pending.append(client.submit(fn, *args, pure=False))
            yield result
    finally:
        if pending:
            client.cancel(list(pending))


@contextlib.contextmanager
def _scratch(path: Path) -> Iterator[Path]:
    """A scratch directory for the spilled counts, removed on exit whatever happens."""
    if not is_remote(path):  # an object store has no directories
        path.mkdir(parents=True)
    try:
        yield path
    finally:
        _atomic.discard(path)
