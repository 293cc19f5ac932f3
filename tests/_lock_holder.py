"""Another process holding an output's lock (:func:`sphdist.io.output_lock`), for the tests."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

# holds the lock on argv[1] until killed (or stdin closes)
HOLDER = """
import sys
from sphdist.io import output_lock
with output_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.read()
"""


class Holder:
    """Another process holding the output lock of ``target``."""

    def __init__(self, target):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(target)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True,
        )
        assert self.proc.stdout.readline().strip() == "held"

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture
def holder():
    held = []

    def hold(target):
        held.append(Holder(target))
        return held[-1]

    yield hold
    for h in held:
        h.stop()
