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

__all__ = ["atomic_path", "exists", "open_file", "load_array", "remove"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Write one file atomically: yield a temporary path, then publish it at ``path``.

    The caller writes the complete file to the yielded path (by any means: ``savefig``,
    ``np.save``, ``to_parquet``, ``open``). On normal exit a local file is flushed to disk and
    renamed onto ``path`` with :func:`os.replace` (atomic on POSIX), and the directory entry
    is flushed; a URL is uploaded in one PUT. A reader therefore sees the previous complete
    file or the new complete file, never a part. A local directory at ``path`` is replaced
    through a commit. If the block raises, the temporary is removed, ``path`` is left as it
    was, and the exception propagates.

    Parameters
    ----------
    path : path-like
        The file to write; its parent directory must exist. Whatever is there is replaced.

    Yields
    ------
    pathlib.Path
        Locally ``<dir>/.<name>.tmp-<random><suffix>``: same directory (hence the same
        filesystem) and same suffix as ``path``, so writers that infer the format from the
        suffix still do.

    Raises
    ------
    OSError
        If the block wrote nothing at the yielded path, or the rename fails.
    """
    if is_remote(path):
        with _uploaded(location(path)) as tmp:
            yield tmp
        return
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:12]}{target.suffix}")
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        if target.is_dir() and not target.is_symlink():
            from sphdist.io._posix import PosixTarget

            PosixTarget(target).commit(tmp)  # a file replacing a directory (an overwrite)
        else:
            os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(target.parent)


@contextlib.contextmanager
def _uploaded(path: Path) -> Iterator[Path]:
    """Yield a local temporary file; upload it to ``path`` in one PUT when the block ends."""
    with tempfile.TemporaryDirectory(prefix="sphdist-upload-") as folder:
        tmp = Path(folder) / f"part{path.suffix}"
        yield tmp
        if not tmp.exists():
            raise OSError(f"{path}: nothing was written to upload")
        fs, inner = filesystem(path)
        fs.put_file(str(tmp), inner)


def exists(path: str | os.PathLike[str]) -> bool:
    """Whether anything is at ``path`` now (an object store's listing cache not trusted).

    Parameters
    ----------
    path : path-like

    Returns
    -------
    bool
    """
    if not is_remote(path):
        return os.path.exists(path)
    fs, inner = filesystem(location(path))
    fs.invalidate_cache(inner)
    return bool(fs.exists(inner))


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

