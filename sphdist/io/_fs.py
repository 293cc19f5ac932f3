"""Where sphdist stores live: a local path or an fsspec URL (``s3://bucket/corpus.zarr``).

Every path a user gives (a corpus, a model, an embedding, an export, an ingest source) goes
through :func:`location`: a local path becomes a :class:`pathlib.Path`, exactly as before; a URL
with a protocol (``s3://``, ``gs://``, ``file://``, ``memory://``) becomes a
:class:`upath.UPath`, which has the same interface (``name``, ``parent``, ``/``, ``exists``,
``iterdir``) over the fsspec filesystem of that protocol. zarr opens the same URLs through its
own fsspec store, so the workers read and write chunks in the object store directly.

Credentials and endpoints come from where fsspec and botocore read them: the ``AWS_*``
environment variables (``AWS_ENDPOINT_URL`` included), fsspec's configuration files and
``FSSPEC_<PROTOCOL>_<KEY>`` variables, and the storage options of the command line
(:func:`set_storage_options`, :func:`storage_option_call`), which adds to fsspec's
configuration in this process and, through :func:`storage_options`, in every worker of the
cluster the job runs on.

References
----------
.. [1] fsspec, "Configuration",
   https://filesystem-spec.readthedocs.io/en/latest/features.html#configuration
.. [2] universal_pathlib, https://github.com/fsspec/universal_pathlib
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sphdist.errors import ParameterError, SphdistError, StorageError, option, words_for

__all__ = [
    "location", "is_remote", "exists", "absolute", "anchored", "protocol_of", "filesystem",
    "set_storage_options", "storage_option_call",
    "storage_options", "apply_storage_options", "parse_storage_option", "storage_error",
    "is_storage_failure", "listing_command", "removal_command", "join", "glob",
    "replace_file", "fsync_directory", "fsync_tree", "local_path",
]

if TYPE_CHECKING:
    import fsspec

_URL = re.compile(r"^(?P<protocol>[A-Za-z][A-Za-z0-9+.-]*)://")

#: Options given with --storage-option in this process: protocol -> {key: value}.
_GIVEN: dict[str, dict[str, Any]] = {}


def protocol_of(path: str | os.PathLike[str]) -> str | None:
    """The URL protocol of ``path`` (``"s3"``), or None for a local path.

    >>> protocol_of("s3://bucket/corpus.zarr"), protocol_of("/data/corpus.zarr")
    ('s3', None)
    """
    if isinstance(path, Path) and not hasattr(path, "protocol"):
        return None
    found = _URL.match(os.fspath(path) if not hasattr(path, "protocol") else str(path))
    return found.group("protocol").lower() if found else None


def local_path(path: str | os.PathLike[str]) -> str | None:
    """The local filesystem path behind ``path``, or None if it lives in an object store.

    The one test of "is this on local disk?": a local path is itself, a ``file://`` (or
    ``local://``) URL is the path it names; any other URL (``s3://``, ``memory://``) is None.
    Stores use it for their capabilities (a rename that is atomic, a flushed file, an ``flock``).

    >>> local_path("/data/corpus.zarr"), local_path("file:///data/c.zarr"), local_path("s3://b/c")
    ('/data/corpus.zarr', '/data/c.zarr', None)
    """
    protocol = protocol_of(path)
    if protocol is None:
        return os.fspath(path)
    if protocol in ("file", "local"):
        return filesystem(path)[1]
    return None


def is_remote(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a URL (any fsspec protocol) rather than a local path.

    ``file://`` URLs count as URLs: they are written with the object-store commit protocol
    (:mod:`sphdist.io._object`), which is how that protocol is exercised on local disk.
    """
    return protocol_of(path) is not None


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


def location(path: str | os.PathLike[str]) -> Path:
    """A path-like handle on ``path``: :class:`pathlib.Path` locally, :class:`upath.UPath` for URLs.

    Parameters
    ----------
    path : str or path-like
        A local path, or a URL such as ``s3://bucket/model.zarr``.

    Returns
    -------
    pathlib.Path or upath.UPath
        ``str()`` of it is the path or URL as the user would write it, so messages and
        remedies name it unchanged.

    Raises
    ------
    ValueError
        If ``path`` is the empty string (``Path("")`` would be the working directory), or
        the protocol is not known to fsspec, or its package is not installed (for ``s3://``:
        ``pip install s3fs``).
    """
    if hasattr(path, "protocol") and hasattr(path, "storage_options"):  # already a UPath
        return path  # type: ignore[return-value]
    if isinstance(path, str) and not path:
        raise ValueError(
            "the path is empty: it names no file or directory. To resolve this, name one, "
            "e.g. corpus.zarr or model.zarr"
        )
    protocol = protocol_of(path)
    if protocol is None:
        return Path(path)
    import fsspec.config  # with asyncio, about 60 ms: for a URL, never a local path
    from upath import UPath

    if protocol in ("file", "local"):  # zarr writes file:// through fsspec: parents on demand
        fsspec.config.conf.setdefault(protocol, {}).setdefault("auto_mkdir", True)
    try:
        fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError) as exc:
        raise ValueError(
            f"{path}: cannot open {protocol}:// locations ({exc}). To resolve this, install "
            f"the fsspec implementation, e.g. `pip install 'sphdist[s3]'` for s3://."
        ) from None
    return UPath(str(path))


def filesystem(path: str | os.PathLike[str]) -> tuple[fsspec.AbstractFileSystem, str]:
    """The fsspec filesystem of ``path`` and the path within it (with the configured options)."""
    import fsspec.core

    fs, inner = fsspec.core.url_to_fs(str(path))
    return fs, inner


def absolute(path: str | os.PathLike[str]) -> str:
    """``path`` as recorded in a model or embedding: resolved locally, a URL as it is."""
    if is_remote(path):
        return str(location(path))
    return str(Path(path).resolve())


def anchored(path: Any) -> Any:
    """A local ``path`` made absolute against the working directory (``..`` kept); a URL as is.

    The place the OS opens, as a task in another working directory is given it:
    :func:`os.path.abspath` collapses ``lnk/..`` to nothing before the link is followed,
    which names another place when ``lnk`` is a symbolic link (to ``deep/a/b``,
    ``lnk/../../../x`` is ``x``, not ``../../x``). Symbolic links are not resolved either (an
    output that is one stays one, for the writer to refuse).

    >>> import os
    >>> str(anchored("lnk/../x")) == os.path.join(os.getcwd(), "lnk", "..", "x")
    True
    >>> anchored("s3://bucket/c.zarr")
    's3://bucket/c.zarr'
    """
    return path if is_remote(path) else Path(os.getcwd(), path)


#: Packages whose exceptions are an object store's failures (not a bug of the caller).
_STORE_PACKAGES = ("botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs", "adlfs", "fsspec")


def is_storage_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is an I/O failure: an :class:`OSError`, or an object-store client's error."""
    if isinstance(exc, OSError):
        return True
    return any(type(c).__module__.split(".")[0] in _STORE_PACKAGES
               for c in (exc, exc.__cause__, exc.__context__) if c is not None)


def listing_command(path: str | os.PathLike[str]) -> str:
    """A shell command that lists what is in the folder (or URL prefix) ``path``.

    For the remedies that say "check the path": ``ls`` reads local paths only, so a URL gets
    the AWS command line (``s3://``) or, for any other protocol, fsspec in this interpreter.
    Storage options are not repeated in it (they may hold secrets); the ``AWS_*`` variables
    still apply.

    Parameters
    ----------
    path : path-like
        A local folder or a URL.

    Returns
    -------
    str
        The command, quoted for a POSIX shell.

    Examples
    --------
    >>> listing_command("/data/corpora"), listing_command("s3://bucket/corpora")
    ('ls /data/corpora', 'aws s3 ls s3://bucket/corpora/')
    """
    return _shell_command(path, "ls {}", "aws s3 ls {}/",
                          "print(*{fs}.ls({path}, detail=False), sep=chr(10))")


def removal_command(path: str | os.PathLike[str], *, directory: bool = True) -> str:
    """A shell command that removes ``path`` (a folder or prefix with ``directory``), by hand.

    For the messages that refuse to replace something: the user decides, and runs it.

    Parameters
    ----------
    path : path-like
        A local path or a URL.
    directory : bool, default True
        Remove a folder (or every object under a prefix), not one file.

    Returns
    -------
    str
        The command, quoted for a POSIX shell.

    Examples
    --------
    >>> removal_command("/data/m.zarr"), removal_command("s3://bkt/m.zarr")
    ('rm -r /data/m.zarr', 'aws s3 rm --recursive s3://bkt/m.zarr')
    >>> removal_command("out.parquet", directory=False)
    'rm out.parquet'
    """
    return _shell_command(path, f"rm {'-r ' if directory else ''}{{}}",
                          f"aws s3 rm {'--recursive ' if directory else ''}{{}}",
                          f"{{fs}}.rm({{path}}, recursive={directory})")


def _shell_command(path: str | os.PathLike[str], local: str, s3: str, fsspec_call: str) -> str:
    """A shell command on ``path``: ``local``, ``s3`` or ``fsspec_call``, by where it lives.

    ``local`` for a path on local disk, ``s3`` for an ``s3://`` URL, ``fsspec_call`` for any
    other URL, with ``path`` put in, quoted for a POSIX shell: the one switch behind the
    hand-run remedies. ``local`` and ``s3`` take the path at
    ``{}``; ``fsspec_call`` is Python code run in this interpreter, with ``{fs}`` the
    protocol's filesystem and ``{path}`` the path in it.
    """
    import json  # its strings are Python literals in double quotes: no shell escapes
    import shlex
    import sys

    protocol = protocol_of(path)
    if protocol is None or protocol == "file":
        return local.format(shlex.quote(os.fspath(path) if protocol is None
                                        else location(path).path))
    if protocol in ("s3", "s3a"):
        return s3.format(str(path).rstrip("/"))
    code = "import fsspec; " + fsspec_call.format(
        fs=f"fsspec.filesystem({json.dumps(protocol)})", path=json.dumps(location(path).path))
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


def storage_error(path: str | os.PathLike[str], exc: BaseException) -> BaseException:
    """The error to raise for ``exc``, raised by the object store while reading or writing ``path``.

    Local paths and sphdist's own errors are returned as they are. For a URL, an
    :class:`~sphdist.errors.StorageError` naming ``path``, what the store said, and a remedy: a
    missing bucket (create it, or check the URL and ``AWS_ENDPOINT_URL``), refused credentials
    (``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, or the storage options), no
    credentials at all (where they are read, and how to give them), or a failing
    service (check the endpoint, then rerun; a fit continues with ``resume``).

    Parameters
    ----------
    path : path-like
        What was being read or written.
    exc : BaseException
        What the store raised.

    Returns
    -------
    BaseException
    """
    if isinstance(exc, SphdistError) or not is_remote(path) or not is_storage_failure(exc):
        return exc
    protocol = protocol_of(path)
    said = f"{type(exc).__name__}: {exc}"
    netloc = str(path).split("://", 1)[1].split("/", 1)[0]
    keys = option("storage_option", ["key=...", "secret=..."])
    if _no_credentials(exc):
        remedy = ("give credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or "
                  "AWS_PROFILE, a profile of ~/.aws/credentials or ~/.aws/config), or pass `"
                  + keys + "` (or `" + option("storage_option", ["anon=true"])
                  + "` for a public bucket)")
        return StorageError(
            (f"{path}: no credentials were found for {protocol}://{netloc} (botocore reads "
             "them from the AWS_* variables, ~/.aws/credentials and ~/.aws/config, "
             + option("storage_option") + ", and an instance's role). To resolve this, ")
            + remedy + ".")
    if "bucket" in str(exc).lower() and isinstance(exc, FileNotFoundError):
        remedy = (f"create the bucket (`aws s3 mb {protocol}://{netloc}`), or check the URL and "
                  "the endpoint (AWS_ENDPOINT_URL)")
    elif isinstance(exc, PermissionError):
        remedy = ("check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or `" + keys
                  + f"`) and that they may read and write {protocol}://{netloc}")
    else:
        remedy = ("check that the store answers at its endpoint (AWS_ENDPOINT_URL), then run "
                  "the command again (a fit continues from its last checkpoint with "
                  + option("resume", True) + ")")
    return StorageError(f"{path}: the object store refused or failed a request ({said}). To "
                        "resolve this, " + remedy + ".")


def _no_credentials(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is botocore's "Unable to locate credentials"."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        c = stack.pop()
        if c is None or id(c) in seen:
            continue
        seen.add(id(c))
        if (type(c).__name__ in ("NoCredentialsError", "PartialCredentialsError")
                or "unable to locate credentials" in str(c).lower()):
            return True
        stack += [c.__cause__, c.__context__]
    return False


def join(path: str | os.PathLike[str], name: str) -> str:
    """``path/name`` for a local path or a URL (never collapsing ``s3://``)."""
    if is_remote(path):
        return str(path).rstrip("/") + "/" + name
    return os.path.join(path, name)


def replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to the local file ``path`` atomically: a flushed temporary sibling, renamed.

    A reader sees the previous complete file or the new one, never a part; the directory entry
    is flushed too, so the rename survives a power loss.
    """
    import uuid

    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:12]}{path.suffix}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Flush a directory entry (a rename into it) to disk, where the platform allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike[str]) -> None:
    """Flush every file and directory of a local tree to disk (``fsync(2)``), files first.

    Parameters
    ----------
    root : path-like
        A complete staging tree.

    Notes
    -----
    Without it a rename can reach the disk before the data it publishes (ext4's and XFS's
    delayed allocation), and a power loss then leaves a committed tree of empty or torn
    files; a killed process alone cannot cause that, since the kernel's page cache survives
    it.
    """
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(Path(directory))


def glob(pattern: str) -> list[str]:
    """The URLs matching a URL ``pattern`` (``s3://bucket/docs/*.jsonl.gz``), sorted."""
    fs, inner = filesystem(pattern)
    protocol = protocol_of(pattern)
    fs.invalidate_cache()
    return sorted(f"{protocol}://{match}" for match in fs.glob(inner))


def parse_storage_option(text: str) -> tuple[str, str, Any]:
    """``[PROTOCOL.]KEY=VALUE`` as (protocol, key, value); the protocol defaults to ``s3``.

    Values are read as JSON where they parse (``true``, ``3``, ``{"a": 1}``), else as strings.

    >>> parse_storage_option("endpoint_url=http://127.0.0.1:9000")
    ('s3', 'endpoint_url', 'http://127.0.0.1:9000')
    >>> parse_storage_option("gcs.token=anon")
    ('gcs', 'token', 'anon')

    Raises
    ------
    ParameterError
        If there is no ``=`` or no key (a ``ValueError``).
    """
    import json

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ParameterError(
            option("storage_option", text) + ": expected KEY=VALUE, for example `"
            + option("storage_option", ['endpoint_url=http://127.0.0.1:9000']) + "`."
        )
    protocol, dot, name = key.strip().rpartition(".")
    try:
        parsed: Any = json.loads(value)
    except ValueError:
        parsed = value
    return (protocol if dot else "s3"), name, parsed


@words_for(option="storage_option")
def storage_option_call(value: Any = None) -> str:
    """The Python call that sets storage options given as the command line writes them.

    What :class:`sphdist.errors.PythonForm` words the ``sphdist`` group's storage option
    with (registered with :func:`sphdist.errors.words_for`).

    Parameters
    ----------
    value : str or list of str, optional
        ``[PROTOCOL.]KEY=VALUE`` texts; None: the function alone.

    Returns
    -------
    str

    Examples
    --------
    >>> storage_option_call(["key=...", "secret=..."])
    "sphdist.io.set_storage_options({'s3': {'key': '...', 'secret': '...'}})"
    >>> storage_option_call()
    'sphdist.io.set_storage_options'
    """
    if value is None:
        return "sphdist.io.set_storage_options"
    options: dict[str, dict[str, Any]] = {}
    for text in [value] if isinstance(value, str) else value:
        key, sep, given = str(text).partition("=")
        protocol, dot, name = key.strip().rpartition(".")
        if not sep or not name:
            return f"sphdist.io.set_storage_options({text!r})"
        options.setdefault(protocol if dot else "s3", {})[name] = given
    return f"sphdist.io.set_storage_options({options!r})"


def set_storage_options(options: dict[str, dict[str, Any]]) -> None:
    """Add ``{protocol: {key: value}}`` to fsspec's configuration in this process.

    Every filesystem made afterwards (by sphdist, zarr or dask) uses them; cached instances made
    before are dropped so none keeps the old options. :func:`storage_options` returns what was
    given, for the workers (:func:`apply_storage_options`).
    """
    import fsspec.config

    for protocol, values in options.items():
        _GIVEN.setdefault(protocol, {}).update(values)
        fsspec.config.conf.setdefault(protocol, {}).update(values)
        try:
            fsspec.get_filesystem_class(protocol).clear_instance_cache()
        except (ImportError, ValueError):
            pass


def storage_options() -> dict[str, dict[str, Any]]:
    """The options given with :func:`set_storage_options` in this process (a copy)."""
    return {protocol: dict(values) for protocol, values in _GIVEN.items()}


def apply_storage_options(options: dict[str, dict[str, Any]]) -> None:
    """Apply options from :func:`storage_options` in another process (a worker)."""
    set_storage_options(options)
