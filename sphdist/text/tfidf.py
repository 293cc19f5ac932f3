"""Text options and tf-idf weighting shared by ingestion and synthetic corpora.

Used by :mod:`sphdist.text.ingest` and :mod:`sphdist.text.synth`.

Everything here reproduces scikit-learn's operations (``HashingVectorizer``,
``CountVectorizer``, ``TfidfTransformer``) on one chunk of documents, so that a corpus built
chunk by chunk, with document frequencies reduced across chunks, equals the in-memory
``TfidfVectorizer`` / ``HashingVectorizer + TfidfTransformer`` result.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from numbers import Integral, Real
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer
from sklearn.preprocessing import normalize

from sphdist._validation import Number, StrOptions, at_least, validate
from sphdist.errors import ParameterError, option
from sphdist.text.defaults import DEFAULT_N_FEATURES, INGEST_DEFAULTS, MAX_FEATURES
from sphdist.text.defaults import MAX_CHUNK_SIZE as MAX_CHUNK_SIZE  # for sphdist.text.ingest

#: Nonzeros weighted at once by :func:`weight`: a bounded temporary, not a chunk's copy.
_BLOCK = 1 << 16
DEFAULT_TOKEN_PATTERN = r"(?u)\b\w\w+\b"
STRIP_ACCENTS = (None, "ascii", "unicode")
STOP_WORDS = (None, "english")

_DOCUMENT_COUNT = (at_least(0), Number(Real, 0, 1, closed="both"))  # a count or a fraction
#: scikit-learn constraints of :class:`TextOptions`, checked in this order.
_TEXT_CONSTRAINTS: dict[str, tuple[Any, ...]] = {
    "n_features": (Number(Integral, 1, MAX_FEATURES, closed="both"),),
    "stop_words": (StrOptions({s for s in STOP_WORDS if s}), None),
    "strip_accents": (StrOptions({s for s in STRIP_ACCENTS if s}), None),
    "min_df": _DOCUMENT_COUNT,
    "max_df": _DOCUMENT_COUNT,
    "max_features": (at_least(1), None),
    "select": (StrOptions({"mutual-info"}), None),
    "n_select": (at_least(1),),
}


@dataclass(frozen=True)
class TextOptions:
    """How text becomes features and weights (scikit-learn's parameters of the same names).

    ``vocabulary=False`` is the hashing scheme (``n_features`` hashed features, no alternate
    sign); ``vocabulary=True`` learns a vocabulary (``min_df``, ``max_df``, ``max_features``,
    optional mutual-information ``select``). ``fixed_vocabulary`` is a given vocabulary
    (an ingest ``like`` a model).
    """

    vocabulary: bool = False
    n_features: int = 2**18
    lowercase: bool = True
    token_pattern: str = DEFAULT_TOKEN_PATTERN
    stop_words: str | None = None
    strip_accents: str | None = None
    min_df: int | float = 1
    max_df: int | float = 1.0
    max_features: int | None = None
    select: str | None = None
    n_select: int = 500
    sublinear_tf: bool = False
    fixed_vocabulary: tuple[str, ...] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        validate({name: getattr(self, name) for name in _TEXT_CONSTRAINTS}, _TEXT_CONSTRAINTS,
                 type(self).__name__)
        check_token_pattern(self.token_pattern)
        learned = (self.min_df != 1, self.max_df != 1.0, self.max_features is not None,
                   self.select is not None)
        if (isinstance(self.min_df, Integral) and isinstance(self.max_df, Integral)
                and self.max_df < self.min_df):
            raise ParameterError(
                option("max_df", self.max_df) + " documents is below "
                + option("min_df", self.min_df) + ": no term can be kept. To resolve this, lower "
                + option("min_df") + " or raise " + option("max_df") + "."
            )
        if not self.vocabulary and any(learned):
            raise ParameterError(
                option("min_df") + ", " + option("max_df") + ", " + option("max_features")
                + " and " + option("select")
                + " apply to a learned vocabulary, not to hashed features. To resolve this, "
                "pass " + option("vocabulary", True) + ", or drop those options."
            )

    # -- scikit-learn objects -------------------------------------------------------------
    def _common(self) -> dict[str, Any]:
        return {
            "lowercase": self.lowercase,
            "token_pattern": self.token_pattern,
            "stop_words": self.stop_words,
            "strip_accents": self.strip_accents,
            "dtype": np.float64,
        }

    def hashing_vectorizer(self) -> HashingVectorizer:
        """``HashingVectorizer(n_features, alternate_sign=False, norm=None, ...)``."""
        return HashingVectorizer(
            n_features=self.n_features, alternate_sign=False, norm=None, **self._common()
        )

    def count_vectorizer(self, vocabulary: Any = None) -> CountVectorizer:
        """``CountVectorizer`` with these options and no document-frequency pruning."""
        return CountVectorizer(vocabulary=vocabulary, **self._common())

    def analyzer(self):
        """The callable turning one text into its list of tokens."""
        return self.count_vectorizer().build_analyzer()

    # -- stored attributes ----------------------------------------------------------------
    def feature_scheme(self, n_features: int) -> dict[str, Any]:
        """The ``feature_scheme`` attribute of a corpus with ``n_features`` rows."""
        scheme: dict[str, Any] = {
            "type": "vocabulary" if self.vocabulary else "hashing",
            "n_features": int(n_features),
            "lowercase": self.lowercase,
            "token_pattern": self.token_pattern,
            "ngram_range": [1, 1],
            "analyzer": "word",
            "stop_words": self.stop_words,
            "strip_accents": self.strip_accents,
        }
        if self.vocabulary:
            scheme.update(min_df=self.min_df, max_df=self.max_df,
                          max_features=self.max_features, select=self.select,
                          n_select=self.n_select if self.select else None)
        else:
            scheme["alternate_sign"] = False
        return scheme

    def tfidf(self, remove: tuple[str, ...] = ()) -> dict[str, Any]:
        """The ``tfidf`` attribute."""
        return {"smooth_idf": True, "sublinear_tf": self.sublinear_tf, "norm": "l2",
                "remove": list(remove)}

    def describe(self) -> dict[str, Any]:
        """A JSON-serialisable summary (without the fixed vocabulary)."""
        out = asdict(self)
        out.pop("fixed_vocabulary")
        return out


def ingest_options(*, vocabulary: bool, n_features: int | None, min_df: int | float | None,
                  max_df: int | float | None, **options: Any) -> TextOptions:
    """The :class:`TextOptions` of an ingest: :data:`INGEST_DEFAULTS` for what is not given.

    Parameters
    ----------
    vocabulary : bool
        Learned vocabulary (True) or hashing.
    n_features : int or None
        Hashing only (default :data:`DEFAULT_N_FEATURES`).
    min_df, max_df : int, float or None
        Vocabulary only (default 5 and 0.5); with hashing only None (or 1 and 1.0) is valid.
    **options
        The other fields of :class:`TextOptions`.

    Returns
    -------
    TextOptions

    Raises
    ------
    ParameterError
        If ``n_features`` is given with a vocabulary, a vocabulary option with hashing, or a
        value is out of range; each message names the option that fixes it.
    """
    if vocabulary:
        if n_features is not None:
            raise ParameterError(
                option("n_features", n_features)
                + " sets the size of a hashed feature space, but a learned vocabulary (the "
                "default) sizes itself. To resolve this, hash the tokens: add "
                + option("vocabulary", False) + " to " + option("n_features", n_features)
                + ", or drop " + option("n_features") + "."
            )
        n_features = DEFAULT_N_FEATURES  # not used by a vocabulary
        min_df = INGEST_DEFAULTS["min_df"] if min_df is None else min_df
        max_df = INGEST_DEFAULTS["max_df"] if max_df is None else max_df
    else:
        n_features = DEFAULT_N_FEATURES if n_features is None else n_features
        min_df = 1 if min_df is None else min_df  # another value is refused with hashing
        max_df = 1.0 if max_df is None else max_df
    return TextOptions(vocabulary=vocabulary, n_features=n_features, min_df=min_df,
                       max_df=max_df, **options)


#: An opening parenthesis that starts a capturing group (not escaped, not ``(?``).
_CAPTURING = re.compile(r"(?<!\\)\((?!\?)")


def check_token_pattern(pattern: Any) -> str:
    r"""``pattern`` if it is a regular expression scikit-learn's tokenizer can use.

    Parameters
    ----------
    pattern : str
        A ``token_pattern``: a regular expression with at most one capturing group (the token
        is then that group), as ``CountVectorizer`` requires.

    Returns
    -------
    str
        ``pattern``.

    Raises
    ------
    ParameterError
        If it is not a string, does not compile, or has more than one capturing group; the
        message gives a pattern that works.

    Examples
    --------
    >>> print(check_token_pattern(r"(?u)\b(\w\w+)\b"))
    (?u)\b(\w\w+)\b
    """
    default = option("token_pattern", DEFAULT_TOKEN_PATTERN) + " (the default)"
    if not isinstance(pattern, str):
        raise ParameterError(option("token_pattern", pattern)
                             + (" is not a string. To resolve this, pass a regular expression, "
                                "e.g. " + default + "."))
    try:
        groups = re.compile(pattern).groups
    except re.error as exc:
        raise ParameterError(
            option("token_pattern", pattern)
            + (f" is not a valid regular expression ({exc}). To resolve this, pass one that "
               "compiles, e.g. " + default + ".")
        ) from None
    if groups > 1:
        plain = _CAPTURING.sub("(?:", pattern)
        raise ParameterError(
            option("token_pattern", pattern)
            + f" has {groups} capturing groups; scikit-learn's tokenizer takes at most one (the "
            "token). To resolve this, make them non-capturing, e.g. "
            + option("token_pattern", plain) + "."
        )
    return pattern


def smooth_idf(df: np.ndarray, n_documents: int) -> np.ndarray:
    """Idf = ln((1 + n) / (1 + df)) + 1, float64, with ``TfidfTransformer.fit``'s operations.

    Parameters
    ----------
    df : ndarray of shape (m,), int
        Documents containing each feature.
    n_documents : int
        Number of documents n.

    Returns
    -------
    ndarray of shape (m,), float64

    Examples
    --------
    >>> smooth_idf(np.array([0, 1, 3]), 3).round(4).tolist()
    [2.3863, 1.6931, 1.0]
    """
    smoothed = df.astype(np.float64) + 1.0
    idf = np.full_like(smoothed, fill_value=n_documents + 1)
    idf /= smoothed
    np.log(idf, out=idf)
    idf += 1.0
    return idf


def weight(counts: sp.csr_matrix, idf: np.ndarray, sublinear_tf: bool = False) -> sp.csc_matrix:
    """``TfidfTransformer(norm="l2").transform(counts).T``: documents as columns.

    Parameters
    ----------
    counts : scipy.sparse.csr_matrix of shape (n_c, m), float64
        Term counts of a chunk of documents (rows), modified in place.
    idf : ndarray of shape (m,), float64
    sublinear_tf : bool
        Replace tf by 1 + ln(tf) first.

    Returns
    -------
    scipy.sparse.csc_matrix of shape (m, n_c), float64
        Unit L2 columns (zero columns stay zero), sorted indices.
    """
    counts = sp.csr_matrix(counts, dtype=np.float64)
    counts.sum_duplicates()
    if sublinear_tf:
        np.log(counts.data, counts.data)
        counts.data += 1.0
    for a in range(0, counts.nnz, _BLOCK):  # the weights of a block at a time, not a copy
        counts.data[a:a + _BLOCK] *= idf[counts.indices[a:a + _BLOCK]]
    counts = normalize(counts, norm="l2", copy=False)
    # the transpose of a canonical CSR matrix is a canonical CSC matrix: no copy, no sort
    return sp.csc_matrix((counts.data, counts.indices, counts.indptr),
                         shape=counts.shape[::-1])


def document_frequency(counts: sp.csr_matrix, m: int) -> np.ndarray:
    """Ndarray of shape (m,), int64: documents (rows) of canonical CSR ``counts`` per feature."""
    return np.bincount(counts.indices, minlength=m).astype(np.int64)


def limit_features(
    dfs: np.ndarray, tfs: np.ndarray, n_documents: int, options: TextOptions
) -> np.ndarray:
    """Mask of the kept terms: ``CountVectorizer._limit_features`` on reduced statistics.

    Parameters
    ----------
    dfs, tfs : ndarray of shape (n_terms,), int64
        Document frequency and total count of every term, terms in sorted order.
    n_documents : int
    options : TextOptions

    Returns
    -------
    ndarray of shape (n_terms,), bool
        The same operations as scikit-learn, so ties of ``max_features`` break the same way.
    """
    max_df, min_df = options.max_df, options.min_df
    high = max_df if isinstance(max_df, Integral) else max_df * n_documents
    low = min_df if isinstance(min_df, Integral) else min_df * n_documents
    mask = np.ones(len(dfs), dtype=bool)
    mask &= dfs <= high
    mask &= dfs >= low
    limit = options.max_features
    if limit is not None and mask.sum() > limit:
        mask_inds = (-tfs[mask]).argsort()[:limit]
        new_mask = np.zeros(len(dfs), dtype=bool)
        new_mask[np.where(mask)[0][mask_inds]] = True
        mask = new_mask
    return mask


def mutual_information(class_df: np.ndarray, class_sizes: np.ndarray) -> np.ndarray:
    r"""Mutual information (nats) between each term's presence and the label.

    Parameters
    ----------
    class_df : ndarray of shape (n_terms, n_classes), int64
        Documents of each class containing each term.
    class_sizes : ndarray of shape (n_classes,), int64
        Documents per class.

    Returns
    -------
    ndarray of shape (n_terms,), float64
        :math:`I(x_t; y) = \sum_{x \in \{0,1\}} \sum_c p(x, c) \ln\frac{p(x, c)}{p(x) p(c)}`,
        the value ``sklearn.feature_selection.mutual_info_classif(X > 0, y,
        discrete_features=True)`` gives (``sklearn.metrics.mutual_info_score`` on the 2 x K
        contingency table), computed from the reduced counts without the matrix.

    Examples
    --------
    >>> mutual_information(np.array([[2, 0], [1, 1]]), np.array([2, 2])).round(4).tolist()
    [0.6931, 0.0]
    """
    n = class_sizes.sum()
    present = class_df.astype(np.float64)
    absent = class_sizes[None, :] - present
    p_c = class_sizes / n
    mi = np.zeros(class_df.shape[0])
    for table in (present, absent):
        p_xc = table / n
        p_x = p_xc.sum(axis=1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = p_xc * (np.log(p_xc) - np.log(p_x) - np.log(p_c)[None, :])
        mi += np.where(p_xc > 0, terms, 0.0).sum(axis=1)
    return np.maximum(mi, 0.0)
