"""NeighborIndex (faiss) against a NumPy brute force: exact flat, recall of the IVF measured."""

import dask.array as da
import numpy as np
import pytest
from sklearn.neighbors import NearestNeighbors

from sphdist import NeighborIndex, SphericalPCA
from sphdist.core.neighbors import recall_at_k
from sphdist.errors import DataError, ParameterError


def _clustered(n, r, seed, n_centres=20, spread=0.35):
    """Unit rows around n_centres random directions (the shape of a topic embedding)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n_centres, r))
    X = centres[rng.integers(0, n_centres, n)] + spread * rng.normal(size=(n, r))
    return X / np.linalg.norm(X, axis=1, keepdims=True)


def _brute(X, Q, k, exclude_self=False):
    S = Q @ X.T
    if exclude_self:
        np.fill_diagonal(S, -np.inf)
    idx = np.argsort(-S, axis=1, kind="stable")[:, :k]
    return idx, np.take_along_axis(S, idx, axis=1)


def test_flat_index_is_the_exact_scan():
    X = _clustered(500, 8, 0)
    Q = _clustered(30, 8, 1)
    dist, ind = NeighborIndex("flat").fit(X).kneighbors(Q, n_neighbors=10)
    ref_idx, ref_cos = _brute(X, Q, 10)
    assert recall_at_k(ind, ref_idx) == 1.0
    np.testing.assert_allclose(dist, 1.0 - ref_cos, atol=1e-6)  # float32 storage


def test_ivf_recall_against_the_brute_force_grows_to_exact_with_nprobe():
    X = _clustered(4000, 16, 2)
    Q = _clustered(200, 16, 3)
    ref, _ = _brute(X, Q, 10)
    index = NeighborIndex("ivf", nlist=32, nprobe=1).fit(X)
    assert index.kind_ == "ivf" and index.nlist_ == 32
    recalls = []
    for nprobe in (1, 4, 32):
        index.set_params(nprobe=nprobe)  # overridable after fit
        recalls.append(recall_at_k(index.kneighbors(Q, 10, return_distance=False), ref))
    assert recalls[0] < 1.0 and recalls == sorted(recalls)
    assert recalls[-1] == 1.0  # every list scanned: the exact answer


def test_kneighbors_without_X_are_other_rows_as_in_scikit_learn():
    X = _clustered(300, 6, 4)
    dist, ind = NeighborIndex("flat").fit(X).kneighbors(n_neighbors=5)
    ref = NearestNeighbors(n_neighbors=5, metric="cosine", algorithm="brute").fit(X)
    ref_dist, ref_ind = ref.kneighbors(n_neighbors=5)
    assert recall_at_k(ind, ref_ind) == 1.0
    np.testing.assert_allclose(dist, ref_dist, atol=1e-6)
    assert not (ind == np.arange(300)[:, None]).any()


def test_a_dask_input_is_indexed_chunk_by_chunk_with_rows_left_out():
    X = _clustered(400, 5, 5)
    exclude = np.zeros(400, dtype=bool)
    exclude[[0, 99, 100]] = True
    index = NeighborIndex("ivf", nlist=8, nprobe=8, chunk_size=64).fit(
        da.from_array(X, chunks=(37, 5)), exclude=exclude)
    assert index.n_indexed_ == 397 and index.n_samples_fit_ == 400
    ind = index.kneighbors(X[:20], 400 - 3, return_distance=False)
    assert not np.isin(ind, [0, 99, 100]).any()


def test_on_a_fitted_spherical_pca_embedding():
    X = np.abs(np.random.default_rng(6).normal(size=(120, 30)))
    model = SphericalPCA(n_components=4, random_state=0).fit(X)
    index = NeighborIndex().fit(model.embedding_)
    _, ind = index.kneighbors(model.transform(X[:5]), n_neighbors=3)
    assert ind[:, 0].tolist() == [0, 1, 2, 3, 4]


def test_bad_input_is_refused():
    X = _clustered(50, 4, 7)
    index = NeighborIndex("flat").fit(X)
    with pytest.raises(ParameterError, match="n_neighbors=51"):
        index.kneighbors(X[:1], n_neighbors=51)
    with pytest.raises(ParameterError, match="n_neighbors=50"):
        index.kneighbors(n_neighbors=50)  # 49 other rows
    with pytest.raises(DataError, match="no direction"):
        index.kneighbors(np.zeros((1, 4)), n_neighbors=1)
    with pytest.raises(ParameterError, match="nlist=64"):
        NeighborIndex("ivf", nlist=64).fit(X)
    with pytest.raises(ParameterError):
        NeighborIndex("hnsw").fit(X)


def test_distances_of_identical_and_duplicate_rows_are_never_negative():
    # float32 inner products of a unit row with itself exceed 1 by an ulp for some rows:
    # 1 - cos must be clipped at 0 as sklearn.metrics.pairwise does, not come out -1.2e-7
    X = np.repeat(_clustered(200, 37, 5), 2, axis=0)  # every row twice
    index = NeighborIndex("flat").fit(X)
    dist, _ = index.kneighbors(X, n_neighbors=2)
    assert (dist >= 0.0).all()
    np.testing.assert_allclose(dist, 0.0, atol=1e-6)
    own, _ = index.kneighbors(n_neighbors=1)  # each row's duplicate
    assert (own >= 0.0).all()
