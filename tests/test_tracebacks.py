"""No traceback reaches a user: issue 15, items 5 and 6, driven through the command line.

Each case printed a Python traceback (or only ``Aborted!``, or a misleading message) before its
fix. Every refusal must now be exactly one line ``Error: ...`` on stderr naming the file,
document or value, with a remedy, a non-zero exit status (2 for option values click rejects)
and nothing left at the output. The cases that belong to the cluster options
(``--memory-limit``, ``--dashboard-address``, ``--scheduler-address``, the worker ERROR block)
are tested with :mod:`sphdist.jobs.cluster`.
"""

from __future__ import annotations

import gzip
import json
import os
import shlex
import shutil
import subprocess
import sys

import dask
import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.jobs import run
from sphdist.jobs.fit import FitRequest
from sphdist.jobs.transform import TransformRequest

from .reference import random_corpus
from .test_bad_input import _nothing_left, _one_error_line

M, N, R = 30, 40, 3
LABELS = ["a", "b", "c"]


@pytest.fixture
def runner():
    return CliRunner()


def _cli(runner, *args):
    return runner.invoke(main, ["--quiet", *map(str, args)])


def _usage_error(result, *needles):
    """An option value click refuses: exit 2, one ``Error:`` line (after click's usage hint)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("Error: ")]
    assert len(errors) == 1, result.stderr
    assert all(line.startswith(("Usage: ", "Try ", "Error: ")) or not line for line in lines)
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def _corpus(path, X=None, *, idf=None, labels=None, label_names=LABELS, chunk=20):
    """A corpus written by the writer (valid digests), with the given idf and label codes."""
    X = random_corpus(M, N, seed=1) if X is None else X
    n = X.shape[1]
    labels = np.arange(n) % len(LABELS) if labels is None else np.asarray(labels)
    with CorpusWriter(path, n_features=X.shape[0], label_names=label_names,
                      feature_scheme={"type": "hashing", "n_features": X.shape[0]}) as w:
        for a in range(0, n, chunk):
            b = min(n, a + chunk)
            w.write_chunk(X[:, a:b], [f"d{j}" for j in range(a, b)], labels[a:b])
        return w.commit(idf=np.linspace(1, 2, X.shape[0]) if idf is None else idf)


def _jsonl(path, n=12, bom=False):
    lines = [json.dumps({"id": f"t{i}", "label": LABELS[i % 3],
                         "text": f"alpha beta gamma{i % 3} delta{i % 5}"}) for i in range(n)]
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)
    return path


class _Killed(Exception):
    """What a SIGKILL of the driver leaves: the checkpoint of the last iteration committed."""


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A corpus and two models of it: one finished, one stopped at iteration 2 of 200."""
    root = tmp_path_factory.mktemp("tracebacks")
    corpus = _corpus(root / "corpus.zarr")

    def kill_at_3(state):
        if state.iteration == 3:  # before iteration 3 is checkpointed
            raise _Killed

    with dask.config.set(scheduler="sync"):
        model = run(FitRequest(corpus.path, root / "model.zarr", n_components=R, max_iter=6,
                               tol=0, callback=None))
        for name, lam in (("killed", "exact"), ("killed_palm", "palm")):  # palm keeps V
            with pytest.raises(_Killed):
                run(FitRequest(corpus.path, root / f"{name}.zarr", n_components=R, max_iter=200,
                               tol=0, lam=lam, callback=kill_at_3, checkpoint_interval=0))
    return {"root": root, "corpus": corpus.path, "model": model.path,
            "killed": root / "killed.zarr", "killed_palm": root / "killed_palm.zarr"}


# -- ingest: sources ------------------------------------------------------------------------


def test_non_utf8_file_names_in_a_folder_source(runner, tmp_path):
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "ok.txt").write_text("hello world again")
    try:
        os.mkdir(os.path.join(os.fsencode(src), b"b\xe9"))  # a label folder, latin-1 named
        with open(os.path.join(os.fsencode(src), b"b\xe9", b"doc.txt"), "wb") as f:
            f.write(b"foo bar baz")
        with open(os.path.join(os.fsencode(src / "a"), b"bad\xff\xfe.txt"), "wb") as f:
            f.write(b"foo bar qux")
    except OSError:
        pytest.skip("this filesystem refuses file names that are not UTF-8")
    out = tmp_path / "c.zarr"
    result = _cli(runner, "ingest", src, "-o", out)
    _one_error_line(result, "a/bad\\xff\\xfe.txt", "not valid UTF-8", "--on-error skip")
    _nothing_left(tmp_path, "src")
    result = _cli(runner, "ingest", src, "-o", out, "--on-error", "skip", "--json", "--hashing")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["n_documents"], summary["n_skipped"]) == (1, 2)


@pytest.mark.parametrize("pattern, needle", [("(", "not a valid regular expression"),
                                             ("(a)(b)", "2 capturing groups")])
def test_token_pattern_that_does_not_compile_or_has_two_groups(
    runner, tmp_path, pattern, needle
):
    src = _jsonl(tmp_path / "docs.jsonl")
    result = _cli(runner, "ingest", src, "-o", tmp_path / "c.zarr", "--token-pattern", pattern)
    # named by the option typed (issue 32), its value quoted for the shell
    line = _one_error_line(result, f"--token-pattern {shlex.quote(pattern)}", needle)
    assert "(?:" in line or "\\w" in line  # the remedy is a pattern that works
    _nothing_left(tmp_path, "docs.jsonl")


@pytest.mark.parametrize("option, value", [
    ("--n-features", "99999999999999"), ("--chunk-size", "1e20"),
    ("--chunk-size", "100000000000000000000"), ("--partition-size", "100000000000000000000"),
])
def test_huge_ingest_sizes_are_usage_errors(runner, tmp_path, option, value):
    src = _jsonl(tmp_path / "docs.jsonl")
    result = _cli(runner, "ingest", src, "-o", tmp_path / "c.zarr", option, value)
    _usage_error(result, option, value)
    _nothing_left(tmp_path, "docs.jsonl")


def test_truncated_jsonl_gz_names_the_file(runner, tmp_path):
    whole = gzip.compress(_jsonl(tmp_path / "docs.jsonl", n=400).read_bytes())
    (tmp_path / "docs.jsonl").unlink()
    src = tmp_path / "docs.jsonl.gz"
    src.write_bytes(whole[: len(whole) // 2])
    result = _cli(runner, "ingest", src, "-o", tmp_path / "c.zarr")
    line = _one_error_line(result, str(src), "truncated", f"gzip -t {src}")
    assert "Aborted" not in result.output and "line" in line
    _nothing_left(tmp_path, "docs.jsonl.gz")


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_utf8_bom_is_accepted(runner, tmp_path, fmt):
    if fmt == "jsonl":
        src = _jsonl(tmp_path / "docs.jsonl", bom=True)
    else:
        src = tmp_path / "docs.csv"
        rows = "".join(f"t{i},{LABELS[i % 3]},alpha beta gamma{i}\n" for i in range(12))
        src.write_bytes(b"\xef\xbb\xbf" + f"id,label,text\n{rows}".encode())
    result = _cli(runner, "ingest", src, "-o", tmp_path / "c.zarr", "--label-field", "label",
                  "--id-field", "id", "--json", "--hashing")  # 12 documents: too few to prune
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["n_documents"], summary["n_skipped"], summary["n_labels"]) == (12, 0, 3)
    ids = zarr.open_group(str(tmp_path / "c.zarr"), mode="r")["doc_ids"][:]
    assert ids[0] == "t0"  # the first record keeps its fields


# -- corpora that lie or hold extreme values -----------------------------------------------


def _edit_attrs(path, **changes):
    g = zarr.open_group(str(path), mode="r+")
    g.attrs.update(changes)


def test_corpus_shape_attribute_of_10_to_the_12_features(runner, tmp_path):
    corpus = _corpus(tmp_path / "big.zarr")
    zarr.open_group(str(corpus.path), mode="r+").__delitem__("idf")
    _edit_attrs(corpus.path, shape=[10**12, N])
    result = _cli(runner, "fit", "-i", corpus.path, "-o", tmp_path / "m.zarr", "-r", R)
    _one_error_line(result, "big.zarr", "1000000000000", "feature_scheme", "re-ingest")
    _nothing_left(tmp_path, "big.zarr")


def _overcommit_heuristic():
    try:
        with open("/proc/sys/vm/overcommit_memory") as f:
            return f.read().strip() == "0"
    except OSError:
        return False


@pytest.mark.skipif(not _overcommit_heuristic(),
                    reason="an allocation of 22 TiB fails at once only under Linux's heuristic "
                           "overcommit (vm.overcommit_memory = 0)")
def test_corpus_consistently_claiming_10_to_the_12_features(runner, scheduler, tmp_path):
    corpus = _corpus(tmp_path / "big.zarr")
    zarr.open_group(str(corpus.path), mode="r+").__delitem__("idf")
    _edit_attrs(corpus.path, shape=[10**12, N],
                feature_scheme={"type": "hashing", "n_features": 10**12})
    result = _cli(runner, "fit", "-i", corpus.path, "-o", tmp_path / "m.zarr", "-r", R,
                  "--scheduler-address", scheduler)
    # the first allocation of m entries fails: the occurring-features mask (m,), U (m, r), or
    # the row pointers (m + 1,) of a held chunk made row-major
    _one_error_line(result, "MemoryError", "TiB for an array with shape (100000000000",
                    "sphdist info")
    _nothing_left(tmp_path, "big.zarr")


def test_value_whose_square_overflows_is_not_called_nan(runner, scheduler, tmp_path):
    X = random_corpus(M, N, seed=1)
    X.data[3] = 1e300
    doc = int(np.searchsorted(X.indptr, 3, side="right")) - 1
    corpus = _corpus(tmp_path / "c300.zarr", X)
    result = _cli(runner, "fit", "-i", corpus.path, "-o", tmp_path / "m.zarr", "-r", R,
                  "--scheduler-address", scheduler)
    line = _one_error_line(result, "c300.zarr", f"document {doc}", "1e+300", "overflow")
    assert "NaN" not in line
    _nothing_left(tmp_path, "c300.zarr")


def test_dense_value_whose_square_overflows_is_not_called_nan(runner, scheduler, tmp_path):
    D = np.random.default_rng(0).random((N, M))
    D[17, 4] = -1e300
    zarr.create_array(str(tmp_path / "d.zarr"), data=D, chunks=(10, M))
    result = _cli(runner, "fit", "-i", tmp_path / "d.zarr", "-o", tmp_path / "m.zarr", "-r", R,
                  "--scheduler-address", scheduler)
    line = _one_error_line(result, "d.zarr", "sample 17", "feature 4", "overflow")
    assert "NaN" not in line
    _nothing_left(tmp_path, "d.zarr")


def test_nan_in_the_corpus_idf_is_refused_on_read(runner, scheduler, fitted, tmp_path):
    idf = np.linspace(1, 2, M)
    idf[5] = np.nan
    corpus = _corpus(tmp_path / "nanidf.zarr", idf=idf)
    src = _jsonl(tmp_path / "docs.jsonl")
    result = _cli(runner, "ingest", src, "--like", corpus.path, "-o", tmp_path / "new.zarr")
    _one_error_line(result, "nanidf.zarr", "idf", "feature 5", "re-ingest")
    result = _cli(runner, "fit", "-i", corpus.path, "-o", tmp_path / "m.zarr", "-r", R,
                  "--scheduler-address", scheduler)
    _one_error_line(result, "nanidf.zarr", "idf", "feature 5")
    result = _cli(runner, "transform", "-m", fitted["model"], "-i", corpus.path,
                  "-o", tmp_path / "e.zarr", "--scheduler-address", scheduler)
    _one_error_line(result, "nanidf.zarr", "idf", "feature 5")
    _nothing_left(tmp_path, "docs.jsonl", "nanidf.zarr")


# -- parameters -----------------------------------------------------------------------------


@pytest.mark.parametrize("option, value", [("--mu", "1e200"), ("--lam", "1e160"),
                                           ("--seed", str(10**27))])
def test_fit_parameters_beyond_exact_arithmetic(runner, fitted, tmp_path, option, value):
    result = _cli(runner, "fit", "-i", fitted["corpus"], "-o", tmp_path / "m.zarr", "-r", R,
                  option, value)
    _usage_error(result, option, value)
    _nothing_left(tmp_path)  # no iteration-0 model


@pytest.mark.parametrize("command", [["evaluate", "-i", "C"], ["plot", "embedding"]])
def test_seed_beyond_numpy_range_is_a_usage_error(runner, fitted, tmp_path, command):
    args = [fitted["corpus"] if a == "C" else a for a in command]
    result = _cli(runner, *args, "-m", fitted["model"], "--seed", 10**27)
    _usage_error(result, "--seed", str(10**27))


def test_evaluate_more_clusters_than_documents(runner, tmp_path):
    n = 2000
    corpus = _corpus(tmp_path / "c.zarr", random_corpus(M, n, seed=2), chunk=500)
    with dask.config.set(scheduler="sync"):
        model = run(FitRequest(corpus.path, tmp_path / "m.zarr", n_components=R, max_iter=2,
                               callback=None))
    result = _cli(runner, "evaluate", "-m", model.path, "-i", corpus.path, "-k", 100000)
    _one_error_line(result, "-k 100000", f"{n} labelled documents",
                    f"sphdist evaluate --model {model.path} --input {corpus.path} -k 3")


def test_evaluate_refuses_labels_outside_label_names(runner, tmp_path):
    labels = np.arange(N) % 3
    labels[7] = 5
    corpus = _corpus(tmp_path / "c.zarr", labels=labels)
    with dask.config.set(scheduler="sync"):
        model = run(FitRequest(corpus.path, tmp_path / "m.zarr", n_components=R, max_iter=2,
                               callback=None))
    result = _cli(runner, "evaluate", "-m", model.path, "-i", corpus.path)
    _one_error_line(result, "c.zarr", "document 7 (d7)", "label code 5", "3 label_names",
                    "re-ingest")


# -- models and embeddings ------------------------------------------------------------------


def test_info_of_a_killed_fit_says_it_stopped(runner, fitted):
    result = _cli(runner, "info", fitted["killed"])
    assert result.exit_code == 0, result.output
    assert "stopped at iteration 2 of 200, not converged" in result.stdout
    report = json.loads(_cli(runner, "info", fitted["killed"], "--json").stdout)
    assert report["status"] == "stopped at iteration 2 of 200, not converged"
    finished = json.loads(_cli(runner, "info", fitted["model"], "--json").stdout)
    assert finished["status"] == "reached max_iter 6, not converged (tol 0)"


@pytest.mark.parametrize("command, killed", [("evaluate", "killed_palm"),
                                             ("transform", "killed"),
                                             ("transform", "killed_palm")])
def test_a_killed_fit_is_used_with_one_warning(
    runner, scheduler, fitted, tmp_path, command, killed
):
    def run(model, out):
        more = [] if command == "evaluate" else ["-o", out, "--scheduler-address", scheduler]
        return _cli(runner, command, "-m", model, "-i", fitted["corpus"], *more)

    result = run(fitted[killed], tmp_path / "e.zarr")
    assert result.exit_code == 0, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "stopped at iteration 2 of 200, not converged" in lines[0]
    resume = lines[0].split("`")[1]  # the command that finishes the fit, which works
    assert resume.startswith(f"sphdist fit --input {fitted['corpus']} --output {fitted[killed]}")
    finished = run(fitted["model"], tmp_path / "e2.zarr")  # max_iter reached: no warning
    assert finished.exit_code == 0 and finished.stderr == "", finished.output


def test_the_resume_command_of_the_warning_works(runner, scheduler, fitted, tmp_path):
    killed = tmp_path / "k.zarr"
    shutil.copytree(fitted["killed_palm"], killed)
    result = _cli(runner, "transform", "-m", killed, "-i", fitted["corpus"], "-o",
                  tmp_path / "e.zarr", "--scheduler-address", scheduler)
    resume = result.stderr.split("`")[1].split()
    assert resume[:2] == ["sphdist", "fit"] and "--lam" in resume
    result = _cli(runner, *resume[1:], "--max-iter", 4, "--scheduler-address", scheduler)
    assert result.exit_code == 0, result.output
    assert json.loads(_cli(runner, "info", killed, "--json").stdout)["n_iter"] == 4


def test_evaluate_of_a_checkpoint_without_v_names_the_iteration(runner, fitted):
    result = _cli(runner, "evaluate", "-m", fitted["killed"], "-i", fitted["corpus"])
    _one_error_line(result, "stopped at iteration 2 of 200", "--resume")


def test_missing_model_is_not_called_a_corpus(runner, tmp_path):
    result = _cli(runner, "info", "-m", tmp_path / "nope.zarr", "--top-terms", 3)
    line = _one_error_line(result, "nope.zarr", "no such model", "sphdist fit")
    assert "corpus with" not in line
    result = _cli(runner, "info", tmp_path / "nope.zarr")
    line = _one_error_line(result, "nope.zarr", f"ls {tmp_path}")
    assert "create a corpus" not in line


def test_corpus_given_as_a_model_or_as_fit_output(runner, fitted, tmp_path):
    corpus = _corpus(tmp_path / "other.zarr")
    before = (corpus.path / "zarr.json").read_bytes()
    for args in (["fit", "-i", fitted["corpus"], "-o", corpus.path, "-r", R],
                 ["fit", "-i", fitted["corpus"], "-o", corpus.path, "-r", R, "--overwrite"],
                 ["transform", "-m", corpus.path, "-i", fitted["corpus"],
                  "-o", tmp_path / "e.zarr"]):
        result = _cli(runner, *args)
        line = _one_error_line(result, "other.zarr is a sphdist corpus, not a sphdist model")
        assert "refit with this version" not in line
    assert (corpus.path / "zarr.json").read_bytes() == before
    _nothing_left(tmp_path, "other.zarr")


def _bad_embedding(fitted, path, how):
    with dask.config.set(scheduler="sync"):
        run(TransformRequest(fitted["model"], fitted["corpus"], path))
    g = zarr.open_group(str(path), mode="r+")
    for i in range(150):  # many good members: zarr lists them concurrently
        g.create_array(f"extra{i:03d}", data=np.zeros(2))
    meta_path = path / "doc_ids" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["codecs"] = {"unknown": [{"name": "evil_codec", "configuration": {}}],
                      "pickle": [{"name": "numcodecs.pickle", "configuration": {}}]}[how]
    meta_path.write_text(json.dumps(meta))


def _v2_embedding(path):
    g = zarr.open_group(str(path), mode="w", zarr_format=2)
    g.attrs["sphdist"] = {"kind": "embedding", "format_version": 1}
    g.create_array("V", data=np.ones((R, 10)))
    for i in range(150):
        g.create_array(f"extra{i:03d}", data=np.zeros(2))
    (path / "doc_ids").mkdir()
    (path / "doc_ids" / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [10], "chunks": [10], "dtype": "|O", "compressor": None,
        "fill_value": None, "filters": [{"id": "pickle", "protocol": 4}], "order": "C",
    }))


@pytest.mark.parametrize("how", ["unknown", "pickle", "v2"])
def test_unsafe_embedding_is_refused_in_one_line(fitted, tmp_path, how):
    path = tmp_path / "e.zarr"
    if how == "v2":
        _v2_embedding(path)
    else:
        _bad_embedding(fitted, path, how)
    for command in (["info", str(path)],
                    ["export", "-m", str(fitted["model"]), "-i", str(path), "-o",
                     str(tmp_path / "e.parquet")]):
        for _ in range(3):  # the stray output of unfinished tasks depended on timing
            proc = subprocess.run(
                [sys.executable, "-c", "from sphdist.cli import main; main()", "-q", *command],
                capture_output=True, text=True, timeout=120,
            )
            assert proc.returncode == 1, proc.stderr
            lines = proc.stderr.strip().splitlines()
            assert len(lines) == 1, proc.stderr
            assert lines[0].startswith(f"Error: {path}") and "sphdist transform --model" in lines[0]
    _nothing_left(tmp_path, "e.zarr")


# -- cases whose fix belongs to the files the lead is rewriting ----------------------------------


def test_evaluate_refusal_of_a_checkpoint_names_a_command_that_works(
    runner, scheduler, fitted, tmp_path
):
    killed = tmp_path / "k.zarr"
    shutil.copytree(fitted["killed"], killed)
    result = _cli(runner, "evaluate", "-m", killed, "-i", fitted["corpus"])
    line = _one_error_line(result, "stopped at iteration 2 of 200, not converged")
    resume = line.split("`")[1].split()
    result = _cli(runner, *resume[1:], "--max-iter", 4, "--scheduler-address", scheduler)
    assert result.exit_code == 0, result.output


def test_corpus_whose_total_squared_norm_overflows(runner, scheduler, tmp_path):
    X = random_corpus(M, N, seed=1, n_empty=0) * 1e154  # ||x_j||^2 = 1e308 each: finite
    corpus = _corpus(tmp_path / "sum.zarr", X)
    result = _cli(runner, "fit", "-i", corpus.path, "-o", tmp_path / "m.zarr", "-r", R,
                  "--scheduler-address", scheduler)
    line = _one_error_line(result, "sum.zarr", "overflow")
    assert "NaN" not in line
    _nothing_left(tmp_path, "sum.zarr")


# -- issue 24, item 3: every stored value of a model is checked, not only its digest -------------


def _edited_model(fitted, path, how):
    """A copy of the fitted model with one value edited and its digest (if any) recomputed."""
    from sphdist.io.model import u_sha256

    shutil.copytree(fitted["model"], path)
    g = zarr.open_group(str(path), mode="r+")
    if how == "nan_in_U":
        U = g["U"][...]
        U[1, 1] = np.nan
        g["U"][...] = U
        g.attrs["u_sha256"] = u_sha256(U)
    elif how == "U_scaled":  # finite, digest right, columns no longer orthonormal
        U = g["U"][...] * 1.5
        g["U"][...] = U
        g.attrs["u_sha256"] = u_sha256(U)
    elif how in ("V_5x7_of_ones", "V_of_ones"):
        shape = (R + 2, 7) if how == "V_5x7_of_ones" else (R, N)
        del g["V"]
        g.create_array("V", shape=shape, dtype=np.float64, chunks=shape)[...] = 1.0
    elif how == "n_components_7":
        g.attrs["params"] = {**g.attrs["params"], "n_components": 7}
    return path


@pytest.mark.parametrize("how, named", [
    ("nan_in_U", "non-finite"), ("U_scaled", "orthonormal"),
    ("V_5x7_of_ones", "V has shape (5, 7)"), ("V_of_ones", "unit"),
    ("n_components_7", "n_components=7"),
])
def test_a_model_whose_values_were_edited_is_refused(
    runner, scheduler, fitted, tmp_path, how, named
):
    model = _edited_model(fitted, tmp_path / "edited.zarr", how)
    commands = {
        "transform": ["transform", "-m", model, "-i", fitted["corpus"], "-o",
                      tmp_path / "e.zarr", "--scheduler-address", scheduler],
        "export": ["export", "-m", model, "-i", fitted["corpus"], "-o", tmp_path / "x.npy",
                   "-f", "npy"],
        "info": ["info", model],
    }
    uses = {"V_of_ones": ["export"]}.get(how, list(commands))  # info reads U, never V
    for command in uses:
        result = _cli(runner, *commands[command])
        _one_error_line(result, f"{model}", named, "refit")
    _nothing_left(tmp_path, "edited.zarr")


# -- issue 24, item 5: tracebacks left ------------------------------------------------------------


@pytest.mark.parametrize("record", [
    '{"a": ' * 100_000 + "1" + "}" * 100_000,  # a record nested 100,000 deep
    '{"text": ' + "[" * 5_000 + "]" * 5_000 + "}",  # a 5,000-deep array as the text field
], ids=["object_100000_deep", "text_array_5000_deep"])
def test_a_deeply_nested_json_lines_record_is_a_bad_document(runner, tmp_path, record):
    src = _jsonl(tmp_path / "docs.jsonl")
    src.write_text(src.read_text() + record + "\n")
    result = _cli(runner, "ingest", src, "-o", tmp_path / "c.zarr")
    _one_error_line(result, f"{src}:13", "nested", "--on-error skip")
    _nothing_left(tmp_path, "docs.jsonl")
    result = _cli(runner, "ingest", src, "-o", tmp_path / "c.zarr", "--on-error", "skip",
                  "--json", "--hashing")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["n_documents"], summary["n_skipped"]) == (12, 1)


@pytest.mark.parametrize("command", ["ingest", "fit", "transform", "export", "synth"])
def test_an_empty_output_path_is_a_usage_error(runner, fitted, tmp_path, command):
    args = {
        "ingest": ["ingest", _jsonl(tmp_path / "docs.jsonl"), "--hashing"],
        "fit": ["fit", "-i", fitted["corpus"], "-r", R],
        "transform": ["transform", "-m", fitted["model"], "-i", fitted["corpus"]],
        "export": ["export", "-m", fitted["model"], "-f", "npy"],
        "synth": ["synth", "--n-docs", 20, "--n-topics", 2],
    }[command]
    before = sorted(p.name for p in tmp_path.iterdir())
    cwd = os.getcwd()
    os.chdir(tmp_path)  # where an empty path would resolve to
    try:
        result = _cli(runner, *args, "-o", "")
    finally:
        os.chdir(cwd)
    line = _usage_error(result, "--output")
    assert "empty" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("command", ["synth", "fit"])
def test_the_working_directory_as_output_is_refused(runner, fitted, tmp_path, command):
    args = {"fit": ["fit", "-i", fitted["corpus"], "-r", R],
            "synth": ["synth", "--n-docs", 20, "--n-topics", 2]}[command]
    work = tmp_path / "work"
    work.mkdir()
    cwd = os.getcwd()
    os.chdir(work)
    try:
        result = _cli(runner, *args, "-o", ".")
    finally:
        os.chdir(cwd)
    _one_error_line(result, "names no file", "--output")
    _nothing_left(tmp_path, "work")
    _nothing_left(work)


# -- issue 24, item 6: nothing accepted silently --------------------------------------------------


def _jsonl_ids(path, ids):
    lines = [json.dumps({"id": doc_id, "label": LABELS[i % 3],
                         "text": f"alpha beta gamma{i % 3} delta{i % 5} w{i}"})
             for i, doc_id in enumerate(ids)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("sizes", [[], ["--chunk-size", 2, "--partition-size", 4]],
                         ids=["one_partition", "across_partitions"])
def test_duplicate_document_ids_are_refused_or_skipped(runner, tmp_path, sizes):
    ids = [f"t{i}" for i in range(14)]
    ids[7] = ids[11] = "t2"  # documents 7 and 11 repeat the id of document 2
    src = _jsonl_ids(tmp_path / "docs.jsonl", ids)
    common = ["--id-field", "id", "--label-field", "label", "--hashing", *sizes]
    result = _cli(runner, "ingest", src, "-o", tmp_path / "c.zarr", *common)
    _one_error_line(result, f"{src}:8", "'t2'", f"{src}:3", "--on-error skip")
    _nothing_left(tmp_path, "docs.jsonl")
    result = _cli(runner, "ingest", src, "-o", tmp_path / "c.zarr", *common,
                  "--on-error", "skip", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["n_documents"], summary["n_skipped"]) == (12, 2)
    assert all("duplicate id 't2'" in e for e in summary["skipped_examples"])
    # the same corpus as the source without the two later duplicates: idf counts 12 documents
    kept = [line for i, line in enumerate(src.read_text().splitlines()) if i not in (7, 11)]
    (tmp_path / "kept.jsonl").write_text("\n".join(kept) + "\n")
    result = _cli(runner, "ingest", tmp_path / "kept.jsonl", "-o", tmp_path / "k.zarr", *common)
    assert result.exit_code == 0, result.output
    got, want = (zarr.open_group(str(tmp_path / n), mode="r") for n in ("c.zarr", "k.zarr"))
    assert list(got["doc_ids"][:]) == list(want["doc_ids"][:])
    np.testing.assert_array_equal(got["idf"][:], want["idf"][:])
    for name in ("data", "indices", "indptr"):
        np.testing.assert_array_equal(got[f"X/00000/{name}"][:], want[f"X/00000/{name}"][:])


def _tar_with_links(path):
    import io
    import tarfile

    with tarfile.open(path, "w") as tar:
        for i in range(12):
            data = f"alpha beta gamma{i % 3} delta{i % 5}".encode()
            info = tarfile.TarInfo(f"src/{LABELS[i % 3]}/{i}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, kind, target in (("link", tarfile.SYMTYPE, "../../../etc/passwd"),
                                   ("hard", tarfile.LNKTYPE, "src/a/0.txt"),
                                   ("dev", tarfile.CHRTYPE, "")):
            info = tarfile.TarInfo(f"src/a/{name}")
            info.type, info.linkname = kind, target
            tar.addfile(info)
    return path


def test_tar_members_that_are_not_files_are_counted_as_skipped(runner, tmp_path):
    src = _tar_with_links(tmp_path / "docs.tar")
    result = _cli(runner, "ingest", src, "-o", tmp_path / "c.zarr", "--hashing")
    _one_error_line(result, f"{src}:src/a/", "--on-error skip")
    _nothing_left(tmp_path, "docs.tar")
    result = _cli(runner, "ingest", src, "-o", tmp_path / "c.zarr", "--hashing",
                  "--on-error", "skip", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["n_documents"], summary["n_skipped"]) == (12, 3)
    examples = " ".join(summary["skipped_examples"])
    for needle in ("src/a/link: a symbolic link", "src/a/hard: a hard link",
                   "src/a/dev: a character device"):
        assert needle in examples, examples
    result = _cli(runner, "ingest", src, "-o", tmp_path / "d.zarr", "--hashing",
                  "--on-error", "skip")
    assert "3 skipped" in result.stdout


def test_info_of_an_interrupted_commit_says_what_it_is_and_how_to_recover(
    runner, scheduler, fitted, tmp_path
):
    model = tmp_path / "m.zarr"
    shutil.copytree(fitted["model"], tmp_path / "m.zarr.old")  # a commit stopped between renames
    result = _cli(runner, "info", model)
    assert result.exit_code == 0, result.output
    assert "checkpoint     committed" not in result.stdout
    assert "interrupted" in result.stdout and "m.zarr.old" in result.stdout
    command = result.stdout.split("`")[1]
    assert command.startswith(f"sphdist fit --input {fitted['corpus']} --output {model}")
    report = json.loads(_cli(runner, "info", model, "--json").stdout)
    assert report["checkpoint"]["recover"] == command
    result = _cli(runner, *command.split()[1:], "--scheduler-address", scheduler)
    assert result.exit_code == 0, result.output
    assert model.is_dir() and not (tmp_path / "m.zarr.old").exists()
    assert "checkpoint     committed" in _cli(runner, "info", model).stdout
