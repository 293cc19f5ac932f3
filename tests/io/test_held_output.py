"""The held output is what writes: a writer commits through :meth:`Output.commit` (issue 32).

A writer handed an :class:`~sphdist.io.Output` commits through it, so the hold is checked
just before the commit: an Output whose block has ended (its lock released), or whose lock
was lost, commits nothing. ``transform`` passes its held output down to the embedding writer,
``fit`` to :func:`~sphdist.io.model.save_checkpoint`, ``index`` to
:func:`~sphdist.io.index.write_index`, ``ingest`` and ``synth`` to the corpus writer; the jobs
that write one file (export, neighbours' tables, figures, synth's texts) commit it through
:meth:`~sphdist.io.Output.file`.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.errors import OutputLockedError
from sphdist.io import Output, open_output
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.io.embedding import EmbeddingWriter, open_embedding, write_embedding_block
from sphdist.io.index import open_index, write_index
from sphdist.io.model import load_checkpoint, open_model, save_checkpoint
from sphdist.jobs import run
from sphdist.jobs.export import ExportRequest
from sphdist.jobs.neighbors import BatchNeighborsRequest, IndexRequest, KnnGraphRequest, write_hits
from sphdist.jobs.plotting import PlotConvergenceRequest, PlotEmbeddingRequest, save_figure
from sphdist.jobs.synth import SynthRequest
from sphdist.jobs.transform import TransformRequest

from .._cli_stores import cli_ok, working_directory

N, R = 6, 2


def _write(writer):
    """Fill the writer's staging tree with a small V, then commit it."""
    V = np.zeros((R, N))
    V[0] = 1.0
    block = write_embedding_block(str(writer.staging), 0, V, np.zeros(N, dtype=bool))
    return writer.commit(doc_ids=np.array([str(j) for j in range(N)]), labels=None,
                         label_names=None, attrs={}, blocks=[block])


def test_a_writer_given_an_output_whose_block_ended_commits_nothing(tmp_path):
    target = tmp_path / "e.zarr"
    with open_output(target) as out:
        pass  # the lock is released here: another writer may take it
    with pytest.raises(OutputLockedError, match="e.zarr was not committed"):
        with EmbeddingWriter(out, n_components=R, chunks=(N,)) as writer:
            _write(writer)
    assert os.listdir(tmp_path) == []  # nothing committed, the staging tree removed


def test_a_writer_given_an_output_that_lost_its_lock_commits_nothing(tmp_path, monkeypatch):
    target = tmp_path / "e.zarr"
    with open_output(target) as out:
        with EmbeddingWriter(out, n_components=R, chunks=(N,)) as writer:
            def lost():
                raise OutputLockedError("the lease expired")
            monkeypatch.setattr(out._hold, "check", lost)  # an expired lease, say
            with pytest.raises(OutputLockedError, match="the lease expired"):
                _write(writer)
    assert not target.exists()
    assert sorted(os.listdir(tmp_path)) == []  # lock released, staging removed


def test_a_writer_given_its_held_output_commits_through_it(tmp_path):
    target = tmp_path / "e.zarr"
    with open_output(target) as out:
        with EmbeddingWriter(out, n_components=R, chunks=(N,)) as writer:
            embedding = _write(writer)
    assert embedding.V.shape == (R, N) and open_embedding(target).V.shape == (R, N)


def test_a_writer_given_a_path_holds_it_until_the_commit(tmp_path):
    target = tmp_path / "e.zarr"
    with EmbeddingWriter(target, n_components=R, chunks=(N,)) as writer:
        with pytest.raises(OutputLockedError), open_output(target):
            pass  # a second writer is refused while the first holds it
        _write(writer)
        with open_output(target):  # released at the commit
            pass
    assert open_embedding(target).V.shape == (R, N)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A small corpus and a model fitted on it."""
    root = tmp_path_factory.mktemp("held")
    with working_directory(root):
        cli_ok("synth", "--n-docs", 40, "--n-topics", 2, "--vocab-size", 40, "--format",
               "jsonl", "-o", "in.jsonl")
        cli_ok("ingest", "in.jsonl", "-o", "c.zarr")
        cli_ok("fit", "-i", "c.zarr", "-o", "m.zarr", "-r", 2, "--max-iter", 3)
    return root


def commits_of(monkeypatch):
    """The names of the outputs ``Output.commit`` commits from now on, in order (a spy that
    still commits)."""
    commits = []
    real = Output.commit

    def spy(self, staging):
        commits.append(os.path.basename(self.path))
        return real(self, staging)

    monkeypatch.setattr(Output, "commit", spy)
    return commits


def test_transform_commits_through_the_output_it_holds(fitted, monkeypatch):
    commits = commits_of(monkeypatch)
    monkeypatch.chdir(fitted)
    embedding = run(TransformRequest("m.zarr", "c.zarr", "e.zarr"))
    assert commits == ["e.zarr"]
    assert os.path.isabs(embedding.path) and embedding.V.shape[1] == 40


def test_transform_whose_hold_is_lost_commits_nothing(fitted, monkeypatch):
    def lost(self):
        raise OutputLockedError("the lease expired")

    from sphdist.io import _lock

    monkeypatch.setattr(_lock.FileHold, "check", lost)
    monkeypatch.chdir(fitted)
    with pytest.raises(OutputLockedError, match="the lease expired"):
        run(TransformRequest("m.zarr", "c.zarr", "lost.zarr"))
    assert not os.path.exists("lost.zarr")
    assert not [name for name in os.listdir(".") if name.startswith("lost.zarr")]


def _checkpoint(fitted):
    """What a checkpoint of the fitted model holds: its state and record."""
    model = open_model(fitted / "m.zarr")
    return model.state((model.shape[2],)), {"params": model.params, "corpus": model.corpus,
                                            "idf": model.idf}


def test_a_checkpoint_given_an_output_whose_block_ended_commits_nothing(fitted, tmp_path):
    state, record = _checkpoint(fitted)
    with open_output(tmp_path / "m.zarr") as out:
        pass
    with pytest.raises(OutputLockedError, match="m.zarr was not committed"):
        save_checkpoint(out, state, **record)
    assert os.listdir(tmp_path) == []  # nothing committed, the staging tree removed


def test_a_checkpoint_given_a_path_or_its_held_output_is_committed(fitted, tmp_path):
    state, record = _checkpoint(fitted)
    save_checkpoint(tmp_path / "a.zarr", state, **record)  # held for the call
    with open_output(tmp_path / "b.zarr") as out:
        save_checkpoint(out, state, **record)
        with pytest.raises(OutputLockedError):  # a path another writer holds: refused
            save_checkpoint(tmp_path / "b.zarr", state, **record)
    for name in ("a.zarr", "b.zarr"):
        assert open_model(tmp_path / name).n_iter == open_model(fitted / "m.zarr").n_iter


def test_fit_commits_every_checkpoint_through_the_output_it_holds(fitted, monkeypatch):
    commits = commits_of(monkeypatch)
    monkeypatch.chdir(fitted)
    result = CliRunner().invoke(main, ["--quiet", "fit", "-i", "c.zarr", "-o", "m2.zarr",
                                       "-r", "2", "--max-iter", "3"])
    assert result.exit_code == 0, result.output
    assert commits and set(commits) == {"m2.zarr"}


def test_an_index_given_an_output_whose_block_ended_commits_nothing(tmp_path):
    with open_output(tmp_path / "i.zarr") as out:
        pass
    with pytest.raises(OutputLockedError, match="i.zarr was not committed"):
        write_index(out, np.zeros(4, np.uint8), attrs={})
    assert os.listdir(tmp_path) == []
    write_index(tmp_path / "i.zarr", np.zeros(4, np.uint8), attrs={})  # a path: held for it
    assert open_index(tmp_path / "i.zarr").attrs["faiss_nbytes"] == 4


def test_index_commits_through_the_output_it_holds(fitted, monkeypatch):
    commits = commits_of(monkeypatch)
    monkeypatch.chdir(fitted)
    run(IndexRequest("m.zarr", "i.zarr"))
    assert commits == ["i.zarr"]


def test_a_corpus_given_an_output_whose_block_ended_commits_nothing(tmp_path):
    with open_output(tmp_path / "c.zarr") as out:
        pass
    with pytest.raises(OutputLockedError, match="c.zarr was not committed"):
        with CorpusWriter(out, n_features=3, feature_scheme={"type": "hashing"}) as writer:
            writer.write_chunk(sp.csr_matrix(np.eye(3)), ["a", "b", "c"])
            writer.commit()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("args", [
    ("synth", "--n-docs", 40, "--n-topics", 2, "--vocab-size", 40, "-o", "s.zarr"),
    ("ingest", "in.jsonl", "-o", "c2.zarr"),
])
def test_ingest_and_synth_commit_through_the_output_they_hold(fitted, monkeypatch, args):
    commits = commits_of(monkeypatch)
    monkeypatch.chdir(fitted)
    result = CliRunner().invoke(main, ["--quiet", *map(str, args)])
    assert result.exit_code == 0, result.output
    assert commits == [args[-1]]


def test_a_file_given_an_output_whose_block_ended_commits_nothing(tmp_path):
    with open_output(tmp_path / "t.csv") as out:
        pass
    with pytest.raises(OutputLockedError, match="t.csv was not committed"):
        with out.file() as staging:
            staging.write_text("a\n")
    assert os.listdir(tmp_path) == []  # nothing committed, the temporary removed


def test_hits_given_an_output_whose_block_ended_commit_nothing(tmp_path):
    with open_output(tmp_path / "h.csv") as out:
        pass
    with pytest.raises(OutputLockedError, match="h.csv was not committed"):
        write_hits({"query": ["a"], "rank": [1]}, out)
    assert os.listdir(tmp_path) == []
    with open_output(tmp_path / "h.csv") as out:
        write_hits({"query": ["a"], "rank": [1]}, out)
    assert (tmp_path / "h.csv").read_text().splitlines() == ["query,rank", "a,1"]


def test_a_figure_given_an_output_whose_block_ended_commits_nothing(tmp_path):
    from matplotlib.figure import Figure

    with open_output(tmp_path / "f.png") as out:
        pass
    with pytest.raises(OutputLockedError, match="f.png was not committed"):
        save_figure(Figure(), out)
    assert os.listdir(tmp_path) == []
    with open_output(tmp_path / "f.png") as out:
        save_figure(Figure(), out)
    assert (tmp_path / "f.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


#: The single-file writers, each as a job writing ``name`` in the fitted folder, and the
#: files it commits (an npy export commits its sidecar of ids first).
FILE_JOBS = {
    "export parquet": (lambda name: run(ExportRequest("m.zarr", name)), "x.parquet", ()),
    "export npy": (lambda name: run(ExportRequest("m.zarr", name)), "x.npy", ("x.ids.csv",)),
    "neighbors --all": (lambda name: run(KnnGraphRequest("m.zarr", name, k=2)), "g.csv", ()),
    "neighbors --queries": (lambda name: run(BatchNeighborsRequest(
        "m.zarr", name, queries=[f"doc{i:02d}" for i in range(10)], ids=True, k=2,
        on_error="skip")), "h.jsonl", ()),
    "plot convergence": (lambda name: run(PlotConvergenceRequest("m.zarr", name)), "c.png", ()),
    "plot embedding": (lambda name: run(PlotEmbeddingRequest("m.zarr", name)), "e.png", ()),
    "synth jsonl": (lambda name: run(SynthRequest(output=name, n_docs=20, n_topics=2,
                                                  vocab_size=20)), "s.jsonl", ()),
    "synth csv": (lambda name: run(SynthRequest(output=name, n_docs=20, n_topics=2,
                                                vocab_size=20)), "s.csv", ()),
}


@pytest.mark.parametrize("job", list(FILE_JOBS))
def test_a_file_job_commits_through_the_output_it_holds(fitted, monkeypatch, job):
    run, name, before = FILE_JOBS[job]
    commits = commits_of(monkeypatch)
    monkeypatch.chdir(fitted)
    run("ok-" + name)
    assert commits == [*("ok-" + b for b in before), "ok-" + name]
    assert os.path.getsize("ok-" + name) > 0


@pytest.mark.parametrize("job", list(FILE_JOBS))
def test_a_file_job_whose_hold_is_lost_commits_nothing(fitted, monkeypatch, job):
    run, name, before = FILE_JOBS[job]

    def lost(self):
        raise OutputLockedError("the lease expired")

    from sphdist.io import _lock

    monkeypatch.setattr(_lock.FileHold, "check", lost)
    monkeypatch.chdir(fitted)
    with pytest.raises(OutputLockedError, match="the lease expired"):
        run("lost-" + name)
    assert not [n for n in os.listdir(".") if "lost-" in n]  # no file, temporary or lock


def _interrupted(fitted, tmp_path):
    """A copy of the fitted model as a commit interrupted between its renames left it."""
    import shutil

    out = tmp_path / "m.zarr"
    shutil.copytree(fitted / "m.zarr", tmp_path / "m.zarr.old")
    return out


def test_a_checkpoint_is_recovered_through_the_output_its_writer_holds(fitted, tmp_path):
    out = _interrupted(fitted, tmp_path)
    with open_output(out) as held:
        model = load_checkpoint(held, recover=True)
    assert model.n_iter == open_model(fitted / "m.zarr").n_iter
    assert sorted(os.listdir(tmp_path)) == ["m.zarr"]  # put back, the lock released


def test_a_recovery_given_an_output_whose_block_ended_moves_nothing(fitted, tmp_path):
    out = _interrupted(fitted, tmp_path)
    with open_output(out) as held:
        pass
    with pytest.raises(OutputLockedError, match="m.zarr was not recovered"):
        load_checkpoint(held, recover=True)
    assert sorted(os.listdir(tmp_path)) == ["m.zarr.old"]


def test_a_recovery_is_not_asked_of_a_path(fitted, tmp_path):
    """Only the writer holding the output recovers it: a path opens no lock of its own."""
    out = _interrupted(fitted, tmp_path)
    with pytest.raises(TypeError, match="pass the Output it holds"):
        load_checkpoint(out, recover=True)
    assert sorted(os.listdir(tmp_path)) == ["m.zarr.old"]
    assert load_checkpoint(out).n_iter == open_model(fitted / "m.zarr").n_iter  # read in place


def test_a_file_in_an_object_store_is_committed_through_its_output():
    """One upload, at the commit, only while held; a file there is refused without overwrite
    (an object store's file has no manifest: what is there is looked for, not a commit)."""
    import uuid

    from sphdist.errors import OutputExistsError
    from sphdist.io import exists, open_file

    bucket = f"memory://held-{uuid.uuid4().hex[:8]}"
    with open_output(f"{bucket}/t.csv", kind="file") as out:
        with out.file() as staging:
            staging.write_text("a\n")
            assert not exists(f"{bucket}/t.csv")  # nothing there before the commit
    with open_file(f"{bucket}/t.csv") as f:
        assert f.read() == b"a\n"
    with pytest.raises(OutputExistsError, match="t.csv already exists"):
        with open_output(f"{bucket}/t.csv", kind="file", overwrite=False):
            pass
    with open_output(f"{bucket}/u.csv", kind="file") as out:
        pass
    with pytest.raises(OutputLockedError, match="u.csv was not committed"):
        with out.file() as staging:
            staging.write_text("b\n")
    assert not exists(f"{bucket}/u.csv")
