"""Fits on LocalClusters of worker processes, on a 20 Newsgroups subset."""

import dask
import numpy as np
import pytest

from sphdist.jobs.cluster import connect
from sphdist.jobs.evaluate import evaluate_model
from sphdist.jobs.fit import fit_corpus
from sphdist.metrics import evaluate_embedding

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

KWARGS = dict(n_components=5, max_iter=8, tol=0, random_state=0, split_every=2, callback=None)


def _fit_on_cluster(corpus, out, n_workers):
    with connect(n_workers=n_workers, threads_per_worker=1, memory_limit="2GiB") as client:
        workers = client.scheduler_info()["workers"]
        assert len(workers) == n_workers
        assert all(address.startswith("tcp://127.0.0.1:") for address in workers)
        return fit_corpus(corpus.path, out, **KWARGS)


def test_process_cluster_fit_is_deterministic_and_matches_in_process(newsgroups5, tmp_path):
    one = _fit_on_cluster(newsgroups5, tmp_path / "one.zarr", n_workers=1)
    two = _fit_on_cluster(newsgroups5, tmp_path / "two.zarr", n_workers=2)
    # the reduction order is fixed by the tree, not by which worker finished first
    assert one.objective == two.objective
    np.testing.assert_array_equal(one.U, two.U)
    np.testing.assert_array_equal(one.V().compute(), two.V().compute())

    # in-process (the driver's multi-threaded BLAS may round differently from the workers')
    with dask.config.set(scheduler="sync"):
        local = fit_corpus(newsgroups5.path, tmp_path / "local.zarr", **KWARGS)
    np.testing.assert_allclose(two.objective, local.objective, rtol=1e-12)

    U, V = two.U, two.V().compute()
    assert np.abs(U.T @ U - np.eye(5)).max() <= 1e-10
    assert np.abs(np.linalg.norm(V, axis=0) - 1).max() <= 1e-10
    assert np.all(np.diff(two.objective) <= 0)
    assert V.shape == (5, newsgroups5.n_documents)


def test_embedding_clusters_better_than_chance(newsgroups5, tmp_path):
    with dask.config.set(scheduler="sync"):
        fit_corpus(
            newsgroups5.path, tmp_path / "m.zarr", n_components=5, max_iter=30, random_state=0,
            callback=None,
        )
        report = evaluate_model(tmp_path / "m.zarr", newsgroups5.path, n_init=10)
    assert report["n_documents"] == 300 and report["n_clusters"] == 5
    # baseline measured here: the same k-means on random points of the same sphere
    rng = np.random.default_rng(0)
    noise = rng.standard_normal((300, 5))
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    chance = evaluate_embedding(noise, newsgroups5.labels, n_init=10)
    assert report["accuracy"] > chance["accuracy"] + 0.05
    assert report["nmi"] > chance["nmi"] + 0.05


def test_fit_with_retries_resumes_then_gives_a_typed_error(tmp_path):
    from distributed.client import FutureCancelledError

    from sphdist.errors import WorkersLostError
    from sphdist.jobs.fit import fit_with_retries

    calls = []

    def always_lost(input, output, *, resume, overwrite, **kwargs):
        calls.append((resume, overwrite))
        (tmp_path / "m.zarr").mkdir(exist_ok=True)
        (tmp_path / "m.zarr" / "zarr.json").write_text("{}")  # a checkpoint of this call
        raise FutureCancelledError("x", reason="lost")

    with pytest.raises(WorkersLostError, match="3 attempts .* --resume") as info:
        fit_with_retries(always_lost, tmp_path / "c.zarr", tmp_path / "m.zarr", overwrite=True,
                         retries=2)
    assert isinstance(info.value.__cause__, FutureCancelledError)
    # the first attempt keeps the caller's flags, the retries resume this call's checkpoint
    assert calls == [(False, True), (True, False), (True, False)]
