"""The command line answers help, --version and usage errors without the heavy libraries.

``sphdist --help`` used to import scikit-learn, SciPy, Dask and every method (2.4-2.9 s on 2
busy cores). These tests check the mechanism -- which modules a fresh interpreter has imported
after the command -- never a wall time (STYLE.md: speed is measured in benchmarks).
"""

import json
import subprocess
import sys

import pytest

#: Imported only by the work itself (a fit, an ingest, a figure), never to parse arguments.
HEAVY = ("dask", "distributed", "sklearn", "scipy", "zarr", "matplotlib", "numba", "pandas")

#: Runs ``sphdist ARGS`` in this interpreter (``code``: its exit status); a probe adds the line
#: that prints what it reports.
_RUN = """
import json, sys
from sphdist.cli import main
try:
    main(sys.argv[1:], prog_name="sphdist")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
"""

#: The exit status and the heavy top-level packages in sys.modules, as the last line of stdout.
_PROBE = _RUN + f"""
loaded = sorted({{name.partition(".")[0] for name in sys.modules}} & set({HEAVY!r}))
print(json.dumps({{"code": code, "heavy": loaded}}))
"""


def _run(code: str, *args: str) -> tuple[dict, subprocess.CompletedProcess]:
    result = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
        env={**_clean_env(), "COLUMNS": "100"},
    )
    lines = result.stdout.strip().splitlines()
    assert lines, result.stderr
    return json.loads(lines[-1]), result


def _clean_env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if k != "DASK_SCHEDULER_ADDRESS"}


COMMANDS = [
    [], ["ingest"], ["synth"], ["fit"], ["evaluate"], ["transform"], ["export"], ["neighbors"],
    ["info"], ["plot"], ["plot", "convergence"], ["plot", "embedding"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "main")
def test_help_imports_no_heavy_library(command):
    report, result = _run(_PROBE, *command, "--help")
    assert report["code"] == 0, result.stderr
    assert "Usage: sphdist" in result.stdout
    assert report["heavy"] == []


def test_version_imports_no_heavy_library():
    report, result = _run(_PROBE, "--version")
    assert report["code"] == 0, result.stderr
    assert result.stdout.startswith("sphdist, version ")
    assert report["heavy"] == []


USAGE_ERRORS = {
    "not a number": (["fit", "-r", "notanumber", "--input", "x"], "'notanumber' is not a valid"),
    "missing option": (["fit"], "Missing option '--input'"),
    "out of range": (["fit", "--input", "x", "--lam", "1.5"],
                     "'1.5' is not a float in the range [2.0, 4503599627370496.0] or one of "
                     "'exact', 'palm', 'theory'."),
    # declared after the cluster options: their defaults are not checked on the way
    "after the cluster options": (["fit", "--input", "x", "--retries", "-1"],
                                  "-1 is not in the range x>=0."),
    "not a dtype": (["fit", "--input", "x", "--dtype", "int8"], "is not one of"),
    "ingest": (["ingest", "--min-df", "abc", "-o", "x"], "neither an integer nor a float"),
    "transform": (["transform", "-m", "m.zarr"], "Missing option '--input'"),
    "unknown command": (["fitt"], "No such command 'fitt'"),
}


@pytest.mark.parametrize("case", list(USAGE_ERRORS))
def test_usage_errors_import_no_heavy_library(case):
    args, message = USAGE_ERRORS[case]
    report, result = _run(_PROBE, *args)
    assert report["code"] == 2, result.stderr
    assert message in " ".join(result.stderr.split()), result.stderr
    assert report["heavy"] == []


def test_importing_the_package_imports_no_heavy_library():
    code = f"""
import json, sys
import sphdist
sphdist.__version__, sphdist.SphdistError, dir(sphdist)
print(json.dumps({{"heavy": sorted({{n.partition(".")[0] for n in sys.modules}}
                                  & set({HEAVY!r}))}}))
"""
    report, _ = _run(code)
    assert report["heavy"] == []


def test_the_parameter_table_imports_no_heavy_library():
    code = f"""
import json, sys
from sphdist.jobs import params
params.PARAMS["lam"].spec, params.defaults(), params.JOB_PARAMS["retries"].default
print(json.dumps({{"heavy": sorted({{n.partition(".")[0] for n in sys.modules}}
                                  & set({HEAVY!r}))}}))
"""
    report, _ = _run(code)
    assert report["heavy"] == []


def _options(command, path=()):
    import click

    for param in command.params:
        yield path, param, param.get_default(click.Context(command))
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _options(sub, (*path, name))


def test_the_unchecked_defaults_pass_their_checks():
    """A default is not given to :mod:`sphdist.jobs.cluster`'s check (that imports distributed):
    each one passes it."""
    import inspect

    from sphdist.cli import main
    from sphdist.jobs import cluster

    checked = []
    for path, param, default in _options(main):
        if param.callback is not None and param.callback.__qualname__.startswith("_checked."):
            check = inspect.getclosurevars(param.callback).nonlocals["name"]
            if isinstance(default, (str, int)):  # not None nor click's UNSET
                getattr(cluster, check)(default)  # raises if the default were refused
                checked.append((path, param.name))
    assert (("fit",), "memory_limit") in checked and (("fit",), "dashboard_address") in checked


def test_public_names_are_those_of_before():
    import sphdist
    from sphdist.methods.angular import AngularDecomposition
    from sphdist.methods.baselines import KSVD
    from sphdist.methods.spherical_pca import SphericalPCA

    assert set(sphdist.__all__) == {
        "BAE", "KSVD", "AngularDecomposition", "GraphAngularDecomposition",
        "LiDunsonSphericalPCA", "NeighborIndex", "R1PCA", "SphdistError", "SphericalPCA",
        "__version__",
    }
    assert set(sphdist.__all__) <= set(dir(sphdist))
    assert {"core", "methods", "errors"} <= set(dir(sphdist))
    assert sphdist.SphericalPCA is SphericalPCA and sphdist.KSVD is KSVD
    assert sphdist.AngularDecomposition is AngularDecomposition
    assert isinstance(sphdist.__version__, str) and sphdist.__version__
    assert sphdist.methods.spherical_pca.SphericalPCA is SphericalPCA
    namespace: dict = {}
    exec("from sphdist import *", namespace)
    assert set(sphdist.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="has no attribute 'NotAThing'"):
        sphdist.NotAThing  # noqa: B018


def test_synth_of_json_lines_imports_no_scikit_learn(tmp_path):
    """Issue 33 item 10: `sphdist synth` imported scikit-learn (4.6 s of 0.1 s of work)."""
    report, result = _run(_PROBE, "synth", "--n-docs", "20", "--n-topics", "2", "-o",
                          str(tmp_path / "s.jsonl"))
    assert report["code"] == 0, result.stderr
    assert (tmp_path / "s.jsonl").stat().st_size > 0
    assert "sklearn" not in report["heavy"] and "zarr" not in report["heavy"], report
    assert "distributed" not in report["heavy"], report


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    """A model of 60 text documents (r = 3), its default index beside it, and a document id."""
    from click.testing import CliRunner

    from sphdist.cli import main
    from sphdist.io.corpus import open_corpus

    from .._textcorpus import write_text_tree

    root = tmp_path_factory.mktemp("startup-knn")
    texts = write_text_tree(root / "src", n_per_label=20)
    corpus, model = root / "corpus.zarr", root / "model.zarr"
    runner = CliRunner()
    for args in (["ingest", str(root / "src"), "-o", str(corpus), "--hashing",
                  "--n-features", "256", "--chunk-size", "16"],
                 ["fit", "-i", str(corpus), "-o", str(model), "-r", "3", "--max-iter", "5"],
                 ["index", "-m", str(model)]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
    ids = [str(i) for i in open_corpus(corpus).ids().read()]
    doc_id = next(i for i in ids if texts.get(i, "") != "a")  # not the empty document
    return model, doc_id


@pytest.mark.parametrize("how", [[], ["--exact"]], ids=["index", "exact"])
def test_one_neighbour_query_imports_neither_scikit_learn_nor_dask(small_model, how):
    """Issue 33 item 3: one `neighbors --doc-id` query imported scikit-learn, SciPy's stats,
    dask and pandas (1.85 s of a 3 s query at 1M) through the model reader, the solver and
    the estimator around the index: it reads the model's U, a chunk of V, the ids of the
    hits and the memory-mapped index, and needs none of them."""
    model, doc_id = small_model
    report, result = _run(_PROBE, "neighbors", "-m", str(model), "--doc-id", doc_id, "-k", "3",
                          *how)
    assert report["code"] == 0, result.stderr
    assert len(result.stdout.strip().splitlines()) == 1 + 3 + 1, result.stdout  # header, 3 rows
    searched = "searching the index" in result.stderr
    assert searched is (how == []), result.stderr
    for name in ("sklearn", "dask", "distributed", "pandas", "scipy"):
        assert name not in report["heavy"], report


def test_a_fit_on_threads_imports_neither_scikit_learn_nor_distributed(small_model, tmp_path):
    """Issue 29 item 5: `sphdist fit` imported scikit-learn (with SciPy's stats and pandas) for
    ``check_random_state`` and a validation context, and distributed to resolve dask's
    ``"threads"`` (about 1.6 s of a 20 Newsgroups fit's start-up); the threaded fit needs
    neither. The model is bitwise that of the in-process fit of the fixture."""
    import numpy as np

    from sphdist.io.model import open_model

    model, _ = small_model
    corpus, out = model.parent / "corpus.zarr", tmp_path / "threads.zarr"
    report, result = _run(_PROBE, "fit", "-i", str(corpus), "-o", str(out), "-r", "3",
                          "--max-iter", "5")
    assert report["code"] == 0, result.stderr
    assert "threaded scheduler" in result.stderr, result.stderr
    for name in ("sklearn", "distributed", "pandas"):
        assert name not in report["heavy"], report
    a, b = open_model(model), open_model(out)
    assert a.objective == b.objective
    assert np.array_equal(a.U, b.U)
    assert np.array_equal(a.V().compute(), b.V().compute())


def test_one_text_query_imports_no_dask(small_model):
    """A text query needs scikit-learn's vectorizer (the ingestion's tokens and hashing), and
    with it what scikit-learn imports; not dask."""
    model, _ = small_model
    report, result = _run(_PROBE, "neighbors", "-m", str(model), "-q", "rocket orbit moon",
                          "-k", "3")
    assert report["code"] == 0, result.stderr
    assert "sklearn" in report["heavy"]
    assert "dask" not in report["heavy"] and "distributed" not in report["heavy"], report


_PROBE_MODULES = _RUN + """
prefixes = ("sphdist.cli.", "sphdist.text", "tqdm", "filelock", "matplotlib", "sklearn",
            "distributed", "dask", "pandas", "scipy", "numpy.ma.")
print(json.dumps({"code": code, "heavy": sorted(n for n in sys.modules
                                               if (n + ".").startswith(prefixes))}))
"""


def test_one_neighbour_query_imports_only_the_module_of_its_command(small_model):
    """Issue 33 item 3: the command group imported every command's module (ingest's text
    sources, fit's tables) to run one; a query takes no lock and draws no progress bar; the
    ids of the hits are grouped by chunk without ``np.unique`` (which imports numpy.ma)."""
    model, doc_id = small_model
    report, result = _run(_PROBE_MODULES, "neighbors", "-m", str(model), "--doc-id", doc_id,
                          "-k", "3")
    assert report["code"] == 0, result.stderr
    assert "searching the index" in result.stderr
    # the query's log line names --exact through a remedy marker: the CLI's renderer (click
    # and sphdist.errors only) words it
    assert report["heavy"] == ["sphdist.cli", "sphdist.cli._common", "sphdist.cli._remedies",
                               "sphdist.cli.use"], report


def test_the_command_table_is_whole_and_each_module_defines_its_commands():
    """The commands are registered by name (:data:`sphdist.cli.COMMANDS`, click's lazily
    loaded subcommands), imported when one is run; ``main.commands`` (click's table,
    sphinx-click's) imports them all."""
    import importlib

    import click

    from sphdist.cli import COMMANDS, main

    for name, path in COMMANDS.items():
        module, _, attr = path.rpartition(".")
        assert getattr(importlib.import_module(module), attr).name == name, path
    every = sorted(COMMANDS)
    assert main.list_commands(click.Context(main)) == every
    assert sorted(main.commands) == every
    assert main.get_command(click.Context(main), "neighbors") is main.commands["neighbors"]
    assert main.get_command(click.Context(main), "fitt") is None
