"""Held-out scoring (issue 22): ``evaluate`` of a test split, fitted on a train split.

The model is fitted on a train split; the test split is ingested ``--like`` the model. Its
scores, whether read from an ``embedding.zarr`` written by ``transform`` or computed from the
``--like`` corpus on the fly, equal k-means and the metrics computed here with scikit-learn on V
computed with NumPy from the model's U (the exact V-step, Liu et al. 2019 Eq. 3.12 with
lam = 2).
"""

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans
from sklearn.metrics import confusion_matrix, normalized_mutual_info_score

from sphdist.cli import main
from sphdist.errors import CorpusMismatchError, InputNotFoundError, ParameterError
from sphdist.io.corpus import open_corpus
from sphdist.io.model import open_model
from sphdist.jobs import run
from sphdist.jobs.evaluate import EvaluateRequest

from .._textcorpus import write_text_tree

pytestmark = pytest.mark.usefixtures("sync_scheduler")

R = 3


def _ok(runner, *args):
    result = runner.invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """train.zarr (30 documents), model.zarr fitted on it, test.zarr (18 other documents,
    ingested --like the model) and test.emb.zarr (``sphdist transform`` of test.zarr)."""
    root = tmp_path_factory.mktemp("heldout")
    write_text_tree(root / "train", n_per_label=10, seed=0)
    write_text_tree(root / "test", n_per_label=6, seed=1)
    runner = CliRunner()
    paths = {name: root / f"{name}.zarr" for name in ("train", "model", "test", "test.emb")}
    _ok(runner, "ingest", root / "train", "-o", paths["train"], "--hashing", "--n-features",
        512, "--chunk-size", 8)
    _ok(runner, "fit", "-i", paths["train"], "-o", paths["model"], "-r", R, "--max-iter", 20,
        "--n-workers", 0)
    _ok(runner, "ingest", root / "test", "-o", paths["test"], "--like", paths["model"],
        "--chunk-size", 5)
    _ok(runner, "transform", "-m", paths["model"], "-i", paths["test"], "-o",
        paths["test.emb"])
    return paths


def _reference_scores(model, corpus, seed=0, n_init=10):
    """k-means on V = normalise(U^T X) (e_1 where U^T x = 0), scored with scikit-learn."""
    U = open_model(model).U
    source = open_corpus(corpus)
    X = source.to_dask().compute()  # (m, n) sparse
    A = np.asarray((X.T @ U).T)  # (r, n)
    norms = np.linalg.norm(A, axis=0)
    V = np.where(norms > 0, A / np.where(norms > 0, norms, 1.0), np.eye(R)[:, :1])
    y = np.asarray(source.labels)
    known = y >= 0
    k = np.unique(y[known]).size
    pred = KMeans(n_clusters=k, n_init=n_init, random_state=seed).fit_predict(V.T[known])
    C = confusion_matrix(y[known], pred)
    rows, cols = linear_sum_assignment(-C)
    return {"accuracy": C[rows, cols].sum() / C.sum(),
            "nmi": normalized_mutual_info_score(y[known], pred),
            "n_documents": int(known.sum()), "n_clusters": int(k)}


def _scores(result):
    return {k: result[k] for k in ("accuracy", "nmi", "n_documents", "n_clusters")}


def test_a_held_out_corpus_like_the_model_is_embedded_on_the_fly_and_scored(split):
    expected = _reference_scores(split["model"], split["test"])
    assert expected["n_documents"] == 18
    result = run(EvaluateRequest(split["model"], split["test"]))
    assert _scores(result) == pytest.approx(expected)
    assert result["n_components"] == R and result["n_iter"] == open_model(split["model"]).n_iter


def test_an_embedding_from_transform_is_scored_with_its_own_labels(split):
    expected = _reference_scores(split["model"], split["test"])
    result = run(EvaluateRequest(split["model"], split["test.emb"]))
    assert _scores(result) == pytest.approx(expected)


def test_input_defaults_to_the_corpus_the_model_recorded(split):
    recorded = run(EvaluateRequest(split["model"]))
    assert recorded == run(EvaluateRequest(split["model"], split["train"]))
    assert recorded["n_documents"] == 30


def test_a_moved_training_corpus_names_the_recorded_path_and_input(split, tmp_path):
    import shutil

    train, model = tmp_path / "train.zarr", tmp_path / "model.zarr"
    shutil.copytree(split["train"], train)
    _ok(CliRunner(), "fit", "-i", train, "-o", model, "-r", R, "--max-iter", 2,
        "--n-workers", 0)
    shutil.rmtree(train)
    # the Python API's words (issue 32): the call, by keyword; the command line: the command
    remedy = r"EvaluateRequest\(model='.*', input='CORPUS'\)"
    with pytest.raises(InputNotFoundError, match=rf"{train}: no such corpus.*{remedy}"):
        run(EvaluateRequest(model))


def test_an_embedding_written_with_another_model_is_refused(split, tmp_path):
    other = tmp_path / "other.model.zarr"
    _ok(CliRunner(), "fit", "-i", split["train"], "-o", other, "-r", R, "--max-iter", 3,
        "--seed", 7, "--n-workers", 0)
    with pytest.raises(CorpusMismatchError, match="another model"):
        run(EvaluateRequest(other, split["test.emb"]))


@pytest.mark.parametrize("bad", [{"n_init": 0}, {"n_clusters": 0}, {"knn_k": 1.5},
                                 {"random_state": -1}, {"knn_min_label_size": 0}])
def test_the_evaluate_request_checks_its_values_when_built(split, bad):
    name = next(iter(bad))
    with pytest.raises(ParameterError, match=f"{name}="):
        EvaluateRequest(split["model"], split["test"], **bad)


def test_too_many_clusters_gets_the_same_evaluation_with_k_the_labels(split):
    """The remedy is the request changed: the user's other values are kept in it."""
    n_labels = np.unique(open_corpus(split["test"]).labels).size
    with pytest.raises(ParameterError, match=(
            rf"n_clusters=1000 is more clusters than the 18 labelled.*EvaluateRequest\("
            rf"model='.*', input='.*test.*', n_clusters={n_labels}, n_init=3\)")):
        run(EvaluateRequest(split["model"], split["test"], n_clusters=1000, n_init=3))


def test_cli_evaluate_scores_the_test_split_both_ways_and_defaults_input(split):
    import json

    runner = CliRunner()
    expected = _reference_scores(split["model"], split["test"])
    for documents in (split["test"], split["test.emb"]):
        report = json.loads(_ok(runner, "evaluate", "-m", split["model"], "-i", documents,
                                "--json").stdout)
        assert _scores(report) == pytest.approx(expected)
    line = _ok(runner, "evaluate", "-m", split["model"]).stdout
    assert f"30 documents of {split['train']}, k=3" in line and "accuracy" in line
    line = _ok(runner, "evaluate", "-m", split["model"], "-i", split["test"]).stdout
    assert f"18 documents of {split['test']}, embedded on the fly" in line


def test_a_corpus_of_another_feature_space_gets_commands_that_score_it(split, tmp_path,
                                                                       monkeypatch):
    """The remedy re-ingests the documents --like the model, embeds them, evaluates."""
    import re
    import shlex

    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    other = tmp_path / "other.zarr"
    _ok(runner, "ingest", split["train"].parent / "test", "-o", other, "--hashing",
        "--n-features", 256)
    result = runner.invoke(main, ["evaluate", "-m", str(split["model"]), "-i", str(other)])
    assert result.exit_code == 1, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert "256 features, the model has 512" in line and f"--like {split['model']}" in line
    (chain,) = re.findall(r"`(sphdist [^`]+)`", line.split("To resolve this", 1)[1])
    for command in chain.split(" && "):
        last = _ok(runner, *shlex.split(command)[1:])
    assert "18 documents" in last.stdout
