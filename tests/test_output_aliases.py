"""An output reached through another name is still the place it names (issue 43, item 9).

Outputs and inputs were compared by their names: ``lnk/../../../c.zarr`` (``lnk`` a symbolic
link into a deeper folder) was made absolute lexically, its ``..`` collapsed before the link
was followed, so the command refused or wrote another place than the one the OS opens; an
output in a second mount of the input's folder (a bind mount) was not the input by name and
replaced it. The output policy compares where the paths lead (the symbolic links and ``..``
resolved as the OS resolves them, and the device and inode of the folders, so that a second
mount of one folder is the same folder) and refuses before anything is written; a symbolic
link where sphdist keeps an output's lock (or its other companions) is refused too. Driven
through the command line, on real files; the bind mount in a private mount namespace.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sphdist

from ._cli_stores import cli, refused, user_stores, working_directory

SPHDIST = str(Path(sys.executable).with_name("sphdist"))


def _tree(root):
    """Every path under ``root`` (links not followed) with its bytes' sha256, or its link."""
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(directory, name)
            key = os.path.relpath(path, root)
            if os.path.islink(path):
                found[key] = "-> " + os.readlink(path)
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    found[key] = hashlib.sha256(f.read()).hexdigest()
            else:
                found[key] = None
    return found


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """good.jsonl, and the corpus c.zarr, model m.zarr, embedding e.zarr made from it."""
    root = tmp_path_factory.mktemp("aliases")
    with working_directory(root):
        user_stores("good.jsonl", n_docs=40, vocab_size=40)
    return root


@pytest.fixture
def layout(stores, tmp_path, monkeypatch):
    """``data/`` (copies of the stores) and ``work/one/two/`` (the working directory).

    In the working directory, ``lnk`` links to ``data/deep/a/b``: ``lnk/../../../X`` is
    ``data/X`` for the OS, and ``work/X`` had its ``..`` been collapsed before the link.
    """
    data = tmp_path / "data"
    data.mkdir()
    for name in ("good.jsonl", "c.zarr", "m.zarr", "e.zarr"):
        copy = shutil.copytree if (stores / name).is_dir() else shutil.copy2
        copy(stores / name, data / name)
    (data / "deep" / "a" / "b").mkdir(parents=True)
    cwd = tmp_path / "work" / "one" / "two"
    cwd.mkdir(parents=True)
    (cwd / "lnk").symlink_to(data / "deep" / "a" / "b", target_is_directory=True)
    monkeypatch.chdir(cwd)
    return tmp_path


def test_dotdot_after_a_symbolic_link_is_where_the_os_goes(layout):
    data = layout / "data"
    before = _tree(layout)
    for args, said in (
        (("fit", "-i", data / "c.zarr", "-o", "lnk/../../../c.zarr", "-r", 2, "--overwrite"),
         f"is also an input of this command ({data / 'c.zarr'})"),
        (("transform", "-m", data / "m.zarr", "-i", data / "c.zarr", "-o", "lnk/../../../m.zarr",
          "--overwrite"), f"is also an input of this command ({data / 'm.zarr'})"),
        (("ingest", data / "good.jsonl", "-o", "lnk/../../../good.jsonl", "--overwrite"),
         f"is also an input of this command ({data / 'good.jsonl'})"),
        (("transform", "-m", data / "m.zarr", "-i", data / "c.zarr",
          "-o", "lnk/../../../c.zarr/X/e.zarr"), f"is inside {data / 'c.zarr'}, an input"),
    ):
        refused(cli(*args), "lnk/../../../", said, "--output")
    assert _tree(layout) == before  # nothing written, where the OS goes or by the names


def test_an_output_through_dotdot_after_a_link_is_written_where_the_os_goes(layout):
    data = layout / "data"
    first = (data / "e.zarr" / "zarr.json").stat().st_ino
    result = cli("transform", "-m", data / "m.zarr", "-i", data / "c.zarr",
                 "-o", "lnk/../../../e.zarr", "--overwrite")
    assert result.exit_code == 0, result.output
    assert "lnk/../../../e.zarr: 40 documents embedded" in result.output
    assert (data / "e.zarr" / "zarr.json").stat().st_ino != first  # replaced, as asked
    result = cli("fit", "-i", data / "c.zarr", "-o", "lnk/../../../m2.zarr", "-r", 2,
                 "--max-iter", 2)
    assert result.exit_code == 0, result.output
    assert (data / "m2.zarr" / "zarr.json").is_file()
    # nothing where the names collapsed lexically lead (work/), no lock or staging left over
    assert sorted(os.listdir(layout / "work")) == ["one"]
    assert sorted(os.listdir(data)) == ["c.zarr", "deep", "e.zarr", "good.jsonl", "m.zarr",
                                        "m2.zarr"]


def test_an_output_through_a_symbolic_link_to_the_inputs_folder(layout):
    data = layout / "data"
    (layout / "alias").symlink_to(data, target_is_directory=True)
    (layout / "e-link.zarr").symlink_to(data / "e.zarr", target_is_directory=True)
    before = _tree(layout)
    for args, said in (
        (("fit", "-i", data / "c.zarr", "-o", layout / "alias" / "c.zarr", "-r", 2,
          "--overwrite"), f"{layout / 'alias' / 'c.zarr'} is also an input of this command"),
        (("fit", "-i", layout / "alias" / "c.zarr", "-o", data / "c.zarr", "-r", 2,
          "--overwrite"), f"{data / 'c.zarr'} is also an input of this command"),
        (("neighbors", "-m", data / "m.zarr", "-i", layout / "e-link.zarr", "--all",
          "-o", data / "e.zarr", "--overwrite"),
         f"{data / 'e.zarr'} is also an input of this command"),
        (("fit", "-i", layout / "alias" / "c.zarr", "-o", data / "c.zarr" / "X" / "m.zarr",
          "-r", 2), "is inside"),
        (("ingest", layout / "alias", "-o", data / "new.zarr"), "is inside"),
        (("fit", "-i", layout / "alias" / "c.zarr", "-o", data, "-r", 2, "--overwrite"),
         f"{data} contains"),
    ):
        refused(cli(*args), said)
    assert _tree(layout) == before


@pytest.mark.parametrize("suffix", [".lock", ".lock.json", ".old", ".scratch"])
def test_a_symbolic_link_at_an_outputs_lock_name_is_refused(layout, suffix):
    """``new.zarr.lock`` linked to an input: the lock (``flock`` on a file opened, by
    filelock 3.x with O_TRUNC) would be taken through the link, on the input."""
    data = layout / "data"
    pointed = data / "c.zarr" / "zarr.json" if suffix.startswith(".lock") else data / "c.zarr"
    link = data / f"new.zarr{suffix}"
    link.symlink_to(pointed)
    before = _tree(layout)
    line = refused(cli("fit", "-i", data / "c.zarr", "-o", data / "new.zarr", "-r", 2),
                   f"{link} is a symbolic link (to {pointed})", str(data / "c.zarr"),
                   "--output")
    assert "loop" not in line
    assert _tree(layout) == before  # the input's bytes, the link itself, no output
    link.unlink()
    link.symlink_to(data / "good.jsonl")  # a link to the source of an ingest
    before = _tree(layout)
    refused(cli("ingest", data / "good.jsonl", "-o", data / "new.zarr"),
            f"{link} is a symbolic link")
    assert _tree(layout) == before


def _namespace_command() -> list[str]:
    """``unshare`` giving the command a private mount namespace (as root, or mapped to it)."""
    mapped = [] if os.geteuid() == 0 else ["--map-root-user"]
    return ["unshare", *mapped, "--mount", "--propagation", "private"]


def _bind_mount_unavailable(tmp_path: Path) -> str | None:
    """Why a folder cannot be mounted a second time in a private mount namespace, or None."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "the unshare and mount commands (util-linux) are not installed"
    (tmp_path / "probe-a").mkdir()
    (tmp_path / "probe-b").mkdir()
    try:
        probe = subprocess.run(
            [*_namespace_command(), "mount", "--bind", str(tmp_path / "probe-a"),
             str(tmp_path / "probe-b")], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare did not run: {exc}"
    finally:
        (tmp_path / "probe-a").rmdir()
        (tmp_path / "probe-b").rmdir()
    if probe.returncode:
        return ("mount --bind in a private mount namespace failed (unshare --mount needs root, "
                f"CAP_SYS_ADMIN or user namespaces): {probe.stderr.strip()[-300:]}")
    return None


def _in_second_mount(data: Path, mount: Path, *args) -> subprocess.CompletedProcess:
    """``sphdist --quiet ARGS`` with ``data`` mounted a second time at ``mount`` for it."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(sphdist.__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    return subprocess.run(
        [*_namespace_command(), "sh", "-c", script, "sh", str(data), str(mount), SPHDIST,
         "--quiet", *map(str, args)], env=env, capture_output=True, text=True, timeout=300)


def test_an_output_in_a_second_mount_of_the_inputs_folder_is_refused(layout):
    """The issue's fit: ``--init-from m.zarr -o mnt/m.zarr --overwrite``, ``mnt`` a bind
    mount of the folder of ``m.zarr``, replaced the model it started from."""
    why = _bind_mount_unavailable(layout)
    if why:
        pytest.skip(why)
    data, mnt = layout / "data", layout / "mnt"
    mnt.mkdir()
    before = _tree(layout)
    for args, said in (
        (("fit", "-i", data / "c.zarr", "--init-from", data / "m.zarr", "-o", mnt / "m.zarr",
          "-r", 2, "--overwrite"),
         f"{mnt / 'm.zarr'} is also an input of this command ({data / 'm.zarr'})"),
        (("transform", "-m", data / "m.zarr", "-i", data / "c.zarr", "-o", mnt / "c.zarr",
          "--overwrite"), f"{mnt / 'c.zarr'} is also an input of this command"),
        (("transform", "-m", data / "m.zarr", "-i", data / "c.zarr",
          "-o", mnt / "c.zarr" / "X" / "e.zarr"),
         f"{mnt / 'c.zarr' / 'X' / 'e.zarr'} is inside {data / 'c.zarr'}, an input"),
        (("ingest", data / "good.jsonl", "-o", mnt / "good.jsonl", "--overwrite"),
         f"{mnt / 'good.jsonl'} is also an input of this command"),
    ):
        result = _in_second_mount(data, mnt, *args)
        assert result.returncode == 1, (args, result.stdout, result.stderr)
        errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
        assert len(errors) == 1 and said in errors[0], (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert _tree(layout) == before  # the input as it was; the mount gone with its namespace
    # a new output there is written (a second mount is refused only where it is an input)
    result = _in_second_mount(data, mnt, "transform", "-m", data / "m.zarr", "-i",
                              data / "c.zarr", "-o", mnt / "e2.zarr")
    assert result.returncode == 0, result.stderr
    assert (data / "e2.zarr" / "zarr.json").is_file() and not os.listdir(mnt)
