"""sphdist: out-of-core, distributed Spherical PCA for embedding text on the unit sphere.

Spherical PCA (Liu et al. 2019) factorises a corpus X (m features x n documents) as
``X ~ U V`` with ``U^T U = I`` and every column of V on the unit sphere, so that Euclidean
distance between embeddings is angle distance. sphdist computes it on column-chunked Dask arrays
with one pass over X per iteration, zarr checkpoints and a tf-idf ingestion stage.

The other methods of the papers are here too: Angular Decomposition and BAE (Sun et al. 2011),
Li & Dunson's spherical PCA, and the R1-PCA (Ding et al. 2006) and K-SVD (Aharon et al. 2006)
baselines of Liu et al. (2019), Table 1.

References
----------
.. [1] Liu, K., Li, Q., Wang, H. and Tang, G. (2019). Spherical Principal Component Analysis. SDM.
.. [2] Sun, D., Ding, C., Luo, B. and Tang, J. (2011). Angular Decomposition. IJCAI.
.. [3] Li, D. and Dunson, D. B. (2019). Geodesic Distance Estimation with Spherelets.
   arXiv:1907.00296.
.. [4] Ding, C., Zhou, D., He, X. and Zha, H. (2006). R1-PCA: Rotational Invariant L1-norm
   Principal Component Analysis for Robust Subspace Factorization. ICML.
.. [5] Aharon, M., Elad, M. and Bruckstein, A. (2006). K-SVD: An Algorithm for Designing
   Overcomplete Dictionaries for Sparse Representation. IEEE Trans. Signal Processing 54(11).
"""

from typing import TYPE_CHECKING

from sphdist.errors import SphdistError

if TYPE_CHECKING:  # imported on first use (__getattr__ below)
    from sphdist.methods.angular import AngularDecomposition
    from sphdist.methods.bae import BAE
    from sphdist.methods.baselines import KSVD, R1PCA
    from sphdist.methods.graph_angular import GraphAngularDecomposition
    from sphdist.methods.neighbors import NeighborIndex
    from sphdist.methods.spherelets import LiDunsonSphericalPCA
    from sphdist.methods.spherical_pca import SphericalPCA

    __version__: str

__all__ = [
    "BAE",
    "KSVD",
    "AngularDecomposition",
    "GraphAngularDecomposition",
    "LiDunsonSphericalPCA",
    "NeighborIndex",
    "R1PCA",
    "SphdistError",
    "SphericalPCA",
    "__version__",
]

#: The estimators, imported on first use (PEP 562, as SciPy and scikit-image do): importing
#: sphdist -- as the command line does to answer ``--help`` -- imports neither scikit-learn
#: nor SciPy nor Dask.
_ESTIMATORS = {
    "AngularDecomposition": "sphdist.methods.angular",
    "BAE": "sphdist.methods.bae",
    "GraphAngularDecomposition": "sphdist.methods.graph_angular",
    "KSVD": "sphdist.methods.baselines",
    "LiDunsonSphericalPCA": "sphdist.methods.spherelets",
    "NeighborIndex": "sphdist.methods.neighbors",
    "R1PCA": "sphdist.methods.baselines",
    "SphericalPCA": "sphdist.methods.spherical_pca",
}

#: Subpackages and modules reachable as attributes (``sphdist.methods``), imported on first use.
_SUBMODULES = (
    "cli", "core", "datasets", "errors", "io", "jobs", "methods", "metrics", "text",
    "_progress", "_validation",
)


def __getattr__(name: str) -> object:
    import importlib

    if name in _ESTIMATORS:
        value = getattr(importlib.import_module(_ESTIMATORS[name]), name)
    elif name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("sphdist")
        except PackageNotFoundError:  # running from a source tree that is not installed
            value = "0.0.0"
    elif name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later look-ups find it without calling __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_SUBMODULES))
