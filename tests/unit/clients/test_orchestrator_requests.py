"""The orchestrator's rollout requests over the clients package: which failures are retried (429,
5xx, connection errors), which refuse the task (other 4xx), and the ``[gen] request.retry`` line."""

from __future__ import annotations

import asyncio

import pytest
from loguru import logger
from tests.support.http_server import LocalTestServer, Reply

from prime_rl.clients.config import RetryPolicy
from prime_rl.orchestrator.config import OrchestratorConfig
from prime_rl.orchestrator.loop import Orchestrator, OrchestratorError
from prime_rl.tracing import parse_tagged

CHAT = "/v1/chat/completions"
DEAD = "http://127.0.0.1:9"
BODY = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "n": 2,
    "max_tokens": 3,
    "return_token_ids": True,
}


@pytest.fixture
def server():
    with LocalTestServer() as s:
        yield s


def request(tmp_path, urls: list[str], retries: int = 3):
    """Run one ``_request`` on a fresh orchestrator; (answer or exception, orchestrator, tagged lines)."""
    cfg = OrchestratorConfig(
        output_dir=tmp_path,
        client={"base_urls": urls, "connect_timeout_s": 2},
        verify={"workers": 1},
        max_request_retries=retries,
        request_timeout_s=5,
    )
    lines: list[str] = []
    sink = logger.add(lines.append, format="{message}")
    orch = Orchestrator(cfg)
    orch.retry = RetryPolicy(max_retries=retries, backoff_s=0.01, backoff_max_s=0.02)

    async def go():
        try:
            answer = await orch._request(dict(BODY))
            return None if answer is None else answer[1].data
        except OrchestratorError as e:
            return e
        finally:
            await orch.admin.aclose()
            await orch.pool.aclose()

    try:
        out = asyncio.run(go())
    finally:
        orch.verifier.close()
        logger.remove(sink)
    tagged = [t for t in map(parse_tagged, lines) if t and t.tag == "gen" and t.event == "request.retry"]
    return out, orch, tagged


def test_429_and_5xx_are_retried_then_the_answer_is_returned(server, tmp_path):
    server.state.script(CHAT, Reply(status=429, retry_after=0.05), Reply(status=503), Reply(status=500))
    out, orch, retries = request(tmp_path, [server.base_url])
    assert len(out["choices"]) == 2 and out["prompt_token_ids"] == [1, 2, 3]
    assert orch.counters["retries"] == 3 and orch.counters["request_errors"] == 0
    assert [t.fields["status"] for t in retries] == ["429", "503", "500"]
    assert [t.fields["attempt"] for t in retries] == ["1", "2", "3"]
    assert retries[0].num("wait_ms") == 50.0  # Retry-After honoured
    assert all(0.0 < t.num("wait_ms") <= 20.0 for t in retries[1:])  # the policy's capped backoff
    assert set(retries[0].fields) == {"url", "status", "attempt", "wait_ms", "elapsed_ms"}
    assert not orch.down


@pytest.mark.parametrize("status", [400, 404, 422])
def test_other_4xx_refuses_the_task_without_retry(server, tmp_path, status):
    server.state.script(CHAT, Reply(status=status, body={"error": "prompt too long"}))
    out, orch, retries = request(tmp_path, [server.base_url])
    assert out is None and orch.counters["request_errors"] == 1 and orch.counters["retries"] == 0
    assert not retries and len(server.state.seen) == 1


def test_refused_connection_is_retried_on_the_other_server_and_held_down(server, tmp_path):
    out, orch, retries = request(tmp_path, [DEAD, server.base_url])
    assert out["choices"] and orch.counters["retries"] == 1
    assert orch.down == {DEAD}
    assert retries[0].fields["status"] == "error" and retries[0].fields["url"] == DEAD


def test_retries_are_bounded_and_name_the_last_error(server, tmp_path):
    server.state.script(CHAT, *[Reply(status=502)] * 5)
    out, orch, retries = request(tmp_path, [server.base_url], retries=2)
    assert isinstance(out, OrchestratorError)
    assert "after 3 attempts" in str(out) and "HTTP 502" in str(out)
    assert len(server.state.seen) == 3 and len(retries) == 3
