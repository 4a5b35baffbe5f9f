"""GRPO-family policy losses on packed micro-batches.

All functions work on flat per-token tensors of one packed micro-batch. Three policies are
involved, and two different ratios between them:

- ``pi_theta``: the trainer's policy being optimised (``logp``, with gradient);
- ``pi_old``: the trainer's own policy at sampling time (``old_logp``). With one optimizer step
  per batch (this trainer) it is ``pi_theta`` before the step, i.e. ``old_logp = sg(logp)``
  (``sg`` = stop-gradient, ``logp.detach()``), which is the default;
- ``pi_inference``: the inference engine's policy that actually sampled the tokens (the rollout
  file's ``inference_logprobs``). It differs from ``pi_old`` by numerics (other kernels, other
  precision) and, with ``async_level > 0``, by staleness.

**Policy ratio** (PPO trust region, what ``eps_low``/``eps_high`` clip or mask)::

    r_t = pi_theta(y_t) / pi_old(y_t) = exp(logp_t - old_logp_t)

Its value is 1 when ``old_logp = sg(logp)``, and its gradient is ``r_t * grad(logp_t)``.

**Mismatch weight** (trainer/inference correction, ``is_correction``), per sequence ``i`` over
its ``n_i`` loss tokens, never differentiated::

    rho_i = exp(mean_t (old_logp_t - inference_logp_t))   # pi_old / pi_inference
    none:     w_i = 1
    truncate: w_i = min(rho_i, is_max)                     # TIS, truncated importance sampling
    mask:     w_i = 1 if is_min <= rho_i <= is_max else 0  # MIS, masked importance sampling

Each is applied exactly once. With ``f_clip(r, A) = min(r A, clip(r, 1-eps_low, 1+eps_high) A)``
(``ratio_mode = "clip"``) or ``f_mask(r, A) = r A 1[1-eps_low <= r <= 1+eps_high]`` (``"mask"``):

- ``grpo``: ``L = -(1/N_tok) sum_t w_{i(t)} f(r_t, A_t)`` over loss tokens, ``N_tok`` the *global*
  number of loss tokens (all micro-batches, all ranks), so 1 rank and K ranks give the same update.
- ``dr_grpo``: the same token objective divided by the constant ``num_samples * dr_grpo_norm``
  (no length normalisation).
- ``gspo``: sequence ratio ``s_i = exp(mean_t (logp_t - old_logp_t))`` (geometric mean of
  ``r_t``) and sequence advantage ``A_i`` (mean over its tokens):
  ``L = -(1/N_seq) sum_i w_i f(s_i, A_i)``, ``N_seq`` the global number of sequences.

Entropy bonus (``entropy_coef`` = ``c`` > 0), for every loss type: ``L - (c/N_tok) sum_t H_t`` over
loss tokens, ``H_t`` the entropy of the policy's (temperature-scaled) next-token distribution at t.

With the default ``old_logp = sg(logp)`` the gradient is therefore ``-w_i A_t grad(logp_t) / N``
per token (GSPO: ``-w_i A_i grad(logp_t) / (n_i N_seq)``), i.e. the on-policy policy gradient with
the TIS/MIS correction of the inference mismatch. Clipping only bites when ``old_logp`` is passed
explicitly (several optimizer steps on one batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from prime_rl.trainer.config import LossConfig


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
    old_logp: torch.Tensor | None = None,
    entropy_normalizer: float | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """The micro-batch's share of the step loss (already divided by the global ``normalizer``).

    ``old_logp``: the trainer's logprobs at sampling time (pi_old); default ``logp.detach()`` (one
    optimizer step per batch). ``entropy`` (with gradient when ``cfg.entropy_coef`` > 0) and
    ``entropy_normalizer`` (the global number of loss tokens, whatever the loss type: required
    with the bonus, since ``normalizer`` is another count for dr_grpo and gspo) give the entropy
    bonus. See the module docstring for the formulas."""
    if cfg.entropy_coef > 0 and (entropy is None or not entropy.requires_grad):
        raise ValueError("loss.entropy_coef > 0 needs the entropies with their gradient")
    if cfg.entropy_coef > 0 and entropy_normalizer is None:
        raise ValueError("loss.entropy_coef > 0 needs entropy_normalizer, the global number of loss tokens")
    mask = loss_mask.to(logp.dtype)
    old_logp = logp.detach() if old_logp is None else old_logp.detach().to(logp.dtype)
    inference_logp = inference_logp.detach().to(logp.dtype)
    policy_log_ratio = (logp - old_logp) * mask  # log pi_theta/pi_old
    mismatch_log_ratio = (old_logp - inference_logp) * mask  # log pi_old/pi_inference, no gradient
    low, high = cfg.clip_bounds

    tokens_per_seq = _segment_sum(mask, sample_ids, num_samples)
    has_tokens = tokens_per_seq > 0
    seq_len = tokens_per_seq.clamp_min(1.0)

    seq_weight = torch.ones(num_samples, dtype=logp.dtype, device=logp.device)
    is_masked = torch.zeros(num_samples, dtype=torch.bool, device=logp.device)
    if cfg.is_correction != "none":
        rho = torch.exp(_segment_sum(mismatch_log_ratio, sample_ids, num_samples) / seq_len)
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
        # k3 estimator of KL(pi_inference || pi_old) on the sampled tokens
        stats.mismatch_kl_sum = float(
            ((torch.exp(mismatch_log_ratio) - 1.0 - mismatch_log_ratio) * mask).sum()
        )
        if entropy is not None:
            stats.entropy_sum = float((entropy * mask).sum())

    if cfg.type == "gspo":  # one ratio per sequence, weighted by its token count in the stats
        seq_ratio = torch.exp(_segment_sum(policy_log_ratio, sample_ids, num_samples) / seq_len)
        seq_adv = _segment_sum(advantages * mask, sample_ids, num_samples) / seq_len
        obj = _ppo_objective(seq_ratio, seq_adv, low, high, cfg.ratio_mode, tokens_per_seq, stats)
        loss = -(obj * seq_weight * has_tokens.to(logp.dtype)).sum() / normalizer
    else:
        ratio = torch.exp(policy_log_ratio)
        obj = _ppo_objective(ratio, advantages, low, high, cfg.ratio_mode, mask, stats)
        loss = -(obj * seq_weight[sample_ids] * mask).sum() / normalizer
    if cfg.entropy_coef > 0:
        loss = loss - cfg.entropy_coef * (entropy.to(logp.dtype) * mask).sum() / entropy_normalizer
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
