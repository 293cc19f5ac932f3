"""sphdist index, and neighbors with an index, batch queries and the k-NN graph (--all)."""

import csv
import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest
import zarr
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.core.neighbors import recall_at_k
from sphdist.io.corpus import open_corpus
from sphdist.io.model import open_model
from sphdist.jobs.neighbors import HIT_COLUMNS

from .._textcorpus import write_text_tree


@pytest.fixture(scope="module")
def runner():
    return CliRunner()


def _ok(result):
    assert result.exit_code == 0, result.output
    return result


def _error_line(result):
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ") and "Traceback" not in result.output
    return lines[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, runner, scheduler):
    """120 documents (3 labels, one empty), chunks of 16, a model r = 3, and another model."""
    root = tmp_path_factory.mktemp("knn")
    write_text_tree(root / "src", n_per_label=40)
    corpus = root / "corpus.zarr"
    _ok(runner.invoke(main, ["ingest", str(root / "src"), "-o", str(corpus), "--hashing",
                             "--n-features", "512", "--chunk-size", "16"]))
    models = {}
    for name, seed in (("model", 0), ("other", 1)):
        models[name] = root / f"{name}.zarr"
        _ok(runner.invoke(main, ["fit", "-i", str(corpus), "-o", str(models[name]), "-r", "3",
                                 "--max-iter", "10", "--seed", str(seed),
                                 "--scheduler-address", scheduler]))
    return {"root": root, "corpus": corpus, **models}


def _reference(trained):
    """Dense V, the empty documents, and the exact k-NN of every document (NumPy)."""
    V = open_model(trained["model"]).V().compute()
    empty = np.asarray(open_corpus(trained["corpus"]).empty)
    S = V.T @ V
    S[:, empty] = -np.inf
    np.fill_diagonal(S, -np.inf)
    order = np.lexsort((np.broadcast_to(np.arange(S.shape[0]), S.shape), -S), axis=1)
    return V, empty, S, order


def test_index_is_found_beside_the_model_and_answers_as_the_scan(trained, runner, tmp_path):
    model = tmp_path / "m.zarr"
    shutil.copytree(trained["model"], model)
    doc_id = open_corpus(trained["corpus"]).doc_ids[17]
    args = ["neighbors", "-m", str(model), "-i", str(trained["corpus"]), "--doc-id", doc_id,
            "-k", "8", "--json"]
    scan = json.loads(_ok(runner.invoke(main, args)).stdout)
    assert "index" not in scan  # no index: the scan, as before

    report = json.loads(_ok(runner.invoke(main, ["index", "-m", str(model), "--json"])).stdout)
    assert report["output"] == str(tmp_path / "m.index.zarr") and report["kind"] == "flat"
    assert report["n_indexed"] == report["n_documents"] - 1  # the empty document left out

    result = _ok(runner.invoke(main, args))
    hits = json.loads(result.stdout)
    assert hits["index"] == str(tmp_path / "m.index.zarr")
    assert "searching the index" in result.stderr
    assert [h["doc_id"] for h in hits["neighbors"]] == [h["doc_id"] for h in scan["neighbors"]]
    corpus = open_corpus(trained["corpus"])
    label = corpus.label_names[corpus.labels[17]]
    assert hits["query_label"] == scan["query_label"] == label  # as the tables' column
    np.testing.assert_allclose([h["cosine"] for h in hits["neighbors"]],
                               [h["cosine"] for h in scan["neighbors"]], atol=1e-6)
    exact = json.loads(_ok(runner.invoke(main, [*args, "--exact"])).stdout)
    assert "index" not in exact and exact["neighbors"] == scan["neighbors"]


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_batch_queries_of_ids_against_the_brute_force(trained, runner, tmp_path, kind):
    V, empty, S, order = _reference(trained)
    corpus = open_corpus(trained["corpus"])
    index = tmp_path / "i.zarr"
    extra = ["--nlist", "4", "--nprobe", "4"] if kind == "ivf" else []
    _ok(runner.invoke(main, ["index", "-m", str(trained["model"]), "-o", str(index),
                             "--kind", kind, *extra]))
    picks = [j for j in (3, 40, 41, 79, 80, 81, 99) if not empty[j]][:5]
    (tmp_path / "q.txt").write_text("\n".join(corpus.doc_ids[j] for j in picks) + "\n\n")
    out = tmp_path / "hits.parquet"
    _ok(runner.invoke(main, ["neighbors", "-m", str(trained["model"]), "--queries",
                             str(tmp_path / "q.txt"), "--ids", "-k", "5", "--index", str(index),
                             "-o", str(out)]))
    table = pq.read_table(out).to_pydict()
    assert list(table) == list(HIT_COLUMNS)  # one schema for every neighbour table
    assert table["query"][::5] == [corpus.doc_ids[j] for j in picks]
    names = np.asarray(corpus.label_names)[corpus.labels]
    assert table["query_label"][::5] == [names[j] for j in picks]
    found = np.array([[list(corpus.doc_ids).index(d) for d in table["doc_id"][5 * i:5 * i + 5]]
                      for i in range(len(picks))])
    assert recall_at_k(found, order[picks, :5]) == 1.0  # nprobe = nlist: exact
    assert table["rank"][:5] == [1, 2, 3, 4, 5]
    cos = np.array(table["cosine"])
    np.testing.assert_allclose(cos, S[np.repeat(picks, 5), found.ravel()], atol=1e-6)
    np.testing.assert_allclose(table["angle"], np.degrees(np.arccos(np.clip(cos, -1, 1))))

    jsonl = tmp_path / "hits.jsonl"
    _ok(runner.invoke(main, ["neighbors", "-m", str(trained["model"]), "--queries",
                             str(tmp_path / "q.txt"), "--ids", "-k", "5", "--exact",
                             "-o", str(jsonl)]))
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert [r["doc_id"] for r in rows] == table["doc_id"]  # the exact scan agrees
    assert list(rows[0]) == list(HIT_COLUMNS)

    hits_csv = tmp_path / "hits.csv"  # csv, by the suffix: the same rows
    _ok(runner.invoke(main, ["neighbors", "-m", str(trained["model"]), "--queries",
                             str(tmp_path / "q.txt"), "--ids", "-k", "5", "--exact",
                             "-o", str(hits_csv)]))
    with open(hits_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == list(HIT_COLUMNS)
    assert [r["doc_id"] for r in rows] == table["doc_id"]
    assert [r["query_label"] for r in rows] == table["query_label"]
    np.testing.assert_array_equal([float(r["cosine"]) for r in rows],
                                  [r["cosine"] for r in json.loads(
                                      "[" + ",".join(jsonl.read_text().splitlines()) + "]")])


@pytest.mark.parametrize("how", [[], ["--exact"]], ids=["index", "exact"])
def test_one_query_json_has_the_rows_of_the_tables(trained, runner, tmp_path, how):
    """Issue 33 item 9: one query's --json said angle_deg and distance, the tables angle: each
    neighbour of one query is now a row of the tables, its columns and values."""
    model = tmp_path / "m.zarr"
    shutil.copytree(trained["model"], model)
    _ok(runner.invoke(main, ["index", "-m", str(model)]))
    doc_id = open_corpus(trained["corpus"]).doc_ids[17]
    one = json.loads(_ok(runner.invoke(main, ["neighbors", "-m", str(model), "--doc-id",
                                              doc_id, "-k", "4", "--json", *how])).stdout)
    (tmp_path / "q.txt").write_text(doc_id + "\n")
    out = tmp_path / "hits.jsonl"
    _ok(runner.invoke(main, ["neighbors", "-m", str(model), "--queries", str(tmp_path / "q.txt"),
                             "--ids", "-k", "4", "-o", str(out), *how]))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [list(h) for h in one["neighbors"]] == [list(HIT_COLUMNS)] * 4
    assert one["neighbors"] == rows

    text = json.loads(_ok(runner.invoke(main, ["neighbors", "-m", str(model), "-q",
                                               "rocket orbit nasa", "-k", "2", "--json",
                                               *how])).stdout)
    assert [list(h) for h in text["neighbors"]] == [list(HIT_COLUMNS)] * 2
    assert {h["query"] for h in text["neighbors"]} == {"rocket orbit nasa"}
    assert {h["query_label"] for h in text["neighbors"]} == {None}


def test_batch_text_queries(trained, runner, tmp_path):
    (tmp_path / "q.txt").write_text("rocket orbit nasa\npitcher baseball inning\n")
    out = tmp_path / "t.jsonl"
    _ok(runner.invoke(main, ["neighbors", "-m", str(trained["model"]), "--queries",
                             str(tmp_path / "q.txt"), "-k", "3", "-o", str(out)]))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["label"] for r in rows[:3]] == ["space"] * 3
    assert [r["label"] for r in rows[3:]] == ["sport"] * 3
    assert list(rows[0]) == list(HIT_COLUMNS)
    assert [r["query"] for r in rows] == ["rocket orbit nasa"] * 3 + ["pitcher baseball inning"] * 3
    assert {r["query_label"] for r in rows} == {None}  # a text has no label


@pytest.mark.parametrize("how", ["exact", "flat-index", "ivf-index"])
def test_knn_graph_equals_the_dense_reference(trained, runner, tmp_path, scheduler, how):
    V, empty, S, order = _reference(trained)
    args = ["neighbors", "-m", str(trained["model"]), "--all", "-k", "6"]
    if how == "exact":
        args.append("--exact")
    else:
        index = tmp_path / "g.zarr"
        kind = ["--kind", "ivf", "--nlist", "4", "--nprobe", "4"] if how == "ivf-index" else []
        _ok(runner.invoke(main, ["index", "-m", str(trained["model"]), "-o", str(index),
                                 *kind]))
        args += ["--index", str(index)]
    out = tmp_path / "knn.parquet"
    report = json.loads(_ok(runner.invoke(
        main, [*args, "-o", str(out), "--scheduler-address", scheduler, "--json"])).stdout)
    table = pq.read_table(out).to_pydict()
    assert list(table) == list(HIT_COLUMNS)  # the schema of --queries (was query_doc_id)
    corpus = open_corpus(trained["corpus"])
    ids = list(corpus.doc_ids)
    n = len(ids)
    assert report["n_rows"] == 6 * (n - empty.sum())  # the empty document has no neighbours
    live = np.flatnonzero(~empty)
    assert table["query"] == [ids[i] for i in np.repeat(live, 6)]
    names = np.asarray(corpus.label_names)[corpus.labels]
    assert table["query_label"] == [names[i] for i in np.repeat(live, 6)]  # knn gains it
    found = np.array([ids.index(d) for d in table["doc_id"]]).reshape(-1, 6)
    if how == "exact":
        np.testing.assert_array_equal(found, order[live, :6])
        np.testing.assert_allclose(table["cosine"], S[np.repeat(live, 6), found.ravel()],
                                   rtol=0, atol=1e-13)
    else:
        assert recall_at_k(found, order[live, :6]) == 1.0


def test_an_index_on_a_url(trained, runner, tmp_path):
    url = f"file://{tmp_path}/u.index.zarr"
    _ok(runner.invoke(main, ["index", "-m", str(trained["model"]), "-o", url]))
    doc_id = open_corpus(trained["corpus"]).doc_ids[5]
    hits = json.loads(_ok(runner.invoke(main, [
        "neighbors", "-m", str(trained["model"]), "--doc-id", doc_id, "--index", url, "-k", "3",
        "--json"])).stdout)
    scan = json.loads(_ok(runner.invoke(main, [
        "neighbors", "-m", str(trained["model"]), "--doc-id", doc_id, "--exact", "-k", "3",
        "--json"])).stdout)
    assert [h["doc_id"] for h in hits["neighbors"]] == [h["doc_id"] for h in scan["neighbors"]]


def _faiss_chunk(index):
    chunks = sorted(p for p in (index / "faiss").rglob("*") if p.is_file()
                    and p.name != "zarr.json")
    assert chunks
    return chunks[0]


def test_bad_input_one_error_line_each(trained, runner, tmp_path):
    model, other = str(trained["model"]), str(trained["other"])
    doc_id = open_corpus(trained["corpus"]).doc_ids[5]
    query = ["neighbors", "-m", model, "--doc-id", doc_id]

    # an index of another model
    _ok(runner.invoke(main, ["index", "-m", other, "-o", str(tmp_path / "o.zarr")]))
    line = _error_line(runner.invoke(main, [*query, "--index", str(tmp_path / "o.zarr")]))
    assert "index of another model" in line and f"sphdist index --model {model}" in line
    # a model passed as the index
    line = _error_line(runner.invoke(main, [*query, "--index", other]))
    assert "is a sphdist model, not a sphdist index" in line

    # a damaged index file: truncated (its size is not the recorded one)
    good = tmp_path / "good.zarr"
    _ok(runner.invoke(main, ["index", "-m", model, "-o", str(good)]))
    damaged = tmp_path / "damaged.zarr"
    shutil.copytree(good, damaged)
    chunk = _faiss_chunk(damaged)
    chunk.write_bytes(chunk.read_bytes()[:-40])
    line = _error_line(runner.invoke(main, [*query, "--index", str(damaged)]))
    assert "faiss/c/0 has" in line and "recorded (faiss_nbytes)" in line
    assert f"`sphdist index --model {model} --output {damaged} --overwrite`" in line

    # k larger than n
    line = _error_line(runner.invoke(main, [*query, "--index", str(good), "-k", "1000"]))
    assert "-k 1000 is larger than the 118 documents" in line
    line = _error_line(runner.invoke(main, ["neighbors", "-m", model, "--all", "-k", "500",
                                            "--exact", "-o", str(tmp_path / "g.parquet")]))
    assert "-k 500 is larger than the 118 other documents" in line

    # an empty query, an empty queries file
    line = _error_line(runner.invoke(main, ["neighbors", "-m", model, "--query", ""]))
    assert "no direction" in line
    (tmp_path / "blank.txt").write_text("\n  \n")
    line = _error_line(runner.invoke(main, ["neighbors", "-m", model, "--queries",
                                            str(tmp_path / "blank.txt"), "-o",
                                            str(tmp_path / "b.parquet")]))
    assert "holds no query" in line
    assert not (tmp_path / "b.parquet").exists()


def test_an_index_whose_bytes_do_not_match_their_digest_is_refused(trained, runner, tmp_path):
    model = str(trained["model"])
    index = tmp_path / "x.zarr"
    _ok(runner.invoke(main, ["index", "-m", model, "-o", str(index)]))
    group = zarr.open_group(str(index), mode="r+")
    data = np.asarray(group["faiss"][...])
    data[-1] ^= 0xFF  # a well-formed chunk with other bytes (in the sample every read checks)
    group["faiss"][...] = data
    doc_id = open_corpus(trained["corpus"]).doc_ids[5]
    line = _error_line(runner.invoke(main, ["neighbors", "-m", model, "--doc-id", doc_id,
                                            "--index", str(index)]))
    assert "does not match its recorded faiss_sample_sha256" in line
    assert f"`sphdist index --model {model} --output {index} --overwrite`" in line


def test_existing_outputs_are_not_overwritten(trained, runner, tmp_path):
    index = tmp_path / "i.zarr"
    _ok(runner.invoke(main, ["index", "-m", str(trained["model"]), "-o", str(index)]))
    line = _error_line(runner.invoke(main, ["index", "-m", str(trained["model"]), "-o",
                                            str(index)]))
    assert "already exists" in line and "--overwrite" in line


def _queries(tmp_path, *lines):
    path = tmp_path / "q.txt"
    path.write_bytes(b"\n".join(line if isinstance(line, bytes) else line.encode()
                                 for line in lines) + b"\n")
    return path


def test_a_bad_line_of_queries_is_named_and_skipped_on_request(trained, runner, tmp_path):
    """Issue 33 item 2: one bad query killed the batch with no line number and no output."""
    model = str(trained["model"])
    q = _queries(tmp_path, "rocket orbit nasa", "", "qqqq zzzz", "pitcher baseball inning",
                 b"caf\xe9 orbit")
    out = tmp_path / "hits.parquet"
    args = ["neighbors", "-m", model, "--queries", str(q), "-k", "2", "-o", str(out)]
    line = _error_line(runner.invoke(main, args))
    assert (f"{q} line 3: query 'qqqq zzzz' shares no term with the model's features" in line)
    assert "(2 of 4 queries are bad, at lines 3, 5)" in line
    assert "fix or remove that line, or pass --on-error skip to leave such queries out" in line
    assert not out.exists()

    report = json.loads(_ok(runner.invoke(main, [*args, "--on-error", "skip", "--json"])).stdout)
    assert report["n_queries"] == 2 and report["n_rows"] == 4 and report["n_skipped"] == 2
    assert [(s["line"], s["query"]) for s in report["skipped"]] == [
        (3, "qqqq zzzz"), (5, "caf\ufffd orbit")]
    assert "not UTF-8 text (byte 0xe9 at column 4)" in report["skipped"][1]["reason"]
    table = pq.read_table(out).to_pydict()
    assert table["query"] == ["rocket orbit nasa"] * 2 + ["pitcher baseball inning"] * 2

    result = _ok(runner.invoke(main, [*args, "--on-error", "skip", "--overwrite"]))
    assert "skipped 2 bad queries" in result.stdout
    assert "  line 3: query 'qqqq zzzz' shares no term" in result.stdout

    ids = _queries(tmp_path, open_corpus(trained["corpus"]).doc_ids[3], "nope")
    line = _error_line(runner.invoke(main, ["neighbors", "-m", model, "--queries", str(ids),
                                            "--ids", "-o", str(tmp_path / "i.parquet")]))
    assert f"{ids} line 2: no document has id 'nope'" in line and "--on-error skip" in line

    allbad = _queries(tmp_path, "qqqq", "zzzz")
    line = _error_line(runner.invoke(main, ["neighbors", "-m", model, "--queries",
                                            str(allbad), "--on-error", "skip", "-o",
                                            str(tmp_path / "none.parquet")]))
    assert "every query is bad (2 of 2" in line and "nothing was written" in line
    assert not (tmp_path / "none.parquet").exists()


def test_a_binary_or_directory_queries_file_is_refused(trained, runner, tmp_path):
    """Issue 31 items 5 and 7: a UnicodeDecodeError traceback, a bare IsADirectoryError."""
    model = str(trained["model"])
    binary = tmp_path / "q.bin"
    binary.write_bytes(b"ab\x00\xff\xfe" * 50)
    out = tmp_path / "h.parquet"
    line = _error_line(runner.invoke(main, ["neighbors", "-m", model, "--queries", str(binary),
                                            "-o", str(out)]))
    assert f"{binary} is a binary file, not text (a NUL byte at offset 2)" in line
    line = _error_line(runner.invoke(main, ["neighbors", "-m", model, "--queries",
                                            str(tmp_path), "-o", str(out)]))
    assert f"{tmp_path} is a directory, not a queries file" in line
    assert "pass a text file with one query per line" in line
    assert not out.exists()


def test_options_that_do_nothing_are_refused(trained, runner, tmp_path):
    """Issue 33 item 9: --include-self with --all or a text query was accepted and ignored."""
    model = str(trained["model"])
    doc_id = open_corpus(trained["corpus"]).doc_ids[5]
    q = _queries(tmp_path, "rocket orbit")
    knn = str(tmp_path / "knn.parquet")
    cases = [
        (["--all", "-o", knn, "--include-self"], "--include-self does nothing with --all"),
        (["-q", "rocket", "--include-self"], "--include-self does nothing with --query"),
        (["--queries", str(q), "-o", knn, "--include-self"],
         "--include-self does nothing with --queries:"),
        (["-q", "rocket", "--ids"], "--ids does nothing with --query"),
        (["--doc-id", doc_id, "-o", knn], "--output does nothing with --doc-id"),
        (["--doc-id", doc_id, "--on-error", "skip"], "--on-error does nothing with --doc-id"),
        (["-q", "rocket", "--n-workers", "2"], "--n-workers does nothing with --query: only "
                                               "--all runs on Dask"),
        (["-q", "rocket", "--exact", "--nprobe", "4"], "--nprobe does nothing with --exact"),
    ]
    for extra, expected in cases:
        args = ["neighbors", "-m", model, *extra]
        result = runner.invoke(main, args)
        assert result.exit_code == 2, (extra, result.output)
        assert expected in result.stderr, (extra, result.stderr)
        remedy = result.stderr.split("leave it out: `")[1].split("`")[0]
        assert "--include-self" not in remedy and "--nprobe" not in remedy
        assert not (tmp_path / "knn.parquet").exists()
    # the remedy works: pasted, it runs
    result = runner.invoke(main, ["neighbors", "-m", model, "-q", "rocket", "--include-self"])
    remedy = result.stderr.split("leave it out: `")[1].split("`")[0]
    assert remedy.startswith("sphdist neighbors ")
    _ok(runner.invoke(main, __import__("shlex").split(remedy)[1:]))


def test_a_neighbors_error_from_python_names_keywords_and_calls_not_flags(trained, tmp_path):
    """Issue 32 item 1: raised from the Python API, a neighbors job's error names keyword
    arguments and the calls of the jobs that resolve it, never a ``--`` flag."""
    from sphdist.errors import CorpusMismatchError, OutputExistsError, ParameterError
    from sphdist.jobs import neighbors as jobs
    from sphdist.jobs import run

    model, other = str(trained["model"]), str(trained["other"])
    index = tmp_path / "o.zarr"
    run(jobs.IndexRequest(other, index))
    doc_id = open_corpus(trained["corpus"]).doc_ids[5]
    with pytest.raises(CorpusMismatchError) as mismatch:
        run(jobs.QueryRequest(model, doc_id=doc_id, index=index))
    text = str(mismatch.value)
    assert ("`sphdist.jobs.run(sphdist.jobs.neighbors.IndexRequest("
            f"model={model!r}, output={str(index)!r}, overwrite=True))`") in text
    assert "exact=True" in text
    with pytest.raises(OutputExistsError) as exists:
        run(jobs.IndexRequest(model, index))
    assert "choose another output or pass overwrite=True" in str(exists.value)
    with pytest.raises(ParameterError) as both:
        run(jobs.QueryRequest(model, doc_id=doc_id, index=index, exact=True))
    assert str(both.value) == "pass index or exact, not both."
    with pytest.raises(ParameterError) as suffix:
        run(jobs.KnnGraphRequest(model, tmp_path / "g.txt", k=3))
    assert ("`sphdist.jobs.run(sphdist.jobs.neighbors.KnnGraphRequest("
            f"model={model!r}, k=3, output=") in str(suffix.value)
    (tmp_path / "q.txt").write_text("nope\n")
    with pytest.raises(ParameterError) as bad:
        run(jobs.BatchNeighborsRequest(model, tmp_path / "h.csv", queries=jobs.queries_of(
            tmp_path / "q.txt"), ids=True))
    assert "on_error='skip'" in str(bad.value)
    for exc in (mismatch, exists, both, suffix, bad):
        assert "--" not in str(exc.value), str(exc.value)


def test_the_remedy_of_a_graph_output_without_its_format_suffix_runs(trained, runner, tmp_path):
    """The same remedy on the command line: a ``sphdist neighbors`` command that works."""
    import shlex

    model = str(trained["model"])
    line = _error_line(runner.invoke(main, ["neighbors", "-m", model, "--all", "-k", "3",
                                            "-o", str(tmp_path / "g.txt")]))
    command = line.split(": `")[-1].split("`")[0]
    assert command == shlex.join(["sphdist", "neighbors", "--model", model, "--all", "-k", "3",
                                  "--output", str(tmp_path / "g.parquet")])
    _ok(runner.invoke(main, shlex.split(command)[1:]))
    assert (tmp_path / "g.parquet").exists()


def test_an_unknown_doc_id_suggests_the_nearest_ids(trained, runner, tmp_path):
    """Issue 43 item 7e: a misspelt id was answered with the first three ids of the corpus."""
    import difflib

    ids = [str(i) for i in open_corpus(trained["corpus"]).doc_ids]
    real = next(i for i in ids[60:] if i.startswith("space/"))  # far from the first ids
    typo = "sapce/" + real.removeprefix("space/")
    nearest = difflib.get_close_matches(typo, ids, n=3)
    assert nearest[0] == real and real not in ids[:3]
    model = str(trained["model"])
    line = _error_line(runner.invoke(main, ["neighbors", "-m", model, "--doc-id", typo]))
    assert f"no document has id {typo!r}" in line
    assert ", ".join(map(repr, nearest)) in line, line
    queries = _queries(tmp_path, ids[3], typo)
    line = _error_line(runner.invoke(main, ["neighbors", "-m", model, "--queries",
                                            str(queries), "--ids",
                                            "-o", str(tmp_path / "i.parquet")]))
    assert f"line 2: no document has id {typo!r}" in line
    assert ", ".join(map(repr, nearest)) in line, line
    # nothing near: the first ids, to show what ids look like
    line = _error_line(runner.invoke(main, ["neighbors", "-m", model, "--doc-id", "§§§"]))
    assert ", ".join(map(repr, ids[:3])) in line, line


@pytest.mark.parametrize("ids", [False, True], ids=["texts", "ids"])
def test_batch_queries_without_output_print_the_table(trained, runner, tmp_path, ids):
    """Issue 43 item 7f: --queries refused to print: without --output it now prints the rows
    of the table it would write (a text table; with --json, the rows as one query's)."""
    corpus = open_corpus(trained["corpus"])
    lines = ([corpus.doc_ids[3], corpus.doc_ids[50]] if ids
             else ["rocket orbit nasa", "pitcher baseball inning"])
    queries = _queries(tmp_path, *lines)
    args = ["neighbors", "-m", str(trained["model"]), "--queries", str(queries), "-k", "3",
            *(["--ids"] if ids else [])]
    out = tmp_path / "hits.jsonl"
    _ok(runner.invoke(main, [*args, "-o", str(out)]))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6

    report = json.loads(_ok(runner.invoke(main, [*args, "--json"])).stdout)
    assert report["neighbors"] == rows and report["n_queries"] == 2
    assert report["n_rows"] == 6 and report["n_skipped"] == 0

    printed = _ok(runner.invoke(main, args)).stdout.splitlines()
    assert printed[0].split() == ["query", "rank", "angle", "cosine", "doc_id", "label"]
    body = printed[1:]
    assert len(body) == 6, printed
    for line, row in zip(body, rows, strict=True):
        assert line.startswith(row["query"]) and row["doc_id"] in line
        assert f"{row['cosine']:.5f}" in line and f"{row['angle']:.2f}°" in line
        assert line.split()[-1] == row["label"]
    assert not list(tmp_path.glob("*.parquet")) and not list(tmp_path.glob("*.csv"))
    # --format and --overwrite are about the file: without --output they do nothing
    result = runner.invoke(main, [*args, "--format", "csv"])
    assert result.exit_code == 2 and "--output" in result.output


def test_a_batch_of_unknown_ids_looks_for_the_nearest_of_the_first_ten_only(
    trained, runner, tmp_path,
):
    """Each suggestion searches the collection's ids (difflib, up to 0.1 s at 20,000): a
    file of ids from another corpus must not search it once per line. The first ten bad ids
    name their nearest ids, the others where to find ids."""
    ids = [str(i) for i in open_corpus(trained["corpus"]).doc_ids]
    queries = _queries(tmp_path, ids[3], *[f"other/{j}" for j in range(12)])
    report = json.loads(_ok(runner.invoke(main, [
        "neighbors", "-m", str(trained["model"]), "--queries", str(queries), "--ids",
        "--on-error", "skip", "--json"])).stdout)
    reasons = [row["reason"] for row in report["skipped"]]
    assert len(reasons) == 12
    assert all(("nearest ids are" in r) != ("ids look like" in r) for r in reasons[:10])
    assert not any("nearest ids are" in r or "ids look like" in r for r in reasons[10:])
    assert all(r.endswith("see `sphdist export`)") for r in reasons)
