"""collect-rollouts with and without --ray: samples/s and the driver's RSS as the run goes.

Runs the real ``collect-rollouts`` command (progress bar off, toy verifier inline, 6 output tokens)
against the instant local OpenAI-compatible test server (its own process): once in one process,
once with ``--ray`` on a local two-node Ray cluster (``tests.support.ray_cluster``: two raylets on
this machine, one CPU and one worker each). The driver's RSS is sampled every 0.2 s and reported
at 10/25/50/75/95% of the output, so a driver that holds records shows a climbing RSS.

usage: python benchmarks/collector_ray.py [--tasks 10000] [--parallel 64] [--modes single,ray]
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.support
from benchmarks.children import grouped  # noqa: E402
from tests.support.collect import cli_command, keys, write_tasks  # noqa: E402
from tests.support.http_server import instant_server_process  # noqa: E402
from tests.support.ray_cluster import no_ray_env, two_node_cluster  # noqa: E402


def run(name: str, cmd: list[str], out: Path) -> dict:
    start = time.monotonic()
    samples: list[tuple[int, int]] = []  # (output bytes, driver RSS)
    cpu = 0.0
    # stderr to a file, read at the end (a pipe unread while polling can fill up and stall the run)
    with tempfile.TemporaryFile("w+") as errors:
        with grouped(cmd, stdout=subprocess.DEVNULL, stderr=errors, text=True, env=no_ray_env()) as proc:
            me = psutil.Process(proc.pid)
            while proc.poll() is None:
                with contextlib.suppress(psutil.Error, FileNotFoundError):
                    samples.append((out.stat().st_size if out.exists() else 0, me.memory_info().rss))
                    times = me.cpu_times()
                    cpu = times.user + times.system
                time.sleep(0.2)
        errors.seek(0)
        err = errors.read()
    wall = time.monotonic() - start
    summary = next((line for line in err.splitlines() if line.startswith("collected")), err[-500:])
    pairs = keys(out)
    size = samples[-1][0] if samples else 0
    rss = {
        f"{int(f * 100)}%": next((r >> 20 for n, r in samples if n >= f * size), None)
        for f in (0.1, 0.25, 0.5, 0.75, 0.95)
    }
    return {
        "mode": name,
        "rc": proc.returncode,
        "wall_s": round(wall, 1),
        "pairs": len(pairs),
        "each_once": set(pairs.values()) == {1},
        "peak_rss_mib": max((r for _, r in samples), default=0) >> 20,
        "driver_cpu_ms_per_pair": round(cpu * 1000 / max(1, len(pairs)), 3),
        "rss_mib_by_progress": rss,
        "summary": summary[:120],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--parallel", type=int, default=64)
    parser.add_argument("--modes", default="single,ray")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="collector_ray_"))
    try:
        tasks = write_tasks(work / "tasks.jsonl", args.tasks)
        flags = ["--verify.workers", "0", "--responses_create_params.max_output_tokens", "6"]
        flags += ["--parallel", str(args.parallel)]
        with instant_server_process() as url:
            for mode in args.modes.split(","):
                out = work / f"{mode}.jsonl"
                if mode == "single":
                    print(run(mode, cli_command(tasks, out, url, *flags), out), flush=True)
                elif mode == "ray":
                    with two_node_cluster() as cluster:
                        cmd = cli_command(tasks, out, url, "--ray", cluster.address, *flags)
                        print(run("ray (2 nodes)", cmd, out), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
