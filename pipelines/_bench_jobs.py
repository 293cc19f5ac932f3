"""The in-process jobs of ``pipelines/benchmark.py``: the bare SpMM floor and the peers.

Each runs in a fresh process, started by the benchmark under :mod:`_bench_monitor` (which
measures the whole process: wall seconds, peak RSS, bytes written)::

    python pipelines/_bench_jobs.py KIND '{"path": ".../corpus.zarr", "r": 100, ...}'

and prints one JSON line with the seconds it measured inside (reading X, fitting). KIND is

* ``bare``: one single-process, one-thread SciPy pass ``A = X_c^T U``, ``X_c A^T`` over the
  chunks of the corpus (one chunk in memory at a time, the read timed apart), twice: with U
  of all m rows (the pass of the earlier benchmark) and with U on the rows of the features
  that occur in the corpus (X_c sliced to those rows off the clock); it also counts those
  features (a first reading pass);
* ``sklearn``: scikit-learn ``TruncatedSVD(algorithm="randomized", n_iter=5)`` +
  ``sklearn.preprocessing.normalize`` (unit rows: the embedding Spherical PCA gives), on X read
  into memory as one CSR matrix (documents as rows);
* ``gensim``: gensim ``LsiModel`` (one pass, ``chunksize`` 20000) on the same CSR matrix, then
  the documents projected (``X U``) and normalised;
* ``bae``: :class:`sphdist.BAE` on the corpus as a dask array on the LocalCluster
  ``sphdist fit`` starts by default (:func:`sphdist.jobs.cluster.connect`), its embedding
  written to a zarr array beside the corpus, as ``sphdist fit`` writes V to its model.

References
----------
.. [1] Halko, N., Martinsson, P.-G. and Tropp, J. A. (2011). Finding Structure with Randomness.
   SIAM Review 53(2) (scikit-learn's randomized SVD, and BAE's).
.. [2] Rehurek, R. (2011). Subspace Tracking for Latent Semantic Analysis. ECIR (gensim's
   one-pass LSI).
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def _corpus(path: str) -> Any:
    from sphdist.io.corpus import Corpus

    return Corpus(path)


def bare(path: str, r: int, seed: int) -> dict[str, Any]:
    """Seconds of one bare SpMM pass (all m rows; occurring rows) and the occurring features."""
    from threadpoolctl import threadpool_limits

    corpus = _corpus(path)
    m = corpus.shape[0]
    occurs = np.zeros(m, dtype=bool)
    for i in range(corpus.n_chunks):  # first pass: which features occur
        occurs |= corpus.read_chunk(i).getnnz(axis=1) > 0
    rows = np.flatnonzero(occurs)
    U, _ = np.linalg.qr(np.random.RandomState(seed).standard_normal((m, r)))
    U_rows = np.ascontiguousarray(U[rows])
    seconds = {"read_s": 0.0, "bare_all_rows_s": 0.0, "bare_occurring_rows_s": 0.0}
    with threadpool_limits(limits=1):
        for i in range(corpus.n_chunks):  # one chunk in memory at a time
            t0 = time.perf_counter()
            X_c = corpus.read_chunk(i)
            t1 = time.perf_counter()
            np.asarray(X_c @ np.asarray(X_c.T @ U))
            t2 = time.perf_counter()
            X_r = X_c[rows]
            t3 = time.perf_counter()
            np.asarray(X_r @ np.asarray(X_r.T @ U_rows))
            t4 = time.perf_counter()
            seconds["read_s"] += t1 - t0
            seconds["bare_all_rows_s"] += t2 - t1
            seconds["bare_occurring_rows_s"] += t4 - t3
    return {**seconds, "n_features": m, "occurring_features": int(rows.size)}


def _in_memory(path: str) -> Any:
    """X as one CSR matrix (n documents x m features), scikit-learn's orientation."""
    import scipy.sparse as sp

    corpus = _corpus(path)
    Xc = sp.hstack([corpus.read_chunk(i) for i in range(corpus.n_chunks)], format="csc")
    return Xc.T.tocsr()


def sklearn(path: str, r: int, seed: int) -> dict[str, Any]:
    """scikit-learn TruncatedSVD (randomized, n_iter=5) + row normalisation."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.preprocessing import normalize

    t0 = time.perf_counter()
    X = _in_memory(path)
    t1 = time.perf_counter()
    Z = TruncatedSVD(n_components=r, algorithm="randomized", n_iter=5,
                     random_state=seed).fit_transform(X)
    Z = normalize(Z)
    return {"load_s": t1 - t0, "fit_s": time.perf_counter() - t1, "shape": list(Z.shape)}


def gensim(path: str, r: int, seed: int) -> dict[str, Any]:
    """One-pass gensim LsiModel, then the documents projected and normalised."""
    import logging

    from gensim.matutils import Sparse2Corpus
    from gensim.models import LsiModel
    from sklearn.preprocessing import normalize

    logging.getLogger("gensim").setLevel(logging.WARNING)
    t0 = time.perf_counter()
    X = _in_memory(path)
    t1 = time.perf_counter()
    lsi = LsiModel(Sparse2Corpus(X, documents_columns=False), num_topics=r, id2word=None,
                   onepass=True, chunksize=20000, random_seed=seed)
    U = np.zeros((X.shape[1], r))  # gensim's terms end at the largest feature that occurs
    U[: lsi.projection.u.shape[0]] = lsi.projection.u
    Z = normalize(np.asarray(X @ U))
    return {"load_s": t1 - t0, "fit_s": time.perf_counter() - t1, "shape": list(Z.shape)}


def bae(path: str, r: int, seed: int) -> dict[str, Any]:
    """BAE of sphdist on the default LocalCluster, its embedding written to zarr."""
    import dask.array as da

    from sphdist.jobs.cluster import connect
    from sphdist.methods.bae import BAE

    target = Path(path).with_suffix(".bae-embedding.zarr")
    t0 = time.perf_counter()
    with connect():
        t1 = time.perf_counter()
        X = _corpus(path).to_dask().T
        est = BAE(n_components=r, random_state=seed).fit(X)
        Z = est.embedding_
        da.to_zarr(Z if isinstance(Z, da.Array) else da.from_array(Z), str(target),
                   overwrite=True)
        fit_s = time.perf_counter() - t1
    shutil.rmtree(target, ignore_errors=True)
    return {"cluster_s": t1 - t0, "fit_s": fit_s, "shape": list(Z.shape)}


JOBS = {"bare": bare, "sklearn": sklearn, "gensim": gensim, "bae": bae}


if __name__ == "__main__":
    kind, args = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(JOBS[kind](**args)))
