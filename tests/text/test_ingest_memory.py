"""What an ingest holds in memory (issue 43): measured with tracemalloc, not timed.

tracemalloc traces Python's and numpy's allocations in every thread (the ingest's tasks run on
a pool of threads here), so the peak traced while an ingest runs is what it held at once.
Each test compares two ingests that differ in one thing, after a first ingest that imported
everything: the difference is what that thing costs, whatever the fixed costs.
"""

from __future__ import annotations

import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from sphdist.jobs import run
from sphdist.jobs.ingest import IngestRequest
from sphdist.text._documents import Reading
from sphdist.text._passes import CountJob, _packed, _unpacked, count_partition
from sphdist.text.ingest import SourceSpec, TextSpec
from sphdist.text.sources import DirPartition
from sphdist.text.synth import pseudo_words
from sphdist.text.tfidf import TextOptions

MIB = 2**20


def _tree(root: Path, docs: list[str]) -> Path:
    for k, text in enumerate(docs):
        path = root / "label" / f"{k:03d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="ascii")
    return root


def _peak(source: Path, output: Path, text: TextSpec) -> int:
    """Peak bytes traced while ``source`` is ingested into ``output``."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        run(IngestRequest(SourceSpec(source), output, text=text, overwrite=True))
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_long_term_costs_its_length_not_its_length_times_the_terms(tmp_path):
    """One 4,000-character token among 5,000 terms adds about its 4 KB, not 80 MB.

    The terms of a chunk and the vocabulary were numpy fixed-width strings ('<U' of the
    longest, 4 bytes a character): the long token made every copy of the 5,000 terms
    5,000 x 4,000 x 4 bytes = 80 MB (the 569,194 terms of /usr/share/doc, one of 1,024
    characters: 2.3 GB a copy, an ingest of 10 GB).
    """
    words = " ".join(pseudo_words(5_000).tolist())
    text = TextSpec(min_df=1, max_df=1.0)
    plain = _tree(tmp_path / "plain", [words])
    long = _tree(tmp_path / "long", [words + " " + "x" * 4_000])
    _peak(plain, tmp_path / "warm.zarr", text)  # imports and first-use caches: not measured
    base = _peak(plain, tmp_path / "plain.zarr", text)
    with_long = _peak(long, tmp_path / "long.zarr", text)
    assert with_long - base < 1 * MIB, (base, with_long)
    assert with_long < 16 * MIB, with_long  # 5,000 terms of 8 characters, stored


@pytest.mark.parametrize("vocabulary", [True, False], ids=["vocabulary", "hashing"])
def test_a_count_task_holds_one_batch_of_text_and_counts_as_the_whole_chunk(tmp_path,
                                                                          vocabulary):
    """Three times the large documents in a chunk: the peak grows by far less than their text.

    Pass 1 buffered the texts of a whole chunk (4,096 documents) before tokenising them; it
    tokenises them in batches of ``batch_chars`` characters now (here 256 Ki, 2 documents of
    128 KB), so 18 such documents hold about as much as 6: the 12 more add 1.5 MB of text,
    and only the counts of their 300 distinct terms each, 24 bytes an entry. The counts
    spilled are those of scikit-learn's vectorizer on all the chunk's texts at once.
    """
    rng = np.random.default_rng(0)
    words = pseudo_words(300)
    options = TextOptions(vocabulary=vocabulary, stop_words=None, n_features=2**12)

    def docs(n: int) -> list[str]:  # 128 KB each, of 300 words of 4 to 5 letters
        return [" ".join(words[rng.integers(0, 300, size=30_000)].tolist())[:128_000]
                for _ in range(n)]

    def count(root: Path) -> tuple[int, Path]:
        ids = tuple(sorted(p.relative_to(root).as_posix() for p in root.rglob("*.txt")))
        spill = root.with_name(root.name + "-spill")
        spill.mkdir()
        job = CountJob(options=options, remove=(), reading=Reading(), on_error="fail",
                       chunk_size=4096, need_class_df=False, spill=str(spill),
                       batch_chars=2**18)
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            counts = count_partition(job, 0, DirPartition(str(root), ids))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert len(counts.chunks) == 1
        return peak, Path(counts.chunks[0])

    few = _tree(tmp_path / "few", docs(6))
    many_docs = docs(18)
    many = _tree(tmp_path / "many", many_docs)
    count(few)  # first use: not measured
    base, _ = count(_tree(tmp_path / "few2", docs(6)))
    more, spilled = count(many)
    assert more - base < 512 * 1024, (base, more)  # the 12 more documents: 1.5 MB of text

    expected = (options.count_vectorizer() if vocabulary else options.hashing_vectorizer())
    X = expected.fit_transform(many_docs).tocsr()
    X.sum_duplicates()
    with np.load(spilled) as f:
        np.testing.assert_array_equal(f["indptr"], X.indptr)
        np.testing.assert_array_equal(f["indices"], X.indices)
        np.testing.assert_array_equal(f["data"], X.data)
        if vocabulary:
            assert _unpacked(f, "terms").tolist() == expected.get_feature_names_out().tolist()


def test_a_count_task_leaves_no_vocabulary_of_its_batches_to_the_garbage_collector(tmp_path):
    """The tokeniser's vocabularies are freed as the task goes, not when Python next collects.

    ``CountVectorizer.fit_transform`` leaves its vocabulary (a ``defaultdict`` whose
    ``default_factory`` is its own ``__len__``) in a reference cycle; dropped in the oldest
    generation, these dicts, their terms and ints waited for a full collection, which Python
    runs ever more rarely as the objects of a run grow: an ingest's RSS after pass 1 grew 1.55
    times for 4 times the documents (issue 43). Here with the collector switched off (the worst
    case: no automatic collection) a task of 6 chunks of 60 batches (a document each) leaves
    at most a few hundred blocks for ``gc.collect`` to free; the 60 vocabularies left 3,394.
    """
    import gc
    import sys

    rng = np.random.default_rng(1)
    words = pseudo_words(2_000)
    docs = [" ".join(words[rng.zipf(1.3, size=150) % 2_000].tolist()) for _ in range(60)]
    root = _tree(tmp_path / "docs", docs)
    ids = tuple(sorted(p.relative_to(root).as_posix() for p in root.rglob("*.txt")))
    spill = tmp_path / "spill"
    spill.mkdir()
    job = CountJob(options=TextOptions(vocabulary=True, stop_words=None), remove=(),
                   reading=Reading(), on_error="fail", chunk_size=10, need_class_df=False,
                   spill=str(spill), batch_chars=1)  # a batch per document
    gc.collect()
    gc.disable()
    try:
        counts = count_partition(job, 0, DirPartition(str(root), ids))
        before = sys.getallocatedblocks()
        gc.collect()
        freed = before - sys.getallocatedblocks()
    finally:
        gc.enable()
    assert len(counts.chunks) == 6
    assert freed < 500, freed



def _traced(function, *args):
    """``function(*args)`` and the peak bytes traced while it ran, over those held before."""
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        result = function(*args)
        return result, tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()


def test_the_terms_of_a_chunk_are_spilled_and_read_back_in_a_few_bytes_each():
    """Spilling 60,000 terms of 7 characters holds about their bytes, reading them their strings.

    A chunk of large files has hundreds of thousands of distinct terms (issue 43: 200,000 for
    40 files of 2 MB). Spilling them held a bytes object per term and a list of them beside
    the strings (135 bytes a term at peak here); reading them back a list of the offsets' ints
    and one of the strings beside the array (127 bytes a term, the array's strings 64).
    """
    terms = np.empty(60_000, dtype=object)
    terms[:] = pseudo_words(60_000).tolist()
    terms[7] = "\u00e9t\u00e9-\ud800"  # not ASCII, and a lone surrogate: kept as they are
    _traced(_packed, "terms", terms)  # first use: not measured
    packed, peak = _traced(_packed, "terms", terms)
    assert peak / terms.shape[0] < 40, peak  # the joined text and its bytes, the ends
    back, peak = _traced(_unpacked, packed, "terms")
    assert back.dtype == object and back.tolist() == terms.tolist()
    held = sum(sys.getsizeof(t) for t in back.tolist()) + back.nbytes
    assert peak - held < 16 * terms.shape[0], (peak, held)


def test_weighting_and_storing_a_chunk_copies_none_of_its_nonzeros(tmp_path):
    """Pass 2 re-indexes, weights and stores a chunk's 2 million nonzeros with < 1 byte each more.

    The chunk's counts are what a task holds (12 bytes a nonzero); re-indexing them to the
    vocabulary made a second array of the indices, the idf's weights a float64 array of the
    nonzeros, storing them another copy of the indices and the digests a copy of every array
    (issue 43: a chunk of 40 large files holds 2.5 million nonzeros).
    """
    import scipy.sparse as sp
    import zarr

    from sphdist.io._checked import content_sha256
    from sphdist.io.corpus_writer import store_chunk
    from sphdist.text._passes import _to_vocabulary
    from sphdist.text.tfidf import weight

    rng = np.random.default_rng(0)
    n_docs, n_terms, nnz = 50, 40_000, 2_000_000
    terms = np.empty(n_terms, dtype=object)
    terms[:] = sorted(pseudo_words(n_terms).tolist())
    vocab = terms[rng.random(n_terms) < 0.8]  # the kept terms, sorted
    idf = rng.random(vocab.shape[0]) + 1.0

    def counts() -> sp.csr_matrix:
        rows = np.sort(rng.integers(0, n_docs, size=nnz))
        X = sp.csr_matrix((rng.integers(1, 5, size=nnz).astype(np.float64),
                           (rows, rng.integers(0, n_terms, size=nnz))), shape=(n_docs, n_terms))
        X.sum_duplicates()
        X.indices = X.indices.astype(np.int32)
        X.indptr = X.indptr.astype(np.int64)
        return X

    original = counts()
    expected = original[:, np.searchsorted(terms, vocab)].toarray()
    mapped, peak = _traced(_to_vocabulary, original, terms, vocab)
    np.testing.assert_array_equal(mapped.toarray(), expected)
    assert peak < 1.5 * original.nnz, peak  # a mask of the dropped nonzeros, and blocks
    ref_data = mapped.data.copy()
    X, peak = _traced(weight, mapped, idf, True)
    assert peak < 1.0 * mapped.nnz, peak  # a block of weights; the nonzeros: 8 bytes each
    ref = sp.csr_matrix((np.log(ref_data) + 1.0, mapped.indices, mapped.indptr),
                        shape=mapped.shape).multiply(idf[None, :]).tocsr()
    ref = ref.multiply(1.0 / np.sqrt(ref.multiply(ref).sum(axis=1))).tocsr()
    np.testing.assert_allclose(X.T.toarray(), ref.toarray(), rtol=1e-12, atol=1e-15)
    X_copy = X.copy()
    _, peak = _traced(content_sha256, X.data, X.indices, X.indptr)
    assert peak < 64 * 1024, peak
    zarr.open_group(store=str(tmp_path / "staging"), mode="w").require_group("X")
    store_chunk(tmp_path / "staging", 0, X_copy, vocab.shape[0])  # first use: not measured
    zarr.open_group(store=str(tmp_path / "staging2"), mode="w").require_group("X")
    stored, peak = _traced(store_chunk, tmp_path / "staging2", 0, X, vocab.shape[0])
    assert stored.sha256 == content_sha256(X_copy.data, X_copy.indices.astype(np.int32),
                                           X_copy.indptr.astype(np.int64))
    # zarr's own buffers: the encoded arrays (they compress little), not a copy of them besides
    assert peak < 10 * X.nnz, (peak, X.nnz)  # 12 before: the int32 indices copied


@pytest.mark.parametrize("kind", ["dir", "tar"])
def test_a_listed_tree_holds_its_paths_in_a_few_bytes_each(tmp_path, kind):
    """The plan of a folder or tar archive, held from the listing to the commit, costs about
    a path's UTF-8 bytes and 8 bytes more a document (16 in an archive: the member's offset
    too), not a Python string each (about 80 bytes for these ids of 19 characters; 144,000
    documents held 11 MB through the whole ingest; issue 43).

    The partitions read the same ids in the same order, and a name that is not UTF-8 (a lone
    surrogate in Python) still comes back as it was listed, a bad document naming it.
    """
    import gc
    import io
    import os
    import tarfile

    from sphdist.text.sources import plan

    n = 6_000
    names = [f"label{k % 20:02d}/{k:08d}.txt" for k in range(n)]
    odd = b"label00/caf\xe9.txt"
    if kind == "dir":
        root = tmp_path / "tree"
        for name in names:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).touch()
        os.close(os.open(os.fsencode(root) + b"/" + odd, os.O_CREAT | os.O_WRONLY))
    else:
        root = tmp_path / "docs.tar"
        with tarfile.open(root, "w", format=tarfile.GNU_FORMAT, encoding="latin-1") as tar:
            for name in [*names, odd.decode("latin-1")]:
                tar.addfile(tarfile.TarInfo(name), io.BytesIO(b""))
    reading = Reading()
    plan(str(root), format=kind, reading=reading, partition_size=512)  # imports, caches
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        src = plan(str(root), format=kind, reading=reading, partition_size=512)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    ids = [i for p in src.partitions for i in p.ids]
    expected = sorted([*names, odd.decode("utf-8", "surrogateescape")])
    assert ids == expected
    text = sum(len(i) for i in ids)  # ASCII but one: about their UTF-8 bytes
    per = 16 if kind == "dir" else 24
    assert held < text + per * (n + 1), (held, held / (n + 1))  # before: 77 bytes (dir), 165 (tar)
    bad = [r for p in src.partitions for r in p.records(reading) if not isinstance(r, tuple)]
    assert len(bad) == 1 and "caf\\xe9.txt" in bad[0].message(), bad
