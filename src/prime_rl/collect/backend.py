"""Chat requests to OpenAI-compatible servers (our ``inference``, plain vLLM, hosted APIs).

One ``aiohttp`` session for all servers (its per-request CPU cost is a small fraction of
httpx's, which matters at thousands of requests per second); requests go to the least-loaded
server that is up, and a server with connection errors is skipped for a while. Every failure is
raised as a typed :class:`RequestError` so the caller decides: 429 -> :class:`RateLimited`
(with ``Retry-After``), 5xx/connection/timeout -> retryable, other 4xx -> :class:`Rejected`.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp

from prime_rl.collect.config import CollectConfig, RetryConfig

DOWN_FOR_S = 5.0


class RequestError(Exception):
    """A request did not produce a completion."""

    retryable = True

    def __init__(self, message: str, status: int | None = None, url: str | None = None):
        super().__init__(message)
        self.status, self.url = status, url


class RateLimited(RequestError):
    """HTTP 429; ``retry_after`` is the server's Retry-After in seconds (None when absent)."""

    def __init__(self, message: str, retry_after: float | None, url: str):
        super().__init__(message, 429, url)
        self.retry_after = retry_after


class ServerError(RequestError):
    """HTTP 5xx."""


class TransportError(RequestError):
    """Connection refused/reset, timeouts, a malformed answer."""


class Rejected(RequestError):
    """A 4xx other than 429: the request itself is wrong; never retried."""

    retryable = False


@dataclass
class Completion:
    text: str
    finish_reason: str | None
    input_tokens: int
    output_tokens: int
    token_ids: list[int] | None
    prompt_token_ids: list[int] | None
    model: str | None
    url: str


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def chat_url(base: str) -> str:
    base = base.rstrip("/")
    return base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")


def _models_url(base: str) -> str:
    base = base.rstrip("/")
    return base + ("/models" if base.endswith("/v1") else "/v1/models")


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
        )
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
        raise TransportError(
            f"{url}: malformed chat completion ({type(e).__name__}: {e})", 200, url
        ) from None


class ChatBackend:
    """Sends chat requests; use as ``async with ChatBackend(...) as backend``."""

    def __init__(
        self, base_urls: list[str], retry: RetryConfig, api_key: str | None, token_ids: str, pool: int
    ):
        self.base_urls = [u.rstrip("/") for u in base_urls]
        self.retry = retry
        self.ask_token_ids = token_ids != "never"
        self.token_ids_mode = token_ids
        self.inflight = dict.fromkeys(self.base_urls, 0)
        self.down_until = dict.fromkeys(self.base_urls, 0.0)
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._pool = pool
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_config(cls, cfg: CollectConfig, api_key: str | None) -> ChatBackend:
        return cls(cfg.base_urls, cfg.retry, api_key, cfg.token_ids, cfg.num_samples_in_parallel)

    async def __aenter__(self) -> ChatBackend:
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.retry.connect_timeout_s, sock_read=self.retry.read_timeout_s
        )
        connector = aiohttp.TCPConnector(limit=self._pool + 8, limit_per_host=0, ttl_dns_cache=300)
        self._session = aiohttp.ClientSession(timeout=timeout, connector=connector, headers=self._headers)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    def pick(self) -> str:
        now = time.monotonic()
        up = [u for u in self.base_urls if self.down_until[u] <= now] or self.base_urls
        return min(up, key=lambda u: self.inflight[u])

    async def first_model(self) -> str:
        """The first model a server lists (for runs that name none)."""
        assert self._session is not None
        errors = []
        for base in self.base_urls:
            try:
                async with self._session.get(_models_url(base)) as resp:
                    if resp.status == 200:
                        data = await resp.json(content_type=None)
                        return str(data["data"][0]["id"])
                    errors.append(f"{base}: HTTP {resp.status}")
            except (aiohttp.ClientError, TimeoutError, KeyError, IndexError, ValueError) as e:
                errors.append(f"{base}: {type(e).__name__}: {e}")
        raise RequestError("no model given and none could be listed (" + "; ".join(errors) + ")")

    async def chat(self, body: dict[str, Any], trace_id: str) -> Completion:
        """One attempt; raises a :class:`RequestError` subclass on any failure."""
        assert self._session is not None
        base = self.pick()
        url = chat_url(base)
        if self.ask_token_ids:
            body = {**body, "return_token_ids": True}
        self.inflight[base] += 1
        try:
            async with self._session.post(
                url, data=json.dumps(body), headers={"x-trace-id": trace_id}
            ) as resp:
                raw = await resp.read()
                status = resp.status
                retry_after = resp.headers.get("Retry-After")
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, OSError) as e:
            if isinstance(e, (aiohttp.ClientConnectorError, ConnectionRefusedError)):
                self.down_until[base] = time.monotonic() + DOWN_FOR_S
            raise TransportError(f"{base}: {type(e).__name__}: {e}".rstrip(": "), None, base) from None
        except TimeoutError:
            raise TransportError(f"{base}: timed out", None, base) from None
        finally:
            self.inflight[base] -= 1
        if status == 200:
            try:
                return parse_completion(json.loads(raw), base)
            except ValueError as e:
                raise TransportError(f"{base}: answer is not JSON ({e})", status, base) from None
        text = raw[:500].decode("utf-8", "replace")
        if status == 429:
            raise RateLimited(f"{base}: HTTP 429 {text}", parse_retry_after(retry_after), base)
        if status >= 500:
            raise ServerError(f"{base}: HTTP {status} {text}", status, base)
        if self.ask_token_ids and self.token_ids_mode == "auto" and "return_token_ids" in text:
            self.ask_token_ids = False  # a hosted API that rejects vLLM's field: stop asking
            return await self.chat({k: v for k, v in body.items() if k != "return_token_ids"}, trace_id)
        raise Rejected(f"{base}: HTTP {status} {text}", status, base)


async def sleep_backoff(attempt: int, retry: RetryConfig, rng) -> float:
    """Sleep a full-jitter exponential backoff for retry ``attempt`` (1-based); returns seconds."""
    cap = min(retry.backoff_max_s, retry.backoff_s * (2 ** (attempt - 1)))
    delay = rng.uniform(cap / 2, cap)
    await asyncio.sleep(delay)
    return delay
