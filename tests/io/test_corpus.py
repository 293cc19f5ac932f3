"""The corpus.zarr format: CorpusWriter / Corpus round trip, atomic commit, format errors."""

import re
import shutil

import numpy as np
import pytest
import scipy.sparse as sp
import zarr

from sphdist.errors import CorpusFormatError, InputNotFoundError, OutputExistsError
from sphdist.io.corpus import Corpus, DenseInput, open_corpus, open_input
from sphdist.io.corpus_writer import CorpusWriter

from ..reference import LAYOUTS, random_corpus

M, N = 30, 40
SCHEME = {"type": "hashing", "n_features": M}
LABEL_NAMES = ["alpha", "beta", "gamma"]
# every chunk is handed over in another sparse format; the writer stores CSC
FORMATS = [sp.csc_matrix, sp.csr_matrix, sp.coo_matrix]


pytestmark = pytest.mark.usefixtures("sync_scheduler")


@pytest.fixture(scope="module")
def X():
    return random_corpus(M, N, density=0.1, seed=3, n_empty=4)


def _doc_ids(n):
    return np.array([f"doc/{j:03d}.txt" for j in range(n)])


def _labels(n):
    return (np.arange(n) * 7 % len(LABEL_NAMES)).astype(np.int32)


def _write(path, X, sizes, *, labels=True, idf=None, vocabulary=None, overwrite=False):
    ids, y = _doc_ids(X.shape[1]), _labels(X.shape[1])
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    with CorpusWriter(
        path,
        n_features=X.shape[0],
        feature_scheme=SCHEME,
        tfidf={"sublinear_tf": True},
        label_names=LABEL_NAMES if labels else None,
        vocabulary=vocabulary,
        overwrite=overwrite,
    ) as writer:
        for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            writer.write_chunk(
                FORMATS[i % len(FORMATS)](X[:, a:b]),
                list(ids[a:b]),
                y[a:b] if labels else None,
            )
        return writer.commit(idf=idf)


def _no_siblings(tmp_path, *keep):
    return sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)


# -- round trip --------------------------------------------------------------------------


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_round_trip_across_chunk_layouts(tmp_path, X, layout):
    sizes = LAYOUTS[layout](N)
    idf = np.linspace(1.0, 3.0, M)
    vocabulary = [f"w{i}" for i in range(M)]
    path = tmp_path / "corpus.zarr"
    written = _write(path, X, sizes, idf=idf, vocabulary=vocabulary)

    for corpus in (written, Corpus(path), open_corpus(path), open_input(path)):
        assert isinstance(corpus, Corpus)
        assert corpus.shape == (M, N)
        assert (corpus.n_features, corpus.n_documents) == (M, N)
        assert corpus.nnz == X.nnz
        assert corpus.chunks == tuple(sizes)
        assert corpus.n_chunks == len(sizes)
        np.testing.assert_array_equal(corpus.chunk_boundaries, np.cumsum([0, *sizes]))
        assert list(corpus.doc_ids) == list(_doc_ids(N))
        np.testing.assert_array_equal(corpus.labels, _labels(N))
        assert corpus.label_names == LABEL_NAMES
        expected_empty = np.diff(X.indptr) == 0
        assert expected_empty.sum() >= 4
        np.testing.assert_array_equal(corpus.empty, expected_empty)
        assert corpus.n_empty == expected_empty.sum()
        np.testing.assert_array_equal(corpus.idf, idf)
        assert list(corpus.vocabulary) == vocabulary
        assert corpus.feature_scheme == SCHEME
        assert corpus.tfidf == {"sublinear_tf": True}

    corpus = Corpus(path)
    bounds = corpus.chunk_boundaries
    for i in range(corpus.n_chunks):
        block = corpus.read_chunk(i)
        assert isinstance(block, sp.csc_matrix)
        assert block.dtype == np.float64
        assert block.shape == (M, sizes[i])
        assert block.has_sorted_indices
        assert (block != X[:, bounds[i] : bounds[i + 1]]).nnz == 0


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_to_dask_has_one_csc_block_per_chunk(tmp_path, X, layout):
    sizes = LAYOUTS[layout](N)
    corpus = _write(tmp_path / "corpus.zarr", X, sizes)
    x = corpus.to_dask()
    assert x.shape == (M, N)
    assert x.dtype == np.float64
    assert x.chunks == ((M,), tuple(sizes))
    assert x.numblocks == (1, len(sizes))
    for i in range(len(sizes)):
        block = x.blocks[0, i].compute()
        assert isinstance(block, sp.csc_matrix)
        assert block.shape == (M, sizes[i])
    full = x.compute()
    full = full.toarray() if sp.issparse(full) else np.asarray(full)
    np.testing.assert_array_equal(full, X.toarray())


def test_corpus_without_labels_idf_or_vocabulary(tmp_path, X):
    corpus = _write(tmp_path / "corpus.zarr", X, [N], labels=False)
    assert corpus.labels is None
    assert corpus.idf is None
    assert corpus.vocabulary is None
    assert corpus.label_names is None


def test_labels_for_some_chunks_only_is_an_error(tmp_path, X):
    path = tmp_path / "corpus.zarr"
    with pytest.raises(ValueError, match="labels"):
        with CorpusWriter(path, n_features=M, feature_scheme=SCHEME) as writer:
            writer.write_chunk(X[:, :10], list(_doc_ids(10)), _labels(10))
            writer.write_chunk(X[:, 10:], list(_doc_ids(N)[10:]))
            writer.commit()
    assert _no_siblings(tmp_path)


# -- atomic commit -----------------------------------------------------------------------


def test_abort_leaves_no_output_and_no_staging_dir(tmp_path, X):
    path = tmp_path / "corpus.zarr"
    with pytest.raises(RuntimeError, match="interrupted"):
        with CorpusWriter(path, n_features=M, feature_scheme=SCHEME) as writer:
            writer.write_chunk(X[:, :20], list(_doc_ids(20)))
            # the staging directory exists while writing, next to the target; the writer
            # holds the target (its lock and record) until the block ends
            names = sorted(p.name for p in tmp_path.iterdir())
            assert [n for n in names if ".tmp-" in n] != [] and len(names) == 3, names
            assert "corpus.zarr.lock" in names
            raise RuntimeError("interrupted")
    assert not path.exists()
    assert _no_siblings(tmp_path)


def test_abort_of_an_overwrite_keeps_the_previous_corpus(tmp_path, X):
    path = tmp_path / "corpus.zarr"
    before = _write(path, X, [N])
    with pytest.raises(RuntimeError):
        with CorpusWriter(path, n_features=M, feature_scheme=SCHEME, overwrite=True) as writer:
            writer.write_chunk(X[:, :5] * 2.0, list(_doc_ids(5)))
            raise RuntimeError("interrupted")
    assert _no_siblings(tmp_path, "corpus.zarr")
    after = Corpus(path)
    assert after.fingerprint == before.fingerprint
    assert after.shape == (M, N)


def test_existing_output_raises_unless_overwrite(tmp_path, X):
    path = tmp_path / "corpus.zarr"
    first = _write(path, X, [N])
    with pytest.raises(OutputExistsError, match="corpus.zarr"):
        CorpusWriter(path, n_features=M, feature_scheme=SCHEME)
    with pytest.raises(FileExistsError):
        CorpusWriter(path, n_features=M, feature_scheme=SCHEME)
    assert _no_siblings(tmp_path, "corpus.zarr")
    assert Corpus(path).fingerprint == first.fingerprint

    Y = X[:, :25] * 3.0
    with CorpusWriter(path, n_features=M, feature_scheme=SCHEME, overwrite=True) as writer:
        writer.write_chunk(Y, list(_doc_ids(25)))
        second = writer.commit()
    assert _no_siblings(tmp_path, "corpus.zarr")
    reopened = Corpus(path)
    assert reopened.shape == (M, 25)
    assert reopened.fingerprint == second.fingerprint != first.fingerprint
    np.testing.assert_array_equal(reopened.read_chunk(0).toarray(), Y.toarray())


def test_existing_plain_directory_is_not_overwritten(tmp_path):
    path = tmp_path / "corpus.zarr"
    path.mkdir()
    (path / "keep.txt").write_text("precious")
    with pytest.raises(OutputExistsError):
        CorpusWriter(path, n_features=M, feature_scheme=SCHEME)
    assert (path / "keep.txt").read_text() == "precious"


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_chunk_is_rejected(tmp_path, X, bad):
    path = tmp_path / "corpus.zarr"
    chunk = sp.csc_matrix(X[:, :10], copy=True)
    chunk.data[0] = bad
    with pytest.raises(ValueError, match="NaN or Inf"):
        with CorpusWriter(path, n_features=M, feature_scheme=SCHEME) as writer:
            writer.write_chunk(chunk, list(_doc_ids(10)))
    assert _no_siblings(tmp_path)


def test_chunk_shape_mismatches_are_rejected(tmp_path, X):
    with CorpusWriter(tmp_path / "c.zarr", n_features=M, feature_scheme=SCHEME) as writer:
        with pytest.raises(ValueError, match="features"):
            writer.write_chunk(X[:-1, :10], list(_doc_ids(10)))
        with pytest.raises(ValueError, match="document ids"):
            writer.write_chunk(X[:, :10], list(_doc_ids(9)))
    assert _no_siblings(tmp_path)


# -- opening: missing and malformed inputs -----------------------------------------------


@pytest.mark.parametrize("opener", [Corpus, open_corpus, open_input, DenseInput])
def test_missing_path_raises_input_not_found(tmp_path, opener):
    with pytest.raises(InputNotFoundError, match="nowhere.zarr"):
        opener(tmp_path / "nowhere.zarr")
    with pytest.raises(FileNotFoundError):
        opener(tmp_path / "nowhere.zarr")


def _plain_dir(path):
    path.mkdir()
    (path / "notes.txt").write_text("not zarr")


def _empty_dir(path):
    path.mkdir()


def _plain_group(path):
    group = zarr.open_group(store=str(path), mode="w")
    group.attrs["something"] = "else"
    group.create_array("a", shape=(3,), dtype="f8")


def _other_kind(path):
    group = zarr.open_group(store=str(path), mode="w")
    group.attrs["sphdist"] = {"kind": "model", "format_version": 1}


@pytest.mark.parametrize("make", [_plain_dir, _empty_dir, _plain_group, _other_kind])
@pytest.mark.parametrize("opener", [Corpus, open_input])
def test_not_a_corpus_raises_format_error(tmp_path, make, opener):
    path = tmp_path / "thing"
    make(path)
    with pytest.raises(CorpusFormatError, match="thing"):
        opener(path)


@pytest.mark.parametrize("version", [0, 2, "1", None])
@pytest.mark.parametrize("opener", [Corpus, open_input])
def test_wrong_format_version_raises(tmp_path, X, version, opener):
    path = tmp_path / "corpus.zarr"
    _write(path, X, [N])
    group = zarr.open_group(store=str(path), mode="r+")
    group.attrs["sphdist"] = {"kind": "corpus", "format_version": version}
    with pytest.raises(CorpusFormatError, match="format version"):
        opener(path)


def test_deleted_chunk_raises_naming_the_chunk_when_read(tmp_path, X):
    path = tmp_path / "corpus.zarr"
    _write(path, X, [10, 10, 20])
    shutil.rmtree(path / "X" / "00001")
    corpus = Corpus(path)  # metadata only: opening still works
    corpus.read_chunk(0)
    corpus.read_chunk(2)
    with pytest.raises(CorpusFormatError, match=r"chunk 1 \(X/00001\)"):
        corpus.read_chunk(1)
    with pytest.raises(CorpusFormatError, match=r"chunk 1 \(X/00001\)"):
        corpus.to_dask().compute()


def _bump_last_pointer(group):
    indptr = group["X/00002/indptr"]
    values = indptr[:]
    values[-1] += 1
    indptr[:] = values


def _truncate_pointers(group):
    values = group["X/00002/indptr"][:]
    group.create_array("X/00002/indptr", shape=(values.size - 1,), dtype="i8", overwrite=True)
    group["X/00002/indptr"][:] = values[:-1]


def _shift_first_pointer(group):
    indptr = group["X/00002/indptr"]
    values = indptr[:]
    values[0] = 1
    indptr[:] = values


@pytest.mark.parametrize("corrupt", [_bump_last_pointer, _truncate_pointers, _shift_first_pointer])
def test_inconsistent_indptr_raises_naming_the_chunk_when_read(tmp_path, X, corrupt):
    path = tmp_path / "corpus.zarr"
    _write(path, X, [10, 10, 20])
    corrupt(zarr.open_group(store=str(path), mode="r+"))
    corpus = Corpus(path)
    corpus.read_chunk(1)
    with pytest.raises(CorpusFormatError, match="chunk 2 has inconsistent"):
        corpus.read_chunk(2)
    with pytest.raises(CorpusFormatError, match="chunk 2 has inconsistent"):
        corpus.to_dask().compute()


# -- identity ----------------------------------------------------------------------------


def test_fingerprint_differs_between_ingests_and_is_stable_on_reopen(tmp_path, X):
    a = _write(tmp_path / "a.zarr", X, [20, 20])
    b = _write(tmp_path / "b.zarr", X, [20, 20])
    assert a.attrs["corpus_id"] != b.attrs["corpus_id"]
    assert a.fingerprint != b.fingerprint
    assert len(a.fingerprint) == 64 and int(a.fingerprint, 16) >= 0
    for path, written in ((tmp_path / "a.zarr", a), (tmp_path / "b.zarr", b)):
        assert Corpus(path).fingerprint == written.fingerprint
        assert open_input(path).fingerprint == written.fingerprint
    # the same data under two ingests never share dask keys
    assert a.to_dask().name != b.to_dask().name
    assert a.to_dask().name == Corpus(tmp_path / "a.zarr").to_dask().name


# -- dense input -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dense():
    rng = np.random.default_rng(5)
    data = rng.standard_normal((23, 6)).astype(np.float32)
    data[4] = 0.0
    return data


def test_dense_array_is_read_transposed(tmp_path, dense):
    path = tmp_path / "dense.zarr"
    array = zarr.create_array(store=str(path), shape=dense.shape, chunks=(7, 6), dtype="f4")
    array[:] = dense
    x = open_input(path)
    assert isinstance(x, DenseInput)
    assert x.shape == (6, 23)
    assert (x.n_features, x.n_documents) == (6, 23)
    assert x.chunks == (7, 7, 7, 2)
    np.testing.assert_array_equal(x.chunk_boundaries, [0, 7, 14, 21, 23])
    assert x.labels is None
    xd = x.to_dask()
    assert xd.shape == (6, 23)
    assert xd.chunks == ((6,), (7, 7, 7, 2))
    assert xd.dtype == np.float64
    np.testing.assert_array_equal(xd.compute(), dense.T.astype(np.float64))
    expected_empty = np.zeros(23, dtype=bool)
    expected_empty[4] = True
    np.testing.assert_array_equal(x.empty, expected_empty)
    assert list(x.doc_ids) == [str(j) for j in range(23)]


def test_dense_group_with_labels(tmp_path, dense):
    path = tmp_path / "uci.zarr"
    group = zarr.open_group(store=str(path), mode="w")
    group.create_array("X", shape=dense.shape, chunks=(10, 6), dtype="f4")[:] = dense
    y = np.arange(23, dtype=np.int64) % 3
    group.create_array("y", shape=y.shape, dtype="i8")[:] = y
    x = open_input(path)
    assert isinstance(x, DenseInput)
    assert x.shape == (6, 23)
    assert x.chunks == (10, 10, 3)
    assert x.labels.dtype == np.int32
    np.testing.assert_array_equal(x.labels, y)
    np.testing.assert_array_equal(x.to_dask().compute(), dense.T.astype(np.float64))


def test_dense_group_without_labels(tmp_path, dense):
    path = tmp_path / "uci.zarr"
    group = zarr.open_group(store=str(path), mode="w")
    group.create_array("X", shape=dense.shape, dtype="f8")[:] = dense
    x = open_input(path)
    assert x.labels is None
    np.testing.assert_array_equal(x.to_dask().compute(), dense.T.astype(np.float64))


def test_dense_input_must_be_two_dimensional(tmp_path):
    path = tmp_path / "vector.zarr"
    zarr.create_array(store=str(path), shape=(5,), dtype="f8")[:] = 1.0
    with pytest.raises(CorpusFormatError, match="2-D"):
        open_input(path)


def test_dense_fingerprint_depends_on_the_array(tmp_path, dense):
    paths = []
    for name, shape in (("a.zarr", (23, 6)), ("b.zarr", (22, 6))):
        path = tmp_path / name
        zarr.create_array(store=str(path), shape=shape, dtype="f4")[:] = dense[: shape[0]]
        paths.append(path)
    assert open_input(paths[0]).fingerprint == open_input(paths[0]).fingerprint
    assert open_input(paths[0]).fingerprint != open_input(paths[1]).fingerprint


# -- values a fit cannot use (issue 15) ----------------------------------------------------------
def _overflows(column: np.ndarray) -> bool:
    """Reference: whether sum(x^2) exceeds the largest float64, computed scaled (no overflow)."""
    scale = 1e150
    return bool(np.sum((column / scale) ** 2) > np.finfo(np.float64).max / scale**2)


def test_documents_whose_squares_overflow_are_refused_against_a_reference():
    from sphdist.errors import DataError
    from sphdist.io._values import check_csc_values

    columns = [
        np.array([0.3, 0.4]),  # an ordinary document
        np.full(10, 1e153),  # large values whose squares still sum in float64
        np.array([1e200]),  # one value whose square overflows
        np.full(100, 2e153),  # squares finite one by one, their sum is not
        np.array([]),  # an empty document
    ]
    for j, column in enumerate(columns):
        indptr = np.array([0, column.size])
        indices = np.arange(column.size)
        if _overflows(column):
            value = re.escape(f"({column.max():.6g} at feature 0;")
            with pytest.raises(DataError, match=rf"doc{j} is too large for float64: the sum of "
                                                rf"its squared values overflows {value}"):
                check_csc_values(column, indices, indptr, "c.zarr", lambda k, j=j: f"doc{j}",
                                 "rescale")
        else:
            check_csc_values(column, indices, indptr, "c.zarr", lambda k: "doc", "rescale")
    assert [_overflows(c) for c in columns] == [False, False, True, True, False]
    # in one chunk, the first such document is named
    data = np.concatenate(columns)
    indptr = np.concatenate([[0], np.cumsum([c.size for c in columns])])
    indices = np.concatenate([np.arange(c.size) for c in columns])
    with pytest.raises(DataError, match="document 2 is too large"):
        check_csc_values(data, indices, indptr, "c.zarr", lambda k: f"document {k}", "rescale")


def test_nan_idf_is_refused_when_read(tmp_path, X):
    idf = np.linspace(1.0, 2.0, M)
    idf[5] = np.nan
    corpus = _write(tmp_path / "c.zarr", X, (N,), idf=idf)  # the digests match: not damage
    with pytest.raises(CorpusFormatError, match=r"c.zarr: idf holds a non-finite value \(nan\) "
                                                r"at feature 5\. To resolve this, re-ingest"):
        corpus.idf  # noqa: B018


def test_shape_that_disagrees_with_the_feature_scheme_is_refused(tmp_path, X):
    corpus = _write(tmp_path / "c.zarr", X, (N,))
    zarr.open_group(str(corpus.path), mode="r+").attrs["shape"] = [10**12, N]
    del zarr.open_group(str(corpus.path), mode="r+")["idf"]
    with pytest.raises(CorpusFormatError, match=r"shape says m = 1000000000000 features but "
                                                rf"feature_scheme says n_features = {M}"):
        Corpus(corpus.path)


def _replace_array(path, name, data):
    group = zarr.open_group(str(path), mode="r+")
    if name in group:
        del group[name]
    group.create_array(name, data=data)


@pytest.mark.parametrize("name, data, said", [
    ("labels", lambda n: np.zeros(n, dtype=np.float64), "labels is stored as float64"),
    ("doc_ids", lambda n: np.arange(n), "doc_ids is stored as int64"),
    ("empty", lambda n: np.zeros(n, dtype=np.int8), "empty is stored as int8"),
    ("idf", lambda n: np.arange(M), "idf is stored as int64"),
    ("stray", lambda n: np.arange(3), "stray is no array of a sphdist corpus"),
])
def test_an_array_outside_the_corpus_schema_is_refused_at_opening(tmp_path, X, name, data, said):
    """Issue 43 item 10: labels stored as float64, doc_ids as integers and a stray array were
    accepted (``fit`` exit 0); the digests cover the bytes, not their meaning. Each is refused
    when the corpus is opened, naming the array (its metadata alone: no chunk is read)."""
    corpus = _write(tmp_path / "c.zarr", X, (N,))
    _replace_array(corpus.path, name, data(N))
    with pytest.raises(CorpusFormatError, match=re.escape(said)) as caught:
        Corpus(corpus.path)
    assert "c.zarr" in str(caught.value) and "re-ingest" in str(caught.value)
