"""The fit job: one preparation, resume decisions, and retries that reuse the preparation."""

import numpy as np
import pytest
import zarr
from distributed.client import FutureCancelledError

from sphdist.errors import CheckpointMismatchError
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.jobs import fit
from sphdist.jobs.fit import fit_corpus, fit_with_retries, prepare_fit

from ..reference import random_corpus

pytestmark = pytest.mark.usefixtures("sync_scheduler")

KW = dict(n_components=3, max_iter=5, tol=0, random_state=0)


@pytest.fixture
def corpus(tmp_path):
    X = random_corpus(40, 90, seed=2)
    with CorpusWriter(tmp_path / "corpus.zarr", n_features=40,
                      feature_scheme={"type": "hashing"}) as w:
        for a, b in [(0, 30), (30, 60), (60, 90)]:
            w.write_chunk(X[:, a:b], [str(j) for j in range(a, b)])
        return w.commit(idf=np.ones(40))


def _same(a, b):
    assert a.objective == b.objective
    np.testing.assert_array_equal(a.U, b.U)
    np.testing.assert_array_equal(a.V().compute(), b.V().compute())


def test_every_solver_parameter_is_stored(corpus, tmp_path):
    model = fit_corpus(corpus.path, tmp_path / "m.zarr", callback=None, dtype="float32",
                       polar="svd", partials="rows", max_partials=2, **KW)
    assert {k: model.params[k] for k in ("dtype", "polar", "partials", "max_partials")} == {
        "dtype": "float32", "polar": "svd", "partials": "rows", "max_partials": 2}


def test_checkpoint_without_the_new_keys_resumes_with_their_defaults(corpus, tmp_path):
    reference = fit_corpus(corpus.path, tmp_path / "ref.zarr", callback=None, **KW)
    out = tmp_path / "m.zarr"
    fit_corpus(corpus.path, out, callback=None, **{**KW, "max_iter": 2})
    group = zarr.open_group(str(out), mode="r+")  # as written before these keys were stored
    attrs = dict(group.attrs)
    attrs["params"] = {k: v for k, v in attrs["params"].items()
                       if k not in ("dtype", "polar", "partials", "max_partials")}
    group.attrs.put(attrs)
    with pytest.raises(CheckpointMismatchError, match="dtype: 'float64' -> 'float32'"):
        prepare_fit(corpus.path, out, resume=True, dtype="float32", **KW)
    _same(fit_corpus(corpus.path, out, resume=True, callback=None, **KW), reference)


def test_retry_resumes_its_own_checkpoint_without_reopening_the_input(
    corpus, tmp_path, monkeypatch
):
    reference = fit_corpus(corpus.path, tmp_path / "ref.zarr", callback=None, **KW)
    out = tmp_path / "m.zarr"
    fit_corpus(corpus.path, out, callback=None, **KW)  # an older model, to be overwritten
    opened = []
    open_input = fit.open_input
    monkeypatch.setattr(fit, "open_input", lambda path: opened.append(path) or open_input(path))
    prepared = prepare_fit(corpus.path, out, overwrite=True, **KW)
    lost, seen = [], []

    def lose_a_worker_once(state):
        seen.append(state.iteration)
        if state.iteration == 3 and not lost:
            lost.append(state.iteration)
            raise FutureCancelledError("pass", reason="lost")

    model = fit_with_retries(prepared.attempt, corpus.path, out, overwrite=True,
                             callback=lose_a_worker_once)
    assert lost == [3] and opened == [corpus.path]
    assert seen == [0, 1, 2, 3, 3, 4, 5]  # the retry resumed the checkpoint of iteration 2
    _same(model, reference)
