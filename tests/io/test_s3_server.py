"""The S3 test fixtures of tests/_s3.py against themselves: moto's server answers as S3 does for
what the object-store layer relies on (round trips, conditional writes, refused credentials), the
flaky proxy fails where it says and forwards bytes unchanged, and no server outlives a session."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import boto3
import botocore.exceptions
import numpy as np
import pytest
import s3fs

REPO = Path(__file__).resolve().parents[2]


def _fs():
    return s3fs.S3FileSystem()  # credentials and endpoint from the AWS_* environment


def _direct(server, env):
    """A boto3 client of the moto server itself, not through any proxy."""
    return server.client("s3", env.env["AWS_ACCESS_KEY_ID"], env.env["AWS_SECRET_ACCESS_KEY"])


def test_round_trip_in_this_process_and_in_a_subprocess(s3_server, s3_env):
    assert s3_env.url.startswith("s3://") and os.environ["AWS_ENDPOINT_URL"] == s3_server.endpoint
    data = os.urandom(300_000)
    _fs().pipe_file(f"{s3_env.bucket}/dir/blob", data)
    # the object is on the server, as another client sees it
    stored = _direct(s3_server, s3_env).get_object(Bucket=s3_env.bucket, Key="dir/blob")
    assert stored["Body"].read() == data
    assert _fs().cat_file(f"{s3_env.url}/dir/blob") == data
    # a subprocess reaches the same bucket with the environment the fixture hands out
    code = "import s3fs,sys; sys.stdout.buffer.write(s3fs.S3FileSystem().cat_file(sys.argv[1]))"
    result = subprocess.run([sys.executable, "-c", code, f"{s3_env.url}/dir/blob"],
                            env=s3_env.subprocess_env(), capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout == data


def test_each_test_gets_a_fresh_empty_bucket(s3_env, s3_server):
    assert _fs().ls(s3_env.bucket) == []
    names = {b["Name"] for b in _direct(s3_server, s3_env).list_buckets()["Buckets"]}
    assert s3_env.bucket in names


def test_conditional_writes_as_s3(s3_server, s3_env):
    fs, path = _fs(), f"{s3_env.bucket}/manifest.json"
    fs.pipe_file(path, b"first", mode="create")
    with pytest.raises(FileExistsError):
        fs.pipe_file(path, b"second", mode="create")
    assert fs.cat_file(path) == b"first"
    # the lease primitives: If-None-Match: * and If-Match: <etag>
    client = _direct(s3_server, s3_env)
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        client.put_object(Bucket=s3_env.bucket, Key="manifest.json", Body=b"x", IfNoneMatch="*")
    assert refused.value.response["Error"]["Code"] == "PreconditionFailed"
    etag = client.head_object(Bucket=s3_env.bucket, Key="manifest.json")["ETag"]
    client.put_object(Bucket=s3_env.bucket, Key="manifest.json", Body=b"third", IfMatch=etag)
    with pytest.raises(botocore.exceptions.ClientError) as stale:
        client.put_object(Bucket=s3_env.bucket, Key="manifest.json", Body=b"4th", IfMatch=etag)
    assert stale.value.response["Error"]["Code"] == "PreconditionFailed"
    assert fs.cat_file(path) == b"third"


def test_missing_bucket_is_file_not_found(s3_env):
    with pytest.raises(FileNotFoundError, match="bucket does not exist"):
        _fs().pipe_file(f"{s3_env.bucket}-missing/x", b"1")


def test_wrong_credentials_refused_valid_accepted(s3_auth_server, s3_auth_env, monkeypatch):
    assert s3_auth_env.env["AWS_ACCESS_KEY_ID"] == s3_auth_server.access_key_id
    path = f"{s3_auth_env.bucket}/blob"
    _fs().pipe_file(path, b"valid")
    assert _fs().cat_file(path) == b"valid"
    wrong = [(s3_auth_server.access_key_id, "not-the-secret"), ("AKIAUNKNOWN000000000", "x")]
    for key, secret in wrong:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
        s3fs.S3FileSystem.clear_instance_cache()
        with pytest.raises(PermissionError):
            _fs().cat_file(path)
        with pytest.raises(PermissionError):
            _fs().pipe_file(path, b"forged")
    client = s3_auth_server.server.client(
        "s3", s3_auth_server.access_key_id, s3_auth_server.secret_access_key)
    assert client.get_object(Bucket=s3_auth_env.bucket, Key="blob")["Body"].read() == b"valid"


def test_flaky_proxy_fails_every_nth_request_with_slowdown(s3_flaky):
    store = s3_flaky(every=3)
    statuses = []
    for _ in range(6):
        try:
            with urllib.request.urlopen(store.endpoint + "/", timeout=10) as response:
                statuses.append(response.status)  # ListBuckets, forwarded
        except urllib.error.HTTPError as exc:
            statuses.append(exc.code)
            assert b"<Code>SlowDown</Code>" in exc.read()
    assert statuses == [200, 200, 503, 200, 200, 503]
    assert (store.proxy.requests, store.proxy.injected) == (6, 2)


@pytest.mark.slow  # botocore backs off up to 1 s before each retry of a SlowDown
def test_flaky_store_round_trips_are_retried_to_identical_bytes(s3_server, s3_flaky):
    store = s3_flaky(every=3)
    fs = _fs()
    direct = _direct(s3_server, store)
    rng = np.random.default_rng(0)
    for i in range(20):
        data = rng.bytes(int(rng.integers(0, 400_000)))
        fs.pipe_file(f"{store.bucket}/k{i}", data)
        assert fs.cat_file(f"{store.bucket}/k{i}") == data
        # forwarded byte for byte: the server holds exactly these bytes
        assert direct.get_object(Bucket=store.bucket, Key=f"k{i}")["Body"].read() == data
    for i in range(5):  # HEAD and DELETE through the proxy too
        assert fs.info(f"{store.bucket}/k{i}")["size"] == len(direct.get_object(
            Bucket=store.bucket, Key=f"k{i}")["Body"].read())
        fs.rm_file(f"{store.bucket}/k{i}")
    keys = {o["Key"] for o in direct.list_objects_v2(Bucket=store.bucket)["Contents"]}
    assert keys == {f"k{i}" for i in range(5, 20)}
    # and botocore on its own (its retry handler, not s3fs's) through the proxy
    via_proxy = boto3.session.Session().client("s3")  # AWS_ENDPOINT_URL is the proxy
    assert via_proxy.meta.endpoint_url == store.endpoint
    for i in range(5):
        via_proxy.put_object(Bucket=store.bucket, Key=f"b{i}", Body=b"%d" % i * 1000)
        assert via_proxy.get_object(Bucket=store.bucket, Key=f"b{i}")["Body"].read() == (
            b"%d" % i * 1000)
    assert store.proxy.injected == store.proxy.requests // 3 >= 20


def test_store_failing_every_request_after_k_gives_an_error_not_success(s3_flaky):
    store = s3_flaky(fail_after=2, max_attempts=2)
    fs = _fs()
    fs.pipe_file(f"{store.bucket}/a", b"written")  # within the first 2 requests
    before = store.proxy.injected
    with pytest.raises(OSError, match="reduce your request rate"):
        fs.cat_file(f"{store.bucket}/a")
    assert store.proxy.injected - before >= 2  # it was retried, and still failed
    assert store.proxy.requests == store.proxy.injected + 2


def test_servers_and_proxies_are_gone_after_a_session_even_when_a_test_fails(tmp_path):
    (tmp_path / "conftest.py").write_text(
        "from tests._s3 import s3_auth_env, s3_auth_server, s3_env, s3_flaky, s3_server"
        "  # noqa: F401\n")
    (tmp_path / "test_child.py").write_text(textwrap.dedent(f"""
        import os, socket

        def test_uses_them(s3_server, s3_auth_server, s3_flaky):
            store = s3_flaky(every=2)
            with open({str(tmp_path / "pids")!r}, "w") as f:
                f.write(f"{{s3_server.pid}} {{s3_auth_server.server.pid}}\\n")
                f.write(f"{{s3_server.port}} {{s3_auth_server.server.port}} "
                        f"{{store.proxy.server_address[1]}}\\n")
                f.write(f"{{s3_server.startup_s}}\\n")
            assert False, "a failing test"
        """))
    t0 = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), str(tmp_path / "test_child.py")],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
        text=True, timeout=300,
    )
    elapsed = time.perf_counter() - t0
    assert result.returncode == 1 and "1 failed" in result.stdout, result.stdout + result.stderr
    pids_line, ports_line, startup_line = (tmp_path / "pids").read_text().splitlines()
    assert 0 < float(startup_line) < elapsed
    for pid in map(int, pids_line.split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # reaped by the child session, not a zombie of anyone
    for port in map(int, ports_line.split()):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
