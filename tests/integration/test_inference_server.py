"""The real vLLM server (CPU) on the tiny model: OpenAI API, weight swaps, admin security."""

from __future__ import annotations

import asyncio
import json
import os
import shutil

import httpx
import pytest
import torch
from tests.support import completions
from tests.support.reference import hf_greedy, hf_model

from prime_rl.clients.admin import AdminClient, WeightUpdateError
from prime_rl.clients.config import ClientConfig
from prime_rl.clients.pool import InferencePool
from prime_rl.dev.weights import perturbed_state_dict, write_perturbed_weights, write_weight_dir
from prime_rl.tracing import parse_tagged

pytestmark = pytest.mark.slow

PROMPT = "What is 12 + 7? The answer is"


@pytest.fixture
def server(base_server):
    return base_server


def complete(server, prompt: str = PROMPT, n: int = 12) -> dict:
    return completions.complete(server, prompt, n)


def greedy_ids(server, prompt: str = PROMPT, n: int = 12) -> list[int]:
    return completions.greedy_ids(server, prompt, n)


def update(server, weight_dir, token: str | None = "default", body=None) -> httpx.Response:
    headers = (
        server.admin_headers()
        if token == "default"
        else ({"Authorization": f"Bearer {token}"} if token else {})
    )
    kwargs = (
        {"content": body}
        if isinstance(body, bytes)
        else {"json": body if body is not None else {"weight_dir": str(weight_dir)}}
    )
    return httpx.post(f"{server.base_url}/update_weights", headers=headers, timeout=120, **kwargs)


def test_openai_client_chat_and_completion_with_logprobs_and_token_ids(server):
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.base_url}/v1", api_key="EMPTY")
    chat = client.chat.completions.create(
        model=server.model,
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=8,
        temperature=0.0,
        logprobs=True,
        top_logprobs=2,
        extra_body={"return_token_ids": True, "ignore_eos": True},
    )
    choice = chat.choices[0]
    assert len(choice.logprobs.content) == 8
    assert all(lp.logprob <= 0.0 for lp in choice.logprobs.content)
    token_ids = choice.model_extra["token_ids"]
    assert len(token_ids) == 8 and all(isinstance(t, int) for t in token_ids)
    assert chat.usage.completion_tokens == 8

    comp = client.completions.create(
        model=server.model,
        prompt=PROMPT,
        max_tokens=6,
        temperature=0.0,
        logprobs=1,
        extra_body={"return_token_ids": True, "ignore_eos": True},
    )
    assert len(comp.choices[0].logprobs.token_logprobs) == 6
    assert len(comp.choices[0].model_extra["token_ids"]) == 6


def test_streaming_chat_gives_the_same_text_as_non_streaming(server):
    from openai import OpenAI

    client = OpenAI(base_url=f"{server.base_url}/v1", api_key="EMPTY")
    kwargs = dict(
        model=server.model, messages=[{"role": "user", "content": "count"}], max_tokens=10, temperature=0.0
    )
    whole = (
        client.chat.completions.create(**kwargs, extra_body={"ignore_eos": True}).choices[0].message.content
    )
    pieces, finish = [], None
    for chunk in client.chat.completions.create(**kwargs, stream=True, extra_body={"ignore_eos": True}):
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
    assert "".join(pieces) == whole
    assert finish == "length"


def test_tokenizers_transformers_and_vllm_give_identical_ids(server, tiny_model):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    raw = Tokenizer.from_file(str(tiny_model / "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(tiny_model)
    texts = [
        PROMPT,
        "hello  world's  don't\n\n  x",
        "Ünïcödé café 日本語 🙂",
        "a\tb\r\nc   ",
        "<|im_start|>user\nhi<|im_end|>",
        "12345678 + 9 = 12345687",
        "",
    ]
    for text in texts:
        expected = raw.encode(text).ids
        assert hf(text, add_special_tokens=False)["input_ids"] == expected, text
        r = httpx.post(
            f"{server.base_url}/tokenize",
            json={"model": server.model, "prompt": text, "add_special_tokens": False},
        )
        assert r.status_code == 200, r.text
        assert r.json()["tokens"] == expected, text


def test_server_logprobs_match_transformers(server, tiny_model):
    result = complete(server)
    prompt_ids = result["choices"][0]["prompt_token_ids"]
    got_ids = result["choices"][0]["token_ids"]
    got_lps = result["choices"][0]["logprobs"]["token_logprobs"]
    ref_ids, ref_lps = hf_greedy(hf_model(tiny_model), prompt_ids, len(got_ids))
    assert got_ids == ref_ids
    # fp32 on both sides: observed max difference 3.3e-6
    assert max(abs(a - b) for a, b in zip(got_lps, ref_lps, strict=True)) < 5e-5


def test_update_weights_then_reload_restores_base(server, tiny_model):
    base_ids = greedy_ids(server)
    weight_dir = write_perturbed_weights(tiny_model, server.weights_root / "step_1", scale=0.05, seed=1)
    r = update(server, weight_dir)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "ok" and body["rpc_ms"] > 0
    assert body["reload"] == "direct"  # weight_reload = auto on an unquantised model

    new_result = complete(server)
    new_ids = new_result["choices"][0]["token_ids"]
    ref_ids, ref_lps = hf_greedy(
        hf_model(weight_dir), new_result["choices"][0]["prompt_token_ids"], len(new_ids)
    )
    assert new_ids == ref_ids, "served greedy output differs from transformers on the new weights"
    # every layer serves the new weights (none kept a stale packed copy): logprobs as at start-up
    got_lps = new_result["choices"][0]["logprobs"]["token_logprobs"]
    assert max(abs(a - b) for a, b in zip(got_lps, ref_lps, strict=True)) < 5e-5
    assert new_ids != base_ids, "the perturbation did not change the answer"
    info = httpx.get(f"{server.base_url}/weights", headers=server.admin_headers()).json()
    assert info["weight_dir"] == str(weight_dir.resolve()) and info["base"] is False

    r = httpx.post(f"{server.base_url}/reload_weights", json={}, headers=server.admin_headers(), timeout=120)
    assert r.status_code == 200, r.text
    assert greedy_ids(server) == base_ids


def test_update_while_64_streams_are_in_flight(server, tiny_model):
    weight_dir = write_perturbed_weights(tiny_model, server.weights_root / "step_2", scale=0.05, seed=2)

    async def stream_one(client: httpx.AsyncClient, i: int) -> tuple[str | None, int]:  # (finish, tokens)
        body = {
            "model": server.model,
            "prompt": f"{i} {PROMPT}",
            "max_tokens": 48,
            "temperature": 1.0,
            "stream": True,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        }
        finish, tokens = None, 0
        async with client.stream("POST", f"{server.base_url}/v1/completions", json=body) as r:
            assert r.status_code == 200
            async for line in r.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    data = json.loads(line[6:])
                    if data.get("usage"):
                        tokens = data["usage"]["completion_tokens"]
                    if data["choices"]:
                        finish = data["choices"][0].get("finish_reason") or finish
        return finish, tokens

    async def scenario():
        limits = httpx.Limits(max_connections=100)
        async with httpx.AsyncClient(limits=limits, timeout=300) as client:
            streams = [asyncio.create_task(stream_one(client, i)) for i in range(64)]
            await asyncio.sleep(1.0)  # let the streams start generating
            admin = AdminClient(ClientConfig(base_urls=[server.base_url]), token=server.admin_token)
            try:
                results = await admin.update_weights(str(weight_dir), trace_id="inflight64")
            finally:
                await admin.aclose()
            return results, await asyncio.gather(*streams)

    results, outcomes = asyncio.run(scenario())
    assert results[0].body["status"] == "ok"
    assert all(finish == "length" for finish, _ in outcomes), outcomes
    assert all(tokens == 48 for _, tokens in outcomes), outcomes


BAD_CASES = [
    "no_stable",
    "outside_root",
    "symlink_escape",
    "wrong_shape",
    "wrong_dtype",
    "missing_tensor",
    "pickle_only",
    "no_auth",
    "wrong_token",
    "malformed_json",
    "not_an_object",
    "missing_field",
]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_update_requests_are_refused_and_output_unchanged(server, tiny_model, tmp_path, case):
    before = greedy_ids(server, n=8)
    root = server.weights_root
    target = root / f"bad_{case}"
    if target.exists() or target.is_symlink():
        shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()
    body, token = None, "default"
    if case == "no_stable":
        write_perturbed_weights(tiny_model, target)
        (target / "STABLE").unlink()
    elif case == "outside_root":
        target = write_perturbed_weights(tiny_model, tmp_path / "elsewhere")
    elif case == "symlink_escape":
        os.symlink(write_perturbed_weights(tiny_model, tmp_path / "elsewhere"), target)
    elif case in ("wrong_shape", "wrong_dtype", "missing_tensor"):
        sd = perturbed_state_dict(tiny_model, 0.05, 3)
        name = "model.embed_tokens.weight"
        if case == "wrong_shape":
            sd[name] = sd[name][:-1]
        elif case == "wrong_dtype":
            sd[name] = sd[name].to(torch.float16)
        else:
            del sd[name]
        write_weight_dir(sd, tiny_model, target)
    elif case == "pickle_only":
        target.mkdir(parents=True)
        (target / "pytorch_model.bin").write_bytes(b"not really a pickle")
        (target / "STABLE").touch()
    elif case in ("no_auth", "wrong_token"):
        write_perturbed_weights(tiny_model, target)
        token = None if case == "no_auth" else "wrong"
    elif case == "malformed_json":
        body = b'{"weight_dir": '
    elif case == "not_an_object":
        body = b'["x"]'
    elif case == "missing_field":
        body = {"dir": str(target)}
    r = update(server, target, token=token, body=body)
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.json()["status"] == "error" and r.json()["error"]
    assert greedy_ids(server, n=8) == before


def test_admin_client_and_server_write_the_tagged_lines(server, tiny_model, tmp_path):
    from loguru import logger

    weight_dir = write_perturbed_weights(tiny_model, server.weights_root / "step_3", scale=0.05, seed=3)
    client_log = tmp_path / "client.log"
    sink = logger.add(client_log, format="{message}")

    async def go():
        pool = InferencePool(ClientConfig(base_urls=[server.base_url]))
        admin = AdminClient(ClientConfig(base_urls=[server.base_url]), pool=pool, token=server.admin_token)
        try:
            results = await admin.update_weights(str(weight_dir), trace_id="tagtest01")
            with pytest.raises(WeightUpdateError, match="no STABLE|outside|not a directory"):
                await admin.update_weights("/definitely/not/here", trace_id="tagtest02")
            return results
        finally:
            await admin.aclose()
            await pool.aclose()

    try:
        results = asyncio.run(go())
    finally:
        logger.remove(sink)
    res = results[0]
    assert res.attempts == 1
    # the server's whole handling (lock wait, validation, rpc) is taken out of queue_ms
    server_ms = res.body["server_ms"]
    parts = res.body["lock_wait_ms"] + res.body["validate_ms"] + res.rpc_ms
    assert res.body["validate_ms"] > 0 and parts - 0.01 <= server_ms <= res.wall_ms
    assert res.queue_ms == pytest.approx(res.wall_ms - server_ms, abs=1e-6)

    client_lines = [parse_tagged(x) for x in client_log.read_text().splitlines()]
    events = {(x.trace_id, x.event) for x in client_lines if x and x.tag == "weights"}
    assert ("tagtest01", "client.send") in events and ("tagtest01", "client.done") in events
    done = next(x for x in client_lines if x and x.trace_id == "tagtest01" and x.event == "client.done")
    assert done.num("queue_ms") == pytest.approx(done.num("wall_ms") - done.num("server_ms"), abs=0.11)
    # a 4xx is not retried
    assert sum(1 for x in client_lines if x and x.trace_id == "tagtest02" and x.event == "client.send") == 1

    server_lines = [
        parse_tagged(x) for x in (server.output_dir / "logs" / "inference.log").read_text().splitlines()
    ]
    mine = [x for x in server_lines if x and x.trace_id == "tagtest01"]
    assert [x.event for x in mine] == ["server.recv", "rpc.start", "rpc.done"]
    assert mine[0].fields["path"] == "/update_weights"
    assert mine[2].num("rpc_ms") == pytest.approx(res.rpc_ms, abs=0.06)
    assert mine[0].num("t") <= mine[1].num("t") <= mine[2].num("t")
