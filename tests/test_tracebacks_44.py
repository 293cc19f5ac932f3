"""No traceback reaches a user: the cases of issue 44, items 9 and 10, driven through the CLI.

Each printed a Python traceback or a misleading message before its fix; each must now be one
line ``Error: ...`` naming the file or value, with a remedy, and a non-zero exit status.
"""

from __future__ import annotations

import errno
import json
import shutil

import dask
import numpy as np
import pytest
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.jobs import run
from sphdist.jobs.fit import FitRequest

from .reference import random_corpus
from .test_bad_input import _failing_store, _one_error_line
from .test_tracebacks import _corpus


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    root = tmp_path_factory.mktemp("fitted44")
    corpus = _corpus(root / "c.zarr")
    with dask.config.set(scheduler="sync"):
        run(FitRequest(corpus.path, root / "m.zarr", n_components=3, max_iter=3, tol=0))
    return root


def _cli(runner, *args):
    return runner.invoke(main, ["--quiet", *map(str, args)])


def _edit(path, edit):
    manifest = path / "zarr.json"
    document = json.loads(manifest.read_text())
    edit(document["attributes"])
    manifest.write_text(json.dumps(document))


@pytest.mark.parametrize("path, needle", [("/", "/: "), ("s3:///m.zarr", "s3:///m.zarr: ")])
def test_info_of_the_root_or_of_a_url_without_a_bucket(runner, path, needle):
    _one_error_line(_cli(runner, "info", path), needle)


def test_an_in_process_address_nothing_listens_at(runner, fitted, tmp_path):
    out = tmp_path / "m.zarr"
    result = _cli(runner, "fit", "-i", fitted / "c.zarr", "-o", out, "-r", 2,
                  "--scheduler-address", "inproc://x")
    _one_error_line(result, "inproc://x is not a Dask scheduler", "in-process")
    assert not out.exists()


@pytest.fixture
def no_corpus(fitted, tmp_path):
    model = shutil.copytree(fitted / "m.zarr", tmp_path / "nc.zarr")
    _edit(model, lambda a: a.pop("corpus"))
    return model


@pytest.mark.parametrize("command", [
    ["info", "M"], ["transform", "-m", "M", "-i", "C", "-o", "OUT/e.zarr"],
    ["export", "-m", "M", "-o", "OUT/x.csv"], ["neighbors", "-m", "M", "--doc-id", "d1"],
    ["fit", "-i", "C", "-o", "M", "-r", "3", "--resume"],
])
def test_a_model_without_its_corpus_attribute(runner, fitted, no_corpus, tmp_path, command):
    args = [{"M": no_corpus, "C": fitted / "c.zarr"}.get(a, a) for a in command]
    args = [str(a).replace("OUT", str(tmp_path)) for a in args]
    _one_error_line(_cli(runner, *args), str(no_corpus), "corpus")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nc.zarr"]


def test_label_names_that_are_not_a_list_of_strings(runner, fitted, tmp_path):
    corpus = shutil.copytree(fitted / "c.zarr", tmp_path / "c.zarr")
    _edit(corpus, lambda a: a.update(label_names=7))
    _one_error_line(_cli(runner, "info", corpus), str(corpus), "label_names")


@pytest.mark.parametrize("beta", ["x", 1e308])
def test_a_checkpoint_whose_extrapolation_beta_is_not_in_0_1(runner, fitted, tmp_path, beta):
    model = shutil.copytree(fitted / "m.zarr", tmp_path / "m.zarr")
    _edit(model, lambda a: a["extrapolation"].update(beta=beta))
    result = _cli(runner, "fit", "-i", fitted / "c.zarr", "-o", model, "-r", 3, "--resume",
                  "--max-iter", 5)
    _one_error_line(result, str(model), "extrapolation.beta")


def test_a_format_version_of_another_type_says_so(runner, fitted, tmp_path):
    """Issue 44 item 10: "version '1' is not supported (this sphdist reads version 1)"."""
    corpus = shutil.copytree(fitted / "c.zarr", tmp_path / "c.zarr")
    _edit(corpus, lambda a: a["sphdist"].update(format_version="1"))
    line = _one_error_line(_cli(runner, "info", corpus), str(corpus))
    assert "the string '1'" in line and "the integer 1" in line, line


def test_a_corpus_replaced_at_the_fitted_path_is_not_named_twice(runner, fitted, tmp_path):
    """Issue 44 item 10: "X is not the corpus m.zarr was fitted on (X)" after a re-ingest."""
    root = shutil.copytree(fitted, tmp_path / "copy")
    corpus, model = root / "c.zarr", root / "m.zarr"
    _edit(model, lambda a: a["corpus"].update(path=str(corpus)))
    shutil.rmtree(corpus)
    _corpus(corpus, random_corpus(30, 40, seed=7))  # re-ingested: same features, other values
    line = _one_error_line(_cli(runner, "export", "-m", model, "-o", tmp_path / "x.csv"),
                           str(corpus))
    assert "replaced since the fit" in line, line
    assert f"({corpus})" not in line, line


@pytest.mark.parametrize("sizes, needle", [
    (["--n-docs", 10, "--doc-length", 10**9], "--doc-length"), (["--n-docs", 10**12], "--n-docs")])
def test_synth_sizes_beyond_this_machine_name_the_sizes(runner, tmp_path, sizes, needle):
    """Issue 44 item 10: "MemoryError ... check the input's shape" (or "MemoryError: .")."""
    out = tmp_path / "s.zarr"
    line = _one_error_line(_cli(runner, "synth", "-o", out, "--n-topics", 2, *sizes),
                           "this machine", needle)
    assert "MemoryError" not in line and "input's shape" not in line, line
    assert not out.exists()


@pytest.mark.parametrize("case", ["long", "loop"])
def test_a_name_too_long_or_a_symbolic_link_loop_is_worded(runner, fitted, tmp_path, case):
    """Issue 44 item 10: raw "[Errno 36] File name too long: '....lock'" and "[Errno 40] Too
    many levels of symbolic links"."""
    if case == "long":
        out = tmp_path / ("a" * 250 + ".zarr")  # fits, but not with '.lock' after it
        needles = ["name is too long", "shorter"]
    else:
        (tmp_path / "loop").symlink_to(tmp_path / "loop")
        out = tmp_path / "loop" / "m.zarr"
        needles = ["loop of symbolic links", str(tmp_path / "loop")]
    line = _one_error_line(_cli(runner, "fit", "-i", fitted / "c.zarr", "-o", out, "-r", 2),
                           *needles)
    assert "Errno" not in line, line


def test_a_full_disk_names_the_output(runner, fitted, tmp_path, monkeypatch):
    """Issue 44 item 10: "[Errno 28] No space left on device ... free space there" named no
    path (the error of a write carries none)."""
    out = tmp_path / "m.zarr"
    monkeypatch.setattr("zarr.storage.LocalStore.set", _failing_store(errno.ENOSPC))
    line = _one_error_line(_cli(runner, "fit", "-i", fitted / "c.zarr", "-o", out, "-r", 2),
                           "No space left on device", "free space there")
    assert line.startswith(f"Error: {out}: "), line


def test_queries_from_an_endless_binary_stream(runner, fitted, tmp_path):
    """Issue 44 item 10: ``--queries /dev/zero`` read it whole: "MemoryError: ."."""
    out = tmp_path / "q.csv"
    line = _one_error_line(_cli(runner, "neighbors", "-m", fitted / "m.zarr", "--queries",
                                "/dev/zero", "-o", out), "/dev/zero", "binary file")
    assert "MemoryError" not in line, line
    assert not out.exists()


@pytest.mark.parametrize("score", ["evaluate_embedding", "knn_accuracy"])
@pytest.mark.parametrize("labels, needle", [
    (list("abcdefghijklmnopqrst"), "labels must be integer codes"), ("abc", "1-D"),
    (list(range(5)), "labels has 5 values"),
    ([[0, 1]] * 20, "labels must be 1-D")])
def test_labels_of_the_wrong_type_or_length_name_the_argument(score, labels, needle):
    """Issue 44 item 9: a string ``y`` or one of the wrong length: UFuncTypeError/IndexError."""
    from sphdist import metrics
    from sphdist.errors import ParameterError

    embedding = np.random.default_rng(0).random((20, 3))
    with pytest.raises(ParameterError, match=needle):
        getattr(metrics, score)(embedding, labels)
