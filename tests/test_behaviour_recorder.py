"""The behaviour recorder of pipelines/behaviour.py: its normaliser and its compare mode.

No recording runs here (it takes minutes): the normaliser is checked on crafted output, the
store digest against hashlib on the values, the compare mode on crafted records.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from click.testing import CliRunner

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
sys.path.insert(0, str(PIPELINES))

import behaviour as bh  # noqa: E402

TMP = "/tmp/sphdist-behaviour-fit-k2j3h4"
REPL = {TMP: "<TMP>", "/data/home": "<DATA>"}


# -- normalise_text ---------------------------------------------------------------------------


@pytest.mark.parametrize("raw, expected", [
    # temporary paths and the data home
    (f"Error: {TMP}/c.zarr: no such corpus", "Error: <TMP>/c.zarr: no such corpus"),
    ("archive not found (data home /data/home/x)", "archive not found (data home <DATA>/x)"),
    # durations, in every spelling the commands print
    ("wrote m.zarr: r=3, 4 iterations, objective 156.035485, 0.05 s/iteration",
     "wrote m.zarr: r=3, 4 iterations, objective 156.035485, <DUR>/iteration"),
    ("iter    2  objective 157.8748561  rel_change 9.290e-02  0.21s  eta 00:00",
     "iter    2  objective 157.8748561  rel_change 9.290e-02  <DUR>  eta <ETA>"),
    ("iter    0  objective 269.691026  rel_change nan  0.03s  eta ?",
     "iter    0  objective 269.691026  rel_change nan  <DUR>  eta <ETA>"),
    ("pass 1/2: count: 200/200 documents, 2 s", "pass 1/2: count: 200/200 documents, <DUR>"),
    ("took 12 seconds, then 3 min", "took <DUR>, then <DUR>"),
    # rates and memory figures
    ("ingested at 1,234.5 docs/s (3.2 MiB/s)", "ingested at <RATE> (<RATE>)"),
    ("X (51.57 kiB) is held in memory: within the memory budget of 5.11 GiB (a quarter of "
     "the 20.44 GiB available", "X (<MEM>) is held in memory: within the memory budget of "
     "<MEM> (a quarter of the <MEM> available"),
    # timestamps, pids, ephemeral ports (a fixed port is kept)
    ("since 2026-11-26T11:43:05+00:00. To resolve this, stop it (kill 4242)",
     "since <TIME>. To resolve this, stop it (kill <PID>)"),
    ("started at 12:04:47", "started at <TIME>"),
    ("LocalCluster tcp://127.0.0.1:40123, dashboard http://127.0.0.1:8787/status",
     "LocalCluster tcp://127.0.0.1:<PORT>, dashboard http://127.0.0.1:8787/status"),
    # random names: staging directories, object-store versions, uuids, object addresses
    ("left m.zarr.tmp-0123456789ab behind", "left m.zarr.tmp-<ID> behind"),
    ("version v-106e3218872e of u.zarr", "version v-<ID> of u.zarr"),
    ("sphdist-U-1f68331b02aa4663bb94cc53e322bca8", "sphdist-U-<UUID>"),
    ("<function f at 0x7f3a2b1c>", "<function f at <ADDR>>"),
])
def test_volatile_figures_become_placeholders(raw, expected):
    assert bh.normalise_text(raw, REPL) == expected


@pytest.mark.parametrize("text", [
    # what must still show as a difference: values, counts, messages, exit paths
    "wrote m.zarr: r=3, 4 iterations, objective 156.035485",
    "Error: n_components=1000 is out of range for X with 261 features and 150 documents.",
    "Error: document chunk 1 (X/00001) is corrupted. To resolve this, re-ingest the corpus.",
    "accuracy 0.9600  NMI 0.8707  (200 documents of c.zarr, k=4, r=4, 5 iterations)",
    "Error: docs.jsonl:13: a JSON value nested too deeply to read (RecursionError)",
    "neighbours: doc003 0.1234, doc017 0.2345",
    "idf fingerprint 5d13e5741c6d, the model's e3bc9845b6d0",
    "pass e.g. --dashboard-address 127.0.0.1:8787",
    "vm.zarr written on the vm branch",
])
def test_what_is_not_volatile_is_kept_as_it_is(text):
    assert bh.normalise_text(text, REPL) == text


def test_a_host_is_replaced_where_a_host_is_named_only(monkeypatch):
    monkeypatch.setattr(bh, "HOSTNAMES", ["vm"])
    raw = "vm.zarr is being written by pid 81 on vm (`sphdist fit -o vm.zarr`), user@vm"
    assert bh.normalise_text(raw) == (
        "vm.zarr is being written by pid <PID> on <HOST> (`sphdist fit -o vm.zarr`), "
        "user@<HOST>")


def test_progress_bars_are_dropped_and_tracebacks_collapsed():
    raw = (" 40%|####      | 4/10 [00:01<00:02]\n"
           "first\rsecond\rfinal line\n"
           "Traceback (most recent call last):\n"
           '  File "/x/sphdist/jobs/fit.py", line 120, in fit\n'
           "    raise CorpusFormatError(msg)\n"
           "sphdist.errors.CorpusFormatError: c.zarr: bad\n")
    assert bh.normalise_text(raw) == (
        "final line\n"
        "Traceback (most recent call last): <FRAMES>\n"
        "sphdist.errors.CorpusFormatError: c.zarr: bad\n")


def test_only_the_progress_line_of_a_completed_step_is_kept():
    raw = ("pass 1/2: count: 60/60 documents, 0 s\n"
           "pass 2/2: tf-idf: 16/60 documents, 0 s\n"
           "pass 2/2: tf-idf: 60/60 documents, 1 s\n"
           "transform: 2/4 chunks, 0 s\n"
           "Error: d.zarr: document chunk 1 (X/00001) is corrupted.\n")
    assert bh.normalise_text(raw) == ("pass 1/2: count: 60/60 documents, <DUR>\n"
                                      "pass 2/2: tf-idf: 60/60 documents, <DUR>\n"
                                      "Error: d.zarr: document chunk 1 (X/00001) is corrupted.\n")


def test_zarr_teardown_race_is_removed_and_nothing_else():
    raw = ("kept warning\n"
           "2026-11-26 12:04:47,123 - distributed.core - INFO - Event loop was unresponsive "
           "in Worker for 3.21s.  This is often caused by long-running GIL-holding functions\n"
           "Thread did not finish cleanly; forcefully closing the event loop.\n"
           "Exception ignored in atexit callback: <function cleanup_resources at 0x7f12>\n"
           "Traceback (most recent call last):\n"
           '  File "zarr/core/sync.py", line 86, in cleanup_resources\n'
           "RuntimeError: Cannot close a running event loop\n")
    assert bh.normalise_text(raw) == "kept warning\n"


# -- normalise_json, random ids ---------------------------------------------------------------


def test_json_volatile_keys_keep_their_shape_and_the_rest_is_kept():
    raw = {"output": f"{TMP}/m.zarr", "n_iter": 5, "objective": [3.5, 2.25],
           "seconds": [0.1, 0.2, None], "seconds_per_iteration": 0.04, "since": None,
           "lock": {"pid": 4242, "host": "vm", "command": "sphdist fit"}}
    assert bh.normalise_json(raw, REPL) == {
        "output": "<TMP>/m.zarr", "n_iter": 5, "objective": [3.5, 2.25],
        "seconds": ["<VOLATILE>", "<VOLATILE>", None], "seconds_per_iteration": "<VOLATILE>",
        "since": None, "lock": {"pid": "<VOLATILE>", "host": "<VOLATILE>",
                                "command": "sphdist fit"}}


def test_json_output_is_parsed_and_other_output_is_text():
    assert bh.normalise_output('{"seconds": 1.5, "n": 2}\n', {}) == {
        "json": {"seconds": "<VOLATILE>", "n": 2}}
    assert bh.normalise_output("{not json, 1.5 s", {}) == "{not json, <DUR>"


def test_random_ids_are_named_by_order_and_keep_which_is_which():
    a_id, a_fp = "1f68331b02aa4663bb94cc53e322bca8", "86" * 32
    b_id, b_fp = "03a3ef321ffa403a87bf128d5072bffb", "31" * 32
    repl: dict[str, str] = {}
    bh.register_random_ids({"corpus_id": a_id, "fingerprint": a_fp}, repl)
    bh.register_random_ids({"corpus_id": b_id, "fingerprint": b_fp}, repl)
    # a model's record of its corpus: no corpus_id beside it, so nothing new is registered
    bh.register_random_ids({"corpus": {"fingerprint": "77" * 32}}, repl)
    text = f"fitted on {a_fp} ({a_fp[:12]}), not on {b_fp[:12]}; other {'77' * 32}"
    assert bh.normalise_text(text, repl) == (
        "fitted on <fingerprint-1> (<fingerprint-1..>), not on <fingerprint-2..>; "
        f"other {'77' * 32}")
    assert bh.normalise_json({"corpus_id": b_id}, repl) == {"corpus_id": "<corpus_id-2>"}


# -- describe: a store's digest is of its decoded values --------------------------------------


def test_zarr_digest_is_of_the_values_not_the_chunks(tmp_path):
    X = np.arange(60, dtype="f8").reshape(12, 5) / 7
    zarr.create_array(str(tmp_path / "a.zarr"), data=X, chunks=(4, 5))
    zarr.create_array(str(tmp_path / "b.zarr"), data=X, chunks=(12, 5))
    Y = X.copy()
    Y[7, 3] = np.nextafter(Y[7, 3], 1.0)  # one ulp
    zarr.create_array(str(tmp_path / "c.zarr"), data=Y, chunks=(4, 5))
    a, b, c = (bh.describe(tmp_path / n, {}) for n in ("a.zarr", "b.zarr", "c.zarr"))
    assert a["zarr"][""]["sha256"] == hashlib.sha256(X.tobytes()).hexdigest()
    assert a == b
    assert c["zarr"][""]["sha256"] == hashlib.sha256(Y.tobytes()).hexdigest() != \
        a["zarr"][""]["sha256"]


def test_a_group_records_attributes_and_every_member(tmp_path):
    g = zarr.open_group(str(tmp_path / "m.zarr"), mode="w")
    g.attrs.update({"seconds": [0.5], "params": {"n_components": 3}})
    g.create_array("U", data=np.eye(4, 3))
    g.create_group("X").create_array("idx", data=np.array([3, 1], dtype="i4"))
    d = bh.describe(tmp_path / "m.zarr", {})["zarr"]
    assert set(d) == {"", "U", "X", "X/idx"}
    assert d[""]["attrs"] == {"seconds": ["<VOLATILE>"], "params": {"n_components": 3}}
    assert d["U"]["shape"] == [4, 3] and d["U"]["dtype"] == "float64"
    assert d["X/idx"]["sha256"] == hashlib.sha256(
        np.array([3, 1], dtype="i4").tobytes()).hexdigest()


def test_string_values_are_digested_after_the_path_replacements(tmp_path):
    ids = np.array([f"file://{TMP}/docs.jsonl:1", "d2"], dtype=object)
    expected = hashlib.sha256(json.dumps(["file://<TMP>/docs.jsonl:1", "d2"]).encode())
    assert bh._sha256_of_values(ids, REPL) == expected.hexdigest()


def test_a_gz_file_is_digested_without_its_header_time(tmp_path):
    import gzip

    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(b"line\n", mtime=1))
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(b"line\n", mtime=2))
    a, b = (bh.describe(tmp_path / n, {}) for n in ("a.jsonl.gz", "b.jsonl.gz"))
    assert a == b == {"sha256": hashlib.sha256(b"line\n").hexdigest(), "bytes": 5}


# -- compare ----------------------------------------------------------------------------------


def _record(**changes):
    rec = {"key": "fit/fit", "cmd": "sphdist fit -i c.zarr -o m.zarr", "env": {}, "exit": 0,
           "stdout": "wrote m.zarr: r=3, 4 iterations, objective 156.035485\n",
           "stderr": "iter    1  objective 174.0428435\n",
           "outputs": {"m.zarr": {"zarr": {"U": {"sha256": "aa", "shape": [5, 3]}}}},
           "_wall_s": 1.5}
    rec.update(changes)
    return rec


def test_identical_records_have_no_difference_whatever_their_wall_time():
    assert bh.compare_records([_record()], [_record(_wall_s=9.0)]) == []


def test_each_differing_field_is_reported_with_before_and_after():
    outputs = {"m.zarr": {"zarr": {"U": {"sha256": "bb", "shape": [5, 3]}}}}
    diffs = bh.compare_records([_record()], [_record(exit=1, outputs=outputs)])
    assert diffs == [("fit/fit", "exit", 0, 1),
                     ("fit/fit", "outputs.m.zarr.zarr.U.sha256", "aa", "bb")]


def test_a_changed_message_and_a_missing_record_are_differences():
    before = [_record(), _record(key="fit/info")]
    after = [_record(stderr="iter    1  objective 174.0428436\n")]
    diffs = bh.compare_records(before, after)
    assert ("fit/fit", "stderr", "iter    1  objective 174.0428435\n",
            "iter    1  objective 174.0428436\n") in diffs
    assert ("fit/info", "record", "present", None) in diffs
    assert len(diffs) == 2


def test_compare_mode_exits_1_on_a_difference_and_0_on_none(tmp_path):
    def write(name, records):
        path = tmp_path / name
        path.write_text(json.dumps({"meta": {"commit": "0" * 40}, "records": records}))
        return str(path)

    a = write("a.json", [_record()])
    b = write("b.json", [_record(stdout="wrote m.zarr: r=3, 5 iterations\n")])
    same = CliRunner().invoke(bh.main, ["--compare", a, write("a2.json", [_record()])])
    assert same.exit_code == 0, same.output
    assert "0 differences" in same.output
    differ = CliRunner().invoke(bh.main, ["--compare", a, b])
    assert differ.exit_code == 1, differ.output
    assert "--- fit/fit: stdout" in differ.output
    assert "before: wrote m.zarr: r=3, 4 iterations" in differ.output
    assert "after:  wrote m.zarr: r=3, 5 iterations" in differ.output


def test_the_scenario_list_is_long_enough_and_its_names_unique():
    keys = [f"{g}/{s.name}" for g, make in bh.GROUPS.items() for s in make()
            if isinstance(s, bh.Run)]
    assert len(keys) >= 135
    assert len(keys) == len(set(keys))
    commands = {s.args[s.args.index(a)] for g, make in bh.GROUPS.items() for s in make()
                if isinstance(s, bh.Run) for a in s.args if a in {
                    "ingest", "synth", "fit", "transform", "export", "info", "neighbors",
                    "evaluate", "plot"}}
    assert commands == {"ingest", "synth", "fit", "transform", "export", "info", "neighbors",
                        "evaluate", "plot"}
