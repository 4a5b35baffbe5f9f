"""The trainer's packed sdpa attention (one scaled_dot_product_attention call per sample) against
transformers' sdpa with a dense [T, T] block-causal mask (what the trainer did before), on packed
rows (both with the trainer's chunked logprob head) of one micro-batch: the forward and backward of the loss's logprobs, seconds per row.

    .venv/bin/python benchmarks/packed_attention.py [--model models/tiny] [--rows 6]

Both run in this process, alternating row by row, on the same rows; the first row of each is a
warm-up and is not counted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from prime_rl.trainer.config import ModelConfig
from prime_rl.trainer.forward import micro_batch_logprobs
from prime_rl.trainer.logprobs import forward_logprobs, install_logprob_head
from prime_rl.trainer.model import World, load_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.support
from tests.support.packed import block_causal_mask, packed_row  # noqa: E402

CPU = torch.device("cpu")


def timed(fn, *args, **kwargs) -> float:
    """Seconds of ``fn(*args, **kwargs)`` (logprobs and entropies) and the backward of its logprobs."""
    start = time.perf_counter()
    logp, _ = fn(*args, **kwargs)
    logp.sum().backward()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="models/tiny")
    p.add_argument("--rows", type=int, default=6)
    p.add_argument("--tokens", type=int, default=4096, help="tokens per packed row (micro_batch_tokens)")
    p.add_argument("--sample_tokens", type=int, nargs=2, default=(120, 240), help="sample length range")
    args = p.parse_args()

    packed = load_model(ModelConfig(name=args.model, attention="sdpa"), World(0, 1, 0, CPU))
    dense = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa")
    dense.config.use_cache = False
    install_logprob_head(dense, ModelConfig().logprob_chunk_tokens)  # the same head as the trainer's
    lo, hi = args.sample_tokens
    g = torch.Generator().manual_seed(0)
    times: dict[str, list[float]] = {"per sample": [], "dense mask": []}
    for row in range(args.rows + 1):
        lengths: list[int] = []
        while sum(lengths) + hi <= args.tokens:
            lengths.append(int(torch.randint(lo, hi + 1, (1,), generator=g)))
        mb = packed_row(lengths, row)
        ids, pos = mb.input_ids, mb.position_ids[None]
        per_sample = timed(micro_batch_logprobs, packed, mb, 1.0, "sdpa", args.tokens, CPU)
        mask = block_causal_mask(mb.sample_ids)
        with_mask = timed(forward_logprobs, dense, ids, 1.0, position_ids=pos, attention_mask=mask)
        if row:
            times["per sample"].append(per_sample)
            times["dense mask"].append(with_mask)
    print(
        f"rows of about {args.tokens} tokens, samples of {lo}-{hi} tokens, {torch.get_num_threads()} threads"
    )
    for name, ts in times.items():
        print(f"{name:>10}: median {statistics.median(ts):.3f} s per row ({min(ts):.3f}-{max(ts):.3f})")
    ratio = statistics.median(times["per sample"]) / statistics.median(times["dense mask"])
    print(f"per sample / dense mask: {ratio:.2f}")


if __name__ == "__main__":
    main()
