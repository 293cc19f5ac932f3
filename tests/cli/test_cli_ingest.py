"""``sphdist ingest`` as a user runs it: help texts, and ``-q`` on a real terminal."""

from __future__ import annotations

import fcntl
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
