"""Structured remedies (issue 32, item 1): one Remedy, worded for Python and for the shell.

An error below :mod:`sphdist.cli` names its remedy as a :class:`sphdist.errors.Remedy` (the
job, its paths, its parameters by their Python names); ``str(exc)`` words it as a call of the
Python API with keyword arguments, the command line as a ``sphdist`` command built from the
options of its click commands, which works when pasted.
"""

import re
import shlex
import subprocess
import sys

import click
import numpy as np
import pytest
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.cli._remedies import CommandForm, spelling
from sphdist.errors import (
    OutputExistsError,
    ParameterError,
    PythonForm,
    Remedy,
    option,
    remedies,
    remedy,
    render,
)
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.io.model import open_model
from sphdist.jobs import run
from sphdist.jobs.fit import FitRequest

from .reference import random_corpus

pytestmark = pytest.mark.usefixtures("sync_scheduler")

#: ``sphdist`` in a shell: this interpreter running the command line of this tree.
SPHDIST = [sys.executable, "-c", "import sys; from sphdist.cli import main; sys.exit(main())"]

KW = dict(n_components=3, max_iter=2, tol=0, random_state=0)


@pytest.fixture
def corpus(tmp_path):
    X = random_corpus(40, 90, seed=2)
    with CorpusWriter(tmp_path / "corpus.zarr", n_features=40,
                      feature_scheme={"type": "hashing"}) as w:
        for a, b in [(0, 45), (45, 90)]:
            w.write_chunk(X[:, a:b], [str(j) for j in range(a, b)])
        return w.commit(idf=np.ones(40))


def _cli_form(name="fit"):
    return CommandForm(main.commands[name], main)


# -- the two forms of one message -----------------------------------------------------------

def test_an_option_is_a_keyword_in_python_and_the_commands_own_option_on_the_line():
    message = ("pass " + option("memory_budget", '4GiB') + ", " + option("overwrite", True) + ", "
               + option("accelerate", False) + ", " + option("n_components", 5) + " or another "
               + option("output"))
    assert render(message) == ("pass memory_budget='4GiB', overwrite=True, accelerate=False, "
                               "n_components=5 or another output")
    assert render(message, _cli_form()) == ("pass --memory-budget 4GiB, --overwrite, "
                                            "--no-accelerate, -r 5 or another --output")


def test_the_spelling_of_an_option_is_read_off_the_click_command():
    """The long option, or a short one that is a notation of its own (-r, -k), never a table."""
    options = {p.name: spelling(p) for p in main.commands["fit"].params
               if isinstance(p, click.Option)}
    assert options["n_components"] == "-r" and options["input_"] == "--input"
    assert options["random_state"] == "--seed" and options["memory_budget"] == "--memory-budget"
    evaluate = {p.name: spelling(p) for p in main.commands["evaluate"].params}
    assert evaluate["n_clusters"] == "-k" and evaluate["model"] == "--model"


def test_a_remedy_is_a_call_in_python_and_a_command_on_the_line():
    fix = Remedy("fit", {"input": "c d.zarr", "output": "m.zarr"},
                 {"resume": True, "n_components": 5, "lam": "palm", "tol": 0.0,
                  "accelerate": False}, "continue it")
    message = ("m.zarr exists. To resolve this, continue it: " + remedy(fix) + ".")
    assert remedies(message) == (fix,)
    python = render(message)
    assert "`sphdist.jobs.run(sphdist.jobs.fit.FitRequest(input='c d.zarr', output='m.zarr', " \
           "resume=True, n_components=5, lam='palm', tol=0.0, accelerate=False))`" in python
    assert "--" not in python
    line = render(message, _cli_form())
    assert ("`sphdist fit --input 'c d.zarr' --output m.zarr --resume -r 5 --lam palm --tol 0 "
            "--no-accelerate`") in line
    assert PythonForm().remedy(fix).startswith("sphdist.jobs.run(sphdist.jobs.fit.FitRequest(")


def test_every_fit_option_a_remedy_can_name_exists_on_sphdist_fit():
    """The command of a remedy naming every parameter the fit's remedies can give parses: the
    fit's request, changed (:meth:`FitRequest.remedy`)."""
    params = {"n_components": 4, "max_iter": 9, "tol": 1e-6, "random_state": 3, "lam": "palm",
              "mu": 0.5, "init": "svd", "n_power_iter": 3, "split_every": 4, "dtype": "float32",
              "polar": "svd", "accelerate": False, "device": "cpu", "init_from": "w.zarr"}
    request = FitRequest("c.zarr", "m.zarr", checkpoint_every=2, checkpoint_interval=0.0,
                         memory_budget="1GiB", retries=1, **params)
    fix = request.remedy(resume=True)
    assert "memory_budget" not in fix.overrides and "retries" not in fix.overrides
    argv = shlex.split(_cli_form().remedy(fix))
    assert argv[:2] == ["sphdist", "fit"]
    ctx = main.commands["fit"].make_context("fit", argv[2:], resilient_parsing=True)
    given = {k: v for k, v in ctx.params.items()
             if ctx.get_parameter_source(k) is click.core.ParameterSource.COMMANDLINE}
    assert given["resume"] is True and given["n_components"] == 4 and given["lam"] == "palm"
    assert given["random_state"] == 3 and given["accelerate"] is False
    assert given["checkpoint_every"] == 2 and given["init_from"].name == "w.zarr"
    assert given["checkpoint_interval"] == 0.0


# -- a Python caller of the fit job, and the same error on the command line ------------------

def test_a_python_caller_that_needs_a_resume_is_told_it_in_keywords(corpus, tmp_path):
    out = tmp_path / "m.zarr"
    run(FitRequest(corpus.path, out, callback=None, **KW))
    with pytest.raises(OutputExistsError) as caught:  # the same fit, 2 more iterations asked
        run(FitRequest(corpus.path, out, callback=None, **{**KW, "max_iter": 4}))
    message = str(caught.value)
    assert "--" not in message, message
    assert "sphdist fit" not in message
    assert "continue it: `sphdist.jobs.run(sphdist.jobs.fit.FitRequest(input=" in message
    assert "resume=True" in message and "choose another output" in message
    resume, replace = caught.value.remedies
    assert resume.action == "fit" and resume.overrides["resume"] is True
    assert replace.overrides["overwrite"] is True
    assert resume.target == {"input": str(corpus.path), "output": str(out)}
    # the remedy's keywords, as given, continue the fit
    arguments = resume.arguments()
    model = run(FitRequest(arguments.pop("input"), arguments.pop("output"), callback=None,
                           **arguments))
    assert model.n_iter == 4


def test_an_out_of_range_n_components_names_the_option_the_user_typed(corpus):
    """``-r 5000`` on the command line: the error says -r, not n_components (issue 32)."""
    result = CliRunner().invoke(main, ["fit", "-i", str(corpus.path), "-r", "5000",
                                       "--n-workers", "0"])
    assert result.exit_code == 1, result.output
    line = result.stderr.strip().splitlines()[-1]
    assert "-r 5000" in line and "1 <= -r <= 40" in line, line
    assert "n_components" not in line
    with pytest.raises(ParameterError, match=r"n_components=5000 .* 1 <= n_components <= 40"):
        run(FitRequest(corpus.path, corpus.path.parent / "m.zarr", n_components=5000,
                       callback=None))


def test_the_command_line_prints_the_command_and_it_works_when_pasted(corpus, tmp_path):
    """The same refusal on the command line: a ``sphdist fit`` command, run by a shell."""
    out = tmp_path / "m.zarr"
    run(FitRequest(corpus.path, out, callback=None, **KW))
    argv = [*SPHDIST, "fit", "-i", str(corpus.path), "-o", str(out), "-r", "3",
            "--max-iter", "3", "--tol", "0", "--n-workers", "0"]
    result = subprocess.run(argv, capture_output=True, text=True)
    assert result.returncode == 1, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "FitRequest" not in line and "choose another --output" in line, line
    commands = re.findall(r"`(sphdist [^`]+)`", line)
    assert len(commands) == 2 and "--resume" in commands[0], line
    assert commands[0].startswith(f"sphdist fit --input {shlex.quote(str(corpus.path))}")
    done = subprocess.run([*SPHDIST, *shlex.split(commands[0])[1:], "-q", "--n-workers", "0"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert open_model(out).n_iter == 3


def test_a_python_name_passed_on_under_another_option_name_finds_its_option():
    """``format`` is ``sphdist ingest``'s ``fmt``, ``address`` the ``--scheduler-address`` of
    a job on a cluster: both rendered as the option the user types."""
    assert render(option("format", "csv"), _cli_form("ingest")) == "--format csv"
    assert render(option("format", "csv"), _cli_form("export")) == "--format csv"
    assert render(option("address", "tcp://h:8786"), _cli_form()) == (
        "--scheduler-address tcp://h:8786")
    assert render(option("vocabulary", False), _cli_form("ingest")) == "--hashing"


def test_a_chain_of_remedies_is_one_pasteable_line():
    first = Remedy("transform", {"model": "m.zarr", "input": "c.zarr", "output": "e.zarr"})
    then = Remedy("export", {"model": "m.zarr", "input": "e.zarr", "output": "x.csv"})
    message = remedy(first, then)
    assert remedies(message) == (first, then)
    assert render(message, _cli_form()) == (
        "`sphdist transform --model m.zarr --input c.zarr --output e.zarr && "
        "sphdist export --model m.zarr --input e.zarr --output x.csv`")
    assert render(message).startswith(
        "`sphdist.jobs.run(sphdist.jobs.transform.TransformRequest(model='m.zarr', "
        "input='c.zarr', ")


def test_an_ingest_remedy_of_text_options_is_a_textspec_in_python_and_its_options_in_shell():
    """The ingest job's remedies carry TextSpec fields by their Python names; the command line
    spells each with the option of ``sphdist ingest`` that sets it (``vocabulary=False``:
    ``--hashing``, ``stop_words=None``: ``--stop-words none``, ``max_df=1.0``: ``1.0``, every
    document, not ``1``)."""
    from sphdist.text._messages import ingest_remedy

    fix = ingest_remedy(["a.jsonl"], "c.zarr", {
        "format": "jsonl", "categories": ["x", "y"], "label_field": None, "vocabulary": False,
        "n_features": 64, "sublinear_tf": False, "lowercase": False, "stop_words": None,
        "remove_headers": False}, min_df=1, max_df=1.0)
    import sphdist.jobs.ingest
    from sphdist.jobs.ingest import IngestRequest
    from sphdist.text.ingest import SourceSpec, TextSpec

    words = PythonForm().remedy(fix)
    assert words.startswith("sphdist.jobs.run(sphdist.jobs.ingest.IngestRequest.of(")
    call = words.removeprefix("sphdist.jobs.run(").removesuffix(")")
    assert eval(call, {"sphdist": sphdist}) == IngestRequest(  # the call builds the request
        SourceSpec(["a.jsonl"], format="jsonl", categories=["x", "y"]), "c.zarr",
        text=TextSpec(vocabulary=False, n_features=64, sublinear_tf=False, lowercase=False,
                      stop_words=None, min_df=1, max_df=1.0))
    assert CommandForm(main.commands["ingest"], main).remedy(fix) == (
        "sphdist ingest a.jsonl --output c.zarr --format jsonl --categories x,y --hashing "
        "--n-features 64 --no-sublinear-tf --no-lowercase --stop-words none --min-df 1 "
        "--max-df 1.0")


def test_a_storage_option_is_the_groups_option_on_the_line_and_its_setter_in_python():
    """``--storage-option`` is an option of the ``sphdist`` group: the command line spells it
    from the group's click option, Python names :func:`sphdist.io.set_storage_options`."""
    from sphdist.io import parse_storage_option

    message = ("pass `" + option("storage_option", ['key=...', 'secret=...']) + "`")
    assert render(message) == (
        "pass `sphdist.io.set_storage_options({'s3': {'key': '...', 'secret': '...'}})`")
    assert render(message, _cli_form()) == "pass `--storage-option key=... --storage-option " \
                                           "secret=...`"
    with pytest.raises(ParameterError) as bad:
        parse_storage_option("nokey")
    assert "--" not in str(bad.value) and "set_storage_options" in str(bad.value)
    result = CliRunner().invoke(main, ["--storage-option", "nokey", "fit", "--help"])
    assert result.exit_code == 2 and "--storage-option endpoint_url=http" in result.output


@pytest.mark.parametrize("through", ["pickle", "deepcopy"])
def test_a_message_naming_a_parameter_without_a_value_survives_a_copy(through):
    """Issue 43 item 4: a bad document's message travels from a task (pickled by a worker
    process, copied by dask) into the corpus' attributes and ``--json``: ``text_field=<unset>``
    was printed (a copy's unset value was another object), and a pickle failed outright."""
    import copy
    import pickle

    from sphdist.errors import option, render

    message = "name the text field with " + option("text_field")
    copied = (pickle.loads(pickle.dumps(message)) if through == "pickle"
              else copy.deepcopy(message))
    assert str(copied) == str(message) == "name the text field with text_field"
    form = CommandForm(main.commands["ingest"], main)
    assert render(copied, form) == "name the text field with --text-field"
