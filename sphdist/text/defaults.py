"""The limits and defaults of ingestion, as plain data.

What ``sphdist ingest`` shows in its help and option types, importable without scikit-learn or
SciPy (:mod:`sphdist.text.tfidf`, which uses them, imports both). Each is defined here once.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_FEATURES", "MAX_CHUNK_SIZE", "INGEST_DEFAULTS", "DEFAULT_N_FEATURES"]

#: Largest hashed feature space: scikit-learn's ``HashingVectorizer`` takes
#: ``1 <= n_features < 2**31 - 1`` (its feature indices, like the stored ones, are int32).
MAX_FEATURES = 2**31 - 2
#: Largest number of documents per chunk (and per partition) of an ingest: beyond any task's
#: memory already, and it keeps the byte-offset arithmetic of the partitions inside int64.
MAX_CHUNK_SIZE = 2**31 - 1

#: Defaults of ingestion (``sphdist ingest``, :class:`sphdist.jobs.ingest.IngestRequest`): a learned
#: vocabulary of the terms in at least ``min_df`` documents and at most a fraction ``max_df`` of
#: them, English stop words dropped, sublinear tf. On 20 Newsgroups (all 20 groups, headers,
#: footers and quotes removed, r = 100) Spherical PCA's k-means accuracy / NMI went from
#: 0.243 / 0.217 with 2**18 hashed features and none of these options to 0.431 / 0.413, and its
#: fit was 5-8 times faster (a 24,164-term U instead of 2**18 rows):
#: ``pipelines/results/text_defaults.md``, setting e against setting a. The ``min_df`` and
#: ``max_df`` values are scikit-learn's documented text-clustering recipe's.
INGEST_DEFAULTS: dict[str, Any] = {
    "vocabulary": True, "min_df": 5, "max_df": 0.5, "stop_words": "english",
    "sublinear_tf": True,
}
#: Hashed features when hashing is asked (``--hashing``) and no ``n_features`` is given.
DEFAULT_N_FEATURES = 2**18
