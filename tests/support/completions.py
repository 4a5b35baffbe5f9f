"""Greedy completions from a real inference server (tests comparing what it serves)."""

from __future__ import annotations

import httpx


def complete(server, prompt: str, n: int = 12) -> dict:
    """A greedy ``/v1/completions`` answer of ``n`` tokens (EOS ignored), with token ids and
    log-probabilities; asserts it is a 200."""
    r = httpx.post(
        f"{server.base_url}/v1/completions",
        json={
            "model": server.model,
            "prompt": prompt,
            "max_tokens": n,
            "temperature": 0.0,
            "logprobs": 1,
            "return_token_ids": True,
            "ignore_eos": True,
        },
        timeout=120,
    )
    assert r.status_code == 200, r.text
    return r.json()


def greedy_ids(server, prompt: str, n: int = 12) -> list[int]:
    return complete(server, prompt, n)["choices"][0]["token_ids"]
