"""One packed micro-batch through the policy: padding, the attention mask, logprobs and entropies,
and its share of the step's loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from prime_rl.trainer.config import LossConfig
from prime_rl.trainer.data import MicroBatch
from prime_rl.trainer.logprobs import forward_logprobs
from prime_rl.trainer.loss import LossStats, policy_loss
from prime_rl.trainer.model import PAD_SAMPLE, packed_attention_kwargs, padded_length


def pad_row(mb: MicroBatch, length: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, position_ids, sample_ids) of ``mb`` padded at the end to ``length`` tokens.
    The padding is a sample of its own (:data:`~prime_rl.trainer.model.PAD_SAMPLE`) after every
    real token, so causal attention keeps it out of every real token's context."""
    pad = length - mb.input_ids.numel()
    if pad <= 0:
        return mb.input_ids, mb.position_ids, mb.sample_ids
    return (
        F.pad(mb.input_ids, (0, pad)),
        torch.cat([mb.position_ids, torch.arange(pad, dtype=mb.position_ids.dtype)]),
        F.pad(mb.sample_ids, (0, pad), value=PAD_SAMPLE),
    )


def micro_batch_logprobs(
    model: torch.nn.Module,
    mb: MicroBatch,
    temperature: float,
    attention: str,
    micro_batch_tokens: int,
    device: torch.device,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprobs (with gradient) and entropies (with one only with ``entropy_grad``) of ``mb``'s
    tokens, [T] each. With ``flex`` attention the row is padded to
    :func:`~prime_rl.trainer.model.padded_length` first (one compiled shape); the padding's outputs
    are not computed or returned."""
    tokens = mb.input_ids.numel()
    length = padded_length(tokens, micro_batch_tokens) if attention == "flex" else tokens
    ids, positions, samples = pad_row(mb, length)
    return forward_logprobs(
        model,
        ids.to(device),
        temperature,
        tokens,
        entropy_grad,
        position_ids=positions.to(device)[None],
        **packed_attention_kwargs(samples, attention, device),
    )


def micro_batch_loss(
    model: torch.nn.Module,
    mb: MicroBatch,
    temperature: float,
    attention: str,
    micro_batch_tokens: int,
    loss_cfg: LossConfig,
    normalizer: float,
    device: torch.device,
    entropy_normalizer: float | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """``mb``'s share of the step loss (divided by the global ``normalizer``; not yet backward) and
    its loss statistics: :func:`micro_batch_logprobs`, then
    :func:`~prime_rl.trainer.loss.policy_loss` on the micro-batch's rollout tensors
    (``entropy_normalizer``: the global number of loss tokens, required for the entropy bonus)."""
    entropy_grad = loss_cfg.entropy_coef > 0
    logp, entropy = micro_batch_logprobs(
        model, mb, temperature, attention, micro_batch_tokens, device, entropy_grad
    )
    return policy_loss(
        logp,
        mb.inference_logprobs.to(device),
        mb.advantages.to(device),
        mb.loss_mask.to(device),
        mb.sample_ids.to(device),
        mb.num_samples,
        loss_cfg,
        normalizer,
        entropy=entropy,
        entropy_normalizer=entropy_normalizer,
    )
