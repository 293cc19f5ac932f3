"""The array-module seam: which device a chunk's arithmetic runs on, and moving chunks there.

The kernels of :mod:`sphdist.core.kernels` are written once against an array module ``xp``,
NumPy/SciPy on the host or CuPy/``cupyx.scipy.sparse`` on a CUDA device, taken from the array
itself (:func:`array_module`, as ``cupy.get_array_module`` does). This module is the only one
that imports CuPy, lazily (:func:`cupy_module`), so that ``import sphdist`` and the command
line's help never pay for it and a machine without CuPy runs everything but ``device="cuda"``.

Devices (:data:`DEVICES`): ``"cpu"`` (the default) and ``"cuda"`` (the current CUDA device of
each worker). What stays on the host whatever the device: the U-step, the objective's sums
and the checkpoints, in float64 (the chunk kernels hand their partials back to the host,
:func:`to_host`).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np
import scipy.sparse as sp

from sphdist.errors import DeviceError, option

__all__ = [
    "DEVICES", "cupy_module", "check_device", "array_module", "on_device", "issparse",
    "to_device", "shared_copy", "to_host", "is_out_of_memory",
]

#: The devices a fit, a transform and an export run their chunk kernels on.
DEVICES = ("cpu", "cuda")

#: What a message says to get CuPy: the extra of :file:`pyproject.toml`.
INSTALL_GPU = "pip install 'sphdist[gpu]'"


def cupy_module() -> Any:
    """CuPy, imported on first use.

    Returns
    -------
    module
        ``cupy``.

    Raises
    ------
    sphdist.errors.DeviceError
        If CuPy is not installed (or fails to import), with the command that installs it and
        the CPU alternative.
    """
    try:
        import cupy
        import cupyx.scipy.sparse  # noqa: F401  (the sparse chunks)
    except Exception as exc:  # ImportError, or a CuPy built for another CUDA
        raise DeviceError(
            f"device 'cuda' needs CuPy, which could not be imported ({type(exc).__name__}: "
            f"{exc}). To resolve this, install the GPU extra: `{INSTALL_GPU}` (or the CuPy "
            "wheel of your CUDA, e.g. cupy-cuda12x), or run on the CPU: "
            + option("device", 'cpu') + "."
        ) from None
    return cupy


def check_device(device: str) -> str:
    """Check that ``device`` can run the chunk kernels here, before any work starts.

    Parameters
    ----------
    device : {"cpu", "cuda"}
        The device asked for.

    Returns
    -------
    str
        ``device``.

    Raises
    ------
    ValueError
        If ``device`` is not one of :data:`DEVICES` (the parameter table refuses it first).
    sphdist.errors.DeviceError
        With ``"cuda"``: if CuPy is not installed (:func:`cupy_module`), or the CUDA runtime
        reports no device (no GPU, no driver, ``CUDA_VISIBLE_DEVICES`` empty).

    Examples
    --------
    >>> check_device("cpu")
    'cpu'
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got {device!r}")
    if device == "cpu":
        return device
    cupy = cupy_module()
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError: no driver, insufficient driver
        count, why = 0, f"{type(exc).__name__}: {exc}"
    else:
        why = "the CUDA runtime sees 0 devices"
    if count == 0:
        raise DeviceError(
            f"device 'cuda' was asked for, but no CUDA device is usable here ({why}). To "
            "resolve this, run on a machine with an NVIDIA GPU and its driver (check with "
            "`nvidia-smi`), or run on the CPU: " + option("device", 'cpu') + "."
        )
    return device


def on_device(x: Any) -> bool:
    """Whether ``x`` (an array or a sparse matrix) lives in CUDA device memory.

    Decided from the type's module, so that CuPy is never imported to answer for a host
    array.

    Examples
    --------
    >>> on_device(np.zeros(2)), on_device(sp.csc_matrix((2, 2)))
    (False, False)
    """
    return type(x).__module__.split(".", 1)[0] in ("cupy", "cupyx")


def array_module(x: Any) -> Any:
    """The array module of ``x``: ``cupy`` for a device array, else ``numpy``.

    ``cupy.get_array_module`` without importing CuPy for a host array.

    Examples
    --------
    >>> array_module(np.zeros(2)).__name__
    'numpy'
    """
    return cupy_module() if on_device(x) else np


def issparse(x: Any) -> bool:
    """Whether ``x`` is a SciPy or a ``cupyx.scipy.sparse`` matrix.

    Examples
    --------
    >>> issparse(sp.csc_matrix((2, 2))), issparse(np.zeros((2, 2)))
    (True, False)
    """
    if sp.issparse(x):
        return True
    if on_device(x) and "cupyx.scipy.sparse" in sys.modules:
        return bool(sys.modules["cupyx.scipy.sparse"].issparse(x))
    return False


def to_device(x: Any, device: str) -> Any:
    """``x`` (a chunk, U, V) on ``device``; a no-op where it already is.

    Parameters
    ----------
    x : ndarray, scipy.sparse matrix, or their CuPy counterparts
        A dense array of any shape, or a sparse matrix of shape (m, n_c) (CSC, CSR or COO keep
        their format); dtype kept.
    device : {"cpu", "cuda"}
        Where to put it.

    Returns
    -------
    The same values on ``device``: ``cupy.ndarray`` / ``cupyx.scipy.sparse`` matrix for
    ``"cuda"``, NumPy / SciPy for ``"cpu"``.

    Raises
    ------
    sphdist.errors.DeviceError
        With ``"cuda"`` and no CuPy (:func:`cupy_module`).

    Notes
    -----
    A CSC chunk of ``nnz`` stored entries moves ``nnz (itemsize + 4) + 4 (n_c + 1)`` bytes
    (int32 indices; int64 where the host chunk has them).

    Examples
    --------
    >>> to_device(np.ones(2), "cpu")
    array([1., 1.])
    """
    if device == "cpu":
        return to_host(x)
    if on_device(x):
        return x
    cupy = cupy_module()
    if sp.issparse(x):
        import cupyx.scipy.sparse as csp

        kind = {"csc": csp.csc_matrix, "csr": csp.csr_matrix}.get(x.format)
        if kind is None:
            return csp.csc_matrix(x.tocsc())
        return kind(x)
    return cupy.asarray(x)


#: The last operand :func:`shared_copy` moved: (host object, device, its device copy).
_SHARED: list[Any] = [None, None, None]
_SHARED_LOCK = threading.Lock()


def shared_copy(x: np.ndarray, device: str) -> Any:
    """The device copy of an operand every task of a pass shares (the broadcast U).

    Parameters
    ----------
    x : ndarray
        A host array that is not modified while it is in use (the U a pass broadcasts to the
        workers; each worker process holds one object for all its tasks).
    device : {"cpu", "cuda"}
        Where it is needed.

    Returns
    -------
    ``x`` on ``device``: copied once for as long as the same host object comes back (the tasks
    of one pass), so a pass of B blocks copies U to each device once, not B times.

    Notes
    -----
    One slot per process, keyed by the object's identity while it holds a reference to it (so
    the identity cannot be reused): device memory holds at most one stale copy, the size of
    U (``m r itemsize`` bytes).

    Examples
    --------
    >>> U = np.eye(2)
    >>> shared_copy(U, "cpu") is U
    True
    """
    if device == "cpu" or on_device(x):
        return to_device(x, device)
    with _SHARED_LOCK:
        host, where, copy = _SHARED
        if host is x and where == device:
            return copy
        _SHARED[:] = [None, None, None]  # free the stale copy before making the next
        copy = to_device(x, device)
        _SHARED[:] = [x, device, copy]
        return copy


def to_host(x: Any) -> Any:
    """``x`` in host memory: a CuPy array or sparse matrix copied back, anything else as is.

    Examples
    --------
    >>> to_host(3.0), to_host(np.zeros(1))
    (3.0, array([0.]))
    """
    if not on_device(x):
        return x
    return x.get()


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is a CUDA device running out of memory, not the host.

    CuPy's allocator, cuSPARSE or cuBLAS; told apart from host memory errors without importing
    CuPy.

    Parameters
    ----------
    exc : BaseException
        An exception a fit's pass raised (dask re-raises a task's exception as is).

    Returns
    -------
    bool
        True for ``cupy.cuda.memory.OutOfMemoryError`` (a ``MemoryError``) and for the CUDA
        libraries' allocation failures (``CUSPARSE_STATUS_ALLOC_FAILED``,
        ``CUBLAS_STATUS_ALLOC_FAILED``, ``cudaErrorMemoryAllocation``).

    Examples
    --------
    >>> is_out_of_memory(MemoryError("host"))
    False
    """
    if not type(exc).__module__.startswith(("cupy", "cupyx", "cupy_backends")):
        return False
    text = str(exc)
    return isinstance(exc, MemoryError) or any(
        word in text for word in ("ALLOC_FAILED", "cudaErrorMemoryAllocation", "out of memory")
    )
