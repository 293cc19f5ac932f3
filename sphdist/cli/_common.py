"""Pieces shared by the command modules: error handling, logging, parameter types.

Errors a user can cause (:class:`sphdist.errors.SphdistError`, and OS errors such as a full or
read-only disk) are printed as one line, ``Error: ...``, with exit status 1 and no traceback
unless ``--debug`` is given; bad option values are usage errors with exit status 2.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import click
import numpy as np

from ..errors import SphdistError

logger = logging.getLogger("sphdist")

STEP_MODES = ("exact", "palm", "theory")


class StepSize(click.ParamType):
    """A step size: a non-negative number or one of the modes."""

    name = "FLOAT|exact|palm|theory"

    def convert(self, value: Any, param: Any, ctx: Any) -> float | str:
        if isinstance(value, (int, float)) or value in STEP_MODES:
            return value
        try:
            number = float(value)
        except ValueError:
            self.fail(f"{value!r} is neither a number nor one of {', '.join(STEP_MODES)}.")
        if not np.isfinite(number) or number < 0:
            self.fail(f"{value!r} must be a finite number >= 0.")
        return number


class Group(click.Group):
    """Turns sphdist errors into one-line messages (exit 1) unless --debug."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (SphdistError, OSError) as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            message = str(exc) if isinstance(exc, SphdistError) else f"{type(exc).__name__}: {exc}"
            raise click.ClickException(message) from None


def setup_logging(level: str, quiet: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.handlers[:] = [handler]
    logger.setLevel(logging.WARNING if quiet else getattr(logging, level.upper()))
    logger.propagate = False


