"""The one job lifecycle (issue 39): ``run(request)`` owns the policy, the overwrite decision,
the hold, the commit and the Ctrl-C report for every command that is a request."""

import dataclasses
import os
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.errors import Interrupted, OutputExistsError, ParameterError
from sphdist.jobs import Request, run


@dataclasses.dataclass(frozen=True)
class CopyRequest(Request):
    """A command as a new one is written: its fields, what it writes, its work on the output."""

    command: ClassVar[str] = "copy"
    writes: ClassVar[str] = "file"
    targets: ClassVar[tuple[str, ...]] = ("source", "output")

    source: Any
    output: Any
    overwrite: bool = False
    interrupt: bool = False

    def inputs(self) -> tuple[Any, ...]:
        return (self.source,)

    def prepare(self) -> bytes:
        return open(self.source, "rb").read()

    def execute(self, held: Any, prepared: bytes) -> str:
        with held.file() as staging:
            staging.write_bytes(prepared)
            if self.interrupt:
                raise KeyboardInterrupt
        return str(held.path)


def test_a_request_checks_its_inputs_then_replaces_only_when_asked(tmp_path):
    source, out = tmp_path / "a.txt", tmp_path / "b.txt"
    out.write_text("before")
    with pytest.raises(FileNotFoundError):  # the inputs first: their remedies know the output
        run(CopyRequest(tmp_path / "missing.txt", out))
    source.write_text("after")
    with pytest.raises(OutputExistsError, match="already exists"):
        run(CopyRequest(source, out))
    assert out.read_text() == "before"
    assert run(CopyRequest(source, out, overwrite=True)) == str(out)
    assert out.read_text() == "after"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.txt"]  # no lock, no staging


def test_an_input_is_never_the_output_and_ctrl_c_leaves_the_output_as_it_was(tmp_path):
    source = tmp_path / "a.txt"
    source.write_text("kept")
    with pytest.raises(ParameterError, match="is also an input of this command"):
        run(CopyRequest(source, source, overwrite=True))
    with pytest.raises(Interrupted, match="nothing was written"):
        run(CopyRequest(source, tmp_path / "c.txt", interrupt=True))
    assert os.listdir(tmp_path) == ["a.txt"] and source.read_text() == "kept"
    # the same request, changed, is the remedy an error carries
    fix = CopyRequest(source, tmp_path / "c.txt").remedy(overwrite=True)
    assert (fix.action, dict(fix.target), dict(fix.overrides)) == (
        "copy", {"source": str(source), "output": str(tmp_path / "c.txt")}, {"overwrite": True})


@pytest.mark.parametrize("argv, words", [
    (["synth", "--n-docs", "3", "--n-topics", "2", "-o", "."], "names no file or directory"),
    (["synth", "--n-docs", "3", "--n-topics", "2", "-o", ".."], "names no file or directory"),
    (["export", "-m", "m.zarr", "-o", "."], "contains m.zarr, an input of this command"),
    (["plot", "convergence", "-m", "m.zarr", "-o", ".."], "an input of this command"),
])
def test_an_output_that_names_no_entry_of_its_own_is_one_error_line(
    argv, words, tmp_path, monkeypatch,
):
    """``synth -o .`` printed a ValueError traceback once the format was read before the hold
    (the lock refused '.' in words, but only when taken); a '.' that holds an input is refused
    for that, as before."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and words in lines[0], lines
    assert os.listdir(work) == [] and os.listdir(tmp_path) == ["work"]
