"""Bad input, one test per row of the README's table, driven through the command line.

Every case must end with exit status 1 (2 for option values click rejects), exactly one line
``Error: ...`` on stderr naming the file/document/value and the remedy, no traceback, and no
output left behind that looks valid.
"""

from __future__ import annotations

import errno
import os
import shutil

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.io.corpus_writer import CorpusWriter

from .reference import random_corpus

M, N, R = 30, 40, 3


@pytest.fixture
def runner():
    return CliRunner()


def _write(path, X, *, sizes=(10, 10, 20), scheme=None, idf=None):
    scheme = scheme or {"type": "hashing", "n_features": X.shape[0]}
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    with CorpusWriter(path, n_features=X.shape[0], feature_scheme=scheme) as w:
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            w.write_chunk(X[:, a:b], [f"doc{j}" for j in range(a, b)])
        return w.commit(idf=np.ones(X.shape[0]) if idf is None else idf)


@pytest.fixture
def corpus(tmp_path):
    return _write(tmp_path / "corpus.zarr", random_corpus(M, N, seed=1))


def _run(runner, scheduler, *args):
    command, *rest = args
    extra = ["--scheduler-address", scheduler] if command in ("fit", "transform") else []
    return runner.invoke(main, ["--quiet", command, *rest, *extra])


def _one_error_line(result, *needles, code=1):
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("Error: ")
    for needle in needles:
        assert needle in line, line
    if code == 1:
        assert "To resolve this" in line or "Errno" in line, line
    return line


def _nothing_left(directory, *keep):
    names = sorted(p.name for p in directory.iterdir())
    assert names == sorted(keep), names


def _fit(runner, scheduler, input_, out, *more):
    return _run(runner, scheduler, "fit", "-i", str(input_), "-o", str(out), "-r", str(R),
                "--max-iter", "2", *more)


# -- values ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_value_in_corpus(runner, scheduler, corpus, tmp_path, value):
    g = zarr.open_group(store=str(corpus.path), mode="r+")
    data = g["X/00001/data"][:]
    data[3] = value
    g["X/00001/data"][:] = data
    doc = 10 + int(np.searchsorted(g["X/00001/indptr"][:], 3, side="right")) - 1
    result = _fit(runner, scheduler, corpus.path, tmp_path / "m.zarr")
    _one_error_line(result, f"document {doc} (chunk 1)", "non-finite", "clean the source")
    _nothing_left(tmp_path, "corpus.zarr")


def test_non_finite_value_in_dense_input(runner, scheduler, tmp_path):
    X = np.random.default_rng(0).random((N, M))
    X[17, 4] = np.nan
    zarr.create_array(str(tmp_path / "dense.zarr"), data=X, chunks=(10, M))
    result = _fit(runner, scheduler, tmp_path / "dense.zarr", tmp_path / "m.zarr")
    _one_error_line(result, "sample 17", "feature 4", "non-finite")
    _nothing_left(tmp_path, "dense.zarr")


def test_all_zero_dense_input_is_refused_as_having_nothing_to_fit(runner, scheduler, tmp_path):
    """Issue 44 item 5: an all-zero dense input "converged" instead of being refused."""
    with zarr.config.set({"array.write_empty_chunks": True}):  # every chunk file stored
        zarr.create_array(str(tmp_path / "dense.zarr"), data=np.zeros((N, M)), chunks=(10, M))
    result = _fit(runner, scheduler, tmp_path / "dense.zarr", tmp_path / "m.zarr")
    _one_error_line(result, "dense.zarr", "all zero", "nothing to fit")
    _nothing_left(tmp_path, "dense.zarr")
    # as zarr writes it by default: no chunk file at all, refused as missing chunks
    zarr.create_array(str(tmp_path / "unwritten.zarr"), data=np.zeros((N, M)), chunks=(10, M))
    result = _fit(runner, scheduler, tmp_path / "unwritten.zarr", tmp_path / "m.zarr")
    _one_error_line(result, "unwritten.zarr", "chunk file c/0/0 and 3 more are missing")
    _nothing_left(tmp_path, "dense.zarr", "unwritten.zarr")


def test_dense_input_with_a_missing_chunk_file_is_refused_not_read_as_zeros(
        runner, scheduler, tmp_path):
    """Issue 44 item 5: zarr reads a missing chunk as its fill value; a fit took it as data."""
    X = np.random.default_rng(0).random((N, M)) + 0.1  # no chunk is all fill value
    zarr.create_array(str(tmp_path / "dense.zarr"), data=X, chunks=(10, M))
    chunk = tmp_path / "dense.zarr" / "c" / "1" / "0"
    assert chunk.is_file()
    chunk.unlink()
    result = _fit(runner, scheduler, tmp_path / "dense.zarr", tmp_path / "m.zarr")
    _one_error_line(result, "dense.zarr", "c/1/0", "missing")
    _nothing_left(tmp_path, "dense.zarr")


def test_complex_dense_input_is_refused_not_truncated_to_its_real_part(
        runner, scheduler, tmp_path):
    """Issue 44 item 5: a complex input lost its imaginary part with a raw ComplexWarning."""
    X = np.random.default_rng(0).random((N, M)) * (1 + 1j)
    zarr.create_array(str(tmp_path / "dense.zarr"), data=X, chunks=(10, M))
    result = _fit(runner, scheduler, tmp_path / "dense.zarr", tmp_path / "m.zarr")
    _one_error_line(result, "dense.zarr", "complex128")
    _nothing_left(tmp_path, "dense.zarr")


def test_all_empty_corpus(runner, scheduler, tmp_path):
    _write(tmp_path / "empty.zarr", sp.csc_matrix((M, N)))
    result = _fit(runner, scheduler, tmp_path / "empty.zarr", tmp_path / "m.zarr")
    _one_error_line(result, "empty.zarr", "empty")
    _nothing_left(tmp_path, "empty.zarr")


@pytest.mark.parametrize("r", [str(min(M, N) + 1), "1000"])
def test_too_many_components(runner, scheduler, corpus, tmp_path, r):
    result = _run(runner, scheduler, "fit", "-i", str(corpus.path), "-o",
                  str(tmp_path / "m.zarr"), "-r", r)
    _one_error_line(result, f"-r {r}", f"1 <= -r <= {min(M, N)}")  # the option typed
    _nothing_left(tmp_path, "corpus.zarr")


@pytest.mark.parametrize(
    "option, value",
    [("-r", "0"), ("-r", "-3"), ("-r", "two"), ("--max-iter", "-1"), ("--tol", "-0.1"),
     ("--tol", "x"), ("--seed", "-5"), ("--lam", "fast"), ("--lam", "1"), ("--mu", "-1"),
     ("--checkpoint-every", "0"), ("--n-workers", "-1"), ("--retries", "-1")],
)
def test_negative_or_non_numeric_option(runner, scheduler, corpus, tmp_path, option, value):
    result = _run(runner, scheduler, "fit", "-i", str(corpus.path), "-o",
                  str(tmp_path / "m.zarr"), option, value)
    assert result.exit_code in (1, 2), result.output
    assert "Traceback" not in result.output
    assert value in result.stderr and option.lstrip("-") in result.stderr.replace("'", "")
    _nothing_left(tmp_path, "corpus.zarr")


# -- not a corpus ----------------------------------------------------------------------------


@pytest.mark.parametrize("make", ["directory", "file", "zarr-group"])
def test_path_that_is_not_a_corpus(runner, scheduler, tmp_path, make):
    path = tmp_path / "thing"
    if make == "directory":
        path.mkdir()
        (path / "notes.txt").write_text("hello")
    elif make == "file":
        path.write_text("hello")
    else:
        zarr.open_group(store=str(path), mode="w").attrs["something"] = 1
    result = _fit(runner, scheduler, path, tmp_path / "m.zarr")
    _one_error_line(result, str(path))
    _nothing_left(tmp_path, "thing")


def _delete_chunk(g, path):
    shutil.rmtree(path / "X" / "00001")


def _wrong_nnz(g, path):
    g["X/00001/indptr"][-1:] = np.array([g["X/00001/indptr"][-1] + 2])


def _indptr_not_monotone(g, path):
    indptr = g["X/00001/indptr"][:]
    indptr[4], indptr[5] = indptr[5] + 1, indptr[4]
    indptr[4] = indptr[5] + 1
    g["X/00001/indptr"][:] = indptr


def _index_out_of_range(g, path):
    indices = g["X/00001/indices"][:]
    indices[0] = M + 7
    g["X/00001/indices"][:] = indices


def _truncated_chunk_file(g, path):
    chunk = next(p for p in (path / "X" / "00001" / "data").rglob("*")
                 if p.is_file() and p.name != "zarr.json")
    chunk.write_bytes(chunk.read_bytes()[:7])


@pytest.mark.parametrize(
    "corrupt, needle",
    [(_delete_chunk, "chunk 1 (X/00001) is missing"),
     (_wrong_nnz, "chunk 1 has inconsistent CSC arrays"),
     (_indptr_not_monotone, "chunk 1 has a decreasing column pointer"),
     (_index_out_of_range, f"chunk 1 has feature index {M + 7}"),
     (_truncated_chunk_file, "chunk 1 (X/00001) is corrupted")],
)
def test_corrupted_corpus(runner, scheduler, corpus, tmp_path, corrupt, needle):
    corrupt(zarr.open_group(store=str(corpus.path), mode="r+"), corpus.path)
    result = _fit(runner, scheduler, corpus.path, tmp_path / "m.zarr")
    _one_error_line(result, str(corpus.path), needle, "re-ingest")
    _nothing_left(tmp_path, "corpus.zarr")


@pytest.mark.parametrize(
    "tag", [None, {"kind": "corpus"}, {"kind": "corpus", "format_version": 99}]
)
def test_missing_or_wrong_format_version(runner, scheduler, corpus, tmp_path, tag):
    g = zarr.open_group(store=str(corpus.path), mode="r+")
    if tag is None:
        del g.attrs["sphdist"]
    else:
        g.attrs["sphdist"] = tag
    result = _fit(runner, scheduler, corpus.path, tmp_path / "m.zarr")
    _one_error_line(result, str(corpus.path))
    _nothing_left(tmp_path, "corpus.zarr")


# -- mismatches -------------------------------------------------------------------------------


@pytest.fixture
def model(runner, scheduler, corpus, tmp_path):
    out = tmp_path / "m.zarr"
    result = _fit(runner, scheduler, corpus.path, out)
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("other", ["scheme", "idf"])
def test_model_applied_to_corpus_with_another_feature_scheme_or_idf(
    runner, scheduler, corpus, model, tmp_path, other
):
    X = random_corpus(M, N, seed=1)
    if other == "scheme":
        new = _write(tmp_path / "other.zarr", X,
                     scheme={"type": "hashing", "n_features": M, "alternate_sign": True})
    else:
        new = _write(tmp_path / "other.zarr", X, idf=np.linspace(1, 2, M))
    result = _run(runner, scheduler, "transform", "-m", str(model), "-i", str(new.path),
                  "-o", str(tmp_path / "emb.zarr"))
    _one_error_line(result, "other.zarr", "feature scheme" if other == "scheme" else "idf",
                    "--like")
    _nothing_left(tmp_path, "corpus.zarr", "m.zarr", "other.zarr")


@pytest.mark.parametrize("change", ["corpus", "n_components", "seed", "lam"])
def test_resume_against_another_corpus_or_parameters(
    runner, scheduler, corpus, model, tmp_path, change
):
    before = (model / "zarr.json").read_bytes()
    args = {"corpus": [], "n_components": ["-r", "2"], "seed": ["--seed", "7"],
            "lam": ["--lam", "3"]}[change]
    input_ = corpus.path
    if change == "corpus":
        input_ = _write(tmp_path / "other.zarr", random_corpus(M, N, seed=9)).path
    result = _run(runner, scheduler, "fit", "-i", str(input_), "-o", str(model),
                  "-r", str(R), "--max-iter", "4", "--resume", *args)
    line = _one_error_line(result, str(model), "resume with the")
    expected = {"corpus": "fingerprint", "n_components": "-r: 3 -> 2",  # the options typed
                "seed": "--seed: 0 -> 7", "lam": "--lam: 'exact' -> 3.0"}[change]
    assert expected in line
    assert (model / "zarr.json").read_bytes() == before  # the checkpoint is untouched


# -- output location --------------------------------------------------------------------------


def _failing_store(err):
    def set_(self, key, value):
        raise OSError(err, os.strerror(err), str(key))
    return set_


def test_read_only_output_location(runner, scheduler, corpus, tmp_path, monkeypatch):
    out_dir = tmp_path / "ro"
    out_dir.mkdir()
    if os.geteuid() != 0:
        out_dir.chmod(0o555)  # the real thing
    else:  # root ignores permissions: the store raises what a read-only filesystem raises
        monkeypatch.setattr("zarr.storage.LocalStore.set", _failing_store(errno.EROFS))
    try:
        result = _fit(runner, scheduler, corpus.path, out_dir / "m.zarr")
        line = _one_error_line(result)
        assert "Permission denied" in line or "Read-only file system" in line
        assert "writ" in line.split("To resolve this")[1]
        _nothing_left(out_dir)
    finally:
        out_dir.chmod(0o755)


def test_full_output_location_keeps_the_previous_checkpoint(
    runner, scheduler, corpus, model, tmp_path, monkeypatch
):
    before = (model / "zarr.json").read_bytes()
    monkeypatch.setattr("zarr.storage.LocalStore.set", _failing_store(errno.ENOSPC))
    result = _fit(runner, scheduler, corpus.path, model, "--max-iter", "4", "--resume")
    _one_error_line(result, "No space left on device", "free space there")
    assert (model / "zarr.json").read_bytes() == before
    _nothing_left(tmp_path, "corpus.zarr", "m.zarr")
