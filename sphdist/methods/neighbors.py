"""Nearest neighbours on the sphere with faiss: an exact (flat) or inverted-file (IVF) index.

On unit vectors the inner product is the cosine, so faiss' inner-product indexes find the
nearest documents by angle (Euclidean distance ``sqrt(2 - 2 cos)`` orders them the same way).
:class:`NeighborIndex` follows scikit-learn's ``NearestNeighbors`` convention
(``fit``, ``kneighbors(X, n_neighbors, return_distance)``, cosine distance ``1 - cos``) over a
faiss index, and builds an IVF index chunk by chunk from a dask array, so that the build never
holds more than the index itself.

References
----------
.. [1] Johnson, J., Douze, M. and Jegou, H. (2019). Billion-scale similarity search with GPUs.
   IEEE Trans. Big Data 7(3). (faiss)
.. [2] Jegou, H., Douze, M. and Schmid, C. (2011). Product quantization for nearest neighbor
   search. IEEE TPAMI 33(1), Sec. III-A (the inverted file with coarse quantizer, IVF).
"""

from __future__ import annotations

import math
from numbers import Integral
from typing import Any

import dask.array as da
import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state, metadata_routing
from sklearn.utils.validation import check_is_fitted

from sphdist._validation import Interval, StrOptions, ValidatedParams
from sphdist.core.neighbors import DEFAULT_NPROBE, faiss_search
from sphdist.core.neighbors import unit_float32 as _unit_float32
from sphdist.errors import DataError, ParameterError, option
from sphdist.methods._base import fit_context

__all__ = ["NeighborIndex", "FLAT_MAX", "default_nlist", "DEFAULT_NPROBE"]

#: Largest collection indexed exactly (flat) by ``kind="auto"``: a flat query scans n * r
#: floats, 7.6 ms per query in a batch of 1,000 at n = 200,000 and r = 100 on 2 busy cores
#: (load 5.8), against 0.8 ms for the IVF of 1M documents (pipelines/results/neighbors.md).
FLAT_MAX = 100_000


_TRAIN_PER_LIST = 40  # training points per inverted list (faiss warns below 39)
_TRAIN_ITERATIONS = 10  # k-means iterations of the coarse quantizer (faiss' default: 25)


def default_nlist(n: int) -> int:
    """Inverted lists of an IVF index of ``n`` vectors: ``sqrt(n)``, a power of two.

    Below the faiss wiki's rule of thumb ("Guidelines to choose an index": 4 sqrt(n) to
    16 sqrt(n)): training the coarse quantizer (k-means on 40 vectors per list) costs
    ``O(nlist^2 r)``, and on a few cores it would dominate the build; the scan per query is
    ``nprobe * n / nlist`` vectors, well under a millisecond at 1M documents
    (pipelines/results/neighbors.md). At most ``n / 40``, at least 1.

    >>> default_nlist(1_000_000), default_nlist(250_000), default_nlist(20_000), default_nlist(10)
    (1024, 512, 128, 1)
    """
    target = 1 << round(math.log2(math.sqrt(max(n, 1))))
    return max(1, min(target, 1 << int(math.log2(max(n // _TRAIN_PER_LIST, 1)))))


def _rows(X: Any, a: int, b: int) -> np.ndarray:
    block = X[a:b]
    if isinstance(block, da.Array):
        block = block.compute()
    return np.asarray(block, dtype=np.float64)


class NeighborIndex(ValidatedParams, BaseEstimator):
    """Nearest neighbours by cosine over a faiss index (exact flat or IVF).

    Parameters
    ----------
    kind : {"auto", "flat", "ivf"}, default "auto"
        ``"flat"``: exact inner-product scan (``faiss.IndexFlatIP``); ``"ivf"``: an inverted
        file (``faiss.IndexIVFFlat``, inner product) of ``nlist`` lists, of which ``nprobe`` are
        scanned per query; ``"auto"``: flat up to :data:`FLAT_MAX` vectors, IVF above.
    nlist : int, optional
        Inverted lists of an IVF index; default :func:`default_nlist` of n.
    nprobe : int, optional
        Lists scanned per query (the accuracy knob: recall grows with it, so does the time);
        default :data:`~sphdist.core.neighbors.DEFAULT_NPROBE`. May be changed after ``fit``
        (``set_params``).
    train_size : int, optional
        Vectors sampled (uniformly, without replacement) to train the IVF's coarse quantizer
        (k-means, 10 iterations); default ``40 * nlist``.
    chunk_size : int, default 65536
        Rows read and added to the index at a time.
    random_state : int, RandomState or None, default 0
        The training sample and faiss' k-means seed.

    Attributes
    ----------
    index_ : faiss.Index
        The index; ids are the row numbers of the fitted X.
    kind_ : {"flat", "ivf"}
    nlist_ : int or None
        Inverted lists (None for flat).
    n_samples_fit_ : int
        Rows of the fitted X (including those left out: zero rows and ``exclude``).
    n_indexed_ : int
        Rows in the index.
    n_features_in_ : int
        r, the dimension of the vectors.

    Notes
    -----
    Vectors are stored as float32 unit rows (``4 r`` bytes each, plus 8 bytes of id); the
    cosines returned are float32 inner products, exact to about 1e-7. The IVF search is
    approximate: a neighbour whose inverted list is not among the ``nprobe`` nearest to the
    query is missed; recall@k against the exact scan is measured in
    ``pipelines/neighbors_benchmark.py``.

    Examples
    --------
    >>> import numpy as np
    >>> from sphdist import NeighborIndex
    >>> X = np.random.default_rng(0).normal(size=(100, 5))
    >>> index = NeighborIndex().fit(X)
    >>> dist, ind = index.kneighbors(X[:2], n_neighbors=3)
    >>> ind[:, 0].tolist(), bool(np.allclose(dist[:, 0], 0.0, atol=1e-6))
    ([0, 1], True)
    """

    _parameter_constraints: dict = {
        "kind": [StrOptions({"auto", "flat", "ivf"})],
        "nlist": [Interval(Integral, 1, None, closed="left"), None],
        "nprobe": [Interval(Integral, 1, None, closed="left"), None],
        "train_size": [Interval(Integral, 1, None, closed="left"), None],
        "chunk_size": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }

    # ``exclude`` is a keyword of fit, not metadata to route: no ``set_fit_request``
    __metadata_request__fit = {"exclude": metadata_routing.UNUSED}

    def __init__(
        self, kind: str = "auto", *, nlist: int | None = None, nprobe: int | None = None,
        train_size: int | None = None, chunk_size: int = 65536, random_state: Any = 0,
    ):
        self.kind = kind
        self.nlist = nlist
        self.nprobe = nprobe
        self.train_size = train_size
        self.chunk_size = chunk_size
        self.random_state = random_state

    @fit_context
    def fit(self, X: Any, y: Any = None, *, exclude: np.ndarray | None = None) -> NeighborIndex:
        """Build the index of the rows of X.

        Parameters
        ----------
        X : {ndarray, dask.array.Array} of shape (n_samples, r)
            The vectors, one per row (scikit-learn's orientation; a ``SphericalPCA``'s
            ``embedding_``, or ``V.T`` of a model). Scaled to unit norm; read ``chunk_size``
            rows at a time.
        y : None
            Ignored.
        exclude : ndarray of shape (n_samples,), bool, optional
            Rows left out of the index (never returned): documents without a direction.
            Rows of norm 0 are left out too.

        Returns
        -------
        self

        Raises
        ------
        DataError
            If X is not 2-D, has no row with a direction, or holds NaN or Inf.
        ParameterError
            For an IVF with more lists than rows to train on.
        """
        import faiss

        if len(getattr(X, "shape", ())) != 2:
            raise DataError(f"X must be 2-D (n_samples, r), got shape {getattr(X, 'shape', None)}.")
        n, r = (int(s) for s in X.shape)
        keep = np.ones(n, dtype=bool) if exclude is None else ~np.asarray(exclude, dtype=bool)
        kind = self.kind if self.kind != "auto" else ("flat" if n <= FLAT_MAX else "ivf")
        rng = check_random_state(self.random_state)
        self.nlist_ = None
        if kind == "flat":
            index = faiss.IndexIDMap2(faiss.IndexFlatIP(r))
        else:
            nlist = self.nlist or default_nlist(n)
            candidates = np.flatnonzero(keep)
            size = min(candidates.size, self.train_size or _TRAIN_PER_LIST * nlist)
            if size < nlist:
                raise ParameterError(
                    "an IVF index of " + option("nlist", nlist)
                    + f" lists needs at least {nlist} vectors to train on, got {size}. To "
                    "resolve this, pass a smaller " + option("nlist") + " or "
                    + option("kind", 'flat') + "."
                )
            sample = np.sort(rng.choice(candidates, size=size, replace=False))
            train = X[sample]
            train, zero = _unit_float32(np.asarray(
                train.compute() if isinstance(train, da.Array) else train, dtype=np.float64))
            quantizer = faiss.IndexFlatIP(r)
            index = faiss.IndexIVFFlat(quantizer, r, nlist, faiss.METRIC_INNER_PRODUCT)
            index.cp.seed = int(rng.randint(0, 2**31 - 1))
            index.cp.min_points_per_centroid = 1  # a small sample was asked for: no warning
            index.cp.niter = _TRAIN_ITERATIONS
            index.train(train[~zero])
            index.own_fields = True
            quantizer.this.disown()  # the IVF owns its quantizer now
            self.nlist_ = nlist
        for a in range(0, n, self.chunk_size):
            b = min(a + self.chunk_size, n)
            block, zero = _unit_float32(_rows(X, a, b))
            if not np.isfinite(block).all():
                raise DataError(f"X holds NaN or Inf values in rows {a}..{b - 1}. To resolve "
                                "this, clean the input data before indexing.")
            use = keep[a:b] & ~zero
            index.add_with_ids(block[use], np.flatnonzero(use).astype(np.int64) + a)
        if index.ntotal == 0:
            raise DataError("X has no row with a direction (all zero or excluded): nothing to "
                            "index.")
        if kind == "ivf":
            # reconstruct(ids): kneighbors() of the fitted rows (ids need not be contiguous)
            index.set_direct_map_type(faiss.DirectMap.Hashtable)
        self.index_, self.kind_ = index, kind
        self.n_samples_fit_, self.n_indexed_, self.n_features_in_ = n, int(index.ntotal), r
        return self

    @property
    def nprobe_(self) -> int | None:
        """Lists scanned per query now: ``nprobe``, or the default; None for flat.

        The default is :data:`~sphdist.core.neighbors.DEFAULT_NPROBE`.
        """
        check_is_fitted(self, "index_")
        if self.kind_ != "ivf":
            return None
        return min(int(self.nprobe or DEFAULT_NPROBE), int(self.nlist_))

    def search(self, Q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k largest cosines of each query row (the primitive under :meth:`kneighbors`).

        Parameters
        ----------
        Q : ndarray of shape (n_queries, r), float
            Query vectors, one per row; scaled to unit norm.
        k : int
            Neighbours per query, >= 1.

        Returns
        -------
        index : ndarray of shape (n_queries, k), int64
            Row numbers of the fitted X, nearest first; -1 where fewer than k were found.
        cosine : ndarray of shape (n_queries, k), float64
            Their cosines (float32 precision); ``-inf`` where the index is -1.

        Raises
        ------
        DataError
            If a query has no direction (a zero row) or the wrong dimension.
        ParameterError
            If ``k < 1``.
        """
        check_is_fitted(self, "index_")
        return faiss_search(self.index_, Q, k, n_features=self.n_features_in_,
                            nprobe=self.nprobe_)

    def kneighbors(
        self, X: Any = None, n_neighbors: int | None = None, return_distance: bool = True,
    ) -> Any:
        """The nearest neighbours of each query, as ``sklearn.neighbors.NearestNeighbors``.

        Parameters
        ----------
        X : array-like of shape (n_queries, r), optional
            Queries. None: the indexed rows themselves, in row order (every row of the fitted
            X but those left out by ``exclude`` or for norm 0), each one's neighbours being
            other rows (scikit-learn's convention).
        n_neighbors : int, optional
            Default 5 (scikit-learn's); at most the number of indexed rows (minus one when X
            is None).
        return_distance : bool, default True

        Returns
        -------
        neigh_dist : ndarray of shape (n_queries, n_neighbors), float64
            Cosine distances ``1 - cos`` (``metric="cosine"`` in scikit-learn), increasing;
            clipped at 0 (float32 cosines of duplicates may exceed 1), as scikit-learn does.
            Only when ``return_distance``.
        neigh_ind : ndarray of shape (n_queries, n_neighbors), int64
            Row numbers of the fitted X.

        Raises
        ------
        ParameterError
            If ``n_neighbors`` exceeds the indexed rows.
        DataError
            See :meth:`search`.
        """
        check_is_fitted(self, "index_")
        k = 5 if n_neighbors is None else int(n_neighbors)
        own = None
        available = self.n_indexed_ - (X is None)
        if k < 1 or k > available:
            raise ParameterError(
                f"n_neighbors={k}: expected 1 <= n_neighbors <= {available} (the "
                f"{'other ' if X is None else ''}indexed rows). To resolve this, ask for fewer "
                "neighbours."
            )
        if X is None:
            own = np.arange(self.n_samples_fit_, dtype=np.int64)
            own = own[self._indexed()]
            X = self.index_.reconstruct_batch(own)
        X = np.asarray(X, dtype=np.float64)
        if own is None:
            idx, cos = self.search(X, k)
        else:
            idx, cos = self.search(X, k + 1)
            cos = np.where(idx == own[:, None], -np.inf, cos)
            order = np.argsort(-cos, axis=1, kind="stable")[:, :k]
            idx = np.take_along_axis(idx, order, axis=1)
            cos = np.take_along_axis(cos, order, axis=1)
        if not return_distance:
            return idx
        # float32 cosines of (near-)duplicates exceed 1 by an ulp: clip at 0 as
        # sklearn.metrics.pairwise.cosine_distances does (-inf where idx is -1 stays inf)
        return np.maximum(1.0 - cos, 0.0), idx

    def _indexed(self) -> np.ndarray:
        """Boolean (n_samples_fit_,): the rows in the index."""
        import faiss

        mask = np.zeros(self.n_samples_fit_, dtype=bool)
        if self.kind_ == "flat":
            ids = faiss.vector_to_array(self.index_.id_map)
        else:
            invlists = self.index_.invlists
            ids = np.concatenate([
                faiss.rev_swig_ptr(invlists.get_ids(i), invlists.list_size(i)).copy()
                for i in range(self.index_.nlist)
            ] + [np.zeros(0, dtype=np.int64)])
        mask[ids] = True
        return mask
