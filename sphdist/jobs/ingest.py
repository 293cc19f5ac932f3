"""The ingest job: text -> tf-idf -> ``corpus.zarr``, written to one output.

``sphdist ingest`` is :class:`IngestRequest`, run by :func:`sphdist.jobs.run`; what is read and
how it becomes features (:class:`~sphdist.text.ingest.SourceSpec`,
:class:`~sphdist.text.ingest.TextSpec`) and the two passes are :mod:`sphdist.text.ingest`'s.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any, ClassVar

from sphdist.errors import ParameterError
from sphdist.io import Output
from sphdist.io.corpus import Corpus
from sphdist.jobs._lifecycle import Request, located
from sphdist.text.ingest import SourceSpec, TextSpec, check_sizes, read_like, write

__all__ = ["IngestRequest", "SourceSpec", "TextSpec"]


@dataclasses.dataclass(frozen=True)
class IngestRequest(Request):
    r"""``sphdist ingest``: a tf-idf ``corpus.zarr`` from a text collection, in bounded memory.

    Run by :func:`sphdist.jobs.run`, which returns the committed :class:`Corpus`.

    Parameters
    ----------
    source : SourceSpec, or path-like, URL, glob pattern or sequence of them
        The documents and how to read them; a path (or sequence) is ``SourceSpec(source)``.
    output : path-like
        Where to write the corpus (a zarr v3 directory; see :mod:`sphdist.io.corpus`).
    text : TextSpec, default TextSpec()
        Feature scheme, tokenisation, weighting and news cleaning.
    like : path-like, optional
        A ``corpus.zarr`` or ``model.zarr``: take its feature scheme, tf-idf options, idf and
        vocabulary instead of fitting them, so that the new documents are weighted as the
        documents the model was fitted on. The feature and weighting options of ``text`` are
        then ignored; ``text.remove``, when given, overrides the recorded cleaning.
    chunk_size : int, default 4096
        Documents per stored chunk and per spilled count matrix, at most 2**31 - 1. A chunk
        also ends before a document that would take its text past
        :data:`sphdist.text._passes.CHUNK_CHARS` (16 Mi) characters, so that a chunk of large
        documents holds a bounded part of them; the chunks depend on the documents alone
        (not on ``partition_size``, the workers or the scheduler).
    partition_size : int, optional
        Documents per partition (one task of the counting pass), rounded up to a multiple of
        ``chunk_size``; default ``4 * chunk_size``. A gzip JSON Lines file or a CSV file is one
        partition.
    overwrite : bool, default False
        Replace an existing ``output``.
    progress : bool or "log", default False
        True: tqdm progress bars on stderr (documents done / total when known); ``"log"``:
        plain lines on the ``sphdist`` logger at every tenth of the work (for logs that are
        not a terminal).

    Raises
    ------
    InputNotFoundError
        If ``source`` (or every match of a pattern), or ``like``, does not exist.
    DataError
        If a document cannot be used and ``on_error="fail"`` (the message names the file and
        line, row or member, and how to proceed; a file name that is not UTF-8 is such a
        document), if a compressed file is truncated or damaged, if the source holds no
        document (or all were skipped), is not of its format, lacks the text column, if no
        document has a token (e.g. all emptied by ``remove``), or if ``min_df``/``max_df``
        leave no term (a small collection; the message gives the command that keeps them).
    ParameterError
        If a parameter is out of range or does not apply (e.g. ``select`` without labels or
        without ``vocabulary``, ``n_features`` with it), ``token_pattern`` does not compile
        or has several capturing groups, ``n_features`` exceeds this machine's memory, or a
        category is not a label of the source; also what :class:`SourceSpec` and
        :class:`TextSpec` raise when ``source`` or ``text`` is not one.
    CorpusFormatError, ModelFormatError
        If ``like`` is neither a corpus with an idf nor a model with one.
    OutputExistsError
        If ``output`` exists and ``overwrite`` is False (as :func:`sphdist.jobs.run` refuses
        it for every command).
    OutputLockedError
        If another process is writing ``output`` (``overwrite`` does not take it over).
    OSError
        If reading or writing fails. On any error nothing is left at ``output``.

    Notes
    -----
    The errors above are raised when the request is run. Run, it returns the committed
    corpus: ``X`` has shape (m, n), float64, documents in source order (directory / tar
    sources: sorted by id), chunks of ``chunk_size`` columns (shorter at the end of a
    partition). Also stored: ``idf`` (m,) float64; ``doc_ids`` (n,) str; ``labels`` (n,) int32
    codes into ``label_names`` (sorted) when labels exist; ``empty`` (n,) bool; ``vocabulary``
    (m,) str for the vocabulary scheme; attributes ``feature_scheme``, ``tfidf``, ``source`` and
    ``ingest`` (the summary: counts of documents, skipped, blank, empty, the workers that ran
    the tasks, timings).

    With :math:`c_{ij}` the count of the tokens of document :math:`j` mapped to feature
    :math:`i` (hashed, colliding tokens summed; or the vocabulary term), :math:`n` the number of
    ingested documents and :math:`\mathrm{df}_i` the number of them with :math:`c_{ij} > 0`,

    .. math::

        \mathrm{idf}_i = \ln\frac{1 + n}{1 + \mathrm{df}_i} + 1, \qquad
        X_{ij} = \frac{t(c_{ij})\,\mathrm{idf}_i}{\lVert t(c_{\cdot j}) \odot \mathrm{idf}
        \rVert_2},

    with :math:`t(c) = c`, or :math:`1 + \ln c` for ``sublinear_tf``: that is
    ``TfidfVectorizer(...).fit_transform(texts).T`` (vocabulary scheme) or
    ``TfidfTransformer().fit_transform(HashingVectorizer(alternate_sign=False,
    norm=None).transform(texts)).T``, with the same floating-point operations. Columns of
    documents without a token are exactly zero and flagged in ``empty`` (they are kept, and
    counted in the summary, never dropped).

    Where the tasks run: on the scheduler dask uses in the calling context: the default
    ``distributed`` client (``with sphdist.jobs.cluster.connect(...)``: a scheduler's address or
    a LocalCluster of worker processes), or the local scheduler the caller's ``dask.config``
    names (``with dask.config.set(scheduler="synchronous")`` runs everything in this thread);
    else a pool of this machine's cores owned by the call (:func:`local_pool`: threads for a
    small source, a pool of processes started from a fork server for a large one), shut down at
    its end. At most ``2 * workers`` tasks are in flight (the own pool is handed the next task
    as the driver takes a result, dask's schedulers a window of them at a time) and their
    results are taken in task order, so the corpus is the same, bit for bit, on every
    scheduler. On Ctrl-C the running tasks of the ingest's own pool are let finish (the workers
    ignore SIGINT) before the scratch and staging are removed; whatever an ingest killed
    outright left beside ``output`` (``output.tmp-*``) is removed by the next ingest of
    ``output``.

    Memory: the driver holds the document frequencies (``n_features * 8`` bytes, or the
    vocabulary's terms with two counts each, times the labels for ``select``), O(n) ids and
    labels (and, during pass 1, an 8-byte digest of each id, to find repeated ids), and at
    most ``2 * workers`` partition results or chunks; a worker holds one chunk of documents
    and its counts (a tar partition: the partition's raw documents). The spilled counts take
    about 12 bytes per nonzero on disk next to the output, and are removed at the end. Cost:
    every document is read, decoded and tokenised once (twice when ids repeat and
    ``on_error="skip"``: pass 1 counts again without the repeats, so that the idf is the one of
    the documents kept); a tar archive is read once per partition (gzip cannot seek). Workers
    write the spilled counts and the stored chunks next to ``output``: on a distributed cluster
    that directory must be on a filesystem the workers share, and the source must be readable by
    them.

    Examples
    --------
    >>> from sphdist.jobs import run
    >>> from sphdist.datasets import NEWSGROUPS_PAPER_CATEGORIES, newsgroups_archive
    >>> news = SourceSpec(newsgroups_archive(), categories=NEWSGROUPS_PAPER_CATEGORIES,
    ...                   max_docs_per_label=200)
    >>> corpus = run(IngestRequest(news, "news5.zarr"))  # doctest: +SKIP
    >>> corpus.n_documents  # doctest: +SKIP
    1000
    >>> run(IngestRequest(SourceSpec("docs/*.jsonl.gz", label_field="label"),  # doctest: +SKIP
    ...                   "docs.zarr", text=TextSpec(select="mutual-info", n_select=500)))
    >>> run(IngestRequest("stream/*.jsonl.gz", "hashed.zarr",  # doctest: +SKIP
    ...                   text=TextSpec(vocabulary=False, n_features=2**20)))
    """

    command: ClassVar[str] = "ingest"
    writes: ClassVar[str] = "corpus"
    targets: ClassVar[tuple[str, ...]] = ("output",)

    source: SourceSpec | str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
    output: Any
    text: TextSpec = TextSpec()  # noqa: B008 - frozen, so one shared default is safe
    like: Any = None
    chunk_size: int = 4096
    partition_size: int | None = None
    overwrite: bool = False
    progress: bool | str = False

    @classmethod
    def of(cls, source: Any = "SOURCE", output: Any = "OUTPUT", **options: Any) -> IngestRequest:
        """The request of ``sphdist ingest``'s options, by their Python names, as flat keywords.

        The reading options go into a :class:`SourceSpec`, the feature options into a
        :class:`TextSpec` (``remove_headers=False``: ``remove=()``), the rest are fields of
        the request: what a remedy of the ingest job names (:class:`sphdist.errors.Remedy`,
        worded ``sphdist.jobs.run(sphdist.jobs.ingest.IngestRequest.of(...))``).

        Parameters
        ----------
        source : path-like or list of them
            The paths to read.
        output : path-like
            The ``corpus.zarr`` to write.
        **options
            Any field of :class:`SourceSpec` (``categories`` also as one comma-separated
            string), of :class:`TextSpec` (and ``remove_headers``), or of this request.

        Raises
        ------
        TypeError
            For a keyword that is none of these.

        Examples
        --------
        >>> IngestRequest.of(["a.jsonl"], "a.zarr", label_field="label", min_df=1).text.min_df
        1
        """
        reading = {f.name for f in dataclasses.fields(SourceSpec)} - {"paths"}
        features = {f.name for f in dataclasses.fields(TextSpec)}
        spec = {k: options.pop(k) for k in list(options) if k in reading}
        if isinstance(spec.get("categories"), str):
            spec["categories"] = spec["categories"].split(",")
        if "remove_headers" in options:
            options["remove"] = ("headers",) if options.pop("remove_headers") else ()
        text = {k: options.pop(k) for k in list(options) if k in features}
        paths = [source] if isinstance(source, str | os.PathLike) else list(source)
        return cls(SourceSpec(paths, **spec) if spec else source, output,
                   **({"text": TextSpec(**text)} if text else {}), **options)

    def __post_init__(self) -> None:
        if not isinstance(self.source, SourceSpec):
            object.__setattr__(self, "source", SourceSpec(self.source))
        if not isinstance(self.text, TextSpec):
            raise ParameterError(f"text={self.text!r} is not a TextSpec. To resolve this, pass "
                                 "text=TextSpec(...) (sphdist.text.ingest.TextSpec).")
        chunk_size, partition_size = check_sizes(self.chunk_size, self.partition_size)
        object.__setattr__(self, "chunk_size", chunk_size)
        object.__setattr__(self, "partition_size", partition_size)
        object.__setattr__(self, "output", located(self.output))
        object.__setattr__(self, "like", located(self.like))

    def inputs(self) -> tuple[Any, ...]:
        """The source and, if given, the corpus or model it is ingested like."""
        return (self.source, self.like)

    def prepare(self) -> Any:
        """What ``like`` records (:func:`~sphdist.text.ingest.read_like`), read once; or None."""
        return None if self.like is None else read_like(self.like)

    def execute(self, held: Output, prepared: Any) -> Corpus:
        """Both passes over the source, the corpus written through ``held`` and committed."""
        return write(held, self.source, text=self.text, like=self.like, liked=prepared,
                     chunk_size=self.chunk_size, partition_size=self.partition_size,
                     overwrite=self.overwrite, progress=self.progress)
