"""Writing ``model.zarr``: a checkpoint of the solver, committed whole.

The layout is :mod:`sphdist.io.model`'s.

:func:`save_checkpoint` writes U, the state a resumed fit needs and, in the final model, V
(written by the workers, chunk by chunk, :class:`ScratchV` keeping V between iterations of a
fit that needs it), into a staging version of the output and commits it; the digests a reader
checks (:func:`u_sha256`, :func:`idf_sha256`) are computed here.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from sphdist.io._atomic import Output, discard, open_output, open_target
from sphdist.io._checked import EVERY_DIGEST, content_sha256, require_written
from sphdist.io._zarr import (
    CHECKSUMMED,
    WRITE_CONFIG,
    json_clean,
    regular_chunks,
    write_array,
    write_vector,
)

__all__ = ["FORMAT_VERSION", "KIND", "save_checkpoint", "u_sha256", "idf_sha256", "ScratchV"]

if TYPE_CHECKING:  # dask and the solver (scikit-learn) only where V is computed or a fit
    # resumed: a reader of U, idf and columns of V (``sphdist neighbors``) imports neither
    import dask.array as da

    from sphdist.core.solver import FitState
FORMAT_VERSION = 1
KIND = "model"  # the group attribute sphdist.kind


def save_checkpoint(
    out: Output | str | os.PathLike[str],
    state: FitState,
    *,
    params: dict[str, Any],
    corpus: dict[str, Any],
    idf: np.ndarray | None = None,
    vocabulary: np.ndarray | None = None,
    V: da.Array | None = None,
) -> None:
    """Write ``state`` as a complete ``model.zarr``, replacing any previous one atomically.

    Parameters
    ----------
    out : Output or path-like
        The held model directory (:func:`sphdist.io.open_output`), committed through
        :meth:`~sphdist.io.Output.commit`: refused if its lock is no longer held. A path:
        held for this call (refused with OutputLockedError if another writer holds it).
    state : FitState
        The solver state to save (U, histories; V and the partials when the fit keeps V).
    params : dict
        Solver parameters (JSON-serialisable), stored as the ``params`` attribute.
    corpus : dict
        Description of the input: ``path``, ``fingerprint``, ``shape`` and optionally
        ``feature_scheme``, ``tfidf``.
    idf : ndarray of shape (m,), float64, optional
        The corpus idf, kept so new documents can be weighted the same way.
    vocabulary : ndarray of shape (m,), str, optional
        The corpus feature names (vocabulary scheme), kept for an ingest ``like`` it and the top
        terms of each component.
    V : dask.array.Array of shape (r, n), optional
        The embedding to store (the final model, :func:`sphdist.core.solver.embedding`); each
        task writes the columns it computes. Default ``state.V`` (a fit that keeps V), else
        none: a checkpoint of U alone.

    Raises
    ------
    OSError
        If the location is not writable or full; the previous checkpoint is kept.
    OutputLockedError
        If ``out``'s lock is no longer held (or, given a path, another writer holds it);
        nothing is committed.

    Notes
    -----
    Writes ``m r * 8`` bytes for U (its zero rows compress away) and ``m * 8`` for the idf,
    plus, when V is stored, ``r n * 8`` (and ``(m r + r^2) * 8`` for the partials of a fit that
    keeps V).
    """
    if not isinstance(out, Output):  # a path: held for this call
        with open_output(out) as held:
            return save_checkpoint(held, state, params=params, corpus=corpus, idf=idf,
                                   vocabulary=vocabulary, V=V)
    staging = out.staging()
    kept = state.V is not None
    V = state.V if V is None else V
    try:
        group = zarr.open_group(store=str(staging), mode="w-")
        U = np.asarray(state.U_full, dtype=np.float64)
        write_array(group, "U", U)
        digests = {}
        partials = (("state/XVt", state.XVt), ("state/VVt", state.VVt)) if kept else ()
        for name, values in (*partials, ("idf", idf)):
            if values is not None:
                values = np.asarray(values, dtype=np.float64)
                write_array(group, name, values)
                digests[name] = content_sha256(values)
        if vocabulary is not None:
            digests["vocabulary"] = write_vector(
                group, "vocabulary", np.asarray(vocabulary, dtype=object))
        if V is not None:
            digests["V"] = _store_V(group, V)
            require_written(group["V"], out.path, "V")  # the workers wrote them: are they here?
        group.attrs.update(json_clean({
            "sphdist": {"kind": KIND, "format_version": FORMAT_VERSION, **EVERY_DIGEST},
            "params": params,
            "corpus": corpus,
            "n_iter": state.iteration,
            "objective": state.objective,
            "u_step_norm": state.u_step_norm,
            "v_step_norm": [None if np.isnan(x) else x for x in state.v_step_norm],
            "seconds": state.seconds,
            "converged": state.converged,
            "n_degenerate": state.n_degenerate,
            "sq_norm_X": state.sq_norm_X,
            "extrapolation": {"beta": state.beta, "beta_bar": state.beta_bar},
            "u_sha256": u_sha256(U),
            "sha256": digests,
        }))
        out.commit(staging)
    finally:
        out.discard(staging)


def _store_V(group: zarr.Group, V: da.Array) -> list[str]:
    """Store V (r, n) at ``group/V`` in regular chunks along the documents, task by task.

    Returns the :func:`~sphdist.io._checked.chunk_sha256` of the stored chunks, each computed by
    the task that writes the chunk (V is never gathered).
    """
    from sphdist.core import graph  # dask: a reader of the model (neighbors) never loads it

    r, chunks = V.shape[0], V.chunks[1]
    if not regular_chunks(chunks) or V.numblocks[0] != 1:
        V = V.rechunk((r, max(chunks)))
    target = group.create_array(
        "V", shape=V.shape, dtype=np.float64, chunks=(r, max(V.chunks[1])),
        compressors=CHECKSUMMED, config=WRITE_CONFIG,
    )
    written = V.astype(np.float64).map_blocks(
        _write_v_block, target, V.chunks[1][0], dtype=object, chunks=((1,), (1,) * V.numblocks[1]),
        meta=np.empty((0, 0), dtype=object),
    )
    with graph.computing():  # no task still writing when a failed commit is cleaned up
        return [str(d) for d in np.asarray(written.compute()).ravel().tolist()]


def _write_v_block(block: np.ndarray, target: zarr.Array, c: int, block_id=None) -> np.ndarray:
    """Write a block of V as zarr chunk ``block_id[1]`` (runs in a task); its digest."""
    start = block_id[1] * c
    target[:, start:start + block.shape[1]] = block
    return np.array([[content_sha256(block)]], dtype=object)


class ScratchV:
    """``V_k`` of a fit that keeps V, on disk beside the output instead of in worker memory.

    The pass of iteration k writes ``V_k`` chunk by chunk to ``<output>.scratch/V<k mod 2>``
    (the task that computes a chunk's columns writes them) and the pass of iteration k + 1
    reads it back chunk by chunk, while writing ``V_{k+1}`` to the other array. Used as the
    ``spill`` of :func:`sphdist.core.solver.fit` for steps with lam != 2, whose V-step needs
    ``V_k`` (Liu et al. 2019, Eq. 3.12); the exact step keeps no V at all.

    Parameters
    ----------
    output : path-like
        The ``model.zarr`` being fitted; the scratch directory is its sibling (hence on the
        filesystem the workers share with the driver).

    Notes
    -----
    Disk: ``2 r n d`` bytes (d the itemsize of V). Removed by :meth:`remove` when the fit ends
    and, after a killed fit, by the next writer of the output
    (:meth:`sphdist.io.Output.remove_stale`).
    """

    def __init__(self, output: str | os.PathLike[str]) -> None:
        self.root = open_target(output).scratch()

    def __call__(self, iteration: int, V: da.Array) -> tuple[Any, da.Array]:
        """Store ``V`` (r, n) as ``V_iteration``: (the store to compute, the lazy reader)."""
        import dask.array as da

        r, chunks = V.shape[0], V.chunks[1]
        if not regular_chunks(chunks):
            V = V.rechunk((r, max(chunks)))
        path = self.root / f"V{iteration % 2}"
        target = zarr.create_array(
            store=str(path), shape=V.shape, dtype=V.dtype, chunks=(r, max(V.chunks[1])),
            overwrite=True,
        )
        stored = da.store(V, target, lock=False, compute=False)
        reader = da.from_zarr(
            str(path), chunks=(r, chunks),
            name=f"sphdist-scratch-V{iteration}-{uuid.uuid4().hex}",
        )
        return stored, reader

    def remove(self) -> None:
        """Delete the scratch directory."""
        discard(self.root)


def u_sha256(U: np.ndarray) -> str:
    """Hex sha256 of the little-endian float64 bytes of U, shape (m, r), C order.

    Hashed through a view of U's buffer, never a ``bytes`` copy: U has m rows (210 MB at
    m = 2**18, r = 100) at every checkpoint, and the copy was the largest transient of the
    fit's final write.

    >>> u_sha256(np.eye(2)) == hashlib.sha256(np.eye(2).tobytes()).hexdigest()
    True
    """
    values = np.ascontiguousarray(U, dtype="<f8")
    return hashlib.sha256(values.reshape(-1).view(np.uint8)).hexdigest()


def idf_sha256(idf: np.ndarray | None) -> str | None:
    """Hex sha256 of the little-endian float64 bytes of an idf vector (None for None)."""
    if idf is None:
        return None
    return hashlib.sha256(np.ascontiguousarray(idf, dtype="<f8").tobytes()).hexdigest()
