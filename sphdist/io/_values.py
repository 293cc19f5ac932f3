"""Checks of the numbers a reader hands to the solver: finite, and small enough for float64.

A NaN or Inf, or a document (a sample of dense input) whose sum of squared values overflows
float64 (a finite 1e300 does), would make the sums of a fit (``||X||_F^2``, ``X V^T``)
non-finite far from where it came from. The readers of :mod:`sphdist.io.corpus` call these
checks on every chunk they read, so the error names the file, the document and the feature.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sphdist.errors import DataError

__all__ = ["check_csc_values", "check_dense_values"]

#: No column of nnz values can overflow when every ``|x| < sqrt(max float64 / nnz)``.
_MAX = np.finfo(np.float64).max


def _refuse(path: str, where: str, value: float, feature: int, overflow: bool,
            remedy: str) -> DataError:
    what = (f"is too large for float64: the sum of its squared values overflows ({value:.6g} "
            f"at feature {feature}; rescale it, e.g. to unit norm)" if overflow else
            f"holds a non-finite value ({value}) at feature {feature}")
    return DataError(f"{path}: {where} {what}. To resolve this, " + remedy + ".")


def check_csc_values(
    data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, path: str,
    where: Callable[[int], str], remedy: str,
) -> None:
    """Refuse a CSC chunk with a NaN or Inf, or a column whose squared values overflow.

    Parameters
    ----------
    data, indices, indptr : ndarray
        The chunk's CSC arrays (consistent: checked before).
    path : str
        The store, for the message.
    where : callable
        Column of the chunk -> how the message names it (``"document 17 (chunk 1)"``).
    remedy : str
        Completes "To resolve this, ...".

    Raises
    ------
    DataError
        Naming ``path``, the first offending column, the value and its feature.
    """
    finite = np.isfinite(data)
    if not finite.all():
        pos = int(np.flatnonzero(~finite)[0])
        j = int(np.searchsorted(indptr, pos, side="right")) - 1
        raise _refuse(path, where(j), data[pos], int(indices[pos]), False, remedy)
    if not data.size or np.abs(data).max() < np.sqrt(_MAX / data.size):
        return  # the common case, in one pass over data
    starts = np.flatnonzero(np.diff(indptr))  # columns holding a value
    with np.errstate(over="ignore"):
        sums = np.add.reduceat(data * data, indptr[starts])
    bad = np.flatnonzero(~np.isfinite(sums))
    if bad.size:
        j = int(starts[bad[0]])
        pos = int(indptr[j] + np.argmax(np.abs(data[indptr[j]:indptr[j + 1]])))
        raise _refuse(path, where(j), data[pos], int(indices[pos]), True, remedy)


def check_dense_values(
    block: np.ndarray, path: str, where: Callable[[int], str], remedy: str
) -> None:
    """Refuse a dense block (samples as rows) with a NaN or Inf, or a row that overflows.

    As :func:`check_csc_values`, for a block of shape (n_c samples, m features).
    """
    finite = np.isfinite(block)
    if not finite.all():
        row, col = (int(v[0]) for v in np.nonzero(~finite))
        raise _refuse(path, where(row), block[row, col], col, False, remedy)
    with np.errstate(over="ignore"):
        rows = np.flatnonzero(~np.isfinite(np.einsum("ij,ij->i", block, block)))
    if rows.size:
        row = int(rows[0])
        col = int(np.argmax(np.abs(block[row])))
        raise _refuse(path, where(row), block[row, col], col, True, remedy)
