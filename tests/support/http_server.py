"""A small OpenAI-compatible HTTP server for client tests and overhead benchmarks.

It serves real HTTP on loopback (uvicorn in a background thread) and answers instantly or as
scripted: a delay, a status code (429 with ``Retry-After``, 5xx), a long stream that holds its
connection, or no answer until the test releases it (``ScriptState.hold_after``). Its text is
``x`` repeated ``max_tokens`` times, or what ``ScriptState.reply_text`` makes of the request
(mixed answers, so that rewards differ: see :func:`text_by_seed`). It is the "instant server" of
the benchmarks and the fault injector of the client and collector tests; it is never used where
a test is about vLLM itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from prime_rl.dev.server import free_port


@dataclass
class Reply:
    """One scripted answer: wait ``delay_s``, then answer ``status`` (with ``retry_after`` on 429)."""

    status: int = 200
    delay_s: float = 0.0
    retry_after: float | None = None
    body: dict | None = None
    headers: dict[str, str] | None = None
    """Extra headers of a non-200 answer (e.g. rate-limit headers)."""


@dataclass
class ScriptState:
    """What the server answers next, per path, and what it has seen."""

    scripts: dict[str, deque[Reply]] = field(default_factory=dict)
    rpc_ms: float = 5.0
    server_ms: float | None = None
    """The ``server_ms`` of admin answers (the server's whole handling); None: not reported."""
    stream_chunks: int = 20
    stream_interval_s: float = 0.05
    default_delay_s: float = 0.0
    """Delay of every unscripted chat/completions answer (a slow model server)."""
    health_delay_s: float = 0.0
    """Delay of every ``GET /health`` answer (a keep-alive request that is still in flight)."""
    storm_requests: int = 0
    """The first this many chat/completions requests answer 429 with ``storm_retry_after`` (a
    storm counted in requests, not seconds, so that a slow machine sees the same storm)."""
    storm_retry_after: float = 0.5
    fail_every: int = 0
    """When > 0, every fail_every-th chat/completions request answers 500."""
    rate_limit_fraction: float = 0.0
    """Share of chat/completions requests answered 429 at random (seeded by ``seed``), with
    ``rate_limit_retry_after``: a rate limiter that refuses some requests whatever the load."""
    rate_limit_retry_after: float | None = 1.0
    """Retry-After of the 429s of ``rate_limit_fraction``, ``capacity`` and ``quota_until``."""
    capacity: int = 0
    """When > 0, a chat/completions request that arrives while ``capacity`` are being answered
    gets 429 (a server at capacity: the more sent, the more refused)."""
    quota_until: float = 0.0
    """Until this ``time.monotonic()``, chat/completions answer 429 with OpenAI's headers for a
    used-up quota (``x-ratelimit-remaining-requests: 0``, a reset): every request should wait."""
    seed: int = 0
    serving: int = 0
    """Unstreamed chat/completions being answered now (see ``capacity``)."""
    requests: int = 0
    answered: list[tuple[float, int, str]] = field(default_factory=list)
    """(time, status, x-trace-id) of every chat/completions answer, in order."""
    reply_text: Callable[[dict], str] | None = None
    """The text of every (non-streamed) completions answer, from the request body; unset: ``x``
    times ``max_tokens``. Token counts stay ``max_tokens`` either way."""
    seen: list[tuple[str, float, dict]] = field(default_factory=list)
    peers: list[tuple[str, int]] = field(default_factory=list)
    """(path, the client's port) of every request, /health included: which connection it came on."""
    active_streams: int = 0
    active_at_arrival: list[int] = field(default_factory=list)
    """Streams in flight when each request (in ``seen`` order) arrived."""
    hold_after: int | None = None
    """When set, every chat/completions request after the first ``hold_after`` is held unanswered
    until :meth:`release` (a run stopped at a point the test picks, e.g. to signal it there)."""
    held: int = 0
    """Requests held so far (see ``hold_after``)."""
    released: threading.Event = field(default_factory=threading.Event)
    """Set by :meth:`release` (thread-safe: the server runs in its own thread)."""
    metrics_text: str | None = None
    """What ``GET /metrics`` answers (a Prometheus page); None: 404, as a hosted API answers."""
    metrics_hits: int = 0
    """``GET /metrics`` requests seen."""
    _completions_arrived: int = 0
    _rng: random.Random | None = None

    def release(self) -> None:
        """Answer the requests held by ``hold_after``, and hold no more."""
        self.released.set()

    async def hold(self, path: str) -> None:
        """Hold this request while ``hold_after`` says so (until :meth:`release`)."""
        if self.hold_after is None or not path.endswith("completions"):
            return
        self._completions_arrived += 1
        if self._completions_arrived <= self.hold_after or self.released.is_set():
            return
        self.held += 1
        while not self.released.is_set():
            await asyncio.sleep(0.005)

    def script(self, path: str, *replies: Reply) -> None:
        self.scripts.setdefault(path, deque()).extend(replies)

    def next_reply(self, path: str) -> Reply:
        queue = self.scripts.get(path)
        if queue:
            return queue.popleft()
        if path.endswith("completions"):
            self.requests += 1
            now = time.monotonic()
            if self.requests <= self.storm_requests:
                return Reply(429, retry_after=self.storm_retry_after)
            if now < self.quota_until:
                reset = f"{self.quota_until - now:.3f}s"
                headers = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": reset}
                return Reply(429, headers=headers)
            if self.capacity and self.serving >= self.capacity:
                return Reply(429, retry_after=self.rate_limit_retry_after)
            if self.rate_limit_fraction:
                if self._rng is None:
                    self._rng = random.Random(self.seed)
                if self._rng.random() < self.rate_limit_fraction:
                    return Reply(429, retry_after=self.rate_limit_retry_after)
            if self.fail_every and self.requests % self.fail_every == 0:
                return Reply(500)
            return Reply(delay_s=self.default_delay_s)
        return Reply()


def build_app(state: ScriptState) -> Starlette:
    async def scripted(request: Request, path: str) -> Response | None:
        body = await request.body()
        state.seen.append((path, time.monotonic(), dict(request.headers)))
        state.peers.append((path, request.client.port if request.client else -1))
        state.active_at_arrival.append(state.active_streams)
        await state.hold(path)
        reply = state.next_reply(path)
        busy = reply.status == 200 and path.endswith("completions")
        state.serving += busy
        try:
            if reply.delay_s:
                await asyncio.sleep(reply.delay_s)
        finally:
            state.serving -= busy
        if path.endswith("completions"):
            state.answered.append((time.monotonic(), reply.status, request.headers.get("x-trace-id", "")))
        if reply.status != 200:
            headers = {"Retry-After": str(reply.retry_after)} if reply.retry_after is not None else {}
            headers.update(reply.headers or {})
            return JSONResponse(
                reply.body or {"error": f"scripted {reply.status}"}, status_code=reply.status, headers=headers
            )
        request.state.body = json.loads(body) if body else {}
        request.state.reply = reply
        return None

    async def admin(request: Request) -> Response:
        early = await scripted(request, request.url.path)
        if early is not None:
            return early
        await asyncio.sleep(max(state.rpc_ms, state.server_ms or 0.0) / 1000.0)
        answer = {"status": "ok", "rpc_ms": state.rpc_ms}
        if state.server_ms is not None:
            answer["server_ms"] = state.server_ms
        return JSONResponse(answer)

    async def completions(request: Request) -> Response:
        path = request.url.path
        early = await scripted(request, path)
        if early is not None:
            return early
        body = request.state.body
        if body.get("stream"):
            return StreamingResponse(_stream(body), media_type="text/event-stream")
        n = int(body.get("max_tokens") or body.get("max_completion_tokens") or 4)
        text = state.reply_text(body) if state.reply_text is not None else "x" * n
        k = int(body.get("n") or 1)
        usage = {"prompt_tokens": 3, "completion_tokens": n * k, "total_tokens": 3 + n * k}
        if path.endswith("/chat/completions"):
            choices = []
            for i in range(k):  # the shape vLLM gives: token ids and per-token logprobs when asked
                choice: dict = {
                    "index": i,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "length",
                }
                if body.get("return_token_ids"):
                    choice["token_ids"] = [5 + (i + j) % 7 for j in range(n)]
                if body.get("logprobs"):
                    choice["logprobs"] = {"content": [{"token": "x", "logprob": -1.0} for _ in range(n)]}
                choices.append(choice)
            out = {
                "id": "c",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": choices,
                "usage": usage,
            }
            if body.get("return_token_ids"):
                out["prompt_token_ids"] = [1, 2, 3]
            return JSONResponse(out)
        choice = {"index": 0, "text": text, "finish_reason": "length"}
        return JSONResponse(
            {
                "id": "c",
                "object": "text_completion",
                "model": body.get("model"),
                "choices": [choice],
                "usage": usage,
            }
        )

    async def _stream(body: dict):
        state.active_streams += 1
        try:
            for i in range(state.stream_chunks):
                chunk = {
                    "choices": [
                        {
                            "index": 0,
                            "text": "x",
                            "finish_reason": None if i + 1 < state.stream_chunks else "length",
                        }
                    ]
                }
                yield f"data: {json.dumps(chunk)}\n\n"
                await asyncio.sleep(state.stream_interval_s)
            yield "data: [DONE]\n\n"
        finally:
            state.active_streams -= 1

    async def metrics(request: Request) -> Response:
        state.metrics_hits += 1
        if state.metrics_text is None:
            return Response(status_code=404)
        return PlainTextResponse(state.metrics_text)

    async def health(request: Request) -> Response:
        state.peers.append(("/health", request.client.port if request.client else -1))
        if state.health_delay_s:
            await asyncio.sleep(state.health_delay_s)
        return Response(status_code=200)

    return Starlette(
        routes=[
            Route("/update_weights", admin, methods=["POST"]),
            Route("/reload_weights", admin, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
    )


def text_by_seed(answers: Callable[[int, int], str]) -> Callable[[dict], str]:
    """A ``reply_text`` that answers ``answers(task_index, repeat_index)``, read back from the
    per-sample seed the collector sends when run with ``--responses_create_params.seed 0``
    (``task_index * 1009 + repeat_index``, see ``prime_rl.collect.runner.request_body``)."""

    def reply(body: dict) -> str:
        if body.get("seed") is None:
            raise ValueError("text_by_seed needs a seed in the request (--responses_create_params.seed 0)")
        task_index, repeat_index = divmod(int(body["seed"]), 1009)
        return answers(task_index, repeat_index)

    return reply


class ThreadedApp:
    """Serve an ASGI app on a free loopback port in a background thread (context manager)."""

    def __init__(self, app: Any):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self):
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise TimeoutError("local test server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


class LocalTestServer(ThreadedApp):
    """Run :func:`build_app` on a free loopback port in a background thread (context manager)."""

    def __init__(self, state: ScriptState | None = None):
        self.state = state or ScriptState()
        super().__init__(build_app(self.state))

    def __enter__(self) -> LocalTestServer:
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        self.state.release()  # held requests end, so that the server can shut down
        super().__exit__(*exc)


@contextlib.contextmanager
def instant_server_process(timeout_s: float = 20.0, **state: float) -> Iterator[str]:
    """Run the instant server in its own process (so its CPU is not the caller's); yields its base
    URL once /health answers, and kills it on exit. For benchmarks. ``state``: numeric
    :class:`ScriptState` fields (``default_delay_s``, ``rate_limit_fraction``, ``capacity``, ...)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    options = [f"--{k}={v}" for k, v in state.items()]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.http_server", "--port", str(port), *options]
    )
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise TimeoutError(f"instant test server on {url} did not come up") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.kill()
        proc.wait()


def main() -> None:
    """``python -m tests.support.http_server --port P``: serve the instant test server until killed."""
    import argparse

    parser = argparse.ArgumentParser(description="instant OpenAI-compatible test server")
    parser.add_argument("--port", type=int, required=True)
    for name in ("default_delay_s", "rate_limit_fraction", "rate_limit_retry_after"):
        parser.add_argument(f"--{name}", type=float, default=getattr(ScriptState, name))
    for name in ("capacity", "seed"):
        parser.add_argument(f"--{name}", type=int, default=getattr(ScriptState, name))
    args = vars(parser.parse_args())
    port = args.pop("port")
    uvicorn.run(build_app(ScriptState(**args)), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
