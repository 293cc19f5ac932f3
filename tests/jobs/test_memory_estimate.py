"""The fit's memory estimate (issue 24, item 4): a fit that cannot fit memory is refused before
U is allocated, with the estimate and a command that fits; the estimate bounds a measured peak.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
import scipy.sparse as sp

from sphdist.core import graph, solver
from sphdist.core.solver import BASE_BYTES, peak_bytes
from sphdist.errors import InsufficientMemoryError
from sphdist.io.corpus import open_input
from sphdist.jobs.cluster import memory_check
from tests.reference import chunked, random_corpus

SPHDIST = str(Path(sys.executable).with_name("sphdist"))

#: Runs a command in a fresh process and prints the peak RSS (KiB) of its children alone.
_PEAK = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)")


def _address_space_limited():
    """A child that would allocate U anyway fails with MemoryError instead of swapping."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (16 * 2**30, resource.RLIM_INFINITY))


class _Refused(Exception):
    pass


@pytest.fixture(scope="module")
def hashed_corpus(tmp_path_factory):
    """3,000 synthetic documents on 2**18 hashed features (about 38,000 of them occur)."""
    path = tmp_path_factory.mktemp("memory") / "corpus.zarr"
    subprocess.run([SPHDIST, "synth", "--n-docs", "3000", "--n-topics", "5", "--n-features",
                    "262144", "--format", "corpus", "-o", str(path)], check=True,
                   capture_output=True)
    return path


@pytest.mark.parametrize("init, rows", [("random", "occurring"), ("svd", "all")])
def test_the_check_sees_the_rows_of_u_before_it_is_allocated(init, rows):
    X = random_corpus(400, 60, density=0.01, seed=3)
    occurring = int(np.count_nonzero(sp.csr_matrix(X).getnnz(axis=1)))
    assert occurring < 400
    seen = []

    def check(k):
        seen.append(k)
        raise _Refused

    with pytest.raises(_Refused):
        solver.fit(chunked(X, [20, 20, 20]), 3, init=init, random_state=0, check_memory=check)
    assert seen == [occurring if rows == "occurring" else 400]


def test_a_resumed_fit_is_checked_on_its_checkpoints_rows():
    A = random_corpus(300, 50, density=0.02, seed=4)
    occurring = int(np.count_nonzero(sp.csr_matrix(A).getnnz(axis=1)))
    assert occurring < 300
    X = chunked(A, [25, 25])
    state = solver.fit(X, 3, max_iter=2, tol=0, random_state=0)
    seen = []
    solver.fit(X, 3, max_iter=3, tol=0, state=state, check_memory=seen.append)
    assert seen == [occurring]  # the stateless fit's U lives on the occurring features


def test_the_suggested_r_is_the_largest_that_fits(hashed_corpus):
    source = open_input(hashed_corpus)
    limit = 2 * 2**30
    check = memory_check(source, 2500, dtype=np.float64, split_every=8, available=limit,
                         remedy=lambda r, s: f"R={r} S={s}")
    k = 38_000
    with pytest.raises(InsufficientMemoryError, match="needs about") as caught:
        check(k)
    r, s = map(int, re.search(r"R=(\d+) S=(\d+)", str(caught.value)).groups())
    chunk = 12 * source.nnz * max(source.chunks) // source.shape[1] + 8 * max(source.chunks)
    blocks = graph.pass_blocks(source.chunks)

    def need(r, s):
        p = peak_bytes(k, r, split_every=s, n_blocks=len(blocks), chunk_bytes=chunk,
                       block_chunks=max(b - a for a, b in blocks),
                       threads=len(os.sched_getaffinity(0)))
        return BASE_BYTES + p.driver + p.worker

    assert 0 < r < 2500 and s == 8  # the fan-in asked for: another saves one partial at most
    assert need(r, s) <= limit < need(r + 1, s)
    memory_check(source, r, dtype=np.float64, split_every=s, available=limit)(k)  # passes


@pytest.mark.slow
def test_the_estimate_bounds_a_measured_peak(hashed_corpus, tmp_path):
    out = tmp_path / "model.zarr"
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, SPHDIST, "fit", "--input", str(hashed_corpus),
         "-o", str(out), "-r", "200", "--max-iter", "2"],
        capture_output=True, text=True, check=True,
    )
    measured = int(done.stdout.split()[-1]) * 1024
    X = sp.csr_matrix(open_input(hashed_corpus).to_dask().compute())
    k = int(np.count_nonzero(X.getnnz(axis=1)))  # the occurring features U is fitted on
    n_blocks = len(graph.pass_blocks(open_input(hashed_corpus).chunks))
    estimate = BASE_BYTES + sum(peak_bytes(k, 200, n_blocks=n_blocks,
                                           threads=len(os.sched_getaffinity(0))))
    assert measured <= estimate <= 3 * measured, (measured, estimate, k)


def test_a_fit_that_cannot_fit_memory_is_refused_before_u_is_allocated(tmp_path):
    corpus = tmp_path / "wide.zarr"
    subprocess.run([SPHDIST, "synth", "--n-docs", "60000", "--n-topics", "20",
                    "--n-features", "262144", "--format", "corpus", "-o", str(corpus)],
                   check=True, capture_output=True)
    r = 40_000  # about 45,000 features occur: the U-step alone holds U_k, U_{k+1}, X V^T and
    if 5 * 8 * 45_000 * r < psutil.virtual_memory().total:  # the two factors of its SVD
        pytest.skip("this machine could hold the U-step of this fit")
    out = tmp_path / "model.zarr"
    done = subprocess.run(
        [sys.executable, "-c", _PEAK, SPHDIST, "fit", "--input", str(corpus), "-o", str(out),
         "-r", str(r)],
        capture_output=True, text=True, preexec_fn=_address_space_limited,
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert done.returncode == 1 and len(errors) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"a fit of {r} components" in errors[0] and "needs about" in errors[0]
    command = re.search(r"`(sphdist fit [^`]*)`", errors[0]).group(1)
    assert f"--output {out}" in command and int(re.search(r"-r (\d+)", command).group(1)) < r
    assert not out.exists() and not list(tmp_path.glob("model.zarr*"))
    # refused before U (8 k r bytes, k >= r: 12.8 GB and more) was allocated
    assert int(done.stdout.split()[-1]) * 1024 < 2 * 2**30
    shutil.rmtree(corpus)
