"""The ``sphdist ingest`` commands that ingestion's messages suggest, and the emptied documents.

Every remedy :mod:`sphdist.text.ingest` prints is a command that works: it is rebuilt from the
arguments of the failed call (:func:`ingest_command`), with the options that fix it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
from typing import Any

from sphdist.errors import DataError, option
from sphdist.text.tfidf import DEFAULT_TOKEN_PATTERN, TextOptions

__all__ = ["Emptied", "documents", "ingest_command", "option_flags"]

logger = logging.getLogger("sphdist")


def option_flags(options: TextOptions, min_df: Any, max_df: Any) -> dict[str, Any]:
    """The ``sphdist ingest`` options (name -> value) that give ``options``, defaults left out."""
    flags: dict[str, Any] = {
        "hashing": not options.vocabulary,
        "n_features": options.n_features if not options.vocabulary else None,
        "min_df": min_df, "max_df": max_df, "max_features": options.max_features,
        "select": options.select, "n_select": options.n_select if options.select else None,
        "stop_words": "none" if options.stop_words is None else None,
        "no_sublinear_tf": not options.sublinear_tf, "no_lowercase": not options.lowercase,
        "strip_accents": options.strip_accents,
        "token_pattern": (options.token_pattern
                          if options.token_pattern != DEFAULT_TOKEN_PATTERN else None),
    }
    return {k: v for k, v in flags.items() if v is not None and v is not False}


def ingest_command(source: Any, output: Any, given: dict[str, Any], *flags: str,
                   **values: Any) -> str:
    """A ``sphdist ingest`` command line: ``given`` options, then ``flags`` and ``values``."""
    words = ["sphdist", "ingest"]
    words += [str(source)] if isinstance(source, (str, os.PathLike)) else map(str, source)
    words += ["-o", str(output)]
    for name, value in {**given, **values}.items():
        if value is None or value is False:
            continue
        words.append("--" + name.replace("_", "-"))
        if value is not True:
            words.append(",".join(value) if isinstance(value, (list, tuple)) else str(value))
    return shlex.join([*words, *flags])


@dataclasses.dataclass(frozen=True)
class Emptied:
    """Documents left without a token by the news cleaning: the warning and the error."""

    source: Any
    output: Any
    given: dict[str, Any]
    remove: tuple[str, ...]
    inherited_from: Any  # the --like path the cleaning came from, or None
    count: int  # documents with a token before the cleaning and none after
    n: int

    def _cleaning(self) -> str:
        how = f"--remove-headers, inherited from {self.inherited_from}" \
            if self.inherited_from is not None else "--remove-headers"
        return f"removing {'/'.join(self.remove)} ({how})"

    def _without(self, *flags: str) -> str:
        values = {"keep_headers": True} if "like" in self.given else {}
        given = {k: v for k, v in self.given.items() if k != "remove_headers"}
        return ingest_command(self.source, self.output, given, *flags, **values)

    def warn(self) -> None:
        if self.count:
            logger.warning(
                "%d of %s %s no token left after %s: their columns are zero (flagged in "
                "corpus.empty). If the documents have no headers to remove, ingest them "
                "without the cleaning: `%s`", self.count, documents(self.n),
                "has" if self.count == 1 else "have", self._cleaning(),
                self._without("--overwrite"))

    def error(self) -> DataError:
        if self.count:
            cause = (f"{self.count} of them had tokens before {self._cleaning()}, which "
                     "emptied them")
            remedy = f"ingest them without the cleaning: `{self._without()}`"
        else:
            cause = "no document holds a token of the features" + (
                f" of {self.given['like']}" if "like" in self.given else "")
            remedy = (f"check the source and {option('text_field')} (the field or column of "
                      "the text)")
        every = "its 1 document is" if self.n == 1 else f"all {self.n} documents are"
        return DataError(f"{self.source}: {every} empty ({cause}), so the corpus would hold "
                         f"nothing. To resolve this, {remedy}.")


def documents(n: int) -> str:
    return "1 document" if n == 1 else f"{n} documents"
