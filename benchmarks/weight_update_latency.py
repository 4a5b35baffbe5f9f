"""Weight-update latency under streaming load: shared client pool vs dedicated admin client.

Starts the real inference server on the tiny model, keeps N streaming completions in flight
through the shared inference pool (each finished stream is replaced at once), sends one
/update_weights every --interval seconds, and reports p50/p95/p99 of wall_ms, rpc_ms and
queue_ms for each mode and N, all in one run against one server.

usage: python benchmarks/weight_update_latency.py [--model models/tiny] [--n 16,256,1024]
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
from prime_rl.clients.pool import InferencePool
from prime_rl.dev.server import start_server
from prime_rl.dev.tiny_model import PRESETS, build_tiny_model
from prime_rl.dev.weights import write_perturbed_weights
from prime_rl.logging import setup_logging
from prime_rl.tracing import new_trace_id


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


async def run_case(base_url: str, model: str, n: int, mode: str, weight_dirs: list[Path], args) -> dict:
    cfg = ClientConfig(base_urls=[base_url], max_connections=args.pool, timeout_s=600, admin={"mode": mode})
    pool = InferencePool(cfg)
    admin = AdminClient(cfg, pool=pool)
    stop = asyncio.Event()
    started = 0
    completed = 0

    async def streamer(i: int) -> None:
        nonlocal started, completed
        body = {
            "model": model,
            "prompt": f"{i} What is 1 + 1?",
            "max_tokens": args.max_tokens,
            "temperature": 1.0,
            "stream": True,
            "ignore_eos": True,
        }
        while not stop.is_set():
            started += 1
            try:
                async with pool.session.post(f"{base_url}/v1/completions", json=body) as r:
                    async for _ in r.content.iter_any():
                        if stop.is_set():
                            break
                completed += 1
            except Exception:
                await asyncio.sleep(0.1)

    lags: list[float] = []

    async def lag_probe() -> None:  # how late this process's event loop wakes up (client-side saturation)
        while not stop.is_set():
            t = time.monotonic()
            await asyncio.sleep(0.01)
            lags.append((time.monotonic() - t - 0.01) * 1000.0)

    run_id = new_trace_id()[:6]  # trace ids stay unique when logs of several runs are appended
    if not args.cold_admin:
        await admin.start()  # as the orchestrator does: connected before the streams start
    tasks = [asyncio.create_task(streamer(i)) for i in range(n)] + [asyncio.create_task(lag_probe())]
    await asyncio.sleep(args.warmup)
    results = []
    updates = args.shared_updates if mode == "shared" and args.shared_updates else args.updates
    for k in range(updates):
        t0 = time.monotonic()
        (res,) = await admin.update_weights(
            str(weight_dirs[k % len(weight_dirs)]), trace_id=f"bench-{mode}-{n}-{k}-{run_id}"
        )
        results.append(res)
        await asyncio.sleep(max(0.0, args.interval - (time.monotonic() - t0)))
    stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await admin.aclose()
    await pool.aclose()
    row = {
        "n": n,
        "mode": mode,
        "updates": len(results),
        "streams_completed": completed,
        "client_loop_lag_ms": {"p50": pct(lags, 50), "p99": pct(lags, 99), "max": max(lags, default=0.0)},
    }
    for key in ("wall_ms", "rpc_ms", "queue_ms"):
        vals = [getattr(r, key) for r in results]
        row[key] = {
            "p50": pct(vals, 50),
            "p95": pct(vals, 95),
            "p99": pct(vals, 99),
            "mean": statistics.fmean(vals),
        }
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", type=Path, default=None, help="model dir (default models/bench-<size>, built if missing)"
    )
    parser.add_argument(
        "--size",
        choices=sorted(PRESETS),
        default="small",
        help="model preset: 'tiny' decodes so fast on a CPU that per-token HTTP work saturates the "
        "front end; 'small' (~20M params) gives a GPU-like per-stream token rate",
    )
    parser.add_argument("--n", default="16,256,1024", help="concurrent streams, comma-separated")
    parser.add_argument("--pool", type=int, default=256, help="shared inference pool size (max_connections)")
    parser.add_argument("--updates", type=int, default=8, help="weight updates per case")
    parser.add_argument(
        "--shared_updates",
        type=int,
        default=0,
        help="weight updates of the shared cases (default: --updates); at thousands of streams each "
        "one waits minutes for a pooled connection",
    )
    parser.add_argument("--modes", default="shared,dedicated", help="admin modes to run, in this order")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between updates")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds of load before the first update")
    parser.add_argument("--max_tokens", type=int, default=64, help="tokens per streamed completion")
    parser.add_argument(
        "--cold_admin",
        action="store_true",
        help="do not open the admin connections before the streams (the first update connects then)",
    )
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/bench_weight_update"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/weight_update_latency.json"))
    args = parser.parse_args()
    setup_logging(args.output_dir / "logs" / "orchestrator.log", console=False)

    model = build_tiny_model(args.model or Path(f"models/bench-{args.size}"), PRESETS[args.size])
    extra = ["--enforce-eager", "--kv-cache-memory-bytes", str(512 * 1024 * 1024), "--max-num-seqs", "256"]
    server = start_server(model, args.output_dir, extra_args=extra)
    rows = []
    try:
        server.wait_ready()
        dirs = [
            write_perturbed_weights(model, server.weights_root / f"step_{i}", seed=i).resolve()
            for i in (1, 2)
        ]
        for n in [int(x) for x in args.n.split(",")]:
            for mode in args.modes.split(","):
                row = asyncio.run(run_case(server.base_url, str(model), n, mode, dirs, args))
                rows.append(row)
                q = row["queue_ms"]
                print(
                    f"N={n:5d} {mode:9s} queue_ms p50={q['p50']:9.1f} p95={q['p95']:9.1f} p99={q['p99']:9.1f} "
                    f"rpc_ms p50={row['rpc_ms']['p50']:7.1f} streams done={row['streams_completed']} "
                    f"client loop lag p99={row['client_loop_lag_ms']['p99']:.1f}",
                    flush=True,
                )
    finally:
        server.stop()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=2)
    )
    print("\n| N | mode | wall p50/p95/p99 | rpc p50/p95/p99 | queue p50/p95/p99 |")
    print("|---|---|---|---|---|")
    for r in rows:
        cells = [
            f"{r[k]['p50']:.1f} / {r[k]['p95']:.1f} / {r[k]['p99']:.1f}"
            for k in ("wall_ms", "rpc_ms", "queue_ms")
        ]
        print(f"| {r['n']} | {r['mode']} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
