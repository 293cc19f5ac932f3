"""Progress of long-running work: one implementation, on tqdm.

Every progress display of sphdist (ingest passes, synth, fit iterations, transform and export
chunks) comes from :func:`progress`: a tqdm bar on stderr, or, where no terminal shows a bar
(batch jobs, CI logs), INFO lines on the ``sphdist`` logger at every tenth of the total.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from typing import Any

from tqdm import tqdm

__all__ = ["progress", "PROGRESS_MODES"]

logger = logging.getLogger("sphdist")

#: ``True``: a tqdm bar on stderr; ``False``: nothing; ``"log"``: INFO lines on the logger.
PROGRESS_MODES = (True, False, "log")


class _LogLines(tqdm):
    """A tqdm whose display is an INFO line at every tenth of ``total`` (each update if unknown).

    Keeps tqdm's counters, rate and ``postfix``; only the drawing differs, so the callers treat
    both modes alike.
    """

    def __init__(self, *args: Any, **kwargs: Any):
        self._tenths = 1  # the next tenth of ``total`` to log at
        self._logged = None  # ``n`` at the last line
        self._start = time.perf_counter()
        kwargs.update(disable=False, file=_NullStream(), mininterval=0, miniters=1)
        super().__init__(*args, **kwargs)

    def update(self, n: float | None = 1) -> bool | None:
        out = super().update(n)
        if self.total is None or 10 * self.n >= self._tenths * self.total:
            self._log()
            while self.total and self._tenths * self.total <= 10 * self.n:
                self._tenths += 1
        return out

    def close(self) -> None:
        if not self.disable and self._logged != self.n:
            self._log()
        super().close()

    def _log(self) -> None:
        self._logged = self.n
        of = f"/{self.total:g}" if self.total is not None else ""
        postfix = f", {self.postfix}" if self.postfix else ""
        logger.info("%s: %g%s %ss, %.0f s%s", self.desc, self.n, of, self.unit,
                    time.perf_counter() - self._start, postfix)


class _NullStream:
    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass


def progress(
    total: int | float | None, desc: str, *, unit: str = "doc", mode: bool | str = True,
    **kwargs: Any,
) -> tqdm:
    """A progress counter: a tqdm bar, log lines, or nothing.

    Parameters
    ----------
    total : int, float or None
        Units of work expected (None: unknown).
    desc : str
        What is counted, shown first ("pass 1/2", "fit").
    unit : str, default "doc"
        Name of one unit of work ("doc", "chunk", "it").
    mode : {True, False, "log"}, default True
        ``True``: a tqdm bar on stderr; ``False``: disabled (updates cost nothing);
        ``"log"``: one INFO line on the ``sphdist`` logger at every tenth of ``total`` and at
        the end.
    **kwargs
        Passed to :class:`tqdm.tqdm` (``bar_format``, ``initial``, ...).

    Returns
    -------
    tqdm.tqdm
        Use as a context manager or call ``close()``; ``update(n)`` counts work done.

    Raises
    ------
    ValueError
        If ``mode`` is not one of ``PROGRESS_MODES``.
    """
    if mode == "log":
        return _LogLines(total=total, desc=desc, unit=unit, **kwargs)
    if mode not in (True, False):
        raise ValueError(f"progress mode must be one of {PROGRESS_MODES}, got {mode!r}.")
    return tqdm(total=total, desc=desc, unit=unit, disable=not mode, file=sys.stderr,
                **_shape(sys.stderr) | kwargs)


#: The bar's width and the terminal's height where a terminal reports 0 for them.
FALLBACK_SHAPE = (80, 24)


def _shape(stream: Any) -> dict[str, Any]:
    """The geometry options of a tqdm bar on ``stream``: the terminal's size, never 0.

    A terminal that reports 0 columns or 0 rows (a pty whose size was never set, as under
    ``script`` or some CI runners) would make tqdm draw nothing (it takes the size less one,
    and a bar at or below the last row is hidden): then a fixed size, :data:`FALLBACK_SHAPE`,
    for what is 0.
    """
    try:
        columns, lines = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):  # not a terminal: tqdm's own defaults
        return {"dynamic_ncols": True}
    if columns > 0 and lines > 0:
        return {"dynamic_ncols": True}
    return {"ncols": columns if columns > 0 else FALLBACK_SHAPE[0],
            "nrows": lines if lines > 0 else FALLBACK_SHAPE[1]}
