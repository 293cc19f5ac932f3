"""sphdist.text.ingest over every kind of source, against scikit-learn's in-memory tf-idf.

References are computed here, in memory, with scikit-learn: ``TfidfVectorizer`` (vocabulary
scheme) and ``HashingVectorizer(alternate_sign=False, norm=None)`` + ``TfidfTransformer``
(hashing scheme), on the same texts; the stored matrix must equal them to 1e-12 whatever the
source format and the partitioning.
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
import zarr
from click.testing import CliRunner
from sklearn.feature_extraction.text import (
    CountVectorizer,
    HashingVectorizer,
    TfidfTransformer,
    TfidfVectorizer,
)
from sklearn.feature_selection import mutual_info_classif

from sphdist.cli import main
from sphdist.errors import (
    CorpusFormatError,
    DataError,
    InputNotFoundError,
    ParameterError,
)
from sphdist.jobs import run
from sphdist.jobs.fit import FitRequest
from tests.text._old_defaults import ingest_old

M = 2**10

RECORDS = [  # (id, label, text)
    ("d00", "space", "The Shuttle launch was delayed; the shuttle crew waited."),
    ("d01", "space", "Orbit, orbit, ORBIT: launch windows and orbit insertion."),
    ("d02", "food", "Café naïve crème brûlée, a café classic."),
    ("d03", "food", "cafe creme and the bread and the butter"),
    ("d04", "space", "moon rocket fuel rocket rocket"),
    ("d05", "food", ""),  # empty text: a zero column, kept
    ("d06", "food", "a b c ! ?"),  # no token of two word characters
    ("d07", "space", "Shuttle orbit moon; the crew of the shuttle."),
    ("d08", "food", "bread butter bread jam 42 42 x1"),
    ("d09", "space", "Über straße naïve orbit"),
    ("d10", "food", "jam and butter, toast and jam"),
]
IDS = [r[0] for r in RECORDS]
TEXT = {r[0]: r[2] for r in RECORDS}
LABEL = {r[0]: r[1] for r in RECORDS}


# -- writing the same records in every format --------------------------------------------------
def _jsonl(tmp_path: Path) -> str:
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": i, "label": lab, "text": t}) + "\n"
                            for i, lab, t in RECORDS), encoding="utf-8")
    return str(path)


def _jsonl_gz_split(tmp_path: Path) -> str:
    """Two gzip files and one plain file, matched by a pattern, in name order."""
    pieces = [RECORDS[:4], RECORDS[4:9], RECORDS[9:]]
    for k, piece in enumerate(pieces):
        lines = "".join(json.dumps({"id": i, "label": lab, "text": t}) + "\n"
                        for i, lab, t in piece).encode()
        if k < 2:
            with gzip.open(tmp_path / f"part{k}.jsonl.gz", "wb") as f:
                f.write(lines)
        else:
            (tmp_path / f"part{k}.jsonl").write_bytes(lines.rstrip(b"\n"))  # no final newline
    return str(tmp_path / "part*.jsonl*")


def _csv(tmp_path: Path) -> str:
    import pandas as pd

    path = tmp_path / "docs.csv"
    pd.DataFrame(RECORDS, columns=["id", "label", "text"]).to_csv(path, index=False)
    return str(path)


def _parquet(tmp_path: Path) -> str:
    path = tmp_path / "docs.parquet"
    table = pa.table({"id": IDS, "label": [r[1] for r in RECORDS],
                      "text": [r[2] for r in RECORDS]})
    pq.write_table(table, path, row_group_size=3)
    return str(path)


def _tree(tmp_path: Path) -> str:
    for i, lab, t in RECORDS:
        (tmp_path / "tree" / lab).mkdir(parents=True, exist_ok=True)
        (tmp_path / "tree" / lab / i).write_bytes(t.encode("utf-8"))
    return str(tmp_path / "tree")


def _tar(tmp_path: Path) -> str:
    path = tmp_path / "docs.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for i, lab, t in reversed(RECORDS):
            data = t.encode("utf-8")
            info = tarfile.TarInfo(f"{lab}/{i}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return str(path)


WRITERS = {"jsonl": _jsonl, "jsonl-gz-glob": _jsonl_gz_split, "csv": _csv,
           "parquet": _parquet, "dir": _tree, "tar": _tar}
FIELDS = {"text_field": "text", "label_field": "label", "id_field": "id"}


def _ingest(kind: str, tmp_path: Path, out: str = "out.zarr", **kwargs):
    source = WRITERS[kind](tmp_path)
    fields = {} if kind in ("dir", "tar") else FIELDS
    kwargs = {"encoding": "utf-8", **fields, **kwargs}
    return ingest_old(source, tmp_path / out, **kwargs)


def _record_id(doc_id: str) -> str:
    return doc_id.rsplit("/", 1)[-1]  # "space/d00" (tree, tar) -> "d00"


def _matrix(corpus) -> np.ndarray:
    return sp.hstack([corpus.read_chunk(i) for i in range(corpus.n_chunks)]).toarray()


def _hashing_reference(texts, **options):
    sublinear = options.pop("sublinear_tf", False)
    counts = HashingVectorizer(n_features=M, alternate_sign=False, norm=None,
                               **options).transform(texts)
    tfidf = TfidfTransformer(sublinear_tf=sublinear)
    return tfidf.fit_transform(counts).T.toarray(), tfidf.idf_


# -- exactness across sources and partitions ---------------------------------------------------
@pytest.mark.parametrize("partition_size", [1, 3, None])
@pytest.mark.parametrize("kind", list(WRITERS))
def test_hashing_matches_sklearn_across_sources(tmp_path, kind, partition_size):
    corpus = _ingest(kind, tmp_path, n_features=M, chunk_size=2, partition_size=partition_size)
    ids = [_record_id(d) for d in corpus.doc_ids]
    assert sorted(ids) == IDS
    if kind not in ("dir", "tar"):
        assert ids == IDS  # file order, then line order
    expected, idf = _hashing_reference([TEXT[i] for i in ids])
    np.testing.assert_allclose(_matrix(corpus), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(corpus.idf, idf, rtol=1e-15)
    assert corpus.label_names == ["food", "space"]
    assert [corpus.label_names[c] for c in corpus.labels] == [LABEL[i] for i in ids]
    assert set(np.asarray(ids)[corpus.empty]) == {"d05", "d06"}
    assert corpus.attrs["ingest"]["n_documents"] == len(RECORDS)
    assert corpus.attrs["ingest"]["n_skipped"] == 0
    # chunks never straddle partitions, never exceed chunk_size
    assert max(corpus.chunks) <= 2 and sum(corpus.chunks) == len(RECORDS)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"min_df": 2},
        {"max_df": 0.25},
        {"min_df": 0.1, "max_df": 3},
        {"max_features": 6},
        {"stop_words": "english", "strip_accents": "unicode", "sublinear_tf": True},
        {"lowercase": False, "token_pattern": r"(?u)\b\w+\b", "strip_accents": "ascii"},
    ],
)
@pytest.mark.parametrize("partition_size", [2, None])
def test_vocabulary_matches_tfidfvectorizer(tmp_path, options, partition_size):
    corpus = _ingest("jsonl", tmp_path, vocabulary=True, chunk_size=2,
                     partition_size=partition_size, **options)
    reference = TfidfVectorizer(**options)
    expected = reference.fit_transform([TEXT[i] for i in IDS]).T.toarray()
    assert list(corpus.vocabulary) == list(reference.get_feature_names_out())
    assert corpus.feature_scheme["type"] == "vocabulary"
    assert corpus.shape == expected.shape
    np.testing.assert_allclose(_matrix(corpus), expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(corpus.idf, reference.idf_, rtol=1e-15)
    norms = np.linalg.norm(_matrix(corpus), axis=0)
    np.testing.assert_allclose(norms[~corpus.empty], 1.0, rtol=1e-14)
    assert not norms[corpus.empty].any()


def test_hashing_options_match_sklearn(tmp_path):
    options = {"stop_words": "english", "strip_accents": "unicode", "sublinear_tf": True,
               "lowercase": False}
    corpus = _ingest("parquet", tmp_path, n_features=M, partition_size=4, **options)
    expected, _ = _hashing_reference([TEXT[i] for i in IDS], **options)
    np.testing.assert_allclose(_matrix(corpus), expected, rtol=0, atol=1e-12)
    assert corpus.feature_scheme["stop_words"] == "english"
    assert corpus.tfidf["sublinear_tf"] is True


def test_select_mutual_information_matches_sklearn(tmp_path):
    corpus = _ingest("jsonl", tmp_path, vocabulary=True, min_df=2, select="mutual-info",
                     n_select=4, partition_size=3, chunk_size=1)
    texts = [TEXT[i] for i in IDS]
    y = [LABEL[i] for i in IDS]
    counts = CountVectorizer(min_df=2).fit(texts)
    terms = counts.get_feature_names_out()
    presence = (counts.transform(texts) > 0).astype(np.int64)
    mi = mutual_info_classif(presence, y, discrete_features=True)
    best = np.sort(np.argsort(-mi, kind="stable")[:4])  # ties: the earlier term (documented)
    assert list(corpus.vocabulary) == list(terms[best])
    assert mi[best].min() >= np.delete(mi, best).max()  # the four highest
    reference = TfidfVectorizer(vocabulary=list(terms[best]))
    np.testing.assert_allclose(_matrix(corpus), reference.fit_transform(texts).T.toarray(),
                               rtol=0, atol=1e-12)


def test_select_needs_labels_and_vocabulary(tmp_path):
    source = _jsonl(tmp_path)
    with pytest.raises(ParameterError, match="labels"):
        ingest_old(source, tmp_path / "a.zarr", vocabulary=True, select="mutual-info")
    with pytest.raises(ParameterError, match="pass vocabulary=True"):
        ingest_old(source, tmp_path / "b.zarr", label_field="label", select="mutual-info",
                   vocabulary=False)
    with pytest.raises(DataError, match="no term is left"):
        ingest_old(source, tmp_path / "c.zarr", vocabulary=True, min_df=len(RECORDS))
    assert not list(tmp_path.glob("*.zarr*"))


# -- --like ----------------------------------------------------------------------------------
NEW_TEXTS = ["shuttle orbit bread", "unknown words only", "Jam jam CAFÉ"]


def _write_new(tmp_path: Path) -> str:
    path = tmp_path / "new.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in NEW_TEXTS))
    return str(path)


@pytest.mark.parametrize("vocabulary", [True, False])
def test_like_corpus_transforms_as_the_fitted_vectorizer(tmp_path, vocabulary):
    options = {"stop_words": "english", "sublinear_tf": True, "strip_accents": "unicode"}
    scheme = {"vocabulary": True} if vocabulary else {"vocabulary": False, "n_features": M}
    base = _ingest("jsonl", tmp_path, "base.zarr", **scheme, **options)
    new = ingest_old(_write_new(tmp_path), tmp_path / "new.zarr", like=base.path,
                 stop_words=None)  # feature options are taken from `like`
    texts = [TEXT[i] for i in IDS]
    if vocabulary:
        reference = TfidfVectorizer(**options).fit(texts)
        expected = reference.transform(NEW_TEXTS).T.toarray()
        assert list(new.vocabulary) == list(base.vocabulary)
    else:
        sub = options.pop("sublinear_tf")
        hv = HashingVectorizer(n_features=M, alternate_sign=False, norm=None, **options)
        tfidf = TfidfTransformer(sublinear_tf=sub).fit(hv.transform(texts))
        expected = tfidf.transform(hv.transform(NEW_TEXTS)).T.toarray()
    np.testing.assert_allclose(_matrix(new), expected, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(new.idf, base.idf)
    assert new.feature_scheme == base.feature_scheme and new.tfidf == base.tfidf
    assert new.attrs["ingest"]["like"]["fingerprint"] == base.fingerprint


def test_like_model(tmp_path):
    """A model fitted on a corpus carries its features: ``like=model`` reads them as the corpus."""
    base = _ingest("jsonl", tmp_path, "base.zarr", vocabulary=True)
    run(FitRequest(base.path, tmp_path / "model.zarr", n_components=1, max_iter=2))
    new = ingest_old(_write_new(tmp_path), tmp_path / "new.zarr", like=tmp_path / "model.zarr")
    again = ingest_old(_write_new(tmp_path), tmp_path / "again.zarr", like=base.path)
    np.testing.assert_array_equal(_matrix(new), _matrix(again))


def test_like_errors(tmp_path):
    source = _write_new(tmp_path)
    with pytest.raises(InputNotFoundError, match="nowhere.zarr"):
        ingest_old(source, tmp_path / "a.zarr", like=tmp_path / "nowhere.zarr")
    zarr.open_group(store=str(tmp_path / "other.zarr"), mode="w")
    with pytest.raises(CorpusFormatError, match="other.zarr"):
        ingest_old(source, tmp_path / "a.zarr", like=tmp_path / "other.zarr")
    assert not (tmp_path / "a.zarr").exists()


# -- bad input -----------------------------------------------------------------------------------
def _lines(tmp_path: Path, lines: list[bytes], name: str = "bad.jsonl") -> str:
    path = tmp_path / name
    path.write_bytes(b"\n".join(lines) + b"\n")
    return str(path)


GOOD = [json.dumps({"text": t}).encode() for t in ("first good text", "second good one")]
BAD_LINES = {
    "not JSON": (b'{"text": "unterminated', "not JSON"),
    "no text field": (b'{"body": "wrong field"}', "no 'text' field"),
    "null text": (b'{"text": null}', "null"),
    "text not a string": (b'{"text": 42}', "not a string"),
    "not an object": (b'["text", "in a list"]', "not an object"),
    "undecodable": (b'{"text": "caf\xe9"}', "not valid UTF-8"),
    "binary": (b'{"text": "nul \\u0000 inside"}', "binary"),
    "too long": (json.dumps({"text": "x" * 5000}).encode(), "exceeds the limit"),
    # a lone surrogate cannot be stored as UTF-8 (issue 31, item 5): one rule for every field
    "surrogate in the text": (b'{"text": "bad \\ud800 text"}', "lone surrogate"),
}


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_bad_jsonl_line_fails_naming_file_and_line(tmp_path, case):
    line, reason = BAD_LINES[case]
    source = _lines(tmp_path, [GOOD[0], b"", line, GOOD[1]])  # line 2 is blank
    with pytest.raises(DataError, match=reason) as info:
        ingest_old(source, tmp_path / "out.zarr", max_document_bytes=1000)
    message = str(info.value)
    assert f"{source}:3" in message and "on_error='skip'" in message  # keywords (issue 32)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]  # nothing left


@pytest.mark.parametrize("case", list(BAD_LINES))
def test_bad_jsonl_line_skipped_and_counted(tmp_path, case, caplog):
    line, reason = BAD_LINES[case]
    source = _lines(tmp_path, [GOOD[0], line, GOOD[1], line])
    with caplog.at_level(logging.WARNING, logger="sphdist"):
        corpus = ingest_old(source, tmp_path / "out.zarr", max_document_bytes=1000, on_error="skip",
                        n_features=M)
    meta = corpus.attrs["ingest"]
    assert meta["n_skipped"] == 2 and corpus.n_documents == 2
    assert f"{source}:2" in meta["skipped_examples"][0] and reason in meta["skipped_examples"][0]
    assert f"{source}:4" in meta["skipped_examples"][1]
    assert list(corpus.doc_ids) == [f"{source}:1", f"{source}:3"]
    expected, _ = _hashing_reference(["first good text", "second good one"])
    np.testing.assert_allclose(_matrix(corpus), expected, rtol=0, atol=1e-12)
    logging.getLogger("sphdist").propagate = True


@pytest.mark.parametrize("field", ["id", "label"])
def test_lone_surrogate_in_an_id_or_label_is_a_bad_document(tmp_path, field):
    """Refused at ingest (``info``/``export`` would crash on it later); skipped and counted."""
    bad = b'{"id": "x1", "label": "a", "text": "third text"}'.replace(
        b'"x1"' if field == "id" else b'"a"', b'"bad\\ud800one"')
    lines = [json.dumps({"id": f"d{k}", "label": "a", "text": t}).encode()
             for k, t in enumerate(["first good text", "second good one"])]
    source = _lines(tmp_path, [lines[0], bad, lines[1]])
    with pytest.raises(DataError, match=f"{source}:2: the '{field}' field") as info:
        ingest_old(source, tmp_path / "out.zarr", id_field="id", label_field="label")
    assert "lone surrogate" in str(info.value) and "on_error='skip'" in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl"]
    corpus = ingest_old(source, tmp_path / "out.zarr", id_field="id", label_field="label",
                        on_error="skip")
    assert list(corpus.doc_ids) == ["d0", "d1"] and corpus.label_names == ["a"]
    assert corpus.attrs["ingest"]["n_skipped"] == 1


def test_a_5000_digit_integer_in_any_field_is_a_bad_document(tmp_path):
    """Python's int-string limit (4,300 digits) raises a ValueError, not a JSONDecodeError."""
    source = _lines(tmp_path, [GOOD[0], b'{"text": "ok", "n": ' + b"7" * 5000 + b"}", GOOD[1]])
    with pytest.raises(DataError, match=f"{source}:2: a JSON number of more digits") as info:
        ingest_old(source, tmp_path / "out.zarr")
    assert "4300 digits" in str(info.value) and "set_int_max_str_digits" not in str(info.value)
    corpus = ingest_old(source, tmp_path / "out.zarr", on_error="skip")
    assert corpus.n_documents == 2 and corpus.attrs["ingest"]["n_skipped"] == 1


def test_cli_lone_surrogate_and_huge_integer_one_error_line(tmp_path):
    source = _lines(tmp_path, [b'{"id": "a", "text": "first good text"}',
                               b'{"id": "bad\\ud800id", "text": "t"}',
                               b'{"text": "ok", "n": ' + b"9" * 5000 + b"}"])
    runner = CliRunner()
    for args, where in ((["--id-field", "id"], 2), (["--on-error", "skip"], None)):
        result = runner.invoke(main, ["ingest", source, "-o", str(tmp_path / "o.zarr"),
                                      "--hashing", *args])
        assert "Traceback" not in result.output, result.output
        if where is None:  # both bad lines skipped, not crashed on
            assert result.exit_code == 0, result.output
            continue
        assert result.exit_code == 1
        errors = [ln for ln in result.output.splitlines() if ln.startswith("Error: ")]
        assert len(errors) == 1 and f"{source}:{where}:" in errors[0], result.output


def test_skip_everything_is_an_error(tmp_path):
    source = _lines(tmp_path, [b"nonsense", b"{}"])
    with pytest.raises(DataError, match="2 skipped"):
        ingest_old(source, tmp_path / "out.zarr", on_error="skip")


def _bad_tree(tmp_path: Path, content: bytes) -> str:
    (tmp_path / "tree" / "a").mkdir(parents=True)
    (tmp_path / "tree" / "a" / "good").write_bytes(b"fine text here")
    (tmp_path / "tree" / "a" / "bad").write_bytes(content)
    return str(tmp_path / "tree")


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b"caf\xe9 au lait", "not valid utf-8"), (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary")],
)
def test_bad_file_in_tree(tmp_path, content, reason):
    source = _bad_tree(tmp_path, content)
    with pytest.raises(DataError, match=reason) as info:
        ingest_old(source, tmp_path / "out.zarr", encoding="utf-8")
    assert str(Path(source) / "a" / "bad") in str(info.value)
    corpus = ingest_old(source, tmp_path / "out.zarr", encoding="utf-8", on_error="skip")
    assert list(corpus.doc_ids) == ["a/good"] and corpus.attrs["ingest"]["n_skipped"] == 1


def test_binary_member_in_tar(tmp_path):
    path = tmp_path / "a.tar"
    with tarfile.open(path, "w") as archive:
        for name, data in (("x/ok", b"plain words"), ("x/blob", b"\x00\x01\x02")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    with pytest.raises(DataError, match=r"a\.tar:x/blob: binary"):
        ingest_old(path, tmp_path / "out.zarr")


def test_fifty_megabyte_document(tmp_path):
    source = _bad_tree(tmp_path, b"word " * (10 * 2**20))  # 50 MiB
    with pytest.raises(DataError, match="52428800 bytes exceeds the limit") as info:
        ingest_old(source, tmp_path / "out.zarr")
    assert "a/bad" in str(info.value)
    corpus = ingest_old(source, tmp_path / "out.zarr", on_error="skip")
    assert corpus.n_documents == 1


def test_long_jsonl_line_is_skipped_without_reading_the_next(tmp_path):
    source = _lines(tmp_path, [GOOD[0], json.dumps({"text": "y" * 3000}).encode(), GOOD[1]])
    corpus = ingest_old(source, tmp_path / "out.zarr", max_document_bytes=100, on_error="skip")
    assert list(corpus.doc_ids) == [f"{source}:1", f"{source}:3"]


@pytest.mark.parametrize("partition_size", [1, None])
def test_empty_documents_are_kept_and_counted(tmp_path, partition_size):
    source = _lines(tmp_path, [b'{"text": ""}', GOOD[0], b'{"text": "   "}', b'{"text": "!"}'])
    corpus = ingest_old(source, tmp_path / "out.zarr", partition_size=partition_size)
    np.testing.assert_array_equal(corpus.empty, [True, False, True, True])
    assert corpus.n_empty == 3 and corpus.attrs["ingest"]["n_blank_text"] == 2


def test_empty_and_missing_sources(tmp_path):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    with pytest.raises(DataError, match="empty.jsonl"):
        ingest_old(tmp_path / "empty.jsonl", tmp_path / "out.zarr")
    (tmp_path / "blank.jsonl").write_bytes(b"\n\n")
    with pytest.raises(DataError, match="no documents"):
        ingest_old(tmp_path / "blank.jsonl", tmp_path / "out.zarr")
    with pytest.raises(InputNotFoundError, match="missing.jsonl"):
        ingest_old(tmp_path / "missing.jsonl", tmp_path / "out.zarr")
    with pytest.raises(InputNotFoundError, match="no file matches"):
        ingest_old(str(tmp_path / "none-*.jsonl"), tmp_path / "out.zarr")
    assert not (tmp_path / "out.zarr").exists()


def test_csv_and_parquet_columns(tmp_path):
    csv = _csv(tmp_path)
    with pytest.raises(DataError, match="no column 'body'"):
        ingest_old(csv, tmp_path / "out.zarr", text_field="body")
    path = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"text": ["fine words", None, "more words"]}), path)
    with pytest.raises(DataError, match=r"nulls\.parquet:row 2: the 'text' value is null"):
        ingest_old(path, tmp_path / "out.zarr")
    corpus = ingest_old(path, tmp_path / "out.zarr", on_error="skip")
    assert list(corpus.doc_ids) == [f"{path}:1", f"{path}:3"]


CSV_ROWS = {  # issue 44 item 2: a row whose field count is not the header's (row 2 of 4)
    "more fields": (b"a2,x,hello world, unquoted comma tail words here", "4 fields"),
    "fewer fields": (b"a2,x", "2 fields"),
}


@pytest.mark.parametrize("sep", [",", "\t"])
@pytest.mark.parametrize("case", list(CSV_ROWS))
def test_a_csv_row_with_more_or_fewer_fields_than_the_header_is_a_bad_document(
    tmp_path, case, sep
):
    """It was read as a shorter document ("tail words" dropped, or an empty text): pandas
    keeps the wanted columns of any row. Refused naming the file and row, or skipped and
    counted; the other rows (a separator inside quotes, a quoted line break) are intact."""
    row, reason = CSV_ROWS[case]
    name = "comma.csv" if sep == "," else "comma.tsv"
    lines = [b"id,label,text", b'a1,x,"hello world, quoted ok"', row, b"a3,y,third doc words",
             b'a4,y,"two\nlines"']
    source = _lines(tmp_path, [line.replace(b",", sep.encode()) if sep != "," else line
                               for line in lines], name)
    with pytest.raises(DataError, match=reason) as info:
        ingest_old(source, tmp_path / "out.zarr", id_field="id", label_field="label")
    message = str(info.value)
    assert f"{source}:row 2: " in message and "the header has 3" in message, message
    assert "To resolve this, " in message and "on_error='skip'" in message, message
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing left
    corpus = ingest_old(source, tmp_path / "out.zarr", id_field="id", label_field="label",
                        on_error="skip", n_features=M)
    meta = corpus.attrs["ingest"]
    assert meta["n_skipped"] == 1 and f"{source}:row 2: " in meta["skipped_examples"][0]
    assert list(corpus.doc_ids) == ["a1", "a3", "a4"]
    texts = ["hello world, quoted ok", "third doc words", "two\nlines"]
    expected, _ = _hashing_reference(texts)  # the same tokens with a tab for the comma
    np.testing.assert_allclose(_matrix(corpus), expected, rtol=0, atol=1e-12)


def test_cli_a_csv_row_with_an_unquoted_comma_is_refused_in_one_line(tmp_path):
    """The reproduction of issue 44 item 2, through the command line."""
    source = _lines(tmp_path, [b"id,label,text", b'a1,x,"hello world, quoted ok"',
                               b"a2,x,hello world, unquoted comma tail words here",
                               b"a3,y,third doc words"], "comma.csv")
    args = ["ingest", source, "-o", str(tmp_path / "comma.zarr"), "--min-df", "1", "--max-df",
            "1.0", "--id-field", "id"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if not line.startswith("pass 1/2")]
    assert len(lines) == 1 and lines[0].startswith(f"Error: {source}:row 2: 4 fields"), lines
    assert "--on-error skip" in lines[0] and "Traceback" not in result.output
    result = CliRunner().invoke(main, [*args, "--on-error", "skip", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["n_documents"] == 2 and summary["n_skipped"] == 1, summary


def test_unknown_format(tmp_path):
    (tmp_path / "a.txt").write_text("text")
    (tmp_path / "b.csv").write_text("text\nx\n")
    with pytest.raises(ParameterError, match=r"pass format='dir\|tar\|jsonl"):
        ingest_old([tmp_path / "a.txt", tmp_path / "b.csv"], tmp_path / "out.zarr")
    with pytest.raises(ParameterError, match="categories"):
        ingest_old(tmp_path / "b.csv", tmp_path / "out.zarr", categories=["x"])


# -- parallel: dask's scheduler of the calling context -------------------------------------------
def _stored(corpus) -> tuple:
    """What must be the same, bit for bit, whatever ran the tasks: ids, labels, chunk digests."""
    return (list(corpus.doc_ids), corpus.labels.tolist(), corpus.attrs["chunk_sha256"],
            corpus.attrs["sha256"])


def test_threads_same_as_one_thread_bit_for_bit(tmp_path):
    """Every task goes through dask's scheduler; 3 threads write what 1 thread writes."""
    import dask
    from dask.callbacks import Callback

    options = dict(vocabulary=True, partition_size=2, chunk_size=1)
    with dask.config.set(scheduler="synchronous"):
        serial = _ingest("jsonl", tmp_path, "a.zarr", **options)
    keys: list = []
    with dask.config.set(scheduler="threads", num_workers=3), \
            Callback(pretask=lambda key, dsk, state: keys.append(str(key))):
        threaded = _ingest("jsonl", tmp_path, "b.zarr", **options)
    assert serial.attrs["ingest"]["workers"] == 1
    assert threaded.attrs["ingest"]["workers"] == 3
    n_partitions = threaded.attrs["ingest"]["n_partitions"]
    assert n_partitions == -(-len(RECORDS) // 2) > 1
    assert sum(k.startswith("count_partition") for k in keys) == n_partitions
    assert sum(k.startswith("weight_chunk") for k in keys) == threaded.n_chunks == len(RECORDS)
    assert _stored(threaded) == _stored(serial)
    np.testing.assert_array_equal(_matrix(threaded), _matrix(serial))


@pytest.mark.parametrize(("kind", "threshold", "options"), [
    ("jsonl", "PROCESSES_FROM_DOCUMENTS", dict(vocabulary=True, partition_size=2, chunk_size=1)),
    ("jsonl", "PROCESSES_FROM_DOCUMENTS", dict(n_features=M, partition_size=4, chunk_size=3)),
    ("jsonl-gz-glob", "PROCESSES_FROM_BYTES", dict(vocabulary=True, chunk_size=2)),
    ("csv", "PROCESSES_FROM_BYTES", dict(n_features=M, chunk_size=4)),
])
def test_a_large_source_runs_on_processes_and_writes_the_same_bits(tmp_path, monkeypatch, kind,
                                                                  threshold, options):
    """The ingest's own pool: threads below a threshold, processes above it (issue 29.6).

    Both thresholds (documents, when the listing counts them; bytes of files, when only
    reading does: gzip JSON Lines, CSV) are set to this source's size, so that the pool of
    processes (started from a fork server) runs it; the corpus is the one dask's synchronous
    scheduler writes, bit for bit, and one the ingest's own threads write.
    """
    import os

    import dask

    import sphdist.text.ingest as ingest_module

    with dask.config.set(scheduler="synchronous"):
        serial = _ingest(kind, tmp_path, "a.zarr", **options)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # as CI's 2 cores, whatever this machine
    small = _ingest(kind, tmp_path, "b.zarr", **options)  # the defaults: 2 cores, threads
    assert small.attrs["ingest"]["scheduler"] == "threads"
    assert small.attrs["ingest"]["task_processes"] == 1  # this process's threads
    size = len(RECORDS) if threshold == "PROCESSES_FROM_DOCUMENTS" else 1
    monkeypatch.setattr(ingest_module, threshold, size)
    monkeypatch.setattr(ingest_module, "PROCESSES_FROM_CPUS", 2)  # as on a larger machine
    parallel = _ingest(kind, tmp_path, "c.zarr", **options)
    assert parallel.attrs["ingest"]["scheduler"] == "processes"
    assert parallel.attrs["ingest"]["workers"] == 2
    assert parallel.attrs["ingest"]["task_processes"] >= 1
    for corpus in (small, parallel):
        assert _stored(corpus) == _stored(serial)
        np.testing.assert_array_equal(_matrix(corpus), _matrix(serial))
        assert list(corpus.doc_ids) == list(serial.doc_ids)


def test_every_worker_process_of_the_pool_runs_tasks():
    """Tasks go to the pool one by one (not batched as dask's multiprocessing scheduler does,
    which gave a window of tasks to one process): both processes of a 2-process pool run
    some, and none runs in the driver."""
    import os
    import time
    from concurrent.futures import ProcessPoolExecutor

    import sphdist.text.ingest as ingest_module

    with ProcessPoolExecutor(2, mp_context=ingest_module._fork_server()) as pool:
        run = ingest_module._in_order(4, executor=pool)
        assert list(run(time.sleep, [(0.5,)] * 8)) == [None] * 8
    assert len(run.pids) == 2
    assert os.getpid() not in run.pids


def test_the_pool_is_fed_while_the_driver_reduces():
    """The next task is submitted before the driver is handed a result, so the pool works while
    the driver reduces it; never more than ``window`` tasks beyond the results taken."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import sphdist.text.ingest as ingest_module

    started = [threading.Event() for _ in range(8)]

    def task(i: int) -> int:
        started[i].set()
        return i

    results = []
    with ThreadPoolExecutor(2) as pool:
        for result in ingest_module._in_order(2, executor=pool)(task, [(i,) for i in range(8)]):
            results.append(result)
            if result + 2 < 8:  # submitted before this result was handed over: it runs now
                assert started[result + 2].wait(30)
            if result + 3 < 8:  # submitted once the next result is taken, not before
                assert not started[result + 3].is_set()
    assert results == list(range(8))


def test_a_failed_task_of_the_pool_is_raised_in_order_once_none_runs():
    """The own pool's sliding window: the first failure in task order is raised after
    ``settle`` (the running tasks end, the queued ones are cancelled)."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    import sphdist.text.ingest as ingest_module

    ended: list[int] = []
    lock = threading.Lock()

    def task(i: int) -> int:
        if i in (1, 3):
            raise ValueError(f"task {i} failed")
        if i == 2:
            time.sleep(0.3)  # still running when task 1 fails
        with lock:
            ended.append(i)
        return i

    pool = ThreadPoolExecutor(2)
    run = ingest_module._in_order(
        2, lambda: pool.shutdown(wait=True, cancel_futures=True), pool)
    results = []
    with pytest.raises(ValueError, match="task 1 failed"):
        for result in run(task, [(i,) for i in range(8)]):
            results.append(result)
    assert results == [0]
    assert sorted(ended) == [0, 2]  # task 2 ran to its end; none was started after the failure


def test_gzip_files_in_a_folder_or_archive_are_read_as_text(tmp_path):
    """``.gz`` documents are decompressed, as JSON Lines ``.gz`` files are (issue 33.11)."""
    tree = Path(_tree(tmp_path))
    for doc_id in ("d01", "d08"):  # two documents stored compressed, under their .gz name
        path = tree / LABEL[doc_id] / doc_id
        path.with_name(doc_id + ".gz").write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
    with tarfile.open(tmp_path / "docs.tar", "w") as archive:
        archive.add(tree / "space", arcname="space")
        archive.add(tree / "food", arcname="food")
    expected, _ = _hashing_reference([TEXT[i] for i in sorted(IDS, key=lambda i: (LABEL[i], i))])
    for source, out in ((tree, "dir.zarr"), (tmp_path / "docs.tar", "tar.zarr")):
        corpus = ingest_old(str(source), tmp_path / out, encoding="utf-8", n_features=M)
        assert {"space/d01.gz", "food/d08.gz"} <= set(corpus.doc_ids)
        np.testing.assert_allclose(_matrix(corpus), expected, rtol=0, atol=1e-12)
    (tree / "food" / "broken.gz").write_bytes(b"\x1f\x8b\x08\x00 not gzip")
    with pytest.raises(DataError, match="broken.gz: named .gz but not readable gzip"):
        ingest_old(str(tree), tmp_path / "bad.zarr", encoding="utf-8", n_features=M)


def test_an_unguarded_script_is_told_how_to_run_on_processes(tmp_path):
    """Pool workers import the main module again: a script without a main guard would run
    its ingest again in each; the driver says so in one error, with both remedies."""
    import subprocess
    import sys

    source = _jsonl(tmp_path)
    (tmp_path / "run.py").write_text(
        "import sphdist.text.ingest as m\n"
        "from sphdist.jobs import run\n"
        "from sphdist.jobs.ingest import IngestRequest\n"
        "m.PROCESSES_FROM_DOCUMENTS = 1  # as a large source\n"
        "m.PROCESSES_FROM_CPUS = 2  # on a machine of many cores\n"
        f"run(IngestRequest(m.SourceSpec({source!r}, id_field='id'), 'c.zarr',\n"
        "                  text=m.TextSpec(min_df=1, max_df=1.0)))\n")
    proc = subprocess.run([sys.executable, "run.py"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("sphdist.errors.WorkersLostError"), proc.stderr
    assert 'if __name__ == "__main__":' in last and 'scheduler="threads"' in last
    assert not list(tmp_path.glob("c.zarr*")) or sorted(
        p.name for p in tmp_path.glob("c.zarr*")) == ["c.zarr.lock"]


def test_tasks_run_a_window_at_a_time_and_come_back_in_order():
    """At most ``window`` tasks are started before their results are taken, in task order."""
    import threading

    import sphdist.text.ingest as ingest_module

    started: list[int] = []
    lock = threading.Lock()

    def task(i: int) -> int:
        with lock:
            started.append(i)
        return i

    results = []
    for result in ingest_module._in_order(3)(task, [(i,) for i in range(8)]):
        results.append(result)
        assert len(started) <= -(-len(results) // 3) * 3
    assert results == list(range(8))
    assert sorted(started) == list(range(8))


def test_a_failed_task_is_raised_in_task_order_once_its_window_has_ended():
    """No task still runs (writing next to the output) when the driver sees the error."""
    import threading
    import time

    import dask

    import sphdist.text.ingest as ingest_module

    ended: list[int] = []
    lock = threading.Lock()

    def task(i: int) -> int:
        if i in (1, 2):
            raise ValueError(f"task {i} failed")
        if i == 3:
            time.sleep(0.2)  # still running when task 1 fails
        with lock:
            ended.append(i)
        return i

    results = []
    with dask.config.set(scheduler="threads", num_workers=4), \
            pytest.raises(ValueError, match="task 1 failed"):
        for result in ingest_module._in_order(4)(task, [(i,) for i in range(8)]):
            results.append(result)
    assert results == [0]
    assert sorted(ended) == [0, 3]  # task 3 had ended; tasks 4-7 (next window) never started


@pytest.mark.slow
@pytest.mark.cluster
def test_local_cluster_of_processes_same_as_in_process(tmp_path):
    """``--n-workers 2``: a LocalCluster of processes (jobs.cluster.connect) writes the same."""
    import dask

    from sphdist.jobs.cluster import connect

    options = dict(vocabulary=True, partition_size=2, chunk_size=1)
    with dask.config.set(scheduler="synchronous"):
        serial = _ingest("jsonl", tmp_path, "a.zarr", **options)
    with connect(n_workers=2, memory_limit="1GiB"):
        parallel = _ingest("jsonl", tmp_path, "b.zarr", **options)
    assert parallel.attrs["ingest"]["workers"] == 2
    assert _stored(parallel) == _stored(serial)
    np.testing.assert_array_equal(_matrix(parallel), _matrix(serial))


# -- command line --------------------------------------------------------------------------------
def test_cli_ingest_json_summary(tmp_path):
    source = _jsonl(tmp_path)
    result = CliRunner().invoke(main, [
        "ingest", source, "-o", str(tmp_path / "out.zarr"), "--text-field", "text",
        "--label-field", "label", "--id-field", "id", "--vocabulary", "--min-df", "2",
        "--max-df", "0.9", "--stop-words", "english", "--n-workers", "1", "--json",
    ])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.splitlines()[-1])
    assert summary["n_documents"] == len(RECORDS) and summary["n_skipped"] == 0
    reference = TfidfVectorizer(min_df=2, max_df=0.9, stop_words="english")
    reference.fit([TEXT[i] for i in IDS])
    assert summary["n_features"] == len(reference.vocabulary_)


def test_cli_bad_line(tmp_path):
    source = _lines(tmp_path, [GOOD[0], b"oops"])
    runner = CliRunner()
    result = runner.invoke(main, ["ingest", source, "-o", str(tmp_path / "out.zarr")])
    assert result.exit_code == 1
    assert f"Error: {source}:2: not JSON" in result.output
    assert "Traceback" not in result.output
    result = runner.invoke(main, ["ingest", source, "-o", str(tmp_path / "out.zarr"),
                                  "--on-error", "skip", "--json", "--hashing"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.splitlines()[-1])["n_skipped"] == 1
    assert "skipped 1 document" in result.stderr


def test_cli_like_refuses_feature_options(tmp_path):
    base = _ingest("jsonl", tmp_path, "base.zarr", n_features=M)
    result = CliRunner().invoke(main, ["ingest", _write_new(tmp_path), "-o",
                                       str(tmp_path / "new.zarr"), "--like", str(base.path),
                                       "--stop-words", "english", "--n-features", "64"])
    assert result.exit_code == 2
    assert "--n-features, --stop-words" in result.output
    assert not (tmp_path / "new.zarr").exists()


def test_active_distributed_client_runs_the_partitions(tmp_path):
    from distributed import Client, LocalCluster

    serial = _ingest("jsonl", tmp_path, "a.zarr", partition_size=2, chunk_size=2, n_features=M)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster):
        parallel = ingest_old(_jsonl(tmp_path), tmp_path / "b.zarr", partition_size=2, chunk_size=2,
                          n_features=M, encoding="utf-8", **FIELDS)
    assert parallel.attrs["ingest"]["workers"] == 2
    assert list(parallel.doc_ids) == list(serial.doc_ids)
    assert parallel.chunks == serial.chunks
    assert _stored(parallel) == _stored(serial)
    np.testing.assert_array_equal(_matrix(parallel), _matrix(serial))


@pytest.mark.parametrize(
    "kwargs",
    [{"stop_words": "french"}, {"strip_accents": "latin"}, {"vocabulary": True, "min_df": -1},
     {"vocabulary": True, "max_df": 1.5}, {"vocabulary": True, "max_features": 0},
     {"min_df": 2}, {"vocabulary": True, "select": "chi2"},
     {"vocabulary": True, "min_df": 5, "max_df": 2}],
)
def test_bad_text_options(tmp_path, kwargs):
    with pytest.raises(ParameterError):
        ingest_old(_jsonl(tmp_path), tmp_path / "out.zarr", **kwargs)
    assert not (tmp_path / "out.zarr").exists()


def _linked_tree(tmp_path: Path) -> tuple[Path, Path]:
    """A tree with links out of it (file, folder), a link loop and a link inside it."""
    outside = tmp_path / "outside"
    (outside / "secret").mkdir(parents=True)
    (outside / "passwd").write_bytes(b"outside words never ingested")
    (outside / "secret" / "key").write_bytes(b"outside folder words")
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "good").write_bytes(b"shuttle orbit launch")
    (tree / "a" / "link_in").symlink_to(tree / "a" / "good")  # inside -> inside: read
    (tree / "a" / "link_out").symlink_to(outside / "passwd")  # file outside: refused
    (tree / "a" / "loop").symlink_to(tree / "a" / "loop")  # loop: unreadable
    (tree / "b").symlink_to(outside / "secret", target_is_directory=True)  # not followed
    return tree, outside


def test_symlinks_never_read_outside_the_source_folder(tmp_path, caplog):
    tree, outside = _linked_tree(tmp_path)
    with pytest.raises(DataError, match="outside the source folder") as info:
        ingest_old(tree, tmp_path / "out.zarr")
    assert str(tree / "a" / "link_out") in str(info.value)
    assert not (tmp_path / "out.zarr").exists()
    with caplog.at_level(logging.WARNING, logger="sphdist"):
        corpus = ingest_old(tree, tmp_path / "out.zarr", on_error="skip",
                        n_features=M)
    # the link inside the tree is a document (its own id, same text); the link out and the
    # loop are skipped and counted; the linked folder is not followed, and named
    assert list(corpus.doc_ids) == ["a/good", "a/link_in"]
    summary = corpus.attrs["ingest"]
    assert summary["n_skipped"] == 2
    assert any("link_out" in e and "outside" in e for e in summary["skipped_examples"])
    assert any("loop" in e for e in summary["skipped_examples"])
    assert str(tree / "b") in caplog.text and "not followed" in caplog.text
    X = _matrix(corpus)
    np.testing.assert_array_equal(X[:, 0], X[:, 1])
    reference, _ = _hashing_reference(["shuttle orbit launch"] * 2)
    np.testing.assert_allclose(X, reference, atol=1e-12)


def test_link_swapped_in_after_listing_is_not_read(tmp_path):
    from sphdist.text.sources import DirPartition, Reading

    tree, outside = _linked_tree(tmp_path)
    part = DirPartition(str(tree), ("a/good",))
    (tree / "a" / "good").unlink()
    (tree / "a" / "good").symlink_to(outside / "passwd")
    (record,) = list(part.records(Reading()))
    assert "outside the source folder" in record.message()


# -- issue 15: names, byte-order marks, damaged streams, options that do not compile -------------
@pytest.mark.parametrize("kwargs, needle", [
    ({"token_pattern": "("}, "not a valid regular expression"),
    ({"token_pattern": "(a)(b)"}, "2 capturing groups"),
    ({"n_features": 2**31 - 1}, "n_features"),
    ({"chunk_size": 2**31}, "chunk_size"),
    ({"partition_size": 10**20}, "partition_size"),
])
def test_options_beyond_what_runs_are_refused_before_reading(tmp_path, kwargs, needle):
    with pytest.raises(ParameterError, match=needle):
        ingest_old(_jsonl(tmp_path), tmp_path / "out.zarr", **kwargs)
    assert not (tmp_path / "out.zarr").exists()


def test_the_suggested_non_capturing_pattern_tokenises(tmp_path):
    import ast

    with pytest.raises(ParameterError, match="token_pattern") as info:
        ingest_old(_jsonl(tmp_path), tmp_path / "out.zarr",
               token_pattern=r"(\w)(\w+)")
    # the keyword argument to pass, as Python reads it
    suggested = ast.literal_eval(str(info.value).split("e.g. token_pattern=")[1].rstrip("."))
    assert suggested == r"(?:\w)(?:\w+)"
    corpus = ingest_old(_jsonl(tmp_path), tmp_path / "out.zarr",
                    token_pattern=suggested)
    assert corpus.n_documents > 0


def test_bom_only_at_the_start_of_a_jsonl_file(tmp_path):
    lines = [json.dumps({"text": f"alpha beta {i}"}).encode() for i in range(3)]
    path = Path(_lines(tmp_path, [b"\xef\xbb\xbf" + lines[0], *lines[1:]]))
    assert ingest_old(path, tmp_path / "a.zarr").n_documents == 3
    gz = tmp_path / "bom.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    assert ingest_old(gz, tmp_path / "b.zarr").n_documents == 3
    # a byte-order mark inside the file is not one: that line is not JSON
    path.write_bytes(b"\n".join([lines[0], b"\xef\xbb\xbf" + lines[1]]) + b"\n")
    with pytest.raises(DataError, match=r"bad.jsonl:2: not JSON"):
        ingest_old(path, tmp_path / "c.zarr")


@pytest.mark.parametrize("name", ["docs.jsonl.gz", "docs.csv.gz"])
def test_truncated_gzip_names_the_file_and_how_far_it_was_read(tmp_path, name):
    rows = [{"text": f"word{i} alpha beta gamma delta"} for i in range(3000)]
    if name.endswith(".csv.gz"):
        raw = ("text\n" + "".join(r["text"] + "\n" for r in rows)).encode()
    else:
        raw = "".join(json.dumps(r) + "\n" for r in rows).encode()
    data = gzip.compress(raw)
    path = tmp_path / name
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match=rf"{name}: the compressed data end or break after "
                                        rf"(line|row) \d+ .*`gzip -t {path}`"):
        ingest_old(path, tmp_path / "out.zarr")
    assert not (tmp_path / "out.zarr").exists()


def test_not_utf8_names_in_a_tar_archive(tmp_path):
    path = tmp_path / "docs.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT, encoding="latin-1") as archive:
        for name, text in ((b"a/ok.txt", b"alpha beta"), (b"a/caf\xe9.txt", b"gamma delta")):
            info = tarfile.TarInfo(name.decode("latin-1"))
            info.size = len(text)
            archive.addfile(info, io.BytesIO(text))
    with pytest.raises(DataError, match=r"a/caf\\xe9.txt: the member name is not valid UTF-8"):
        ingest_old(path, tmp_path / "out.zarr")
    corpus = ingest_old(path, tmp_path / "out.zarr", on_error="skip")
    assert list(corpus.doc_ids) == ["a/ok.txt"]
    assert corpus.attrs["ingest"]["n_skipped"] == 1


def test_hashed_feature_space_beyond_this_machines_memory(tmp_path):
    import psutil

    from sphdist.text.tfidf import MAX_FEATURES

    if 32 * MAX_FEATURES <= psutil.virtual_memory().total:
        pytest.skip("this machine holds 32 bytes per feature of the largest hashed space")
    with pytest.raises(ParameterError, match=rf"n_features={MAX_FEATURES} needs about 64.0 GiB "
                                             r".* n_features=1048576"):
        ingest_old(_jsonl(tmp_path), tmp_path / "out.zarr", n_features=MAX_FEATURES)
    assert not (tmp_path / "out.zarr").exists()


def test_equal_id_digests_are_confirmed_on_the_ids_themselves(tmp_path):
    """Issue 24 item 6: a digest collision is never taken for a repeated id."""
    from sphdist.text._passes import Counts, repeated_ids
    from sphdist.text.sources import JsonlPartition, Reading

    path = tmp_path / "docs.jsonl"
    ids = ["a", "b", "c", "b", "d"]
    path.write_text("".join(json.dumps({"id": i, "text": "x y"}) + "\n" for i in ids))
    start = sum(len(line) + 1 for line in path.read_bytes().split(b"\n")[:3])  # of line 4
    parts = [JsonlPartition(str(path), 0, 1, 3), JsonlPartition(str(path), start, 4, None)]
    reading = Reading(id_field="id")
    collide = Counts(id_hashes=np.zeros(5, dtype=np.uint64), partition_docs=[3, 2])
    found = repeated_ids(parts, reading, collide)  # every digest equal: only 'b' repeats
    assert [(p, k) for p, k, _ in found] == [(1, 0)]
    assert found[0][2].message() == f"{path}:4: duplicate id 'b', the id of {path}:2"


# -- the id field by default (issue 33, item 4) --------------------------------------------------
def test_synth_ids_are_the_document_ids_without_id_field(tmp_path):
    """``sphdist synth --format jsonl`` writes an ``id``; ingest uses it with no --id-field."""
    from sphdist.jobs import run
    from sphdist.jobs.synth import SynthRequest

    source = tmp_path / "s.jsonl"
    run(SynthRequest(output=source, n_docs=30, n_topics=3, seed=0))
    written = [json.loads(line)["id"] for line in source.read_text().splitlines()]
    corpus = ingest_old(str(source), tmp_path / "c.zarr", label_field="label", n_features=M)
    assert list(corpus.doc_ids) == written and len(set(written)) == 30
    assert corpus.attrs["ingest"]["fields"]["id"] == "id"


@pytest.mark.parametrize("case", ["some without", "repeated", "null", "surrogate"])
def test_default_ids_fall_back_to_path_and_line_for_every_document(tmp_path, case, caplog):
    """Not every record has a usable, unique ``id``: every id is path:line (nothing refused)."""
    ids = {"some without": ["a", "b", None, "d"], "repeated": ["a", "b", "a", "d"],
           "null": ["a", "b", "null", "d"], "surrogate": ["a", "b", "\\ud800", "d"]}[case]
    lines = []
    for k, doc_id in enumerate(ids):
        text = json.dumps({"text": f"text number {k}"})[1:-1]
        lines.append(("{" + text + "}" if doc_id is None else
                      "{" + text + ', "id": ' + (doc_id if doc_id == "null" else
                                                 f'"{doc_id}"') + "}").encode())
    source = _lines(tmp_path, lines)
    with caplog.at_level(logging.INFO, logger="sphdist"):
        corpus = ingest_old(source, tmp_path / "c.zarr", n_features=M)
    assert list(corpus.doc_ids) == [f"{source}:{k}" for k in range(1, 5)]
    assert corpus.attrs["ingest"]["fields"]["id"] is None
    assert "path:line" in caplog.text
    logging.getLogger("sphdist").propagate = True


def test_a_json_decoding_error_names_its_column_once(tmp_path):
    # json's messages for some errors end in "at" ("Invalid control character at"), to be
    # followed by a position: the reason must not read "... at at column 12"
    line = b'{"text": "a\tb"}'  # a raw tab inside a string: a control character
    source = _lines(tmp_path, [GOOD[0], line])
    with pytest.raises(DataError) as info:
        ingest_old(source, tmp_path / "out.zarr")
    message = str(info.value)
    column = line.index(b"\t") + 1
    assert f"not JSON (Invalid control character at column {column})" in message, message
    assert " at at " not in message
