"""GRPO-family losses against hand-written references on small tensors."""

from __future__ import annotations

import math

import pytest
import torch

from prime_rl.trainer.config import LossConfig
from prime_rl.trainer.loss import normalizer_for, policy_loss, token_logprobs_and_entropy

# two samples packed: sample 0 = 2 prompt + 3 completion tokens, sample 1 = 1 prompt + 2 completion
SAMPLE_IDS = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1])
MASK = torch.tensor([False, False, True, True, True, False, True, True])
ADV = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, -0.5, -0.5, -0.5])
INF = torch.tensor([0.0, 0.0, -1.0, -2.0, -0.5, 0.0, -1.5, -0.7])


def run(cfg: LossConfig, logp: torch.Tensor, normalizer: float):
    logp = logp.clone().requires_grad_(True)
    loss, stats = policy_loss(logp, INF, ADV, MASK, SAMPLE_IDS, 2, cfg, normalizer)
    loss.backward()
    return loss, logp.grad, stats


def test_ratio_one_gives_the_plain_policy_gradient():
    # at logp == inference logp, d/dlogp of -(r*A) is -A on loss tokens: REINFORCE
    cfg = LossConfig(type="grpo")
    loss, grad, stats = run(cfg, INF, normalizer=5.0)
    assert loss.item() == pytest.approx(-(3 * 1.0 + 2 * -0.5) / 5.0)
    expected = torch.where(MASK, -ADV / 5.0, torch.zeros_like(ADV))
    assert torch.allclose(grad, expected)
    assert stats.loss_tokens == 5 and stats.sequences == 2 and stats.clipped_sum == 0
    assert stats.mismatch_kl_sum == pytest.approx(0.0, abs=1e-7)


def test_prompt_tokens_never_get_gradient():
    _, grad, _ = run(LossConfig(), INF + 0.3, normalizer=5.0)
    assert torch.all(grad[~MASK] == 0)


def reference_grpo_clip(logp, eps_low, eps_high):
    total = 0.0
    for t in range(len(logp)):
        if not MASK[t]:
            continue
        r = math.exp(logp[t] - INF[t])
        a = float(ADV[t])
        total += min(r * a, min(max(r, 1 - eps_low), 1 + eps_high) * a)
    return -total


def test_clipping_at_the_bounds_matches_reference_and_zeroes_gradient():
    # token 2: ratio e^0.5 = 1.65 > 1.28 with A>0 -> clipped; token 6: ratio e^-0.5=0.61 < 0.8 with A<0 -> clipped
    logp = INF.clone()
    logp[2] += 0.5
    logp[6] -= 0.5
    logp[3] += 0.1  # inside the bounds
    cfg = LossConfig(type="grpo", eps_low=0.2, eps_high=0.28)
    loss, grad, stats = run(cfg, logp, normalizer=5.0)
    assert loss.item() == pytest.approx(reference_grpo_clip(logp.tolist(), 0.2, 0.28) / 5.0, rel=1e-6)
    assert grad[2] == 0 and grad[6] == 0 and grad[3] != 0
    assert stats.clipped_sum == 2


def test_mask_mode_drops_tokens_outside_the_bounds_whatever_the_sign():
    logp = INF.clone()
    logp[2] += 0.5  # r = 1.65 > 1.28
    logp[7] += 0.5  # A < 0, r = 1.65: clip mode would keep its gradient, mask mode drops it
    loss, grad, stats = run(LossConfig(ratio_mode="mask"), logp, normalizer=5.0)
    assert grad[2] == 0 and grad[7] == 0 and grad[3] != 0
    assert stats.masked_sum == 2
    kept = [3, 4, 6]
    ref = -sum(math.exp(logp[t] - INF[t]) * ADV[t] for t in kept) / 5.0
    assert loss.item() == pytest.approx(float(ref), rel=1e-6)


def test_dr_grpo_uses_a_constant_normaliser():
    cfg = LossConfig(type="dr_grpo", dr_grpo_norm=100)
    norm = normalizer_for(cfg, global_loss_tokens=5, global_sequences=2)
    assert norm == 200
    assert normalizer_for(LossConfig(type="grpo"), 5, 2) == 5
    loss, grad, _ = run(cfg, INF, norm)
    assert torch.allclose(grad, torch.where(MASK, -ADV / 200.0, torch.zeros_like(ADV)))
    # a longer completion is not down-weighted: the per-token gradient is the same constant
    assert grad[2] == grad[3] == grad[4]


def test_gspo_uses_the_sequence_geometric_mean_ratio():
    logp = INF.clone()
    logp[2:5] += torch.tensor([0.3, -0.1, 0.1])  # mean log ratio 0.1 -> s0 = e^0.1 (inside bounds)
    logp[6:8] += torch.tensor([0.2, 0.0])  # mean 0.1 -> s1 = e^0.1
    cfg = LossConfig(type="gspo")
    norm = normalizer_for(cfg, 5, 2)
    assert norm == 2
    loss, grad, _ = run(cfg, logp, norm)
    s = math.exp(0.1)
    assert loss.item() == pytest.approx(-(s * 1.0 + s * -0.5) / 2, rel=1e-5)
    # d/dlogp_t of -s_i*A_i/2 = -s_i*A_i/(2 n_i): equal for every token of a sequence
    assert torch.allclose(grad[2:5], torch.full((3,), -s * 1.0 / (2 * 3)), atol=1e-6)
    assert torch.allclose(grad[6:8], torch.full((2,), s * 0.5 / (2 * 2)), atol=1e-6)


def test_gspo_clips_a_whole_sequence():
    logp = INF.clone()
    logp[2:5] += 0.5  # s0 = e^0.5 > 1.28 with A>0 -> clipped
    _, grad, stats = run(LossConfig(type="gspo"), logp, 2.0)
    assert torch.all(grad[2:5] == 0) and torch.all(grad[6:8] != 0)
    assert stats.clipped_sum == 3  # counted in tokens


def test_is_correction_truncate_and_mask():
    logp = INF.clone()
    logp[2:5] += 1.0  # rho0 = e^1 = 2.72; sequence 1 on-policy (rho1 = 1)
    base = dict(ratio_mode="mask", eps_low=0.99, eps_high=10.0)  # keep the ratio mask out of the way
    _, g_none, _ = run(LossConfig(**base), logp, 5.0)
    _, g_trunc, _ = run(LossConfig(**base, is_correction="truncate", is_max=2.0), logp, 5.0)
    assert torch.allclose(g_trunc[2:5], g_none[2:5] * 2.0)  # weight min(rho, 2) = 2 (ratio itself ~e)
    assert torch.allclose(g_trunc[6:8], g_none[6:8])  # rho = 1
    _, g_mask, stats = run(LossConfig(**base, is_correction="mask", is_max=2.0), logp, 5.0)
    assert torch.all(g_mask[2:5] == 0) and torch.allclose(g_mask[6:8], g_none[6:8])
    assert stats.is_masked_sequences == 1


def test_mismatch_kl_is_the_k3_estimator():
    logp = INF.clone()
    logp[MASK] += 0.2
    _, _, stats = run(LossConfig(ratio_mode="mask", eps_high=10.0, eps_low=0.99), logp, 5.0)
    r = math.exp(0.2)
    assert stats.mismatch_kl_sum == pytest.approx(5 * (r - 1 - 0.2), rel=1e-5)


def test_token_logprobs_with_temperature_against_manual_softmax():
    torch.manual_seed(0)
    logits = torch.randn(4, 7, requires_grad=True)
    ids = torch.tensor([1, 3, 0, 6])
    logp, ent = token_logprobs_and_entropy(logits, ids, temperature=0.7)
    assert logp[0] == 0 and ent[0] == 0
    for t in range(1, 4):
        probs = torch.softmax(logits[t - 1].detach() / 0.7, -1)
        assert logp[t].item() == pytest.approx(math.log(probs[ids[t]].item()), rel=1e-5)
        assert ent[t].item() == pytest.approx(float(-(probs * probs.log()).sum()), rel=1e-5)
    logp.sum().backward()  # gradient flows to the logits

    assert torch.autograd.gradcheck(
        lambda x: token_logprobs_and_entropy(x, ids, 0.7)[0], (logits.detach().double().requires_grad_(True),)
    )


def test_loss_gradient_matches_finite_differences():
    cfg = LossConfig(type="grpo")

    def f(lp):
        return policy_loss(lp, INF.double(), ADV.double(), MASK, SAMPLE_IDS, 2, cfg, 5.0)[0]

    start = (INF + torch.tensor([0, 0, 0.05, -0.1, 0.02, 0, 0.1, -0.05])).double().requires_grad_(True)
    assert torch.autograd.gradcheck(f, (start,))
