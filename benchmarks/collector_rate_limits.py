"""collect-rollouts under rate limits: wall time with 429s against the same run without them.

The local OpenAI-compatible test server runs in its own process and answers each request after
``--latency`` seconds (a model server). Scenarios, each one real collector run in this process:

- ``clean``: no 429s, at ``--parallel`` (the reference);
- ``random429``: the same server refusing ``--fraction`` of requests at random with
  ``Retry-After: --retry_after`` (a rate limiter that refuses some requests whatever the load);
- ``capacity``: a server that answers ``--capacity`` requests at once and refuses the rest
  (429 with Retry-After), at ``--parallel``; its reference ``capacity_clean`` is a run sent at
  ``--capacity`` against a server without a limit (the best any client could do).

Printed: wall seconds, samples/s, 429s, lowest and final parallelism, and the ratios
random429/clean (target: at most 2) and capacity/capacity_clean. Results go to
``benchmarks/results/collector_rate_limits.json``.

usage: python benchmarks/collector_rate_limits.py [--n 1000] [--parallel 64] [--latency 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from pathlib import Path

from prime_rl.collect.config import CollectConfig
from prime_rl.collect.progress import setup_collect_logging
from prime_rl.collect.runner import collect
from prime_rl.config import load_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.support
from tests.support.collect import write_tasks  # noqa: E402
from tests.support.http_server import instant_server_process  # noqa: E402


def run(name: str, work: Path, tasks: Path, parallel: int, **server: float) -> dict:
    out = work / f"{name}.jsonl"
    setup_collect_logging(work / f"{name}_collect.log", level="INFO")
    with instant_server_process(**server) as url:
        cfg, _ = load_config(
            CollectConfig,
            [
                "--input",
                str(tasks),
                "--output",
                str(out),
                "--base_urls",
                url,
                "--model",
                "m",
                "--parallel",
                str(parallel),
                "--responses_create_params.max_output_tokens",
                "8",
                "--no-verify",
                "--no-progress",
            ],
        )
        start = time.perf_counter()
        result = asyncio.run(collect(cfg))
        wall = time.perf_counter() - start
    assert result.failed == 0, result.summary()
    row = {
        "scenario": name,
        "parallel": parallel,
        "server": server,
        "samples": result.written,
        "wall_s": wall,
        "samples_per_s": result.written / wall,
        "rate_limited": result.rate_limited,
        "min_parallel": result.min_parallel,
        "final_parallel": result.final_parallel,
    }
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000, help="samples per run")
    parser.add_argument("--parallel", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.5, help="seconds the server takes per answer")
    parser.add_argument("--fraction", type=float, default=0.2, help="share of requests refused at random")
    parser.add_argument("--retry_after", type=float, default=1.0, help="Retry-After of the 429s, seconds")
    parser.add_argument(
        "--capacity", type=int, default=16, help="requests the capacity server serves at once"
    )
    parser.add_argument("--scenarios", default="clean,random429,capacity_clean,capacity")
    parser.add_argument("--work", type=Path, default=Path("outputs/bench_rate_limits"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/collector_rate_limits.json"))
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    tasks = write_tasks(args.work / "tasks.jsonl", args.n)
    lat, ra = args.latency, args.retry_after
    plans = {
        "clean": (args.parallel, {"default_delay_s": lat}),
        "random429": (
            args.parallel,
            {"default_delay_s": lat, "rate_limit_fraction": args.fraction, "rate_limit_retry_after": ra},
        ),
        "capacity_clean": (args.capacity, {"default_delay_s": lat}),
        "capacity": (
            args.parallel,
            {"default_delay_s": lat, "capacity": args.capacity, "rate_limit_retry_after": ra},
        ),
    }
    rows = {}
    for name in args.scenarios.split(","):
        parallel, server = plans[name]
        rows[name] = run(name, args.work, tasks, parallel, **server)
    ratios = {}
    if {"clean", "random429"} <= rows.keys():
        ratios["random429_over_clean"] = rows["random429"]["wall_s"] / rows["clean"]["wall_s"]
    if {"capacity_clean", "capacity"} <= rows.keys():
        ratios["capacity_over_capacity_clean"] = rows["capacity"]["wall_s"] / rows["capacity_clean"]["wall_s"]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "args": vars(args) | {"work": str(args.work), "json": str(args.json)},
                "runs": list(rows.values()),
                "ratios": ratios,
            },
            indent=2,
        )
    )
    print("\n| scenario | parallel | wall s | samples/s | 429s | parallelism min / end |")
    print("|---|---|---|---|---|---|")
    for r in rows.values():
        print(
            f"| {r['scenario']} | {r['parallel']} | {r['wall_s']:.1f} | {r['samples_per_s']:.1f} | "
            f"{r['rate_limited']} | {r['min_parallel']} / {r['final_parallel']} |"
        )
    for k, v in ratios.items():
        print(f"{k}: {v:.2f}")


if __name__ == "__main__":
    main()
