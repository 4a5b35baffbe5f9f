"""HTTP clients of the orchestrator: a shared pool for inference, a dedicated admin client.

Inference traffic (chat/completions, often streaming) shares one ``httpx.AsyncClient`` pool
across all servers, also used by the official ``openai`` SDK clients. Weight updates never go
through that pool: when every pooled connection holds a stream, a request waits for a free
connection and ``queue_ms`` grows to seconds while the server's ``rpc_ms`` stays small (the
front-end queue saturation the bottleneck guide describes). The :class:`AdminClient` therefore
has its own small pool, its own timeouts and bounded retries, and sends to every server
concurrently. ``mode="shared"`` keeps the old behaviour selectable for comparison.
"""

from __future__ import annotations

import asyncio
import os
import random
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from loguru import logger
from pydantic import Field, SecretStr

from prime_rl.config import StrictModel
from prime_rl.logging import log_tagged
from prime_rl.tracing import new_trace_id, now

TRACE_HEADER = "x-trace-id"


class AdminClientConfig(StrictModel):
    """How weight updates reach the inference servers."""

    mode: Literal["dedicated", "shared"] = "dedicated"
    """dedicated: own connection pool, never queued behind streams. shared: reuse the inference
    pool (the old behaviour, kept for comparison in benchmarks)."""

    token: SecretStr | None = None
    """Admin bearer token of the servers (env PRIME_ADMIN_TOKEN is read when unset)."""

    connect_timeout_s: float = Field(default=5.0, gt=0)
    """Seconds to establish a connection to a server."""

    timeout_s: float = Field(default=600.0, gt=0)
    """Seconds to wait for a server to answer an update (loading a large model takes a while)."""

    max_retries: int = Field(default=3, ge=0)
    """Retries of an update on connection errors, timeouts and 5xx answers (4xx is never retried)."""

    backoff_s: float = Field(default=0.5, ge=0)
    """First retry delay; doubles per retry, with jitter."""


class ClientConfig(StrictModel):
    """Inference servers and the connection pools that reach them."""

    base_urls: list[str] = Field(default_factory=lambda: ["http://127.0.0.1:8000"], min_length=1)
    """Base URLs of the inference servers (without /v1)."""

    api_key: SecretStr | None = None
    """API key of the OpenAI-compatible servers, if they require one."""

    max_connections: int = Field(default=256, ge=1)
    """Size of the shared inference connection pool (all servers together)."""

    connect_timeout_s: float = Field(default=10.0, gt=0)
    """Seconds to establish an inference connection."""

    timeout_s: float = Field(default=1800.0, gt=0)
    """Seconds an inference request may take (read timeout)."""

    admin: AdminClientConfig = AdminClientConfig()
    """The admin client for /update_weights and /reload_weights."""


class AdminError(Exception):
    """A weight update was refused (4xx) or failed after its retries; names server and reason."""

    def __init__(self, url: str, reason: str, status: int | None = None):
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason
        self.status = status


class WeightUpdateError(Exception):
    """One or more servers did not take a weight update."""

    def __init__(self, op: str, errors: list[AdminError]):
        lines = "; ".join(str(e) for e in errors)
        super().__init__(f"{op} failed on {len(errors)} server(s): {lines}")
        self.errors = errors


@dataclass(frozen=True)
class AdminResult:
    """One server's answer to an admin request, with the client-side timings."""

    url: str
    trace_id: str
    wall_ms: float
    rpc_ms: float
    queue_ms: float
    attempts: int
    body: dict[str, Any]


def _normalise(url: str) -> str:
    return url.rstrip("/")


class InferencePool:
    """The shared inference connection pool over one or more servers.

    ``http`` is one ``httpx.AsyncClient`` for all servers; :meth:`openai` gives an official
    ``openai.AsyncOpenAI`` client per server on that same pool; :meth:`pick` returns the server
    with the fewest requests in flight (callers wrap requests in :meth:`track`).
    """

    def __init__(self, config: ClientConfig):
        self.config = config
        self.base_urls = [_normalise(u) for u in config.base_urls]
        self.http = httpx.AsyncClient(
            limits=httpx.Limits(
                max_connections=config.max_connections, max_keepalive_connections=config.max_connections
            ),
            timeout=httpx.Timeout(config.timeout_s, connect=config.connect_timeout_s),
        )
        self.inflight = dict.fromkeys(self.base_urls, 0)
        self._openai: dict[str, Any] = {}

    def pick(self, exclude: set[str] | frozenset[str] = frozenset()) -> str | None:
        """The least-loaded server not in ``exclude`` (ties broken by order); None when none is left."""
        up = [u for u in self.base_urls if u not in exclude]
        return min(up, key=lambda u: self.inflight[u]) if up else None

    def track(self, url: str) -> _Inflight:
        """Context manager counting one request in flight on ``url``."""
        return _Inflight(self.inflight, url)

    def openai(self, url: str):
        """An ``openai.AsyncOpenAI`` client for ``url`` that uses the shared pool."""
        if url not in self._openai:
            from openai import AsyncOpenAI

            key = self.config.api_key.get_secret_value() if self.config.api_key else "EMPTY"
            self._openai[url] = AsyncOpenAI(
                base_url=f"{url}/v1", api_key=key, http_client=self.http, max_retries=0
            )
        return self._openai[url]

    async def aclose(self) -> None:
        await self.http.aclose()


class _Inflight:
    def __init__(self, counts: dict[str, int], url: str):
        self.counts, self.url = counts, url

    def __enter__(self) -> None:
        self.counts[self.url] += 1

    def __exit__(self, *exc: object) -> None:
        self.counts[self.url] -= 1


class AdminClient:
    """Sends /update_weights and /reload_weights to every server concurrently.

    Logs ``[weights][tid] client.send url=... path=... t=...`` before each attempt and
    ``client.done wall_ms=... rpc_ms=... queue_ms=...`` (queue_ms = wall_ms - rpc_ms) per server.
    """

    def __init__(self, config: ClientConfig, pool: InferencePool | None = None, token: str | None = None):
        self.config = config.admin
        self.base_urls = [_normalise(u) for u in config.base_urls]
        if self.config.token is not None:
            token = self.config.token.get_secret_value()
        self._token = token or os.environ.get("PRIME_ADMIN_TOKEN") or None
        self._owns_http = self.config.mode == "dedicated"
        if self._owns_http:
            self.http = httpx.AsyncClient(
                # Small pool of its own: at most two admin requests per server at once.
                limits=httpx.Limits(
                    max_connections=2 * len(self.base_urls), max_keepalive_connections=len(self.base_urls)
                ),
                timeout=httpx.Timeout(self.config.timeout_s, connect=self.config.connect_timeout_s),
            )
        else:
            if pool is None:
                raise ValueError("admin mode 'shared' needs the inference pool")
            self.http = pool.http

    async def aclose(self) -> None:
        if self._owns_http:
            await self.http.aclose()

    async def update_weights(
        self, weight_dir: str, trace_id: str | None = None, urls: list[str] | None = None
    ) -> list[AdminResult]:
        """Tell every server (or ``urls``) to load ``weight_dir``; :class:`WeightUpdateError` if any fails."""
        return await self._broadcast("/update_weights", {"weight_dir": str(weight_dir)}, trace_id, urls)

    async def reload_weights(
        self, trace_id: str | None = None, urls: list[str] | None = None
    ) -> list[AdminResult]:
        """Tell every server (or ``urls``) to go back to its base weights."""
        return await self._broadcast("/reload_weights", {}, trace_id, urls)

    async def _broadcast(
        self, path: str, body: dict, trace_id: str | None, urls: list[str] | None
    ) -> list[AdminResult]:
        tid = trace_id or new_trace_id()
        targets = self.base_urls if urls is None else [_normalise(u) for u in urls]
        outcomes = await asyncio.gather(
            *(self._call(url, path, body, tid) for url in targets), return_exceptions=True
        )
        errors: list[AdminError] = []
        results: list[AdminResult] = []
        for url, out in zip(targets, outcomes, strict=True):
            if isinstance(out, AdminResult):
                results.append(out)
            elif isinstance(out, AdminError):
                errors.append(out)
            elif isinstance(out, BaseException):
                errors.append(AdminError(url, f"{type(out).__name__}: {out}"))
        if errors:
            raise WeightUpdateError(path.lstrip("/"), errors)
        return results

    def _headers(self, tid: str) -> dict[str, str]:
        headers = {TRACE_HEADER: tid}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    async def _call(self, url: str, path: str, body: dict, tid: str) -> AdminResult:
        attempts = 0
        while True:
            attempts += 1
            start = now()
            log_tagged("weights", "client.send", tid, url=url, path=path, t=start, attempt=attempts)
            try:
                response = await self.http.post(
                    f"{url}{path}",
                    json=body,
                    headers=self._headers(tid),
                    timeout=httpx.Timeout(self.config.timeout_s, connect=self.config.connect_timeout_s),
                )
                wall_ms = (now() - start) * 1000.0
                retryable = response.status_code >= 500
                reason = _reason(response)
                error = (
                    None
                    if response.is_success
                    else AdminError(url, f"HTTP {response.status_code}: {reason}", response.status_code)
                )
            except (httpx.TransportError, httpx.TimeoutException) as e:
                wall_ms = (now() - start) * 1000.0
                retryable = True
                response = None
                error = AdminError(url, f"{type(e).__name__}: {e or 'no detail'}")
            if error is None and response is not None:
                payload = response.json()
                rpc_ms = float(payload.get("rpc_ms", 0.0))
                queue_ms = max(wall_ms - rpc_ms, 0.0)
                log_tagged(
                    "weights",
                    "client.done",
                    tid,
                    url=url,
                    path=path,
                    wall_ms=wall_ms,
                    rpc_ms=rpc_ms,
                    queue_ms=queue_ms,
                    attempts=attempts,
                )
                return AdminResult(url, tid, wall_ms, rpc_ms, queue_ms, attempts, payload)
            assert error is not None
            if not retryable or attempts > self.config.max_retries:
                log_tagged(
                    "weights",
                    "client.error",
                    tid,
                    url=url,
                    path=path,
                    wall_ms=wall_ms,
                    status=error.status,
                    attempts=attempts,
                )
                raise error
            delay = self.config.backoff_s * (2 ** (attempts - 1)) * (0.5 + random.random())
            logger.warning(
                f"[weights][{tid}] {path} to {url} failed ({error.reason}); retry {attempts} in {delay:.2f}s"
            )
            await asyncio.sleep(delay)


def _reason(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(data, dict):
        return str(data.get("error") or data.get("detail") or data)[:500]
    return str(data)[:300]
