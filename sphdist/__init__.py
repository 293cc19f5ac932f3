"""sphdist: out-of-core, distributed Spherical PCA for embedding text on the unit sphere.

Spherical PCA (Liu et al. 2019) factorises a corpus X (m features x n documents) as
``X ~ U V`` with ``U^T U = I`` and every column of V on the unit sphere, so that Euclidean
distance between embeddings is angle distance. sphdist computes it on column-chunked Dask arrays
with one pass over X per iteration, zarr checkpoints and a tf-idf ingestion stage.

The seeds' other methods are here too: Angular Decomposition and BAE (Sun et al. 2011),
Li & Dunson's spherical PCA, and the R1-PCA and K-SVD baselines of Liu et al. Table 1.
"""

from importlib.metadata import PackageNotFoundError, version

from sphdist.errors import SphdistError
from sphdist.methods.angular import BAE, AngularDecomposition, GraphAngularDecomposition
from sphdist.methods.baselines import KSVD, R1PCA
from sphdist.methods.spherelets import LiDunsonSphericalPCA
from sphdist.methods.spherical_pca import SphericalPCA

try:
    __version__ = version("sphdist")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0"

__all__ = [
    "BAE",
    "KSVD",
    "AngularDecomposition",
    "GraphAngularDecomposition",
    "LiDunsonSphericalPCA",
    "R1PCA",
    "SphdistError",
    "SphericalPCA",
    "__version__",
]
