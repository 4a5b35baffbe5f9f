"""Trainer throughput (tokens/s) at 1 and 2 ranks on this machine's CPUs.

Writes --steps rollout batches up front (logprobs from the base model; staleness does not matter
for speed), runs the real trainer as one process (all cores) and under torchrun with 2 ranks
(cores split between them), and reports the median of the trainer's own ``tokens_per_s`` metric
(forward + backward + optimizer, all ranks' tokens) over the steps after the first.

usage: python benchmarks/trainer_throughput.py [--size small] [--steps 6] [--samples 32]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root
from benchmarks.children import run_grouped  # noqa: E402

from prime_rl.dev.tiny_model import PRESETS, build_tiny_model
from prime_rl.paths import RunPaths
from prime_rl.trainer.main import command as trainer_command

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.support
from tests.support.rollouts import make_samples, write_step  # noqa: E402


def run(
    model_dir: Path, out: Path, samples: list[dict], steps: int, nproc: int, threads: int, budget: int
) -> dict:
    if out.exists():
        shutil.rmtree(out)
    for step in range(steps):
        write_step(out, step, samples, model_dir, world_size=nproc)
    args = [
        "--model.name",
        str(model_dir),
        "--output_dir",
        str(out),
        "--max_steps",
        str(steps),
        "--async_level",
        "0",
        "--data.micro_batch_tokens",
        str(budget),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = run_grouped(trainer_command(nproc, args), env=env, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout[-3000:] + proc.stderr[-3000:])
    rows = [json.loads(x) for x in RunPaths(out).metrics_file.read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in rows[1:]]
    return {
        "nproc": nproc,
        "threads_per_rank": threads,
        "tokens_per_step": rows[0]["tokens"],
        "tokens_per_s_median": statistics.median(rates),
        "tokens_per_s": rates,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(PRESETS), default="small")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument(
        "--samples", type=int, default=32, help="samples per step (prompt 6 + completion 122 tokens)"
    )
    parser.add_argument("--micro_batch_tokens", type=int, default=1024)
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/bench_trainer_throughput"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/trainer_throughput.json"))
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    model_dir = build_tiny_model(Path("models") / f"bench-{args.size}", PRESETS[args.size])
    vocab = PRESETS[args.size].vocab_size
    samples = make_samples(args.samples // 2, vocab, seed=0, prompt_len=6, completion_len=122)
    rows = [
        run(model_dir, args.output_dir / "1rank", samples, args.steps, 1, cores, args.micro_batch_tokens),
        run(
            model_dir,
            args.output_dir / "2ranks",
            samples,
            args.steps,
            2,
            max(cores // 2, 1),
            args.micro_batch_tokens,
        ),
    ]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"size": args.size, "rows": rows}, indent=2))
    for r in rows:
        print(
            f"{r['nproc']} rank(s) x {r['threads_per_rank']} thread(s): {r['tokens_per_s_median']:.0f} tokens/s "
            f"({r['tokens_per_step']} tokens/step)"
        )
    print(f"2 ranks / 1 rank = {rows[1]['tokens_per_s_median'] / rows[0]['tokens_per_s_median']:.2f}")


if __name__ == "__main__":
    main()
