"""io._atomic: single-file atomic writes (``atomic_path``)."""

import numpy as np
import pytest

from sphdist.io import atomic_path


def test_success_replaces_target_with_the_complete_new_file(tmp_path):
    target = tmp_path / "result.json"
    target.write_text("old")
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path
        assert tmp.suffix == ".json"
        assert tmp != target
        tmp.write_text("new")
        assert target.read_text() == "old"  # not visible before the block ends
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_suffix_lets_writers_infer_the_format(tmp_path):
    target = tmp_path / "a.npy"
    with atomic_path(target) as tmp:
        np.save(tmp, np.arange(3))  # np.save appends .npy unless the name already ends so
    np.testing.assert_array_equal(np.load(target), np.arange(3))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npy"]


def test_exception_leaves_old_target_and_no_temporary(tmp_path):
    target = tmp_path / "plot.png"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="boom"), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("boom")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot.png"]


def test_exception_before_first_write_creates_nothing(tmp_path):
    target = tmp_path / "new.txt"
    with pytest.raises(KeyError), atomic_path(target):
        raise KeyError("x")
    assert list(tmp_path.iterdir()) == []


def test_a_directory_at_target_is_replaced_by_the_file(tmp_path):
    target = tmp_path / "out.jsonl"
    target.mkdir()
    (target / "inside").write_text("x")
    with atomic_path(target) as tmp:
        tmp.write_text("line\n")
    assert target.read_text() == "line\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]
