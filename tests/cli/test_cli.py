"""The sphdist command line, driven through click's runner."""

import json
import os
import signal

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
    assert "-r 7 is out of range" in _error_line(result)  # the option typed (issue 32)
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
    from sphdist.cli.fit import FitProgress

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

        from sphdist.jobs import run
        from sphdist.jobs.fit import FitRequest

        with dask.config.set(scheduler="sync"):
            model = run(FitRequest(corpus, tmp_path / "m.zarr", n_components=2, max_iter=3, tol=0,
                                   callback=progress))
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
    ("layout",): ["-m", "{tmp}/nope.zarr"],
    ("map",): ["-m", "{tmp}/nope.zarr", "-o", "{tmp}/map.html"],
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
    from sphdist.jobs import run
    from sphdist.jobs.ingest import IngestRequest
    from sphdist.text.ingest import TextSpec

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
        run(IngestRequest(source, corpus, text=TextSpec(vocabulary=False)))


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
    assert result.exit_code == 130  # 128 + SIGINT
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("Error: ")]
    assert len(errors) == 1 and result.stderr.strip().endswith(errors[0]), result.stderr
    line = errors[0]  # after the progress lines of the passes
    assert "interrupted" in line and "nothing was written" in line, line
    assert ("is as it was" if overwrite else "does not exist") in line, line
    assert "Aborted" not in result.output
    assert sorted(p.name for p in out.parent.iterdir()) == before  # no staging left


# -- issue 33 item 7, issue 31 items 5 and 9: terminal manners ---------------------------------


@pytest.fixture
def corpus(runner, source, tmp_path):
    path = tmp_path / "c.zarr"
    assert runner.invoke(main, ["ingest", str(source), "-o", str(path), *HASHED]).exit_code == 0
    return path


def test_quiet_and_debug_are_taken_after_the_command_too(runner, corpus, tmp_path):
    args = ["-i", str(corpus), "-r", "2", "--max-iter", "2", "--tol", "0"]
    loud = runner.invoke(main, ["fit", *args, "-o", str(tmp_path / "a.zarr")])
    quiet = runner.invoke(main, ["fit", *args, "-o", str(tmp_path / "b.zarr"), "-q"])
    assert loud.exit_code == quiet.exit_code == 0, quiet.output
    assert "iter " in loud.stderr and "iter " not in quiet.stderr, quiet.stderr
    assert quiet.stdout.startswith("wrote ")
    result = runner.invoke(main, ["fit", "-i", str(tmp_path / "nope.zarr"), "--debug"])
    assert result.exit_code == 1 and isinstance(result.exception, FileNotFoundError)
    # where a command has a -q of its own (neighbors --query), --quiet is still taken
    result = runner.invoke(main, ["neighbors", "--help"])
    assert "-q, --query" in result.stdout and "--quiet" in result.stdout


def test_n_workers_with_a_scheduler_address_is_a_usage_error(runner, corpus, tmp_path):
    result = runner.invoke(main, ["fit", "-i", str(corpus), "-o", str(tmp_path / "m.zarr"),
                                  "--n-workers", "2", "--scheduler-address",
                                  "tcp://127.0.0.1:1"])
    assert result.exit_code == 2, result.output
    line = " ".join(result.stderr.split())
    assert "--n-workers 2 starts a LocalCluster" in line and "tcp://127.0.0.1:1" in line
    assert "leave out --scheduler-address" in line
    assert not (tmp_path / "m.zarr").exists()
    result = runner.invoke(main, ["fit", "-i", str(corpus), "--n-workers", "1"],
                           env={"DASK_SCHEDULER_ADDRESS": "tcp://127.0.0.1:1"})
    assert result.exit_code == 2 and "unset DASK_SCHEDULER_ADDRESS" in result.stderr


def test_a_tls_scheduler_without_the_tls_files_names_them(runner, corpus, tmp_path):
    result = runner.invoke(main, ["fit", "-i", str(corpus), "-o", str(tmp_path / "m.zarr"),
                                  "-r", "2", "--scheduler-address", "tls://127.0.0.1:1"])
    assert result.exit_code == 1, result.output
    line = _error_line(result)
    assert "tls://127.0.0.1:1" in line and "no TLS files" in line, line
    for option in ("--tls-ca-file", "--tls-cert", "--tls-key"):
        assert option in line, line


@pytest.mark.parametrize(("value", "words"), [
    ("1e400", "is not a size"), ("", "is not a size"), ("GiB", "is not a size"),
    ("1e100", "more than any machine's memory"),
])
def test_a_memory_budget_that_is_no_size_is_a_usage_error(runner, tmp_path, value, words):
    result = runner.invoke(main, ["fit", "-i", str(tmp_path / "c.zarr"), "--memory-budget",
                                  value])
    assert result.exit_code == 2, result.output
    assert f"memory budget {value!r}" in result.stderr and words in result.stderr
    assert "Traceback" not in result.output and result.exception.__class__ is SystemExit


@pytest.mark.parametrize("words", [[], ["plot"]], ids=["sphdist", "plot"])
def test_the_help_gives_each_command_its_whole_first_sentence(runner, words):
    result = runner.invoke(main, [*words, "--help"], terminal_width=80)
    commands = result.stdout.partition("Commands:")[2]
    assert "..." not in commands, commands  # click cut them at the width of the terminal
    text = " ".join(commands.split())
    group = main.commands[words[0]] if words else main
    for name, command in group.commands.items():
        sentence = command.get_short_help_str(limit=10_000)
        assert f"{name} {sentence}" in text, (name, sentence)


def test_info_wraps_and_caps_many_label_counts(runner, tmp_path):
    import numpy as np

    from sphdist.cli.inspect import SHOWN_LABELS
    from sphdist.io.corpus_writer import CorpusWriter

    from ..reference import random_corpus

    names, n = [f"module_{i:03d}" for i in range(180)], 360
    with CorpusWriter(tmp_path / "c.zarr", n_features=8, feature_scheme={"type": "hashing"},
                      label_names=names) as w:
        w.write_chunk(random_corpus(8, n, seed=1), [str(j) for j in range(n)], np.arange(n) % 180)
        w.commit(idf=np.ones(8))
    result = runner.invoke(main, ["info", str(tmp_path / "c.zarr")], terminal_width=100)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  labels "))
    block = lines[start:]
    assert len(block) > 2 and all(len(line) <= 100 for line in block[:-1]), block
    assert sum(line.count("module_") for line in block) == SHOWN_LABELS
    assert "180 labels" in block[0] and "160 more labels" in block[-1]
    assert "--json` lists them all" in block[-1]
    report = json.loads(runner.invoke(main, ["info", str(tmp_path / "c.zarr"), "--json"]).stdout)
    assert len(report["labels"]) == 180


def test_a_closed_pipe_ends_quietly(corpus):
    """`sphdist info c.zarr | head -0`: no Error line, no traceback, the shell's status 141."""
    import subprocess
    import sys

    from sphdist.cli._common import CLOSED_PIPE_STATUS

    code = "from sphdist.cli import main; main(prog_name='sphdist')"
    proc = subprocess.Popen([sys.executable, "-c", code, "info", str(corpus)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line is written
    _, err = proc.communicate(timeout=120)
    assert err == b"", err.decode()
    assert proc.returncode == CLOSED_PIPE_STATUS == 141


# -- issue 33 item 6: numbers that agree, and are explained -------------------------------------


def test_fit_and_info_report_one_seconds_per_iteration_each_under_its_own_name(
    runner, corpus, tmp_path
):
    model = tmp_path / "m.zarr"
    fit = json.loads(runner.invoke(main, [
        "fit", "-i", str(corpus), "-o", str(model), "-r", "2", "--max-iter", "3", "--tol", "0",
        "--json"]).stdout)
    info = json.loads(runner.invoke(main, ["info", str(model), "--json"]).stdout)
    assert "seconds_per_iteration" not in info  # info cannot know the wall time of the run
    assert fit["solver_seconds_per_iteration"] == info["solver_seconds_per_iteration"] > 0
    assert fit["seconds_per_iteration"] >= fit["solver_seconds_per_iteration"]
    text = runner.invoke(main, ["info", str(model)]).stdout
    assert f"{info['solver_seconds_per_iteration']:.3g} s/iteration solving" in text


def test_evaluate_says_why_the_knn_accuracy_is_not_scored(runner, corpus, source, tmp_path):
    model = tmp_path / "m.zarr"
    assert runner.invoke(main, ["fit", "-i", str(corpus), "-o", str(model), "-r", "2",
                                "--max-iter", "2"]).exit_code == 0
    result = runner.invoke(main, ["evaluate", "-m", str(model)])  # 6 documents, 3 folds
    assert result.exit_code == 0, result.output
    assert "10-NN accuracy -" in result.stdout
    assert ("10-NN accuracy not scored: --knn-k 10 is more than the 4 documents of a training "
            "fold; choose k <= 4.") in result.stdout, result.stdout
    report = json.loads(runner.invoke(main, ["evaluate", "-m", str(model), "--json"]).stdout)
    assert report["knn_accuracy"] is None and report["knn_reason"].startswith("--knn-k 10 is")
    assert json.loads(runner.invoke(main, ["evaluate", "-m", str(model), "--knn-k", "3",
                                           "--json"]).stdout)["knn_accuracy"] is not None
    # a label of a single document: left out, or (asked to keep it) no stratified fold
    (source / "autos").mkdir()
    (source / "autos" / "0.txt").write_text("the engine of the car")
    single, m1 = tmp_path / "c1.zarr", tmp_path / "m1.zarr"
    assert runner.invoke(main, ["ingest", str(source), "-o", str(single), *HASHED]).exit_code == 0
    assert runner.invoke(main, ["fit", "-i", str(single), "-o", str(m1), "-r", "2",
                                "--max-iter", "2"]).exit_code == 0
    result = runner.invoke(main, ["evaluate", "-m", str(m1), "--knn-k", "1"])
    assert ("1-NN accuracy on 6 documents of 2 labels: 1 label with a single document left "
            "out ('autos'; 1 document).") in result.stdout, result.stdout  # issue 43 item 5
    result = runner.invoke(main, ["evaluate", "-m", str(m1), "--knn-k", "1",
                                  "--knn-min-label-size", "1"])
    assert ("1-NN accuracy not scored: label 'autos' has a single document, and stratified "
            "folds need 2 of each label; --knn-min-label-size 2 scores the others without "
            "it.") in result.stdout, result.stdout


@pytest.mark.slow
@pytest.mark.cluster
def test_ctrl_c_during_a_fit_on_worker_processes_prints_one_line(corpus, tmp_path):
    """Issue 31 item 6: Ctrl-C at a terminal reaches the whole process group; the workers'
    KeyboardInterrupt tracebacks (about 75 lines) came before the one Error: line."""
    import os
    import signal
    import subprocess
    import sys
    import time

    code = "from sphdist.cli import main; main(prog_name='sphdist')"
    err = tmp_path / "err.txt"
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, "fit", "-i", str(corpus), "-o",
             str(tmp_path / "m.zarr"), "-r", "2", "--max-iter", "100000", "--tol", "0",
             "--n-workers", "1", "--insecure-local-cluster"],
            stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
            env={k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"})
        try:
            deadline = time.monotonic() + 240
            while "iter    2" not in err.read_text() and proc.poll() is None:
                assert time.monotonic() < deadline, err.read_text()
                time.sleep(0.2)
            os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole group
            assert proc.wait(timeout=120) == 130  # 128 + SIGINT
        finally:  # a fit of 100,000 iterations left running would hold two cores for hours
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    text = err.read_text()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    lines = [line for line in text.splitlines() if not line.startswith("iter ")]
    assert lines[-1].startswith("Error: the fit was interrupted (Ctrl-C)"), text
    assert len(lines) <= 4, lines  # where it runs, the memory line, the Error: line


def _session_alive(sid):
    """The processes of session ``sid`` that are still running (zombies are done)."""
    import psutil

    alive = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getsid(proc.pid) == sid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (ProcessLookupError, PermissionError):
            pass
    return alive


@pytest.fixture(scope="module")
def cluster_inputs(tmp_path_factory):
    """A corpus and a JSON Lines source big enough that neither job ends within seconds."""
    import subprocess
    import sys

    where = tmp_path_factory.mktemp("ctrl_c_start")
    code = "from sphdist.cli import main; main(prog_name='sphdist')"
    for fmt, name in [("corpus", "c.zarr"), ("jsonl", "docs.jsonl")]:
        done = subprocess.run(
            [sys.executable, "-c", code, "synth", "--n-docs", "20000", "--n-topics", "5",
             "--vocab-size", "2000", "--format", fmt, "-o", str(where / name)],
            capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
    return where


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.parametrize(("command", "after", "group"), [
    ("fit", 0.5, False), ("fit", 1.5, False), ("fit", 3.0, False), ("fit", 1.0, True),
    ("ingest", 0.5, False), ("ingest", 1.5, True),
], ids=["fit-0.5s", "fit-1.5s", "fit-3s", "fit-group-1s", "ingest-0.5s", "ingest-group-1.5s"])
def test_ctrl_c_while_the_local_cluster_starts_stops_the_command(cluster_inputs, tmp_path,
                                                                 command, after, group):
    """Issue 44 item 7: a Ctrl-C in the seconds a LocalCluster of worker processes starts was
    not seen (SIGINT ignored in sphdist meanwhile): the fit ran to its end and exited 0. The
    signal is sent ``after`` seconds after sphdist started its first child process (the
    cluster is starting), to sphdist alone or (``group``, a terminal's Ctrl-C) to the whole
    process group, its workers included."""
    import subprocess
    import sys
    import time

    out = tmp_path / "out" / ("m.zarr" if command == "fit" else "c.zarr")
    out.parent.mkdir()
    args = {
        "fit": ["fit", "-i", str(cluster_inputs / "c.zarr"), "-o", str(out), "-r", "5",
                "--max-iter", "100000", "--tol", "0", "--threads-per-worker", "1"],
        "ingest": ["ingest", str(cluster_inputs / "docs.jsonl"), "-o", str(out), "--hashing"],
    }[command]
    code = "from sphdist.cli import main; main(prog_name='sphdist')"
    err = tmp_path / "err.txt"
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args, "--n-workers", "2"],
            stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
            env={k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"})
        try:
            deadline = time.monotonic() + 240  # a loaded machine starts Python slowly
            while len(_session_alive(proc.pid)) < 2 and proc.poll() is None:
                assert time.monotonic() < deadline, err.read_text()
                time.sleep(0.02)
            time.sleep(after)
            assert proc.poll() is None, err.read_text()  # still running: the job is long
            (os.killpg if group else os.kill)(proc.pid, signal.SIGINT)
            status = proc.wait(timeout=180)
            deadline = time.monotonic() + 60  # the workers end after sphdist
            while _session_alive(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            left = _session_alive(proc.pid)
        finally:  # a fit of 100,000 iterations left running would hold two cores for hours
            if proc.poll() is None or _session_alive(proc.pid):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    text = err.read_text()
    assert status == 130, text  # 128 + SIGINT; was 0, the whole fit run
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    errors = [line for line in text.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "interrupted (Ctrl-C)" in errors[0], text
    assert text.strip().endswith(errors[0]), text
    assert not left, (left, text)  # no worker, fork server or resource tracker left
    beside = [p.name for p in out.parent.iterdir() if p.name != out.name]
    assert not beside, beside  # no lock, no staging, no spilled counts


def test_info_lists_the_largest_labels_by_size_descending_ties_by_name(runner, tmp_path):
    import re

    import numpy as np

    from sphdist.cli.inspect import SHOWN_LABELS
    from sphdist.io.corpus_writer import CorpusWriter

    from ..reference import random_corpus

    names = [f"lab_{i:02d}" for i in range(25)]
    sizes = [1 + (i * 7) % 5 for i in range(25)]  # 1..5 with ties, not in name order
    labels = np.repeat(np.arange(25), sizes)
    n = labels.size
    with CorpusWriter(tmp_path / "c.zarr", n_features=8, feature_scheme={"type": "hashing"},
                      label_names=names) as w:
        w.write_chunk(random_corpus(8, n, seed=2), [str(j) for j in range(n)], labels)
        w.commit(idf=np.ones(8))
    result = runner.invoke(main, ["info", str(tmp_path / "c.zarr")], terminal_width=100)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  labels "))
    shown = re.findall(r"(lab_\d\d)\s+(\d+)", " ".join(lines[start:]))
    expected = sorted(zip(names, sizes, strict=True), key=lambda p: (-p[1], p[0]))
    assert [(k, int(v)) for k, v in shown] == expected[:SHOWN_LABELS]
