"""Where jobs run: LocalClusters of worker processes (TLS by default), or dask's threads in
this process (the default at every size), X held in memory or streamed; fits on a 20
Newsgroups subset."""

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import dask
import numpy as np
import pytest
from distributed import default_client
from threadpoolctl import threadpool_info

from sphdist.errors import ParameterError
from sphdist.jobs import _cluster_deploy, cluster, run
from sphdist.jobs.cluster import connect, stored_nbytes
from sphdist.jobs.evaluate import EvaluateRequest
from sphdist.jobs.fit import FitRequest
from sphdist.metrics import evaluate_embedding

REPO = Path(__file__).resolve().parents[2]

KWARGS = dict(n_components=5, max_iter=8, tol=0, random_state=0, split_every=2, callback=None)


def _fit_on_cluster(corpus, out, n_workers):
    with connect(n_workers=n_workers, threads_per_worker=1, memory_limit="2GiB") as client:
        workers = client.scheduler_info()["workers"]
        assert len(workers) == n_workers
        assert all(address.startswith("tls://127.0.0.1:") for address in workers)
        return run(FitRequest(corpus.path, out, **KWARGS))


@pytest.fixture(scope="module")
def two_workers(newsgroups5, tmp_path_factory):
    """The fit on a LocalCluster of two worker processes, compared by two tests below (with
    one worker and in-process; with dask's threads): made once."""
    return _fit_on_cluster(newsgroups5, tmp_path_factory.mktemp("two") / "two.zarr",
                           n_workers=2)


@pytest.mark.cluster
@pytest.mark.slow
def test_process_cluster_fit_is_deterministic_and_matches_in_process(
    newsgroups5, two_workers, tmp_path
):
    one = _fit_on_cluster(newsgroups5, tmp_path / "one.zarr", n_workers=1)
    two = two_workers
    # the reduction order is fixed by the tree, not by which worker finished first
    assert one.objective == two.objective
    np.testing.assert_array_equal(one.U, two.U)
    np.testing.assert_array_equal(one.V().compute(), two.V().compute())

    # in-process (the driver's multi-threaded BLAS may round differently from the workers')
    with dask.config.set(scheduler="sync"):
        local = run(FitRequest(newsgroups5.path, tmp_path / "local.zarr", **KWARGS))
    np.testing.assert_allclose(two.objective, local.objective, rtol=1e-12)

    U, V = two.U, two.V().compute()
    assert np.abs(U.T @ U - np.eye(5)).max() <= 1e-10
    assert np.abs(np.linalg.norm(V, axis=0) - 1).max() <= 1e-10
    assert np.all(np.diff(two.objective) <= 0)
    assert V.shape == (5, newsgroups5.n_documents)


@pytest.mark.slow
def test_embedding_clusters_better_than_chance(newsgroups5, tmp_path):
    with dask.config.set(scheduler="sync"):
        run(FitRequest(
            newsgroups5.path, tmp_path / "m.zarr", n_components=5, max_iter=30, random_state=0,
            callback=None,
        ))
        report = run(EvaluateRequest(tmp_path / "m.zarr", newsgroups5.path, n_init=10))
    assert report["n_documents"] == 300 and report["n_clusters"] == 5
    # baseline measured here: the same k-means on random points of the same sphere
    rng = np.random.default_rng(0)
    noise = rng.standard_normal((300, 5))
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    chance = evaluate_embedding(noise, newsgroups5.labels, n_init=10)
    assert report["accuracy"] > chance["accuracy"] + 0.05
    assert report["nmi"] > chance["nmi"] + 0.05


# -- small data: dask's threads in this process -----------------------------------------------


def _blas_threads():
    return {info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}


def test_stored_nbytes_counts_values_indices_and_pointers(newsgroups5):
    X = newsgroups5.to_dask().compute()  # CSC blocks, concatenated
    blocks = [newsgroups5.read_chunk(i) for i in range(newsgroups5.n_chunks)]
    stored = sum(b.data.nbytes + b.indices.astype(np.int32).nbytes
                 + b.indptr.astype(np.int64).nbytes for b in blocks)
    assert stored_nbytes(newsgroups5) == stored
    assert X.nnz == newsgroups5.nnz


def test_one_machine_runs_in_this_process_at_every_size(newsgroups5, monkeypatch, caplog):
    def no_cluster(*args, **kwargs):
        raise AssertionError("a LocalCluster was started")

    monkeypatch.setattr(_cluster_deploy, "LocalCluster", no_cluster)
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    before = _blas_threads()
    for n_workers in (None, 0):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="sphdist"), \
                connect(n_workers=n_workers) as client:
            assert client is None
            assert dask.base.get_scheduler() is dask.threaded.get
            with pytest.raises(ValueError, match="No clients found"):
                default_client()
            assert _blas_threads() == {1}  # one BLAS thread per task, as in a worker process
        assert _blas_threads() == before
        [line] = [r.getMessage() for r in caplog.records
                  if "threaded scheduler" in r.getMessage()]
        # the Python API's words (issue 32): the command line names --n-workers
        assert "n_workers='N' starts a LocalCluster" in line and "--" not in line


def test_n_workers_starts_the_local_cluster(monkeypatch):
    started = []

    class Started(Exception):
        pass

    def local_cluster(*args, **kwargs):
        started.append(kwargs)
        raise Started

    monkeypatch.setattr(_cluster_deploy, "LocalCluster", local_cluster)
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    for n_workers in (1, 2):
        with pytest.raises(Started), connect(n_workers=n_workers):
            pass
    assert [k["n_workers"] for k in started] == [1, 2]
    # secure by default: temporary TLS credentials, and the cluster's logs silenced
    assert all(k["security"] is True and k["silence_logs"] == logging.CRITICAL for k in started)


@pytest.mark.parametrize("nbytes, budget, available, held", [
    (2**30, None, 4 * 2**30, True),  # a quarter of the available memory
    (2**30 + 1, None, 4 * 2**30, False),
    (10, 0, 2**40, False),  # --memory-budget 0 always streams
    (2**30, 2**30, 1, True),  # an explicit budget wins over what is available
])
def test_x_is_held_in_memory_within_the_budget(nbytes, budget, available, held):
    hold, why = cluster.holds_in_memory(nbytes, budget, available=available)
    assert hold is held
    assert ("held in memory" if held else "streamed from the store") in why
    assert "memory_budget" in why and "--" not in why  # the command line: --memory-budget


class _Workers:
    def __init__(self, *limits):
        self._info = {"workers": {f"w{i}": {"memory_limit": m} for i, m in enumerate(limits)}}

    def scheduler_info(self):
        return self._info


def test_on_a_cluster_the_budget_is_a_quarter_of_the_workers_memory():
    assert cluster.holds_in_memory(2**30, client=_Workers(2**31, 2**31))[0]
    assert not cluster.holds_in_memory(2**30 + 1, client=_Workers(2**31, 2**31))[0]
    hold, why = cluster.holds_in_memory(1, client=_Workers(2**31, 0))  # a worker without limit
    assert not hold and "no memory limit" in why


@pytest.mark.parametrize("value", ["4XB", "-1GiB", "lots"])
def test_a_memory_budget_that_is_not_a_size_is_refused(value):
    with pytest.raises(ParameterError, match="memory_budget='4GiB'"):
        cluster.check_memory_budget(value)


def test_a_streamed_fit_reads_every_chunk_every_pass_and_equals_the_held_one(
    newsgroups5, tmp_path, monkeypatch, caplog
):
    """The mechanism of ``--memory-budget``: held, X is read once; streamed, once per pass."""
    from sphdist.io import _input as corpus_module

    reads = []
    real = corpus_module._read_chunk
    monkeypatch.setattr(corpus_module, "_read_chunk",
                        lambda *args, **kw: reads.append(args[1]) or real(*args, **kw))
    models = {}
    for name, budget in (("held", None), ("streamed", 0)):
        reads.clear()
        caplog.clear()
        with connect(n_workers=0), caplog.at_level(logging.INFO, logger="sphdist"):
            models[name] = run(FitRequest(newsgroups5.path, tmp_path / f"{name}.zarr",
                                          memory_budget=budget, **(KWARGS | {"max_iter": 3})))
        passes = len(reads) / newsgroups5.n_chunks
        messages = " ".join(r.getMessage() for r in caplog.records)
        if name == "held":
            # one read for the fit; the final embedding reads X again (a new graph)
            assert passes <= 2 and "is held in memory" in messages
        else:
            # the first pass, 3 iterations (the accelerated ones may take 2), the embedding
            assert passes >= 5 and "is streamed from the store" in messages
            assert sorted(set(reads)) == list(range(newsgroups5.n_chunks))
    held, streamed = models["held"], models["streamed"]
    assert streamed.objective == held.objective
    np.testing.assert_array_equal(streamed.U, held.U)
    np.testing.assert_array_equal(streamed.V().compute(), held.V().compute())


@pytest.mark.parametrize("kwargs, needle", [
    (dict(memory_limit="4XB"), "memory limit '4XB'"),
    (dict(memory_limit="-1GiB"), "memory limit '-1GiB'"),
    (dict(dashboard_address="127.0.0.1:notaport"), "'127.0.0.1:notaport'"),
    (dict(dashboard_address="127.0.0.1:70000"), "'127.0.0.1:70000'"),
    (dict(scheduler_address="foo://bar"), "'foo://bar'"),
    (dict(scheduler_address="tcp://127.0.0.1:notaport"), "'tcp://127.0.0.1:notaport'"),
    (dict(n_workers=-1), "n_workers"),
    # issue 31.4: a limit below an idle worker process: its nanny restarts it for ever
    (dict(n_workers=1, memory_limit="1MiB"),
     r"memory limit '1MiB' per worker .* memory_limit='512MiB'"),
    (dict(n_workers=1, memory_limit=2**20), r"memory limit 1048576 per worker"),
    (dict(n_workers=1, memory_limit="1e-9"), r"memory limit '1e-9' per worker"),
])
def test_unusable_options_are_refused_before_anything_starts(monkeypatch, kwargs, needle):
    monkeypatch.setattr(_cluster_deploy, "LocalCluster", None)  # would fail if reached
    monkeypatch.setattr(_cluster_deploy, "Client", None)
    with pytest.raises(ParameterError, match=needle):
        with connect(**kwargs):
            pass


@pytest.mark.cluster
@pytest.mark.slow
def test_threads_fit_matches_the_process_cluster(newsgroups5, two_workers, tmp_path):
    with connect() as client:
        assert client is None
        threads = run(FitRequest(newsgroups5.path, tmp_path / "threads.zarr", **KWARGS))
    processes = two_workers
    # bitwise: the result is a function of the corpus and the parameters alone
    assert threads.objective == processes.objective
    np.testing.assert_array_equal(threads.U, processes.U)


# -- secure by default ------------------------------------------------------------------------

#: Another local process that tries to run code in the workers of a cluster.
_INTRUDER = textwrap.dedent("""
    import os, sys
    from distributed import Client
    from sphdist.jobs.cluster import tls_security
    address, *certs = sys.argv[1:]
    try:
        client = Client(address, timeout="5s", security=tls_security(*certs) if certs else None)
        pids = client.run(os.getpid)
    except (OSError, TypeError) as exc:
        print("refused", type(exc).__name__)
    else:
        print("ran code in", len(pids), "workers")
        client.close()
""")


def _intrude(address, *certs):
    result = subprocess.run([sys.executable, "-c", _INTRUDER, address, *map(str, certs)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


@pytest.mark.cluster
@pytest.mark.slow
def test_default_cluster_refuses_other_local_processes(tmp_path):
    subprocess.run([sys.executable, str(REPO / "cluster" / "make_certs.py"), str(tmp_path)],
                   check=True, capture_output=True)
    foreign = (tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem")
    with connect(n_workers=1, memory_limit="1GiB") as client:
        address = client.scheduler.address
        workers = list(client.scheduler_info()["workers"])
        assert address.startswith("tls://127.0.0.1:")
        assert all(w.startswith("tls://127.0.0.1:") for w in workers)
        assert client.submit(sum, [1, 2]).result() == 3  # the cluster's own client works
        port = address.rsplit(":", 1)[1]
        assert _intrude(f"tcp://127.0.0.1:{port}").startswith("refused")
        assert _intrude(address).startswith("refused")  # tls:// without credentials
        assert _intrude(address, *foreign).startswith("refused")  # another CA's certificate
        assert _intrude(workers[0].replace("tls://", "tcp://")).startswith("refused")
    # the same intruder runs code in a cluster started without TLS: the probe would see it
    with connect(n_workers=1, memory_limit="1GiB", security=False) as client:
        address = client.scheduler.address
        assert address.startswith("tcp://127.0.0.1:")
        assert _intrude(address) == "ran code in 1 workers"


# -- issue 31.4: a cluster that cannot run, or keeps losing, its workers ends, never waits -----

SPHDIST = str(Path(sys.executable).with_name("sphdist"))
# a worker process that dies (as the OOM killer would end it) in every task reading a chunk
DIE_ON_READ = """
import os

def dask_setup(worker):
    import sphdist.io._input as stored  # where a corpus chunk is read

    def die(*args, **kwargs):
        os._exit(1)

    stored._read_chunk = die
"""


def _small_corpus(path):
    from sphdist.io.corpus_writer import CorpusWriter

    from ..reference import random_corpus

    X = random_corpus(60, 40, seed=3)
    with CorpusWriter(path, n_features=60, feature_scheme={"type": "hashing"}) as w:
        for a in range(0, 40, 10):
            w.write_chunk(X[:, a:a + 10], [f"doc{j}" for j in range(a, a + 10)])
        return w.commit(idf=np.ones(60))


def _one_error_line(result):
    """The last line of stderr, the only ``Error:`` one; no traceback before it."""
    assert result.returncode == 1, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("Error: ")]
    assert errors == lines[-1:] and "Traceback" not in result.stderr, result.stderr[-3000:]
    return errors[0]


@pytest.mark.cluster
def test_a_worker_memory_limit_below_an_idle_worker_is_refused_before_it_starts(tmp_path):
    """It printed nothing for 420 s (the workers were restarted for ever)."""
    corpus = _small_corpus(tmp_path / "small.zarr")
    result = subprocess.run(
        [SPHDIST, "fit", "-i", str(corpus.path), "-o", str(tmp_path / "m.zarr"), "-r", "3",
         "--n-workers", "1", "--memory-limit", "1MiB"],
        capture_output=True, text=True, timeout=120,
    )
    line = _one_error_line(result)
    assert "memory limit '1MiB' per worker" in line and "--memory-limit 512MiB" in line
    assert not (tmp_path / "m.zarr").exists()
    # the remedy works: the same fit with the limit it names
    again = subprocess.run(
        [SPHDIST, "fit", "-i", str(corpus.path), "-o", str(tmp_path / "m.zarr"), "-r", "3",
         "--max-iter", "2", "--n-workers", "1", "--memory-limit", "512MiB"],
        capture_output=True, text=True, timeout=180,
    )
    assert again.returncode == 0, again.stderr[-3000:]


@pytest.mark.cluster
@pytest.mark.slow
def test_a_cluster_that_keeps_losing_workers_ends_with_the_resume_command(tmp_path):
    from .._process_cluster import ProcessCluster

    corpus = _small_corpus(tmp_path / "small.zarr")
    (tmp_path / "die_on_read.py").write_text(DIE_ON_READ)
    out = tmp_path / "m.zarr"
    with ProcessCluster(
        1, memory_limit="1GiB", worker_args=["--preload", str(tmp_path / "die_on_read.py")],
        env={"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0"},  # a task fails at 1 loss
    ) as cluster:
        result = subprocess.run(
            [SPHDIST, "--log-level", "warning", "fit", "-i", str(corpus.path), "-o", str(out),
             "-r", "3", "--retries", "1", "--scheduler-address", cluster.address],
            capture_output=True, text=True, timeout=240,
        )
    line = _one_error_line(result)
    assert "workers were lost in 2 attempts" in line and "KilledWorker" in line
    # the workers die at the first read: no checkpoint to keep or resume (issue 44 item 10)
    assert "no checkpoint of this fit was written" in line and "is kept" not in line, line
    again = line.split("`")[1]
    assert again.startswith("sphdist fit --input ") and " --resume" not in again
    assert f"--output {out}" in again


def _worker_process_state():
    """In a worker: SIGINT blocked?, its BLAS threads, its hash of a string."""
    return (signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []),
            {info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"},
            hash("sphdist"))


@pytest.mark.cluster
@pytest.mark.slow
def test_local_cluster_workers_never_take_sigint_and_start_as_spawned_ones():
    """Issue 44 item 7: the workers fork from a fork server started with SIGINT blocked (a
    terminal's Ctrl-C is the driver's alone), in the environment distributed gives a spawned
    worker: one BLAS thread per worker thread (the server's numpy made one per core when it
    started without OMP_NUM_THREADS=1) and the hash seed distributed sets (PYTHONHASHSEED)."""
    spawned = subprocess.run(
        [sys.executable, "-c", "print(hash('sphdist'))"], capture_output=True, text=True,
        env={**os.environ, "PYTHONHASHSEED": "6640"}, check=True)
    with connect(n_workers=2, threads_per_worker=1, memory_limit="2GiB") as client:
        states = list(client.run(_worker_process_state).values())
    assert len(states) == 2
    for blocked, blas, hashed in states:
        assert blocked  # SIGINT never reaches a worker
        assert blas <= {1}, blas
        assert hashed == int(spawned.stdout)
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # this process'


_AFTER_AN_INGEST = textwrap.dedent("""
    import json, os, signal
    from concurrent.futures import ProcessPoolExecutor
    from threadpoolctl import threadpool_info
    from sphdist.jobs.cluster import connect
    from sphdist.text.ingest import _fork_server

    def state():
        return (signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []),
                sorted({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}))

    before = dict(os.environ)  # after the imports (a library may set its own variables)
    # an ingest's pool starts this process' one fork server first
    with ProcessPoolExecutor(1, mp_context=_fork_server()) as pool:
        pool.submit(os.getpid).result()
    assert dict(os.environ) == before, "the caller's environment changed"
    with connect(n_workers=2, threads_per_worker=1, memory_limit="2GiB") as client:
        print(json.dumps(list(client.run(state).values())))
""")


@pytest.mark.cluster
@pytest.mark.slow
def test_workers_of_a_cluster_after_an_ingest_pool_never_take_sigint_either():
    """The fork server is one per process: started by an ingest's pool (a script that ingests,
    then fits on a LocalCluster), the cluster's workers fork from it with SIGINT blocked and
    one BLAS thread all the same, and the caller's environment is left as it was."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", _AFTER_AN_INGEST], capture_output=True,
                          text=True, env={**env, "PYTHONPATH": str(REPO)}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    states = json.loads(done.stdout.strip().splitlines()[-1])
    assert states == [[True, [1]], [True, [1]]], states
