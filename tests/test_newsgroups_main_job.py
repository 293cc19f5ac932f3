"""pipelines/newsgroups.py, the main job: Spherical PCA beside the LSA recipe and BAE."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics import normalized_mutual_info_score
from sklearn.preprocessing import Normalizer

from sphdist import BAE
from sphdist.jobs import run
from sphdist.jobs.ingest import IngestRequest
from tests._textcorpus import write_text_tree

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "pipelines"))

import newsgroups  # noqa: E402


@pytest.fixture
def tree(tmp_path):
    texts = write_text_tree(tmp_path / "src", n_per_label=10)
    ids = sorted(texts)
    y = np.array([sorted({i.split("/")[0] for i in ids}).index(i.split("/")[0]) for i in ids])
    return tmp_path / "src", [texts[i] for i in ids], y


def test_lsa_recipe_is_scikit_learns_documented_pipeline(tree):
    _, texts, y = tree
    row = newsgroups.lsa_recipe(texts, y, n_components=3, seed=0)
    # the recipe as scikit-learn's text-clustering example writes it
    X = TfidfVectorizer(max_df=0.5, min_df=5, stop_words="english").fit_transform(texts)
    Z = Normalizer(copy=False).fit_transform(
        TruncatedSVD(n_components=3, random_state=0).fit_transform(X))
    labels = KMeans(n_clusters=3, n_init=10, random_state=0).fit_predict(Z)
    assert row["features"] == X.shape[1]
    assert row["nmi"] == pytest.approx(normalized_mutual_info_score(y, labels), abs=1e-12)
    assert row["method"].startswith("LSA recipe")


def test_sphdist_defaults_keep_the_recipes_terms_and_bae_runs_on_them(tree, tmp_path):
    root, texts, y = tree
    corpus = run(IngestRequest(root, tmp_path / "c.zarr"))
    recipe = TfidfVectorizer(max_df=0.5, min_df=5, stop_words="english").fit(texts)
    assert list(corpus.vocabulary) == list(recipe.get_feature_names_out())
    row = newsgroups.bae(corpus, n_components=3, seed=0)
    assert row["features"] == corpus.n_features
    X = corpus.to_dask().compute(scheduler="synchronous").T.tocsr()
    Z = BAE(n_components=3, random_state=0).fit_transform(X)
    labels = KMeans(n_clusters=3, n_init=10, random_state=0).fit_predict(np.asarray(Z))
    assert row["nmi"] == pytest.approx(normalized_mutual_info_score(y, labels), abs=1e-12)


@pytest.mark.slow
def test_main_job_prints_the_three_methods_on_the_same_corpus(newsgroups_archive, tmp_path):
    env_home = str(Path(newsgroups_archive).parent)
    proc = subprocess.run(
        [sys.executable, str(REPO / "pipelines" / "newsgroups.py"), "--groups", "5",
         "--work-dir", str(tmp_path), "--json", "-r", "20"],
        capture_output=True, text=True, timeout=600, cwd=REPO,  # a loaded machine
        env={"SPHDIST_DATA_HOME": env_home, "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    (result,) = json.loads(proc.stdout)
    assert result["corpus"] == "newsgroups-5" and result["n_documents"] == 4890
    methods = {row["method"].split(" (")[0]: row for row in result["methods"]}
    assert set(methods) == {"Spherical PCA", "BAE", "LSA recipe"}
    # the same terms: sphdist's defaults are the recipe's vectorizer (plus sublinear tf)
    assert len({row["features"] for row in methods.values()}) == 1
    for row in methods.values():
        assert 0.2 < row["accuracy"] <= 1 and 0 < row["nmi"] <= 1 and row["seconds"] > 0
        assert 0.2 < row["knn_accuracy"] <= 1  # 10-NN label accuracy, beside k-means
    assert (tmp_path / "newsgroups-5" / "model.zarr").is_dir()
    # the map beside the table: every document with a direction laid out, its page written
    page = tmp_path / "newsgroups-5" / "map.html"
    assert result["map"] == str(page) and page.stat().st_size > 100_000
    assert (tmp_path / "newsgroups-5" / "model.layout.zarr").is_dir()
    assert 0.1 < result["kept_10nn"] <= 1


def test_no_hint_to_replace_the_corpus_the_run_fits_on(tmp_path, caplog):
    """Issue 33 item 5: a post that was only quoted text is emptied by the news cleaning; the
    ingest's hint (ingest again without the cleaning, --overwrite) would replace the corpus
    this run's model is fitted on, and is noise for 20 Newsgroups: it is not printed."""
    import logging

    from sphdist.text.ingest import SourceSpec

    root = tmp_path / "src"
    for doc_id, text in write_text_tree(root, n_per_label=10).items():  # posts with headers
        (root / doc_id).write_text(f"From: someone@example.org\nSubject: {doc_id}\n\n{text}\n")
    (root / "space" / "99.txt").write_text(
        "From: someone@example.org\nSubject: re: orbit\n\n> nasa shuttle launch moon orbit\n")
    logger = logging.getLogger("sphdist")
    propagate, logger.propagate = logger.propagate, True
    try:
        with caplog.at_level(logging.INFO, logger="sphdist"):
            corpus = newsgroups.ingest_newsgroups(SourceSpec(root), tmp_path / "c.zarr")
    finally:
        logger.propagate = propagate
    assert corpus.n_empty == 2  # "a", and the post of quoted text only (the case of the hint)
    said = [r.getMessage() for r in caplog.records]
    assert not [m for m in said if "--overwrite" in m or "without the cleaning" in m], said
    assert not logger.filters  # the job's filter is gone after the ingest


def test_the_table_puts_the_scores_right_after_the_method():
    """Issue 33 item 11: the scores were the last three of twelve columns, cut off on a page."""
    row = {"method": "Spherical PCA (sphdist)", "n_iter": 15, "converged": True,
           "features": 10796, "features_seconds": 6.7, "seconds": 7.5, "kmeans_seconds": 2.9,
           "accuracy": 0.638, "nmi": 0.5102, "knn_accuracy": 0.8258}
    text = newsgroups.table([{"corpus": "newsgroups-5", "n_documents": 4890,
                              "n_components": 100, "methods": [row]}])
    head, _, line = text.splitlines()
    assert [c.strip() for c in head.strip("|").split("|")][:5] == [
        "corpus", "method", "accuracy", "NMI", "10-NN accuracy"]
    assert line.startswith("| newsgroups-5 | Spherical PCA (sphdist) | 0.6380 | 0.5102 | 0.8258 |")
    assert "| 4890 | 10,796 | 100 | 15 |" in line
