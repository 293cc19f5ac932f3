"""Issue 29.4: workers that share no disk with the driver, and relative paths on a cluster.

A cluster of several machines has no common filesystem: the corpus and the model live in an
object store. Here every worker of an external ``dask scheduler`` is started in its own mount
namespace (``unshare --mount``) with a private, empty ``/tmp`` (but for the software it runs)
and the test's folders hidden (the driver's working directory among them), so it sees none
of the driver's files; the corpus and the model are on the
moto S3 server of the object-store tests. ``fit`` (with a worker SIGKILLed once), ``--resume``,
``transform``, ``index`` and ``neighbors --all`` must give bitwise what dask's threads give on
local paths; a local path the workers cannot see must be refused in one ``Error:`` line that
names it, before anything is written; and relative paths on a cluster whose workers start in
another directory must give a complete model (they were written into the workers' directory).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pyarrow.parquet as pq
import pytest

from sphdist.errors import StorageError
from sphdist.io.corpus import open_corpus
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.io.embedding import EmbeddingWriter, open_embedding, write_embedding_block
from sphdist.io.model import open_model, save_checkpoint
from sphdist.jobs import run
from sphdist.jobs.cluster import connect
from sphdist.jobs.fit import FitRequest
from sphdist.jobs.ingest import IngestRequest
from sphdist.jobs.neighbors import IndexRequest, KnnGraphRequest
from sphdist.jobs.transform import TransformRequest

from ._process_cluster import ProcessCluster, isolation_unavailable
from ._s3 import aws_env, clear_s3fs_cache
from .reference import random_corpus

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
SPHDIST = str(Path(sys.executable).with_name("sphdist"))
R, MAX_ITER, M, N, CHUNK, K = 4, 4, 200, 600, 100, 5
FIT = ["-r", str(R), "--tol", "0", "--seed", "0"]
# every chunk read sleeps up to this long (tests/fault_preload.py): a pass lasts long enough to
# kill a worker in the middle of one
WORKER_ENV = {"SPHDIST_TEST_READ_DELAY": "0.02", "PYTHONPATH": str(REPO)}
PRELOAD = ["--preload", "tests.fault_preload"]


def _write_corpus(path):
    X = random_corpus(M, N, seed=5)
    with CorpusWriter(path, n_features=M, feature_scheme={"type": "hashing"}) as w:
        for a in range(0, N, CHUNK):
            b = min(a + CHUNK, N)
            w.write_chunk(X[:, a:b], [f"doc{j}" for j in range(a, b)])
        return w.commit(idf=np.ones(M))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Threads on local paths, in this process: the corpus, the model, embedding, index, graph."""
    root = tmp_path_factory.mktemp("threads")
    corpus = _write_corpus(root / "corpus.zarr").path
    with connect(n_workers=0):
        model = run(FitRequest(corpus, root / "model.zarr", n_components=R, max_iter=MAX_ITER,
                               tol=0, random_state=0))
        emb = run(TransformRequest(root / "model.zarr", corpus, root / "emb.zarr"))
        run(IndexRequest(root / "model.zarr", root / "model.index.zarr"))
        run(KnnGraphRequest(root / "model.zarr", root / "graph.parquet", k=K))
    return {"root": root, "corpus": corpus, "model": model, "emb": emb,
            "graph": pq.read_table(root / "graph.parquet")}


@pytest.fixture(scope="module")
def driver_dir(tmp_path_factory):
    """The driver's working directory: what the isolated workers must not see."""
    return tmp_path_factory.mktemp("driver")


@pytest.fixture(scope="module")
def isolated(s3_server, driver_dir, tmp_path_factory):
    """Two workers, each in its own mount namespace: a private /tmp (with the software this
    interpreter runs from bound back in), every folder of this test session hidden (the
    driver's cwd among them) wherever the session's base folder is."""
    hidden = [tmp_path_factory.getbasetemp()]
    assert driver_dir.is_relative_to(hidden[0])
    env = {**aws_env(s3_server.endpoint, "testing", "testing"), **WORKER_ENV}
    reason = isolation_unavailable(isolate=hidden, env=env)
    if reason:
        pytest.skip(f"workers cannot be isolated from the driver's disk here: {reason}")
    with ProcessCluster(2, memory_limit="1GiB", isolate=hidden, worker_args=PRELOAD,
                        env=env, log_dir=tmp_path_factory.mktemp("isolated-logs")) as cluster:
        yield cluster


def _sphdist(cluster, env, cwd, *args, **popen):
    argv = [SPHDIST, *args]
    environ = {**env, "DASK_SCHEDULER_ADDRESS": cluster.address}
    if popen:
        return subprocess.Popen(argv, env=environ, cwd=cwd, **popen)
    return subprocess.run(argv, env=environ, cwd=cwd, capture_output=True, text=True,
                          timeout=180)


def _ok(result):
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def _same_model(model, reference):
    assert model.n_iter == reference.n_iter == MAX_ITER
    assert model.objective == reference.objective  # every float, bitwise
    np.testing.assert_array_equal(model.U, reference.U)
    np.testing.assert_array_equal(model.V().compute(), reference.V().compute())


def test_workers_see_none_of_the_drivers_files(isolated, driver_dir):
    marker = driver_dir / "visible-to-the-driver"
    marker.write_text("x")
    with isolated.client() as client:
        seen = client.run(lambda: (os.path.exists(str(marker)), os.getcwd()))
    assert seen and all(not found for found, _ in seen.values())  # the isolation holds


def test_shared_nothing_cluster_matches_threads_bitwise(
    isolated, reference, driver_dir, s3_env, monkeypatch
):
    bucket, env = s3_env.url, s3_env.subprocess_env()
    corpus, model = f"{bucket}/corpus.zarr", f"{bucket}/model.zarr"
    _write_corpus(corpus)
    clear_s3fs_cache()
    with isolated.client() as client:
        pids = client.run(os.getpid)
    # fit to iteration 2, a worker SIGKILLed once after iteration 1
    proc = _sphdist(isolated, env, driver_dir, "--log-level", "info", "fit", "-i", corpus,
                    "-o", model, *FIT, "--max-iter", "2", stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "iter    1 " in line:
            os.kill(min(pids.values()), signal.SIGKILL)
            break
    stderr = "".join(lines) + proc.stderr.read()
    assert proc.wait(timeout=180) == 0, stderr[-3000:]
    assert "iter    2 " in stderr
    # --resume to MAX_ITER, then the other commands, all on the cluster or from S3
    _ok(_sphdist(isolated, env, driver_dir, "fit", "-i", corpus, "-o", model, *FIT,
                 "--max-iter", str(MAX_ITER), "--resume"))
    _same_model(open_model(model), reference["model"])
    # transform, index and the k-NN graph through the jobs' API, in this process, as a driver
    # connected to the same cluster (the commands are these calls after parsing)
    with isolated.client():
        run(TransformRequest(model, corpus, f"{bucket}/emb.zarr"))
        run(IndexRequest(model, f"{bucket}/model.index.zarr"))
        monkeypatch.chdir(driver_dir)
        # a relative output, written by the driver
        run(KnnGraphRequest(model, "graph.parquet", k=K))
    emb = open_embedding(f"{bucket}/emb.zarr")
    np.testing.assert_array_equal(emb.V[:], reference["emb"].V[:])
    np.testing.assert_array_equal(emb.degenerate, reference["emb"].degenerate)
    graph = pq.read_table(driver_dir / "graph.parquet")
    assert graph.equals(reference["graph"])


@pytest.mark.parametrize("local", ["input", "output"])
def test_a_local_path_the_workers_cannot_see_is_refused(
    isolated, reference, driver_dir, s3_env, local
):
    out = driver_dir / "local-model.zarr"
    corpus = str(reference["corpus"])
    if local == "output":  # the input on S3, where the workers read it
        corpus = f"{s3_env.url}/corpus.zarr"
        _write_corpus(corpus)
        clear_s3fs_cache()
    result = _sphdist(isolated, s3_env.subprocess_env(), driver_dir, "--log-level", "warning",
                      "fit", "-i", corpus, "-o", "local-model.zarr", *FIT, "--max-iter", "2")
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    named = corpus if local == "input" else str(out)
    assert lines[0].startswith(f"Error: {named}: worker ") and "s3://" in lines[0], lines[0]
    assert not out.exists() and not list(driver_dir.glob("local-model.zarr.*tmp*"))


def test_a_commit_refuses_chunks_the_workers_wrote_elsewhere(isolated, reference, driver_dir):
    """The check at the commit, below the jobs' up-front one: a model whose V tasks wrote into
    the workers' own /tmp (what a relative --output did) is never committed."""
    fitted = reference["model"]
    out = driver_dir / "m.zarr"
    V = da.ones((R, N), chunks=(R, CHUNK))
    with isolated.client(), pytest.raises(
        StorageError, match=rf"m\.zarr: {N // CHUNK} of the {N // CHUNK} chunk files of V "
    ):
        save_checkpoint(out, fitted.state((CHUNK,) * (N // CHUNK)), params=fitted.params,
                        corpus=fitted.corpus, V=V)
    assert not out.exists() and not list(driver_dir.glob("m.zarr.tmp-*"))


def test_an_embedding_commit_refuses_chunks_written_on_other_disks(isolated, driver_dir):
    """The same folder on every node, not shared: each worker writes into its own copy."""
    out = driver_dir / "emb.zarr"
    with isolated.client() as client, EmbeddingWriter(out, n_components=2,
                                                      chunks=(5, 5)) as writer:
        tree = {str(p): p.read_bytes() for p in Path(writer.staging).rglob("zarr.json")}
        client.run(_replicate, tree)  # the staging folder's metadata, on the workers' disks
        V = np.ones((2, 5))
        blocks = client.gather([client.submit(write_embedding_block, str(writer.staging),
                                              start, V, np.zeros(5, bool), pure=False)
                                for start in (0, 5)])
        with pytest.raises(StorageError, match=r"emb\.zarr: 2 of the 2 chunk files of V "):
            writer.commit(doc_ids=np.array([str(j) for j in range(10)]), labels=None,
                          label_names=None, attrs={}, blocks=blocks)
    assert not out.exists()


def _replicate(tree: dict[str, bytes]) -> None:
    for path, data in tree.items():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Path(path).write_bytes(data)


# -- relative paths, workers started elsewhere (a disk shared, another working directory) ---


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory):
    """One worker whose working directory is not the driver's."""
    cwd = tmp_path_factory.mktemp("workers-cwd")
    with ProcessCluster(1, memory_limit="1GiB", cwd=cwd) as cluster:
        yield cluster, cwd


def test_relative_paths_on_an_external_cluster_give_the_complete_model(
    elsewhere, reference, tmp_path
):
    """A relative --output said "committed" and left V in the workers' directory (the model
    read back has no V chunks); a relative --input reported chunk 9 of an intact corpus as
    missing. Either failure fails this fit."""
    cluster, workers_cwd = elsewhere
    _write_corpus(tmp_path / "corpus.zarr")
    env = dict(os.environ)
    _ok(_sphdist(cluster, env, tmp_path, "fit", "-i", "corpus.zarr", "-o", "model.zarr", *FIT,
                 "--max-iter", str(MAX_ITER)))
    _same_model(open_model(tmp_path / "model.zarr"), reference["model"])
    _ok(_sphdist(cluster, env, tmp_path, "transform", "-m", "model.zarr", "-i", "corpus.zarr",
                 "-o", "emb.zarr"))
    np.testing.assert_array_equal(open_embedding(tmp_path / "emb.zarr").V[:],
                                  reference["emb"].V[:])
    assert not list(workers_cwd.iterdir())  # nothing was written where the workers started



def test_relative_paths_of_an_ingest_on_an_external_cluster(elsewhere, tmp_path):
    """Issue 44 item 8: a relative SOURCE with --scheduler-address failed with
    ``Error: FileNotFoundError: ... 'docs.jsonl'``, or read the file of that name in the
    workers' working directory; the spill path was relative too."""
    cluster, workers_cwd = elsewhere
    docs = [{"id": f"d{j}", "text": f"alpha beta {'gamma ' * (j % 3)}delta{j % 5}"}
            for j in range(40)]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    decoy = workers_cwd / "docs.jsonl"  # what the workers would read for a relative name
    decoy.write_text(json.dumps({"id": "x", "text": "not the driver's documents"}) + "\n")
    try:
        _ok(_sphdist(cluster, dict(os.environ), tmp_path, "ingest", "docs.jsonl",
                     "-o", "c.zarr", "--chunk-size", "16", "--min-df", "1"))
        assert sorted(p.name for p in workers_cwd.iterdir()) == ["docs.jsonl"]
    finally:
        decoy.unlink()
    with dask.config.set(scheduler="sync"):
        threads = run(IngestRequest.of(str(tmp_path / "docs.jsonl"), tmp_path / "t.zarr",
                                       chunk_size=16, min_df=1))
    cluster_corpus = open_corpus(tmp_path / "c.zarr")
    assert list(cluster_corpus.doc_ids) == [d["id"] for d in docs] == list(threads.doc_ids)
    assert list(cluster_corpus.vocabulary) == list(threads.vocabulary)
    for i in range(threads.n_chunks):
        a, b = cluster_corpus.read_chunk(i), threads.read_chunk(i)
        assert (a != b).nnz == 0
