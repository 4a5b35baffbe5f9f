"""Memory and time of the loss's logprobs: full logits against the chunked head, forward and backward.

The part of a training step from the last hidden states [T, H] to the logprobs and entropies of
the T tokens and back (the output projection, log-softmax, their gradient), at Qwen2.5-0.5B's
hidden size and vocabulary (896, 151,936) by default. Each (tokens, mode) runs in a fresh child
process that reports its own peak: on a GPU ``max_memory_allocated`` above what the inputs hold,
on CPU the peak RSS above the RSS after the inputs were made (the process's high-water mark).

usage: python benchmarks/logprob_memory.py [--tokens 1024,2048,4096] [--chunk 1024] [--dtype float32]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root
from benchmarks.children import run_grouped  # noqa: E402

_CHILD = """
import json, resource, sys, time
import torch
from prime_rl.trainer.logprobs import chunked_token_logprobs, token_logprobs_and_entropy
tokens, hidden, vocab, chunk, dtype, mode = sys.argv[1:]
tokens, hidden, vocab, chunk = int(tokens), int(hidden), int(vocab), int(chunk)
dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
dt = getattr(torch, dtype)
g = torch.Generator(device=dev).manual_seed(0)
h = (torch.randn(tokens, hidden, device=dev, generator=g) * 0.5).to(dt).requires_grad_(True)
w = (torch.randn(vocab, hidden, device=dev, generator=g) * 0.05).to(dt).requires_grad_(True)
ids = torch.randint(0, vocab, (tokens,), device=dev, generator=g)
def rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
def run():
    if mode == "full":
        logp, _ = token_logprobs_and_entropy(h @ w.T, ids, 1.0)
    else:
        logp, _ = chunked_token_logprobs(h, w, None, ids, 1.0, chunk)
    logp.sum().backward()
    h.grad = w.grad = None
if dev.type == "cuda":
    run(); torch.cuda.synchronize()  # warm-up (kernels, allocator)
    base = torch.cuda.memory_allocated(); torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter(); run(); torch.cuda.synchronize(); secs = time.perf_counter() - start
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
else:
    base = rss_mb()
    start = time.perf_counter(); run(); secs = time.perf_counter() - start
    peak = rss_mb() - base
print(json.dumps({"device": str(dev), "peak_mb": peak, "seconds": secs}))
"""


def measure(tokens: int, hidden: int, vocab: int, chunk: int, dtype: str, mode: str) -> dict:
    args = [str(tokens), str(hidden), str(vocab), str(chunk), dtype, mode]
    done = run_grouped([sys.executable, "-c", _CHILD, *args])
    if done.returncode != 0:
        return {
            "error": done.stderr.strip().splitlines()[-1]
            if done.stderr.strip()
            else f"exit {done.returncode}"
        }
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", default="1024,2048,4096")
    p.add_argument("--hidden", type=int, default=896)
    p.add_argument("--vocab", type=int, default=151936)
    p.add_argument("--chunk", type=int, default=1024)
    p.add_argument("--dtype", default="float32", help="float32 (CPU) or bfloat16 (GPU)")
    p.add_argument("--json", type=Path, default=Path("benchmarks/results/logprob_memory.json"))
    args = p.parse_args()
    rows = []
    for tokens in (int(t) for t in args.tokens.split(",")):
        full = measure(tokens, args.hidden, args.vocab, args.chunk, args.dtype, "full")
        chunked = measure(tokens, args.hidden, args.vocab, args.chunk, args.dtype, "chunked")
        row = {"tokens": tokens, "chunk": args.chunk, "dtype": args.dtype, "full": full, "chunked": chunked}
        if "error" not in full and "error" not in chunked:
            row["memory_ratio"] = chunked["peak_mb"] / full["peak_mb"]
            row["time_ratio"] = chunked["seconds"] / full["seconds"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
