"""Hostile admin requests against the real server: never a 5xx, never a dead engine, weights unchanged.

Hypothesis builds batches of admin requests (routes, methods, tokens, trace ids, bodies: random
bytes, random JSON, and ``weight_dir`` values mixing traversal, absolute system paths, control
characters, long names and prepared bad dirs inside the weights root) and sends each batch
concurrently to the session's vLLM server. Nothing in them names a loadable weight dir, so every
update must be refused with a 4xx; ``/reload_weights`` with the token may succeed (it reloads
the base weights being served). After every batch: ``/health`` is 200 and ``GET /weights`` says
base weights, policy 0, no error. At the end the greedy completion is the one from before.
The examples are derandomized, so a failure reproduces.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import httpx
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file
from tests.support.completions import greedy_ids

from prime_rl.paths import mark_stable
from prime_rl.transport.weights import write_file_manifest

pytestmark = pytest.mark.slow

BATCHES = 125
BATCH_SIZE = 8  # 1,000 requests


def prepare_bad_dirs(root: Path) -> list[str]:
    """Dirs inside the weights root that must all be refused, for every reason we know."""
    fuzz = root / "fuzz"
    fuzz.mkdir(parents=True, exist_ok=True)
    (fuzz / "no_stable").mkdir(exist_ok=True)
    save_file({"w": torch.zeros(2)}, str(fuzz / "no_stable" / "model.safetensors"))
    wrong = fuzz / "step_7"
    wrong.mkdir(exist_ok=True)
    save_file({"not.a.tensor.of.the.model": torch.zeros(3)}, str(wrong / "model.safetensors"))
    write_file_manifest(wrong)
    mark_stable(wrong)
    torn = fuzz / "step_8"
    torn.mkdir(exist_ok=True)
    save_file({"w": torch.zeros(64)}, str(torn / "model.safetensors"))
    write_file_manifest(torn)
    mark_stable(torn)
    with open(torn / "model.safetensors", "r+b") as f:
        f.truncate(100)
    leak = fuzz / "step_9"
    leak.mkdir(exist_ok=True)
    if not (leak / "model.safetensors").exists():
        os.symlink("/etc/passwd", leak / "model.safetensors")
    mark_stable(leak)
    (fuzz / "a_file").write_text("x")
    if not (fuzz / "outside").exists():
        os.symlink("/tmp", fuzz / "outside")
    dirs = [fuzz / "no_stable", wrong, torn, leak, fuzz / "a_file", fuzz / "outside"]
    return [str(d) for d in dirs] + [str(d.relative_to(root)) for d in dirs]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
hostile_paths = st.sampled_from(
    ["", ".", "..", "../..", "/", "/etc", "/etc/passwd", "/proc/self/environ", "~", "step_1/../..",
     "a\nb [weights][x] rpc.done op=update_weights", "\x00", "x" * 5000, "/" * 300, "%2e%2e/"]
)  # fmt: skip
ascii_text = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=80)


def requests_strategy(bad_dirs: list[str], token: str):
    weight_dirs = st.sampled_from(bad_dirs) | hostile_paths | st.text(max_size=60)
    update_bodies = st.one_of(
        st.builds(lambda d: {"weight_dir": d}, weight_dirs),
        st.builds(lambda d, extra: {"weight_dir": d, **extra}, weight_dirs, st.dictionaries(st.text(max_size=5), json_values, max_size=2)),
        json_values,
    )  # fmt: skip
    bodies = st.one_of(
        update_bodies.map(lambda b: json.dumps(b).encode()),
        st.binary(max_size=200),
        st.just(b"[" * 5000 + b"]" * 5000),
        st.just(b'{"weight_dir": "' + b"a" * 70000 + b'"}'),
    )
    # header values as a client can send them: printable ASCII, no leading or trailing space
    auth = st.sampled_from([None, f"Bearer {token}", "Bearer wrong", f"bearer {token}", "Basic abc", "Bearer"]) | ascii_text.map(
        lambda t: f"Bearer {t}".strip()
    )  # fmt: skip
    return st.fixed_dictionaries(
        {
            "method": st.sampled_from(["POST", "POST", "GET", "PUT", "DELETE"]),
            "path": st.sampled_from(["/update_weights", "/update_weights", "/reload_weights", "/weights"]),
            "auth": auth,
            "trace": st.none() | ascii_text.map(str.strip),
            "body": bodies,
        }
    )


async def send(client: httpx.AsyncClient, req: dict) -> httpx.Response:
    headers = {"content-type": "application/json"}
    if req["auth"] is not None:
        headers["authorization"] = req["auth"]
    if req["trace"] is not None:
        headers["x-trace-id"] = req["trace"]
    return await client.request(req["method"], req["path"], headers=headers, content=req["body"])


def test_a_thousand_hostile_admin_requests_change_nothing(inference_server):
    server = inference_server
    bad_dirs = prepare_bad_dirs(server.weights_root)
    before = greedy_ids(server, "Hello there", 8)
    sent: list[int] = []
    statuses: dict[int, int] = {}

    @settings(
        max_examples=BATCHES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        st.lists(requests_strategy(bad_dirs, server.admin_token), min_size=BATCH_SIZE, max_size=BATCH_SIZE)
    )
    def batch(reqs: list[dict]) -> None:
        async def go() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=server.base_url, timeout=60) as client:
                return await asyncio.gather(*(send(client, r) for r in reqs))

        answers = asyncio.run(go())
        sent.append(len(answers))
        for req, r in zip(reqs, answers, strict=True):
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            assert r.status_code < 500, (
                req["method"],
                req["path"],
                req["body"][:200],
                r.status_code,
                r.text[:300],
            )
            if req["path"] == "/update_weights":
                assert r.status_code != 200, ("an update was accepted", req["body"][:200], r.text)
            assert "root:" not in r.text  # /etc/passwd's content never comes back
        assert httpx.get(f"{server.base_url}/health", timeout=30).status_code == 200
        info = httpx.get(f"{server.base_url}/weights", headers=server.admin_headers(), timeout=30).json()
        assert (info["base"], info["policy_step"], info["error"]) == (True, 0, None), info

    batch()
    assert sum(sent) >= 1000, sum(sent)
    assert greedy_ids(server, "Hello there", 8) == before
    assert 401 in statuses and 400 in statuses and any(s in statuses for s in (403, 404, 409, 422)), statuses


def test_vllm_control_routes_need_the_admin_token(inference_server):
    """vLLM registers its elastic-EP scaling routes for every generating model, with no auth."""
    server = inference_server
    for path, body in (("/scale_elastic_ep", {"new_data_parallel_size": 2}), ("/is_scaling_elastic_ep", {})):
        r = httpx.post(f"{server.base_url}{path}", json=body, timeout=30)
        assert r.status_code == 401, (path, r.status_code, r.text)
        r = httpx.post(
            f"{server.base_url}{path}", json=body, headers={"Authorization": "Bearer wrong"}, timeout=30
        )
        assert r.status_code == 401, (path, r.status_code, r.text)
