"""Issue 17 item 4 against the real vLLM server (CPU): its /metrics is open without the admin token,
and a short orchestrator run (and a collection) writes ``[server] metrics`` lines with plausible
values from it."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from tests.support.collect import collect_config, write_tasks
from tests.support.orchestrator_run import tagged_lines

from prime_rl.clients.server_metrics import parse_metrics
from prime_rl.collect.runner import collect
from prime_rl.orchestrator.config import OrchestratorConfig
from prime_rl.orchestrator.loop import Orchestrator

pytestmark = pytest.mark.slow


def check_plausible(metrics: list[dict[str, str]], url: str) -> None:
    """Every line names the server and holds sane values; the counter never goes down."""
    assert metrics and all(m["url"] == url for m in metrics)
    for m in metrics:
        assert int(m["running"]) >= 0 and int(m["waiting"]) >= 0
        assert 0.0 <= float(m["kv_cache_pct"]) <= 100.0
        assert float(m["scrape_ms"]) >= 0
    preemptions = [int(m["preemptions"]) for m in metrics]
    assert preemptions == sorted(preemptions) and preemptions[0] >= 0
    queued = [m for m in metrics if "queue_ms" in m]
    assert sum(int(m.get("requests", 0)) for m in metrics) >= 1 and queued
    for m in queued:  # the requests scheduled since the scrape before: their time in the queue
        assert int(m["requests"]) >= 1 and 0 <= float(m["queue_ms"]) < 60_000
        assert 0 <= float(m["queue_p50_ms"]) < 60_000
    first_tokens = [m for m in metrics if "ttft_ms" in m]  # requests that got their first token meanwhile
    assert first_tokens and all(0 < float(m["ttft_ms"]) < 60_000 for m in first_tokens)
    assert all(float(m["ttft_p50_ms"]) > 0 for m in first_tokens)


def test_metrics_are_open_without_the_admin_token(inference_server):
    assert inference_server.admin_token  # the session server has one: /metrics needs none
    r = httpx.get(f"{inference_server.base_url}/metrics", timeout=10)
    assert r.status_code == 200
    snap = parse_metrics(r.text)
    assert snap.is_vllm and snap.kv_cache_pct is not None and snap.preemptions is not None
    assert snap.queue_time is not None and snap.ttft is not None


def test_an_orchestrator_run_writes_server_metrics_lines(inference_server, tmp_path):
    server = inference_server
    cfg = OrchestratorConfig(
        output_dir=tmp_path,
        model=server.model,
        client={"base_urls": [server.base_url]},
        verify={"workers": 1},
        max_steps=2,  # async_level 1: steps 0 and 1 need no new weights
        batch_size=16,
        rollouts_per_example=4,
        max_inflight=4,
        seq_len=256,
        sampling={"max_tokens": 64},
        server_metrics={"interval_s": 0.2},
    )
    orch = Orchestrator(cfg)
    with tagged_lines() as lines:
        asyncio.run(asyncio.wait_for(orch.run(), timeout=300))
    metrics = [ln.fields for ln in lines if ln.tag == "server" and ln.event == "metrics"]
    assert not [ln for ln in lines if ln.tag == "server" and ln.event != "metrics"]  # no error, not off
    check_plausible(metrics, server.base_url)
    latest = orch.server_metrics.latest(server.base_url)
    assert (
        latest is not None
        and latest.kv_cache_pct is not None
        and orch.server_metrics.errors == {server.base_url: 0}
    )


def test_a_collection_writes_server_metrics_lines(inference_server, tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 24)
    cfg = collect_config(
        inference_server.base_url + "/v1",
        tmp_path,
        "--model",
        inference_server.model,
        "--responses_create_params.max_output_tokens",
        "48",
        "--server_metrics.interval_s",
        "0.2",
        "--num_samples_in_parallel",
        "8",
    )
    with tagged_lines() as lines:
        result = asyncio.run(collect(cfg))
    assert result.written == 24
    metrics = [ln.fields for ln in lines if ln.tag == "server" and ln.event == "metrics"]
    check_plausible(metrics, inference_server.base_url + "/v1")
