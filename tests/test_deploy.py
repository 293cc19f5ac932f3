"""The deployment examples under cluster/: what can be checked without a batch system or
Kubernetes (the manifests parse and say what the README says, the job scripts render), and the
local launcher."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CLUSTER = REPO / "cluster"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"cluster_{name}", CLUSTER / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _docs(name):
    return list(yaml.safe_load_all((CLUSTER / "k8s" / name).read_text()))


def test_daskcluster_manifest_has_scheduler_workers_and_shared_volume():
    docs = _docs("daskcluster.yaml")
    assert [d["kind"] for d in docs] == ["PersistentVolumeClaim", "DaskCluster"]
    pvc, dask_cluster = docs
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]  # V is written by the workers
    assert dask_cluster["apiVersion"] == "kubernetes.dask.org/v1"
    spec = dask_cluster["spec"]
    worker = spec["worker"]["spec"]["containers"][0]
    args = worker["args"]
    assert args[:2] == ["dask", "worker"]
    limit = args[args.index("--memory-limit") + 1]
    assert limit == "7GiB"  # below the container limit, so dask spills before the OOM killer
    assert worker["resources"]["limits"]["memory"] == "8Gi"
    mounts = {m["name"]: m["mountPath"] for m in worker["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["worker"]["spec"]["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert mounts["data"] == "/data"
    scheduler = spec["scheduler"]
    assert scheduler["spec"]["containers"][0]["args"][:2] == ["dask", "scheduler"]
    assert scheduler["service"]["type"] == "ClusterIP"  # nothing exposed outside the cluster
    ports = {p["name"]: p["port"] for p in scheduler["service"]["ports"]}
    assert ports["tcp-comm"] == 8786


def test_fit_job_targets_the_daskcluster_scheduler():
    (cluster,) = [d for d in _docs("daskcluster.yaml") if d["kind"] == "DaskCluster"]
    (job,) = _docs("fit-job.yaml")
    assert job["kind"] == "Job" and job["apiVersion"] == "batch/v1"
    container = job["spec"]["template"]["spec"]["containers"][0]
    command = container["command"]
    assert command[:2] == ["sphdist", "fit"]
    address = command[command.index("--scheduler-address") + 1]
    # the operator names the scheduler Service <cluster name>-scheduler
    assert address == f"tcp://{cluster['metadata']['name']}-scheduler:8786"
    assert "--resume" in command  # a retried pod continues from the last checkpoint
    for option in ("--input", "--output"):
        assert command[command.index(option) + 1].startswith("/data/")
    assert container["volumeMounts"][0]["mountPath"] == "/data"


@pytest.mark.parametrize(
    "system, directives",
    [
        ("slurm", ["#SBATCH -p short", "#SBATCH -A proj", "#SBATCH --cpus-per-task=3",
                   "#SBATCH --mem=", "#SBATCH -t 01:30:00"]),
        ("pbs", ["#PBS -q short", "#PBS -A proj", "ncpus=3", "#PBS -l walltime=01:30:00"]),
    ],
)
def test_jobqueue_job_script_renders(system, directives):
    jobqueue = _load("jobqueue")
    with jobqueue.make_cluster(
        system, cores=3, memory="6GiB", walltime="01:30:00", queue="short", account="proj",
        interface="lo", dashboard_address="127.0.0.1:0",
    ) as cluster:
        script = cluster.job_script()
        address = cluster.scheduler_address
    for directive in directives:
        assert directive in script, script
    (command,) = [line for line in script.splitlines() if "dask_worker" in line]
    args = shlex.split(command)
    assert address in args and address.startswith("tcp://127.0.0.1:")
    assert args[args.index("--nthreads") + 1] == "3"
    assert args[args.index("--memory-limit") + 1].startswith("6.00GiB")
    assert "--no-dashboard" in args


def test_jobqueue_cli_prints_the_job_script():
    result = subprocess.run(
        [sys.executable, str(CLUSTER / "jobqueue.py"), "--system",
         "slurm", "--interface", "lo", "--cores", "2", "--print-job-script"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "#SBATCH --cpus-per-task=2" in result.stdout


def test_local_launcher_script_parses():
    result = subprocess.run(["bash", "-n", str(CLUSTER / "local.sh")], capture_output=True)
    assert result.returncode == 0, result.stderr
