"""Storage: the only code that knows the zarr layouts.

``corpus.zarr``, ``model.zarr`` and ``embedding.zarr``: opening, validating, writing, and
committing them atomically.
"""
