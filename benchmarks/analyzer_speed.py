"""Analyzer speed: the whole report (parse, statistics, findings, SUMMARY.md, timeline.txt/.png) of
big synthetic logs, in lines per second of wall time and per CPU-second (the first grows with the
cores the run can keep busy, the second says how much work each line costs) and peak memory.

Three logs of --lines lines each: a realistic mix (1 tagged line in 10, the rest vLLM-style
noise), the worst case where every line is tagged, and an offline collector's log (every line a
``[collect]`` rollout line on four servers, some failed or retried). The trio's tagged lines are a
real run's worth of steps (unique trace ids, every step's weight update, generation, scoring and
trainer lines from ``tests/support/synthetic_logs.py``), so the report has one update and one
batch per step to draw. Each analysis runs in its own process (``analyze-logs``' entry), whose peak
RSS is read from its own ``getrusage(RUSAGE_SELF)``.

Each run is also split into its phases: the interpreter's start with the CLI's imports (about
0.2-0.3 s on a 2-core host, the same for every log), the analysis (parse, statistics, findings:
what the issue's baseline of 1.42M lines/s timed, in-process) and the report's files. Item 8's
targets (1M lines/s all tagged, 3M on the mix) are read against both the whole run and the analysis.

usage: python benchmarks/analyzer_speed.py [--lines 1000000] [--lines 10000000] [--logs collector] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.support
from benchmarks.children import run_grouped  # noqa: E402
from tests.support.synthetic_logs import make_run  # noqa: E402

NOISE = (
    "2026-01-01 12:00:00.123 | INFO    | (vllm.engine) Avg prompt throughput: 1234.5 tokens/s, Avg generation "
    "throughput: 2345.6 tokens/s, Running: 256 reqs, Waiting: 12 reqs, GPU KV cache usage: 45.6%"
)
STEPS_PER_PIECE = 2000
LOGS = {"mixed_1_in_10_tagged": 10, "all_tagged": 1}
"""The trio's logs: one tagged line in this many."""


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
        _on_disk(f)
    return step


def _on_disk(f) -> None:
    """Wait until the log just written is on disk: otherwise the kernel writes it back while it is
    analysed (about 0.5 s of the 10M-line all-tagged run, in CPU and disk time that is not the
    analyzer's; a user's logs were written before)."""
    f.flush()
    os.fsync(f.fileno())


COLLECT = (
    "2026-01-01 {h:02d}:{m:02d}:{s:02d}.{ms:03d} | INFO    | [collect][c{i:09d}] {event} task={i} repeat=0 "
    "status={status} dur_ms={dur:.1f} queue_ms={queue:.1f} gen_ms={gen:.1f} verify_ms={verify:.1f} "
    "out_tokens=120 attempts=1 url=http://h{server}:8000"
)


def build_collector(path: Path, lines: int, servers: int = 4) -> int:
    """Write an offline collector's log of ``lines`` [collect] lines (``collect-rollouts``' format):
    a rollout per line on ``servers`` servers, one in 50 failed, one in 100 a 429 retry; returns
    the number of servers."""
    rng = random.Random(0)
    with open(path, "w") as f:
        for i in range(lines):
            s = i // 1000  # a thousand lines a second
            event, status = "rollout.done", 200
            if i % 100 == 99:
                event, status = "request.retry", 429
            elif i % 50 == 49:
                event, status = "rollout.failed", 500
            gen = rng.uniform(100, 900)
            f.write(
                COLLECT.format(
                    h=s // 3600 % 24,
                    m=s // 60 % 60,
                    s=s % 60,
                    ms=i % 1000,
                    i=i,
                    event=event,
                    status=status,
                    dur=gen + 20,
                    queue=rng.uniform(0, 5),
                    gen=gen,
                    verify=rng.uniform(1, 10),
                    server=i % servers,
                )  # fmt: skip
                + "\n"
            )
        _on_disk(f)
    return servers


# runs the analyzer's CLI (``analyze-logs``' entry, ``prime_rl.analysis.__main__:cli``) in a fresh
# process and prints last on stderr that process's own peak RSS (KiB) and CPU seconds (user + system,
# all its threads; RUSAGE_CHILDREN would report the largest of all children so far, not this one's),
# with the seconds of its phases: its imports, and of the run after them the report's files
# (``write_report``; the rest is the analysis: parse, statistics, findings). The CLI leaves through
# os._exit (no teardown): the figures are printed on the way out there too
_CHILD = """
import os, resource, sys, time
began = time.perf_counter()
sys.argv = ["analyze-logs", *sys.argv[1:]]
import prime_rl.analysis.__main__ as entry
imported = time.perf_counter()
report_s = 0.0
write_report = entry.write_report
def timed_report(*args, **kwargs):
    global report_s
    start = time.perf_counter()
    try:
        return write_report(*args, **kwargs)
    finally:
        report_s += time.perf_counter() - start
entry.write_report = timed_report
def usage():
    own = resource.getrusage(resource.RUSAGE_SELF)
    print("cpu_s", own.ru_utime + own.ru_stime, "peak_rss_kib", own.ru_maxrss, "in_process_s",
          time.perf_counter() - began, "imports_s", imported - began, "report_s", report_s,
          file=sys.stderr, flush=True)
leave = os._exit
def _exit(code):
    usage()
    leave(code)
os._exit = _exit
try:
    entry.cli()
finally:
    usage()
"""


def measure(path: Path, out: Path) -> dict[str, float]:
    """Run the analyzer on ``path`` in a child process. Returns the whole run's seconds
    (``seconds``: the interpreter's start, the imports, the analysis and the report's files, as a
    user waits for them), and of them: ``startup_s`` (the interpreter's start and the CLI's imports,
    the same for every log), ``analysis_s`` (parse, statistics and findings: what the issue's
    baseline of 1.42M lines/s timed, in-process), ``report_s`` (SUMMARY.md, the tables, timeline and
    summary.json), ``parse_s`` (the parse's own seconds, from summary.json); the child's CPU seconds
    (all its threads: how many cores the run kept busy) and peak RSS."""
    start = time.perf_counter()
    done = run_grouped([sys.executable, "-c", _CHILD, str(path), "--out", str(out)])
    secs = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    tail = done.stderr.rsplit("cpu_s", 1)[1].split()
    figures = dict(zip(tail[1::2], map(float, tail[2::2]), strict=False))
    cpu_s, in_process_s, report_s = float(tail[0]), figures["in_process_s"], figures["report_s"]
    summary = json.loads((out / "summary.json").read_text())
    # the parse's own "seconds" must not replace the whole run's: the report after the parse
    # (rules, tables, summary.json, the timeline) is part of what a user waits for
    return {
        **summary["parse"],
        "seconds": secs,
        "startup_s": secs - in_process_s + figures["imports_s"],
        "analysis_s": in_process_s - figures["imports_s"] - report_s,
        "report_s": report_s,
        "cpu_s": cpu_s,
        "peak_rss_mb": figures["peak_rss_kib"] / 1024.0,
        "parse_s": summary["parse"]["seconds"],
    }


def _median_run(path: Path, out: Path, runs: int) -> dict[str, float]:
    """:func:`measure` ``runs`` times; the run of the median whole-run seconds (a busy host moves
    single runs by tens of percent)."""
    results = sorted((measure(path, out) for _ in range(runs)), key=lambda r: r["seconds"])
    return results[(len(results) - 1) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lines", type=int, action="append", help="lines per log (repeatable; default 1000000)"
    )
    parser.add_argument(
        "--logs",
        default=",".join([*LOGS, "collector"]),
        help="which logs (comma-separated): mixed_1_in_10_tagged, all_tagged, collector (every line an "
        "offline collector's [collect] line; its 'steps' column is its servers)",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=1,
        help="analyses of each log; the one of the median whole-run time is reported (default 1)",
    )
    parser.add_argument("--dir", type=Path, default=Path("outputs/bench_analyzer"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/analyzer_speed.json"))
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for lines in args.lines or [1_000_000]:
        for name in args.logs.split(","):
            path = args.dir / f"{name}_{lines}.log"
            steps = build_collector(path, lines) if name == "collector" else build(path, lines, LOGS[name])
            r = _median_run(path, args.dir / f"out_{name}_{lines}", args.runs)
            row = {
                "log": name,
                "lines": r["lines"],
                "tagged": r["tagged"],
                "steps": steps,
                "mb": path.stat().st_size / 1e6,
                "seconds": r["seconds"],
                "lines_per_s": r["lines"] / r["seconds"],
                "startup_s": r["startup_s"],
                "analysis_s": r["analysis_s"],
                "analysis_lines_per_s": r["lines"] / r["analysis_s"],
                "report_s": r["report_s"],
                "parse_s": r["parse_s"],
                "cpu_s": r["cpu_s"],
                "lines_per_cpu_s": r["lines"] / r["cpu_s"],
                "peak_rss_mb": r["peak_rss_mb"],
            }
            rows.append(row)
            print(
                f"{name}: {row['lines']} lines ({row['mb']:.0f} MB, {row['tagged']} tagged, ~{steps} steps): "
                f"report in {row['seconds']:.2f} s = {row['lines_per_s'] / 1e6:.2f}M lines/s; of it start and "
                f"imports {row['startup_s']:.2f} s, analysis {row['analysis_s']:.2f} s = "
                f"{row['analysis_lines_per_s'] / 1e6:.2f}M lines/s (parse {row['parse_s']:.2f} s), report's "
                f"files {row['report_s']:.2f} s; {row['cpu_s']:.1f} CPU-s ({row['cpu_s'] / row['seconds']:.1f} "
                f"cores busy, {row['lines_per_cpu_s'] / 1e6:.2f}M lines per CPU-s), peak RSS "
                f"{row['peak_rss_mb']:.0f} MB",
                flush=True,
            )
            path.unlink()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
