"""The swapper and admin routes with a hand-written fake engine (no vLLM)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import torch
from fastapi import FastAPI
from fastapi.testclient import TestClient
from loguru import logger
from safetensors.torch import save_file

from prime_rl.inference.admin import (
    FirstByteMiddleware,
    ServedPolicy,
    SwapError,
    WeightSwapper,
    build_admin_router,
)
from prime_rl.tracing import parse_tagged
from prime_rl.transport.weights import POLICY_HEADER, policy_step_of, write_file_manifest


class FakeEngine:
    """Records calls; ``fail_loads`` makes that many prime_load_weights calls raise."""

    def __init__(self, fail_loads: int = 0, load_delay: float = 0.0):
        self.calls: list[tuple] = []
        self.fail_loads = fail_loads
        self.load_delay = load_delay
        self.paused = False
        self.loaded: list[str] | None = None

    async def pause_generation(self, *, mode="abort", clear_cache=True):
        assert not self.paused, "pause while paused: swaps overlap"
        self.paused = True
        self.calls.append(("pause", mode, clear_cache))

    async def resume_generation(self):
        self.paused = False
        self.calls.append(("resume",))

    async def collective_rpc(self, method, timeout=None, args=(), kwargs=None):
        assert method == "prime_load_weights"
        self.calls.append(("load", tuple(args[0])))
        await asyncio.sleep(self.load_delay)
        if self.fail_loads > 0:
            self.fail_loads -= 1
            raise RuntimeError("disk on fire")
        self.loaded = list(args[0])
        return [{"rank": 0, "load_ms": 1.5}]


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
    result = asyncio.run(swapper.update(str(setup[2]), "tid1"))
    assert result["status"] == "ok" and result["rpc_ms"] >= 0 and result["load_ms"] == 1.5
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


def test_failed_rollback_is_reported_and_generation_still_resumes(setup):
    engine = FakeEngine(fail_loads=2)
    swapper = swapper_for(engine, setup)
    with pytest.raises(SwapError) as e:
        asyncio.run(swapper.update(str(setup[2]), "tid3"))
    assert e.value.rolled_back is False and engine.paused is False


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
