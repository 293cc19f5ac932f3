"""One writer per output: two real ``sphdist fit`` processes to the same ``-o`` (issue 15, item 2).

Each fit runs the real command line in its own process (a LocalCluster of one worker); a
checkpoint sleeps a little after its commit so that the writers overlap.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.io.model import load_checkpoint, open_model
from sphdist.jobs.fit import FitRequest

pytestmark = pytest.mark.slow

SPHDIST = str(Path(sys.executable).with_name("sphdist"))
MAX_ITER = 12
FIT_ARGS = ["-r", "3", "--max-iter", str(MAX_ITER), "--tol", "0", "--n-workers", "1",
            "--memory-limit", "1GiB", "--checkpoint-interval", "0"]
# `sphdist fit`, each checkpoint (one an iteration) followed by a pause: the run holds its
# output for a few seconds
SLOW_FIT = """
import sys, time
from sphdist.jobs import fit
from sphdist.cli import main

save = fit.save_checkpoint
def slow_save(*args, **kwargs):
    save(*args, **kwargs)
    time.sleep(0.3)
fit.save_checkpoint = slow_save
main(sys.argv[1:])
"""


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.zarr"
    result = CliRunner().invoke(main, [
        "synth", "--n-docs", "60", "--n-topics", "2", "--vocab-size", "50", "--format", "corpus",
        "--n-features", "64", "--chunk-size", "20", "-o", str(path),
    ])
    assert result.exit_code == 0, result.output
    return path


def _start(corpus, out, *args, slow=True):
    argv = ["--quiet", "fit", "-i", str(corpus), "-o", str(out), *FIT_ARGS, *args]
    command = [sys.executable, "-c", SLOW_FIT] if slow else [SPHDIST]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.Popen([*command, *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _errors(stderr):
    return [line for line in stderr.splitlines() if line.startswith("Error:")]


def _complete_and_resumable(corpus, out):
    model = open_model(out)
    assert model.n_iter == MAX_ITER
    request = FitRequest(corpus, out, resume=True, n_components=3, max_iter=MAX_ITER, tol=0)
    opened = request.prepare()  # the corpus, and the parameters the model stores
    assert request.continues(load_checkpoint(out), opened.source.fingerprint, opened.params)


def test_two_fits_to_one_output_one_is_refused(corpus, tmp_path):
    out = tmp_path / "model.zarr"
    a = _start(corpus, out)
    b = _start(corpus, out)
    results = {p.pid: (p.wait(timeout=120), *p.communicate()) for p in (a, b)}
    codes = sorted(rc for rc, _, _ in results.values())
    assert codes == [0, 1], results
    (winner,) = [pid for pid, (rc, _, _) in results.items() if rc == 0]
    (loser,) = [r for r in results.values() if r[0] == 1]
    errors = _errors(loser[2])
    assert len(errors) == 1 and f"pid {winner}" in errors[0], loser[2]
    assert "Traceback" not in loser[2]
    _complete_and_resumable(corpus, out)


def test_overwrite_does_not_take_a_running_fits_output(corpus, tmp_path):
    out = tmp_path / "model.zarr"
    a = _start(corpus, out)
    deadline = time.monotonic() + 60
    while not out.exists():
        assert a.poll() is None, a.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # what the first writer is building next: the second's start-up must not remove it
    planted = tmp_path / "model.zarr.tmp-0123456789ab"
    planted.mkdir()
    b = _start(corpus, out, "--overwrite", slow=False)
    rc_b, _, err_b = b.wait(timeout=120), *b.communicate()
    assert planted.exists()
    assert a.poll() is None  # still running: the refusal was not an output already complete
    rc_a, _, err_a = a.wait(timeout=120), *a.communicate()
    assert rc_a == 0, err_a
    assert rc_b == 1, err_b
    errors = _errors(err_b)
    assert len(errors) == 1 and f"pid {a.pid}" in errors[0] and "kill" in errors[0], err_b
    planted.rmdir()
    _complete_and_resumable(corpus, out)
