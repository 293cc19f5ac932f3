"""pipelines/batch/jobs.py: daily and weekly jobs, run twice: idempotent, atomic model swap."""

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from sphdist.io.embedding import open_embedding
from sphdist.io.model import open_model

from .._textcorpus import write_text_tree

JOBS = Path(__file__).resolve().parents[2] / "pipelines" / "batch" / "jobs.py"


@pytest.fixture(scope="module")
def jobs():
    spec = importlib.util.spec_from_file_location("sphdist_batch_jobs", JOBS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _snapshot(root):
    """Every file under root with its size and modification time (links: their target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath, name)
            out[str(p.relative_to(root))] = (
                os.readlink(p) if p.is_symlink() else (p.stat().st_size, p.stat().st_mtime_ns)
            )
    return out


def test_daily_and_weekly_jobs_are_idempotent_and_swap_atomically(jobs, scheduler, tmp_path):
    root = tmp_path / "prod"

    def run(*args):
        result = CliRunner().invoke(jobs.cli, [*args, "--root", str(root),
                                               "--scheduler-address", scheduler])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout.strip().splitlines()[-1])

    write_text_tree(root / "incoming" / "2026-11-16", n_per_label=5, seed=1)
    first = run("weekly", "--week", "2026-W47", "-r", "3", "--max-iter", "8",
                "--n-features", "512")
    w47 = root / "models" / "2026-W47.model.zarr"
    assert first["swapped"] and first["warm_start"] is None
    assert (root / "current").is_symlink() and (root / "current").resolve() == w47

    day = run("daily", "--date", "2026-11-16")
    assert day["status"] == "done" and day["n_documents"] == 15
    out = root / "daily" / "2026-11-16"
    table = pq.read_table(out / "embeddings.parquet")
    emb = open_embedding(out / "embedding.zarr")
    assert table.column("doc_id").to_pylist() == emb.doc_ids.tolist()
    E = np.column_stack([table.column(f"e{i}").to_numpy() for i in range(3)])
    np.testing.assert_array_equal(E, np.asarray(emb.V[...]).T)
    assert emb.attrs["model"]["u_sha256"] == open_model(w47).fingerprint

    # reruns of the same day and week change nothing
    before = _snapshot(root)
    assert run("daily", "--date", "2026-11-16")["status"] == "skipped"
    again = run("weekly", "--week", "2026-W47", "--max-iter", "8")
    assert again["swapped"] is False and again["n_iter"] == first["n_iter"]
    assert _snapshot(root) == before

    # next week: refit on all documents, warm-started from W47, then swap
    write_text_tree(root / "incoming" / "2026-11-23", n_per_label=5, seed=2)
    second = run("weekly", "--week", "2026-W48", "--max-iter", "8")
    w48 = root / "models" / "2026-W48.model.zarr"
    assert second["swapped"] and second["warm_start"] == str(w47)
    assert (root / "current").resolve() == w48
    assert open_model(w48).params["init_from"]["u_sha256"] == open_model(w47).fingerprint
    assert open_model(w47).n_iter == first["n_iter"]  # the previous model is kept intact
    assert not list(root.glob("current.tmp-*"))

    day2 = run("daily", "--date", "2026-11-23")
    assert day2["model"] == str(w48) and day2["n_documents"] == 15
    before = _snapshot(root)
    assert run("daily", "--date", "2026-11-23")["status"] == "skipped"
    assert run("weekly", "--week", "2026-W48")["swapped"] is False
    assert run("daily", "--date", "2026-11-30")["status"] == "empty"
    assert _snapshot(root) == before


def test_swap_interrupted_before_the_rename_keeps_the_old_model(jobs, tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert jobs.swap_current(tmp_path, tmp_path / "a")
    monkeypatch.setattr(jobs.os, "replace", lambda *a: (_ for _ in ()).throw(OSError("boom")))
    with pytest.raises(OSError, match="boom"):
        jobs.swap_current(tmp_path, tmp_path / "b")
    assert (tmp_path / "current").resolve() == tmp_path / "a"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "current"]
