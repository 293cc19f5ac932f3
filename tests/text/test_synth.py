"""sphdist.text.synth: the synthetic collection, its two formats, and what ingest makes of them."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner
from sklearn.feature_extraction.text import (
    ENGLISH_STOP_WORDS,
    HashingVectorizer,
    TfidfTransformer,
    TfidfVectorizer,
)

from sphdist.cli import main
from sphdist.errors import OutputExistsError, ParameterError
from sphdist.io.corpus import Corpus
from sphdist.jobs import run
from sphdist.jobs.ingest import IngestRequest
from sphdist.jobs.synth import SynthRequest
from sphdist.text.ingest import SourceSpec, TextSpec
from sphdist.text.synth import iter_documents, pseudo_words

M = 2**12


def _matrix(corpus) -> np.ndarray:
    return sp.hstack([corpus.read_chunk(i) for i in range(corpus.n_chunks)]).toarray()


def _read_jsonl(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_pseudo_words_are_single_tokens_and_not_stop_words():
    words = pseudo_words(5000)
    assert len(set(words.tolist())) == 5000
    assert not set(words.tolist()) & ENGLISH_STOP_WORDS
    analyzer = TfidfVectorizer().build_analyzer()
    assert all(analyzer(w) == [w] for w in words[::7])


@pytest.mark.parametrize("name", ["docs.jsonl", "docs.jsonl.gz"])
def test_jsonl_is_seeded_and_labelled(tmp_path, name):
    summary = run(SynthRequest(output=tmp_path / name, n_docs=50, n_topics=3, seed=7, doc_length=20,
                               vocab_size=300, chunk_size=16))
    records = _read_jsonl(tmp_path / name)
    assert [r["id"] for r in records] == [f"doc{i:02d}" for i in range(50)]
    assert {r["label"] for r in records} <= {"topic0", "topic1", "topic2"}
    assert [(r["id"], r["label"], r["text"]) for r in records] == list(
        iter_documents(50, 3, seed=7, doc_length=20, vocab_size=300, chunk_size=16)
    )
    assert summary.n_tokens == sum(len(r["text"].split()) for r in records)
    run(SynthRequest(output=tmp_path / "again.jsonl", n_docs=50, n_topics=3, seed=7, doc_length=20,
                     vocab_size=300, chunk_size=16))
    assert _read_jsonl(tmp_path / "again.jsonl") == records
    run(SynthRequest(output=tmp_path / "other.jsonl", n_docs=50, n_topics=3, seed=8, doc_length=20,
                     vocab_size=300, chunk_size=16))
    assert _read_jsonl(tmp_path / "other.jsonl") != records


def test_labels_are_the_dominant_topic(tmp_path):
    # documents of the same label share far more vocabulary than documents of different ones
    run(SynthRequest(output=tmp_path / "d.jsonl", n_docs=300, n_topics=3, seed=0, doc_length=80,
                     vocab_size=2000))
    records = _read_jsonl(tmp_path / "d.jsonl")
    X = TfidfVectorizer().fit_transform([r["text"] for r in records])
    y = np.array([r["label"] for r in records])
    sims = (X @ X.T).toarray()
    same = sims[y[:, None] == y[None, :]].mean()
    other = sims[y[:, None] != y[None, :]].mean()
    assert same > 2 * other


@pytest.mark.parametrize("chunk_size", [7, 1000])
def test_corpus_equals_sklearn_on_the_jsonl_text(tmp_path, chunk_size):
    kwargs = {"n_docs": 60, "n_topics": 4, "seed": 3, "doc_length": 30, "vocab_size": 500,
              "chunk_size": chunk_size}
    run(SynthRequest(output=tmp_path / "d.jsonl", **kwargs))
    run(SynthRequest(output=tmp_path / "h.zarr", format="corpus", n_features=M, **kwargs))
    run(SynthRequest(output=tmp_path / "v.zarr", format="corpus", vocabulary=True, **kwargs))
    records = _read_jsonl(tmp_path / "d.jsonl")
    texts = [r["text"] for r in records]

    hashed = Corpus(tmp_path / "h.zarr")
    counts = HashingVectorizer(n_features=M, alternate_sign=False, norm=None).transform(texts)
    np.testing.assert_allclose(_matrix(hashed), TfidfTransformer().fit_transform(counts).T
                               .toarray(), rtol=0, atol=1e-12)
    assert list(hashed.doc_ids) == [r["id"] for r in records]
    assert [hashed.label_names[c] for c in hashed.labels] == [r["label"] for r in records]

    learned = Corpus(tmp_path / "v.zarr")
    reference = TfidfVectorizer()
    expected = reference.fit_transform(texts).T.toarray()
    assert list(learned.vocabulary) == list(reference.get_feature_names_out())
    np.testing.assert_allclose(_matrix(learned), expected, rtol=0, atol=1e-12)

    # and it is what `ingest --hashing --stop-words none --no-sublinear-tf` writes from the lines
    ingested = run(IngestRequest(
        SourceSpec(tmp_path / "d.jsonl", label_field="label", id_field="id"),
        tmp_path / "i.zarr", chunk_size=chunk_size, text=TextSpec(
            vocabulary=False, n_features=M, stop_words=None, sublinear_tf=False)))
    np.testing.assert_array_equal(_matrix(ingested), _matrix(hashed))
    np.testing.assert_array_equal(ingested.idf, hashed.idf)
    assert ingested.feature_scheme == hashed.feature_scheme
    assert ingested.tfidf == hashed.tfidf
    assert ingested.chunks == hashed.chunks


@pytest.mark.parametrize(
    "kwargs",
    [{"n_docs": 0}, {"n_topics": 0}, {"format": "csv"}, {"purity": 0.2}, {"seed": -1},
     {"background": 1.0}, {"doc_length": 0}],
)
def test_bad_parameters(tmp_path, kwargs):
    params = {"n_docs": 5, "n_topics": 2, **kwargs}
    with pytest.raises(ParameterError):
        run(SynthRequest(output=tmp_path / "x.jsonl", **params))
    assert not list(tmp_path.iterdir())


def test_existing_output(tmp_path):
    (tmp_path / "x.jsonl").write_text("keep")
    with pytest.raises(OutputExistsError):
        run(SynthRequest(output=tmp_path / "x.jsonl", n_docs=5, n_topics=2))
    assert (tmp_path / "x.jsonl").read_text() == "keep"
    run(SynthRequest(output=tmp_path / "x.jsonl", n_docs=5, n_topics=2, overwrite=True))
    assert len(_read_jsonl(tmp_path / "x.jsonl")) == 5


def test_cli_synth(tmp_path):
    result = CliRunner().invoke(main, [
        "synth", "--n-docs", "40", "--n-topics", "2", "--seed", "1", "--doc-length", "10",
        "--format", "corpus", "--n-features", "256", "-o", str(tmp_path / "c.zarr"), "--json",
    ])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    corpus = Corpus(tmp_path / "c.zarr")
    assert summary["n_docs"] == corpus.n_documents == 40
    assert summary["nnz"] == corpus.nnz and corpus.shape == (256, 40)
    result = CliRunner().invoke(main, ["synth", "--n-docs", "4", "--n-topics", "2",
                                       "--format", "corpus", "-o", str(tmp_path / "c.zarr")])
    assert result.exit_code == 1 and "Error:" in result.output and "exists" in result.output
    # JSON Lines over a corpus: never, not even with --overwrite (issue 31, item 1)
    result = CliRunner().invoke(main, ["synth", "--n-docs", "4", "--n-topics", "2",
                                       "--format", "jsonl", "-o", str(tmp_path / "c.zarr"),
                                       "--overwrite"])
    assert result.exit_code == 1 and "is a sphdist corpus, not a file" in result.output
    assert Corpus(tmp_path / "c.zarr").n_documents == 40


@pytest.mark.parametrize("name", ["docs.csv", "docs.csv.gz"])
def test_csv_by_the_suffix_is_what_ingest_reads(tmp_path, name):
    """Issue 33 item 1: `synth -o x.csv` wrote JSON Lines into a file named .csv. The format
    is the suffix's: CSV (id, label, text), read by ingest as the JSON Lines are."""
    out = tmp_path / name
    result = CliRunner().invoke(main, ["synth", "--n-docs", "30", "--n-topics", "3",
                                       "--seed", "2", "--doc-length", "12", "-o", str(out),
                                       "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["format"] == "csv"
    import pandas as pd

    table = pd.read_csv(out)  # gzip told by the suffix
    run(SynthRequest(output=tmp_path / "docs.jsonl", n_docs=30, n_topics=3, seed=2, doc_length=12))
    rows = _read_jsonl(tmp_path / "docs.jsonl")
    assert list(table.columns) == ["id", "label", "text"]
    assert table.to_dict("records") == rows  # the same documents as the JSON Lines
    text = TextSpec(vocabulary=False, n_features=M, stop_words=None, sublinear_tf=False)
    # CSV ids are path:row unless --id-field names the column (JSON Lines default to "id")
    corpus = run(IngestRequest(SourceSpec(str(out), label_field="label", id_field="id"),
                               tmp_path / "c.zarr", text=text))
    lines = run(IngestRequest(SourceSpec(tmp_path / "docs.jsonl", label_field="label"),
                              tmp_path / "j.zarr", text=text))
    assert corpus.n_documents == 30 and list(corpus.doc_ids[:2]) == ["doc00", "doc01"]
    np.testing.assert_array_equal(_matrix(corpus), _matrix(lines))


@pytest.mark.parametrize("args,message", [
    (["-o", "x.parquet"], "the suffix '.parquet' names none of the formats written here: "
                          "jsonl (*.jsonl), csv (*.csv), corpus (*.zarr)"),
    (["-o", "x.txt"], "names none of the formats"),
    (["-o", "x.csv", "--format", "jsonl"], "x.csv is named as a csv file, but --format jsonl"),
    (["-o", "x.zarr", "--format", "csv"], "x.zarr is named as a corpus file, but --format csv"),
    (["-o", "x.zarr.gz"], "compresses JSON Lines or CSV"),
], ids=["parquet", "txt", "csv-as-jsonl", "zarr-as-csv", "zarr-gz"])
def test_a_suffix_that_names_another_format_is_refused(tmp_path, args, message):
    args = [a if not a.startswith("x.") else str(tmp_path / a) for a in args]
    result = CliRunner().invoke(main, ["synth", "--n-docs", "4", "--n-topics", "2", *args])
    assert result.exit_code == 1, result.output
    assert message in " ".join(result.stderr.split()), result.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


def _gzip_fname(path):
    """The FNAME field of a gzip member's header (RFC 1952, 2.3.1), None when absent."""
    head = path.read_bytes()[:4096]
    assert head[:3] == b"\x1f\x8b\x08", head[:3]  # gzip magic, deflate
    flags, pos = head[3], 10
    if flags & 0x04:  # FEXTRA: a 2-byte little-endian length, then the field
        pos += 2 + int.from_bytes(head[pos:pos + 2], "little")
    if not flags & 0x08:  # no FNAME
        return None
    return head[pos:head.index(b"\0", pos)].decode("latin-1")


@pytest.mark.parametrize("name", ["x.csv.gz", "x.jsonl.gz"])
def test_the_gzip_header_names_the_output_not_its_staging_file(tmp_path, name):
    # the file is written under a staging name (.x.csv.gz.tmp-...) and renamed: gunzip -N
    # would restore that name from a header recording it
    out = tmp_path / name
    result = CliRunner().invoke(main, ["synth", "--n-docs", "5", "--n-topics", "2",
                                       "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert _gzip_fname(out) in (None, name.removesuffix(".gz"))
    with gzip.open(out, "rb") as f:
        assert f.read().count(b"\n") >= 5  # still a complete gzip stream
