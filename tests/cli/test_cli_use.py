"""fit --json / --init-from, transform, export and neighbors, driven through click's runner.

One in-process Dask cluster serves the module (``--scheduler-address``), so the distributed
code paths run without the cost of starting worker processes.
"""

import csv
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.io.corpus import open_corpus
from sphdist.io.embedding import open_embedding
from sphdist.io.model import open_model

from .._textcorpus import write_text_tree

R = 3


@pytest.fixture(scope="module")
def runner():
    return CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory, runner, scheduler):
    """A text corpus (30 documents, chunks of 8, one empty document) and a model of it."""
    root = tmp_path_factory.mktemp("use")
    texts = write_text_tree(root / "src")
    corpus, model = root / "corpus.zarr", root / "model.zarr"
    result = runner.invoke(main, [
        "ingest", str(root / "src"), "-o", str(corpus), "--hashing", "--n-features", "512",
        "--chunk-size", "8",
    ])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, [
        "fit", "-i", str(corpus), "-o", str(model), "-r", str(R), "--max-iter", "15",
        "--tol", "0", "--checkpoint-every", "5", "--scheduler-address", scheduler, "--json",
    ])
    assert result.exit_code == 0, result.output
    return {"root": root, "texts": texts, "corpus": corpus, "model": model,
            "fit_report": json.loads(result.stdout)}


def _error_line(result):
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ") and "Traceback" not in result.output
    return lines[0]


def _dense(corpus):
    return corpus.to_dask().compute().toarray()


def test_fit_json_reports_the_stored_model(trained):
    report, model = trained["fit_report"], open_model(trained["model"])
    assert report["n_iter"] == model.n_iter == 15
    assert report["objective"] == model.objective[-1]
    assert report["u_step_norm"] == model.attrs["u_step_norm"][-1]
    f = model.objective
    assert report["relative_change"] == pytest.approx(abs(f[-2] - f[-1]) / f[-2], rel=1e-12)
    # complete histories: k + 1 objectives and seconds, k step norms
    assert len(model.attrs["seconds"]) == 16 and len(model.attrs["v_step_norm"]) == 15
    # the model records what `ingest --like` needs
    corpus = open_corpus(trained["corpus"])
    np.testing.assert_array_equal(model.idf, corpus.idf)
    assert model.corpus["feature_scheme"] == corpus.feature_scheme


def test_transform_of_the_training_corpus_reproduces_V(trained, runner, scheduler, tmp_path):
    out = tmp_path / "emb.zarr"
    result = runner.invoke(main, [
        "transform", "-m", str(trained["model"]), "-i", str(trained["corpus"]), "-o", str(out),
        "--scheduler-address", scheduler, "--json",
    ])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    emb, model, corpus = open_embedding(out), open_model(trained["model"]), open_corpus(
        trained["corpus"])
    V = np.asarray(emb.V[...])
    # dense reference of the exact V-step (Liu et al. Eq. 3.12, lam = 2), written here
    A = model.U.T @ _dense(corpus)
    norms = np.linalg.norm(A, axis=0)
    reference = A / np.where(norms > 0, norms, 1.0)
    live = norms > 0
    np.testing.assert_allclose(V[:, live], reference[:, live], atol=1e-12)
    # the model was fitted with lam = "exact": its V is the same step from the same U
    np.testing.assert_allclose(V, model.V().compute(), atol=1e-10)
    assert report["n_degenerate"] == int((~live).sum()) == 1
    np.testing.assert_array_equal(emb.degenerate, ~live)
    np.testing.assert_array_equal(emb.doc_ids, corpus.doc_ids)
    np.testing.assert_array_equal(emb.labels, corpus.labels)
    np.testing.assert_allclose(np.linalg.norm(V, axis=0), 1.0, atol=1e-12)


def test_transform_refuses_a_corpus_of_another_feature_space(trained, runner, scheduler,
                                                             tmp_path):
    other = tmp_path / "other.zarr"
    runner.invoke(main, ["ingest", str(trained["root"] / "src"), "-o", str(other),
                         "--hashing", "--n-features", "256"])
    out = tmp_path / "emb.zarr"
    result = runner.invoke(main, [
        "transform", "-m", str(trained["model"]), "-i", str(other), "-o", str(out),
        "--scheduler-address", scheduler,
    ])
    assert result.exit_code == 1
    line = _error_line(result)
    assert "256 features, the model has 512" in line and "--like" in line
    assert not out.exists()


def test_transform_refuses_another_idf(trained, runner, scheduler, tmp_path):
    # the same feature scheme, but the idf of a subset of the documents
    write_text_tree(tmp_path / "src", n_per_label=4, seed=1)
    other = tmp_path / "other.zarr"
    assert runner.invoke(main, ["ingest", str(tmp_path / "src"), "-o", str(other),
                                "--hashing", "--n-features", "512"]).exit_code == 0
    result = runner.invoke(main, [
        "transform", "-m", str(trained["model"]), "-i", str(other), "-o",
        str(tmp_path / "e.zarr"), "--scheduler-address", scheduler,
    ])
    assert result.exit_code == 1
    assert "idf fingerprint" in _error_line(result)


def test_export_parquet_and_npy_equal_the_model(trained, runner, tmp_path):
    model, corpus = open_model(trained["model"]), open_corpus(trained["corpus"])
    V = model.V().compute()
    names = np.asarray(corpus.label_names)[corpus.labels]

    out = tmp_path / "emb.parquet"
    result = runner.invoke(main, ["export", "-m", str(trained["model"]), "-o", str(out),
                                  "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["n_documents"] == V.shape[1]
    table = pq.read_table(out)
    assert table.column_names == ["doc_id", "label", "e0", "e1", "e2"]
    assert table.column("doc_id").to_pylist() == corpus.doc_ids.tolist()
    assert table.column("label").to_pylist() == names.tolist()
    E = np.column_stack([table.column(f"e{i}").to_numpy() for i in range(R)])
    np.testing.assert_array_equal(E, V.T)

    npy = tmp_path / "emb.npy"
    result = runner.invoke(main, ["export", "-m", str(trained["model"]), "-f", "npy",
                                  "-o", str(npy)])
    assert result.exit_code == 0, result.output
    np.testing.assert_array_equal(np.load(npy), V.T)
    with open(tmp_path / "emb.ids.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["doc_id"] for r in rows] == corpus.doc_ids.tolist()
    assert [r["label"] for r in rows] == names.tolist()

    result = runner.invoke(main, ["export", "-m", str(trained["model"]), "-o", str(out)])
    assert result.exit_code == 1 and "--overwrite" in _error_line(result)


def test_export_writes_the_format_its_suffix_names(trained, runner, tmp_path):
    """Issue 33 item 1: `export -o out.csv` wrote Parquet into out.csv."""
    model, corpus = open_model(trained["model"]), open_corpus(trained["corpus"])
    V = model.V().compute()
    names = np.asarray(corpus.label_names)[corpus.labels]
    out = tmp_path / "emb.csv"
    result = runner.invoke(main, ["export", "-m", str(trained["model"]), "-o", str(out),
                                  "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["format"] == "csv"
    with open(out, newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["doc_id", "label", "e0", "e1", "e2"]
    assert [r[0] for r in rows[1:]] == corpus.doc_ids.tolist()
    assert [r[1] for r in rows[1:]] == names.tolist()
    np.testing.assert_array_equal(np.array([r[2:] for r in rows[1:]], dtype=float), V.T)

    npy = tmp_path / "e.npy"  # npy by its suffix alone
    result = runner.invoke(main, ["export", "-m", str(trained["model"]), "-o", str(npy)])
    assert result.exit_code == 0 and "npy (+ ids in" in result.stdout, result.output
    np.testing.assert_array_equal(np.load(npy), V.T)


def test_export_refuses_a_suffix_that_is_not_its_format(trained, runner, tmp_path):
    model = str(trained["model"])
    out = tmp_path / "out.csv"
    result = runner.invoke(main, ["export", "-m", model, "-f", "parquet", "-o", str(out)])
    line = _error_line(result)
    assert result.exit_code == 1
    assert f"{out} is named as a csv file, but --format parquet was asked for" in line
    assert (f"name it {tmp_path / 'out.parquet'}, or leave out --format (csv is written): "
            f"`sphdist export --model {model} --output {tmp_path / 'out.parquet'}`") in line

    out = tmp_path / "out.txt"
    result = runner.invoke(main, ["export", "-m", model, "-o", str(out)])
    line = _error_line(result)
    assert (f"{out}: the suffix '.txt' names none of the formats written here: parquet "
            "(*.parquet), npy (*.npy), csv (*.csv)") in line
    assert list(tmp_path.iterdir()) == []
    remedy = line.split("`")[1]  # pasted, the remedy works
    result = runner.invoke(main, remedy.split()[1:])
    assert result.exit_code == 0, result.output
    assert pq.read_table(tmp_path / "out.parquet").num_rows == open_model(model).shape[2]


def test_export_in_small_chunks_equals_one_chunk(trained, tmp_path):
    from sphdist.jobs import run
    from sphdist.jobs.export import ExportRequest

    run(ExportRequest(trained["model"], tmp_path / "a.parquet", chunk_size=7))
    run(ExportRequest(trained["model"], tmp_path / "b.parquet", chunk_size=10_000))
    a, b = pq.read_table(tmp_path / "a.parquet"), pq.read_table(tmp_path / "b.parquet")
    assert a.equals(b) and pq.ParquetFile(tmp_path / "a.parquet").num_row_groups == 5


def test_export_of_a_transformed_corpus(trained, runner, scheduler, tmp_path):
    emb = tmp_path / "emb.zarr"
    runner.invoke(main, ["transform", "-m", str(trained["model"]), "-i",
                         str(trained["corpus"]), "-o", str(emb), "--scheduler-address",
                         scheduler])
    out = tmp_path / "new.parquet"
    result = runner.invoke(main, ["export", "-m", str(trained["model"]), "-i", str(emb),
                                  "-o", str(out)])
    assert result.exit_code == 0, result.output
    E = np.column_stack([pq.read_table(out).column(f"e{i}").to_numpy() for i in range(R)])
    np.testing.assert_array_equal(E, np.asarray(open_embedding(emb).V[...]).T)


def test_export_refuses_a_corpus_the_model_was_not_fitted_on(trained, runner, tmp_path):
    other = tmp_path / "other.zarr"
    runner.invoke(main, ["ingest", str(trained["root"] / "src"), "-o", str(other),
                         "--hashing", "--n-features", "512"])
    result = runner.invoke(main, ["export", "-m", str(trained["model"]), "-i", str(other),
                                  "-o", str(tmp_path / "x.parquet")])
    assert result.exit_code == 1 and "sphdist transform" in _error_line(result)


def test_neighbors_of_a_document(trained, runner):
    corpus, model = open_corpus(trained["corpus"]), open_model(trained["model"])
    V = model.V().compute()
    j = 17
    doc_id = corpus.doc_ids[j]
    result = runner.invoke(main, ["neighbors", "-m", str(trained["model"]), "--doc-id",
                                  doc_id, "-k", "6", "--include-self", "--json"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["neighbors"]
    assert hits[0]["doc_id"] == doc_id and hits[0]["angle"] == pytest.approx(0, abs=1e-5)
    angles = [h["angle"] for h in hits]
    assert angles == sorted(angles) and len(hits) == 6
    # dense reference: all cosines, sorted
    cos = V[:, j] @ V
    expected = np.lexsort((np.arange(cos.shape[0]), -cos))[:6]
    assert [h["doc_id"] for h in hits] == [corpus.doc_ids[i] for i in expected]
    np.testing.assert_allclose(
        angles, np.degrees(np.arccos(np.clip(cos[expected], -1, 1))), atol=1e-9)
    # Euclidean distance on the sphere is 2 sin(angle / 2) = sqrt(2 - 2 cos)
    np.testing.assert_allclose(
        np.sqrt(np.maximum(2 - 2 * np.array([h["cosine"] for h in hits]), 0)),
        np.linalg.norm(V[:, expected] - V[:, [j]], axis=0), atol=1e-7)

    text = runner.invoke(main, ["neighbors", "-m", str(trained["model"]), "--doc-id", doc_id,
                                "-k", "2", "--include-self"])
    assert text.exit_code == 0 and doc_id in text.stdout.splitlines()[1]


def test_neighbors_scan_in_chunks_equals_one_chunk(trained):
    from sphdist.jobs.embedding import nearest_neighbors, open_embedding_source

    src = open_embedding_source(trained["model"])
    q = np.asarray(src.V[:, 3].compute())
    assert nearest_neighbors(src, q, 9, chunk_size=4) == nearest_neighbors(src, q, 9)


def test_neighbors_of_a_text_query(trained, runner):
    corpus = open_corpus(trained["corpus"])
    j = 12
    text = trained["texts"][corpus.doc_ids[j]]
    result = runner.invoke(main, ["neighbors", "-m", str(trained["model"]), "--query", text,
                                  "-k", "3", "--json"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["neighbors"]
    # the text of a training document, weighted with the model's idf, lands on its embedding
    assert hits[0]["doc_id"] == corpus.doc_ids[j]
    assert hits[0]["angle"] == pytest.approx(0, abs=1e-5)

    result = runner.invoke(main, ["neighbors", "-m", str(trained["model"]), "--query", "zz"])
    assert result.exit_code == 1 and "shares no term" in _error_line(result)
    result = runner.invoke(main, ["neighbors", "-m", str(trained["model"])])
    assert result.exit_code == 2


def test_fit_init_from_warm_starts_from_the_model(trained, runner, scheduler, tmp_path):
    warm = tmp_path / "warm.zarr"
    result = runner.invoke(main, [
        "fit", "-i", str(trained["corpus"]), "-o", str(warm), "-r", str(R), "--max-iter", "1",
        "--tol", "0", "--init-from", str(trained["model"]), "--scheduler-address", scheduler,
        "--json",
    ])
    assert result.exit_code == 0, result.output
    previous, model = open_model(trained["model"]), open_model(warm)
    assert model.params["init_from"]["u_sha256"] == previous.fingerprint
    # iteration 0 starts from the previous U, so its objective is the previous final one
    assert model.objective[0] == pytest.approx(previous.objective[-1], rel=1e-12)
    assert model.objective[1] <= model.objective[0]

    result = runner.invoke(main, [
        "fit", "-i", str(trained["corpus"]), "-o", str(tmp_path / "bad.zarr"), "-r", "2",
        "--init-from", str(trained["model"]), "--scheduler-address", scheduler,
    ])
    assert result.exit_code == 1 and "r=3 components" in _error_line(result)


def test_transform_irregular_chunks_on_the_local_scheduler(tmp_path):
    import dask

    from sphdist.io.corpus_writer import CorpusWriter
    from sphdist.jobs import run
    from sphdist.jobs.fit import FitRequest
    from sphdist.jobs.transform import TransformRequest

    from ..reference import random_corpus

    X = random_corpus(30, 47, density=0.3, seed=8)  # column 0 is empty
    bounds = [0, 13, 26, 40, 41, 47]  # irregular, with a chunk of one document
    with CorpusWriter(tmp_path / "c.zarr", n_features=30,
                      feature_scheme={"type": "hashing", "n_features": 30}) as w:
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            w.write_chunk(X[:, a:b], [f"d{j}" for j in range(a, b)])
        corpus = w.commit(idf=np.ones(30))
    with dask.config.set(scheduler="sync"):
        model = run(FitRequest(corpus.path, tmp_path / "m.zarr", n_components=4, max_iter=3,
                               tol=0, callback=None))
        emb = run(TransformRequest(model.path, corpus.path, tmp_path / "e.zarr"))
    A = model.U.T @ X.toarray()
    norms = np.linalg.norm(A, axis=0)
    V = np.asarray(emb.V[...])
    live = norms > 0
    np.testing.assert_allclose(V[:, live], A[:, live] / norms[live], atol=1e-12)
    np.testing.assert_array_equal(V[:, ~live], np.eye(4)[:, [0]] * np.ones((1, (~live).sum())))
    assert not live[0] and emb.attrs["n_degenerate"] == (~live).sum()
    assert emb.degenerate.tolist() == (~live).tolist()
    assert emb.doc_ids.tolist() == [f"d{j}" for j in range(47)] and emb.labels is None


def test_empty_documents_are_never_neighbours(trained, runner):
    corpus = open_corpus(trained["corpus"])
    empty = corpus.doc_ids[corpus.empty][0]
    result = runner.invoke(main, ["neighbors", "-m", str(trained["model"]), "--doc-id",
                                  corpus.doc_ids[1], "-k", "100", "--json"])
    hits = json.loads(result.stdout)["neighbors"]
    assert len(hits) == corpus.n_documents - corpus.n_empty - 1  # nor the document itself
    assert empty not in [h["doc_id"] for h in hits]
    result = runner.invoke(main, ["neighbors", "-m", str(trained["model"]), "--doc-id", empty])
    assert result.exit_code == 1 and "is empty" in _error_line(result)


def test_neighbors_of_a_document_are_k_others_unless_include_self(trained, runner):
    """--doc-id ID: the document itself (0.00 degrees) is not its own neighbour (issue 22)."""
    corpus, model = open_corpus(trained["corpus"]), open_model(trained["model"])
    V = model.V().compute()
    j, k = 17, 5
    doc_id = corpus.doc_ids[j]
    args = ["neighbors", "-m", str(trained["model"]), "--doc-id", doc_id, "-k", str(k), "--json"]
    result = runner.invoke(main, args)
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["neighbors"]
    assert len(hits) == k and doc_id not in [h["doc_id"] for h in hits]
    assert [h["rank"] for h in hits] == list(range(1, k + 1))
    cos = V[:, j] @ V
    cos[j] = -np.inf
    cos[corpus.empty] = -np.inf
    expected = [corpus.doc_ids[i] for i in np.lexsort((np.arange(cos.shape[0]), -cos))[:k]]
    assert [h["doc_id"] for h in hits] == expected

    hits = json.loads(runner.invoke(main, [*args, "--include-self"]).stdout)["neighbors"]
    assert hits[0]["doc_id"] == doc_id and hits[0]["angle"] == pytest.approx(0, abs=1e-5)
    assert len(hits) == k and [h["doc_id"] for h in hits[1:]] == expected[:k - 1]
