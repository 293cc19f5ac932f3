"""The cluster options of the command line: where a fit runs, and one ``Error:`` line for every
value or failure of the cluster (issue 15, item 5: each case printed a traceback before)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.io.model import open_model
from sphdist.jobs import _cluster_deploy, run
from sphdist.jobs.synth import SynthRequest

SPHDIST = str(Path(sys.executable).with_name("sphdist"))
REPO = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def corpus(tmp_path):
    """40 documents in chunks of 16 (chunk 1 is read by a task of the first pass)."""
    run(SynthRequest(output=tmp_path / "corpus.zarr", n_docs=40, n_topics=2, vocab_size=50,
                     format="corpus", n_features=64, chunk_size=16))
    return tmp_path / "corpus.zarr"


@pytest.fixture
def nothing_starts(monkeypatch):
    """No cluster can start and no scheduler can be joined (either raises TypeError)."""
    monkeypatch.setattr(_cluster_deploy, "LocalCluster", None)
    monkeypatch.setattr(_cluster_deploy, "Client", None)
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)


def _corrupt_a_chunk(corpus):
    """Flip one bit of the stored values of document chunk 1 (read by a task, not at opening)."""
    chunk = corpus / "X" / "00001" / "data" / "c" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 1
    chunk.write_bytes(bytes(raw))


@pytest.mark.parametrize("option, value, needle", [
    ("--memory-limit", "4XB", "--memory-limit 4GiB"),
    ("--dashboard-address", "127.0.0.1:notaport", "--dashboard-address 127.0.0.1:8787"),
    ("--scheduler-address", "foo://bar", "--scheduler-address tcp://127.0.0.1:8786"),
    ("--scheduler-address", "tcp://127.0.0.1:notaport", "leave out --scheduler-address"),
])
def test_unusable_cluster_option_is_one_error_line(runner, corpus, tmp_path, nothing_starts,
                                                   option, value, needle):
    out = tmp_path / "m.zarr"
    result = runner.invoke(main, ["--quiet", "fit", "-i", str(corpus), "-o", str(out),
                                  option, value])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, result.stderr
    assert option in errors[0] and repr(value) in errors[0] and needle in errors[0]
    assert "To resolve this" in errors[0]
    # click's usage hint is the only other output
    assert {line.split()[0] for line in result.stderr.splitlines() if line} == {
        "Usage:", "Try", "Error:"}
    assert not out.exists()


def test_scheduler_address_from_the_environment_is_checked_too(runner, corpus, tmp_path,
                                                               nothing_starts, monkeypatch):
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "foo://bar")
    result = runner.invoke(main, ["--quiet", "transform", "-m", str(tmp_path / "m.zarr"), "-i",
                                  str(corpus), "-o", str(tmp_path / "e.zarr")])
    assert result.exit_code == 2, result.output
    assert "'foo://bar'" in result.stderr and "DASK_SCHEDULER_ADDRESS" in result.stderr


def test_a_fit_runs_on_threads_and_says_where_x_lives(runner, corpus, tmp_path, nothing_starts):
    out = tmp_path / "m.zarr"
    result = runner.invoke(main, ["fit", "-i", str(corpus), "-o", str(out), "-r", "2",
                                  "--max-iter", "3", "--tol", "0"])
    assert result.exit_code == 0, result.output
    [line] = [line for line in result.stderr.splitlines() if "scheduler" in line]
    assert "in this process on dask's threaded scheduler" in line
    assert "--n-workers N starts a LocalCluster" in line
    [line] = [line for line in result.stderr.splitlines() if "memory budget" in line]
    assert "is held in memory" in line and "--memory-budget sets it" in line
    assert open_model(out).n_iter == 3


def test_worker_error_on_threads_is_one_error_line(runner, corpus, tmp_path, nothing_starts):
    _corrupt_a_chunk(corpus)
    result = runner.invoke(main, ["--quiet", "fit", "-i", str(corpus), "-o",
                                  str(tmp_path / "m.zarr"), "-r", "2", "--max-iter", "2"])
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith("Error: ") and "chunk 1" in result.stderr


@pytest.mark.cluster
@pytest.mark.slow
@pytest.mark.parametrize("quiet", [True, False])
def test_worker_error_on_the_local_cluster_is_one_error_line(corpus, tmp_path, quiet):
    """distributed's ``Compute Failed`` block (9 lines, from the worker process) is not shown."""
    _corrupt_a_chunk(corpus)
    result = subprocess.run(
        [SPHDIST, *(["--quiet"] if quiet else []), "fit", "-i", str(corpus), "-o",
         str(tmp_path / "m.zarr"), "-r", "2", "--max-iter", "2", "--n-workers", "1",
         "--memory-limit", "1GiB"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("Error: ") and "chunk 1" in lines[-1], result.stderr
    assert "To resolve this" in lines[-1]
    # and the lines saying which cluster was started and where X is held
    expected = 1 if quiet else 3
    assert len(lines) == expected, result.stderr
    if not quiet:
        assert lines[0].startswith("started LocalCluster tls://127.0.0.1:"), lines[0]
        assert "memory budget" in lines[1], lines[1]
    assert not (tmp_path / "m.zarr").exists()


@pytest.mark.parametrize("flag, encrypted", [([], True), (["--insecure-local-cluster"], False)])
def test_local_cluster_speaks_tls_unless_asked_not_to(runner, corpus, tmp_path, monkeypatch,
                                                      flag, encrypted):
    started = []

    def local_cluster(**kwargs):
        started.append(kwargs["security"])
        raise OSError("stop here")

    monkeypatch.setattr(_cluster_deploy, "LocalCluster", local_cluster)
    result = runner.invoke(main, ["--quiet", "fit", "-i", str(corpus), "-o",
                                  str(tmp_path / "m.zarr"), "--n-workers", "1", *flag])
    assert result.exit_code == 1 and "stop here" in result.stderr, result.output
    [security] = started
    assert (security is True) == encrypted  # True: distributed's Security.temporary()
    assert encrypted or not security.require_encryption


_ANSWERS_HTTP_400 = r"""
import socket, sys
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
while True:  # a proxy: whatever comes, it answers 400 and hangs up
    conn, _ = server.accept()
    conn.settimeout(5)
    try:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nServer: a-proxy/1.0\r\n"
                     b"Content-Length: 0\r\n\r\n")
    except OSError:
        pass
    conn.close()
"""


@pytest.fixture(params=["http.server", "proxy"])
def not_a_scheduler(request, tmp_path):
    """A real server on loopback that is not a Dask scheduler: the address it listens on."""
    if request.param == "http.server":  # as a dashboard's port given for the scheduler's
        command = [sys.executable, "-c", "import http.server, socketserver, sys\n"
                   "s = http.server.HTTPServer(('127.0.0.1', 0), "
                   "http.server.SimpleHTTPRequestHandler)\n"
                   "print(s.server_address[1], flush=True)\ns.serve_forever()"]
    else:
        command = [sys.executable, "-c", _ANSWERS_HTTP_400]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, cwd=tmp_path, text=True)
    try:
        port = int(process.stdout.readline())  # printed once it listens
        yield request.param, f"tcp://127.0.0.1:{port}"
    finally:
        process.kill()
        process.wait(timeout=60)
        process.stdout.close()


def test_an_address_that_is_not_a_scheduler_is_one_error_line_saying_what_answered(
        corpus, tmp_path, not_a_scheduler):
    """Issue 44 item 1: an HTTP server hung the fit for good, a proxy gave a 3.07 EiB
    MemoryError. Run as a process: a hang fails the test at its timeout instead of hanging it."""
    kind, address = not_a_scheduler
    out = tmp_path / "m.zarr"
    env = {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}
    env.update(DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="4s",
               PYTHONPATH=os.pathsep.join(filter(None, [REPO, env.get("PYTHONPATH")])))
    started = time.monotonic()
    result = subprocess.run(
        [SPHDIST, "--quiet", "fit", "-i", str(corpus), "-o", str(out),
         "-r", "2", "--scheduler-address", address],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path)
    took = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    line = lines[0]
    assert address in line and "not a Dask scheduler" in line, line
    assert "HTTP server" in line and "MemoryError" not in line, line
    assert ("SimpleHTTP" if kind == "http.server" else "a-proxy/1.0") in line, line
    assert "To resolve this" in line and "--scheduler-address" in line, line
    assert took < 120, took  # the handshake is bounded by the connect timeout (twice 4 s)
    assert not out.exists()
