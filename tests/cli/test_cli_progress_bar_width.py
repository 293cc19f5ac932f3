"""The fit's progress bar fits an 80-column terminal, its ETA whole (issue 43 item 7g)."""

import fcntl
import os
import pty
import re
import struct
import sys
import termios
from types import SimpleNamespace

import pytest

import sphdist.cli.fit as fit_cli
from sphdist.cli.fit import FitProgress


def _read_all(fd: int) -> bytes:
    import select

    out = b""
    while select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out


@pytest.mark.parametrize("max_iter,per_it,elapsed", [
    (100, 0.31, 12),  # a small fit
    (10_000, 123.45, 5025),  # the widest numbers: long iterations, an hour and more gone
])
def test_the_fit_bar_fits_80_columns_ending_with_a_whole_eta(monkeypatch, max_iter, per_it,
                                                             elapsed):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    stream = os.fdopen(slave, "w", encoding="utf-8", closefd=True)
    clock = [1000.0]
    monkeypatch.setattr(fit_cli, "_now", lambda: clock[0])
    monkeypatch.setattr(sys, "stderr", stream)
    progress = FitProgress(max_iter, bar=True, tol=1e-12)
    objective = [1.23456789e6]
    try:
        for k in range(5):
            if k:
                objective.append(objective[-1] * (1 - 10.0 ** -(k + 2)))  # slow convergence
                clock[0] += per_it
            if progress.bar is not None:
                progress.bar.start_t -= elapsed / 5  # the bar's own clock: the time gone
            progress(SimpleNamespace(iteration=max_iter - 10 + k,  # a resumed fit
                                     objective=list(objective),
                                     relative_change=abs(objective[-1] / objective[-2] - 1)
                                     if k else float("nan"),
                                     seconds=[per_it] * (k + 1), converged=False))
        stream.flush()
        drawn = _read_all(master).decode("utf-8")
    finally:
        progress.close()
        stream.close()
        os.close(master)
    lines = [seg for seg in re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", drawn))
             if seg.strip()]
    last = lines[-1].rstrip()
    assert len(last) <= 80, last
    eta = re.search(r"ETA (\d+:)?\d\d:\d\d$", last)
    assert eta, last  # the ETA is there whole, at the end of the line
    assert "s/it" in last and "1.2" in last  # the rate and the objective are still shown
