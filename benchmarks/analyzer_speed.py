"""Analyzer parse speed: lines per second over big synthetic logs (target >= 1M lines/s).

Builds two logs: a realistic mix (1 tagged line in 10, the rest vLLM/uvicorn-style noise) and
an all-tagged worst case, each --lines long, then times parse + statistics + diagnosis.

usage: python benchmarks/analyzer_speed.py [--lines 2000000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from prime_rl.analysis.analyze import analyze
from prime_rl.analysis.parser import ParseStats, parse_files
from prime_rl.analysis.thresholds import Thresholds

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.support
from tests.support.synthetic_logs import make_run  # noqa: E402

NOISE = (
    "2026-01-01 12:00:00.123 | INFO    | (vllm.engine) Avg prompt throughput: 1234.5 tokens/s, Avg generation "
    "throughput: 2345.6 tokens/s, Running: 256 reqs, Waiting: 12 reqs, GPU KV cache usage: 45.6%"
)


def build(path: Path, lines: int, tagged_every: int) -> None:
    run = make_run("frontend_queue_saturation", steps=200, seed=0)
    tagged = run.orchestrator + run.inference + run.trainer
    with open(path, "w") as f:
        i = n = 0
        while n < lines:
            if tagged_every == 1 or n % tagged_every == 0:
                f.write(tagged[i % len(tagged)] + "\n")
                i += 1
            else:
                f.write(NOISE + "\n")
            n += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--dir", type=Path, default=Path("outputs/bench_analyzer"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/analyzer_speed.json"))
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, every in (("mixed_1_in_10_tagged", 10), ("all_tagged", 1)):
        path = args.dir / f"{name}.log"
        build(path, args.lines, every)
        stats = ParseStats()
        start = time.perf_counter()
        analysis = analyze(parse_files([("orchestrator", path)], stats), stats, Thresholds())
        secs = time.perf_counter() - start
        rows.append(
            {
                "log": name,
                "lines": stats.lines,
                "tagged": stats.tagged,
                "seconds": secs,
                "lines_per_s": stats.lines / secs,
                "mb": path.stat().st_size / 1e6,
                "primary": analysis.primary.kind if analysis.primary else None,
            }
        )
        print(
            f"{name}: {stats.lines} lines ({rows[-1]['mb']:.0f} MB, {stats.tagged} tagged) in {secs:.2f}s = "
            f"{rows[-1]['lines_per_s'] / 1e6:.2f}M lines/s"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
