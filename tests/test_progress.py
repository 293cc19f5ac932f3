"""sphdist._progress: the one progress implementation (a tqdm bar, log lines, or nothing)."""

from __future__ import annotations

import logging

import pytest

from sphdist._progress import progress


@pytest.fixture
def log(caplog):
    """caplog at INFO on the ``sphdist`` logger (read ``log.records`` after the fact)."""
    logger = logging.getLogger("sphdist")
    propagate, logger.propagate = logger.propagate, True  # the CLI turns it off
    with caplog.at_level(logging.INFO, logger="sphdist"):
        yield caplog
    logger.propagate = propagate


def _counts(records) -> list[str]:
    """The ``n/total`` field of every progress line: ``"desc: n/total units, ..."``."""
    return [r.getMessage().split(": ")[1].split(" ")[0] for r in records]


def test_log_mode_logs_at_every_tenth_and_once_at_the_end(log):
    with progress(100, "count", unit="document", mode="log") as bar:
        for _ in range(100):
            bar.update(1)
    # a line when 10, 20, ..., 100 of 100 are done; none again on closing
    assert _counts(log.records) == [f"{k}/100" for k in range(10, 101, 10)]
    assert all(r.levelno == logging.INFO for r in log.records)
    assert log.records[-1].getMessage().startswith("count: 100/100 documents, ")


def test_log_mode_with_coarse_updates_logs_each_tenth_once(log):
    with progress(1000, "pass", mode="log") as bar:
        bar.update(250)  # passes 1/10 and 2/10: one line
        bar.update(5)
        bar.update(745)
    assert _counts(log.records) == ["250/1000", "1000/1000"]


def test_log_mode_logs_where_it_stopped(log):
    with progress(100, "count", mode="log") as bar:
        bar.update(15)
        bar.update(3)
    assert _counts(log.records) == ["15/100", "18/100"]  # the last line comes from close()


def test_log_mode_without_a_total_logs_every_update(log):
    with progress(None, "read", unit="chunk", mode="log") as bar:
        bar.update(2)
        bar.update(3)
    lines = [r.getMessage().split(",")[0] for r in log.records]
    assert lines == ["read: 2 chunks", "read: 5 chunks"]


def test_disabled_mode_writes_nothing(log, capsys):
    with progress(10, "quiet", mode=False) as bar:
        for _ in range(10):
            bar.update(1)
        bar.set_postfix_str("objective 1.0", refresh=True)
    assert len(log.records) == 0
    assert capsys.readouterr() == ("", "")


def test_bar_mode_draws_on_stderr_only(log, capsys):
    with progress(4, "fit", unit="it", mode=True) as bar:
        bar.update(4)
    out, err = capsys.readouterr()
    assert out == "" and "fit: 100%" in err and "4/4" in err
    assert len(log.records) == 0


@pytest.mark.parametrize("mode", ["bar", None, 1.5])
def test_unknown_mode_is_refused(mode):
    with pytest.raises(ValueError, match="progress mode"):
        progress(10, "x", mode=mode)


# -- issue 33 item 7: log lines above the bar, the final bar once, a 0 x 0 terminal ------------


def _screen(text: str) -> list[str]:
    """What a terminal shows after ``text``: ``\\r`` returns to the line's start, characters
    overwrite those under the cursor, ``\\n`` starts the next line."""
    lines, line, col = [], [], 0
    for ch in text:
        if ch == "\n":
            lines.append("".join(line).rstrip())
            line, col = [], 0
        elif ch == "\r":
            col = 0
        else:
            line[col:col + 1] = [ch]
            col += 1
    if line:
        lines.append("".join(line).rstrip())
    return lines


def test_log_lines_are_written_above_the_bar_and_the_final_bar_is_drawn_once(monkeypatch):
    import io
    import sys

    from sphdist.cli._common import setup_logging

    term = io.StringIO()
    monkeypatch.setattr(sys, "stderr", term)
    logger = logging.getLogger("sphdist")
    handlers, level, propagate = logger.handlers[:], logger.level, logger.propagate
    try:
        setup_logging("info", quiet=False)  # the command line's handler, on this stderr
        with progress(4, "fit", unit="it", mode=True, ncols=60) as bar:
            logger.info("X (97.13 MiB) is held in memory")
            bar.update(4)
            logger.info("wrote the embedding")
    finally:
        logger.handlers[:], logger.propagate = handlers, propagate
        logger.setLevel(level)
    screen = _screen(term.getvalue())
    assert "X (97.13 MiB) is held in memory" in screen, screen  # a line of its own
    assert "wrote the embedding" in screen, screen
    assert sum("fit: 100%" in line for line in screen) == 1, screen
    assert screen[-1].startswith("fit: 100%"), screen  # the bar stays below the log lines


def test_a_terminal_reporting_0_columns_and_rows_still_shows_the_bar(monkeypatch):
    import fcntl
    import os
    import pty
    import select
    import struct
    import sys
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 0, 0, 0, 0))
    with os.fdopen(slave, "w") as tty:
        assert os.get_terminal_size(tty.fileno()) == (0, 0)
        monkeypatch.setattr(sys, "stderr", tty)
        with progress(4, "fit", unit="it", mode=True) as bar:
            bar.update(4)
        tty.flush()
    # The slave end is closed: read the master until the kernel has handed over every byte
    # (a pty passes output on asynchronously, so one read may see only the first write).
    shown = b""
    while True:
        ready, _, _ = select.select([master], [], [], 10)
        if not ready:
            break
        try:
            got = os.read(master, 65536)
        except OSError:  # EIO: the slave is closed and everything has been read
            break
        if not got:
            break
        shown += got
    os.close(master)
    shown = shown.decode()
    assert "fit: 100%" in shown and "4/4" in shown, repr(shown)
