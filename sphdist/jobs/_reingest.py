"""How to bring documents into a model's feature space: the remedies of a mismatched corpus.

:func:`mismatch` says what differs between a corpus and a model's training corpus;
:func:`reingest_remedy` gives the jobs that re-ingest the corpus' documents like the model and
embed them (the transform, the neighbour searches and the export suggest them). Both are
re-exported by :mod:`sphdist.jobs.embedding`.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path
from typing import Any

from sphdist.errors import Remedy, option, remedy
from sphdist.io import committed, location
from sphdist.io.model import Model, idf_sha256

__all__ = ["mismatch", "reingest_remedy"]


def _beside(path: Path, suffix: str) -> Path:
    return path.with_name(path.name.removesuffix(".zarr") + suffix)



def mismatch(model: Model, source: Any) -> str:
    """What differs between a corpus and a model's training corpus, short, for a message.

    Examples: ``"it has 256 features, the model has 512; feature scheme stop_words
    'english', the model's None"``, ``"idf fingerprint 354c891101df, the model's
    d53cc28498cb"``. The complete check is
    :meth:`sphdist.io.model.Model.check_compatible`.
    """
    ours = model.corpus.get("feature_scheme") or {}
    theirs = source.feature_scheme or {}
    parts = []
    if source.n_features != model.shape[0]:
        parts.append(f"it has {source.n_features} features, the model has {model.shape[0]}")
    parts += [f"feature scheme {k} {theirs.get(k)!r}, the model's {ours.get(k)!r}"
              for k in sorted(set(ours) | set(theirs))
              if k != "n_features" and theirs.get(k) != ours.get(k)]
    options = model.corpus.get("tfidf") or {}
    parts += [f"tf-idf {k} {source.tfidf.get(k)!r}, the model's {options[k]!r}"
              for k in sorted(set(options) & set(source.tfidf) - {"remove"})  # not the cleaning
              if options[k] != source.tfidf[k]]
    if not parts:
        a, b = idf_sha256(source.idf), idf_sha256(model.idf)
        if a != b:
            parts.append(f"idf fingerprint {(a or 'none')[:12]}, the model's {(b or 'none')[:12]}")
    return "; ".join(parts) or "another vocabulary"


def reingest_remedy(
    model: Model, source: Any, path: str | os.PathLike[str], then: Remedy | None = None,
    output: str | os.PathLike[str] | None = None,
) -> str:
    """How to bring the documents of a corpus into a model's feature space: remedies.

    Parameters
    ----------
    model : Model
    source : Corpus
        The corpus at ``path``, in another feature space (or with another idf).
    path : path-like
    then : Remedy, optional
        A job to run on the embedding afterwards.
    output : path-like, optional
        The embedding to write; default ``<path stem>.emb.zarr``.

    Returns
    -------
    str
        ``re-ingest its documents ...: `` and a chain of :class:`~sphdist.errors.Remedy`
        (:func:`sphdist.errors.remedy`): the ingest of SRC like the model to
        ``<stem>.like.zarr``, its transform to ``<stem>.emb.zarr`` [and ``then``], with the
        source and the reading options (fields, categories, sampling) the corpus recorded,
        named as the ingest job's parameters; or, when that source is no longer there, the
        same with ``SOURCE`` in its place and a sentence saying so.
    """
    path = location(path)
    like = _beside(path, ".like.zarr")
    emb = _beside(path, ".emb.zarr") if output is None else output
    recorded = getattr(source, "attrs", {}).get("source")
    sources = [recorded] if isinstance(recorded, str) else list(recorded or [])
    ingest = (getattr(source, "attrs", {}) or {}).get("ingest") or {}
    options: dict[str, Any] = {}
    fields = ingest.get("fields") or {}
    for name, default in (("text", "text"), ("label", None), ("id", None)):
        if fields.get(name) not in (None, default):
            options[f"{name}_field"] = str(fields[name])
    if ingest.get("categories"):
        options["categories"] = ",".join(ingest["categories"])
    if ingest.get("max_docs_per_label"):
        options["max_docs_per_label"] = int(ingest["max_docs_per_label"])
        options["seed"] = int(ingest.get("seed", 0))
    found = bool(sources) and all(glob.glob(s) or Path(s).exists() for s in sources)
    cleaning = (model.corpus.get("tfidf") or {}).get("remove") or []
    notes = []
    if found and "headers" in cleaning:
        # scikit-learn (the cleaning) and the text sources, for this hint alone: a neighbour
        # query imports this module and must import neither (tests/cli/test_startup.py)
        from sphdist.text._passes import emptied_by

        if emptied_by(cleaning, sources, ingest):
            options["remove_headers"] = False  # the cleaning the like inherits would empty them
            notes.append(option("remove_headers", False) + ": the model's "
                         + option("remove_headers", True)
                         + " would leave most of these documents empty: they have no header "
                         "block")
    existing = [str(p) for p in (like, emb) if committed(p)]
    if existing:
        notes.append(option("overwrite", True) + f": {' and '.join(existing)} "
                     f"{('exists' if len(existing) == 1 else 'exist')}")
    overwrite = {"overwrite": True}
    commands = [
        Remedy("ingest", {"source": sources if found else ["SOURCE"]},
               {**options, "like": str(model.path), "output": str(like),
                **(overwrite if committed(like) else {})}),
        Remedy("transform", {"model": str(model.path), "input": str(like), "output": str(emb)},
               overwrite if committed(emb) else {}),
    ]
    if then:
        commands.append(then)
    if not found:
        notes.append(f"SOURCE: the documents of {path}; the source it recorded, "
                     f"{recorded or 'none'}, is not there")
    where = f" ({'; '.join(notes)})" if notes else ""
    return ("re-ingest its documents with the model's features and idf, then embed them: "
            + remedy(*commands) + f"{where}")
