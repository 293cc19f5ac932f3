"""``ingest`` with the options that were its defaults before the text defaults (issue 14).

The tests that use it check sources, partitions and exactness against scikit-learn's
vectorizers *with scikit-learn's own defaults* (no stop words, raw tf, every term kept), on
collections of a few documents, which the text defaults' ``min_df=5`` would empty; so they pass
those options explicitly: 2**18 hashed features (or ``n_features``) unless ``vocabulary=True``.
The text defaults themselves are tested in ``test_text_defaults.py``.

The options are given as flat keywords (as ``sphdist ingest``'s flags): :func:`specs` sorts
them into the :class:`SourceSpec`, the :class:`TextSpec` and :func:`ingest`'s own keywords.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sphdist.jobs import run
from sphdist.jobs.ingest import IngestRequest
from sphdist.text.ingest import SourceSpec, TextSpec

#: ``ingest``'s defaults before issue 14: hashing, no stop words, raw tf.
OLD_HASHED = {"vocabulary": False, "stop_words": None, "sublinear_tf": False}
#: scikit-learn's ``TfidfVectorizer`` defaults, for ``vocabulary=True``.
OLD_VOCABULARY = {"min_df": 1, "max_df": 1.0, "stop_words": None, "sublinear_tf": False}

_SOURCE = {f.name for f in dataclasses.fields(SourceSpec)}
_TEXT = {f.name for f in dataclasses.fields(TextSpec)}


def specs(source: Any, **kwargs: Any) -> tuple[SourceSpec, dict[str, Any]]:
    """``(SourceSpec, ingest's keywords with text=TextSpec(...))`` of flat keywords."""
    text = TextSpec(**{k: kwargs.pop(k) for k in _TEXT & kwargs.keys()})
    src = SourceSpec(source, **{k: kwargs.pop(k) for k in _SOURCE & kwargs.keys()})
    return src, {"text": text, **kwargs}


def ingest_old(source: Any, output: Any, **kwargs: Any):
    """An ingest (:class:`sphdist.jobs.ingest.IngestRequest`) with the old defaults for what
    ``kwargs`` omits."""
    if kwargs.get("like") is None:
        kwargs = {**(OLD_VOCABULARY if kwargs.get("vocabulary") else OLD_HASHED), **kwargs}
    src, kwargs = specs(source, **kwargs)
    return run(IngestRequest(src, output, **kwargs))
