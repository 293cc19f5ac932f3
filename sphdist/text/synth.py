r"""Synthetic text collections with known topics, for scale work and tests.

``sphdist synth`` (:class:`sphdist.jobs.synth.SynthRequest`) draws ``n_docs`` documents from a
seeded generative model and writes them (:func:`write`) either
as raw JSON Lines (``{"id": ..., "label": ..., "text": ...}``) or CSV (columns ``id, label,
text``), the input of an ingest with ``label_field="label"``, or directly as the
``corpus.zarr`` that ingesting those lines would produce (hashing or vocabulary scheme, smooth
idf, unit columns) with ``TextSpec(vocabulary=False, stop_words=None, sublinear_tf=False)``
(or ``TextSpec(min_df=1, max_df=1.0, stop_words=None, sublinear_tf=False)`` for the
vocabulary scheme), without ever writing the text.

The model
---------
A vocabulary of ``vocab_size`` pseudo-words (lowercase ASCII letters, each one token for
scikit-learn's default token pattern, none of them an English stop word of scikit-learn's list
by construction: every word starts with a consonant pair). Word ranks follow Zipf's law,
:math:`p(r) \propto (r + 1)^{-s}`. There is one background distribution (the Zipf law over the
vocabulary in its natural order) and ``n_topics`` topic distributions (the same law over a
topic-specific permutation of the vocabulary, ``r -> (a_k r + b_k) mod V``). Document ``j``
has a dominant topic ``z_j`` (its label, uniform over topics), a secondary topic and a
dominant weight ``w_j ~ U(purity, 1)``; each of its ``L_j ~ max(1, Poisson(doc_length))``
tokens comes from the background with probability ``background``, otherwise from the dominant
topic with probability ``w_j`` and from the secondary topic otherwise. As ``purity >= 0.5``,
the label is the topic with the largest weight.

Every chunk of ``chunk_size`` documents is drawn from its own generator
``numpy.random.default_rng([seed, 1, chunk])``, so the corpus is the same whatever the output
format, and a chunk can be drawn again (the corpus route draws each chunk twice: document
frequencies, then weights) instead of being kept.
"""

from __future__ import annotations

import gzip
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

import numpy as np
import scipy.sparse as sp

from sphdist._progress import progress as _progress
from sphdist.core.params import Param, Range, validate
from sphdist.errors import ParameterError
from sphdist.io import Output, location
from sphdist.io import output_format as by_suffix

if TYPE_CHECKING:
    from sphdist.text.tfidf import TextOptions

# The corpus format's writer and weighting (zarr, dask, scikit-learn's vectorizers) are
# imported where a corpus is written: ``sphdist synth --format jsonl`` imports none of them.

__all__ = ["SynthSpec", "SynthSummary", "write", "output_format", "pseudo_words"]

FORMATS = ("jsonl", "csv", "corpus")
#: The formats of a synth, by the suffix of its output; ``.gz`` after ``.jsonl`` or
#: ``.csv`` compresses the text.
SUFFIXES = {".jsonl": "jsonl", ".csv": "csv", ".zarr": "corpus"}
_CONSONANTS = "bcdfghjklmnprstvz"
_ONSETS = [a + b for a in "bcdfgkpt" for b in "lr"] + ["st", "sp", "sk", "sm", "sn"]
_VOWELS = "aeiou"


def pseudo_words(n: int) -> np.ndarray:
    """The first ``n`` pseudo-words of the synthetic vocabulary, in rank order.

    Parameters
    ----------
    n : int
        Number of words.

    Returns
    -------
    ndarray of shape (n,), str
        Distinct lowercase words: a consonant-pair onset, a vowel, then consonant-vowel
        syllables encoding the index (each word is one token for scikit-learn's default
        token pattern; the onset keeps them off scikit-learn's English stop-word list).

    Examples
    --------
    >>> pseudo_words(3).tolist()
    ['bla', 'ble', 'bli']
    """
    n = _check_int("n", n, 0)
    base = len(_ONSETS) * len(_VOWELS)
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    words = []
    for i in range(n):
        head, rest = i % base, i // base
        word = _ONSETS[head // len(_VOWELS)] + _VOWELS[head % len(_VOWELS)]
        while rest:
            rest -= 1
            word += syllables[rest % len(syllables)]
            rest //= len(syllables)
        words.append(word)
    return np.asarray(words, dtype=str)


@dataclass
class SynthSummary:
    """What a synth wrote (:func:`write`).

    Attributes
    ----------
    output : str
        The path written.
    format : str
        ``"jsonl"``, ``"csv"`` or ``"corpus"``.
    n_docs, n_topics, seed : int
        The generation parameters.
    n_tokens : int
        Tokens drawn, over all documents.
    nnz : int
        Distinct (document, feature) pairs; ``nnz / n_docs`` is the mean number of distinct
        features per document (distinct terms, up to hashing collisions).
    seconds : float
        Wall-clock time of the call, in seconds.
    """

    output: str
    format: str
    n_docs: int
    n_topics: int
    seed: int
    n_tokens: int
    nnz: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class SynthSpec:
    """What a synth draws: the collection's size and its generative model, validated.

    Parameters
    ----------
    n_docs : int
        Number of documents, >= 1.
    n_topics : int
        Number of topics (and labels), >= 1.
    seed : int, default 0
        Non-negative seed; the same seed gives the same documents in every format.
    doc_length : int, default 100
        Mean number of tokens per document (Poisson, at least 1). About 0.7 of them are
        distinct terms with the defaults; ``SynthSummary.nnz / n_docs`` reports it.
    vocab_size : int, default 50000
        Number of distinct words V, >= 1.
    n_features : int, default 2**18
        Hashed features of a corpus (hashing scheme; not used for text).
    vocabulary : bool, default False
        A corpus with the learned-vocabulary scheme (every word that occurs, sorted) instead
        of hashing; as ``ingest`` with ``min_df=1, max_df=1.0`` (with the raw tf and no
        stop words of the hashed corpus).
    chunk_size : int, default 4096
        Documents per generated (and stored) chunk, >= 1.
    zipf_exponent : float, default 1.0
        Exponent s of the rank law, in [0, 5].
    purity : float, default 0.6
        Lower bound of the dominant topic's weight, in [0.5, 1].
    background : float, default 0.3
        Probability that a token comes from the topic-free background, in [0, 0.999].

    Raises
    ------
    ParameterError
        If a value is out of its range (scikit-learn's words, naming the parameter).

    Examples
    --------
    >>> SynthSpec(n_docs=10, n_topics=2).chunks(4)
    [(0, 0, 4), (1, 4, 8), (2, 8, 10)]
    """

    n_docs: int
    n_topics: int
    seed: int = 0
    doc_length: int = 100
    vocab_size: int = 50_000
    n_features: int = 2**18
    vocabulary: bool = False
    chunk_size: int = 4096
    zipf_exponent: float = 1.0
    purity: float = 0.6
    background: float = 0.3

    def __post_init__(self) -> None:
        lows = {"n_docs": 1, "n_topics": 1, "seed": 0, "doc_length": 1, "vocab_size": 1,
                "chunk_size": 1}
        for name, low in lows.items():
            object.__setattr__(self, name, _check_int(name, getattr(self, name), low))
        for name, low, high in (("zipf_exponent", 0.0, 5.0), ("purity", 0.5, 1.0),
                                ("background", 0.0, 0.999)):
            object.__setattr__(self, name, _check_float(name, getattr(self, name), low, high))

    def nbytes(self) -> int:
        """About the most memory a synth of this spec holds at once, in bytes.

        The drawn tokens of a chunk (``chunk_size * doc_length`` term ids with their document
        and sort buffers, about 32 bytes each), its ``chunk_size`` lengths, and per document
        of the whole run a label and a chunk bound (about 16 bytes): the Notes of :func:`write`.
        """
        docs = min(self.chunk_size, self.n_docs)
        return 32 * docs * self.doc_length + 16 * self.n_docs + 8 * self.n_features

    def chunks(self, chunk_size: int | None = None) -> list[tuple[int, int, int]]:
        """``(k, first, end)`` of every chunk of documents, in order."""
        size = self.chunk_size if chunk_size is None else chunk_size
        bounds = [*range(0, self.n_docs, size), self.n_docs]
        return [(k, bounds[k], bounds[k + 1]) for k in range(len(bounds) - 1)]


class _Model:
    """The topic model: Zipf CDF, topic permutations; draws chunks of term ids."""

    def __init__(self, spec: SynthSpec):
        n_topics, vocab_size = spec.n_topics, spec.vocab_size
        self.n_topics, self.vocab_size = n_topics, vocab_size
        self.doc_length, self.purity = spec.doc_length, spec.purity
        self.background, self.seed = spec.background, spec.seed
        seed = spec.seed
        p = (np.arange(1, vocab_size + 1, dtype=np.float64)) ** -spec.zipf_exponent
        self.cdf = np.cumsum(p / p.sum())
        self.cdf[-1] = 1.0
        rng = np.random.default_rng([seed, 0])
        # affine permutations r -> (a r + b) mod V: a coprime with V
        a = rng.integers(1, max(2, vocab_size), size=4 * n_topics + 16)
        a = a[np.gcd(a, vocab_size) == 1]
        while a.shape[0] < n_topics:  # pragma: no cover - V with many small factors
            extra = rng.integers(1, max(2, vocab_size), size=64)
            a = np.concatenate([a, extra[np.gcd(extra, vocab_size) == 1]])
        self.a = a[:n_topics].astype(np.int64)
        self.b = rng.integers(0, vocab_size, size=n_topics).astype(np.int64)

    def draw(self, chunk: int, n_c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Draw chunk ``chunk`` of ``n_c`` documents.

        Returns ``labels`` (n_c,) int64, ``lengths`` (n_c,) int64 and the term ids of all
        tokens, document after document, (sum(lengths),) int64.
        """
        rng = np.random.default_rng([self.seed, 1, chunk])
        labels = rng.integers(0, self.n_topics, size=n_c)
        second = rng.integers(0, self.n_topics, size=n_c)
        w = rng.uniform(self.purity, 1.0, size=n_c)
        lengths = np.maximum(1, rng.poisson(self.doc_length, size=n_c))
        doc = np.repeat(np.arange(n_c), lengths)
        n_t = doc.shape[0]
        ranks = np.searchsorted(self.cdf, rng.random(n_t), side="right")
        np.minimum(ranks, self.vocab_size - 1, out=ranks)
        u = rng.random(n_t)
        topic = np.where(rng.random(n_t) < w[doc], labels[doc], second[doc])
        topical = u >= self.background
        terms = ranks.astype(np.int64)
        t = topic[topical]
        terms[topical] = (self.a[t] * terms[topical] + self.b[t]) % self.vocab_size
        return labels, lengths, terms


def _check(name: str, value: Any, interval: Range) -> Any:
    """``value`` if it lies in ``interval`` (:func:`sphdist.core.params.validate`).

    scikit-learn's words, without importing scikit-learn unless the value is refused.
    """
    validate({name: value}, "sphdist.text.synth", {name: Param(name, (interval,), None, "")})
    return value


def _check_int(name: str, value: Any, low: int) -> int:
    return int(_check(name, value, Range(Integral, low, None, "left")))


def _check_float(name: str, value: Any, low: float, high: float) -> float:
    return float(_check(name, value, Range(Real, low, high, "both")))


def output_format(output: str | os.PathLike[str], format: str | None = None) -> str:
    """The format a synth writes ``output`` in: the one its suffix names.

    ``*.jsonl`` JSON Lines, ``*.csv`` CSV (each also ``.gz``, compressed), ``*.zarr`` a
    corpus; ``format`` must agree with the suffix, or name the format of an output whose
    suffix names none (:func:`sphdist.io.output_format`, the rule of every command
    that writes a file).

    Raises
    ------
    ParameterError
        If the suffix names another format than ``format``, or none of :data:`SUFFIXES`
        without ``format``, or ``.gz`` follows a corpus; the message lists the formats.

    Examples
    --------
    >>> output_format("docs.csv.gz"), output_format("c.zarr"), output_format("d", "jsonl")
    ('csv', 'corpus', 'jsonl')
    """
    path = location(output)
    gz = path.name.lower().endswith(".gz")
    found = by_suffix(path.with_name(path.name[:-3]) if gz else path, format, SUFFIXES)
    if gz and found == "corpus":
        raise ParameterError(
            f"{path}: .gz compresses JSON Lines or CSV, not a corpus.zarr (a directory). To "
            f"resolve this, name it {path.name[:-3]}, or name a text file *.jsonl.gz or "
            "*.csv.gz."
        )
    return found


def write(
    held: Output, spec: SynthSpec, format: str, *, overwrite: bool = False,
    progress: bool | str = False,
) -> SynthSummary:
    """Write the collection ``spec`` draws into the held output, in ``format``, and commit it.

    The work of ``sphdist synth`` (:class:`sphdist.jobs.synth.SynthRequest`, which holds the
    output and decides whether it may be replaced).

    Parameters
    ----------
    held : Output
        The output, held (:func:`sphdist.jobs.run`): ``*.jsonl`` (JSON Lines) or ``*.csv``
        (CSV: a header ``id,label,text``, a row per document), each gzip-compressed when it
        ends in ``.gz``; ``*.zarr``: the corpus directory.
    spec : SynthSpec
        What to draw.
    format : {"jsonl", "csv", "corpus"}
        The format (:func:`output_format` of the output).
    overwrite : bool, default False
        Whether a corpus there is replaced (the corpus writer's commit).
    progress : bool or "log", default False
        True: a tqdm progress bar on stderr; ``"log"``: INFO lines on the ``sphdist`` logger
        at every tenth of the documents (see :func:`sphdist._progress.progress`).

    Returns
    -------
    SynthSummary

    Raises
    ------
    OutputLockedError
        If ``held`` no longer holds its lock at the commit: nothing is committed.
    OSError
        If writing fails; nothing is then left at the output (both formats are written to a
        staging path and renamed at the end).

    Notes
    -----
    The corpus route equals ``ingest`` of the JSON Lines route (same seed, same options):
    each word is one token, so the counts of a document are the counts of its term ids mapped
    to their features (``HashingVectorizer`` of the word, or its rank in the sorted
    vocabulary); idf is ``ln((1 + n) / (1 + df)) + 1``, columns have unit L2 norm.
    Memory: O(chunk_size * doc_length) per chunk plus O(n_docs) labels, O(V) vocabulary and
    O(n_features) document frequencies. Cost: the JSON Lines route draws each chunk once; the
    corpus route draws it twice, all vectorised.
    """
    model = _Model(spec)
    output = held.path  # as named, normalised once (open_output)
    n_docs, n_topics, seed = spec.n_docs, spec.n_topics, spec.seed
    start = time.perf_counter()
    words = pseudo_words(spec.vocab_size)
    chunks = spec.chunks()
    width = len(str(n_docs - 1))
    label_width = len(str(n_topics - 1))
    if format in ("jsonl", "csv"):
        n_tokens, nnz = _write_text(held, model, words, chunks, width, label_width, progress,
                                    csv=format == "csv")
    else:
        n_tokens, nnz = _write_corpus(held, spec, model, words, chunks, width, label_width,
                                      overwrite, progress)
    return SynthSummary(
        output=str(output), format=format, n_docs=n_docs, n_topics=n_topics, seed=seed,
        n_tokens=int(n_tokens), nnz=int(nnz), seconds=time.perf_counter() - start,
    )


def _doc_ids(lo: int, hi: int, width: int) -> list[str]:
    return [f"doc{i:0{width}d}" for i in range(lo, hi)]


def _write_text(held, model, words, chunks, width, label_width, progress, csv=False):
    """JSON Lines, or CSV, as one file committed through ``held`` (:meth:`Output.file`).

    The words and ids need no quoting: ASCII letters and digits.
    """
    encoded = [w.encode("ascii") + b" " for w in words.tolist()]
    lens = np.array([len(w) for w in encoded], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)])
    buffer = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    gz = held.path.name.endswith(".gz")
    n_tokens = nnz = 0
    line = (b"doc%0*d,topic%0*d,%s\n" if csv else
            b'{"id": "doc%0*d", "label": "topic%0*d", "text": "%s"}\n')
    with held.file() as staging, open(staging, "wb") as raw:
        # the gzip header's FNAME is the output's name, not the staging file's (gunzip -N)
        f = gzip.GzipFile(filename=held.path.name, mode="wb", compresslevel=1,
                          fileobj=raw) if gz else raw
        with f, _progress(chunks[-1][2], "synth", mode=progress) as bar:
            if csv:
                f.write(b"id,label,text\n")
            for k, lo, hi in chunks:
                labels, lengths, terms = model.draw(k, hi - lo)
                n_tokens += terms.shape[0]
                nnz += _distinct_pairs(lengths, terms, model.vocab_size)
                # gather the bytes of every token ("word "), document after document
                tok_len = lens[terms]
                ends = np.cumsum(tok_len)
                starts_out = ends - tok_len
                index = np.arange(ends[-1]) - np.repeat(starts_out - offsets[terms], tok_len)
                text = buffer[index].tobytes()
                doc_end = ends[np.cumsum(lengths) - 1]
                doc_start = np.concatenate([[0], doc_end[:-1]])
                lines = [
                    line % (width, lo + i, label_width, z, text[s:e - 1])
                    for i, (z, s, e) in enumerate(
                        zip(labels.tolist(), doc_start.tolist(), doc_end.tolist(), strict=True)
                    )
                ]
                f.write(b"".join(lines))
                bar.update(hi - lo)
    return n_tokens, nnz


def _distinct_pairs(lengths: np.ndarray, terms: np.ndarray, v: int) -> int:
    return int(_counts(lengths, terms, v).nnz)


def _counts(lengths: np.ndarray, features: np.ndarray, m: int) -> sp.csr_matrix:
    """Canonical CSR counts of shape (n_c, m), float64, from per-token feature ids."""
    n_c = lengths.shape[0]
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    counts = sp.csr_matrix(
        (np.ones(features.shape[0]), features.astype(np.int32), indptr), shape=(n_c, m)
    )
    counts.sum_duplicates()  # sorts indices and sums repeats
    return counts


def _feature_map(words: np.ndarray, options: TextOptions) -> np.ndarray:
    """Ndarray of shape (V,), int64: the hashed feature of every word."""
    hashed = options.hashing_vectorizer().transform(words.tolist()).tocsr()
    if not np.array_equal(np.diff(hashed.indptr), np.ones(len(words))):  # pragma: no cover
        raise AssertionError("a synthetic word is not exactly one token")
    return hashed.indices.astype(np.int64)


def _write_corpus(held, spec, model, words, chunks, width, label_width, overwrite, progress):
    # zarr and scikit-learn: a JSON Lines or CSV synth loads neither (tests/cli/test_startup.py)
    from sphdist.io.corpus_writer import CorpusWriter
    from sphdist.text.tfidf import TextOptions, document_frequency, smooth_idf, weight

    options = TextOptions(vocabulary=bool(spec.vocabulary), n_features=spec.n_features)
    n = chunks[-1][2]
    v = model.vocab_size
    # pass 1: document frequencies, per term (vocabulary scheme) or per hashed feature
    if options.vocabulary:
        feature_of, m = np.arange(v, dtype=np.int64), v
    else:
        feature_of, m = _feature_map(words, options), options.n_features
    df = np.zeros(m, dtype=np.int64)
    present = np.zeros(model.n_topics, dtype=bool)
    n_tokens = 0
    with _progress(n, "synth pass 1/2", mode=progress) as bar:
        for k, lo, hi in chunks:
            labels, lengths, terms = model.draw(k, hi - lo)
            n_tokens += terms.shape[0]
            present[labels] = True
            df += document_frequency(_counts(lengths, feature_of[terms], m), m)
            bar.update(hi - lo)
    vocabulary = None
    if options.vocabulary:  # every word that occurs, in sorted order (CountVectorizer's)
        order = np.argsort(words, kind="stable")
        kept = order[df[order] > 0]
        feature_of = np.full(v, -1, dtype=np.int64)
        feature_of[kept] = np.arange(kept.shape[0])
        m, df, vocabulary = kept.shape[0], df[kept], words[kept].tolist()
    idf = smooth_idf(df, n)
    topics = np.flatnonzero(present)
    label_names = [f"topic{t:0{label_width}d}" for t in topics]
    code = np.full(model.n_topics, -1, dtype=np.int32)
    code[topics] = np.arange(topics.shape[0], dtype=np.int32)
    nnz = 0
    with CorpusWriter(
        held, n_features=m, feature_scheme=options.feature_scheme(m),
        tfidf=options.tfidf(), label_names=label_names, vocabulary=vocabulary,
        overwrite=overwrite,
    ) as writer, _progress(n, "synth pass 2/2", mode=progress) as bar:
        for k, lo, hi in chunks:
            labels, lengths, terms = model.draw(k, hi - lo)
            counts = _counts(lengths, feature_of[terms], m)
            nnz += counts.nnz
            writer.write_chunk(weight(counts, idf, options.sublinear_tf),
                               _doc_ids(lo, hi, width), code[labels])
            bar.update(hi - lo)
        writer.commit(idf, extra_attrs={
            "source": "sphdist.text.synth",
            "synth": {"n_docs": n, "n_topics": model.n_topics, "seed": model.seed,
                      "doc_length": model.doc_length, "vocab_size": v,
                      "purity": model.purity, "background": model.background},
        })
    return n_tokens, nnz


def iter_documents(
    n_docs: int, n_topics: int, *, seed: int = 0, doc_length: int = 100,
    vocab_size: int = 50_000, chunk_size: int = 4096,
) -> Iterator[tuple[str, str, str]]:
    """Yield ``(id, label, text)`` of the documents a synth writes (for tests, small n).

    Parameters are those of :class:`SynthSpec`; the other model parameters take their defaults.
    """
    model = _Model(SynthSpec(n_docs=n_docs, n_topics=n_topics, seed=seed,
                             doc_length=doc_length, vocab_size=vocab_size))
    words = pseudo_words(vocab_size)
    width, label_width = len(str(n_docs - 1)), len(str(n_topics - 1))
    for k, lo in enumerate(range(0, n_docs, chunk_size)):
        hi = min(lo + chunk_size, n_docs)
        labels, lengths, terms = model.draw(k, hi - lo)
        ends = np.cumsum(lengths)
        for i in range(hi - lo):
            yield (f"doc{lo + i:0{width}d}", f"topic{labels[i]:0{label_width}d}",
                   " ".join(words[terms[ends[i] - lengths[i]:ends[i]]]))


def summary_json(summary: SynthSummary) -> str:
    """The summary as one JSON object."""
    return json.dumps(summary.to_dict())
