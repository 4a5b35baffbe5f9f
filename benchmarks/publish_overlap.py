"""Publishing off the critical path: what a step pays for ``weights/step_N``, background vs synchronous.

For each model size, in one run on the same files and bytes:

- raw: the tensors' bytes written back to back into one file and fsynced (the floor);
- sync: ``StepPublisher(background=False)``: the step pays the gather, the whole write, pruning;
- background: ``StepPublisher(background=True)``: after each simulated step the step pays the wait
  for the previous write, the gather and the copy into the reused host buffers (plain host memory
  here: no CUDA); the write itself runs on the writer thread during the next simulated step.

A simulated step is ``--step_s`` seconds of a GPU's step as the host sees it: the host thread
waits (``time.sleep``), so the writer thread has the CPU, as beside a GPU step. ``--step_kind
cpu`` instead runs matmuls on the host for that long (a CPU trainer: the writer competes for the
cores). Reports medians: critical-path ms of each mode, the background write's own write_ms
(``[ckpt] write.done``) against the raw write, and publish's share of a step (critical-path
publish / (step + critical-path publish)).

usage: python benchmarks/publish_overlap.py [--sizes small,medium] [--steps 6] [--step_s 2.0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
from ckpt_write import raw_write_ms  # benchmarks/ is the script's directory

from prime_rl.dev.tiny_model import PRESETS, build_tiny_model
from prime_rl.logging import setup_logging
from prime_rl.trainer.publish_async import StepPublisher
from prime_rl.trainer.weights import WeightPublisher


def simulated_step(seconds: float, kind: str) -> None:
    """``seconds`` of a training step: the host idle (a GPU step) or busy with matmuls (a CPU step)."""
    if kind == "sleep":
        time.sleep(seconds)
        return
    a = torch.randn(512, 512)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        a = torch.tanh(a @ a)


def run_mode(
    model, writer: WeightPublisher, background: bool, steps: int, step_s: float, kind: str, first: int
):
    """``steps`` simulated steps, each followed by a publish; returns (critical ms, write ms) per step."""
    written: list[float] = []
    publish = writer.publish

    def recording_publish(state, step, **kw):
        out = publish(state, step, **kw)
        written.append(out[1])
        return out

    writer.publish = recording_publish  # type: ignore[method-assign]
    publishing = StepPublisher(writer, model, keep=2, background=background)
    critical, waited = [], []
    try:
        for i in range(steps):
            simulated_step(step_s, kind)
            os.sync()  # no other dirty data pending when the write starts
            timing = publishing.publish(model, first + i)
            critical.append(timing.write_ms)
            waited.append(timing.write_wait_ms or 0.0)
        publishing.finish()
    finally:
        writer.publish = publish  # type: ignore[method-assign]
    return critical, written, waited


def bench(size: str, steps: int, step_s: float, kind: str, out_dir: Path) -> dict:
    from transformers import AutoModelForCausalLM

    model_dir = build_tiny_model(Path("models") / f"bench-{size}", PRESETS[size])
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    root = out_dir / size / "weights"
    writer = WeightPublisher(model, str(model_dir), root, max_shard_bytes=2 * 1024**3)
    tensors = [v.detach() for k, v in model.state_dict().items() if k not in writer.skip]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    raws = []
    for _ in range(steps):
        os.sync()
        raws.append(raw_write_ms(tensors, root))
    sync_crit, sync_write, _ = run_mode(model, writer, False, steps, step_s, kind, first=1)
    bg_crit, bg_write, bg_waited = run_mode(model, writer, True, steps, step_s, kind, first=steps + 1)
    # the first background publish allocates the host buffers (once per run): reported on its own
    raw, sync, bg = statistics.median(raws), statistics.median(sync_crit), statistics.median(bg_crit[1:])
    bg_w = statistics.median(bg_write)
    return {
        "size": size,
        "bytes": nbytes,
        "steps": steps,
        "step_s": step_s,
        "step_kind": kind,
        "raw_write_fsync_ms": raw,
        "sync_critical_ms": sync,
        "background_critical_ms": bg,
        "background_first_critical_ms": bg_crit[0],
        "background_write_ms": bg_w,
        "sync_write_ms": statistics.median(sync_write),
        "background_over_sync": bg / sync,
        "background_write_over_raw": bg_w / raw,
        "sync_share_of_step": sync / (step_s * 1000.0 + sync),
        "background_share_of_step": bg / (step_s * 1000.0 + bg),
        "raw_ms": raws,
        "sync_critical": sync_crit,
        "background_critical": bg_crit,
        "background_write": bg_write,
        "background_waited": bg_waited,
        "background_wait_ms": statistics.median(bg_waited[1:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,medium")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--step_s", type=float, default=2.0)
    parser.add_argument("--step_kind", choices=("sleep", "cpu"), default="sleep")
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/bench_publish_overlap"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/publish_overlap.json"))
    args = parser.parse_args()
    setup_logging(args.output_dir / "logs" / "trainer" / "rank_0.log", console=False)
    rows = [bench(s, args.steps, args.step_s, args.step_kind, args.output_dir) for s in args.sizes.split(",")]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))
    print(f"step: {args.step_s} s ({args.step_kind}), {args.steps} steps per mode; medians in ms")
    print(
        "| size | bytes | raw write+fsync | sync: in the step | background: in the step | "
        "of it, waiting | background / sync | background write | background write / raw | "
        "share of a step: sync | background | first background publish (allocates) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['size']} | {r['bytes'] / 1e6:.1f} MB | {r['raw_write_fsync_ms']:.1f} | {r['sync_critical_ms']:.1f} | "
            f"{r['background_critical_ms']:.1f} | {r['background_wait_ms']:.1f} | {r['background_over_sync']:.3f} | {r['background_write_ms']:.1f} | "
            f"{r['background_write_over_raw']:.2f} | {100 * r['sync_share_of_step']:.1f}% | "
            f"{100 * r['background_share_of_step']:.2f}% | {r['background_first_critical_ms']:.1f} |"
        )


if __name__ == "__main__":
    main()
