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
