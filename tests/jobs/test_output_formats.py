"""Outputs are what their names say: the format of a written file is the one its suffix names.

One rule (:func:`sphdist.io.output_format`) for ``plot``, ``export`` and the
neighbour tables; ``export`` and ``neighbors`` are driven through the CLI in
``tests/cli/test_cli_use.py`` and ``tests/cli/test_cli_neighbors.py``.
"""

import numpy as np
import pytest
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.errors import ParameterError
from sphdist.io import output_format
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.jobs import run
from sphdist.jobs.fit import FitRequest

from ..reference import random_corpus

pytestmark = pytest.mark.usefixtures("sync_scheduler")

#: The first bytes of each format a figure is written in.
MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF-", "jpg": b"\xff\xd8\xff",
         "jpeg": b"\xff\xd8\xff"}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    import dask

    root = tmp_path_factory.mktemp("formats")
    X = random_corpus(30, 40, seed=3)
    with CorpusWriter(root / "c.zarr", n_features=30, feature_scheme={"type": "hashing"},
                      label_names=["x", "y"]) as w:
        w.write_chunk(X, [str(j) for j in range(40)], np.arange(40) % 2)
        corpus = w.commit(idf=np.ones(30))
    with dask.config.set(scheduler="sync"):
        return run(FitRequest(corpus.path, root / "m.zarr", n_components=3, max_iter=4, tol=0,
                              callback=None, checkpoint_every=100)).path


def _error_line(result):
    assert result.exit_code != 0, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ") and "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("suffix", ["svg", "pdf", "jpg", "jpeg", "png"])
@pytest.mark.parametrize("what", ["convergence", "embedding"])
def test_a_figure_is_written_in_the_format_its_suffix_names(model, tmp_path, what, suffix):
    out = tmp_path / f"figure.{suffix}"
    result = CliRunner().invoke(main, ["plot", what, "-m", str(model), "-o", str(out)])
    assert result.exit_code == 0, result.output
    data = out.read_bytes()
    if suffix == "svg":
        assert data.lstrip().startswith(b"<?xml") and b"<svg" in data[:2000]
    else:
        assert data.startswith(MAGIC[suffix]), data[:8]


@pytest.mark.parametrize("what", ["convergence", "embedding"])
def test_a_figure_suffix_that_names_no_format_is_refused_before_reading(tmp_path, what):
    out = tmp_path / "figure.gif"
    # the model does not exist: the suffix is refused first, nothing is read or written
    result = CliRunner().invoke(main, ["plot", what, "-m", str(tmp_path / "nope.zarr"), "-o",
                                       str(out)])
    line = _error_line(result)
    assert f"{out}: the suffix '.gif' names none of the formats written here" in line
    assert "png (*.png), svg (*.svg), pdf (*.pdf), jpeg (*.jpg, *.jpeg)" in line
    assert f"e.g. {tmp_path / 'figure.png'}" in line
    assert list(tmp_path.iterdir()) == []


def test_output_format_rule():
    formats = {".parquet": "parquet", ".jsonl": "jsonl", ".csv": "csv"}
    assert output_format("a/b.PARQUET", None, formats) == "parquet"
    assert output_format("a/b.csv", "csv", formats) == "csv"  # --format agreeing: accepted
    assert output_format("hits", "jsonl", formats) == "jsonl"  # no suffix: as asked
    with pytest.raises(ParameterError, match=r"b\.csv is named as a csv file, but format="
                                             r"'parquet' .* name it b\.parquet, or leave out"):
        output_format("b.csv", "parquet", formats)
    with pytest.raises(ParameterError, match=r"^hits has no suffix to tell its format .* e\.g\. "
                                             r"hits\.parquet: `redo hits\.parquet`\.$"):
        output_format("hits", None, formats, redo=lambda p: f"redo {p}")


@pytest.mark.parametrize("overwrite", [False, True])
def test_export_refuses_a_format_its_suffix_does_not_name_before_writing(
        model, tmp_path, overwrite):
    """Issue 44 item 6: ``-o out.jsonl -f csv`` wrote CSV into a .jsonl file (exit 0), and with
    ``--overwrite`` replaced a JSON Lines source there."""
    out = tmp_path / "out.jsonl"
    source = b'{"id": "a", "text": "a JSON Lines source"}\n'
    if overwrite:
        out.write_bytes(source)
    result = CliRunner().invoke(main, ["export", "-m", str(model), "-o", str(out), "-f", "csv",
                                       *(["--overwrite"] if overwrite else [])])
    line = _error_line(result)
    assert f"{out} is named as a .jsonl file, but --format csv was asked for" in line, line
    assert f"name it {tmp_path / 'out.csv'}" in line, line
    if overwrite:
        assert out.read_bytes() == source  # untouched
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]
    else:
        assert list(tmp_path.iterdir()) == []


def test_output_format_refuses_a_suffix_of_another_kind_with_a_format():
    formats = {".parquet": "parquet", ".csv": "csv"}
    for name in ("b.jsonl", "b.json", "b.txt", "b.zarr", "b.csv.gz"):
        with pytest.raises(ParameterError, match=r"is named as a \.\w+ file, but format='csv'"):
            output_format(name, "csv", formats)
    assert output_format("embeddings", "csv", formats) == "csv"  # no suffix: as asked
