"""The transform job: embed the documents of a stored corpus with a fitted model.

The function behind ``sphdist transform``; batch jobs and pipelines call it directly. It runs on
whatever Dask scheduler is active (see :func:`sphdist.jobs.cluster.connect`).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import dask.array as da
import numpy as np

from sphdist.core import _device, graph
from sphdist.errors import (
    CorpusMismatchError,
    InsufficientMemoryError,
    Remedy,
    remedy,
)
from sphdist.io import Output, absolute, committed, hold_output
from sphdist.io._policy import check_output_kind, check_output_place, refuse_existing
from sphdist.io.corpus import open_input
from sphdist.io.embedding import Embedding, EmbeddingWriter
from sphdist.io.model import open_model
from sphdist.jobs.cluster import check_workers_see, task_path
from sphdist.jobs.info import check_roles, plural, warn_if_stopped

__all__ = ["transform_corpus", "check_transform"]

logger = logging.getLogger("sphdist")


def transform_corpus(
    model: str | os.PathLike[str],
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    overwrite: bool = False,
    progress: bool | str = False,
    device: str = "cpu",
) -> Embedding:
    """The out-of-sample embedding of a corpus by a fitted model: the exact V-step, chunk by chunk.

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
    progress : {False, True, "log"}, default False
        Chunks done / total: a tqdm bar on stderr (True) or INFO lines on the ``sphdist``
        logger ("log"), see :func:`sphdist._progress.progress`.
    device : {"cpu", "cuda"}, default "cpu"
        Where each chunk's ``U^T X_c`` and normalisation run
        (:mod:`sphdist.core._device`); V is written from the host, float64 either way.

    Returns
    -------
    Embedding
        The written embedding: V of shape (r, n), float64, column j the unit vector
        ``v_j = U^T x_j / ||U^T x_j||_2`` (Liu et al. 2019, Eq. 3.12 with lam = 2, the exact
        minimiser of ``||x_j - U v||_2`` over the unit sphere), with the corpus' document ids
        and labels. A document with ``U^T x_j = 0`` (empty) gets ``e_1`` and is flagged in
        ``degenerate``.

    Raises
    ------
    ParameterError
        If ``model`` and ``input`` look swapped (:func:`sphdist.jobs.info.check_roles`).
    CorpusMismatchError
        If the corpus' feature scheme, number of features, idf or tf-idf options differ from
        the model's (see :meth:`sphdist.io.model.Model.check_compatible`); the message's remedy is
        the commands that re-ingest and embed its documents (:func:`check_transform`).
    OutputExistsError
        If ``output`` exists and ``overwrite`` is False.
    OutputLockedError
        If another process is writing ``output`` (``overwrite`` does not take it over).
    DeviceError
        With ``device="cuda"``, if CuPy or a CUDA device is missing (checked first).
    InsufficientMemoryError
        If the device runs out of memory; nothing is written (the staging store is removed)
        and the message holds the same transform on the CPU.
    InputNotFoundError, CorpusFormatError, ModelFormatError
        For a missing or unreadable input.

    Notes
    -----
    Logs one INFO line before the work (documents, chunks, model) and counts chunks done on
    ``progress``. The checkpoint of a fit that stopped before ``max_iter`` without converging
    is used with a warning on the ``sphdist`` logger
    (:func:`sphdist.jobs.info.warn_if_stopped`).

    One read of every chunk of X, on the active Dask scheduler; each task writes its columns of
    V (r n_c float64) to the staging store, so the driver holds only U (m r floats). For the
    training corpus of a model fitted with lam = "exact" (lam = 2), the result equals the
    model's V: the last pass of the fit computed V by this same step from the stored U.

    The output is held (:func:`sphdist.io.hold_output`) from the start until the commit,
    which is that hold's (:meth:`sphdist.io.Output.commit`).
    """
    with hold_output(output, kind="embedding", inputs=(model, input)) as held:
        return _transform(held, model, input, output, overwrite=overwrite, progress=progress,
                          device=device)


def _transform(
    held: Output, model: str | os.PathLike[str], input: str | os.PathLike[str],
    output: str | os.PathLike[str], *, overwrite: bool, progress: bool | str, device: str,
) -> Embedding:
    """:func:`transform_corpus`, its output ``held`` (written through it)."""
    _device.check_device(device)
    # absolute here, once: the workers' working directories are their own
    model, input, output = task_path(model), task_path(input), task_path(output, output=True)
    fitted, source = check_transform(model, input, output, overwrite=overwrite)
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
        starts = da.from_array(np.asarray(writer.offsets, dtype=np.int64), chunks=1)
        counts = graph.per_chunk(
            _embed_chunk, X, graph.broadcast(U), "ik", starts, "j",
            staging=str(writer.staging), device=device, dtype=object,
        )
        try:
            blocks = list(graph.compute(counts, "transform", progress))  # in chunk order
        except Exception as exc:
            if not _device.is_out_of_memory(exc):
                raise
            again = Remedy("transform", {"model": str(model), "input": str(input),
                                         "output": str(output)},
                           {"overwrite": True} if overwrite else {})
            raise InsufficientMemoryError(
                f"the {device} device ran out of memory while embedding {input} "
                f"({type(exc).__name__}: {str(exc).strip()}); nothing was written to {output}. "
                f"To resolve this, run it on the CPU: {remedy(again)}, or free the "
                "device's memory (other processes on it: `nvidia-smi`) and run it again."
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
    output: str | os.PathLike[str], *, overwrite: bool = False,
) -> tuple[Any, Any]:
    """Everything :func:`transform_corpus` checks before computing, cheaply, on no cluster.

    Parameters
    ----------
    model, input, output, overwrite
        As for :func:`transform_corpus`.

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
    OutputExistsError
        If ``output`` exists and ``overwrite`` is False.
    """
    from sphdist.jobs.embedding import mismatch, reingest_remedy

    check_roles("transform", model, input, {"output": str(output)})
    check_output_place(output, "embedding", (model, input))  # as transform_corpus will
    check_output_kind(output, "embedding")
    fitted = open_model(model)
    source = open_input(input)
    try:
        fitted.check_compatible(source, input)
    except CorpusMismatchError:
        if getattr(source, "attrs", {}).get("sphdist", {}).get("kind") != "corpus":
            raise
        raise CorpusMismatchError(
            f"{input} does not match the model {fitted.path}: {mismatch(fitted, source)}. "
            f"To resolve this, {reingest_remedy(fitted, source, input, output=output)}."
        ) from None
    if committed(output) and not overwrite:
        refuse_existing(output)
    return fitted, source


def _embed_chunk(
    X_c: Any, U: np.ndarray, start: np.ndarray, staging: str, device: str = "cpu"
) -> np.ndarray:
    """Exact V-step of one chunk, written to the staging embedding.

    Returns the digests :func:`~sphdist.io.embedding.write_embedding_block` computed of what
    it wrote, and ``n_degenerate``, the chunk's documents with ``U^T x = 0``.
    """
    from sphdist.core import kernels
    from sphdist.io.embedding import write_embedding_block

    if device != "cpu":  # the product and the V-step on the device, the write from the host
        X_c, U = _device.to_device(X_c, device), _device.shared_copy(U, device)
    A = _device.array_module(U).asarray(X_c.T @ U).T
    V, degenerate = kernels.v_step(A, None, 2.0)
    V, degenerate = _device.to_host(V), _device.to_host(degenerate)
    written = write_embedding_block(staging, int(start[0]), V, degenerate)
    return {**written, "n_degenerate": int(degenerate.sum())}
