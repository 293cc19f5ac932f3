"""Text to tf-idf.

Document sources, scikit-learn's vectorizer semantics, ingestion into ``corpus.zarr``, and
synthetic corpora.
"""

from typing import Any

__all__ = ["STRIPPERS", "clean"]


def __getattr__(name: str) -> Any:
    """The cleaning of documents (:func:`sphdist.text._passes.clean`), imported on first use."""
    if name in __all__:
        from sphdist.text import _passes  # scikit-learn, zarr: not for every text module's user

        return getattr(_passes, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
