"""GRPO-family losses against hand-written formulas on tiny tensors: the loss value and its gradient.

Notation (see ``prime_rl/trainer/loss.py``): policy ratio ``r_t = pi_theta/pi_old`` (clipped by
eps), mismatch weight ``w_i`` from ``rho_i = exp(mean_t log(pi_old/pi_inference))`` (is_correction:
none 1, truncate min(rho, is_max), mask 1[is_min <= rho <= is_max]). Each is applied once.
"""

from __future__ import annotations

import math

import pytest
import torch

from prime_rl.trainer.config import LossConfig
from prime_rl.trainer.logprobs import token_logprobs_and_entropy
from prime_rl.trainer.loss import normalizer_for, policy_loss

# three samples packed: sample 0 = 2 prompt + 3 completion tokens, samples 1 and 2 = 1 prompt + 2
SAMPLE_IDS = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2])
MASK = torch.tensor([False, False, True, True, True, False, True, True, False, True, True])
ADV = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, -0.5, -0.5, -0.5, 2.0, 2.0, 2.0])
INF = torch.tensor([0.0, 0.0, -1.0, -2.0, -0.5, 0.0, -1.5, -0.7, 0.0, -0.3, -1.2])
NUM_SAMPLES, LOSS_TOKENS, TOKENS_PER_SAMPLE, SAMPLE_ADV = 3, 7, [3, 2, 2], [1.0, -0.5, 2.0]
# the trainer's logprobs (pi_old = pi_theta before the step): mean log(pi_old/pi_inf) per sample
# is 1.0, -0.2, -1.0 (prompt positions are arbitrary, the mask drops them)
MISMATCH = torch.tensor([-3.0, 0.4, 1.2, 0.9, 0.9, 2.0, -0.3, -0.1, -1.0, -0.8, -1.2])
OLD = INF + MISMATCH
RHO = [math.exp(1.0), math.exp(-0.2), math.exp(-1.0)]
IS_MIN, IS_MAX, DR_NORM = 0.5, 2.0, 10
# by hand: rho0 = e > 2 (truncated to 2, masked), rho1 = 0.82 (kept as is), rho2 = 0.37 < 0.5
# (truncate has no lower cap: weight 0.37; mask drops it)
WEIGHTS = {"none": [1.0, 1.0, 1.0], "truncate": [2.0, RHO[1], RHO[2]], "mask": [0.0, 1.0, 0.0]}


def run(cfg: LossConfig, logp: torch.Tensor, normalizer: float, old_logp: torch.Tensor | None = None):
    logp = logp.clone().requires_grad_(True)
    extra = {} if old_logp is None else {"old_logp": old_logp}  # default: pi_old = sg(pi_theta)
    loss, stats = policy_loss(logp, INF, ADV, MASK, SAMPLE_IDS, NUM_SAMPLES, cfg, normalizer, **extra)
    loss.backward()
    return loss, logp.grad, stats


def loss_cfg(kind: str, correction: str, **kw) -> LossConfig:
    return LossConfig(
        type=kind, is_correction=correction, is_min=IS_MIN, is_max=IS_MAX, dr_grpo_norm=DR_NORM, **kw
    )


def test_the_hand_weights_are_the_sequence_mismatch_ratios():
    for i in range(NUM_SAMPLES):
        sel = MASK & (i == SAMPLE_IDS)
        assert math.exp(float((OLD - INF)[sel].mean())) == pytest.approx(RHO[i], rel=1e-6)


@pytest.mark.parametrize("correction", ["none", "truncate", "mask"])
@pytest.mark.parametrize("kind", ["grpo", "dr_grpo", "gspo"])
def test_one_step_loss_and_gradient_match_the_hand_formulas(kind, correction):
    """pi_old = sg(pi_theta): r = 1, so the loss is -sum w A / N and the gradient -w A / N per token
    (GSPO: -w_i A_i / (n_i N) on each of its tokens). The mismatch weight is applied once: the
    clipped ratio does not also carry pi_theta/pi_inference."""
    cfg = loss_cfg(kind, correction)
    w = WEIGHTS[correction]
    norm = normalizer_for(cfg, global_loss_tokens=LOSS_TOKENS, global_sequences=NUM_SAMPLES)
    expected_norm = {"grpo": LOSS_TOKENS, "dr_grpo": NUM_SAMPLES * DR_NORM, "gspo": NUM_SAMPLES}[kind]
    assert norm == expected_norm

    loss, grad, stats = run(cfg, OLD, norm)

    sid, adv, mask = SAMPLE_IDS.tolist(), ADV.tolist(), MASK.tolist()
    if kind == "gspo":
        ref_loss = -sum(w[i] * SAMPLE_ADV[i] for i in range(NUM_SAMPLES)) / norm
        ref_grad = [
            -w[sid[t]] * SAMPLE_ADV[sid[t]] / (TOKENS_PER_SAMPLE[sid[t]] * norm) if mask[t] else 0.0
            for t in range(len(sid))
        ]
    else:
        ref_loss = -sum(w[sid[t]] * adv[t] for t in range(len(sid)) if mask[t]) / norm
        ref_grad = [-w[sid[t]] * adv[t] / norm if mask[t] else 0.0 for t in range(len(sid))]
    assert loss.item() == pytest.approx(ref_loss, rel=1e-5, abs=1e-7)
    assert grad.tolist() == pytest.approx(ref_grad, rel=1e-5, abs=1e-7)
    assert stats.loss_tokens == LOSS_TOKENS and stats.sequences == NUM_SAMPLES
    assert stats.clipped_sum == 0  # r = 1: nothing to clip
    assert stats.is_masked_sequences == (2 if correction == "mask" else 0)


def reference(kind, correction, ratio_mode, logp, old, eps_low, eps_high, norm):
    """The loss and d loss / d logp of the module docstring, token by token in plain Python."""
    sid, adv, mask, inf = SAMPLE_IDS.tolist(), ADV.tolist(), MASK.tolist(), INF.tolist()
    lo, hi = 1 - eps_low, 1 + eps_high
    toks = [[t for t in range(len(sid)) if mask[t] and sid[t] == i] for i in range(NUM_SAMPLES)]
    w = []
    for i in range(NUM_SAMPLES):
        rho = math.exp(sum(old[t] - inf[t] for t in toks[i]) / len(toks[i]))
        w.append(
            {"none": 1.0, "truncate": min(rho, IS_MAX), "mask": float(IS_MIN <= rho <= IS_MAX)}[correction]
        )

    def objective(r, a):  # (value, d value / d r)
        if ratio_mode == "clip":
            gets_gradient = not ((r > hi and a > 0) or (r < lo and a < 0))
            return min(r * a, min(max(r, lo), hi) * a), (a if gets_gradient else 0.0)
        inside = lo <= r <= hi
        return (r * a if inside else 0.0), (a if inside else 0.0)

    loss, grad = 0.0, [0.0] * len(sid)
    for i in range(NUM_SAMPLES):
        if kind == "gspo":
            n = len(toks[i])
            s = math.exp(sum(logp[t] - old[t] for t in toks[i]) / n)
            a = sum(adv[t] for t in toks[i]) / n
            value, dvalue = objective(s, a)
            loss -= w[i] * value / norm
            for t in toks[i]:  # ds/dlogp_t = s / n
                grad[t] = -w[i] * dvalue * s / (n * norm)
        else:
            for t in toks[i]:
                r = math.exp(logp[t] - old[t])
                value, dvalue = objective(r, adv[t])
                loss -= w[i] * value / norm
                grad[t] = -w[i] * dvalue * r / norm  # dr/dlogp_t = r
    return loss, grad


# several optimizer steps on one batch: pi_theta has moved away from pi_old, so the policy ratio
# leaves 1 and the eps bounds apply. Token deltas log(pi_theta/pi_old) below cross both bounds.
TOKEN_STEP = torch.tensor([9.0, 9.0, 0.5, 0.1, 0.0, 9.0, -0.5, 0.05, 9.0, 0.3, -0.1])
# GSPO-sized sequence deltas (mean per sample): 0.0, +1e-3 (A<0: the min keeps the gradient)...
SEQ_STEP = torch.tensor([9.0, 9.0, 2e-4, 0.0, -2e-4, 9.0, 2e-3, 0.0, 9.0, 1e-3, 1e-3])


@pytest.mark.parametrize("ratio_mode", ["clip", "mask"])
@pytest.mark.parametrize("correction", ["none", "truncate", "mask"])
@pytest.mark.parametrize("kind", ["grpo", "dr_grpo", "gspo"])
def test_moved_policy_clips_the_policy_ratio_and_weights_by_the_mismatch_once(kind, correction, ratio_mode):
    cfg = loss_cfg(kind, correction, ratio_mode=ratio_mode)
    eps_low, eps_high = (3e-4, 4e-4) if kind == "gspo" else (0.2, 0.28)  # the per-loss defaults
    assert cfg.resolved_eps == (eps_low, eps_high)
    logp = OLD + (SEQ_STEP if kind == "gspo" else TOKEN_STEP)
    norm = normalizer_for(cfg, LOSS_TOKENS, NUM_SAMPLES)
    loss, grad, stats = run(cfg, logp, norm, old_logp=OLD)
    ref_loss, ref_grad = reference(
        kind, correction, ratio_mode, logp.tolist(), OLD.tolist(), eps_low, eps_high, norm
    )
    assert loss.item() == pytest.approx(ref_loss, rel=1e-5, abs=1e-7)
    assert grad.tolist() == pytest.approx(ref_grad, rel=1e-5, abs=1e-7)
    # the bounds did bite somewhere, and somewhere they did not
    assert (stats.clipped_sum if ratio_mode == "clip" else stats.masked_sum) > 0
    if correction != "mask":
        assert any(g != 0 for g in ref_grad)


def test_default_pi_old_is_the_detached_trainer_policy():
    cfg = loss_cfg("grpo", "truncate")
    a = run(cfg, OLD, 7.0)
    b = run(cfg, OLD, 7.0, old_logp=OLD.clone())
    assert a[0].item() == pytest.approx(b[0].item()) and torch.allclose(a[1], b[1])


def test_prompt_tokens_never_get_gradient():
    for kind in ("grpo", "gspo"):
        _, grad, _ = run(loss_cfg(kind, "truncate"), OLD + 0.01, 5.0, old_logp=OLD)
        assert torch.all(grad[~MASK] == 0)


def test_gspo_clips_a_whole_sequence():
    # s0 = e^0.01 > 1 + 4e-4 with A > 0 -> clipped; the gspo defaults bite where 0.28 would not
    logp = OLD.clone()
    logp[2:5] += 0.01
    _, grad, stats = run(LossConfig(type="gspo"), logp, 3.0, old_logp=OLD)
    assert torch.all(grad[2:5] == 0) and torch.all(grad[6:8] != 0)
    assert stats.clipped_sum == 3  # counted in tokens
    _, grad, stats = run(LossConfig(type="gspo", eps_low=0.2, eps_high=0.28), logp, 3.0, old_logp=OLD)
    assert torch.all(grad[2:5] != 0) and stats.clipped_sum == 0


def test_mismatch_kl_is_the_k3_estimator():
    logp = INF.clone()
    logp[MASK] += 0.2
    _, _, stats = run(LossConfig(), logp, 5.0)
    r = math.exp(0.2)
    assert stats.mismatch_kl_sum == pytest.approx(LOSS_TOKENS * (r - 1 - 0.2), rel=1e-5)


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


@pytest.mark.parametrize("kind", ["grpo", "gspo"])
def test_loss_gradient_matches_finite_differences(kind):
    # with pi_old held fixed the loss is an ordinary function of logp
    cfg = loss_cfg(kind, "truncate")
    old = OLD.double()

    def f(lp):
        return policy_loss(
            lp, INF.double(), ADV.double(), MASK, SAMPLE_IDS, NUM_SAMPLES, cfg, 5.0, old_logp=old
        )[0]

    step = torch.tensor([0, 0, 0.05, -0.1, 0.02, 0, 0.1, -0.05, 0, 0.03, 0.01]) * (
        1e-3 if kind == "gspo" else 1
    )
    start = (old + step.double()).requires_grad_(True)
    assert torch.autograd.gradcheck(f, (start,))


@pytest.mark.parametrize("kind", ["grpo", "dr_grpo", "gspo"])
def test_the_entropy_bonus_subtracts_its_coefficient_times_the_mean_entropy_of_loss_tokens(kind):
    """L(c) = L(0) - (c / N_tok) sum over loss tokens of H_t, whatever the loss type; the entropy's
    gradient is -c / N_tok on each loss token and 0 on prompt tokens."""
    entropy = torch.tensor([9.0, 9.0, 1.0, 2.0, 3.0, 9.0, 4.0, 0.5, 9.0, 1.5, 2.5], requires_grad=True)
    base = loss_cfg(kind, "truncate")
    bonus = loss_cfg(kind, "truncate", entropy_coef=0.1)
    args = (OLD, INF, ADV, MASK, SAMPLE_IDS, NUM_SAMPLES)
    without, _ = policy_loss(*args, base, 5.0, entropy=entropy.detach())
    with_bonus, _ = policy_loss(*args, bonus, 5.0, entropy=entropy, entropy_normalizer=LOSS_TOKENS)
    assert float(with_bonus.detach()) == pytest.approx(float(without) - 0.1 * 14.5 / LOSS_TOKENS)
    with_bonus.backward()
    assert entropy.grad.tolist() == pytest.approx([-0.1 / LOSS_TOKENS * m for m in MASK.float().tolist()])


def test_the_entropy_bonus_refuses_entropies_without_their_gradient():
    cfg = loss_cfg("grpo", "none", entropy_coef=0.01)
    with pytest.raises(ValueError, match="entropy_coef"):
        policy_loss(OLD, INF, ADV, MASK, SAMPLE_IDS, NUM_SAMPLES, cfg, 5.0, entropy=torch.ones(11))


@pytest.mark.parametrize("kind", ["dr_grpo", "gspo"])
def test_the_entropy_bonus_refuses_to_guess_its_divisor(kind):
    """For dr_grpo and gspo the loss's normalizer is not the number of loss tokens: a caller that
    leaves the entropy's divisor out gets an error, not a bonus divided by the wrong count."""
    cfg = loss_cfg(kind, "none", entropy_coef=0.01)
    entropy = torch.ones(11, requires_grad=True)
    with pytest.raises(ValueError, match="entropy_normalizer"):
        policy_loss(OLD, INF, ADV, MASK, SAMPLE_IDS, NUM_SAMPLES, cfg, 5.0, entropy=entropy)
