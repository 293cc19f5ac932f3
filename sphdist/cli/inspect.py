"""``sphdist info``: what a corpus, model or embedding holds, and a model's top terms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from sphdist._words import plural
from sphdist.cli._common import STORE_PATH, echo_json, json_option
from sphdist.cli._remedies import command
from sphdist.jobs import run


def _history(pairs: list[list[float]]) -> str:
    # a value is None where it was not recorded (||dV|| of the stateless iteration)
    return ", ".join(f"{int(k)}: {'-' if v is None else f'{v:.6g}'}" for k, v in pairs) or "-"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _print(info: dict[str, Any]) -> None:
    kind = info["kind"]
    click.echo(f"{info['path']}: {kind}")
    if kind in ("corpus", "dense"):
        m, n = info["shape"]
        ch = info["chunks"]
        click.echo(f"  shape          {plural(m, 'feature')} x {plural(n, 'document')}")
        click.echo(f"  nnz            {info['nnz']} (density {info['density']:.3g})")
        sizes = str(ch["max"]) if ch["min"] == ch["max"] else f"{ch['min']}..{ch['max']}"
        click.echo(f"  chunks         {plural(ch['n_chunks'], 'chunk')} of {sizes} "
                   f"{'document' if ch['max'] == 1 else 'documents'}")
        click.echo(f"  feature scheme {info['feature_scheme']}")
        if info.get("tfidf"):
            click.echo(f"  tf-idf         {info['tfidf']}")
        click.echo(f"  empty docs     {info['n_empty']}")
    elif kind == "model":
        cp = info["checkpoint"]
        staging = f", staging dirs present: {', '.join(cp['staging_dirs'])}" \
            if cp["staging_dirs"] else ", no staging dirs"
        click.echo(f"  checkpoint     {cp['state']}{staging}")
        if cp.get("recover"):
            click.echo(f"  recover        `{cp['recover']}` moves it back (and finishes the "
                       "fit if it stopped early)")
        if "n_iter" not in info:
            return
        p = info["params"]
        v = (f"V {info['n_components']} x {info['n_documents']}" if info["has_embedding"]
             else f"no V stored (a checkpoint of U; {plural(info['n_documents'], 'document')})")
        click.echo(f"  shape          U {info['n_features']} x {info['n_components']}, {v}")
        click.echo(
            "  params         " + ", ".join(f"{k}={p[k]!r}" for k in sorted(p) if k != "init_from")
        )
        if p.get("init_from"):
            click.echo(f"  warm start     {p['init_from']['path']}")
        click.echo(f"  status         {info['status']}")
        click.echo(
            f"  iterations     {info['n_iter']}, "
            f"{_seconds(info['solver_seconds_per_iteration'])} s/iteration solving (the "
            "checkpoint writes left out)"
        )
        click.echo(f"  objective      {_history(info['objective'])}")
        click.echo(f"  ||dU||_F       {_history(info['u_step_norm'])}")
        click.echo(f"  ||dV||_F       {_history(info['v_step_norm'])}")
        click.echo(f"  corpus         {info['corpus'].get('path')}")
        click.echo(f"  feature scheme {info['corpus'].get('feature_scheme')}")
    elif kind == "index":
        record = info["index"]
        click.echo(f"  index          {record.get('kind')}, nlist {record.get('nlist')}, "
                   f"nprobe {record.get('nprobe')}, {record.get('n_indexed')} of "
                   f"{plural(int(record.get('n_documents') or 0), 'document')} indexed, "
                   f"{record.get('n_components')} components")
        click.echo(f"  model          {info['model'].get('path')}")
        click.echo(f"  documents      {info['source'].get('path') or 'the training corpus'}")
        return
    else:
        r, n = info["shape"]
        click.echo(f"  shape          {plural(r, 'component')} x {plural(n, 'document')}")
        click.echo(f"  model          {(info.get('model') or {}).get('path')}")
        click.echo(f"  corpus         {(info.get('corpus') or {}).get('path')}")
        click.echo(f"  degenerate     {info['n_degenerate']}")
    if kind != "model":
        for line in _label_lines(info.get("labels"), info["path"]):
            click.echo(line)


#: Labels listed by ``sphdist info`` (the most documents first beyond that); --json lists all.
SHOWN_LABELS = 20


def _label_lines(labels: dict[str, int] | None, path: str) -> list[str]:
    """The ``labels`` rows: "name count" pairs wrapped to the terminal, at most SHOWN_LABELS.

    The largest labels come first, ties in name order.

    Examples
    --------
    >>> _label_lines({"a": 1, "b": 2, "c": 1}, "c.zarr")
    ['  labels         b 2, a 1, c 1']
    >>> _label_lines({f"l{i}": i for i in range(30)}, "c.zarr")[-1]
    '                 ... and 10 more labels (`sphdist info c.zarr --json` lists them all)'
    """
    import shlex
    import shutil
    import textwrap

    if not labels:
        return ["  labels         none"]
    # the largest labels first, ties by name (the stored order is the labels' codes)
    pairs = sorted(labels.items(), key=lambda p: (-p[1], p[0]))
    more = len(pairs) - SHOWN_LABELS
    pairs = pairs[:SHOWN_LABELS]
    text = ", ".join(f"{k} {v}" for k, v in pairs)
    if more > 0:
        text = f"{len(labels)} labels, the {SHOWN_LABELS} largest: {text}"
    width = max(40, min(shutil.get_terminal_size((100, 24)).columns, 120))
    lines = textwrap.wrap(text, width=width, initial_indent="  labels         ",
                          subsequent_indent=" " * 17, break_on_hyphens=False)
    if more > 0:
        lines.append(f"{' ' * 17}... and {more} more label{'s' if more > 1 else ''} "
                     f"(`sphdist info {shlex.quote(path)} --json` lists them all)")
    return lines


@click.command()
@click.argument("path", required=False, type=STORE_PATH)
@click.option("--model", "-m", type=STORE_PATH,
              help="The model whose top terms to list (with --top-terms).")
@click.option("--top-terms", type=click.IntRange(min=1),
              help="List the N terms at the positive and the N at the negative end of each "
                   "component of U, apart (vocabulary-mode corpora).")
@json_option()
def info(path: Path | None, model: Path | None, top_terms: int | None, as_json: bool) -> None:
    """Describe a corpus.zarr, model.zarr, embedding.zarr or index.zarr (PATH, or --model)."""
    from sphdist.jobs.info import InfoRequest  # zarr: never for --help (test_startup.py)

    if path is None and model is None:
        raise click.UsageError("pass a PATH (or --model MODEL).")
    report = run(InfoRequest(path, model=model, top_terms=top_terms))
    if (report.get("checkpoint") or {}).get("recover"):  # a Remedy's fields: its command
        report["checkpoint"]["recover"] = command(report["checkpoint"]["recover"])
    if as_json:
        echo_json(report)
        return
    _print(report)
    if "top_terms" in report:
        click.echo(f"  top terms      {report['top_terms_basis']}")
    for ends in report.get("top_terms", []):
        for end, mark in (("positive", "+"), ("negative", "-")):
            head = f"component {ends['component']:<3}" if end == "positive" else ""
            click.echo(f"  {head:<14} {mark} " + (", ".join(
                f"{t['term']} ({t['weight']:+.3f})" for t in ends[end]) or "(none)"))
