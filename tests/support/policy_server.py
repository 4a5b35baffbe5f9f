"""A fake inference server that serves the policy it was told to load, and says which.

Like the real server (``prime_rl.inference.admin``): ``/update_weights`` with a dir named
``step_N`` makes it serve policy N, ``/reload_weights`` policy 0, and every chat answer carries
the ``x-policy-step`` header of the policy served when the request arrived. Faults a test can
provoke: :meth:`PolicyServer.restart` (back on the base weights, optionally answering 503 to
everything for a while, as a restarted server does until it is up), ``abort_next`` (that many
answers end with finish_reason ``abort``, as after a pause or weight swap),
``report_policy = False`` (a server that sends no header) and ``truncate_odd`` (every
odd-numbered choice of an answer ends with finish_reason ``length``).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from tests.support.http_server import ThreadedApp

from prime_rl.transport.weights import POLICY_HEADER, policy_step_of


class PolicyServer(ThreadedApp):
    def __init__(self, gen_delay_s: float = 0.02):
        self.step: int | None = 0
        self.loaded: list[int | None] = []
        """Policy steps loaded, in order (update and reload)."""
        self.served: list[int | None] = []
        """Policy step reported on each chat answer."""
        self.restarts: list[int] = []
        """For each restart, how many answers had been served before it."""
        self.abort_next = 0
        self.report_policy = True
        self.truncate_odd = False
        self.forget_after: set[int] = set()
        """Steps after whose load the server silently restarts (serves the base weights again)."""
        self.down_after: dict[int, float] = {}
        """Step -> seconds: after loading that step the server restarts and is down that long."""
        self.gen_delay_s = gen_delay_s
        self._down_until = 0.0
        super().__init__(self._app())

    def restart(self, down_for_s: float = 0.0) -> None:
        """As if the process was restarted: base weights, and 503 to every route for ``down_for_s``."""
        self.step = 0
        self._down_until = time.monotonic() + down_for_s
        self.restarts.append(len(self.served))

    def _down(self) -> bool:
        return time.monotonic() < self._down_until

    def _app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            if self._down():
                return JSONResponse({"error": "restarting"}, status_code=503)
            arrived = self.step
            body = await request.json()
            await asyncio.sleep(self.gen_delay_s)
            finish = "stop"
            if self.abort_next > 0:
                self.abort_next -= 1
                finish = "abort"
            n, k = int(body.get("max_tokens") or 4), int(body.get("n") or 1)
            choices = [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": "x" * n},
                    "finish_reason": "length" if self.truncate_odd and i % 2 and finish == "stop" else finish,
                    "token_ids": [5 + (i + j) % 7 for j in range(n)],
                    "logprobs": {"content": [{"token": "x", "logprob": -1.0} for _ in range(n)]},
                }
                for i in range(k)
            ]
            headers = {}
            if self.report_policy:
                headers[POLICY_HEADER] = "unknown" if arrived is None else str(arrived)
            self.served.append(arrived)
            return JSONResponse({"choices": choices, "prompt_token_ids": [1, 2, 3]}, headers=headers)

        async def update(request: Request) -> Response:
            if self._down():
                return JSONResponse({"error": "restarting"}, status_code=503)
            body = await request.json()
            self.step = policy_step_of(Path(body["weight_dir"]))
            self.loaded.append(self.step)
            if self.step in self.forget_after:
                self.step = 0
            if self.step in self.down_after:
                self.restart(self.down_after[self.step])
            return JSONResponse({"status": "ok", "rpc_ms": 1.0})

        async def reload(request: Request) -> Response:
            if self._down():
                return JSONResponse({"error": "restarting"}, status_code=503)
            self.step = 0
            self.loaded.append(0)
            return JSONResponse({"status": "ok", "rpc_ms": 1.0})

        async def health(request: Request) -> Response:
            return Response(status_code=503 if self._down() else 200)

        return Starlette(
            routes=[
                Route("/v1/chat/completions", chat, methods=["POST"]),
                Route("/update_weights", update, methods=["POST"]),
                Route("/reload_weights", reload, methods=["POST"]),
                Route("/health", health, methods=["GET"]),
            ]
        )
