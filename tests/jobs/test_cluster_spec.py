"""ClusterSpec: where a job runs, one validated value (issue 32, item 5).

Value-level: no cluster starts and no scheduler is joined here.
"""

import dataclasses

import click
import pytest

from sphdist.errors import ParameterError
from sphdist.jobs.cluster import ClusterConflictError, ClusterSpec


@pytest.mark.parametrize("fields, conflict", [
    ({"address": "tcp://127.0.0.1:8786", "n_workers": 2}, ("n_workers", "address")),
    ({"address": "tcp://127.0.0.1:8786", "n_workers": 0}, ("n_workers", "address")),
    ({"tls_cert": "cert.pem"}, ("tls_ca_file", "tls_cert")),
    ({"tls_ca_file": "ca.pem"}, ("tls_ca_file", "tls_cert")),
    ({"tls_key": "key.pem", "tls_ca_file": "ca.pem"}, ("tls_ca_file", "tls_cert")),
])
def test_the_spec_refuses_conflicting_fields(fields, conflict):
    with pytest.raises(ClusterConflictError) as caught:
        ClusterSpec(**fields)
    assert caught.value.fields == conflict
    assert isinstance(caught.value, ParameterError)
    assert "To resolve this" in str(caught.value)
    assert "--" not in str(caught.value)  # the Python names; the CLI renders its flags


@pytest.mark.parametrize("fields, words", [
    ({"n_workers": -1}, "n_workers must be >= 0"),
    ({"threads_per_worker": 0}, "threads_per_worker must be >= 1"),
    ({"memory_limit": "4XB"}, "is not a size"),
    ({"dashboard_address": "127.0.0.1:notaport"}, "is not host:port"),
    ({"address": "foo://bar"}, "is not one distributed can connect to"),
])
def test_the_spec_refuses_unusable_values(fields, words):
    with pytest.raises(ParameterError, match=words):
        ClusterSpec(**fields)


def test_a_spec_is_frozen_and_says_where_it_runs():
    spec = ClusterSpec(n_workers=2, memory_limit="1GiB", tls_ca_file="ca.pem",
                       tls_cert="cert.pem")
    assert spec.local_cluster and spec.tls
    assert not ClusterSpec().local_cluster and not ClusterSpec(n_workers=0).local_cluster
    assert not ClusterSpec("tcp://127.0.0.1:8786").local_cluster
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.n_workers = 3  # type: ignore[misc]


def _commands(command, path=()):
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, (*path, name))
    else:
        yield path, command


def _described(param):
    """What a user sees of an option: its flags, type, default, help, environment variable."""
    return (tuple(param.opts), param.type.to_info_dict(), param.default, param.help,
            getattr(param, "envvar", None), getattr(param, "is_flag", False))


def test_every_command_with_cluster_options_takes_the_same_ones():
    """One decorator: each command that takes --scheduler-address takes all the cluster
    options, each the same (flags, type, default, help), and nothing of them else."""
    from sphdist.cli import main
    from sphdist.cli._common import CLUSTER_OPTIONS, LOCAL_CLUSTER_OPTIONS

    found = {}
    for path, command in _commands(main):
        params = {p.name: p for p in command.params}
        if "scheduler_address" in params and path != ("ingest",):  # ingest: its own two
            found[path] = {name: _described(params[name])
                           for name in CLUSTER_OPTIONS + LOCAL_CLUSTER_OPTIONS if name in params}
    assert {("fit",), ("transform",), ("neighbors",)} <= set(found)
    for path, options in found.items():
        assert set(CLUSTER_OPTIONS) <= set(options), path
        assert set(options) - set(CLUSTER_OPTIONS) in (set(), set(LOCAL_CLUSTER_OPTIONS)), path
    reference = found[("fit",)]
    for path, options in found.items():
        for name, described in options.items():
            assert described == reference[name], (path, name)


def test_the_command_gets_the_spec_of_its_options(monkeypatch, tmp_path):
    """The options reach the job as one ClusterSpec (the fields as typed)."""
    from click.testing import CliRunner

    from sphdist.cli import main
    from sphdist.cli import use as use_cli

    got = []

    def stop(spec):
        got.append(spec)
        raise SystemExit(0)

    monkeypatch.setattr(use_cli, "connect_options", stop)
    monkeypatch.setattr("sphdist.jobs.transform.check_transform", lambda *a, **k: None)
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    result = CliRunner().invoke(main, [
        "transform", "-m", str(tmp_path / "m.zarr"), "-i", str(tmp_path / "c.zarr"),
        "-o", str(tmp_path / "e.zarr"), "--n-workers", "2", "--threads-per-worker", "3",
        "--memory-limit", "2GiB"])
    assert result.exit_code == 0, result.output
    assert got == [ClusterSpec(n_workers=2, threads_per_worker=3, memory_limit="2GiB")]
