"""Checkpoints: round trip, atomic commit, and resume equal to an uninterrupted run."""

import os
from pathlib import Path

import numpy as np
import pytest
import zarr

from sphdist.errors import (
    CheckpointMismatchError,
    InputNotFoundError,
    ModelFormatError,
    OutputExistsError,
)
from sphdist.io import _atomic
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.io.model import load_checkpoint, open_model
from sphdist.jobs import run
from sphdist.jobs.fit import FitRequest

from ..reference import random_corpus

R = 3


def _write_corpus(path, X, sizes):
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    with CorpusWriter(path, n_features=X.shape[0], feature_scheme={"type": "hashing"}) as w:
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            w.write_chunk(X[:, a:b], [str(j) for j in range(a, b)])
        return w.commit(idf=np.ones(X.shape[0]))


pytestmark = pytest.mark.usefixtures("sync_scheduler")


@pytest.fixture
def corpus(tmp_path):
    return _write_corpus(tmp_path / "corpus.zarr", random_corpus(40, 90, seed=2), [25, 25, 40])


def _fit(corpus, out, **kw):
    # every iteration checkpointed unless a test says otherwise: these fits take a fraction of
    # the default interval (a minute), and these tests read the checkpoints between
    args = dict(n_components=R, max_iter=6, tol=0, random_state=0, callback=None,
                checkpoint_interval=0) | kw
    return run(FitRequest(corpus.path, out, **args))


def _assert_same_model(a, b):
    assert a.objective == b.objective
    assert a.attrs["u_step_norm"] == b.attrs["u_step_norm"]
    assert a.attrs["v_step_norm"] == b.attrs["v_step_norm"]
    np.testing.assert_array_equal(a.U, b.U)
    np.testing.assert_array_equal(a.V().compute(), b.V().compute())


def test_model_round_trip(corpus, tmp_path):
    model = _fit(corpus, tmp_path / "m.zarr")
    assert model.n_iter == 6 and len(model.objective) == 7
    assert model.corpus["fingerprint"] == corpus.fingerprint
    assert model.params["n_components"] == R and model.params["random_state"] == 0
    U, V = model.U, model.V().compute()
    np.testing.assert_allclose(U.T @ U, np.eye(R), atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(V, axis=0), 1.0, atol=1e-12)
    # the exact V-step: V is normalise(U^T X), nothing else is needed to resume
    X = corpus.to_dask().compute().toarray()
    A = U.T @ X
    full = X.any(axis=0)  # empty documents get e_1
    np.testing.assert_allclose(V[:, full], A[:, full] / np.linalg.norm(A[:, full], axis=0),
                               atol=1e-12)
    assert "state" not in zarr.open_group(model.path)
    state = model.state(corpus.chunks)
    assert state.V is None and state.XVt is None and state.VVt is None
    np.testing.assert_array_equal(state.U, U)
    np.testing.assert_allclose(model.idf, np.ones(40))


def test_a_fit_that_keeps_V_stores_V_and_its_partials(corpus, tmp_path):
    model = _fit(corpus, tmp_path / "m.zarr", lam=2.5)
    V = model.V().compute()
    state = model.state(corpus.chunks)
    assert state.V.chunks[1] == corpus.chunks
    np.testing.assert_array_equal(state.XVt, np.asarray(zarr.open_group(model.path)["state/XVt"]))
    # the stored partials are the products of the stored factors with X
    X = corpus.to_dask().compute().toarray()
    np.testing.assert_allclose(state.XVt, X @ V.T, atol=1e-12)
    np.testing.assert_allclose(state.VVt, V @ V.T, atol=1e-12)


def test_a_kept_V_goes_through_scratch_zarr_and_gives_the_in_memory_fit(corpus, tmp_path):
    from sphdist.core import solver

    seen = []
    out = tmp_path / "m.zarr"

    def record(state):
        seen.append(sorted(p.name for p in (tmp_path / "m.zarr.scratch").glob("V*")))

    model = _fit(corpus, out, lam=2.5, max_iter=4, callback=record)
    assert seen[0] == ["V0"] and seen[-1] == ["V0", "V1"]  # V_k on disk, not in memory
    assert not (tmp_path / "m.zarr.scratch").exists()  # removed at the end
    memory = solver.fit(corpus.to_dask(), R, lam=2.5, max_iter=4, tol=0, random_state=0)
    assert model.objective == memory.objective
    np.testing.assert_array_equal(model.V().compute(), memory.V.compute())


def test_checkpoints_hold_U_alone_and_their_bytes_do_not_grow_with_n(tmp_path):
    sizes = {}
    for n in (90, 900):
        X = random_corpus(40, n, seed=2)
        corpus = _write_corpus(tmp_path / f"c{n}.zarr", X, [30] * (n // 30))
        out = tmp_path / f"m{n}.zarr"

        def record(state, out=out, n=n):
            if state.iteration == 2:  # the checkpoint of iteration 1 is on disk
                assert not open_model(out).has_embedding
                sizes[n] = _tree_bytes(out)

        assert _fit(corpus, out, max_iter=3, callback=record).has_embedding
    assert sizes[900] == pytest.approx(sizes[90], rel=0.05)


def _tree_bytes(path):
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def test_a_stopped_fit_is_a_checkpoint_without_embedding(corpus, tmp_path):
    out = tmp_path / "m.zarr"
    seen = []

    def stop(state):
        if state.iteration == 2:
            seen.append(load_checkpoint(out))
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _fit(corpus, out, max_iter=6, callback=stop)
    checkpoint = open_model(out)
    assert checkpoint.n_iter == 1 and not checkpoint.has_embedding
    assert checkpoint.shape == (40, R, 90)
    # one refusal, worded once (issue 32): storage and the jobs give the same resume
    with pytest.raises(ModelFormatError, match=r"stopped at iteration 1 of 6.*resume=True"):
        checkpoint.V()
    from sphdist.jobs.info import require_embedding

    with pytest.raises(ModelFormatError, match=r"stopped at iteration 1 of 6.*resume=True") as e:
        require_embedding(checkpoint)
    (fix,) = e.value.remedies
    assert fix == checkpoint.resume_remedy() and fix.overrides["resume"] is True


@pytest.mark.parametrize("stop_after", [0, 1, 4])
def test_resume_equals_uninterrupted_run(corpus, tmp_path, stop_after):
    full = _fit(corpus, tmp_path / "full.zarr", max_iter=6)
    part = tmp_path / "part.zarr"
    _fit(corpus, part, max_iter=stop_after)
    assert open_model(part).n_iter == stop_after
    resumed = _fit(corpus, part, max_iter=6, resume=True)
    _assert_same_model(resumed, full)


def test_checkpoint_every(corpus, tmp_path):
    written = []
    out = tmp_path / "m.zarr"

    def record(state):
        model = load_checkpoint(out)
        written.append(None if model is None else model.n_iter)

    _fit(corpus, out, max_iter=5, checkpoint_every=2, checkpoint_interval=0, callback=record)
    # the callback runs before the save of its own iteration: it sees the previous checkpoint;
    # iteration 0 is not saved (U_0 fills all m rows; the seed and one pass redo it)
    assert written == [None, None, None, 2, 2, 4]
    assert open_model(out).n_iter == 5


@pytest.mark.parametrize(("every", "interval", "expected"), [
    (1, 60.0, [None] * 7),  # the default: a fit shorter than a minute writes only its model
    (1, 0.0, [None, None, 1, 2, 3, 4, 5]),
    (1, 2.0, [None, None, 1, 1, 3, 3, 5]),  # 1 s a pass on this clock: every other one
    (3, 2.0, [None, None, None, None, 3, 3, 3]),
])
def test_checkpoint_interval(corpus, tmp_path, monkeypatch, every, interval, expected):
    """Issue 29 item 5: a checkpoint once ``checkpoint_interval`` seconds have passed since
    the last write (or the start), at a ``checkpoint_every``-th iteration; which iterations
    are written changes no bit of the model, and a resume from one continues to the same bits.
    The fit's clock is one that moves 1 s a pass (the callback's tick), not the wall."""
    from sphdist.jobs import fit as fit_job

    now = [0.0]
    monkeypatch.setattr(fit_job, "_clock", lambda: now[0])
    written = []
    out = tmp_path / "m.zarr"

    def record(state):
        model = load_checkpoint(out)
        written.append(None if model is None else model.n_iter)
        now[0] += 1.0

    model = _fit(corpus, out, checkpoint_every=every, checkpoint_interval=interval,
                 callback=record)
    assert written == expected
    _assert_same_model(model, _fit(corpus, tmp_path / "each.zarr", checkpoint_interval=0))


def test_resume_refuses_other_parameters_and_other_corpus(corpus, tmp_path):
    out = tmp_path / "m.zarr"
    _fit(corpus, out, max_iter=2)
    with pytest.raises(CheckpointMismatchError, match="n_components: 3 -> 2"):
        _fit(corpus, out, n_components=2, resume=True)
    with pytest.raises(CheckpointMismatchError, match="lam"):
        _fit(corpus, out, lam=3.0, resume=True)
    other = _write_corpus(tmp_path / "other.zarr", random_corpus(40, 90, seed=2), [25, 25, 40])
    with pytest.raises(CheckpointMismatchError, match="fingerprint"):
        run(FitRequest(other.path, out, n_components=R, resume=True, callback=None))
    assert open_model(out).n_iter == 2  # nothing was lost


def test_existing_output_needs_resume_or_overwrite(corpus, tmp_path):
    out = tmp_path / "m.zarr"
    _fit(corpus, out, max_iter=1)
    with pytest.raises(OutputExistsError, match=r"resume=True with a larger max_iter"):
        _fit(corpus, out, max_iter=1)
    assert _fit(corpus, out, max_iter=2, overwrite=True).n_iter == 2


def test_crash_between_renames_recovers_previous_checkpoint(corpus, tmp_path):
    out = tmp_path / "m.zarr"
    _fit(corpus, out, max_iter=2)
    expected = open_model(out).objective
    os.replace(out, out.with_name("m.zarr.old"))  # the state after rename 1 of a commit
    staging = _atomic.staging_path(out)
    staging.mkdir()  # a torn new checkpoint that never got committed
    (staging / "zarr.json").write_text("{")
    model = open_model(out)
    assert model.objective == expected
    # a reader reads m.zarr.old in place and changes nothing (issue 15, item 3) ...
    assert out.with_name("m.zarr.old").exists() and not out.exists()
    # ... the writer moves it back before it writes
    with _atomic.open_output(out) as held:
        assert load_checkpoint(held, recover=True).objective == expected
    assert not out.with_name("m.zarr.old").exists()


def test_failed_checkpoint_write_keeps_the_previous_one(corpus, tmp_path, monkeypatch):
    out = tmp_path / "m.zarr"
    _fit(corpus, out, max_iter=2)
    before = open_model(out).objective

    def crash(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("sphdist.io._posix.PosixTarget.commit", crash)
    with pytest.raises(OSError, match="No space left"):
        _fit(corpus, out, max_iter=4, resume=True)
    assert open_model(out).objective == before
    assert [p.name for p in Path(tmp_path).iterdir() if p.name.startswith("m.zarr")] == ["m.zarr"]


def test_open_model_errors(tmp_path, corpus):
    with pytest.raises(InputNotFoundError, match="no such model"):
        open_model(tmp_path / "missing.zarr")
    with pytest.raises(ModelFormatError, match="not a sphdist model"):
        open_model(corpus.path)
    assert load_checkpoint(tmp_path / "missing.zarr") is None


def test_resume_after_a_killed_write_discards_its_staging_tree(corpus, tmp_path):
    out = tmp_path / "m.zarr"
    _fit(corpus, out, max_iter=2)
    torn = _atomic.staging_path(out)
    torn.mkdir()
    (torn / "zarr.json").write_text("{")
    assert _fit(corpus, out, max_iter=3, resume=True).n_iter == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.zarr", "m.zarr"]


def test_bad_parameters_write_nothing(corpus, tmp_path):
    from sphdist.errors import ParameterError

    with pytest.raises(ParameterError, match="n_components=91"):
        _fit(corpus, tmp_path / "m.zarr", n_components=91)
    assert not (tmp_path / "m.zarr").exists()


@pytest.mark.parametrize("lam", ["exact", 2.5])
def test_histories_are_complete_across_resume(corpus, tmp_path, lam):
    part = tmp_path / "part.zarr"
    _fit(corpus, part, max_iter=2, lam=lam)
    resumed = _fit(corpus, part, max_iter=5, resume=True, lam=lam)
    a = resumed.attrs
    assert len(a["objective"]) == len(a["seconds"]) == 6
    assert len(a["u_step_norm"]) == len(a["v_step_norm"]) == 5
    assert all(s > 0 for s in a["seconds"])
    # the step norms are those of the stored iterates: ||V_5 - V_4||_F from a run to 4
    four = _fit(corpus, tmp_path / "four.zarr", max_iter=4, lam=lam)
    dV = np.linalg.norm(resumed.V().compute() - four.V().compute())
    dU = np.linalg.norm(resumed.U - four.U)
    if lam == "exact":  # the stateless iteration keeps no V_{k-1} to measure the V step with
        assert a["v_step_norm"] == [None] * 5
    else:
        assert a["v_step_norm"][-1] == pytest.approx(dV, rel=1e-10)
    assert a["u_step_norm"][-1] == pytest.approx(dU, rel=1e-10)


def test_vocabulary_and_idf_are_copied_into_the_model(tmp_path):
    X = random_corpus(12, 20, seed=3)
    words = [f"term{i}" for i in range(12)]
    with CorpusWriter(tmp_path / "v.zarr", n_features=12, vocabulary=words,
                      feature_scheme={"type": "vocabulary", "n_features": 12}) as w:
        w.write_chunk(X, [str(j) for j in range(20)])
        corpus = w.commit(idf=np.linspace(1, 3, 12))
    model = _fit(corpus, tmp_path / "m.zarr", max_iter=1)
    assert model.vocabulary.tolist() == words
    np.testing.assert_array_equal(model.idf, np.linspace(1, 3, 12))
    assert model.corpus["feature_scheme"]["type"] == "vocabulary"
    # a hashed corpus has no vocabulary to copy
    assert _fit(_write_corpus(tmp_path / "h.zarr", X, [20]), tmp_path / "h.model.zarr",
                max_iter=1).vocabulary is None
