"""Header removal never empties documents silently (issue 14 §4), with and without ``--like``.

A corpus ingested from news posts with headers, footers and quotes removed records that
cleaning; ``ingest --like`` inherits it. One-line JSON Lines documents have no blank line, so
scikit-learn's ``strip_newsgroup_header`` (which drops everything before the first blank line)
leaves nothing of them: the reference below is that function itself.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.datasets._twenty_newsgroups import strip_newsgroup_header

from sphdist.cli import main
from sphdist.errors import DataError
from sphdist.jobs import run
from sphdist.jobs.ingest import IngestRequest
from sphdist.text.ingest import TextSpec

ALL_REMOVED = ("headers", "footers", "quotes")
NEWS = {  # label/id -> a news post with headers
    f"{label}/{i}": f"From: a{i}@b.c\nSubject: {label} {i}\n\n{body} number{i}\n"
    for label, body in (("space", "rocket orbit launch moon shuttle"),
                        ("sport", "pitcher baseball inning league season"))
    for i in range(6)
}
ONE_LINE = ["the rocket reached orbit", "a pitcher threw the baseball", "orbit launch",
            "baseball league season", "moon shuttle rocket"]
WITH_HEADERS = ["Subject: a\n\nrocket orbit launch", "Subject: b\n\nbaseball pitcher"]


@pytest.fixture
def stripped_corpus(tmp_path) -> Path:
    for doc_id, text in NEWS.items():
        path = tmp_path / "news" / doc_id
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    corpus = run(IngestRequest(tmp_path / "news", tmp_path / "base.zarr",
                               text=TextSpec(remove=ALL_REMOVED, min_df=1, max_df=1.0)))
    assert corpus.tfidf["remove"] == list(ALL_REMOVED)
    return corpus.path


def _jsonl(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


def test_reference_strips_one_line_documents_to_nothing():
    assert all(strip_newsgroup_header(t) == "" for t in ONE_LINE)


def test_like_that_empties_every_document_fails(stripped_corpus, tmp_path):
    new = _jsonl(tmp_path / "new.jsonl", ONE_LINE)
    with pytest.raises(DataError) as info:
        run(IngestRequest(new, tmp_path / "new.zarr", like=stripped_corpus))
    message = str(info.value)
    assert "all 5 documents" in message and "remove_headers=True" in message
    assert str(stripped_corpus) in message and "remove_headers=False" in message
    assert "--" not in message  # the Python API's words: no flag (issue 32)
    assert not (tmp_path / "new.zarr").exists()


def test_cli_like_that_empties_every_document_fails(stripped_corpus, tmp_path):
    new = _jsonl(tmp_path / "new.jsonl", ONE_LINE)
    out = tmp_path / "new.zarr"
    result = CliRunner().invoke(main, ["ingest", str(new), "--like", str(stripped_corpus),
                                       "-o", str(out)])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if not line.startswith("pass 1/2")]
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output and not out.exists()
    # the remedy it prints is a command that works
    remedy = lines[0].split("`")[1]
    assert remedy.startswith("sphdist ingest ") and "--keep-headers" in remedy
    args = shlex.split(remedy)[1:]  # after "sphdist"
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "0 empty" in result.stdout


def test_like_that_empties_some_documents_warns_with_the_count(stripped_corpus, tmp_path,
                                                               caplog):
    new = _jsonl(tmp_path / "new.jsonl", ONE_LINE[:3] + WITH_HEADERS)
    with caplog.at_level("WARNING", logger="sphdist"):
        corpus = run(IngestRequest(new, tmp_path / "new.zarr", like=stripped_corpus))
    expected = [strip_newsgroup_header(t) == "" for t in ONE_LINE[:3] + WITH_HEADERS]
    np.testing.assert_array_equal(corpus.empty, expected)
    assert corpus.attrs["ingest"]["n_emptied_by_remove"] == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("3 of 5 documents" in w and "remove_headers=False" in w
               for w in warnings), warnings


def test_removal_that_empties_some_documents_warns_without_like(tmp_path, caplog):
    new = _jsonl(tmp_path / "new.jsonl", ONE_LINE[:2] + WITH_HEADERS)
    with caplog.at_level("WARNING", logger="sphdist"):
        corpus = run(IngestRequest(new, tmp_path / "new.zarr",
                                   text=TextSpec(remove=ALL_REMOVED, vocabulary=False)))
    assert corpus.n_empty == 2 and corpus.attrs["ingest"]["n_emptied_by_remove"] == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("2 of 4 documents" in w for w in warnings), warnings


def test_like_cleaning_overridden_in_the_api(stripped_corpus, tmp_path):
    new = _jsonl(tmp_path / "new.jsonl", ONE_LINE)
    corpus = run(IngestRequest(new, tmp_path / "new.zarr", like=stripped_corpus,
                               text=TextSpec(remove=())))
    assert corpus.n_empty == 0 and corpus.tfidf["remove"] == []
    base = run(IngestRequest(tmp_path / "news", tmp_path / "again.zarr", like=stripped_corpus))
    assert base.feature_scheme == corpus.feature_scheme  # the features are still the model's
    np.testing.assert_array_equal(base.vocabulary, corpus.vocabulary)
    np.testing.assert_array_equal(base.idf, corpus.idf)


def test_cli_like_cleaning_overridden_option_by_option(stripped_corpus, tmp_path):
    new = _jsonl(tmp_path / "new.jsonl", ONE_LINE)
    result = CliRunner().invoke(main, ["ingest", str(new), "--like", str(stripped_corpus),
                                       "--keep-headers", "-o", str(tmp_path / "a.zarr")])
    assert result.exit_code == 0, result.output
    assert "0 empty" in result.stdout
    # restating the inherited cleaning is allowed too; a feature option is not
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / "news"), "--like",
                                       str(stripped_corpus), "--remove-headers",
                                       "-o", str(tmp_path / "b.zarr")])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["ingest", str(new), "--like", str(stripped_corpus),
                                       "--stop-words", "none", "-o", str(tmp_path / "c.zarr")])
    assert result.exit_code == 2 and "--stop-words" in result.output


def test_model_embeds_documents_ingested_with_its_cleaning_overridden(stripped_corpus,
                                                                      tmp_path):
    from sphdist.jobs import run
    from sphdist.jobs.fit import FitRequest
    from sphdist.jobs.transform import TransformRequest

    model = run(FitRequest(stripped_corpus, tmp_path / "m.zarr", n_components=2, max_iter=3))
    new = run(IngestRequest(_jsonl(tmp_path / "new.jsonl", ONE_LINE), tmp_path / "new.zarr",
                            like=model.path, text=TextSpec(remove=())))
    embedding = run(TransformRequest(model.path, new.path, tmp_path / "e.zarr"))
    assert embedding.V.shape[1] == len(ONE_LINE)
    assert not embedding.degenerate.all()  # the kept text shares features with the model
