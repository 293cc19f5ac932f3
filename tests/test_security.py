"""Security: TLS between every party, loopback by default, nothing persisted that can execute
code when loaded, archives never extracted outside the target."""

from __future__ import annotations

import gc
import importlib.util
import io
import json
import os
import tarfile
from pathlib import Path

import dask
import numpy as np
import psutil
import pytest
import zarr
from click.testing import CliRunner
from distributed import Client

from sphdist.cli import main
from sphdist.errors import CorpusFormatError, InputNotFoundError, ModelFormatError
from sphdist.io._zarr import SAFE_CODECS
from sphdist.io.corpus import open_input
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.io.model import open_model
from sphdist.jobs import run
from sphdist.jobs.cluster import connect, tls_security
from sphdist.jobs.fit import FitRequest

from ._process_cluster import ProcessCluster
from .reference import random_corpus

REPO = Path(__file__).resolve().parents[1]


def _make_certs(directory):
    spec = importlib.util.spec_from_file_location("make_certs", REPO / "cluster" / "make_certs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_certs(directory)


def _corpus(path, m=30, n=40):
    X = random_corpus(m, n, seed=4)
    with CorpusWriter(path, n_features=m, feature_scheme={"type": "vocabulary", "n_features": m},
                      label_names=["a", "b"], vocabulary=[f"w{i}" for i in range(m)]) as w:
        for a in range(0, n, 16):
            b = min(a + 16, n)
            w.write_chunk(X[:, a:b], [f"doc{j}" for j in range(a, b)], np.arange(a, b) % 2)
        return w.commit(idf=np.linspace(1, 2, m))


# -- TLS --------------------------------------------------------------------------------------


@pytest.mark.cluster
@pytest.mark.slow
def test_fit_over_tls_and_plain_or_foreign_clients_are_refused(tmp_path):
    ca, cert, key = _make_certs(tmp_path / "certs")
    corpus = _corpus(tmp_path / "corpus.zarr")
    with ProcessCluster(1, memory_limit="1GiB", security=(ca, cert, key)) as cluster:
        assert cluster.address.startswith("tls://127.0.0.1:")
        out = tmp_path / "model.zarr"
        result = CliRunner().invoke(main, [
            "--quiet", "fit", "-i", str(corpus.path), "-o", str(out), "-r", "3", "--max-iter",
            "3", "--tol", "0", "--scheduler-address", cluster.address,
            "--tls-ca-file", str(ca), "--tls-cert", str(cert), "--tls-key", str(key),
        ])
        assert result.exit_code == 0, result.output
        model = open_model(out)
        assert model.n_iter == 3 and np.all(np.diff(model.objective) <= 0)

        # no certificate: no connection
        with pytest.raises((OSError, TypeError)):
            Client(cluster.address, timeout="3s")
        # a certificate from another CA: the scheduler refuses the handshake
        other = _make_certs(tmp_path / "other")
        with pytest.raises(OSError):
            Client(cluster.address, security=tls_security(*other), timeout="3s")
    # the two half-built clients sit in reference cycles; collected later, their __del__ can
    # run inside the bootstrap of the next LoopRunner's thread while that LoopRunner holds
    # distributed's class-wide lock, which Client.close needs: a deadlock of the next test
    # that starts a cluster (seen as a hang in Thread.start). Finalise them here.
    gc.collect()


def test_tls_files_must_exist(tmp_path):
    (tmp_path / "ca.pem").write_text("")
    with pytest.raises(InputNotFoundError, match=r"\(tls_cert\)"):
        tls_security(tmp_path / "ca.pem", tmp_path / "missing.pem")


@pytest.mark.cluster
@pytest.mark.slow
def test_embedded_cluster_speaks_tls_when_given_certificates(tmp_path):
    security = tls_security(*_make_certs(tmp_path))
    with connect(n_workers=1, memory_limit="1GiB", security=security) as client:
        addresses = [client.scheduler.address, *client.scheduler_info()["workers"]]
        assert all(a.startswith("tls://127.0.0.1:") for a in addresses)
        assert client.submit(sum, [1, 2]).result() == 3


# -- loopback ---------------------------------------------------------------------------------


def _listening(pids):
    """(ip, port) of every listening TCP socket of the processes."""
    found = []
    for pid in pids:
        for c in psutil.Process(pid).net_connections(kind="inet"):
            if c.status == psutil.CONN_LISTEN:
                found.append((c.laddr.ip, c.laddr.port))
    return found


@pytest.mark.cluster
@pytest.mark.slow
def test_nothing_listens_beyond_loopback_by_default():
    with connect(n_workers=2, memory_limit="1GiB") as client:
        workers = client.run(os.getpid)
        nannies = client.run(os.getpid, nanny=True)
        pids = {os.getpid(), *workers.values(), *nannies.values()}
        sockets = _listening(pids)
        dashboard = client.dashboard_link
    # scheduler + dashboard (this process), 2 workers, 2 nannies
    assert len(sockets) >= 6
    assert {ip for ip, _ in sockets} == {"127.0.0.1"}, sockets
    assert dashboard.startswith("http://127.0.0.1:")

    with ProcessCluster(1, memory_limit="1GiB", dashboard=True) as cluster:
        pids = [cluster.scheduler.pid]
        for proc in cluster.workers:  # the nanny and its worker process
            pids += [proc.pid, *(c.pid for c in psutil.Process(proc.pid).children(True))]
        sockets = _listening(pids)
    assert len(sockets) >= 4  # scheduler, its dashboard, nanny, worker
    assert {ip for ip, _ in sockets} == {"127.0.0.1"}, sockets



@pytest.mark.cluster
@pytest.mark.slow
def test_the_dashboard_answers_without_credentials_on_loopback_and_only_reads():
    """What README's security notes say of the dashboard (issue 24 item 7), pinned."""
    import urllib.error
    import urllib.request

    with connect(n_workers=1, memory_limit="1GiB") as client:
        link = client.dashboard_link  # http://127.0.0.1:PORT/status, while the scheduler is tls://
        assert link.startswith("http://127.0.0.1:") and client.scheduler.address.startswith("tls")
        root = link.removesuffix("/status")
        for path in ("/status", "/json/identity.json", "/info/main/workers.html"):
            with urllib.request.urlopen(root + path, timeout=30) as response:
                assert response.status == 200  # no credential asked
        with pytest.raises(urllib.error.HTTPError) as refused:  # distributed's API routes
            urllib.request.urlopen(urllib.request.Request(
                root + "/api/v1/retire_workers", data=b"{}", method="POST"), timeout=30)
        assert refused.value.code in (404, 405)


# -- nothing persisted can execute code ------------------------------------------------------

PLAIN_TYPES = {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
               "float32", "float64", "string"}


def _array_metadata(root):
    for meta in sorted(Path(root).rglob("*")):
        if meta.name in (".zarray", ".zattrs", ".zgroup", ".zmetadata"):
            raise AssertionError(f"zarr v2 metadata in {meta}")
        if meta.name == "zarr.json":
            doc = json.loads(meta.read_text())
            assert doc["zarr_format"] == 3
            if doc["node_type"] == "array":
                yield meta, doc


def test_persisted_corpus_and_model_hold_no_pickle_or_object_dtype(tmp_path):
    source = tmp_path / "src"
    for label, texts in {"space": ["rocket orbit nasa", "the moon"],
                         "sport": ["baseball pitcher", "home run"]}.items():
        (source / label).mkdir(parents=True)
        for i, text in enumerate(texts):
            (source / label / f"{i}.txt").write_text(text)
    runner = CliRunner()
    assert runner.invoke(main, ["--quiet", "ingest", str(source), "-o",
                                str(tmp_path / "c.zarr"), "--hashing", "--n-features",
                                "64"]).exit_code == 0
    _corpus(tmp_path / "v.zarr")
    with dask.config.set(scheduler="sync"):
        run(FitRequest(tmp_path / "v.zarr", tmp_path / "m.zarr", n_components=3, max_iter=2,
                       callback=None))
    seen = 0
    for root in ("c.zarr", "v.zarr", "m.zarr"):
        for meta, doc in _array_metadata(tmp_path / root):
            seen += 1
            assert doc["data_type"] in PLAIN_TYPES, (meta, doc["data_type"])
            names = {c["name"] for c in doc["codecs"]}
            assert names <= SAFE_CODECS, (meta, names)
            assert "pickle" not in json.dumps(doc).lower()
    assert seen >= 15  # X chunks, idf, doc_ids, labels, vocabulary, U, V, state, ...
    for path in tmp_path.rglob("*"):
        assert path.suffix not in (".pkl", ".pickle", ".npy", ".joblib"), path


def _poison(array_dir: Path, marker: Path):
    """Make ``array_dir`` a zarr array whose chunk is a pickle that creates ``marker``."""
    import pickle

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    meta = json.loads((array_dir / "zarr.json").read_text())
    meta["codecs"] = [{"name": "bytes", "configuration": {"endian": "little"}},
                      {"name": "numcodecs.pickle", "configuration": {"protocol": 5}}]
    (array_dir / "zarr.json").write_text(json.dumps(meta))
    for chunk in array_dir.rglob("*"):
        if chunk.is_file() and chunk.name != "zarr.json":
            chunk.write_bytes(pickle.dumps(Payload()))


def _v2_poison(array_dir: Path, marker: Path):
    """Replace ``array_dir`` by a zarr v2 array with a pickle filter, chunk a payload."""
    import pickle
    import shutil

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    shutil.rmtree(array_dir)
    array_dir.mkdir()
    (array_dir / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [30], "chunks": [30], "dtype": "<f8", "compressor": None,
        "fill_value": 0, "filters": [{"id": "pickle", "protocol": 5}], "order": "C",
    }))
    (array_dir / "0").write_bytes(pickle.dumps(Payload()))


@pytest.mark.parametrize("poison", [_poison, _v2_poison])
@pytest.mark.parametrize("target", ["idf", "X/00001/data", "labels"])
def test_loading_a_poisoned_corpus_never_executes_code(tmp_path, poison, target):
    corpus = _corpus(tmp_path / "corpus.zarr")
    marker = tmp_path / "code-was-executed"
    poison(corpus.path / target, marker)
    source = open_input(corpus.path)
    read = {"idf": lambda: source.idf, "labels": lambda: source.labels,
            "X/00001/data": lambda: source.read_chunk(1)}[target]
    if poison is _poison:
        with pytest.raises(CorpusFormatError, match="re-ingest"):
            read()
    elif target == "X/00001/data":  # zarr v3 does not see v2 arrays in a v3 group
        with pytest.raises(CorpusFormatError, match="chunk 1 .* is missing"):
            read()
    else:
        assert read() is None
    assert not marker.exists()


@pytest.mark.parametrize("poison", [_poison, _v2_poison])
def test_loading_a_poisoned_model_never_executes_code(tmp_path, poison):
    _corpus(tmp_path / "corpus.zarr")
    with dask.config.set(scheduler="sync"):
        run(FitRequest(tmp_path / "corpus.zarr", tmp_path / "m.zarr", n_components=3, max_iter=1,
                       callback=None))
    marker = tmp_path / "code-was-executed"
    poison(tmp_path / "m.zarr" / "idf", marker)
    # an unknown (pickle) codec, or a v2 array a v3 reader does not recognise, is refused
    # when the model is opened, before any chunk is read
    with pytest.raises(ModelFormatError, match="unreadable array metadata.*never pickled"):
        open_model(tmp_path / "m.zarr")
    assert not marker.exists()


def test_json_attributes_are_data_not_code(tmp_path):
    corpus = _corpus(tmp_path / "corpus.zarr")
    marker = tmp_path / "code-was-executed"
    g = zarr.open_group(store=str(corpus.path), mode="r+")
    g.attrs["feature_scheme"] = {"type": "!!python/object/apply:os.system",
                                 "args": [f"touch {marker}"]}
    assert open_input(corpus.path).feature_scheme["type"].startswith("!!python")
    assert not marker.exists()


# -- archives -----------------------------------------------------------------------------------


def _add(archive, name, data=b"", **fields):
    info = tarfile.TarInfo(name)
    for key, value in fields.items():
        setattr(info, key, value)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data) if data else None)


def test_tar_members_are_never_extracted_or_followed_outside_the_target(tmp_path):
    from sphdist.jobs import run
    from sphdist.jobs.ingest import IngestRequest
    from sphdist.text.ingest import SourceSpec, TextSpec

    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("zzsecretword " * 50)
    escape = tmp_path / "escaped.txt"
    absolute = tmp_path / "absolute" / "x.txt"
    archive_path = tmp_path / "work" / "source.tar"
    archive_path.parent.mkdir()
    with tarfile.open(archive_path, "w") as archive:
        for label in ("space", "sport"):
            for i in range(3):
                _add(archive, f"{label}/{i}.txt", f"{label} words number {i} text".encode())
        _add(archive, "../escaped.txt", b"up and out of the target")
        _add(archive, "space/../../escaped.txt", b"up and out again")
        _add(archive, str(absolute), b"an absolute member")
        _add(archive, "space/link.txt", type=tarfile.SYMTYPE, linkname=str(secret))
        _add(archive, "space/hard.txt", type=tarfile.LNKTYPE, linkname=str(secret))
        _add(archive, "sport/dev", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
    before = {p for p in tmp_path.rglob("*")}
    out = tmp_path / "work" / "corpus.zarr"
    # links and devices are bad documents (refused by default): skipped and counted here
    corpus = run(IngestRequest(SourceSpec(archive_path, on_error="skip"), out,
                    text=TextSpec(vocabulary=False, n_features=2**10)))  # hashed: see below

    created = {p for p in tmp_path.rglob("*")} - before
    assert all(out in p.parents or p == out for p in created), created - {out}
    assert not escape.exists() and not absolute.exists()
    ids = list(corpus.doc_ids)
    assert not any(name.endswith(("link.txt", "hard.txt", "dev")) for name in ids), ids
    assert all(not i.startswith("/") for i in ids), ids
    # the linked file's words are not in the corpus: no column has the weight they would give
    from sklearn.feature_extraction.text import HashingVectorizer

    column = HashingVectorizer(n_features=2**10, alternate_sign=False).transform(
        ["zzsecretword"]).indices[0]
    X = corpus.to_dask().compute().tocsr()
    assert X[column].nnz == 0
