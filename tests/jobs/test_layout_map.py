"""``sphdist layout`` and ``sphdist map`` on a small synthetic corpus, as a user types them.

The graph stored is checked against a NumPy reference (every cosine), the coordinates against
themselves (the same seed) and the page for what it must not hold (a script from the network).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.io.model import open_model
from tests._cli_stores import cli_ok, working_directory

N_DOCS = 300


def _fails(*args):
    result = CliRunner().invoke(main, ["--quiet", *map(str, args)])
    assert result.exit_code == 1, result.output
    return result.output


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    where = tmp_path_factory.mktemp("map")
    with working_directory(where):
        cli_ok("synth", "--n-docs", N_DOCS, "--n-topics", 4, "--vocab-size", 250,
               "--format", "jsonl", "-o", "s.jsonl")
        cli_ok("ingest", "s.jsonl", "--label-field", "label", "-o", "c.zarr")
        cli_ok("fit", "-i", "c.zarr", "-o", "m.zarr", "-r", 5, "--max-iter", 30)
        cli_ok("layout", "-m", "m.zarr")
        yield where


def _reference_neighbours(model, k):
    V = open_model(model).V().compute()
    C = V.T @ V
    np.fill_diagonal(C, -np.inf)
    return np.argsort(-C, axis=1, kind="stable")[:, :k], C


def test_layout_stores_the_exact_graph_and_finite_coordinates(stores):
    group = zarr.open_group(str(stores / "m.layout.zarr"), mode="r")
    assert group.attrs["sphdist"] == {"kind": "layout", "format_version": 1}
    xy, nbr, cos = group["xy"][...], group["neighbors"][...], group["cosine"][...]
    assert xy.shape == (2, N_DOCS) and np.isfinite(xy).all()
    ref, C = _reference_neighbours(stores / "m.zarr", 10)
    assert nbr.shape == (10, N_DOCS)
    for j in range(N_DOCS):  # the same cosines, nearest first (ties may swap places)
        np.testing.assert_allclose(cos[:, j], C[j, ref[j]], atol=1e-9)
        np.testing.assert_allclose(C[j, nbr[:, j]], C[j, ref[j]], atol=1e-9)
    kept = group.attrs["layout"]["kept_10nn"]
    assert kept > 20 * 10 / N_DOCS  # far above the chance of a random map (k / n)


def test_layout_is_reproducible_from_its_seed(stores):
    with working_directory(stores):
        cli_ok("layout", "-m", "m.zarr", "-o", "again.zarr")
        cli_ok("layout", "-m", "m.zarr", "-o", "other.zarr", "--seed", 3)
    first = zarr.open_group(str(stores / "m.layout.zarr"), mode="r")["xy"][...]
    again = zarr.open_group(str(stores / "again.zarr"), mode="r")["xy"][...]
    other = zarr.open_group(str(stores / "other.zarr"), mode="r")["xy"][...]
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)


@pytest.mark.parametrize("n", [400, 10_000], ids=["barnes-hut", "fft"])
def test_layout_coordinates_do_not_depend_on_the_threads(n):
    """``sphdist layout`` runs openTSNE on every core: the same bits as on one thread."""
    from sphdist.jobs.layout import tsne_layout

    rng = np.random.default_rng(0)  # a k-NN-like graph: ten random others per point
    graph = (np.arange(n)[:, None] + rng.integers(1, n, size=(n, 10))) % n
    graph[5, 7:] = -1  # a row with fewer neighbours
    one = tsne_layout(graph, seed=2, n_iter=30, n_jobs=1)
    two = tsne_layout(graph, seed=2, n_iter=30, n_jobs=2)
    assert np.isfinite(one).all()
    np.testing.assert_array_equal(one, two)


def test_layout_refuses_an_existing_output_without_overwrite(stores):
    with working_directory(stores):
        message = _fails("layout", "-m", "m.zarr")
        assert "already exists" in message and "--overwrite" in message


def test_a_damaged_layout_is_refused_by_its_digest(stores, tmp_path):
    import shutil

    copy = tmp_path / "damaged.zarr"
    shutil.copytree(stores / "m.layout.zarr", copy)
    group = zarr.open_group(str(copy), mode="r+")
    xy = group["xy"][...]
    xy[0, 0] += 1.0
    group["xy"][...] = xy  # a valid chunk with other values: only the digest tells
    with working_directory(stores):
        message = _fails("map", "-m", "m.zarr", "--layout", copy, "-o", tmp_path / "x.html")
    assert "sha256" in message and "sphdist layout" in message


def test_map_writes_one_self_contained_page(stores):
    with working_directory(stores):
        out = cli_ok("map", "-m", "m.zarr", "-o", "map.html", "--json").output
    report = json.loads(out)
    assert report["n_points"] == N_DOCS and report["colour"] == "label"
    assert report["n_groups"] == 4 and report["k"] == 10
    text = (stores / "map.html").read_text(encoding="utf-8")
    assert "<script src=" not in text.replace(" ", "")  # the library is inlined, no CDN
    assert "cdn.bokeh.org" not in text
    assert "Bokeh" in text and '"documents"' in text


def test_map_by_cluster_names_clusters_by_terms(stores, tmp_path):
    with working_directory(stores):
        report = json.loads(cli_ok("map", "-m", "m.zarr", "-o", tmp_path / "c.html",
                                   "--colour", "cluster", "-k", 3, "--json").output)
    assert report["colour"] == "cluster" and report["n_groups"] == 3


def test_map_refuses_a_missing_layout_naming_the_command(stores, tmp_path):
    with working_directory(stores):
        message = _fails("map", "-m", "m.zarr", "--layout", tmp_path / "none.zarr",
                         "-o", tmp_path / "x.html")
    assert "sphdist layout" in message and "none.zarr" in message


def test_map_refuses_an_output_of_another_format(stores, tmp_path):
    with working_directory(stores):
        message = _fails("map", "-m", "m.zarr", "-o", tmp_path / "x.png")
    assert "x.png" in message and ".html" in message


def test_map_refuses_a_layout_older_than_its_model(stores, tmp_path):
    import shutil

    for name in ("c.zarr", "m.zarr", "m.layout.zarr"):
        shutil.copytree(stores / name, tmp_path / name)
    with working_directory(tmp_path):
        cli_ok("fit", "-i", "c.zarr", "-o", "m.zarr", "-r", 5, "--max-iter", 30, "--seed", 9,
               "--overwrite")
        message = _fails("map", "-m", "m.zarr", "-o", "x.html")
    assert "older than its model" in message
    assert "sphdist layout" in message and "--overwrite" in message
    assert not (tmp_path / "x.html").exists()


def test_map_refuses_to_colour_by_labels_documents_without_labels(tmp_path):
    with working_directory(tmp_path):
        cli_ok("synth", "--n-docs", 60, "--n-topics", 2, "--vocab-size", 80, "--format",
               "jsonl", "-o", "s.jsonl")
        cli_ok("ingest", "s.jsonl", "-o", "c.zarr")
        cli_ok("fit", "-i", "c.zarr", "-o", "m.zarr", "-r", 3, "--max-iter", 10)
        cli_ok("layout", "-m", "m.zarr", "-k", 5)
        message = _fails("map", "-m", "m.zarr", "-o", "x.html", "--colour", "label")
        assert "no labels" in message and "--colour cluster" in message
        report = json.loads(cli_ok("map", "-m", "m.zarr", "-o", "x.html", "--json").output)
    assert report["colour"] == "cluster"


def test_map_writes_the_table_embedding_atlas_reads(stores):
    import pyarrow.parquet as pq

    with working_directory(stores):
        report = json.loads(cli_ok("map", "-m", "m.zarr", "-o", "atlas.parquet",
                                   "--json").output)
    assert report["format"] == "atlas" and report["n_points"] == N_DOCS
    table = pq.read_table(stores / "atlas.parquet").to_pylist()
    assert {"id", "x", "y", "label", "text", "neighbors"} <= set(table[0])
    docs = [json.loads(line) for line in (stores / "s.jsonl").read_text().splitlines()]
    assert [row["id"] for row in table] == [d["id"] for d in docs]
    assert [row["label"] for row in table] == [d["label"] for d in docs]
    _, C = _reference_neighbours(stores / "m.zarr", 10)
    for j in (0, 17, N_DOCS - 1):  # rows of the nearest, nearest first, distance 1 - cos
        near = table[j]["neighbors"]
        assert len(near["ids"]) == 10
        np.testing.assert_allclose(near["distances"], 1 - C[j, near["ids"]], atol=1e-6)
        assert np.all(np.diff(near["distances"]) >= -1e-6)
        assert 1 - max(near["distances"]) >= np.sort(C[j])[-10] - 1e-6
    assert min(min(row["neighbors"]["distances"]) for row in table) >= 0  # as scikit-learn's


def test_an_embedding_is_laid_out_beside_itself_and_drawn(stores):
    with working_directory(stores):
        cli_ok("transform", "-m", "m.zarr", "-i", "c.zarr", "-o", "e.zarr")
        cli_ok("layout", "-m", "m.zarr", "-i", "e.zarr")
        report = json.loads(cli_ok("map", "-m", "m.zarr", "-i", "e.zarr", "-o", "e.html",
                                   "--json").output)
    group = zarr.open_group(str(stores / "e.layout.zarr"), mode="r")
    assert group.attrs["source"]["origin"] == "embedding"
    # the same documents as the training corpus: the same graph as the model's layout
    model_graph = zarr.open_group(str(stores / "m.layout.zarr"), mode="r")["cosine"][...]
    np.testing.assert_allclose(group["cosine"][...], model_graph, atol=1e-9)
    assert report["n_points"] == N_DOCS and report["colour"] == "label"
