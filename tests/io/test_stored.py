"""io.stored: one opener for every stored kind; io._atomic.commit_state."""

import dask.array as da
import numpy as np
import pytest
import zarr

from sphdist.core.solver import FitState
from sphdist.errors import (
    CorpusFormatError,
    InputNotFoundError,
    ModelFormatError,
    ParameterError,
)
from sphdist.io import _atomic, commit_state, open_stored, stored_kind
from sphdist.io.corpus import Corpus, DenseInput
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.io.embedding import Embedding, EmbeddingWriter, write_embedding_block
from sphdist.io.model import Model, save_checkpoint

from ..reference import random_corpus

M, N, R = 12, 10, 2

pytestmark = pytest.mark.usefixtures("sync_scheduler")


@pytest.fixture
def stores(tmp_path):
    """A corpus, a dense array, a model and an embedding, written by their writers."""
    X = random_corpus(M, N, seed=4)
    with CorpusWriter(tmp_path / "c.zarr", n_features=M, feature_scheme={"type": "hashing"}) as w:
        w.write_chunk(X, [str(j) for j in range(N)])
        w.commit(idf=np.ones(M))
    zarr.create_array(str(tmp_path / "d.zarr"), data=np.ones((N, M)), chunks=(5, M))
    U = np.eye(M, R)
    V = np.zeros((R, N))
    V[0] = 1.0
    state = FitState(
        iteration=0, U=U, V=da.from_array(V, chunks=(R, 5)), XVt=np.zeros((M, R)),
        VVt=np.eye(R), sq_norm_X=1.0, objective=[1.0], u_step_norm=[], v_step_norm=[],
        seconds=[0.0], n_degenerate=0, converged=False,
    )
    save_checkpoint(tmp_path / "m.zarr", state, params={"n_components": R},
                    corpus={"path": str(tmp_path / "c.zarr")})
    with EmbeddingWriter(tmp_path / "e.zarr", n_components=R, chunks=(N,)) as w:
        block = write_embedding_block(str(w.staging), 0, V, np.zeros(N, dtype=bool))
        w.commit(doc_ids=np.array([str(j) for j in range(N)]), labels=None, label_names=None,
                 attrs={}, blocks=[block])
    return tmp_path


@pytest.mark.parametrize("name, kind, cls", [
    ("c.zarr", "corpus", Corpus), ("d.zarr", None, DenseInput), ("m.zarr", "model", Model),
    ("e.zarr", "embedding", Embedding),
])
def test_open_stored_dispatches_on_the_stored_kind(stores, name, kind, cls):
    assert stored_kind(stores / name) == kind
    assert type(open_stored(stores / name)) is cls
    assert type(open_stored(stores / name, kind or "dense")) is cls


def test_stored_kind_of_nothing_and_of_an_untagged_group(tmp_path):
    assert stored_kind(tmp_path / "missing.zarr") is None
    zarr.open_group(store=str(tmp_path / "g.zarr"), mode="w")
    assert stored_kind(tmp_path / "g.zarr") is None


def test_open_stored_refuses_another_kind_with_that_kinds_error(stores):
    with pytest.raises(ModelFormatError, match="not a sphdist model"):
        open_stored(stores / "c.zarr", "model")
    with pytest.raises(ModelFormatError, match="not a sphdist embedding"):
        open_stored(stores / "m.zarr", "embedding")
    with pytest.raises(CorpusFormatError, match="not a sphdist corpus"):
        open_stored(stores / "e.zarr", "corpus")
    with pytest.raises(CorpusFormatError, match="not a sphdist corpus"):
        open_stored(stores / "m.zarr", "input")
    with pytest.raises(InputNotFoundError, match="nowhere.zarr"):
        open_stored(stores / "nowhere.zarr")
    with pytest.raises(ParameterError, match="kind='table'"):
        open_stored(stores / "c.zarr", "table")


@pytest.mark.parametrize("name", ["m.zarr", "e.zarr"])
def test_an_array_of_a_non_plain_dtype_is_refused_at_opening(stores, name):
    group = zarr.open_group(store=str(stores / name), mode="r+")
    group.create_array("extra", shape=(2,), dtype=np.complex128)
    with pytest.raises(ModelFormatError, match=r"array extra is stored as zarr v3, dtype complex"):
        open_stored(stores / name)


def test_commit_state_describes_staging_and_interrupted_commits(tmp_path):
    target = tmp_path / "m.zarr"
    assert commit_state(target) == (False, (), False)
    assert not commit_state(target).complete
    staging = _atomic.staging_path(target)
    staging.mkdir()
    assert commit_state(target) == (False, (staging.name,), False)
    target.with_name("m.zarr.old").mkdir()  # between the two renames of a commit
    state = commit_state(target)
    assert state.interrupted and state.complete and not state.committed
    target.mkdir()
    assert commit_state(target) == (True, (staging.name,), False)


@pytest.mark.parametrize("name, kind", [
    ("c.zarr", "model"), ("c.zarr", "embedding"), ("m.zarr", "embedding"), ("e.zarr", "model"),
    ("m.zarr", "corpus"), ("e.zarr", "corpus"),
])
def test_another_kind_is_named_with_what_to_pass_instead(stores, name, kind):
    error = CorpusFormatError if kind == "corpus" else ModelFormatError
    found = stored_kind(stores / name)
    with pytest.raises(error, match=rf"{name} is a sphdist {found}, not a sphdist {kind}\. To "
                                    rf"resolve this, pass an? {kind}\.zarr") as info:
        open_stored(stores / name, kind)
    assert "this version" not in str(info.value)


def test_unsafe_array_in_a_nested_group_is_refused_by_name(stores):
    group = zarr.open_group(str(stores / "e.zarr"), mode="r+")
    deep = group.require_group("extra").require_group("deep")
    deep.create_array("fine", data=np.zeros(3))
    deep.create_array("x", data=np.zeros(3))
    meta = stores / "e.zarr" / "extra" / "deep" / "x" / "zarr.json"
    meta.write_text(meta.read_text().replace('"zstd"', '"evil_codec"'))
    with pytest.raises(ModelFormatError, match=r"unreadable array metadata at extra/deep/x "
                                               r"\(UnknownCodecError"):
        open_stored(stores / "e.zarr")
