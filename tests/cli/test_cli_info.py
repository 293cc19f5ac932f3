"""``sphdist info``: corpus, model (checkpoint state, histories), embedding, top terms."""

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.errors import ParameterError
from sphdist.io import _atomic
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.io.model import open_model
from sphdist.jobs import run
from sphdist.jobs.fit import FitRequest
from sphdist.jobs.info import InfoRequest

from ..reference import random_corpus

pytestmark = pytest.mark.usefixtures("sync_scheduler")

M, N, R = 30, 40, 3
WORDS = [f"w{i:02d}" for i in range(M)]


def _corpus(path, vocabulary):
    X = random_corpus(M, N, seed=4)
    labels = np.arange(N) % 3
    scheme = {"type": "vocabulary", "n_features": M} if vocabulary else {"type": "hashing",
                                                                          "n_features": M}
    with CorpusWriter(path, n_features=M, feature_scheme=scheme, label_names=["a", "b", "c"],
                      vocabulary=WORDS if vocabulary else None) as w:
        for a, b in ((0, 16), (16, 32), (32, N)):
            w.write_chunk(X[:, a:b], [f"d{j}" for j in range(a, b)], labels[a:b])
        return w.commit(idf=np.linspace(1, 2, M))


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    root = tmp_path_factory.mktemp("info")
    out = {}
    import dask

    with dask.config.set(scheduler="sync"):
        for name, vocab in (("vocab", True), ("hashed", False)):
            corpus = _corpus(root / f"{name}.zarr", vocab)
            model = run(FitRequest(corpus.path, root / f"{name}.model.zarr", n_components=R,
                                   max_iter=8, tol=0, callback=None,
                                   checkpoint_every=100))
            out[name] = (corpus, model)
    return out


def _run(*args):
    result = CliRunner().invoke(main, list(map(str, args)))
    return result


def test_info_corpus(fitted):
    corpus, _ = fitted["vocab"]
    result = _run("info", corpus.path, "--json")
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["kind"] == "corpus" and info["shape"] == [M, N]
    X = corpus.to_dask().compute()
    assert info["nnz"] == X.nnz and info["density"] == pytest.approx(X.nnz / (M * N))
    assert info["chunks"] == {"n_chunks": 3, "min": 8, "max": 16}
    counts = np.bincount(np.arange(N) % 3)
    assert info["labels"] == dict(zip("abc", counts.tolist(), strict=True))
    assert info["has_vocabulary"] is True
    text = _run("info", corpus.path)
    assert "30 features x 40 documents" in text.stdout and "a 14, b 13, c 13" in text.stdout


def test_info_model_histories_and_checkpoint_state(fitted, tmp_path):
    _, model = fitted["hashed"]
    result = _run("info", model.path, "--json")
    info = json.loads(result.stdout)
    assert info["kind"] == "model" and info["n_iter"] == 8
    assert [info["n_features"], info["n_components"], info["n_documents"]] == [M, R, N]
    assert info["objective"] == [[k, model.objective[k]] for k in range(4, 9)]
    assert info["v_step_norm"][-1] == [8, model.attrs["v_step_norm"][-1]]
    assert info["checkpoint"] == {"complete": True, "state": "committed", "staging_dirs": [],
                                  "previous_kept_as_old": False}
    assert info["params"]["n_components"] == R
    # a checkpoint being written (or left by a killed run) is reported, not hidden
    staging = _atomic.staging_path(model.path)
    staging.mkdir()
    try:
        info = json.loads(_run("info", model.path, "--json").stdout)
        assert info["checkpoint"]["staging_dirs"] == [staging.name]
        assert "staging dirs present: " + staging.name in _run("info", model.path).stdout
    finally:
        staging.rmdir()


def test_top_terms(fitted):
    """Each component's positive and negative ends apart (issue 22): U is determined up to a
    rotation (and each column up to its sign), so one list by |U| mixes the two poles of an
    axis."""
    _, model = fitted["vocab"]
    result = _run("info", "--model", model.path, "--top-terms", "4", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    top = report["top_terms"]
    assert "positive and negative ends" in report["top_terms_basis"]
    U = open_model(model.path).U
    assert len(top) == R
    for c in range(R):
        column = U[:, c]
        ends = {"positive": np.argsort(-column, kind="stable"),
                "negative": np.argsort(column, kind="stable")}
        for end, order in ends.items():
            sign = 1 if end == "positive" else -1
            expected = [i for i in order if sign * column[i] > 0][:4]
            assert [t["term"] for t in top[c][end]] == [WORDS[i] for i in expected]
            np.testing.assert_array_equal([t["weight"] for t in top[c][end]], column[expected])
        assert top[c]["component"] == c
    text = _run("info", "--model", model.path, "--top-terms", "2").stdout
    assert "positive and negative ends" in text
    for c in range(R):
        line = next(x for x in text.splitlines() if x.strip().startswith(f"component {c} "))
        after = text.splitlines()[text.splitlines().index(line) + 1]
        assert "+" in line and "(-" not in line, line  # the positive end alone
        assert "(-" in after and "(+" not in after, after  # then the negative end


def test_top_terms_of_a_hashed_model_is_a_clear_error(fitted):
    _, model = fitted["hashed"]
    result = _run("info", "--model", model.path, "--top-terms", "3")
    assert result.exit_code == 1
    assert "hashed" in result.stderr and "Traceback" not in result.output


def test_top_terms_of_a_corpus_names_it_and_the_command_for_a_model(fitted):
    corpus, _ = fitted["vocab"]
    result = _run("info", corpus.path, "--top-terms", "3")
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert f"{corpus.path} is a corpus" in lines[0]
    assert "`sphdist info --model MODEL --top-terms 3`" in lines[0]


def test_the_info_request_is_what_the_command_prints(fitted):
    """``run(InfoRequest(...))`` is the command's report, top terms included; its values are
    checked when built, and a corpus asked for top terms is refused in the Python words."""
    corpus, model = fitted["vocab"]
    printed = json.loads(_run("info", "--model", model.path, "--top-terms", "2",
                              "--json").stdout)
    assert json.loads(json.dumps(run(InfoRequest(model=model.path, top_terms=2)))) == printed
    for bad in (0, 2.5, True):
        with pytest.raises(ParameterError, match="top_terms="):
            InfoRequest(model.path, top_terms=bad)
    with pytest.raises(ParameterError, match="no store"):
        InfoRequest()
    with pytest.raises(ParameterError, match=r"is a corpus.*InfoRequest\(model='MODEL', "
                                             r"top_terms=3\)"):
        run(InfoRequest(corpus.path, top_terms=3))


def test_info_missing_path(tmp_path):
    result = _run("info", tmp_path / "nope.zarr")
    assert result.exit_code == 1 and "nope.zarr" in result.stderr


def test_info_of_a_missing_url_suggests_a_listing_that_reads_urls():
    """`ls s3://bucket/` cannot read a URL: the remedy lists the prefix through fsspec."""
    result = _run("info", "memory://sphdist-nowhere/a/nope.zarr")
    assert result.exit_code == 1, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert "`ls memory://" not in line, line
    assert "fsspec" in line and "sphdist-nowhere/a" in line, line


def test_the_listing_command_of_a_path_lists_it(tmp_path):
    """``ls`` for a local folder, the AWS command line for s3, fsspec for any other URL (the
    fsspec one runs: here on fsspec's ``local://`` protocol)."""
    import shlex
    import subprocess

    from sphdist.io._fs import listing_command, location

    assert listing_command(location("/data/some dir")) == "ls '/data/some dir'"
    assert listing_command(location("s3://nosuchbucket/a")) == "aws s3 ls s3://nosuchbucket/a/"
    assert listing_command(location("file:///data/x")) == "ls /data/x"
    (tmp_path / "probe.zarr").mkdir()
    command = listing_command(location(f"local://{tmp_path}"))
    assert "fsspec" in command and not command.startswith("ls "), command
    out = subprocess.run(shlex.split(command), capture_output=True, text=True, check=True)
    assert out.stdout.split() == [f"{tmp_path}/probe.zarr"], out


class _Stop(Exception):
    pass


def test_info_of_a_checkpoint_without_v_does_not_claim_a_v(fitted, tmp_path):
    """The checkpoint of a fit stopped early (exact V-step) holds U only (issue 22: info
    printed 'V 50 x 6000')."""
    import dask

    corpus, finished = fitted["hashed"]

    def stop_at_3(state):
        if state.iteration == 3:
            raise _Stop

    with dask.config.set(scheduler="sync"), pytest.raises(_Stop):
        run(FitRequest(corpus.path, tmp_path / "k.zarr", n_components=R, max_iter=200, tol=0,
                       callback=stop_at_3, checkpoint_interval=0))  # checkpoints 1 and 2 written
    assert not open_model(tmp_path / "k.zarr").has_embedding
    info = json.loads(_run("info", tmp_path / "k.zarr", "--json").stdout)
    assert info["has_embedding"] is False and info["n_documents"] == N
    text = _run("info", tmp_path / "k.zarr").stdout
    shape = next(line for line in text.splitlines() if line.strip().startswith("shape"))
    assert f"U {M} x {R}" in shape and f"V {R} x {N}" not in shape, shape
    assert "no V stored" in shape, shape
    # a finished model holds V, and says so
    assert json.loads(_run("info", finished.path, "--json").stdout)["has_embedding"] is True
    assert f"U {M} x {R}, V {R} x {N}" in _run("info", finished.path).stdout


def test_top_terms_of_a_hashed_model_says_the_commands_that_give_it_a_vocabulary(fitted):
    """The remedy is a pasteable command line (an ingest with --vocabulary, then the refit),
    not a bare flag: ``(--vocabulary)`` alone once replaced ``sphdist ingest --vocabulary``."""
    corpus, model = fitted["hashed"]
    result = _run("info", "--model", model.path, "--top-terms", "3")
    assert result.exit_code == 1
    line = result.stderr.strip().splitlines()[-1]
    assert "(--vocabulary)" not in line, line
    commands = re.findall(r"`([^`]*)`", line)
    assert commands, line
    ingest, fit = (c.split() for c in commands[-1].split(" && "))
    assert ingest[:2] == ["sphdist", "ingest"] and "--vocabulary" in ingest, line
    assert fit[:2] == ["sphdist", "fit"], line
    new_corpus = ingest[ingest.index("--output") + 1]
    assert fit[fit.index("--input") + 1] == new_corpus, line  # the refit reads the new corpus
    assert new_corpus != str(corpus.path), line  # and replaces neither store it read
    assert fit[fit.index("--output") + 1] != str(model.path), line
    assert "TextSpec(" not in line and "FitRequest" not in line, line  # the CLI's words


def test_top_terms_of_a_hashed_model_names_the_python_calls(fitted):
    from sphdist.errors import DataError
    from sphdist.jobs.info import top_terms

    _, model = fitted["hashed"]
    with pytest.raises(DataError) as info:
        top_terms(model.path, 3)
    message = str(info.value)
    assert "sphdist.jobs.ingest.IngestRequest.of(" in message, message
    assert "vocabulary=True" in message, message
    assert "sphdist.jobs.fit.FitRequest(" in message and "--" not in message, message


def test_top_terms_remedy_ingests_only_a_source_that_is_there(tmp_path, monkeypatch):
    """A corpus drawn by synth records ``sphdist.text.synth``, which no ingest can read: the
    remedy then says SOURCE, never a source that is not there; a recorded file that is
    there is named."""
    monkeypatch.chdir(tmp_path)
    for args in (("synth", "--n-docs", 30, "--n-topics", 2, "--vocab-size", 30, "--format",
                  "corpus", "--n-features", 64, "-o", "s.zarr"),
                 ("synth", "--n-docs", 30, "--n-topics", 2, "--vocab-size", 30, "-o", "d.jsonl"),
                 ("ingest", "d.jsonl", "--hashing", "--n-features", 64, "-o", "d.zarr"),
                 ("fit", "-i", "s.zarr", "-o", "s.model.zarr", "-r", 2, "--max-iter", 2),
                 ("fit", "-i", "d.zarr", "-o", "d.model.zarr", "-r", 2, "--max-iter", 2)):
        result = _run("--quiet", *args)
        assert result.exit_code == 0, result.output
    for model, source in (("s.model.zarr", "SOURCE"), ("d.model.zarr", "d.jsonl")):
        result = _run("info", "--model", model, "--top-terms", "3")
        assert result.exit_code == 1
        command = re.findall(r"`([^`]*)`", result.stderr)[-1].split()
        assert command[:3] == ["sphdist", "ingest", source], result.stderr
