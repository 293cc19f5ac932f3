"""Figures of a fitted model (matplotlib, PNG): convergence history and the documents on the sphere.

The figures are drawn on :class:`matplotlib.figure.Figure` objects with the Agg canvas, never
through ``pyplot``, so no display and no global state are involved. Files are written to a
sibling staging file and renamed into place.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from sphdist.errors import ParameterError
from sphdist.io import Output, location, output_format
from sphdist.io.model import Model, open_model
from sphdist.jobs._lifecycle import Request, located
from sphdist.jobs.embedding import open_embedding_source
from sphdist.jobs.info import plural, shown_objective

__all__ = [
    "convergence_series", "PlotConvergenceRequest", "convergence_figure", "PlotEmbeddingRequest",
    "embedding_figure", "sample_documents", "save_figure", "PLOT_SUFFIXES",
]


#: The formats a figure is written in, by the suffix of its output (matplotlib's writers).
PLOT_SUFFIXES = {".png": "png", ".svg": "svg", ".pdf": "pdf", ".jpg": "jpeg", ".jpeg": "jpeg"}


def _format(output: str | os.PathLike[str]) -> str:
    """The format ``output`` names (:data:`PLOT_SUFFIXES`); refused before any figure is drawn."""
    return output_format(output, None, PLOT_SUFFIXES)


def save_figure(fig: Any, output: Output) -> Path:
    """Write ``fig`` to the held ``output`` in the format its suffix names, atomically.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        Drawn on the Agg canvas here (no display, no ``pyplot``), at 120 dpi.
    output : Output
        The held figure (:func:`sphdist.jobs.run` holds it), committed through
        :meth:`sphdist.io.Output.file`: refused if its lock is no longer held.

    Returns
    -------
    pathlib.Path or upath.UPath
        The figure written.

    Raises
    ------
    ParameterError
        For a suffix that names none of :data:`PLOT_SUFFIXES`.
    OutputLockedError
        If ``output``'s lock is no longer held; nothing is written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # matplotlib: on first use

    fmt = _format(output.path)
    FigureCanvasAgg(fig)
    with output.file() as staging:
        fig.savefig(staging, format=fmt, dpi=120, bbox_inches="tight")
    return output.path


def _beside(model: Any, what: str) -> Any:
    """The default figure of a model: ``<model stem>.<what>.png`` beside it."""
    return model.with_name(model.name.removesuffix(".zarr") + f".{what}.png")


def convergence_series(attrs: dict[str, Any]) -> dict[str, Any]:
    """The histories :class:`PlotConvergenceRequest` draws, from a model's attributes.

    Parameters
    ----------
    attrs : dict
        ``Model.attrs``: ``objective``, ``u_step_norm``, ``v_step_norm``, ``params``.

    Returns
    -------
    dict
        ``"objective"`` (K + 1,), ``"k"`` (K,) the iterations 1..K, ``"u_step"`` (K,),
        ``"v_step"`` (K,) or None when not recorded (the stateless exact V-step keeps no
        ``V_{k-1}``), ``"relative_change"`` (K,) ``|f_{k-1} - f_k| / |f_{k-1}|`` (the stopping
        criterion) and ``"tol"`` (float or None); float64 arrays.

    Examples
    --------
    >>> s = convergence_series({"objective": [4.0, 2.0, 1.5], "u_step_norm": [1.0, 0.5],
    ...                         "v_step_norm": [None, None], "params": {"tol": 0.1}})
    >>> s["relative_change"].tolist(), s["v_step"], s["tol"]
    ([0.5, 0.25], None, 0.1)
    """
    objective = np.asarray(attrs["objective"], dtype=np.float64)
    du = np.asarray(attrs["u_step_norm"], dtype=np.float64)
    dv = np.asarray([np.nan if v is None else v for v in attrs["v_step_norm"]], dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        change = np.abs(np.diff(objective)) / np.abs(objective[:-1])
    tol = (attrs.get("params") or {}).get("tol")
    return {
        "objective": objective, "k": np.arange(1, du.shape[0] + 1), "u_step": du,
        "v_step": dv if np.isfinite(dv).any() else None, "relative_change": change,
        "tol": None if tol is None else float(tol),
    }


@dataclasses.dataclass(frozen=True)
class PlotConvergenceRequest(Request):
    """``sphdist plot convergence``: objective gap, step norms and relative change per iteration.

    The figure of :func:`convergence_figure` (Liu et al. 2019, Fig. 3), saved atomically to
    ``output`` when run (:func:`sphdist.jobs.run` returns ``output``).

    Parameters
    ----------
    model : path-like
        A ``model.zarr`` (its recorded histories are plotted; nothing is recomputed).
    output : path-like, optional
        The figure to write, in the format its suffix names (:data:`PLOT_SUFFIXES`: ``.png``,
        ``.svg``, ``.pdf``, ``.jpg``/``.jpeg``); default ``<model stem>.convergence.png``
        beside the model.
    overwrite : bool, default False
        Replace an existing ``output``.

    Notes
    -----
    Run, it raises ParameterError for a suffix that names none of the formats (before anything
    is read), InputNotFoundError or ModelFormatError for a missing or unreadable model, besides
    what :func:`sphdist.jobs.run` raises for every command.
    """

    command: ClassVar[str] = "plot convergence"
    writes: ClassVar[str] = "file"
    targets: ClassVar[tuple[str, ...]] = ("model", "output")
    formats: ClassVar[dict[str, str]] = PLOT_SUFFIXES

    model: Any
    output: Any = None
    overwrite: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", located(self.model))
        object.__setattr__(self, "output", located(self.output) if self.output is not None
                           else _beside(self.model, "convergence"))

    def inputs(self) -> tuple[Any, ...]:
        """The model."""
        return (self.model,)

    def prepare(self) -> Model:
        """The open model."""
        return open_model(self.model)

    def execute(self, held: Output, prepared: Model) -> Path:
        """Draw the histories and commit the figure."""
        return save_figure(convergence_figure(prepared), held)


def convergence_figure(model: str | os.PathLike[str] | Model) -> Any:
    """Objective gap, step norms and relative change per iteration (Liu et al. 2019, Fig. 3).

    Three panels sharing the iteration axis, each on a log scale so that a fit of any length
    stays readable (a decay over 2,000 iterations is a slope, not a flat line after the 5th):
    the objective's gap to the lowest value it reached, ``f_k - f_min`` with
    ``f_k = ||X - U_k V_k||_F^2`` (k = 0..K; the lowest value itself in the legend);
    ``||U_k - U_{k-1}||_F`` and, when recorded, ``||V_k - V_{k-1}||_F`` (k = 1..K); the
    relative objective change ``|f_{k-1} - f_k| / |f_{k-1}|`` with the fit's ``tol`` as a
    dashed line (:func:`convergence_series`). Zero values (the last iteration's gap) have no
    logarithm and are not drawn. A marker on each point up to 50 iterations, lines only
    beyond; tick labels that cannot crowd, iterations on integer ticks.

    Parameters
    ----------
    model : path-like or Model
        A ``model.zarr``, or an open model (its ``attrs`` hold the histories).

    Returns
    -------
    matplotlib.figure.Figure
        Not drawn; no canvas attached.

    Raises
    ------
    InputNotFoundError, ModelFormatError
        For a missing or unreadable model.
    """
    from matplotlib import ticker
    from matplotlib.figure import Figure

    fitted = model if isinstance(model, Model) else open_model(model)
    a = fitted.attrs
    series = convergence_series(a)
    k = series["k"]
    marker = "." if k.shape[0] <= _MARKED_ITERATIONS else None
    fig = Figure(figsize=(6.4, 7.2))
    axes = fig.subplots(3, 1, sharex=True)
    objective = series["objective"]
    if objective.size:
        lowest = float(np.min(objective))
        gap = objective - lowest
        drawn = gap > 0
        axes[0].plot(np.arange(objective.shape[0])[drawn], gap[drawn], marker=marker,
                     color="C0", label=rf"$f_{{\min}}$ = {shown_objective(lowest):.10g}")
    axes[0].set_ylabel(r"$f_k - f_{\min}$")
    steps = [(series["u_step"], r"$\|U_k - U_{k-1}\|_F$", "C1")]
    if series["v_step"] is not None:
        steps.append((series["v_step"], r"$\|V_k - V_{k-1}\|_F$", "C2"))
    for values, label, color in steps:
        positive = values > 0
        axes[1].plot(k[positive], values[positive], marker=marker, color=color, label=label)
    axes[1].set_ylabel("step norm")
    change = series["relative_change"]
    positive = change > 0
    axes[2].plot(k[positive], change[positive], marker=marker, color="C3",
                 label=r"$|f_{k-1} - f_k| / |f_{k-1}|$")
    if series["tol"]:
        axes[2].axhline(series["tol"], color="0.4", linestyle="--", label=f"tol {series['tol']:g}")
    axes[2].set_ylabel("relative change")
    for ax in axes:
        if any(line.get_ydata().size for line in ax.get_lines()):
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(_readable_log_locator())
            ax.yaxis.set_major_formatter(_readable_log_formatter())
            ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        if ax.get_lines():
            ax.legend(fontsize=8, loc="best")
        ax.grid(True, alpha=0.3)
    axes[2].xaxis.set_major_locator(ticker.MaxNLocator(nbins=8, integer=True))
    axes[2].set_xlabel("iteration k")
    p = fitted.params
    fig.suptitle(
        f"{fitted.path.name}: r={fitted.shape[1]}, lam={p.get('lam')}, mu={p.get('mu')}, "
        f"{fitted.n_iter} iterations{' (converged)' if a.get('converged') else ''}",
        fontsize=10,
    )
    return fig


#: Iterations up to which each point of the convergence panels gets a marker.
_MARKED_ITERATIONS = 50


def _log_ticks_for(vmin: float, vmax: float) -> Any:
    """The locator of :func:`_readable_log_locator` for the view ``[vmin, vmax]`` (positive)."""
    from matplotlib import ticker

    decades = np.log10(vmax / vmin) if vmin > 0 and vmax > vmin else 0.0
    if decades >= 2:
        return ticker.LogLocator(base=10, subs=(1.0,), numticks=6)
    if decades >= 0.5:
        return ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=12)
    return ticker.MaxNLocator(nbins=4)


def _readable_log_locator() -> Any:
    """A locator of major ticks for a log axis whose labels cannot crowd, at any range.

    Powers of ten (at most 6) over two decades or more; 1, 2 and 5 x 10^k over half a decade
    to two; at most 4 evenly spaced values below (:func:`_log_ticks_for`). matplotlib's
    default labels the minor ticks 2..9 x 10^k between one and two decades, which overlap in
    a panel two inches high.
    """
    from matplotlib import ticker

    class ReadableLogLocator(ticker.Locator):  # type: ignore[misc]
        def __call__(self) -> Any:
            vmin, vmax = self.axis.get_view_interval()
            return self.tick_values(vmin, vmax)

        def tick_values(self, vmin: float, vmax: float) -> Any:
            vmin, vmax = sorted((float(vmin), float(vmax)))
            return _log_ticks_for(vmin, vmax).tick_values(vmin, vmax)

    return ReadableLogLocator()


def _readable_log_formatter() -> Any:
    """Labels of :func:`_readable_log_locator`'s ticks, one style per axis (:func:`_tick_label`)."""
    from matplotlib import ticker

    class ReadableLogFormatter(ticker.Formatter):  # type: ignore[misc]
        def __call__(self, value: float, pos: Any = None) -> str:
            vmin, vmax = sorted(float(v) for v in self.axis.get_view_interval())
            return _tick_label(value, vmin, vmax)

    return ReadableLogFormatter()


def _tick_label(value: float, vmin: float, vmax: float) -> str:
    r"""A tick label of a log axis whose view is ``[vmin, vmax]``.

    Decimals when the whole view lies in [0.01, 1000), else powers of ten, one style per axis.

    >>> _tick_label(0.25, 0.1, 0.5), _tick_label(300.0, 10.0, 500.0)
    ('0.25', '300')
    >>> _tick_label(1e-6, 1e-9, 1.0), _tick_label(2e-6, 1e-9, 1.0), _tick_label(1.0, 1e-9, 1.0)
    ('$10^{-6}$', '$2\\times10^{-6}$', '$10^{0}$')
    """
    if value <= 0 or not np.isfinite(value):
        return ""
    if 1e-2 <= vmin and vmax < 1e3:
        return f"{value:.3g}"
    mantissa, exponent = f"{value:.2e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    power = f"10^{{{int(exponent)}}}"
    return f"${power}$" if mantissa == "1" else f"${mantissa}\\times{power}$"


def sample_documents(n: int, max_points: int, seed: int = 0) -> np.ndarray:
    """Sorted indices of at most ``max_points`` of ``n`` documents, drawn without replacement.

    Parameters
    ----------
    n, max_points : int
    seed : int, default 0
        Seed of ``numpy.random.default_rng``: the same arguments give the same sample.

    Returns
    -------
    ndarray of shape (min(n, max_points),), int64

    Examples
    --------
    >>> sample_documents(5, 10).tolist()
    [0, 1, 2, 3, 4]
    >>> len(sample_documents(1000, 10))
    10
    """
    if n <= max_points:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n, size=max_points, replace=False)).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class PlotEmbeddingRequest(Request):
    """``sphdist plot embedding``: documents on the sphere, coloured by label.

    The figure of :func:`embedding_figure`, saved atomically to ``output`` in the format its
    suffix names (:data:`PLOT_SUFFIXES`) when run; :func:`sphdist.jobs.run` returns that
    function's dict. The parameters and the errors of the figure are that function's.

    Parameters
    ----------
    model : path-like
        A ``model.zarr``.
    output : path-like, optional
        The figure to write; default ``<model stem>.embedding.png`` beside the model.
    input : path-like, optional
        The training corpus (for the labels; default the recorded path) or an
        ``embedding.zarr``.
    max_points : int, default 5000
        Plot at most this many documents, a reproducible sample.
    seed : int, default 0
        Seed of the sample.
    overwrite : bool, default False
        Replace an existing ``output``.

    Notes
    -----
    Run, it also raises ParameterError for a suffix that names none of the formats.
    """

    command: ClassVar[str] = "plot embedding"
    writes: ClassVar[str] = "file"
    targets: ClassVar[tuple[str, ...]] = ("model", "input", "output")
    formats: ClassVar[dict[str, str]] = PLOT_SUFFIXES

    model: Any
    output: Any = None
    input: Any = None
    max_points: int = 5000
    seed: int = 0
    overwrite: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "model", located(self.model))
        object.__setattr__(self, "input", located(self.input))
        object.__setattr__(self, "output", located(self.output) if self.output is not None
                           else _beside(self.model, "embedding"))

    def inputs(self) -> tuple[Any, ...]:
        """The model and, if given, the documents."""
        return (self.model, self.input)

    def execute(self, held: Output, prepared: None) -> dict[str, Any]:
        """Draw the sample of documents and commit the figure."""
        fig, result = embedding_figure(self.model, self.output, input=self.input,
                                       max_points=self.max_points, seed=self.seed)
        save_figure(fig, held)
        return result


def embedding_figure(
    model: str | os.PathLike[str],
    output: str | os.PathLike[str] = "EMBEDDING.png",
    *,
    input: str | os.PathLike[str] | None = None,
    max_points: int = 5000,
    seed: int = 0,
) -> tuple[Any, dict[str, Any]]:
    """Documents on the sphere, coloured by label: the figure of :class:`PlotEmbeddingRequest`.

    r = 3: the points on the unit sphere in 3-D (with a wireframe of the sphere); r = 2: the
    unit circle; r = 1: the two points +-1 (jittered vertically); r > 3: a 2-D projection on the
    first two principal axes of the plotted points (``sklearn.decomposition.PCA``), the
    explained variance in the axis labels.

    Parameters
    ----------
    model : path-like
        A ``model.zarr``.
    output : path-like
        The PNG to write (named in the remedies of the errors).
    input : path-like, optional
        The training corpus (for the labels; default the recorded path) or an
        ``embedding.zarr`` (see :func:`sphdist.jobs.embedding.open_embedding_source`).
    max_points : int, default 5000
        Plot at most this many documents, a reproducible sample (:func:`sample_documents`) of
        the documents that have a direction. Documents without one, whose column is a
        placeholder, are left out and counted in the title: "empty" ones have no token,
        "degenerate" ones have tokens but none the model weighs (``U^T x = 0``).
    seed : int, default 0
        Seed of the sample.

    Returns
    -------
    matplotlib.figure.Figure
        The title names what is plotted: the model (its training corpus) or the
        ``embedding.zarr``. The legend of the labels lies outside the axes, right of them, so
        it covers no point; it lists every label drawn in colour (at most
        ``COLOURED_LABELS``, 10: the most frequent among the points, each its own colour), then
        "N other labels", drawn grey beneath them, so the figure keeps its size at 5, 20 or
        200 labels. The 3-D sphere has ticks at -1, 0, 1 and no tick labels (the
        points lie on the unit sphere; labels of three axes overlapped).
    dict
        ``output``, ``projection`` (``"sphere-3d"``, ``"circle"``, ``"line"`` or ``"pca-2d"``),
        ``n_points``, ``n_documents``, ``n_left_out`` (documents without a direction),
        ``n_empty`` and ``n_degenerate`` (their split; None when the corpus an embedding was
        written from is no longer there), ``labels_coloured`` (the labels in the legend, in
        its order), ``n_other_labels`` (those drawn grey), ``explained_variance_ratio`` (PCA
        only).

    Raises
    ------
    ParameterError
        If ``max_points < 1``.
    CorpusMismatchError, InputNotFoundError, ModelFormatError
        See :func:`sphdist.jobs.embedding.open_embedding_source`.
    """
    from matplotlib.figure import Figure

    if max_points < 1:
        raise ParameterError(f"max_points must be >= 1, got {max_points}.")
    src = open_embedding_source(model, input, verb="plot embedding",
                                rest={"output": str(output)})
    r, n = src.V.shape
    keep = np.arange(n) if src.degenerate is None else np.flatnonzero(~src.degenerate)
    index = keep[sample_documents(keep.shape[0], max_points, seed)]
    P = np.asarray(src.V[:, index].compute()).T  # (n_points, r)
    names = src.label_strings(index)
    groups = sorted({x for x in names if x is not None})
    n_left_out = int(n - keep.shape[0])
    n_empty = None if src.empty is None else int(np.count_nonzero(src.empty))
    result: dict[str, Any] = {
        "output": str(output), "n_points": int(index.shape[0]), "n_documents": int(n),
        "n_left_out": n_left_out, "n_empty": n_empty,
        "n_degenerate": None if n_empty is None else n_left_out - n_empty,
    }
    fig = Figure(figsize=(7.0, 6.0))
    if r == 3:
        ax = fig.add_subplot(projection="3d")
        u, w = np.mgrid[0 : 2 * np.pi : 24j, 0 : np.pi : 12j]
        ax.plot_wireframe(np.cos(u) * np.sin(w), np.sin(u) * np.sin(w), np.cos(w),
                          color="0.8", linewidth=0.4)
        coords = (P[:, 0], P[:, 1], P[:, 2])
        ax.set_box_aspect((1, 1, 1))
        centre = P.mean(axis=0)  # look at the sphere from the side the documents are on
        if np.linalg.norm(centre) > 1e-12:
            ax.view_init(  # turned a little, so no axis is seen end-on
                elev=float(np.degrees(np.arcsin(centre[2] / np.linalg.norm(centre)))) + 15,
                azim=float(np.degrees(np.arctan2(centre[1], centre[0]))) + 30,
            )
        for axis, name in ((ax.xaxis, "v1"), (ax.yaxis, "v2"), (ax.zaxis, "v3")):
            axis.set_ticks([-1.0, 0.0, 1.0])
            axis.set_ticklabels([])
            axis.set_label_text(name)
        result["projection"] = "sphere-3d"
    else:
        ax = fig.add_subplot()
        if r == 2:
            t = np.linspace(0, 2 * np.pi, 200)
            ax.plot(np.cos(t), np.sin(t), color="0.8", linewidth=0.8)
            coords = (P[:, 0], P[:, 1])
            ax.set_xlabel("v1")
            ax.set_ylabel("v2")
            result["projection"] = "circle"
        elif r == 1:
            jitter = np.random.default_rng(seed).uniform(-0.1, 0.1, size=P.shape[0])
            coords = (P[:, 0], jitter)
            ax.set_xlabel("v1")
            ax.set_yticks([])
            result["projection"] = "line"
        else:
            from sklearn.decomposition import PCA

            pca = PCA(n_components=2, random_state=seed).fit(P)
            Y = pca.transform(P)
            ratio = pca.explained_variance_ratio_
            coords = (Y[:, 0], Y[:, 1])
            ax.set_xlabel(f"PC1 of the embedding ({100 * ratio[0]:.0f}% of the variance)")
            ax.set_ylabel(f"PC2 ({100 * ratio[1]:.0f}%)")
            result["projection"] = "pca-2d"
            result["explained_variance_ratio"] = [float(x) for x in ratio]
        ax.set_aspect("equal", adjustable="datalim")
    names_arr = np.asarray([x if x is not None else "" for x in names])
    size = 12 if index.shape[0] <= 2000 else 4
    shown, others = _coloured_labels(names_arr, groups)
    handles, texts = [], []
    if others:  # grey, beneath the coloured labels
        mask = np.isin(names_arr, others)
        handles.append(ax.scatter(*(c[mask] for c in coords), s=size, color=OTHER_LABELS_GREY,
                                  alpha=0.5, linewidths=0))
        texts.append(f"{len(others)} other labels")
    for i, group in enumerate(shown):
        mask = names_arr == group
        handles.insert(i, ax.scatter(*(c[mask] for c in coords), s=size, color=f"C{i}",
                                     alpha=0.8, linewidths=0))
        texts.insert(i, group)
    unlabeled = names_arr == ""
    if unlabeled.any():
        handle = ax.scatter(*(c[unlabeled] for c in coords), s=size, color="0.5", alpha=0.6,
                            linewidths=0)
        if groups:
            handles.append(handle)
            texts.append("(no label)")
    result["labels_coloured"] = shown
    result["n_other_labels"] = len(others)
    if groups:  # outside the axes, right of them: it covers no point. Handles and texts are
        # given, so a label starting with "_" (which matplotlib skips when it collects the
        # labels itself) is listed as any other
        ax.legend(handles, texts, loc="upper left", bbox_to_anchor=(1.02, 1.0),
                  borderaxespad=0.0, fontsize=8, markerscale=2, frameon=False)
    sampled = (f"{index.shape[0]} of {plural(n, 'document')}" if index.shape[0] < n
               else plural(n, "document"))
    if n_left_out:
        sampled += f" ({_left_out(n_left_out, n_empty)} left out)"
    how = {"sphere-3d": "on the unit sphere", "circle": "on the unit circle",
           "line": "on the line", "pca-2d": f"r={r}, PCA projection to 2-D"}
    what = (location(model).name if src.origin == "model"
            else f"{location(input).name} (embedded with {location(model).name})")  # type: ignore[arg-type]
    fig.suptitle(f"{what}: {sampled}, {how[result['projection']]}", fontsize=10)
    return fig, result


#: Labels drawn in colour (the most frequent among the points plotted); the rest are grey.
COLOURED_LABELS = 10

#: The colour of the labels beyond :data:`COLOURED_LABELS`.
OTHER_LABELS_GREY = "0.78"


def _coloured_labels(names: np.ndarray, groups: list[str]) -> tuple[list[str], list[str]]:
    """The labels drawn in colour (most points first, ties by name) and the others.

    At most :data:`COLOURED_LABELS`, each with its own colour of matplotlib's default cycle
    (ten distinct colours), so that no two labels share a colour at any number of labels.

    Examples
    --------
    >>> _coloured_labels(np.array(["b", "a", "b", "c", ""]), ["a", "b", "c"])
    (['b', 'a', 'c'], [])
    """
    counts = {g: int(np.count_nonzero(names == g)) for g in groups}
    ranked = sorted(groups, key=lambda g: (-counts[g], g))
    return ranked[:COLOURED_LABELS], ranked[COLOURED_LABELS:]


def _left_out(n_left_out: int, n_empty: int | None) -> str:
    """"63 empty, 1 degenerate": documents without a direction, split when known."""
    if n_empty is None:
        return f"{n_left_out} without a direction"
    parts = [f"{n_empty} empty"] if n_empty else []
    if n_left_out - n_empty:
        parts.append(f"{n_left_out - n_empty} degenerate")
    return ", ".join(parts)
