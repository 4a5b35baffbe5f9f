"""benchmarks/analyzer_speed.py times the whole report, not only the parse it reports apart."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "analyzer_speed.py"


def test_the_whole_run_is_timed_and_the_parse_apart(tmp_path):
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
    assert r["peak_rss_mb"] > 0
