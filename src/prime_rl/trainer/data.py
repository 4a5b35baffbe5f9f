"""Micro-batching: whole samples of a rank's rollout batch packed into token-budget rows."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from prime_rl.transport.rollouts import RolloutBatch


@dataclass
class MicroBatch:
    """Samples packed into one row [1, T] for one forward pass."""

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    loss_mask: torch.Tensor
    advantages: torch.Tensor
    inference_logprobs: torch.Tensor
    sample_ids: torch.Tensor  # [T] index of the sample (within the micro-batch) of each token
    num_samples: int


def micro_batches(batch: RolloutBatch, token_budget: int) -> list[MicroBatch]:
    """Pack whole samples, in order, into micro-batches of at most ``token_budget`` tokens."""
    out: list[MicroBatch] = []
    bounds = torch.cumsum(batch.sample_lengths, 0).tolist()
    starts = [0] + bounds[:-1]
    group: list[int] = []
    group_tokens = 0

    def flush() -> None:
        nonlocal group, group_tokens
        if not group:
            return
        lo, hi = starts[group[0]], bounds[group[-1]]
        lens = batch.sample_lengths[group[0] : group[-1] + 1]
        out.append(
            MicroBatch(
                input_ids=batch.input_ids[lo:hi],
                position_ids=batch.position_ids[lo:hi],
                loss_mask=batch.loss_mask[lo:hi],
                advantages=batch.advantages[lo:hi],
                inference_logprobs=batch.inference_logprobs[lo:hi],
                sample_ids=torch.repeat_interleave(torch.arange(len(group)), lens),
                num_samples=len(group),
            )
        )
        group, group_tokens = [], 0

    for i, n in enumerate(batch.sample_lengths.tolist()):
        if group and group_tokens + n > token_budget:
            flush()
        group.append(i)
        group_tokens += n
    flush()
    return out
