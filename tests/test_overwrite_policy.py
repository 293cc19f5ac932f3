"""What an output may replace, and where it may be (issue 31, item 7).

``--overwrite`` replaces an output of the same kind only: never an input of the same command,
never a store of another kind, a directory or a file sphdist did not write as that kind; an
output is never inside (or around) an input or another store, nor at a name sphdist keeps for
another output (``X.lock``, ``X.old``...). Every refusal is one ``Error:`` line, exit 1, and
leaves every file as it was (no lock file either). Driven through the command line; the stores
are written once per module.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from sphdist.cli import main

SPHDIST = str(Path(sys.executable).with_name("sphdist"))


def _cli(*args):
    return CliRunner().invoke(main, ["--quiet", *map(str, args)])


def _ok(*args):
    result = _cli(*args)
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """in/good.jsonl, and the corpus, model, embedding and index made from it."""
    root = tmp_path_factory.mktemp("stores")
    cwd = os.getcwd()
    os.chdir(root)  # the paths of the reproductions, relative
    try:
        (root / "in").mkdir()
        _ok("synth", "--n-docs", 60, "--n-topics", 2, "--vocab-size", 50, "--format", "jsonl",
            "-o", "in/good.jsonl")
        _ok("ingest", "in/good.jsonl", "-o", "c.zarr")
        _ok("fit", "-i", "c.zarr", "-o", "m.zarr", "-r", 2, "--max-iter", 3)
        _ok("transform", "-m", "m.zarr", "-i", "c.zarr", "-o", "e.zarr")
        _ok("index", "-m", "m.zarr", "-o", "i.zarr")
    finally:
        os.chdir(cwd)
    return root


@pytest.fixture
def here(stores, monkeypatch):
    monkeypatch.chdir(stores)
    return stores


def _tree(root):
    """Every path under ``root`` with the sha256 of its bytes (None for a directory)."""
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.relpath(os.path.join(directory, name), root)] = None
        for name in files:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    return found


def _refused(result, *needles):
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# item 7: messages that said something else
def test_info_describes_an_index(here):
    result = _ok("info", "i.zarr")
    assert "i.zarr: index" in result.output and "not a sphdist corpus" not in result.output
    assert "59 of 60 documents indexed" in result.output


def test_a_pipe_source_says_it_is_a_pipe(here, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    line = _refused(_cli("ingest", fifo, "-o", tmp_path / "p.zarr"),
                    f"{fifo}: not a regular file or folder", "<(...)",
                    "save it to a file first")
    assert "empty files" not in line
    assert not (tmp_path / "p.zarr").exists()


def test_a_process_substitution_source_says_so(here, tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    out = tmp_path / "p.zarr"
    result = subprocess.run(
        ["bash", "-c", f'"{SPHDIST}" --quiet ingest <(cat in/good.jsonl) -o "{out}"'],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "process substitution" in errors[0], result.stderr
    assert not out.exists()


def test_index_damage_remedy_names_the_model_from_anywhere(here, tmp_path):
    import zarr

    index = tmp_path / "i.zarr"
    shutil.copytree(here / "i.zarr", index)
    group = zarr.open_group(str(index), mode="r+")
    group.attrs["faiss_sha256"] = "0" * 64  # the bytes no longer match their digest
    group.attrs["model"] = {**group.attrs["model"], "path": "m.zarr"}  # built relatively
    os.chdir(tmp_path)  # elsewhere: m.zarr names nothing here
    line = _refused(_cli("neighbors", "-m", here / "m.zarr", "--index", index,
                         "--doc-id", "doc-0"), "sphdist index --model ")
    assert "--model m.zarr " not in line
    assert "MODEL" in line and "relative to the directory the index was built in" in line


def test_a_new_index_records_its_model_absolute(here):
    import zarr

    assert Path(zarr.open_group("i.zarr", mode="r").attrs["model"]["path"]).is_absolute()


def test_no_s3_credentials_says_so_and_where_they_are_read(s3_env, stores, tmp_path):
    env = {k: v for k, v in s3_env.subprocess_env().items()
           if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    env.update(HOME=str(tmp_path), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_EC2_METADATA_DISABLED="true")
    result = subprocess.run(
        [SPHDIST, "--quiet", "fit", "-i", str(stores / "c.zarr"), "-o",
         f"{s3_env.url}/m.zarr", "-r", "2"], env=env, capture_output=True, text=True, timeout=180,
    )
    assert result.returncode == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.stderr
    assert "no credentials were found" in errors[0], errors[0]
    assert "AWS_ACCESS_KEY_ID" in errors[0] and "~/.aws/credentials" in errors[0]
    assert "run the command again" not in errors[0]
