"""Trainer throughput on one device: tokens/s, MFU, peak memory and the step's parts (forward,
backward, optimizer, publish) for each sequence length x micro-batch size.

One process, one device (a CUDA GPU when there is one). The model is any HF model dir
(``--model``) or a random model of a named shape (``--shape qwen2.5-0.5b``; ``qwen2.5-1.5b``;
``tiny`` for a CPU smoke run), built once under ``--models_dir``. Each step is the trainer's own
compute: the packed micro-batches through :func:`prime_rl.trainer.forward.micro_batch_loss`
(attention, the chunked logprob head, the policy loss), backward,
gradient clipping and AdamW, then the publish of ``weights/step_N`` as the trainer does it
(``--publish background``, the default: the part the step pays; ``sync``: the whole write); each
part is timed with the device synchronised at its end (the trainer itself adds no such syncs).

Samples are ``seq_len`` tokens each (the first eighth prompt, the rest completion with loss),
packed ``micro_batch_tokens // seq_len`` to a micro-batch; a step is ``--tokens_per_step``
tokens (default 128 x 1,024, the issue's 128 samples x 1,024 tokens).

MFU = model FLOPs per step / step time / the device's peak dense bf16 FLOP/s (``--peak_tflops``;
default by device name: H100 and H200 989.4, A100 312; none on CPU). Model FLOPs per step::

    6 * N * tokens + 6 * layers * heads * head_dim * sum_i L_i^2

``N``: the parameters that multiply activations (every parameter, less the input embedding
unless it is tied to the output projection, which multiplies); ``6 N`` per token is the forward
(2) and backward (4) of those products. The second term is causal attention's QK^T and AV over
each sample alone (``4 L^2 heads head_dim / 2`` forward per layer, three times that with the
backward). Work that is recomputation (activation checkpointing, the chunked head's second
projection) or masked out (a dense mask's cross-sample blocks, padding) is not counted.

usage: python benchmarks/trainer_gpu.py --shape qwen2.5-0.5b --seq_lens 4096,16384,32768
           --micro_batch_tokens 8192,16384,32768 [--steps 3] [--activation_checkpointing] [--compile]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch

from prime_rl.dev.tiny_model import PRESETS, build_tiny_model
from prime_rl.trainer.config import LossConfig, ModelConfig
from prime_rl.trainer.data import MicroBatch
from prime_rl.trainer.forward import micro_batch_loss
from prime_rl.trainer.loss import normalizer_for
from prime_rl.trainer.model import World, load_model, resolve_attention
from prime_rl.trainer.publish_async import StepPublisher
from prime_rl.trainer.weights import WeightPublisher

PEAK_TFLOPS = {"H100": 989.4, "H200": 989.4, "A100": 312.0}
"""Dense bf16 peak of a device whose name contains the key (SXM parts)."""


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def peak_tflops(name: str) -> float | None:
    return next((v for k, v in PEAK_TFLOPS.items() if k in name), None)


def matmul_params(model: torch.nn.Module) -> int:
    """Parameters that multiply activations: all, less an input embedding not tied to the output."""
    total = sum(p.numel() for p in model.parameters())
    embed = model.get_input_embeddings().weight
    tied = embed is model.get_output_embeddings().weight
    return total if tied else total - embed.numel()


def step_flops(model: torch.nn.Module, lengths: list[int]) -> float:
    """Model FLOPs of one training step over samples of ``lengths`` (module docstring)."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    attention = 6 * c.num_hidden_layers * c.num_attention_heads * head_dim * sum(n * n for n in lengths)
    return 6.0 * matmul_params(model) * sum(lengths) + attention


def micro_batches(seq_len: int, micro_batch_tokens: int, tokens_per_step: int, vocab: int, seed: int):
    """The step's packed micro-batches and its samples' lengths."""
    per_mb = max(1, micro_batch_tokens // seq_len)
    n_samples = max(per_mb, math.ceil(tokens_per_step / seq_len))
    g = torch.Generator().manual_seed(seed)
    prompt = seq_len // 8
    out = []
    for first in range(0, n_samples, per_mb):
        k = min(per_mb, n_samples - first)
        n = k * seq_len
        loss_mask = torch.ones(k, seq_len, dtype=torch.bool)
        loss_mask[:, :prompt] = False
        out.append(
            MicroBatch(
                input_ids=torch.randint(0, vocab, (n,), generator=g),
                position_ids=torch.arange(seq_len).repeat(k),
                loss_mask=loss_mask.flatten(),
                advantages=torch.randn(n, generator=g),
                inference_logprobs=-torch.rand(n, generator=g),
                sample_ids=torch.arange(k).repeat_interleave(seq_len),
                num_samples=k,
            )
        )
    return out, [seq_len] * n_samples


class Timer:
    """Seconds per named part, the device synchronised at each part's end."""

    def __init__(self, device: torch.device) -> None:
        self.device, self.parts = device, {}

    def lap(self, name: str, start: float) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = time.perf_counter()
        self.parts[name] = self.parts.get(name, 0.0) + now - start
        return now


def train_step(model, optimizer, mbs, loss_cfg: LossConfig, attention: str, mbt: int, timer: Timer) -> None:
    tokens = float(sum(int(mb.loss_mask.sum()) for mb in mbs))
    normalizer = normalizer_for(loss_cfg, tokens, float(sum(mb.num_samples for mb in mbs)))
    optimizer.zero_grad(set_to_none=True)
    for mb in mbs:
        start = time.perf_counter()
        loss, _ = micro_batch_loss(model, mb, 1.0, attention, mbt, loss_cfg, normalizer, timer.device)
        start = timer.lap("forward", start)
        loss.backward()
        timer.lap("backward", start)
    start = time.perf_counter()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    timer.lap("optimizer", start)


@contextlib.contextmanager
def _profiled(args, device: torch.device, seq_len: int, mbt: int, on: bool):
    """With ``--profile DIR``: one more train_step after the measured ones, under torch.profiler,
    its operators by self device time written to ``DIR/profile_<seq_len>_<mbt>.txt``."""
    if not on:
        yield
        return
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        yield
    key = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    args.profile.mkdir(parents=True, exist_ok=True)
    table = prof.key_averages().table(sort_by=key, row_limit=30, max_name_column_width=70)
    (args.profile / f"profile_{seq_len}_{mbt}.txt").write_text(table)


def run_one(model, optimizer, publisher, args, seq_len: int, mbt: int, device: torch.device) -> dict:
    """Warm-up steps, then ``args.steps`` measured ones; medians of the parts."""
    attention = resolve_attention(ModelConfig(attention=args.attention), device)
    mbs, lengths = micro_batches(seq_len, mbt, args.tokens_per_step, model.config.vocab_size, seed=seq_len)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    steps = []
    measured = range(args.warmup, args.warmup + args.steps)
    for i in range(measured.stop + (1 if args.profile else 0)):  # the profiled step is not measured
        timer = Timer(device)
        start = time.perf_counter()
        with _profiled(args, device, seq_len, mbt, on=i == measured.stop):
            train_step(model, optimizer, mbs, LossConfig(), attention, mbt, timer)
        if publisher is not None:
            # what the trainer's step pays: with --publish background the wait for the previous
            # write, the gather and the copy to host; the write itself runs beside the next step
            t = time.perf_counter()
            publisher.publish(model, i + 1)
            timer.lap("publish", t)
        timer.parts["step"] = time.perf_counter() - start
        if i in measured:
            steps.append(timer.parts)
    if publisher is not None:
        publisher.wait()  # the next configuration starts with no write in flight
    med = {k: statistics.median(s[k] for s in steps) for k in steps[0]}
    tokens = sum(lengths)
    flops = step_flops(model, lengths)
    peak = args.peak_tflops or peak_tflops(device_name(device))
    return {
        "seq_len": seq_len,
        "micro_batch_tokens": mbt,
        "attention": attention,
        "tokens": tokens,
        "tokens_per_s": tokens / med["step"],
        "mfu": flops / med["step"] / (peak * 1e12) if peak else None,
        "peak_memory_gb": torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None,
        **{f"{k}_s": v for k, v in med.items()},
        "publish_share": med.get("publish", 0.0) / med["step"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, help="an HF model dir (default: a random model of --shape)")
    p.add_argument("--shape", choices=sorted(PRESETS), default="qwen2.5-0.5b")
    p.add_argument("--models_dir", type=Path, default=Path("models"))
    p.add_argument("--seq_lens", default="4096,16384,32768", help="comma-separated sample lengths")
    p.add_argument("--micro_batch_tokens", default="8192,16384,32768", help="comma-separated token budgets")
    p.add_argument("--tokens_per_step", type=int, default=128 * 1024)
    p.add_argument("--steps", type=int, default=3, help="measured steps per configuration")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured steps first (compilation, allocator)")
    p.add_argument("--attention", choices=["auto", "sdpa", "flex"], default="auto")
    p.add_argument("--logprob_chunk_tokens", type=int, default=2048, help="0: full logits")
    p.add_argument("--activation_checkpointing", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument(
        "--publish",
        choices=["background", "sync", "none"],
        default="background",
        help="publish weights/step_N after each step as the trainer does (weights.background), or not at all",
    )
    p.add_argument("--peak_tflops", type=float, help="the device's dense bf16 peak (default: by device name)")
    p.add_argument(
        "--profile",
        type=Path,
        help="a folder: one more step of each configuration profiled there (not timed)",
    )
    p.add_argument("--json", type=Path, default=Path("benchmarks/results/trainer_gpu.json"))
    args = p.parse_args()

    model_dir = args.model or build_tiny_model(args.models_dir / f"bench-{args.shape}", PRESETS[args.shape])
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    cfg = ModelConfig(
        name=str(model_dir),
        attention=args.attention,
        logprob_chunk_tokens=args.logprob_chunk_tokens or None,
        activation_checkpointing=args.activation_checkpointing,
        compile=args.compile,
    )
    model = load_model(cfg, World(0, 1, 0, device))
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        publisher = None
        if args.publish != "none":
            writer = WeightPublisher(model, str(model_dir), Path(tmp), 2 * 1024**3)
            publisher = StepPublisher(writer, model, keep=1, background=args.publish == "background")
        for seq_len in (int(x) for x in args.seq_lens.split(",")):
            for mbt in (int(x) for x in args.micro_batch_tokens.split(",")):
                if mbt < seq_len:
                    continue  # a sample longer than the budget is alone: the next budget covers it
                try:
                    row = run_one(model, optimizer, publisher, args, seq_len, mbt, device)
                except torch.OutOfMemoryError as e:
                    row = {"seq_len": seq_len, "micro_batch_tokens": mbt, "oom": str(e).splitlines()[0]}
                    optimizer.zero_grad(set_to_none=True)
                    torch.cuda.empty_cache()
                row.update(
                    device=device_name(device), model=str(model_dir), publish=args.publish, **_switches(cfg)
                )
                rows.append(row)
                print(json.dumps(row), flush=True)
        if publisher is not None:
            publisher.finish()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2))


def _switches(cfg: ModelConfig) -> dict:
    return {
        "logprob_chunk_tokens": cfg.logprob_chunk_tokens,
        "activation_checkpointing": cfg.activation_checkpointing,
        "compile": cfg.compile,
    }


if __name__ == "__main__":
    main()
