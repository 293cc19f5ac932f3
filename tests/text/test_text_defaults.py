"""The ingestion defaults for text (issue 14 §1), against scikit-learn's own vectorizers.

Default: ``TfidfVectorizer(min_df=5, max_df=0.5, stop_words="english", sublinear_tf=True)``
(scikit-learn's text-clustering recipe plus sublinear tf); hashing stays available, explicitly.
A collection too small for those bounds fails with an error whose printed command works.
"""

from __future__ import annotations

import shlex

import click
import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner
from sklearn.feature_extraction.text import (
    HashingVectorizer,
    TfidfTransformer,
    TfidfVectorizer,
)

from sphdist.cli import main
from sphdist.errors import DataError, ParameterError
from sphdist.jobs import run
from sphdist.jobs.ingest import IngestRequest
from sphdist.text.ingest import TextSpec
from tests._textcorpus import write_text_tree


@pytest.fixture
def tree(tmp_path):
    texts = write_text_tree(tmp_path / "tree", n_per_label=10)  # 30 documents, 3 labels
    return tmp_path / "tree", texts


def _dense(corpus) -> np.ndarray:
    X = corpus.to_dask().compute(scheduler="synchronous")
    return X.toarray() if sp.issparse(X) else np.asarray(X)


def test_default_is_sklearn_text_recipe_with_sublinear_tf(tree, tmp_path):
    root, texts = tree
    corpus = run(IngestRequest(root, tmp_path / "c.zarr"))
    ids = sorted(texts)
    reference = TfidfVectorizer(min_df=5, max_df=0.5, stop_words="english",
                                sublinear_tf=True)
    expected = reference.fit_transform([texts[i] for i in ids]).T.toarray()
    assert corpus.feature_scheme["type"] == "vocabulary"
    assert (corpus.feature_scheme["min_df"], corpus.feature_scheme["max_df"]) == (5, 0.5)
    assert corpus.feature_scheme["stop_words"] == "english" and corpus.tfidf["sublinear_tf"]
    assert list(corpus.doc_ids) == ids
    np.testing.assert_array_equal(corpus.vocabulary, reference.get_feature_names_out())
    np.testing.assert_allclose(_dense(corpus), expected, rtol=0, atol=1e-12)
    # the stop words of the tree ("the", "of", "and", ...) are not features
    assert not {"the", "of", "and"} & set(corpus.vocabulary)


@pytest.mark.parametrize("n_features", [None, 64])
def test_hashing_is_an_explicit_option(tree, tmp_path, n_features):
    root, texts = tree
    kwargs = {} if n_features is None else {"n_features": n_features}
    corpus = run(IngestRequest(root, tmp_path / "c.zarr",
                               text=TextSpec(vocabulary=False, **kwargs)))
    m = n_features or 2**18
    counts = HashingVectorizer(n_features=m, alternate_sign=False, norm=None,
                               stop_words="english").transform([texts[i] for i in
                                                                sorted(texts)])
    expected = TfidfTransformer(sublinear_tf=True).fit_transform(counts).T.toarray()
    assert corpus.feature_scheme["type"] == "hashing" and corpus.n_features == m
    np.testing.assert_allclose(_dense(corpus), expected, rtol=0, atol=1e-12)


def test_cli_hashing_and_the_old_defaults(tree, tmp_path):
    root, texts = tree
    out = tmp_path / "h.zarr"
    result = CliRunner().invoke(main, [
        "ingest", str(root), "-o", str(out), "--hashing", "--n-features", "64",
        "--stop-words", "none", "--no-sublinear-tf", "--json"])
    assert result.exit_code == 0, result.output
    from sphdist.io.corpus import open_corpus

    corpus = open_corpus(out)
    counts = HashingVectorizer(n_features=64, alternate_sign=False, norm=None).transform(
        [texts[i] for i in sorted(texts)])
    expected = TfidfTransformer().fit_transform(counts).T.toarray()
    np.testing.assert_allclose(_dense(corpus), expected, rtol=0, atol=1e-12)


def test_options_of_the_other_scheme_are_refused(tree, tmp_path):
    root, _ = tree
    # a Python caller is told the keywords (issue 32), the command line the flags
    with pytest.raises(ParameterError, match="add vocabulary=False"):
        run(IngestRequest(root, tmp_path / "a.zarr", text=TextSpec(n_features=64)))
    with pytest.raises(ParameterError, match="pass vocabulary=True"):
        run(IngestRequest(root, tmp_path / "b.zarr", text=TextSpec(vocabulary=False, min_df=2)))
    result = CliRunner().invoke(main, ["ingest", str(root), "-o", str(tmp_path / "c.zarr"),
                                       "--n-features", "64"])
    assert result.exit_code == 1 and "add --hashing" in result.stderr
    assert not (tmp_path / "c.zarr").exists()


def _run_remedy(message: str) -> CliRunner:
    command = message.split("`")[1]
    assert command.startswith("sphdist ingest ")
    return CliRunner().invoke(main, shlex.split(command)[1:])


def test_tiny_collection_fails_with_a_command_that_works(tmp_path):
    (tmp_path / "docs.jsonl").write_text(
        '{"text": "rocket orbit"}\n{"text": "pitcher baseball"}\n{"text": "orbit moon"}\n')
    out = tmp_path / "c.zarr"
    with pytest.raises(DataError, match=r"too few documents \(3\) for min_df=5 "
                                        r"and max_df=0\.5") as info:
        run(IngestRequest(tmp_path / "docs.jsonl", out))
    assert "min_df=1, max_df=1.0))" in str(info.value) and not out.exists()
    from sphdist.cli._remedies import CommandForm
    from sphdist.errors import render

    command = render(info.value, CommandForm(main.get_command(click.Context(main), "ingest"),
                                             main))
    assert "--min-df 1 --max-df 1.0" in command  # 1.0, every document: not 1, one document
    result = _run_remedy(command)
    assert result.exit_code == 0, result.output
    assert "3 documents" in result.stdout and "0 empty" in result.stdout


def test_pruning_that_leaves_no_term_fails_with_a_command_that_works(tmp_path):
    # 12 documents (enough for the bounds), but no term in 5 of them
    lines = [f'{{"text": "word{i} term{i}", "label": "{i % 2}"}}' for i in range(12)]
    (tmp_path / "docs.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "c.zarr"
    result = CliRunner().invoke(main, ["ingest", str(tmp_path / "docs.jsonl"), "-o", str(out),
                                       "--label-field", "label"])
    assert result.exit_code == 1
    error = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(error) == 1 and "Traceback" not in result.output
    assert "no term is left of the 24 found in the 12 documents" in error[0]
    assert "min_df=5" in error[0] and not out.exists()
    result = _run_remedy(error[0])
    assert result.exit_code == 0, result.output
    assert "12 documents, 24 features" in result.stdout and "2 labels" in result.stdout
