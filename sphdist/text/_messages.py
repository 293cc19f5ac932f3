"""The ingest jobs that ingestion's messages suggest, and the emptied documents.

Every remedy :mod:`sphdist.text.ingest` names is a :class:`~sphdist.errors.Remedy` of the
``ingest`` job rebuilt from the arguments of the failed call (:func:`ingest_remedy`), with
the arguments that fix it, by their Python names: ``str(exc)`` words it as a call of
:meth:`sphdist.jobs.ingest.IngestRequest.of`, the command line as the ``sphdist ingest``
command that runs it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

from sphdist.errors import DataError, Remedy, Text, option, remedy
from sphdist.text.tfidf import DEFAULT_TOKEN_PATTERN, TextOptions

__all__ = ["Emptied", "documents", "ingest_remedy", "text_arguments"]

logger = logging.getLogger("sphdist")


def text_arguments(options: TextOptions, min_df: Any, max_df: Any) -> dict[str, Any]:
    """The :class:`~sphdist.text.ingest.TextSpec` fields that give ``options``.

    Name -> value, defaults left out (``stop_words=None`` kept: the default is English).
    """
    fields: dict[str, Any] = {
        "vocabulary": False if not options.vocabulary else None,
        "n_features": options.n_features if not options.vocabulary else None,
        "min_df": min_df, "max_df": max_df, "max_features": options.max_features,
        "select": options.select, "n_select": options.n_select if options.select else None,
        "sublinear_tf": False if not options.sublinear_tf else None,
        "lowercase": False if not options.lowercase else None,
        "strip_accents": options.strip_accents,
        "token_pattern": (options.token_pattern
                          if options.token_pattern != DEFAULT_TOKEN_PATTERN else None),
    }
    kept = {k: v for k, v in fields.items() if v is not None}
    if options.stop_words is None:  # not the default: kept, as None
        kept["stop_words"] = None
    return kept


def ingest_remedy(source: Any, output: Any, given: dict[str, Any], **values: Any) -> Remedy:
    """The ``ingest`` job of ``source`` to ``output`` with ``given``, then ``values``."""
    paths = [str(source)] if isinstance(source, (str, os.PathLike)) else list(map(str, source))
    kept = {k: v for k, v in given.items()  # what was not given, and no cleaning, left out
            if (v is not None or k == "stop_words") and not (k == "remove_headers" and not v)}
    arguments = {k: (",".join(map(str, v)) if isinstance(v, (list, tuple)) else v)
                 for k, v in {**kept, **values}.items()}
    return Remedy("ingest", {"source": paths, "output": str(output)}, arguments)


@dataclasses.dataclass(frozen=True)
class Emptied:
    """Documents left without a token by the news cleaning: the warning and the error."""

    source: Any
    output: Any
    given: dict[str, Any]
    remove: tuple[str, ...]
    inherited_from: Any  # the like path the cleaning came from, or None
    count: int  # documents with a token before the cleaning and none after
    n: int

    def _cleaning(self) -> str:
        how = (option("remove_headers", True) + f", inherited from {self.inherited_from}") \
            if self.inherited_from is not None else option("remove_headers", True)
        return f"removing {'/'.join(self.remove)} (" + how + ")"

    def _without(self, **values: Any) -> str:
        if "like" in self.given:  # the cleaning recorded there would be inherited
            values = {"remove_headers": False, **values}
        given = {k: v for k, v in self.given.items() if k != "remove_headers"}
        return remedy(ingest_remedy(self.source, self.output, given, **values))

    def warn(self) -> None:
        if self.count:
            logger.warning(
                "%d of %s %s no token left after %s: their columns are zero (flagged in "
                "corpus.empty). If the documents have no headers to remove, ingest them "
                "without the cleaning: %s", self.count, documents(self.n),
                "has" if self.count == 1 else "have", Text(self._cleaning()),
                Text(self._without(overwrite=True)))

    def error(self) -> DataError:
        if self.count:
            cause = (f"{self.count} of them had tokens before " + self._cleaning()
                     + ", which emptied them")
            fix = "ingest them without the cleaning: " + self._without()
        else:
            cause = "no document holds a token of the features" + (
                f" of {self.given['like']}" if "like" in self.given else "")
            fix = ("check the source and " + option("text_field")
                   + " (the field or column of the text)")
        every = "its 1 document is" if self.n == 1 else f"all {self.n} documents are"
        return DataError(f"{self.source}: {every} empty (" + cause
                         + "), so the corpus would hold nothing. To resolve this, " + fix + ".")


def documents(n: int) -> str:
    return "1 document" if n == 1 else f"{n} documents"
