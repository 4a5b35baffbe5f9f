"""The chat backend and the shared classification of failed requests, over real HTTP."""

from __future__ import annotations

import asyncio

import pytest
from tests.support.http_server import LocalTestServer, Reply

from prime_rl.clients.backoff import parse_retry_after
from prime_rl.clients.chat import (
    ChatBackend,
    RateLimited,
    Rejected,
    ServerError,
    TransportError,
    chat_url,
    models_url,
    parse_completion,
)

CHAT = "/v1/chat/completions"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 4}


@pytest.fixture
def server():
    with LocalTestServer() as s:
        yield s


def run(backend: ChatBackend, coro_fn):
    async def scenario():
        async with backend:
            return await coro_fn(backend)

    return asyncio.run(scenario())


def test_urls_with_and_without_v1():
    assert chat_url("http://h:1/") == "http://h:1/v1/chat/completions"
    assert chat_url("https://api.x.com/v1") == "https://api.x.com/v1/chat/completions"
    assert models_url("http://h:1") == "http://h:1/v1/models"
    assert models_url("https://api.x.com/v1/") == "https://api.x.com/v1/models"


def test_completion_with_token_ids_and_trace_header(server):
    comp = run(ChatBackend([server.base_url]), lambda b: b.chat(BODY, "trace1"))
    assert comp.text == "xxxx" and comp.output_tokens == 4 and comp.input_tokens == 3
    assert comp.token_ids is not None and comp.prompt_token_ids == [1, 2, 3] and comp.url == server.base_url
    assert server.state.answered[-1][2] == "trace1"


@pytest.mark.parametrize(
    ("reply", "kind", "retryable"),
    [
        (Reply(status=429, retry_after=2.0), RateLimited, True),
        (Reply(status=503), ServerError, True),
        (Reply(status=500), ServerError, True),
        (Reply(status=400), Rejected, False),
        (Reply(status=404), Rejected, False),
    ],
)
def test_statuses_are_classified(server, reply, kind, retryable):
    server.state.script(CHAT, reply)
    with pytest.raises(kind) as e:
        run(ChatBackend([server.base_url]), lambda b: b.chat(BODY, "t"))
    assert e.value.retryable is retryable and e.value.status == reply.status
    assert e.value.url == server.base_url and f"HTTP {reply.status}" in str(e.value)
    if kind is RateLimited:
        assert e.value.retry_after == 2.0


def test_connection_refused_is_retryable_and_marks_the_server_down(server):
    dead = "http://127.0.0.1:9"
    backend = ChatBackend([dead, server.base_url], connect_timeout_s=2)

    async def go(b: ChatBackend):
        with pytest.raises(TransportError) as e:
            await b.chat(BODY, "t")  # both idle: the first server is picked
        assert e.value.retryable and e.value.connect_failed and e.value.url == dead
        return await b.chat(BODY, "t")  # the dead one is now skipped

    assert run(backend, go).url == server.base_url


def test_read_timeout_is_a_transport_error(server):
    server.state.script(CHAT, Reply(delay_s=1.0))
    with pytest.raises(TransportError, match="Timeout") as e:
        run(ChatBackend([server.base_url], read_timeout_s=0.1), lambda b: b.chat(BODY, "t"))
    assert not e.value.connect_failed


def test_auto_token_ids_stops_asking_a_server_that_rejects_the_field(server):
    server.state.script(CHAT, Reply(status=400, body={"error": "unknown field: return_token_ids"}))
    backend = ChatBackend([server.base_url], token_ids="auto")
    comp = run(backend, lambda b: b.chat(BODY, "t"))
    assert comp.token_ids is None and not backend.ask_token_ids
    assert len(server.state.seen) == 2


def test_always_token_ids_keeps_the_rejection(server):
    server.state.script(CHAT, Reply(status=400, body={"error": "unknown field: return_token_ids"}))
    with pytest.raises(Rejected):
        run(ChatBackend([server.base_url], token_ids="always"), lambda b: b.chat(BODY, "t"))


def test_retry_after_and_completion_parsing():
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past
    comp = parse_completion(
        {
            "model": "m",
            "choices": [{"message": {"content": "hi"}, "finish_reason": "stop", "token_ids": [1, 2]}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2},
        },
        "u",
    )
    assert (comp.text, comp.token_ids, comp.input_tokens, comp.output_tokens) == ("hi", [1, 2], 5, 2)
