"""The swapper and admin routes with a hand-written fake engine (no vLLM)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time

import httpx
import pytest
import torch
from fastapi import FastAPI
from fastapi.testclient import TestClient
from loguru import logger
from safetensors.torch import load_file, save_file
from tests.support.fake_engine import FakeEngine

from prime_rl.inference.admin import (
    FirstByteMiddleware,
    ServedPolicy,
    SwapError,
    WeightSwapper,
    build_admin_router,
    pause_engine,
)
from prime_rl.tracing import parse_tagged
from prime_rl.transport.weights import POLICY_HEADER, policy_step_of, write_file_manifest


class WatchedLock(asyncio.Lock):
    """An asyncio.Lock that says when a caller found it held and has to wait for it."""

    def __init__(self) -> None:
        super().__init__()
        self.contended = asyncio.Event()

    async def acquire(self) -> bool:
        if self.locked():
            self.contended.set()
        return await super().acquire()


def same_files(loaded: list, expected: list) -> bool:
    """Whether the engine loaded exactly ``expected`` (the server loads hard links it holds)."""
    return len(loaded) == len(expected) and all(
        os.path.samefile(a, b) for a, b in zip(loaded, expected, strict=True)
    )


@pytest.fixture
def setup(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    save_file({"w": torch.zeros(2, 2)}, str(base / "model.safetensors"))
    root = tmp_path / "weights"
    good = root / "step_1"
    good.mkdir(parents=True)
    save_file({"w": torch.ones(2, 2)}, str(good / "model.safetensors"))
    write_file_manifest(good)
    (good / "STABLE").touch()
    return base, root, good


def swapper_for(engine, setup, mode="keep"):
    base, root, _ = setup
    return WeightSwapper(
        engine=engine,
        base_files=[base / "model.safetensors"],
        weights_root=root,
        inflight_mode=mode,
        served=ServedPolicy(),
    )


def test_swap_pauses_loads_resumes_in_order(setup):
    engine = FakeEngine()
    swapper = swapper_for(engine, setup, mode="abort")
    wall_start = time.monotonic()  # the clock the swapper times with (prime_rl.tracing.now)
    result = asyncio.run(swapper.update(str(setup[2]), "tid1"))
    wall_ms = (time.monotonic() - wall_start) * 1000.0
    assert result["status"] == "ok" and result["rpc_ms"] >= 0 and result["load_ms"] == 1.5
    # the whole handling: lock wait + validation + rpc (the client takes it out of queue_ms), and
    # no more than the time the call took (the 0.001 covers rounding to 3 decimals)
    parts = result["lock_wait_ms"] + result["validate_ms"] + result["rpc_ms"]
    assert result["validate_ms"] > 0 and parts - 0.01 <= result["server_ms"] <= wall_ms + 0.001
    assert [c[0] for c in engine.calls] == ["pause", "load", "resume"]
    assert engine.calls[0] == ("pause", "abort", True)
    assert swapper.current_dir == setup[2].resolve() and swapper.updates == 1


def test_failed_load_resumes_generation_and_rolls_back(setup):
    engine = FakeEngine(fail_loads=1)
    swapper = swapper_for(engine, setup)
    with pytest.raises(SwapError) as e:
        asyncio.run(swapper.update(str(setup[2]), "tid2"))
    assert e.value.rolled_back is True
    assert [c[0] for c in engine.calls] == ["pause", "load", "load", "resume"]
    assert engine.loaded == [str(setup[0] / "model.safetensors")]  # back on the base weights
    assert engine.paused is False and swapper.current_dir is None and swapper.updates == 0


def test_failed_rollback_leaves_generation_paused_and_unknown_until_a_reload_succeeds(setup):
    """Old behaviour: generation resumed on the half-loaded model (the next forward pass killed
    the engine) and /health said 200. Now in-flight requests are aborted, generation stays
    paused, generation requests and /health answer 503 with the reason, until a reload works."""
    engine = FakeEngine(fail_loads=2)
    swapper = swapper_for(engine, setup)
    with pytest.raises(SwapError) as e:
        asyncio.run(swapper.update(str(setup[2]), "tid3"))
    assert e.value.rolled_back is False
    assert [c[0] for c in engine.calls] == ["pause", "load", "load", "pause"]
    assert engine.calls[-1] == ("pause", "abort", True) and engine.paused is True
    assert swapper.served.step is None and "rollback" in swapper.served.broken

    app = FastAPI()
    app.include_router(build_admin_router(swapper, None))
    app.add_middleware(FirstByteMiddleware, served=swapper.served)

    @app.post("/v1/completions")
    async def completions():
        raise AssertionError("a generation request reached the engine while its weights are unknown")

    with TestClient(app) as client:
        health = client.get("/health")
        assert health.status_code == 503 and "unknown" in health.json()["error"]
        gen = client.post("/v1/completions", json={})
        assert gen.status_code == 503 and "disk on fire" in gen.json()["error"]
        for other in ("/v1/responses", "/inference/v1/generate"):  # every way to the engine
            assert client.post(other, json={}).status_code == 503
        info = client.get("/weights").json()
        assert info["policy_step"] is None and "disk on fire" in info["error"]

        assert client.post("/reload_weights", json={}).status_code == 200
        assert engine.paused is False and engine.calls[-1] == ("resume",)
        assert client.get("/health").status_code == 200
        assert client.get("/weights").json() == {
            "weight_dir": None,
            "base": True,
            "updates": 1,
            "policy_step": 0,
            "error": None,
        }


def test_concurrent_swaps_are_serialised(setup):
    engine = FakeEngine(load_delay=0.05)
    swapper = swapper_for(engine, setup)

    async def both():
        return await asyncio.gather(swapper.update(str(setup[2]), "a"), swapper.reload("b"))

    asyncio.run(both())  # FakeEngine asserts that no pause happens while paused
    assert [c[0] for c in engine.calls] == ["pause", "load", "resume"] * 2


def test_invalid_dir_never_touches_the_engine(setup, tmp_path):
    engine = FakeEngine()
    swapper = swapper_for(engine, setup)
    from prime_rl.transport.weights import WeightDirError

    with pytest.raises(WeightDirError):
        asyncio.run(swapper.update(str(tmp_path), "tid"))
    assert engine.calls == []


def make_app(setup, token="tok"):
    engine = FakeEngine()
    app = FastAPI()
    swapper = swapper_for(engine, setup)
    app.include_router(build_admin_router(swapper, token))
    app.add_middleware(FirstByteMiddleware, served=swapper.served)
    return app, engine


@pytest.mark.parametrize(
    "headers,body,status,fragment",
    [
        ({}, {"weight_dir": "step_1"}, 401, "admin token"),
        ({"Authorization": "Bearer nope"}, {"weight_dir": "step_1"}, 401, "admin token"),
        ({"Authorization": "Basic tok"}, {"weight_dir": "step_1"}, 401, "admin token"),
        ({"Authorization": "Bearer tok"}, b"{nope", 400, "not valid JSON"),
        ({"Authorization": "Bearer tok"}, b"[1]", 400, "JSON object"),
        ({"Authorization": "Bearer tok"}, {"dir": "x"}, 400, "unknown fields"),
        ({"Authorization": "Bearer tok"}, {}, 400, "missing field"),
        ({"Authorization": "Bearer tok"}, {"weight_dir": 3}, 400, "must be a string"),
        ({"Authorization": "Bearer tok"}, {"weight_dir": "/etc"}, 403, "outside the weights root"),
    ],
)
def test_route_refusals(setup, headers, body, status, fragment):
    app, engine = make_app(setup)
    with TestClient(app) as client:
        kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
        r = client.post("/update_weights", headers=headers, **kwargs)
    assert r.status_code == status and fragment in r.json()["error"]
    assert engine.calls == []


def test_routes_succeed_and_middleware_logs_first_byte(setup):
    app, engine = make_app(setup)
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), format="{message}")
    try:
        with TestClient(app) as client:
            auth = {"Authorization": "Bearer tok"}
            r = client.post(
                "/update_weights", headers={**auth, "x-trace-id": "mytrace"}, json={"weight_dir": "step_1"}
            )
            assert r.status_code == 200 and r.json()["trace_id"] == "mytrace"
            assert client.get("/weights", headers=auth).json()["base"] is False
            r = client.post("/reload_weights", headers={**auth, "x-trace-id": "bad trace id!"})
            assert r.status_code == 200 and r.json()["weight_dir"] is None
            assert client.post("/reload_weights", headers=auth, json={"x": 1}).status_code == 400
    finally:
        logger.remove(sink)
    parsed = [p for p in map(parse_tagged, lines) if p]
    assert [(p.trace_id, p.event) for p in parsed if p.trace_id == "mytrace"] == [
        ("mytrace", "server.recv"),
        ("mytrace", "rpc.start"),
        ("mytrace", "rpc.done"),
    ]
    reload_tid = next(
        p.trace_id for p in parsed if p.event == "rpc.start" and p.fields["op"] == "reload_weights"
    )
    assert (
        reload_tid != "bad trace id!" and len(reload_tid) == 12
    )  # a malformed header is replaced, never logged


def test_no_token_configured_allows_loopback_use(setup):
    app, _ = make_app(setup, token=None)
    with TestClient(app) as client:
        assert client.post("/update_weights", json={"weight_dir": "step_1"}).status_code == 200


class StepRecordingEngine(FakeEngine):
    """Notes which policy step the swapper says it serves at each engine call."""

    def __init__(self, served: ServedPolicy, **kw):
        super().__init__(**kw)
        self.served = served
        self.steps_at: list[tuple[str, int | None]] = []

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        self.steps_at.append(("load", self.served.step))
        return await super().collective_rpc(method, timeout, args, kwargs)

    async def resume_generation(self):
        self.steps_at.append(("resume", self.served.step))
        await super().resume_generation()


def test_served_step_changes_after_the_load_and_before_generation_resumes(setup):
    served = ServedPolicy()
    engine = StepRecordingEngine(served)
    swapper = swapper_for(engine, setup)
    swapper.served = served
    result = asyncio.run(swapper.update(str(setup[2]), "t"))
    assert result["policy_step"] == 1
    assert engine.steps_at == [("load", 0), ("resume", 1)]
    asyncio.run(swapper.reload("t2"))
    assert served.step == 0


def test_a_failed_swap_keeps_the_step_and_a_failed_rollback_makes_it_unknown(setup):
    swapper = swapper_for(FakeEngine(fail_loads=1), setup)
    with pytest.raises(SwapError):
        asyncio.run(swapper.update(str(setup[2]), "t"))
    assert swapper.served.step == 0  # rolled back to the base weights
    swapper = swapper_for(FakeEngine(fail_loads=2), setup)
    with pytest.raises(SwapError):
        asyncio.run(swapper.update(str(setup[2]), "t"))
    assert swapper.served.step is None


@pytest.mark.parametrize(
    "name,step", [("step_12", 12), ("step_0", 0), ("checkpoint", None), ("step_3_backup", None)]
)
def test_policy_step_of_a_weight_dir_comes_from_its_name(tmp_path, name, step):
    assert policy_step_of(tmp_path / name) == step


def test_generation_answers_carry_the_step_served_when_the_request_arrived(setup):
    app, _ = make_app(setup)
    gate: dict[str, asyncio.Event] = {}  # set by the test that holds a request; empty: answer at once

    @app.post("/v1/chat/completions")
    async def chat():
        if gate:
            gate["arrived"].set()
            await gate["release"].wait()
        return {"choices": []}

    @app.get("/v1/models")
    async def models():
        return {"data": []}

    auth = {"Authorization": "Bearer tok"}
    with TestClient(app) as client:
        r = client.post("/v1/chat/completions", json={})
        assert r.headers[POLICY_HEADER] == "0"  # base weights
        assert POLICY_HEADER not in client.get("/v1/models").headers
        assert POLICY_HEADER not in client.get("/weights", headers=auth).headers

        # A request that arrives under step 0 and is answered after the swap to step 1 reports 0.
        async def across_a_swap():
            arrived, release = gate["arrived"], gate["release"] = asyncio.Event(), asyncio.Event()

            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                slow = asyncio.create_task(c.post("/v1/chat/completions", json={}))
                await arrived.wait()
                swap = await c.post("/update_weights", headers=auth, json={"weight_dir": "step_1"})
                assert swap.status_code == 200
                release.set()
                before = await slow
                gate.clear()
                after = await c.post("/v1/chat/completions", json={})
                info = (await c.get("/weights", headers=auth)).json()
            return before, after, info

        before, after, info = asyncio.run(across_a_swap())
    assert before.headers[POLICY_HEADER] == "0"
    assert after.headers[POLICY_HEADER] == "1"
    assert info["policy_step"] == 1


def test_a_truncated_shard_is_refused_before_the_engine_is_touched(setup):
    engine = FakeEngine()
    swapper = swapper_for(engine, setup)
    shard = setup[2] / "model.safetensors"
    shard.write_bytes(shard.read_bytes()[:-8])
    from prime_rl.transport.weights import WeightDirError

    with pytest.raises(WeightDirError) as e:
        asyncio.run(swapper.update(str(setup[2]), "t"))
    assert e.value.status == 422 and "model.safetensors: size mismatch" in e.value.reason
    assert engine.calls == [] and swapper.served.step == 0


# --------------------------------------------------------------------------- request limits


@pytest.mark.parametrize(
    "body,status,fragment",
    [
        (b"[" * 20_000 + b"]" * 20_000, 400, "nested"),
        (b'{"weight_dir": ' + b"[" * 5000 + b"]" * 5000 + b"}", 400, "nested"),
        (b'{"weight_dir": "step_1"' + b" " * (70 * 1024) + b"}", 413, "64 KiB"),
        (json.dumps({"weight_dir": "a" * 10_000}).encode(), 400, "4096"),
        (b'{"weight_dir": ' + b"1" * 5000 + b"}", 400, "not valid JSON"),
        (b"\xff\xfe", 400, "not valid JSON"),
    ],
)
def test_oversized_or_deeply_nested_bodies_get_a_4xx(setup, body, status, fragment):
    app, engine = make_app(setup)
    with TestClient(app) as client:
        r = client.post("/update_weights", headers={"Authorization": "Bearer tok"}, content=body)
        assert r.status_code == status and fragment in r.json()["error"]
        r = client.post("/reload_weights", headers={"Authorization": "Bearer tok"}, content=body)
        assert 400 <= r.status_code < 500
    assert engine.calls == []


def test_a_long_url_path_is_a_404(setup):
    app, _ = make_app(setup)
    with TestClient(app) as client:
        assert client.get("/" + "a" * 10_000).status_code == 404
        assert client.post("/update_weights/" + "a" * 10_000).status_code == 404


# --------------------------------------------------------------------------- vLLM's dev routes


def make_dev_app(token="tok", protected=("/collective_rpc", "/sleep")):
    from prime_rl.inference.admin import RouteGuard

    guard = RouteGuard()
    guard.protect(protected, token)
    app = FastAPI(root_path="")

    @app.post("/collective_rpc")
    async def collective_rpc():
        return {"ran": True}

    @app.get("/v1/models")
    async def models():
        return {"data": []}

    app.add_middleware(FirstByteMiddleware, served=ServedPolicy(), guard=guard)
    return app


def test_dev_routes_need_the_admin_token_at_the_middleware():
    with TestClient(make_dev_app()) as client:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "tok"}):
            r = client.post("/collective_rpc", headers=headers)
            assert r.status_code == 401 and "admin token" in r.json()["error"]
        assert client.post("/sleep").status_code == 401  # protected even where no route answers
        r = client.post("/collective_rpc", headers={"Authorization": "Bearer tok"})
        assert r.status_code == 200 and r.json() == {"ran": True}
        assert client.get("/v1/models").status_code == 200  # the rest stays open


def test_dev_routes_are_closed_when_no_token_is_set():
    with TestClient(make_dev_app(token=None)) as client:
        assert client.post("/collective_rpc", headers={"Authorization": "Bearer "}).status_code == 403


def test_dev_routes_are_matched_below_the_root_path():
    from prime_rl.inference.admin import RouteGuard

    guard = RouteGuard()
    guard.protect(["/collective_rpc"], "tok")

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ran"})

    mw = FirstByteMiddleware(app, served=ServedPolicy(), guard=guard)
    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "path": "/api/collective_rpc", "root_path": "/api", "headers": []}
    asyncio.run(mw(scope, None, send))
    assert sent[0]["status"] == 401


def test_our_admin_routes_win_over_vllm_routes_of_the_same_path(setup):
    from prime_rl.inference.admin import include_first

    engine = FakeEngine()
    app = FastAPI()

    @app.post("/update_weights")  # vLLM's own /update_weights (VLLM_SERVER_DEV_MODE)
    async def vllm_update_weights():
        return {"vllm": True}

    include_first(app, build_admin_router(swapper_for(engine, setup), "tok"))
    with TestClient(app) as client:
        assert client.post("/update_weights", json={"weight_dir": "step_1"}).status_code == 401
        r = client.post(
            "/update_weights", headers={"Authorization": "Bearer tok"}, json={"weight_dir": "step_1"}
        )
        assert r.status_code == 200 and r.json()["policy_step"] == 1


# --------------------------------------------------------------------------- validation under the lock


def make_step(root, n, value):
    d = root / f"step_{n}"
    d.mkdir(parents=True)
    save_file({"w": torch.full((2, 2), float(value))}, str(d / "model.safetensors"))
    write_file_manifest(d)
    (d / "STABLE").touch()
    return d


def test_a_dir_is_validated_under_the_lock_and_what_is_loaded_is_what_was_validated(setup):
    """B is requested while A loads; B's dir is broken before B gets the lock: B must be refused."""
    root = setup[1]
    step_2 = make_step(root, 2, 2.0)
    engine = FakeEngine()
    swapper = swapper_for(engine, setup)
    swapper._lock = lock = WatchedLock()
    events: list[tuple] = []
    validate = swapper.validate

    def recording_validate(weight_dir):
        events.append(("validate", weight_dir, engine.paused))
        real, files = validate(weight_dir)
        events.append(("validated", [str(f) for f in files]))
        return real, files

    swapper.validate = recording_validate

    async def scenario():
        engine.release = asyncio.Event()  # A's load lasts until the dir has changed
        a = asyncio.create_task(swapper.update("step_1", "a"))
        while not engine.paused:  # A holds the lock and is loading
            await asyncio.sleep(0.005)
        b = asyncio.create_task(swapper.update("step_2", "b"))
        await lock.contended.wait()  # B is waiting for the lock
        shard = step_2 / "model.safetensors"
        shard.write_bytes(shard.read_bytes()[:-8])  # the trainer rewrites it, say
        engine.release.set()
        return await asyncio.gather(a, b, return_exceptions=True)

    from prime_rl.transport.weights import WeightDirError

    result_a, result_b = asyncio.run(scenario())
    assert result_a["policy_step"] == 1
    assert isinstance(result_b, WeightDirError) and result_b.status == 422
    assert [c[0] for c in engine.calls] == ["pause", "load", "resume"]  # B never paused the engine
    assert ("validate", "step_2", False) in events  # validated once A was done, not while it loaded
    loaded = [list(c[1]) for c in engine.calls if c[0] == "load"]
    validated = [e[1] for e in events if e[0] == "validated"]
    assert len(loaded) == len(validated) == 1 and same_files(loaded[0], validated[0])
    assert swapper.served.step == 1 and swapper.current_dir == (root / "step_1").resolve()


def test_a_later_valid_dir_content_is_what_gets_loaded(setup):
    """B's dir gains a shard while B waits: the files loaded are the ones validated under the lock."""
    root = setup[1]
    step_2 = make_step(root, 2, 2.0)
    engine = FakeEngine()
    swapper = swapper_for(engine, setup)
    swapper._lock = lock = WatchedLock()

    async def scenario():
        engine.release = asyncio.Event()  # A's load lasts until the dir has changed
        a = asyncio.create_task(swapper.update("step_1", "a"))
        while not engine.paused:
            await asyncio.sleep(0.005)
        b = asyncio.create_task(swapper.update("step_2", "b"))
        await lock.contended.wait()  # B is waiting for the lock
        # re-published in place as an index + shard: the validated list has the new name
        (step_2 / "model.safetensors").rename(step_2 / "model-00001-of-00001.safetensors")
        (step_2 / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {"w": "model-00001-of-00001.safetensors"}})
        )
        write_file_manifest(step_2)
        engine.release.set()
        return await asyncio.gather(a, b)

    _, result_b = asyncio.run(scenario())
    assert result_b["policy_step"] == 2
    assert same_files(engine.loaded, [step_2 / "model-00001-of-00001.safetensors"])


def test_rollback_after_the_served_dir_was_pruned_loads_the_held_links(setup):
    """Old code: the rollback read the pruned dir and failed, leaving the engine half-loaded."""
    base, root, good = setup
    engine = FakeEngine()
    swapper = swapper_for(engine, setup)
    asyncio.run(swapper.update(str(good), "t1"))
    step_2 = root / "step_2"
    step_2.mkdir()
    save_file({"w": torch.full((2, 2), 2.0)}, str(step_2 / "model.safetensors"))
    write_file_manifest(step_2)
    (step_2 / "STABLE").touch()
    shutil.rmtree(good)  # pruned while served

    engine.fail_loads = 1
    with pytest.raises(SwapError) as e:
        asyncio.run(swapper.update(str(step_2), "t2"))
    assert e.value.rolled_back is True and engine.paused is False
    (rolled_back_to,) = engine.loaded
    assert load_file(rolled_back_to)["w"][0, 0] == 1.0  # step 1's bytes, from the held link
    assert swapper.served.step == 1 and swapper.current_dir == good.resolve()
    assert [p.name for p in swapper.held.home.iterdir()] == [swapper.held.serving.name]


class VllmLikeEngine(FakeEngine):
    """vLLM's AsyncLLM shape: its pause_generation ends with a fixed sleep; the parts it calls
    first (the renderer's cache clear, the engine core's scheduler pause) are reachable."""

    def __init__(self) -> None:
        super().__init__()
        outer = self

        class Renderer:
            async def clear_mm_cache_async(self):
                outer.calls.append(("clear_mm_cache",))

        class Core:
            async def pause_scheduler_async(self, *, mode, clear_cache):
                outer.paused = True
                outer.calls.append(("pause_scheduler", mode, clear_cache))

        self.renderer, self.engine_core = Renderer(), Core()

    async def pause_generation(self, *, mode="abort", clear_cache=True):
        raise AssertionError("the swap must not pay for pause_generation's fixed sleep")


def test_a_swap_pauses_the_scheduler_directly_and_clears_the_caches():
    engine = VllmLikeEngine()
    asyncio.run(pause_engine(engine, "keep"))
    assert engine.calls == [("clear_mm_cache",), ("pause_scheduler", "keep", True)] and engine.paused


def test_an_engine_client_without_those_parts_is_paused_through_pause_generation():
    engine = FakeEngine()
    asyncio.run(pause_engine(engine, "wait"))
    assert engine.calls == [("pause", "wait", True)] and engine.paused
