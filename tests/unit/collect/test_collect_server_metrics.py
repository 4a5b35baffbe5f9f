"""The collector scrapes its servers' /metrics during a run ([server] lines); a server without
them (a hosted API: 404) is asked once, with one warning, and the run goes on unchanged."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from loguru import logger
from tests.support.collect import collect_config, write_tasks
from tests.support.http_server import LocalTestServer, ScriptState
from tests.support.orchestrator_run import tagged_lines

from prime_rl.collect.runner import collect

PAGE = (Path(__file__).parents[1] / "clients" / "data" / "vllm_metrics_loaded.txt").read_text()


def run(tmp_path, *servers: LocalTestServer, **flags: str):
    extra = [x for k, v in flags.items() for x in (f"--{k}", v)]
    cfg = collect_config([s.base_url for s in servers], tmp_path, *extra)
    with tagged_lines() as lines:
        result = asyncio.run(collect(cfg))
    return result, [ln for ln in lines if ln.tag == "server"]


def test_a_vllm_server_is_scraped_through_the_run(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 16)
    # the requests after the first 4 wait until the server was scraped 3 times: the run lasts that
    # long however slowly a loaded machine scrapes (a fixed-length run could end before)
    state = ScriptState(metrics_text=PAGE, default_delay_s=0.05, hold_after=4)

    def release_after_three_scrapes() -> None:
        deadline = time.monotonic() + 60
        while state.metrics_hits < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        state.release()

    with LocalTestServer(state) as server:
        releaser = threading.Thread(target=release_after_three_scrapes, daemon=True)
        releaser.start()
        result, lines = run(
            tmp_path, server, **{"server_metrics.interval_s": "0.05", "num_samples_in_parallel": "2"}
        )
        releaser.join()
    assert result.written == 16 and result.failed == 0
    metrics = [ln.fields for ln in lines if ln.event == "metrics"]
    # closing cancels a scrape in flight: the server may have counted one request more than was logged
    assert len(metrics) >= 3 and state.metrics_hits - len(metrics) in (0, 1)
    assert all(m["url"] == server.base_url and m["waiting"] == "14" for m in metrics)


def test_a_server_without_metrics_is_asked_once_with_one_warning(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 16)
    warnings: list[str] = []
    sink = logger.add(warnings.append, level="WARNING", format="{message}")
    try:
        with LocalTestServer(ScriptState(default_delay_s=0.05)) as server:
            result, lines = run(tmp_path, server, **{"server_metrics.interval_s": "0.05"})
    finally:
        logger.remove(sink)
    assert result.written == 16 and result.failed == 0
    assert server.state.metrics_hits == 1
    assert [(ln.event, ln.fields["status"]) for ln in lines] == [("scrape.off", "404")]
    assert len([w for w in warnings if "/metrics" in w]) == 1


def test_interval_0_never_asks(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 4)
    with LocalTestServer(ScriptState(metrics_text=PAGE)) as server:
        result, lines = run(tmp_path, server, **{"server_metrics.interval_s": "0"})
    assert result.written == 4 and server.state.metrics_hits == 0 and not lines
