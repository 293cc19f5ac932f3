r"""Fit on a SLURM or PBS batch cluster with dask-jobqueue.

Run it on the login node (or in a small batch job), with the corpus and the model on a
filesystem that every node shares::

    python cluster/jobqueue.py --system slurm --jobs 8 --queue normal --account myproject \
        -- --input /shared/corpus.zarr --output /shared/model.zarr -r 20

or in an object store, which the workers then read and write directly (``pip install
'sphdist[s3]'``)::

    python cluster/jobqueue.py --system slurm --jobs 8 --queue normal --account myproject \
        -- --input s3://bucket/corpus.zarr --output s3://bucket/model.zarr -r 20 --resume

The driver and every worker need the store's endpoint and credentials. botocore reads them from
``~/.aws/credentials`` (``aws_access_key_id``, ``aws_secret_access_key``; keep it mode 0600) and
``~/.aws/config`` (``endpoint_url``, ``region``) in the home directory the nodes share, so the
secret key is written into no batch script; the ``AWS_*`` variables work too where the batch
system passes the submitting environment on (SLURM does by default, PBS with ``-V``).

It starts a Dask scheduler here, submits ``--jobs`` batch jobs each running one ``dask worker``
(``--cores`` threads, ``--memory`` memory), waits for them, and then runs::

    sphdist fit --scheduler-address <that scheduler> <everything after -->

``--resume`` after ``--`` continues an interrupted (pre-empted, killed) fit from its last
checkpoint. ``--print-job-script`` prints the batch script instead of submitting anything.
Needs ``pip install dask-jobqueue``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from typing import Any


def make_cluster(
    system: str = "slurm", *, cores: int = 4, memory: str = "16GiB", walltime: str = "02:00:00",
    queue: str | None = None, account: str | None = None, interface: str | None = None,
    local_directory: str = "$TMPDIR", python: str | None = None,
    dashboard_address: str = "127.0.0.1:8787", **kwargs: Any,
):
    """A dask-jobqueue ``SLURMCluster`` or ``PBSCluster`` for sphdist workers.

    Parameters
    ----------
    system : {"slurm", "pbs"}
        The batch system.
    cores : int, default 4
        Threads of each worker (one worker process per job).
    memory : str, default "16GiB"
        Memory of each job; the worker's memory limit, above which it spills to
        ``local_directory``.
    walltime : str, default "02:00:00"
        Wall-clock limit of each job.
    queue, account : str, optional
        Partition/queue and project to charge.
    interface : str, optional
        Network interface of the nodes (e.g. ``"ib0"``), if not the default route.
    local_directory : str, default "$TMPDIR"
        Node-local scratch for spilled data.
    python : str, optional
        Interpreter on the nodes; default this one.
    dashboard_address : str, default "127.0.0.1:8787"
        The scheduler's dashboard, on this host's loopback (reach it with ``ssh -L``).
    **kwargs
        More keyword arguments of the jobqueue cluster class, e.g.
        ``security=sphdist.jobs.cluster.tls_security(ca, cert, key), protocol="tls://"`` to
        encrypt and authenticate every connection (the files must be readable on the nodes).

    Returns
    -------
    dask_jobqueue.SLURMCluster or dask_jobqueue.PBSCluster
        Not yet scaled: call ``cluster.scale(jobs=N)``.
    """
    from dask_jobqueue import PBSCluster, SLURMCluster

    classes = {"slurm": SLURMCluster, "pbs": PBSCluster}
    if system not in classes:
        raise ValueError(f"system must be 'slurm' or 'pbs', got {system!r}")
    return classes[system](
        cores=cores, processes=1, memory=memory, walltime=walltime, queue=queue,
        account=account, interface=interface, local_directory=local_directory,
        python=python or sys.executable, job_name="sphdist-worker",
        # no dashboard on the workers; the scheduler's stays on this host's loopback
        worker_extra_args=["--no-dashboard", "--dashboard-address", "127.0.0.1:0"],
        scheduler_options={"dashboard_address": dashboard_address},
        **kwargs,
    )


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring); returns the exit status of ``sphdist fit``."""
    argv = sys.argv[1:] if argv is None else argv
    fit_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, fit_args = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", choices=["slurm", "pbs"], default="slurm")
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--cores", type=int, default=4)
    parser.add_argument("--memory", default="16GiB")
    parser.add_argument("--walltime", default="02:00:00")
    parser.add_argument("--queue")
    parser.add_argument("--account")
    parser.add_argument("--interface")
    parser.add_argument("--print-job-script", action="store_true")
    args = parser.parse_args(argv)
    cluster = make_cluster(
        args.system, cores=args.cores, memory=args.memory, walltime=args.walltime,
        queue=args.queue, account=args.account, interface=args.interface,
    )
    with cluster:
        if args.print_job_script:
            print(cluster.job_script())
            return 0
        cluster.scale(jobs=args.jobs)
        from distributed import Client

        with Client(cluster) as client:
            client.wait_for_workers(1)
            sphdist = str(Path(sys.executable).with_name("sphdist"))
            command = [sphdist, "fit", "--scheduler-address", cluster.scheduler_address,
                       *fit_args]
            print("running:", " ".join(command), file=sys.stderr)
            return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
