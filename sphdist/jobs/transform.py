"""The transform job: embed the documents of a stored corpus with a fitted model.

``sphdist transform`` is :class:`TransformRequest`, run by :func:`sphdist.jobs.run` (batch jobs
and pipelines build the same request). It runs on whatever Dask scheduler is active (see
:func:`sphdist.jobs.cluster.connect`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, ClassVar

import dask.array as da
import numpy as np

from sphdist._validation import StrOptions, check_param
from sphdist.core import _device, graph, kernels
from sphdist.errors import (
    CorpusMismatchError,
    InsufficientMemoryError,
    remedy,
)
from sphdist.io import Output, absolute
from sphdist.io.corpus import open_input
from sphdist.io.embedding import Embedding, EmbeddingWriter, write_embedding_block
from sphdist.io.model import open_model
from sphdist.jobs._lifecycle import Request, located
from sphdist.jobs._reingest import mismatch, reingest_remedy
from sphdist.jobs.cluster import check_workers_see, task_path
from sphdist.jobs.info import check_roles, plural, warn_if_stopped

__all__ = ["TransformRequest", "check_transform"]

logger = logging.getLogger("sphdist")


@dataclasses.dataclass(frozen=True)
class TransformRequest(Request):
    """``sphdist transform``: the out-of-sample embedding of a corpus by a fitted model.

    Run it with :func:`sphdist.jobs.run`: ``run(TransformRequest("m.zarr", "c.zarr",
    "e.zarr"))`` computes the exact V-step, chunk by chunk, and commits ``output``.

    Parameters
    ----------
    model : path-like
        A ``model.zarr``.
    input : path-like
        A corpus in the model's feature space, with the model's idf (ingested with ``like``
        the model, or the training corpus itself).
    output : path-like
        The ``embedding.zarr`` to write (layout in :mod:`sphdist.io.embedding`), committed
        atomically.
    overwrite : bool, default False
        Replace an existing ``output``.
    device : {"cpu", "cuda"}, default "cpu"
        Where each chunk's ``U^T X_c`` and normalisation run
        (:mod:`sphdist.core._device`); V is written from the host, float64 either way.
    progress : {False, True, "log"}, default False
        Chunks done / total: a tqdm bar on stderr (True) or INFO lines on the ``sphdist``
        logger ("log"), see :func:`sphdist._progress.progress`.

    Raises
    ------
    ParameterError
        If ``device`` is not one of "cpu", "cuda" (when built).
    ValueError
        If a path is empty or names an unknown protocol (:func:`sphdist.io.location`).

    Notes
    -----
    :func:`~sphdist.jobs.run` returns the written :class:`~sphdist.io.embedding.Embedding`:
    V of shape (r, n), float64, column j the unit vector ``v_j = U^T x_j / ||U^T x_j||_2``
    (Liu et al. 2019, Eq. 3.12 with lam = 2, the exact minimiser of ``||x_j - U v||_2`` over
    the unit sphere), with the corpus' document ids and labels. A document with
    ``U^T x_j = 0`` (empty) gets ``e_1`` and is flagged in ``degenerate``. It raises, besides
    what :func:`~sphdist.jobs.run` raises for every command:

    - ParameterError, if ``model`` and ``input`` look swapped
      (:func:`sphdist.jobs.info.check_roles`);
    - CorpusMismatchError, if the corpus' feature scheme, number of features, idf or tf-idf
      options differ from the model's (:meth:`sphdist.io.model.Model.check_compatible`);
      the remedy is the commands that re-ingest and embed its documents;
    - DeviceError, with ``device="cuda"``, if CuPy or a CUDA device is missing (checked
      before the output is held);
    - InsufficientMemoryError, if the device runs out of memory; nothing is written (the
      staging store is removed) and the message holds the same transform on the CPU;
    - InputNotFoundError, CorpusFormatError, ModelFormatError, for a missing or unreadable
      input.

    Logs one INFO line before the work (documents, chunks, model) and counts chunks done on
    ``progress``. The checkpoint of a fit that stopped before ``max_iter`` without converging
    is used with a warning on the ``sphdist`` logger
    (:func:`sphdist.jobs.info.warn_if_stopped`).

    One read of every chunk of X, on the active Dask scheduler; each task writes its columns of
    V (r n_c float64) to the staging store, so the driver holds only U (m r floats). For the
    training corpus of a model fitted with lam = "exact" (lam = 2), the result equals the
    model's V: the last pass of the fit computed V by this same step from the stored U.
    """

    command: ClassVar[str] = "transform"
    writes: ClassVar[str] = "embedding"
    targets: ClassVar[tuple[str, ...]] = ("model", "input", "output")

    model: Any
    input: Any
    output: Any
    overwrite: bool = False
    device: str = "cpu"
    progress: bool | str = False

    def __post_init__(self) -> None:
        for name in self.targets:
            object.__setattr__(self, name, located(getattr(self, name)))
        check_param("device", self.device, StrOptions(set(_device.DEVICES)),
                    caller="TransformRequest")

    def inputs(self) -> tuple[Any, ...]:
        """The model and the corpus."""
        return (self.model, self.input)

    def prepare(self) -> tuple[Any, Any]:
        """The open model and corpus, checked against each other and the device (no cluster)."""
        opened = check_transform(self.model, self.input, self.output)
        _device.check_device(self.device)
        return opened

    def execute(self, held: Output, prepared: tuple[Any, Any]) -> Embedding:
        """Embed every chunk of the corpus into ``held``'s staging store, then commit it."""
        # absolute here, once: the workers' working directories are their own
        model, input = task_path(self.model), task_path(self.input)
        output = task_path(self.output, output=True)
        fitted, source = prepared
        if (model, input) != (self.model, self.input):  # opened by the names given
            fitted, source = check_transform(model, input, output)
        warn_if_stopped(fitted, "transform")
        check_workers_see(graph.active_client(), inputs=(input,), outputs=(output,))
        logger.info("transform: embedding %s of %s in %s chunks with %s (r=%d)",
                    plural(source.n_documents, "document"), input, len(source.chunks), model,
                    fitted.U.shape[1])
        U = fitted.U
        X = source.to_dask()
        if X.numblocks[0] != 1:
            X = X.rechunk({0: -1})
        n = source.n_documents
        with EmbeddingWriter(held, n_components=U.shape[1], chunks=source.chunks) as writer:
            if writer.even:  # each task writes its chunk's zarr chunk
                starts = da.from_array(np.asarray(writer.offsets, dtype=np.int64), chunks=1)
                counts = graph.per_chunk(
                    _embed_chunk, X, graph.broadcast(U), "ik", starts, "j",
                    staging=str(writer.staging), device=self.device, dtype=object,
                )
            else:
                counts = _embedded_in_blocks(X, U, writer, self.device)
            try:
                blocks = list(graph.compute(counts, "transform", self.progress))  # chunk order
            except Exception as exc:
                if not _device.is_out_of_memory(exc):
                    raise
                again = dataclasses.replace(self, model=model, input=input, output=output)
                raise InsufficientMemoryError(
                    f"the {self.device} device ran out of memory while embedding {input} ("
                    f"{type(exc).__name__}: {str(exc).strip()}); nothing was written to "
                    f"{output}. To resolve this, run it on the CPU: "
                    + remedy(again.remedy(device='cpu'))
                    + ", or free the device's memory (other processes on it: `nvidia-smi`) and "
                    "run it again."
                ) from None
            n_degenerate = sum(int(b["n_degenerate"]) for b in blocks)
            return writer.commit(
                blocks=blocks, doc_ids=source.doc_ids, labels=source.labels,
                label_names=source.label_names,
                attrs={
                    "model": {"path": absolute(model), "u_sha256": fitted.fingerprint},
                    "corpus": {
                        "path": absolute(input), "fingerprint": source.fingerprint,
                        "shape": [source.n_features, n],
                    },
                    "n_degenerate": n_degenerate,
                    "method": "exact V-step, Liu et al. 2019 Eq. 3.12 with lam = 2",
                },
            )


def check_transform(
    model: str | os.PathLike[str], input: str | os.PathLike[str],
    output: str | os.PathLike[str],
) -> tuple[Any, Any]:
    """Open a model and a corpus for a transform, and check them against each other (no cluster).

    Parameters
    ----------
    model, input, output
        As for :class:`TransformRequest` (``output`` only for the remedies).

    Returns
    -------
    (Model, Corpus)
        The open model and corpus.

    Raises
    ------
    ParameterError
        If ``model`` and ``input`` look swapped (:func:`sphdist.jobs.info.check_roles`).
    CorpusMismatchError
        If the corpus is not in the model's feature space or weighting; the remedy is the
        jobs that re-ingest its documents like the model and embed them
        (:func:`sphdist.jobs.embedding.reingest_remedy`).
    InputNotFoundError, CorpusFormatError, ModelFormatError
        For a missing or unreadable input.
    """
    check_roles("transform", model, input, {"output": str(output)})
    fitted = open_model(model)
    source = open_input(input)
    try:
        fitted.check_compatible(source, input)
    except CorpusMismatchError:
        if getattr(source, "attrs", {}).get("sphdist", {}).get("kind") != "corpus":
            raise
        raise CorpusMismatchError(
            f"{input} does not match the model {fitted.path}: {mismatch(fitted, source)}. To "
            "resolve this, " + reingest_remedy(fitted, source, input, output=output) + "."
        ) from None
    return fitted, source


def _v_step(X_c: Any, U: np.ndarray, device: str) -> tuple[np.ndarray, np.ndarray]:
    """Exact V-step of one chunk (Liu et al. 2019, Eq. 3.12, lam = 2), on the host after.

    Returns V (r, n_c) and ``degenerate`` (n_c,), bool: the documents with ``U^T x = 0``.
    Each column is its document's alone, so the same bits however the documents are chunked.
    """
    if device != "cpu":  # the product and the V-step on the device, the write from the host
        X_c, U = _device.to_device(X_c, device), _device.shared_copy(U, device)
    A = _device.array_module(U).asarray(X_c.T @ U).T
    V, degenerate = kernels.v_step(A, None, 2.0)
    return _device.to_host(V), _device.to_host(degenerate)


def _embed_chunk(
    X_c: Any, U: np.ndarray, start: np.ndarray, staging: str, device: str = "cpu"
) -> dict[str, Any]:
    """Exact V-step of one chunk, written to the staging embedding.

    Returns the digests :func:`~sphdist.io.embedding.write_embedding_block` computed of what
    it wrote, and ``n_degenerate``, the chunk's documents with ``U^T x = 0``.
    """
    V, degenerate = _v_step(X_c, U, device)
    written = write_embedding_block(staging, int(start[0]), V, degenerate)
    return {**written, "n_degenerate": int(degenerate.sum())}


def _embedded_in_blocks(X: da.Array, U: np.ndarray, writer: EmbeddingWriter,
                        device: str) -> da.Array:
    """The V-step of uneven chunks, written in blocks of ``writer.chunk`` columns.

    Each chunk's V, with ``degenerate`` as one more row (0.0 or 1.0), rechunked by dask to
    the embedding's zarr chunks; one task writes each block (:func:`_write_block`). The
    result is as :func:`_embed_chunk`'s, one element per block, in order.
    """
    r = U.shape[1]
    VD = da.blockwise(
        _stacked_v_step, "kj", X, "ij", graph.broadcast(U), "ik", concatenate=True,
        align_arrays=False, adjust_chunks={"k": r + 1}, dtype=np.float64,
        meta=np.empty((0, 0)), device=device,
    ).rechunk((r + 1, writer.chunk))
    return VD.map_blocks(_write_block, str(writer.staging), writer.chunk, drop_axis=0,
                         chunks=((1,) * VD.numblocks[1],), dtype=object,
                         meta=np.empty((0,), dtype=object))


def _stacked_v_step(X_c: Any, U: np.ndarray, device: str = "cpu") -> np.ndarray:
    """:func:`_v_step`'s V (r, n_c) and ``degenerate`` as a last row: (r + 1, n_c) float64."""
    V, degenerate = _v_step(X_c, U, device)
    return np.vstack([np.asarray(V, dtype=np.float64), degenerate[None, :]])


def _write_block(VD: np.ndarray, staging: str, c: int, block_id: Any = None) -> np.ndarray:
    """Write a block of :func:`_stacked_v_step` rows as zarr chunk ``block_id[0]`` (a task)."""
    V, degenerate = VD[:-1], VD[-1] != 0
    written = write_embedding_block(staging, block_id[0] * c, V, degenerate)
    return np.array([{**written, "n_degenerate": int(degenerate.sum())}], dtype=object)
