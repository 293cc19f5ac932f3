"""Open whatever sphdist store is at a path: the one opener that dispatches on the stored kind.

A sphdist store is a zarr v3 group tagged ``sphdist.kind``: ``"corpus"``
(:mod:`sphdist.io.corpus`), ``"model"`` (:mod:`sphdist.io.model`) or ``"embedding"``
(:mod:`sphdist.io.embedding`). A dense 2-D zarr array (or a group holding one as ``X``) is
accepted as model input too (:class:`~sphdist.io.corpus.DenseInput`). Every handle checks its
arrays against the one safe-codec list (:data:`sphdist.io._zarr.SAFE_CODECS`).
"""

from __future__ import annotations

import os

import zarr

from sphdist.errors import ParameterError
from sphdist.io._atomic import readable_path
from sphdist.io._zarr import read_tag
from sphdist.io.corpus import Corpus, DenseInput, open_input
from sphdist.io.embedding import Embedding
from sphdist.io.model import Model

__all__ = ["KINDS", "stored_kind", "open_stored"]

#: What :func:`open_stored` opens: the three tagged kinds, a dense array, and "input" (a
#: corpus or a dense array, as :func:`sphdist.io.corpus.open_input`).
KINDS = ("corpus", "model", "embedding", "dense", "input")

_OPENERS = {
    "corpus": Corpus, "model": Model, "embedding": Embedding, "dense": DenseInput,
    "input": open_input,
}


def stored_kind(path: str | os.PathLike[str]) -> str | None:
    """The ``sphdist.kind`` tag of the group at ``path``, without validating anything else.

    Parameters
    ----------
    path : path-like

    Returns
    -------
    str or None
        ``"corpus"``, ``"model"``, ``"embedding"`` (or whatever else a group is tagged), or
        None when ``path`` holds no tagged zarr group (nothing, an array, an untagged group,
        not zarr). After a commit interrupted between its two renames, the kind of the
        previous version (``<path>.old``), which the openers read in place.
    """
    try:
        group = zarr.open_group(store=str(readable_path(path)), mode="r")
    except Exception:  # not a group: a dense array, or not zarr (the openers report it)
        return None
    return read_tag(group).get("kind")


def open_stored(
    path: str | os.PathLike[str], kind: str | None = None
) -> Corpus | DenseInput | Model | Embedding:
    """Open the corpus, dense input, model or embedding at ``path`` read-only.

    Parameters
    ----------
    path : path-like
    kind : {"corpus", "model", "embedding", "dense", "input"}, optional
        What the caller expects; the store is then opened as that kind and refused with that
        kind's error if it is something else. ``"input"`` is a corpus or a dense array. Default:
        whatever is stored (a model, an embedding, otherwise model input).

    Returns
    -------
    Corpus, DenseInput, Model or Embedding

    Raises
    ------
    ParameterError
        For an unknown ``kind``.
    InputNotFoundError
        If nothing is at ``path``.
    CorpusFormatError, ModelFormatError
        If the store is not of the kind expected (or, by default, not a sphdist store nor a
        dense 2-D array), or its format version or arrays are not readable (an array stored
        with codecs outside the safe list, or of a non-plain dtype).
    """
    if kind is None:
        found = stored_kind(path)
        kind = found if found in ("model", "embedding") else "input"
    if kind not in _OPENERS:
        raise ParameterError(f"kind={kind!r}: expected one of {list(KINDS)}.")
    return _OPENERS[kind](path)
