"""Text to tf-idf.

Document sources, scikit-learn's vectorizer semantics, ingestion into ``corpus.zarr``, and
synthetic corpora.
"""
