"""Analyzer speed: the whole report (parse, statistics, findings, SUMMARY.md, timeline.txt/.png) of
big synthetic logs, in lines per second and peak memory.

Two logs of --lines lines each: a realistic mix (1 tagged line in 10, the rest vLLM-style noise)
and the worst case where every line is tagged. The tagged lines are a real run's worth of steps
(unique trace ids, every step's weight update, generation, scoring and trainer lines from
``tests/support/synthetic_logs.py``), so the report has one update and one batch per step to
draw. Each analysis runs in its own process (``python -m prime_rl.analysis``), whose peak RSS is
read from its own ``getrusage(RUSAGE_SELF)``.

usage: python benchmarks/analyzer_speed.py [--lines 1000000] [--lines 10000000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.support
from tests.support.synthetic_logs import make_run  # noqa: E402

NOISE = (
    "2026-01-01 12:00:00.123 | INFO    | (vllm.engine) Avg prompt throughput: 1234.5 tokens/s, Avg generation "
    "throughput: 2345.6 tokens/s, Running: 256 reqs, Waiting: 12 reqs, GPU KV cache usage: 45.6%"
)
STEPS_PER_PIECE = 2000


def build(path: Path, lines: int, tagged_every: int) -> int:
    """Write ``lines`` lines to ``path``; returns the number of steps the tagged lines cover."""
    n = step = 0
    with open(path, "w") as f:
        while n < lines:
            run = make_run(
                "healthy", steps=STEPS_PER_PIECE, seed=step, first_step=step, start_offset_s=step * 2.0
            )
            for line in sorted(run.orchestrator + run.inference + run.trainer, key=lambda x: x[:23]):
                if n >= lines:
                    break
                for _ in range(tagged_every - 1):
                    f.write(NOISE + "\n")
                f.write(line + "\n")
                n += tagged_every
            step += STEPS_PER_PIECE
    return step


# runs the analyzer's CLI in a fresh process and prints that process's own peak RSS (KiB) last on
# stderr: RUSAGE_CHILDREN would report the largest of all children so far, not this one's
_CHILD = """
import resource, runpy, sys
sys.argv = ["prime_rl.analysis", *sys.argv[1:]]
try:
    runpy.run_module("prime_rl.analysis", run_name="__main__")
finally:
    print("peak_rss_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


def measure(path: Path, out: Path) -> dict[str, float]:
    """Run the analyzer on ``path`` in a child process: the whole run's seconds (start, imports,
    parse, rules, report), the parse and collection's alone, and that child's peak RSS."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    secs = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    peak_mb = int(done.stderr.rsplit("peak_rss_kib", 1)[1].split()[0]) / 1024.0
    summary = json.loads((out / "summary.json").read_text())
    # the parse's own "seconds" must not replace the whole run's: the report after the parse
    # (rules, tables, summary.json, the timeline) is part of what a user waits for
    return {
        **summary["parse"],
        "seconds": secs,
        "peak_rss_mb": peak_mb,
        "parse_s": summary["parse"]["seconds"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lines", type=int, action="append", help="lines per log (repeatable; default 1000000)"
    )
    parser.add_argument("--dir", type=Path, default=Path("outputs/bench_analyzer"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/analyzer_speed.json"))
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for lines in args.lines or [1_000_000]:
        for name, every in (("mixed_1_in_10_tagged", 10), ("all_tagged", 1)):
            path = args.dir / f"{name}_{lines}.log"
            steps = build(path, lines, every)
            r = measure(path, args.dir / f"out_{name}_{lines}")
            row = {
                "log": name,
                "lines": r["lines"],
                "tagged": r["tagged"],
                "steps": steps,
                "mb": path.stat().st_size / 1e6,
                "seconds": r["seconds"],
                "lines_per_s": r["lines"] / r["seconds"],
                "parse_s": r["parse_s"],
                "peak_rss_mb": r["peak_rss_mb"],
            }
            rows.append(row)
            print(
                f"{name}: {row['lines']} lines ({row['mb']:.0f} MB, {row['tagged']} tagged, ~{steps} steps): "
                f"report in {row['seconds']:.1f} s = {row['lines_per_s'] / 1e6:.2f}M lines/s "
                f"(parse and collection {row['parse_s']:.1f} s of it), peak RSS {row['peak_rss_mb']:.0f} MB",
                flush=True,
            )
            path.unlink()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
