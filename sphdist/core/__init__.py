"""The core: Liu et al. (2019) Algorithm 1 on column-chunked Dask arrays.

``kernels`` (NumPy/SciPy on one chunk) -> ``graph`` (all Dask plumbing) -> ``solver`` (the
iteration and its stopping rule).
"""
