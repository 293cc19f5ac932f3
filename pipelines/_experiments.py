"""Shared pieces of the paper reproductions: method registry, data sets, scoring, tables.

Orientation: everything here follows scikit-learn, X of shape (n_samples, n_features), one
document / sample per row. The estimators turn it into the papers' (n_features, n_samples)
internally.

The *method registry* (:data:`METHODS`) names every embedding compared in Liu et al. 2019,
Table 1 / Table 2, plus the Angular-Decomposition family of Sun et al. 2011 and Li & Dunson's
spherical PCA. A method is built by name, for ``n_components`` and a seed; a method whose module
is missing (another part of sphdist not written yet) is reported as unavailable and skipped, so a
pipeline never fails because one method is absent.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import tarfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click
import numpy as np
import scipy.sparse as sp
from _paper_tables import LIU_TABLE1, LIU_TABLE2, SUN_TABLE1  # noqa: F401 - ex.LIU_TABLE1 ...
from sklearn.cluster import KMeans
from sklearn.decomposition import NMF, TruncatedSVD
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_extraction.text import CountVectorizer, TfidfTransformer
from sklearn.feature_selection import mutual_info_classif
from sklearn.metrics import normalized_mutual_info_score
from sklearn.preprocessing import MinMaxScaler, StandardScaler, normalize

from sphdist import SphericalPCA
from sphdist.datasets import DATA_HOME_ENV, NEWSGROUPS_PAPER_CATEGORIES, get_data_home
from sphdist.errors import DataError, InputNotFoundError, ParameterError
from sphdist.io import atomic_path
from sphdist.metrics import clustering_accuracy, normalized_mutual_info
from sphdist.text import STRIPPERS, clean
from sphdist.text.ingest import REMOVE_OPTIONS
from sphdist.text.tfidf import mutual_information

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "pipelines" / "results"

def paper_key(name: str) -> str:
    """Normalised data-set name used to look a data set up in the papers' tables.

    Examples
    --------
    >>> paper_key("Glass (6)")
    'glass'
    >>> paper_key("glass.csv")
    'glass'
    """
    key = name.lower().strip()
    for suffix in (".csv.gz", ".csv", ".tsv", ".zarr"):
        if key.endswith(suffix):
            key = key[: -len(suffix)]
    return key.split("(")[0].strip()


def liu_table2_paper(name: str) -> tuple[str, tuple[int, dict[str, tuple[float, float]]]] | None:
    """The paper's Table 2 entry for a data set, as ``(key, entry)``, or None.

    A single mfeat feature set (``mfeat-factors.csv.gz`` ...) gets the paper's mfeat row: the
    paper does not say which feature set it used.

    Examples
    --------
    >>> liu_table2_paper("mfeat-zernike.csv.gz")[0]
    'mfeat'
    >>> liu_table2_paper("iris.csv") is None
    True
    """
    key = paper_key(name)
    for k in (key, key.split("-")[0]):
        if k in LIU_TABLE2:
            return k, LIU_TABLE2[k]
    return None


# -- method registry --------------------------------------------------------------------------
class MethodUnavailable(RuntimeError):
    """The module or class a method needs is not importable (not written yet)."""


def _optional(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise MethodUnavailable(f"{module}.{name} is not available ({exc})") from exc


@dataclass(frozen=True)
class Method:
    """One embedding method of the comparison.

    Attributes
    ----------
    key : str
        Registry name (also the key into the papers' tables).
    label : str
        Column / row title in the tables.
    build : callable
        ``build(n_components, seed) -> estimator`` with ``fit_transform(X)`` returning the
        embedding of shape (n_samples, d); ``None`` for k-means on X itself.
    nonnegative : bool
        True when the method needs X >= 0 (NMF).
    extra : bool
        True for methods that are not in Liu et al.'s tables (shown as extra rows).
    """

    key: str
    label: str
    build: Callable[[int, int], Any] | None
    nonnegative: bool = False
    extra: bool = False

    def available(self) -> tuple[bool, str]:
        """Whether the method can be built now, and why not."""
        if self.build is None:
            return True, ""
        try:
            self.build(2, 0)
        except MethodUnavailable as exc:
            return False, str(exc)
        return True, ""


def _nmf(r: int, seed: int) -> NMF:
    return NMF(n_components=r, solver="mu", init="nndsvda", max_iter=500, random_state=seed)


def _spca(r: int, seed: int) -> SphericalPCA:
    return SphericalPCA(n_components=r, random_state=seed)


def _from(module: str, name: str, **fixed: Any) -> Callable[[int, int], Any]:
    def build(r: int, seed: int) -> Any:
        return _optional(module, name)(n_components=r, random_state=seed, **fixed)

    return build


#: K-SVD's sparsity T0 (atoms per sample); Liu et al. do not state theirs.
KSVD_T0 = 2

#: All methods by key, in table order: Liu et al.'s six, then the extra ones.
METHODS: dict[str, Method] = {
    m.key: m for m in (
        Method("kmeans", "K-means", None),
        Method("nmf", "MUA (NMF)", _nmf, nonnegative=True),
        Method("pca", "PCA", lambda r, seed: TruncatedSVD(n_components=r, random_state=seed)),
        Method("r1pca", "R1-PCA", _from("sphdist.methods.baselines", "R1PCA")),
        Method("ksvd", "K-SVD", _from("sphdist", "KSVD", n_nonzero_coefs=KSVD_T0)),
        Method("spca", "Spherical PCA", _spca),
        Method("ad", "AD (vector)", _from("sphdist.methods.angular", "AngularDecomposition"),
               extra=True),
        Method("gad", "AD (graph)", _from("sphdist", "GraphAngularDecomposition"),
               extra=True),
        Method("bae", "BAE", _from("sphdist", "BAE"), extra=True),
        Method("lidunson", "Li-Dunson SPCA",
               _from("sphdist.methods.spherelets", "LiDunsonSphericalPCA"), extra=True),
    )
}

#: Liu et al.'s six methods, in the order of their tables.
PAPER_METHODS = ("kmeans", "nmf", "pca", "r1pca", "ksvd", "spca")


def resolve_methods(keys: Sequence[str] | None) -> tuple[list[Method], dict[str, str]]:
    """Split the requested methods into the available ones and the missing ones.

    Parameters
    ----------
    keys : sequence of str or None
        Registry keys; None means every registered method.

    Returns
    -------
    methods : list of Method
        The available ones, in registry order.
    skipped : dict
        Key -> reason, for the unavailable ones.

    Raises
    ------
    ParameterError
        If a key is not registered.
    """
    keys = list(METHODS) if keys is None else list(keys)
    unknown = [k for k in keys if k not in METHODS]
    if unknown:
        raise ParameterError(
            f"unknown method(s) {unknown}. To resolve this, choose from {list(METHODS)}."
        )
    methods, skipped = [], {}
    for key in METHODS:
        if key in keys:
            ok, why = METHODS[key].available()
            if ok:
                methods.append(METHODS[key])
            else:
                skipped[key] = why
    return methods, skipped


def embed(method: Method, X: Any, n_components: int, seed: int) -> np.ndarray:
    """The embedding k-means is run on, one row per sample.

    Parameters
    ----------
    method : Method
    X : ndarray or sparse matrix of shape (n_samples, n_features), float64
    n_components : int
        r.
    seed : int
        ``random_state`` of the method.

    Returns
    -------
    ndarray of shape (n_samples, d), float64
        X itself (dense) for k-means, else ``fit_transform(X)``.
    """
    if method.build is None:
        return X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        Z = method.build(n_components, seed).fit_transform(X)
    return np.asarray(Z.compute() if hasattr(Z, "compute") else Z, dtype=np.float64)


def kmeans_scores(Z: np.ndarray, y: np.ndarray, n_clusters: int, seed: int,
                  n_init: int = 10) -> tuple[float, float, float]:
    """k-means (``n_init`` restarts, seeded) on an embedding; (accuracy, NMI) against y.

    Parameters
    ----------
    Z : ndarray of shape (n_samples, d), float64
    y : ndarray of shape (n_samples,), int
    n_clusters : int
    seed : int
    n_init : int, default 10

    Returns
    -------
    tuple of float
        Clustering accuracy (Hungarian matching), NMI (arithmetic-mean normalisation,
        scikit-learn's default) and NMI normalised by ``max(H(y), H(pred))`` (the definition
        of Xu, Liu & Gong 2003, the reference [24] Liu et al. cite for NMI), all in [0, 1].

    Raises
    ------
    DataError
        If Z holds NaN or Inf.
    """
    if not np.all(np.isfinite(Z)):
        raise DataError("the embedding holds NaN or Inf values.")
    pred = KMeans(n_clusters=n_clusters, n_init=n_init, random_state=seed).fit_predict(Z)
    return (clustering_accuracy(y, pred), normalized_mutual_info(y, pred),
            float(normalized_mutual_info_score(y, pred, average_method="max")))


def evaluate_methods(
    methods: Sequence[Method], X: Any, y: np.ndarray, *, n_components: int, seed: int,
    log: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Embed X with every method and score k-means (k = number of labels) on each embedding.

    Returns
    -------
    list of dict
        One record per method: ``method``, ``accuracy``, ``nmi``, ``seconds`` (embedding plus
        k-means, wall time), or ``error`` (a message) when the method failed or does not apply
        (e.g. NMF on negative data).
    """
    k = int(np.unique(y).size)
    records = []
    negative = (X.data.min() if sp.issparse(X) and X.nnz else np.min(X)) < 0
    for method in methods:
        rec: dict[str, Any] = {"method": method.key, "seed": seed}
        if method.nonnegative and negative:
            rec["error"] = "needs non-negative X"
            records.append(rec)
            continue
        t0 = time.perf_counter()
        try:
            Z = embed(method, X, n_components, seed)
            rec["accuracy"], rec["nmi"], rec["nmi_max"] = kmeans_scores(Z, y, k, seed)
        except Exception as exc:  # noqa: BLE001 - one failing method must not stop the table
            rec["error"] = f"{type(exc).__name__}: {exc}"[:200]
        rec["seconds"] = time.perf_counter() - t0
        if log:
            log(f"  {method.key:9s} " + (
                f"acc {rec['accuracy']:.3f} nmi {rec['nmi']:.3f}" if "error" not in rec
                else rec["error"]) + f"  ({rec['seconds']:.1f} s)")
        records.append(rec)
    return records


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean and sample standard deviation of accuracy / NMI per method over repetitions.

    Returns
    -------
    dict
        method -> ``acc_mean``, ``acc_std``, ``nmi_mean``, ``nmi_std``, ``n`` (successful
        repetitions), ``seconds`` (mean), and ``error`` when no repetition succeeded.

    Examples
    --------
    >>> s = summarise([{"method": "pca", "accuracy": 0.5, "nmi": 0.2, "seconds": 1.0},
    ...                {"method": "pca", "accuracy": 0.7, "nmi": 0.4, "seconds": 3.0}])
    >>> round(s["pca"]["acc_mean"], 3), round(s["pca"]["acc_std"], 3), s["pca"]["n"]
    (0.6, 0.141, 2)
    """
    out: dict[str, dict[str, Any]] = {}
    for key in dict.fromkeys(r["method"] for r in records):
        ok = [r for r in records if r["method"] == key and "error" not in r]
        if not ok:
            errs = [r["error"] for r in records if r["method"] == key]
            out[key] = {"n": 0, "error": errs[0]}
            continue
        acc = np.array([r["accuracy"] for r in ok])
        nmi = np.array([r["nmi"] for r in ok])
        ddof = 1 if len(ok) > 1 else 0
        out[key] = {
            "acc_mean": float(acc.mean()), "acc_std": float(acc.std(ddof=ddof)),
            "nmi_mean": float(nmi.mean()), "nmi_std": float(nmi.std(ddof=ddof)),
            "n": len(ok), "seconds": float(np.mean([r["seconds"] for r in ok])),
        }
        if all("nmi_max" in r for r in ok):
            out[key]["nmi_max_mean"] = float(np.mean([r["nmi_max"] for r in ok]))
    return out


def fmt_pm(mean: float, std: float) -> str:
    """``mean ± std`` with three decimals.

    Examples
    --------
    >>> fmt_pm(0.8375, 0.01234)
    '0.838 ± 0.012'
    """
    return f"{mean:.3f} ± {std:.3f}"


def score_table(summary: dict[str, dict[str, Any]], paper: dict[str, tuple[float, float]] | None,
                n_reps: int) -> list[str]:
    """Markdown rows: one per method, ours (mean ± std) beside the paper's figures.

    Returns
    -------
    list of str
        Header, separator and one row per method of ``summary``.
    """
    lines = ["| method | Acc (ours) | Acc (paper) | NMI (ours) | NMI (paper) | NMI_max (ours) "
             "| reps | s/rep |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for key, s in summary.items():
        p = (paper or {}).get(key)
        pa, pn = (f"{p[0]:.3f}", f"{p[1]:.3f}") if p else ("–", "–")
        label = METHODS[key].label if key in METHODS else key
        if s["n"] == 0:
            lines.append(f"| {label} | n/a ({s['error']}) | {pa} | n/a | {pn} | n/a | "
                         f"0/{n_reps} | |")
            continue
        nmi_max = f"{s['nmi_max_mean']:.3f}" if "nmi_max_mean" in s else "–"
        lines.append(
            f"| {label} | {fmt_pm(s['acc_mean'], s['acc_std'])} | {pa} | "
            f"{fmt_pm(s['nmi_mean'], s['nmi_std'])} | {pn} | {nmi_max} | {s['n']}/{n_reps} | "
            f"{s['seconds']:.1f} |"
        )
    return lines


# -- data: 20 Newsgroups ----------------------------------------------------------------------
#: Group order for the 5/10/15/20-group subsets: Liu et al.'s five named groups first (§5.2),
#: then the other fifteen in alphabetical order (the paper does not list its 10/15 groups).
NEWSGROUP_ORDER: tuple[str, ...] = tuple(NEWSGROUPS_PAPER_CATEGORIES) + tuple(sorted({
    "alt.atheism", "comp.os.ms-windows.misc", "comp.sys.ibm.pc.hardware",
    "comp.sys.mac.hardware", "comp.windows.x", "misc.forsale", "rec.autos",
    "rec.sport.hockey", "sci.crypt", "sci.electronics", "sci.med",
    "soc.religion.christian", "talk.politics.guns", "talk.politics.misc", "talk.religion.misc",
}))


def data_home() -> Path:
    """The data home (:func:`sphdist.datasets.get_data_home`).

    When ``$SPHDIST_DATA_HOME`` is unset: ``../shared/data`` next to the repository if it
    exists.
    """
    shared = REPO.parent / "shared" / "data"
    unset = not os.environ.get(DATA_HOME_ENV)
    return get_data_home(shared if unset and shared.is_dir() else None)


def read_newsgroups(archive: str | os.PathLike[str],
                    remove: Sequence[str] = ("headers",)) -> dict[str, list[str]]:
    """All documents of a 20 Newsgroups "bydate" tar archive, by group (train and test).

    Parameters
    ----------
    archive : path-like
        ``20news-bydate.tar.gz`` (``<split>/<group>/<id>`` members).
    remove : sequence of {"headers", "footers", "quotes"}
        Parts stripped with scikit-learn's own functions (those of
        ``fetch_20newsgroups(remove=...)``). The headers hold the group name, so keep
        "headers" here for a fair clustering experiment.

    Returns
    -------
    dict
        group name -> list of texts (latin-1 decoded), in archive order.

    Raises
    ------
    InputNotFoundError
        If the archive does not exist.
    """
    path = Path(archive)
    if not path.is_file():
        raise InputNotFoundError(
            f"{path}: 20 Newsgroups archive not found. To resolve this, set {DATA_HOME_ENV} to "
            "the folder holding 20news-bydate.tar.gz (e.g. ../shared/data)."
        )
    bad = [r for r in remove if r not in (STRIPPERS or {})]
    if bad:
        raise ParameterError(f"remove={bad}: choose from {sorted(STRIPPERS or {})}.")
    parts = tuple(r for r in REMOVE_OPTIONS if r in remove)  # fetch_20newsgroups' order
    docs: dict[str, list[str]] = {}
    with tarfile.open(path, "r:*") as tar:
        for member in tar:
            path_parts = member.name.split("/")
            if not member.isfile() or len(path_parts) < 3:
                continue
            text = tar.extractfile(member).read().decode("latin-1")
            docs.setdefault(path_parts[-2], []).append(clean(text, parts))
    return docs


def sample_documents(docs: dict[str, list[str]], groups: Sequence[str], n_per_group: int,
                     rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    """``n_per_group`` documents drawn without replacement from each group.

    Returns
    -------
    texts : list of str
    y : ndarray of shape (len(texts),), int64
        Position of the group in ``groups``.

    Raises
    ------
    DataError
        If a group is missing or has fewer documents than ``n_per_group``.
    """
    texts: list[str] = []
    labels = []
    for code, group in enumerate(groups):
        pool = docs.get(group, [])
        if len(pool) < n_per_group:
            raise DataError(
                f"group {group!r} has {len(pool)} documents, fewer than the {n_per_group} "
                "to sample. To resolve this, lower the documents per group."
            )
        pick = rng.choice(len(pool), n_per_group, replace=False)
        texts.extend(pool[i] for i in pick)
        labels.append(np.full(n_per_group, code, dtype=np.int64))
    return texts, np.concatenate(labels)


def binary_mutual_info(B: Any, y: np.ndarray) -> np.ndarray:
    """Mutual information (nats) between each binary word-presence column and the labels.

    The same quantity as ``mutual_info_classif(B, y, discrete_features=True)`` (scikit-learn
    computes ``mutual_info_score`` column by column); here all columns at once from the
    contingency counts ``B^T Y`` by :func:`sphdist.text.tfidf.mutual_information` (the function
    ``sphdist ingest --select mutual-info`` uses), which is what makes the 20-group experiment
    affordable.

    Parameters
    ----------
    B : sparse matrix or ndarray of shape (n_samples, n_words), values in {0, 1}
    y : ndarray of shape (n_samples,), int

    Returns
    -------
    ndarray of shape (n_words,), float64
        ``sum_{w in {0,1}, c} p(w, c) log(p(w, c) / (p(w) p(c)))``.
    """
    B = sp.csr_matrix(B, dtype=np.int64)
    _, codes = np.unique(y, return_inverse=True)
    n = B.shape[0]
    Y = sp.csr_matrix((np.ones(n, dtype=np.int64), (np.arange(n), codes)))
    class_df = np.asarray((B.T @ Y).todense())  # (words, classes): documents with the word
    class_sizes = np.bincount(codes).astype(np.int64)
    return mutual_information(class_df, class_sizes)


def mi_tfidf(texts: Sequence[str], y: np.ndarray, n_words: int = 500, *,
             mi_method: str = "sklearn", min_df: int = 2,
             seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Liu et al. §5.2's matrix: words chosen by mutual information, tf-idf, then normalised.

    Parameters
    ----------
    texts : sequence of str
    y : ndarray of shape (n_samples,), int
        Labels; the words are the ``n_words`` with the highest mutual information between word
        presence and label (supervised selection, as the paper describes).
    n_words : int, default 500
    mi_method : {"sklearn", "counts"}, default "sklearn"
        ``sklearn.feature_selection.mutual_info_classif(discrete_features=True)`` on word
        presence, or :func:`binary_mutual_info` (same values, all columns at once).
    min_df : int, default 2
        Words in fewer documents are not candidates (``CountVectorizer(min_df=...)``).
    seed : int, default 0

    Returns
    -------
    X : ndarray of shape (n_samples, n_words), float64
        ``TfidfTransformer(norm="l2")`` of the selected counts: unit rows (all-zero rows for
        documents without any selected word).
    words : ndarray of shape (n_words,), str
    """
    vec = CountVectorizer(stop_words="english", min_df=min_df)
    C = vec.fit_transform(texts)
    present = (C > 0).astype(np.int64)
    if mi_method == "sklearn":
        mi = mutual_info_classif(present, y, discrete_features=True, random_state=seed)
    elif mi_method == "counts":
        mi = binary_mutual_info(present, y)
    else:
        raise ParameterError(f"mi_method={mi_method!r}: choose 'sklearn' or 'counts'.")
    keep = np.sort(np.argsort(-mi, kind="stable")[:n_words])
    X = TfidfTransformer(norm="l2").fit_transform(C[:, keep])
    return X.toarray(), vec.get_feature_names_out()[keep]


# -- data: any labelled table (CSV or dense zarr) ---------------------------------------------
@dataclass
class Labelled:
    """A labelled data set, X of shape (n_samples, n_features) float64, y of int codes."""

    name: str
    X: np.ndarray
    y: np.ndarray
    label_names: list[str] = field(default_factory=list)


def load_labelled(path: str | os.PathLike[str], *, label_column: str | None = None,
                  name: str | None = None) -> Labelled:
    """Read a numeric labelled data set from a CSV file or a dense zarr group.

    Parameters
    ----------
    path : path-like
        A ``.csv`` / ``.tsv`` (optionally gzipped) file with a header row, or a zarr group
        holding ``X`` (n_samples, n_features) and ``y`` (n_samples,) (see
        :class:`sphdist.io.corpus.DenseInput`).
    label_column : str, optional
        CSV column holding the labels (any values; coded in order of first appearance after
        sorting); default the last column.
    name : str, optional
        Name shown in the tables; default the file name without suffixes.

    Returns
    -------
    Labelled

    Raises
    ------
    InputNotFoundError
        If ``path`` does not exist.
    DataError
        If a feature column is not numeric, a value is missing, or a zarr input has no labels.
    """
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise InputNotFoundError(f"{path}: no such file or folder.")
    name = name or paper_key(path.name)
    if path.is_dir():
        from sphdist.io.corpus import DenseInput

        inp = DenseInput(path)
        if inp.labels is None:
            raise DataError(f"{path}: the zarr group has no labels 'y'. To resolve this, add "
                            "an integer array 'y' of shape (n_samples,).")
        X = np.asarray(inp.to_dask().T.compute(), dtype=np.float64)
        return Labelled(name, X, inp.labels.astype(np.int64),
                        [str(c) for c in np.unique(inp.labels)])
    sep = "\t" if ".tsv" in path.name else ","
    frame = pd.read_csv(path, sep=sep)
    label_column = label_column or frame.columns[-1]
    if label_column not in frame.columns:
        raise DataError(f"{path}: no column {label_column!r}; columns are {list(frame.columns)}.")
    labels = frame.pop(label_column)
    bad = [c for c in frame.columns if not pd.api.types.is_numeric_dtype(frame[c])]
    if bad:
        raise DataError(f"{path}: feature columns {bad} are not numeric. To resolve this, drop "
                        "them or pass the one holding labels as --label-column.")
    if frame.isna().any().any() or labels.isna().any():
        raise DataError(f"{path}: missing values. To resolve this, impute or drop those rows.")
    codes, names = pd.factorize(labels, sort=True)
    return Labelled(name, frame.to_numpy(np.float64), codes.astype(np.int64),
                    [str(v) for v in names])


def prepare_vectors(X: np.ndarray, scale: str = "minmax", unit_rows: bool = True) -> np.ndarray:
    """Scale the columns of a numeric table, then optionally scale every row to unit L2 norm.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features), float64
    scale : {"none", "minmax", "standard"}, default "minmax"
        ``MinMaxScaler`` (keeps X >= 0, so NMF applies), ``StandardScaler``, or nothing.
    unit_rows : bool, default True
        ``sklearn.preprocessing.normalize`` (rows of zeros stay zero).

    Returns
    -------
    ndarray of shape (n_samples, n_features), float64

    Examples
    --------
    >>> prepare_vectors(np.array([[0.0, 2.0], [1.0, 4.0]])).round(3).tolist()
    [[0.0, 0.0], [0.707, 0.707]]
    """
    if scale == "minmax":
        X = MinMaxScaler().fit_transform(X)
    elif scale == "standard":
        X = StandardScaler().fit_transform(X)
    elif scale != "none":
        raise ParameterError(f"scale={scale!r}: choose 'none', 'minmax' or 'standard'.")
    return normalize(X) if unit_rows else np.asarray(X, dtype=np.float64)


# -- output ---------------------------------------------------------------------------------
def write_text(path: Path, text: str) -> None:
    """Write a text file atomically (:func:`sphdist.io.atomic_path`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically."""
    write_text(path, json.dumps(obj, indent=1, default=float) + "\n")


def save_figure(fig: Any, path: Path) -> None:
    """Save a matplotlib figure as PNG atomically and close it."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    with atomic_path(path) as tmp:
        tmp.write_bytes(buf.getvalue())


def write_report(out_dir: Path, name: str, title: str, lines: list[str], results: Any,
                 plot: Callable[[Any, Path], None], t_start: float) -> None:
    """Finish a table's report: the figure link and wall time, then ``name``.md/.json/.png.

    Writes ``out_dir/<name>.md`` (``lines`` plus the figure and the wall time since
    ``t_start``), ``<name>.json`` (``results``) and ``<name>.png`` (``plot(results, path)``),
    and echoes the markdown.
    """
    lines += [f"![{title}]({name}.png)", "",
              f"Total wall time {time.perf_counter() - t_start:.0f} s. {environment()}.", ""]
    write_text(out_dir / f"{name}.md", "\n".join(lines))
    write_json(out_dir / f"{name}.json", results)
    plot(results, out_dir / f"{name}.png")
    click.echo("\n".join(lines))


def environment() -> str:
    """One line naming the versions and cores used, for the table footers."""
    import platform
    from importlib.metadata import version

    return (f"Python {platform.python_version()}, scikit-learn {version('scikit-learn')}, "
            f"dask {version('dask')}, numpy {version('numpy')}, {os.cpu_count()} cores")
