"""sphdist: out-of-core, distributed Spherical PCA for embedding text on the unit sphere.

Spherical PCA (Liu et al. 2019) factorises a corpus X (m features x n documents) as
``X ~ U V`` with ``U^T U = I`` and every column of V on the unit sphere, so that Euclidean
distance between embeddings is angle distance. sphdist computes it on column-chunked Dask arrays
with one pass over X per iteration, zarr checkpoints and a tf-idf ingestion stage.
"""

from importlib.metadata import PackageNotFoundError, version

from .errors import SphdistError
from .estimator import SphericalPCA

try:
    __version__ = version("sphdist")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = ["SphericalPCA", "SphdistError", "__version__"]
