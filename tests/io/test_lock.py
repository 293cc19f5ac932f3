"""The output lock: one writer per output, released whatever happens (issue 15, item 2)."""

from __future__ import annotations

import json
import os
import socket
import threading

import pytest

from sphdist.errors import OutputLockedError, SphdistError
from sphdist.io import output_lock

from .. import _lock_holder

holder = _lock_holder.holder  # the fixture


def test_a_second_writer_is_refused_naming_the_holder(tmp_path, holder):
    target = tmp_path / "model.zarr"
    h = holder(target)
    with pytest.raises(OutputLockedError) as info:
        with output_lock(target):
            pass
    message = str(info.value)
    assert isinstance(info.value, SphdistError)
    assert str(target) in message and f"pid {h.proc.pid}" in message
    assert socket.gethostname() in message and f"kill {h.proc.pid}" in message
    assert "another output" in message and "--" not in message  # the Python API's words
    h.stop()
    with output_lock(target):  # released when the holder finished
        pass


def test_the_holder_is_recorded_beside_the_output_and_removed_on_release(tmp_path):
    target = tmp_path / "out.parquet"
    with output_lock(target):
        record = json.loads((tmp_path / "out.parquet.lock.json").read_text())
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
        assert record["since"] and record["command"]
    assert list(tmp_path.iterdir()) == []  # nothing left beside the output


def test_released_when_the_block_raises(tmp_path):
    target = tmp_path / "c.zarr"
    with pytest.raises(KeyError), output_lock(target):
        raise KeyError("boom")
    with output_lock(target):
        pass


def test_a_killed_writer_leaves_no_stale_lock(tmp_path, holder):
    target = tmp_path / "model.zarr"
    h = holder(target)
    assert (tmp_path / "model.zarr.lock.json").exists()
    h.kill()  # SIGKILL: no clean-up ran; the kernel released the flock
    with output_lock(target):
        record = json.loads((tmp_path / "model.zarr.lock.json").read_text())
        assert record["pid"] == os.getpid()  # the dead writer's record was replaced
    assert list(tmp_path.iterdir()) == []


def test_one_hold_per_output_even_in_one_process(tmp_path):
    """No reentrant registry: a second hold is refused in the same thread and in another."""
    target = tmp_path / "model.zarr"
    refused = []

    def other():
        try:
            with output_lock(target):
                pass
        except OutputLockedError as exc:
            refused.append(exc)

    with output_lock(target):
        with pytest.raises(OutputLockedError, match=f"pid {os.getpid()}"):
            with output_lock(target):  # the same writer, deeper in its call stack
                pass
        assert (tmp_path / "model.zarr.lock.json").exists()  # the first hold is intact
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert len(refused) == 1
    with output_lock(target):  # released at the end of the block
        pass


def test_staging_trees_are_kept_while_another_writer_holds_the_output(tmp_path, holder):
    target = tmp_path / "model.zarr"
    staging = tmp_path / "model.zarr.tmp-0123456789ab"
    staging.mkdir()
    h = holder(target)
    with pytest.raises(OutputLockedError), output_lock(target) as out:
        out.remove_stale()
    assert staging.exists()  # the holder's next version
    h.kill()
    with output_lock(target) as out:
        out.remove_stale()  # now provably stale
    assert not staging.exists()


def test_a_writer_refused_before_the_holder_recorded_itself_still_names_it(tmp_path):
    """The holder writes its record just after it takes the lock: a writer refused in between
    waits for the record (two fits started together), instead of naming no one."""
    import filelock

    from sphdist.io._lock import lock_path, record_path

    target = tmp_path / "model.zarr"
    held = filelock.FileLock(str(lock_path(target)), timeout=0, thread_local=False)
    held.acquire()  # locked, not yet recorded
    record = {"host": socket.gethostname(), "pid": 424242, "command": "sphdist fit",
              "since": "2026-11-27T00:00:00+00:00"}
    later = threading.Timer(0.3, lambda: record_path(lock_path(target)).write_text(
        json.dumps(record)))
    later.start()
    try:
        with pytest.raises(OutputLockedError, match=r"pid 424242 on .*kill 424242"):
            with output_lock(target):
                pass
    finally:
        later.join()
        held.release(force=True)
