"""collect-rollouts at scale: rollouts/s, CPU per rollout and the driver's peak RSS against the number
of tasks (issue 19 item 4: RSS flat in the number of tasks, at most 500 MB at a million).

Each size runs the real ``collect-rollouts`` command in a fresh process against the instant local
OpenAI-compatible test server (its own process), toy verifier inline, progress bar off. The
collector's process reports its own CPU time and peak RSS at exit (``getrusage(RUSAGE_SELF)``);
the tasks file and the output are deleted after each size.

usage: python benchmarks/collector_scale.py [--tasks 10000 --tasks 100000 --tasks 1000000]
       [--parallel 64] [--extra '--ray']   (extra flags for collect-rollouts, e.g. the Ray mode)
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.support
from benchmarks.children import run_grouped  # noqa: E402
from tests.support.http_server import instant_server_process  # noqa: E402

# the collector's CLI in this process; its own CPU seconds and peak RSS (KiB) printed last on stderr
_CHILD = """
import resource, runpy, sys
sys.argv = ["collect-rollouts", *sys.argv[1:]]
try:
    runpy.run_module("prime_rl.collect.main", run_name="__main__")
finally:
    u = resource.getrusage(resource.RUSAGE_SELF)
    print("usage_cpu_s", u.ru_utime + u.ru_stime, "peak_rss_kib", u.ru_maxrss, file=sys.stderr)
"""


def write_tasks(path: Path, n: int) -> None:
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": i, "prompt": f"Say something with vowels ({i})."}) + "\n")


def run_size(n: int, work: Path, url: str, parallel: int, extra: list[str]) -> dict:
    tasks, out = work / f"tasks_{n}.jsonl", work / f"out_{n}.jsonl"
    for f in work.glob(f"out_{n}*"):
        f.unlink()
    write_tasks(tasks, n)
    argv = [
        "--input", str(tasks), "--output", str(out), "--base_urls", url, "--model", "m", "--env", "toy",
        "--parallel", str(parallel), "--responses_create_params.max_output_tokens", "16",
        "--verify.workers", "0", "--no-progress", *extra,
    ]  # fmt: skip
    start = time.perf_counter()
    done = run_grouped([sys.executable, "-c", _CHILD, *argv])
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"collect-rollouts failed ({done.returncode}):\n{done.stderr[-3000:]}")
    tail = done.stderr.rsplit("usage_cpu_s", 1)[1].split()
    cpu_s, rss_mb = float(tail[0]), int(tail[2]) / 1024.0
    with open(out) as f:
        written = sum(1 for _ in f)
    for f in [tasks, *work.glob(f"out_{n}*"), *work.glob(f".out_{n}*")]:  # the lock file too
        f.unlink()
    return {
        "tasks": n,
        "written": written,
        "wall_s": wall,
        "rollouts_per_s": written / wall,
        "cpu_ms_per_rollout": 1000 * cpu_s / max(written, 1),
        "peak_rss_mb": rss_mb,
        "extra": " ".join(extra),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, action="append", help="tasks per run (repeatable)")
    parser.add_argument("--parallel", type=int, default=64)
    parser.add_argument("--extra", default="", help="more collect-rollouts flags, e.g. '--ray'")
    parser.add_argument("--dir", type=Path, default=Path("outputs/bench_collector_scale"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/collector_scale.json"))
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    rows = []
    with instant_server_process() as url:
        for n in args.tasks or [10_000, 100_000]:
            row = run_size(n, args.dir, url, args.parallel, shlex.split(args.extra))
            rows.append(row)
            mode = f" ({row['extra']})" if row["extra"] else ""
            print(
                f"{n} tasks{mode}: {row['written']} written in "
                f"{row['wall_s']:.1f} s = {row['rollouts_per_s']:.0f} rollouts/s, "
                f"{row['cpu_ms_per_rollout']:.2f} CPU ms/rollout, peak RSS {row['peak_rss_mb']:.0f} MB",
                flush=True,
            )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
