"""``sphdist plot convergence`` / ``plot embedding``: PNGs written, projections, sampling."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from matplotlib.image import imread

from sphdist.cli import main
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.jobs.fit import fit_corpus
from sphdist.jobs.plotting import sample_documents

from ..reference import random_corpus

pytestmark = pytest.mark.usefixtures("sync_scheduler")
M, N = 40, 60


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("plot") / "c.zarr"
    X = random_corpus(M, N, seed=5)
    with CorpusWriter(path, n_features=M, feature_scheme={"type": "hashing"},
                      label_names=["x", "y"]) as w:
        w.write_chunk(X, [str(j) for j in range(N)], np.arange(N) % 2)
        return w.commit(idf=np.ones(M))


@pytest.fixture(scope="module")
def models(corpus, tmp_path_factory):
    import dask

    root = tmp_path_factory.mktemp("models")
    with dask.config.set(scheduler="sync"):
        return {
            r: fit_corpus(corpus.path, root / f"m{r}.zarr", n_components=r, max_iter=6, tol=0,
                          callback=None, checkpoint_every=100)
            for r in (2, 3, 5)
        }


def _png(path):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = imread(path)
    assert image.shape[0] > 200 and image.shape[1] > 200
    assert image[..., :3].std() > 0.05  # something is drawn
    return image


def test_plot_convergence(models, tmp_path):
    model = models[3]
    out = tmp_path / "conv.png"
    result = CliRunner().invoke(main, ["plot", "convergence", "-m", str(model.path), "-o",
                                       str(out)])
    assert result.exit_code == 0, result.output
    _png(out)
    assert not list(tmp_path.glob("conv.png.tmp-*"))


@pytest.mark.parametrize(("r", "projection"), [(3, "sphere-3d"), (5, "pca-2d"),
                                               (2, "circle")])
def test_plot_embedding(models, tmp_path, r, projection):
    model = models[r]
    out = tmp_path / "emb.png"
    result = CliRunner().invoke(main, ["plot", "embedding", "-m", str(model.path), "-o",
                                       str(out), "--max-points", "25", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["projection"] == projection
    assert report["n_points"] == 25 and report["n_documents"] == N
    _png(out)


def test_sample_is_reproducible_sorted_and_distinct():
    a, b = sample_documents(10_000, 300, seed=3), sample_documents(10_000, 300, seed=3)
    np.testing.assert_array_equal(a, b)
    assert np.all(np.diff(a) > 0) and a[0] >= 0 and a[-1] < 10_000
    assert not np.array_equal(a, sample_documents(10_000, 300, seed=4))


def test_convergence_series_of_a_stateless_and_a_kept_fit(tmp_path):
    from sphdist.io.model import open_model
    from sphdist.jobs.plotting import convergence_series

    X = random_corpus(30, 60, seed=4)
    with CorpusWriter(tmp_path / "c.zarr", n_features=30, feature_scheme={"type": "hashing"}) as w:
        w.write_chunk(X, [str(j) for j in range(60)])
        corpus = w.commit(idf=np.ones(30))
    for lam in ("exact", 2.5):
        out = tmp_path / f"m{lam}.zarr"
        fit_corpus(corpus.path, out, n_components=2, max_iter=4, tol=1e-9, lam=lam,
                   callback=None)
        s = convergence_series(open_model(out).attrs)
        f = np.asarray(open_model(out).objective)
        np.testing.assert_allclose(s["relative_change"], np.abs(np.diff(f)) / f[:-1])
        assert s["tol"] == 1e-9 and s["k"].tolist() == [1, 2, 3, 4]
        # the exact V-step keeps no V_{k-1}: no V step norm to draw
        assert (s["v_step"] is None) == (lam == "exact")
