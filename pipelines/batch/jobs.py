"""The production loop: a daily job embeds new documents, a weekly job refits and swaps the model.

Layout under one root directory (a filesystem the Dask workers share)::

    ROOT/incoming/<YYYY-MM-DD>/<label>/<file>   new documents of a day (one file each; the
                                                folder is the label, "unlabelled" if unknown)
    ROOT/current -> models/<YYYY-Www>.model.zarr  the model in service (a symbolic link)
    ROOT/models/<YYYY-Www>.model.zarr           one model per week, kept (roll back by relinking)
    ROOT/weekly/<YYYY-Www>/corpus.zarr          the corpus a week's model was fitted on
    ROOT/daily/<YYYY-MM-DD>/corpus.zarr         the day's documents, ingested like ``current``
    ROOT/daily/<YYYY-MM-DD>/embedding.zarr      their embedding (exact V-step with ``current``)
    ROOT/daily/<YYYY-MM-DD>/embeddings.parquet  doc_id, label, e0..e{r-1} for downstream use
    ROOT/daily/<YYYY-MM-DD>/done.json           written last: the day is complete

``daily``: ``sphdist.jobs.ingest.IngestRequest(like=current)`` (the model's feature scheme and
idf), then
``sphdist.jobs.run(sphdist.jobs.transform.TransformRequest(...))`` and
``sphdist.jobs.run(sphdist.jobs.export.ExportRequest(...))``. A day with a
``done.json`` is left alone (``--force`` redoes it with the model now current); a day without
one (a crashed run) is redone from scratch.

``weekly``: ingests every document under ``incoming/`` with the current model's text options
(hashing scheme: fresh idf over all documents; vocabulary scheme: the model's vocabulary and
idf, i.e. ``like=current``), fits warm-started from the current U (``FitRequest(init_from=...)``)
with ``resume=True`` (a rerun continues an interrupted fit, and does nothing to a finished one),
then points ``current`` at the new model: a new link is created beside it and renamed over it
(``os.replace``, atomic on POSIX), so a daily job sees the old model or the new one, never
neither. The first run (no ``current``) fits from a random start.

Every step is idempotent: rerunning a job for the same day or week changes nothing. Run with
``--scheduler-address`` to use an existing Dask cluster (default: a LocalCluster).

    .venv/bin/python pipelines/batch/jobs.py daily  --root /srv/sphdist [--date 2026-11-20]
    .venv/bin/python pipelines/batch/jobs.py weekly --root /srv/sphdist [--week 2026-W47]
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import click

logger = logging.getLogger("sphdist")

DEFAULT_N_FEATURES = 2**18


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    from sphdist.io import atomic_path

    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")


def current_model(root: Path) -> Path | None:
    """The model ``ROOT/current`` points at (resolved), or None before the first weekly run."""
    link = root / "current"
    return link.resolve() if link.exists() else None


def swap_current(root: Path, model: Path) -> bool:
    """Point ``ROOT/current`` at ``model`` atomically; return False if it already does.

    The new link is made under a unique temporary name in ``ROOT`` and renamed over
    ``current`` with ``os.replace`` (``rename(2)``: atomic, readers never see no link).
    """
    link = root / "current"
    if link.exists() and link.resolve() == model.resolve():
        return False
    tmp = root / f"current.tmp-{uuid.uuid4().hex[:8]}"
    os.symlink(os.path.relpath(model, root), tmp)
    try:
        os.replace(tmp, link)
    finally:
        if tmp.is_symlink():
            tmp.unlink()
    return True


def daily_job(root: Path, date: str, *, force: bool = False) -> dict[str, Any]:
    """Embed the documents of ``incoming/<date>`` with the current model (see module docstring).

    Returns
    -------
    dict
        ``status`` (``"done"``, ``"skipped"``: already complete, ``"empty"``: no incoming
        folder) and, when done, the day's ``done.json`` content.
    """
    from sphdist.io.model import open_model
    from sphdist.jobs import run
    from sphdist.jobs.export import ExportRequest
    from sphdist.jobs.ingest import IngestRequest
    from sphdist.jobs.transform import TransformRequest

    incoming, day = root / "incoming" / date, root / "daily" / date
    done = day / "done.json"
    if done.exists() and not force:
        logger.info("daily %s: already complete (%s), nothing to do", date, done)
        return {"status": "skipped", **json.loads(done.read_text())}
    if not incoming.is_dir():
        logger.info("daily %s: no %s, nothing to do", date, incoming)
        return {"status": "empty"}
    model_path = current_model(root)
    if model_path is None:
        raise click.ClickException(
            f"{root / 'current'} does not exist. To resolve this, run the weekly job first."
        )
    model = open_model(model_path)  # pin the model: a swap during the run does not matter
    if day.exists():  # a previous run died before done.json: start the day afresh
        shutil.rmtree(day)
    day.mkdir(parents=True)
    corpus = run(IngestRequest(incoming, day / "corpus.zarr", like=model_path))
    emb = run(TransformRequest(model_path, corpus.path, day / "embedding.zarr"))
    export = run(ExportRequest(
        model_path, day / "embeddings.parquet", format="parquet", input=emb.path
    ))
    record = {
        "date": date, "model": str(model_path), "model_u_sha256": model.fingerprint,
        "n_documents": export["n_documents"], "n_components": export["n_components"],
        "n_degenerate": emb.attrs["n_degenerate"],
        "outputs": ["corpus.zarr", "embedding.zarr", "embeddings.parquet"],
    }
    _write_json(done, record)
    logger.info("daily %s: embedded %d documents with %s", date, record["n_documents"],
                model_path.name)
    return {"status": "done", **record}


def weekly_job(
    root: Path, week: str, *, n_components: int | None = None, max_iter: int = 50,
    tol: float = 1e-4, n_features: int = DEFAULT_N_FEATURES, seed: int = 0,
) -> dict[str, Any]:
    """Refit on all incoming documents, warm-started from ``current``, and swap it in.

    Returns
    -------
    dict
        ``model`` (path), ``n_iter``, ``objective``, ``warm_start`` (the previous model or
        None), ``swapped`` (False when ``current`` already pointed at this week's model).
    """
    from sphdist.io.model import open_model
    from sphdist.jobs import run
    from sphdist.jobs.fit import FitRequest
    from sphdist.jobs.ingest import IngestRequest
    from sphdist.text.ingest import TextSpec, read_like

    previous = current_model(root)
    out = root / "models" / f"{week}.model.zarr"
    if previous is not None and previous == out.resolve():
        # this week's model is already in service: rerunning must not warm-start from itself
        model = open_model(out)
        return {"model": str(out), "n_iter": model.n_iter, "objective": model.objective[-1],
                "warm_start": (model.params.get("init_from") or {}).get("path"),
                "swapped": False}
    corpus_path = root / "weekly" / week / "corpus.zarr"
    if not corpus_path.exists():  # ingest commits atomically: present means complete
        corpus_path.parent.mkdir(parents=True, exist_ok=True)
        if previous is None:
            options = {"text": TextSpec(vocabulary=False, n_features=n_features)}  # new words fit
        else:
            text, _idf, remove, info = read_like(previous)
            if info["feature_scheme"]["type"] == "vocabulary":
                options = {"like": previous}  # a warm start needs the same vocabulary
            else:
                options = {"text": TextSpec(
                    vocabulary=False, n_features=text.n_features,
                    lowercase=text.lowercase,
                    token_pattern=text.token_pattern, stop_words=text.stop_words,
                    strip_accents=text.strip_accents, sublinear_tf=text.sublinear_tf,
                    remove=remove,
                )}
        run(IngestRequest(root / "incoming", corpus_path, **options))
    if previous is not None:
        r = open_model(previous).shape[1]
        if n_components is not None and n_components != r:
            raise click.ClickException(
                f"--n-components {n_components} differs from the current model's r={r}; a "
                "warm start keeps r. To resolve this, drop --n-components."
            )
        n_components = r
    if n_components is None:
        raise click.ClickException(
            "there is no current model yet. To resolve this, pass --n-components for the "
            "first fit."
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    model = run(FitRequest(
        corpus_path, out, n_components=n_components, max_iter=max_iter, tol=tol,
        random_state=seed, init_from=previous, resume=True,
    ))
    swapped = swap_current(root, out)
    logger.info("weekly %s: %s (%d iterations), current -> %s", week, out.name, model.n_iter,
                os.readlink(root / "current"))
    return {"model": str(out), "n_iter": model.n_iter, "objective": model.objective[-1],
            "warm_start": str(previous) if previous else None, "swapped": swapped}


# -- command line --------------------------------------------------------------------------------
_ROOT = click.option("--root", required=True, type=click.Path(file_okay=False, path_type=Path),
                     help="The directory holding incoming/, daily/, weekly/, models/, current.")
_CLUSTER = click.option("--scheduler-address", envvar="DASK_SCHEDULER_ADDRESS",
                        help="Existing Dask scheduler [default: start a LocalCluster].")


@click.group()
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
def cli(log_level: str) -> None:
    """Scheduled sphdist jobs: daily embedding of new documents, weekly warm-started refit."""
    logging.basicConfig(format="%(asctime)s %(message)s")
    logger.setLevel(getattr(logging, log_level.upper()))


@cli.command()
@_ROOT
@click.option("--date", default=lambda: dt.date.today().isoformat(),
              help="The day to process, YYYY-MM-DD [default: today].")
@click.option("--force", is_flag=True, help="Redo a completed day with the current model.")
@_CLUSTER
def daily(root: Path, date: str, force: bool, scheduler_address: str | None) -> None:
    """Ingest incoming/<date> like the current model, embed it, export Parquet."""
    from sphdist.jobs.cluster import connect

    dt.date.fromisoformat(date)  # reject a malformed date before doing anything
    with connect(scheduler_address):
        click.echo(json.dumps(daily_job(root, date, force=force)))


def _this_week() -> str:
    year, week, _ = dt.date.today().isocalendar()
    return f"{year}-W{week:02d}"


@cli.command()
@_ROOT
@click.option("--week", default=_this_week, help="ISO week label, YYYY-Www [default: this week].")
@click.option("--n-components", "-r", type=click.IntRange(min=1),
              help="r of the first fit (later fits keep the current model's r).")
@click.option("--max-iter", type=click.IntRange(min=0), default=50, show_default=True)
@click.option("--tol", type=click.FloatRange(min=0), default=1e-4, show_default=True)
@click.option("--n-features", type=click.IntRange(min=1), default=DEFAULT_N_FEATURES,
              show_default=True, help="Hashed features of the first corpus.")
@_CLUSTER
def weekly(root: Path, week: str, n_components: int | None, max_iter: int, tol: float,
           n_features: int, scheduler_address: str | None) -> None:
    """Refit on all incoming documents, warm-started from current, then swap current."""
    from sphdist.jobs.cluster import connect

    with connect(scheduler_address):
        click.echo(json.dumps(weekly_job(
            root, week, n_components=n_components, max_iter=max_iter, tol=tol,
            n_features=n_features,
        )))


if __name__ == "__main__":
    cli()
