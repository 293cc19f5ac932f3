"""Shared fixtures: the data home, the 20 Newsgroups archive and the dask schedulers."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import dask
import pytest

from sphdist.datasets import DATA_HOME_ENV
from sphdist.datasets import newsgroups_archive as _newsgroups_archive
from sphdist.errors import InputNotFoundError, Text

from ._fit_cli import connects, corpus, runner  # noqa: F401
from ._s3 import s3_auth_env, s3_auth_server, s3_env, s3_flaky, s3_server  # noqa: F401

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA_HOME = REPO.parent / "shared" / "data"


def pytest_collection_modifyitems(config, items):
    """The files with the most tests marked slow first, each file's tests in their order.

    The suite runs a file at a time on each xdist worker (``--dist loadfile``), in collection
    order (``--no-loadscope-reorder``; xdist's own reorder puts the files with most tests first,
    which left the slowest files, of few tests, at the tail of a 2-worker run). Longest first is
    the usual rule for keeping the last worker's tail short.
    """
    slow: dict[object, int] = {}
    for item in items:
        if item.get_closest_marker("slow"):
            slow[item.path] = slow.get(item.path, 0) + 1
    items.sort(key=lambda item: -slow.get(item.path, 0))  # stable: a file's order is kept


@pytest.fixture(scope="session", autouse=True)
def _default_data_home():
    """Point SPHDIST_DATA_HOME at ``<repo>/../shared/data`` unless it is already set."""
    if os.environ.get(DATA_HOME_ENV):
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(DATA_HOME_ENV, str(DEFAULT_DATA_HOME))
        yield


@pytest.fixture(scope="session", autouse=True)
def _messages_keep_their_parts():
    """No message holding a job or a parameter is flattened by an f-string (issue 39).

    ``f"... {text}"`` words a :class:`~sphdist.errors.Text` in the Python API's words for good,
    so the command line would print ``sphdist.jobs.run(...)`` where ``sphdist fit ...``
    belongs. Here such a format raises, so every test that reaches one fails at the f-string.
    """
    def keep_parts(self: Text, spec: str) -> str:
        if not all(isinstance(part, str) for part in self.parts):
            raise AssertionError("a message with a job or a parameter formatted into an "
                                 "f-string (build it with +): " + repr(str(self)))
        return str.__format__(self, spec)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Text, "__format__", keep_parts)
        yield


@pytest.fixture(autouse=True)
def _dask_config_restored():
    """Dask's global configuration as it was before each test.

    A distributed ``Client`` sets ``scheduler: dask.distributed`` globally until it is closed;
    one a test leaves behind (a refused TLS connection, say) would make every later
    computation in this process ask for a client that is gone.
    """
    before = copy.deepcopy(dask.config.config)
    yield
    config = dask.config.config
    if config != before:
        # Keys a test added by importing a library (dask_jobqueue's ``jobqueue``, say) stay:
        # a module is imported once per process, so its defaults cannot be added back later.
        for key in ("scheduler", "shuffle"):
            if key not in before:
                config.pop(key, None)
        config.update(before)


@pytest.fixture(scope="session")
def newsgroups_archive(_default_data_home) -> Path:
    """Path of ``20news-bydate.tar.gz`` in the data home; fails the test when it is missing."""
    try:
        return _newsgroups_archive()
    except InputNotFoundError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def newsgroups5(newsgroups_archive, tmp_path_factory):
    """The paper's five groups, 60 documents each, headers/footers/quotes removed (2**14
    hashed features, chunks of 128 documents)."""
    from sphdist.datasets import NEWSGROUPS_PAPER_CATEGORIES
    from sphdist.jobs import run
    from sphdist.jobs.ingest import IngestRequest
    from sphdist.text.ingest import SourceSpec, TextSpec

    return run(IngestRequest(
        SourceSpec(newsgroups_archive, categories=list(NEWSGROUPS_PAPER_CATEGORIES),
                   max_docs_per_label=60, seed=0),
        tmp_path_factory.mktemp("ng5") / "corpus.zarr",
        text=TextSpec(vocabulary=False, n_features=2**14, stop_words=None, sublinear_tf=False,
                      remove=("headers", "footers", "quotes")),
        chunk_size=128,
    ))


@pytest.fixture(scope="module")
def scheduler():
    """Address of an in-process LocalCluster shared by a module's tests (``--scheduler-address``),
    so the distributed code paths run without the cost of starting worker processes."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
    ) as cluster:
        yield cluster.scheduler_address


@pytest.fixture
def sync_scheduler():
    """Run dask computations in the test's thread (layers below the cluster are tested so)."""
    with dask.config.set(scheduler="sync"):
        yield
