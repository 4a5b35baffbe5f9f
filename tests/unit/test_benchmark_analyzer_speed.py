"""benchmarks/analyzer_speed.py times the whole report, not only the phases it reports apart."""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "analyzer_speed.py"


def test_the_whole_run_is_timed_and_its_phases_apart(tmp_path):
    spec = importlib.util.spec_from_file_location("analyzer_speed", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    log = tmp_path / "all_tagged.log"
    bench.build(log, 3000, 1)
    start = time.perf_counter()
    r = bench.measure(log, tmp_path / "out")
    wall = time.perf_counter() - start
    assert r["lines"] == 3000 and r["tagged"] > 2500
    # the child's start and imports alone take longer than parsing 3,000 lines
    assert 0 < r["parse_s"] < r["seconds"] <= wall
    # start and imports, the analysis (which holds the parse) and the report's files: each some
    # time, together no more than the whole run (the rest is the interpreter's exit)
    assert r["startup_s"] > r["analysis_s"] >= r["parse_s"] > 0 and r["report_s"] > 0
    assert r["startup_s"] + r["analysis_s"] + r["report_s"] <= r["seconds"]
    assert r["peak_rss_mb"] > 0
    # the child's own CPU time: some, and no more than all this machine's cores for its wall time
    assert 0 < r["cpu_s"] <= r["seconds"] * (os.cpu_count() or 1)


def test_the_collector_log_is_every_line_a_collect_line_on_four_servers(tmp_path):
    spec = importlib.util.spec_from_file_location("analyzer_speed", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    log = tmp_path / "collector.log"
    assert bench.build_collector(log, 2000) == 4
    r = bench.measure(log, tmp_path / "out")
    assert r["lines"] == r["tagged"] == 2000 and r["malformed"] == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    # one in 100 a 429 retry, one in 50 (of the rest) failed, the others done
    assert summary["counts"]["retry.429"] == 20 and summary["counts"]["completions"] == 2000 - 20 - 20
    assert sorted(s["url"] for s in summary["servers"]) == [f"http://h{k}:8000" for k in range(4)]
