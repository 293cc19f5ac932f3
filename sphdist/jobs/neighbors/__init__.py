"""Nearest neighbours at scale: the index of a model's embeddings, batch queries, the k-NN graph.

``sphdist index`` (:class:`IndexRequest`) builds a faiss index
(:class:`sphdist.methods.neighbors.NeighborIndex`: exact flat below
:data:`~sphdist.methods.neighbors.FLAT_MAX` documents, IVF above) of the embeddings a model
gives (its V, or an ``embedding.zarr``) and stores it as an ``index.zarr``
(:mod:`sphdist.io.index`), committed atomically by one writer. ``sphdist neighbors`` finds it
(:func:`find_index`: the ``index`` asked for, else the default path :func:`default_index_path`
beside the model or the embedding) and searches it (:func:`search`), unless ``exact``; a batch of
queries is written as Parquet, JSON Lines or CSV, by the suffix of the output
(:func:`write_hits`); ``all`` writes every document's k nearest others (:class:`KnnGraphRequest`),
chunk by chunk on Dask (:func:`sphdist.core.graph.knn_graph`). Every table has the columns
:data:`HIT_COLUMNS`.

The single-query scan without an index is :func:`sphdist.jobs.embedding.nearest_neighbors`.

The package, each module one role, importing only those listed before it:
``_remedies`` (the Python wording of the jobs' remedies, which :mod:`sphdist.errors` loads by
name), ``_request`` (:class:`NeighborRequest`, :class:`QueryLines`), ``_base`` (the stored index
and the search, shared by every job), ``_hits`` (the tables), ``_unsupervised``
(:class:`QueryRequest`, :class:`BatchNeighborsRequest`, :func:`queries_of`) and ``_graph``
(:class:`KnnGraphRequest`). Every public name is imported from here.
"""

from sphdist.jobs.neighbors import _hits, _request
from sphdist.jobs.neighbors._base import (
    IndexRequest,
    check_index,
    check_k,
    default_index_path,
    exact_search,
    find_index,
    load_index,
    search,
)
from sphdist.jobs.neighbors._graph import KnnGraphRequest
from sphdist.jobs.neighbors._hits import hits_table, write_hits
from sphdist.jobs.neighbors._remedies import index_call, neighbors_call
from sphdist.jobs.neighbors._request import NeighborRequest, QueryLines
from sphdist.jobs.neighbors._unsupervised import (
    BatchNeighborsRequest,
    QueryRequest,
    queries_of,
)

# The constants are bound here again for their doc comments, which Sphinx reads from the
# module a name is documented in.
#: Output formats of batch queries and of the k-NN graph, by file suffix.
HIT_FORMATS = _hits.HIT_FORMATS
#: The columns of every neighbour table (``queries``, ``queries`` of ids, ``all``):
#: ``query`` (the text, or the id of the query document), ``query_label`` (the query
#: document's label; null for a text), ``rank`` (1-based), ``doc_id`` and ``label`` of the
#: neighbour, ``angle`` (degrees, in [0, 180]) and ``cosine``.
HIT_COLUMNS = _hits.HIT_COLUMNS
#: The modes of a :class:`NeighborRequest`: one text, one document, a batch of texts, a batch
#: of documents, every document (the k-NN graph).
MODES = _request.MODES

__all__ = [
    "HIT_FORMATS",
    "HIT_COLUMNS",
    "MODES",
    "NeighborRequest",
    "QueryLines",
    "IndexRequest",
    "check_index",
    "default_index_path",
    "find_index",
    "load_index",
    "search",
    "exact_search",
    "check_k",
    "hits_table",
    "write_hits",
    "KnnGraphRequest",
    "QueryRequest",
    "BatchNeighborsRequest",
    "queries_of",
    "index_call",
    "neighbors_call",
]

