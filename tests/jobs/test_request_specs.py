"""The request specs of the jobs (issue 32, item 5; issue 39): NeighborRequest, SynthRequest,
FitRequest; each validated when made."""

import dataclasses

import pytest

from sphdist.errors import ParameterError
from sphdist.jobs import run
from sphdist.jobs.neighbors import BatchNeighborsRequest, NeighborRequest, QueryRequest
from sphdist.jobs.synth import SynthRequest
from sphdist.text.synth import SynthSpec, iter_documents


@pytest.mark.parametrize("fields, mode", [
    ({"query": "rocket orbit"}, "query"), ({"query": ""}, "query"), ({"doc_id": "d7"}, "doc_id"),
    ({"queries": ["a", "b"]}, "queries"), ({"queries": ["d1"], "ids": True}, "ids"),
    ({"all": True, "k": 3}, "all"),
    ({"doc_id": "d7", "include_self": True}, "doc_id"),
    ({"queries": ["d1"], "ids": True, "include_self": True}, "ids"),
])
def test_a_request_has_one_mode(fields, mode):
    assert NeighborRequest(**fields).mode == mode


@pytest.mark.parametrize("fields, words", [
    ({}, "exactly one of"),
    ({"query": "a", "doc_id": "b"}, "exactly one of"),
    ({"queries": ["a"], "all": True}, "exactly one of"),
    ({"query": "a", "ids": True}, "it needs queries"),
    ({"query": "a", "include_self": True}, "applies to a document query"),
    ({"queries": ["a"], "include_self": True}, "applies to a document query"),
    ({"all": True, "include_self": True}, "applies to a document query"),
])
def test_a_request_refuses_what_asks_nothing_or_two_things(fields, words):
    with pytest.raises(ParameterError, match=words):
        NeighborRequest(**fields)


def test_a_query_request_answers_one_text_or_document(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ParameterError, match="no query given"):
        QueryRequest("m.zarr")
    with pytest.raises(ParameterError, match="exactly one of"):
        QueryRequest("m.zarr", query="a", doc_id="d")
    with pytest.raises(ParameterError, match="applies to a document query"):
        QueryRequest("m.zarr", query="a", include_self=True)
    with pytest.raises(TypeError):
        QueryRequest("m.zarr", NeighborRequest(doc_id="d"))  # keywords only
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fields, words", [
    ({"queries": []}, "no query given"),
    ({"queries": ["a"], "include_self": True}, "applies to a document query"),
    ({"queries": ["a"], "on_error": "ignore"}, "expected one of"),
])
def test_a_batch_request_refuses_when_built(fields, words, tmp_path):
    with pytest.raises(ParameterError, match=words):
        BatchNeighborsRequest("m.zarr", tmp_path / "h.parquet", **fields)
    assert list(tmp_path.iterdir()) == []


def test_a_batch_table_named_as_another_format_is_refused_before_anything_is_read(tmp_path):
    request = BatchNeighborsRequest(tmp_path / "no-model.zarr", tmp_path / "h.parquet",
                                    queries=["a"], format="csv")  # the model is not there
    with pytest.raises(ParameterError, match="named as a parquet file"):
        run(request)
    assert list(tmp_path.iterdir()) == []


def test_synth_spec_validates_its_fields():
    with pytest.raises(ParameterError, match="n_docs"):
        SynthSpec(n_docs=0, n_topics=2)
    with pytest.raises(ParameterError, match="purity"):
        SynthSpec(n_docs=5, n_topics=2, purity=0.2)
    spec = SynthSpec(n_docs=5, n_topics=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.n_docs = 6  # type: ignore[misc]


def test_a_synth_request_is_its_spec_and_the_same_request_writes_the_same_bytes(tmp_path):
    a = run(SynthRequest(output=tmp_path / "a.jsonl", n_docs=7, n_topics=2, seed=3,
                         doc_length=5, vocab_size=40, chunk_size=3))
    request = SynthRequest(output=tmp_path / "b.jsonl", n_docs=7, n_topics=2, seed=3,
                           doc_length=5, vocab_size=40, chunk_size=3)
    assert isinstance(request, SynthSpec) and request.chunks() == [(0, 0, 3), (1, 3, 6),
                                                                     (2, 6, 7)]
    b = run(request)
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert (a.n_docs, a.nnz, a.n_tokens) == (b.n_docs, b.nnz, b.n_tokens)
    lines = (tmp_path / "a.jsonl").read_text().splitlines()
    assert len(lines) == 7 and len(list(iter_documents(7, 2, seed=3, doc_length=5,
                                                       vocab_size=40, chunk_size=3))) == 7
    with pytest.raises(ParameterError, match="purity"):  # the spec's ranges, when built
        SynthRequest(output=tmp_path / "c.jsonl", n_docs=2, n_topics=1, purity=0.2)
    with pytest.raises(ParameterError, match="named as a csv file"):  # its suffix, when run
        run(SynthRequest(output=tmp_path / "c.csv", n_docs=2, n_topics=1, format="jsonl"))
    assert not (tmp_path / "c.jsonl").exists() and not (tmp_path / "c.csv").exists()


def test_the_fit_is_one_request_of_its_fields(tmp_path):
    """Issue 39: one entry, run(FitRequest(...)); a changed request is a value, validated
    again; no twin taking a config or its fields as keywords."""
    from sphdist.jobs import fit
    from sphdist.jobs.fit import FitRequest

    corpus = tmp_path / "c.zarr"
    run(SynthRequest(output=corpus, n_docs=30, n_topics=2, vocab_size=40, format="corpus",
                     n_features=32, chunk_size=10))
    request = FitRequest(corpus, tmp_path / "a.zarr", n_components=2, max_iter=3, callback=None)
    a = run(request)
    b = run(request.replace(output=tmp_path / "b.zarr"))
    assert a.objective == b.objective and a.params == b.params
    with pytest.raises(ParameterError, match="max_iter"):
        request.replace(max_iter=-1)
    with pytest.raises(TypeError, match="n_components"):
        FitRequest(corpus, tmp_path / "c.zarr", max_iter=3)
    with pytest.raises(TypeError):  # every parameter after the paths is a keyword
        FitRequest(corpus, tmp_path / "c.zarr", 2)
    assert not {"fit_corpus", "prepare_fit", "plan_fit", "open_fit"} & set(dir(fit))
