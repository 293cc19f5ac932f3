"""Stores made by the CLI for a test module: each command run as a user types it, in a directory."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from sphdist.cli import main


def cli(*args: Any) -> Result:
    """``sphdist --quiet ARGS`` in this process; its result."""
    return CliRunner().invoke(main, ["--quiet", *map(str, args)])


def cli_ok(*args: Any) -> Result:
    """``sphdist --quiet ARGS`` in this process; its result, asserted to exit 0."""
    result = cli(*args)
    assert result.exit_code == 0, result.output
    return result


def refused(result: Result, *needles: str) -> str:
    """The one ``Error:`` line of a command that exited 1, asserted to hold every needle.

    No traceback, nothing else on stderr. The jobs that run tasks on a cluster name local
    paths absolute (made so on the driver, issue 29 item 4): a needle written relative to the
    working directory matches either.
    """
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    relative = lines[0].replace(os.getcwd() + os.sep, "")
    for needle in needles:
        assert needle in lines[0] or needle in relative, lines[0]
    return lines[0]


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[Path]:
    """``path`` as the working directory for the block (relative paths, as a user types them)."""
    cwd = os.getcwd()
    os.chdir(path)
    try:
        yield path
    finally:
        os.chdir(cwd)


def user_stores(source: str, *, n_docs: int, vocab_size: int) -> None:
    """In the working directory: ``source`` (synthetic JSON Lines, 2 topics), its corpus
    ``c.zarr``, model ``m.zarr`` (r = 2, 3 iterations), embedding ``e.zarr`` and index
    ``i.zarr``, each made by the command a user types."""
    cli_ok("synth", "--n-docs", n_docs, "--n-topics", 2, "--vocab-size", vocab_size,
           "--format", "jsonl", "-o", source)
    cli_ok("ingest", source, "-o", "c.zarr")
    cli_ok("fit", "-i", "c.zarr", "-o", "m.zarr", "-r", 2, "--max-iter", 3)
    cli_ok("transform", "-m", "m.zarr", "-i", "c.zarr", "-o", "e.zarr")
    cli_ok("index", "-m", "m.zarr", "-o", "i.zarr")
