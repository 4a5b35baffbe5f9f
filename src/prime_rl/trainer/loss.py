"""GRPO-family policy losses on packed micro-batches.

All functions work on flat per-token tensors of one packed micro-batch. The ratio is taken to
the *inference* logprobs (the policy that actually sampled), so it covers both staleness and the
trainer/inference numerical mismatch:

    r_t = exp(logp_t - logp_inference_t)

- ``grpo``: per-token PPO objective ``min(r A, clip(r, 1-eps_low, 1+eps_high) A)`` (or, in mask
  mode, ``r A`` on tokens whose ratio is inside the bounds), summed and divided by the *global*
  number of loss tokens (all micro-batches, all ranks), so 1 rank and K ranks give the same update.
- ``dr_grpo``: the same token objective divided by the constant ``num_samples * dr_grpo_norm``
  (no length normalisation).
- ``gspo``: sequence ratio ``s_i = exp(mean_t log r_t)`` with the clipped/masked objective per
  sequence, divided by the global number of sequences.

Optional sequence-level IS correction (``is_correction``): ``rho_i = exp(mean_t sg(log r_t))``;
``truncate`` weights each sequence's term by ``min(rho_i, is_max)``, ``mask`` drops sequences
with ``rho_i`` outside ``[is_min, is_max]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from prime_rl.trainer.config import LossConfig


def token_logprobs_and_entropy(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprob of each token under the temperature-scaled next-token distribution, and its entropy.

    ``logits`` [T, V] from one packed row; token t is scored by logits[t-1]. Position 0 has no
    prediction and gets 0 (the loss mask never covers a sample's first token).
    """
    scaled = logits[:-1].to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    logp_all = torch.log_softmax(scaled, dim=-1)
    chosen = logp_all.gather(-1, input_ids[1:].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    zero = torch.zeros(1, dtype=chosen.dtype, device=chosen.device)
    return torch.cat([zero, chosen]), torch.cat([zero, entropy.detach()])


@dataclass
class LossStats:
    """Sums over loss tokens (or sequences), so that they can be added across micro-batches/ranks."""

    loss_tokens: float = 0.0
    sequences: float = 0.0
    mismatch_kl_sum: float = 0.0
    entropy_sum: float = 0.0
    clipped_sum: float = 0.0
    masked_sum: float = 0.0
    is_masked_sequences: float = 0.0

    def add(self, other: LossStats) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def as_tensor(self) -> torch.Tensor:
        return torch.tensor([getattr(self, n) for n in self.__dataclass_fields__], dtype=torch.float64)

    @classmethod
    def from_tensor(cls, t: torch.Tensor) -> LossStats:
        return cls(*[float(x) for x in t.tolist()])

    def summary(self) -> dict[str, float]:
        tokens = max(self.loss_tokens, 1.0)
        seqs = max(self.sequences, 1.0)
        return {
            "mismatch_kl": self.mismatch_kl_sum / tokens,
            "entropy": self.entropy_sum / tokens,
            "clip_frac": self.clipped_sum / tokens,
            "mask_frac": self.masked_sum / tokens,
            "is_mask_frac": self.is_masked_sequences / seqs,
        }


def _segment_sum(values: torch.Tensor, sample_ids: torch.Tensor, num_samples: int) -> torch.Tensor:
    return torch.zeros(num_samples, dtype=values.dtype, device=values.device).index_add(0, sample_ids, values)


def policy_loss(
    logp: torch.Tensor,
    inference_logp: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    sample_ids: torch.Tensor,
    num_samples: int,
    cfg: LossConfig,
    normalizer: float,
    entropy: torch.Tensor | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """The micro-batch's share of the step loss (already divided by the global ``normalizer``)."""
    mask = loss_mask.to(logp.dtype)
    log_ratio = (logp - inference_logp) * mask
    ratio = torch.exp(log_ratio)
    low, high = 1.0 - cfg.eps_low, 1.0 + cfg.eps_high

    tokens_per_seq = _segment_sum(mask, sample_ids, num_samples)
    has_tokens = tokens_per_seq > 0
    seq_mean_log_ratio = _segment_sum(log_ratio, sample_ids, num_samples) / tokens_per_seq.clamp_min(1.0)

    seq_weight = torch.ones(num_samples, dtype=logp.dtype, device=logp.device)
    is_masked = torch.zeros(num_samples, dtype=torch.bool, device=logp.device)
    if cfg.is_correction != "none":
        rho = torch.exp(seq_mean_log_ratio.detach())
        if cfg.is_correction == "truncate":
            seq_weight = rho.clamp(max=cfg.is_max)
        else:
            is_masked = ((rho < cfg.is_min) | (rho > cfg.is_max)) & has_tokens
            seq_weight = (~is_masked).to(logp.dtype)

    stats = LossStats(
        loss_tokens=float(mask.sum()),
        sequences=float(has_tokens.sum()),
        is_masked_sequences=float(is_masked.sum()),
    )
    with torch.no_grad():
        # k3 estimator of KL(pi_inference || pi_trainer) on the sampled tokens
        stats.mismatch_kl_sum = float(((ratio - 1.0 - log_ratio) * mask).sum())
        if entropy is not None:
            stats.entropy_sum = float((entropy * mask).sum())

    if cfg.type == "gspo":  # one ratio per sequence, weighted by its token count in the stats
        seq_ratio = torch.exp(seq_mean_log_ratio)
        seq_adv = _segment_sum(advantages * mask, sample_ids, num_samples) / tokens_per_seq.clamp_min(1.0)
        obj = _ppo_objective(seq_ratio, seq_adv, low, high, cfg.ratio_mode, tokens_per_seq, stats)
        loss = -(obj * seq_weight * has_tokens.to(logp.dtype)).sum() / normalizer
        return loss, stats
    obj = _ppo_objective(ratio, advantages, low, high, cfg.ratio_mode, mask, stats)
    loss = -(obj * seq_weight[sample_ids] * mask).sum() / normalizer
    return loss, stats


def _ppo_objective(
    ratio: torch.Tensor,
    adv: torch.Tensor,
    low: float,
    high: float,
    mode: str,
    weight: torch.Tensor,
    stats: LossStats,
) -> torch.Tensor:
    """clip: min(r A, clip(r) A), counting where clipping zeroes the gradient; mask: r A inside the
    bounds only, counting what is dropped. ``weight`` turns those counts into loss tokens."""
    if mode == "clip":
        clipped = ((ratio > high) & (adv > 0)) | ((ratio < low) & (adv < 0))
        stats.clipped_sum = float((clipped.to(weight.dtype) * weight).sum())
        return torch.minimum(ratio * adv, ratio.clamp(low, high) * adv)
    inside = (ratio >= low) & (ratio <= high)
    stats.masked_sum = float(((~inside).to(weight.dtype) * weight).sum())
    return ratio * adv * inside.to(ratio.dtype)


def normalizer_for(cfg: LossConfig, global_loss_tokens: float, global_sequences: float) -> float:
    """The global divisor of the step loss (see the module docstring)."""
    if cfg.type == "grpo":
        return max(global_loss_tokens, 1.0)
    if cfg.type == "dr_grpo":
        return max(global_sequences, 1.0) * cfg.dr_grpo_norm
    return max(global_sequences, 1.0)
