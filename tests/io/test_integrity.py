"""Damaged or edited stores are refused, never read as zeros; readers never write (issue 15).

Item 3: opening a model in an interrupted-commit state reads the last complete version in
place and leaves the directory tree byte for byte as it was. Item 4: a missing chunk file, a
flipped bit, edited data, an edited U, and attributes that disagree with the arrays are each
refused with a ``CorpusFormatError`` / ``ModelFormatError`` naming the file and the remedy.
"""

import hashlib
import os
import shutil

import numpy as np
import pytest
import zarr

from sphdist.errors import CheckpointMismatchError, CorpusFormatError, ModelFormatError
from sphdist.io import _atomic, open_stored
from sphdist.io._checked import content_sha256
from sphdist.io.corpus import Corpus
from sphdist.io.corpus_writer import CorpusWriter
from sphdist.io.index import open_index
from sphdist.io.model import load_checkpoint, open_model
from sphdist.jobs import run
from sphdist.jobs.fit import FitRequest
from sphdist.jobs.info import describe

from ..reference import random_corpus

M, N, R = 40, 90, 3
SIZES = [25, 25, 40]

pytestmark = pytest.mark.usefixtures("sync_scheduler")


def _write_corpus(path):
    X = random_corpus(M, N, seed=2)
    bounds = np.concatenate([[0], np.cumsum(SIZES)])
    with CorpusWriter(path, n_features=M, feature_scheme={"type": "hashing"}) as w:
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            w.write_chunk(X[:, a:b], [str(j) for j in range(a, b)])
        return w.commit(idf=np.linspace(1.0, 2.0, M))


def _fit(corpus_path, out, **kw):
    args = dict(n_components=R, max_iter=2, tol=0, random_state=0, callback=None) | kw
    return run(FitRequest(corpus_path, out, **args))


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A corpus and a model fitted on it, written once; tests damage copies."""
    root = tmp_path_factory.mktemp("intact")
    import dask

    with dask.config.set(scheduler="synchronous"):
        corpus = _write_corpus(root / "corpus.zarr")
        _fit(corpus.path, root / "model.zarr")
    return root


@pytest.fixture
def copies(stores, tmp_path):
    for name in ("corpus.zarr", "model.zarr"):
        shutil.copytree(stores / name, tmp_path / name)
    return tmp_path / "corpus.zarr", tmp_path / "model.zarr"


def _chunk_files(array_dir):
    return sorted(p for p in (array_dir / "c").rglob("*") if p.is_file())


def _tree(root):
    """Every path under ``root`` with the sha256 of each file: the listing, byte for byte."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else ""
        for p in sorted(root.rglob("*"))
    }


# -- item 3: read-only commands do not write ---------------------------------------------------


@pytest.mark.parametrize("debris", ["only_old", "old_and_staging"])
def test_opening_an_interrupted_model_reads_the_old_version_in_place(copies, debris):
    _, out = copies
    expected = open_model(out)
    objective, U, V = expected.objective, expected.U, expected.V().compute()
    os.replace(out, out.with_name("model.zarr.old"))  # after rename 1 of a commit
    if debris == "old_and_staging":
        staging = _atomic.staging_path(out)
        staging.mkdir()  # a torn new checkpoint that was never committed
        (staging / "zarr.json").write_text("{")
    before = _tree(out.parent)
    model = open_model(out)
    assert model.objective == objective
    np.testing.assert_array_equal(model.U, U)
    np.testing.assert_array_equal(model.V().compute(), V)
    info = describe(out)
    assert info["n_iter"] == 2 and info["objective"][-1][1] == objective[-1]
    assert load_checkpoint(out).objective == objective
    assert open_stored(out).objective == objective
    assert _tree(out.parent) == before  # nothing moved, created or removed


def test_the_writer_recovers_an_interrupted_commit(copies):
    _, out = copies
    objective = open_model(out).objective
    os.replace(out, out.with_name("model.zarr.old"))
    with _atomic.open_output(out) as held:
        model = load_checkpoint(held, recover=True)
    assert model.objective == objective
    assert out.exists() and not out.with_name("model.zarr.old").exists()


# -- item 4: a missing chunk file ---------------------------------------------------------------


@pytest.mark.parametrize("array", ["X/00000/data", "X/00001/indices", "X/00002/indptr", "idf"])
def test_missing_corpus_chunk_is_refused(copies, array):
    path, _ = copies
    for f in _chunk_files(path / array):
        f.unlink()
    corpus = Corpus(path)
    with pytest.raises(CorpusFormatError, match=rf"{array}.*missing.*re-ingest"):
        if array == "idf":
            corpus.idf  # noqa: B018
        else:
            corpus.to_dask().compute()


@pytest.mark.parametrize("array", ["U", "V"])
def test_missing_model_chunk_is_refused(copies, array):
    _, out = copies
    _chunk_files(out / array)[0].unlink()
    with pytest.raises(ModelFormatError, match=rf"{array}.*missing.*refit"):
        model = open_model(out)
        model.U  # noqa: B018
        model.V().compute()


# -- item 4: flipped bits -----------------------------------------------------------------------


def _read_everything(corpus_path, model_path):
    corpus = Corpus(corpus_path)
    corpus.to_dask().compute()
    corpus.idf  # noqa: B018
    load_checkpoint(model_path).U  # noqa: B018


def test_flipped_bits_are_detected(copies, tmp_path):
    corpus_path, model_path = copies
    rng = np.random.default_rng(15)
    targets = [f for name in ("X/00000/data", "X/00001/data", "X/00000/indices",
                              "X/00002/indices", "idf") for f in _chunk_files(corpus_path / name)]
    targets += _chunk_files(model_path / "U")
    n_flips, undetected, unclean = 40, [], []
    for k in range(n_flips):
        f = targets[k % len(targets)]
        pristine = f.read_bytes()
        raw = bytearray(pristine)
        bit = int(rng.integers(len(raw) * 8))
        raw[bit // 8] ^= 1 << (bit % 8)
        f.write_bytes(bytes(raw))
        try:
            _read_everything(corpus_path, model_path)
            undetected.append(f"{f.relative_to(tmp_path)} bit {bit}")
        except (CorpusFormatError, ModelFormatError):
            pass
        except Exception as exc:  # detected, but not as a sphdist error (a raw codec error)
            unclean.append(f"{f.relative_to(tmp_path)} bit {bit}: {type(exc).__name__}")
        f.write_bytes(pristine)
    assert not undetected and not unclean, (undetected, unclean)


# -- item 4: edited data, edited U -------------------------------------------------------------


def _rewrite(array_path, values):
    arr = zarr.open_array(store=str(array_path), mode="r+")
    arr[...] = values


def _scale_chunk_1(corpus_path):
    """Multiply the values of document chunk 1 by 1.5 in place; its data, indices, indptr."""
    g = zarr.open_group(store=str(corpus_path), mode="r+")
    data, indices, indptr = (g[f"X/00001/{name}"][:] for name in ("data", "indices", "indptr"))
    _rewrite(corpus_path / "X/00001/data", data * 1.5)
    return data * 1.5, indices, indptr


def test_edited_corpus_data_is_refused_and_not_resumed(copies):
    corpus_path, out = copies
    _scale_chunk_1(corpus_path)
    with pytest.raises(CorpusFormatError, match=r"X/00001.*re-ingest"):
        Corpus(corpus_path).read_chunk(1)
    with pytest.raises((CorpusFormatError, CheckpointMismatchError)):
        _fit(corpus_path, out, max_iter=3, resume=True)


def test_edited_corpus_data_with_new_digests_changes_the_fingerprint(copies):
    corpus_path, out = copies
    before = Corpus(corpus_path)
    chunk = _scale_chunk_1(corpus_path)
    g = zarr.open_group(store=str(corpus_path), mode="r+")
    digests = list(g.attrs["chunk_sha256"])
    digests[1] = content_sha256(*chunk)
    g.attrs["chunk_sha256"] = digests  # the data and their digest edited together
    after = Corpus(corpus_path)
    after.read_chunk(1)
    assert after.fingerprint != before.fingerprint
    with pytest.raises(CheckpointMismatchError, match="fingerprint"):
        _fit(corpus_path, out, max_iter=3, resume=True)


def test_edited_u_is_refused_on_load(copies):
    _, out = copies
    U = open_model(out).U
    _rewrite(out / "U", U[:, ::-1])
    with pytest.raises(ModelFormatError, match=r"u_sha256.*refit"):
        load_checkpoint(out).U  # noqa: B018


# -- item 4: attributes that disagree with the arrays -------------------------------------------


def _edit_attr(path, key, value):
    zarr.open_group(store=str(path), mode="r+").attrs[key] = value


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("shape", [M + 1000, N], "idf"),  # m disagrees with the idf (and vocabulary) length
        ("nnz", 7, "nnz"),  # disagrees with the values the chunks hold
        ("n_empty", -100, "n_empty"),
        ("shape", [M + 0.7, N], "shape"),  # not an integer
    ],
    ids=["shape_m_plus_1000", "nnz_7", "n_empty_minus_100", "shape_not_integer"],
)
def test_attributes_that_disagree_with_the_arrays_are_refused(copies, key, value, named):
    path, _ = copies
    _edit_attr(path, key, value)
    with pytest.raises(CorpusFormatError, match=rf"{named}.*re-ingest"):
        Corpus(path)


def test_integer_data_is_refused(copies):
    path, _ = copies
    data = zarr.open_array(store=str(path / "X/00000/data"), mode="r")[:]
    shutil.rmtree(path / "X/00000/data")
    g = zarr.open_group(store=str(path / "X/00000"), mode="r+")
    g.create_array("data", shape=data.shape, dtype=np.int64, chunks=data.shape)[:] = 1
    with pytest.raises(CorpusFormatError, match=r"X/00000.*data.*float64.*re-ingest"):
        Corpus(path).to_dask().compute()


# -- corpora written before the digests (format version 1 without chunk_sha256) ----------------


def _as_written_before_digests(path):
    """Rewrite a corpus the way the writer did before issue 15.

    zarr's default codecs (zstd without checksum), chunks equal to the fill value left out,
    no ``chunk_nnz`` / ``chunk_sha256`` / ``sha256``, and the fingerprint of the metadata and
    the idf bytes.
    """
    from sphdist.io._input import _fingerprint

    g = zarr.open_group(store=str(path), mode="r+")
    arrays = [(name, node) for name, node in g.members(max_depth=None)
              if isinstance(node, zarr.Array)]
    for name, arr in arrays:
        values, chunks = arr[...], arr.chunks
        shutil.rmtree(path / name)
        dtype = str if values.dtype.kind in "OUT" else values.dtype
        new = g.create_array(name, shape=values.shape, dtype=dtype, chunks=chunks)
        if values.size:
            new[...] = values
    attrs = dict(g.attrs)
    for key in ("chunk_nnz", "chunk_sha256", "sha256", "fingerprint"):
        del g.attrs[key]
        attrs.pop(key)
    attrs["sphdist"] = {k: v for k, v in attrs["sphdist"].items() if k != "digests"}
    g.attrs["sphdist"] = attrs["sphdist"]  # the tag then promised no digest
    idf = g["idf"][...] if "idf" in g else None
    g.attrs["fingerprint"] = _fingerprint(attrs, idf)
    return g.attrs["fingerprint"]


def test_a_corpus_written_before_the_digests_still_opens_and_reads_the_same(tmp_path):
    X = random_corpus(M, N, seed=2).tolil()
    X[:, 25:50] = 0  # chunk 1: every document empty, its indptr all 0 (the fill value)
    X = X.tocsc()
    path = tmp_path / "corpus.zarr"
    with CorpusWriter(path, n_features=M, feature_scheme={"type": "hashing"},
                      label_names=["a"]) as w:
        for a, b in ((0, 25), (25, 50), (50, 90)):
            w.write_chunk(X[:, a:b], [str(j) for j in range(a, b)], np.zeros(b - a, np.int32))
        w.commit(idf=np.linspace(1.0, 2.0, M))
    fingerprint = _as_written_before_digests(path)
    assert not (path / "X/00001/indptr/c/0").exists()  # left out as the fill value
    assert not (path / "labels/c/0").exists()
    corpus = Corpus(path)
    assert corpus.fingerprint == fingerprint
    np.testing.assert_array_equal(corpus.to_dask().compute().toarray(), X.toarray())
    np.testing.assert_array_equal(corpus.labels, np.zeros(N, np.int32))
    np.testing.assert_array_equal(corpus.idf, np.linspace(1.0, 2.0, M))
    _chunk_files(path / "X/00002/data")[0].unlink()  # damage is still refused
    with pytest.raises(CorpusFormatError, match=r"X/00002/data.*missing.*re-ingest"):
        Corpus(path).read_chunk(2)


def test_wrong_nnz_is_refused_in_a_corpus_written_before_the_digests(copies):
    path, _ = copies
    _as_written_before_digests(path)
    _edit_attr(path, "nnz", 7)
    with pytest.raises(CorpusFormatError, match=r"nnz.*re-ingest"):
        Corpus(path)


# -- issue 31 item 3: every stored array under a digest, checked when it is read ----------------


def _swap(array_path, i, j):
    """Swap elements (columns, for a 2-D array) i and j of a stored array in place."""
    arr = zarr.open_array(store=str(array_path), mode="r+")
    values = np.asarray(arr[...])
    order = np.arange(values.shape[-1])
    order[[i, j]] = order[[j, i]]
    arr[...] = values[..., order]


def test_swapped_columns_of_v_are_refused(copies):
    """Two columns of V swapped: every column still a unit vector, the neighbours wrong."""
    _, out = copies
    before = open_model(out).V().compute()
    _swap(out / "V", 3, 7)
    after = zarr.open_array(store=str(out / "V"), mode="r")[...]
    np.testing.assert_allclose(np.linalg.norm(after, axis=0), 1.0)  # the unit check passes
    assert not np.array_equal(after, before)
    with pytest.raises(ModelFormatError, match=r"V \(columns 0:.*does not match its recorded "
                                               r"sha256.*refit"):
        open_model(out).V().compute()


def test_swapped_doc_ids_are_refused_whole_and_by_chunk(copies):
    path, _ = copies
    attrs = zarr.open_group(str(path)).attrs
    # the previous version reads each sha256 entry as one digest: the chunked ones are apart
    assert all(isinstance(v, str) for v in attrs["sha256"].values())
    assert len(attrs["chunked_sha256"]["doc_ids"]) == 1
    assert Corpus(path).ids().take(np.array([2, 5])).tolist() == ["2", "5"]
    _swap(path / "doc_ids", 2, 5)
    with pytest.raises(CorpusFormatError, match=r"doc_ids.*does not match its recorded sha256"
                                                r".*re-ingest"):
        Corpus(path).doc_ids  # noqa: B018
    with pytest.raises(CorpusFormatError, match=r"doc_ids \(chunk 0.*does not match"):
        Corpus(path).ids().take(np.array([0]))
    with pytest.raises(CorpusFormatError, match=r"doc_ids \(chunk 0.*does not match"):
        Corpus(path).ids().find(["5"])


def test_the_ids_of_hits_read_only_their_chunks(tmp_path):
    """3 chunks of ids (2**17 each): one hit reads one chunk; an unknown id reads them all."""
    n = 2 * 2**17 + 10
    path = tmp_path / "c.zarr"
    X = random_corpus(M, n, seed=1, density=0.02)
    with CorpusWriter(path, n_features=M, feature_scheme={"type": "hashing"}) as w:
        w.write_chunk(X, [f"d{j}" for j in range(n)])
        w.commit()
    ids = Corpus(path).ids()
    assert ids.take(np.array([n - 1, n - 2])).tolist() == [f"d{n - 1}", f"d{n - 2}"]
    assert ids.chunks_read == 1
    assert ids.find(["d5", "nope"]).tolist() == [5, -1] and ids.chunks_read == 3


def _vocabulary_corpus(path):
    X = random_corpus(M, N, seed=3)
    with CorpusWriter(path, n_features=M, feature_scheme={"type": "vocabulary", "n_features": M},
                      vocabulary=[f"term{i}" for i in range(M)]) as w:
        w.write_chunk(X, [str(j) for j in range(N)])
        return w.commit(idf=np.linspace(1.0, 2.0, M))


def test_swapped_vocabulary_is_refused_in_a_corpus_and_a_model(tmp_path):
    corpus = _vocabulary_corpus(tmp_path / "c.zarr")
    model = _fit(corpus.path, tmp_path / "m.zarr")
    assert model.vocabulary[:2].tolist() == ["term0", "term1"]
    _swap(tmp_path / "c.zarr/vocabulary", 0, 1)
    with pytest.raises(CorpusFormatError, match=r"vocabulary.*does not match.*re-ingest"):
        Corpus(tmp_path / "c.zarr").vocabulary  # noqa: B018
    _swap(tmp_path / "m.zarr/vocabulary", 0, 1)
    with pytest.raises(ModelFormatError, match=r"vocabulary.*does not match.*refit"):
        open_model(tmp_path / "m.zarr").vocabulary  # noqa: B018


def _drop_digest(store, attr, key, *, older=False):
    """Delete ``key`` from the record ``attr`` (and, ``older``: the tag's promise of them)."""
    g = zarr.open_group(store=str(store), mode="r+")
    if attr is not None:
        digests = dict(g.attrs[attr])
        del digests[key]
        g.attrs[attr] = digests
    else:
        del g.attrs[key]
    if older:  # as an earlier sphdist wrote it: the tag says nothing of digests
        g.attrs["sphdist"] = {k: v for k, v in g.attrs["sphdist"].items() if k != "digests"}


@pytest.mark.parametrize("store, attr, key, read", [
    ("model", None, "u_sha256", lambda m, c: m.U),
    ("model", "sha256", "idf", lambda m, c: m.idf),
    ("model", "sha256", "V", lambda m, c: m.V().compute()),
    ("corpus", "sha256", "idf", lambda m, c: c.idf),
    ("corpus", "sha256", "empty", lambda m, c: c.empty),
    ("corpus", "chunked_sha256", "doc_ids", lambda m, c: c.doc_ids),
])
def test_a_digest_deleted_from_a_store_of_this_version_is_damage_not_age(
        copies, store, attr, key, read):
    """Issue 44 item 4: deleting a digest's record switched its check off (a U column swap
    then gave transform an embedding with rows swapped, an edited idf was used)."""
    path, out = copies
    target = out if store == "model" else path
    assert zarr.open_group(store=str(target), mode="r").attrs["sphdist"]["digests"]
    _drop_digest(target, attr, key)
    error = ModelFormatError if store == "model" else CorpusFormatError
    name = "U" if key == "u_sha256" else key
    with pytest.raises(error, match=rf"the digest of {name} is missing .*edited or damaged"):
        read(open_model(out), Corpus(path))


def test_stores_written_before_these_digests_are_read_with_one_warning(copies, caplog):
    """The previous version recorded no digest of V, doc_ids, vocabulary: read, and said so."""
    path, out = copies
    expected_V, expected_ids = open_model(out).V().compute(), Corpus(path).doc_ids
    for store, attr, key in ((path, "chunked_sha256", "doc_ids"), (out, "sha256", "V")):
        _drop_digest(store, attr, key, older=True)
    caplog.clear()
    with caplog.at_level("WARNING", logger="sphdist"):
        corpus, model = Corpus(path), open_model(out)
        np.testing.assert_array_equal(corpus.doc_ids, expected_ids)
        corpus.ids().take(np.array([1]))
        np.testing.assert_array_equal(model.V().compute(), expected_V)
        model.V()
    said = [r.getMessage() for r in caplog.records if "no recorded digest" in r.getMessage()]
    assert len(said) == 2, said  # once per store and array
    assert "doc_ids" in said[0] and "IngestRequest.of(source=['SOURCE']" in said[0]
    # the Python API's words (issue 32): the refit as a call, of the corpus the model recorded
    assert "V has" in said[1] and "FitRequest(input=" in said[1] and "overwrite=True" in said[1]
    _swap(out / "V", 3, 7)  # unit columns: an older model's edit cannot be seen
    open_model(out).V().compute()


# -- the faiss index: memory-mapped, a cheap check per read, validated, the full check ----------


def _index(copies, kind="ivf", **kw):
    from sphdist.jobs import run
    from sphdist.jobs.neighbors import IndexRequest

    _, out = copies
    path = out.with_name("i.zarr")
    run(IndexRequest(out, path, kind=kind, nlist=4 if kind == "ivf" else None, nprobe=2, **kw))
    return out, path


def _reload(out, path):
    from sphdist.jobs.embedding import open_embedding_source
    from sphdist.jobs.neighbors import load_index

    return load_index(path, open_model(out), open_embedding_source(out))


def _rewrite_faiss(path, data):
    """Replace the index' bytes and record their digests again (an edit that passes them)."""
    from sphdist.io.index import sample_sha256

    g = zarr.open_group(store=str(path), mode="r+")
    data = np.asarray(data, dtype=np.uint8)
    del g["faiss"]
    g.create_array("faiss", shape=data.shape, dtype=np.uint8, chunks=data.shape,
                   compressors=None)[...] = data
    g.attrs.update({"faiss_sha256": content_sha256(data), "faiss_nbytes": int(data.size),
                    "faiss_sample_sha256": sample_sha256(data)})


def test_an_index_is_read_memory_mapped_and_validated(copies):
    import faiss

    out, path = _index(copies)
    assert (path / "faiss/c/0").stat().st_size == zarr.open_group(str(path)).attrs["faiss_nbytes"]
    index = _reload(out, path)
    lists = faiss.downcast_InvertedLists(faiss.downcast_index(index.index_).invlists)
    assert isinstance(lists, faiss.OnDiskInvertedLists)  # the lists are read from the file
    live = N - Corpus(copies[0]).n_empty  # empty documents are left out
    assert index.n_indexed_ == live
    assert open_index(path).verify(n_components=R, n_documents=N)["n_indexed"] == live
    from click.testing import CliRunner

    from sphdist.cli import main

    result = CliRunner().invoke(main, ["index", "-m", str(out), "-o", str(path), "--check"])
    assert result.exit_code == 0 and f"{path}: ok, {live} documents indexed" in result.output
    result = CliRunner().invoke(main, ["index", "-m", str(out), "-o", str(path), "--check",
                                       "--overwrite"])
    assert result.exit_code != 0 and "builds nothing" in result.output


@pytest.mark.parametrize("edit", ["header", "truncated_body", "record_r", "record_nlist",
                                  "record_count", "flat_as_ivf"])
def test_an_index_edited_with_its_digests_recomputed_is_refused_in_one_error(copies, edit):
    """faiss' own exceptions, or a wrong index it reads fine, become a ModelFormatError."""
    out, path = _index(copies)
    g = zarr.open_group(store=str(path), mode="r+")
    data = np.asarray(g["faiss"][...])
    record = dict(g.attrs["index"])
    if edit == "header":
        _rewrite_faiss(path, np.concatenate([np.frombuffer(b"XXXX", np.uint8), data[4:]]))
    elif edit == "truncated_body":
        _rewrite_faiss(path, data[: data.size // 2])
    elif edit == "flat_as_ivf":
        record["kind"] = "flat"
    else:
        key = {"record_r": "n_components", "record_nlist": "nlist",
               "record_count": "n_indexed"}[edit]
        record[key] += 1
    g.attrs["index"] = record
    # the Python API's words (issue 32): the index job's call, by keyword
    with pytest.raises(ModelFormatError, match=rf"{path}.*IndexRequest\(model=.*overwrite=True"):
        _reload(out, path)


def test_index_check_reads_every_byte_and_every_id(copies, monkeypatch):
    """A byte outside the sampled ends passes the per-read check, not `sphdist index --check`."""
    import faiss

    from sphdist.io import index as stored_index
    from sphdist.jobs.neighbors import check_index

    monkeypatch.setattr(stored_index, "_SAMPLE", 64)
    out, path = _index(copies, kind="flat")
    loaded = faiss.read_index(str(path / "faiss/c/0"))
    ids = faiss.vector_to_array(loaded.id_map)
    ids[ids == 5] = 6  # document 6 twice, 5 never
    faiss.copy_array_to_vector(ids, loaded.id_map)
    data = faiss.serialize_index(loaded)
    g = zarr.open_group(store=str(path), mode="r+")
    g["faiss"][...] = data  # the sampled ends and the size are unchanged
    with pytest.raises(ModelFormatError, match=r"faiss does not match its recorded faiss_sha256"):
        check_index(out, path)
    _rewrite_faiss(path, data)  # the full digest recomputed too: the ids are read
    with pytest.raises(ModelFormatError, match=r"document id twice"):
        check_index(out, path)
    _reload(out, path)  # a search of it reads neither


def test_an_index_written_by_the_previous_version_is_read_whole_and_checked(copies):
    """zstd chunks and no sample digest (as written before): read whole, against faiss_sha256."""
    from sphdist.io._zarr import CHECKSUMMED

    out, path = _index(copies)
    g = zarr.open_group(store=str(path), mode="r+")
    data = np.asarray(g["faiss"][...])
    del g["faiss"]
    g.create_array("faiss", shape=data.shape, dtype=np.uint8, chunks=(1000,),
                   compressors=CHECKSUMMED)[...] = data
    for key in ("faiss_nbytes", "faiss_sample_sha256"):
        del g.attrs[key]
    assert open_index(path)._mapped_file() is None
    assert _reload(out, path).n_indexed_ > 0
    data[len(data) // 2] ^= 0xFF
    g["faiss"][...] = data
    with pytest.raises(ModelFormatError, match=r"does not match its recorded faiss_sha256"):
        _reload(out, path)


def test_a_search_that_returns_an_id_of_no_document_is_refused(copies):
    """An id edited past n with every digest recomputed: the hits are checked, not printed."""
    import faiss

    from sphdist.jobs import run
    from sphdist.jobs.neighbors import QueryRequest

    out, path = _index(copies, kind="flat")
    loaded = faiss.read_index(str(path / "faiss/c/0"))
    ids = faiss.vector_to_array(loaded.id_map)
    ids[ids == 5] = N + 5
    faiss.copy_array_to_vector(ids, loaded.id_map)
    _rewrite_faiss(path, faiss.serialize_index(loaded))
    with pytest.raises(ModelFormatError, match=rf"returned document {N + 5}.*overwrite=True"):
        run(QueryRequest(out, doc_id="7", k=loaded.ntotal - 1, index=path))


# -- the index' copy of the document ids and its lookup table (issue 33 item 3) ---------------


def _small_chunks(monkeypatch, ids=8, lookup=16):
    from sphdist.io import _id_copy

    monkeypatch.setattr(_id_copy, "IDS_CHUNK", ids)
    monkeypatch.setattr(_id_copy, "LOOKUP_CHUNK", lookup)


@pytest.mark.parametrize("hashes", ["blake2b", "colliding"])
def test_a_doc_id_is_found_by_the_lookup_table_reading_one_chunk_of_ids(copies, monkeypatch,
                                                                       hashes):
    """Every id is found at its position, reading one chunk of 8 ids; equal hashes too."""
    from sphdist.io import _id_copy
    from sphdist.jobs.embedding import open_embedding_source
    from sphdist.jobs.neighbors import load_index

    _small_chunks(monkeypatch)
    if hashes == "colliding":  # 3 hashes for 90 ids: each spans several chunks of the table
        monkeypatch.setattr(_id_copy, "id_hashes", lambda values: np.array(
            [sum(map(ord, str(v))) % 3 for v in values], dtype=np.uint64))
    out, path = _index(copies)
    assert len(zarr.open_group(str(path)).attrs["doc_ids"]["lookup_first"]) == 6  # 90 / 16
    for j in (0, 7, 8, 44, 89):
        source = open_embedding_source(out)
        load_index(path, open_model(out), source)
        assert source.ids.lookup is not None
        assert source.ids.find([str(j)]).tolist() == [j]
        # the chunk of 8 ids holding it, not those before (colliding: those of its hash too)
        assert source.ids.chunks_read == 1 or hashes == "colliding"
        assert source.ids.take(np.array([j, 89])).tolist() == [str(j), "89"]
    assert source.ids.find(["nope"]).tolist() == [-1]  # not placed: every chunk is read
    assert source.ids.chunks_read == -(-N // 8)


def test_the_copy_of_ids_is_written_a_stored_chunk_at_a_time(tmp_path, monkeypatch):
    """Chunks of 7 ids read, chunks of 8 written (and 16 of the table): the same digests as
    the whole arrays', every id found, no stored chunk kept in memory."""
    from sphdist.io._checked import ChunkedVector, chunk_sha256
    from sphdist.io.index import id_hashes, write_index

    _small_chunks(monkeypatch)
    values = np.array([f"doc{j}" for j in range(50)], dtype=object)
    ids = ChunkedVector(50, 7, lambda i: values[7 * i:7 * i + 7], digests=["x"])
    write_index(tmp_path / "i.zarr", np.zeros(4, np.uint8), attrs={}, ids=ids)
    assert ids.chunks_read == 8 and not ids._chunks
    g = zarr.open_group(str(tmp_path / "i.zarr"), mode="r")
    record = g.attrs["doc_ids"]
    assert record["chunk_sha256"] == chunk_sha256(values, 8)
    table = g["doc_id_lookup"][...]
    assert record["lookup_sha256"] == chunk_sha256(table, 16)
    assert np.array_equal(table[0], np.sort(id_hashes(values)))
    assert np.array_equal(g["doc_ids"][...].astype(object), values)
    copy = open_index(tmp_path / "i.zarr").ids(ids)
    assert copy.find(list(values[::-1])).tolist() == list(range(49, -1, -1))


def test_an_index_holds_no_copy_of_ids_without_digests_or_of_other_ids(copies):
    """Without recorded digests nothing ties a copy to the ids; another source's: not read."""
    from sphdist.io._checked import ChunkedVector
    from sphdist.jobs.embedding import open_embedding_source
    from sphdist.jobs.neighbors import load_index

    corpus, out = copies
    out, path = _index(copies, input=corpus)
    ids = open_embedding_source(out, corpus).ids
    assert open_index(path).ids(ids) is not None
    other = ChunkedVector(N, N, lambda i: np.arange(N).astype(str), digests=["0" * 64])
    assert open_index(path).ids(other) is None and other.identity != ids.identity
    _drop_digest(corpus, "chunked_sha256", "doc_ids", older=True)
    _index(copies, overwrite=True, input=corpus)  # rebuilt over ids without digests
    assert "doc_ids" not in zarr.open_group(str(path)).attrs
    source = open_embedding_source(out, corpus)
    assert open_index(path).ids(source.ids) is None
    ids = source.ids
    load_index(path, open_model(out), source, corpus)
    assert source.ids is ids  # the query reads the corpus' ids, as before
    assert source.ids.find(["5"]).tolist() == [5]


def test_edited_ids_of_an_index_are_refused_when_read(copies, monkeypatch):
    """Two ids of the copy swapped: the chunk read is refused, naming the rebuild."""
    from sphdist.jobs import run
    from sphdist.jobs.neighbors import QueryRequest

    _small_chunks(monkeypatch)
    out, path = _index(copies)
    _swap(path / "doc_ids", 2, 5)
    with pytest.raises(ModelFormatError, match=r"doc_ids \(chunk 0, elements 0:8\) does not "
                                               r"match.*IndexRequest\(model=.*overwrite=True"):
        run(QueryRequest(out, doc_id="5", k=3, index=path))
    assert run(QueryRequest(out, doc_id="60", k=1, index=path))["neighbors"]  # other chunks


@pytest.mark.parametrize("edit", ["no table", "fences"])
def test_a_record_of_the_ids_that_does_not_describe_them_is_refused(copies, edit):
    from sphdist.jobs import run
    from sphdist.jobs.neighbors import QueryRequest

    out, path = _index(copies)
    g = zarr.open_group(store=str(path), mode="r+")
    if edit == "no table":
        del g["doc_id_lookup"]
    else:
        g.attrs["doc_ids"] = {**g.attrs["doc_ids"], "lookup_first": ["not hex"]}
    with pytest.raises(ModelFormatError, match=r"the record doc_ids does not describe the "
                                               r"arrays.*overwrite=True"):  # keywords
        run(QueryRequest(out, doc_id="5", k=3, index=path))


@pytest.mark.parametrize("store", ["corpus", "index"])
def test_a_missing_chunk_of_ids_is_named_as_missing(copies, monkeypatch, store):
    """With a digest, the chunk is read first and its file looked for only if the values do
    not match (a missing chunk reads as the fill value): still named as missing."""
    from sphdist.jobs.embedding import open_embedding_source
    from sphdist.jobs.neighbors import load_index

    _small_chunks(monkeypatch)
    corpus, _ = copies
    out, path = _index(copies, input=corpus)
    (path / "doc_ids/c/1" if store == "index" else corpus / "doc_ids/c/0").unlink()
    source = open_embedding_source(out, corpus)
    if store == "index":  # its copy is read instead of the corpus' ids
        load_index(path, open_model(out), source, corpus)
    error = ModelFormatError if store == "index" else CorpusFormatError
    with pytest.raises(error, match=r"doc_ids \(chunk \d, elements .*\): chunk file "
                                    r"doc_ids/c/\d is missing"):
        source.ids.take(np.array([9]))


def test_a_lookup_table_edited_with_its_digests_recomputed_misleads_no_query(copies,
                                                                           monkeypatch):
    """Positions of the table swapped, digests recomputed: the ids found are checked (the
    document is still found), and ``sphdist index --check`` refuses the table."""
    from sphdist.io._checked import chunk_sha256
    from sphdist.jobs.embedding import open_embedding_source
    from sphdist.jobs.neighbors import check_index, load_index

    _small_chunks(monkeypatch)
    out, path = _index(copies)
    assert check_index(out, path)["doc_ids"] is True
    g = zarr.open_group(store=str(path), mode="r+")
    table = np.asarray(g["doc_id_lookup"][...])
    table[1] = table[1][::-1]  # every hash now points at another document
    g["doc_id_lookup"][...] = table
    g.attrs["doc_ids"] = {**g.attrs["doc_ids"], "lookup_sha256": chunk_sha256(table, 16)}
    source = open_embedding_source(out)
    load_index(path, open_model(out), source)
    assert source.ids.find(["7", "33"]).tolist() == [7, 33]
    with pytest.raises(ModelFormatError, match=r"a hash of doc_id_lookup is not that of the id"):
        check_index(out, path)


def test_the_neighbours_of_a_doc_id_are_the_same_with_the_copy_of_the_ids(copies):
    from sphdist.jobs import run
    from sphdist.jobs.neighbors import QueryRequest

    out, path = _index(copies, kind="flat")
    with_copy = run(QueryRequest(out, doc_id="31", k=5, index=path))
    g = zarr.open_group(store=str(path), mode="r+")
    attrs = dict(g.attrs)
    del attrs["doc_ids"]  # as written before the copy
    g.attrs.clear()
    g.attrs.update(attrs)
    assert run(QueryRequest(out, doc_id="31", k=5, index=path)) == with_copy


# -- the embedding's V and degenerate: one digest per stored chunk (issue 31 item 3) -----------


def _embed_cli(*args):
    from click.testing import CliRunner

    from sphdist.cli import main

    return CliRunner().invoke(main, ["--quiet", *map(str, args)])


@pytest.mark.parametrize("edit", ["V", "degenerate"])
def test_an_edited_embedding_is_refused_by_every_reader(copies, tmp_path, edit):
    """Swapped columns of an embedding's V (unit vectors still) or a flipped ``degenerate``."""
    corpus, model = copies
    emb = tmp_path / "e.zarr"
    assert _embed_cli("transform", "-m", model, "-i", corpus, "-o", emb).exit_code == 0
    before = _embed_cli("neighbors", "-m", model, "-i", emb, "--doc-id", "3", "-k", 3)
    assert before.exit_code == 0, before.output
    if edit == "V":
        _swap(emb / "V", 3, 47)  # chunk 0 of 40 columns (the widest chunk) holds 3, 1 holds 47
    else:
        arr = zarr.open_array(store=str(emb / "degenerate"), mode="r+")
        arr[48] = not arr[48]
    chunks = (("columns 0:40", "columns 40:80") if edit == "V"
              else ("chunk 1, elements 40:80",))
    for args in (("neighbors", "-m", model, "-i", emb, "--doc-id", "3", "-k", 3),
                 ("export", "-m", model, "-i", emb, "-o", tmp_path / "out.parquet"),
                 ("neighbors", "-m", model, "-i", emb, "--all", "-k", 3,
                  "-o", tmp_path / "knn.parquet")):
        result = _embed_cli(*args)
        assert result.exit_code == 1, (args, result.output)
        assert "Traceback" not in result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"Error: {emb}: {edit} ("), lines
        assert any(c in lines[0] for c in chunks), lines
        assert "does not match its recorded sha256" in lines[0], lines
        remedy = lines[0].split("To resolve this, write it again with `", 1)[1].split("`")[0]
    assert not (tmp_path / "out.parquet").exists() and not (tmp_path / "knn.parquet").exists()
    words = remedy.split()  # the remedy works: the same embedding, readable again
    assert words[:2] == ["sphdist", "transform"] and "--overwrite" in words, remedy
    assert _embed_cli(*words[1:]).exit_code == 0
    again = _embed_cli("neighbors", "-m", model, "-i", emb, "--doc-id", "3", "-k", 3)
    assert again.exit_code == 0 and again.output == before.output


def test_an_embedding_written_before_its_v_digests_is_read_with_one_warning(copies, tmp_path,
                                                                          caplog):
    from sphdist.io.embedding import open_embedding
    from sphdist.jobs import run
    from sphdist.jobs.transform import TransformRequest

    corpus, model = copies
    emb = run(TransformRequest(model, corpus, tmp_path / "e.zarr"))
    # chunks of 40 columns, the widest of SIZES: 0:40, 40:80, 80:90
    assert len(emb.attrs["sha256"]["V"]) == 3 == len(emb.attrs["sha256"]["degenerate"])
    V, degenerate = emb.V.compute(), emb.degenerate
    g = zarr.open_group(store=str(tmp_path / "e.zarr"), mode="r+")
    g.attrs["sha256"] = {k: v for k, v in g.attrs["sha256"].items()
                         if k not in ("V", "degenerate")}
    g.attrs["sphdist"] = {k: v for k, v in g.attrs["sphdist"].items() if k != "digests"}
    caplog.clear()
    with caplog.at_level("WARNING", logger="sphdist"):
        old = open_embedding(tmp_path / "e.zarr")
        np.testing.assert_array_equal(old.V.compute(), V)
        np.testing.assert_array_equal(old.degenerate, degenerate)
        old.V  # noqa: B018
    said = [r.getMessage() for r in caplog.records if "no recorded digest" in r.getMessage()]
    assert len(said) == 2 and "V has" in said[0] and "degenerate has" in said[1], said
    assert "TransformRequest(model=" in said[0] and "--" not in said[0]
