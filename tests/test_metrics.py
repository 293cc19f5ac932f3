"""Clustering accuracy (Hungarian matching), NMI and the k-means evaluation of an embedding."""

import itertools

import numpy as np
import pytest
from sklearn.metrics import normalized_mutual_info_score

from sphdist.errors import DataError
from sphdist.metrics import clustering_accuracy, evaluate_embedding, normalized_mutual_info


def brute_force_accuracy(labels_true, labels_pred):
    """max over one-to-one maps cluster -> label of the matched fraction (unmatched: wrong)."""
    labels_true, labels_pred = np.asarray(labels_true), np.asarray(labels_pred)
    true_values, pred_values = np.unique(labels_true), np.unique(labels_pred)
    k = max(true_values.size, pred_values.size)
    # pad the labels with placeholders that no sample has, so every injective map is a
    # permutation of k slots
    slots = [*true_values.tolist(), *[None] * (k - true_values.size)]
    best = 0
    for perm in itertools.permutations(slots):
        mapping = dict(zip(pred_values.tolist(), perm, strict=False))
        hits = sum(
            mapping[p] == t for t, p in zip(labels_true.tolist(), labels_pred.tolist(), strict=True)
        )
        best = max(best, hits)
    return best / labels_true.size


# -- clustering_accuracy -----------------------------------------------------------------


def test_permuted_relabelling_is_perfect():
    y = np.array([0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 3])
    relabel = np.array([2, 3, 1, 0])
    assert clustering_accuracy(y, relabel[y]) == 1.0
    assert clustering_accuracy(relabel[y], y) == 1.0
    # arbitrary cluster ids, not 0..k-1
    assert clustering_accuracy(y, np.array([17, 5, 40, 9])[y]) == 1.0


def test_known_confusion():
    # contingency (true x pred): true 0 -> {pred 1: 3, pred 0: 1}, true 1 -> {pred 0: 2,
    # pred 2: 1}, true 2 -> {pred 2: 3}; best matching 1->0, 0->1, 2->2 gets 3 + 2 + 3 = 8
    y_true = [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    y_pred = [1, 1, 1, 0, 0, 0, 2, 2, 2, 2]
    assert clustering_accuracy(y_true, y_pred) == pytest.approx(8 / 10)
    # the identity matching is worse (1 + 0 + 3): the Hungarian matching must beat it
    assert np.mean(np.equal(y_true, y_pred)) == pytest.approx(4 / 10)


def test_more_clusters_than_labels():
    # clusters 1 and 3 stay unmatched, so their samples count as errors: 0->0, 2->1
    y_true = [0, 0, 0, 1, 1, 1]
    y_pred = [0, 0, 1, 2, 2, 3]
    assert clustering_accuracy(y_true, y_pred) == pytest.approx(4 / 6)
    # one singleton cluster per sample: only one sample per label can be matched
    assert clustering_accuracy(y_true, np.arange(6)) == pytest.approx(2 / 6)


def test_fewer_clusters_than_labels():
    y_true = [0, 0, 1, 1, 2, 2]
    assert clustering_accuracy(y_true, [0] * 6) == pytest.approx(2 / 6)
    assert clustering_accuracy(y_true, [0, 0, 1, 1, 1, 1]) == pytest.approx(4 / 6)


@pytest.mark.parametrize("seed", range(12))
def test_equals_brute_force_over_all_permutations(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 25))
    k_true, k_pred = (int(k) for k in rng.integers(1, 6, size=2))
    y_true = rng.integers(0, k_true, size=n)
    y_pred = rng.integers(0, k_pred, size=n) * 3 + 1  # cluster ids need not be 0..k-1
    accuracy = clustering_accuracy(y_true, y_pred)
    assert isinstance(accuracy, float)
    assert 0.0 < accuracy <= 1.0
    assert accuracy == pytest.approx(brute_force_accuracy(y_true, y_pred), abs=1e-15)


def test_accuracy_length_mismatch_raises():
    with pytest.raises(ValueError):
        clustering_accuracy([0, 1, 1], [0, 1])


# -- normalized_mutual_info --------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_nmi_equals_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, 4, size=60)
    y_pred = np.where(rng.random(60) < 0.7, y_true, rng.integers(0, 5, size=60))
    nmi = normalized_mutual_info(y_true, y_pred)
    assert isinstance(nmi, float)
    assert nmi == pytest.approx(normalized_mutual_info_score(y_true, y_pred), abs=1e-14)
    assert 0.0 < nmi < 1.0


def test_nmi_of_a_relabelling_is_one():
    y = np.repeat([0, 1, 2, 3], [5, 3, 7, 2])
    assert normalized_mutual_info(y, np.array([3, 0, 2, 1])[y]) == pytest.approx(1.0)


def test_nmi_of_independent_labelings_is_zero():
    # every (label, cluster) pair occurs equally often: no mutual information
    y_true = np.repeat([0, 1], 6)
    y_pred = np.tile([0, 1, 2], 4)
    assert normalized_mutual_info(y_true, y_pred) == pytest.approx(0.0, abs=1e-12)


# -- evaluate_embedding ------------------------------------------------------------------


def _sphere_blobs(n_per, centres, noise, seed):
    rng = np.random.default_rng(seed)
    centres = np.asarray(centres, dtype=np.float64)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    labels = np.repeat(np.arange(len(centres)), n_per)
    points = centres[labels] + noise * rng.standard_normal((labels.size, centres.shape[1]))
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    order = rng.permutation(labels.size)
    return points[order], labels[order]


CENTRES = [[1, 0, 0], [0, 1, 0], [0, 0, 1], [-1, -1, -1]]


def test_well_separated_blobs_on_the_sphere_are_recovered():
    embedding, labels = _sphere_blobs(25, CENTRES, 0.05, seed=0)
    result = evaluate_embedding(embedding, labels, random_state=0)
    assert result["accuracy"] == 1.0
    assert result["nmi"] == pytest.approx(1.0)
    assert result["n_documents"] == 100
    assert result["n_clusters"] == 4


def test_label_codes_need_not_be_contiguous():
    embedding, labels = _sphere_blobs(20, CENTRES[:3], 0.05, seed=1)
    result = evaluate_embedding(embedding, np.array([4, 11, 7])[labels], random_state=0)
    assert result["accuracy"] == 1.0
    assert result["n_clusters"] == 3


def test_unknown_labels_are_ignored():
    embedding, labels = _sphere_blobs(20, CENTRES[:3], 0.05, seed=2)
    # unknown documents sit on a fourth blob; counted, they would need a fourth cluster
    extra, _ = _sphere_blobs(15, CENTRES[3:], 0.05, seed=3)
    embedding = np.vstack([embedding, extra])
    labels = np.concatenate([labels, np.full(15, -1)])
    result = evaluate_embedding(embedding, labels, random_state=0)
    assert result["n_documents"] == 60
    assert result["n_clusters"] == 3
    assert result["accuracy"] == 1.0
    assert result["nmi"] == pytest.approx(1.0)


def test_n_clusters_overrides_the_number_of_labels():
    embedding, labels = _sphere_blobs(20, CENTRES, 0.05, seed=4)
    # merge labels 2 and 3: with 4 clusters one cluster of 20 must stay unmatched
    merged = np.minimum(labels, 2)
    result = evaluate_embedding(embedding, merged, n_clusters=4, random_state=0)
    assert result["n_clusters"] == 4
    assert result["accuracy"] == pytest.approx(60 / 80)


def test_no_known_labels_raises():
    embedding, _ = _sphere_blobs(5, CENTRES, 0.05, seed=5)
    with pytest.raises(DataError, match="no document has a known label"):
        evaluate_embedding(embedding, np.full(20, -1))
    with pytest.raises(ValueError):  # DataError is a ValueError
        evaluate_embedding(embedding, np.full(20, -3))


def test_non_finite_embedding_raises():
    embedding, labels = _sphere_blobs(5, CENTRES, 0.05, seed=6)
    embedding[3, 1] = np.nan
    with pytest.raises(DataError, match="NaN"):
        evaluate_embedding(embedding, labels)


# -- against scikit-learn on hand-made label permutations ---------------------------------


@pytest.mark.parametrize("perm", [[0, 1, 2, 3], [2, 0, 3, 1], [3, 2, 1, 0], [1, 3, 0, 2]])
def test_accuracy_equals_sklearn_accuracy_after_undoing_a_permutation(perm):
    from sklearn.metrics import accuracy_score

    y_true = np.repeat([0, 1, 2, 3], [6, 5, 7, 4])
    perm = np.asarray(perm)
    pred = perm[y_true]
    pred[[0, 7, 12, 20]] = perm[[1, 2, 3, 0]]  # four errors, each into another cluster
    inverse = np.argsort(perm)  # the best matching: few errors keep it the permutation
    expected = accuracy_score(y_true, inverse[pred])
    assert expected == pytest.approx(18 / 22)
    assert clustering_accuracy(y_true, pred) == pytest.approx(expected)
    # NMI does not depend on the cluster names: equals scikit-learn's on the un-permuted ones
    assert normalized_mutual_info(y_true, pred) == pytest.approx(
        normalized_mutual_info_score(y_true, inverse[pred]), abs=1e-14
    )


def test_neighbourhood_kept_against_a_brute_force_count():
    from sphdist.metrics import neighbourhood_kept

    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(60, 5)), rng.normal(size=(60, 2))
    Y[7] = np.nan  # left off the map: neither scored nor a neighbour

    def nearest(Z, i, k, allowed):
        d = np.linalg.norm(Z - Z[i], axis=1)
        d[i] = np.inf
        d[~allowed] = np.inf
        return set(np.argsort(d)[:k].tolist())

    on = np.isfinite(Y).all(axis=1)
    ref = np.array([sorted(nearest(X, i, 4, np.ones(60, bool)),
                           key=lambda j, i=i: np.linalg.norm(X[j] - X[i])) for i in range(60)])
    scored = [i for i in range(60) if on[i] and on[ref[i]].all()]
    expected = np.mean([len(set(ref[i]) & nearest(Y, i, 4, on)) / 4 for i in scored])
    assert neighbourhood_kept(ref, Y, k=4) == pytest.approx(expected)
    assert neighbourhood_kept(ref, X, k=4) == 1.0
