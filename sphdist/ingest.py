"""Text -> tf-idf -> ``corpus.zarr``: the ingestion stage.

A *source* is a directory tree or a tar archive (``.tar``, ``.tar.gz``, ...) of one file per
document, the name of the folder holding a file being the document's label; the 20 Newsgroups
"bydate" archive (``20news-bydate-train/<group>/<id>``, ``20news-bydate-test/<group>/<id>``) is
one. :func:`ingest` turns it into the papers' matrix X of shape (m features, n documents) with
scikit-learn's text semantics:

1. bytes decoded as latin-1, optionally stripped of headers, footers and quoted replies by
   scikit-learn's own functions (those behind ``fetch_20newsgroups(remove=...)``);
2. token counts from ``HashingVectorizer(alternate_sign=False, norm=None)``;
3. idf weights exactly as ``TfidfTransformer(smooth_idf=True, sublinear_tf=False)``;
4. every document column scaled to unit L2 norm (``norm="l2"``), empty documents left zero.

It reads the source twice and never holds the whole matrix: pass 1 hashes chunks of documents
and accumulates document frequencies (hashing is stateless), pass 2 hashes them again and writes
weighted, normalised chunks through :class:`sphdist.corpus.CorpusWriter`.
"""

from __future__ import annotations

import numbers
import os
import posixpath
import tarfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.preprocessing import normalize
from tqdm import tqdm

from .corpus import Corpus, CorpusWriter
from .errors import DataError, InputNotFoundError, OutputExistsError, ParameterError

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

__all__ = ["REMOVE_OPTIONS", "ingest"]

#: The values ``remove`` may hold, in the order they are applied.
REMOVE_OPTIONS = ("headers", "footers", "quotes")

# Pass 2 buffers at most this many chunks of counts: a tar archive not stored in sorted order
# is read once per this many chunks (see the Notes of `ingest`).
_SWEEP_CHUNKS = 8


def ingest(
    source: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    categories: Sequence[str] | None = None,
    max_docs_per_label: int | None = None,
    seed: int = 0,
    n_features: int = 2**18,
    remove: Sequence[str] = (),
    chunk_size: int = 4096,
    overwrite: bool = False,
    progress: bool = False,
) -> Corpus:
    r"""Build a tf-idf ``corpus.zarr`` from a folder tree or tar archive of text documents.

    Parameters
    ----------
    source : path-like
        A directory, or a tar archive (plain, gzip, bzip2 or xz), holding one file per
        document. A file's label is the name of the folder that holds it; files at the top level
        of the source have no label and are ignored (as in ``sklearn.datasets.load_files``).
        A document's id is its path relative to the source (the member name for an archive),
        with ``/`` separators.
    output : path-like
        Where to write the corpus (a zarr v3 directory; see :mod:`sphdist.corpus`).
    categories : sequence of str, optional
        Keep only the documents with these labels. Default: all labels.
    max_docs_per_label : int, optional
        Keep at most this many documents per label, drawn uniformly without replacement;
        labels with fewer keep all theirs. Default: no limit.
    seed : int, default 0
        Non-negative seed of the sampling; the same seed gives the same documents.
    n_features : int, default 2**18
        Number of hashed features m (rows of X).
    remove : sequence of str, default ()
        Any of ``"headers"``, ``"footers"``, ``"quotes"``: parts of each document removed before
        tokenising, exactly as ``sklearn.datasets.fetch_20newsgroups(remove=...)`` does.
    chunk_size : int, default 4096
        Documents per stored chunk (the last may be smaller), and per hashed batch.
    overwrite : bool, default False
        Replace an existing ``output``.
    progress : bool, default False
        Show a tqdm progress bar on stderr for each pass (documents done / total).

    Returns
    -------
    Corpus
        The committed corpus, opened for reading. ``X`` has shape (n_features, n_documents),
        float64, stored in chunks of ``chunk_size`` document columns, documents sorted by id.
        Also stored: ``idf`` of shape (n_features,), float64; ``doc_ids`` of shape
        (n_documents,), str; ``labels`` of shape (n_documents,), int32, codes into
        ``label_names`` (the sorted kept labels); ``empty`` of shape (n_documents,), bool;
        attributes ``feature_scheme``, ``tfidf``, ``source`` and ``ingest`` (the sampling
        options, ``n_available`` documents found in the source and ``n_blank_text``, the
        documents whose text is only whitespace after ``remove``).

    Raises
    ------
    InputNotFoundError
        If ``source`` does not exist.
    DataError
        If ``source`` is neither a directory nor a readable tar archive, holds no document
        (no file inside a label folder), or changes while it is read.
    ParameterError
        If a category is not a label of the source (the message lists the labels), ``remove``
        holds an unknown value, or an integer parameter is out of range.
    OutputExistsError
        If ``output`` exists and ``overwrite`` is False.
    ImportError
        If ``remove`` is given but this scikit-learn lacks the 20 Newsgroups strip functions.
    OSError
        If a file of the source cannot be read. On any error nothing is left at ``output``.

    Notes
    -----
    With :math:`c_{ij}` the count of the tokens of document :math:`j` hashed to feature
    :math:`i` (``HashingVectorizer(n_features=m, alternate_sign=False, norm=None,
    lowercase=True)``, token pattern ``(?u)\b\w\w+\b``, colliding tokens summed), :math:`n`
    the number of ingested documents and :math:`\mathrm{df}_i` the number of them with
    :math:`c_{ij} > 0`,

    .. math::

        \mathrm{idf}_i = \ln\frac{1 + n}{1 + \mathrm{df}_i} + 1, \qquad
        X_{ij} = \frac{c_{ij}\,\mathrm{idf}_i}{\lVert c_{\cdot j} \odot \mathrm{idf} \rVert_2},

    which is ``TfidfTransformer(norm="l2", use_idf=True, smooth_idf=True,
    sublinear_tf=False).fit_transform(counts).T``, computed with the same floating-point
    operations. idf is fitted on the ingested documents, after sampling. Every column has unit
    L2 norm, except the columns of documents without a token, which are exactly zero and flagged
    in ``empty``; no value is NaN.

    Sampling: the documents of each label, sorted by id, are sampled with
    ``numpy.random.default_rng([seed, zlib.crc32(label.encode())]).choice(n_label,
    max_docs_per_label, replace=False)``; one generator per label, so the sample of a label does
    not depend on which other categories are kept.

    Cost: a listing of the source, then two reading passes; each document is decoded, stripped
    and hashed once per pass. Memory: the document frequencies (``n_features * 8`` bytes), the
    O(n) ids and labels, and one chunk of counts, except for a tar archive whose members are not
    stored in id order (the 20 Newsgroups archive stores train before test): pass 2 then buffers
    up to 8 chunks and reads the archive once per 8 chunks.

    Examples
    --------
    >>> from sphdist.datasets import NEWSGROUPS_PAPER_CATEGORIES, newsgroups_archive
    >>> corpus = ingest(newsgroups_archive(), "news5.zarr",  # doctest: +SKIP
    ...                 categories=NEWSGROUPS_PAPER_CATEGORIES, max_docs_per_label=200)
    >>> corpus.shape  # doctest: +SKIP
    (262144, 1000)
    """
    remove = _check_remove(remove)
    n_features = _check_int("n_features", n_features, 1)
    chunk_size = _check_int("chunk_size", chunk_size, 1)
    seed = _check_int("seed", seed, 0)
    if max_docs_per_label is not None:
        max_docs_per_label = _check_int("max_docs_per_label", max_docs_per_label, 1)
    if isinstance(categories, str):
        raise ParameterError(
            f"categories={categories!r} is a single string. To resolve this, pass a list of "
            f"label names, e.g. categories=[{categories!r}]."
        )
    output = Path(output)
    if output.exists() and not overwrite:  # fail before reading a large source
        raise OutputExistsError(
            f"{output} already exists. To resolve this, choose another output path or pass "
            "--overwrite (overwrite=True)."
        )

    src = _Source(source)
    doc_ids, codes, label_names = _select(
        src, categories, max_docs_per_label=max_docs_per_label, seed=seed
    )
    n = len(doc_ids)
    vectorizer = HashingVectorizer(
        n_features=n_features, alternate_sign=False, norm=None, lowercase=True, dtype=np.float64
    )
    feature_scheme = {
        "type": "hashing",
        "n_features": n_features,
        "alternate_sign": False,
        "lowercase": True,
        "token_pattern": vectorizer.token_pattern,
        "ngram_range": list(vectorizer.ngram_range),
        "analyzer": vectorizer.analyzer,
    }
    tfidf = {"smooth_idf": True, "sublinear_tf": False, "norm": "l2", "remove": list(remove)}
    with CorpusWriter(
        output,
        n_features=n_features,
        feature_scheme=feature_scheme,
        tfidf=tfidf,
        label_names=label_names,
        overwrite=overwrite,
    ) as writer:
        with _bar(n, "pass 1/2: document frequencies", progress) as bar:
            df, n_blank = _document_frequencies(src, doc_ids, vectorizer, remove, chunk_size, bar)
        idf = _smooth_idf(df, n)
        with _bar(n, "pass 2/2: tf-idf", progress) as bar:
            _write_tfidf(writer, src, doc_ids, codes, vectorizer, remove, idf, chunk_size, bar)
        ingest_attrs = {
            "categories": label_names if categories is not None else None,
            "max_docs_per_label": max_docs_per_label,
            "seed": seed,
            "sampling": "numpy.random.default_rng([seed, zlib.crc32(label.encode())])"
            ".choice(n_label, max_docs_per_label, replace=False) per label",
            "chunk_size": chunk_size,
            "n_available": len(src.doc_ids),
            "n_blank_text": n_blank,
        }
        return writer.commit(idf, extra_attrs={"source": str(source), "ingest": ingest_attrs})


# -- parameters ------------------------------------------------------------------------------
def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ParameterError(f"{name}={value!r}: expected an integer >= {low}.")
    return int(value)


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


# -- sources ---------------------------------------------------------------------------------
class _Source:
    """The documents of a directory tree or tar archive: their sorted ids, and their bytes."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        if not self.path.exists():
            raise InputNotFoundError(
                f"{self.path}: no such file or directory. To resolve this, pass a folder or a "
                "tar archive of text files (e.g. sphdist.datasets.newsgroups_archive())."
            )
        self._offsets: dict[str, int] | None = None
        if self.path.is_dir():
            ids = _list_directory(self.path)
        else:
            try:
                self._offsets = _list_tar(self.path)
            except (tarfile.TarError, EOFError, OSError) as exc:
                raise DataError(
                    f"{self.path}: neither a directory nor a readable tar archive "
                    f"({type(exc).__name__}: {exc}). To resolve this, pass a folder or a "
                    ".tar/.tar.gz archive of text files."
                ) from exc
            ids = list(self._offsets)
        self.doc_ids: list[str] = sorted(ids)
        if not self.doc_ids:
            raise DataError(
                f"{self.path}: no documents found. Documents are files inside a folder named "
                "after their label (e.g. 20news-bydate-train/sci.space/60154); files at the top "
                "level are ignored. To resolve this, pass a source with that layout."
            )

    def read(self, doc_ids: Sequence[str]) -> Iterator[tuple[str, bytes]]:
        """Yield ``(doc_id, content)`` for ``doc_ids``, in storage order.

        That is the order given for a directory, and archive order for an archive, which is
        read sequentially once, up to the last document wanted.
        """
        if self._offsets is None:
            for doc_id in doc_ids:
                yield doc_id, (self.path / doc_id).read_bytes()
            return
        wanted = {d: self._offsets[d] for d in doc_ids}
        with tarfile.open(self.path, "r:*") as archive:
            for member in archive:
                if not wanted:
                    break
                name = _member_id(member.name)
                if member.isfile() and wanted.get(name) == member.offset:
                    del wanted[name]
                    yield name, archive.extractfile(member).read()  # type: ignore[union-attr]


def _member_id(name: str) -> str:
    return posixpath.normpath(name).lstrip("/")


def _has_label(doc_id: str) -> bool:
    return "/" in doc_id


def _label(doc_id: str) -> str:
    return doc_id.rsplit("/", 2)[-2]


def _list_directory(root: Path) -> list[str]:
    def _raise(exc: OSError) -> None:
        raise exc

    ids = []
    for dirpath, _dirnames, filenames in os.walk(root, onerror=_raise):
        rel = Path(dirpath).relative_to(root)
        for name in filenames:
            doc_id = (rel / name).as_posix()
            if _has_label(doc_id) and Path(dirpath, name).is_file():
                ids.append(doc_id)
    return ids


def _list_tar(path: Path) -> dict[str, int]:
    """Map each document id to the offset of its (last) member in the archive."""
    offsets = {}
    with tarfile.open(path, "r:*") as archive:
        for member in archive:
            doc_id = _member_id(member.name)
            if member.isfile() and _has_label(doc_id):
                offsets[doc_id] = member.offset
    return offsets


def _select(
    src: _Source, categories: Iterable[str] | None, *, max_docs_per_label: int | None, seed: int
) -> tuple[list[str], np.ndarray, list[str]]:
    """Return the kept ids (sorted), their label codes (int32) and the sorted label names."""
    by_label: dict[str, list[str]] = {}
    for doc_id in src.doc_ids:
        by_label.setdefault(_label(doc_id), []).append(doc_id)
    if categories is None:
        label_names = sorted(by_label)
    else:
        label_names = sorted(set(categories))
        unknown = [c for c in label_names if c not in by_label]
        if unknown:
            raise ParameterError(
                f"categories {unknown} are not labels of {src.path}; the available labels are "
                f"{sorted(by_label)}."
            )
    kept = []
    for name in label_names:
        ids = by_label[name]
        if max_docs_per_label is not None and len(ids) > max_docs_per_label:
            rng = np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])
            picked = np.sort(rng.choice(len(ids), size=max_docs_per_label, replace=False))
            ids = [ids[i] for i in picked]
        kept.extend(ids)
    kept.sort()
    code = {name: i for i, name in enumerate(label_names)}
    codes = np.array([code[_label(d)] for d in kept], dtype=np.int32)
    return kept, codes, label_names


# -- the two passes --------------------------------------------------------------------------
def _bar(total: int, desc: str, enabled: bool) -> tqdm:
    return tqdm(total=total, desc=desc, unit="doc", disable=not enabled)


def _batches(items: Iterator[tuple[str, bytes]], size: int) -> Iterator[list[tuple[str, bytes]]]:
    while batch := list(islice(items, size)):
        yield batch


def _texts(batch: list[tuple[str, bytes]], remove: tuple[str, ...]) -> list[str]:
    texts = [content.decode("latin-1") for _, content in batch]
    for part in remove:
        strip = _STRIPPERS[part]  # type: ignore[index]
        texts = [strip(t) for t in texts]
    return texts


def _changed(src: _Source) -> DataError:
    return DataError(
        f"{src.path}: documents listed at the start could not be read again. To resolve this, "
        "do not modify the source while it is being ingested, then rerun."
    )


def _document_frequencies(
    src: _Source,
    doc_ids: list[str],
    vectorizer: HashingVectorizer,
    remove: tuple[str, ...],
    chunk_size: int,
    bar: tqdm,
) -> tuple[np.ndarray, int]:
    """Pass 1: document frequency per feature, ndarray of shape (m,), int64; blank texts."""
    df = np.zeros(vectorizer.n_features, dtype=np.int64)
    n_read = n_blank = 0
    for batch in _batches(src.read(doc_ids), chunk_size):
        texts = _texts(batch, remove)
        n_blank += sum(not t.strip() for t in texts)
        counts = vectorizer.transform(texts)  # CSR, duplicates summed: one entry per (doc, term)
        df += np.bincount(counts.indices, minlength=df.shape[0])
        n_read += len(batch)
        bar.update(len(batch))
    if n_read != len(doc_ids):
        raise _changed(src)
    return df, n_blank


def _smooth_idf(df: np.ndarray, n_documents: int) -> np.ndarray:
    """Idf = ln((1 + n) / (1 + df)) + 1, float64, with TfidfTransformer.fit's operations."""
    smoothed = df.astype(np.float64) + 1.0
    idf = np.full_like(smoothed, fill_value=n_documents + 1)
    idf /= smoothed
    np.log(idf, out=idf)
    idf += 1.0
    return idf


def _weight(counts: sp.csr_matrix, idf: np.ndarray) -> sp.csr_matrix:
    """TfidfTransformer(norm="l2").transform: scale by idf, then unit L2 rows (zero rows stay)."""
    counts.data *= idf[counts.indices]
    return normalize(counts, norm="l2", copy=False)


def _write_tfidf(
    writer: CorpusWriter,
    src: _Source,
    doc_ids: list[str],
    codes: np.ndarray,
    vectorizer: HashingVectorizer,
    remove: tuple[str, ...],
    idf: np.ndarray,
    chunk_size: int,
    bar: tqdm,
) -> None:
    """Pass 2: hash again, weight, normalise and write the chunks in document order.

    Documents arrive in storage order; counts wait in ``pending`` until their chunk is
    complete. Each sweep reads the documents of at most ``_SWEEP_CHUNKS`` chunks.
    """
    n = len(doc_ids)
    bounds = [*range(0, n, chunk_size), n]
    n_chunks = len(bounds) - 1
    position = {d: i for i, d in enumerate(doc_ids)}
    for first in range(0, n_chunks, _SWEEP_CHUNKS):
        last = min(first + _SWEEP_CHUNKS, n_chunks)
        pending: dict[int, list[tuple[np.ndarray, sp.csr_matrix]]] = {}
        missing = np.diff(bounds)  # documents still to arrive, per chunk
        k = first  # next chunk to write
        for batch in _batches(src.read(doc_ids[bounds[first] : bounds[last]]), chunk_size):
            pos = np.array([position[d] for d, _ in batch])
            counts = vectorizer.transform(_texts(batch, remove))
            chunk_of = pos // chunk_size
            for c in np.unique(chunk_of):
                rows = np.flatnonzero(chunk_of == c)
                pending.setdefault(int(c), []).append((pos[rows], counts[rows]))
                missing[c] -= rows.shape[0]
            while k < last and missing[k] == 0:
                parts = pending.pop(k)
                order = np.argsort(np.concatenate([p for p, _ in parts]))
                chunk = sp.vstack([c for _, c in parts], format="csr")[order]
                lo, hi = bounds[k], bounds[k + 1]
                writer.write_chunk(_weight(chunk, idf).T.tocsc(), doc_ids[lo:hi], codes[lo:hi])
                bar.update(hi - lo)
                k += 1
        if k != last:
            raise _changed(src)
