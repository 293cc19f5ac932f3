"""``sphdist plot convergence`` / ``plot embedding``: PNGs written, projections, sampling."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from matplotlib.image import imread

from sphdist.cli import main
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.jobs import run
from sphdist.jobs.fit import FitRequest
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
            r: run(FitRequest(corpus.path, root / f"m{r}.zarr", n_components=r, max_iter=6, tol=0,
                              callback=None, checkpoint_every=100))
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
        run(FitRequest(corpus.path, out, n_components=2, max_iter=4, tol=1e-9, lam=lam,
                       callback=None))
        s = convergence_series(open_model(out).attrs)
        f = np.asarray(open_model(out).objective)
        np.testing.assert_allclose(s["relative_change"], np.abs(np.diff(f)) / f[:-1])
        assert s["tol"] == 1e-9 and s["k"].tolist() == [1, 2, 3, 4]
        # the exact V-step keeps no V_{k-1}: no V step norm to draw
        assert (s["v_step"] is None) == (lam == "exact")


def _overlaps(a, b):
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def _drawn(fig):
    """Draw ``fig`` on the Agg canvas; return its renderer (extents in display pixels)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


@pytest.mark.parametrize("r", [2, 3, 5])
def test_the_legend_lies_outside_the_axes(models, tmp_path, r):
    from sphdist.jobs.plotting import embedding_figure

    fig, _ = embedding_figure(models[r].path, tmp_path / "e.png")
    renderer = _drawn(fig)
    (ax,) = fig.axes
    legend = ax.get_legend()
    assert legend is not None and [t.get_text() for t in legend.get_texts()] == ["x", "y"]
    assert not _overlaps(legend.get_window_extent(renderer), ax.get_window_extent(renderer))


def test_the_sphere_tick_labels_do_not_overlap(models, tmp_path):
    from sphdist.jobs.plotting import embedding_figure

    fig, _ = embedding_figure(models[3].path, tmp_path / "e.png")
    renderer = _drawn(fig)
    (ax,) = fig.axes
    boxes = [t.get_window_extent(renderer)
             for axis in (ax.xaxis, ax.yaxis, ax.zaxis) for t in axis.get_ticklabels()
             if t.get_visible() and t.get_text()]
    assert not [(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:] if _overlaps(a, b)]
    assert [a.get_text() for a in (ax.xaxis.label, ax.yaxis.label, ax.zaxis.label)] == [
        "v1", "v2", "v3"]


def test_a_transformed_set_is_titled_by_its_embedding_with_empty_and_degenerate_apart(
        tmp_path):
    """3 documents without a token and 2 whose only features the model gives no weight."""
    import scipy.sparse as sp

    from sphdist.jobs import run
    from sphdist.jobs.plotting import embedding_figure
    from sphdist.jobs.transform import TransformRequest

    m, unused = 40, slice(30, 40)  # features 30..39 never occur in the training corpus
    X = random_corpus(m, N, density=0.2, seed=7).tolil()
    X[unused, :] = 0
    with CorpusWriter(tmp_path / "train.zarr", n_features=m, feature_scheme={"type": "hashing"},
                      label_names=["x", "y"]) as w:
        w.write_chunk(sp.csc_matrix(X), [str(j) for j in range(N)], np.arange(N) % 2)
        train = w.commit(idf=np.ones(m))
    model = run(FitRequest(train.path, tmp_path / "m.zarr", n_components=3, max_iter=4, tol=0,
                           callback=None))
    assert np.all(model.U[unused] == 0)  # the U-step is a polar factor of X V^T
    new = random_corpus(m, 15, density=0.3, seed=8, n_empty=0).tolil()
    new[unused, :] = 0
    new[:, 10:13] = 0  # 3 empty documents
    new[:, 13:15] = 0
    new[30, 13] = new[35, 14] = 1.0  # 2 degenerate: tokens only where U is zero
    with CorpusWriter(tmp_path / "new.zarr", n_features=m, feature_scheme={"type": "hashing"},
                      label_names=["x", "y"]) as w:
        w.write_chunk(sp.csc_matrix(new), [f"n{j}" for j in range(15)], np.arange(15) % 2)
        corpus = w.commit(idf=np.ones(m))
    assert corpus.n_empty == 3
    emb = run(TransformRequest(model.path, corpus.path, tmp_path / "new.emb.zarr"))
    assert emb.attrs["n_degenerate"] == 5
    fig, report = embedding_figure(model.path, tmp_path / "e.png", input=emb.path)
    assert (report["n_left_out"], report["n_empty"], report["n_degenerate"]) == (5, 3, 2)
    title = fig._suptitle.get_text()
    assert title.startswith("new.emb.zarr") and "3 empty, 2 degenerate left out" in title
    assert "10 documents" not in title and "15 documents" in title
    # the training set is titled by the model
    fig, report = embedding_figure(model.path, tmp_path / "t.png")
    assert fig._suptitle.get_text().startswith("m.zarr: ") and report["n_degenerate"] == 0


# -- plot convergence of a short and a long fit (issue 22) ------------------------------------


@pytest.fixture(scope="module")
def nine(corpus, tmp_path_factory):
    """A fit of 9 iterations that keeps V_{k-1} (lam = 2.5): both step norms are drawn."""
    import dask

    path = tmp_path_factory.mktemp("nine") / "m9.zarr"
    with dask.config.set(scheduler="sync"):
        return run(FitRequest(corpus.path, path, n_components=3, max_iter=9, tol=0, lam=2.5,
                              callback=None, checkpoint_every=100))


def _faked(model, n_iter, decades):
    """``model`` with its histories faked: ``n_iter`` iterations, each decaying geometrically
    over ``decades`` decades (the objective's gap to its last value, the step norms)."""
    from sphdist.io.model import open_model

    fake = open_model(model.path)
    a = dict(fake.attrs)
    f = np.asarray(a["objective"], dtype=np.float64)
    k = np.arange(n_iter + 1)
    rate = 10.0 ** (-decades / n_iter)
    gap = (f[0] - f[-1]) * rate ** k
    a["objective"] = (f[-1] + gap - gap[-1]).tolist()
    a["u_step_norm"] = (0.3 * rate ** k[1:]).tolist()
    a["v_step_norm"] = (0.5 * rate ** k[1:]).tolist()
    a["n_iter"], a["converged"] = n_iter, False
    a["params"] = {**a["params"], "max_iter": n_iter, "tol": 1e-12}
    fake.attrs = a
    return fake


def _long(model):
    return _faked(model, 2000, 13)


def _tick_labels(fig):
    """The extents of every tick label drawn (major and minor, x and y, all panels): those of
    the ticks inside the view limits (matplotlib locates some beyond them, and draws none)."""
    renderer = _drawn(fig)

    def inside(axis, loc):
        lo, hi = sorted(axis.get_view_interval())
        return lo - 1e-9 * abs(lo) <= loc <= hi + 1e-9 * abs(hi)

    return [(label.get_text(), label.get_window_extent(renderer))
            for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
            for tick in axis.get_major_ticks() + axis.get_minor_ticks()
            if inside(axis, tick.get_loc())
            for label in (tick.label1, tick.label2)
            if label.get_visible() and label.get_text()]


def _overlapping(labels):
    return [(a, b) for i, (a, x) in enumerate(labels) for b, y in labels[i + 1:]
            if _overlaps(x, y)]


@pytest.mark.parametrize("case", ["fit of 9", "9 over 1.4 decades", "2000 over 13 decades"])
def test_convergence_panels_are_on_log_scales_without_crowded_tick_labels(nine, case):
    """At 1.1 to 2 decades matplotlib's default labels the minor ticks 2, 3, 4 x 10^k, which
    overlap in a panel of two inches."""
    from sphdist.jobs.plotting import convergence_figure

    model = {"fit of 9": nine, "9 over 1.4 decades": _faked(nine, 9, 1.4),
             "2000 over 13 decades": _long(nine)}[case]
    n_iter = model.n_iter
    fig = convergence_figure(model)
    axes = fig.axes
    assert len(axes) == 3
    # the objective's gap to its lowest value, the step norms and the relative change: every
    # panel on a log scale, so that a decay over 2,000 iterations is not flat after the 5th
    assert [ax.get_yscale() for ax in axes] == ["log", "log", "log"]
    assert axes[0].get_lines()[0].get_xdata().max() >= n_iter - 1  # drawn to the end
    labels = _tick_labels(fig)
    for ax in axes:  # every panel keeps labelled values on its y axis
        assert len([t for t in ax.yaxis.get_ticklabels(which="both")
                    if t.get_visible() and t.get_text()]) >= 2
    assert not _overlapping(labels), _overlapping(labels)


def test_a_long_fit_has_no_marker_on_each_point_and_a_short_one_has(nine):
    from sphdist.jobs.plotting import convergence_figure

    def markers(fig):
        return {len(line.get_xdata()): line.get_marker() for ax in fig.axes
                for line in ax.get_lines() if len(line.get_xdata()) > 1}

    long = markers(convergence_figure(_long(nine)))
    assert long and all(m in ("None", "", " ", None) for m in long.values()), long
    short = markers(convergence_figure(nine))
    assert short and all(m not in ("None", "", " ", None) for m in short.values()), short


# -- issue 33 item 8: readable at 5, 20 and 200 labels, every drawn label in the legend --------


@pytest.mark.parametrize("n_labels", [5, 20, 200])
def test_the_legend_is_readable_at_any_number_of_labels(tmp_path, n_labels):
    """The most frequent labels (at most 10) each in a colour of their own and in the legend
    (names starting with "_", which matplotlib drops from a legend it collects, included);
    the rest grey and counted in one entry; the figure the same size at 5 and at 200."""
    from matplotlib.collections import PathCollection
    from matplotlib.colors import to_hex

    from sphdist.jobs import run
    from sphdist.jobs.plotting import COLOURED_LABELS, OTHER_LABELS_GREY, PlotEmbeddingRequest

    n = 600
    names = [f"_private{i}" if i % 3 == 0 else f"label{i:03d}" for i in range(n_labels)]
    codes = np.random.default_rng(1).integers(0, n_labels, size=n)
    path = tmp_path / f"c{n_labels}.zarr"
    with CorpusWriter(path, n_features=M, feature_scheme={"type": "hashing"},
                      label_names=names) as w:
        w.write_chunk(random_corpus(M, n, seed=6), [str(j) for j in range(n)], codes)
        w.commit(idf=np.ones(M))
    model = run(FitRequest(path, tmp_path / "m.zarr", n_components=3, max_iter=2, tol=0,
                           callback=None, checkpoint_every=100))
    from sphdist.jobs.plotting import embedding_figure

    fig, report = embedding_figure(model.path, tmp_path / "e.png", max_points=n)
    _drawn(fig)
    (ax,) = fig.axes
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    coloured, n_other = report["labels_coloured"], report["n_other_labels"]
    assert len(coloured) == min(n_labels, COLOURED_LABELS)
    assert texts[:len(coloured)] == coloured
    assert any(x.startswith("_") for x in coloured)
    if n_labels > COLOURED_LABELS:
        # the labels of the points plotted (some of 200 labels of 3 documents have none)
        assert 0.8 * (n_labels - COLOURED_LABELS) <= n_other <= n_labels - COLOURED_LABELS
        assert texts[len(coloured):] == [f"{n_other} other labels"]
    else:
        assert n_other == 0 and texts[len(coloured):] == []
    # every label drawn in colour is in the legend, each colour once, the largest first
    points = [c for c in ax.collections if isinstance(c, PathCollection)]
    assert sum(c.get_offsets().shape[0] for c in points) == report["n_points"]
    grey = to_hex(OTHER_LABELS_GREY)
    drawn = [c for c in points if to_hex(c.get_facecolor()[0], keep_alpha=False) != grey]
    colours = [to_hex(c.get_facecolor()[0], keep_alpha=False) for c in drawn]
    assert len(drawn) == len(set(colours)) == len(coloured)
    sizes = [c.get_offsets().shape[0] for c in drawn]
    assert sizes == sorted(sizes, reverse=True)
    out = run(PlotEmbeddingRequest(model.path, tmp_path / "e.png", max_points=n))["output"]
    height, width = imread(out).shape[:2]
    assert height < 900 and width < 1400, (height, width)  # 180 labels made 916 x 3585


@pytest.mark.parametrize("which", ["convergence", "embedding"])
def test_a_figure_that_exists_is_replaced_only_with_overwrite(models, tmp_path, which):
    """``plot`` refuses an existing figure as every other output does, and --overwrite replaces
    it; the refused figure keeps its bytes and nothing is staged beside it."""
    out = tmp_path / f"{which}.png"
    out.write_bytes(b"not a figure yet")
    argv = ["plot", which, "-m", str(models[3].path), "-o", str(out)]
    refused = CliRunner().invoke(main, argv)
    assert refused.exit_code == 1, refused.output
    assert "already exists" in refused.output and "--overwrite" in refused.output
    assert "Traceback" not in refused.output
    assert out.read_bytes() == b"not a figure yet"
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]
    replaced = CliRunner().invoke(main, [*argv, "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    _png(out)
