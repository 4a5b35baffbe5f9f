"""prime_rl.collect.diagnose: the rules that name a bottleneck from a low and a high parallelism run,
and what its passes log."""

from __future__ import annotations

import asyncio
import json

from loguru import logger
from tests.support.collect import collect_config, write_tasks
from tests.support.http_server import LocalTestServer
from tests.support.orchestrator_run import tagged_lines

from prime_rl.analysis.__main__ import main as analyze_logs
from prime_rl.collect.config import DiagnoseConfig
from prime_rl.collect.diagnose import diagnose, judge
from prime_rl.collect.runner import collect
from prime_rl.logging import LOG_FORMAT


def row(level, wall, gen, verify=None, n429=0, failed=0):
    return {
        "parallelism": level,
        "wall_s": wall,
        "gen_ms_mean": gen,
        "verify_ms_mean": verify,
        "rate_limited": n429,
        "failed": failed,
    }


def test_diagnose_follows_the_three_bottleneck_guide():
    assert judge(row(5, 10, 100), row(20, 3, 110)).kind == "under_parallelised"
    assert judge(row(5, 10, 100, verify=400), row(20, 9, 100, verify=1500)).kind == "verification"
    assert judge(row(5, 10, 100), row(20, 9.5, 380)).kind == "model_saturated"
    assert judge(row(5, 10, 100), row(20, 9.5, 110)).kind == "network"
    assert judge(row(5, 10, 100), row(20, 3, 100, n429=12)).kind == "rate_limited"
    assert judge(row(5, 10, 100), row(20, 3, 100, failed=3)).kind == "overloaded"


def test_a_diagnose_s_passes_say_so_on_their_run_start_and_are_no_restart(tmp_path):
    """Each pass of a diagnose is a run that logs run.start: the analyzer listed the second pass as a
    restart of the collector. Each says what it is (mode=diagnose pass=1, then pass=2), and the log
    read as a user would (analyze-logs) lists no restart; a collection says mode=collect."""
    write_tasks(tmp_path / "tasks.jsonl", 3)
    log = tmp_path / "out_collect.log"
    sink = logger.add(log, format=LOG_FORMAT, filter=lambda r: r["message"].startswith("[collect]"))
    try:
        with LocalTestServer() as server, tagged_lines() as lines:
            cfg = collect_config(server.base_url, tmp_path, "--low", "1", "--high", "2", model=DiagnoseConfig)
            asyncio.run(diagnose(cfg))
            asyncio.run(
                collect(collect_config(server.base_url, tmp_path, "--output", str(tmp_path / "c.jsonl")))
            )
    finally:
        logger.remove(sink)
    starts = [(ln.fields.get("mode"), ln.fields.get("pass")) for ln in lines if ln.event == "run.start"]
    assert starts == [("diagnose", "1"), ("diagnose", "2"), ("collect", None)]
    # the diagnose's log alone (its lines before the collection's)
    text = log.read_text().splitlines()
    cut = next(i for i, line in enumerate(text) if "mode=collect" in line)
    log.write_text("\n".join(text[:cut]) + "\n")
    analyze_logs([str(log), "--out", str(tmp_path / "analysis")])
    summary = json.loads((tmp_path / "analysis" / "summary.json").read_text())
    assert summary["restarts"] == [] and summary["counts"]["collect.run.start"] == 2
