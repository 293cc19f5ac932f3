"""The ``model.zarr`` format: a fitted model that is also the solver's checkpoint.

This is the only module that knows the model layout::

    model.zarr/                  zarr v3 group
      zarr.json                  attributes (below)
      U        (m, r)            float64   U_k, orthonormal columns (zero on the rows of
                                           features absent from the corpus)
      V        (r, n)            float64   V_k, unit columns (embedding of document j: V[:, j]),
                                           chunked along documents; only in the final model
                                           (and in checkpoints of fits that keep V)
      state/XVt (m, r)           float64   X V_k^T   } only for fits that keep V (lam != 2):
      state/VVt (r, r)           float64   V_k V_k^T } the partials the next U-step needs
      idf      (m,)              float64   the corpus idf (absent for dense input)
      vocabulary (m,)            str       the corpus feature names (vocabulary scheme only)

Attributes: ``sphdist = {"kind": "model", "format_version": 1}``, ``params`` (every solver
parameter and the seed), ``n_iter``, ``objective`` (n_iter + 1 values, iteration 0 first),
``u_step_norm`` / ``v_step_norm`` (``||U_k - U_{k-1}||_F``, ``||V_k - V_{k-1}||_F``, n_iter
values), ``seconds`` (wall time per iteration), ``converged``, ``n_degenerate``,
``sq_norm_X``, ``extrapolation`` (``beta``, ``beta_bar`` of the accelerated U-step, so a
resumed fit continues it), ``u_sha256`` (sha256 of the bytes of U, an identifier of the
iterate, checked whenever U is read), ``sha256`` (the same digest of ``state/XVt``,
``state/VVt`` and ``idf``, checked when they are read, and, one digest per stored chunk
(:func:`~sphdist.io._checked.chunk_sha256`), of ``V`` and ``vocabulary``, each chunk of V checked
by the task that reads it; absent in models written before they were recorded, which are read
with one warning naming the refit), and ``corpus``
(``path``, ``fingerprint``, ``shape``, ``feature_scheme``, ``tfidf``).

Every array is written with zstd's content checksum and every chunk stored
(:data:`sphdist.io._zarr.CHECKSUMMED`): a missing chunk file, a flipped bit or an edited U is
refused with a :class:`~sphdist.errors.ModelFormatError`, never read as zeros. The values are
checked too, not only their digests (an edit that recomputes ``u_sha256`` is still refused):
opening checks the arrays and attributes against the model's schema (no stray array,
the dtypes, the JSON types of the attributes; :mod:`sphdist.io._schema`) and the arrays'
shapes against each other and the attributes (``params.n_components``
= r, ``corpus.shape``, the histories' lengths), reading U checks that it is finite with
orthonormal columns, and reading a chunk of V that its columns are finite unit vectors.

Everything a new document needs to be embedded the way the training documents were is in the
model: ``corpus.feature_scheme``, ``corpus.tfidf``, ``idf`` and ``vocabulary`` (an ingest
``like`` the model reads them). The histories (``objective``, step norms, ``seconds``) are
complete across a resume: a resumed fit continues the saved lists. Embeddings of other
documents (``sphdist transform``) are stored as ``embedding.zarr`` (:mod:`sphdist.io.embedding`).

A **checkpoint** of the default (stateless) fit holds ``U_k`` and the histories alone:
``(m r + O(m)) * 8`` bytes before compression, whatever n (``V_k = normalise(U_k^T X)`` is
recomputed by one pass on a resume, :func:`sphdist.core.solver.resume`). The **final
model** adds V, written chunk by chunk by the tasks that compute it, never gathered on the
driver. :meth:`Model.V` of a checkpoint says the fit stopped, with the fit that finishes it
(:meth:`Model.resume_remedy`, a :class:`~sphdist.errors.Remedy`).

Every write builds the whole group in a sibling staging directory and commits it with an atomic
rename (:mod:`sphdist.io._posix`), after flushing every file and directory of the tree to disk:
a crash at any instant, a power loss included, leaves the previous complete checkpoint (or
none), never a torn one. A reader of a commit interrupted between its renames reads the previous
version (``model.zarr.old``) in place and changes nothing; the next writer moves it back
(:func:`save_checkpoint`, or ``load_checkpoint(out, recover=True)`` with the output it holds).
In an object store (``s3://bucket/model.zarr``) the version is written under
``model.zarr/v-<id>/`` and committed by writing the manifest ``model.zarr/zarr.json`` last (one
PUT); readers follow it, and the previous version is kept until the next commit for the readers
that opened it. A reader racing a commit reads one version or says it "was replaced while
reading; run it again" (:class:`~sphdist.io._tagged.TaggedStore`). The path must be one the
driver and the workers share, a filesystem or an object store (V is written by the workers).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr

from sphdist.core.params import current_names
from sphdist.errors import (
    CorpusMismatchError,
    InputNotFoundError,
    ModelFormatError,
    Remedy,
    remedy,
)
from sphdist.io._atomic import Output
from sphdist.io._checked import recorded_digest
from sphdist.io._model_writer import (
    FORMAT_VERSION,
    KIND,
    ScratchV,
    idf_sha256,
    save_checkpoint,
    u_sha256,
)
from sphdist.io._refit import fit_remedy
from sphdist.io._schema import (
    BOOL,
    INT,
    LIST,
    MAPPING,
    NULL,
    NUMBER,
    STR,
    Array,
    Attr,
    under,
)
from sphdist.io._tagged import TaggedStore
from sphdist.io._zarr import UNIT_TOLERANCE
from sphdist.io.corpus import FEATURE_SCHEME, TFIDF

__all__ = [
    "FORMAT_VERSION", "KIND", "save_checkpoint", "load_checkpoint", "open_model", "Model",
    "u_sha256", "idf_sha256", "ScratchV",
]

if TYPE_CHECKING:  # dask and the solver (scikit-learn) only where V is computed or a fit
    # resumed: a reader of U, idf and columns of V (``sphdist neighbors``) imports neither
    import dask.array as da

    from sphdist.core.solver import FitState

#: The arrays of a model (:func:`~sphdist.io._schema.check_arrays`), beside the group state.
_ARRAYS: dict[str, Array] = {
    "U": Array("f", 2, "the orthonormal basis U, an (m, r) float64 array", "float64"),
    "V": Array("f", 2, "the embedding V, an (r, n) float64 array", "float64"),
    "state/XVt": Array("f", 2, "the partial X V^T, an (m, r) float64 array", "float64"),
    "state/VVt": Array("f", 2, "the partial V V^T, an (r, r) float64 array", "float64"),
    "idf": Array("f", 1, "one float64 idf weight per feature", "float64"),
    "vocabulary": Array("TUO", 1, "one string term per feature"),
}

#: The JSON types of a model's attributes (:func:`~sphdist.io._schema.check_attrs`); their
#: values are checked against the arrays by :meth:`Model._check_layout`.
_ATTRS: dict[str, Attr] = {
    "params": Attr((MAPPING,), "the solver's parameters"),
    "params.n_components": Attr((INT,), "the number of components r"),
    "params.lam": Attr((NUMBER, STR), "the V-step's lam (a number or a rule's name)"),
    "params.mu": Attr((NUMBER, STR), "the U-step's mu (a number or a rule's name)"),
    "params.max_iter": Attr((INT, NULL), "the last iteration of the fit"),
    "params.tol": Attr((NUMBER,), "the tolerance of the fit"),
    "params.random_state": Attr((INT, NULL), "the seed"),
    "params.dtype": Attr((STR,), "the dtype of the fit"),
    "corpus": Attr((MAPPING,), "the corpus it was fitted on"),
    "corpus.path": Attr((STR,), "the path of the corpus"),
    "corpus.fingerprint": Attr((STR,), "the fingerprint of the corpus"),
    "corpus.shape": Attr((LIST,), "the corpus' shape [m, n]", items=(INT,), length=2),
    "corpus.feature_scheme": Attr((MAPPING, NULL), "how text became features"),
    **under("corpus.feature_scheme", FEATURE_SCHEME),
    "corpus.tfidf": Attr((MAPPING, NULL), "the tf-idf weighting"),
    **under("corpus.tfidf", TFIDF),
    "n_iter": Attr((INT,), "the iterations done"),
    "objective": Attr((LIST,), "the objective per iteration", items=(NUMBER,)),
    "seconds": Attr((LIST,), "the seconds per iteration", items=(NUMBER,)),
    "u_step_norm": Attr((LIST,), "the norm of each U-step", items=(NUMBER, NULL)),
    "v_step_norm": Attr((LIST,), "the norm of each V-step", items=(NUMBER, NULL)),
    "converged": Attr((BOOL,), "whether the fit converged"),
    "n_degenerate": Attr((INT,), "the number of degenerate documents"),
    "sq_norm_X": Attr((NUMBER,), "the squared norm of the corpus"),
    "extrapolation": Attr((MAPPING,), "the extrapolation of the U-step"),
    "u_sha256": Attr((STR,), "the sha256 of U"),
    "sha256": Attr((MAPPING,), "the sha256 of each other array"),
}


class Model(TaggedStore):
    """Read handle on a complete ``model.zarr``.

    Opening reads the last complete version and changes nothing on disk: after a commit
    interrupted between its two renames, ``<path>.old`` is read in place (see
    :class:`~sphdist.io._tagged.TaggedStore`).

    Parameters
    ----------
    path : path-like
        The model directory.

    Raises
    ------
    InputNotFoundError
        If there is no model (nor an interrupted commit of one) at ``path``.
    ModelFormatError
        If ``path`` is not a sphdist model of a supported format version, or its arrays and
        attributes disagree (:meth:`_check_layout`: shapes, ``params.n_components``, the
        histories' lengths); when an array is read, if a chunk file of it is missing, does not
        decode (zstd checksum), or U does not match ``u_sha256`` (and XVt, VVt, idf their
        recorded ``sha256``); when U is read, if it holds a NaN or Inf or its columns are not
        orthonormal; when a chunk of V is read, if it holds a NaN or Inf or a column that is
        not a unit vector.

    Notes
    -----
    Opening reads metadata only (no chunk): the checks of U's values cost one pass over U
    plus ``k r^2`` flops (k the nonzero rows of U) when U is read, those of V one pass over
    each chunk, in the task that reads it, so V is never loaded to open a model.
    """

    KIND = KIND
    #: Largest ``|U^T U - I|`` entry accepted: a polar factor is orthonormal to ~1e-12.
    U_TOLERANCE = 1e-6
    #: Largest ``| ||v_j|| - 1 |`` accepted (the V of a float32 fit is normalised in float32).
    V_TOLERANCE = UNIT_TOLERANCE
    FORMAT_VERSION = FORMAT_VERSION
    _MISSING = "check the path, or fit one: " + remedy(Remedy(
        "fit", {"input": "CORPUS", "output": "PATH"}, {"n_components": 20}))
    _STALE = "refit with this version of sphdist"
    _REWRITE = "refit with `sphdist fit`"
    _ARRAYS = _ARRAYS
    _GROUPS = ("state",)
    _ATTRS = _ATTRS

    def _open(self) -> None:
        super()._open()
        self._warned: set[str] = set()
        self._check_layout()

    def _rebuild(self) -> Any:
        """The refit of a model outside its schema.

        The recorded corpus and r, where they are of their types (the recorded parameters
        may be what was edited).
        """
        corpus, params = self.attrs.get("corpus"), self.attrs.get("params")
        source = corpus.get("path") if isinstance(corpus, dict) else None
        k = params.get("n_components") if isinstance(params, dict) else None
        return "refit it: " + remedy(Remedy(
            "fit", {"input": source if isinstance(source, str) else "CORPUS",
                    "output": str(self.path)},
            {"n_components": k if isinstance(k, int) and not isinstance(k, bool) else 20,
             "overwrite": True}))

    def _refuse(self, what: str) -> ModelFormatError:
        return ModelFormatError(f"{self.location}: {what}. To resolve this, {self._REWRITE}.")

    def _check_layout(self) -> None:
        """Refuse arrays and attributes that disagree with each other (metadata, no chunk)."""
        g, a = self._group, self.attrs
        U = g["U"] if "U" in g else None
        if not isinstance(U, zarr.Array) or U.ndim != 2 or U.dtype != np.float64:
            found = "no array U" if U is None else f"U of {U.ndim} dimensions, {U.dtype}"
            raise self._refuse(f"a model holds U, a 2-D float64 array; found {found}")
        m, r = (int(x) for x in U.shape)
        if not 1 <= r <= m:
            raise self._refuse(f"U has shape {U.shape}: not m features x r <= m components")
        params = a.get("params")
        k = params.get("n_components") if isinstance(params, dict) else None
        if isinstance(k, bool) or not isinstance(k, int) or k != r:
            raise self._refuse(f"attribute params.n_components={k!r} but U has r = {r} columns")
        corpus = a.get("corpus")
        if not isinstance(corpus, dict) or not isinstance(corpus.get("path"), str):
            raise self._refuse(
                "attribute corpus (the path, fingerprint and shape of the corpus it was fitted "
                f"on) is {'missing' if corpus is None else 'malformed: ' + repr(corpus)[:60]}")
        extrapolation = a.get("extrapolation", {})
        for name in ("beta", "beta_bar"):
            beta = extrapolation.get(name, 0.5) if isinstance(extrapolation, dict) else None
            if isinstance(beta, bool) or not isinstance(beta, int | float) or not 0 <= beta <= 1:
                raise self._refuse(
                    f"attribute extrapolation.{name}={beta!r} is not a number in [0, 1]")
        shape = corpus.get("shape")
        if shape is not None and not (
            isinstance(shape, list) and len(shape) == 2
            and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape)
            and shape[0] == m
        ):
            raise self._refuse(f"attribute corpus.shape={shape!r} but U has m = {m} rows")
        scheme = corpus.get("feature_scheme")
        hashed = scheme.get("n_features", m) if isinstance(scheme, dict) else m
        if hashed != m:
            raise self._refuse(
                f"attribute corpus.feature_scheme says n_features = {hashed!r} but U has "
                f"m = {m} rows"
            )
        n = shape[1] if shape is not None else None
        expected = {"idf": (m,), "vocabulary": (m,), "state/XVt": (m, r), "state/VVt": (r, r)}
        if "V" in g:
            expected["V"] = (r, n if n is not None else g["V"].shape[-1])
        for name, want in expected.items():
            if name in g and tuple(g[name].shape) != want:
                said = f"U has r = {r} columns" if name == "V" else f"U has shape {(m, r)}"
                if name == "V" and n is not None:
                    said += f" and attribute corpus.shape says n = {n} documents"
                raise self._refuse(f"{name} has shape {tuple(g[name].shape)} but {said}")
        if "V" in g and g["V"].dtype != np.float64:
            raise self._refuse(f"V is {g['V'].dtype}, not float64")
        n_iter = a.get("n_iter")
        if isinstance(n_iter, bool) or not isinstance(n_iter, int) or n_iter < 0:
            raise self._refuse(f"attribute n_iter={n_iter!r} is not an integer >= 0")
        for name, length in (("objective", n_iter + 1), ("seconds", n_iter + 1),
                             ("u_step_norm", n_iter), ("v_step_norm", n_iter)):
            values = a.get(name, [] if name == "objective" else None)
            if values is not None and (not isinstance(values, list) or len(values) != length):
                raise self._refuse(
                    f"attribute {name} holds {len(values) if isinstance(values, list) else 0} "
                    f"values but n_iter={n_iter} calls for {length}"
                )
        if not all(isinstance(f, int | float) and np.isfinite(f) for f in a["objective"]):
            raise self._refuse("attribute objective holds a value that is not a finite number")

    def _check_U(self, U: np.ndarray) -> np.ndarray:
        """Return U if its values are finite and its columns orthonormal (Liu et al. Eq. 3.11)."""
        finite = np.isfinite(U)
        if not finite.all():
            i, j = (int(v[0]) for v in np.nonzero(~finite))
            raise self._refuse(f"U holds a non-finite value ({U[i, j]}) at row {i}, column {j}")
        rows = U[np.any(U != 0, axis=1)]  # the zero rows of absent features add nothing
        error = np.abs(rows.T @ rows - np.eye(U.shape[1])).max()
        if error > self.U_TOLERANCE:
            raise self._refuse(
                f"the columns of U are not orthonormal (max |U^T U - I| = {error:.3g} > "
                f"{self.U_TOLERANCE:g})"
            )
        return U

    @property
    def params(self) -> dict[str, Any]:
        """Solver parameters the model was fitted with, under today's names.

        A model written before a parameter was renamed stored its old name
        (:data:`sphdist.core.params.RENAMED`); it is read under the new one, so its fit
        resumes and its remedies name today's options.
        """
        return current_names(self.attrs["params"])

    @property
    def n_iter(self) -> int:
        """Completed iterations."""
        return int(self.attrs["n_iter"])

    @property
    def objective(self) -> list[float]:
        """Objective per iteration, iteration 0 first (n_iter + 1 values)."""
        return list(self.attrs["objective"])

    @property
    def converged(self) -> bool:
        """Whether the fit stopped because the relative objective change fell below tol."""
        return bool(self.attrs["converged"])

    @property
    def max_iter(self) -> int | None:
        """The iteration the fit was to stop at at the latest (None if not recorded)."""
        value = self.params.get("max_iter")
        return None if value is None else int(value)

    @property
    def corpus(self) -> dict[str, Any]:
        """Path, fingerprint and shape of the corpus the model was fitted on."""
        return self.attrs["corpus"]

    @property
    def U(self) -> np.ndarray:
        """Ndarray of shape (m, r), float64: the orthonormal basis."""
        stored = self.attrs.get("u_sha256")
        digest = self._recorded("U", {"U": stored} if isinstance(stored, str) else None,
                                warn=False)  # every model has recorded it
        return self._check_U(self._read("U", digest, "u_sha256"))

    def _state_array(self, name: str) -> np.ndarray:
        return self._read(name, self._recorded(name, self.attrs.get("sha256"), warn=False))

    @property
    def idf(self) -> np.ndarray | None:
        """Ndarray of shape (m,), float64: the corpus idf, or None."""
        return self._state_array("idf") if "idf" in self._group else None

    @property
    def vocabulary(self) -> np.ndarray | None:
        """Ndarray of shape (m,), object (str): feature names (vocabulary scheme), or None."""
        if "vocabulary" not in self._group:
            return None
        return self._read("vocabulary", self._digest("vocabulary")).astype(object)

    def _digest(self, name: str) -> Any:
        """The recorded digest of ``name`` (V, vocabulary); a warning, once, without one."""
        return self._recorded(name, self.attrs.get("sha256"))

    def _recorded(self, name: str, digests: Any, warn: bool = True) -> Any:
        """:func:`~sphdist.io._checked.recorded_digest` of ``name`` in this model."""
        return recorded_digest(
            self.path, name, digests, self.attrs.get("sphdist"), self._warned,
            error=ModelFormatError, remedy=lambda: self._REWRITE + " (" + self._refit() + ")",
            warn=warn,
        )

    @property
    def shape(self) -> tuple[int, int, int]:
        """(m features, r components, n documents) of the fitted factors."""
        m, r = self._group["U"].shape
        if "V" in self._group:
            return int(m), int(r), int(self._group["V"].shape[1])
        return int(m), int(r), int(self.corpus["shape"][1])

    @property
    def has_embedding(self) -> bool:
        """Whether V is stored (a final model); a checkpoint of U alone has none."""
        return "V" in self._group

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
        self._require_embedding()
        V = self._unit_columns("V", self._digest("V"), token=("model", self.fingerprint))
        return V if chunks is None else V.rechunk((V.shape[0], chunks))

    def V_columns(self, start: int, stop: int) -> np.ndarray:
        """Columns ``start:stop`` of V, read without dask, each stored chunk checked.

        The chunks that hold them are read and checked as the tasks of :meth:`V` check theirs
        (finite unit columns, the recorded sha256 of each chunk): a reader of a few columns
        (a neighbour query of one document) reads a few chunks, not V.

        Parameters
        ----------
        start, stop : int
            Document range, ``0 <= start <= stop <= n``.

        Returns
        -------
        ndarray of shape (r, stop - start), float64

        Raises
        ------
        ModelFormatError
            As :meth:`V`: a checkpoint without V, or a damaged chunk.
        """
        self._require_embedding()
        return self._unit_columns_between("V", self._digest("V"), start, stop)

    def _refit(self) -> str:
        """The fit that writes this model again (its recorded parameters), in a message."""
        return remedy(fit_remedy(self.corpus.get("path", "CORPUS"), self.path, self.params,
                                 overwrite=True))

    def resume_remedy(self) -> Remedy:
        """The fit that continues this model's, with the parameters of its checkpoint.

        Every parameter the checkpoint was written with is given (``n_components`` always,
        the others where they differ from the defaults;
        :func:`sphdist.io._refit.fit_remedy`), so the fit passes the resume checks.

        Returns
        -------
        sphdist.errors.Remedy
            A resume of the fit of the recorded corpus (``"CORPUS"`` if none is recorded).
        """
        return fit_remedy(self.corpus.get("path", "CORPUS"), self.path, self.params,
                          resume=True, say="finish the fit")

    def require_embedding(self) -> None:
        """Refuse the checkpoint of an unfinished fit, with the fit that finishes it.

        Raises
        ------
        ModelFormatError
            If the model holds U but not the embedding V (:attr:`has_embedding`); the
            remedy is :meth:`resume_remedy`.
        """
        if not self.has_embedding:
            raise ModelFormatError(
                f"{self.path} is a checkpoint of a fit stopped at iteration {self.n_iter} of "
                f"{(self.max_iter if self.max_iter is not None else '?')}, not converged: it "
                "holds U, not the embedding V. To resolve this, finish the fit: "
                + remedy(self.resume_remedy()) + "."
            )

    _require_embedding = require_embedding

    def state(self, chunks: tuple[int, ...]) -> FitState:
        """The saved solver state, with V chunked as ``chunks`` (the corpus' document chunks).

        Parameters
        ----------
        chunks : tuple of int
            Documents per chunk of the corpus being resumed.

        Returns
        -------
        FitState
            Bitwise the state that was saved: U and the histories; for a fit that keeps V,
            also V (lazy: read chunk by chunk by the tasks of the next pass) and the
            partials; otherwise these are None and
            :func:`sphdist.core.solver.resume` recomputes them in one pass.
        """
        from sphdist.core.solver import FitState  # dask: only a resumed fit imports the solver

        a = self.attrs
        kept = "state/XVt" in self._group
        U = self.U
        return FitState(
            iteration=int(a["n_iter"]), U=U, V=self.V(chunks) if kept else None,
            XVt=self._state_array("state/XVt") if kept else None,
            VVt=self._state_array("state/VVt") if kept else None,
            sq_norm_X=float(a["sq_norm_X"]), objective=list(a["objective"]),
            u_step_norm=list(a["u_step_norm"]),
            v_step_norm=[float("nan") if x is None else x for x in a["v_step_norm"]],
            seconds=list(a["seconds"]), n_degenerate=int(a["n_degenerate"]),
            converged=bool(a["converged"]),
            **a.get("extrapolation", {}),
        )

    def check_compatible(
        self, source: Any, input: str | os.PathLike[str], *, check_idf: bool = True
    ) -> None:
        """Check that a corpus lives in the feature space (and weighting) this model was fitted in.

        Parameters
        ----------
        source : Corpus or DenseInput
            An open input (:func:`sphdist.io.corpus.open_input`).
        input : path-like
            Its path, for the message.
        check_idf : bool, default True
            Also require the same idf (sha256 of its bytes) and tf-idf options, as
            :class:`sphdist.jobs.transform.TransformRequest` does: a document weighted with
            another idf is not the document the model saw. A warm start
            (``FitRequest(init_from=...)``) needs only the same features.

        Raises
        ------
        CorpusMismatchError
            Naming each difference (number of features, feature scheme, vocabulary, idf, tf-idf
            options) and how to re-ingest the corpus the model's way (an ingest ``like`` it).
        """
        fitted = self.corpus
        problems = []
        m_model = self.shape[0]
        if source.n_features != m_model:
            problems.append(f"{source.n_features} features, the model has {m_model}")
        scheme = fitted.get("feature_scheme")
        if scheme is not None and source.feature_scheme != scheme:
            problems.append(
                f"feature scheme {source.feature_scheme!r}, the model's is {scheme!r}"
            )
        if not problems:
            theirs, ours = getattr(source, "vocabulary", None), self.vocabulary
            if theirs is not None and ours is not None and not np.array_equal(theirs, ours):
                problems.append("another vocabulary than the model's")
        if check_idf and not problems:
            a, b = idf_sha256(source.idf), idf_sha256(self.idf)
            if a != b:
                problems.append(
                    f"idf fingerprint {(a or 'none')[:12]}, the model's is {(b or 'none')[:12]}"
                )
            options = fitted.get("tfidf") or {}
            differ = sorted(  # the cleaning ("remove": headers, quotes) is not the weighting
                k for k in (set(options) & set(source.tfidf)) - {"remove"}
                if options[k] != source.tfidf[k]
            )
            if differ:
                problems.append(f"other tf-idf options ({', '.join(differ)})")
        if problems:
            raise CorpusMismatchError(
                f"{input} does not match the model {self.path}: it has {'; '.join(problems)}. "
                "To resolve this, ingest the documents with " + remedy(Remedy(
                    "ingest", {"source": ["SOURCE"]},
                    {"like": str(self.path), "output": "NEW.zarr"}))
                + " (the model's feature scheme and idf)."
            )


def open_model(path: str | os.PathLike[str]) -> Model:
    """Open a ``model.zarr``; see :class:`Model`."""
    return Model(path)


def load_checkpoint(
    path: Output | str | os.PathLike[str], *, recover: bool = False,
) -> Model | None:
    """The last complete checkpoint at ``path``, or None when there is none.

    Parameters
    ----------
    path : Output or path-like
        The model directory given to :func:`save_checkpoint`, or its writer's held output
        (:func:`sphdist.io.open_output`).
    recover : bool, default False
        Move an interrupted commit's ``<path>.old`` back to ``path`` first
        (:meth:`sphdist.io.Output.recover`). Only the writer of ``path`` (the fit that will
        write the next checkpoint) does, through the output it holds: ``path`` is then that
        :class:`~sphdist.io.Output`. Without it nothing on disk changes.

    Returns
    -------
    Model or None

    Raises
    ------
    ModelFormatError
        If something that is not a sphdist model is at ``path``.
    OutputLockedError
        With ``recover``, if the block of :func:`~sphdist.io.open_output` that gave ``path``
        has ended (its lock released): nothing is moved.
    TypeError
        With ``recover``, if ``path`` is not a held :class:`~sphdist.io.Output`.
    """
    if isinstance(path, Output):
        if recover:
            path.recover()  # refused if its hold ended
        path = path.path
    elif recover:
        raise TypeError(
            f"load_checkpoint({str(path)!r}, recover=True): only the writer holding the "
            "output recovers it. To resolve this, pass the Output it holds "
            "(with sphdist.io.open_output(path) as out: load_checkpoint(out, recover=True))."
        )
    try:
        return Model(path)
    except InputNotFoundError:
        return None
