"""``sphdist ingest`` as a user runs it: help texts, and ``-q`` on a real terminal."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest
from click.testing import CliRunner

from sphdist.cli import main
from tests._textcorpus import write_text_tree

SPHDIST = [sys.executable, "-c", "from sphdist.cli import main; main()"]


def test_help_documents_both_schemes_and_every_option():
    result = CliRunner().invoke(main, ["ingest", "--help"], terminal_width=200)
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for expected in ("--vocabulary / --hashing", "[default: vocabulary]",
                     "--n-features", "[default: 262144]", "[default: 5;", "[default: 0.5]",
                     "--stop-words [english|none]", "[default: english]",
                     "--sublinear-tf / --no-sublinear-tf", "--remove-headers / --keep-headers",
                     "Number of terms --select keeps"):
        assert expected in text, expected
    # every option has a help text
    ctx = main.make_context("sphdist", ["ingest", "--help"], resilient_parsing=True)
    command = main.get_command(ctx, "ingest")
    assert all(p.help for p in command.params if p.param_type_name == "option"), [
        p.name for p in command.params if p.param_type_name == "option" and not p.help]


def _on_a_terminal(args: list[str], cwd) -> str:
    """Run ``sphdist ARGS`` with stdout and stderr on a pseudo-terminal."""
    leader, follower = pty.openpty()
    # a terminal of 40 x 120 characters (a new pseudo-terminal is 0 x 0: tqdm draws nothing)
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([*SPHDIST, *args], cwd=cwd,
                            stdin=subprocess.DEVNULL, stdout=follower, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait(timeout=120) == 0, b"".join(chunks)
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.parametrize("quiet", [False, True])
def test_quiet_suppresses_the_pass_lines_on_a_terminal(tmp_path, quiet):
    write_text_tree(tmp_path / "tree", n_per_label=10)
    out = _on_a_terminal([*(["-q"] if quiet else []), "ingest", "tree", "-o", "c.zarr"],
                         tmp_path)
    assert "wrote c.zarr: 30 documents" in out
    assert ("pass 1/2" in out and "pass 2/2" in out) is not quiet, out
    assert ("pass" in out) is not quiet, out


@pytest.mark.parametrize("quiet", [False, True])
def test_quiet_suppresses_the_pass_lines_in_a_log(tmp_path, quiet):
    write_text_tree(tmp_path / "tree", n_per_label=10)
    proc = subprocess.run(
        [*SPHDIST, *(["-q"] if quiet else []), "ingest", "tree",
         "-o", "c.zarr"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert ("pass 1/2: count: 30/30 documents" in proc.stderr) is not quiet, proc.stderr
    if quiet:
        assert proc.stderr == ""


def _ingested(tmp_path, name: str, *flags: str) -> tuple[dict, dict]:
    """``sphdist ingest tree --json FLAGS``: the summary and the stored digests."""
    from sphdist.io.corpus import open_corpus

    out = tmp_path / name
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / "tree"), "-o", str(out),
                                       "--chunk-size", "4", "--partition-size", "8",
                                       "--min-df", "1", "--json", *flags])
    assert result.exit_code == 0, result.output
    corpus = open_corpus(out)
    stored = {k: corpus.attrs[k] for k in ("chunk_sha256", "sha256", "chunk_boundaries")}
    return json.loads(result.stdout.splitlines()[-1]), stored


def test_n_workers_one_runs_in_this_thread_and_the_default_on_dask_threads(tmp_path):
    """--n-workers 1: dask's synchronous scheduler; no flag: its threads; the same corpus."""
    import dask

    write_text_tree(tmp_path / "tree", n_per_label=10)
    one, one_stored = _ingested(tmp_path, "one.zarr", "--n-workers", "1")
    with dask.config.set(num_workers=3):
        threads, threads_stored = _ingested(tmp_path, "threads.zarr")
    assert one["workers"] == 1 and threads["workers"] == 3
    assert one["scheduler"] == "synchronous" and threads["scheduler"] == "threads"
    assert one["n_partitions"] == threads["n_partitions"] == 4
    assert threads_stored == one_stored


def test_scheduler_address_runs_on_that_cluster(tmp_path):
    """--scheduler-address: the tasks run on the cluster's workers (jobs.cluster.connect)."""
    from distributed import LocalCluster

    write_text_tree(tmp_path / "tree", n_per_label=10)
    one, one_stored = _ingested(tmp_path, "one.zarr", "--n-workers", "1")
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster:
        remote, remote_stored = _ingested(tmp_path, "remote.zarr", "--scheduler-address",
                                          cluster.scheduler_address)
    assert remote["workers"] == 2
    assert remote_stored == one_stored


def _lines_of(path, n: int) -> None:
    words = ["orbit", "launch", "shuttle", "bread", "butter", "jam", "moon", "crew"]
    with open(path, "w", encoding="utf-8") as f:
        for j in range(n):
            text = " ".join(words[(j * k) % 8] + str(k % 50) for k in range(1, 40))
            f.write(json.dumps({"text": text}) + "\n")


def test_ctrl_c_leaves_no_staging_or_spilled_counts(tmp_path):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) during the counting pass.

    Issue 31, item 6: "nothing was written" must be true of the folder too: no
    ``OUTPUT.tmp-<id>-spill`` of spilled counts left beside it, and one error line.
    """
    import signal
    import time

    _lines_of(tmp_path / "docs.jsonl", 24_000)  # long enough to be interrupted mid-pass
    proc = subprocess.Popen([*SPHDIST, "ingest", "docs.jsonl", "-o", "c.zarr", "--hashing"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("c.zarr.tmp-*-spill/*.npz")) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    if proc.returncode == 0:  # finished before the signal arrived: nothing to check
        pytest.skip("the ingest ended before Ctrl-C")
    assert proc.returncode == 130, stderr  # 128 + SIGINT
    assert "Traceback" not in stderr, stderr
    errors = [ln for ln in stderr.splitlines() if ln.startswith("Error: ")]
    assert len(errors) == 1 and "nothing was written" in errors[0], stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("c.zarr")) in (
        [], ["c.zarr.lock"]), sorted(p.name for p in tmp_path.iterdir())


def test_a_later_ingest_removes_what_an_interrupted_one_left(tmp_path):
    """Staging and spilled counts of a killed ingest are removed by the next one (its lock
    proves them stale)."""
    write_text_tree(tmp_path / "tree", n_per_label=10)
    for name in ("c.zarr.tmp-0123456789ab-spill", "c.zarr.tmp-0123456789ab"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "000000-00000.npz").write_bytes(b"x" * 1000)
    summary, _ = _ingested(tmp_path, "c.zarr")
    assert summary["n_documents"] == 30
    assert not list(tmp_path.glob("c.zarr.tmp-*"))


# -- fields that travel (issue 33, item 4) -------------------------------------------------------
@pytest.fixture
def fitted_on_jsonl(tmp_path):
    """A model fitted on synthetic JSON Lines ingested with --label-field label; the lines."""
    from sphdist.jobs import run
    from sphdist.jobs.synth import SynthRequest

    run(SynthRequest(output=tmp_path / "train.jsonl", n_docs=120, n_topics=3, seed=0))
    run(SynthRequest(output=tmp_path / "test.jsonl", n_docs=60, n_topics=3, seed=1))
    runner = CliRunner()
    for args in (["ingest", "train.jsonl", "--label-field", "label", "--min-df", "1",
                  "-o", "c.zarr"], ["fit", "-i", "c.zarr", "-o", "m.zarr", "-r", "3"]):
        result = runner.invoke(main, ["-q", *[str(tmp_path / a) if a.endswith(
            (".jsonl", ".zarr")) else a for a in args]])
        assert result.exit_code == 0, result.output
    return tmp_path


def test_like_carries_the_label_and_id_fields_of_the_models_corpus(fitted_on_jsonl):
    from sphdist.io.corpus import open_corpus

    tmp = fitted_on_jsonl
    result = CliRunner().invoke(main, ["-q", "ingest", str(tmp / "test.jsonl"), "--like",
                                       str(tmp / "m.zarr"), "-o", str(tmp / "held.zarr")])
    assert result.exit_code == 0, result.output
    held = open_corpus(tmp / "held.zarr")
    lines = [json.loads(line) for line in (tmp / "test.jsonl").read_text().splitlines()]
    assert list(held.doc_ids) == [r["id"] for r in lines]
    assert [held.label_names[c] for c in held.labels] == [r["label"] for r in lines]
    # documents without the model's label field are ingested without labels, as before
    (tmp / "bare.jsonl").write_text("".join(json.dumps({"text": r["text"]}) + "\n"
                                            for r in lines[:5]))
    result = CliRunner().invoke(main, ["-q", "ingest", str(tmp / "bare.jsonl"), "--like",
                                       str(tmp / "m.zarr"), "-o", str(tmp / "bare.zarr")])
    assert result.exit_code == 0, result.output
    assert open_corpus(tmp / "bare.zarr").labels is None


def test_evaluate_remedies_for_json_lines_work_when_pasted(fitted_on_jsonl):
    """A raw .jsonl, and a JSON Lines corpus without labels: the remedy is ``ingest --like``
    with --label-field (not "one folder per label"), and the pasted commands evaluate."""
    import re
    import shlex

    tmp = fitted_on_jsonl
    runner = CliRunner()
    raw = runner.invoke(main, ["evaluate", "-m", str(tmp / "m.zarr"), "-i",
                               str(tmp / "test.jsonl")])
    assert raw.exit_code != 0 and "Traceback" not in raw.output
    assert "folder" not in raw.output and "--like" in raw.output, raw.output
    assert runner.invoke(main, ["-q", "ingest", str(tmp / "train.jsonl"), "-o",  # no labels
                                str(tmp / "nolabels.zarr"), "--min-df", "1"]).exit_code == 0
    bare = runner.invoke(main, ["evaluate", "-m", str(tmp / "m.zarr"), "-i",
                                str(tmp / "nolabels.zarr")])
    assert bare.exit_code != 0 and "folder per label" not in bare.output, bare.output
    for result in (raw, bare):
        commands = re.findall(r"`(sphdist [^`]+)`", result.output)
        assert [c.split()[1] for c in commands] == ["ingest", "evaluate"], result.output
        for command in commands:
            pasted = runner.invoke(main, shlex.split(command)[1:], catch_exceptions=False)
            assert pasted.exit_code == 0, (command, pasted.output)
        assert "accuracy" in pasted.output
    assert (tmp / "test.zarr").is_dir() and (tmp / "nolabels.labelled.zarr").is_dir()


def test_skipped_documents_are_named_without_markup_in_json_and_the_store(tmp_path, monkeypatch):
    """Issue 43 item 4: ``--on-error skip --json`` printed ``skipped_examples`` holding
    ``\\ue000{"option": "text_field"}\\ue001``, and the corpus stored the same; then
    ``text_field=<unset>``. Nothing a user or a store sees carries markup or a sentinel."""
    import zarr

    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.jsonl").write_text(
        '{"id": "a", "text": "alpha beta", "label": "x"}\n'
        '{"id": "b", "body": "no text here", "label": "y"}\n'
        '{"id": "c", "text": "alpha gamma", "label": "x"}\n')
    result = CliRunner().invoke(main, ["ingest", "bad.jsonl", "-o", "bad2.zarr", "--label-field",
                                       "label", "--on-error", "skip", "--min-df", "1", "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    stored = dict(zarr.open_group(str(tmp_path / "bad2.zarr"), mode="r").attrs)
    assert printed["n_skipped"] == stored["ingest"]["n_skipped"] == 1
    for examples in (printed["skipped_examples"], stored["ingest"]["skipped_examples"]):
        (example,) = examples
        assert example.startswith("bad.jsonl:2: no 'text' field")
        assert example.endswith("name the text field with text_field"), example
    seen = json.dumps(printed, ensure_ascii=False) + json.dumps(stored, ensure_ascii=False)
    assert not {"\ue000", "\ue001"} & set(seen) and "<unset>" not in seen
