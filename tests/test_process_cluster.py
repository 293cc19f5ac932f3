"""The test harness tests/_process_cluster.py: it works from any clone, and cleans up (issue 43.3).

From a clone under /tmp, the shared-nothing tests errored: the isolated workers got an empty
tmpfs on /tmp, which hid the clone's ``.venv`` (``exec: .../.venv/bin/dask: not found``);
``isolation_unavailable()`` probed ``true`` only, so it did not skip; and ``start()`` left the
``dask scheduler`` running when the workers did not come. Here an interpreter lives in a
virtual environment under /tmp (as in such a clone) and is the workers' interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from ._process_cluster import ProcessCluster, isolation_unavailable

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
ENV = {"PYTHONPATH": str(REPO)}  # the functions sent to the workers live in this module


@pytest.fixture(scope="module")
def venv_under_tmp():
    """A virtual environment in /tmp (not tmp_path: it may be elsewhere) whose interpreter
    imports this one's packages, with its own ``dask`` script, as a clone's ``.venv``."""
    root = Path(tempfile.mkdtemp(prefix="sphdist-clone-", dir="/tmp"))
    try:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / ".venv")],
                       check=True, capture_output=True, timeout=300)
        python = root / ".venv" / "bin" / "python"
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        pth = root / ".venv" / "lib" / version / "site-packages" / "this-interpreter.pth"
        pth.write_text("import site; " + "; ".join(
            f"site.addsitedir({p!r})" for p in sys.path if p.endswith("site-packages")) + "\n")
        dask = root / ".venv" / "bin" / "dask"
        dask.write_text(f"#!{python}\nimport sys\nfrom dask.__main__ import main\n"
                        "if __name__ == '__main__':\n    sys.exit(main())\n")
        dask.chmod(0o755)
        yield python
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)
            if p.status() != psutil.STATUS_ZOMBIE}


def _executable() -> str:
    return sys.executable


def test_isolated_workers_run_an_interpreter_that_lives_under_tmp(
    venv_under_tmp, tmp_path, monkeypatch
):
    """The software is bound back into the workers' private /tmp; nothing else of it is."""
    reason = isolation_unavailable()
    if reason:
        pytest.skip(f"workers cannot be isolated here: {reason}")
    hidden, elsewhere = tmp_path / "driver", Path(tempfile.mkdtemp(dir="/tmp"))
    hidden.mkdir()
    (hidden / "marker").write_text("x")
    (elsewhere / "marker").write_text("x")  # in /tmp, neither hidden nor software
    monkeypatch.setattr(sys, "executable", str(venv_under_tmp))
    try:
        assert isolation_unavailable() is None
        with ProcessCluster(1, memory_limit="1GiB", isolate=[hidden], env=ENV,
                            timeout=120) as cluster, cluster.client() as client:
            (seen,) = client.run(_executable).values()
            assert seen == str(venv_under_tmp)
            for marker in (hidden / "marker", elsewhere / "marker"):
                (found,) = client.run(os.path.exists, str(marker)).values()
                assert not found, marker  # the isolation holds
    finally:
        shutil.rmtree(elsewhere)


def test_the_probe_runs_the_worker_command_under_the_same_isolation(
    venv_under_tmp, monkeypatch
):
    """Hiding the interpreter itself: the probe says why, as the cluster fails to start."""
    if isolation_unavailable():
        pytest.skip("workers cannot be isolated here")
    monkeypatch.setattr(sys, "executable", str(venv_under_tmp))
    venv = venv_under_tmp.parents[1]
    reason = isolation_unavailable(isolate=[venv], env=ENV)
    assert reason is not None and "not found" in reason, reason
    before = _children()
    with pytest.raises(TimeoutError, match="not found"):
        ProcessCluster(1, memory_limit="1GiB", isolate=[venv], env=ENV, timeout=120).start()
    assert _children() <= before  # nothing left running


def test_start_stops_what_it_started_when_the_workers_do_not_come(tmp_path):
    """A worker that cannot start (a bad option): start() raises, naming the worker's own
    words from its log, and leaves neither the scheduler nor a worker behind."""
    before = _children()
    cluster = ProcessCluster(2, memory_limit="1GiB", worker_args=["--no-such-option"],
                             log_dir=tmp_path / "logs", timeout=30)
    with pytest.raises(TimeoutError, match="no-such-option"):
        cluster.start()
    assert _children() <= before
    assert cluster.scheduler is None and not cluster.workers
