"""A real S3 server for the object-store tests (issue 16).

* ``s3_server`` (session): moto's standalone server (``python -m moto.server``) in a subprocess on
  127.0.0.1 and a free port; stopped at the end of the session, and killed by the kernel if the
  pytest process dies first (``PR_SET_PDEATHSIG``).
* ``s3_auth_server`` (session): a second moto server on which IAM authentication is enforced and
  one key pair (:attr:`AuthServer.access_key_id`, :attr:`AuthServer.secret_access_key`) is valid.
* ``s3_env`` / ``s3_auth_env`` (function): a fresh bucket with a unique name on that server, and the
  ``AWS_*`` variables botocore reads (``AWS_ENDPOINT_URL`` included) set with ``monkeypatch``;
  :meth:`S3Env.subprocess_env` is the environment for a ``sphdist`` command run as a subprocess.
* ``s3_flaky`` (function, a factory): :class:`FlakyProxy`, a reverse proxy in front of
  ``s3_server`` that answers every Nth request, or every request after the first K, with HTTP 503
  ``SlowDown`` as S3 does, and forwards the others byte for byte; the factory points
  ``AWS_ENDPOINT_URL`` at it.

s3fs caches its filesystem instances by their arguments, not by the environment, so every fixture
clears that cache when it sets up and tears down: no credentials or endpoint leak between tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REGION = "us-east-1"
HOST = "127.0.0.1"
START_TIMEOUT_S = 60.0
# variables that would make botocore use something else than the test server's key pair
_AWS_CLEARED = (
    "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL_S3", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CA_BUNDLE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE",
)
# moto.server's main(), in a child that the kernel sends SIGTERM when the pytest process dies
_BOOT = """\
import ctypes, os, signal, sys
if sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != int(sys.argv.pop(1)):
        sys.exit(1)  # the parent died before prctl
else:
    sys.argv.pop(1)
from moto.server import main
main(sys.argv[1:])
"""
SLOWDOWN_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    "<Message>Please reduce your request rate.</Message>"
    "<RequestId>{rid}</RequestId><HostId>flaky-proxy</HostId></Error>"
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def clear_s3fs_cache() -> None:
    """Forget s3fs's cached filesystems (they keep the credentials they were made with)."""
    with contextlib.suppress(ImportError):
        import s3fs

        s3fs.S3FileSystem.clear_instance_cache()


class MotoServer:
    """moto's standalone S3 (and IAM) server in a subprocess on 127.0.0.1.

    Parameters
    ----------
    log_path : Path
        Where the server's output goes (shown when it does not start).
    """

    def __init__(self, log_path: Path):
        self.log_path = Path(log_path)
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.startup_s = float("nan")

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def address(self) -> tuple[str, int]:
        return HOST, self.port

    @property
    def pid(self) -> int:
        return self.process.pid

    def start(self, attempts: int = 3) -> MotoServer:
        """Start the server on a free port and wait until it answers HTTP."""
        t0 = time.perf_counter()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "MOTO_"))}
        for _ in range(attempts):
            self.port = free_port()
            log = open(self.log_path, "ab")
            try:
                self.process = subprocess.Popen(
                    [sys.executable, "-c", _BOOT, str(os.getpid()), "-H", HOST,
                     "-p", str(self.port)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                    start_new_session=True,  # a ^C to pytest reaches the server via teardown
                )
            finally:
                log.close()
            if self._wait_ready():
                self.startup_s = time.perf_counter() - t0
                return self
            self.stop()  # exited (port taken meanwhile) or never answered: try another port
        raise RuntimeError(
            f"moto server did not start on {HOST}; its log {self.log_path}:\n"
            + self.log_path.read_text(errors="replace")[-3000:]
        )

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=2).close()
                return True
            except urllib.error.HTTPError:
                return True  # it answered
            except OSError:
                time.sleep(0.05)
        return False

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; reaps the process."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def client(self, service: str = "s3", key: str = "testing", secret: str = "testing"):
        """A boto3 client of this server (moto accepts any key unless authentication is on)."""
        import boto3

        return boto3.session.Session().client(
            service, endpoint_url=self.endpoint, region_name=REGION,
            aws_access_key_id=key, aws_secret_access_key=secret,
        )


@dataclasses.dataclass
class AuthServer:
    """A :class:`MotoServer` with IAM authentication enforced and one valid key pair."""

    server: MotoServer
    access_key_id: str
    secret_access_key: str

    @property
    def endpoint(self) -> str:
        return self.server.endpoint


def start_auth_server(log_path: Path) -> AuthServer:
    """Start a moto server, create user ``sphdist-test`` allowed ``s3:*`` and its access key,
    then switch authentication on.

    moto authenticates a request once ``INITIAL_NO_AUTH_ACTION_COUNT`` requests were served
    unauthenticated (default: never). In server mode ``POST /moto-api/reset-auth`` with a count
    sets it and restarts the counting, as moto's own ``set_initial_no_auth_action_count`` does;
    0 after the IAM setup means every later request must be signed with the user's key pair.
    """
    server = MotoServer(log_path).start()
    try:
        iam = server.client("iam")
        iam.create_user(UserName="sphdist-test")
        iam.put_user_policy(
            UserName="sphdist-test", PolicyName="s3-all",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [
                {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}),
        )
        key = iam.create_access_key(UserName="sphdist-test")["AccessKey"]
        request = urllib.request.Request(
            f"{server.endpoint}/moto-api/reset-auth", data=b"0", method="POST",
            headers={"Content-Type": "text/plain"})  # not a form: moto reads the raw body
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.load(response)["status"] == "ok"
    except BaseException:
        server.stop()
        raise
    return AuthServer(server, key["AccessKeyId"], key["SecretAccessKey"])


@dataclasses.dataclass
class S3Env:
    """A fresh bucket and the environment that reaches it.

    Attributes
    ----------
    url : str
        ``s3://<bucket>``.
    bucket : str
    endpoint : str
        ``AWS_ENDPOINT_URL``: the server, or the :class:`FlakyProxy` in front of it.
    env : dict of str to str
        The ``AWS_*`` variables set for this test (pass them on to subprocesses).
    proxy : FlakyProxy or None
    """

    url: str
    bucket: str
    endpoint: str
    env: dict[str, str]
    proxy: FlakyProxy | None = None

    def subprocess_env(self) -> dict[str, str]:
        """``os.environ`` (as this test sees it) with :attr:`env`, for ``subprocess.run``."""
        return {**os.environ, **self.env}


def aws_env(endpoint: str, key: str, secret: str) -> dict[str, str]:
    """The variables botocore (and so s3fs) reads: credentials, region, endpoint; no
    configuration file and no instance-metadata lookup."""
    return {
        "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_DEFAULT_REGION": REGION, "AWS_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def apply_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """Set ``env`` (and unset what would override it) for this test; clear s3fs's cache."""
    for name in _AWS_CLEARED:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    clear_s3fs_cache()


def bucket_env(monkeypatch, server: MotoServer, key: str, secret: str) -> S3Env:
    """Create a bucket with a unique name on ``server`` and set the environment that reaches it."""
    bucket = f"sphdist-{uuid.uuid4().hex[:16]}"
    server.client("s3", key, secret).create_bucket(Bucket=bucket)
    env = aws_env(server.endpoint, key, secret)
    apply_env(monkeypatch, env)
    return S3Env(f"s3://{bucket}", bucket, server.endpoint, env)


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as botocore and aiohttp use it
    server: FlakyProxy
    _BLOCK = 1 << 16

    def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's signature
        pass

    def _body(self):
        """The request body as it came (Content-Length or raw chunked framing), in pieces."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            while True:
                line = self.rfile.readline()
                yield line
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while True:  # trailers, up to the empty line
                        trailer = self.rfile.readline()
                        yield trailer
                        if trailer in (b"\r\n", b"\n", b""):
                            return
                yield self.rfile.read(size + 2)  # data and its CRLF
        left = int(self.headers.get("Content-Length") or 0)
        while left > 0:
            piece = self.rfile.read(min(left, self._BLOCK))
            if not piece:
                return
            left -= len(piece)
            yield piece

    def _fail(self):
        for _ in self._body():  # drain it, so that the connection stays usable
            pass
        body = SLOWDOWN_XML.format(rid=uuid.uuid4().hex.upper()).encode()
        self.send_response_only(503, "Slow Down")
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amz-request-id", "flaky-proxy")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _forward(self):
        upstream = http.client.HTTPConnection(*self.server.upstream, timeout=60)
        try:
            upstream.putrequest(self.command, self.path, skip_host=True,
                                skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() != "expect":  # answered here (100 Continue); not signed
                    upstream.putheader(name, value)
            upstream.endheaders()
            for piece in self._body():
                upstream.send(piece)
            response = upstream.getresponse()
            self.send_response_only(response.status, response.reason)
            length = response.getheader("Content-Length")
            for name, value in response.getheaders():
                if name.lower() not in ("transfer-encoding", "connection", "keep-alive"):
                    self.send_header(name, value)
            bodiless = self.command == "HEAD" or response.status in (204, 304)
            chunked = length is None and not bodiless
            if chunked:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            while not bodiless:
                piece = response.read(self._BLOCK)
                if chunked:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                elif piece:
                    self.wfile.write(piece)
                if not piece:
                    break
        finally:
            upstream.close()

    def _handle(self):
        if self.server.should_fail():
            self._fail()
        else:
            self._forward()

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle


class FlakyProxy(ThreadingHTTPServer):
    """A reverse proxy on 127.0.0.1 that answers some requests with S3's 503 ``SlowDown``.

    Parameters
    ----------
    upstream : (str, int)
        Host and port of the S3 server.
    every : int, optional
        Fail requests number N, 2N, 3N, ... (counted from 1 over all connections).
    fail_after : int, optional
        Forward the first ``fail_after`` requests, fail every later one.

    Attributes
    ----------
    requests, injected : int
        Requests received, and of them answered with 503.
    """

    daemon_threads = True

    def __init__(self, upstream, *, every: int | None = None, fail_after: int | None = None):
        if (every is None) == (fail_after is None):
            raise ValueError("give one of every= and fail_after=")
        if every is not None and every < 2:
            raise ValueError(f"every must be at least 2, got {every}")
        super().__init__((HOST, 0), _ProxyHandler)
        self.upstream = tuple(upstream)
        self.every, self.fail_after = every, fail_after
        self.requests = self.injected = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, args=(0.05,),
                                        name="flaky-s3-proxy", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}"

    def should_fail(self) -> bool:
        with self._lock:
            self.requests += 1
            if self.every is not None:
                fail = self.requests % self.every == 0
            else:
                fail = self.requests > self.fail_after
            self.injected += fail
            return fail

    def close(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=10)


# ---------------------------------------------------------------- fixtures (tests/conftest.py)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto's S3 server in a subprocess on 127.0.0.1 (any credentials accepted)."""
    server = MotoServer(tmp_path_factory.mktemp("moto") / "server.log")
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_auth_server(tmp_path_factory):
    """A second moto server that enforces IAM authentication; one valid key pair."""
    auth = start_auth_server(tmp_path_factory.mktemp("moto-auth") / "server.log")
    try:
        yield auth
    finally:
        auth.server.stop()


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """A fresh bucket on ``s3_server`` and ``AWS_*`` set to reach it: :class:`S3Env`."""
    yield bucket_env(monkeypatch, s3_server, "testing", "testing")
    clear_s3fs_cache()


@pytest.fixture
def s3_auth_env(s3_auth_server, monkeypatch):
    """A fresh bucket on ``s3_auth_server`` and its valid key pair in ``AWS_*``: :class:`S3Env`."""
    yield bucket_env(monkeypatch, s3_auth_server.server, s3_auth_server.access_key_id,
                     s3_auth_server.secret_access_key)
    clear_s3fs_cache()


@pytest.fixture
def s3_flaky(s3_server, s3_env, monkeypatch):
    """Factory ``s3_flaky(every=N)`` or ``s3_flaky(fail_after=K)``: a :class:`FlakyProxy` in
    front of ``s3_server``, ``AWS_ENDPOINT_URL`` pointed at it; returns an :class:`S3Env` of the
    ``s3_env`` bucket whose ``proxy`` counts the requests and the failures.

    ``max_attempts`` sets ``AWS_MAX_ATTEMPTS`` (botocore's attempts per call, default 5 with a
    backoff of up to 2**(attempt-1) s on ``SlowDown``; s3fs retries each call up to 5 times more).
    """
    proxies: list[FlakyProxy] = []

    def start(*, every: int | None = None, fail_after: int | None = None,
              max_attempts: int | None = None) -> S3Env:
        proxy = FlakyProxy(s3_server.address, every=every, fail_after=fail_after)
        proxies.append(proxy)
        env = {**s3_env.env, "AWS_ENDPOINT_URL": proxy.endpoint}
        if max_attempts is not None:
            env["AWS_MAX_ATTEMPTS"] = str(max_attempts)
        apply_env(monkeypatch, env)
        return dataclasses.replace(s3_env, endpoint=proxy.endpoint, env=env, proxy=proxy)

    try:
        yield start
    finally:
        for proxy in proxies:
            proxy.close()
        clear_s3fs_cache()
