"""All Dask plumbing of sphdist, each piece once: kernels -> **graph** -> solver and methods.

The kernels (:mod:`sphdist.core.kernels`, :mod:`sphdist.core.angular_kernels`) are NumPy/SciPy
functions of one chunk; the solver and the methods are iterations on the driver. Everything in
between lives here, composed from dask primitives (:func:`dask.array.blockwise`,
:func:`dask.array.reduction`, :func:`dask.delayed`):

* :func:`document_chunks` -- the papers' X (m features, n documents) of any input, chunked along
  the documents (:func:`default_chunk_size`);
* :func:`broadcast` -- a small driver array (U) sent once to every worker;
* :func:`per_chunk` -- a kernel applied to every document chunk, one result dict per chunk;
  :func:`block_pass` -- :func:`sphdist.core.kernels.pass_block` applied to blocks of
  consecutive chunks (:func:`pass_blocks`), one task each, no task waiting for another
  (:func:`pass_graph`);
* :func:`tree_sum` -- the partials of those dicts summed in a fixed tree
  (``dask.array.reduction`` over :func:`sphdist.core.partials.partials_chunk` and its pair), so
  the sum never depends on the number of workers or on task completion order;
* :func:`chunk_rows`, :func:`persist_rows_and_sum` -- per-chunk arrays kept on the cluster;
* :func:`pairs_sum` -- a kernel of two chunks summed over all pairs of chunks;
* :func:`map_rows` -- a row-wise kernel over a (n_samples, n_features) input (transform);
* :func:`compute` -- a computation with a progress counter (:func:`sphdist._progress.progress`).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import math
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dask
import dask.array as da
import dask.base
import dask.local
import dask.threaded
import numpy as np
import scipy.sparse as sp
from dask.array.dispatch import concatenate_lookup
from dask.callbacks import Callback
from dask.highlevelgraph import HighLevelGraph
from threadpoolctl import ThreadpoolController, threadpool_limits

from sphdist._progress import progress
from sphdist.core import kernels
from sphdist.core.neighbors import top_k_chunk, top_k_merge
from sphdist.core.params import FitConfig
from sphdist.core.partials import (
    HELD_EXTRA,
    RowMajor,
    RowSparse,
    densify,
    held_chunk,
    partials_fold,
)

__all__ = [
    "MAX_BLOCK_DOCUMENTS",
    "active_client",
    "contiguous_owners",
    "tree_owners",
    "block_workers",
    "hold",
    "computing",
    "default_chunk_size",
    "document_chunks",
    "broadcast",
    "per_chunk",
    "block_bounds",
    "PASS_BLOCKS",
    "pass_blocks",
    "pass_graph",
    "streamed_chunks",
    "partials_held",
    "block_pass",
    "occurring_features",
    "embedding",
    "tree_levels",
    "tree_sum",
    "sum_parts",
    "pairs_sum",
    "chunk_rows",
    "persist_rows_and_sum",
    "map_rows",
    "compute",
]

#: Most documents one pass task holds at once (8 chunks of the default 4096).
MAX_BLOCK_DOCUMENTS = 32768
#: Blocks a pass cuts a corpus of few chunks into, at least (a block a chunk below that):
#: tasks for the cores of a machine or a cluster before the document bound makes more.
PASS_BLOCKS = 32

#: Where a pass puts the V it keeps: lazy V -> (store to compute, lazy reader of the stored V).
Spill = Callable[[da.Array], tuple[Any, da.Array]]


@contextlib.contextmanager
def computing() -> Iterator[None]:
    """Dask's low-level task fusion off, and no task left running after a failure.

    A fused task keeps the key of a chunk of X with a task spec that depends on the graph
    around it (which tasks consume the chunk). Submitted again in another graph, the same key
    then comes with another spec, and distributed can deadlock ("Detected different
    run_spec", dask/dask#9888): repeated fits on one corpus in one session hung so. Unfused,
    every key keeps one spec; the values are the same.

    On dask's threaded scheduler the graphs run on a pool of their own, shut down (waiting for
    its running tasks) before this context exits: when a task fails, dask raises at once while
    its siblings still run, and one of them could write into an output's staging directory
    after the caller removed it (a transform failing in one chunk of four left
    ``OUTPUT.tmp-*/degenerate/c/2`` behind).
    """
    with dask.config.set({"optimization.fuse.active": False}):
        scheduler = dask.base.get_scheduler()
        if scheduler not in (None, dask.threaded.get) or active_client() is not None:
            yield
            return
        pool = dask.threaded.ContextAwareThreadPoolExecutor(
            dask.config.get("num_workers", None) or dask.threaded.CPU_COUNT
        )
        try:
            with dask.config.set(pool=pool):
                yield
        finally:
            pool.shutdown(wait=True)


def default_chunk_size(
    n_features: int, itemsize: int = 8, target_bytes: int = 64 << 20, *,
    nnz: int | None = None, n_samples: int | None = None,
) -> int:
    """Samples per chunk of in-memory X: about ``target_bytes`` of stored values per chunk.

    Parameters
    ----------
    n_features : int
        m.
    itemsize : int, default 8
        Bytes per value (float64).
    target_bytes : int, default 64 MiB
        Memory target per chunk, in bytes.
    nnz, n_samples : int, optional
        Sparse input: its stored values and its samples. A sparse sample then takes
        ``nnz / n_samples * (itemsize + 4) + 8`` bytes (values, int32 indices, int64 pointer),
        not the ``n_features * itemsize`` of a dense one.

    Returns
    -------
    int
        Dense: ``max(1, target_bytes // (n_features * itemsize))``. Sparse: ``target_bytes``
        over the stored bytes per sample, and at most 4096 samples, the chunk of a corpus
        that ``sphdist ingest`` writes: every chunk adds a dense m x r partial product to each
        pass, so chunks of a few samples make a pass slow (on 20 Newsgroups at m = 2**18,
        the dense rule's 32 samples per chunk took 16.8 s for a fit that takes 3.6 s with
        4096), while 4096 keeps several chunks for the threads of a machine.

    Examples
    --------
    >>> default_chunk_size(1000)
    8388
    >>> default_chunk_size(2**18)  # dense rows of 2 MiB
    32
    >>> default_chunk_size(2**18, nnz=1_804_326, n_samples=18_846)  # 96 values per row
    4096
    >>> default_chunk_size(2**18, nnz=10**9, n_samples=1000)  # 12 MB per row
    5
    """
    if nnz is not None and n_samples:
        per_sample = nnz / n_samples * (itemsize + 4) + 8
        return int(max(1, min(4096, target_bytes // per_sample)))
    return max(1, target_bytes // max(1, n_features * itemsize))


def document_chunks(X: Any, chunk_size: int | None) -> da.Array:
    """X (n_samples, n_features) -> the papers' X (n_features, n_samples), chunked along samples.

    Parameters
    ----------
    X : {ndarray, sparse matrix, dask.array.Array} of shape (n_samples, n_features)
        scikit-learn orientation. In-memory input must already be float64 (validated).
    chunk_size : int or None
        Samples per chunk. None: dask input keeps its row chunks, in-memory input gets
        :func:`default_chunk_size`.

    Returns
    -------
    dask.array.Array of shape (n_features, n_samples), float64
        One block along the features. Sparse input gives CSC blocks, dense input ndarray
        blocks; dask input is cast to float64. In-memory input is persisted, so that on a
        distributed cluster its chunks are sent to the workers once, not with every pass.
    """
    if isinstance(X, da.Array):
        Xt = X.T.astype(np.float64)
        if chunk_size is not None:
            Xt = Xt.rechunk({1: chunk_size})
        return Xt.rechunk({0: -1})
    n, m = X.shape
    nnz = X.nnz if sp.issparse(X) else None
    size = chunk_size or default_chunk_size(m, nnz=nnz, n_samples=n)
    if sp.issparse(X):
        Xt = sp.csc_matrix(X.T, dtype=np.float64)
        bounds = [*range(0, n, size), n]
        blocks = [
            da.from_delayed(
                dask.delayed(Xt[:, a:b]), shape=(m, b - a), dtype=np.float64,
                meta=sp.csc_matrix((0, 0), dtype=np.float64),
            )
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
        return da.concatenate(blocks, axis=1).persist()
    return da.from_array(np.asarray(X, dtype=np.float64).T, chunks=(m, size)).persist()


def active_client() -> Any:
    """The default ``distributed.Client``, or None when dask's local schedulers run the graphs.

    Never imports ``distributed`` (about 1 s) when nothing has: no client can exist then.
    """
    if "distributed" not in sys.modules:
        return None
    from distributed import default_client

    try:
        return default_client()
    except ValueError:
        return None


def contiguous_owners(n_items: int, weights: Sequence[int]) -> list[int]:
    """The owner of each of ``n_items`` items: runs of consecutive items, sized by weight.

    Parameters
    ----------
    n_items : int
        Items in order (the blocks of a pass).
    weights : sequence of int
        One positive weight per owner (a worker's threads).

    Returns
    -------
    list of int
        Owner ``j`` takes the items whose midpoint ``(i + 1/2) / n_items`` falls in its share
        ``[W_{j-1}, W_j) / W`` of the cumulative weights: consecutive items, in owner order,
        about ``n_items w_j / W`` each. Exact integer arithmetic, so a function of its
        arguments alone.

    Examples
    --------
    >>> contiguous_owners(5, [1, 1])
    [0, 0, 1, 1, 1]
    >>> contiguous_owners(6, [2, 1])
    [0, 0, 0, 0, 1, 1]
    """
    total, cum, bounds = sum(weights), 0, []
    for w in weights:
        cum += w
        bounds.append(2 * n_items * cum)
    return [bisect.bisect_right(bounds, (2 * i + 1) * total) for i in range(n_items)]


def tree_owners(n_items: int, weights: Sequence[int], split_every: int) -> list[int]:
    """:func:`contiguous_owners` with each cut between two runs moved onto the summation tree.

    Parameters
    ----------
    n_items : int
        Blocks of a pass, in order: the leaves of :func:`tree_levels`.
    weights : sequence of int
        One positive weight per owner (a worker's threads).
    split_every : int
        Fan-in of the tree, >= 2.

    Returns
    -------
    list of int
        The owner of each item: runs of consecutive items in owner order, as
        :func:`contiguous_owners` gives them, except that each cut between two runs is moved,
        left to right, to the position inside its reach that is a node boundary of the most
        levels of the tree (the nearest such position), where its reach keeps every run within
        the rounds the proportional split needs (``ceil(items / weight)``, its largest over the
        owners; a thirty-second more on a run of 32 rounds or more) and keeps a run that had
        items from losing all of them. A function of its arguments alone.

    Notes
    -----
    The tree folds its inputs where they are (:func:`_tree`), so a running sum crosses to
    another owner wherever a chain of folds does: at the top level for every cut, and at every
    level below where the cut falls inside a node (a node of level l covers ``s**(l + 1)``
    consecutive blocks). A cut on a node boundary of every level below the top sends one
    partial, the owner's subtree: one partial per owner then crosses, which is the floor of a
    pass (issue 40). Cuts move only where no owner takes more rounds of its threads than the
    proportional split gave the busiest one, so the pass's critical path in blocks is kept.

    Examples
    --------
    >>> tree_owners(35, [1, 1], 8) == contiguous_owners(35, [1, 1])  # 16 | 19 would cost a round
    True
    >>> o = tree_owners(35, [4, 4, 4, 4], 8)  # 1M documents, 4 x 4: 8 | 8 | 8 | 11
    >>> [o.count(j) for j in range(4)], contiguous_owners(35, [4] * 4).count(0)
    ([8, 8, 8, 11], 9)
    >>> tree_owners(64, [1, 1], 8) == contiguous_owners(64, [1, 1])  # 32 | 32 is aligned
    True
    >>> tree_owners(306, [1, 1], 8).count(0)  # 10M documents: 152 | 154, on a level-0 node
    152
    """
    owners = contiguous_owners(n_items, weights)
    n_owners = len(weights)
    starts = [bisect.bisect_left(owners, j) for j in range(n_owners)] + [n_items]
    rounds = max(-(-(starts[j + 1] - starts[j]) // max(int(w), 1))
                 for j, w in enumerate(weights))
    s = max(int(split_every), 2)

    def levels(p: int) -> int:  # levels below the top whose node boundaries p falls on
        n, size = 0, s
        while size < n_items and p % size == 0:
            n, size = n + 1, size * s
        return n

    def most(j: int) -> int:  # items owner j may take: its rounds, and 1/32 more of a long run
        cap = rounds * max(int(weights[j]), 1)
        return cap + cap // 32

    for j in range(1, n_owners):
        before, cut, after = starts[j - 1], starts[j], starts[j + 1]
        lo = max(before, after - most(j))
        hi = min(after, before + most(j - 1))
        if cut > before:
            lo = max(lo, before + 1)
        if after > cut:
            hi = min(hi, after - 1)
        if lo <= hi:
            starts[j] = max(range(lo, hi + 1), key=lambda p: (levels(p), -abs(p - cut), -p))
    return [j for j in range(n_owners) for _ in range(starts[j], starts[j + 1])]


def block_workers(n_blocks: int, split_every: int = 8) -> list[str] | None:
    """The worker each block of a pass is placed on: the blocks of a subtree on one worker.

    Parameters
    ----------
    n_blocks : int
        B, the blocks of the pass (:func:`pass_blocks`).
    split_every : int, default 8
        Fan-in of the tree that sums the pass (``FitConfig.split_every``).

    Returns
    -------
    list of str, or None
        With a distributed client, a worker address per block: the workers sorted by
        address, each given a run of consecutive blocks in proportion to its threads, the
        runs cut on the tree's node boundaries where that costs no round of blocks
        (:func:`tree_owners`); None on dask's local schedulers.

    Notes
    -----
    The tree that sums a pass's partials folds consecutive blocks (:func:`tree_sum`), each
    fold on the worker of the input it adds (:func:`_tree`). Blocks spread over the workers
    by the scheduler alternate between them, so about half the folds fetch a (k, r) partial
    (36 MB at k = 45,580, r = 100) from another worker; on runs of consecutive blocks a fold
    finds its inputs on its worker, and a worker's run that is a set of whole subtrees sends
    one partial, its sum. The placement is a preference (``allow_other_workers``): a lost
    worker's blocks and folds run elsewhere, which moves more bytes and never changes a bit
    of the sum, whose order the tree fixes. It holds while the scheduler moves no task of the
    pass on its own: the embedded LocalCluster runs without work stealing
    (:func:`sphdist.jobs.cluster.connect`), and an external scheduler with
    ``distributed.scheduler.work-stealing: false`` keeps it too.
    """
    client = active_client()
    if client is None:
        return None
    nthreads = client.nthreads()
    if not nthreads:
        return None
    workers = sorted(nthreads)
    return [workers[j] for j in
            tree_owners(n_blocks, [nthreads[w] for w in workers], split_every)]


def _placed(worker: str | None) -> contextlib.AbstractContextManager[Any]:
    """Tasks made in the block prefer ``worker`` (others may run them: work stealing, a loss)."""
    if worker is None:
        return contextlib.nullcontext()
    return dask.annotate(workers=[worker], allow_other_workers=True)


def _same(block: Any) -> Any:
    return block


def _read(reader: Any, max_extra: float | None) -> Any:
    return held_chunk(reader(), max_extra)


def hold(
    X: da.Array, split_every: int = 8, *, max_extra: float | None = HELD_EXTRA
) -> da.Array:
    """X persisted in memory; on a cluster each chunk on the worker of its pass block.

    Parameters
    ----------
    X : dask.array.Array of shape (m, n)
        Column-chunked, one block along the features.
    split_every : int, default 8
        Fan-in of the tree of the passes that will read X (``FitConfig.split_every``), which
        places their blocks (:func:`block_workers`).
    max_extra : float or None, default :data:`sphdist.core.partials.HELD_EXTRA`
        The most bytes a chunk's row-major form may add to it, as a fraction of the chunk
        (:func:`sphdist.core.partials.held_chunk`); None keeps the chunks as they are read.

    Returns
    -------
    dask.array.Array of shape (m, n)
        ``X.persist()``; with a distributed client, every chunk is kept by the worker that
        :func:`block_workers` gives the pass block holding it (:func:`pass_blocks`), so a
        pass's tasks find their chunks where they run and no chunk crosses between workers.
        A chunk read by a task of its own (a store, :func:`streamed_chunks`) is read by that
        worker: the read task, unplaced, ran wherever the scheduler put it and half of X
        crossed to its worker once (1M documents on 2 workers: 700 MB at the fit's start).
        A chunk read so is kept in its row-major form
        (:class:`~sphdist.core.partials.RowMajor`, within ``max_extra``) in place of the CSC
        chunk, made once by the task that reads it: every pass then renumbers it onto U's
        rows and reads its CSR matrix in O(k) instead of copying it twice (15 % of a pass),
        with the same bits. Such chunks are for the kernels (passes, :func:`embedding`,
        :func:`per_chunk` with :mod:`sphdist.core.kernels`' chunk kernels); computed
        together they give X's CSC chunks back.
    """
    sizes = X.chunks[1]
    blocks = pass_blocks(sizes)
    owners = block_workers(len(blocks), split_every)
    readers = streamed_chunks(X)
    if owners is None:
        if readers is None:  # in memory already: kept as it is, never twice
            return X.persist()
        # each chunk made row-major by the task that reads it, its CSC form let go at once
        return X.map_blocks(held_chunk, max_extra, dtype=X.dtype, meta=X._meta,
                            name=f"sphdist-held-{dask.base.tokenize(X.name, max_extra)}"
                            ).persist()
    with computing():
        xs = X.to_delayed().ravel() if readers is None else readers
    name = f"sphdist-held-{dask.base.tokenize(X.name, max_extra)}"
    held = []
    for b, (start, stop) in enumerate(blocks):
        with _placed(owners[b]):
            if readers is None:
                held += [dask.delayed(_same, pure=True)(xs[j], dask_key_name=(name, 0, j))
                         for j in range(start, stop)]
            else:
                held += [dask.delayed(_read, pure=True)(xs[j], max_extra,
                                                        dask_key_name=(name, 0, j))
                         for j in range(start, stop)]
    # the placed tasks themselves are persisted: a dask array over them would persist its own
    # keys, aliases of theirs that the scheduler places without their annotations
    with computing():
        held = dask.persist(*held)
    # one layer of the chunks' futures, keyed as X's chunks: a concatenation of one array per
    # chunk would make a graph of n_chunks + 1 layers, which every pass's ``to_delayed``
    # culls layer by layer (0.5 s a pass at 1M on the driver)
    futures: dict[Any, Any] = {}
    for part in held:
        futures.update(part.__dask_graph__())
    layer = HighLevelGraph.from_collections(name, futures, dependencies=())
    return da.Array(layer, name, chunks=X.chunks, dtype=X.dtype, meta=X._meta)


@concatenate_lookup.register(RowMajor)
def _concatenate_held(chunks: Sequence[Any], axis: int = 0) -> Any:
    """The chunks of a held X computed together: CSC, as X's (``dask.array.concatenate``).

    One chunk alone (a blockwise kernel's argument, :func:`per_chunk`, :func:`embedding`)
    is handed on as it is.
    """
    if len(chunks) == 1:
        return chunks[0]
    chunks = [c.tocsc() if isinstance(c, RowMajor) else c for c in chunks]
    return (sp.hstack if axis == 1 else sp.vstack)(chunks, format="csc")


def broadcast(A: Any, *, as_delayed: bool = False) -> Any:
    """A small driver array (U) sent once to every worker, for the graph of one pass.

    Parameters
    ----------
    A : ndarray of shape (m, r), or tuple
        Typically U; with ``as_delayed``, also a tuple of arrays (U and its rows), sent as
        one object.
    as_delayed : bool, default False
        Return a :class:`dask.delayed.Delayed` (for graphs of delayed tasks) instead of a
        one-block dask array (for :func:`dask.array.blockwise`).

    Returns
    -------
    dask.array.Array of shape (m, r), or Delayed
        With a distributed client active, backed by ``client.scatter(A)``: one worker receives
        A, every other worker fetches it once from a peer when its first task needs it, and
        every task reads its worker's copy; the returned object holds the future, so A stays
        on the cluster while the graph lives. Without a client, A itself (never hashed: a
        random name).
    """
    client = active_client()
    if client is None:
        if as_delayed:
            return dask.delayed(A, name=f"sphdist-U-{uuid.uuid4().hex}")
        return da.from_array(A, chunks=A.shape, name=False)  # no hashing of m x r floats
    # one copy, fetched by the other workers on demand: replication to every worker
    # (``broadcast=True``) could hang for good when a worker died during it
    # (dask/distributed#5704); a lost copy now fails the tasks that need it, which the fit
    # job's retries catch
    future = dask.delayed(_scatter(client, A))
    return future if as_delayed else da.from_delayed(future, shape=A.shape, dtype=A.dtype)


def _scatter(client: Any, A: Any) -> Any:
    """``client.scatter([A])``: A as one object; a NoWorkerError with no worker in time.

    A worker that dies while A is sent to it fails the scatter with distributed's
    ``CommClosedError``, one of :func:`sphdist.jobs.cluster.worker_losses`.

    distributed's scatter waits for a worker up to its connect timeout and then raises a
    bare ``TimeoutError("No valid workers found")``; the tasks of a cluster without workers
    fail with :class:`distributed.scheduler.NoWorkerError` after the scheduler's
    ``distributed.scheduler.no-workers-timeout`` (:func:`sphdist.jobs.cluster.connect` sets
    it): the same wait, the same error, which the jobs turn into their message.
    """
    from dask.utils import parse_timedelta
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import NoWorkerError

    value = dask.config.get("distributed.scheduler.no-workers-timeout", None)
    timeout = parse_timedelta(value) if value is not None else None
    try:
        # in a list: distributed scatters the items of a tuple one by one
        (future,) = client.scatter([A], hash=False, **({"timeout": timeout} if timeout else {}))
        return future
    except TimeoutError as exc:
        if "No valid workers" not in str(exc):
            raise
        raise NoWorkerError(task="scatter of U", timeout=timeout or 0) from exc
    except OSError as exc:
        # the worker it was sent to died before the scheduler dropped it: distributed tries
        # to connect until its connect timeout, then raises a bare OSError. A worker loss,
        # as a task's would be (the fit restarts from its last checkpoint)
        raise CommClosedError(f"scatter of U to a lost worker: {exc}") from exc


def per_chunk(func: Callable[..., Any], X: da.Array, *args: Any, dtype: Any = object,
              **kwargs: Any) -> da.Array:
    """``func(X_c, *chunk args, **kwargs)`` for every document chunk X_c of X.

    Parameters
    ----------
    func : callable
        A kernel of one chunk, returning a dict (``dtype=object``) or a 1-element ndarray.
    X : dask.array.Array of shape (m, n)
        Column-chunked, one block along the features (index "ij").
    *args
        Arrays and their index strings, alternating, as in :func:`dask.array.blockwise`: "i"
        is the feature axis (one block), "j" the documents (one block per chunk of X, not
        realigned), "k" the components.
    dtype : numpy dtype, default object
        Of the result.
    **kwargs
        Passed to ``func``.

    Returns
    -------
    dask.array.Array of shape (n_chunks,)
        One element per chunk: ``func``'s result.
    """
    return da.blockwise(
        func, "j", X, "ij", *args, concatenate=True, align_arrays=False,
        adjust_chunks={"j": 1}, dtype=dtype, meta=np.empty((0,), dtype=dtype), **kwargs,
    )


def block_bounds(
    n_chunks: int, max_blocks: int, chunk_sizes: Sequence[int] | None = None,
    max_block_documents: int = MAX_BLOCK_DOCUMENTS,
) -> list[tuple[int, int]]:
    """Group consecutive chunks into blocks: at most ``max_blocks``, unless that is too big.

    Parameters
    ----------
    n_chunks : int
        Document chunks of X.
    max_blocks : int
        Upper bound on the number of blocks while every block stays within
        ``max_block_documents`` (:data:`PASS_BLOCKS` for a pass, :func:`pass_blocks`).
    chunk_sizes : sequence of int, optional
        Documents per chunk (``X.chunks[1]``). Given, a block never holds more than
        ``max_block_documents`` documents (a single larger chunk is a block of its own), so
        the chunks one task holds at once stay bounded however large n grows.
    max_block_documents : int, default 32768
        See ``chunk_sizes``.

    Returns
    -------
    list of (int, int)
        ``[start, stop)`` chunk ranges of ``ceil(n_chunks / max_blocks)`` chunks each, cut
        earlier where the document bound requires. A function of the chunk layout only, so
        the summation order of a pass never depends on the cluster.

    Examples
    --------
    >>> block_bounds(5, 2)
    [(0, 3), (3, 5)]
    >>> block_bounds(4, 1, chunk_sizes=[4096] * 4, max_block_documents=8192)
    [(0, 2), (2, 4)]
    >>> block_bounds(3, 1, chunk_sizes=[50_000, 10, 10], max_block_documents=8192)
    [(0, 1), (1, 3)]
    """
    size = max(1, -(-n_chunks // max(1, max_blocks)))
    if chunk_sizes is None:
        return [(a, min(a + size, n_chunks)) for a in range(0, n_chunks, size)]
    bounds, start, docs = [], 0, 0
    for i, n_i in enumerate(chunk_sizes):
        if i > start and (i - start >= size or docs + n_i > max_block_documents):
            bounds.append((start, i))
            start, docs = i, 0
        docs += n_i
    if n_chunks:
        bounds.append((start, n_chunks))
    return bounds


def pass_blocks(
    chunk_sizes: Sequence[int], max_block_documents: int = MAX_BLOCK_DOCUMENTS,
) -> list[tuple[int, int]]:
    """The blocks of a pass: consecutive chunks, each block one task independent of the others.

    Parameters
    ----------
    chunk_sizes : sequence of int
        Documents per chunk (``X.chunks[1]``).
    max_block_documents : int, default 32768
        Most documents of a block (a larger chunk is a block of its own).

    Returns
    -------
    list of (int, int)
        The ``[start, stop)`` chunk ranges of :func:`block_bounds`: at most
        ``max(1, n_chunks // PASS_BLOCKS)`` chunks a block, cut earlier at
        ``max_block_documents``. So a pass offers ``min(n_chunks, PASS_BLOCKS)`` tasks at
        least, and more as the corpus grows (one per 32,768 documents at most), however
        many workers run it; a function of the chunk layout only, so the tree that sums the
        blocks' partials (:func:`tree_sum`) never depends on what runs it.

    Examples
    --------
    >>> pass_blocks([4096] * 5)  # a small corpus: a block a chunk
    [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    >>> len(pass_blocks([4096] * 245))  # 1M documents: 7 chunks a block
    35
    >>> len(pass_blocks([4096] * 2442))  # 10M documents: 8 chunks (32,768 documents) a block
    306
    >>> pass_blocks([10, 50_000, 10], max_block_documents=8192)
    [(0, 1), (1, 2), (2, 3)]
    """
    n_chunks = len(chunk_sizes)
    per_block = max(1, n_chunks // PASS_BLOCKS)
    return block_bounds(n_chunks, -(-n_chunks // per_block), chunk_sizes, max_block_documents)


def partials_held(n_blocks: int, split_every: int, threads: int) -> int:
    """Most (k, r) partials a pass holds at once, the running tasks' accumulators included.

    Parameters
    ----------
    n_blocks : int
        B, the blocks of the pass (:func:`pass_blocks`).
    split_every : int
        s, the fan-in of the tree that sums them (:func:`tree_sum`).
    threads : int
        t, the tasks running at once (threads of the process, or of a worker).

    Returns
    -------
    int
        ``L + 2 t + 1`` with ``L = ceil(log_s B)`` the levels of the tree: one running sum
        per level (every node folds its inputs in as they arrive, :func:`tree_sum`), each
        running task its accumulator, as many finished blocks waiting for the fold of the
        block before them, and the new sum a fold builds. The fan-in no longer multiplies
        the depth (the earlier tree held up to s - 1 finished inputs per level, ``(s - 1) L
        + 2 t + 1``: 19 at 1M documents, 26 at 10M), so the partials held grow by one per
        level, a factor s of blocks: 7 at 1M documents, 8 at 10M on two threads. An
        estimate of dask.order's schedule (blocks in tree order, each fold as soon as its
        inputs exist) where a block takes longer than a fold (a block's products against
        an addition of two partials), checked against an instrumented count on the
        threaded scheduler (``tests/core/test_graph.py``); on a cluster, the worst
        placement (every partial on one worker).

    Examples
    --------
    >>> partials_held(35, 8, 2)  # 1M documents on two threads: 2 levels
    7
    >>> partials_held(306, 8, 2)  # 10M documents: 3 levels
    8
    """
    levels, width = 0, max(int(n_blocks), 1)
    while width > 1:
        width = -(-width // max(int(split_every), 2))
        levels += 1
    return levels + 2 * max(int(threads), 1) + 1


def tree_levels(n_parts: int, split_every: int) -> list[list[list[int]]]:
    """The shape of :func:`tree_sum`: per level, the groups of consecutive inputs of each node.

    Parameters
    ----------
    n_parts : int
        Leaves of the tree (>= 1).
    split_every : int
        Fan-in, >= 2.

    Returns
    -------
    list of list of list of int
        Level by level (leaves first), for each node the indices of its inputs in the level
        below. The shape of ``dask.array.reduction(..., split_every=s)``: ``max(1,
        ceil(log_s n))`` levels, each grouping ``s`` consecutive inputs, the last one a
        single node; computed with the same ``math.log`` so the shape, and so every bit of
        the sum, is the one the earlier ``da.reduction`` tree gave.

    Examples
    --------
    >>> tree_levels(5, 2)
    [[[0, 1], [2, 3], [4]], [[0, 1], [2]], [[0, 1]]]
    >>> [len(level) for level in tree_levels(306, 8)]  # 10M documents: 3 levels
    [39, 5, 1]
    """
    s = max(int(split_every), 2)
    depth = max(1, math.ceil(math.log(n_parts, s))) if n_parts > 1 else 1
    levels, width = [], int(n_parts)
    for i in range(depth):
        groups = [list(range(a, min(a + s, width))) for a in range(0, width, s)]
        if i == depth - 1 and len(groups) > 1:  # as dask: the last level reduces to one
            raise AssertionError("the tree's last level has more than one node")
        levels.append(groups)
        width = len(groups)
    return levels


def tree_sum(parts: da.Array, split_every: int) -> da.Array:
    """Sum per-chunk (or per-block) result dicts in a fixed tree of fan-in ``split_every``.

    Parameters
    ----------
    parts : dask.array.Array of shape (n_parts,), object
        Result dicts of a kernel (:func:`per_chunk`, :func:`block_pass`).
    split_every : int
        Fan-in of the tree, >= 2.

    Returns
    -------
    dask.array.Array of shape (), object
        The dict of summed partials: consecutive groups of ``split_every`` parts are summed
        in list order, level by level (:func:`tree_levels`), so the result depends on the
        chunk layout only.

    Notes
    -----
    Every node of the tree is a chain of tasks that folds its inputs in one at a time
    (:func:`sphdist.core.partials.partials_fold`), bitwise the sum of the whole group at
    once (a left fold too). A finished input is added as soon as the inputs before it are,
    and freed, so a node holds one running sum rather than up to ``split_every - 1``
    finished inputs waiting for the last: the partials alive at once are one sum per level
    plus the tasks running and the inputs finished ahead of their turn
    (:func:`partials_held`), and no longer grow by ``split_every - 1`` with every level.
    """
    with computing():
        level = list(parts.to_delayed().ravel())
    return _tree(level, split_every, dask.base.tokenize(parts.name, split_every))


def _tree(level: list[Any], split_every: int, token: str,
          owners: Sequence[str | None] | None = None) -> da.Array:
    """:func:`tree_sum` of Delayed parts, its tasks keyed ``("sphdist-sum-<token>", ...)``.

    ``owners``, a worker per part (:func:`block_workers`), places each fold on the worker of
    the input it adds, and a node's sum where its last input was added: a running sum crosses
    to another worker only where two consecutive inputs have different owners.
    """
    fold = dask.delayed(partials_fold, pure=True)
    owners = list(owners) if owners is not None else [None] * len(level)
    for depth, groups in enumerate(tree_levels(len(level), split_every)):
        nodes, placed = [], []
        for g, group in enumerate(groups):
            total = None
            for j, i in enumerate(group):
                with _placed(owners[i]):
                    total = fold(total, level[i],
                                 dask_key_name=(f"sphdist-sum-{token}", depth, g, j))
            nodes.append(total)
            placed.append(owners[group[-1]])
        level, owners = nodes, placed
    return da.from_delayed(level[0], shape=(), dtype=object, meta=np.empty((), dtype=object))


def pairs_sum(func: Callable[[Any, Any], np.ndarray], X: da.Array) -> float:
    """``sum_{c, d} func(X_c, X_d)`` over all ordered pairs of document chunks of X.

    Parameters
    ----------
    func : callable
        Maps two chunks (m, n_c) and (m, n_d) to a (1, 1) float64 ndarray.
    X : dask.array.Array of shape (m, n)
        Column-chunked, one block along the features.

    Returns
    -------
    float
        The sum of the ``n_chunks^2`` values (dask's ``sum``).
    """
    pairs = da.blockwise(
        func, "cd", X, "ic", X, "id", concatenate=True, adjust_chunks={"c": 1, "d": 1},
        dtype=np.float64, meta=np.empty((0, 0)),
    )
    with computing():
        return float(pairs.sum().compute())


def sum_parts(parts: da.Array, split_every: int) -> dict[str, Any]:
    """The dict of summed partials of :func:`tree_sum`, computed.

    Parameters
    ----------
    parts : dask.array.Array of shape (n_parts,), object
        Result dicts of a kernel (:func:`per_chunk`).
    split_every : int
        Fan-in of the tree.

    Returns
    -------
    dict
        :func:`sphdist.core.partials.partials_agg` of all parts, in the tree's fixed order.
    """
    with computing():
        (total,) = dask.compute(tree_sum(parts, split_every))
    return total


def _block_task(n_chunks: int, U_rows: tuple[Any, np.ndarray | None], *chunks: Any,
                **options: Any) -> dict[str, Any]:
    """:func:`kernels.pass_onto` of a block's chunks (then their ``V_k``, if any), passed flat.

    Chunks given as :class:`_Read` (a streamed X, :func:`streamed_chunks`) are read one at a
    time as the kernel takes them.
    """
    U, rows = U_rows
    X_blocks: Any = chunks[:n_chunks]
    V_prev = list(chunks[n_chunks:]) if len(chunks) > n_chunks else None
    if all(isinstance(chunk, _Read) for chunk in X_blocks):
        X_blocks = (read() for read in X_blocks)
    else:
        X_blocks = list(X_blocks)
    return kernels.pass_onto(X_blocks, U, V_prev, rows=rows, **options)


def _take(part: dict[str, Any], key: str, index: int | None = None) -> np.ndarray:
    return part[key] if index is None else part[key][index]


class _Read:
    """A chunk of a streamed X, read by the task that takes it: the chunk's own task of X's graph.

    Picklable (the task spec and its key), so a worker of a cluster runs it as the threads do.
    """

    __slots__ = ("key", "task")

    def __init__(self, key: Any, task: Any) -> None:
        self.key, self.task = key, task

    def __call__(self) -> Any:
        return dask.local.get_sync({self.key: self.task}, self.key)


def streamed_chunks(X: da.Array) -> list[_Read] | None:
    """Readers of X's chunks when each is read by a task of its own, else None.

    Parameters
    ----------
    X : dask.array.Array of shape (m, n)
        Column-chunked, one block along the features.

    Returns
    -------
    list of callable, or None
        One zero-argument callable per document chunk, which runs the chunk's task (a read
        from the store, :meth:`sphdist.io.corpus.Corpus.to_dask`) where it is called, when
        every chunk of X is a task with no dependencies; None otherwise (X persisted: values
        or futures, already in memory; or chunks computed from other tasks).

    Notes
    -----
    A pass whose block task reads its chunks itself (:func:`pass_graph`) holds a chunk only
    while the task needs it: as task inputs, the block's chunks would all be read before the
    task starts, kept by the scheduler until it ends, and read ahead for the next blocks by
    free threads, so the chunks alive at once grew with the chunks of a block (1 at 100k
    documents, 8 at 10M).
    """
    from dask._task_spec import Task

    if X.ndim != 2 or X.numblocks[0] != 1:
        return None
    graph = X.__dask_graph__()
    readers = []
    for key in X.__dask_keys__()[0]:
        node = graph.get(key)
        if not isinstance(node, Task) or node.dependencies:
            return None
        readers.append(_Read(key, node))
    return readers


def pass_graph(
    X: da.Array, U: np.ndarray | RowSparse, V_prev: da.Array | None, *, lam: float,
    config: FitConfig, keep_V: bool = True,
) -> tuple[da.Array | None, da.Array]:
    """The graph of one pass, not computed: a task per block, their partials summed in a tree.

    Parameters
    ----------
    X, U, V_prev, lam, config, keep_V
        As for :func:`block_pass`.

    Returns
    -------
    V : dask.array.Array of shape (r, n), ``config.dtype``, or None
        With ``keep_V``, the new V chunked like X, read from the block tasks' results.
    total : dask.array.Array of shape (), object
        The dict of the summed partials (:func:`tree_sum` of fan-in ``config.split_every``
        over the block tasks, in block order).

    Notes
    -----
    One task per block of :func:`pass_blocks`, keyed ``("sphdist-pass-<token>", b)`` (the
    name the dashboard shows), each reading its chunks (and their ``V_k``), U and nothing
    else: no block task depends on another, so every block can run at once. On a streamed X
    (:func:`streamed_chunks`) the block task reads its chunks itself, one at a time
    (:func:`kernels.pass_block` takes an iterator): no read task, no chunk held by the
    scheduler or read ahead, and the chunks alive at once bounded by the threads, not by the
    chunks of a block; held chunks (X in memory) are the task's inputs. The tree's
    shape depends on the number of blocks and the fan-in alone; the blocks' partials are
    summed in it as they arrive, so the partials held at once are bounded by the tasks
    running and the tree's fan-in (dask.order runs a combine as soon as its inputs exist),
    not by n.
    """
    dtype = config.dtype
    rows = U.rows if isinstance(U, RowSparse) else None
    r = U.shape[1]
    name = f"sphdist-pass-{uuid.uuid4().hex}"
    values = U.values if isinstance(U, RowSparse) else U
    # U with its rows (the features they stand for), one object: one scatter a pass
    U_d = broadcast((np.asarray(values, dtype=dtype), rows), as_delayed=True)
    if V_prev is not None and V_prev.dtype != dtype:
        # V_k in the compute dtype, as the uninterrupted fit carries it: a checkpoint stores
        # it as float64 (exactly the float32 values of a float32 fit), and a float64 V_k
        # would promote the V-step's q = 2 U^T x + (lam - 2) v to float64 (issue 31 item 8)
        V_prev = V_prev.astype(dtype)
    readers = streamed_chunks(X)
    with computing():
        xs = X.to_delayed().ravel() if readers is None else readers
        vs = None if V_prev is None else V_prev.to_delayed().ravel()
    sizes = X.chunks[1]
    meta = np.empty((0, 0), dtype=dtype)
    leaves: list[Any] = []
    V_chunks: dict[Any, Any] = {}
    blocks = pass_blocks(sizes)
    owners = block_workers(len(blocks), config.split_every) or [None] * len(blocks)
    task = dask.delayed(_block_task, pure=False)
    for b, (start, stop) in enumerate(blocks):
        with _placed(owners[b]):
            # the chunks as arguments of their own: dask.delayed takes a Delayed argument by
            # its key, but optimises and culls the graph of every Delayed inside a list (0.4 s
            # a pass on a LocalCluster at 1M, serial on the driver, measured on 16 cores)
            part = task(
                stop - start, U_d, *xs[start:stop],
                *(() if vs is None else vs[start:stop]), lam=lam, dtype=dtype,
                partials=config.partials, keep_V=keep_V, device=config.device,
                dask_key_name=(name, b),
            )
        if keep_V:  # chunk j of V, taken from its block's result
            V_chunks.update({(f"{name}-V", 0, j): (_take, (name, b), "V", j - start)
                             for j in range(start, stop)})
        leaves.append(part)
    # the tree over the block tasks themselves: a dask array between them (and its
    # to_delayed, which collapses the graph) would drop their placement (block_workers)
    total = _tree(leaves, config.split_every, dask.base.tokenize(name, config.split_every),
                  owners)
    V = None
    if keep_V:
        # one layer of n_chunks tasks: an array per chunk, concatenated, cost the driver 0.14 s
        # a pass at 1M, and its n_chunks + 1 layers more at every compute
        layer = HighLevelGraph.from_collections(f"{name}-V", V_chunks, dependencies=leaves)
        V = da.Array(layer, f"{name}-V", chunks=((r,), sizes), dtype=dtype, meta=meta)
    return V, total


def block_pass(
    X: da.Array, U: np.ndarray | RowSparse, V_prev: da.Array | None, *, lam: float,
    config: FitConfig, keep_V: bool = True, spill: Spill | None = None,
) -> tuple[da.Array | None, dict[str, Any]]:
    """One read of every chunk: :func:`sphdist.core.kernels.pass_block` on every block at once.

    Parameters
    ----------
    X : dask.array.Array of shape (m, n), float64
        Column-chunked, one block along the features.
    U : ndarray or RowSparse of shape (m, r), float64
        Its (stored) rows are broadcast to the workers in ``config.dtype``
        (:func:`broadcast`); a RowSparse runs the pass on its rows alone (the chunks
        renumbered onto them, :func:`kernels.pass_onto`).
    V_prev : dask.array.Array of shape (r, n), or None
        Chunked like the documents of X; persisted, or lazy (read chunk by chunk by the
        tasks that need it).
    lam : float
        Proximal parameter of Eq. 3.12 (:func:`kernels.pass_block`).
    config : FitConfig
        The fit's parameters: ``dtype`` and ``partials`` (:func:`kernels.pass_block`) and
        ``split_every`` (fan-in of the tree that sums the blocks' partials,
        :func:`tree_sum`).
    keep_V : bool, default True
        Keep the new V (:func:`kernels.pass_block`).
    spill : callable, optional
        With ``keep_V``, where the new V goes instead of worker memory: called with the lazy
        V, it returns the store to compute with the pass (``dask.array.store(...,
        compute=False)``) and the lazy array that reads V back, chunk by chunk
        (:class:`sphdist.io.model.ScratchV`).

    Returns
    -------
    V : dask.array.Array of shape (r, n), ``dtype``, or None
        With ``keep_V``, the new V chunked like X: persisted on the workers, or the reader
        ``spill`` returned; else None (the tasks drop it).
    total : dict
        The summed partials (:func:`kernels.pass_block`), with ``"XVt"`` dense and aligned:
        an (m, r) float64 ndarray, or a RowSparse on U's rows whose values are one, and
        ``"VVt"`` an aligned (r, r) ndarray; ``"occurs"`` is the mask of U's rows that occur.

    Notes
    -----
    The graph is :func:`pass_graph`: a task per block of :func:`pass_blocks`, none waiting
    for another, summed in a fixed tree, so the bits depend on the chunk layout and
    ``split_every`` alone (never on the scheduler, the workers, the threads or task order).
    """
    V, total = pass_graph(X, U, V_prev, lam=lam, config=config, keep_V=keep_V)
    rows = U.rows if isinstance(U, RowSparse) else None
    with computing():
        if V is not None and spill is None:
            V, total = dask.persist(V, total)
            (total,) = dask.compute(total)
        elif V is not None:
            stored, V = spill(V)
            _, total = dask.compute(stored, total)
        else:
            (total,) = dask.compute(total)
    # aligned copies: distributed may hand back an (m, r) array at an odd address, and NumPy's
    # matmul skips BLAS for unaligned operands, which changed the U-step's rounding (and so
    # every later bit) between a cluster and the local schedulers
    total["XVt"] = np.require(densify(total["XVt"]), np.float64, ["C", "A"])
    total["VVt"] = np.require(total["VVt"], np.float64, ["C", "A"])
    if rows is not None:
        total["XVt"] = RowSparse(rows, total["XVt"], U.shape)
    return V, total


def occurring_features(X: da.Array, split_every: int) -> np.ndarray:
    """The (m,) bool mask of the features with a stored entry in X: one scan of the indices.

    Parameters
    ----------
    X : dask.array.Array of shape (m, n)
        Column-chunked, one block along the features.
    split_every : int
        Fan-in of :func:`tree_sum`.

    Returns
    -------
    ndarray of shape (m,), bool
        OR over the chunks of :func:`sphdist.core.kernels.chunk_features`; all True when a
        chunk is not CSC. Reads every chunk, computes no product.
    """
    return sum_parts(per_chunk(kernels.chunk_features, X), split_every)["occurs"]


def embedding(
    X: da.Array, U: np.ndarray | RowSparse, *, dtype: Any, device: str = "cpu"
) -> da.Array:
    """``V = normalise(U^T X)`` chunk by chunk, lazily (:func:`kernels.embed_block`).

    Parameters
    ----------
    X : dask.array.Array of shape (m, n), float64
        Column-chunked, one block along the features.
    U : ndarray or RowSparse of shape (m, r)
        Its rows broadcast once (:func:`broadcast`) when the result is computed; a
        RowSparse's rows are the features the chunks are renumbered onto.
    dtype : numpy.float64 or numpy.float32
        The fit's compute dtype.
    device : {"cpu", "cuda"}, default "cpu"
        Where each task computes its chunk (:func:`kernels.embed_block`); V lands on the host.

    Returns
    -------
    dask.array.Array of shape (r, n), ``dtype``
        Chunked like the documents of X and not computed: storing it (``dask.array.store``)
        makes each task read one chunk of X and write its columns, so V is never gathered.
    """
    dtype = np.dtype(dtype)
    U_d = broadcast(np.asarray(U.values if isinstance(U, RowSparse) else U, dtype=dtype))
    with computing():
        return da.blockwise(
            functools.partial(kernels.embed_block, dtype=dtype, device=device), "kj", X, "ij",
            U_d, "ik",
            concatenate=True,
            align_arrays=False, dtype=dtype, meta=np.empty((0, 0), dtype=dtype),
            rows=U.rows if isinstance(U, RowSparse) else None,
            name=f"sphdist-embedding-{uuid.uuid4().hex}",
        )


def chunk_rows(parts: da.Array, key: str, chunks: tuple[int, ...], r: int) -> da.Array:
    """The (n, r) float64 array of the per-chunk rows ``part[key]`` of :func:`per_chunk` dicts.

    ``chunks`` are the documents per chunk (``X.chunks[1]``); the result is chunked like them.
    """
    return da.blockwise(
        _take, "jk", parts, "j", key=key, new_axes={"k": r}, adjust_chunks={"j": chunks},
        dtype=np.float64, meta=np.empty((0, 0), dtype=np.float64),
    )


def persist_rows_and_sum(
    parts: da.Array, X: da.Array, r: int, keys: Sequence[str], split_every: int,
) -> tuple[Any, ...]:
    """Persist the per-chunk rows ``keys`` and compute the summed partials, in one graph.

    Parameters
    ----------
    parts : dask.array.Array of shape (n_chunks,), object
        Result dicts of :func:`per_chunk` over X.
    X : dask.array.Array of shape (m, n)
        The input the parts were computed from (for its document chunks).
    r : int
        Columns of the rows.
    keys : sequence of str
        Per-chunk arrays of shape (n_c, r) in the dicts.
    split_every : int
        Fan-in of :func:`tree_sum`.

    Returns
    -------
    tuple
        One persisted (n, r) dask array per key, then the dict of summed partials. Every
        chunk is read once.
    """
    arrays = [chunk_rows(parts, key, X.chunks[1], r) for key in keys]
    with computing():
        *arrays, total = dask.persist(*arrays, tree_sum(parts, split_every))
        (total,) = dask.compute(total)
    return (*arrays, total)


def map_rows(func: Callable[[Any, np.ndarray], np.ndarray], X: Any, U: np.ndarray) -> Any:
    """``func(X_block, U)`` on the row blocks of a (n_samples, n_features) input (transform).

    Parameters
    ----------
    func : callable
        Maps a (n_b, m) block and U (m, r) to a (n_b, r) float64 ndarray.
    X : {ndarray, sparse matrix, dask.array.Array} of shape (n_samples, n_features)
        scikit-learn orientation.
    U : ndarray of shape (m, r), float64

    Returns
    -------
    ndarray or dask.array.Array of shape (n_samples, r), float64
        Dask input stays lazy and keeps its row chunks (one block along the features).
    """
    if isinstance(X, da.Array):
        return X.rechunk({1: -1}).map_blocks(
            func, U, chunks=(X.chunks[0], (U.shape[1],)), dtype=np.float64,
            meta=np.empty((0, 0)),
        )
    return func(X, U)


class _BlocksDone(Callback):
    """A local-scheduler callback that counts finished output blocks on a progress counter."""

    def __init__(self, keys: set[Any], bar: Any):
        super().__init__()
        self._keys, self._bar = keys, bar

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        if key in self._keys:
            self._bar.update(1)


def compute(result: da.Array, desc: str, mode: bool | str = False) -> np.ndarray:
    """Compute a 1-D dask array block by block, counting finished blocks.

    Parameters
    ----------
    result : dask.array.Array of shape (n,)
        Typically one small block per document chunk (:func:`per_chunk`).
    desc : str
        What is counted, shown first ("transform").
    mode : {True, False, "log"}, default False
        The progress display (:func:`sphdist._progress.progress`, unit "chunk").

    Returns
    -------
    ndarray of shape (n,)
        The blocks, concatenated in order.

    Notes
    -----
    On a distributed client the blocks are submitted at once and counted as they complete
    (``distributed.as_completed``); on a local scheduler a dask callback counts them.
    """
    with computing():
        blocks = list(result.to_delayed().ravel())
    client = active_client()
    with progress(len(blocks), desc, unit="chunk", mode=mode) as bar, computing():
        if client is None:
            with _BlocksDone({b.key for b in blocks}, bar):
                values = dask.compute(*blocks)
        else:
            from distributed import as_completed

            futures = client.compute(blocks)
            for _ in as_completed(futures):
                bar.update(1)
            values = [f.result() for f in futures]
    return np.concatenate([np.ravel(v) for v in values])


@functools.cache
def _threadpools() -> ThreadpoolController:
    """The thread pools of the libraries loaded (NumPy's BLAS), found once: 1 ms a look."""
    return ThreadpoolController()


def _knn_block(Q: np.ndarray, V: np.ndarray, k: int, q_start: int, d_start: int,
               skip: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    exclude = np.arange(q_start, q_start + Q.shape[1], dtype=np.int64)
    # one thread per task: the scheduler runs a task per core (BLAS threads on top of them
    # only wait for each other: 1.3 times the CPU seconds at 30,000 documents)
    with _threadpools().limit(limits=1, user_api="blas"):
        return top_k_chunk(Q, V, k, offset=d_start, exclude=exclude, skip=skip)


def _knn_merge(k: int, *parts: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    out = parts[0]
    for part in parts[1:]:
        out = top_k_merge(out, part, k)
    return out


def _knn_search(search: Any, Q: np.ndarray, k: int, q_start: int) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest others of the columns of Q by ``search(Q^T, k + 1)``, itself dropped."""
    # one thread per task, faiss' OpenMP included: two OpenMP teams on two cores spin while
    # waiting for each other (3 times the CPU seconds of one thread, 30,000 documents)
    with threadpool_limits(limits=1):
        idx, cos = search(np.ascontiguousarray(Q.T), k + 1)
    idx, cos = np.asarray(idx, dtype=np.int64), np.asarray(cos, dtype=np.float64)
    own = np.arange(q_start, q_start + Q.shape[1], dtype=np.int64)[:, None]
    cos = np.where((idx == own) | (idx < 0), -np.inf, cos)
    idx = np.where(np.isfinite(cos), idx, -1)
    empty = (np.full((Q.shape[1], 0), -1, dtype=np.int64), np.zeros((Q.shape[1], 0)))
    return top_k_merge((idx, cos), empty, k)


def _knn_part(pair: tuple[np.ndarray, np.ndarray], which: int) -> np.ndarray:
    return pair[which]


def knn_graph(
    V: da.Array, k: int, *, search: Any = None, skip: np.ndarray | None = None,
    query_chunk: int = 2048, split_every: int = 8,
) -> tuple[da.Array, da.Array]:
    """Each document's k nearest other documents, chunk by chunk, as two lazy (n, k) arrays.

    Parameters
    ----------
    V : dask.array.Array of shape (r, n), float64
        Unit columns, chunked by documents (one block along r).
    k : int
        Neighbours per document, >= 1.
    search : object, optional
        An approximate search, ``search(Q, k) -> (index (n_q, k) int64, cosine (n_q, k))`` on
        queries as rows (``Q`` of shape (n_q, r), float64): typically
        :meth:`sphdist.methods.neighbors.NeighborIndex.search`. Sent once to the workers
        (:func:`broadcast`). None: the exact graph, every query chunk scored against every
        document chunk with :func:`sphdist.core.neighbors.top_k_chunk` and merged in a tree
        of fan-in ``split_every`` (:func:`sphdist.core.neighbors.top_k_merge`).
    skip : ndarray of shape (n,), bool, optional
        Documents never returned as a neighbour (exact graph only; an index leaves them out
        when it is built).
    query_chunk : int, default 2048
        Queries per task.
    split_every : int, default 8
        Fan-in of the merge tree (exact graph).

    Returns
    -------
    index : dask.array.Array of shape (n, k), int64
        Row i: the indices of document i's k nearest other documents (-1 where there are fewer).
    cosine : dask.array.Array of shape (n, k), float64
        Their cosines, each row decreasing (ties by increasing index in the exact graph).

    Notes
    -----
    Never an (n, n) matrix: a task holds one (query_chunk, document chunk) block of cosines,
    ``8 * query_chunk * chunk`` bytes. The exact graph costs ``n^2 r`` multiply-adds.
    """
    r, n = V.shape
    Vq = V.rechunk((r, query_chunk))
    q_starts = np.concatenate([[0], np.cumsum(Vq.chunks[1])[:-1]]).astype(int)
    d_starts = np.concatenate([[0], np.cumsum(V.chunks[1])[:-1]]).astype(int)
    queries = Vq.to_delayed().ravel()
    docs = V.to_delayed().ravel()
    shared = None if search is None else broadcast(search, as_delayed=True)
    idx_blocks, cos_blocks = [], []
    for Q, qs, nq in zip(queries, q_starts, Vq.chunks[1], strict=True):
        if search is not None:
            pair = dask.delayed(_knn_search, pure=True)(shared, Q, k, int(qs))
        else:
            parts = [
                dask.delayed(_knn_block, pure=True)(
                    Q, D, k, int(qs), int(ds),
                    None if skip is None else skip[ds:ds + nd],
                )
                for D, ds, nd in zip(docs, d_starts, V.chunks[1], strict=True)
            ]
            while len(parts) > 1:
                parts = [dask.delayed(_knn_merge, pure=True)(k, *parts[i:i + split_every])
                         for i in range(0, len(parts), split_every)]
            pair = parts[0]
        idx_blocks.append(da.from_delayed(dask.delayed(_knn_part)(pair, 0), (nq, k), np.int64))
        cos_blocks.append(da.from_delayed(dask.delayed(_knn_part)(pair, 1), (nq, k),
                                          np.float64))
    return da.concatenate(idx_blocks, axis=0), da.concatenate(cos_blocks, axis=0)
