"""The map page: every document of a layout on one self-contained HTML page (Bokeh, WebGL).

``sphdist map`` is :class:`MapRequest`, run by :func:`sphdist.jobs.run`. It draws the
coordinates ``sphdist layout`` stored (:mod:`sphdist.jobs.layout`; refused when missing or
older than the model) with Bokeh (``output_backend="webgl"``), the library's JavaScript
inlined into the file (``bokeh.resources.INLINE``): the page opens offline, from a file, with
no server. On it:

- every document with a direction is a point, coloured by its label, or by a k-means cluster
  of the embeddings (:func:`cluster_names`: each cluster named by its top terms);
- hovering shows its id, its label and its top terms (:func:`top_terms`: the heaviest terms
  of its embedding mapped back through U; the corpus keeps no text);
- clicking a point (the one nearest the click, where points overlap; or typing its id in the
  search box) highlights its k nearest neighbours,
  those stored in the layout: the ones ``sphdist neighbors --doc-id`` returns, and lists
  them under the map.

The page's models carry names a script (or the browser test, ``tests/test_map_browser.py``)
reads: the points' ``ColumnDataSource`` ``documents`` (columns ``x``, ``y``, ``id``,
``label``, ``terms``, ``colour_group``), the flat neighbour table ``graph`` (column ``nbr``,
k per point, rows of ``documents``, -1 for none), ``highlight`` (the neighbours shown),
``search`` (the text input), ``status`` (the line under the map) and ``legend`` (each
group's colour beside its name, HTML under the map: Bokeh's own legend would have the plot
paint every point a second time once laid out).
"""

from __future__ import annotations

import dataclasses
import html
import logging
from typing import Any, ClassVar

import numpy as np

from sphdist._validation import StrOptions, check_int, check_param
from sphdist.errors import DataError, option
from sphdist.io import Output
from sphdist.io.model import open_model
from sphdist.jobs._lifecycle import Request, located
from sphdist.jobs.embedding import open_embedding_source
from sphdist.jobs.layout import open_fresh_layout

__all__ = ["MapRequest", "top_terms", "cluster_names", "MAP_FORMATS"]

logger = logging.getLogger("sphdist")

#: The formats of a map, by the suffix of its output: the page, or the table Embedding Atlas
#: reads (``embedding-atlas map.parquet --x x --y y --text text --neighbors neighbors``).
MAP_FORMATS = {".html": "html", ".htm": "html", ".parquet": "atlas"}

_TERMS_BATCH = 1024  # documents per product U @ V_c (m x 1024 float32)


def top_terms(U: np.ndarray, V: np.ndarray, vocabulary: np.ndarray | None,
              n_terms: int = 4, centre: np.ndarray | None = None) -> list[str]:
    """Each document's heaviest terms: the largest entries of ``U (v_j - c)``.

    Parameters
    ----------
    U : ndarray of shape (m, r)
        The model's basis.
    V : ndarray of shape (r, n)
        The documents' embeddings.
    vocabulary : ndarray of shape (m,), str, or None
        The feature names; None (hashed features): empty strings.
    n_terms : int, default 4
    centre : ndarray of shape (r,), optional
        ``c``, subtracted from every column: the mean embedding, so that the terms are
        those that set the document apart, not those every document shares; default 0.

    Returns
    -------
    list of str
        n strings, the terms joined by ", ", heaviest first.

    Notes
    -----
    ``U v_j`` is the document's reconstruction in the term space (Liu et al. 2019, Eq. 3.1:
    ``x_j ~ U v_j`` up to scale), ``U c`` that of the average document. Computed in
    batches of 1,024 documents: ``4 m 1024`` bytes at a time.
    """
    n = V.shape[1]
    if vocabulary is None or n == 0:
        return [""] * n
    vocab = np.asarray(vocabulary, dtype=object)
    U32 = np.asarray(U, dtype=np.float32)
    c = np.zeros((V.shape[0], 1), np.float32) if centre is None else np.asarray(
        centre, dtype=np.float32).reshape(-1, 1)
    t = min(n_terms, U.shape[0])
    out: list[str] = []
    for a in range(0, n, _TERMS_BATCH):
        W = U32 @ (np.asarray(V[:, a:a + _TERMS_BATCH], dtype=np.float32) - c)  # (m, b)
        part = np.argpartition(-W, t - 1, axis=0)[:t]
        order = np.take_along_axis(W, part, axis=0).argsort(axis=0)[::-1]
        best = np.take_along_axis(part, order, axis=0)
        out.extend(", ".join(vocab[best[:, j]]) for j in range(best.shape[1]))
    return out


def cluster_names(U: np.ndarray, centres: np.ndarray, vocabulary: np.ndarray | None,
                  n_terms: int = 3, centre: np.ndarray | None = None) -> list[str]:
    """A name for each cluster: its number and the heaviest terms of its centre.

    Parameters
    ----------
    U : ndarray of shape (m, r)
    centres : ndarray of shape (n_clusters, r)
        k-means centres of the embeddings.
    vocabulary : ndarray of shape (m,), or None
    centre : ndarray of shape (r,), optional
        As :func:`top_terms`.

    Returns
    -------
    list of str
        ``"3: space, nasa, orbit"``; ``"3"`` without a vocabulary.
    """
    terms = top_terms(U, np.asarray(centres).T, vocabulary, n_terms, centre)
    return [f"{i}: {t}" if t else str(i) for i, t in enumerate(terms)]


@dataclasses.dataclass(frozen=True)
class MapRequest(Request):
    """``sphdist map``: the interactive map of a layout, as one self-contained HTML file.

    Run by :func:`sphdist.jobs.run`, which returns a dict: ``output``, ``n_documents``,
    ``n_points`` (those drawn: with a direction), ``colour`` (``label`` or ``cluster``),
    ``n_groups``, ``k`` (neighbours highlighted), ``bytes`` (of the page).

    Parameters
    ----------
    model : path-like
        A ``model.zarr`` holding V.
    output : path-like
        The page to write, ``*.html``; or ``*.parquet``: the table Apple's Embedding Atlas
        reads, one row per document on the map, columns ``id``, ``x``, ``y`` (float32),
        ``label``, ``text`` (its top terms), ``group`` (the colour's group) and ``neighbors``
        (``{"ids": [...], "distances": [...]}``: the rows of its k nearest, their cosine
        distances ``1 - cos``, nearest first).
    input : path-like, optional
        The documents: the training corpus (default) or an ``embedding.zarr``, as given to
        ``sphdist layout``.
    layout : path-like, optional
        The ``layout.zarr``; default :func:`sphdist.jobs.layout.default_layout_path`.
    colour : {"auto", "label", "cluster"}, default "auto"
        Colour by the documents' labels, or by k-means clusters of their embeddings
        (``sklearn.cluster.MiniBatchKMeans``, seeded) named by their top terms; "auto":
        labels where the documents have them.
    n_clusters : int, default 20
        Clusters, with ``colour="cluster"``.
    seed : int, default 0
        Seed of the k-means.
    title : str, optional
        The page's title; default the model's (or embedding's) name.
    overwrite : bool, default False

    Raises
    ------
    ParameterError
        For a ``colour`` or ``n_clusters`` out of range (when built), or an output whose
        suffix is neither ``.html`` nor ``.parquet`` (when run).

    Notes
    -----
    Run, it raises, besides what :func:`sphdist.jobs.run` raises for every command, what
    :func:`~sphdist.jobs.embedding.open_embedding_source` raises (a model without an
    embedding, ...), InputNotFoundError without a layout and ModelFormatError for a layout
    older than its model (:func:`sphdist.jobs.layout.open_fresh_layout`), each naming the
    command that writes it; DataError with ``colour="label"`` for documents without labels.
    All before the output is held.

    Memory: V (``8 r n`` bytes) for the terms and clusters, and the page, about 60 bytes per
    document besides the Bokeh library (about 1 MiB of JavaScript).
    """

    command: ClassVar[str] = "map"
    writes: ClassVar[str] = "file"
    targets: ClassVar[tuple[str, ...]] = ("model", "input", "output")
    formats: ClassVar[dict[str, str]] = MAP_FORMATS

    model: Any
    output: Any
    input: Any = None
    layout: Any = None
    colour: str = "auto"
    n_clusters: int = 20
    seed: int = 0
    title: str | None = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        for name in ("model", "output", "input", "layout"):
            object.__setattr__(self, name, located(getattr(self, name)))
        check_param("colour", self.colour, StrOptions({"auto", "label", "cluster"}),
                    caller="MapRequest")
        check_int("n_clusters", self.n_clusters, 1, caller="MapRequest")
        check_int("seed", self.seed, 0, caller="MapRequest")

    def inputs(self) -> tuple[Any, ...]:
        """The model, the documents and the layout, where given."""
        return (self.model, self.input, self.layout)

    def prepare(self) -> tuple[Any, ...]:
        """The embeddings and their layout, opened and checked."""
        source = open_embedding_source(self.model, self.input, verb="map",
                                       rest={"output": str(self.output)})
        stored = open_fresh_layout(self.model, source, self.input, self.layout)
        if self.colour == "label" and source.labels is None:
            raise DataError(
                f"the documents of {self.input or self.model} have no labels to colour by. To "
                "resolve this, pass " + option("colour", 'cluster') + ".")
        return source, stored

    def execute(self, held: Output, prepared: tuple[Any, ...]) -> dict[str, Any]:
        """Build the page and commit it through ``held``."""
        from bokeh.embed import file_html
        from bokeh.resources import INLINE

        source, stored = prepared
        fitted = open_model(self.model)
        xy = stored.read("xy").T
        nbr = stored.read("neighbors").T
        cosine = stored.read("cosine").T
        n = xy.shape[0]
        live = np.flatnonzero(np.isfinite(xy).all(axis=1))
        row = np.full(n, -1, dtype=np.int64)
        row[live] = np.arange(live.size)
        V = np.asarray(source.V[:, live].compute()) if live.size else np.zeros((1, 0))
        vocabulary = fitted.vocabulary
        mean = V.mean(axis=1) if live.size else None
        terms = top_terms(fitted.U, V, vocabulary, centre=mean)
        ids = [str(d) for d in source.ids.take(live)] if live.size else []
        labels = source.label_strings(live)
        colour = self.colour
        if colour == "auto":
            colour = "label" if source.labels is not None else "cluster"
        if colour == "label":
            groups = ["(no label)" if x is None else x for x in labels]
        else:
            groups = self._clusters(fitted.U, V, vocabulary, mean)
        neighbours = np.where(nbr[live] >= 0, row[np.maximum(nbr[live], 0)], -1)
        if self.written == "atlas":
            with held.file() as staging:
                _write_atlas(staging, x=xy[live, 0], y=xy[live, 1], ids=ids, labels=labels,
                             terms=terms, groups=groups, neighbours=neighbours,
                             cosine=cosine[live])
                size = staging.stat().st_size
            return {"output": str(self.output), "format": "atlas", "n_documents": n,
                    "n_points": int(live.size), "colour": colour,
                    "n_groups": len(set(groups)), "k": int(nbr.shape[1]), "bytes": size}
        page = _page(
            x=xy[live, 0], y=xy[live, 1], ids=ids,
            labels=["" if x is None else x for x in labels], terms=terms, groups=groups,
            neighbours=neighbours,
            title=self.title or f"sphdist map of {self.input or self.model}",
            note=(f"{live.size} of {n} documents ({n - live.size} without a direction left "
                  "out)" if live.size < n else f"{n} documents"))
        text = file_html(page, resources=INLINE, title=html.escape(
            self.title or "sphdist map"))
        with held.file() as staging:
            staging.write_text(text, encoding="utf-8")
        return {"output": str(self.output), "format": "html", "n_documents": n,
                "n_points": int(live.size),
                "colour": colour, "n_groups": len(set(groups)), "k": int(nbr.shape[1]),
                "bytes": len(text.encode("utf-8"))}

    def _clusters(self, U: np.ndarray, V: np.ndarray, vocabulary: Any,
                  mean: Any) -> list[str]:
        """Each document's k-means cluster, by its name (:func:`cluster_names`)."""
        from sklearn.cluster import MiniBatchKMeans

        n = V.shape[1]
        k = max(1, min(self.n_clusters, n))
        km = MiniBatchKMeans(n_clusters=k, random_state=self.seed, n_init=3,
                             batch_size=4096).fit(V.T)
        names = cluster_names(U, km.cluster_centers_, vocabulary, centre=mean)
        return [names[c] for c in km.labels_]


# The page's behaviour: clicking a point (a selection of "documents") or a search shows its
# neighbours, in the status line: HTML, so every id and label is escaped there.
_ESCAPE = """
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({
  "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"})[c]);
"""

_SHOW = _ESCAPE + """
const i = documents.selected.indices.length ? documents.selected.indices[0] : -1;
const d = documents.data;
const nb = graph.data.nbr;
const hx = [], hy = [], hid = [];
if (i >= 0) {
  for (let j = i * k; j < (i + 1) * k; j++) {
    const t = nb[j];
    if (t >= 0) { hx.push(d.x[t]); hy.push(d.y[t]); hid.push(d.id[t]); }
  }
  status.text = "<b>" + esc(d.id[i]) + "</b> (" + esc(d.label[i]) + "): its " + hid.length +
      " nearest documents: " + hid.map(esc).join(", ");
} else {
  status.text = note;
}
highlight.data = {x: hx, y: hy, id: hid};
"""

# A click on points drawn over each other selects them all: keep the one nearest the click.
_NEAREST = """
const hit = documents.selected.indices;
if (hit.length > 1) {
  const g = cb_data.geometries, d = documents.data;
  const w = plot.x_range.end - plot.x_range.start, h = plot.y_range.end - plot.y_range.start;
  let best = hit[0], least = Infinity;
  for (const i of hit) {
    const dx = (d.x[i] - g.x) / w, dy = (d.y[i] - g.y) / h, dd = dx * dx + dy * dy;
    if (dd < least) { least = dd; best = i; }
  }
  documents.selected.indices = [best];
}
"""

_SEARCH = _ESCAPE + """
const want = search.value.trim();
if (!want) { return; }
const i = documents.data.id.indexOf(want);
if (i < 0) {
  documents.selected.indices = [];
  status.text = "no document with id " + esc(want);
  return;
}
documents.selected.indices = [i];
const x = documents.data.x[i], y = documents.data.y[i];
const w = (plot.x_range.end - plot.x_range.start) / 2;
const h = (plot.y_range.end - plot.y_range.start) / 2;
plot.x_range.start = x - w; plot.x_range.end = x + w;
plot.y_range.start = y - h; plot.y_range.end = y + h;
"""


def _page(*, x: np.ndarray, y: np.ndarray, ids: list[str], labels: list[str],
          terms: list[str], groups: list[str], neighbours: np.ndarray, title: str,
          note: str) -> Any:
    """The Bokeh document of the map (see the module's docstring for its named models)."""
    from bokeh.layouts import column
    from bokeh.models import (
        ColumnDataSource,
        CustomJS,
        Div,
        HoverTool,
        TapTool,
        TextInput,
    )
    from bokeh.palettes import Category20, Turbo256
    from bokeh.plotting import figure
    from bokeh.transform import factor_cmap

    order = _by_count(groups)
    palette = (list(Category20[20]) if len(order) <= 20
               else [Turbo256[int(i)] for i in np.linspace(0, 255, len(order))])
    documents = ColumnDataSource(name="documents", data={
        "x": np.asarray(x, dtype=np.float32), "y": np.asarray(y, dtype=np.float32),
        "id": ids, "label": labels, "terms": terms, "colour_group": groups})
    k = int(neighbours.shape[1]) if neighbours.ndim == 2 else 0
    graph = ColumnDataSource(name="graph",
                             data={"nbr": np.asarray(neighbours, dtype=np.int32).ravel()})
    highlight = ColumnDataSource(name="highlight", data={"x": [], "y": [], "id": []})
    plot = figure(title=title, output_backend="webgl", sizing_mode="stretch_both",
                  tools="pan,wheel_zoom,box_zoom,reset", active_scroll="wheel_zoom",
                  name="map", match_aspect=True)
    plot.axis.visible = False
    plot.grid.visible = False
    points = plot.scatter(
        "x", "y", source=documents, size=4, line_color=None, fill_alpha=0.7,
        color=factor_cmap("colour_group", palette[:len(order)] or ["#1f77b4"], order),
        name="points",
        nonselection_fill_alpha=0.7, selection_fill_alpha=1.0, selection_line_color="black")
    plot.scatter("x", "y", source=highlight, size=11, fill_color=None, line_color="black",
                 line_width=2, name="neighbours")
    plot.add_tools(HoverTool(renderers=[points], tooltips=[
        ("id", "@id"), ("label", "@label"), ("terms", "@terms")], name="hover"))
    plot.add_tools(TapTool(renderers=[points], callback=CustomJS(
        args={"documents": documents, "plot": plot}, code=_NEAREST)))
    # the legend is HTML under the map, not Bokeh's Legend: that one asks the plot for a
    # second paint of every point once it is laid out (after its first render and from its
    # ResizeObserver; Bokeh 3.9), 2.2-2.6 s of software WebGL at 100,000 points
    legend = Div(name="legend", text=_legend_html(order, palette), styles={
        "max-height": "5.5em", "overflow-y": "auto"}, sizing_mode="stretch_width")
    status = Div(text=note, name="status")
    search = TextInput(placeholder="document id", title="Find a document by id",
                       name="search")
    documents.selected.js_on_change("indices", CustomJS(args={
        "documents": documents, "graph": graph, "highlight": highlight, "status": status,
        "k": k, "note": note}, code=_SHOW))
    search.js_on_change("value", CustomJS(args={
        "documents": documents, "status": status, "search": search, "plot": plot},
        code=_SEARCH))
    return column(search, plot, legend, status, sizing_mode="stretch_both")


def _legend_html(groups: list[str], palette: list[str]) -> str:
    """The colour of each group beside its name, in the order given, as HTML (names escaped)."""
    entry = '<span><span style="color:{};font-size:1.5em">&#9679;</span> {}</span>'
    return ('<div style="display:flex;flex-wrap:wrap;gap:0 1em;font-size:8pt">' + "".join(
        entry.format(colour, html.escape(name))
        for name, colour in zip(groups, palette, strict=False)) + "</div>")


def _write_atlas(path: Any, *, x: np.ndarray, y: np.ndarray, ids: list[str],
                 labels: list[str | None], terms: list[str], groups: list[str],
                 neighbours: np.ndarray, cosine: np.ndarray) -> None:
    """The Embedding Atlas table (see :class:`MapRequest`'s ``output``) at ``path``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    valid = neighbours >= 0
    counts = valid.sum(axis=1)
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    near = pa.StructArray.from_arrays([
        pa.ListArray.from_arrays(offsets, pa.array(neighbours[valid].astype(np.int64))),
        # cosine distances, clipped at 0 as scikit-learn's (a duplicate's cosine may be 1 + eps)
        pa.ListArray.from_arrays(offsets, pa.array(
            np.maximum(1.0 - cosine[valid], 0.0).astype(np.float32))),
    ], names=["ids", "distances"])
    table = pa.table({
        "id": pa.array(ids, pa.string()), "x": pa.array(np.asarray(x, np.float32)),
        "y": pa.array(np.asarray(y, np.float32)), "label": pa.array(labels, pa.string()),
        "text": pa.array(terms, pa.string()), "group": pa.array(groups, pa.string()),
        "neighbors": near})
    pq.write_table(table, str(path))


def _by_count(groups: list[str]) -> list[str]:
    """The distinct groups, most frequent first (ties by name)."""
    names, counts = np.unique(np.asarray(groups, dtype=object), return_counts=True)
    return [str(names[i]) for i in np.lexsort((names, -counts))]
