"""collect-rollouts overhead: samples/s and the collector's own CPU ms per rollout.

Runs the real collector in this process (progress bar off, [collect] lines to a log file as in a
real run) against the instant local OpenAI-compatible test server, which runs in its own
process, at several parallelism levels; the collector's CPU time is this process's rusage.
Each level is run without verification and with the toy verifier inline (--verify.workers 0,
so its cost is in the number). With --vllm it also measures samples/s against the real vLLM
server on the tiny model.

usage: python benchmarks/collector_overhead.py [--n 3000] [--parallel 1,8,64,256] [--vllm]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import shutil
import sys
import time
from pathlib import Path

from prime_rl.collect.config import CollectConfig
from prime_rl.collect.progress import setup_collect_logging
from prime_rl.collect.runner import collect
from prime_rl.config import load_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.support
from tests.support.http_server import instant_server_process  # noqa: E402


def cpu_s() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def write_tasks(path: Path, n: int) -> None:
    path.write_text(
        "".join(json.dumps({"id": i, "prompt": f"Say something with vowels ({i})."}) + "\n" for i in range(n))
    )


def run_level(
    tasks: Path, work: Path, url: str, model: str, parallel: int, max_tokens: int, verify: bool
) -> dict:
    out = work / f"p{parallel}_{'verify' if verify else 'noverify'}.jsonl"
    for f in work.glob(out.stem + "*"):
        f.unlink()
    setup_collect_logging(out.with_name(out.stem + "_collect.log"), level="INFO")
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
            model,
            "--env",
            "toy",
            "--parallel",
            str(parallel),
            "--responses_create_params.max_output_tokens",
            str(max_tokens),
            "--verify.workers",
            "0",
            "--no-progress",
            *([] if verify else ["--no-verify"]),
        ],
    )
    c0, w0 = cpu_s(), time.perf_counter()
    result = asyncio.run(collect(cfg))
    cpu, wall = cpu_s() - c0, time.perf_counter() - w0
    assert result.failed == 0 and result.written > 0, result.summary()
    return {
        "parallel": parallel,
        "verify": verify,
        "samples": result.written,
        "wall_s": wall,
        "samples_per_s": result.written / wall,
        "cpu_ms_per_rollout": 1000 * cpu / result.written,
        "output_tokens_per_s": result.output_tokens / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="samples per level (instant server)")
    parser.add_argument("--parallel", default="1,8,64,256")
    parser.add_argument("--max_tokens", type=int, default=16)
    parser.add_argument(
        "--vllm", action="store_true", help="also measure against the vLLM server (tiny model)"
    )
    parser.add_argument("--vllm_n", type=int, default=96)
    parser.add_argument("--work", type=Path, default=Path("outputs/bench_collector"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/collector_overhead.json"))
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    levels = [int(p) for p in args.parallel.split(",")]
    tasks = args.work / "tasks.jsonl"
    write_tasks(tasks, args.n)
    rows = []
    with instant_server_process() as url:
        for verify in (False, True):
            for p in levels:
                rows.append(
                    {"server": "instant", **run_level(tasks, args.work, url, "m", p, args.max_tokens, verify)}
                )
                print(json.dumps(rows[-1]), flush=True)
    if args.vllm:
        from prime_rl.dev.server import start_server
        from prime_rl.dev.tiny_model import build_tiny_model

        model = build_tiny_model(args.work / "tiny-model")
        vtasks = args.work / "vllm_tasks.jsonl"
        write_tasks(vtasks, args.vllm_n)
        srv = start_server(model, args.work / "inference")
        try:
            srv.wait_ready(timeout_s=600)
            for p in (1, 8, 32):
                rows.append(
                    {
                        "server": "vllm",
                        **run_level(vtasks, args.work, srv.base_url, srv.model, p, args.max_tokens, True),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
        finally:
            srv.stop()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))
    print("\n| server | verify | parallel | samples/s | collector CPU ms/rollout |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['server']} | {'toy inline' if r['verify'] else 'off'} | {r['parallel']} | {r['samples_per_s']:.0f} | "
            f"{r['cpu_ms_per_rollout']:.3f} |"
        )


if __name__ == "__main__":
    main()
