"""Overlap of generation and training: step time at async_level 1 against async_level 0 and max(gen, train).

Runs the whole loop (`rl`, configs/debug/rl.toml on the tiny model and the toy task) twice with
the same settings, async_level 0 then 1. From the async_level-0 run, where nothing overlaps, it
takes the pure generation time per step (the orchestrator's ``gen_ms``) and the pure training
time per step (the trainer's ``train_s`` plus its weight publishing). The step time of a run is
the median interval between batches in steady state (the orchestrator's ``step_s``, steps >= 3).

usage: python benchmarks/overlap.py [--steps 16] [--max_tokens 48]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root
from benchmarks.children import run_grouped  # noqa: E402

from prime_rl.dev.server import free_port

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "debug" / "rl.toml"


def run(out: Path, async_level: int, args) -> list[dict]:
    if out.exists():
        shutil.rmtree(out)
    argv = [
        sys.executable,
        "-m",
        "prime_rl.launcher.main",
        "--config",
        str(CONFIG),
        "--output_dir",
        str(out),
        "--max_steps",
        str(args.steps),
        "--async_level",
        str(async_level),
        "--inference",
        json.dumps({"port": free_port()}),
        "--orchestrator",
        json.dumps({"sampling": {"max_tokens": args.max_tokens}, "batch_size": args.batch_size}),
        "--trainer",
        json.dumps({"cpu_threads": args.trainer_threads, "optim": {"lr": 3e-3}}),
    ]
    done = run_grouped(argv, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(done.stdout[-3000:] + done.stderr[-3000:])
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--max_tokens", type=int, default=48, help="sets the generation time per step")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument(
        "--trainer_threads",
        type=int,
        default=1,
        help="trainer CPU threads; 1 leaves the other core to generation (vLLM binds one core)",
    )
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/bench_overlap"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/overlap.json"))
    args = parser.parse_args()
    sync = run(args.output_dir / "async0", 0, args)
    asyn = run(args.output_dir / "async1", 1, args)

    def steady(rows, process, key):
        return [r[key] for r in rows if r["process"] == process and r["step"] >= 3 and r.get(key) is not None]

    gen_s = statistics.median(steady(sync, "orchestrator", "gen_ms")) / 1000.0
    train_s = statistics.median(
        [
            a + (b or 0) / 1000.0
            for a, b in zip(
                steady(sync, "trainer", "train_s"), steady(sync, "trainer", "write_ms"), strict=False
            )
        ]
    )
    step0 = statistics.median(steady(sync, "orchestrator", "step_s"))
    step1 = statistics.median(steady(asyn, "orchestrator", "step_s"))
    ideal = max(gen_s, train_s)
    row = {
        "gen_s": gen_s,
        "train_s": train_s,
        "step_s_async0": step0,
        "step_s_async1": step1,
        "async1_over_max": step1 / ideal,
        "async1_over_async0": step1 / step0,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(row, indent=2))
    print(f"generation {gen_s:.2f}s/step, training {train_s:.2f}s/step (from the async_level=0 run)")
    print(f"step time: async_level=0 {step0:.2f}s, async_level=1 {step1:.2f}s")
    print(
        f"async1 / max(gen, train) = {row['async1_over_max']:.2f}; async1 / async0 = {row['async1_over_async0']:.2f}"
    )


if __name__ == "__main__":
    main()
