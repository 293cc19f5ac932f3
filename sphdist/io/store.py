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
      vocabulary (m,)            str       the corpus feature names (vocabulary scheme only)

Attributes: ``sphdist = {"kind": "model", "format_version": 1}``, ``params`` (every solver
parameter and the seed), ``n_iter``, ``objective`` (n_iter + 1 values, iteration 0 first),
``u_step_norm`` / ``v_step_norm`` (``||U_k - U_{k-1}||_F``, ``||V_k - V_{k-1}||_F``, n_iter
values), ``seconds`` (wall time per iteration), ``converged``, ``n_degenerate``,
``sq_norm_X``, ``u_sha256`` (sha256 of the bytes of U, an identifier of the iterate), and
``corpus`` (``path``, ``fingerprint``, ``shape``, ``feature_scheme``, ``tfidf``).

Everything a new document needs to be embedded the way the training documents were is in the
model: ``corpus.feature_scheme``, ``corpus.tfidf``, ``idf`` and ``vocabulary`` (``sphdist ingest
--like model.zarr`` reads them). The histories (``objective``, step norms, ``seconds``) are
complete across ``--resume``: a resumed fit continues the saved lists.

Embeddings of other documents (``sphdist transform``) are stored as ``embedding.zarr``::

    embedding.zarr/              zarr v3 group
      V           (r, n)         float64   column j: unit-norm embedding of document j
      degenerate  (n,)           bool      True where U^T x_j = 0 (V[:, j] is then e_1)
      doc_ids     (n,)           str       the corpus' document ids
      labels      (n,)           int32     the corpus' label codes (absent: unknown)

with attributes ``sphdist = {"kind": "embedding", "format_version": 1}``, ``model``
(``path``, ``u_sha256``), ``corpus`` (``path``, ``fingerprint``, ``shape``), ``label_names``,
``n_degenerate`` and ``method``.

Every write builds the whole group in a sibling staging directory and commits it with an atomic
rename (:mod:`sphdist.io._atomic`): a crash at any instant leaves the previous complete checkpoint
(or none), never a torn one. The path must be on a filesystem the driver and the workers share
(V is written by the workers).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import zarr

from sphdist.core.solver import FitState
from sphdist.errors import InputNotFoundError, ModelFormatError
from sphdist.io import _atomic

__all__ = [
    "FORMAT_VERSION", "save_checkpoint", "load_checkpoint", "open_model", "Model", "u_sha256",
    "idf_sha256", "Embedding", "EmbeddingWriter", "open_embedding", "write_embedding_block",
]

FORMAT_VERSION = 1
_KIND = "model"
_EMBEDDING_KIND = "embedding"


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
    vocabulary: np.ndarray | None = None,
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
    vocabulary : ndarray of shape (m,), str, optional
        The corpus feature names (vocabulary scheme), kept for ``ingest --like`` and the top
        terms of each component.

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
        if vocabulary is not None:
            words = np.asarray(vocabulary, dtype=object)
            # zarr's variable-length UTF-8 strings, as in corpus.zarr
            arr = group.create_array(
                "vocabulary", shape=words.shape, dtype=str,
                chunks=(max(1, min(words.shape[0], 1 << 17)),),
            )
            if words.shape[0]:
                arr[:] = words
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
            "u_sha256": u_sha256(state.U),
        }))
        _atomic.commit_directory(staging, path)
    finally:
        _atomic.discard(staging)


def u_sha256(U: np.ndarray) -> str:
    """Hex sha256 of the little-endian float64 bytes of U, shape (m, r), C order."""
    return hashlib.sha256(np.ascontiguousarray(U, dtype="<f8").tobytes()).hexdigest()


def idf_sha256(idf: np.ndarray | None) -> str | None:
    """Hex sha256 of the little-endian float64 bytes of an idf vector (None for None)."""
    if idf is None:
        return None
    return hashlib.sha256(np.ascontiguousarray(idf, dtype="<f8").tobytes()).hexdigest()


def _open_tagged(path: Path, kind: str, *, missing: str, stale: str) -> zarr.Group:
    """Open ``path`` read-only as a sphdist group of ``kind`` and this format version.

    ``missing`` and ``stale`` complete "To resolve this, ..." when nothing is at ``path`` and
    when its tag names another kind or format version.
    """
    if not path.exists():
        raise InputNotFoundError(f"{path}: no such {kind}. To resolve this, {missing}.")
    try:
        group = zarr.open_group(store=str(path), mode="r")
    except Exception as exc:
        raise ModelFormatError(
            f"{path}: not a zarr v3 group ({type(exc).__name__}: {exc})."
        ) from exc
    tag = group.attrs.get("sphdist")
    tag = tag if isinstance(tag, dict) else {}
    if tag.get("kind") != kind or tag.get("format_version") != FORMAT_VERSION:
        raise ModelFormatError(
            f"{path}: not a sphdist {kind} of format version {FORMAT_VERSION} "
            f"(found {tag!r}). To resolve this, {stale}."
        )
    return group


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
        group = _open_tagged(
            self.path, _KIND,
            missing="check the path, or fit one with `sphdist fit --input CORPUS --output PATH`",
            stale="refit with this version of sphdist",
        )
        try:  # parse every array's metadata now: an unknown codec or a stray node is an error
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                for _ in group.members(max_depth=None):
                    pass
        except Exception as exc:
            raise ModelFormatError(
                f"{self.path}: unreadable array metadata ({type(exc).__name__}: {exc}). Only "
                "zarr's built-in codecs are read, never pickled objects. To resolve this, refit "
                "with `sphdist fit`."
            ) from None
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

    @property
    def vocabulary(self) -> np.ndarray | None:
        """Ndarray of shape (m,), object (str): feature names (vocabulary scheme), or None."""
        if "vocabulary" not in self._group:
            return None
        return np.asarray(self._group["vocabulary"][...]).astype(object)

    @property
    def shape(self) -> tuple[int, int, int]:
        """(m features, r components, n documents) of the fitted factors."""
        m, r = self._group["U"].shape
        return int(m), int(r), int(self._group["V"].shape[1])

    @property
    def fingerprint(self) -> str:
        """Identifier of the fitted U: hex sha256 of its bytes (see :func:`u_sha256`)."""
        stored = self.attrs.get("u_sha256")
        return stored if isinstance(stored, str) else u_sha256(self.U)

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


# -- embedding.zarr ----------------------------------------------------------------------------
def _zarr_chunk(chunks: tuple[int, ...]) -> int:
    """Columns per zarr chunk such that every document chunk starts on a zarr chunk boundary.

    >>> _zarr_chunk((128, 128, 44)), _zarr_chunk((25, 25, 40))
    (128, 5)
    """
    if _regular(chunks):
        return max(1, max(chunks, default=1))
    return max(1, int(np.gcd.reduce(np.asarray(chunks, dtype=np.int64))))


class EmbeddingWriter:
    """Build an ``embedding.zarr`` in a staging directory; :meth:`commit` makes it visible.

    Parameters
    ----------
    path : path-like
        Final location.
    n_components : int
        r.
    chunks : tuple of int
        Documents per chunk of the corpus; tasks write one chunk each (through
        :func:`write_embedding_block`) without sharing a zarr chunk, so no lock is needed.

    Notes
    -----
    Use as a context manager: leaving the block without :meth:`commit` removes the staging
    directory. The staging directory must be on a filesystem the workers share.
    """

    def __init__(self, path: str | os.PathLike[str], *, n_components: int, chunks: tuple[int, ...]):
        self.path = Path(path)
        self.staging = _atomic.staging_path(self.path)
        n = int(sum(chunks))
        self.offsets = tuple(int(o) for o in np.concatenate([[0], np.cumsum(chunks)[:-1]]))
        group = zarr.open_group(store=str(self.staging), mode="w-")
        c = _zarr_chunk(tuple(chunks))
        group.create_array("V", shape=(n_components, n), dtype=np.float64, chunks=(n_components, c))
        group.create_array("degenerate", shape=(n,), dtype=bool, chunks=(c,))
        self._group = group
        self._committed = False

    def __enter__(self) -> EmbeddingWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._committed:
            _atomic.discard(self.staging)

    def commit(
        self, *, doc_ids: np.ndarray, labels: np.ndarray | None,
        label_names: list[str] | None, attrs: dict[str, Any],
    ) -> Embedding:
        """Write ids, labels and attributes, then rename the staging tree to ``path``.

        Parameters
        ----------
        doc_ids : ndarray of shape (n,), str
        labels : ndarray of shape (n,), int32, or None
        label_names : list of str or None
        attrs : dict
            More JSON-serialisable attributes (``model``, ``corpus``, ...).

        Returns
        -------
        Embedding
        """
        group = self._group
        ids = np.asarray(doc_ids, dtype=object)
        arr = group.create_array(
            "doc_ids", shape=ids.shape, dtype=str, chunks=(max(1, min(ids.shape[0], 1 << 17)),)
        )
        if ids.shape[0]:
            arr[:] = ids
        if labels is not None:
            _write_array(group, "labels", np.asarray(labels, dtype=np.int32))
        group.attrs.update(_json_clean({
            **attrs,
            "sphdist": {"kind": _EMBEDDING_KIND, "format_version": FORMAT_VERSION},
            "label_names": label_names,
        }))
        _atomic.commit_directory(self.staging, self.path)
        self._committed = True
        return Embedding(self.path)


def write_embedding_block(
    staging: str, start: int, V: np.ndarray, degenerate: np.ndarray
) -> None:
    """Write columns ``start:start + n_c`` of an embedding being built (runs in a task).

    Parameters
    ----------
    staging : str
        :attr:`EmbeddingWriter.staging`.
    start : int
        First document of the chunk.
    V : ndarray of shape (r, n_c), float64
    degenerate : ndarray of shape (n_c,), bool
    """
    group = zarr.open_group(store=staging, mode="r+")
    stop = start + V.shape[1]
    group["V"][:, start:stop] = V
    group["degenerate"][start:stop] = degenerate


class Embedding:
    """Read handle on an ``embedding.zarr`` written by ``sphdist transform``.

    Parameters
    ----------
    path : path-like

    Raises
    ------
    InputNotFoundError
        If nothing is at ``path``.
    ModelFormatError
        If ``path`` is not a sphdist embedding.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        group = _open_tagged(
            self.path, _EMBEDDING_KIND,
            missing="write one with `sphdist transform --model MODEL --input CORPUS --output PATH`",
            stale="write it again with `sphdist transform`",
        )
        self._group = group
        self.attrs: dict[str, Any] = dict(group.attrs)

    @property
    def V(self) -> zarr.Array:
        """The (r, n) float64 zarr array of unit columns (read slices of it)."""
        return self._group["V"]

    @property
    def doc_ids(self) -> np.ndarray:
        """Ndarray of shape (n,), object (Python str)."""
        return np.asarray(self._group["doc_ids"][...]).astype(object)

    @property
    def labels(self) -> np.ndarray | None:
        """Ndarray of shape (n,), int32, or None."""
        return np.asarray(self._group["labels"][...]) if "labels" in self._group else None

    @property
    def degenerate(self) -> np.ndarray:
        """Ndarray of shape (n,), bool: True where ``U^T x_j = 0``."""
        return np.asarray(self._group["degenerate"][...])


def open_embedding(path: str | os.PathLike[str]) -> Embedding:
    """Open an ``embedding.zarr``; see :class:`Embedding`."""
    return Embedding(path)
