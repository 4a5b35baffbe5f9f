"""Chat requests to OpenAI-compatible servers (our ``inference``, plain vLLM, hosted APIs).

:class:`ChatBackend` sends one chat completion per call through an
:class:`~prime_rl.clients.pool.InferencePool` (least-loaded server that is up; a server refusing
connections is skipped for a while) and returns a :class:`Completion`; every failure is raised
as a classified :class:`~prime_rl.clients.errors.RequestError` so the caller decides: 429 ->
``RateLimited`` (with ``Retry-After``), 5xx/connection/timeout -> retryable, other 4xx ->
``Rejected``. Retrying is the caller's job (``collect-rollouts`` does it with its limiter).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import aiohttp

from prime_rl.clients.config import ClientConfig
from prime_rl.clients.errors import (
    RateLimited,
    Rejected,
    RequestError,
    ServerError,
    TransportError,
)
from prime_rl.clients.pool import InferencePool
from prime_rl.tracing import TRACE_HEADER

__all__ = [
    "ChatBackend",
    "Completion",
    "RateLimited",
    "Rejected",
    "RequestError",
    "ServerError",
    "TransportError",
    "chat_url",
    "models_url",
    "parse_completion",
    "parse_response",
    "responses_body",
]


@dataclass
class Completion:
    """One chat completion: its text, usage, token ids (when the server gives them) and server."""

    text: str
    finish_reason: str | None
    input_tokens: int
    output_tokens: int
    token_ids: list[int] | None
    prompt_token_ids: list[int] | None
    model: str | None
    url: str
    tool_calls: list[dict[str, Any]] | None = None
    """The answer's OpenAI ``tool_calls`` (a server with a tool-call parser), if any."""


def api_url(base: str, path: str) -> str:
    """``<base>/v1/<path>`` for a server given with or without ``/v1``."""
    base = base.rstrip("/")
    return f"{base}/{path}" if base.endswith("/v1") else f"{base}/v1/{path}"


def chat_url(base: str) -> str:
    """The chat/completions URL of a server given with or without ``/v1``."""
    return api_url(base, "chat/completions")


def completions_url(base: str) -> str:
    """The (text) completions URL of a server given with or without ``/v1``."""
    return api_url(base, "completions")


def models_url(base: str) -> str:
    """The models URL of a server given with or without ``/v1``."""
    return api_url(base, "models")


def responses_url(base: str) -> str:
    """The Responses API URL of a server given with or without ``/v1``."""
    return api_url(base, "responses")


def responses_body(body: dict[str, Any]) -> dict[str, Any]:
    """A chat-completions request as a Responses API request: ``messages`` -> ``input`` (assistant
    tool calls -> ``function_call`` items, ``tool`` messages -> ``function_call_output`` items),
    ``max_completion_tokens`` -> ``max_output_tokens``, chat-shaped tools and tool_choice ->
    the flat shape; ``store`` false (nothing is kept on the server); other fields as they are."""
    out: dict[str, Any] = {"store": False}
    for key, value in body.items():
        if key == "messages":
            out["input"] = [item for m in value for item in _response_items(m)]
        elif key in ("max_completion_tokens", "max_tokens"):
            out["max_output_tokens"] = value
        elif key == "tools":
            out["tools"] = [
                {"type": "function", **t["function"]} if isinstance(t, dict) and "function" in t else t
                for t in value
            ]
        elif key == "tool_choice" and isinstance(value, dict) and "function" in value:
            out["tool_choice"] = {"type": "function", "name": value["function"].get("name")}
        elif key not in ("n", "return_token_ids", "logprobs", "stop", "seed"):
            out[key] = value
    return out


def _response_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    role = message.get("role")
    if role == "tool":
        return [
            {
                "type": "function_call_output",
                "call_id": message.get("tool_call_id"),
                "output": str(message.get("content") or ""),
            }
        ]
    items: list[dict[str, Any]] = []
    if message.get("content") or not message.get("tool_calls"):
        items.append({"role": role, "content": message.get("content") or ""})
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("id"),
                "name": fn.get("name"),
                "arguments": fn.get("arguments", "{}"),
            }
        )
    return items


def parse_response(data: Any, url: str) -> Completion:
    """A Responses API body -> :class:`Completion` (text of the output messages, function calls as
    chat ``tool_calls``; raises TransportError on a malformed one)."""
    try:
        texts, calls = [], []
        for item in data.get("output") or []:
            if item.get("type") == "message":
                texts += [
                    c.get("text") or "" for c in item.get("content") or [] if c.get("type") == "output_text"
                ]
            elif item.get("type") == "function_call":
                calls.append(
                    {
                        "id": item.get("call_id") or item.get("id"),
                        "type": "function",
                        "function": {"name": item.get("name"), "arguments": item.get("arguments") or "{}"},
                    }
                )
        usage = data.get("usage") or {}
        status = data.get("status")
        incomplete = (data.get("incomplete_details") or {}).get("reason")
        finish = (
            "length" if incomplete == "max_output_tokens" else ("stop" if status == "completed" else status)
        )
        return Completion(
            text="".join(texts),
            finish_reason=finish,
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            token_ids=None,
            prompt_token_ids=None,
            model=data.get("model"),
            url=url,
            tool_calls=calls or None,
        )
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise TransportError(f"{url}: malformed response ({type(e).__name__}: {e})", 200, url) from None


def parse_completion(data: Any, url: str) -> Completion:
    """A chat.completion body -> :class:`Completion` (raises TransportError on a malformed one)."""
    try:
        choice = data["choices"][0]
        message = choice.get("message") or {}
        usage = data.get("usage") or {}
        token_ids = choice.get("token_ids")
        return Completion(
            text=message.get("content") or "",
            finish_reason=choice.get("finish_reason"),
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or (len(token_ids) if token_ids else 0)),
            token_ids=token_ids,
            prompt_token_ids=data.get("prompt_token_ids"),
            model=data.get("model"),
            url=url,
            tool_calls=message.get("tool_calls") or None,
        )
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
        raise TransportError(
            f"{url}: malformed chat completion ({type(e).__name__}: {e})", 200, url
        ) from None


class ChatBackend:
    """Sends chat requests; use as ``async with ChatBackend(...) as backend``.

    ``token_ids``: ``always``/``auto`` ask for vLLM's ``return_token_ids``; ``auto`` stops asking
    when a server rejects the field (hosted APIs do); ``never`` does not ask.
    ``max_connections`` bounds the connections to all servers together. ``api``: ``chat``
    (``/v1/chat/completions``) or ``responses`` (the OpenAI Responses API, ``/v1/responses``,
    which vLLM serves too; the request is converted by :func:`responses_body`, no token ids).
    """

    def __init__(
        self,
        base_urls: list[str],
        *,
        api_key: str | None = None,
        token_ids: Literal["auto", "always", "never"] = "auto",
        max_connections: int = 24,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 600.0,
        api: Literal["chat", "responses"] = "chat",
    ):
        config = ClientConfig(
            base_urls=base_urls,
            api_key=api_key,
            max_connections=max_connections,
            connect_timeout_s=connect_timeout_s,
            timeout_s=read_timeout_s,
        )
        self.pool = InferencePool(config)
        self.base_urls = self.pool.base_urls
        self.api = api
        self.ask_token_ids = token_ids != "never" and api == "chat"
        self.token_ids_mode = token_ids

    @property
    def inflight(self) -> dict[str, int]:
        """Requests in flight per server."""
        return self.pool.inflight

    async def __aenter__(self) -> ChatBackend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.pool.aclose()

    def pick(self) -> str:
        """The least-loaded server that is up; when all are down, the least-loaded of them all."""
        base = self.pool.pick(fallback=True)
        assert base is not None  # nothing is excluded, so fallback always finds one
        return base

    async def first_model(self) -> str:
        """The first model a server lists (for runs that name none)."""
        errors = []
        for base in self.base_urls:
            try:
                async with self.pool.session.get(models_url(base), headers=self.pool.headers) as resp:
                    if resp.status == 200:
                        data = await resp.json(content_type=None)
                        return str(data["data"][0]["id"])
                    errors.append(f"{base}: HTTP {resp.status}")
            except (aiohttp.ClientError, TimeoutError, KeyError, IndexError, ValueError) as e:
                errors.append(f"{base}: {type(e).__name__}: {e}")
        raise RequestError("no model given and none could be listed (" + "; ".join(errors) + ")")

    async def chat(self, body: dict[str, Any], trace_id: str) -> Completion:
        """One attempt; raises a :class:`RequestError` subclass on any failure."""
        base = self.pick()
        if self.api == "responses":
            data = await self.pool.post_json(
                base, responses_url(base), responses_body(body), {TRACE_HEADER: trace_id}
            )
            return parse_response(data, base)
        if self.ask_token_ids:
            body = {**body, "return_token_ids": True}
        try:
            data = await self.pool.post_json(base, chat_url(base), body, {TRACE_HEADER: trace_id})
        except Rejected as e:
            if self.ask_token_ids and self.token_ids_mode == "auto" and "return_token_ids" in e.body[:500]:
                self.ask_token_ids = False  # a hosted API that rejects vLLM's field: stop asking
                return await self.chat({k: v for k, v in body.items() if k != "return_token_ids"}, trace_id)
            raise
        return parse_completion(data, base)
