"""What is stored at a path: a corpus, a model (and its checkpoint state), or an embedding.

``sphdist info`` is :class:`InfoRequest`, run by :func:`sphdist.jobs.run`: :func:`describe`'s
JSON-serialisable dict (what ``sphdist info`` prints as JSON), with :func:`top_terms`, the
terms that weigh most in each component of a vocabulary-mode model, where asked.
"""

from __future__ import annotations

import dataclasses
import glob as local_glob
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from sphdist._words import plural
from sphdist.errors import (
    DataError,
    InputNotFoundError,
    ParameterError,
    Remedy,
    Text,
    option,
    remedy,
)
from sphdist.io import (
    CommitState,
    commit_state,
    exists,
    is_remote,
    listing_command,
    location,
    open_stored,
    stored_kind,
)
from sphdist.io import glob as url_glob
from sphdist.io.index import open_index
from sphdist.io.model import Model, open_model
from sphdist.jobs._lifecycle import Request, located

__all__ = [
    "InfoRequest", "describe", "fit_status", "resume_remedy", "require_embedding",
    "warn_if_stopped", "top_terms", "check_roles", "solver_seconds_per_iteration",
    "shown_objective", "plural", "TOP_TERMS_BASIS",
]

logger = logging.getLogger("sphdist")

_HISTORY = 5  # iterations of the histories shown


@dataclasses.dataclass(frozen=True)
class InfoRequest(Request):
    """``sphdist info``: what a corpus, model, embedding or index holds; a model's top terms.

    Run it with :func:`sphdist.jobs.run`: ``run(InfoRequest("m.zarr", top_terms=5))`` returns
    :func:`describe`'s dict, with ``top_terms`` (:func:`top_terms`) and ``top_terms_basis``
    (:data:`TOP_TERMS_BASIS`) where ``top_terms`` is given. Nothing is written.

    Parameters
    ----------
    path : path-like, optional
        The store to describe (its kind is read from it).
    model : path-like, optional
        A ``model.zarr``, where ``path`` is not given: a missing one is then "no such model".
    top_terms : int, optional
        Also list the ``top_terms`` terms at the positive and at the negative end of each
        component of U (a vocabulary-mode model).

    Raises
    ------
    ParameterError
        When built: if neither ``path`` nor ``model`` is given, or ``top_terms`` is not a
        positive int. When run: if ``top_terms`` is asked of a store that is not a model.
    ValueError
        When built: if a path is empty or names an unknown protocol.

    Notes
    -----
    Running it raises, besides: InputNotFoundError for a missing store;
    CorpusFormatError, ModelFormatError for a store sphdist cannot read; DataError for the top
    terms of a model without a vocabulary (:func:`top_terms`).
    """

    command: ClassVar[str] = "info"
    writes: ClassVar[str | None] = None
    targets: ClassVar[tuple[str, ...]] = ("path", "model")

    path: Any = None
    _: dataclasses.KW_ONLY
    model: Any = None
    top_terms: int | None = None

    def __post_init__(self) -> None:
        for name in ("path", "model"):
            object.__setattr__(self, name, located(getattr(self, name)))
        if self.path is None and self.model is None:
            raise ParameterError("no store to describe. To resolve this, pass a path (or a "
                                 "model).")
        n = self.top_terms  # no scikit-learn validation here: a query stays light (test_startup)
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ParameterError(option("top_terms", n) + " is not a number of terms. To "
                                 "resolve this, pass an int >= 1.")

    def inputs(self) -> tuple[Any, ...]:
        """The store described."""
        return (self.path if self.path is not None else self.model,)

    def prepare(self) -> dict[str, Any]:
        """:func:`describe` of the store (its metadata: no chunk of data is read)."""
        target = self.inputs()[0]
        report = describe(target, "model" if self.path is None else None)
        if self.top_terms is not None and report["kind"] != "model":
            raise ParameterError(
                f"{target} is a {report['kind']}, and " + option("top_terms", self.top_terms)
                + " lists the terms of a model's components. To resolve this, name a model: "
                + remedy(self.remedy(path=None, model="MODEL")) + "."
            )
        return report

    def execute(self, held: None, prepared: dict[str, Any]) -> dict[str, Any]:
        """The description, with the model's top terms where asked."""
        report = prepared
        if self.top_terms is not None:
            report["top_terms"] = top_terms(self.inputs()[0], self.top_terms)
            report["top_terms_basis"] = TOP_TERMS_BASIS
        return report


def _label_counts(labels: np.ndarray | None, names: list[str] | None) -> dict[str, int] | None:
    if labels is None:
        return None
    codes, counts = np.unique(labels, return_counts=True)
    out = {}
    for c, k in zip(codes.tolist(), counts.tolist(), strict=True):
        known = names is not None and 0 <= c < len(names)
        out[names[c] if known else ("unknown" if c < 0 else str(c))] = int(k)
    return out


def _chunk_summary(chunks: tuple[int, ...]) -> dict[str, int]:
    return {
        "n_chunks": len(chunks), "min": int(min(chunks, default=0)),
        "max": int(max(chunks, default=0)),
    }


def _checkpoint_state(path: Path, state: CommitState) -> dict[str, Any]:
    if state.committed:
        words = "committed"
    elif state.interrupted:  # a commit stopped between its two renames
        words = (f"interrupted commit: {path.name} is missing; its last complete version is "
                 f"{path.name}.old, which transform, export and info read in place")
    else:
        words = "none"
    return {
        "complete": state.complete,
        "state": words,
        "staging_dirs": list(state.staging),  # a running fit's next checkpoint, or debris
        "previous_kept_as_old": state.interrupted,
    }


def describe(path: str | os.PathLike[str], expect: str | None = None) -> dict[str, Any]:
    """Describe the corpus, model, embedding or neighbour index at ``path``.

    Parameters
    ----------
    path : path-like
    expect : {"model"}, optional
        What the caller expects (``"model"``: a model's path): a missing path is then "no such
        model". Default: whatever is stored.

    Returns
    -------
    dict
        Always ``kind`` (``"corpus"``, ``"dense"``, ``"model"``, ``"embedding"``, ``"index"``)
        and ``path``.
        A corpus: ``shape`` [m, n], ``nnz``, ``density`` (fraction), ``chunks`` (number,
        smallest, largest), ``feature_scheme``, ``tfidf``, ``labels`` (documents per label),
        ``n_empty``, ``has_vocabulary``, ``fingerprint``. A model: ``n_features``,
        ``n_components``, ``n_documents``, ``params``, ``n_iter``, ``converged``, ``status``
        (:func:`fit_status`: ``"stopped at iteration 2 of 200, not converged"``), ``objective``
        (the last iterations, as ``[iteration, value]``), ``u_step_norm`` / ``v_step_norm``
        (likewise), ``solver_seconds_per_iteration`` (:func:`solver_seconds_per_iteration`),
        ``corpus``, ``has_vocabulary``,
        ``has_embedding`` (whether V is stored: not in the checkpoint of a fit stopped early
        with the exact V-step, which holds U only) and ``checkpoint`` (``complete``;
        ``staging_dirs``, the names of uncommitted staging trees beside it; ``state``, in
        words: ``"committed"``, ``"none"`` or an interrupted commit whose last complete
        version is ``<path>.old``, with ``recover``, the fit that moves it back and continues
        it: the fields of a :class:`~sphdist.errors.Remedy` (``action``, ``target``,
        ``overrides``, ``say``), which ``sphdist info`` prints as its command). An
        embedding: ``shape`` [r, n], ``model``,
        ``corpus``, ``labels``, ``n_degenerate``. An index (``sphdist index``): ``index`` (its
        record: ``kind``, ``nlist``, ``nprobe``, ``n_documents``, ``n_indexed``,
        ``n_components``...), ``model`` and ``source`` (what it indexes).

    Raises
    ------
    InputNotFoundError
        If nothing is at ``path`` (and no staging tree of it either).
    CorpusFormatError, ModelFormatError
        If ``path`` is not a sphdist store, or a value read is damaged: a model's U (its
        digest, finite, orthonormal), its vocabulary or a corpus' (their digests).
    """
    path = location(path)
    state = commit_state(path)  # what is committed, staged or interrupted; changes nothing
    if not (state.committed or state.staging or state.interrupted):
        if expect == "model":
            open_model(path)  # raises "no such model", with how to fit one
        raise InputNotFoundError(
            f"{path}: no such corpus, model or embedding. To resolve this, check the path "
            f"(`{listing_command(path.parent)}` lists what is there)."
        )
    kind = stored_kind(path) if state.committed else None
    if kind == "model" or (not state.committed and (state.staging or state.interrupted)):
        return _describe_model(path, state)  # also a fit's first checkpoint still being written
    if kind == "embedding":
        emb = open_stored(path, "embedding")
        r, n = emb.V.shape
        return {
            "kind": "embedding", "path": str(path), "shape": [int(r), int(n)],
            "model": emb.attrs.get("model"), "corpus": emb.attrs.get("corpus"),
            "labels": _label_counts(emb.labels, emb.attrs.get("label_names")),
            "n_degenerate": emb.attrs.get("n_degenerate"), "method": emb.attrs.get("method"),
        }
    if kind == "index":  # `sphdist index`'s store: what it indexes, and how
        index = open_index(path)
        return {"kind": "index", "path": str(path), "index": index.record,
                "model": index.model, "source": index.source}
    source = open_stored(path, "input")
    m, n = source.shape
    info: dict[str, Any] = {
        "kind": "corpus" if kind == "corpus" else "dense", "path": str(path),
        "shape": [m, n], "nnz": int(source.nnz),
        "density": float(source.nnz / (m * n)) if m * n else 0.0,
        "chunks": _chunk_summary(source.chunks), "feature_scheme": source.feature_scheme,
        "tfidf": source.tfidf, "labels": _label_counts(source.labels, source.label_names),
        "n_empty": int(source.n_empty), "fingerprint": source.fingerprint,
    }
    if kind == "corpus":
        info["has_vocabulary"] = source.vocabulary is not None
    return info


def _describe_model(path: Path, state: CommitState) -> dict[str, Any]:
    checkpoint = _checkpoint_state(path, state)
    if not state.complete:
        return {"kind": "model", "path": str(path), "checkpoint": checkpoint}
    model = open_stored(path, "model")
    model.U  # noqa: B018 - the values are checked (finite, orthonormal, u_sha256), as transform does
    if state.interrupted and not state.committed:  # the fit's writer moves it back
        checkpoint["recover"] = dataclasses.asdict(model.resume_remedy())
    a = model.attrs
    m, r, n = model.shape
    objective = a["objective"]

    def last(values: list[float], first: int) -> list[list[float]]:
        start = max(0, len(values) - _HISTORY)
        return [[first + i, None if values[i] is None else float(values[i])]
                for i in range(start, len(values))]

    return {
        "kind": "model", "path": str(path), "n_features": m, "n_components": r,
        "n_documents": n, "params": a["params"], "n_iter": model.n_iter,
        "converged": bool(a["converged"]), "status": fit_status(model),
        "objective": last([shown_objective(f) for f in objective], 0),
        "u_step_norm": last(a["u_step_norm"], 1), "v_step_norm": last(a["v_step_norm"], 1),
        "solver_seconds_per_iteration": solver_seconds_per_iteration(model),
        "n_degenerate": a.get("n_degenerate"), "corpus": a["corpus"],
        "has_vocabulary": model.vocabulary is not None, "has_embedding": model.has_embedding,
        "checkpoint": checkpoint,
    }


def solver_seconds_per_iteration(model: Model) -> float | None:
    """The solver's mean time per iteration of the fit that wrote ``model``, in seconds.

    Read from the model's history of per-iteration seconds (``attrs["seconds"]``, every
    run of a resumed fit included): the solver's own time, without the initialisation
    (iteration 0) and without writing the checkpoints. ``sphdist fit`` reports it beside its
    ``seconds_per_iteration``, the wall time between iterations of that run, checkpoints
    included; the two names never stand for each other's figure.

    Parameters
    ----------
    model : Model

    Returns
    -------
    float or None
        None before the first iteration.
    """
    seconds = [s for s in model.attrs["seconds"][1:] if s is not None]
    return float(np.mean(seconds)) if seconds else None


def fit_status(model: Model) -> str:
    """How the fit that wrote ``model`` ended, in words.

    Parameters
    ----------
    model : Model

    Returns
    -------
    str
        ``"converged at iteration 12"``; ``"stopped at iteration 2 of 200, not converged"`` (a
        fit killed or interrupted before ``max_iter``: its checkpoint); or ``"reached max_iter
        100, not converged (tol 0.0001)"``.
    """
    n, params = model.n_iter, model.params
    if model.attrs.get("converged"):
        return f"converged at iteration {n}"
    max_iter = params.get("max_iter")
    if max_iter is not None and n < max_iter:
        return f"stopped at iteration {n} of {max_iter}, not converged"
    return f"reached max_iter {max_iter}, not converged (tol {params.get('tol')})"


def resume_remedy(model: Model) -> Remedy:
    """The fit, with ``resume``, that continues the fit of ``model``: :class:`Remedy`.

    :meth:`sphdist.io.model.Model.resume_remedy`: every parameter the checkpoint was written
    with, so the fit passes the resume checks.
    """
    return model.resume_remedy()


def require_embedding(model: Model) -> None:
    """Refuse the checkpoint of an unfinished fit (:meth:`Model.require_embedding`).

    Raises
    ------
    ModelFormatError
        If ``model`` holds U but not the embedding V.
    """
    model.require_embedding()


def warn_if_stopped(model: Model, use: str) -> None:
    """Log one WARNING line when ``model`` is the checkpoint of a fit that stopped early.

    Parameters
    ----------
    model : Model
    use : str
        What is done with it (``"evaluate"``), for the message.
    """
    status = fit_status(model)
    if status.startswith("stopped"):
        logger.warning(
            "%s: the fit %s; %s uses the model of that iteration. To finish the fit: %s.",
            model.path, status, use, Text(remedy(model.resume_remedy())),
        )


#: How :func:`top_terms` reads U, as printed beside its lists.
TOP_TERMS_BASIS = (
    "each component's positive and negative ends apart, by signed weight in U as fitted (not "
    "rotated; U is determined up to a rotation, a component up to its sign)"
)


def _still_there(source: Any) -> bool:
    """Whether a source a corpus recorded (a path, URL or glob pattern) names something now."""
    try:
        text = str(source)
        return exists(text) or bool(url_glob(text) if is_remote(text)
                                    else local_glob.glob(text))
    except Exception:  # noqa: BLE001 - a hint for the remedy only; SOURCE is said instead
        return False


def _vocabulary_refit(fitted: Model) -> str:
    """The ingest with a vocabulary and the refit that give ``fitted``'s documents term names.

    The documents are the sources its corpus recorded (``SOURCE`` when the corpus is gone,
    recorded none, or one of them is no longer there); the new corpus and model are named
    beside the old ones (``<name>.vocab.zarr``), which stay as they are. Rendered by the
    interface (:func:`sphdist.errors.remedy`): commands on the command line, calls in Python.
    """
    corpus = fitted.corpus.get("path")
    sources: list[str] = []
    if corpus:
        try:
            recorded = open_stored(corpus).attrs.get("source")
        except Exception:  # noqa: BLE001 - a hint for the remedy only; SOURCE says what to put
            recorded = None
        sources = [recorded] if isinstance(recorded, str) else list(recorded or [])
        if not all(map(_still_there, sources)):  # moved, or no file (synth records its name)
            sources = []

    def vocab(path: Any) -> str:  # a path or URL, as recorded
        return str(path).removesuffix(".zarr") + ".vocab.zarr"

    new_corpus = vocab(corpus) if corpus else "CORPUS"
    r = fitted.params.get("n_components")
    return remedy(
        Remedy("ingest", {"source": sources or ["SOURCE"]},
               {"vocabulary": True, "output": new_corpus}),
        Remedy("fit", {"input": new_corpus, "output": vocab(fitted.path)},
               {"n_components": r} if r else {}),
    )


def top_terms(model: str | os.PathLike[str], n_terms: int = 10) -> list[dict[str, Any]]:
    """The terms at the positive and the negative end of each component of a vocabulary-mode model.

    A component ``U[:, c]`` is an axis: the model is unchanged when a column of U and the
    matching row of V change sign (and, more generally, under a rotation of both), so the
    terms with the largest entries and those with the most negative entries are the two
    poles of one axis. They are listed apart, never mixed in one list by ``|U|``; U is read
    as fitted, not rotated (:data:`TOP_TERMS_BASIS`).

    Parameters
    ----------
    model : path-like
        A ``model.zarr`` fitted on a vocabulary-scheme corpus.
    n_terms : int, default 10
        Terms per end of each component.

    Returns
    -------
    list of dict
        One dict per component (r of them): ``component`` (its index), ``positive`` (at most
        ``n_terms`` dicts ``term``, ``weight``, the largest positive entries of ``U[:, c]``
        by decreasing weight) and ``negative`` (at most ``n_terms``, the most negative
        entries by increasing weight). Ties in feature order.

    Raises
    ------
    DataError
        If the model's features are hashed (no names) or it has no vocabulary.
    ParameterError
        If ``n_terms < 1``.
    InputNotFoundError, ModelFormatError
        For a missing or unreadable model.
    """
    if n_terms < 1:
        raise ParameterError(f"n_terms must be >= 1, got {n_terms}.")
    fitted = open_model(model)
    scheme = (fitted.corpus.get("feature_scheme") or {}).get("type")
    vocabulary = fitted.vocabulary
    if vocabulary is None:
        reason = (
            "its features are hashed, so they have no names" if scheme == "hashing"
            else f"it has no vocabulary (feature scheme {scheme!r})"
        )
        raise DataError(
            f"{model}: top terms need a vocabulary-mode corpus, but {reason}. To resolve "
            "this, ingest with a vocabulary and refit: " + _vocabulary_refit(fitted) + "."
        )
    U = fitted.U
    features = np.arange(U.shape[0])
    out = []
    for c in range(U.shape[1]):
        column = U[:, c]
        ends: dict[str, Any] = {"component": c}
        for end, sign in (("positive", 1.0), ("negative", -1.0)):
            order = np.lexsort((features, -sign * column))
            order = order[sign * column[order] > 0][:n_terms]
            ends[end] = [{"term": str(vocabulary[i]), "weight": float(column[i])} for i in order]
        out.append(ends)
    return out


def shown_objective(value: float) -> float:
    """An objective value as reported to a user: ``max(value, 0)``.

    The objective ``||X - U V||_F^2`` is a sum of squares; the solver evaluates it as
    ``||X||_F^2 - 2 tr(U^T X V^T) + ||U V||_F^2`` (Liu et al. 2019, Eq. 3.2 expanded), whose
    rounding leaves about ``-1e-15 ||X||_F^2`` where the fit is exact (r = n). The solver's
    history keeps the computed values; only what is printed or reported is clipped.

    Parameters
    ----------
    value : float

    Returns
    -------
    float

    Examples
    --------
    >>> shown_objective(-2.3e-14), shown_objective(1.5)
    (0.0, 1.5)
    """
    return max(float(value), 0.0)


def check_roles(
    verb: str, model: str | os.PathLike[str], input: str | os.PathLike[str] | None,
    rest: Mapping[str, Any] | None = None,
) -> None:
    """Refuse a model and an input given the wrong way round, naming the corrected job.

    Called by the jobs before opening either path, so that ``EvaluateRequest(CORPUS, MODEL)``
    (``sphdist evaluate -m CORPUS -i MODEL``) is answered with the call that works, not with
    the storage layer's "not a sphdist model".

    Parameters
    ----------
    verb : str
        The job, by the name of its command (``"evaluate"``, ``"plot embedding"``): the
        :attr:`~sphdist.errors.Remedy.action` of the remedy.
    model, input : path-like
        What was given as ``model`` and ``input`` (``input`` None: not given).
    rest : mapping
        The job's other arguments needed for the corrected job to run, by their Python names
        (``{"output": PATH}``).

    Raises
    ------
    ParameterError
        If ``input`` is a model and ``model`` is not (swapped), or both are models (the
        corpus the model recorded is suggested when it exists); the remedy is a
        :class:`~sphdist.errors.Remedy` of ``verb``.
    """
    if input is None or stored_kind(input) != "model":
        return
    model, input = location(model), location(input)
    others = dict(rest or {})
    kind = stored_kind(model) if exists(model) else None
    if kind != "model" and exists(model):
        what = f"a {kind}" if kind else "not a model"
        swapped = Remedy(verb, {"model": str(input), "input": str(model)}, others)
        raise ParameterError(
            option("model", model) + f" is {what} and " + option("input", input)
            + " is a model: the two look swapped. To resolve this, run " + remedy(swapped) + "."
        )
    recorded = open_model(model).corpus.get("path") if kind == "model" else None
    if recorded and exists(recorded):
        again = Remedy(verb, {"model": str(model), "input": str(recorded)}, others)
        fix = f"pass the corpus {model} was fitted on: " + remedy(again)
    else:
        fix = "pass as " + option("input") + f" the corpus {model} was fitted on"
    raise ParameterError(
        option("input", input) + (" is a model, not a corpus. To resolve this, " + fix + ".")
    )
