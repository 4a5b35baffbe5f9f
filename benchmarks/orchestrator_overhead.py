"""Orchestrator overhead per rollout against an instant local OpenAI-compatible server.

Runs the real orchestrator in this process against the local test server (which answers at
once, in vLLM's response shape), with async_level high enough that no weights are awaited, and
reports this process's CPU ms per rollout: requests, parsing, advantages, batch files. Scoring
runs in the verifier processes and is excluded. Also reports wall-clock rollouts/s.

usage: python benchmarks/orchestrator_overhead.py [--steps 20] [--batch_size 256] [--group 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from pathlib import Path

from prime_rl.config import load_config
from prime_rl.logging import setup_logging
from prime_rl.orchestrator.config import OrchestratorConfig
from prime_rl.orchestrator.loop import Orchestrator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.support
from tests.support.http_server import instant_server_process  # noqa: E402


def cpu_s() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--max_tokens", type=int, default=64)
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/bench_orchestrator_overhead"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/orchestrator_overhead.json"))
    args = parser.parse_args()
    setup_logging(args.output_dir / "logs" / "orchestrator.log", console=False)
    with instant_server_process() as url:
        cfg, _ = load_config(
            OrchestratorConfig,
            [
                "--output_dir",
                str(args.output_dir),
                "--max_steps",
                str(args.steps),
                "--async_level",
                str(args.steps),
                "--batch_size",
                str(args.batch_size),
                "--rollouts_per_example",
                str(args.group),
                "--max_inflight",
                str(2 * args.batch_size // args.group),
                "--sampling.max_tokens",
                str(args.max_tokens),
                "--client.base_urls",
                json.dumps([url]),
                "--verify.workers",
                "1",
            ],
        )
        orch = Orchestrator(cfg)
        c0, w0 = cpu_s(), time.monotonic()
        asyncio.run(orch.run())
        cpu, wall = cpu_s() - c0, time.monotonic() - w0
    rollouts = args.steps * args.batch_size
    row = {
        "rollouts": rollouts,
        "cpu_ms_per_rollout": cpu * 1000 / rollouts,
        "rollouts_per_s": rollouts / wall,
        "wall_s": wall,
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(row, indent=2))
    print(
        f"{rollouts} rollouts in {wall:.1f}s: {row['rollouts_per_s']:.0f} rollouts/s, "
        f"{row['cpu_ms_per_rollout']:.3f} CPU ms per rollout in the orchestrator process"
    )


if __name__ == "__main__":
    main()
