"""How the remedies of the ``index`` and ``neighbors`` jobs are worded as Python calls.

:func:`index_call` and :func:`neighbors_call` are registered with
:func:`sphdist.errors.words_for` (what :class:`sphdist.errors.PythonForm` words these jobs with);
they name the jobs by their public paths.
"""

from __future__ import annotations

from typing import Any

from sphdist.errors import words_for


def _keywords(arguments: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in arguments.items())


@words_for("index")
def index_call(arguments: dict[str, Any]) -> str:
    """The call that a remedy of the ``index`` job names, as Python text.

    What :class:`sphdist.errors.PythonForm` words an ``"index"``
    :class:`~sphdist.errors.Remedy` with: :func:`check_index` of its ``output`` where it
    checks (``check``), else the run of an :class:`IndexRequest`.

    Examples
    --------
    >>> index_call({"model": "m.zarr", "output": "i.zarr", "check": True})
    "sphdist.jobs.neighbors.check_index(model='m.zarr', path='i.zarr')"
    >>> index_call({"model": "m.zarr", "output": "i.zarr", "overwrite": True})
    "sphdist.jobs.run(sphdist.jobs.neighbors.IndexRequest(model='m.zarr', output='i.zarr', \
overwrite=True))"
    """
    arguments = dict(arguments)
    if arguments.pop("check", False):
        arguments = {("path" if k == "output" else k): v for k, v in arguments.items()}
        return f"sphdist.jobs.neighbors.check_index({_keywords(arguments)})"
    return f"sphdist.jobs.run(sphdist.jobs.neighbors.IndexRequest({_keywords(arguments)}))"


@words_for("neighbors")
def neighbors_call(arguments: dict[str, Any]) -> str:
    """The call that a remedy of the ``neighbors`` job names, as Python text.

    What :class:`sphdist.errors.PythonForm` words a ``"neighbors"``
    :class:`~sphdist.errors.Remedy` with: the job of its mode (a :class:`KnnGraphRequest` for
    ``all``, a :class:`BatchNeighborsRequest` for ``queries``, read by :func:`queries_of`,
    else a :class:`QueryRequest`), its fields as keywords.

    Examples
    --------
    >>> neighbors_call({"model": "m.zarr", "all": True, "k": 5, "output": "g.csv"})
    "sphdist.jobs.run(sphdist.jobs.neighbors.KnnGraphRequest(model='m.zarr', k=5, \
output='g.csv'))"
    >>> neighbors_call({"model": "m.zarr", "queries": "q.txt", "output": "h.csv"})
    "sphdist.jobs.run(sphdist.jobs.neighbors.BatchNeighborsRequest(model='m.zarr', \
queries=sphdist.jobs.neighbors.queries_of('q.txt'), output='h.csv'))"
    """
    arguments = dict(arguments)
    if arguments.pop("all", False):
        return f"sphdist.jobs.run(sphdist.jobs.neighbors.KnnGraphRequest({_keywords(arguments)}))"
    words = ", ".join(f"queries=sphdist.jobs.neighbors.queries_of({v!r})" if k == "queries"
                      else f"{k}={v!r}" for k, v in arguments.items())
    if "queries" in arguments:
        return f"sphdist.jobs.run(sphdist.jobs.neighbors.BatchNeighborsRequest({words}))"
    return f"sphdist.jobs.run(sphdist.jobs.neighbors.QueryRequest({words}))"
