"""Text of the messages and summaries, with no import beyond the standard library.

Here so that a command that only prints a count (``sphdist synth``) does not import the jobs
that describe stored data; :mod:`sphdist.jobs.info` re-exports them.
"""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str) -> str:
    """``"1 document"``, ``"2 documents"``: a count with its noun (regular plurals only).

    Examples
    --------
    >>> plural(1, "document"), plural(0, "document")
    ('1 document', '0 documents')
    """
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
