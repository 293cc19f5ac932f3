"""The sphdist command line, driven through click's runner."""

import json

import click
import pytest
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.io.model import open_model

HASHED = ["--hashing", "--n-features", "64"]  # 64 hashed features: a tiny model


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def source(tmp_path):
    texts = {
        "space": ["the rocket reached orbit", "nasa launch of the shuttle", "orbit of the moon"],
        "sport": ["the pitcher threw a fastball", "baseball opener", "home run in the ninth"],
    }
    for label, docs in texts.items():
        (tmp_path / "src" / label).mkdir(parents=True)
        for i, text in enumerate(docs):
            (tmp_path / "src" / label / f"{i}.txt").write_text(text)
    return tmp_path / "src"


def _error_line(result):
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    assert "Traceback" not in result.output
    return lines[0]


def test_ingest_fit_evaluate(runner, source, tmp_path):
    corpus, model = tmp_path / "c.zarr", tmp_path / "m.zarr"
    result = runner.invoke(main, ["ingest", str(source), "-o", str(corpus), *HASHED])
    assert result.exit_code == 0, result.output
    assert "6 documents" in result.stdout and "2 labels" in result.stdout

    result = runner.invoke(main, [
        "fit", "-i", str(corpus), "-o", str(model), "-r", "2", "--max-iter", "3", "--tol", "0",
        "--n-workers", "1",
    ])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("iter ")]
    assert [int(line.split()[1]) for line in lines] == [0, 1, 2, 3]
    assert "dashboard http://127.0.0.1:" in result.stderr
    assert open_model(model).n_iter == 3

    result = runner.invoke(main, ["evaluate", "-m", str(model), "-i", str(corpus), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["n_documents"] == 6 and report["n_clusters"] == 2
    assert 0.5 <= report["accuracy"] <= 1.0 and 0.0 <= report["nmi"] <= 1.0


def test_missing_input_is_one_line_and_exit_1(runner, tmp_path):
    result = runner.invoke(main, ["fit", "-i", str(tmp_path / "nope.zarr")])
    assert result.exit_code == 1
    assert "nope.zarr" in _error_line(result)


def test_too_many_components_leaves_no_model(runner, source, tmp_path):
    corpus, model = tmp_path / "c.zarr", tmp_path / "m.zarr"
    runner.invoke(main, ["ingest", str(source), "-o", str(corpus), *HASHED])
    result = runner.invoke(main, ["fit", "-i", str(corpus), "-o", str(model), "-r", "7"])
    assert result.exit_code == 1
    assert "n_components=7" in _error_line(result)
    assert not model.exists()


@pytest.mark.parametrize(
    "args",
    [["--lam", "fast"], ["--mu", "-1"], ["-r", "0"], ["--max-iter", "-2"], ["--tol", "x"]],
)
def test_bad_option_values_are_usage_errors(runner, tmp_path, args):
    result = runner.invoke(main, ["fit", "-i", str(tmp_path), *args])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_debug_shows_the_exception(runner, tmp_path):
    result = runner.invoke(main, ["--debug", "fit", "-i", str(tmp_path / "nope.zarr")])
    assert result.exit_code == 1
    assert isinstance(result.exception, FileNotFoundError)


def test_ingest_refuses_existing_output(runner, source, tmp_path):
    corpus = tmp_path / "c.zarr"
    assert runner.invoke(main, ["ingest", str(source), "-o", str(corpus),
                                "--hashing"]).exit_code == 0
    result = runner.invoke(main, ["ingest", str(source), "-o", str(corpus), "--hashing"])
    assert result.exit_code == 1
    assert "--overwrite" in _error_line(result)


def test_quiet_and_log_level_silence_the_progress_lines(runner, source, tmp_path):
    from distributed import LocalCluster

    corpus = tmp_path / "c.zarr"
    runner.invoke(main, ["ingest", str(source), "-o", str(corpus), *HASHED])
    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster:
        results = {}
        for flags in (["--quiet"], ["--log-level", "warning"]):
            model = tmp_path / f"m{flags[-1]}.zarr"
            results[model] = runner.invoke(main, [
                *flags, "fit", "-i", str(corpus), "-o", str(model), "-r", "2", "--max-iter",
                "2", "--scheduler-address", cluster.scheduler_address, "--json",
            ])
    for model, result in results.items():
        assert result.exit_code == 0, result.output
        assert "iter " not in result.stderr and "dashboard" not in result.stderr
        report = json.loads(result.stdout)  # stdout is exactly one JSON object
        assert report["n_iter"] == open_model(model).n_iter == 2


def test_progress_lines_carry_objective_change_and_eta(runner, source, tmp_path):
    from sphdist.cli._common import FitProgress

    corpus = tmp_path / "c.zarr"
    runner.invoke(main, ["ingest", str(source), "-o", str(corpus), *HASHED])
    lines = []
    progress = FitProgress(max_iter=3, bar=False)
    import logging

    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger = logging.getLogger("sphdist")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        import dask

        from sphdist.jobs.fit import fit_corpus

        with dask.config.set(scheduler="sync"):
            model = fit_corpus(corpus, tmp_path / "m.zarr", n_components=2, max_iter=3, tol=0,
                               callback=progress)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    iters = [line for line in lines if line.startswith("iter ")]
    assert len(iters) == 4
    assert f"{model.objective[-1]:.10g}" in iters[-1] and "eta 00:00" in iters[-1]
    assert "rel_change nan" in iters[0] and "eta ?" in iters[0]


def _commands(command, path):
    """Every command under ``command``, with its path of names (``sphdist plot embedding``)."""
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            yield from _commands(command.get_command(ctx, name), [*path, name])


def test_every_option_has_help_text():
    missing = [
        f"{' '.join(path)} {option.opts[0]}"
        for path, command in _commands(main, ["sphdist"])
        for option in command.params
        if isinstance(option, click.Option) and not (option.help or "").strip()
    ]
    assert not missing, missing


# -- issue 22: with --json, an error is one JSON object on stdout ------------------------------


def _json_commands(command=main, name=()):
    """(words, command) of every command that takes --json."""
    if isinstance(command, click.Group):
        return [found for sub, c in sorted(command.commands.items())
                for found in _json_commands(c, (*name, sub))]
    return [(name, command)] if any(p.name == "as_json" for p in command.params) else []


#: For each command that takes --json, arguments with which it fails (the paths do not exist).
FAILING = {
    ("ingest",): ["{tmp}/nope", "-o", "{tmp}/c.zarr"],
    ("synth",): ["--n-docs", "5", "--n-topics", "2", "-o", "{tmp}"],  # exists, no --overwrite
    ("fit",): ["-i", "{tmp}/nope.zarr", "-o", "{tmp}/m.zarr"],
    ("evaluate",): ["-m", "{tmp}/nope.zarr", "-i", "{tmp}/nope.zarr"],
    ("transform",): ["-m", "{tmp}/nope.zarr", "-i", "{tmp}/c.zarr", "-o", "{tmp}/e.zarr"],
    ("export",): ["-m", "{tmp}/nope.zarr", "-o", "{tmp}/x.parquet"],
    ("neighbors",): ["-m", "{tmp}/nope.zarr", "--doc-id", "d0"],
    ("index",): ["-m", "{tmp}/nope.zarr", "-o", "{tmp}/i.zarr"],
    ("info",): ["{tmp}/nope.zarr"],
    ("plot", "convergence"): ["-m", "{tmp}/nope.zarr"],
    ("plot", "embedding"): ["-m", "{tmp}/nope.zarr"],
}


def test_every_json_command_has_a_failing_case():
    assert sorted(words for words, _ in _json_commands()) == sorted(FAILING)


@pytest.mark.parametrize("words", sorted(FAILING), ids=" ".join)
@pytest.mark.parametrize("where", ["first", "last"])
def test_an_error_with_json_is_one_json_object_on_stdout(runner, tmp_path, words, where):
    args = [a.replace("{tmp}", str(tmp_path)) for a in FAILING[words]]
    plain = runner.invoke(main, [*words, *args])
    args = ["--json", *args] if where == "first" else [*args, "--json"]
    result = runner.invoke(main, [*words, *args])
    assert result.exit_code == plain.exit_code == 1, result.output
    line = _error_line(result)  # stderr is unchanged: the one Error line
    assert line == _error_line(plain)
    report = json.loads(result.stdout)  # one object, nothing else on stdout
    assert set(report) == {"error", "type", "remedy"}
    assert line == f"Error: {report['error']}"
    assert report["type"].isidentifier() and report["type"] != "ClickException"
    assert report["remedy"] is None or (
        report["remedy"] and report["remedy"] in report["error"]
        and "To resolve this" not in report["remedy"]
    )


def test_a_usage_error_with_json_is_one_json_object_with_exit_2(runner, tmp_path):
    for args in (["fit", "--json", "-i", "c.zarr", "-r", "0"],  # a bad value
                 ["fit", "-i", "c.zarr", "-r", "0", "--json"],
                 ["fit", "--json"],  # a missing option
                 ["fit", "--json", "--no-such-option"]):  # before any option is processed
        result = runner.invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        report = json.loads(result.stdout)
        assert set(report) == {"error", "type", "remedy"}, args
        assert report["error"] in result.stderr


def test_the_remedy_of_a_json_error_is_the_text_after_to_resolve_this(runner, tmp_path):
    result = runner.invoke(main, ["info", str(tmp_path / "nope.zarr"), "--json"])
    report = json.loads(result.stdout)
    assert report["type"] == "InputNotFoundError"
    assert report["remedy"] == report["error"].split("To resolve this, ", 1)[1]


def test_messages_name_the_flag_without_the_python_argument(runner, source, tmp_path):
    """`--overwrite (overwrite=True)`: the command line says the flag only (issue 22); the
    Python API keeps naming its argument."""
    import re

    from sphdist.errors import OutputExistsError
    from sphdist.text.ingest import TextSpec, ingest

    corpus = tmp_path / "c.zarr"
    assert runner.invoke(main, ["ingest", str(source), "-o", str(corpus),
                                "--hashing"]).exit_code == 0
    (source / "space" / "bad.txt").write_bytes(b"\xff\xfe\x00\x01")
    cases = {
        "--overwrite": ["ingest", str(source), "-o", str(corpus), "--hashing"],
        "--on-error skip": ["ingest", str(source), "-o", str(tmp_path / "d.zarr"), "--hashing"],
        "--min-df 1 --max-df 1.0`": ["ingest", str(source), "-o", str(tmp_path / "e.zarr"),
                                     "--on-error", "skip"],
        "--hashing": ["ingest", str(source), "-o", str(tmp_path / "f.zarr"), "--n-features",
                      "64"],
        "--overwrite.": ["synth", "--n-docs", "5", "--n-topics", "2", "--format", "corpus",
                         "-o", str(corpus)],
    }
    for flag, args in cases.items():
        result = runner.invoke(main, args)
        assert result.exit_code == 1, (args, result.output)
        line = [ln for ln in result.stderr.splitlines() if ln.startswith("Error: ")][-1]
        assert flag in line, line
        assert not re.search(r"\([a-z_]+=", line), line  # no "(overwrite=True)"
    with pytest.raises(OutputExistsError, match=r"overwrite=True"):
        ingest(source, corpus, text=TextSpec(vocabulary=False))


@pytest.mark.parametrize("overwrite", [False, True])
def test_ctrl_c_during_ingest_says_nothing_was_written(runner, source, tmp_path, monkeypatch,
                                                       overwrite):
    from sphdist.io.corpus_writer import CorpusWriter

    out = tmp_path / "out" / "c.zarr"
    out.parent.mkdir()
    if overwrite:
        assert runner.invoke(main, ["ingest", str(source), "-o", str(out),
                                    "--hashing"]).exit_code == 0
    before = sorted(p.name for p in out.parent.iterdir())

    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(CorpusWriter, "append_stored_chunk", interrupted)
    result = runner.invoke(main, ["ingest", str(source), "-o", str(out), "--hashing",
                                  *(["--overwrite"] if overwrite else [])])
    assert result.exit_code == 1
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("Error: ")]
    assert len(errors) == 1 and result.stderr.strip().endswith(errors[0]), result.stderr
    line = errors[0]  # after the progress lines of the passes
    assert "interrupted" in line and "nothing was written" in line, line
    assert ("is as it was" if overwrite else "does not exist") in line, line
    assert "Aborted" not in result.output
    assert sorted(p.name for p in out.parent.iterdir()) == before  # no staging left
