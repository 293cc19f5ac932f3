"""Paths as the tasks of a job see them: made absolute once, and checked on the workers.

A task runs in a worker process whose working directory is its own, on a machine whose
filesystem may not be this one's: :func:`task_path` makes a job's paths absolute (URLs stay as
they are) on the driver before any task is built, and :func:`check_workers_see` refuses a local
path that the workers do not see as this process does. Its public home is
:mod:`sphdist.jobs.cluster`.
"""

from __future__ import annotations

import os
import shlex
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sphdist.errors import InputNotFoundError, ParameterError, Text, option
from sphdist.io import absolute, anchored, is_remote, location

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["task_path", "check_workers_see"]

#: A remedy for a local path that the workers do not see as the driver does; "{name}" is
#: replaced by the path's name (not with str.format: the option marker is JSON, braces included).
def _shared_remedy(name: str) -> Text:
    """Where to put ``name`` so that this machine and every worker reach it."""
    return (
        "put it where this machine and every worker reach the same files: an object store "
        f"(e.g. s3://BUCKET/{name}, with AWS_ENDPOINT_URL and the credentials set for the "
        "workers too) or a filesystem mounted at the same path on every node; or leave out "
        + option("address") + " to run on this machine"
    )


def task_path(path: str | os.PathLike[str] | None, *, output: bool = False) -> Any:
    """``path`` as every task of a job is given it: absolute, or a URL, made so once here.

    A task runs in a worker process whose working directory is its own (on another machine,
    or where ``dask worker`` was started), so a relative path would name another file there.
    Jobs call this at their entry, on the driver, before any task is built.

    Parameters
    ----------
    path : path-like or None
        A local path (relative or absolute) or a URL (``s3://bucket/model.zarr``).
    output : bool, default False
        ``path`` is a store to write: one that names no file (``.``, ``..``, ``dir/..``) is
        returned as it is, for the writer to refuse in its own words, instead of becoming
        the name of the working directory (or of its parent).

    Returns
    -------
    pathlib.Path or upath.UPath or None
        The local path resolved against this process' working directory (an input's
        symbolic links resolved; an output's kept, and its ``..`` too, for the OS to resolve
        after the links before them: :func:`sphdist.io.anchored`), or the URL unchanged; None
        for None.

    Raises
    ------
    ValueError
        As :func:`sphdist.io.location` (an empty path, an unknown protocol).

    Examples
    --------
    >>> import os
    >>> str(task_path("model.zarr")) == os.path.join(os.getcwd(), "model.zarr")
    True
    >>> str(task_path("s3://bucket/model.zarr"))
    's3://bucket/model.zarr'
    """
    if path is None:
        return None
    given = location(path)
    if is_remote(given) or (output and given.name in ("", ".", "..")):
        return given
    if output:  # a link stays a link: the writer refuses to replace it, never writes through;
        return location(anchored(given))  # its `..` are the OS's, after the links before them
    return location(absolute(given))


def _signature(path: str) -> tuple[int, int] | None:
    """(size, mtime in ns) of the file, or of a zarr store's ``zarr.json``; None if absent."""
    target = os.path.join(path, "zarr.json") if os.path.isdir(path) else path
    try:
        stat = os.stat(target)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def _sees(marker: str) -> bool:
    return os.path.exists(marker)


def check_workers_see(
    client: Client | None, *, inputs: tuple[Any, ...] = (), outputs: tuple[Any, ...] = (),
) -> None:
    """Refuse, before any task runs, local paths that the workers do not see as this process.

    The tasks of a job read its inputs and write its outputs themselves, so on a cluster
    whose workers share no filesystem with the driver (separate machines, containers) a local
    path names nothing, or another file, in their processes. URLs are not checked (every
    party opens the same object store).

    Parameters
    ----------
    client : distributed.Client or None
        The cluster; None (dask's threads in this process) checks nothing.
    inputs : tuple of path-like
        Stores the tasks read: every worker must see the same file (the size and modification
        time of the store's ``zarr.json``, or of the file).
    outputs : tuple of path-like
        Stores the tasks write: every worker must see the directory that will hold it (a
        marker file written there by this process for the check, then removed).

    Raises
    ------
    InputNotFoundError
        If a worker does not see an input as this process does; naming the path, the worker
        and the remedy (an object store, or a filesystem shared at the same path).
    ParameterError
        If a worker does not see the folder of an output; the same.
    """
    if client is None:
        return
    for path in inputs:
        if path is None or is_remote(path):
            continue
        path = str(path)
        mine = _signature(path)
        seen = client.run(_signature, path)
        for worker, theirs in seen.items():
            if tuple(theirs or ()) != tuple(mine or ()):
                how = "does not find it" if theirs is None else "finds another file there"
                name = Path(path).name
                raise InputNotFoundError(
                    f"{path}: worker {worker} {how}: the workers do not share this machine's "
                    "filesystem, and the tasks read the input themselves. To resolve this, "
                    + _shared_remedy(name) + f" (e.g. `aws s3 cp --recursive "
                    f"{shlex.quote(path)} s3://BUCKET/{shlex.quote(name)}`, then pass that URL)."
                )
    for path in outputs:
        if path is None or is_remote(path):
            continue
        folder = Path(path).parent
        marker = folder / f".{Path(path).name}.sphdist-shared-{uuid.uuid4().hex}"
        try:
            marker.touch()
        except OSError:
            continue  # the writer reports an unwritable output in its own words
        try:
            seen = client.run(_sees, str(marker))
        finally:
            marker.unlink(missing_ok=True)
        for worker, ok in seen.items():
            if not ok:
                raise ParameterError(
                    f"{path}: worker {worker} does not see the folder {folder} of this "
                    "machine: the workers do not share its filesystem, and the tasks write "
                    "the output themselves (nothing was written). To resolve this, "
                    + _shared_remedy(Path(path).name) + "."
                )
