"""The ``model.zarr`` format: a fitted model that is also the solver's checkpoint.

This is the only module that knows the model layout::

    model.zarr/                  zarr v3 group
      zarr.json                  attributes (below)
      U        (m, r)            float64   U_k, orthonormal columns
      V        (r, n)            float64   V_k, unit columns (embedding of document j: V[:, j]),
                                           chunked along documents
      state/XVt (m, r)           float64   X V_k^T   } the partials the next U-step needs,
      state/VVt (r, r)           float64   V_k V_k^T } so --resume makes no extra pass over X
      idf      (m,)              float64   the corpus idf (absent for dense input)

Attributes: ``sphdist = {"kind": "model", "format_version": 1}``, ``params`` (every solver
parameter and the seed), ``n_iter``, ``objective`` (n_iter + 1 values, iteration 0 first),
``u_step_norm`` / ``v_step_norm`` (``||U_k - U_{k-1}||_F``, ``||V_k - V_{k-1}||_F``, n_iter
values), ``seconds`` (wall time per iteration), ``converged``, ``n_degenerate``,
``sq_norm_X``, and ``corpus`` (``path``, ``fingerprint``, ``shape``, ``feature_scheme``,
``tfidf``).

Every write builds the whole group in a sibling staging directory and commits it with an atomic
rename (:mod:`sphdist._atomic`): a crash at any instant leaves the previous complete checkpoint
(or none), never a torn one. The path must be on a filesystem the driver and the workers share
(V is written by the workers).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import zarr

from . import _atomic
from .errors import InputNotFoundError, ModelFormatError
from .solver import FitState

__all__ = ["FORMAT_VERSION", "save_checkpoint", "load_checkpoint", "open_model", "Model"]

FORMAT_VERSION = 1
_KIND = "model"


def _json_clean(value: Any) -> Any:
    """Round-trip through JSON so numpy scalars and tuples become plain types."""
    return json.loads(
        json.dumps(value, default=lambda o: o.item() if hasattr(o, "item") else str(o))
    )


def _write_array(group: zarr.Group, name: str, values: np.ndarray) -> None:
    arr = group.create_array(name, shape=values.shape, dtype=values.dtype, chunks=values.shape)
    arr[...] = values


def _regular(chunks: tuple[int, ...]) -> bool:
    return all(c == chunks[0] for c in chunks[:-1]) and chunks[-1] <= chunks[0]


def save_checkpoint(
    path: str | os.PathLike[str],
    state: FitState,
    *,
    params: dict[str, Any],
    corpus: dict[str, Any],
    idf: np.ndarray | None = None,
) -> None:
    """Write ``state`` as a complete ``model.zarr``, replacing any previous one atomically.

    Parameters
    ----------
    path : path-like
        The model directory.
    state : FitState
        The solver state to save (U, V, partials, histories).
    params : dict
        Solver parameters (JSON-serialisable), stored as the ``params`` attribute.
    corpus : dict
        Description of the input: ``path``, ``fingerprint``, ``shape`` and optionally
        ``feature_scheme``, ``tfidf``.
    idf : ndarray of shape (m,), float64, optional
        The corpus idf, kept so new documents can be weighted the same way.

    Raises
    ------
    OSError
        If the location is not writable or full; the previous checkpoint is kept.

    Notes
    -----
    Writes ``(2 m r + r^2 + r n) * 8`` bytes (before compression). V is written by the
    tasks that hold it.
    """
    path = Path(path)
    staging = _atomic.staging_path(path)
    try:
        group = zarr.open_group(store=str(staging), mode="w-")
        _write_array(group, "U", np.asarray(state.U, dtype=np.float64))
        _write_array(group, "state/XVt", np.asarray(state.XVt, dtype=np.float64))
        _write_array(group, "state/VVt", np.asarray(state.VVt, dtype=np.float64))
        if idf is not None:
            _write_array(group, "idf", np.asarray(idf, dtype=np.float64))
        V = state.V
        r, chunks = V.shape[0], V.chunks[1]
        if not _regular(chunks):
            V = V.rechunk((r, max(chunks)))
        target = group.create_array(
            "V", shape=V.shape, dtype=np.float64, chunks=(r, max(V.chunks[1]))
        )
        da.store(V, target, lock=False)
        group.attrs.update(_json_clean({
            "sphdist": {"kind": _KIND, "format_version": FORMAT_VERSION},
            "params": params,
            "corpus": corpus,
            "n_iter": state.iteration,
            "objective": state.objective,
            "u_step_norm": state.u_step_norm,
            "v_step_norm": state.v_step_norm,
            "seconds": state.seconds,
            "converged": state.converged,
            "n_degenerate": state.n_degenerate,
            "sq_norm_X": state.sq_norm_X,
        }))
        _atomic.commit_directory(staging, path)
    finally:
        _atomic.discard(staging)


class Model:
    """Read handle on a complete ``model.zarr``.

    Parameters
    ----------
    path : path-like
        The model directory.

    Raises
    ------
    InputNotFoundError
        If there is no model (nor a recoverable one) at ``path``.
    ModelFormatError
        If ``path`` is not a sphdist model of a supported format version.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        _atomic.recover_directory(self.path)
        if not self.path.exists():
            raise InputNotFoundError(
                f"{self.path}: no such model. To resolve this, check the path, or fit one with "
                "`sphdist fit --input CORPUS --output PATH`."
            )
        try:
            group = zarr.open_group(store=str(self.path), mode="r")
        except Exception as exc:
            raise ModelFormatError(
                f"{self.path}: not a zarr v3 group ({type(exc).__name__}: {exc})."
            ) from exc
        tag = group.attrs.get("sphdist")
        tag = tag if isinstance(tag, dict) else {}
        if tag.get("kind") != _KIND or tag.get("format_version") != FORMAT_VERSION:
            raise ModelFormatError(
                f"{self.path}: not a sphdist model of format version {FORMAT_VERSION} "
                f"(found {tag!r}). To resolve this, refit with this version of sphdist."
            )
        self._group = group
        self.attrs: dict[str, Any] = dict(group.attrs)

    @property
    def params(self) -> dict[str, Any]:
        """Solver parameters the model was fitted with."""
        return self.attrs["params"]

    @property
    def n_iter(self) -> int:
        """Completed iterations."""
        return int(self.attrs["n_iter"])

    @property
    def objective(self) -> list[float]:
        """Objective per iteration, iteration 0 first (n_iter + 1 values)."""
        return list(self.attrs["objective"])

    @property
    def corpus(self) -> dict[str, Any]:
        """Path, fingerprint and shape of the corpus the model was fitted on."""
        return self.attrs["corpus"]

    @property
    def U(self) -> np.ndarray:
        """Ndarray of shape (m, r), float64: the orthonormal basis."""
        return np.asarray(self._group["U"][...])

    @property
    def idf(self) -> np.ndarray | None:
        """Ndarray of shape (m,), float64: the corpus idf, or None."""
        return np.asarray(self._group["idf"][...]) if "idf" in self._group else None

    def V(self, chunks: tuple[int, ...] | None = None) -> da.Array:
        """The embedding as a lazy dask array.

        Parameters
        ----------
        chunks : tuple of int, optional
            Documents per chunk; default the stored zarr chunks.

        Returns
        -------
        dask.array.Array of shape (r, n), float64
            Column j is the unit-norm embedding of document j.
        """
        V = da.from_zarr(self._group["V"])
        return V if chunks is None else V.rechunk((V.shape[0], chunks))

    def state(self, chunks: tuple[int, ...]) -> FitState:
        """The saved solver state, with V chunked as ``chunks`` (the corpus' document chunks).

        Parameters
        ----------
        chunks : tuple of int
            Documents per chunk of the corpus being resumed.

        Returns
        -------
        FitState
            Bitwise the state that was saved; V is persisted.
        """
        a = self.attrs
        return FitState(
            iteration=int(a["n_iter"]), U=self.U, V=self.V(chunks).persist(),
            XVt=np.asarray(self._group["state/XVt"][...]),
            VVt=np.asarray(self._group["state/VVt"][...]),
            sq_norm_X=float(a["sq_norm_X"]), objective=list(a["objective"]),
            u_step_norm=list(a["u_step_norm"]), v_step_norm=list(a["v_step_norm"]),
            seconds=list(a["seconds"]), n_degenerate=int(a["n_degenerate"]),
            converged=bool(a["converged"]),
        )


def open_model(path: str | os.PathLike[str]) -> Model:
    """Open a ``model.zarr``; see :class:`Model`."""
    return Model(path)


def load_checkpoint(path: str | os.PathLike[str]) -> Model | None:
    """The last complete checkpoint at ``path``, or None when there is none.

    Parameters
    ----------
    path : path-like
        The model directory given to :func:`save_checkpoint`.

    Returns
    -------
    Model or None

    Raises
    ------
    ModelFormatError
        If something that is not a sphdist model is at ``path``.
    """
    try:
        return Model(path)
    except InputNotFoundError:
        return None
