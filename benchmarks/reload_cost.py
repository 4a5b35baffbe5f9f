"""Reload cost: /update_weights rpc_ms against a raw read of the same safetensors bytes.

Starts the real inference server on a random model of the chosen size, publishes a weight dir,
and alternates (a) reading every safetensors byte of that dir into memory and (b) an idle
/update_weights of the same dir, --repeats times each; reports the medians and their ratio,
all in one run. Both read warm files (the page cache holds them after the first pass), so the
ratio measures the engine's own overhead (pause, copy into parameters, CPU repacking, resume).

Each mode of ``inference.weight_reload`` (direct, layerwise) gets its own server, one after the
other in the same run, and a decode-throughput figure (16 concurrent greedy completions of 64
tokens), since on the CPU backend the direct mode computes linear layers with oneDNN on their
plain weights instead of vLLM's prepacked copies.

usage: python benchmarks/reload_cost.py [--size tiny|small|medium] [--repeats 7] [--modes direct,layerwise]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from prime_rl.clients.admin import AdminClient
from prime_rl.clients.config import ClientConfig
from prime_rl.dev.server import start_server
from prime_rl.dev.tiny_model import PRESETS, build_tiny_model
from prime_rl.dev.weights import write_perturbed_weights
from prime_rl.logging import setup_logging
from prime_rl.transport.weights import weight_files


def raw_read_ms(files: list[Path]) -> tuple[float, int]:
    """Read every byte of ``files`` into one preallocated buffer; (ms, bytes)."""
    total = sum(f.stat().st_size for f in files)
    buf = bytearray(max(f.stat().st_size for f in files))
    view = memoryview(buf)
    start = time.perf_counter()
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            n = fh.readinto(view)
            while n < f.stat().st_size:
                n += fh.readinto(view[n:])
    return (time.perf_counter() - start) * 1000.0, total


def generation_tok_s(base_url: str, model: str, n: int = 16, max_tokens: int = 64) -> float:
    """Decode throughput: ``n`` concurrent greedy completions of ``max_tokens`` tokens each."""
    import httpx

    body = {
        "model": model,
        "prompt": "1 2 3",
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
    }

    async def run() -> float:
        async with httpx.AsyncClient(timeout=600) as client:
            start = time.perf_counter()
            rs = await asyncio.gather(
                *(client.post(f"{base_url}/v1/completions", json=body) for _ in range(n))
            )
            secs = time.perf_counter() - start
        tokens = sum(r.json()["usage"]["completion_tokens"] for r in rs)
        return tokens / secs

    asyncio.run(run())  # warm-up
    return asyncio.run(run())


def measure(model: Path, mode: str, output_dir: Path, repeats: int) -> dict:
    """One server with ``--weight_reload mode``: alternate raw reads and idle updates."""
    server = start_server(
        model,
        output_dir / mode,
        extra_args=["--enforce-eager", "--kv-cache-memory-bytes", str(256 << 20), "--weight_reload", mode],
    )
    try:
        server.wait_ready(timeout_s=600)
        weight_dir = write_perturbed_weights(model, server.weights_root / "step_1", seed=1).resolve()
        files = weight_files(weight_dir)
        raw_read_ms(files)  # warm the page cache
        reads, rpcs, loads = [], [], []

        async def updates():
            admin = AdminClient(ClientConfig(base_urls=[server.base_url]))
            try:
                for _ in range(repeats):
                    ms, nbytes = raw_read_ms(files)
                    reads.append(ms)
                    (res,) = await admin.update_weights(str(weight_dir))
                    rpcs.append(res.rpc_ms)
                    loads.append(res.body.get("load_ms") or float("nan"))
                return nbytes
            finally:
                await admin.aclose()

        nbytes = asyncio.run(updates())
        tok_s = generation_tok_s(server.base_url, server.model)
    finally:
        server.stop()
    return {
        "mode": mode,
        "bytes": nbytes,
        "approx_params": nbytes // 4,
        "repeats": repeats,
        "raw_read_ms_median": statistics.median(reads),
        "rpc_ms_median": statistics.median(rpcs),
        "load_ms_median": statistics.median(loads),
        "ratio_rpc_to_raw_read": statistics.median(rpcs) / statistics.median(reads),
        "generation_tok_s": tok_s,
        "raw_read_ms": reads,
        "rpc_ms": rpcs,
        "load_ms": loads,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(PRESETS), default="medium")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--modes",
        default="direct,layerwise",
        help="inference.weight_reload values, one server each, in order",
    )
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/bench_reload_cost"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/reload_cost.json"))
    args = parser.parse_args()
    setup_logging(args.output_dir / "logs" / "orchestrator.log", console=False)

    model = build_tiny_model(Path("models") / f"bench-{args.size}", PRESETS[args.size])
    rows = []
    for mode in args.modes.split(","):
        row = measure(model, mode, args.output_dir, args.repeats)
        rows.append(row)
        print(
            f"{mode}: size={args.size} bytes={row['bytes'] / 1e6:.1f}MB (~{row['approx_params'] / 1e6:.1f}M fp32 "
            f"params): raw read median {row['raw_read_ms_median']:.1f} ms, rpc_ms median "
            f"{row['rpc_ms_median']:.1f} ms (worker load {row['load_ms_median']:.1f} ms), ratio rpc/raw = "
            f"{row['ratio_rpc_to_raw_read']:.2f}; generation {row['generation_tok_s']:.0f} tokens/s",
            flush=True,
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
