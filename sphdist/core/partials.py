"""Partial products of a pass and their tree sum: pure NumPy/SciPy, no dask.

A pass over X yields, per block of consecutive document chunks, ``X_c V_c^T`` (m, r),
``V_c V_c^T`` (r, r) and scalars (:func:`sphdist.core.kernels.pass_block`). This module holds
what those partials are made of and how they add up:

* :class:`RowSparse` -- an ``X V^T`` partial stored on the rows (features) its chunks touch,
  and :func:`densify`; :func:`spmm_accumulate` adds ``X_c V_c^T`` into an accumulator in place,
  best from the chunk's row-major copy (:func:`row_major`);
* :func:`renumber` -- CSC chunks renumbered onto a subset of the features: the one row-subset
  mechanism, for the features that occur in a corpus (the iteration on them) and for those
  of a block (a :class:`RowSparse` partial, :func:`partial_rows`); :func:`occurring` finds
  them;
* :class:`RowMajor` -- a chunk of a held X, kept row-major on the features it contains
  (:func:`held_chunk`), which every pass renumbers and reads without copying it again;
* :func:`partials_chunk` / :func:`partials_combine` / :func:`partials_agg` -- the
  ``<op>_chunk`` / ``_combine`` / ``_agg`` triple of ``dask.array.reduction`` that sums result
  dicts key by key in a fixed order, so the sum is bitwise reproducible.

References
----------
.. [1] Liu, K., Li, Q., Wang, H. and Tang, G. (2019). Spherical Principal Component Analysis. SDM.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

try:  # the C++ loops behind ``csc @ dense`` and ``csr @ dense``; they add into their output
    from scipy.sparse._sparsetools import csc_matvecs as _csc_matvecs
    from scipy.sparse._sparsetools import csr_matvecs as _csr_matvecs
except ImportError:  # pragma: no cover - a SciPy without them falls back to ``out += X @ W``
    _csc_matvecs = _csr_matvecs = None

__all__ = [
    "PARTIAL_FORMATS",
    "RowSparse",
    "densify",
    "spmm_accumulate",
    "row_major",
    "RowMajor",
    "HELD_EXTRA",
    "held_chunk",
    "renumber",
    "occurring",
    "partial_rows",
    "PER_CHUNK_KEYS",
    "partials_chunk",
    "flatten_partials",
    "partials_combine",
    "partials_agg",
    "partials_fold",
]


PARTIAL_FORMATS = ("auto", "rows", "dense")

#: ``"auto"`` keeps a partial row-sparse while its rows are at most this fraction of m.
_ROWS_MAX_FRACTION = 0.5


class RowSparse:
    """An (m, r) float64 matrix stored as its possibly nonzero rows; all other rows are +0.0.

    Parameters
    ----------
    rows : ndarray of shape (k,), int64
        Sorted, unique row indices in ``[0, m)``.
    values : ndarray of shape (k, r), float64
        The rows ``rows`` of the matrix.
    shape : tuple of int
        (m, r) of the dense matrix.

    Notes
    -----
    Used for ``X V^T`` partials (:func:`sphdist.core.kernels.pass_block`): a block of
    documents touches only the features that occur in it, so ``k`` is the block's vocabulary,
    not m. Memory ``16 k + 8 k r`` bytes instead of ``8 m r``. The solver keeps ``U_k`` and
    ``X V_k^T`` so on the features that occur in the corpus
    (:class:`sphdist.core.solver.FitState`), where the exact U-step is zero off them.

    Examples
    --------
    >>> RowSparse(np.array([1]), np.array([[2.0, 3.0]]), (3, 2)).toarray()
    array([[0., 0.],
           [2., 3.],
           [0., 0.]])
    """

    __slots__ = ("rows", "values", "shape")

    def __init__(self, rows: np.ndarray, values: np.ndarray, shape: tuple[int, int]) -> None:
        self.rows = rows
        self.values = values
        self.shape = (int(shape[0]), int(shape[1]))

    @property
    def nbytes(self) -> int:
        """Bytes of ``rows`` and ``values``."""
        return int(self.rows.nbytes + self.values.nbytes)

    def toarray(self) -> np.ndarray:
        """The dense (m, r) float64 matrix (absent rows +0.0)."""
        out = np.zeros(self.shape)
        out[self.rows] = self.values
        return out

    def __reduce__(self) -> tuple[Any, ...]:
        return (RowSparse, (self.rows, self.values, self.shape))

    def __sizeof__(self) -> int:  # what dask's memory accounting sees (sys.getsizeof)
        return object.__sizeof__(self) + self.nbytes


def densify(XVt: Any) -> np.ndarray:
    """An ``X V^T`` partial as a dense (m, r) float64 ndarray (a :class:`RowSparse` or ndarray).

    Examples
    --------
    >>> densify(np.ones((2, 1))).ravel()
    array([1., 1.])
    """
    return XVt.toarray() if isinstance(XVt, RowSparse) else XVt


def _sum_xvt(terms: list[Any]) -> Any:
    """Left-fold sum of ``X V^T`` partials (ndarray or :class:`RowSparse`) in list order.

    Every element of the result is ``((t_0 + t_1) + t_2) + ...`` over the terms that store the
    element, exactly as the dense fold, minus additions of a stored +0.0. Those are identities
    (``x + 0.0 == x`` bitwise for every x but -0.0, and a partial accumulated from +0.0 never
    holds -0.0: under round-to-nearest a sum is -0.0 only if both addends are), so the result
    is bitwise the dense sum. Row-sparse when every term is and the union of their rows is at
    most half of m, dense otherwise.
    """
    if len(terms) == 1:
        return terms[0]
    if all(isinstance(t, np.ndarray) for t in terms):  # the dense route, as before
        total = terms[0]
        for t in terms[1:]:
            total = total + t
        return total
    m, r = terms[0].shape
    sparse = [t for t in terms if isinstance(t, RowSparse)]
    union = None
    if len(sparse) == len(terms):
        mask = np.zeros(m, dtype=bool)
        for t in sparse:
            mask[t.rows] = True
        k = int(np.count_nonzero(mask))
        if k <= _ROWS_MAX_FRACTION * m:
            union = np.flatnonzero(mask)
    if union is None:
        acc = np.zeros((m, r))
        for t in terms:
            if isinstance(t, RowSparse):
                acc[t.rows] += t.values
            else:
                acc += t
        return acc
    acc = np.zeros((union.size, r))
    for t in sparse:
        acc[np.searchsorted(union, t.rows)] += t.values
    return RowSparse(union.astype(np.int64), acc, (m, r))


def spmm_accumulate(X_c: Any, W: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out += X_c @ W`` in place, without an (m, r) temporary for sparse ``X_c``.

    Parameters
    ----------
    X_c : scipy.sparse matrix or ndarray of shape (m, n_c)
        Document columns; CSR (:func:`row_major`) and CSC take the in-place route, other
        formats go through a temporary.
    W : ndarray of shape (n_c, r)
        Dense right factor (``V_c^T``).
    out : ndarray of shape (m, r), float64, C-contiguous
        The accumulator; modified in place.

    Returns
    -------
    ndarray of shape (m, r), float64
        ``out``.

    Notes
    -----
    For a CSR or CSC chunk this is SciPy's own ``csr @ dense`` / ``csc @ dense`` loop
    (``csr_matvecs`` / ``csc_matvecs``, which add into their output) called on ``out``
    directly, in float64 whatever the chunk's dtype: it skips allocating, zeroing and adding a
    fresh (m, r) product per chunk, which at m = 2**18, r = 100 is 210 MB of memory traffic
    three times over. Both loops add ``x_ij W[j]`` into ``out[i]`` in increasing ``j`` for
    every row i (CSC: column after column; CSR: a row's sorted column indices), so the two
    routes give the same bits. The CSR route writes ``out`` row after row and reads the
    small W at random; the CSC route writes the large ``out`` at random, which on many cores
    at once no longer fits the shared cache (:func:`row_major`).

    Examples
    --------
    >>> X = sp.csc_matrix(np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0]]))
    >>> out = np.ones((3, 1))
    >>> spmm_accumulate(X, np.array([[1.0], [1.0]]), out).ravel()
    array([2., 3., 4.])
    """
    m, n_c = X_c.shape
    r = W.shape[1]
    loop = {"csc": _csc_matvecs, "csr": _csr_matvecs}.get(
        X_c.format if sp.issparse(X_c) else None)
    if (
        loop is not None and out.dtype == np.float64 and out.flags.c_contiguous
        and out.shape == (m, r) and X_c.indices.dtype == X_c.indptr.dtype
    ):
        W = np.ascontiguousarray(W, dtype=np.float64)
        data = np.asarray(X_c.data, dtype=np.float64)
        loop(m, n_c, r, X_c.indptr, X_c.indices, data, W.ravel(), out.reshape(-1))
    else:
        out += np.asarray(X_c @ W, dtype=np.float64)
    return out


def row_major(X_c: Any) -> Any:
    """A CSC chunk's CSR copy, where its row indices are sorted; any other chunk as it is.

    Parameters
    ----------
    X_c : scipy.sparse matrix or ndarray of shape (m, n_c)
        A document chunk.

    Returns
    -------
    scipy.sparse.csr_matrix of shape (m, n_c), or ``X_c``
        Row-major: both products of a pass then stream their large operand. ``X_c^T U`` is a
        ``csc @ dense`` of the transposed copy that reads U row after row (the CSC chunk's
        own transpose reads U's rows at random), and ``X_c V^T`` adds into the accumulator row
        after row (:func:`spmm_accumulate`). Every entry of both products is summed in the
        same order either way (the copy's column indices sorted within a row, the chunk's
        row indices sorted within a column, as :func:`renumber` and the corpus keep them),
        so the results are bitwise those of the CSC chunk. A CSC chunk with unsorted
        indices is returned as it is: its ``X_c^T U`` sums each column in its stored order,
        which the copy would change. The copy costs one O(nnz + m) conversion a chunk.
        Measured on 8 chunks of 4096 documents at m = 45,580 occurring features, r = 100,
        one thread: 1.1 s against 1.6-2.0 s for both products, conversion included. A held
        chunk (:class:`RowMajor`) gives its CSR matrix, the same arrays, with no copy.

    Examples
    --------
    >>> X = sp.csc_matrix(np.array([[1.0, 0.0], [0.0, 2.0]]))
    >>> row_major(X).format, row_major(X.toarray()).shape
    ('csr', (2, 2))
    """
    if isinstance(X_c, RowMajor):
        return X_c.tocsr()
    return X_c.tocsr() if _is_csc(X_c) and X_c.has_sorted_indices else X_c


def _is_csc(X_c: Any) -> bool:
    return sp.issparse(X_c) and X_c.format == "csc"


def _renumberable(X_c: Any) -> bool:
    """A chunk whose features are known: CSC, or a held chunk (:class:`RowMajor`)."""
    return _is_csc(X_c) or isinstance(X_c, RowMajor)


#: The most bytes a held chunk's row-major form may add to its CSC form, as a fraction of it
#: (:func:`held_chunk`): the row indices and pointers of the features a chunk contains
#: (6.7 % at 4096 documents of 102 distinct features, 43,910 features a chunk).
HELD_EXTRA = 0.125


class RowMajor:
    """A CSC chunk kept row-major, on the rows (features) it has entries in.

    The form in which a held X keeps its chunks (:func:`held_chunk`): a pass over a CSC chunk
    renumbers it onto U's rows (:func:`renumber`) and makes its row-major copy
    (:func:`row_major`), both O(nnz) and an X's worth of allocation a pass; from this form
    both cost O(k) (the row pointers on U's k rows), and the products read the same arrays
    every pass.

    Parameters
    ----------
    rows : ndarray of shape (k_c,), integer
        Sorted, unique: the rows of ``shape`` that hold an entry.
    indptr : ndarray of shape (k_c + 1,), int32 or int64
        Row ``rows[i]``'s entries are ``data[indptr[i]:indptr[i + 1]]``.
    indices, data : ndarray of shape (nnz,)
        Column indices (sorted within a row) and values, as the chunk's CSR copy has them.
    shape : tuple of int
        (m, n_c), or (k, n_c) once renumbered onto k rows.
    sq_norm : float
        ``||X_c||_F^2``, summed in the CSC chunk's order (the pass's ``"sq_norm_X"``).

    Notes
    -----
    :meth:`tocsr` is the CSR matrix :func:`row_major` makes of the CSC chunk (renumbered
    onto the same rows): the same ``data`` and ``indices``, the same row pointers, so every
    product gives the same bits. :meth:`tocsc` gives the CSC chunk back, entry for entry.
    Memory: the CSC chunk's values and indices, plus ``rows`` and ``indptr`` (``8 k_c``
    bytes at 32-bit indices) instead of the column pointers.

    Examples
    --------
    >>> X = sp.csc_matrix(np.array([[0.0, 0.0], [1.0, 2.0], [0.0, 0.0], [0.0, 3.0]]))
    >>> held = RowMajor.from_csc(X)
    >>> held.rows, held.tocsr().toarray()[3], (held.tocsc() != X).nnz
    (array([1, 3], dtype=int32), array([0., 3.]), 0)
    """

    __slots__ = ("rows", "indptr", "indices", "data", "shape", "sq_norm")

    def __init__(self, rows: np.ndarray, indptr: np.ndarray, indices: np.ndarray,
                 data: np.ndarray, shape: tuple[int, int], sq_norm: float) -> None:
        self.rows, self.indptr, self.indices, self.data = rows, indptr, indices, data
        self.shape = (int(shape[0]), int(shape[1]))
        self.sq_norm = float(sq_norm)

    @classmethod
    def from_csc(cls, X_c: sp.csc_matrix) -> RowMajor:
        """The row-major form of a CSC chunk with sorted row indices.

        Raises
        ------
        ValueError
            If ``X_c`` is not CSC with sorted indices (whose products sum in stored order).
        """
        if not (_is_csc(X_c) and X_c.has_sorted_indices):
            raise ValueError("only CSC chunks with sorted indices are kept row-major")
        # ||X_c||^2 in the CSC order, as the pass sums it (an overflow gives inf, which the
        # solver reports as a DataError)
        with np.errstate(over="ignore"):
            sq_norm = float(X_c.data @ X_c.data)
        R = X_c.tocsr()
        rows = np.flatnonzero(np.diff(R.indptr)).astype(R.indptr.dtype)
        indptr = np.empty(rows.size + 1, dtype=R.indptr.dtype)
        indptr[0] = 0
        indptr[1:] = R.indptr[rows.astype(np.int64) + 1]
        return cls(rows, indptr, R.indices, R.data, X_c.shape, sq_norm)

    ndim = 2

    @property
    def dtype(self) -> np.dtype:
        """The values' dtype."""
        return self.data.dtype

    @property
    def nnz(self) -> int:
        """Stored entries."""
        return int(self.indptr[-1])

    @property
    def nbytes(self) -> int:
        """Bytes of its arrays."""
        return int(self.rows.nbytes + self.indptr.nbytes + self.indices.nbytes
                   + self.data.nbytes)

    def tocsr(self) -> sp.csr_matrix:
        """The (m, n_c) CSR matrix, sharing ``data`` and ``indices`` (O(m) row pointers)."""
        indptr = np.zeros(self.shape[0] + 1, dtype=self.indptr.dtype)
        indptr[self.rows.astype(np.int64) + 1] = np.diff(self.indptr)
        np.cumsum(indptr, out=indptr)
        return sp.csr_matrix((self.data, self.indices, indptr), shape=self.shape, copy=False)

    def tocsc(self) -> sp.csc_matrix:
        """The CSC chunk it was made of (renumbered as it is), entry for entry, in its order."""
        return self.tocsr().tocsc()

    def onto(self, rows: np.ndarray) -> RowMajor:
        """Renumbered onto ``rows`` (sorted, holding all of its rows): :func:`renumber`."""
        position = np.searchsorted(rows, self.rows)
        if position.size and (position[-1] >= rows.size
                              or not np.array_equal(rows[position], self.rows)):
            raise ValueError(_OUTSIDE)
        return RowMajor(position.astype(self.indptr.dtype), self.indptr, self.indices,
                        self.data, (rows.size, self.shape[1]), self.sq_norm)

    def __reduce__(self) -> tuple[Any, ...]:
        return (RowMajor, (self.rows, self.indptr, self.indices, self.data, self.shape,
                           self.sq_norm))

    def __sizeof__(self) -> int:  # what dask's memory accounting sees (sys.getsizeof)
        return object.__sizeof__(self) + self.nbytes


def held_chunk(X_c: Any, max_extra: float | None = HELD_EXTRA) -> Any:
    """A chunk as a held X keeps it: :class:`RowMajor` where that is at most ``max_extra`` larger.

    Parameters
    ----------
    X_c : scipy.sparse matrix or ndarray of shape (m, n_c)
        A chunk, as read.
    max_extra : float or None, default :data:`HELD_EXTRA`
        The most bytes the row-major form may add, as a fraction of the CSC chunk's bytes
        (its values, indices and pointers): 0 where it must be no larger; None keeps every
        chunk as it is read (for a device, whose kernels take CSC chunks).

    Returns
    -------
    RowMajor, or ``X_c``
        The row-major form of a CSC chunk with sorted indices within ``max_extra``; any other
        chunk as it is. Either gives every pass the same bits (:class:`RowMajor`).
    """
    if max_extra is None or not (_is_csc(X_c) and X_c.has_sorted_indices):
        return X_c
    held = RowMajor.from_csc(X_c)
    raw = X_c.data.nbytes + X_c.indices.nbytes + X_c.indptr.nbytes
    return held if held.nbytes <= raw * (1.0 + max_extra) else X_c


def occurring(X_blocks: list[Any]) -> np.ndarray:
    """The (m,) bool mask of the features with a stored entry in any of the chunks.

    Every feature counts as occurring when a chunk is not CSC (dense or other sparse blocks
    are never renumbered, :func:`renumber`).
    """
    m = X_blocks[0].shape[0]
    if not all(_renumberable(X_c) for X_c in X_blocks):
        return np.ones(m, dtype=bool)
    mask = np.zeros(m, dtype=bool)
    for X_c in X_blocks:
        mask[X_c.rows if isinstance(X_c, RowMajor) else X_c.indices] = True
    return mask


_OUTSIDE = ("a chunk contains a feature outside the fitted features (the corpus changed since "
            "they were found)")


def renumber(X_blocks: list[Any], rows: np.ndarray) -> list[Any]:
    """CSC chunks renumbered onto ``rows``: row ``rows[i]`` becomes row i.

    Parameters
    ----------
    X_blocks : list of scipy.sparse.csc_matrix or RowMajor of shape (m, n_c)
        Document chunks (:class:`RowMajor`: a held chunk).
    rows : ndarray of shape (k,), int64
        Sorted feature indices that contain every stored entry of the chunks: the features
        of a corpus (the iteration on them), or of the chunks (:func:`partial_rows`).

    Returns
    -------
    list of scipy.sparse.csc_matrix or RowMajor of shape (k, n_c)
        Sharing data and indptr with the originals; the stored entries keep their order, so a
        product with them performs, entry for entry, the additions of the original. A
        :class:`RowMajor` stays one (:meth:`RowMajor.onto`, O(k_c log k)).

    Raises
    ------
    ValueError
        If a chunk is not CSC, or has a stored entry outside ``rows``.

    Examples
    --------
    >>> X = sp.csc_matrix(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 2.0]]))
    >>> renumber([X], np.array([1, 3]))[0].toarray()
    array([[1., 0.],
           [0., 2.]])
    """
    out, position = [], None
    for X_c in X_blocks:
        if isinstance(X_c, RowMajor):  # a held chunk: its rows alone, O(k_c log k)
            out.append(X_c.onto(rows))
            continue
        if not _is_csc(X_c):
            raise ValueError("only CSC chunks can be renumbered onto their features")
        if position is None:
            position = np.full(X_c.shape[0], -1, dtype=np.int64)
            position[rows] = np.arange(rows.size)
        indices = position[X_c.indices]
        if indices.size and indices.min() < 0:
            raise ValueError(_OUTSIDE)
        out.append(sp.csc_matrix(
            (X_c.data, indices.astype(X_c.indptr.dtype, copy=False), X_c.indptr),
            shape=(rows.size, X_c.shape[1]),
        ))
    return out


def partial_rows(X_blocks: list[Any], occurs: np.ndarray, partials: str) -> np.ndarray | None:
    """The rows a block's ``X V^T`` partial is stored on, or None for a dense partial.

    Parameters
    ----------
    X_blocks : list of scipy.sparse matrix or ndarray of shape (m, n_c)
        The block's chunks.
    occurs : ndarray of shape (m,), bool
        :func:`occurring` of them.
    partials : {"auto", "rows", "dense"}
        The format asked (:func:`sphdist.core.kernels.pass_block`).

    Returns
    -------
    ndarray of shape (k,), int64, or None
        The features that occur in the chunks, for :func:`renumber` (the same renumbering as
        the one onto the features of a corpus) and a :class:`RowSparse` partial; None when
        the partial is dense: asked so, a chunk is not CSC, or (``"auto"``) the rows exceed
        half of m.

    Examples
    --------
    >>> X = sp.csc_matrix(np.array([[1.0], [0.0], [0.0], [0.0]]))
    >>> partial_rows([X], occurring([X]), "auto")
    array([0])
    """
    if partials == "dense" or not all(_renumberable(X_c) for X_c in X_blocks):
        return None
    rows = np.flatnonzero(occurs)
    if partials == "auto" and rows.size > _ROWS_MAX_FRACTION * occurs.size:
        return None
    return rows


#: Keys of a chunk's result that hold per-chunk arrays (kept chunked), not summable partials.
PER_CHUNK_KEYS = ("V", "H", "G")


def partials_chunk(part: dict[str, Any], axis: Any = None, keepdims: bool = False) -> dict:
    """Keep the summable partials of a chunk's result (drops :data:`PER_CHUNK_KEYS`)."""
    return {key: value for key, value in part.items() if key not in PER_CHUNK_KEYS}


def flatten_partials(parts: Any) -> list[dict[str, Any]]:
    """The dicts of a (possibly nested) list of partials, depth first, in list order.

    >>> [p["i"] for p in flatten_partials([{"i": 0}, [{"i": 1}, [{"i": 2}]], {"i": 3}])]
    [0, 1, 2, 3]
    """
    flat: list[dict[str, Any]] = []
    stack = [parts]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            flat.append(item)
        else:
            stack.extend(reversed(list(item)))
    return flat


def partials_combine(parts: Any, axis: Any = None, keepdims: bool = False) -> dict:
    """Sum a (possibly nested) list of partials dicts, key by key, in list order.

    The order is fixed by the reduction tree, not by task completion, so the sum is
    bitwise reproducible. ``"XVt"`` partials may be :class:`RowSparse`; their sum stays
    row-sparse on the union of rows while that is at most half of m, and is bitwise the sum
    of the dense partials either way. Every other key is summed with ``+`` (arrays, floats,
    ints), whatever the kernel that produced it.
    """
    flat = flatten_partials(parts)
    total = dict(flat[0])
    for part in flat[1:]:
        for key in total:
            if key != "XVt":
                total[key] = total[key] + part[key]
    if "XVt" in total:
        total["XVt"] = _sum_xvt([part["XVt"] for part in flat])
    return total


def partials_agg(parts: Any, axis: Any = None, keepdims: bool = False) -> dict:
    """Final step of the tree sum: the same as :func:`partials_combine`."""
    return partials_combine(parts)


def partials_fold(total: dict[str, Any] | None, part: dict[str, Any]) -> dict:
    """One step of a left fold: ``total + part`` key by key, ``part``'s per-chunk keys dropped.

    Parameters
    ----------
    total : dict or None
        The sum of the earlier parts of a group (the previous result of this function in
        the group's chain, which nothing else reads), or None for the group's first part.
        Its dense ``"XVt"`` is the chain's own array (the first step copies the part's), and
        ``part``'s is added into it in place: one (k, r) array per node instead of a new one
        per input (the same additions, so the same bits; at 100k documents, r = 100, 25
        blocks, 20 fewer 36 MB allocations, each first-touched page by page, per pass).
        ``part`` is not modified.
    part : dict
        The next part (a chunk's or a block's result, or a lower level's sum).

    Returns
    -------
    dict
        ``partials_chunk(part)`` when ``total`` is None, else
        ``partials_combine([total, partials_chunk(part)])``.

    Notes
    -----
    Folding a group's parts one at a time is bitwise :func:`partials_combine` of the whole
    group: that is a left fold too, element by element (for a :class:`RowSparse` term, its
    additions into a +0.0-initialised accumulator, which are the dense fold's), so a tree whose
    nodes fold their inputs as they arrive gives the tree sum's bits while holding one running
    sum per node instead of all of the node's finished inputs.

    >>> parts = [{"a": 1.0, "V": [0]}, {"a": 2.0, "V": [1]}, {"a": 3.0}]
    >>> total = None
    >>> for p in parts:
    ...     total = partials_fold(total, p)
    >>> total == partials_combine([partials_chunk(p) for p in parts])
    True
    """
    part = partials_chunk(part)
    if total is None:
        if isinstance(part.get("XVt"), np.ndarray):
            part["XVt"] = part["XVt"].copy()  # the chain's running sum, added into in place
        return part
    mine, theirs = total.get("XVt"), part.get("XVt")
    if not (isinstance(mine, np.ndarray) and isinstance(theirs, np.ndarray)):
        return partials_combine([total, part])
    rest = partials_combine([{k: v for k, v in d.items() if k != "XVt"} for d in (total, part)])
    rest["XVt"] = np.add(mine, theirs, out=mine)  # bitwise mine + theirs
    return rest
