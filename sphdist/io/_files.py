"""Single files (exports, reports, figures, a source's arrays): write atomically, read, remove.

One module for every operation on one file, local or in an object store. A local path is
handled with the operating system's calls (a flushed temporary renamed into place, a
memory-mapped ``.npy``); a URL (``s3://``, ``memory://``, ``file://``) through fsspec (one PUT,
or a multipart upload completed at close: readers never see a part of it). Versioned stores
(a corpus, a model...) are :mod:`sphdist.io._store`'s.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sphdist.io._fs import filesystem, fsync_directory, is_remote, location
from sphdist.io._posix import PosixTarget

__all__ = ["atomic_path", "staged_file", "publish_file", "open_file", "load_array", "remove"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Write one file atomically, holding no lock: yield a temporary path, then publish it.

    For a file no other writer can be writing (a pipeline's report). A writer of a sphdist
    output holds it and writes through :meth:`sphdist.io.Output.file` instead, whose commit
    is :meth:`sphdist.io.Output.commit` (the hold checked just before it).

    The caller writes the complete file to the yielded path (by any means: ``savefig``,
    ``np.save``, ``to_parquet``, ``open``); on normal exit it is published at ``path``
    (:func:`publish_file`), so a reader sees the previous complete file or the new complete
    file, never a part. If the block raises, the temporary is removed, ``path`` is left as it
    was, and the exception propagates.

    Parameters
    ----------
    path : path-like
        The file to write; its parent directory must exist. Whatever is there is replaced.

    Yields
    ------
    pathlib.Path
        As :func:`staged_file`.

    Raises
    ------
    OSError
        If the block wrote nothing at the yielded path, or the rename (upload) fails.
    """
    with staged_file(path) as tmp:
        yield tmp
        publish_file(tmp, path)


@contextlib.contextmanager
def staged_file(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary file to write ``path``'s next version in; removed when the block ends.

    Publishing it (:func:`publish_file`) is the caller's, inside the block: after the block
    the temporary is gone whether it was published or not (a failure leaves ``path`` as it
    was).

    Parameters
    ----------
    path : path-like
        The file to be written (local, or a URL).

    Yields
    ------
    pathlib.Path
        Locally ``<dir>/.<name>.tmp-<random><suffix>``: same directory (hence the same
        filesystem) and same suffix as ``path``, so writers that infer the format from the
        suffix still do. For a URL, a local file with the same suffix in a temporary
        directory.
    """
    if is_remote(path):
        with tempfile.TemporaryDirectory(prefix="sphdist-upload-") as folder:
            yield Path(folder) / f"part{location(path).suffix}"
        return
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:12]}{target.suffix}")
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)  # published (renamed away), or not to be


def publish_file(tmp: Path, path: str | os.PathLike[str]) -> None:
    """Make the complete file ``tmp`` (from :func:`staged_file`) the file at ``path``, atomically.

    A local file is flushed to disk and renamed onto ``path`` with :func:`os.replace` (atomic
    on POSIX), and the directory entry is flushed; a local directory at ``path`` (an
    overwrite) is replaced through a commit of :class:`~sphdist.io._posix.PosixTarget`. A URL
    is uploaded in one PUT (or a multipart upload completed at its end).

    Parameters
    ----------
    tmp : pathlib.Path
        The written temporary.
    path : path-like
        The file it becomes.

    Raises
    ------
    OSError
        If nothing was written at ``tmp``, or the rename (upload) fails; ``path`` is then as
        it was.
    """
    if is_remote(path):
        if not tmp.exists():
            raise OSError(f"{path}: nothing was written to upload")
        fs, inner = filesystem(location(path))
        fs.put_file(str(tmp), inner)
        return
    target = Path(path)
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    if target.is_dir() and not target.is_symlink():
        PosixTarget(target).commit(tmp)  # a file replacing a directory (an overwrite)
    else:
        os.replace(tmp, target)
    fsync_directory(target.parent)


def open_file(path: str | os.PathLike[str], mode: str = "rb") -> Any:
    """A binary file object on ``path``: the builtin ``open``, or fsspec's for a URL.

    Writing to a URL uploads the file when it is closed (one PUT, or a multipart upload
    completed at close: readers never see a part of it).

    Parameters
    ----------
    path : path-like
    mode : str, default "rb"

    Returns
    -------
    file object
    """
    if not is_remote(path):
        return open(path, mode)
    import fsspec

    return fsspec.open(str(location(path)), mode).open()


def load_array(path: str | os.PathLike[str]) -> Any:
    """``np.load`` of a ``.npy``/``.npz`` file: memory-mapped locally, read whole from a URL.

    Parameters
    ----------
    path : path-like

    Returns
    -------
    numpy.ndarray or numpy.lib.npyio.NpzFile
    """
    import numpy as np

    if is_remote(path):
        with open_file(path) as f:
            return np.load(io.BytesIO(f.read()))
    if str(path).endswith(".npy"):
        return np.load(path, mmap_mode="r")
    return np.load(path)


def remove(path: str | os.PathLike[str]) -> None:
    """Delete one file (local or in an object store); a missing one is not an error.

    Parameters
    ----------
    path : path-like
    """
    if not is_remote(path):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        return
    fs, inner = filesystem(location(path))
    with contextlib.suppress(FileNotFoundError):
        fs.rm_file(inner)

