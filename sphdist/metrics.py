"""Clustering quality of an embedding: accuracy under the best label matching, and NMI.

The paper's evaluation (Liu et al. 2019, Sec. 5.2; the protocol of Xu, Liu and Gong 2003,
ref. [24] there): run k-means on the embedded documents, then compare the clusters with the
known labels by clustering accuracy (the fraction of documents correctly labelled after the
best one-to-one mapping of clusters to labels, found by the Hungarian algorithm) and by
normalized mutual information. Beside them, :func:`knn_accuracy` scores the neighbourhoods:
the cross-validated accuracy of a k-nearest-neighbour classifier by cosine; and
:func:`neighbourhood_kept` how well a 2-D map keeps each document's nearest neighbours.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score
from sklearn.metrics.cluster import contingency_matrix

from sphdist.errors import DataError, ParameterError, option

__all__ = [
    "clustering_accuracy", "normalized_mutual_info", "evaluate_embedding", "knn_accuracy",
    "neighbourhood_kept",
]


def clustering_accuracy(labels_true: Any, labels_pred: Any) -> float:
    """Fraction of samples whose cluster maps to their label under the best matching.

    Parameters
    ----------
    labels_true : array-like of shape (n,), int
        Ground-truth labels.
    labels_pred : array-like of shape (n,), int
        Cluster assignments; the number of clusters may differ from the number of labels
        (unmatched clusters count as errors).

    Returns
    -------
    float
        Accuracy, a fraction in [0, 1]: ``max_perm sum_i [true_i == perm(pred_i)] / n``, the
        permutation found by ``scipy.optimize.linear_sum_assignment`` on the contingency table.

    Raises
    ------
    ValueError
        If the arrays differ in length.
    """
    C = contingency_matrix(labels_true, labels_pred)
    rows, cols = linear_sum_assignment(C, maximize=True)
    return float(C[rows, cols].sum() / C.sum())


def normalized_mutual_info(labels_true: Any, labels_pred: Any) -> float:
    """NMI with the arithmetic-mean normalisation, scikit-learn's default.

    Parameters
    ----------
    labels_true, labels_pred : array-like of shape (n,), int
        Labels and cluster assignments.

    Returns
    -------
    float
        ``sklearn.metrics.normalized_mutual_info_score(labels_true, labels_pred)``, in [0, 1].
    """
    return float(normalized_mutual_info_score(labels_true, labels_pred))


def evaluate_embedding(
    embedding: np.ndarray,
    labels: np.ndarray,
    *,
    n_clusters: int | None = None,
    n_init: int = 10,
    random_state: Any = 0,
) -> dict[str, Any]:
    """k-means on an embedding, scored against labels.

    Parameters
    ----------
    embedding : ndarray of shape (n_documents, r), float64
        One row per document (for Spherical PCA, the columns of V: unit rows).
    labels : ndarray of shape (n_documents,), int
        Label codes; documents with a negative code (unknown) are left out.
    n_clusters : int, optional
        k of k-means; default the number of distinct labels.
    n_init : int, default 10
        k-means restarts (``sklearn.cluster.KMeans(n_init=...)``).
    random_state : int, RandomState or None, default 0
        Seed of k-means.

    Returns
    -------
    dict
        ``accuracy`` and ``nmi`` (fractions in [0, 1]), ``n_documents``, ``n_clusters``.

    Raises
    ------
    DataError
        If no document has a known label, or the embedding holds NaN.
    """
    X, y = _labelled(embedding, labels, "clustering")
    k = int(n_clusters) if n_clusters is not None else int(np.unique(y).size)
    pred = KMeans(n_clusters=k, n_init=n_init, random_state=random_state).fit_predict(X)
    return {
        "accuracy": clustering_accuracy(y, pred),
        "nmi": normalized_mutual_info(y, pred),
        "n_documents": int(y.size),
        "n_clusters": k,
    }


def knn_accuracy(
    embedding: np.ndarray,
    labels: np.ndarray,
    *,
    n_neighbors: int = 10,
    n_splits: int = 5,
    max_documents: int | None = 20_000,
    min_label_size: int = 2,
    random_state: Any = 0,
) -> dict[str, Any]:
    """k-NN label accuracy of an embedding: cosine, stratified k-fold cross-validation.

    How well the neighbourhoods of the embedding agree with the labels: each document is
    labelled by a majority vote of its ``n_neighbors`` nearest training documents by cosine
    (``sklearn.neighbors.KNeighborsClassifier(metric="cosine", algorithm="brute")``), scored
    by ``sklearn.model_selection.cross_val_score`` over ``StratifiedKFold(n_splits,
    shuffle=True)``; the mean of the folds' accuracies. Unlike k-means accuracy it does not
    depend on the clusters being balanced or convex.

    The documents of a label with fewer than ``min_label_size`` documents are left out, as
    those of unknown labels are: neither scored nor anyone's neighbours (a stratified fold
    needs two documents of each label, and a label that no training fold holds could never
    be predicted). The score is then the accuracy on the other labels' documents, and the
    report says how many documents and labels were left out.

    Parameters
    ----------
    embedding : ndarray of shape (n_documents, r), float64
        One row per document.
    labels : ndarray of shape (n_documents,), int
        Label codes; documents with a negative code (unknown) are left out.
    n_neighbors : int, default 10
        k of the classifier.
    n_splits : int, default 5
        Folds; fewer when the rarest label scored has fewer documents (at least 2).
    max_documents : int or None, default 20000
        Score a stratified random sample of this many labelled documents when there are more
        (the brute-force classifier costs ``n^2 r`` per pass); None: all of them. The labels
        of fewer than ``min_label_size`` documents are left out before the sample, and
        those the sample leaves with fewer after it.
    min_label_size : int, default 2
        Leave out the documents of labels with fewer documents than this. 1 keeps every
        label, so a label of a single document leaves the accuracy unscored (no stratified
        split), as scikit-learn's ``StratifiedKFold`` would refuse it; ``n_splits`` or more
        scores every label in every fold.
    random_state : int, RandomState or None, default 0
        Seed of the sample and of the folds' shuffle.

    Returns
    -------
    dict
        ``knn_accuracy`` (fraction in [0, 1]; None when a label scored has a single document
        (``min_label_size=1``), fewer than two labels are left, or a fold has fewer training
        documents than ``n_neighbors``: too few documents to score), ``knn_k``,
        ``knn_folds``, ``knn_documents`` and ``knn_labels`` (the documents and labels
        scored), ``knn_left_out_documents`` and ``knn_left_out_labels`` (the labelled
        documents, and their labels, left out for having fewer than ``min_label_size``
        documents), ``knn_min_label_size``.

    Raises
    ------
    DataError
        If no document has a known label, or the embedding holds NaN or Inf.
    ParameterError
        If ``min_label_size`` is less than 1.
    """
    from sklearn.model_selection import StratifiedKFold, cross_val_score, train_test_split
    from sklearn.neighbors import KNeighborsClassifier

    if min_label_size < 1:
        raise ParameterError(
            option("min_label_size", min_label_size)
            + " leaves nothing to count. To resolve this, pass 1 (keep every label) or more.")
    X, y = _labelled(embedding, labels, "neighbourhoods")
    codes, counts = np.unique(y, return_counts=True)
    scored = codes[counts >= min_label_size]
    keep = np.isin(y, scored)
    X, y = X[keep], y[keep]
    if max_documents is not None and y.size > max_documents:
        stratify = y if counts[counts >= min_label_size].min() >= 2 else None
        X, _, y, _ = train_test_split(X, y, train_size=max_documents, stratify=stratify,
                                      random_state=random_state)
        sample_codes, sample_counts = np.unique(y, return_counts=True)
        scored = sample_codes[sample_counts >= min_label_size]
        keep = np.isin(y, scored)
        X, y = X[keep], y[keep]
    left_out = ~np.isin(codes, scored)
    report: dict[str, Any] = {
        "knn_accuracy": None, "knn_k": int(n_neighbors), "knn_folds": 0,
        "knn_documents": int(y.size), "knn_labels": int(scored.size),
        "knn_left_out_documents": int(counts[left_out].sum()),
        "knn_left_out_labels": int(left_out.sum()), "knn_min_label_size": int(min_label_size),
    }
    if scored.size < 2:  # a classifier of one label scores 1.0 whatever the embedding
        return report
    folds = min(int(n_splits), int(np.unique(y, return_counts=True)[1].min()))
    report["knn_folds"] = folds
    if folds < 2:  # a label with a single document: no stratified split
        return report
    if n_neighbors > y.size - -(-y.size // folds):  # the smallest training fold
        return report
    classifier = KNeighborsClassifier(n_neighbors=n_neighbors, metric="cosine",
                                      algorithm="brute")
    cv = StratifiedKFold(n_splits=folds, shuffle=True, random_state=random_state)
    report["knn_accuracy"] = float(cross_val_score(classifier, X, y, cv=cv).mean())
    return report


def neighbourhood_kept(reference: np.ndarray, points: np.ndarray, k: int = 10) -> float:
    """Mean fraction of each point's k nearest neighbours in r dimensions kept on a map.

    For each point with k reference neighbours: the fraction of them among its k nearest
    other points of ``points`` (Euclidean, ``sklearn.neighbors.NearestNeighbors``), averaged
    over those points (the "neighbourhood preservation" of Venna et al. 2010, at k).

    Parameters
    ----------
    reference : ndarray of shape (n, >= k), int
        Row i: the positions of point i's nearest other points in the original space,
        nearest first (as :func:`sphdist.core.graph.knn_graph` gives); -1 where there are
        fewer. Only the first k columns are used.
    points : ndarray of shape (n, d), float
        The map (d = 2), NaN rows for points left out (neither scored nor neighbours).
    k : int, default 10

    Returns
    -------
    float
        In [0, 1]; 1: every neighbourhood kept. NaN when no point has k reference neighbours
        on the map.

    Examples
    --------
    >>> line = np.arange(6.0)[:, None]
    >>> ref = np.array([[1, 2], [0, 2], [1, 3], [2, 4], [3, 5], [4, 3]])
    >>> neighbourhood_kept(ref, line, k=2)
    1.0
    """
    from sklearn.neighbors import NearestNeighbors

    reference = np.asarray(reference)[:, :k]
    points = np.asarray(points, dtype=np.float64)
    on_map = np.flatnonzero(np.isfinite(points).all(axis=1))
    where = np.full(points.shape[0], -1, dtype=np.int64)
    where[on_map] = np.arange(on_map.size)
    ref = np.where(reference >= 0, where[np.maximum(reference, 0)], -1)[on_map]
    full = (ref >= 0).all(axis=1)
    if reference.shape[1] < k or not full.any() or on_map.size <= k:
        return float("nan")
    found = NearestNeighbors(n_neighbors=k + 1).fit(points[on_map]).kneighbors(
        return_distance=False, n_neighbors=k)  # each point's k others (itself left out)
    ref, found = ref[full], found[full]
    kept = (ref[:, :, None] == found[:, None, :]).any(axis=2).sum(axis=1)
    return float(kept.mean() / k)


def _labelled(embedding: Any, labels: Any, scored: str) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the documents with a known label (>= 0), float64, and their labels.

    Raises
    ------
    DataError
        If no document has a known label (``scored``: what cannot be scored then), or the
        embedding holds NaN or Inf.
    ParameterError
        If ``labels`` is not a 1-D integer array with one value per row of ``embedding``.
    """
    labels, n = np.asarray(labels), np.shape(embedding)[0]
    if labels.ndim != 1:
        raise ParameterError(
            f"labels must be 1-D (one label code per document), got shape {labels.shape}. To "
            "resolve this, pass an array of shape (n_documents,).")
    if labels.dtype.kind not in "iu":
        raise ParameterError(
            f"labels must be integer codes (-1: unknown), got {labels.dtype}. To resolve this, "
            "encode them, e.g. sklearn.preprocessing.LabelEncoder().fit_transform(labels).")
    if labels.shape[0] != n:
        raise ParameterError(
            f"labels has {labels.shape[0]} values but the embedding has {n} documents (rows). "
            "To resolve this, pass one label code per row of the embedding.")
    known = labels >= 0
    if not known.any():
        raise DataError(
            f"no document has a known label, so {scored} cannot be scored. To resolve this, "
            "ingest a labelled source (one folder per label)."
        )
    X = np.asarray(embedding, dtype=np.float64)[known]
    if not np.all(np.isfinite(X)):
        raise DataError("the embedding holds NaN or Inf values.")
    return X, labels[known]
