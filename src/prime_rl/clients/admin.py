"""The admin client: /update_weights and /reload_weights to every inference server at once.

Weight updates never go through the inference pool by default: when every pooled connection
holds a stream, a request waits for a free connection and ``queue_ms`` grows to seconds while the
server's ``rpc_ms`` stays small (front-end queue saturation, see bottleneck_logs/README.md).
The :class:`AdminClient` therefore has its own small aiohttp connector (at most two connections
per server), its own timeouts and bounded retries, and sends to every server concurrently.
``mode="shared"`` reuses the inference pool's session, the old behaviour, kept for comparison.

:meth:`AdminClient.start` opens a connection to every server at once and keeps it open with a
``GET /health`` every ``admin.keepalive_s``: the first update of a run then goes out on a
connection the server accepted long ago, instead of queueing behind the connections of every
stream that started with the run. An update that finds a keep-alive request in flight to its server
waits for it (at most ``admin.connect_timeout_s``) and takes the connection it frees; no keep-alive
request goes to a server while an update to it is in flight (the update keeps the connection open).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp
from loguru import logger

from prime_rl.clients.config import ClientConfig
from prime_rl.clients.errors import TRANSPORT_EXCEPTIONS, RequestError, ServerError, TransportError
from prime_rl.clients.pool import JSON_CONTENT, InferencePool, normalise_url, request_json
from prime_rl.logging import log_tagged
from prime_rl.tracing import TRACE_HEADER, new_trace_id, now, one_line

CONNECTIONS_PER_SERVER = 2
"""Most admin requests in flight to one server at once (dedicated mode)."""


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


class AdminClient:
    """Sends /update_weights and /reload_weights to every server concurrently.

    Logs ``[weights][tid] client.send url=... path=... t=...`` before each attempt and
    ``client.done wall_ms=... rpc_ms=... server_ms=... queue_ms=...`` per server: queue_ms =
    wall_ms - server_ms, the time outside the server's handling of the update (connection pool,
    network, the server's front end), where server_ms (the server's lock wait, validation and
    rpc) is what the server reports, or rpc_ms for a server that does not.
    Connection errors, timeouts and 5xx answers are retried (``admin.max_retries``, backoff of
    :func:`prime_rl.clients.backoff.backoff_delay`); any 4xx is final.
    """

    def __init__(self, config: ClientConfig, pool: InferencePool | None = None, token: str | None = None):
        self.config = config.admin
        self.base_urls = [normalise_url(u) for u in config.base_urls]
        if self.config.token is not None:
            token = self.config.token.get_secret_value()
        self._token = token or os.environ.get("PRIME_ADMIN_TOKEN") or None
        self._owns_session = self.config.mode == "dedicated"
        if not self._owns_session and pool is None:
            raise ValueError("admin mode 'shared' needs the inference pool")
        self._pool = pool
        self._own: aiohttp.ClientSession | None = None
        self._keeper: asyncio.Task | None = None
        self._pings: dict[str, asyncio.Future] = {}  # server -> set when its keep-alive request ends
        self._busy: Counter[str] = Counter()  # server -> admin requests to it in flight
        self._rng = random.Random()
        # connect covers the wait for a pooled connection too (shared mode queues there)
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            connect=self.config.timeout_s,
            sock_connect=self.config.connect_timeout_s,
            sock_read=self.config.timeout_s,
        )

    @property
    def session(self) -> aiohttp.ClientSession:
        """The session admin requests use: its own (dedicated) or the inference pool's (shared)."""
        if not self._owns_session:
            assert self._pool is not None
            return self._pool.session
        if self._own is None or self._own.closed:
            connector = aiohttp.TCPConnector(
                limit=CONNECTIONS_PER_SERVER * len(self.base_urls), limit_per_host=CONNECTIONS_PER_SERVER
            )
            self._own = aiohttp.ClientSession(connector=connector, timeout=self._timeout)
        return self._own

    async def start(self) -> None:
        """Connect to every server now and keep the connections open (dedicated mode with
        ``keepalive_s`` > 0; otherwise nothing to do). A server that does not answer is not an
        error here: the update to it will say what is wrong."""
        if not self._owns_session or self.config.keepalive_s <= 0 or self._keeper is not None:
            return
        await self._ping_all()
        self._keeper = asyncio.create_task(self._keep_alive())

    async def _keep_alive(self) -> None:
        while True:
            await asyncio.sleep(self.config.keepalive_s)
            await self._ping_all()

    async def _ping_all(self) -> None:
        await asyncio.gather(*(self._ping(url) for url in self.base_urls))

    async def _ping(self, url: str) -> None:
        if self._busy[url] or url in self._pings:
            return  # an update (or a keep-alive request: a URL listed twice) keeps the connection open
        ended = asyncio.get_running_loop().create_future()
        self._pings[url] = ended
        headers = self._headers(new_trace_id())
        try:
            async with self.session.get(f"{url}/health", headers=headers) as resp:
                await resp.read()
        except TRANSPORT_EXCEPTIONS:
            pass
        finally:
            del self._pings[url]
            ended.set_result(None)

    async def _after_ping(self, url: str) -> None:
        """Wait for a keep-alive request in flight to ``url``: sent beside it, an update would
        open a second connection, the wait :meth:`start` is there to spare it."""
        ping = self._pings.get(url)
        if ping is not None:
            await asyncio.wait({ping}, timeout=self.config.connect_timeout_s)

    async def aclose(self) -> None:
        """Stop the keep-alive and close the dedicated session (the shared one belongs to the pool)."""
        if self._keeper is not None:
            self._keeper.cancel()
            await asyncio.gather(self._keeper, return_exceptions=True)
            self._keeper = None
        if self._own is not None:
            await self._own.close()
            self._own = None

    async def update_weights(
        self,
        weight_dir: str,
        trace_id: str | None = None,
        urls: list[str] | None = None,
        background: bool = False,
    ) -> list[AdminResult]:
        """Tell every server (or ``urls``) to load ``weight_dir``; :class:`WeightUpdateError` if any
        fails. ``background``: no step waits for it (a server brought back); every ``client.send``
        says which (``background=true|false``), so that the analyzer leaves the health loop's off the
        steps' time and counts a steps' update that failed in the end as time lost."""
        return await self._broadcast(
            "/update_weights", {"weight_dir": str(weight_dir)}, trace_id, urls, background
        )

    async def reload_weights(
        self, trace_id: str | None = None, urls: list[str] | None = None, background: bool = False
    ) -> list[AdminResult]:
        """Tell every server (or ``urls``) to go back to its base weights (``background``: as for
        :meth:`update_weights`)."""
        return await self._broadcast("/reload_weights", {}, trace_id, urls, background)

    async def _broadcast(
        self, path: str, body: dict, trace_id: str | None, urls: list[str] | None, background: bool
    ) -> list[AdminResult]:
        tid = trace_id or new_trace_id()
        targets = self.base_urls if urls is None else [normalise_url(u) for u in urls]
        outcomes = await asyncio.gather(
            *(self._call(url, path, body, tid, background) for url in targets), return_exceptions=True
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
        headers = {**JSON_CONTENT, TRACE_HEADER: tid}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        return headers

    async def _call(self, url: str, path: str, body: dict, tid: str, background: bool) -> AdminResult:
        self._busy[url] += 1
        try:
            return await self._attempts(url, path, body, tid, background)
        finally:
            self._busy[url] -= 1

    async def _attempts(self, url: str, path: str, body: dict, tid: str, background: bool) -> AdminResult:
        attempts = 0
        while True:
            attempts += 1
            start = now()
            log_tagged(
                "weights",
                "client.send",
                tid,
                url=url,
                path=path,
                t=start,
                attempt=attempts,
                background=background,
            )
            await self._after_ping(url)  # inside wall_ms: the update waited for it
            try:
                reply = await request_json(
                    self.session, "POST", f"{url}{path}", url, body, self._headers(tid), self._timeout
                )
            except RequestError as e:
                wall_ms = (now() - start) * 1000.0
                retryable = isinstance(e, (ServerError, TransportError))
                error = AdminError(url, _reason(e), None if isinstance(e, TransportError) else e.status)
            else:
                payload = reply.data
                wall_ms = (now() - start) * 1000.0
                rpc_ms = float(payload.get("rpc_ms", 0.0))
                # the server's whole handling (lock wait, validation, rpc) where it says; else rpc_ms
                server_ms = float(payload.get("server_ms", rpc_ms))
                queue_ms = max(wall_ms - server_ms, 0.0)
                log_tagged(
                    "weights",
                    "client.done",
                    tid,
                    url=url,
                    path=path,
                    wall_ms=wall_ms,
                    rpc_ms=rpc_ms,
                    server_ms=server_ms,
                    queue_ms=queue_ms,
                    attempts=attempts,
                )
                return AdminResult(url, tid, wall_ms, rpc_ms, queue_ms, attempts, payload)
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
            delay = self.config.delay(attempts, self._rng)
            logger.warning(
                f"[weights][{tid}] {path} to {url} failed ({one_line(error.reason)}); retry {attempts} in {delay:.2f}s"
            )
            await asyncio.sleep(delay)


def _reason(error: RequestError) -> str:
    """``HTTP <status>: <the answer's error text>`` for an answer, else the transport failure."""
    if isinstance(error, TransportError):
        return error.detail
    try:
        data = json.loads(error.body)
    except ValueError:
        return f"HTTP {error.status}: {error.body[:300]}"
    if isinstance(data, dict):
        detail = str(data.get("error") or data.get("detail") or data)[:500]
    else:
        detail = str(data)[:300]
    return f"HTTP {error.status}: {detail}"
