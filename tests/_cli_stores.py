"""Stores made by the CLI for a test module: each command run as a user types it, in a directory."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from sphdist.cli import main


def cli_ok(*args: Any) -> Result:
    """``sphdist --quiet ARGS`` in this process; its result, asserted to exit 0."""
    result = CliRunner().invoke(main, ["--quiet", *map(str, args)])
    assert result.exit_code == 0, result.output
    return result


@contextlib.contextmanager
def working_directory(path: Path) -> Iterator[Path]:
    """``path`` as the working directory for the block (relative paths, as a user types them)."""
    cwd = os.getcwd()
    os.chdir(path)
    try:
        yield path
    finally:
        os.chdir(cwd)
