"""``sphdist fit`` validates its parameters and opens its input once, before any cluster starts."""


import pytest

from sphdist.cli import main
from sphdist.core import params
from sphdist.jobs import fit

# runner, corpus and connects: tests/_fit_cli.py (fixtures of every test module)


def _fit(runner, corpus, *args):
    return runner.invoke(main, ["--quiet", "fit", "-i", str(corpus), *args])


@pytest.mark.parametrize(
    "args, needle",
    [(["--tol", "nan"], "Got --tol nan instead"),  # a float to click, not to the table
     (["-r", "41"], "-r 41 is out of range"),  # beyond 40 documents, named by its option
     (["--init-from", "missing.model.zarr"], "missing.model.zarr")],
)
def test_bad_parameter_fails_before_any_cluster_starts(runner, corpus, connects, tmp_path,
                                                       args, needle):
    result = _fit(runner, corpus, "-o", str(tmp_path / "m.zarr"), *args)
    assert result.exit_code == 1, result.output
    assert needle in result.stderr and "Traceback" not in result.output
    assert connects == []
    assert not (tmp_path / "m.zarr").exists()


def test_existing_output_fails_before_any_cluster_starts(runner, corpus, connects, tmp_path):
    out = tmp_path / "m.zarr"
    assert _fit(runner, corpus, "-o", str(out), "-r", "2", "--max-iter", "1").exit_code == 0
    assert len(connects) == 1
    result = _fit(runner, corpus, "-o", str(out), "-r", "2")
    assert result.exit_code == 1 and "already exists" in result.stderr
    assert len(connects) == 1  # the second run never reached connect


def test_lam_below_two_is_a_usage_error(runner, corpus, connects):
    result = _fit(runner, corpus, "--lam", "1")
    assert result.exit_code == 2
    assert "Invalid value for '--lam'" in result.stderr and "'1'" in result.stderr
    assert connects == []


def test_the_removed_max_partials_is_a_usage_error_saying_what_replaced_it(
    runner, corpus, connects, tmp_path
):
    """Issue 29: a pass has no accumulation chains any more; a command line that still asks
    for them is refused with what bounds the memory now, not silently ignored."""
    result = _fit(runner, corpus, "-o", str(tmp_path / "m.zarr"), "--max-partials", "1")
    assert result.exit_code == 2
    assert "Invalid value for '--max-partials': was removed" in result.stderr
    assert "drop --max-partials" in result.stderr and "--threads-per-worker 1" in result.stderr
    assert "Traceback" not in result.output
    assert connects == [] and not (tmp_path / "m.zarr").exists()
    assert "--max-partials" not in _fit(runner, corpus, "--help").output  # hidden


def test_fit_opens_and_validates_once(runner, corpus, connects, monkeypatch, tmp_path):
    opened, validated = [], []
    open_input, validate = fit.open_input, params.validate

    def counting_open(path):
        opened.append(path)
        return open_input(path)

    def counting_validate(values, caller, table=params.PARAMS):
        if table is params.PARAMS:
            validated.append(dict(values))
        return validate(values, caller, table)

    monkeypatch.setattr(fit, "open_input", counting_open)
    monkeypatch.setattr(params, "validate", counting_validate)
    result = _fit(runner, corpus, "-o", str(tmp_path / "m.zarr"), "-r", "2", "--max-iter", "2",
                  "--dtype", "float32", "--polar", "svd", "--partials", "dense",
                  "--split-every", "3", "--n-power-iter", "1")
    assert result.exit_code == 0, result.output
    assert opened == [corpus] and len(connects) == 1
    assert len(validated) == 1
    assert {k: validated[0][k] for k in ("dtype", "polar", "partials", "split_every")} == {
        "dtype": "float32", "polar": "svd", "partials": "dense", "split_every": 3}
    from sphdist.io.model import open_model

    stored = open_model(tmp_path / "m.zarr").params
    assert stored["dtype"] == "float32" and stored["split_every"] == 3
    assert stored["n_power_iter"] == 1


def test_the_old_flag_init_n_iter_sets_n_power_iter_with_a_deprecation(runner, corpus,
                                                                        connects, tmp_path):
    from sphdist.io.model import open_model

    result = _fit(runner, corpus, "-o", str(tmp_path / "m.zarr"), "-r", "2", "--max-iter", "1",
                  "--init", "svd", "--init-n-iter", "2")
    assert result.exit_code == 0, result.output
    assert "'init_n_iter' is deprecated" in result.stderr and "--n-power-iter" in result.stderr
    assert open_model(tmp_path / "m.zarr").params["n_power_iter"] == 2
    assert "--init-n-iter" not in _fit(runner, corpus, "--help").output  # hidden


# -- issue 22: Ctrl-C says where the fit stopped and how to go on --------------------------------


def _interrupt_at(monkeypatch, iteration):
    """Ctrl-C when the checkpoint of ``iteration`` is about to be written."""
    save = fit.save_checkpoint

    def interrupted(path, state, **kwargs):
        if state.iteration == iteration:
            raise KeyboardInterrupt
        return save(path, state, **kwargs)

    monkeypatch.setattr(fit, "save_checkpoint", interrupted)


def _error_line(result):
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    assert "Aborted" not in result.output and "Traceback" not in result.output
    return lines[0]


def test_ctrl_c_during_a_fit_names_the_last_checkpoint_and_the_resume(
    runner, corpus, connects, monkeypatch, tmp_path
):
    from sphdist.io.model import open_model

    out = tmp_path / "m.zarr"
    _interrupt_at(monkeypatch, 3)
    result = _fit(runner, corpus, "-o", str(out), "-r", "2", "--max-iter", "6", "--tol", "0",
                  "--lam", "palm", "--checkpoint-interval", "0")  # a checkpoint each iteration
    assert result.exit_code == 130  # 128 + SIGINT, as a shell reports a job Ctrl-C ended
    line = _error_line(result)
    assert "interrupted" in line and "iteration 2" in line, line
    resume = line.split("`")[1]
    assert "--resume" in resume and "--lam palm" in resume and "--max-iter 6" in resume, line
    monkeypatch.undo()
    again = runner.invoke(main, ["--quiet", *resume.split()[1:]])
    assert again.exit_code == 0, again.output
    assert open_model(out).n_iter == 6


def test_ctrl_c_before_the_first_checkpoint_says_nothing_was_written(
    runner, corpus, connects, monkeypatch, tmp_path
):
    out = tmp_path / "m.zarr"
    _interrupt_at(monkeypatch, 1)
    result = _fit(runner, corpus, "-o", str(out), "-r", "2", "--max-iter", "6",
                  "--checkpoint-interval", "0")
    assert result.exit_code == 130
    line = _error_line(result)
    assert "nothing was written" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.zarr"]  # no staging left


# -- issue 22: seconds per iteration and the ETA count the checkpoint ---------------------------


def test_seconds_per_iteration_and_eta_are_the_wall_time_between_iterations(
    runner, corpus, connects, monkeypatch, tmp_path
):
    """A clock that only moves while a checkpoint is written (60 s each): iterations 2-4 each
    took 60 s of wall time, iteration 1 none (iteration 0 is not saved), so 45 s/iteration,
    whatever the solver's own seconds (which leave the checkpoint out)."""
    import json

    from sphdist.cli import fit as fit_command

    now = [0.0]
    save = fit.save_checkpoint

    def slow_save(path, state, **kwargs):
        now[0] += 60.0
        return save(path, state, **kwargs)

    monkeypatch.setattr(fit, "save_checkpoint", slow_save)
    monkeypatch.setattr(fit_command, "_now", lambda: now[0])
    args = ["-i", str(corpus), "-r", "2", "--max-iter", "4", "--tol", "0",
            "--checkpoint-interval", "0"]  # a checkpoint each iteration
    result = runner.invoke(main, ["fit", *args, "-o", str(tmp_path / "a.zarr"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["seconds_per_iteration"] == 45.0
    lines = {int(line.split()[1]): line for line in result.stderr.splitlines()
             if line.startswith("iter ")}
    assert "60.00s" in lines[3] and "eta 00:40" in lines[3], lines  # mean 40 s, 1 left
    assert "eta 00:00" in lines[4], lines
    now[0] = 0.0
    result = runner.invoke(main, ["--quiet", "fit", *args, "-o", str(tmp_path / "b.zarr")])
    assert result.exit_code == 0, result.output
    assert "45.00 s/iteration" in result.stdout, result.stdout
