"""Every writer refuses an output another process is writing (issue 15, item 2).

The other writer is a helper process holding the output's lock (tests/io/test_lock.py); each
job must refuse, with or without ``overwrite``, and leave the output and its staging trees as
they were.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.errors import OutputLockedError
from sphdist.io import open_output
from sphdist.io.model import load_checkpoint
from sphdist.jobs import run
from sphdist.jobs.export import ExportRequest
from sphdist.jobs.fit import FitRequest
from sphdist.jobs.ingest import IngestRequest
from sphdist.jobs.synth import SynthRequest
from sphdist.jobs.transform import TransformRequest

from .. import _lock_holder

holder = _lock_holder.holder  # the fixture

pytestmark = pytest.mark.usefixtures("sync_scheduler")

SYNTH = dict(n_docs=40, n_topics=2, vocab_size=50, n_features=64, chunk_size=16)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    import dask

    root = tmp_path_factory.mktemp("lock")
    run(SynthRequest(output=root / "corpus.zarr", format="corpus", **SYNTH))
    with dask.config.set(scheduler="sync"):
        run(FitRequest(root / "corpus.zarr", root / "model.zarr", n_components=2, max_iter=3,
                       callback=None))
    return root


def _refused(holder, target, write):
    h = holder(target)
    before = sorted(p.name for p in target.parent.iterdir())
    with pytest.raises(OutputLockedError, match=f"pid {h.proc.pid}"):
        write()
    assert sorted(p.name for p in target.parent.iterdir()) == before  # nothing touched


@pytest.mark.parametrize("overwrite", [False, True])
def test_fit_refuses(fitted, tmp_path, holder, overwrite):
    out = tmp_path / "model.zarr"
    run(FitRequest(fitted / "corpus.zarr", out, n_components=2, max_iter=2, callback=None))
    (tmp_path / "model.zarr.tmp-0123456789ab").mkdir()  # the holder's next checkpoint
    _refused(holder, out, lambda: run(FitRequest(
        fitted / "corpus.zarr", out, n_components=2, max_iter=2, callback=None,
        overwrite=overwrite)))


def test_checkpoint_recovery_is_the_holders_job(fitted, tmp_path, holder):
    out = tmp_path / "model.zarr"
    run(FitRequest(fitted / "corpus.zarr", out, n_components=2, max_iter=2, callback=None))
    out.rename(tmp_path / "model.zarr.old")  # the holder is between its two renames
    def recover():  # what a second writer must do to recover: hold the output first
        with open_output(out) as held:
            load_checkpoint(held, recover=True)

    _refused(holder, out, recover)


@pytest.mark.parametrize("overwrite", [False, True])
def test_ingest_refuses(tmp_path, holder, overwrite):
    source = tmp_path / "docs.jsonl"
    run(SynthRequest(output=source, format="jsonl", **SYNTH))
    _refused(holder, tmp_path / "c.zarr",
             lambda: run(IngestRequest(source, tmp_path / "c.zarr", overwrite=overwrite)))


@pytest.mark.parametrize("format", ["corpus", "jsonl"])
def test_synth_refuses(tmp_path, holder, format):
    _refused(holder, tmp_path / "out",
             lambda: run(SynthRequest(output=tmp_path / "out", format=format, **SYNTH)))


@pytest.mark.parametrize("overwrite", [False, True])
def test_transform_refuses(fitted, tmp_path, holder, overwrite):
    _refused(holder, tmp_path / "e.zarr", lambda: run(TransformRequest(
        fitted / "model.zarr", fitted / "corpus.zarr", tmp_path / "e.zarr", overwrite=overwrite)))


@pytest.mark.parametrize("format", ["parquet", "npy"])
def test_export_refuses(fitted, tmp_path, holder, format):
    out = tmp_path / f"e.{format}"
    _refused(holder, out, lambda: run(ExportRequest(
        fitted / "model.zarr", out, format=format, overwrite=True)))


def test_cli_prints_one_error_line(fitted, tmp_path, holder):
    out = tmp_path / "e.parquet"
    h = holder(out)
    result = CliRunner().invoke(main, ["export", "-m", str(fitted / "model.zarr"), "-o",
                                       str(out)])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and f"kill {h.proc.pid}" in lines[0]
    h.stop()
    assert CliRunner().invoke(main, ["export", "-m", str(fitted / "model.zarr"), "-o",
                                     str(out)]).exit_code == 0
