"""The same production loop as a Prefect flow (Prefect is NOT a dependency of sphdist).

Only this file imports Prefect; install it where you run your Prefect workers
(``pip install prefect``). The tasks call the functions of ``jobs.py`` beside this file, so the
behaviour (idempotence, atomic swap of ``current``) is the same as with cron or systemd::

    python pipelines/batch/prefect_flow.py --root /srv/sphdist      # one run, locally
    prefect deploy pipelines/batch/prefect_flow.py:daily_flow -n daily --cron "15 2 * * *"

Retries are safe because every step is idempotent.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

from prefect import flow, task

sys.path.insert(0, str(Path(__file__).resolve().parent))
import jobs  # noqa: E402  (the module beside this file)


@task(retries=2, retry_delay_seconds=600)
def embed_day(root: str, date: str, scheduler_address: str | None = None) -> dict:
    from sphdist.jobs.cluster import connect

    with connect(scheduler_address):
        return jobs.daily_job(Path(root), date)


@task(retries=1, retry_delay_seconds=1800)
def refit_week(root: str, week: str, n_components: int | None = None,
               scheduler_address: str | None = None) -> dict:
    from sphdist.jobs.cluster import connect

    with connect(scheduler_address):
        return jobs.weekly_job(Path(root), week, n_components=n_components)


@flow(name="sphdist-daily")
def daily_flow(root: str, date: str | None = None, scheduler_address: str | None = None) -> dict:
    date = date or (dt.date.today() - dt.timedelta(days=1)).isoformat()
    return embed_day(root, date, scheduler_address)


@flow(name="sphdist-weekly")
def weekly_flow(root: str, week: str | None = None, n_components: int | None = None,
                scheduler_address: str | None = None) -> dict:
    if week is None:
        year, number, _ = dt.date.today().isocalendar()
        week = f"{year}-W{number:02d}"
    return refit_week(root, week, n_components, scheduler_address)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True)
    parser.add_argument("--weekly", action="store_true", help="run the weekly flow instead")
    args = parser.parse_args()
    print(weekly_flow(args.root) if args.weekly else daily_flow(args.root))
