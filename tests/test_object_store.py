"""Issue 16: corpus, checkpoints and models in an S3 bucket, against a real S3 server (moto's).

The fault table: a fit killed at an iteration and resumed, a fit killed inside a checkpoint
commit (before and after its manifest is written), two writers of one output, a bucket that
does not exist, wrong credentials, and a store that fails every Nth request or every request.
Every run that finishes must give bitwise the U, V and objective history of the same fit on
local disk; every run that fails must say why in one ``Error:`` line and leave either nothing
or the previous complete version readable, never a model that looks complete and is not.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sphdist.io import _atomic, open_stored
from sphdist.io._fs import filesystem
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.io.model import load_checkpoint, open_model
from sphdist.jobs import run
from sphdist.jobs.fit import FitRequest

from ._s3 import clear_s3fs_cache
from .reference import random_corpus

pytestmark = pytest.mark.slow

SPHDIST = str(Path(sys.executable).with_name("sphdist"))
R, MAX_ITER, M, N, CHUNK = 4, 6, 200, 600, 100
# --checkpoint-interval 0: a commit each iteration, which the kills and the version counts
# below are about (the default writes a fit this short once, at its end)
FIT_ARGS = ["-r", str(R), "--max-iter", str(MAX_ITER), "--tol", "0", "--seed", "0",
            "--checkpoint-interval", "0", "--n-workers", "0"]


def _write_corpus(path, chunk=CHUNK):
    X = random_corpus(M, N, seed=5)
    with CorpusWriter(path, n_features=M, feature_scheme={"type": "hashing"}) as w:
        for a in range(0, N, chunk):
            b = min(a + chunk, N)
            w.write_chunk(X[:, a:b], [f"doc{j}" for j in range(a, b)])
        return w.commit(idf=np.ones(M))


@pytest.fixture(scope="module")
def local_corpus(tmp_path_factory):
    return _write_corpus(tmp_path_factory.mktemp("local") / "corpus.zarr")


@pytest.fixture(scope="module")
def reference(local_corpus, tmp_path_factory):
    """The same fit on local disk, in this process."""
    out = tmp_path_factory.mktemp("reference") / "model.zarr"
    return run(FitRequest(local_corpus.path, out, n_components=R, max_iter=MAX_ITER, tol=0,
                          random_state=0))


@pytest.fixture
def s3_corpus(s3_env):
    corpus = _write_corpus(f"{s3_env.url}/corpus.zarr")
    return f"{s3_env.url}/corpus.zarr", corpus


def _sphdist(env, *args, timeout=180, log_level="warning"):
    return subprocess.run([SPHDIST, "--log-level", log_level, *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def _assert_same(model, reference):
    assert model.n_iter == reference.n_iter == MAX_ITER
    assert model.objective == reference.objective  # every float, bitwise
    np.testing.assert_array_equal(model.U, reference.U)
    np.testing.assert_array_equal(model.V().compute(), reference.V().compute())


def _one_error_line(result):
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def _entries(url):
    fs, inner = filesystem(url)
    fs.invalidate_cache()
    try:
        return sorted(e.rsplit("/", 1)[-1] for e in fs.ls(inner, detail=False, refresh=True))
    except FileNotFoundError:
        return []


# -- the layout and the plain fit ------------------------------------------------------------


def test_corpus_written_to_s3_reads_back_bitwise(s3_corpus, local_corpus):
    url, corpus = s3_corpus
    assert _entries(url)[-1] == "zarr.json" and len(_entries(url)) == 2  # manifest + 1 version
    assert corpus.shape == local_corpus.shape and corpus.chunks == local_corpus.chunks
    for i in range(local_corpus.n_chunks):
        assert (corpus.read_chunk(i) != local_corpus.read_chunk(i)).nnz == 0


@pytest.mark.cluster
def test_fit_in_s3_on_a_local_cluster_equals_the_local_fit(s3_env, s3_corpus, reference):
    """Two worker processes read the chunks from the bucket and write V there themselves; the
    endpoint reaches them as --storage-option only (not in their environment)."""
    url, _ = s3_corpus
    out = f"{s3_env.url}/model.zarr"
    env = {k: v for k, v in s3_env.subprocess_env().items() if k != "AWS_ENDPOINT_URL"}
    result = _sphdist(env, "--storage-option", f"endpoint_url={s3_env.endpoint}", "fit", "-i",
                      url, "-o", out, *FIT_ARGS[:-2], "--n-workers", "2")
    assert result.returncode == 0, result.stderr
    _assert_same(open_model(out), reference)
    names = _entries(out)
    # the last version and the previous one (kept for its readers until the next commit)
    assert names[-1] == "zarr.json" and len(names) == 3, names  # older versions removed
    assert not _entries(f"{s3_env.url}/model.zarr.lock")  # the lock object is released
    # the CLI reads it back: info names the model, transform embeds the corpus
    info = _sphdist(s3_env.subprocess_env(), "info", out)
    assert info.returncode == 0 and "model" in info.stdout, info.stderr
    # without the endpoint, the same command cannot reach the bucket, and says so in one line
    line = _one_error_line(_sphdist(env, "info", out))
    assert out in line, line


# -- kills -----------------------------------------------------------------------------------

# runs `sphdist ...`, SIGKILLing itself in commit number CRASH_AT of OUT: "after" the commit
# (so in the next iteration), "before" its manifest is written (the version is complete), or
# "cleanup": after the manifest, before the previous version is removed
CRASH_SCRIPT = """
import os, signal, sys
from sphdist.io import _object, open_stored
from sphdist.cli import main

crash_at, where, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
commit, put, remove = _object._commit_manifest, _object._put_small, _object._remove_unnamed
calls = []

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def crashing_commit(staging, target):
    mine = str(target).rstrip("/") == out
    if mine:
        calls.append(1)
    now = mine and len(calls) == crash_at
    if now and where == "before":
        _object._put_small = lambda path, data: die()
    if now and where == "cleanup":
        _object._remove_unnamed = lambda target, keep=None: die()
    commit(staging, target)
    if now and where == "after":
        die()

_object._commit_manifest = crashing_commit
main(sys.argv[4:])
"""


def _crash(env, crash_at, where, url, out):
    return subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, str(crash_at), where, out, "--log-level",
         "warning", "fit", "-i", url, "-o", out, *FIT_ARGS],
        env=env, capture_output=True, text=True, timeout=180,
    )


@pytest.mark.parametrize("where", ["after", "before", "cleanup"])
def test_fit_killed_at_an_iteration_or_in_a_commit_resumes_bitwise(
    s3_env, s3_corpus, reference, where
):
    """Kill at an iteration drawn at random (seeded), at three points of the commit protocol.

    Each point leaves its own state for the resume: "after", a complete commit and nothing
    else; "before", a complete version no manifest names (debris the resume removes);
    "cleanup", a manifest naming the new version with a version older than the previous one
    still there (debris too). One kill per point: a second one at another iteration took the
    same code path (the draws are 3, 5 and 5, so "cleanup" always has an older version to
    leave; the second draws were 4, 3 and 2, and at 2 there is none).
    """
    from sphdist.io import lock_holder

    url, _ = s3_corpus
    rng = np.random.default_rng({"after": 1, "before": 2, "cleanup": 3}[where])
    # a lease no run of this test outlives: a resume that waited for it would time out
    env = {**s3_env.subprocess_env(), "SPHDIST_LOCK_LEASE": "600"}
    for trial, crash_at in enumerate(rng.integers(2, MAX_ITER, size=1)):
        assert crash_at >= 3 or where != "cleanup"  # a version older than the previous
        out = f"{s3_env.url}/model-{where}-{trial}.zarr"
        proc = _crash(env, int(crash_at), where, url, out)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        # what a reader finds: the last complete checkpoint, never a torn one
        last = load_checkpoint(out)
        committed = crash_at - (where == "before")  # checkpoints 1..crash_at (0 is not saved)
        assert last.n_iter == committed
        assert last.objective == reference.objective[: committed + 1]
        assert not last.has_embedding
        # the killed fit's lock record is left, its lease running
        dead = lock_holder(out)
        assert dead is not None and dead["lease"] == 600, dead
        # a resume on this host takes the dead fit's lock over at once: by the dead-process
        # path of the lease (its pid is gone), not by waiting for the lease to expire
        result = _sphdist(env, "fit", "-i", url, "-o", out, *FIT_ARGS, "--resume",
                          log_level="info")
        assert result.returncode == 0, result.stderr
        taken = [line for line in result.stderr.splitlines() if "lock taken over" in line]
        assert len(taken) == 1, result.stderr
        assert f"from pid {dead['pid']} on {dead['host']}" in taken[0], taken
        assert "its process is gone" in taken[0] and "expired" not in taken[0], taken
        _assert_same(open_model(out), reference)
        # the current version and the previous (kept for its readers); the killed run's removed
        assert len(_entries(out)) == 3
        assert lock_holder(out) is None  # and the resume released the lock


# -- two writers -----------------------------------------------------------------------------

HOLD_SCRIPT = """
import sys, time
from sphdist.io import output_lock
with output_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


def test_second_writer_is_refused_and_a_dead_holder_is_taken_over(s3_env, s3_corpus, reference):
    url, _ = s3_corpus
    out = f"{s3_env.url}/model.zarr"
    env = {**s3_env.subprocess_env(), "SPHDIST_LOCK_LEASE": "4"}
    holder = subprocess.Popen([sys.executable, "-c", HOLD_SCRIPT, out], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = _sphdist(env, "fit", "-i", url, "-o", out, *FIT_ARGS)
        line = _one_error_line(result)
        assert f"{out} is being written by pid {holder.pid}" in line, line
        assert _entries(out) == []  # nothing written by the refused fit
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    result = _sphdist(env, "fit", "-i", url, "-o", out, *FIT_ARGS)
    assert result.returncode == 0, result.stderr
    _assert_same(open_model(out), reference)


def test_two_fits_started_together_give_one_model_and_one_error(s3_env, s3_corpus, reference):
    url, _ = s3_corpus
    out = f"{s3_env.url}/model.zarr"
    env = {**s3_env.subprocess_env(), "SPHDIST_LOCK_LEASE": "4"}
    procs = [subprocess.Popen([SPHDIST, "--log-level", "warning", "fit", "-i", url, "-o", out,
                               *FIT_ARGS], env=env, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(timeout=180), p.stderr.read()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    error = next(err for code, err in results if code == 1)
    assert "is being written by" in error and "Traceback" not in error, error
    _assert_same(open_model(out), reference)


# -- bad buckets, credentials and flaky stores -----------------------------------------------


def test_missing_bucket_is_one_error_line(s3_env, local_corpus):
    out = "s3://sphdist-no-such-bucket/model.zarr"
    line = _one_error_line(_sphdist(s3_env.subprocess_env(), "fit", "-i", local_corpus.path,
                                    "-o", out, *FIT_ARGS))
    assert "sphdist-no-such-bucket" in line and "bucket" in line.lower(), line


def test_wrong_credentials_are_one_error_line(s3_auth_env, local_corpus):
    env = {**s3_auth_env.subprocess_env(), "AWS_SECRET_ACCESS_KEY": "wrong"}
    line = _one_error_line(_sphdist(env, "fit", "-i", local_corpus.path, "-o",
                                    f"{s3_auth_env.url}/model.zarr", *FIT_ARGS))
    assert "credentials" in line.lower() or "denied" in line.lower(), line
    assert not _atomic.committed(f"{s3_auth_env.url}/model.zarr")


def test_store_failing_every_third_request_gives_the_same_model(
    s3_env, s3_flaky, local_corpus, reference
):
    # 10 attempts per call: a call fails for good only if 10 of its attempts in a row are
    # among the failed fifth (about 1e-7 per call), so the test does not fail by chance
    flaky = s3_flaky(every=5, max_attempts=10)
    out = f"{flaky.url}/model.zarr"
    result = _sphdist(flaky.subprocess_env(), "fit", "-i", local_corpus.path, "-o", out,
                      *FIT_ARGS, timeout=600)
    assert result.returncode == 0, result.stderr
    assert flaky.proxy.injected >= 10  # the fit did meet failures, and retried them
    flaky.proxy.close()
    os.environ.update(s3_env.env)  # compare through the server directly, not the proxy
    clear_s3fs_cache()
    _assert_same(open_model(out), reference)


def test_store_failing_every_request_leaves_no_complete_looking_model(
    s3_env, s3_flaky, local_corpus
):
    flaky = s3_flaky(fail_after=40, max_attempts=2)
    out = f"{flaky.url}/model.zarr"
    line = _one_error_line(_sphdist(flaky.subprocess_env(), "fit", "-i", local_corpus.path,
                                    "-o", out, *FIT_ARGS, timeout=600))
    assert "s3://" in line, line
    flaky.proxy.close()
    os.environ.update(s3_env.env)  # read through the server directly, not the proxy
    clear_s3fs_cache()
    previous = load_checkpoint(out)
    assert previous is None or not previous.has_embedding  # at most a checkpoint, which says so


# -- ingest from the bucket, then the whole user path ----------------------------------------


def test_ingest_from_the_bucket_then_a_killed_fit_resumes_to_the_local_result(
    s3_env, tmp_path
):
    """JSON Lines (.gz and plain) and Parquet in the bucket -> ``sphdist ingest`` into the
    bucket -> ``sphdist fit`` killed at a seeded iteration -> ``--resume``: the corpus is
    bitwise the local ingest of the same files, the model bitwise the local fit."""
    import fsspec
    import pandas as pd

    env = s3_env.subprocess_env()
    local = tmp_path / "docs"
    local.mkdir()
    for seed, name in ((0, "a.jsonl.gz"), (1, "b.jsonl")):
        assert _sphdist(env, "synth", "--n-docs", "400", "--n-topics", "4", "--seed", seed,
                        "-o", local / name).returncode == 0
    pd.read_json(local / "b.jsonl", lines=True).to_parquet(local / "c.parquet")
    fs = fsspec.filesystem("s3")
    for path in sorted(local.iterdir()):
        fs.put_file(str(path), f"{s3_env.bucket}/docs/{path.name}")
    # ids are path:line (synth's "id" repeats across seeds, and repeated ids are refused)
    options = ["--label-field", "label", "--min-df", "2"]
    corpus = f"{s3_env.url}/corpus.zarr"
    for source, out in (([f"{s3_env.url}/docs/*.jsonl*"], corpus),
                        ([local / "a.jsonl.gz", local / "b.jsonl"], tmp_path / "local.zarr")):
        result = _sphdist(env, "ingest", *source, "-o", out, *options)
        assert result.returncode == 0, result.stderr
    remote, here = open_stored(corpus, "corpus"), open_stored(tmp_path / "local.zarr", "corpus")
    assert remote.shape == here.shape and remote.chunks == here.chunks
    assert all((remote.read_chunk(i) != here.read_chunk(i)).nnz == 0
               for i in range(here.n_chunks))
    np.testing.assert_array_equal(remote.idf, here.idf)
    np.testing.assert_array_equal(remote.labels, here.labels)
    # Parquet from the bucket reads the same documents as the plain JSON Lines file
    result = _sphdist(env, "ingest", f"{s3_env.url}/docs/c.parquet", "-o",
                      f"{s3_env.url}/parquet.zarr", *options)
    assert result.returncode == 0, result.stderr
    assert open_stored(f"{s3_env.url}/parquet.zarr", "corpus").n_documents == 400

    args = ["-r", "4", "--max-iter", "6", "--tol", "0", "--seed", "0", "--n-workers", "0",
            "--checkpoint-interval", "0"]  # a commit each iteration: the crash is at one
    reference = _sphdist(env, "fit", "-i", tmp_path / "local.zarr", "-o",
                         tmp_path / "model.zarr", *args)
    assert reference.returncode == 0, reference.stderr
    out = f"{s3_env.url}/model.zarr"
    crash_at = int(np.random.default_rng(16).integers(2, 6))
    proc = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, str(crash_at), "after", out, "--log-level",
         "warning", "fit", "-i", corpus, "-o", out, *args],
        env=env, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert load_checkpoint(out).n_iter == crash_at
    result = _sphdist(env, "fit", "-i", corpus, "-o", out, *args, "--resume")
    assert result.returncode == 0, result.stderr
    fitted, expected = open_model(out), open_model(tmp_path / "model.zarr")
    assert fitted.objective == expected.objective
    np.testing.assert_array_equal(fitted.U, expected.U)
    np.testing.assert_array_equal(fitted.V().compute(), expected.V().compute())


def test_a_writer_that_lost_its_lease_commits_nothing(s3_env, monkeypatch):
    """A writer paused past its lease (its renewals stopped) is taken over by another; when it
    wakes up, its renewal fails and its next commit is refused: the new holder's state stands."""
    import zarr

    from sphdist.errors import OutputLockedError
    from sphdist.io import output_lock

    monkeypatch.setenv("SPHDIST_LOCK_LEASE", "2")
    out = f"{s3_env.url}/model.zarr"
    with output_lock(out) as held:
        lease = held._hold
        lease._stop.set()  # the pause: no renewal from now on
        lease._thread.join()
        time.sleep(2.5)  # the lease runs out
        other = subprocess.Popen([sys.executable, "-c", HOLD_SCRIPT, out],
                                 env=s3_env.subprocess_env(), stdout=subprocess.PIPE, text=True)
        try:
            assert other.stdout.readline().strip() == "held"  # taken over
            assert not lease.renew() and lease.lost  # the paused writer finds out
            staging = _atomic.staging_path(out)
            zarr.open_group(store=str(staging), mode="w-").attrs["sphdist"] = {"kind": "model"}
            with pytest.raises(OutputLockedError, match="lost its lock"):
                _atomic.open_target(out).commit(staging)
            assert not _atomic.committed(out)  # no manifest was written
        finally:
            other.kill()
            other.wait()
