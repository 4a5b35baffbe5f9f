"""The admin client over real HTTP (aiohttp), against the local scripted test server."""

from __future__ import annotations

import asyncio
import time

import pytest
from tests.support.http_server import LocalTestServer, Reply

from prime_rl.clients.admin import AdminClient, WeightUpdateError
from prime_rl.clients.config import ClientConfig
from prime_rl.clients.pool import InferencePool


@pytest.fixture
def servers():
    with LocalTestServer() as a, LocalTestServer() as b:
        yield a, b


def config(*servers, **admin) -> ClientConfig:
    return ClientConfig(base_urls=[s.base_url for s in servers], admin={"backoff_s": 0.01, **admin})


async def with_admin(cfg, fn, pool=None, token=None):
    admin = AdminClient(cfg, pool=pool, token=token)
    try:
        return await fn(admin)
    finally:
        await admin.aclose()


def test_update_reaches_every_server_with_trace_and_token(servers):
    cfg = config(*servers)
    results = asyncio.run(
        with_admin(cfg, lambda a: a.update_weights("/w/step_1", trace_id="tr1"), token="sekrit")
    )
    assert sorted(r.url for r in results) == sorted(s.base_url for s in servers)
    for server in servers:
        ((path, _, headers),) = server.state.seen
        assert (
            path == "/update_weights"
            and headers["x-trace-id"] == "tr1"
            and headers["authorization"] == "Bearer sekrit"
        )
    for r in results:
        assert r.rpc_ms == 5.0 and r.queue_ms == pytest.approx(r.wall_ms - r.rpc_ms)


def test_5xx_and_connection_errors_are_retried_then_succeed(servers):
    a, b = servers
    a.state.script("/update_weights", Reply(status=503), Reply(status=500))
    results = asyncio.run(with_admin(config(a, b), lambda adm: adm.update_weights("d")))
    by_url = {r.url: r for r in results}
    assert by_url[a.base_url].attempts == 3 and by_url[b.base_url].attempts == 1


def test_4xx_is_not_retried_and_names_server_and_reason(servers):
    a, b = servers
    a.state.script(
        "/update_weights", Reply(status=409, body={"status": "error", "error": "no STABLE marker"})
    )
    with pytest.raises(WeightUpdateError) as e:
        asyncio.run(with_admin(config(a, b), lambda adm: adm.update_weights("d")))
    assert len(e.value.errors) == 1 and e.value.errors[0].status == 409
    assert a.base_url in str(e.value) and "no STABLE marker" in str(e.value)
    assert len(a.state.seen) == 1  # not retried
    assert len(b.state.seen) == 1  # the healthy server was still updated


def test_retries_are_bounded(servers):
    a, _ = servers
    a.state.script("/reload_weights", *[Reply(status=500)] * 10)
    with pytest.raises(WeightUpdateError, match="HTTP 500"):
        asyncio.run(with_admin(config(a, max_retries=2), lambda adm: adm.reload_weights()))
    assert len(a.state.seen) == 3


def test_unreachable_server_fails_after_retries():
    cfg = ClientConfig(
        base_urls=["http://127.0.0.1:9"], admin={"backoff_s": 0.0, "max_retries": 1, "connect_timeout_s": 1}
    )
    with pytest.raises(WeightUpdateError, match="ConnectError"):
        asyncio.run(with_admin(cfg, lambda adm: adm.update_weights("d")))


def test_read_timeout_is_an_error_not_a_hang(servers):
    a, _ = servers
    a.state.script("/update_weights", Reply(delay_s=2.0), Reply(delay_s=2.0))
    with pytest.raises(WeightUpdateError, match="Timeout"):
        asyncio.run(with_admin(config(a, timeout_s=0.3, max_retries=1), lambda adm: adm.update_weights("d")))


@pytest.mark.parametrize("mode", ["shared", "dedicated"])
def test_shared_pool_queues_admin_behind_streams_and_dedicated_does_not(servers, mode):
    """The bug the admin client exists for: a full streaming pool delays the update.

    Causal, not timed: with the pool full of streams, the shared-mode update reaches the server
    only after a stream has ended; the dedicated one arrives while all of them still run.
    """
    a, _ = servers
    a.state.stream_chunks, a.state.stream_interval_s = 10, 0.2  # each stream holds its connection ~2 s
    cfg = ClientConfig(base_urls=[a.base_url], max_connections=4, admin={"mode": mode})

    async def scenario():
        pool = InferencePool(cfg)

        async def stream():
            body = {"model": "m", "prompt": "p", "stream": True}
            async with pool.session.post(f"{a.base_url}/v1/completions", json=body) as r:
                async for _ in r.content:
                    pass

        tasks = [asyncio.create_task(stream()) for _ in range(4)]
        while a.state.active_streams < 4:
            await asyncio.sleep(0.01)
        try:
            (result,) = await with_admin(cfg, lambda adm: adm.update_weights("d"), pool=pool)
        finally:
            await asyncio.gather(*tasks)
            await pool.aclose()
        return result

    result = asyncio.run(scenario())
    admin_index = next(i for i, seen in enumerate(a.state.seen) if seen[0] == "/update_weights")
    active = a.state.active_at_arrival[admin_index]
    if mode == "shared":
        assert active < 4, "the shared-pool update should have waited for a stream to end"
        assert result.queue_ms > result.rpc_ms
    else:
        assert active == 4, "the dedicated update should not wait for any stream"


def test_shared_mode_needs_the_pool():
    with pytest.raises(ValueError, match="shared"):
        AdminClient(ClientConfig(admin={"mode": "shared"}))


def test_admin_token_from_env(monkeypatch, servers):
    monkeypatch.setenv("PRIME_ADMIN_TOKEN", "from-env")
    a, _ = servers
    asyncio.run(with_admin(config(a), lambda adm: adm.reload_weights()))
    assert a.state.seen[0][2]["authorization"] == "Bearer from-env"


def test_dedicated_admin_has_a_small_connector_of_its_own(servers):
    """At most two admin connections per server; shared mode uses the pool's session."""
    cfg = config(*servers)

    async def scenario():
        pool = InferencePool(cfg)
        dedicated = AdminClient(cfg, pool=pool)
        shared = AdminClient(config(*servers, mode="shared"), pool=pool)
        try:
            connector = dedicated.session.connector
            assert connector.limit_per_host == 2 and connector.limit == 2 * len(servers)
            assert dedicated.session is not pool.session and shared.session is pool.session
            await shared.aclose()
            assert not pool.session.closed  # closing a shared admin client leaves the pool's session
        finally:
            await dedicated.aclose()
            await pool.aclose()

    asyncio.run(scenario())


def test_start_opens_a_connection_early_and_the_update_goes_out_on_it(servers):
    """Without it the first update of a run connects while the server accepts every stream's
    connection, and waits (the first update was the slow one at 1,024 and 4,096 streams)."""
    a, b = servers

    def pinged(server) -> int:
        return sum(path == "/health" for path, _ in server.state.peers)

    async def scenario(admin: AdminClient):
        await admin.start()
        deadline = time.monotonic() + 30  # several keep-alive rounds (polled: slower when loaded)
        while min(pinged(a), pinged(b)) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await admin.update_weights("/w/step_1")

    asyncio.run(with_admin(config(a, b, keepalive_s=0.1), scenario))
    for server in servers:
        pings = [port for path, port in server.state.peers if path == "/health"]
        ((update_port,),) = [[port for path, port in server.state.peers if path == "/update_weights"]]
        assert len(pings) >= 3 and set(pings) == {update_port}  # one connection, kept open, reused


def test_an_update_sent_while_a_keepalive_request_is_in_flight_waits_for_its_connection(servers):
    """The race CI hit: sent beside a keep-alive request, the update opened a second connection
    (the connect start() is there to spare it). Nor may a keep-alive request go out beside the update."""
    a, b = servers
    for server in servers:
        server.state.health_delay_s = 0.3  # every keep-alive request is in flight a while
        server.state.rpc_ms = 400.0  # and the update too: keep-alive rounds fall inside it

    def pinged(server) -> int:
        return sum(path == "/health" for path, _ in server.state.peers)

    async def scenario(admin: AdminClient):
        await admin.start()  # the first round, answered
        deadline = time.monotonic() + 30
        while min(pinged(a), pinged(b)) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.005)  # the second round has arrived: in flight for 0.3 s
        assert min(pinged(a), pinged(b)) == 2
        return await admin.update_weights("/w/step_1")

    asyncio.run(with_admin(config(a, b, keepalive_s=0.05), scenario))
    for server in servers:
        ports = {port for _, port in server.state.peers}
        assert len(ports) == 1, server.state.peers  # one connection: pings and the update on it


def test_a_server_listed_twice_is_kept_alive_once(servers):
    """Two URLs for one server: one keep-alive request at a time to it (the second was sent beside
    the first, and its bookkeeping raised KeyError in start())."""
    a, _ = servers
    a.state.health_delay_s = 0.05
    cfg = ClientConfig(base_urls=[a.base_url, a.base_url + "/"], admin={"keepalive_s": 0.02})

    async def scenario(admin: AdminClient):
        await admin.start()
        await asyncio.sleep(0.3)  # keep-alive rounds
        return await admin.update_weights("/w/step_1")

    results = asyncio.run(with_admin(cfg, scenario))
    pinged = [port for path, port in a.state.peers if path == "/health"]
    assert len(results) == 2 and len(pinged) >= 3 and len(set(pinged)) == 1  # never two at once


def test_start_is_harmless_when_a_server_is_down_and_off_when_keepalive_is_zero(servers):
    from prime_rl.dev.server import free_port

    a, _ = servers
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = ClientConfig(base_urls=[a.base_url, dead], admin={"keepalive_s": 0.05})

    async def down(admin: AdminClient):
        await admin.start()  # the dead server is not an error here
        deadline = time.monotonic() + 30  # two keep-alive rounds (polled: slower when loaded)
        while sum(path == "/health" for path, _ in a.state.peers) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    asyncio.run(with_admin(cfg, down))
    assert sum(path == "/health" for path, _ in a.state.peers) >= 2
    a.state.peers.clear()
    asyncio.run(with_admin(config(a, keepalive_s=0), lambda adm: adm.start()))
    assert a.state.peers == []


def test_queue_ms_leaves_out_the_servers_whole_handling_where_it_reports_it(servers):
    """Old code: queue_ms = wall_ms - rpc_ms counted the server's validation (checksums of every
    byte, before the rpc) as queueing: 40 ms of 'queue' at 4,096 streams that was server work."""
    a, b = servers
    # a server that validated for 995 ms: counted as queueing, it would be 995 ms or more
    a.state.rpc_ms, a.state.server_ms = 5.0, 1000.0
    results = {r.url: r for r in asyncio.run(with_admin(config(a, b), lambda adm: adm.update_weights("d")))}
    ra, rb = results[a.base_url], results[b.base_url]
    assert ra.queue_ms == pytest.approx(ra.wall_ms - 1000.0) and ra.queue_ms < 500
    assert rb.queue_ms == pytest.approx(rb.wall_ms - rb.rpc_ms)  # a server that does not say: rpc_ms
