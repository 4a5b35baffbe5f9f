"""Weight publishing cost: write_ms of ``weights/step_N`` against a raw write + fsync of the same bytes.

Loads a random model of each size, then alternates (a) ``WeightPublisher.publish`` (shards,
index, config/tokenizer files, fsyncs, rename, STABLE) and (b) writing the same tensor bytes to
one file and fsyncing it, --repeats times each, in one run; reports medians and their ratio.

usage: python benchmarks/ckpt_write.py [--sizes tiny,medium] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from prime_rl.dev.tiny_model import PRESETS, build_tiny_model
from prime_rl.logging import setup_logging
from prime_rl.trainer.weights import WeightPublisher


def raw_write_ms(tensors: list[torch.Tensor], directory: Path) -> float:
    """Write the tensors' bytes back to back into one file and fsync it."""
    fd, name = tempfile.mkstemp(dir=directory, suffix=".raw")
    start = time.perf_counter()
    with os.fdopen(fd, "wb") as f:
        for t in tensors:
            f.write(memoryview(t.contiguous().view(-1).view(torch.uint8).numpy()))
        f.flush()
        os.fsync(f.fileno())
    ms = (time.perf_counter() - start) * 1000.0
    os.unlink(name)
    return ms


def bench(size: str, repeats: int, out_dir: Path) -> dict:
    from transformers import AutoModelForCausalLM

    model_dir = build_tiny_model(Path("models") / f"bench-{size}", PRESETS[size])
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    root = out_dir / size / "weights"
    publisher = WeightPublisher(model, str(model_dir), root, max_shard_bytes=2 * 1024**3)
    tensors = [v for k, v in state.items() if k not in publisher.skip]
    publisher.publish(state, 0)  # warm-up: page cache, allocator
    pubs, raws = [], []
    for i in range(1, repeats + 1):
        publisher.prune(keep=1, newest=i - 1)
        os.sync()  # start each timed write with no other dirty data pending
        raws.append(raw_write_ms(tensors, root))
        os.sync()
        _, ms, nbytes = publisher.publish(state, i)
        pubs.append(ms)
    return {
        "size": size,
        "bytes": nbytes,
        "repeats": repeats,
        "write_ms_median": statistics.median(pubs),
        "raw_write_fsync_ms_median": statistics.median(raws),
        "ratio": statistics.median(pubs) / statistics.median(raws),
        "write_ms": pubs,
        "raw_ms": raws,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="tiny,medium")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output_dir", type=Path, default=Path("outputs/bench_ckpt_write"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/ckpt_write.json"))
    args = parser.parse_args()
    setup_logging(args.output_dir / "logs" / "trainer" / "rank_0.log", console=False)
    rows = [bench(size, args.repeats, args.output_dir) for size in args.sizes.split(",")]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))
    print("| size | bytes | write_ms median | raw write+fsync median | ratio |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['size']} | {r['bytes'] / 1e6:.1f} MB | {r['write_ms_median']:.1f} | {r['raw_write_fsync_ms_median']:.1f} | {r['ratio']:.2f} |"
        )


if __name__ == "__main__":
    main()
