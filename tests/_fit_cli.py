"""Fixtures of the ``sphdist fit`` command's tests: a runner, a small corpus, the connect calls."""

import contextlib

import pytest
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.jobs import cluster


@pytest.fixture
def runner():
    return CliRunner()


@pytest.fixture
def corpus(runner, tmp_path):
    path = tmp_path / "corpus.zarr"
    result = runner.invoke(main, [
        "synth", "--n-docs", "40", "--n-topics", "2", "--vocab-size", "50", "--format", "corpus",
        "--n-features", "64", "--chunk-size", "16", "-o", str(path),
    ])
    assert result.exit_code == 0, result.output
    return path


@pytest.fixture
def connects(monkeypatch):
    """Calls of ``connect`` (what starts or joins a cluster); the fit then runs in-process."""
    calls = []

    @contextlib.contextmanager
    def fake_connect(*args, **kwargs):
        calls.append(args)
        yield None

    monkeypatch.setattr(cluster, "connect", fake_connect)
    return calls
