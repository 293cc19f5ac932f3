"""Where an ingest ends its chunks: at ``chunk_size`` documents, and at a bound on their text.

A chunk of 4,096 large files held all their counts at once in both passes (issue 43: 10 and
40 files of 2 MB were one chunk each, 0.7 and 2.8 million nonzeros, so the peak grew with the
collection). A chunk also ends before a document that would take its text past
``sphdist.text._passes.CHUNK_CHARS`` characters; the cuts depend on the documents alone.
"""

from __future__ import annotations

from pathlib import Path

import dask
import numpy as np
import pytest
import scipy.sparse as sp
import zarr

import sphdist.text._passes as passes
from sphdist.jobs import run
from sphdist.jobs.ingest import IngestRequest
from sphdist.text.ingest import SourceSpec, TextSpec
from sphdist.text.sources import plan
from sphdist.text.synth import pseudo_words

BOUND = 3_000  # characters of a chunk, in these tests
TEXT = TextSpec(min_df=1, max_df=1.0)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """50 documents of 20 to 4,000 characters (two longer than the bound) in two folders."""
    root = tmp_path_factory.mktemp("tree")
    rng = np.random.default_rng(7)
    words = pseudo_words(400).tolist()
    for k in range(50):
        n_chars = 4_000 if k in (11, 30) else int(rng.integers(20, 1_500))
        text = " ".join(rng.choice(words, size=n_chars // 6 + 1).tolist())[:n_chars]
        path = root / ("a" if k % 3 else "b") / f"{k:03d}.txt"
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="ascii")
    return root


def _ingest(tree: Path, out: Path, **kwargs):
    return run(IngestRequest(SourceSpec(tree), out, text=TEXT, **kwargs))


def _reference_bounds(lengths: list[int], chunk_size: int, bound: int) -> list[int]:
    """Chunk boundaries written out: a cut every chunk_size documents, and before a document
    that would take its chunk's text past ``bound`` (one longer document: a chunk alone)."""
    bounds, start, chars = [0], 0, 0
    for k, n in enumerate(lengths):
        if k > start and chars + n > bound:
            bounds.append(k)
            start, chars = k, 0
        chars += n
        if (k + 1) % chunk_size == 0:
            bounds.append(k + 1)
            start, chars = k + 1, 0
    if bounds[-1] != len(lengths):
        bounds.append(len(lengths))
    return bounds


def _matrix(corpus) -> np.ndarray:
    return sp.hstack([corpus.read_chunk(i) for i in range(corpus.n_chunks)]).toarray()


def test_a_chunk_never_holds_more_text_than_the_bound(tree, tmp_path, monkeypatch):
    """Every chunk holds at most the bound of text, or one document; the cuts are the rule's.

    Before the bound, the 50 documents (34,000 characters) were chunks of 16 documents
    whatever their text; the matrix, the ids and the labels are those of an ingest whose
    chunks are not cut by text.
    """
    whole = _ingest(tree, tmp_path / "whole.zarr", chunk_size=16)
    monkeypatch.setattr(passes, "CHUNK_CHARS", BOUND)
    corpus = _ingest(tree, tmp_path / "cut.zarr", chunk_size=16)
    ids = list(corpus.doc_ids)
    lengths = [len((tree / i).read_text(encoding="latin-1")) for i in ids]
    bounds = corpus.chunk_boundaries.tolist()
    assert bounds == _reference_bounds(lengths, 16, BOUND)
    assert len(bounds) > len(whole.chunk_boundaries) + 5  # the bound cut chunks
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        assert b - a <= 16
        assert sum(lengths[a:b]) <= BOUND or b - a == 1, (a, b, lengths[a:b])
    assert whole.chunk_boundaries.tolist() == [0, 16, 32, 48, 50]
    assert ids == list(whole.doc_ids)
    np.testing.assert_array_equal(corpus.labels, whole.labels)
    np.testing.assert_array_equal(_matrix(corpus), _matrix(whole))
    np.testing.assert_array_equal(corpus.idf, whole.idf)


def test_the_chunks_are_the_same_whatever_the_partitions_and_workers(tree, tmp_path,
                                                                      monkeypatch):
    """The cuts depend on the documents alone: partitions of 8, 16 or 32 documents (the text
    bound cuts inside them), one thread or three, and a pool of processes give the same chunks,
    ids and matrix."""
    import sphdist.text.ingest as ingest_module

    monkeypatch.setattr(passes, "CHUNK_CHARS", BOUND)
    with dask.config.set(scheduler="synchronous"):
        first = _ingest(tree, tmp_path / "p8.zarr", chunk_size=8, partition_size=8)
    others = []
    for k, size in enumerate((16, 32, None)):
        with dask.config.set(scheduler="threads", num_workers=3):
            others.append(_ingest(tree, tmp_path / f"t{k}.zarr", chunk_size=8,
                                  partition_size=size))
    monkeypatch.setattr(ingest_module, "PROCESSES_FROM_DOCUMENTS", 1)  # the own pool: processes
    monkeypatch.setattr(ingest_module, "PROCESSES_FROM_CPUS", 2)
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    pooled = _ingest(tree, tmp_path / "proc.zarr", chunk_size=8, partition_size=16)
    assert pooled.attrs["ingest"]["scheduler"] == "processes"
    others.append(pooled)
    assert first.attrs["ingest"]["n_partitions"] == 7
    assert first.n_chunks > 7 + 3  # cut by the text bound inside the partitions
    for corpus in others:
        assert corpus.chunk_boundaries.tolist() == first.chunk_boundaries.tolist()
        assert list(corpus.doc_ids) == list(first.doc_ids)
        assert corpus.attrs["chunk_nnz"] == first.attrs["chunk_nnz"]
        assert corpus.attrs["chunk_sha256"] == first.attrs["chunk_sha256"]
        np.testing.assert_array_equal(_matrix(corpus), _matrix(first))


def test_the_bound_keeps_20_newsgroups_in_chunks_of_4096_documents(newsgroups_archive):
    """The default bound is far above the text of any 4,096 documents of 20 Newsgroups (8.2 Mi
    characters at most, in the ingest's order), so its corpora keep their chunks."""
    source = SourceSpec(newsgroups_archive)
    reading = source.reading()
    src = plan(newsgroups_archive, format=None, reading=reading, partition_size=4 * 4096,
               categories=None, max_docs_per_label=None, seed=0)
    most = 0
    for part in src.partitions:
        lengths = [len(record[1]) for record in part.records(reading)]
        assert len(lengths) % 4096 == 0 or part is src.partitions[-1]
        for a in range(0, len(lengths), 4096):
            most = max(most, sum(lengths[a:a + 4096]))
    assert src.n_documents == 18_846
    assert 7 * 2**20 < most < passes.CHUNK_CHARS / 1.9


def test_the_help_and_the_guide_give_the_bound_the_ingest_applies():
    """``--chunk-size``'s help and the user guide's memory section name the bound in use."""
    from click.testing import CliRunner

    from sphdist.cli import main

    figure = f"{passes.CHUNK_CHARS // 2**20} Mi characters"
    result = CliRunner().invoke(main, ["ingest", "--help"], terminal_width=400)
    assert result.exit_code == 0
    assert figure in " ".join(result.output.split())
    guide = Path(__file__).resolve().parents[2] / "docs" / "user-guide" / "ingesting.md"
    assert figure in " ".join(guide.read_text(encoding="utf-8").split())


def test_the_embedding_of_chunks_cut_by_text_is_stored_in_regular_chunks(tree, tmp_path,
                                                                         monkeypatch):
    """Chunks cut by text are uneven; the embedding of such a corpus is V all the same.

    Its zarr chunks were the greatest common divisor of the corpus' chunk widths, so that no
    two tasks wrote one zarr chunk: one column per document here (a file per document). Now
    they are the widest corpus chunk, as for an even corpus, and V is bit for bit the
    embedding of the same documents chunked evenly.
    """
    from sphdist.jobs.fit import FitRequest
    from sphdist.jobs.transform import TransformRequest

    _ingest(tree, tmp_path / "whole.zarr", chunk_size=16)
    monkeypatch.setattr(passes, "CHUNK_CHARS", BOUND)
    cut = _ingest(tree, tmp_path / "cut.zarr", chunk_size=16)
    widths = np.diff(cut.chunk_boundaries)
    assert np.gcd.reduce(widths) == 1 and widths.max() > 1  # uneven: the case
    run(FitRequest(tmp_path / "whole.zarr", tmp_path / "m.zarr", n_components=3, max_iter=5))
    even = run(TransformRequest(tmp_path / "m.zarr", tmp_path / "whole.zarr",
                                tmp_path / "even.zarr"))
    uneven = run(TransformRequest(tmp_path / "m.zarr", tmp_path / "cut.zarr",
                                  tmp_path / "uneven.zarr"))
    stored = zarr.open_group(str(tmp_path / "uneven.zarr"), mode="r")
    c = int(widths.max())
    assert stored["V"].chunks == (3, c) and stored["degenerate"].chunks == (c,)
    np.testing.assert_array_equal(np.asarray(uneven.V[...]), np.asarray(even.V[...]))
    np.testing.assert_array_equal(uneven.degenerate, even.degenerate)
    np.testing.assert_array_equal(uneven.doc_ids, even.doc_ids)
    # the digests recorded are those of the chunks stored: the store opens and verifies
    from sphdist.io.embedding import open_embedding

    np.testing.assert_array_equal(np.asarray(open_embedding(tmp_path / "uneven.zarr").V[...]),
                                  np.asarray(even.V[...]))
