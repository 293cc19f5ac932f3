"""What a pass moves between processes (issue 40): counted from distributed's transfer logs.

A pass places the blocks of a subtree of its summation tree on one worker and folds them there
(graph.tree_owners, graph.block_workers), so about one partial per worker crosses; U goes to
one worker and is fetched once by each other, and the total comes back to the driver in one
hop. These tests count transfers, never seconds, and check the bits against the threads.
"""

import dask
import numpy as np
import pytest

from sphdist.core import graph
from sphdist.core.params import FitConfig

from ..reference import chunked, random_corpus

M, R, CHUNK, N_CHUNKS = 300, 6, 20, 16


def _partial_sends(owners, split_every):
    """Partials a pass sends from one worker to another or to the driver, by the tree's rule.

    Each fold runs where the input it adds is and a node's sum stays where its last input was
    added (graph._tree); a chain of folds whose next input is elsewhere sends its running sum
    there, and the total goes back to the driver: one send more.
    """
    sends, placed = 1, list(owners)
    for groups in graph.tree_levels(len(owners), split_every):
        for group in groups:
            sends += sum(placed[a] != placed[b] for a, b in zip(group, group[1:], strict=False))
        placed = [placed[group[-1]] for group in groups]
    return sends


@pytest.mark.parametrize(("n_blocks", "weights", "floor", "contiguous"), [
    (35, [4] * 4, 4, 7),    # 1M documents on 4 workers x 4 threads
    (35, [1] * 16, 16, 19),  # 1M documents on 16 one-thread workers
    (306, [1] * 16, 27, 33),  # 10M documents: 39 nodes of 8 below 16 runs, some must split
])
def test_runs_on_the_tree_send_one_partial_per_worker_where_the_rounds_allow(
        n_blocks, weights, floor, contiguous):
    owners = graph.tree_owners(n_blocks, weights, 8)
    proportional = graph.contiguous_owners(n_blocks, weights)
    assert _partial_sends(proportional, 8) == contiguous
    assert _partial_sends(owners, 8) == floor
    # consecutive runs in owner order, none taking more rounds of its threads than before
    assert owners == sorted(owners)

    def rounds(o):
        return max(-(-o.count(j) // w) for j, w in enumerate(weights))

    assert rounds(owners) == rounds(proportional)


def test_a_cut_that_would_cost_a_round_stays_where_the_threads_put_it():
    # 35 blocks on 2 one-thread workers: 16 | 19 would be on the tree, but 19 rounds > 18
    assert graph.tree_owners(35, [1, 1], 8) == graph.contiguous_owners(35, [1, 1])
    assert _partial_sends(graph.tree_owners(35, [1, 1], 8), 8) == 3


def _clear(dask_worker):
    dask_worker.transfer_incoming_log.clear()
    dask_worker.transfer_outgoing_log.clear()


def _transfers(dask_worker):
    return ([(e["who"], k, n) for e in dask_worker.transfer_incoming_log
             for k, n in e["keys"].items()],
            [(e["who"], k, n) for e in dask_worker.transfer_outgoing_log
             for k, n in e["keys"].items()])


def _name(key):
    return str(key[0] if isinstance(key, tuple) else key)


@pytest.mark.cluster
@pytest.mark.slow
def test_a_pass_on_the_embedded_cluster_sends_one_partial_per_worker_and_keeps_the_bits():
    """16 blocks, a tree of 2 nodes of 8 below its top, 2 one-thread worker processes (the
    user's ``--n-workers 2 --threads-per-worker 1``): each worker's 8 blocks fold into one
    partial; one crosses to the other worker, whose total comes back to the driver."""
    from distributed import futures_of, wait

    from sphdist.jobs.cluster import connect

    X = random_corpus(M, CHUNK * N_CHUNKS, density=0.2, seed=7, n_empty=0)
    Xc = chunked(X, [CHUNK] * N_CHUNKS)
    U = np.linalg.qr(np.random.default_rng(3).standard_normal((M, R)))[0]
    config = FitConfig.build(n_components=R, split_every=8, partials="dense")
    with dask.config.set(scheduler="threads"):
        _, threads = graph.block_pass(Xc, U, None, lam=2.0, config=config, keep_V=False)
    partial = M * R * 8  # a dense (m, r) float64 partial, in bytes
    with connect(n_workers=2, threads_per_worker=1, memory_limit="1GiB") as client:
        # the scheduler moves no task of a pass on its own, and the client talks to workers
        assert not client.run_on_scheduler(
            lambda dask_scheduler: "stealing" in dask_scheduler.extensions)
        workers = set(client.nthreads())
        held = graph.hold(Xc, config.split_every)
        wait(futures_of(held))
        client.run(_clear)
        owners = graph.block_workers(N_CHUNKS, config.split_every)
        _, total = graph.block_pass(held, U, None, lam=2.0, config=config, keep_V=False)
        logs = client.run(_transfers)
        scheduler = client.scheduler.address
    assert owners == sorted(owners) and owners.count(owners[0]) == 8
    incoming = [(who, key, n) for (received, _) in logs.values() for who, key, n in received]
    sent_back = [(who, key, n) for (_, sent) in logs.values() for who, key, n in sent
                 if who not in workers]
    partials = [key for _, key, n in incoming if _name(key).startswith(("sphdist-sum-",
                                                                        "sphdist-pass-"))]
    U_fetched = [key for _, key, n in incoming if _name(key).startswith("tuple-")]
    assert len(partials) == 1, incoming  # worker 0's subtree sum, for the top level's fold
    assert len(U_fetched) == 1, incoming  # U: scattered to one worker, fetched by the other
    assert len(incoming) == 2, incoming  # no chunk of X, nothing else
    assert len(sent_back) == 1 and sent_back[0][2] >= partial, sent_back  # the total, once
    assert sent_back[0][0] != scheduler  # to the client itself, not relayed by the scheduler
    for key in ("XVt", "VVt"):
        np.testing.assert_array_equal(
            np.ascontiguousarray(total[key]).view(np.int64),
            np.ascontiguousarray(threads[key]).view(np.int64))


def test_a_held_corpus_is_read_by_the_worker_of_each_block(tmp_path):
    """X held from a store: each chunk is read by the worker its block is placed on, so no
    chunk crosses between workers when X is held (the read tasks ran anywhere before)."""
    from distributed import Client, LocalCluster, futures_of, wait

    from sphdist.io.corpus import open_corpus
    from sphdist.jobs import run
    from sphdist.jobs.synth import SynthRequest

    run(SynthRequest(output=tmp_path / "c.zarr", n_docs=320, n_topics=3, seed=1,
                     format="corpus", n_features=2**10, chunk_size=20))
    X = open_corpus(tmp_path / "c.zarr").to_dask()
    assert graph.streamed_chunks(X) is not None and X.numblocks[1] == 16
    with dask.config.set({"distributed.scheduler.work-stealing": False}), LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster, Client(cluster) as client:
        owners = graph.block_workers(16)
        held = graph.hold(X)
        wait(futures_of(held))
        who = {key[-1]: tuple(w) for key, w in client.who_has(futures_of(held)).items()}
        logs = client.run(_transfers)
        local = held.compute()
    assert who == {j: (owners[j],) for j in range(16)}
    assert [t for received, _ in logs.values() for t in received] == []
    np.testing.assert_array_equal(local.toarray(), X.compute().toarray())
