"""The measuring harness of pipelines/benchmark.py: real processes, hand-computed targets."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

PIPELINES = Path(__file__).resolve().parents[1] / "pipelines"
sys.path.insert(0, str(PIPELINES))

import _bench_monitor as mon  # noqa: E402
import _bench_report as rep  # noqa: E402
import benchmark  # noqa: E402

MB = 2**20

# a driver holding 150 MiB that starts one multiprocessing (spawn) worker holding 250 MiB and
# writing 30 MiB to a file, each alive long enough to be polled after its peak
TREE = textwrap.dedent("""
    import multiprocessing as mp, os, sys, time
    def work(path):
        block = bytearray(os.urandom(1)) * (250 * 2**20)
        with open(path, "wb") as f:
            f.write(os.urandom(30 * 2**20))
            f.flush()
        time.sleep(1.0)
    if __name__ == "__main__":
        held = bytearray(os.urandom(1)) * (150 * 2**20)
        p = mp.get_context("spawn").Process(target=work, args=(sys.argv[1],))
        p.start()
        p.join()
        print("done", p.exitcode)
""")


def test_tree_peaks_and_bytes_written_of_a_real_process_tree(tmp_path):
    script = tmp_path / "tree.py"
    script.write_text(TREE)
    lines = []
    res = mon.run_monitored(
        [sys.executable, str(script), str(tmp_path / "out.bin")], timeout=60,
        on_line=lambda t, line, watch: lines.append(line), interval=0.05,
    )
    assert res["returncode"] == 0 and res["stopped"] is None and res["stdout"] == ["done 0"]
    assert mon.error_of(res) is None
    assert res["n_workers_seen"] == 1 and res["max_workers_alive"] == 1
    (worker,) = res["worker_peak_rss_gib"]
    assert 250 * MB <= worker * 2**30 < 400 * MB
    assert 150 * MB <= res["driver_peak_rss_gib"] * 2**30 < worker * 2**30
    assert res["summed_peak_rss_gib"] >= worker + res["driver_peak_rss_gib"]
    assert res["simultaneous_peak_rss_gib"] >= (250 + 150) * MB / 2**30
    # the kernel's count for the whole reaped tree, and the polled count of the worker
    assert 30 * MB <= res["total_write_bytes"] < 31 * MB
    (w,) = [p for p in res["processes"] if p["role"] == "worker"]
    assert 30 * MB <= w["write_bytes"] < 31 * MB
    # wait4's figure is the largest RSS a process of the tree ever had, also in the instant
    # between fork and exec, when a child still maps its parent's (this test process') pages
    assert res["wait4_maxrss_gib"] >= worker * 0.95


def test_time_and_memory_limits_kill_the_process_group(tmp_path):
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    res = mon.run_monitored(sleeper, timeout=1, interval=0.05)
    assert res["wall_s"] < 10 and res["returncode"] == -9
    assert mon.error_of(res) == "timed out after 1 s"
    hog = [sys.executable, "-c",
           "import os, time; b = bytearray(os.urandom(1)) * (300 * 2**20); time.sleep(60)"]
    res = mon.run_monitored(hog, timeout=30, mem_limit_gib=0.2, interval=0.05)
    assert res["wall_s"] < 20 and "more than 0.2 GiB" in mon.error_of(res)
    failing = [sys.executable, "-c", "import sys; sys.exit('Error: no such corpus')"]
    assert mon.error_of(mon.run_monitored(failing, timeout=30)) == "Error: no such corpus"


def test_the_fit_log_lines_the_benchmark_reads(caplog):
    """benchmark.py finds the iterations and the scheduler in what `sphdist fit` logs."""
    from types import SimpleNamespace

    from sphdist.cli.fit import FitProgress

    progress = FitProgress(3, bar=False)
    with caplog.at_level("INFO", logger="sphdist"):
        for k in range(3):
            progress(SimpleNamespace(iteration=k, objective=[10.0 - k], relative_change=0.1,
                                     seconds=[0.5] * (k + 1), converged=False))
    found = [benchmark.ITER_LINE.match(r.getMessage()) for r in caplog.records]
    assert [int(m[1]) for m in found if m] == [0, 1, 2]
    line = "started LocalCluster: 2 workers x 1 threads, dashboard http://127.0.0.1:1/status"
    assert benchmark.SCHEDULER_LINE.search(line)
    assert benchmark._short(line) == "started LocalCluster: 2 workers x 1 threads"
    line = ("started LocalCluster tls://127.0.0.1:1: 2 workers x 1 threads (X is 23.43 MiB "
            "stored; --n-workers 2), dashboard http://127.0.0.1:2/status")
    assert benchmark._short(line) == "started LocalCluster tls://127.0.0.1:1: 2 workers x 1 threads"
    line = "running on dask's threaded scheduler in this process (2 threads): X is 23 MiB; at most"
    assert benchmark._short(line) == line.split(";")[0]


def _corpus(n, wall, sklearn_wall, peak, s_per_iter, bare_occ, converged=True, placement=""):
    return {
        "ingest": {"n_documents": n, "nnz": 100 * n, "n_chunks": n // 4096 + 1},
        "bare": {"bare_all_rows_s": 2 * bare_occ, "bare_occurring_rows_s": bare_occ,
                 "occurring_features": 1000},
        "sphdist": {"wall_s": wall, "converged": converged, "n_iter": 12,
                    "driver_peak_rss_gib": peak, "worker_peak_rss_gib": [],
                    "n_workers_seen": 0, "s_per_iter": s_per_iter,
                    "log_head": ["running in this process", placement]},
        "peers": {"sklearn": {"wall_s": sklearn_wall}},
    }


def test_targets_against_hand_computed_ratios():
    held = ("X (1.14 GiB) is held in memory: within the memory budget of 5.00 GiB (a quarter "
            "of the 20.00 GiB available; --memory-budget sets it)")
    streamed = ("X (11.4 GiB) is streamed from the store every iteration, chunk by chunk: "
                "above the memory budget of 5.00 GiB (...)")
    corpora = {
        "20newsgroups-vocabulary": _corpus(18846, 9.0, 10.0, 0.5, 0.2, 1.0),
        "synthetic-100k": _corpus(100_000, 30.0, 25.0, 1.0, 2.0, 3.0),
        "synthetic-250k": _corpus(250_000, 20.0, 60.0, 1.2, 3.0, 6.0, converged=False),
        "synthetic-1000k": _corpus(1_000_000, 100.0, 250.0, 2.5, 12.0, 24.0, placement=held),
        "synthetic-10000k": _corpus(10_000_000, 3000.0, 1.0, 1.10, 150.0, 200.0,
                                    placement=streamed),
    }
    corpora["synthetic-100k"]["sphdist_streamed"] = {"driver_peak_rss_gib": 1.0,
                                                     "worker_peak_rss_gib": []}
    corpora["synthetic-1000k"]["sphdist_streamed"] = {"driver_peak_rss_gib": 1.3,
                                                      "worker_peak_rss_gib": []}
    del corpora["synthetic-10000k"]["peers"]["sklearn"]
    got = {t["target"]: t for t in rep.targets({"corpora": corpora,
                                                "startup": {"seconds": [0.3, 0.4, 0.6],
                                                            "median_s": 0.4,
                                                            "load_before": [1.0]}})}
    time_ = "time to a converged embedding <= {:.1f}x scikit-learn TruncatedSVD, {} " \
            "(start-up included)"
    ng = got[time_.format(1.0, "20newsgroups-vocabulary")]
    assert ng["met"] is True and ng["figure"].startswith("0.90x")  # 9 / 10
    assert got[time_.format(0.5, "synthetic-100k")]["met"] is False  # 30 / 25
    assert got[time_.format(0.5, "synthetic-250k")]["met"] is False  # 0.33x, not converged
    assert got[time_.format(0.5, "synthetic-250k")]["figure"].startswith("0.33x")
    assert got[time_.format(0.5, "synthetic-1000k")]["met"] is True  # 0.40x
    it = "one iteration <= 0.6x a single-core bare pass on the occurring rows, "
    assert got[it + "synthetic-250k"]["met"] is True  # 3 / 6
    assert got[it + "synthetic-250k"]["figure"].startswith("0.50")
    assert got[it + "synthetic-10000k"]["met"] is False  # 150 / 200
    assert it + "synthetic-100k" not in got
    flat = got["peak RSS of every process on the streamed path at 10M <= 1.1x that at 100k"]
    assert flat["met"] is True and flat["figure"].startswith("1.10x")  # 1.10 / 1.00
    budget = got["in-memory path never above its budget (X held <= --memory-budget)"]
    assert budget["met"] is True and "1.20 GiB above" in budget["figure"]  # 2.5 - 1.3
    assert "budget 5.00 GiB" in budget["figure"]
    ten = got["10M documents fit on this machine with the defaults"]
    assert ten["met"] is True and ten["figure"].startswith("50.0 min, 12 iterations")
    assert got["`sphdist --help` <= 0.5 s at load below 2"]["met"] is True


def test_merge_takes_only_what_the_first_run_lacks():
    first = {"peers": ["sklearn"], "corpora": {"a": {
        "sphdist": {"wall_s": 1.0}, "peers": {"sklearn": {"error": "timed out after 9 s"}}}}}
    second = {"started": "then", "load_start": [1, 1, 1], "peers": ["sklearn", "bae"],
              "corpora": {"a": {"sphdist": {"wall_s": 2.0}, "sphdist_cluster": {"wall_s": 5.0},
                                "peers": {"sklearn": {"wall_s": 3.0}, "bae": {"wall_s": 4.0}}},
                          "b": {"bare": {"bare_all_rows_s": 1.0}, "peers": {}}}}
    added = rep.merge(first, json.loads(json.dumps(second)))
    assert sorted(added) == ["a bae", "a sklearn", "a sphdist_cluster", "b bare"]
    assert first["corpora"]["a"]["sphdist"]["wall_s"] == 1.0
    assert first["corpora"]["a"]["peers"]["sklearn"]["wall_s"] == 3.0
    assert first["peers"] == ["sklearn", "bae"] and "a sklearn" in first["notes"][-1]


def test_scaling_table_speed_ups_and_the_rows_not_measured(tmp_path):
    """pipelines/results/scaling.md from hand-made runs: speed-up = one thread's (and two
    threads') s/iteration over the row's, every 16-core row 'not measured' and its command
    printed once."""
    run = {"n_iter": 9, "init_s": 10.0, "wall_s": 100.0, "load_before": [1.0, 2.0, 3.0],
           "objective": [3.0, 2.0]}
    command = benchmark._scaling_command(1_000_000, [1, 16], ["16x1"], "out")
    results = {
        "command": "python pipelines/benchmark.py scaling", "commit": "abc", "started": "now",
        "machine": "x86_64, 2 cores, 24 GiB", "corpus": "synthetic-250k", "fit_args": ["-r", "100"],
        "load_start": [1.0, 1.0, 1.0], "load_end": [2.0, 2.0, 2.0], "notes": ["a note"],
        "runs": [
            {"label": "1 thread", "threads": 1, "s_per_iter": 8.0, "s_per_iter_median": 7.0,
             **run},
            {"label": "2 threads", "threads": 2, "s_per_iter": 5.0, "s_per_iter_median": 5.0,
             **run},
            {"label": "16 threads (16-core machine)", "not_measured": command},
            {"label": "LocalCluster 16x1 (16-core machine)", "not_measured": command},
        ],
    }
    benchmark.write_scaling(results, tmp_path / "scaling")
    text = (tmp_path / "scaling.md").read_text()
    assert ("| 1 thread | 9 | 8.00 (median 7.00) | 10.0 | 100.0 | 1.00x | 0.62x | "
            "1.0 / 2.0 / 3.0 |") in text
    assert "| 2 threads | 9 | 5.00 (median 5.00) | 10.0 | 100.0 | 1.60x | 1.00x |" in text
    assert text.count("not measured") == 2 and text.count(command) == 1
    assert command == ("python pipelines/benchmark.py scaling --n-docs 1000000 --threads 1,16 "
                       "--clusters 16x1 --output out")
    assert "same objective history, bitwise" in text and "a note" in text
    assert json.loads((tmp_path / "scaling.json").read_text())["runs"][1]["s_per_iter"] == 5.0


def test_threads_go_to_distinct_physical_cores_before_hyperthread_siblings(tmp_path):
    # two packages-worth of topology: cpu0/cpu1 share core 0, cpu2/cpu3 share core 1
    for cpu, core in [(0, 0), (1, 0), (2, 1), (3, 1)]:
        topology = tmp_path / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text("0\n")
        (topology / "core_id").write_text(f"{core}\n")
    assert benchmark._cpus_by_core([0, 1, 2, 3], tmp_path) == [0, 2, 1, 3]
    assert benchmark._cpus_by_core([3, 1], tmp_path) == [1, 3]  # one CPU of each of two cores
    # no topology to read: the CPUs in number order
    assert benchmark._cpus_by_core([5, 4], tmp_path / "absent") == [4, 5]
