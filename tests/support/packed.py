"""Packed micro-batches of random tokens for the trainer's tests and benchmarks."""

from __future__ import annotations

import torch

from prime_rl.trainer.data import MicroBatch


def packed_row(lengths: list[int], seed: int = 0) -> MicroBatch:
    """One micro-batch row of ``len(lengths)`` samples of random token ids (3..1999), positions
    restarting at each sample, every token a loss token, advantages and logprobs 0."""
    g = torch.Generator().manual_seed(seed)
    n = sum(lengths)
    zeros = torch.zeros(n)
    return MicroBatch(
        input_ids=torch.randint(3, 2000, (n,), generator=g),
        position_ids=torch.cat([torch.arange(k) for k in lengths]),
        loss_mask=torch.ones(n, dtype=torch.bool),
        advantages=zeros,
        inference_logprobs=zeros,
        sample_ids=torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths)),
        num_samples=len(lengths),
    )


def block_causal_mask(sample_ids: torch.Tensor) -> torch.Tensor:
    """[1, 1, T, T] bool mask of a packed row: causal within each sample, nothing across samples
    (the dense reference the trainer's attention is checked and timed against)."""
    t = sample_ids.numel()
    causal = torch.ones(t, t, dtype=torch.bool).tril()
    return (causal & (sample_ids[:, None] == sample_ids[None, :]))[None, None]
