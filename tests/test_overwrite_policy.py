"""What an output may replace, and where it may be (issue 31, items 1, 2 and 7).

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

from sphdist.io._fs import filesystem

from ._cli_stores import cli, cli_ok, refused, user_stores, working_directory
from ._s3 import clear_s3fs_cache

SPHDIST = str(Path(sys.executable).with_name("sphdist"))


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """in/good.jsonl, the corpus, model, embedding and index made from it, a queries file."""
    root = tmp_path_factory.mktemp("stores")
    (root / "in").mkdir()
    with working_directory(root):  # the paths of the reproductions, relative
        user_stores("in/good.jsonl", n_docs=60, vocab_size=50)
    (root / "q.csv").write_text("doc01\ndoc02\n")  # document ids, for --queries --ids
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


SYNTH = ("synth", "--n-docs", 10, "--n-topics", 2, "--vocab-size", 20)

# item 1: an input of the same command is never replaced
AN_INPUT = [
    ("ingest", "in/good.jsonl", "-o", "in/good.jsonl", "--overwrite"),
    ("transform", "-m", "m.zarr", "-i", "c.zarr", "-o", "m.zarr", "--overwrite"),
    ("transform", "-m", "m.zarr", "-i", "c.zarr", "-o", "c.zarr", "--overwrite"),
    ("export", "-m", "m.zarr", "-o", "m.zarr", "--overwrite"),
    ("index", "-m", "m.zarr", "-o", "m.zarr", "--overwrite"),
    ("fit", "-i", "c.zarr", "-o", "c.zarr", "-r", 2, "--overwrite"),
    ("neighbors", "-m", "m.zarr", "-i", "e.zarr", "--all", "-o", "e.zarr", "--overwrite"),
    ("plot", "convergence", "-m", "m.zarr", "-o", "m.zarr"),
    ("neighbors", "-m", "m.zarr", "--queries", "q.csv", "--ids", "-o", "q.csv", "--overwrite"),
]


@pytest.mark.parametrize("args", AN_INPUT, ids=lambda a: " ".join(map(str, a)))
def test_an_input_is_never_the_output(here, args):
    before = _tree(here)
    output = args[args.index("-o") + 1]
    line = refused(cli(*args), f"{output} is also an input of this command",
                   "To resolve this, choose another --output, e.g. --output ")
    suggested = line.rsplit("--output ", 1)[1].rstrip(".")
    assert not os.path.exists(suggested)  # the suggestion is free
    assert _tree(here) == before


# item 1: a store (or file) of another kind is never replaced; how to remove it by hand
ANOTHER_KIND = [
    (("export", "-m", "m.zarr", "-o", "c.zarr", "--overwrite"), "a sphdist corpus, not a file"),
    (("export", "-m", "m.zarr", "-o", "i.zarr", "--overwrite"), "a sphdist index, not a file"),
    (("index", "-m", "m.zarr", "-o", "c.zarr", "--overwrite"),
     "a sphdist corpus, not a sphdist index"),
    ((*SYNTH, "--format", "corpus", "-o", "m.zarr", "--overwrite"),
     "a sphdist model, not a sphdist corpus"),
    ((*SYNTH, "--format", "jsonl", "-o", "c.zarr", "--overwrite"),
     "a sphdist corpus, not a file"),
    (("ingest", "in/good.jsonl", "-o", "m.zarr", "--overwrite"),
     "a sphdist model, not a sphdist corpus"),
    (("fit", "-i", "c.zarr", "-o", "e.zarr", "-r", 2, "--overwrite"),
     "a sphdist embedding, not a sphdist model"),
    (("transform", "-m", "m.zarr", "-i", "c.zarr", "-o", "i.zarr", "--overwrite"),
     "a sphdist index, not a sphdist embedding"),
    (("transform", "-m", "m.zarr", "-i", "c.zarr", "-o", "in", "--overwrite"),
     "a directory, not a sphdist embedding"),
    (("transform", "-m", "m.zarr", "-i", "c.zarr", "-o", "in/good.jsonl", "--overwrite"),
     "a file, not a sphdist embedding"),
    (("neighbors", "-m", "m.zarr", "--all", "-o", "e.zarr", "--overwrite"),
     "a sphdist embedding, not a file"),
    (("plot", "embedding", "-m", "m.zarr", "-o", "i.zarr"), "a sphdist index, not a file"),
]


@pytest.mark.parametrize("args,what", ANOTHER_KIND, ids=lambda a: " ".join(map(str, a)))
def test_overwrite_replaces_only_the_same_kind(here, args, what):
    before = _tree(here)
    output = args[args.index("-o") + 1]
    rm = f"`rm {'' if what.startswith('a file') else '-r '}{output}`"
    refused(cli(*args), f"{output} is {what}", "only", "remove it by hand first: " + rm)
    assert _tree(here) == before


def test_overwrite_still_replaces_the_same_kind(here, tmp_path):
    out = tmp_path / "e.zarr"
    cli_ok("transform", "-m", "m.zarr", "-i", "c.zarr", "-o", out)
    first = (out / "zarr.json").stat().st_ino
    cli_ok("transform", "-m", "m.zarr", "-i", "c.zarr", "-o", out, "--overwrite")
    assert (out / "zarr.json").stat().st_ino != first  # a new version was committed
    table = tmp_path / "x.parquet"
    cli_ok("export", "-m", "m.zarr", "-o", table)
    cli_ok("export", "-m", "m.zarr", "-o", table, "--overwrite")
    assert table.is_file()


@pytest.mark.parametrize("suffix", [".lock", ".lock.json", ".old", ".scratch", ".tmp-0a1b2c"])
def test_an_output_at_another_outputs_lock_or_staging_name_is_refused(here, tmp_path, suffix):
    out = tmp_path / "fx" / f"m.zarr{suffix}"
    refused(cli("fit", "-i", "c.zarr", "-o", out, "-r", 2), str(out), "another name")
    assert not (tmp_path / "fx").exists()  # not even a lock file was made


# item 2: an output inside, or around, an input or another store
NESTED = [
    (("fit", "-i", "c.zarr", "-o", "c.zarr/X/new.zarr", "-r", 2),
     "c.zarr/X/new.zarr is inside c.zarr, an input of this command"),
    (("ingest", "in/good.jsonl", "-o", "c.zarr/X/new.zarr"),
     "c.zarr/X/new.zarr is inside c.zarr, a zarr store (a sphdist corpus)"),
    (("transform", "-m", "m.zarr", "-i", "c.zarr", "-o", "i.zarr/e.zarr"),
     "i.zarr/e.zarr is inside i.zarr, a zarr store (a sphdist index)"),
    (("ingest", "in", "-o", "in/c.zarr"), "in/c.zarr is inside in, an input of this command"),
    (("export", "-m", "m.zarr", "-o", "m.zarr/U/x.parquet"),
     "m.zarr/U/x.parquet is inside m.zarr, an input of this command"),
]


@pytest.mark.parametrize("args,said", NESTED, ids=lambda a: " ".join(map(str, a)))
def test_an_output_inside_an_input_or_a_store_is_refused(here, args, said):
    before = _tree(here)
    refused(cli(*args), said, "choose an --output outside it")
    assert _tree(here) == before  # nothing made inside the store, no lock file


def test_an_output_containing_an_input_is_refused(tmp_path, stores, monkeypatch):
    shutil.copytree(stores / "c.zarr", tmp_path / "data" / "c.zarr")
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    refused(cli("fit", "-i", "data/c.zarr", "-o", "data", "-r", 2, "--overwrite"),
            "data contains data/c.zarr, an input of this command")
    assert _tree(tmp_path) == before


# item 2 on S3, and a store of another kind in a bucket
def test_nesting_and_kinds_in_a_bucket(s3_env, stores):
    corpus = f"{s3_env.url}/c.zarr"
    fs, inner = filesystem(corpus)
    fs.put(str(stores / "c.zarr"), inner, recursive=True)
    clear_s3fs_cache()
    listed = sorted(fs.find(s3_env.bucket))
    for args, said in (
        (("fit", "-i", stores / "c.zarr", "-o", f"{corpus}/X/m.zarr", "-r", 2),
         f"{corpus}/X/m.zarr is inside {corpus}, a zarr store (a sphdist corpus)"),
        (("fit", "-i", corpus, "-o", f"{corpus}/X/m.zarr", "-r", 2),
         f"{corpus}/X/m.zarr is inside {corpus}, an input of this command"),
        (("fit", "-i", corpus, "-o", corpus, "-r", 2, "--overwrite"),
         f"{corpus} is also an input of this command"),
        (("fit", "-i", stores / "c.zarr", "-o", corpus, "-r", 2, "--overwrite"),
         f"{corpus} is a sphdist corpus, not a sphdist model"),
    ):
        line = refused(cli(*args), said)
        if "not a sphdist model" in said:
            assert f"`aws s3 rm --recursive {corpus}`" in line
    fs.invalidate_cache()
    assert sorted(fs.find(s3_env.bucket)) == listed  # no lease, no version, nothing written


# item 7: messages that said something else
def test_overwrite_never_replaces_a_link_a_pipe_or_a_device(here, tmp_path):
    # found by hand: `export -o /dev/stdout -f csv --overwrite` renamed its staging file onto
    # /dev/stdout, turning the machine's link into a plain file
    files = tmp_path / "files"
    files.mkdir()
    target = files / "target.csv"
    target.write_text("kept\n")
    link = files / "link.csv"
    link.symlink_to(target)
    model_link = files / "model-link.zarr"
    model_link.symlink_to(here / "m.zarr")
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    before = _tree(files)
    refused(cli("export", "-m", "m.zarr", "-o", link, "--overwrite"),
            f"{link} is a symbolic link", "--output")
    refused(cli("export", "-m", "m.zarr", "-o", fifo, "--overwrite"),
            f"{fifo} is a named pipe", "--output")
    refused(cli("fit", "-i", "c.zarr", "-o", model_link, "-r", 2, "--overwrite"),
            f"{model_link} is a symbolic link", str(here / "m.zarr"))
    assert link.is_symlink() and model_link.is_symlink() and fifo.is_fifo()
    assert _tree(files) == before


def test_an_unwritable_output_is_not_reported_as_locked(here):
    if not os.path.isdir("/proc/self"):
        pytest.skip("needs /proc")
    refused(cli("fit", "-i", "c.zarr", "-o", "/proc/c.zarr", "-r", 2),
            "/proc/c.zarr: no output can be written there", "/proc/c.zarr.lock",
            "No such file or directory")
    result = cli("fit", "-i", "c.zarr", "-o", "/proc/c.zarr", "-r", 2)
    assert "being written by" not in result.output


def test_info_describes_an_index(here):
    result = cli_ok("info", "i.zarr")
    assert "i.zarr: index" in result.output and "not a sphdist corpus" not in result.output
    assert "59 of 60 documents indexed" in result.output


def test_a_pipe_source_says_it_is_a_pipe(here, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    line = refused(cli("ingest", fifo, "-o", tmp_path / "p.zarr"),
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
    for digest in ("faiss_sha256", "faiss_sample_sha256"):  # the bytes no longer match
        if digest in group.attrs:
            group.attrs[digest] = "0" * 64
    group.attrs["model"] = {**group.attrs["model"], "path": "m.zarr"}  # built relatively
    os.chdir(tmp_path)  # elsewhere: m.zarr names nothing here
    line = refused(cli("neighbors", "-m", here / "m.zarr", "--index", index,
                       "--doc-id", "doc00"), "sphdist index --model ")
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
