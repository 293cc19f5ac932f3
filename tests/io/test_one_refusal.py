"""An output already there is refused in one sentence, from one place (issue 32, item 2).

Every writer that finds its output (without ``overwrite``) raises
:func:`sphdist.io._policy.refuse_existing`: the same words whatever writes, and the innermost
frame of the refusal is that function, not a copy of its message.
"""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.errors import OutputExistsError
from sphdist.io import open_output
from sphdist.io._policy import refuse_existing
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.jobs import run
from sphdist.jobs.export import ExportRequest
from sphdist.jobs.ingest import IngestRequest
from sphdist.jobs.neighbors import BatchNeighborsRequest, IndexRequest, KnnGraphRequest
from sphdist.jobs.synth import SynthRequest
from sphdist.jobs.transform import TransformRequest

from .._cli_stores import user_stores, working_directory

#: What follows the output's name in the refusal, in the Python API's words.
SENTENCE = " already exists. To resolve this, choose another output or pass overwrite=True."


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A jsonl collection, its corpus, model, embedding and index, and three written tables."""
    root = tmp_path_factory.mktemp("refusal")
    with working_directory(root):
        user_stores("good.jsonl", n_docs=40, vocab_size=40)
    for table in ("x.csv", "g.csv", "h.csv"):
        (root / table).write_text("written before\n")
    return root


WRITERS = {
    "synth": lambda: run(SynthRequest(output="good.jsonl", n_docs=40, n_topics=2, vocab_size=40,
                                      format="jsonl")),
    "ingest": lambda: run(IngestRequest("good.jsonl", "c.zarr")),
    "transform": lambda: run(TransformRequest("m.zarr", "c.zarr", "e.zarr")),
    "export": lambda: run(ExportRequest("m.zarr", "x.csv")),
    "index": lambda: run(IndexRequest("m.zarr", "i.zarr")),
    "neighbors --all": lambda: run(KnnGraphRequest("m.zarr", "g.csv", k=2)),
    "neighbors --queries": lambda: run(BatchNeighborsRequest("m.zarr", "h.csv", queries=["word"],
                                                             k=2)),
    "CorpusWriter": lambda: CorpusWriter("c.zarr", n_features=4, feature_scheme={}),
}


@pytest.mark.parametrize("writer", list(WRITERS))
def test_every_writer_refuses_an_existing_output_with_the_one_sentence(
    stores, monkeypatch, writer,
):
    monkeypatch.chdir(stores)
    before = sorted(os.listdir(stores))
    with pytest.raises(OutputExistsError) as info:
        WRITERS[writer]()
    name, said, rest = str(info.value).partition(" already exists")
    assert said and " already exists" + rest == SENTENCE, str(info.value)
    assert os.path.basename(name) in os.listdir(stores)
    innermost = info.traceback[-1]
    assert innermost.frame.code.raw is refuse_existing.__code__, (
        f"{writer} words the refusal itself ({innermost.path}:{innermost.lineno + 1})")
    assert sorted(os.listdir(stores)) == before  # nothing written, no lock file left


def test_open_output_without_overwrite_refuses_what_is_committed(tmp_path):
    target = tmp_path / "out.csv"
    with open_output(target, kind="file", overwrite=False) as out:  # nothing there: held
        assert out.path == target
    target.write_text("a\n")
    with pytest.raises(OutputExistsError) as info:
        with open_output(target, kind="file", overwrite=False):
            pytest.fail("held an output that exists without overwrite")
    assert str(info.value) == f"{target}{SENTENCE}"
    assert info.traceback[-1].frame.code.raw is refuse_existing.__code__
    with open_output(target, kind="file", overwrite=True):  # asked to replace it: held
        pass
    with open_output(target, kind="file"):  # not looked at: the caller decides
        pass
    assert target.read_text() == "a\n"


def test_fit_refuses_with_the_one_sentence_and_its_own_remedies(stores, monkeypatch):
    """fit says what is there (the checkpoint it could continue) and how to resume or replace
    it, in the same sentence as every writer, from the same function."""
    from sphdist.jobs import run
    from sphdist.jobs.fit import FitRequest

    monkeypatch.chdir(stores)
    before = sorted(os.listdir(stores))
    with pytest.raises(OutputExistsError) as info:
        run(FitRequest("c.zarr", "m.zarr", n_components=2, max_iter=3, callback=None))
    message = str(info.value)
    named, said, _ = message.partition(" already exists: ")
    assert said and os.path.basename(named) == "m.zarr", message
    assert "To resolve this, " in message and "overwrite=True" in message
    assert message.endswith("(or choose another output).")
    assert info.traceback[-1].frame.code.raw is refuse_existing.__code__
    assert sorted(os.listdir(stores)) == before


def test_fit_refusal_renders_its_remedies_as_commands(stores, monkeypatch):
    monkeypatch.chdir(stores)
    result = CliRunner().invoke(main, ["--quiet", "fit", "-i", "c.zarr", "-o", "m.zarr",
                                       "-r", "2", "--max-iter", "3"])
    assert result.exit_code == 1, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert "m.zarr already exists: " in line, line
    assert "sphdist fit " in line and "--overwrite" in line and "--output" in line, line
    assert "overwrite=True" not in line and "FitRequest" not in line, line


def test_synth_refuses_a_text_file_in_an_object_store_that_is_there():
    """A JSON Lines file in an object store has no manifest: synth looks for the file."""
    import uuid

    url = f"memory://refusal-{uuid.uuid4().hex[:8]}/docs.jsonl"
    run(SynthRequest(output=url, n_docs=5, n_topics=2, vocab_size=10))
    with pytest.raises(OutputExistsError) as info:
        run(SynthRequest(output=url, n_docs=6, n_topics=2, vocab_size=10))
    assert str(info.value) == f"{url}{SENTENCE}"
    run(SynthRequest(output=url, n_docs=6, n_topics=2, vocab_size=10,
                     overwrite=True))  # asked: replaced
