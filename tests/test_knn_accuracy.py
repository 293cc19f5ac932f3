"""k-NN label accuracy (cosine, stratified k-fold) against a NumPy majority vote, and evaluate."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.model_selection import StratifiedKFold

from sphdist.errors import DataError
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
    assert knn_accuracy(X, y)["knn_accuracy"] is None and knn_accuracy(X, y)["knn_folds"] == 1
    with pytest.raises(DataError, match="no document has a known label"):
        knn_accuracy(X, np.full(40, -1))
    # more neighbours than the training documents of a fold: too few to score, not an error
    assert knn_accuracy(X, np.arange(40) % 2, n_neighbors=33)["knn_accuracy"] is None
    assert knn_accuracy(X, np.arange(40) % 2, n_neighbors=32)["knn_accuracy"] is not None


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
