"""The synth job: a seeded synthetic collection with known topics, written to one output.

``sphdist synth`` is :class:`SynthRequest`, run by :func:`sphdist.jobs.run`; the generative
model and the writers are :mod:`sphdist.text.synth`'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import psutil

from sphdist.errors import InsufficientMemoryError, ParameterError, option
from sphdist.io import Output
from sphdist.jobs._lifecycle import Request, located
from sphdist.text.synth import FORMATS, SynthSpec, SynthSummary, output_format, write

__all__ = ["SynthRequest"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SynthRequest(SynthSpec, Request):
    """``sphdist synth``: write ``n_docs`` documents of ``n_topics`` topics to ``output``.

    ``run(SynthRequest(output="docs.jsonl", n_docs=1000, n_topics=5, seed=1))`` returns a
    :class:`~sphdist.text.synth.SynthSummary`. The fields of :class:`SynthSpec` (``n_docs``,
    ``n_topics``, ``seed``, ``doc_length``, ``vocab_size``, ``n_features``, ``vocabulary``,
    ``chunk_size``, ``zipf_exponent``, ``purity``, ``background``) say what is drawn; these
    say where it goes (keywords only).

    Parameters
    ----------
    output : path-like
        ``*.jsonl`` (JSON Lines) or ``*.csv`` (CSV: a header ``id,label,text``, a row per
        document), each gzip-compressed when it ends in ``.gz``; ``*.zarr``: the corpus
        directory. The format is the suffix's (:func:`~sphdist.text.synth.output_format`).
    format : {"jsonl", "csv", "corpus"}, optional
        Default: the one the suffix of ``output`` names; given, it must agree with it.
    overwrite : bool, default False
        Replace an existing ``output``.
    progress : bool or "log", default False
        True: a tqdm progress bar on stderr; ``"log"``: INFO lines on the ``sphdist`` logger
        at every tenth of the documents (see :func:`sphdist._progress.progress`).

    Raises
    ------
    ParameterError
        If a field is out of range (:class:`SynthSpec`) or ``format`` is unknown (when built);
        when run, if the suffix of ``output`` names another format or none.

    Examples
    --------
    >>> import json, os, tempfile
    >>> from sphdist.jobs import run
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "docs.jsonl")
    ...     summary = run(SynthRequest(output=path, n_docs=3, n_topics=2, doc_length=5, seed=1))
    ...     with open(path) as f:
    ...         sorted(json.loads(f.readline()))
    ['id', 'label', 'text']
    >>> summary.n_docs, summary.format
    (3, 'jsonl')
    """

    command: ClassVar[str] = "synth"
    targets: ClassVar[tuple[str, ...]] = ("output",)

    output: Any
    format: str | None = None
    overwrite: bool = False
    progress: bool | str = False
    def __post_init__(self) -> None:
        super().__post_init__()  # the spec's ranges
        object.__setattr__(self, "output", located(self.output))
        if self.format is not None and self.format not in FORMATS:
            raise ParameterError(f"format={self.format!r}: expected one of {list(FORMATS)}.")

    @property
    def writes(self) -> str:  # type: ignore[override]
        """What is written: a ``"corpus"`` store (``format`` or a ``.zarr`` name), else a file.

        Told without refusing anything: a suffix that names no format is refused by
        :meth:`check_name`, after what is at the output was looked at (an output of another
        kind is refused first, as it is by every command).
        """
        name = self.output.name.lower()
        corpus = self.format == "corpus" or (self.format is None and name.endswith(".zarr"))
        return "corpus" if corpus else "file"

    @property
    def written(self) -> str:
        """The format written: ``format``, or the one the suffix names (``.gz`` of text only)."""
        return output_format(self.output, self.format)

    def prepare(self) -> None:
        """Refuse sizes whose draw exceeds this machine's memory (:meth:`SynthSpec.nbytes`)."""
        need, total = self.nbytes(), psutil.virtual_memory().total
        if need > total:
            raise InsufficientMemoryError(
                f"a synth of {self.n_docs} documents of {self.doc_length} tokens on average, "
                f"{min(self.chunk_size, self.n_docs)} at a time, needs about "
                f"{need / 2 ** 30:.2f} GiB of memory, more than the {total / 2 ** 30:.2f} GiB "
                "of this machine; nothing was written. To resolve this, choose a smaller "
                + option("doc_length") + ", " + option("n_docs") + " or " + option("chunk_size")
                + "."
            )

    def execute(self, held: Output, prepared: None) -> SynthSummary:
        """Draw every chunk and write it through ``held``, in its format."""
        return write(held, self, self.written, overwrite=self.overwrite,
                     progress=self.progress)
