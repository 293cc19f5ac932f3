"""Issue 43 item 10: a stored value outside its schema is refused when the store is opened.

Each store is made by the commands a user types (``synth``, ``ingest``, ``fit``, ``transform``,
``index``, ``layout``), then edited with zarr as someone editing it by hand would: an array
rewritten with another dtype or shape (its recorded digest recomputed, so that the digests,
which cover the bytes, pass), a stray array, an attribute of another JSON type. Each was
accepted before (a command exited 0, or failed with a traceback or a misleading message);
each is now refused at opening, from the metadata alone, naming the store, the array or
attribute, what it holds and what it should hold, and the job that writes the store again.
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

from sphdist.cli import main
from sphdist.errors import CorpusFormatError, ModelFormatError
from sphdist.io._checked import chunk_sha256, content_sha256
from sphdist.io.corpus import open_corpus
from sphdist.io.embedding import open_embedding
from sphdist.io.index import open_index
from sphdist.io.layout import open_layout
from sphdist.io.model import open_model

from .._cli_stores import cli_ok, user_stores, working_directory

N = 60  # documents


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A directory holding c.zarr (vocabulary), ch.zarr (hashing), m, e, i and l.zarr."""
    root = tmp_path_factory.mktemp("stores")
    with working_directory(root):
        user_stores("src.jsonl", n_docs=N, vocab_size=50)
        cli_ok("ingest", "src.jsonl", "--hashing", "--n-features", 64, "-o", "ch.zarr")
        cli_ok("layout", "-m", "m.zarr", "-o", "l.zarr", "--n-iter", 10, "-k", 5)
    return root


@pytest.fixture
def copy(stores, tmp_path):
    """A fresh copy of the stores, in ``tmp_path``."""
    shutil.copytree(stores, tmp_path / "s")
    return tmp_path / "s"


def _replace(store, name, data):
    """Rewrite array ``name`` of ``store`` as ``data``, its recorded digest recomputed."""
    group = zarr.open_group(str(store), mode="r+")
    if name in group:
        del group[name]
    data = np.asarray(data)
    if data.dtype.kind in "UO":
        arr = group.create_array(name, shape=data.shape, dtype=str)
        arr[...] = data
    else:
        arr = group.create_array(name, data=data)
    digests = dict(group.attrs.get("sha256") or {})
    if name in digests:
        digests[name] = (chunk_sha256(data, arr.chunks[-1]) if isinstance(digests[name], list)
                         else content_sha256(data))
        group.attrs["sha256"] = digests


def _set(store, path, value):
    """Set the attribute at dotted ``path`` of ``store`` to ``value``."""
    group = zarr.open_group(str(store), mode="r+")
    top, *rest = path.split(".")
    if not rest:
        group.attrs[top] = value
        return
    record = json.loads(json.dumps(group.attrs[top]))
    holder = record
    for key in rest[:-1]:
        holder = holder[key]
    holder[rest[-1]] = value
    group.attrs[top] = record


def _read(store, name):
    return np.asarray(zarr.open_group(str(store), mode="r")[name][...])


OPEN = {"c.zarr": open_corpus, "ch.zarr": open_corpus, "m.zarr": open_model,
        "e.zarr": open_embedding, "i.zarr": open_index, "l.zarr": open_layout}
REBUILD = {"c.zarr": "IngestRequest", "ch.zarr": "IngestRequest", "m.zarr": "FitRequest",
           "e.zarr": "TransformRequest", "i.zarr": "IndexRequest", "l.zarr": "LayoutRequest"}

ATTRIBUTES = [  # store, attribute, value, what the message says it is and should be
    ("ch.zarr", "feature_scheme", "hashing",
     "attribute feature_scheme is the string 'hashing', where a sphdist corpus holds how "
     "text became features, a mapping"),
    ("ch.zarr", "feature_scheme.ngram_range", "1,2",
     "attribute feature_scheme.ngram_range is the string '1,2'"),
    ("ch.zarr", "feature_scheme.n_features", 64.0,
     "attribute feature_scheme.n_features is the number 64.0, where a sphdist corpus holds "
     "the number of features, an integer"),
    ("ch.zarr", "feature_scheme.stop_words", 5, "attribute feature_scheme.stop_words is the "
     "integer 5, where a sphdist corpus holds the stop-word list, a string or null"),
    ("c.zarr", "feature_scheme.lowercase", "yes", "feature_scheme.lowercase is the string"),
    ("ch.zarr", "tfidf", "l2", "attribute tfidf is the string 'l2'"),
    ("ch.zarr", "tfidf.remove", "headers", "attribute tfidf.remove is the string 'headers', "
     "where a sphdist corpus holds the parts of news posts removed, a list of strings"),
    ("m.zarr", "params.n_components", "2", "attribute params.n_components is the string '2', "
     "where a sphdist model holds the number of components r, an integer"),
    ("m.zarr", "params.lam", [1], "attribute params.lam is the list [1], where a sphdist model "
     "holds the V-step's lam (a number or a rule's name), a number or a string"),
    ("m.zarr", "corpus.feature_scheme.ngram_range", "1,1",
     "attribute corpus.feature_scheme.ngram_range is the string '1,1'"),
    ("m.zarr", "corpus.tfidf", "l2", "attribute corpus.tfidf is the string"),
    ("m.zarr", "converged", "no", "attribute converged is the string 'no', where a sphdist "
     "model holds whether the fit converged, a bool"),
    ("m.zarr", "sq_norm_X", "60", "attribute sq_norm_X is the string '60'"),
    ("m.zarr", "corpus.fingerprint", 5, "attribute corpus.fingerprint is the integer 5"),
    ("e.zarr", "n_degenerate", "0", "attribute n_degenerate is the string '0'"),
    ("e.zarr", "label_names", "topic0", "attribute label_names is the string 'topic0', "
     "where a sphdist embedding holds the label names, a list of strings or null"),
    ("e.zarr", "model", "m.zarr", "attribute model is the string 'm.zarr'"),
    ("i.zarr", "index.n_components", "2", "attribute index.n_components is the string '2'"),
    ("i.zarr", "index.kind", 1, "attribute index.kind is the integer 1"),
    ("i.zarr", "faiss_nbytes", "10", "attribute faiss_nbytes is the string '10'"),
    ("i.zarr", "index", "flat", "attribute index is the string 'flat'"),
    ("l.zarr", "layout.k", "5", "attribute layout.k is the string '5', where a sphdist layout "
     "holds the neighbours per document, an integer"),
    ("l.zarr", "layout", "tsne", "attribute layout is the string 'tsne'"),
]


@pytest.mark.parametrize("store, path, value, said", ATTRIBUTES,
                         ids=[f"{s}:{p}" for s, p, _, _ in ATTRIBUTES])
def test_an_attribute_of_another_type_is_refused_at_opening(copy, store, path, value, said):
    """Before: accepted (exit 0), or a raw ``ValueError`` in the sentence (a corpus'
    feature_scheme not a mapping), a traceback (``ingest --like`` of a corpus whose tfidf or
    tfidf.remove is a string), a store value blamed on an option (``--stop-words 5``)."""
    _set(copy / store, path, value)
    error = CorpusFormatError if store.startswith("c") else ModelFormatError
    with pytest.raises(error, match=re.escape(said)) as caught:
        OPEN[store](copy / store)
    text = str(caught.value)
    assert text.startswith(str(copy / store)), text
    assert "ValueError" not in text and REBUILD[store] in text, text


ARRAYS = [  # store, array, its new values from the old ones, what the message says
    ("m.zarr", "extra", lambda old: np.arange(3), "extra is no array of a sphdist model"),
    ("m.zarr", "state/extra", lambda old: np.arange(3),
     "state/extra is no array of a sphdist model"),
    ("m.zarr", "idf", lambda old: old.astype(np.int64),
     "idf is stored as int64, where a sphdist model holds one float64 idf weight per feature"),
    ("m.zarr", "vocabulary", lambda old: np.arange(old.shape[0]),
     "vocabulary is stored as int64, where a sphdist model holds one string term per feature"),
    ("m.zarr", "idf", lambda old: old.astype(np.float32), "idf is stored as float32"),
    ("e.zarr", "extra", lambda old: np.arange(3), "extra is no array of a sphdist embedding"),
    ("e.zarr", "V", lambda old: old.astype(np.float32), "V is stored as float32"),
    ("e.zarr", "V", lambda old: old[0], "V has shape (60,) (1 dimension), where a sphdist "
     "embedding holds the unit embeddings V, an (r, n) float64 array (2 dimensions)"),
    ("e.zarr", "degenerate", lambda old: old.astype(np.int8), "degenerate is stored as int8"),
    ("e.zarr", "doc_ids", lambda old: np.arange(N), "doc_ids is stored as int64"),
    ("e.zarr", "labels", lambda old: np.zeros(N), "labels is stored as float64"),
    ("e.zarr", "labels", lambda old: np.zeros((1, N), np.int32),
     "labels has shape (1, 60) (2 dimensions), where a sphdist embedding holds one "
     "integer label code per document (1 dimension)"),
    ("e.zarr", "doc_ids", lambda old: np.array([str(x) for x in old[:-1]]),
     "doc_ids has shape (59,), where V has n = 60 columns (documents), it should have shape "
     "(60,)"),
    ("i.zarr", "extra", lambda old: np.arange(3), "extra is no array of a sphdist index"),
    ("i.zarr", "faiss", lambda old: old.astype(np.int64), "faiss is stored as int64"),
    ("i.zarr", "doc_ids", lambda old: np.arange(N), "doc_ids is stored as int64"),
    ("i.zarr", "doc_id_lookup", lambda old: old.astype(np.float64),
     "doc_id_lookup is stored as float64"),
    ("i.zarr", "doc_id_lookup", lambda old: old[:, :-1],
     "doc_id_lookup has shape (2, 59), where attribute source.n_documents says n = 60 "
     "documents, it should have shape (2, 60)"),
    ("l.zarr", "extra", lambda old: np.arange(3), "extra is no array of a sphdist layout"),
    ("l.zarr", "xy", lambda old: old.astype(np.float32), "xy is stored as float32"),
    ("l.zarr", "neighbors", lambda old: old.astype(np.float64),
     "neighbors is stored as float64"),
    ("l.zarr", "cosine", lambda old: old.astype(np.int64), "cosine is stored as int64"),
    ("l.zarr", "xy", lambda old: np.vstack([old, old[:1]]),
     "xy has shape (3, 60), where attribute source.n_documents says n = 60 documents, it "
     "should have shape (2, 60)"),
    ("l.zarr", "neighbors", lambda old: old[:2],
     "neighbors has shape (2, 60), where attribute layout.k says k = 5 and attribute "
     "source.n_documents says n = 60 documents, it should have shape (5, 60)"),
    ("l.zarr", "cosine", lambda old: old[:, :-1], "cosine has shape (5, 59)"),
]


@pytest.mark.parametrize("store, name, data, said", ARRAYS,
                         ids=[f"{s}:{n}:{i}" for i, (s, n, _, _) in enumerate(ARRAYS)])
def test_an_array_outside_the_schema_is_refused_at_opening(copy, store, name, data, said):
    """Before: accepted (exit 0), or a traceback (an embedding's V of one dimension), or
    refused later for another reason."""
    try:
        old = _read(copy / store, name)
    except KeyError:
        old = None
    _replace(copy / store, name, data(old))
    with pytest.raises(ModelFormatError, match=re.escape(said)) as caught:
        OPEN[store](copy / store)
    text = str(caught.value)
    assert text.startswith(str(copy / store)), text
    assert REBUILD[store] in text, text


@pytest.mark.parametrize("args", [
    ["info", "m.zarr"],
    ["neighbors", "-m", "m.zarr", "-i", "c.zarr", "--doc-id", "doc01", "--exact"],
])
def test_the_command_line_says_one_error_line_for_a_stray_array(copy, args):
    """``info`` and ``neighbors`` exited 0 on a model holding a stray array; now 1, one line."""
    _replace(copy / "m.zarr", "extra", np.arange(3))
    with working_directory(copy):
        result = CliRunner().invoke(main, ["--quiet", *args])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: m.zarr: extra is no array of a "
                                                   "sphdist model"), result.output
    assert "sphdist fit --input" in lines[0] and "--overwrite" in lines[0], lines[0]


def test_an_embedding_of_more_components_than_its_model_is_refused(copy):
    """``info``, ``export`` and ``evaluate`` exited 0 on an embedding whose V has 3 rows where
    the model that wrote it (same u_sha256) has r = 2; now the job that reads both refuses it."""
    V = _read(copy / "e.zarr", "V")
    _replace(copy / "e.zarr", "V", np.vstack([V, np.zeros((1, V.shape[1]))]))
    with working_directory(copy):
        result = CliRunner().invoke(main, ["--quiet", "export", "-m", "m.zarr", "-i", "e.zarr",
                                           "-o", "out.csv"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: e.zarr: V has shape (3, 60), where the model "
                                    "m.zarr has r = 2 components, it should have shape (2, "
                                    "any)"), result.output
    assert not (copy / "out.csv").exists()
