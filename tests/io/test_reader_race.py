"""Issue 24 item 2: a reader racing a commit gets one committed version, or one clear error.

A second process rewrites one ``model.zarr`` (a local path, or a ``file://`` URL written with
the object-store protocol) in a loop (``fit --overwrite`` through the Python
API, seeds 0, 1, 2 in turn, a checkpoint committed every iteration) while this test opens and
reads it through the Python API (U, V) and ``transform``, many times. Every read that succeeds
must be one of the committed versions, whole (its U is the U of the version its attributes
name, its V the V fitted with that U); a read that loses the race must say "was replaced while
reading; run it again", never report damage (a digest mismatch, a missing array, a KeyError)
of a store that is intact.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import dask
import numpy as np
import pytest

from sphdist.errors import SphdistError
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.io.model import open_model, u_sha256
from sphdist.jobs import run
from sphdist.jobs.fit import FitRequest
from sphdist.jobs.transform import TransformRequest

from ..reference import random_corpus

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("sync_scheduler")]

KW = dict(n_components=3, tol=0, callback=None)
SEEDS, MAX_ITER = (0, 1, 2), 3

WRITER = textwrap.dedent("""
    import sys

    import dask

    from sphdist.jobs import run

    from sphdist.jobs.fit import FitRequest

    corpus, out, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dask.config.set(scheduler="synchronous")
    print("started", flush=True)
    for i in range(rounds):  # a commit each iteration (checkpoints, then the final model)
        run(FitRequest(corpus, out, n_components=3, tol=0, max_iter=3, random_state=i % 3,
                       overwrite=True, callback=None, checkpoint_interval=0))
""")

REPLACED = "was replaced while reading; run it again"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Read only by the tests (each writes its models into its own tmp_path): one for all."""
    X = random_corpus(300, 400, seed=4)
    with CorpusWriter(tmp_path_factory.mktemp("race") / "corpus.zarr", n_features=300,
                      feature_scheme={"type": "hashing"}) as w:
        for a in range(0, 400, 50):
            w.write_chunk(X[:, a:a + 50], [str(j) for j in range(a, a + 50)])
        return w.commit(idf=np.ones(300))


@pytest.fixture(scope="module")
def committed(corpus, tmp_path_factory):
    """u_sha256 of every version the writer commits -> V of the final ones (None: a checkpoint).

    The fit is deterministic: the checkpoint of iteration k of seed s is bitwise the final model
    of the same fit with max_iter=k.
    """
    versions, root = {}, tmp_path_factory.mktemp("committed")
    with dask.config.set(scheduler="sync"):  # the tests' sync_scheduler, for this fixture too
        for seed in SEEDS:
            for k in range(1, MAX_ITER + 1):
                model = run(FitRequest(corpus.path, root / f"ref-{seed}-{k}.zarr", max_iter=k,
                                       random_state=seed, **KW))
                versions[model.attrs["u_sha256"]] = (
                    model.V().compute() if k == MAX_ITER else None
                )
    return versions


def _read_model(path, committed):
    model = open_model(path)
    sha = model.attrs["u_sha256"]
    assert sha in committed, "a version nobody committed"
    assert u_sha256(model.U) == sha  # U is the U of the version its attributes name
    if model.has_embedding:
        np.testing.assert_array_equal(model.V().compute(), committed[sha])
        return "final"
    return "checkpoint"


@pytest.mark.parametrize("where", ["local", "file"])
def test_readers_racing_rewrites_see_one_committed_version_or_a_clear_error(
    corpus, committed, tmp_path, where
):
    """On a local path (rename: the reader detects a commit) and a ``file://`` URL (manifest:
    the reader holds its version, the previous one kept one commit)."""
    out = tmp_path / "model.zarr" if where == "local" else f"file://{tmp_path}/model.zarr"
    run(FitRequest(corpus.path, out, max_iter=MAX_ITER, random_state=0, **KW))
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(corpus.path), str(out), "40"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    seen, replaced, damage = {"final": 0, "checkpoint": 0, "transform": 0}, [], []
    try:
        assert writer.stdout.readline().strip() == "started"
        i = 0
        while writer.poll() is None and i < 400:
            i += 1
            try:
                if i % 4:
                    seen[_read_model(out, committed)] += 1
                else:
                    emb = run(TransformRequest(out, corpus.path, tmp_path / f"e{i}.zarr"))
                    assert emb.attrs["model"]["u_sha256"] in committed
                    seen["transform"] += 1
            except SphdistError as exc:
                said = f"{type(exc).__name__}: {exc}"
                (replaced if REPLACED in str(exc) else damage).append(said)
            except Exception as exc:  # zarr's, a KeyError: damage reports of an intact store
                damage.append(f"{type(exc).__name__}: {exc}")
    finally:
        writer.kill()
        _, err = writer.communicate()
    assert not damage, damage[:5]
    assert writer.returncode in (0, -9), err
    # the race was run: reads of both kinds of version, and transforms, succeeded meanwhile
    assert seen["final"] and seen["checkpoint"] and seen["transform"], (seen, replaced)
    print(f"reads: {seen}, told 'replaced': {len(replaced)}")  # for the record (pytest -s)


def test_a_version_gone_past_its_grace_period_is_replaced_not_damaged(corpus, tmp_path):
    """An object store keeps the previous version one commit: a handle two commits behind
    reads missing chunks (zeros in zarr), which is a replacement, never a damage report."""
    from pathlib import Path

    from sphdist.errors import StoreReplacedError

    out = f"file://{tmp_path}/model.zarr"
    run(FitRequest(corpus.path, out, max_iter=2, random_state=0, **KW))
    held = open_model(out)
    version = Path(str(held.location).removeprefix("file://"))
    assert version.parent == tmp_path / "model.zarr" and version.name.startswith("v-")
    metadata = (version / "V" / "zarr.json").read_bytes()
    V_held = held.V()  # the tasks that read its chunks, made before the commits
    for seed in (1, 2):  # two commits: the held version is deleted by the second
        run(FitRequest(corpus.path, out, max_iter=2, random_state=seed, overwrite=True, **KW))
    assert not version.exists()
    # caught in the middle of that deletion: V's metadata still there, its chunks gone
    (version / "V").mkdir(parents=True)
    (version / "V" / "zarr.json").write_bytes(metadata)
    with pytest.raises(StoreReplacedError, match=REPLACED):
        V_held.compute()
    again = open_model(out)  # "run it again" works
    V = again.V().compute()
    np.testing.assert_allclose(np.linalg.norm(V, axis=0), 1.0, atol=1e-12)
