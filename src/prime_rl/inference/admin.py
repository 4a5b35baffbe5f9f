"""Admin routes of the inference server: /update_weights, /reload_weights, /weights, /health.

Also :class:`FirstByteMiddleware`, which logs ``server.recv`` the moment an admin request
reaches the application, before any route or body parsing, so that the analyzer can split the
client's wait into "before the server saw it" and "inside the server"; and which stamps every
generation answer with the ``x-policy-step`` header (:data:`POLICY_HEADER`): the policy step
that was served when the request arrived. Steps only move forward between arrival and answer,
so that is the oldest policy that produced any token of the answer (with
``inflight_on_update = "keep"`` a request may finish under newer weights), which is the one a
staleness check must use. The middleware also guards vLLM's routes that have no auth of their
own: its elastic-EP control routes (``/scale_elastic_ep``, always registered) and, with
``VLLM_SERVER_DEV_MODE``, its development routes (``/collective_rpc``, ``/sleep``, ``/pause``,
...): with an admin token set, :data:`GUARD` makes them answer 401 without it.

Request bodies are bounded (:data:`MAX_BODY_BYTES`, :data:`MAX_JSON_DEPTH`,
:data:`MAX_WEIGHT_DIR_CHARS`): too large answers 413, too deep or too long 400, never a 500.

Swaps are serialised by a lock. During a swap the engine is paused (see
``InferenceConfig.inflight_on_update``); the pause is always released in a ``finally``, so a
failed swap never leaves generation hanging. A weight dir is validated under that lock,
before the engine is paused, and exactly the files validated are loaded (nothing can swap in
between). The files are first hard-linked into the server's own held dir
(:mod:`prime_rl.inference.held`), so pruning cannot take them away during the load or later,
when they are what a rollback needs.

A swap is all or nothing. Every file is checked before the engine is paused (above); if loading
fails anyway (:mod:`prime_rl.inference.worker`), the unfinished layers are put back and the
previous weights are loaded again in full, and only then does generation resume,
on a model that is wholly the previous version. If that rollback fails too, the weights are
unknown: in-flight requests are aborted, generation stays paused, generation requests and
``/health`` answer 503 with the reason, and ``GET /weights`` says so, until a later update or
reload succeeds.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from loguru import logger
from starlette.routing import compile_path

from prime_rl.inference.held import HeldWeights
from prime_rl.logging import log_tagged
from prime_rl.tracing import TRACE_HEADER, new_trace_id, now, one_line
from prime_rl.transport.weights import (
    POLICY_HEADER,
    TensorInfo,
    WeightDirError,
    check_compatible,
    manifest,
    policy_step_of,
    resolve_weight_dir,
    verify_weight_dir,
    weight_files,
)

ADMIN_PATHS = ("/update_weights", "/reload_weights")
GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions")
OPEN_WHEN_BROKEN = (*ADMIN_PATHS, "/weights", "/health", "/metrics", "/version", "/v1/models")
"""Paths that still answer while the served weights are unknown; every other one answers 503."""
_TRACE_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")

MAX_BODY_BYTES = 64 * 1024
"""Largest admin request body; a larger one answers 413 (ours are a few hundred bytes)."""
MAX_JSON_DEPTH = 32
"""Deepest nesting of ``[``/``{`` in an admin request body; deeper answers 400, before parsing."""
MAX_WEIGHT_DIR_CHARS = 4096
"""Longest ``weight_dir`` (PATH_MAX on Linux); longer answers 400."""


@dataclass
class ServedPolicy:
    """Which policy step the engine serves: 0 for the base weights, N for a dir named ``step_N``.

    ``None`` when the served weights came from a dir whose name carries no step. One instance
    per server process (:data:`SERVED`), shared by the swapper (writer) and the middleware
    (reader): both live in the API server process.
    """

    step: int | None = 0
    broken: str | None = None
    """Why the served weights are unknown (a swap and its rollback both failed), else None:
    generation requests and ``/health`` then answer 503 with this reason."""


SERVED = ServedPolicy()


@dataclass
class RouteGuard:
    """Paths that need the admin token before any route runs: vLLM's development routes.

    vLLM registers them (``VLLM_SERVER_DEV_MODE=1``) without auth; the server refuses to start
    in dev mode without an admin token and :func:`prime_rl.inference.server.serve` fills the one
    instance :data:`GUARD` (vLLM builds the middleware from its class, without arguments). A path
    is matched as routing matches it: below the ASGI ``root_path``, and also as sent. With paths
    to guard but no token (never the case in ``serve``) they answer 403.
    """

    token: str | None = None
    patterns: tuple[re.Pattern[str], ...] = ()

    def protect(self, paths: Iterable[str], token: str | None) -> None:
        self.token = token
        self.patterns = tuple(compile_path(p)[0] for p in sorted(set(paths)))

    def guards(self, scope: dict) -> bool:
        if not self.patterns:
            return False
        path = scope.get("path") or ""
        root = scope.get("root_path") or ""
        candidates = {path, path[len(root) :] if root and path.startswith(root) else path}
        return any(p.match(c) for p in self.patterns for c in candidates)


GUARD = RouteGuard()


def _bearer_ok(header: str | None, token: str) -> bool:
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def trace_id_from_headers(headers: Any) -> str:
    """The request's ``x-trace-id`` if well-formed, else a fresh one (never log raw header text)."""
    raw = headers.get(TRACE_HEADER) if headers is not None else None
    return raw if raw and _TRACE_RE.fullmatch(raw) else new_trace_id()


class FirstByteMiddleware:
    """Pure ASGI middleware for admin and generation requests.

    Admin requests: logs ``[weights][tid] server.recv path=... t=...`` on arrival and stores the
    trace id in ``scope["state"]["trace_id"]`` for the route to reuse. Generation requests: the
    answer carries ``x-policy-step`` (the step served on arrival, or ``unknown`` after a swap
    of a dir not named ``step_N``). While the served weights are unknown (a swap whose rollback
    failed) every path but :data:`OPEN_WHEN_BROKEN` answers 503 with the reason. Paths of
    ``guard`` (vLLM's control and dev routes) answer 401 without ``Authorization: Bearer <admin
    token>``. Pure ASGI
    (not ``BaseHTTPMiddleware``) so streaming bodies pass untouched.
    """

    def __init__(
        self,
        app: Any,
        paths: tuple[str, ...] = ADMIN_PATHS,
        served: ServedPolicy = SERVED,
        guard: RouteGuard = GUARD,
    ):
        self.app = app
        self.paths = paths
        self.served = served
        self.guard = guard

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path")
        headers = None
        if path in self.paths:
            t = now()
            headers = _headers(scope)
            tid = trace_id_from_headers(headers)
            scope.setdefault("state", {})["trace_id"] = tid
            log_tagged("weights", "server.recv", tid, path=path, t=t)
        if self.guard.guards(scope):
            token = self.guard.token
            if token is None:
                denied = (403, "vLLM's development routes are disabled: no admin token is set")
            elif not _bearer_ok((headers or _headers(scope)).get("authorization"), token):
                denied = (401, "missing or wrong admin token (Authorization: Bearer <token>)")
            else:
                denied = None
            if denied is not None:
                await _error(*denied)(scope, receive, send)
                return
        if self.served.broken is not None and path not in OPEN_WHEN_BROKEN:
            await _error(503, f"no generation: the served weights are unknown ({self.served.broken})")(
                scope, receive, send
            )
            return
        if path in GENERATION_PATHS:
            step = self.served.step
            stamp = (POLICY_HEADER.encode(), b"unknown" if step is None else str(step).encode())

            async def send_stamped(message: dict) -> None:
                if message.get("type") == "http.response.start":
                    message = {**message, "headers": [*message.get("headers", []), stamp]}
                await send(message)

            await self.app(scope, receive, send_stamped)
            return
        await self.app(scope, receive, send)


def _headers(scope: dict) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


class Engine(Protocol):
    """The part of vLLM's engine client the swapper uses (a fake implements it in unit tests)."""

    async def pause_generation(self, *, mode: str = ..., clear_cache: bool = ...) -> None: ...
    async def resume_generation(self) -> None: ...
    async def check_health(self) -> None: ...
    async def collective_rpc(
        self, method: str, timeout: float | None = ..., args: tuple = ..., kwargs: dict | None = ...
    ) -> Any: ...


async def pause_engine(engine: Engine, mode: str) -> None:
    """Pause generation and clear the caches, as vLLM's ``pause_generation`` does, without the
    fixed 20 ms sleep it ends with (there only so that the outputs of requests it aborted reach
    their callers before it returns; they still do, a moment later). That sleep was most of an
    idle swap's overhead: rpc_ms minus load_ms went from ~26 ms to ~4 ms. An engine client without
    the parts (another vLLM version, a fake) gets its ``pause_generation``."""
    core = getattr(engine, "engine_core", None)
    pause_scheduler = getattr(core, "pause_scheduler_async", None)
    clear_mm_cache = getattr(getattr(engine, "renderer", None), "clear_mm_cache_async", None)
    if pause_scheduler is None or clear_mm_cache is None:
        await engine.pause_generation(mode=mode, clear_cache=True)
        return
    await clear_mm_cache()
    await pause_scheduler(mode=mode, clear_cache=True)


class SwapError(Exception):
    """The engine failed to load weights; ``rolled_back`` tells whether the previous ones are back."""

    def __init__(self, reason: str, rolled_back: bool):
        super().__init__(reason)
        self.rolled_back = rolled_back


@dataclass(frozen=True)
class _Target:
    """What one swap loads: ``files`` exactly as validated, ``name`` for ``target=``, the policy
    step it serves and its dir (None: the base weights)."""

    files: list[Path]
    name: str
    step: int | None
    weight_dir: Path | None


@dataclass
class WeightSwapper:
    """Validates weight dirs and swaps them into the engine, one at a time."""

    engine: Engine
    base_files: list[Path]
    weights_root: Path
    inflight_mode: str = "keep"
    max_update_bytes: int = 1 << 40
    served: ServedPolicy = field(default_factory=lambda: SERVED)
    base_manifest: dict[str, TensorInfo] = field(default_factory=dict)
    current_files: list[Path] = field(default_factory=list)
    """What a rollback loads: the held links of the served weights, or the base files."""
    current_dir: Path | None = None
    updates: int = 0
    held: HeldWeights | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def __post_init__(self) -> None:
        if not self.base_manifest:
            self.base_manifest = manifest(self.base_files)
        if not self.current_files:
            self.current_files = list(self.base_files)
        if self.held is None:
            self.held = HeldWeights(self.weights_root)

    def validate(self, weight_dir: str) -> tuple[Path, list[Path]]:
        """Check a requested weight dir; raises :class:`WeightDirError` with status and reason."""
        real = resolve_weight_dir(weight_dir, self.weights_root)
        files = weight_files(real)
        total = sum(f.stat().st_size for f in files)
        if total > self.max_update_bytes:
            raise WeightDirError(
                413, f"weight_dir holds {total} bytes of weights, over the limit of {self.max_update_bytes}"
            )
        verify_weight_dir(real)  # every file as the trainer wrote it: sizes, then checksums
        check_compatible(manifest(files), self.base_manifest)
        return real, files

    async def update(self, weight_dir: str, trace_id: str) -> dict[str, Any]:
        async def validated() -> _Target:
            # Checksums read every byte: off the event loop, so generation requests keep flowing.
            real, files = await asyncio.to_thread(self.validate, weight_dir)
            return _Target(files, real.name, policy_step_of(real), real)

        return await self._swap("update_weights", trace_id, validated)

    async def reload(self, trace_id: str) -> dict[str, Any]:
        async def base() -> _Target:
            return _Target(list(self.base_files), "base", 0, None)

        return await self._swap("reload_weights", trace_id, base)

    async def _load(self, files: list[Path]) -> list[dict]:
        out = await self.engine.collective_rpc("prime_load_weights", args=([str(f) for f in files],))
        return list(out or [])

    async def _swap(self, op: str, trace_id: str, choose: Callable[[], Awaitable[_Target]]) -> dict[str, Any]:
        """Under the lock: ``choose`` the target (validation; raising leaves the engine untouched),
        hold its files, pause, load exactly them, and resume on a model that is wholly one version."""
        wait_start = now()
        async with self._lock:
            lock_wait_ms = (now() - wait_start) * 1000.0
            chose = now()
            target = await choose()
            validate_ms = (now() - chose) * 1000.0
            assert self.held is not None
            if target.weight_dir is not None:
                files, held_dir = self.held.hold(target.files)
            else:
                files, held_dir = list(target.files), None
            start = now()
            log_tagged("weights", "rpc.start", trace_id, op=op, t=start, target=target.name)
            paused = loaded = False
            try:
                await pause_engine(self.engine, self.inflight_mode)
                paused = True
                try:
                    ranks = await self._load(files)
                except Exception as e:
                    rolled_back = await self._roll_back(trace_id)
                    raise SwapError(
                        f"{op} failed: {type(e).__name__}: {one_line(str(e))}", rolled_back
                    ) from e
                loaded = True
                # Before generation resumes: a request arriving from now on is served by ``step``.
                self.served.step = target.step
                self.served.broken = None
                self.current_files = files
                self.current_dir = target.weight_dir
            finally:
                self.held.settle(held_dir, served=loaded)
                if paused:
                    await self._release_engine(trace_id)
            end = now()
            rpc_ms = (end - start) * 1000.0
            self.updates += 1
            load_ms = max((r.get("load_ms", 0.0) for r in ranks if isinstance(r, dict)), default=None)
            log_tagged(
                "weights",
                "rpc.done",
                trace_id,
                op=op,
                t=end,
                rpc_ms=rpc_ms,
                load_ms=load_ms,
                lock_wait_ms=lock_wait_ms,
                validate_ms=validate_ms,
            )
            return {
                "status": "ok",
                "rpc_ms": round(rpc_ms, 3),
                "validate_ms": round(validate_ms, 3),
                "lock_wait_ms": round(lock_wait_ms, 3),
                "server_ms": round((end - wait_start) * 1000.0, 3),
                "load_ms": load_ms,
                "reload": next((r["reload"] for r in ranks if isinstance(r, dict) and "reload" in r), None),
                "trace_id": trace_id,
                "weight_dir": str(target.weight_dir) if target.weight_dir is not None else None,
                "policy_step": target.step,
            }

    async def _release_engine(self, trace_id: str) -> None:
        """Resume generation, unless the weights are unknown: then abort what is in flight and
        stay paused (a forward pass on a half-loaded model would kill the engine)."""
        if self.served.broken is None:
            await self.engine.resume_generation()
            return
        try:
            await self.engine.pause_generation(mode="abort", clear_cache=True)
        except Exception as e:
            logger.error(f"[weights][{trace_id}] aborting in-flight requests failed: {one_line(repr(e))}")

    async def _roll_back(self, trace_id: str) -> bool:
        """Load the served weights again in full (their held links, or the base files)."""
        try:
            await self._load(self.current_files)
        except Exception as e:  # the engine is in an unknown state: say so loudly
            self.served.step = None
            self.served.broken = (
                f"a swap failed and so did the rollback: {type(e).__name__}: {one_line(str(e))}"
            )
            logger.critical(
                f"[weights][{trace_id}] rollback to the previous weights failed: {one_line(repr(e))}; "
                "generation stays paused until an update or reload succeeds"
            )
            return False
        logger.warning(f"[weights][{trace_id}] swap failed; previous weights restored")
        return True


def _check_auth(request: Request, token: str | None) -> JSONResponse | None:
    if token is None:
        return None
    if not _bearer_ok(request.headers.get("authorization"), token):
        return _error(401, "missing or wrong admin token (Authorization: Bearer <token>)")
    return None


def _error(status: int, reason: str) -> JSONResponse:
    return JSONResponse({"status": "error", "error": reason}, status_code=status)


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None when it is longer than ``limit`` (stops reading there)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _too_deep(raw: bytes, limit: int) -> bool:
    """Whether ``[``/``{`` nest deeper than ``limit`` outside strings (no recursion, no parse)."""
    depth = 0
    in_string = escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return False


async def _json_body(request: Request) -> dict[str, Any] | JSONResponse:
    raw = await _read_body(request, MAX_BODY_BYTES)
    if raw is None:
        return _error(413, f"request body is over the limit of {MAX_BODY_BYTES // 1024} KiB")
    if not raw.strip():
        return {}
    if _too_deep(raw, MAX_JSON_DEPTH):
        return _error(400, f"request body is nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, 4300+ digit ints
        # never echo the body: a decode error quotes its bytes
        where = f" at byte {e.start}" if isinstance(e, UnicodeDecodeError) else ""
        where = f" at line {e.lineno} column {e.colno}" if isinstance(e, json.JSONDecodeError) else where
        return _error(400, f"request body is not valid JSON{where}: {type(e).__name__}")
    if not isinstance(body, dict):
        return _error(400, "request body must be a JSON object")
    return body


def build_admin_router(swapper: WeightSwapper, admin_token: str | None) -> APIRouter:
    """The admin routes, bound to one swapper and token."""
    router = APIRouter()

    def trace_of(request: Request) -> str:
        return request.scope.get("state", {}).get("trace_id") or trace_id_from_headers(request.headers)

    async def run(op: str, request: Request, coro_factory) -> JSONResponse:
        tid = trace_of(request)
        try:
            result = await coro_factory(tid)
        except WeightDirError as e:
            logger.warning(f"[weights][{tid}] {op} refused ({e.status}): {one_line(e.reason)}")
            return _error(e.status, e.reason)
        except SwapError as e:
            logger.error(f"[weights][{tid}] {one_line(str(e))} (rolled back: {e.rolled_back})")
            return JSONResponse(
                {"status": "error", "error": str(e), "rolled_back": e.rolled_back}, status_code=500
            )
        return JSONResponse(result)

    @router.post("/update_weights")
    async def update_weights(request: Request) -> JSONResponse:
        if (denied := _check_auth(request, admin_token)) is not None:
            return denied
        body = await _json_body(request)
        if isinstance(body, JSONResponse):
            return body
        unknown = sorted(set(body) - {"weight_dir"})
        if unknown:
            return _error(400, f'unknown fields {unknown}; expected {{"weight_dir": "..."}}')
        if "weight_dir" not in body:
            return _error(400, "missing field 'weight_dir'")
        weight_dir = body["weight_dir"]
        if not isinstance(weight_dir, str):
            return _error(400, "'weight_dir' must be a string")
        if len(weight_dir) > MAX_WEIGHT_DIR_CHARS:
            return _error(
                400,
                f"'weight_dir' is {len(weight_dir)} characters long, over the limit of {MAX_WEIGHT_DIR_CHARS}",
            )
        return await run("update_weights", request, lambda tid: swapper.update(weight_dir, tid))

    @router.post("/reload_weights")
    async def reload_weights(request: Request) -> JSONResponse:
        if (denied := _check_auth(request, admin_token)) is not None:
            return denied
        body = await _json_body(request)
        if isinstance(body, JSONResponse):
            return body
        if body:
            return _error(400, f"/reload_weights takes an empty body, got fields {sorted(body)}")
        return await run("reload_weights", request, swapper.reload)

    @router.get("/weights")
    async def weights_info(request: Request) -> JSONResponse:
        if (denied := _check_auth(request, admin_token)) is not None:
            return denied
        return JSONResponse(
            {
                "weight_dir": str(swapper.current_dir) if swapper.current_dir else None,
                "base": swapper.current_dir is None,
                "updates": swapper.updates,
                "policy_step": swapper.served.step,
                "error": swapper.served.broken,
            }
        )

    @router.get("/health")
    async def health() -> Response:
        """200 when the engine runs and its weights are known; else 503 with the reason."""
        if swapper.served.broken is not None:
            return _error(503, f"the served weights are unknown: {swapper.served.broken}")
        try:
            await swapper.engine.check_health()
        except Exception as e:
            return _error(503, f"the engine is dead: {type(e).__name__}: {one_line(str(e))}")
        return Response(status_code=200)

    return router


def include_first(app: FastAPI, router: APIRouter) -> None:
    """Add ``router``'s routes in front of the app's: where vLLM has a route of the same path
    (its dev mode has its own ``/update_weights``), ours answers."""
    before = list(app.router.routes)
    app.include_router(router)
    added = app.router.routes[len(before) :]
    app.router.routes[:] = [*added, *before]
