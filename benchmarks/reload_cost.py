"""Reload cost: /update_weights rpc_ms against a raw read of the same safetensors bytes.

Starts the real inference server on a random model of the chosen size, publishes a weight dir,
and alternates (a) reading every safetensors byte of that dir into memory and (b) an idle
/update_weights of the same dir, --repeats times each; reports the medians and their ratio,
all in one run. Both read warm files (the page cache holds them after the first pass), so the
ratio measures the engine's own overhead (pause, copy into parameters, CPU repacking, resume).

usage: python benchmarks/reload_cost.py [--size small|medium] [--repeats 7]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(PRESETS), default="medium")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/bench_reload_cost"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/reload_cost.json"))
    args = parser.parse_args()
    setup_logging(args.output_dir / "logs" / "orchestrator.log", console=False)

    model = build_tiny_model(Path("models") / f"bench-{args.size}", PRESETS[args.size])
    server = start_server(
        model, args.output_dir, extra_args=["--enforce-eager", "--kv-cache-memory-bytes", str(256 << 20)]
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
                for _ in range(args.repeats):
                    ms, nbytes = raw_read_ms(files)
                    reads.append(ms)
                    (res,) = await admin.update_weights(str(weight_dir))
                    rpcs.append(res.rpc_ms)
                    loads.append(res.body.get("load_ms") or float("nan"))
                return nbytes
            finally:
                await admin.aclose()

        nbytes = asyncio.run(updates())
    finally:
        server.stop()
    params = nbytes // 4
    row = {
        "size": args.size,
        "bytes": nbytes,
        "approx_params": params,
        "repeats": args.repeats,
        "raw_read_ms_median": statistics.median(reads),
        "rpc_ms_median": statistics.median(rpcs),
        "load_ms_median": statistics.median(loads),
        "ratio_rpc_to_raw_read": statistics.median(rpcs) / statistics.median(reads),
        "raw_read_ms": reads,
        "rpc_ms": rpcs,
        "load_ms": loads,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(row, indent=2))
    print(
        f"size={args.size} bytes={nbytes / 1e6:.1f}MB (~{params / 1e6:.1f}M fp32 params): raw read median "
        f"{row['raw_read_ms_median']:.1f} ms, rpc_ms median {row['rpc_ms_median']:.1f} ms (worker load "
        f"{row['load_ms_median']:.1f} ms), ratio rpc/raw = {row['ratio_rpc_to_raw_read']:.2f}"
    )


if __name__ == "__main__":
    main()
