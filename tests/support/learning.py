"""What "the demo learned" means, shared by the learning tests (tests/integration/test_rl_loop.py)
and the benchmark that measures how often a config passes them (benchmarks/demo_learning.py).

A run is a list of per-step mean rewards (and the share of completions cut off at ``max_tokens``),
as the orchestrator writes them to ``metrics.jsonl``.
"""

from __future__ import annotations

from dataclasses import dataclass

WINDOW = 6
"""Steps compared: the first ``WINDOW`` against the last (or the best) ``WINDOW``."""
PAIRS_NEEDED = 30
"""Of the 36 (late, early) pairs, at least this many with the late step higher (see :func:`verdict`)."""
RISE_NEEDED = 0.03
"""The last steps' mean reward above the first steps' by more than this."""
TRUNC_SLACK = 2.0
"""Percentage points the best steps may cut off more answers than the first steps."""


def late_over_early(rewards: list[float]) -> float:
    """Of the 36 (late, early) pairs of the last and first 6 steps, how many have the late step
    higher (a tie counts half): the Mann-Whitney U statistic."""
    first, last = rewards[:WINDOW], rewards[-WINDOW:]
    return sum((lt > e) + 0.5 * (lt == e) for lt in last for e in first)


def rise(rewards: list[float]) -> float:
    """Mean reward of the last 6 steps minus that of the first 6."""
    return sum(rewards[-WINDOW:]) / WINDOW - sum(rewards[:WINDOW]) / WINDOW


def best_window(rewards: list[float]) -> int:
    """The first step of the 6 consecutive steps after the first 6 with the highest reward."""
    return max(range(WINDOW, len(rewards) - WINDOW + 1), key=lambda i: sum(rewards[i : i + WINDOW]))


def collapsed(rewards: list[float], trunc_pct: list[float] | None = None) -> bool:
    """The toy demo's known late collapse: it rose (some step above every one of the first 6), then
    its last 3 steps lost it: their reward averages under 0.02 (every answer cut off or too long, so
    no group has an advantage left to learn from), or (with ``trunc_pct``) they cut off half the
    answers or more on average (the policy sharpened onto tokens it no longer ends: 80% and 77% in
    the two runs of 2026-11-27 that began to collapse, one of 4 at the old demo settings and one of
    14 with std-normalised advantages at lr 3e-3; both passed the rank test with 30 pairs, the least
    it allows). Always seen after step 20 (benchmarks/RESULTS.md, "The demo learns");
    its rate is benchmarks/demo_learning.py's to measure."""
    if max(rewards[WINDOW:]) <= max(rewards[:WINDOW]):
        return False
    return sum(rewards[-3:]) / 3 < 0.02 or (trunc_pct is not None and sum(trunc_pct[-3:]) / 3 >= 50)


@dataclass(frozen=True)
class Verdict:
    """One run judged: every figure the learning tests ask about, and why it fails (empty: it passes)."""

    pairs: float
    rise: float
    trunc_first: float | None
    trunc_best: float | None
    collapsed: bool
    failures: tuple[str, ...]

    @property
    def learned(self) -> bool:
        return not self.failures


def verdict(rewards: list[float], trunc_pct: list[float] | None = None) -> Verdict:
    """A real rise of the reward per step, not noise, judged on the first 6 steps against the last 6,
    and (with ``trunc_pct``) earned on answers the policy ends.

    Ranks: of the 36 (late, early) pairs, at least 30 have the late step higher (Mann-Whitney U).
    With no learning the 12 steps are exchangeable and 3.2% of runs would pass that by chance (the
    exact distribution; "4 of the last 6 above every one of the first 6", used before, let 3.0%
    through but failed a learning run on one lucky early step). Size: +0.03 on average (steps vary
    by about 0.02, so 6 against 6 by about 0.012: +0.03 is 2.5 of that). A t statistic rejected good
    runs whose reward was still climbing fast at the end.

    Truncation: a cut-off answer earns 0 in the demo (``truncated_reward``), so a reward that rises
    while the share of cut-off answers does not rise is earned on ended answers. It is judged where
    the policy is best (the 6 steps after the first 6 with the highest reward), not on the last 6: a
    run that starts its late collapse cuts most answers off in its last steps. A 6-step mean of 64
    samples a step is noisy (about 2 points, 3 for a difference), so no fall is asked for, only no
    rise beyond 2 points."""
    if len(rewards) < 2 * WINDOW:
        raise ValueError(f"a run of {len(rewards)} steps is too short to judge (at least {2 * WINDOW})")
    pairs, up = late_over_early(rewards), rise(rewards)
    failures = []
    if pairs < PAIRS_NEEDED:
        failures.append(f"{pairs:g} of 36 late-over-early pairs (at least {PAIRS_NEEDED})")
    if up <= RISE_NEEDED:
        failures.append(f"rose by {up:.3f} (more than {RISE_NEEDED})")
    first = best = None
    if trunc_pct is not None:
        b = best_window(rewards)
        first, best = sum(trunc_pct[:WINDOW]) / WINDOW, sum(trunc_pct[b : b + WINDOW]) / WINDOW
        if best >= first + TRUNC_SLACK:
            failures.append(
                f"best steps {b}-{b + WINDOW - 1} cut off {best:.1f}% of answers, the first 6 {first:.1f}%"
            )
    return Verdict(pairs, up, first, best, collapsed(rewards, trunc_pct), tuple(failures))
