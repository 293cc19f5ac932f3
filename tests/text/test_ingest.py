"""sphdist.text.ingest and sphdist.datasets against scikit-learn's tf-idf (the reference).

The reference is ``TfidfTransformer().fit_transform(HashingVectorizer(alternate_sign=False,
norm=None).transform(texts)).T`` on the same latin-1 texts, stripped by scikit-learn's own
``strip_newsgroup_header/footer/quoting`` in ``fetch_20newsgroups``'s order.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets._twenty_newsgroups import (
    strip_newsgroup_footer,
    strip_newsgroup_header,
    strip_newsgroup_quoting,
)
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

import sphdist.text._passes as passes_module
from sphdist.datasets import (
    NEWSGROUPS_PAPER_CATEGORIES,
    get_data_home,
    newsgroups_archive,
)
from sphdist.errors import DataError, InputNotFoundError, OutputExistsError, ParameterError
from tests.text._old_defaults import ingest_old

ALL_REMOVED = ("headers", "footers", "quotes")
M = 2**10  # hashed features of the hand-made tree (collisions are fine: same for both sides)

# id -> content; the parent folder is the label
DOCS = {
    "train/alpha/1": b"Subject: fox\n\nThe quick brown fox jumps over the lazy dog dog",
    "train/alpha/2": b"",  # empty file
    "train/alpha/3": b"Subject: caf\xe9\n\ncaf\xe9 na\xefve \xff\xfe \x80\x81 fox",  # not UTF-8
    "train/beta/10": (
        b"From: a@b.c\nSubject: space shuttle\n\nIn article <x> someone writes:\n"
        b"> quoted launch text\nThe shuttle launch was delayed.\n\n--\nJohn Doe, NASA\n"
    ),
    # carriage returns
    "train/beta/11": b"Subject: orbit\r\n\nOrbit orbit orbit\r\nlaunch windows\r\n",
    # the order of the strip functions matters for this one (quotes first would keep less)
    "train/beta/13": b"In article x writes:\n\nFrom: header\n\nbody text here",
    "test/alpha/4": b"! ? . a b c",  # text, but no token of 2+ word characters
    "test/beta/12": b"Subject: only headers\nFrom: x\n",  # blank once headers are removed
    "test/gamma/20": b"Subject: gamma\n\ngamma ray burst gamma\n\nJane\n",  # a footer
    "test/gamma/21": b"Subject: dogs\n\ndog fox shuttle",
}
EMPTY_COLUMNS = {"train/alpha/2", "test/alpha/4"}


def _write_tree(root: Path, docs: dict[str, bytes] = DOCS) -> Path:
    for doc_id, content in docs.items():
        path = root / doc_id
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    (root / "README").write_bytes(b"a top-level file: no label folder, not a document")
    return root


@pytest.fixture
def tree(tmp_path) -> Path:
    return _write_tree(tmp_path / "tree")


def _write_tar(path: Path, docs: dict[str, bytes], prefix: str = "") -> Path:
    """An archive whose members are stored in reverse id order, with directory entries."""
    mode = "w:gz" if path.name.endswith(".gz") else "w"
    with tarfile.open(path, mode) as archive:
        for folder in sorted({d.rsplit("/", 1)[0] for d in docs}, reverse=True):
            info = tarfile.TarInfo(prefix + folder)
            info.type = tarfile.DIRTYPE
            archive.addfile(info)
        for doc_id in sorted(docs, reverse=True):
            info = tarfile.TarInfo(prefix + doc_id)
            info.size = len(docs[doc_id])
            archive.addfile(info, io.BytesIO(docs[doc_id]))
    return path


def _reference(docs: dict[str, bytes], ids, n_features=M, remove=()):
    """scikit-learn's tf-idf of ``docs[ids]``, transposed: (dense (m, n), idf (m,))."""
    texts = [docs[i].decode("latin-1") for i in ids]
    for name, strip in (
        ("headers", strip_newsgroup_header),
        ("footers", strip_newsgroup_footer),
        ("quotes", strip_newsgroup_quoting),
    ):  # the order of fetch_20newsgroups
        if name in remove:
            texts = [strip(t) for t in texts]
    counts = HashingVectorizer(n_features=n_features, alternate_sign=False, norm=None).transform(
        texts
    )
    tfidf = TfidfTransformer()
    X = tfidf.fit_transform(counts)
    return X.T.toarray(), tfidf.idf_


def _matrix(corpus) -> sp.csc_matrix:
    return sp.hstack([corpus.read_chunk(i) for i in range(corpus.n_chunks)], format="csc")


def _column_norms(corpus) -> np.ndarray:
    return np.concatenate(
        [np.sqrt(np.asarray(c.multiply(c).sum(axis=0))).ravel()
         for c in map(corpus.read_chunk, range(corpus.n_chunks))]
    )


def _label(doc_id: str) -> str:
    return doc_id.split("/")[-2]


# -- exactness -------------------------------------------------------------------------------
@pytest.mark.parametrize("chunk_size", [1, 2, 4, 1000])
def test_matches_sklearn_tfidf(tree, tmp_path, chunk_size):
    corpus = ingest_old(tree, tmp_path / "out.zarr", n_features=M, chunk_size=chunk_size)
    ids = sorted(DOCS)
    expected, idf = _reference(DOCS, ids)

    X = corpus.to_dask().compute(scheduler="synchronous")
    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    assert X.shape == (M, len(DOCS)) == corpus.shape
    np.testing.assert_allclose(X, expected, rtol=0, atol=1e-12)
    assert not np.isnan(X).any()
    np.testing.assert_allclose(corpus.idf, idf, rtol=1e-15, atol=0)

    assert list(corpus.doc_ids) == ids
    assert corpus.label_names == ["alpha", "beta", "gamma"]
    np.testing.assert_array_equal(
        corpus.labels, [corpus.label_names.index(_label(d)) for d in ids]
    )
    assert corpus.labels.dtype == np.int32
    assert set(np.asarray(ids)[corpus.empty]) == EMPTY_COLUMNS
    assert corpus.n_empty == len(EMPTY_COLUMNS)
    assert corpus.attrs["ingest"]["n_blank_text"] == 1  # the empty file
    np.testing.assert_allclose(_column_norms(corpus)[~corpus.empty], 1.0, rtol=1e-14)

    sizes = [min(chunk_size, len(ids) - s) for s in range(0, len(ids), chunk_size)]
    assert corpus.chunks == tuple(sizes)
    assert corpus.nnz == np.count_nonzero(expected)


def test_stored_attributes(tree, tmp_path):
    corpus = ingest_old(
        tree, tmp_path / "out.zarr", n_features=M, remove=["quotes", "headers"], seed=3,
        max_docs_per_label=2, categories=["beta", "alpha"], chunk_size=3,
    )
    assert corpus.feature_scheme == {
        "type": "hashing", "n_features": M, "alternate_sign": False, "lowercase": True,
        "token_pattern": r"(?u)\b\w\w+\b", "ngram_range": [1, 1], "analyzer": "word",
        "stop_words": None, "strip_accents": None,
    }
    assert corpus.tfidf == {
        "smooth_idf": True, "sublinear_tf": False, "norm": "l2", "remove": ["headers", "quotes"],
    }
    assert corpus.attrs["source"] == str(tree)
    meta = corpus.attrs["ingest"]
    assert meta["categories"] == ["alpha", "beta"]
    assert (meta["max_docs_per_label"], meta["seed"], meta["chunk_size"]) == (2, 3, 3)
    assert meta["n_available"] == len(DOCS)


def test_remove_matches_fetch_20newsgroups(tree, tmp_path):
    ids = sorted(DOCS)
    # the order given does not matter: headers, footers, quotes are applied in that order
    corpus = ingest_old(tree, tmp_path / "out.zarr", n_features=M, remove=("quotes", "footers",
                                                                       "headers"), chunk_size=3)
    expected, _ = _reference(DOCS, ids, remove=ALL_REMOVED)
    np.testing.assert_allclose(_matrix(corpus).toarray(), expected, rtol=0, atol=1e-12)
    unstripped, _ = _reference(DOCS, ids)
    assert not np.allclose(expected, unstripped)  # the removal did something
    # blank after removal: the empty file and two without a blank line (all of such a text is
    # header for strip_newsgroup_header)
    assert corpus.attrs["ingest"]["n_blank_text"] == 3
    assert set(np.asarray(ids)[corpus.empty]) == {"train/alpha/2", "test/alpha/4",
                                                  "test/beta/12"}


@pytest.mark.parametrize(("chunk_size", "partition_size"), [(1, 1), (2, 3), (2, None), (1000, 3)])
@pytest.mark.parametrize(("name", "prefix"), [("tree.tar.gz", "./"), ("tree.tar", "")])
def test_archive_same_as_directory(tree, tmp_path, name, prefix, chunk_size, partition_size):
    archive = _write_tar(tmp_path / name, DOCS, prefix=prefix)
    from_tree = ingest_old(tree, tmp_path / "a.zarr", n_features=M, chunk_size=chunk_size)
    from_tar = ingest_old(archive, tmp_path / "b.zarr", n_features=M, chunk_size=chunk_size,
                      partition_size=partition_size)
    assert list(from_tar.doc_ids) == list(from_tree.doc_ids) == sorted(DOCS)
    np.testing.assert_array_equal(from_tar.labels, from_tree.labels)
    np.testing.assert_array_equal(from_tar.empty, from_tree.empty)
    assert from_tar.chunks == from_tree.chunks
    np.testing.assert_array_equal(_matrix(from_tar).toarray(), _matrix(from_tree).toarray())


def test_tar_duplicate_member_last_one_wins(tmp_path):
    path = tmp_path / "dup.tar"
    with tarfile.open(path, "w") as archive:
        for content in (b"first version", b"second version"):
            info = tarfile.TarInfo("x/doc")
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    corpus = ingest_old(path, tmp_path / "out.zarr", n_features=M)
    assert list(corpus.doc_ids) == ["x/doc"]
    expected, _ = _reference({"x/doc": b"second version"}, ["x/doc"])
    np.testing.assert_allclose(_matrix(corpus).toarray(), expected, rtol=0, atol=1e-12)


# -- selection -------------------------------------------------------------------------------
def test_categories(tree, tmp_path):
    corpus = ingest_old(tree, tmp_path / "out.zarr", n_features=M, categories=["gamma", "alpha"])
    ids = sorted(d for d in DOCS if _label(d) in ("alpha", "gamma"))
    assert list(corpus.doc_ids) == ids
    assert corpus.label_names == ["alpha", "gamma"]
    np.testing.assert_array_equal(corpus.labels, [0 if _label(d) == "alpha" else 1 for d in ids])
    expected, _ = _reference(DOCS, ids)  # idf fitted on the kept documents only
    np.testing.assert_allclose(_matrix(corpus).toarray(), expected, rtol=0, atol=1e-12)


def test_sampling_reproducible_and_per_label(tree, tmp_path):
    outputs = iter(range(1000))

    def sample(seed, categories=None):
        out = tmp_path / f"s{next(outputs)}.zarr"
        corpus = ingest_old(tree, out, n_features=M, max_docs_per_label=2, seed=seed,
                        categories=categories)
        return list(corpus.doc_ids), corpus

    ids, corpus = sample(0)
    # at most 2 per label: alpha and beta have 4, gamma has 2
    assert sorted(np.bincount(corpus.labels)) == [2, 2, 2]
    assert ids == sorted(ids)
    assert sample(0)[0] == ids
    assert any(sample(seed)[0] != ids for seed in range(1, 6))
    # one generator per label: a label's sample does not depend on the other categories
    for seed in range(4):
        beta_only, _ = sample(seed, categories=["beta"])
        assert beta_only == [d for d in sample(seed)[0] if _label(d) == "beta"]
    expected, _ = _reference(DOCS, ids)
    np.testing.assert_allclose(_matrix(corpus).toarray(), expected, rtol=0, atol=1e-12)


# -- errors ----------------------------------------------------------------------------------
def test_missing_source(tmp_path):
    with pytest.raises(InputNotFoundError, match="nowhere") as info:
        ingest_old(tmp_path / "nowhere", tmp_path / "out.zarr")
    assert isinstance(info.value, FileNotFoundError)
    assert not (tmp_path / "out.zarr").exists()


def test_unknown_category_lists_available(tree, tmp_path):
    with pytest.raises(ParameterError, match="sci.space") as info:
        ingest_old(tree, tmp_path / "out.zarr", categories=["alpha", "sci.space"])
    assert "['alpha', 'beta', 'gamma']" in str(info.value)
    assert not (tmp_path / "out.zarr").exists()


def _empty_dir(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    return tmp_path / "src"


def _top_level_only(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "doc").write_bytes(b"no label folder")
    return tmp_path / "src"


def _empty_tar(tmp_path: Path) -> Path:
    return _write_tar(tmp_path / "src.tar.gz", {})


def _not_an_archive(tmp_path: Path) -> Path:
    (tmp_path / "src.txt").write_bytes(b"just text")
    return tmp_path / "src.txt"


@pytest.mark.parametrize("make", [_empty_dir, _top_level_only, _empty_tar, _not_an_archive])
def test_source_without_documents(tmp_path, make):
    with pytest.raises(DataError, match="src"):
        ingest_old(make(tmp_path), tmp_path / "out.zarr")
    assert not (tmp_path / "out.zarr").exists()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"remove": ("signatures",)},
        {"remove": "headers"},
        {"categories": "alpha"},
        {"chunk_size": 0},
        {"n_features": 0},
        {"seed": -1},
        {"seed": 1.5},
        {"max_docs_per_label": 0},
        {"encoding": "no-such-codec"},
        {"on_error": "ignore"},
        {"partition_size": 0},
        {"max_document_bytes": 0},
    ],
)
def test_bad_parameters(tree, tmp_path, kwargs):
    with pytest.raises(ParameterError):
        ingest_old(tree, tmp_path / "out.zarr", **kwargs)
    assert not (tmp_path / "out.zarr").exists()


def test_existing_output(tree, tmp_path):
    out = tmp_path / "out.zarr"
    out.mkdir()
    (out / "keep").write_text("previous")
    # a directory that is not a corpus is never replaced, not even with overwrite (issue 31)
    for overwrite in (False, True):
        with pytest.raises(OutputExistsError, match="out.zarr is a directory, not a sphdist"):
            ingest_old(tree, out, n_features=M, overwrite=overwrite)
    assert (out / "keep").read_text() == "previous"
    (out / "keep").unlink()
    first = ingest_old(tree, out, n_features=M, overwrite=True)  # empty: nothing to lose
    with pytest.raises(OutputExistsError, match="out.zarr"):
        ingest_old(tree, out, n_features=M)
    corpus = ingest_old(tree, out, n_features=M, overwrite=True)  # a corpus by a corpus
    assert corpus.n_documents == first.n_documents == len(DOCS)


@pytest.mark.parametrize("scheduler, window", [("synchronous", 2), ("threads", 4)])
def test_failure_mid_ingest_leaves_nothing(tree, tmp_path, monkeypatch, scheduler, window):
    """The error of chunk 2 ends the ingest after its window of tasks (2 per worker)."""
    import dask

    calls = []
    weight = passes_module.weight

    def failing_weight(counts, idf, sublinear_tf):
        calls.append(1)
        if len(calls) == 2:  # after the first chunk was written
            raise RuntimeError("disk on fire")
        return weight(counts, idf, sublinear_tf)

    monkeypatch.setattr(passes_module, "weight", failing_weight)
    with dask.config.set(scheduler=scheduler, num_workers=2), \
            pytest.raises(RuntimeError, match="disk on fire"):
        ingest_old(tree, tmp_path / "out.zarr", n_features=M, chunk_size=2)
    n_chunks = -(-sum(p.is_file() for p in tree.rglob("*")) // 2)
    assert n_chunks > window
    assert len(calls) == window  # the window's tasks ran to their end, the next never started
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree"]  # no output, no staging


def test_progress_bar_on_stderr(tree, tmp_path, capsys):
    ingest_old(tree, tmp_path / "a.zarr", n_features=M, progress=True)
    err = capsys.readouterr().err
    n = len(DOCS)
    assert "pass 1/2: count: 100%" in err and f"{n}/{n}" in err
    assert "pass 2/2: tf-idf: 100%" in err
    ingest_old(tree, tmp_path / "b.zarr", n_features=M)
    assert capsys.readouterr().err == ""


# -- data home -------------------------------------------------------------------------------
def test_get_data_home_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("SPHDIST_DATA_HOME", str(tmp_path / "env"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert get_data_home(tmp_path / "arg") == tmp_path / "arg"
    assert get_data_home() == tmp_path / "env"
    monkeypatch.delenv("SPHDIST_DATA_HOME")
    assert get_data_home() == tmp_path / "home" / "sphdist_data"
    assert get_data_home("~/x") == tmp_path / "home" / "x"


def test_newsgroups_archive_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("SPHDIST_DATA_HOME", str(tmp_path))
    with pytest.raises(InputNotFoundError) as info:
        newsgroups_archive()
    message = str(info.value)
    assert str(tmp_path / "20news-bydate.tar.gz") in message
    assert "export SPHDIST_DATA_HOME=/path/to/data" in message  # the remedy (5e1f511)
    (tmp_path / "20news-bydate.tar.gz").write_bytes(b"")
    assert newsgroups_archive() == tmp_path / "20news-bydate.tar.gz"
    assert newsgroups_archive(tmp_path) == tmp_path / "20news-bydate.tar.gz"


# -- the real archive ------------------------------------------------------------------------
def _read_members(archive: Path, ids) -> dict[str, bytes]:
    wanted, docs = set(ids), {}
    with tarfile.open(archive) as tar:
        for member in tar:
            if member.name in wanted:
                docs[member.name] = tar.extractfile(member).read()
    return docs


@pytest.fixture(scope="module")
def newsgroups_stripped(newsgroups_archive, tmp_path_factory):
    out = tmp_path_factory.mktemp("news") / "all.zarr"
    return ingest_old(newsgroups_archive, out, n_features=2**12, remove=ALL_REMOVED)


@pytest.mark.slow
def test_newsgroups_full_archive(newsgroups_stripped):
    corpus = newsgroups_stripped
    ids = corpus.doc_ids
    assert corpus.shape == (2**12, 18846)
    assert list(ids) == sorted(ids)
    assert sum(d.startswith("20news-bydate-train/") for d in ids) == 11314
    assert sum(d.startswith("20news-bydate-test/") for d in ids) == 7532
    assert len(corpus.label_names) == 20
    assert set(NEWSGROUPS_PAPER_CATEGORIES) <= set(corpus.label_names)
    assert [corpus.label_names[c] for c in corpus.labels] == [_label(d) for d in ids]
    assert np.bincount(corpus.labels).min() > 300
    norms = _column_norms(corpus)
    assert not np.isnan(norms).any()
    np.testing.assert_array_equal(norms == 0, corpus.empty)
    np.testing.assert_allclose(norms[~corpus.empty], 1.0, rtol=1e-12)
    # data README: removing headers, footers and quotes leaves 515 documents blank; 20 more
    # keep text but no token of two or more word characters, so 535 columns are zero
    assert corpus.attrs["ingest"]["n_blank_text"] == 515
    assert corpus.n_empty == int(corpus.empty.sum()) == 535


@pytest.mark.slow
def test_newsgroups_paper_sample(newsgroups_archive, tmp_path):
    def sample(seed, name):
        return ingest_old(
            newsgroups_archive, tmp_path / name, categories=NEWSGROUPS_PAPER_CATEGORIES,
            max_docs_per_label=200, seed=seed, n_features=2**12, remove=ALL_REMOVED,
        )

    corpus = sample(0, "a.zarr")
    ids = list(corpus.doc_ids)
    assert corpus.shape == (2**12, 1000)
    assert corpus.label_names == list(NEWSGROUPS_PAPER_CATEGORIES)
    np.testing.assert_array_equal(np.bincount(corpus.labels), [200] * 5)
    again = sample(0, "b.zarr")
    assert list(again.doc_ids) == ids
    np.testing.assert_array_equal(_matrix(again).toarray(), _matrix(corpus).toarray())
    other = sample(1, "c.zarr")
    assert list(other.doc_ids) != ids
    assert len(set(other.doc_ids) & set(ids)) < 1000

    expected, idf = _reference(
        _read_members(newsgroups_archive, ids), ids, n_features=2**12, remove=ALL_REMOVED
    )
    np.testing.assert_allclose(_matrix(corpus).toarray(), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(corpus.idf, idf, rtol=1e-15, atol=0)


def test_progress_as_log_lines(tree, tmp_path, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="sphdist"):
        logging.getLogger("sphdist").propagate = True
        ingest_old(tree, tmp_path / "a.zarr", n_features=M, progress="log", chunk_size=2,
               partition_size=2)
    lines = [r.getMessage() for r in caplog.records if "documents" in r.getMessage()]
    n = len(DOCS)
    assert any(line.startswith(f"pass 1/2: count: {n}/{n} documents") for line in lines)
    assert any(line.startswith(f"pass 2/2: tf-idf: {n}/{n} documents") for line in lines)
    assert len(lines) <= 2 * 11  # at most every tenth, plus the final line


@pytest.mark.parametrize("scheduler", [None, "sync"], ids=["own-threads", "sync"])
def test_pass_one_progress_advances_as_documents_are_read(tmp_path, caplog, scheduler):
    """Issue 43 item 7h: the pass-1 bar moved once per partition (0% -> 87% -> 100% on 20
    Newsgroups, in 16,384-document steps); a task in this process now counts its documents
    as it reads them, every PROGRESS_EVERY."""
    import contextlib
    import json
    import logging

    import dask

    every = passes_module.PROGRESS_EVERY
    n = 2000
    assert n // 10 < every < n  # each update passes a tenth: log mode shows every one
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": f"word{i % 7} other{i % 11} text"}) + "\n"
                              for i in range(n)))
    config = (dask.config.set(scheduler=scheduler) if scheduler else contextlib.nullcontext())
    logger = logging.getLogger("sphdist")
    propagate, logger.propagate = logger.propagate, True
    try:
        with config, caplog.at_level(logging.INFO, logger="sphdist"):
            ingest_old(str(source), tmp_path / "a.zarr", n_features=M, progress="log",
                       chunk_size=n)  # one partition: one task reads every document
    finally:
        logger.propagate = propagate
    counts = [int(r.getMessage().split(": ")[2].split("/")[0]) for r in caplog.records
              if r.getMessage().startswith("pass 1/2: count: ")]
    assert counts[-1] == n
    steps = np.diff([0, *counts])
    assert (steps > 0).all() and steps.max() <= every, counts
