"""Where the data sets live: the data home and the 20 Newsgroups archive.

sphdist never downloads. It reads files that already sit in a *data home* folder, found the
way scikit-learn's ``data_home`` is (``sklearn.datasets.get_data_home``): an explicit argument,
else the environment variable ``SPHDIST_DATA_HOME``, else ``~/sphdist_data``.
"""

from __future__ import annotations

import os
from pathlib import Path

from sphdist.errors import InputNotFoundError

__all__ = [
    "DATA_HOME_ENV",
    "NEWSGROUPS_ARCHIVE",
    "NEWSGROUPS_PAPER_CATEGORIES",
    "get_data_home",
    "newsgroups_archive",
]

#: Environment variable naming the data home.
DATA_HOME_ENV = "SPHDIST_DATA_HOME"

#: File name of the 20 Newsgroups "bydate" archive inside the data home.
NEWSGROUPS_ARCHIVE = "20news-bydate.tar.gz"

#: The five newsgroups of the Spherical PCA paper's 20-newsgroup experiment (§5.2, Table 1),
#: 200 documents sampled from each; sorted, so their label codes are their positions here.
NEWSGROUPS_PAPER_CATEGORIES = (
    "comp.graphics",
    "rec.motorcycles",
    "rec.sport.baseball",
    "sci.space",
    "talk.politics.mideast",
)


def get_data_home(data_home: str | os.PathLike[str] | None = None) -> Path:
    """Return the folder sphdist reads data sets from.

    Parameters
    ----------
    data_home : path-like, optional
        The folder. If None, the environment variable ``SPHDIST_DATA_HOME`` is used when set
        and non-empty, else ``~/sphdist_data``.

    Returns
    -------
    pathlib.Path
        The data home, ``~`` expanded. It is not created and may not exist.

    Notes
    -----
    The same precedence as scikit-learn's ``sklearn.datasets.get_data_home`` (argument, then
    ``SCIKIT_LEARN_DATA``, then ``~/scikit_learn_data``), except that the folder is not created:
    sphdist only reads from it.

    Examples
    --------
    >>> str(get_data_home("/data/corpora"))
    '/data/corpora'
    """
    if data_home is None:
        data_home = os.environ.get(DATA_HOME_ENV) or Path("~") / "sphdist_data"
    return Path(data_home).expanduser()


def newsgroups_archive(data_home: str | os.PathLike[str] | None = None) -> Path:
    """Return the path of the 20 Newsgroups "bydate" archive in the data home.

    Parameters
    ----------
    data_home : path-like, optional
        See :func:`get_data_home`.

    Returns
    -------
    pathlib.Path
        ``<data_home>/20news-bydate.tar.gz``, an existing file: 18,846 documents in 20 groups,
        laid out as ``20news-bydate-train/<group>/<id>`` and ``20news-bydate-test/<group>/<id>``.

    Raises
    ------
    InputNotFoundError
        If the archive is not there; the message names the path tried.
    """
    home = get_data_home(data_home)
    path = home / NEWSGROUPS_ARCHIVE
    if not path.is_file():
        origin = (
            "the data_home argument" if data_home is not None
            else f"${DATA_HOME_ENV}" if os.environ.get(DATA_HOME_ENV)
            else f"the default, ${DATA_HOME_ENV} being unset"
        )
        raise InputNotFoundError(
            f"{path}: 20 Newsgroups archive not found (data home {home}, from {origin}). "
            f"sphdist does not download it. To resolve this, name the folder holding "
            f"{NEWSGROUPS_ARCHIVE} in the environment: `export {DATA_HOME_ENV}=/path/to/data` "
            f"(or prefix one command: `{DATA_HOME_ENV}=/path/to/data sphdist ingest -o "
            "corpus.zarr`); from Python, pass data_home='/path/to/data'."
        )
    return path
