"""k-NN label accuracy (cosine, stratified k-fold) against a NumPy majority vote, and evaluate."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.model_selection import StratifiedKFold

from sphdist.errors import DataError, ParameterError
from sphdist.metrics import knn_accuracy


def _labelled(n, r, n_labels, seed, spread=0.8):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_labels, r))
    y = rng.integers(0, n_labels, n)
    X = centres[y] + spread * rng.normal(size=(n, r))
    return X, y


def _reference(X, y, k, folds, seed):
    """Each fold: cosine of every test row to every training row, majority of the k largest
    (ties of the vote: the smallest label, as scikit-learn's mode)."""
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    scores = []
    for train, test in StratifiedKFold(folds, shuffle=True, random_state=seed).split(X, y):
        S = Xn[test] @ Xn[train].T
        nearest = np.argsort(-S, axis=1, kind="stable")[:, :k]
        votes = np.array([np.bincount(y[train][row], minlength=y.max() + 1) for row in nearest])
        scores.append(np.mean(votes.argmax(axis=1) == y[test]))
    return float(np.mean(scores))


@pytest.mark.parametrize("k", [1, 10])
def test_knn_accuracy_equals_the_majority_vote_reference(k):
    X, y = _labelled(300, 6, 4, seed=k)
    y[:5] = -1  # unknown labels are left out
    report = knn_accuracy(X, y, n_neighbors=k, random_state=3)
    keep = y >= 0
    assert report["knn_accuracy"] == pytest.approx(_reference(X[keep], y[keep], k, 5, 3),
                                                   abs=1e-12)
    assert report["knn_k"] == k and report["knn_folds"] == 5 and report["knn_documents"] == 295


def test_separable_labels_score_one_and_shuffled_labels_chance():
    X, y = _labelled(400, 8, 4, seed=0, spread=0.05)
    assert knn_accuracy(X, y)["knn_accuracy"] == 1.0
    shuffled = np.random.default_rng(1).permutation(y)
    assert knn_accuracy(X, shuffled)["knn_accuracy"] < 0.45


def test_a_large_collection_is_scored_on_a_stratified_sample():
    X, y = _labelled(1000, 5, 3, seed=2)
    report = knn_accuracy(X, y, max_documents=300)
    assert report["knn_documents"] == 300 and 0.0 <= report["knn_accuracy"] <= 1.0


def test_rare_labels_and_bad_input():
    X, y = _labelled(40, 3, 2, seed=4)
    y[0], y[1:] = 2, np.where(y[1:] == 2, 0, y[1:])  # label 2: one document
    kept = knn_accuracy(X, y, min_label_size=1)  # asked to keep every label: refused
    assert kept["knn_accuracy"] is None and kept["knn_folds"] == 1
    assert kept["knn_left_out_labels"] == kept["knn_left_out_documents"] == 0
    with pytest.raises(DataError, match="no document has a known label"):
        knn_accuracy(X, np.full(40, -1))
    with pytest.raises(ParameterError, match="min_label_size=0 leaves nothing to count"):
        knn_accuracy(X, y, min_label_size=0)
    # more neighbours than the training documents of a fold: too few to score, not an error
    assert knn_accuracy(X, np.arange(40) % 2, n_neighbors=33)["knn_accuracy"] is None
    assert knn_accuracy(X, np.arange(40) % 2, n_neighbors=32)["knn_accuracy"] is not None


@pytest.mark.parametrize("k", [1, 10])
def test_labels_with_too_few_documents_are_left_out_and_the_rest_scored(k):
    """Issue 43 item 5: a long-tailed collection (labels of one document) was never scored."""
    X, y = _labelled(300, 6, 4, seed=k)
    y[:5] = -1  # unknown labels: neither scored nor counted as left out
    y[5:8] = [4, 5, 6]  # three labels of a single document
    y[8:10] = 7  # a label of two documents
    report = knn_accuracy(X, y, n_neighbors=k, random_state=3)
    keep = (y >= 0) & (y < 4) | (y == 7)
    assert report["knn_accuracy"] == pytest.approx(
        _reference(X[keep], y[keep], k, 2, 3), abs=1e-12)  # the rarest kept label: 2 folds
    assert report["knn_documents"] == keep.sum() == 292 and report["knn_labels"] == 5
    assert report["knn_left_out_labels"] == 3 and report["knn_left_out_documents"] == 3
    assert report["knn_min_label_size"] == 2 and report["knn_folds"] == 2
    three = knn_accuracy(X, y, n_neighbors=k, min_label_size=3, random_state=3)
    keep = (y >= 0) & (y < 4)
    assert three["knn_accuracy"] == pytest.approx(_reference(X[keep], y[keep], k, 5, 3),
                                                  abs=1e-12)
    assert three["knn_left_out_labels"] == 4 and three["knn_left_out_documents"] == 5
    assert three["knn_folds"] == 5 and three["knn_documents"] == 290


def test_fewer_than_two_labels_left_are_not_scored():
    X, y = _labelled(40, 3, 2, seed=4)
    y[:] = 0
    y[:3] = [1, 2, 3]
    report = knn_accuracy(X, y)
    assert report["knn_accuracy"] is None and report["knn_labels"] == 1
    assert report["knn_left_out_labels"] == 3 and report["knn_documents"] == 37
    nothing = knn_accuracy(X, np.arange(40))  # every label a single document
    assert nothing["knn_accuracy"] is None and nothing["knn_documents"] == 0
    assert nothing["knn_labels"] == 0 and nothing["knn_left_out_documents"] == 40


def test_a_sample_keeps_the_rare_labels_left_out():
    X, y = _labelled(1000, 5, 3, seed=2)
    y[:4] = [3, 4, 5, 6]
    report = knn_accuracy(X, y, max_documents=300)
    assert report["knn_documents"] == 300 and report["knn_left_out_labels"] == 4
    assert report["knn_left_out_documents"] == 4 and report["knn_accuracy"] is not None


def test_evaluate_scores_the_labels_of_two_documents_or_more(tmp_path):
    """Issue 43 item 5: `10-NN accuracy not scored: labels ... have a single document`."""
    from sphdist.cli import main
    from sphdist.jobs.embedding import open_embedding_source

    from ._textcorpus import write_text_tree

    runner = CliRunner()
    write_text_tree(tmp_path / "src", n_per_label=12)
    for i, name in enumerate(["aifc", "antigravity", "calendar", "doctest"]):
        (tmp_path / "src" / name).mkdir()
        (tmp_path / "src" / name / "0.txt").write_text(f"the engine {name} orbit pitcher {i}")
    corpus, model = tmp_path / "c.zarr", tmp_path / "m.zarr"
    assert runner.invoke(main, ["ingest", str(tmp_path / "src"), "-o", str(corpus), "--hashing",
                                "--n-features", "256"]).exit_code == 0
    assert runner.invoke(main, ["fit", "-i", str(corpus), "-o", str(model), "-r", "3",
                                "--max-iter", "5"]).exit_code == 0
    result = runner.invoke(main, ["evaluate", "-m", str(model), "--knn-k", "3", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    src = open_embedding_source(model)
    X, y = np.asarray(src.V.compute()).T, np.asarray(src.labels)
    codes, counts = np.unique(y[y >= 0], return_counts=True)
    keep = np.isin(y, codes[counts >= 2])
    assert keep.sum() == 36 and np.unique(y[keep]).size == 3
    assert report["knn_accuracy"] == pytest.approx(_reference(X[keep], y[keep], 3, 5, 0),
                                                   abs=1e-12)
    assert report["knn_documents"] == 36 and report["knn_labels"] == 3
    assert report["knn_left_out_labels"] == 4 and report["knn_left_out_documents"] == 4
    assert "knn_reason" not in report
    text = runner.invoke(main, ["evaluate", "-m", str(model), "--knn-k", "3"]).stdout
    assert f"3-NN accuracy {report['knn_accuracy']:.4f}" in text
    assert ("3-NN accuracy on 36 documents of 3 labels: 4 labels with a single document left "
            "out ('aifc', 'antigravity', 'calendar' and 1 more; 4 documents).") in text, text
    # asked to keep every label: not scored, and the message names the option that scores it
    kept = runner.invoke(main, ["evaluate", "-m", str(model), "--knn-k", "3",
                                "--knn-min-label-size", "1"])
    assert kept.exit_code == 0, kept.output
    assert "3-NN accuracy -" in kept.stdout
    assert ("3-NN accuracy not scored: labels 'aifc', 'antigravity', 'calendar' and 1 more have "
            "a single document, and stratified folds need 2 of each label; "
            "--knn-min-label-size 2 scores the others without them.") in kept.stdout, kept.stdout
    # fewer than two labels of enough documents: the option that lowers the bar is named
    few = runner.invoke(main, ["evaluate", "-m", str(model), "--knn-min-label-size", "13",
                               "--json"])
    report = json.loads(few.stdout)
    assert report["knn_accuracy"] is None and report["knn_labels"] == 0
    assert report["knn_reason"] == (
        "no label has 13 documents or more, and k-NN accuracy needs 2 labels; "
        "--knn-min-label-size 12 scores 3 labels (36 documents)")


def test_evaluate_reports_knn_accuracy_beside_kmeans(tmp_path):
    from sphdist.cli import main
    from sphdist.jobs.embedding import open_embedding_source

    from ._textcorpus import write_text_tree

    runner = CliRunner()
    write_text_tree(tmp_path / "src", n_per_label=12)
    corpus, model = tmp_path / "c.zarr", tmp_path / "m.zarr"
    assert runner.invoke(main, ["ingest", str(tmp_path / "src"), "-o", str(corpus), "--hashing",
                                "--n-features", "256"]).exit_code == 0
    assert runner.invoke(main, ["fit", "-i", str(corpus), "-o", str(model), "-r", "3",
                                "--max-iter", "5"]).exit_code == 0
    result = runner.invoke(main, ["evaluate", "-m", str(model), "--knn-k", "3", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    src = open_embedding_source(model)
    expected = knn_accuracy(np.asarray(src.V.compute()).T, src.labels, n_neighbors=3)
    assert report["knn_accuracy"] == expected["knn_accuracy"] and report["knn_k"] == 3
    text = runner.invoke(main, ["evaluate", "-m", str(model)]).stdout
    ten = knn_accuracy(np.asarray(src.V.compute()).T, src.labels)["knn_accuracy"]
    assert f"10-NN accuracy {ten:.4f}" in text
