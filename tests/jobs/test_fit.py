"""The fit job: one request, run once; resume decisions, and retries that reuse what it opened."""

import dataclasses
import os

import click
import numpy as np
import pytest
import zarr
from distributed.client import FutureCancelledError

from sphdist.errors import CheckpointMismatchError
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.io.model import open_model
from sphdist.jobs import fit, run
from sphdist.jobs.fit import FitRequest

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
    model = run(FitRequest(corpus.path, tmp_path / "m.zarr", callback=None, dtype="float32",
                           polar="svd", partials="rows", split_every=3, **KW))
    assert {k: model.params[k] for k in ("dtype", "polar", "partials", "split_every")} == {
        "dtype": "float32", "polar": "svd", "partials": "rows", "split_every": 3}


def test_checkpoint_without_the_new_keys_resumes_with_their_defaults(corpus, tmp_path):
    reference = run(FitRequest(corpus.path, tmp_path / "ref.zarr", callback=None, **KW))
    out = tmp_path / "m.zarr"
    run(FitRequest(corpus.path, out, callback=None, **{**KW, "max_iter": 2}))
    group = zarr.open_group(str(out), mode="r+")  # as written before these keys were stored
    attrs = dict(group.attrs)
    attrs["params"] = {k: v for k, v in attrs["params"].items()
                       if k not in ("dtype", "polar", "partials", "max_partials")}
    group.attrs.put(attrs)
    with pytest.raises(CheckpointMismatchError, match="dtype: 'float64' -> 'float32'"):
        run(FitRequest(corpus.path, out, resume=True, dtype="float32", **KW))
    _same(run(FitRequest(corpus.path, out, resume=True, callback=None, **KW)), reference)


def test_checkpoint_that_stored_the_old_name_init_n_iter_resumes_bitwise(corpus, tmp_path):
    # n_power_iter was stored as init_n_iter before the rename (sphdist.core.params.RENAMED);
    # a non-default value, so that reading the old key as missing (the default 4) would refuse
    kw = {**KW, "init": "svd", "n_power_iter": 2}
    reference = run(FitRequest(corpus.path, tmp_path / "ref.zarr", callback=None, **kw))
    out = tmp_path / "m.zarr"
    run(FitRequest(corpus.path, out, callback=None, **{**kw, "max_iter": 2}))
    group = zarr.open_group(str(out), mode="r+")  # as the code before the rename wrote it
    attrs = dict(group.attrs)
    attrs["params"] = {("init_n_iter" if k == "n_power_iter" else k): v
                       for k, v in attrs["params"].items()}
    group.attrs.put(attrs)
    assert open_model(out).params["n_power_iter"] == 2
    with pytest.raises(CheckpointMismatchError, match="n_power_iter: 2 -> 3"):
        run(FitRequest(corpus.path, out, resume=True, **{**kw, "n_power_iter": 3}))
    resumed = run(FitRequest(corpus.path, out, resume=True, callback=None, **kw))
    _same(resumed, reference)
    assert resumed.n_iter == reference.n_iter == KW["max_iter"]
    stored = zarr.open_group(str(out), mode="r").attrs["params"]  # rewritten under the new name
    assert stored["n_power_iter"] == 2 and "init_n_iter" not in stored


def test_retry_resumes_its_own_checkpoint_without_reopening_the_input(
    corpus, tmp_path, monkeypatch
):
    reference = run(FitRequest(corpus.path, tmp_path / "ref.zarr", callback=None, **KW))
    out = tmp_path / "m.zarr"
    run(FitRequest(corpus.path, out, callback=None, **KW))  # an older model, to be overwritten
    opened = []
    open_input = fit.open_input
    monkeypatch.setattr(fit, "open_input", lambda path: opened.append(path) or open_input(path))
    lost, seen = [], []

    def lose_a_worker_once(state):
        seen.append(state.iteration)
        if state.iteration == 3 and not lost:
            lost.append(state.iteration)
            raise FutureCancelledError("pass", reason="lost")

    model = run(FitRequest(corpus.path, out, overwrite=True, checkpoint_interval=0,  # each one
                           callback=lose_a_worker_once, **KW))  # its retries: 3
    assert lost == [3] and opened == [corpus.path]
    assert seen == [0, 1, 2, 3, 3, 4, 5]  # the retry resumed the checkpoint of iteration 2
    _same(model, reference)


def test_workers_lost_after_every_retry_is_a_typed_error_naming_the_resume(corpus, tmp_path):
    from sphdist.errors import WorkersLostError

    out, seen = tmp_path / "m.zarr", []

    def always_lost_at_2(state):
        seen.append(state.iteration)
        if state.iteration == 2:
            raise FutureCancelledError("pass", reason="lost")

    with pytest.raises(WorkersLostError, match=r"3 attempts .* resume=True") as info:
        run(FitRequest(corpus.path, out, checkpoint_interval=0, retries=2,
                       callback=always_lost_at_2, **KW))
    assert isinstance(info.value.__cause__, FutureCancelledError)
    # the first attempt started the fit; each retry resumed its checkpoint of iteration 1
    assert seen == [0, 1, 2, 2, 2]


def test_the_fit_holds_its_output_once_and_releases_it(corpus, tmp_path):
    from sphdist.errors import OutputLockedError
    from sphdist.io import lock_holder, open_output

    out, seen = tmp_path / "m.zarr", []

    def held(state):
        seen.append(lock_holder(out)["pid"])
        with pytest.raises(OutputLockedError), open_output(out):
            pass  # not reentrant: nobody else writes it while the fit holds it

    run(FitRequest(corpus.path, out, callback=held, **KW))
    assert seen == [os.getpid()] * (KW["max_iter"] + 1)
    assert lock_holder(out) is None
    with open_output(out):
        pass


def test_the_corpus_is_opened_once_per_fit(corpus, tmp_path, monkeypatch):
    """Issue 26: one manifest read and one metadata read of the input per fit (it was two:
    ``open_input`` opened the group, then ``Corpus`` opened it again)."""
    import sphdist.io._input as stored_corpus  # where a corpus is opened

    opened, resolved = [], []
    open_node, readable_path = stored_corpus.open_node, stored_corpus.readable_path
    monkeypatch.setattr(stored_corpus, "open_node",
                        lambda *a, **k: opened.append(a[0]) or open_node(*a, **k))
    monkeypatch.setattr(stored_corpus, "readable_path",
                        lambda p: resolved.append(p) or readable_path(p))
    run(FitRequest(corpus.path, tmp_path / "m.zarr", callback=None, retries=1, **KW))
    assert len(opened) == 1 and len(resolved) == 1


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_palm_fit_resumed_from_its_checkpoint_is_bitwise_the_uninterrupted_one(
    corpus, tmp_path, dtype
):
    """Issue 31 item 8: ``--lam palm --mu palm --dtype float32`` resumed from a checkpoint
    (V_k stored as float64) differed from iteration 6; every iterate is bitwise now."""
    kw = {**KW, "lam": "palm", "mu": "palm", "dtype": dtype, "max_iter": 8}
    reference = run(FitRequest(corpus.path, tmp_path / "ref.zarr", callback=None, **kw))
    out = tmp_path / "m.zarr"
    run(FitRequest(corpus.path, out, callback=None, **{**kw, "max_iter": 5}))
    _same(run(FitRequest(corpus.path, out, resume=True, callback=None, **kw)), reference)


def _as_written_by_the_chained_pass(out, nudge):
    """The checkpoint at ``out`` as a version with accumulation chains (before issue 29) wrote
    it: its params record max_partials, and (``nudge``) its last objective is one ulp off this
    version's, as a sum in another order gives."""
    group = zarr.open_group(str(out), mode="r+")
    attrs = dict(group.attrs)
    attrs["params"] = {**attrs["params"], "max_partials": 8}
    if nudge:
        attrs["objective"] = [*attrs["objective"][:-1],
                              float(np.nextafter(attrs["objective"][-1], np.inf))]
    group.attrs.put(attrs)


def test_a_checkpoint_of_the_chained_pass_is_refused_with_the_fit_to_start_again(
    corpus, tmp_path
):
    """Issue 29: a checkpoint written before it (max_partials recorded) whose objective this
    version's summation order does not reproduce to the bit was refused as "fitted on other
    data"; it is refused saying why, with the fit to start again. One it does reproduce
    resumes."""
    reference = run(FitRequest(corpus.path, tmp_path / "ref.zarr", callback=None, **KW))
    out = tmp_path / "m.zarr"
    run(FitRequest(corpus.path, out, callback=None, **{**KW, "max_iter": 2}))
    _as_written_by_the_chained_pass(out, nudge=True)
    with pytest.raises(CheckpointMismatchError, match="earlier version of sphdist") as caught:
        run(FitRequest(corpus.path, out, resume=True, callback=None, **KW))
    assert "max_partials=8" in str(caught.value) and "other data" not in str(caught.value)
    # a Python caller is told the call, in keywords; the remedy itself is on the exception
    assert f"FitRequest(input='{corpus.path}', output='{out}', overwrite=True" in str(
        caught.value)
    assert "--" not in str(caught.value)
    (fix,) = caught.value.remedies
    assert fix.action == "fit" and fix.overrides["overwrite"] is True
    assert open_model(out).n_iter == 2  # nothing written
    _same(run(FitRequest(corpus.path, out, overwrite=True, callback=None, **KW)), reference)
    run(FitRequest(corpus.path, out, overwrite=True, callback=None, **{**KW, "max_iter": 2}))
    _as_written_by_the_chained_pass(out, nudge=False)  # the same sums: it continues, bitwise
    _same(run(FitRequest(corpus.path, out, resume=True, callback=None, **KW)), reference)


# -- the request: pure, fully validated, one config ------------------------------------------

@pytest.mark.parametrize("bad", [
    {"n_components": -5}, {"lam": 1.0}, {"tol": -1}, {"mu": -1.0}, {"dtype": "int64"},
    {"device": "gpu"}, {"checkpoint_every": 0}, {"checkpoint_interval": -1.0}, {"retries": -1},
    {"memory_budget": "lots"},
])
def test_the_request_refuses_an_invalid_value_before_anything_is_opened_or_written(
    tmp_path, bad
):
    """Issue 32, item 4: every value the table or the job's settings refuse is refused when
    the request is built, which reads nothing (the input does not exist) and writes nothing
    (no lock, no output, no staging)."""
    from sphdist.errors import ParameterError

    input, out = tmp_path / "missing.zarr", tmp_path / "m.zarr"
    with pytest.raises(ParameterError, match=next(iter(bad)) if "memory" not in str(bad)
                       else "memory budget"):
        FitRequest(input, out, **{**KW, **bad})
    assert list(tmp_path.iterdir()) == []


def test_the_request_is_pure_and_carries_the_config_the_solver_is_given(
    corpus, tmp_path, monkeypatch
):
    """One FitConfig, built and validated once (with the request), is what solver.fit runs
    with."""
    out = tmp_path / "m.zarr"
    request = FitRequest(corpus.path, out, dtype="float32", checkpoint_every=2,
                         memory_budget="1MiB", callback=None, **KW)
    assert [p.name for p in tmp_path.iterdir()] == ["corpus.zarr"]  # nothing new
    assert request.config.dtype == np.dtype("float32") and request.budget == 2**20
    assert request.dtype == "float32" and request.memory_budget == "1MiB"
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.lam = "palm"
    given = []
    solver_fit = fit.solver.fit
    monkeypatch.setattr(fit.solver, "fit",
                        lambda X, **kw: given.append(kw["config"]) or solver_fit(X, **kw))
    model = run(request)
    assert given == [request.config] and given[0] is request.config
    assert model.params["dtype"] == "float32" and model.n_iter == KW["max_iter"]


def test_run_retries_as_the_request_says(corpus, tmp_path):
    from sphdist.errors import WorkersLostError

    seen = []

    def always_lost_at_1(state):
        seen.append(state.iteration)
        if state.iteration == 1:
            raise FutureCancelledError("pass", reason="lost")

    with pytest.raises(WorkersLostError, match="2 attempts"):
        run(FitRequest(corpus.path, tmp_path / "m.zarr", retries=1, callback=always_lost_at_1,
                       **KW))
    assert seen == [0, 1, 0, 1]  # no checkpoint before iteration 1: started again


def test_the_command_lines_defaults_are_the_configs():
    """Each option of `sphdist fit` that sets a field of FitRequest defaults to that field's
    default (n_components, which the request leaves to the caller: the job's N_COMPONENTS);
    nothing re-types one."""
    from sphdist.cli.fit import fit as command
    from sphdist.jobs.params import N_COMPONENTS

    fields = {f.name: f.default for f in dataclasses.fields(FitRequest)
              if f.init and f.name not in ("input", "output", "callback")}
    assert fields.pop("n_components") is dataclasses.MISSING
    expected = {**fields, "n_components": N_COMPONENTS}
    context = click.Context(command)
    options = {p.name: p.get_default(context) for p in command.params if p.name in expected}
    assert set(options) == set(expected)
    assert options == expected


# -- what a fit does with the output: a pure decision with its remedies ----------------------

def _stored(**changes):
    from sphdist.core import params

    return {**params.defaults(), "n_components": 3, "dtype": "float64", "init_from": None,
            "max_iter": 5, **changes}


def _checkpoint(n_iter=2, converged=False, fingerprint="a" * 64, **changes):
    from types import SimpleNamespace

    return SimpleNamespace(corpus={"fingerprint": fingerprint, "path": "/old/corpus.zarr"},
                           params=_stored(**changes), n_iter=n_iter, converged=converged)


@pytest.mark.parametrize("previous, resume, overwrite, action, error, remedies", [
    (None, False, False, "fresh", None, []),
    (None, True, False, "fresh", None, []),
    (_checkpoint(), False, True, "fresh", None, []),
    (_checkpoint(), True, False, "resume", None, []),
    (_checkpoint(), True, True, "resume", None, []),
    (_checkpoint(), False, False, "refuse", "OutputExistsError", ["resume", "overwrite"]),
    (_checkpoint(n_iter=5), False, False, "refuse", "OutputExistsError", ["overwrite"]),
    (_checkpoint(random_state=1), False, False, "refuse", "OutputExistsError",
     ["overwrite", "resume"]),
    (_checkpoint(random_state=1), True, False, "refuse", "CheckpointMismatchError",
     ["resume", "overwrite"]),
    (_checkpoint(fingerprint="b" * 64), True, False, "refuse", "CheckpointMismatchError",
     ["resume", "overwrite"]),
])
def test_the_output_decision_is_pure_and_names_its_remedies(
    previous, resume, overwrite, action, error, remedies
):
    """FitRequest.continues reads nothing: resume, start afresh, or refuse with the request
    changed as remedies (replace: the fit asked; resume: the one that is there)."""
    from sphdist import errors
    from sphdist.core import params

    request = FitRequest("/new/corpus.zarr", "/out/m.zarr", resume=resume, overwrite=overwrite,
                         n_components=3, max_iter=5)
    if error is None:
        assert request.continues(previous, "a" * 64, _stored()) is (action == "resume")
        return
    with pytest.raises(getattr(errors, error)) as caught:
        request.continues(previous, "a" * 64, _stored())
    fixes = caught.value.remedies
    assert ["resume" if f.overrides.get("resume") else "overwrite" for f in fixes] == remedies
    for fix in fixes:
        theirs = fix.overrides.get("resume") is True
        assert fix.action == "fit" and dict(fix.target) == {
            "input": "/old/corpus.zarr" if theirs and previous.corpus["fingerprint"] != "a" * 64
            else "/new/corpus.zarr", "output": "/out/m.zarr"}
        recorded = {k: v for k, v in previous.params.items() if k in params.RESUME_PARAMS
                    and v != params.PARAMS[k].default} if theirs else {}
        assert dict(fix.overrides) == {"resume" if theirs else "overwrite": True,
                                       "n_components": 3, "max_iter": 5, **recorded}


def test_overwrite_replaces_the_model_at_the_first_checkpoint_as_documented(corpus, tmp_path):
    """Issue 44 item 3: a refit with overwrite removes the previous model at its first
    checkpoint (readers then see a checkpoint of the new fit). The behaviour is documented in
    ``sphdist fit --help`` and the user guide; this test holds it to the words."""
    from click.testing import CliRunner

    from sphdist.cli import main

    out = tmp_path / "m.zarr"
    run(FitRequest(corpus.path, out, callback=None, **KW))
    assert open_model(out).shape[1] == KW["n_components"]
    seen = []

    def reader(state):  # what a reader of the output sees while the refit runs
        model = open_model(out)
        seen.append((state.iteration, model.shape[1], model.n_iter))

    run(FitRequest(corpus.path, out, callback=reader, overwrite=True, checkpoint_interval=0,
                   **{**KW, "n_components": KW["n_components"] + 1}))
    before_first = [s for s in seen if s[0] <= 1]
    after_first = [s for s in seen if s[0] >= 2]
    assert all(r == KW["n_components"] for _, r, _ in before_first), seen  # the old model
    assert all(r == KW["n_components"] + 1 for _, r, _ in after_first), seen  # a checkpoint
    assert after_first and after_first[0][2] == 1, seen  # the new fit's iteration 1, not a model
    help_text = " ".join(CliRunner().invoke(main, ["fit", "--help"]).output.split())
    assert "replaced at the first checkpoint" in help_text
