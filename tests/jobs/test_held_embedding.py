"""The final model's V is the last pass's, held beside a held X (issue 29 item 5): a default
fit makes no pass over X after its last iteration, and writes bitwise the model of the fit
that recomputes V in one more pass; on threads, on a LocalCluster, resumed, and never with X
streamed or when X and V together exceed the memory budget."""

import numpy as np
import pytest

from sphdist.core import graph
from sphdist.io.corpus import open_input
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.jobs import run
from sphdist.jobs.cluster import connect, stored_nbytes
from sphdist.jobs.fit import FitRequest

from ..reference import random_corpus

KW = dict(n_components=3, max_iter=5, tol=0, random_state=0)
M, N = 40, 90


@pytest.fixture
def corpus(tmp_path):
    X = random_corpus(M, N, seed=2)
    with CorpusWriter(tmp_path / "corpus.zarr", n_features=M,
                      feature_scheme={"type": "hashing"}) as w:
        for a, b in [(0, 30), (30, 60), (60, 90)]:
            w.write_chunk(X[:, a:b], [str(j) for j in range(a, b)])
        return w.commit(idf=np.ones(M))


@pytest.fixture
def passes(monkeypatch):
    """Counts of the passes over X the driver starts: the fit's, and the embedding's."""
    counts = {"fit": 0, "embedding": 0}

    def counted(name, real):
        def call(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(graph, "block_pass", counted("fit", graph.block_pass))
    monkeypatch.setattr(graph, "embedding", counted("embedding", graph.embedding))
    return counts


def _fit(corpus, out, passes, **kwargs):
    """The fit, the passes it made and whether each state held its pass's V."""
    passes.update(fit=0, embedding=0)
    held = []
    model = run(FitRequest(corpus.path, out, callback=lambda s: held.append(s.held_V is not None),
                           **{**KW, **kwargs}))
    return model, dict(passes), held


def _same(a, b):
    assert a.objective == b.objective
    np.testing.assert_array_equal(a.U, b.U)
    np.testing.assert_array_equal(a.V().compute(), b.V().compute())


def _budgets(corpus):
    """X and V (r n float64) in bytes."""
    return stored_nbytes(open_input(corpus.path)), KW["n_components"] * N * 8


def _check(corpus, tmp_path, passes):
    x_bytes, v_bytes = _budgets(corpus)
    fits = {name: _fit(corpus, tmp_path / f"{name}.zarr", passes, memory_budget=budget)
            for name, budget in (("default", None), ("both", x_bytes + v_bytes),
                                 ("X alone", x_bytes + v_bytes - 1), ("streamed", 0))}
    for name in ("default", "both"):  # V held: no pass after the last iteration
        model, counted, held = fits[name]
        assert counted["embedding"] == 0 and all(held) and len(held) == KW["max_iter"] + 1
    for name in ("X alone", "streamed"):  # V not held: one more pass recomputes it
        model, counted, held = fits[name]
        assert counted["embedding"] == 1 and not any(held)
        assert counted["fit"] == fits["default"][1]["fit"]
    for name in ("both", "X alone", "streamed"):
        _same(fits[name][0], fits["default"][0])
    return fits["default"][0]


def test_the_default_fit_makes_no_pass_after_its_last_iteration_and_the_same_bits(
    corpus, tmp_path, passes
):
    with connect() as client:  # dask's threads in this process
        assert client is None
        _check(corpus, tmp_path, passes)


def test_a_resumed_fit_holds_the_last_pass_v_and_equals_the_uninterrupted_one(
    corpus, tmp_path, passes
):
    with connect():
        reference, _, _ = _fit(corpus, tmp_path / "ref.zarr", passes)
        out = tmp_path / "m.zarr"
        _fit(corpus, out, passes, max_iter=2)
        resumed, counted, held = _fit(corpus, out, passes, resume=True)
    assert counted["embedding"] == 0 and held == [True] * 3  # iterations 3, 4, 5
    assert resumed.n_iter == KW["max_iter"]
    _same(resumed, reference)


@pytest.mark.cluster
@pytest.mark.slow
def test_on_a_local_cluster_the_last_pass_v_is_held_on_the_workers_bitwise(
    corpus, tmp_path, passes
):
    with connect() as client:
        assert client is None
        threads, _, _ = _fit(corpus, tmp_path / "threads.zarr", passes)
    with connect(n_workers=2, threads_per_worker=1, memory_limit="2GiB") as client:
        assert len(client.scheduler_info()["workers"]) == 2
        on_cluster = _check(corpus, tmp_path, passes)
    _same(on_cluster, threads)


def test_a_dense_input_writes_the_v_of_the_recomputing_fit(tmp_path, passes):
    """A dense zarr X (samples as rows): the pass's V and the embedding's kernel round
    differently on dense chunks, so the fit keeps the recomputed V there (found by the
    behaviour recorder: fit-dense's V changed when the pass's V was held)."""
    from types import SimpleNamespace

    import zarr

    X = np.random.default_rng(0).random((N, M))
    zarr.create_array(str(tmp_path / "dense.zarr"), data=X, chunks=(30, M))
    dense = SimpleNamespace(path=tmp_path / "dense.zarr")
    with connect():
        default, counted, held = _fit(dense, tmp_path / "default.zarr", passes)
        streamed, _, _ = _fit(dense, tmp_path / "streamed.zarr", passes, memory_budget=0)
    assert counted["embedding"] == 1 and not any(held)
    _same(default, streamed)


def test_the_held_chunks_are_row_major_where_the_budget_has_room_with_the_same_bits(
    tmp_path, passes, monkeypatch
):
    """Issue 40 item 4: a held X keeps its chunks row-major (each pass then skips their
    renumbering and copy) when that form, at most HELD_EXTRA larger, fits the memory budget
    beside the held V; else as read. The model is bitwise the same either way, and streamed."""
    from sphdist.core.partials import HELD_EXTRA

    X = random_corpus(M, N, density=0.3, seed=4)  # 4.5 % larger row-major (0.05: 15 %)
    with CorpusWriter(tmp_path / "dense-chunks.zarr", n_features=M,
                      feature_scheme={"type": "hashing"}) as w:
        for a, b in [(0, 30), (30, 60), (60, 90)]:
            w.write_chunk(X[:, a:b], [str(j) for j in range(a, b)])
        corpus = w.commit(idf=np.ones(M))

    kinds = []
    hold = graph.hold

    def recorded(X, *args, **kwargs):
        held = hold(X, *args, **kwargs)
        kinds.append((kwargs.get("max_extra"),
                      {type(v).__name__ for v in held.__dask_graph__().values()}))
        return held

    monkeypatch.setattr(graph, "hold", recorded)
    x_bytes, v_bytes = _budgets(corpus)
    room = int(x_bytes * (1 + HELD_EXTRA)) + v_bytes
    with connect():
        fits = {budget: _fit(corpus, tmp_path / f"{budget}.zarr", passes,
                             memory_budget=budget)[0] for budget in (room, room - 1, 0)}
    assert kinds == [(HELD_EXTRA, {"RowMajor"}), (0.0, {"csc_matrix"})]
    _same(fits[room], fits[0])
    _same(fits[room - 1], fits[0])
