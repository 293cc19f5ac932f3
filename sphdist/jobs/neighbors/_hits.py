"""The tables of neighbours: their rows (:func:`hits_table`) and their files (:func:`write_hits`).

Every table a search writes (``queries``, ``queries`` of ids, ``all``) has the columns
:data:`HIT_COLUMNS`, and is Parquet, JSON Lines or CSV by the suffix of its output
(:data:`HIT_FORMATS`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sphdist.core.neighbors import angle_degrees
from sphdist.io import Output, output_format
from sphdist.jobs.embedding import EmbeddingSource

# Output formats of the tables, by file suffix, and their columns: their doc comments stand
# where the package re-exports them (__init__.py), which is where Sphinx reads them.
HIT_FORMATS = {".parquet": "parquet", ".jsonl": "jsonl", ".csv": "csv"}
HIT_COLUMNS = ("query", "query_label", "rank", "doc_id", "label", "angle", "cosine")


def hits_table(
    source: EmbeddingSource, queries: Sequence[str], idx: np.ndarray, cos: np.ndarray,
    query_labels: Sequence[str | None] | None = None, *, doc_ids: np.ndarray | None = None,
) -> dict[str, list[Any]]:
    """The rows of search results, columns :data:`HIT_COLUMNS` (as lists).

    Parameters
    ----------
    source : EmbeddingSource
        The documents searched.
    queries : sequence of str
        What each query was: a text, or a document id.
    idx, cos : ndarrays of shape (n_q, k), int64 and float64
        From :func:`search`.
    query_labels : sequence of str or None, optional
        The label of each query document (None: text queries, no label).
    doc_ids : ndarray of shape (n_q, k), object, optional
        The ids of the documents ``idx`` (read by the caller: one query reads the chunks of
        ids that hold its hits); default: read from ``source``.

    Returns
    -------
    dict of str to list
        ``angle`` in degrees, in [0, 180]; rows where fewer than k were found are left out.
    """
    n_q, k = idx.shape
    found = idx >= 0
    q_of = np.repeat(np.arange(n_q), k)[found.ravel()]
    rank = np.tile(np.arange(1, k + 1), n_q)[found.ravel()]
    docs = idx[found]
    c = cos[found]
    return {
        "query": [queries[i] for i in q_of],
        "query_label": [None if query_labels is None else query_labels[i] for i in q_of],
        "rank": rank.astype(np.int64).tolist(),
        "doc_id": [str(d) for d in (source.doc_ids[docs] if doc_ids is None
                                    else np.asarray(doc_ids)[found])],
        "label": source.label_strings(docs),
        "angle": angle_degrees(c).tolist(),
        "cosine": c.astype(np.float64).tolist(),
    }


def _format(output: Path, format: str | None, redo: Callable[[Path], str] | None = None) -> str:
    return output_format(output, format, HIT_FORMATS, redo=redo)


def _write_table(columns: dict[str, list[Any]], path: Path, fmt: str) -> None:
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        types = {"rank": pa.int64(), "angle": pa.float64(), "cosine": pa.float64()}
        table = pa.table({name: pa.array(values, types.get(name, pa.string()))
                          for name, values in columns.items()})
        pq.write_table(table, str(path))
        return
    names = list(columns)
    if fmt == "csv":
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(names)
            writer.writerows(["" if v is None else repr(v) if isinstance(v, float) else v
                              for v in row] for row in zip(*columns.values(), strict=True))
        return
    with open(path, "w", encoding="utf-8") as f:
        for row in zip(*columns.values(), strict=True):
            f.write(json.dumps(dict(zip(names, row, strict=True))) + "\n")


def write_hits(
    columns: dict[str, list[Any]], output: Output, *, format: str | None = None,
) -> dict[str, Any]:
    """Write search results (from :func:`hits_table`) into a held table, atomically.

    Parameters
    ----------
    columns : dict of str to list
    output : Output
        The held table (:func:`sphdist.jobs.run` holds it for a
        :class:`BatchNeighborsRequest` and a :class:`KnnGraphRequest`), committed through
        :meth:`sphdist.io.Output.file`: refused if its lock is no longer held.
    format : {"parquet", "jsonl", "csv"}, optional
        Default: from the suffix of ``output`` (:data:`HIT_FORMATS`); given, it must agree
        with it.

    Returns
    -------
    dict
        ``output``, ``format``, ``n_rows``.

    Raises
    ------
    OutputLockedError
        If ``output``'s lock is no longer held; nothing is written.
    ParameterError
        If the suffix names another format than ``format``, or, without ``format``, none
        (:func:`sphdist.io.output_format`).
    """
    fmt = _format(output.path, format)
    with output.file() as staging:
        _write_table(columns, staging, fmt)
    return {"output": str(output.path), "format": fmt,
            "n_rows": len(next(iter(columns.values()), []))}
