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


S3_VARIABLES = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def _secret_name():
    (secret,) = _docs("s3-secret.yaml")
    assert secret["kind"] == "Secret" and secret["apiVersion"] == "v1"
    assert set(S3_VARIABLES) <= set(secret["stringData"])  # what botocore reads
    return secret["metadata"]["name"]


def _assert_env_from_secret(container):
    """The container's environment is the Secret's keys (the store's endpoint and keys)."""
    refs = [e["secretRef"]["name"] for e in container.get("envFrom", []) if "secretRef" in e]
    assert refs == [_secret_name()], container
    # nothing in a plain env entry overrides them
    assert not {e["name"] for e in container.get("env", [])} & set(S3_VARIABLES)


def _option(command, name):
    return command[command.index(name) + 1]


def test_s3_secret_holds_placeholders_not_keys():
    (secret,) = _docs("s3-secret.yaml")
    data = secret["stringData"]
    assert data["AWS_ENDPOINT_URL"].startswith("https://")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        assert data[name].startswith("REPLACE"), data[name]


def test_daskcluster_manifest_has_scheduler_and_workers_reading_the_store():
    docs = _docs("daskcluster.yaml")
    assert [d["kind"] for d in docs] == ["DaskCluster"]  # no shared volume: the data is in S3
    (dask_cluster,) = docs
    assert dask_cluster["apiVersion"] == "kubernetes.dask.org/v1"
    spec = dask_cluster["spec"]
    worker = spec["worker"]["spec"]["containers"][0]
    args = worker["args"]
    assert args[:2] == ["dask", "worker"]
    limit = args[args.index("--memory-limit") + 1]
    assert limit == "7GiB"  # below the container limit, so dask spills before the OOM killer
    assert worker["resources"]["limits"]["memory"] == "8Gi"
    _assert_env_from_secret(worker)  # workers read X's chunks and write V in the store
    volumes = {v["name"]: v for v in spec["worker"]["spec"]["volumes"]}
    assert all("persistentVolumeClaim" not in v for v in volumes.values())
    mounts = {m["name"]: m["mountPath"] for m in worker["volumeMounts"]}
    assert mounts["scratch"] == _option(args, "--local-directory")
    assert "emptyDir" in volumes["scratch"]
    scheduler = spec["scheduler"]
    container = scheduler["spec"]["containers"][0]
    assert container["args"][:2] == ["dask", "scheduler"]
    assert "envFrom" not in container  # the scheduler handles no data: no credentials
    assert scheduler["service"]["type"] == "ClusterIP"  # nothing exposed outside the cluster
    ports = {p["name"]: p["port"] for p in scheduler["service"]["ports"]}
    assert ports["tcp-comm"] == 8786


def _job(name):
    (cluster,) = _docs("daskcluster.yaml")
    (job,) = _docs(name)
    assert job["kind"] == "Job" and job["apiVersion"] == "batch/v1"
    pod = job["spec"]["template"]["spec"]
    assert "volumes" not in pod
    (container,) = pod["containers"]
    _assert_env_from_secret(container)
    command = container["command"]
    # the operator names the scheduler Service <cluster name>-scheduler
    address = _option(command, "--scheduler-address")
    assert address == f"tcp://{cluster['metadata']['name']}-scheduler:8786"
    return command


def test_fit_job_targets_the_daskcluster_scheduler_and_the_store():
    command = _job("fit-job.yaml")
    assert command[:2] == ["sphdist", "fit"]
    assert "--resume" in command  # a retried pod continues from the last checkpoint
    assert _option(command, "--input") == "s3://BUCKET/corpus.zarr"
    assert _option(command, "--output") == "s3://BUCKET/model.zarr"


def test_ingest_job_writes_the_corpus_the_fit_reads():
    command = _job("ingest-job.yaml")
    assert command[:2] == ["sphdist", "ingest"]
    assert command[2].startswith("s3://BUCKET/")
    fit = _job("fit-job.yaml")
    assert _option(command, "--output") == _option(fit, "--input")
    assert "--overwrite" not in command  # a retried pod never replaces a complete corpus


def test_readme_applies_every_manifest():
    readme = (CLUSTER / "README.md").read_text()
    for manifest in (CLUSTER / "k8s").glob("*.yaml"):
        assert f"cluster/k8s/{manifest.name}" in readme, manifest.name
    doc = _load("jobqueue").__doc__
    assert "--input s3://bucket/corpus.zarr --output s3://bucket/model.zarr" in doc
    assert "--resume" in doc


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
