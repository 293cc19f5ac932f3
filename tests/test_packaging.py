"""What a user installs is what is tested: the wheel, installed without extras, runs every path.

CI installs the ``test`` extra, so a runtime import that only an extra provides would pass the
rest of the suite and break ``pip install sphdist`` (it did: the embedded LocalCluster's TLS
needs ``cryptography``, once listed only in the test extra). This test builds the wheel,
installs it into a fresh virtual environment with no extras and no access to this one's
packages, and runs the commands a new user runs: synth, ingest, fit on threads and on a
LocalCluster (``--n-workers 2``), transform, export, index, neighbors (a query, through the
index, the k-NN graph), evaluate, info and plot.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=900, **kwargs)


@pytest.fixture(scope="module")
def bare_install(tmp_path_factory) -> Path:
    """The ``bin`` folder of a fresh environment holding the wheel and its runtime deps only."""
    root = tmp_path_factory.mktemp("wheel")
    # built from a copy of the working tree: setuptools keeps a build/ folder beside the
    # sources, and a stale one would put modules that no longer exist into the wheel
    source = root / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "work", "build", "dist", "*.egg-info", "__pycache__", "_build",
        ".*_cache", "generated",
    ))
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w",
                  str(root / "dist"), str(source)])
    assert built.returncode == 0, built.stderr
    (wheel,) = (root / "dist").glob("sphdist-*.whl")
    # no pip of its own (ensurepip takes seconds): this environment's pip installs into it
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(root / "venv")
    bin_dir = root / "venv" / "bin"
    # --no-compile: no .pyc for every module of every dependency (half the install's time);
    # the commands below compile what they import, once, as a user's first run does
    # without PYTHONPATH: a checkout on it reads as sphdist "already satisfied" to pip
    installed = _run([sys.executable, "-m", "pip", "--python", str(bin_dir / "python"),
                      "install", "--quiet", "--no-compile", str(wheel)], env=_clean_env())
    assert installed.returncode == 0, installed.stderr
    return bin_dir


def _clean_env() -> dict[str, str]:
    """This environment less the variables that would put this checkout on ``sys.path``."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    return _clean_env() | {"SPHDIST_LOCK_LEASE": "30"}


def test_no_extra_is_installed(bare_install):
    """The environment really lacks the extras (else the test below would prove nothing)."""
    for extra in ("pytest", "moto", "s3fs", "hypothesis", "dask_jobqueue"):
        probe = _run([str(bare_install / "python"), "-c", f"import {extra}"])
        assert probe.returncode != 0, f"{extra} is importable in the bare install"


def test_the_wheel_carries_the_license_and_no_unused_dependency(bare_install):
    """Issue 33 item 10: BSD-3-Clause with no LICENSE file shipped; dask-ml required, never
    imported (+208 MB with numba and llvmlite)."""
    code = ("import importlib.metadata as m, json; d = m.distribution('sphdist'); "
            "print(json.dumps({'files': [str(f) for f in d.files], 'requires': d.requires, "
            "'license': d.metadata.get('License-Expression')}))")
    probe = _run([str(bare_install / "python"), "-c", code], cwd=bare_install,
                 env=_clean_env())  # not the
    assert probe.returncode == 0, probe.stderr  # checkout's sphdist.egg-info, on sys.path[0]
    meta = json.loads(probe.stdout)
    licenses = [f for f in meta["files"] if f.endswith("LICENSE")]
    assert licenses, meta["files"]
    (path,) = [bare_install.parent / "lib" / f"python{sys.version_info.major}."
               f"{sys.version_info.minor}" / "site-packages" / f for f in licenses]
    assert path.read_text().startswith("BSD 3-Clause License")
    assert meta["license"] == "BSD-3-Clause"
    assert not [r for r in meta["requires"] if r.lower().startswith(("dask-ml", "dask_ml"))]
    for unused in ("dask_ml", "numba"):
        probe = _run([str(bare_install / "python"), "-c", f"import {unused}"], cwd=bare_install)
        assert probe.returncode != 0, f"{unused} is installed with sphdist"


def test_every_path_runs_from_the_wheel_without_extras(bare_install, env, tmp_path):
    sphdist = str(bare_install / "sphdist")

    def ok(*args: str) -> subprocess.CompletedProcess:
        done = _run([sphdist, *args], env=env, cwd=tmp_path)
        assert done.returncode == 0, f"sphdist {' '.join(args)}:\n{done.stderr[-3000:]}"
        assert "Traceback" not in done.stderr
        return done

    ok("--help")
    ok("synth", "--n-docs", "600", "--n-topics", "3", "--seed", "0", "-o", "docs.jsonl")
    ok("ingest", "docs.jsonl", "--label-field", "label", "-o", "corpus.zarr")
    ok("fit", "--input", "corpus.zarr", "--output", "threads.zarr", "-r", "4", "--n-workers", "0")
    # the embedded LocalCluster (TLS with temporary credentials) is what needs cryptography
    ok("fit", "--input", "corpus.zarr", "--output", "model.zarr", "-r", "4", "--n-workers", "2")
    ok("transform", "-m", "model.zarr", "-i", "corpus.zarr", "-o", "embedding.zarr")
    ok("export", "-m", "model.zarr", "-o", "embedding.parquet")
    first = json.loads((tmp_path / "docs.jsonl").read_text().splitlines()[0])
    ok("neighbors", "-m", "model.zarr", "--query", first["text"], "-k", "3")
    # faiss (a runtime dependency): the index, a search through it, the k-NN graph
    ok("index", "-m", "model.zarr", "--kind", "ivf", "--nlist", "4")
    assert "searching the index" in ok("neighbors", "-m", "model.zarr", "--query",
                                       first["text"], "-k", "3").stderr
    ok("neighbors", "-m", "model.zarr", "--all", "-k", "3", "-o", "knn.parquet")
    figures = json.loads(ok("evaluate", "-m", "model.zarr", "-i", "corpus.zarr", "--json").stdout)
    assert 0.0 <= figures["accuracy"] <= 1.0 and 0.0 <= figures["knn_accuracy"] <= 1.0
    ok("info", "model.zarr")
    ok("plot", "convergence", "-m", "model.zarr", "-o", "convergence.png")
    assert (tmp_path / "convergence.png").stat().st_size > 0
    assert (tmp_path / "embedding.parquet").stat().st_size > 0
