"""Group-relative advantages: reward minus the group mean, optionally divided by the group std."""

from __future__ import annotations

import math


def group_advantages(rewards: list[float], std_normalize: bool = False, eps: float = 1e-6) -> list[float]:
    """Advantages of one group (all completions of one task)."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    adv = [r - mean for r in rewards]
    if std_normalize:
        std = math.sqrt(sum(a * a for a in adv) / len(adv))
        adv = [a / (std + eps) for a in adv]
    return adv


def is_degenerate(advantages: list[float], tol: float = 1e-9) -> bool:
    """True when every advantage is zero (the group carries no learning signal)."""
    return all(abs(a) <= tol for a in advantages)
