"""Helpers and registry of the paper reproductions (pipelines/_experiments.py), on tiny data."""

from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner
from sklearn.feature_selection import mutual_info_classif

from sphdist.errors import DataError, InputNotFoundError, ParameterError

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
sys.path.insert(0, str(PIPELINES))

import _experiments as ex  # noqa: E402


@pytest.fixture(autouse=True)
def _sync_dask():
    import dask

    with dask.config.set(scheduler="synchronous"):
        yield


def _blobs(n_per=15, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.eye(4)[:3] * 3 + 0.5
    y = np.repeat(np.arange(3), n_per)
    X = np.abs(centres[y] + 0.1 * rng.standard_normal((y.size, 4)))
    return X, y


# -- the papers' numbers ------------------------------------------------------------------


def test_paper_tables_are_complete_and_in_range():
    for table in (ex.LIU_TABLE1, {k: v[1] for k, v in ex.LIU_TABLE2.items()}):
        for row in table.values():
            assert set(row) == set(ex.PAPER_METHODS)
            assert all(0 < a < 1 and 0 < n < 1 for a, n in row.values())
    assert sorted(ex.LIU_TABLE1) == [5, 10, 15, 20]
    # Sun et al. Table 1: AD has the lower residual in every printed row
    assert all(ad < bae and gad < gbae for bae, ad, gbae, gad in ex.SUN_TABLE1.values())


def test_paper_key_matches_file_names():
    assert ex.paper_key("Glass.csv") == "glass"
    assert ex.paper_key("isolet (26)") == "isolet"
    assert ex.paper_key("work/x") == "work/x"


def test_newsgroup_order_is_the_twenty_groups_paper_five_first():
    assert len(set(ex.NEWSGROUP_ORDER)) == 20
    assert ex.NEWSGROUP_ORDER[:5] == tuple(ex.NEWSGROUPS_PAPER_CATEGORIES)


# -- registry -----------------------------------------------------------------------------


def test_unknown_method_raises():
    with pytest.raises(ParameterError, match="nosuch"):
        ex.resolve_methods(["pca", "nosuch"])


def test_missing_module_is_skipped_not_fatal(monkeypatch):
    ghost = ex.Method("ghost", "Ghost", ex._from("sphdist.no_such_module", "Ghost"))
    monkeypatch.setitem(ex.METHODS, "ghost", ghost)
    methods, skipped = ex.resolve_methods(["pca", "ghost"])
    assert [m.key for m in methods] == ["pca"]
    assert "ghost" in skipped and "no_such_module" in skipped["ghost"]


def test_core_methods_available_and_in_paper_order():
    methods, skipped = ex.resolve_methods(["spca", "kmeans", "nmf", "pca"])
    assert not skipped
    assert [m.key for m in methods] == ["kmeans", "nmf", "pca", "spca"]


@pytest.mark.parametrize("key", ["kmeans", "pca", "nmf", "spca"])
def test_embedding_shapes(key):
    X, _ = _blobs()
    Z = ex.embed(ex.METHODS[key], X, 2, 0)
    assert Z.shape == ((X.shape[0], 4) if key == "kmeans" else (X.shape[0], 2))
    assert np.all(np.isfinite(Z))
    if key == "spca":  # Spherical PCA: unit rows
        np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0, atol=1e-10)


def test_evaluate_methods_scores_and_isolates_failures(monkeypatch):
    X, y = _blobs()

    class Broken:
        def fit_transform(self, X):
            raise RuntimeError("boom")

    monkeypatch.setitem(ex.METHODS, "broken", ex.Method("broken", "Broken",
                                                        lambda r, s: Broken()))
    methods = [ex.METHODS[k] for k in ("kmeans", "broken", "pca", "nmf")]
    recs = ex.evaluate_methods(methods, X, y, n_components=3, seed=0)
    by = {r["method"]: r for r in recs}
    assert by["kmeans"]["accuracy"] == 1.0 and by["pca"]["accuracy"] == 1.0
    assert "boom" in by["broken"]["error"]
    # NMF does not apply to negative data: recorded, not raised
    recs = ex.evaluate_methods(methods[3:], X - 2.0, y, n_components=3, seed=0)
    assert recs[0]["error"] == "needs non-negative X"


def test_summarise_against_numpy():
    rng = np.random.default_rng(0)
    acc, nmi = rng.random(5), rng.random(5)
    recs = [{"method": "m", "accuracy": a, "nmi": b, "seconds": 1.0}
            for a, b in zip(acc, nmi, strict=True)]
    recs.append({"method": "m", "error": "x", "seconds": 0.0})
    recs.append({"method": "f", "error": "only failures"})
    s = ex.summarise(recs)
    assert s["m"]["n"] == 5
    assert s["m"]["acc_mean"] == pytest.approx(np.mean(acc))
    assert s["m"]["nmi_std"] == pytest.approx(np.std(nmi, ddof=1))
    assert s["f"] == {"n": 0, "error": "only failures"}
    rows = ex.score_table(s, {"m": (0.5, 0.25)}, 6)
    assert "0.500" in rows[2] and "5/6" in rows[2] and "n/a" in rows[3]


def test_kmeans_scores_nmi_max_is_xu_liu_gong_definition():
    # two tight blobs, one label split across both: k-means finds the blobs
    Z = np.array([[0.0, 0.0]] * 4 + [[5.0, 5.0]] * 4) + 0.01 * np.arange(8)[:, None]
    y = np.array([0, 0, 0, 1, 1, 1, 1, 1])
    acc, nmi, nmi_max = ex.kmeans_scores(Z, y, 2, 0)
    pred = (Z[:, 0] > 2).astype(int)
    joint = np.histogram2d(y, pred, bins=2)[0] / y.size
    py, pp = joint.sum(1), joint.sum(0)
    nz = joint > 0
    mi = np.sum(joint[nz] * np.log(joint[nz] / np.outer(py, pp)[nz]))
    h = [-np.sum(p * np.log(p)) for p in (py, pp)]
    assert acc == pytest.approx(7 / 8)
    assert nmi_max == pytest.approx(mi / max(h))
    assert nmi == pytest.approx(mi / np.mean(h))


def test_kmeans_scores_rejects_nan():
    with pytest.raises(DataError):
        ex.kmeans_scores(np.full((4, 2), np.nan), np.array([0, 0, 1, 1]), 2, 0)


# -- mutual information word selection -------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_binary_mutual_info_equals_scikit_learn(seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, size=80)
    B = (rng.random((80, 30)) < 0.3).astype(np.int64)
    B[:, 0] = y == 2  # an informative word
    B[:, 1] = 0  # a word absent everywhere
    ours = ex.binary_mutual_info(sp.csr_matrix(B), y)
    ref = mutual_info_classif(B, y, discrete_features=True)
    np.testing.assert_allclose(ours, ref, atol=1e-12)
    assert ours.argmax() == 0 and ours[1] == 0.0


TEXTS = ["space shuttle orbit nasa launch", "orbit launch moon nasa", "nasa space moon",
         "baseball pitcher inning game", "game inning hitter baseball", "pitcher baseball"] * 3


def test_mi_tfidf_both_methods_select_the_same_words():
    y = np.tile(np.repeat([0, 1], 3), 3)
    X1, w1 = ex.mi_tfidf(TEXTS, y, 4, mi_method="sklearn", min_df=1)
    X2, w2 = ex.mi_tfidf(TEXTS, y, 4, mi_method="counts", min_df=1)
    assert list(w1) == list(w2)
    np.testing.assert_allclose(X1, X2)
    assert X1.shape == (len(TEXTS), 4)
    norms = np.linalg.norm(X1, axis=1)
    assert np.all((np.abs(norms - 1) < 1e-12) | (norms == 0))
    assert {"nasa", "baseball"} <= set(w1)
    with pytest.raises(ParameterError):
        ex.mi_tfidf(TEXTS, y, 4, mi_method="bogus", min_df=1)


# -- data --------------------------------------------------------------------------------


def _tar(tmp_path):
    path = tmp_path / "ng.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for split in ("train", "test"):
            for group in ("sci.space", "rec.autos"):
                for i in range(3):
                    body = f"From: a@b\nSubject: {group}\n\nbody {group} {split} {i}\n"
                    data = body.encode("latin-1")
                    info = tarfile.TarInfo(f"20news-bydate-{split}/{group}/{i}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return path


def test_read_newsgroups_pools_splits_and_strips_headers(tmp_path):
    docs = ex.read_newsgroups(_tar(tmp_path))
    assert sorted(docs) == ["rec.autos", "sci.space"]
    assert len(docs["sci.space"]) == 6
    assert all("Subject" not in t and t.startswith("body") for t in docs["sci.space"])
    with pytest.raises(InputNotFoundError):
        ex.read_newsgroups(tmp_path / "none.tar.gz")


def test_sample_documents(tmp_path):
    docs = ex.read_newsgroups(_tar(tmp_path))
    texts, y = ex.sample_documents(docs, ["sci.space", "rec.autos"], 4,
                                   np.random.default_rng(0))
    assert np.bincount(y).tolist() == [4, 4]
    assert len(set(texts[:4])) == 4 and all("sci.space" in t for t in texts[:4])
    with pytest.raises(DataError, match="fewer"):
        ex.sample_documents(docs, ["sci.space"], 7, np.random.default_rng(0))


def test_load_labelled_csv(tmp_path):
    path = tmp_path / "Glass.csv"
    path.write_text("a,b,kind\n1,2,x\n3,4,y\n5,6,x\n")
    ds = ex.load_labelled(path)
    assert ds.name == "glass"
    np.testing.assert_array_equal(ds.X, [[1, 2], [3, 4], [5, 6]])
    assert ds.y.tolist() == [0, 1, 0] and ds.label_names == ["x", "y"]
    ds = ex.load_labelled(path, name="other")
    assert ds.name == "other"
    with pytest.raises(DataError, match="not numeric"):
        ex.load_labelled(path, label_column="a")
    with pytest.raises(DataError, match="no column"):
        ex.load_labelled(path, label_column="zzz")
    with pytest.raises(InputNotFoundError):
        ex.load_labelled(tmp_path / "missing.csv")


def test_load_labelled_dense_zarr(tmp_path):
    import zarr

    X = np.arange(12, dtype=np.float64).reshape(6, 2)
    group = zarr.open_group(tmp_path / "d.zarr", mode="w")
    group.create_array("X", data=X, chunks=(4, 2))
    group.create_array("y", data=np.array([0, 0, 1, 1, 2, 2]))
    ds = ex.load_labelled(tmp_path / "d.zarr")
    np.testing.assert_array_equal(ds.X, X)
    assert ds.y.tolist() == [0, 0, 1, 1, 2, 2] and ds.name == "d"


def test_prepare_vectors():
    X = np.array([[1.0, -2.0, 3.0], [0.0, 4.0, 1.0], [2.0, 0.0, 1.0]])
    Z = ex.prepare_vectors(X)
    assert Z.min() >= 0
    np.testing.assert_allclose(np.linalg.norm(Z[Z.any(axis=1)], axis=1), 1.0)
    np.testing.assert_allclose(ex.prepare_vectors(X, "none", False), X)
    with pytest.raises(ParameterError):
        ex.prepare_vectors(X, "log")


# -- pipelines end to end on tiny inputs ----------------------------------------------------


def test_two_cones_geometry():
    from liu_fig2 import two_cones

    X, y = two_cones(40, np.random.default_rng(0), radius=(0.5, 1.0), noise=0.0)
    assert np.bincount(y).tolist() == [20, 20]
    assert np.all(X[y == 0, 1] == 0) and np.all(X[y == 1, 0] == 0)
    other = np.where(y == 0, X[:, 0], X[:, 1])
    assert np.all((other >= 0) & (other <= X[:, 2] + 1e-12))  # between X (Y) = Z and Z axis
    np.testing.assert_array_less(np.linalg.norm(X, axis=1), 1.0 + 1e-12)


def test_liu_table2_cli_on_a_csv(tmp_path):
    from liu_table2 import main

    X, y = _blobs(10)
    path = tmp_path / "Glass.csv"  # a paper data set's name: the paper's figures are shown
    path.write_text("f0,f1,f2,f3,label\n" + "\n".join(
        ",".join(map(str, row)) + f",c{lab}" for row, lab in zip(X, y, strict=True)))
    result = CliRunner().invoke(main, [str(path), "--reps", "2", "--methods",
                                       "kmeans,pca,spca", "--out-dir", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    md = (tmp_path / "out" / "liu_table2.md").read_text()
    assert "| Spherical PCA | 1.000 ± 0.000 | 0.788 |" in md  # Table 2, glass
    assert "| K-means | 1.000 ± 0.000 | 0.687 |" in md
    assert (tmp_path / "out" / "liu_table2.png").stat().st_size > 0


def test_liu_fig2_cli(tmp_path):
    from liu_fig2 import main

    result = CliRunner().invoke(main, ["--n-points", "40", "--trials", "2",
                                       "--out-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "liu_fig2.png").stat().st_size > 0
    assert "Spherical PCA V" in (tmp_path / "liu_fig2.md").read_text()


def test_sun_residuals_against_numpy_and_cli(tmp_path):
    from sun_table1 import main, residuals

    X, y = _blobs(8, seed=3)
    X = ex.prepare_vectors(X)
    r = residuals(X, 3, 0, 50)
    # BAE, vector data (Sun et al. Eq. 25) from a dense SVD written here
    U = np.linalg.svd(X, full_matrices=False)[2][:3].T  # (p, k) right singular vectors
    Q = X @ U
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    B = Q @ U.T
    beta = np.sum(X * B) / np.sum(B * B)
    assert r["bae_vector"] == pytest.approx(np.sum((X - beta * B) ** 2), rel=1e-6)
    # AD starts from the SVD and never increases its objective: at most BAE's residual
    assert r["ad_vector"] <= r["bae_vector"] * (1 + 1e-9)
    assert r["x_sq"] == pytest.approx(X.shape[0])
    path = tmp_path / "Glass.csv"
    path.write_text("f0,f1,f2,f3,label\n" + "\n".join(
        ",".join(map(str, row)) + f",{lab}" for row, lab in zip(X, y, strict=True)))
    result = CliRunner().invoke(main, [str(path), "--no-newsgroups", "--max-iter", "20",
                                       "--out-dir", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    md = (tmp_path / "out" / "sun_table1.md").read_text()
    assert "(paper 2.798)" in md  # Sun et al. Table 1, glass, AD vector
