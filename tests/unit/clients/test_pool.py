"""The inference pool: the one least-loaded picker, down servers, requests over aiohttp, health."""

from __future__ import annotations

import asyncio
import time

import pytest
from tests.support.http_server import LocalTestServer

from prime_rl.clients import pool as pool_module
from prime_rl.clients.chat import ChatBackend
from prime_rl.clients.config import ClientConfig
from prime_rl.clients.errors import TransportError
from prime_rl.clients.pool import HealthProbe, InferencePool

DEAD = "http://127.0.0.1:9"  # discard port: nothing listens, connections are refused


@pytest.fixture
def servers():
    with LocalTestServer() as a, LocalTestServer() as b:
        yield a, b


def pool_of(*urls: str, **kw) -> InferencePool:
    return InferencePool(ClientConfig(base_urls=list(urls), **kw))


def test_pick_is_least_loaded_with_ties_in_config_order():
    pool = pool_of("http://a/", "http://b", "http://c")
    assert pool.base_urls == ["http://a", "http://b", "http://c"]
    assert pool.pick() == "http://a"
    with pool.track("http://a"):
        assert pool.pick() == "http://b"
        with pool.track("http://b"), pool.track("http://b"):
            assert pool.pick() == "http://c"
            with pool.track("http://c"):
                assert pool.pick() == "http://a"  # a: 1, b: 2, c: 1 -> the first of the least loaded
    assert pool.inflight == {"http://a": 0, "http://b": 0, "http://c": 0}


def test_excluded_and_down_servers_are_skipped():
    pool = pool_of("http://a", "http://b", "http://c")
    assert pool.pick(exclude={"http://a"}) == "http://b"
    pool.mark_down("http://b")
    assert pool.pick(exclude={"http://a"}) == "http://c"
    assert pool.pick() == "http://a"
    pool.mark_up("http://b")
    assert pool.pick(exclude={"http://a"}) == "http://b"


class FakeClock:
    """The pool's ``time`` module with a ``monotonic`` that moves only when the test advances it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def __getattr__(self, name: str):
        return getattr(time, name)


def test_down_expires(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(pool_module, "time", clock)
    pool = pool_of("http://a", "http://b")
    pool.mark_down("http://a", for_s=0.05)
    assert pool.pick() == "http://b"
    clock.now += 0.04
    assert pool.pick() == "http://b"  # still down
    clock.now += 0.02
    assert pool.pick() == "http://a"


def test_all_down_orchestrator_gets_none_collector_falls_back():
    """The orchestrator (no fallback) waits when nothing is up; the collector tries anyway."""
    pool = pool_of("http://a", "http://b")
    pool.mark_down("http://a")
    pool.mark_down("http://b")
    with pool.track("http://a"):
        assert pool.pick() is None
        assert pool.pick(fallback=True) == "http://b"  # the least loaded of the down ones
    # excluded servers stay excluded even with fallback
    assert pool.pick(exclude={"http://a", "http://b"}, fallback=True) is None
    assert pool.pick(exclude={"http://b"}, fallback=True) == "http://a"
    backend = ChatBackend(["http://a", "http://b"])
    backend.pool.mark_down("http://a")
    backend.pool.mark_down("http://b")
    assert backend.pick() == "http://a"


def test_post_json_counts_inflight_and_a_refused_connection_marks_down(servers):
    a, _ = servers

    async def scenario():
        pool = pool_of(DEAD, a.base_url, connect_timeout_s=2)
        try:
            assert pool.pick() == DEAD
            with pytest.raises(TransportError) as e:
                await pool.post_json(DEAD, f"{DEAD}/v1/completions", {"prompt": "p"})
            assert e.value.connect_failed and e.value.retryable and e.value.status is None
            assert "ConnectError" in str(e.value) and e.value.url == DEAD
            assert pool.pick() == a.base_url  # the dead server is skipped for a while
            body = {"model": "m", "prompt": "hi", "max_tokens": 3}
            task = asyncio.create_task(pool.post_json(a.base_url, f"{a.base_url}/v1/completions", body))
            await asyncio.sleep(0)
            assert pool.inflight[a.base_url] == 1
            data = await task
            assert pool.inflight == {DEAD: 0, a.base_url: 0}
            return data
        finally:
            await pool.aclose()

    data = asyncio.run(scenario())
    assert data["choices"][0]["text"] == "xxx" and data["usage"]["completion_tokens"] == 3


def test_api_key_is_sent_and_read_timeout_replaced_per_request(servers):
    a, _ = servers
    a.state.default_delay_s = 0.5

    async def scenario():
        pool = pool_of(a.base_url, api_key="sk-1")
        try:
            with pytest.raises(TransportError, match="Timeout"):
                await pool.post_json(a.base_url, f"{a.base_url}/v1/chat/completions", {}, timeout_s=0.1)
            return await pool.post_json(a.base_url, f"{a.base_url}/v1/chat/completions", {"n": 1})
        finally:
            await pool.aclose()

    out = asyncio.run(scenario())
    assert out["object"] == "chat.completion"
    assert all(headers["authorization"] == "Bearer sk-1" for _, _, headers in a.state.seen)


def test_health_probe(servers):
    a, _ = servers

    async def scenario():
        async with HealthProbe(timeout_s=1.0) as probe:
            return await probe.ok(a.base_url + "/"), await probe.ok(DEAD)

    assert asyncio.run(scenario()) == (True, False)
