"""Every remedy an error prints is a command that works: each test runs the suggested command.

Issue 14, section 4: options given the wrong way round, a corpus of another feature space, a
corpus moved after the fit, the data home; and the figures a user reads (objective, counts,
help texts). The fit runs in this process (``--n-workers 0``), so no cluster starts.
"""

import json
import re
import shlex
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from sphdist.cli import main

from .._textcorpus import TOPICS, write_text_tree

R = 3


@pytest.fixture(scope="module")
def runner():
    return CliRunner()


@pytest.fixture(scope="module")
def trained(tmp_path_factory, runner):
    """A text corpus (30 documents) and a model of it, all under one folder."""
    root = tmp_path_factory.mktemp("remedies")
    write_text_tree(root / "src")
    corpus, model = root / "corpus.zarr", root / "model.zarr"
    result = runner.invoke(main, ["ingest", str(root / "src"), "-o", str(corpus),
                                  "--hashing", "--n-features", "512", "--chunk-size", "8"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["fit", "-i", str(corpus), "-o", str(model), "-r", str(R),
                                  "--max-iter", "5", "--n-workers", "0"])
    assert result.exit_code == 0, result.output
    return {"root": root, "corpus": corpus, "model": model}


def _error_line(result):
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def _suggested(line):
    """The command in backticks after "To resolve this" (one, possibly joined by &&)."""
    remedy = line.split("To resolve this", 1)[1]
    commands = re.findall(r"`(sphdist [^`]+)`", remedy)
    assert commands, line
    return commands[0]


def _run(runner, command, **replace):
    """Run a suggested command (each part of ``a && b``) through click; return the results."""
    results = []
    for part in command.split(" && "):
        for old, new in replace.items():
            part = part.replace(old, shlex.quote(str(new)))
        argv = shlex.split(part)
        assert argv[0] == "sphdist", part
        result = runner.invoke(main, argv[1:])
        assert result.exit_code == 0, (part, result.output)
        results.append(result)
    return results


@pytest.mark.parametrize("verb", ["evaluate", "export", "plot embedding"])
def test_swapped_model_and_input_name_the_corrected_command(trained, runner, tmp_path, verb):
    model, corpus = str(trained["model"]), str(trained["corpus"])
    out = {"export": ["-o", str(tmp_path / "e.parquet")],
           "plot embedding": ["-o", str(tmp_path / "e.png")]}.get(verb, [])
    result = runner.invoke(main, [*verb.split(), "-m", corpus, "-i", model, *out])
    line = _error_line(result)
    assert "swapped" in line and "format version" not in line
    command = _suggested(line)
    assert f"--model {model}" in command and f"--input {corpus}" in command
    _run(runner, command)
    if out:
        assert (tmp_path / out[1].rsplit("/", 1)[1]).exists()


def test_a_model_given_as_input_suggests_the_recorded_corpus(trained, runner):
    model = str(trained["model"])
    line = _error_line(runner.invoke(main, ["evaluate", "-m", model, "-i", model]))
    assert "is a model" in line
    command = _suggested(line)
    assert f"--input {trained['corpus']}" in command
    (result,) = _run(runner, command)
    assert "accuracy" in result.stdout


@pytest.mark.parametrize("verb", ["export", "transform"])
def test_a_corpus_in_another_feature_space_gets_a_chain_that_works(trained, runner, tmp_path,
                                                                    monkeypatch, verb):
    """The remedy re-ingests the corpus' recorded source --like the model, embeds, exports."""
    import pyarrow.parquet as pq

    from sphdist.io.embedding import open_embedding

    monkeypatch.chdir(tmp_path)
    other = tmp_path / "other.zarr"
    result = runner.invoke(main, ["ingest", str(trained["root"] / "src"), "-o", str(other),
                                  "--hashing", "--n-features", "256"])
    assert result.exit_code == 0, result.output
    out = tmp_path / ("x.parquet" if verb == "export" else "emb.zarr")
    line = _error_line(runner.invoke(main, [verb, "-m", str(trained["model"]), "-i",
                                            str(other), "-o", str(out)]))
    assert "256 features, the model has 512" in line and "SOURCE" not in line
    assert f"--like {trained['model']}" in line
    _run(runner, _suggested(line))
    if verb == "export":
        assert pq.read_table(out).num_rows == 30
    else:
        assert open_embedding(out).V.shape == (R, 30)


def test_export_of_another_corpus_of_the_same_space_suggests_transform(trained, runner,
                                                                        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_text_tree(tmp_path / "new", n_per_label=4, seed=1)
    like = tmp_path / "like.zarr"
    result = runner.invoke(main, ["ingest", str(tmp_path / "new"), "-o", str(like), "--like",
                                  str(trained["model"])])
    assert result.exit_code == 0, result.output
    out = tmp_path / "x.parquet"
    line = _error_line(runner.invoke(main, ["export", "-m", str(trained["model"]), "-i",
                                            str(like), "-o", str(out)]))
    _run(runner, _suggested(line))
    import pyarrow.parquet as pq

    assert pq.read_table(out).num_rows == 12


@pytest.mark.parametrize("verb", ["export", "plot embedding", "neighbors"])
def test_a_moved_corpus_says_where_the_path_came_from(trained, runner, tmp_path, verb):
    corpus = tmp_path / "corpus.zarr"
    shutil.copytree(trained["corpus"], corpus)
    model = tmp_path / "model.zarr"
    result = runner.invoke(main, ["fit", "-i", str(corpus), "-o", str(model), "-r", str(R),
                                  "--max-iter", "2", "--n-workers", "0"])
    assert result.exit_code == 0, result.output
    moved = tmp_path / "moved" / "corpus.zarr"
    moved.parent.mkdir()
    corpus.rename(moved)
    extra = {"export": ["-o", str(tmp_path / "x.parquet")],
             "plot embedding": ["-o", str(tmp_path / "x.png")],
             "neighbors": ["--doc-id", "sport/03.txt"]}[verb]
    line = _error_line(runner.invoke(main, [*verb.split(), "-m", str(model), *extra]))
    assert str(corpus) in line and "recorded" in line and "--input" in line
    _run(runner, _suggested(line), CORPUS=moved)


def test_the_data_home_remedy_is_an_environment_variable(runner, tmp_path, monkeypatch):
    """No CLI option is named data_home: the remedy is the variable, run here in a shell."""
    import os
    import subprocess
    import sys
    import tarfile

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SPHDIST_DATA_HOME", str(tmp_path / "nowhere"))
    line = _error_line(runner.invoke(main, ["ingest", "-o", "corpus.zarr"]))
    assert "pass data_home." not in line and "data_home='/path/to/data'" in line
    command = next(c for c in re.findall(r"`([^`]+)`", line) if "sphdist ingest" in c)
    assert command.startswith("SPHDIST_DATA_HOME=/path/to/data sphdist ")
    # a data home holding a (small) archive of the bydate layout, named as the remedy says
    write_text_tree(tmp_path / "tree" / "20news-bydate-train")
    (tmp_path / "data").mkdir()
    with tarfile.open(tmp_path / "data" / "20news-bydate.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "tree" / "20news-bydate-train", arcname="20news-bydate-train")
    env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    env.pop("SPHDIST_DATA_HOME")
    done = subprocess.run(command.replace("/path/to/data", str(tmp_path / "data")), shell=True,
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "corpus.zarr").exists() and "30 documents" in done.stdout


def test_every_option_has_help():
    import click

    missing = []

    def walk(command, name):
        if isinstance(command, click.Group):
            for sub, c in command.commands.items():
                walk(c, f"{name} {sub}")
            return
        missing.extend(f"{name} {p.opts[0]}" for p in command.params
                       if isinstance(p, click.Option) and not (p.help or "").strip())

    walk(main, "sphdist")
    assert not missing


def test_objective_is_never_printed_negative(runner, tmp_path):
    """At r = n the fit reaches X = U V exactly; rounding gives f ~ -1e-15, shown as 0."""
    from sphdist.io.corpus_writer import CorpusWriter
    from sphdist.io.model import open_model

    from ..reference import random_corpus

    X = random_corpus(20, 6, density=0.6, seed=0, n_empty=0)
    with CorpusWriter(tmp_path / "c.zarr", n_features=20,
                      feature_scheme={"type": "hashing"}, label_names=["a", "b"]) as w:
        w.write_chunk(X, [str(j) for j in range(6)], np.arange(6) % 2)
        w.commit(idf=np.ones(20))
    model = tmp_path / "m.zarr"
    result = runner.invoke(main, ["fit", "-i", str(tmp_path / "c.zarr"), "-o", str(model),
                                  "-r", "6", "--max-iter", "3", "--tol", "0", "--n-workers",
                                  "0"])
    assert result.exit_code == 0, result.output
    assert min(open_model(model).objective) < 0  # the stored history is the solver's own
    numbers = r"(-?\d+(?:\.\d+)?(?:e[-+]\d+)?)"
    printed = [float(x) for x in re.findall(rf"objective {numbers}", result.output)]
    assert len(printed) >= 4 and min(printed) >= 0
    report = json.loads(runner.invoke(main, [
        "fit", "-i", str(tmp_path / "c.zarr"), "-o", str(model), "-r", "6", "--max-iter", "3",
        "--tol", "0", "--n-workers", "0", "--overwrite", "--json"]).stdout)
    assert report["objective"] >= 0
    info = json.loads(runner.invoke(main, ["info", str(model), "--json"]).stdout)
    assert min(v for _, v in info["objective"]) >= 0
    text = runner.invoke(main, ["info", str(model)]).stdout
    assert "-" not in text.split("objective", 1)[1].splitlines()[0]
    scores = json.loads(runner.invoke(main, ["evaluate", "-m", str(model), "-i",
                                             str(tmp_path / "c.zarr"), "--json"]).stdout)
    assert scores["objective"] >= 0


def test_counts_of_one_are_singular(trained, runner, tmp_path):
    from sphdist.io.corpus_writer import CorpusWriter

    from ..reference import random_corpus

    with CorpusWriter(tmp_path / "one.zarr", n_features=20,
                      feature_scheme={"type": "hashing"}) as w:
        w.write_chunk(random_corpus(20, 1, density=0.5, seed=1, n_empty=0), ["d0"])
        w.commit(idf=np.ones(20))
    text = runner.invoke(main, ["info", str(tmp_path / "one.zarr")]).stdout
    assert "1 documents" not in text and "1 document" in text


def test_transform_shows_its_progress_and_q_silences_it(trained, runner, tmp_path):
    """Not on a terminal (click's runner): log lines, the last one all chunks done."""
    args = ["transform", "-m", str(trained["model"]), "-i", str(trained["corpus"])]
    result = runner.invoke(main, [*args, "-o", str(tmp_path / "a.zarr")])
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert any(line.startswith("transform: embedding 30 documents") for line in lines)
    done = [line for line in lines if re.match(r"transform: \d+/4 chunks", line)]
    assert done and done[-1].startswith("transform: 4/4 chunks"), result.stderr
    assert "started LocalCluster" not in result.stderr  # a small corpus runs in this process
    quiet = runner.invoke(main, ["-q", *args, "-o", str(tmp_path / "b.zarr")])
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.stderr
    assert "wrote" in quiet.stdout


def test_a_label_field_no_document_has_names_the_fields_present(runner, tmp_path):
    """Not ``--on-error skip``, which would skip every document: the fields there are, and the
    option that names the right one (which then ingests every document with its label)."""
    source = tmp_path / "docs.jsonl"
    topics = ["space", "hockey"] * 10
    source.write_text("".join(
        json.dumps({"text": f"orbit launch rocket {t} {i}", "topic": t}) + "\n"
        for i, t in enumerate(topics)
    ))
    out = tmp_path / "c.zarr"
    args = ["ingest", str(source), "-o", str(out), "--min-df", "1", "--max-df", "1.0"]
    result = runner.invoke(main, [*args, "--label-field", "label"])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("Error: ")]
    assert len(errors) == 1, result.stderr  # beside the progress lines of the pass
    line = errors[0]
    assert "no 'label' field" in line and "['text', 'topic']" in line, line
    assert "--label-field NAME" in line and "skip every" not in line, line
    assert not out.exists()
    result = runner.invoke(main, [*args, "--label-field", "topic"])  # the field it named
    assert result.exit_code == 0, result.output
    from sphdist.io import open_stored

    corpus = open_stored(out, "corpus")
    assert corpus.n_documents == 20 and sorted(corpus.label_names) == ["hockey", "space"]


# -- issue 22: a fit to an existing output names the whole command that works -----------------


def _commands(line):
    """Every command in backticks after "To resolve this", in order."""
    commands = re.findall(r"`(sphdist [^`]+)`", line.split("To resolve this", 1)[1])
    assert commands, line
    return commands


def _copy_of_the_model(trained, tmp_path):
    model = tmp_path / "model.zarr"
    shutil.copytree(trained["model"], model)
    return model


def _fitted(model):
    from sphdist.io.model import open_model

    return open_model(model)


def test_a_fit_with_other_parameters_to_an_existing_output_suggests_overwrite_first(
    trained, runner, tmp_path
):
    """What the user asked for is a fit with -r 4: the --overwrite command with -r 4 comes first,
    then the resume of what is there, with its own -r 3; both run."""
    model = _copy_of_the_model(trained, tmp_path)
    asked = ["fit", "-i", str(trained["corpus"]), "-o", str(model), "-r", "4", "--max-iter", "3",
             "--tol", "1e-6", "--n-workers", "0"]
    line = _error_line(runner.invoke(main, asked))
    overwrite, resume = _commands(line)[:2]
    assert "--overwrite" in overwrite and "-r 4" in overwrite and "--max-iter 3" in overwrite
    assert "--tol 1e-06" in overwrite and "--resume" not in overwrite
    assert "--resume" in resume and f"-r {R}" in resume and "--overwrite" not in resume
    _run(runner, resume)
    assert _fitted(model).shape[1] == R
    _run(runner, overwrite)
    assert _fitted(model).shape[1] == 4 and _fitted(model).n_iter == 3


def test_a_fit_of_the_same_parameters_to_an_unfinished_output_suggests_resume_first(
    trained, runner, tmp_path
):
    model = _copy_of_the_model(trained, tmp_path)  # 5 iterations done
    asked = ["fit", "-i", str(trained["corpus"]), "-o", str(model), "-r", str(R), "--max-iter",
             "8", "--tol", "0", "--n-workers", "0"]
    line = _error_line(runner.invoke(main, asked))
    resume, overwrite = _commands(line)[:2]
    assert "--resume" in resume and "--max-iter 8" in resume and "--tol 0" in resume
    assert "--overwrite" in overwrite
    _run(runner, resume)
    assert _fitted(model).n_iter == 8


def test_resume_with_other_parameters_names_every_difference_and_the_commands(
    trained, runner, tmp_path
):
    """--resume -r 4 --lam palm on a checkpoint of -r 3: both differences are named, the first
    command resumes with the checkpoint's parameters (and the asked --max-iter and --tol), the
    second starts the asked fit with --overwrite."""
    model = _copy_of_the_model(trained, tmp_path)
    asked = ["fit", "-i", str(trained["corpus"]), "-o", str(model), "--resume", "-r", "4",
             "--lam", "palm", "--max-iter", "7", "--tol", "0", "--n-workers", "0"]
    line = _error_line(runner.invoke(main, asked))
    # named by the options the user typed (issue 32), not the Python names
    assert "-r: 3 -> 4" in line and "--lam: 'exact' -> 'palm'" in line, line
    resume, overwrite = _commands(line)[:2]
    assert "--resume" in resume and f"-r {R}" in resume and "--lam" not in resume
    assert "--max-iter 7" in resume and "--tol 0" in resume
    assert "--overwrite" in overwrite and "-r 4" in overwrite and "--lam palm" in overwrite
    _run(runner, resume)
    assert _fitted(model).n_iter == 7 and _fitted(model).shape[1] == R
    _run(runner, overwrite)
    assert _fitted(model).shape[1] == 4 and _fitted(model).params["lam"] == "palm"


# -- issue 22: a model fitted --remove-headers, new JSON Lines documents without headers ------


def _jsonl(path, n, *, headers, seed):
    """``n`` JSON Lines documents; with ``headers``, each a mail message (headers, blank line,
    body); without, one line of text, but every tenth with a blank line in it."""
    rng = np.random.default_rng(seed)
    common = ["the", "of", "report", "people", "said", "time"]
    with open(path, "w") as f:
        for i in range(n):
            label = sorted(TOPICS)[i % 3]
            body = " ".join(rng.choice(TOPICS[label].split() + common, 12))
            if headers:
                body = f"From: user{i}@example.org\nSubject: {label}\n\n{body}"
            elif i % 10 == 0:
                body = f"{body}\n\n{' '.join(rng.choice(TOPICS[label].split(), 4))}"
            f.write(json.dumps({"text": body, "label": label}) + "\n")
    return path


@pytest.mark.parametrize("before", ["fresh", "after the inherited cleaning's remedy ran"])
def test_a_model_fitted_remove_headers_gets_a_chain_that_keeps_jsonl_documents(
    runner, tmp_path, monkeypatch, before
):
    """The chain re-ingests with --keep-headers (the new documents have no header block: the
    model's cleaning would empty 27 of 30), with --overwrite where an output is there; run
    as printed, it leaves every document non-empty and writes the embedding."""
    from sphdist.io.corpus import open_corpus
    from sphdist.io.embedding import open_embedding

    monkeypatch.chdir(tmp_path)
    model = tmp_path / "model.zarr"
    train = _jsonl(tmp_path / "train.jsonl", 30, headers=True, seed=0)
    for argv in (["ingest", str(train), "-o", "train.zarr", "--label-field", "label",
                  "--remove-headers", "--hashing", "--n-features", "512"],
                 ["fit", "-i", "train.zarr", "-o", str(model), "-r", str(R), "--max-iter", "5",
                  "--n-workers", "0"]):
        result = runner.invoke(main, argv)
        assert result.exit_code == 0, result.output
    new = _jsonl(tmp_path / "new.jsonl", 30, headers=False, seed=1)
    result = runner.invoke(main, ["ingest", str(new), "-o", "new.zarr", "--label-field",
                                  "label", "--hashing", "--n-features", "256"])
    assert result.exit_code == 0, result.output
    transform = ["transform", "-m", str(model), "-i", "new.zarr", "-o", "emb.zarr"]
    if before != "fresh":  # what the remedy without --keep-headers left: 27 documents empty
        result = runner.invoke(main, ["ingest", str(new), "-o", "new.like.zarr", "--label-field",
                                      "label", "--like", str(model)])
        assert result.exit_code == 0, result.output
        assert open_corpus(tmp_path / "new.like.zarr").n_empty == 27
        result = runner.invoke(main, ["transform", "-m", str(model), "-i", "new.like.zarr",
                                      "-o", "emb.zarr"])
        assert result.exit_code == 0, result.output
    line = _error_line(runner.invoke(main, transform))
    command = _suggested(line)
    assert "--keep-headers" in command, line
    _run(runner, command)
    like = open_corpus(tmp_path / "new.like.zarr")
    assert like.n_documents == 30 and like.n_empty == 0
    assert open_embedding(tmp_path / "emb.zarr").V.shape == (R, 30)


def test_a_remedy_of_the_same_command_keeps_where_the_user_ran_it(trained, runner):
    """Issue 43 item 6: ``fit ... -r 2000 --n-workers 1 --memory-limit 1GiB`` suggested
    ``sphdist fit ... -r 348`` without the cluster options the user chose."""
    result = runner.invoke(main, [
        "fit", "-i", str(trained["corpus"]), "-o", str(trained["model"]), "-r", str(R + 1),
        "--n-workers", "1", "--memory-limit", "1GiB", "--threads-per-worker=1"])
    commands = _commands(_error_line(result))  # the model is there: replace or continue it
    fits = [c for c in commands if c.startswith("sphdist fit ")]
    assert fits, commands
    for command in fits:
        words = shlex.split(command)
        assert words[words.index("--n-workers") + 1] == "1", command
        assert words[words.index("--memory-limit") + 1] == "1GiB", command
        assert words[words.index("--threads-per-worker") + 1] == "1", command
