"""Shared fixtures: the data home and the 20 Newsgroups archive."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sphdist.datasets import DATA_HOME_ENV
from sphdist.datasets import newsgroups_archive as _newsgroups_archive
from sphdist.errors import InputNotFoundError

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA_HOME = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session", autouse=True)
def _default_data_home():
    """Point SPHDIST_DATA_HOME at ``<repo>/../shared/data`` unless it is already set."""
    if os.environ.get(DATA_HOME_ENV):
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(DATA_HOME_ENV, str(DEFAULT_DATA_HOME))
        yield


@pytest.fixture(scope="session")
def newsgroups_archive(_default_data_home) -> Path:
    """Path of ``20news-bydate.tar.gz`` in the data home; fails the test when it is missing."""
    try:
        return _newsgroups_archive()
    except InputNotFoundError as exc:
        pytest.fail(str(exc), pytrace=False)
