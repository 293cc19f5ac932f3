"""The export job: a model's embeddings with their document ids, as Parquet, CSV or .npy.

``sphdist export`` is :class:`ExportRequest`, run by :func:`sphdist.jobs.run`; the embeddings are
read through :func:`sphdist.jobs.embedding.open_embedding_source`, chunk by chunk.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from sphdist.errors import ParameterError
from sphdist.io import Output, exists, open_output
from sphdist.io._policy import refuse_existing
from sphdist.io.model import open_model
from sphdist.jobs._lifecycle import Request, located
from sphdist.jobs.embedding import _SCAN_DOCS, EmbeddingSource, _spans, open_embedding_source

__all__ = ["ExportRequest", "EXPORT_FORMATS", "EXPORT_SUFFIXES"]

EXPORT_FORMATS = ("parquet", "npy", "csv")
#: The formats of ``export``, by the suffix of its output.
EXPORT_SUFFIXES = {".parquet": "parquet", ".npy": "npy", ".csv": "csv"}


@dataclasses.dataclass(frozen=True)
class ExportRequest(Request):
    """``sphdist export``: the embeddings with their document ids, for downstream use.

    Run by :func:`sphdist.jobs.run`, which returns a dict: ``output``, ``format``,
    ``n_documents``, ``n_components``, ``sidecar`` (npy only).

    Parameters
    ----------
    model : path-like
        A ``model.zarr``: its V embeds its training corpus; other documents are read from the
        ``embedding.zarr`` given as ``input``.
    output : path-like
        The file to write: ``*.parquet``, ``*.npy`` or ``*.csv``, its suffix tells the format
        (:data:`EXPORT_SUFFIXES`).
    format : {"parquet", "npy", "csv"}, optional
        Default: the one the suffix of ``output`` names; given, it must agree with the suffix
        (or name the format of an output whose suffix names none, such as ``embeddings``).
        ``"parquet"``: one row per document, columns ``doc_id`` (string), ``label`` (string,
        only when the corpus has labels) and ``e0`` ... ``e{r-1}`` (float64), written row group
        by row group with ``pyarrow.parquet.ParquetWriter``. ``"csv"``: the same columns, with
        a header line, each float in the fewest digits that read back equal (Python's repr).
        ``"npy"``: an array of shape (n, r), float64, one row per document (scikit-learn's
        orientation), plus a sidecar ``<output stem>.ids.csv`` (columns ``doc_id``, ``label``;
        row i describes row i).
    input : path-like, optional
        The training corpus or an ``embedding.zarr`` (see :func:`open_embedding_source`).
    overwrite : bool, default False
        Replace an existing ``output`` (and its sidecar).
    chunk_size : int, default 65536
        Documents read and written at a time.

    Raises
    ------
    ParameterError
        For an unknown ``format`` or ``chunk_size < 1`` (when built); a suffix of ``output``
        that names another format or none (the message names the formats and the command
        that writes one), when run, after the output policy.

    Notes
    -----
    Run, it raises, besides what :func:`sphdist.jobs.run` raises for every command,
    OutputExistsError if the npy sidecar exists and ``overwrite`` is False, and what
    :func:`open_embedding_source` raises (a moved training corpus; swapped options).

    Written to a sibling staging file and renamed into place, so ``output`` is complete or
    absent; for npy the sidecar is renamed first, then the array. Both are held (the sidecar
    as a second output with the same policy) until their commits, each through its
    :class:`~sphdist.io.Output`. Memory: one chunk, ``chunk_size * r * 8`` bytes.
    """

    command: ClassVar[str] = "export"
    writes: ClassVar[str] = "file"
    targets: ClassVar[tuple[str, ...]] = ("model", "input", "output")
    formats: ClassVar[dict[str, str]] = EXPORT_SUFFIXES

    model: Any
    output: Any
    format: str | None = None
    input: Any = None
    overwrite: bool = False
    chunk_size: int = _SCAN_DOCS

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", located(self.model))
        object.__setattr__(self, "input", located(self.input))
        object.__setattr__(self, "output", located(self.output))
        if self.format is not None and self.format not in EXPORT_FORMATS:
            raise ParameterError(
                f"format={self.format!r}: expected one of {list(EXPORT_FORMATS)}.")
        if self.chunk_size < 1:
            raise ParameterError(f"chunk_size must be >= 1, got {self.chunk_size}.")



    @property
    def sidecar(self) -> Any:
        """The ids of an npy export, ``<output stem>.ids.csv`` beside it (None otherwise)."""
        if self.written != "npy":
            return None
        return self.output.with_name(self.output.name.removesuffix(".npy") + ".ids.csv")

    def inputs(self) -> tuple[Any, ...]:
        """The model and, if given, the documents."""
        return (self.model, self.input)

    def execute(self, held: Output, prepared: None) -> dict[str, Any]:
        """Write the rows chunk by chunk into ``held`` (and the npy sidecar), then commit."""
        output, sidecar, format = held.path, self.sidecar, self.written
        # npy: a second output, held with the policy of the first
        with (open_output(sidecar, kind="file", inputs=self.inputs()) if sidecar is not None
              else contextlib.nullcontext()) as side:
            if not self.overwrite and side is not None and exists(sidecar):
                refuse_existing(output)
            src = open_embedding_source(self.model, self.input, verb="export",
                                        rest={"output": str(output)})
            open_model(self.model).U  # noqa: B018 - a damaged model is refused, as transform does
            r, n = src.V.shape
            with held.file() as staging:
                if format == "parquet":
                    _write_parquet(src, staging, self.chunk_size)
                elif format == "csv":
                    _write_csv(src, staging, self.chunk_size)
                else:
                    with side.file() as side_staging:
                        _write_npy(src, staging, side_staging, self.chunk_size)
        result: dict[str, Any] = {
            "output": str(output), "format": format, "n_documents": int(n),
            "n_components": int(r),
        }
        if sidecar is not None:
            result["sidecar"] = str(sidecar)
        return result


def _write_parquet(src: EmbeddingSource, path: Path, chunk_size: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    r, n = src.V.shape
    fields = [pa.field("doc_id", pa.string())]
    if src.labels is not None:
        fields.append(pa.field("label", pa.string()))
    fields += [pa.field(f"e{i}", pa.float64()) for i in range(r)]
    schema = pa.schema(fields)
    with pq.ParquetWriter(str(path), schema) as writer:
        for a, b in _spans(n, chunk_size):
            block = np.asarray(src.V[:, a:b].compute())
            columns: list[Any] = [pa.array(src.doc_ids[a:b].tolist(), pa.string())]
            if src.labels is not None:
                columns.append(pa.array(src.label_strings(np.arange(a, b)), pa.string()))
            columns += [pa.array(block[i]) for i in range(r)]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema))


def _write_csv(src: EmbeddingSource, path: Path, chunk_size: int) -> None:
    r, n = src.V.shape
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["doc_id", *(["label"] if src.labels is not None else []),
                         *(f"e{i}" for i in range(r))])
        for a, b in _spans(n, chunk_size):
            block = np.asarray(src.V[:, a:b].compute(), dtype=np.float64).T
            labels = src.label_strings(np.arange(a, b)) if src.labels is not None else None
            for j in range(b - a):
                head = [src.doc_ids[a + j]]
                if labels is not None:
                    head.append("" if labels[j] is None else labels[j])
                writer.writerow([*head, *(repr(float(x)) for x in block[j])])


def _write_npy(src: EmbeddingSource, path: Path, sidecar: Path, chunk_size: int) -> None:
    r, n = src.V.shape
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n, r))
    with open(sidecar, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["doc_id", "label"])
        for a, b in _spans(n, chunk_size):
            out[a:b] = np.asarray(src.V[:, a:b].compute()).T
            labels = src.label_strings(np.arange(a, b))
            writer.writerows(
                (d, "" if lab is None else lab)
                for d, lab in zip(src.doc_ids[a:b], labels, strict=True)
            )
    out.flush()
    del out
