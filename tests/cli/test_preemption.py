"""Issue 43 item 2: a fit stopped by a batch scheduler (SIGTERM) or Ctrl-C (SIGINT).

A real ``sphdist fit`` process, interrupted by a signal in the middle of its iterations, long
before its first checkpoint is due: it writes a checkpoint of its last completed iteration,
exits with the conventional status (128 + the signal), prints one ``Error:`` line with the
``--resume`` command, leaves no staging (``*.tmp-*``) beside its output, and the pasted
command finishes the fit bitwise as the uninterrupted one.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from sphdist.io.model import open_model

# every chunk read sleeps 30 ms and X is streamed (--memory-budget 0): an iteration reads its
# chunks again, so it lasts long enough for a signal to arrive in the middle of the fit
SLOW = ("import time, sphdist.io._input as c; read = c._read_chunk\n"
        "def slow(*a, **k):\n    time.sleep(0.03)\n    return read(*a, **k)\n"
        "c._read_chunk = slow\nfrom sphdist.cli import main; main(prog_name='sphdist')")
# the default checkpoint interval (a minute): no checkpoint is due when the signal comes
FIT = ["-r", "2", "--max-iter", "40", "--tol", "0", "--seed", "0", "--memory-budget", "0"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("preemption") / "corpus.zarr"
    done = subprocess.run(
        [sys.executable, "-c", "from sphdist.cli import main; main()", "synth", "--n-docs",
         "60", "--n-topics", "2", "--vocab-size", "50", "--format", "corpus", "--n-features",
         "64", "--chunk-size", "16", "-o", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return path


def _sphdist(*args, **kwargs):
    return subprocess.Popen([sys.executable, "-c", SLOW, *args], text=True,
                            env={k: v for k, v in os.environ.items()
                                 if k != "DASK_SCHEDULER_ADDRESS"}, **kwargs)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signalled_fit_says_its_resume_and_the_resume_is_bitwise(corpus, tmp_path, sig):
    out = tmp_path / "m.zarr"
    err = tmp_path / "stderr.txt"
    with open(err, "w") as stderr:
        proc = _sphdist("fit", "-i", str(corpus), "-o", str(out), *FIT,
                        stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            deadline = time.monotonic() + 240  # a loaded machine starts Python slowly
            while "iter    3" not in err.read_text() and proc.poll() is None:
                assert time.monotonic() < deadline, err.read_text()
                time.sleep(0.05)
            proc.send_signal(sig)
            code = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = err.read_text()
    if code == 0:
        pytest.skip("the fit ended before the signal arrived")
    assert code == 128 + sig, text
    assert "Traceback" not in text, text
    errors = [line for line in text.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "interrupted" in errors[0], text
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name], list(tmp_path.iterdir())
    command = shlex.split(errors[0].split("`")[1])
    assert command[0] == "sphdist" and "--resume" in command, errors[0]
    stopped = open_model(out).n_iter  # the last completed iteration, saved at the signal
    assert 3 <= stopped < 40 and f"iteration {stopped} of 40" in errors[0], errors[0]

    resumed = _sphdist(*command[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert resumed.wait(timeout=600) == 0, resumed.stderr.read()
    whole = _sphdist("fit", "-i", str(corpus), "-o", str(tmp_path / "whole.zarr"), *FIT,
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert whole.wait(timeout=600) == 0, whole.stderr.read()
    a, b = open_model(out), open_model(tmp_path / "whole.zarr")
    assert a.n_iter == b.n_iter == 40
    np.testing.assert_array_equal(a.U, b.U)  # bitwise
    np.testing.assert_array_equal(a.objective, b.objective)
