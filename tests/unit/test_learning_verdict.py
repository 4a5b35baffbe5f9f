"""The learning tests' verdict (tests/support/learning.py) on hand-written runs: what must pass and
what must not, so that a change to the criteria that lets a flat or collapsing run through fails here."""

from __future__ import annotations

import random

import pytest
from tests.support.learning import best_window, collapsed, late_over_early, verdict

FLAT = [0.10, 0.08, 0.11, 0.09, 0.10, 0.12] * 5
RISING = [0.08 + 0.02 * i for i in range(30)]


def test_a_steady_rise_passes_with_every_pair():
    v = verdict(RISING, [20.0] * 30)
    assert v.learned and v.pairs == 36 and v.rise == pytest.approx(0.48)


def test_a_flat_run_fails_on_the_pairs_and_the_size():
    v = verdict(FLAT)
    assert not v.learned
    assert v.failures[0].startswith("18 of 36") and "rose by 0.000" in v.failures[1]


def test_noise_alone_passes_about_three_runs_in_a_hundred():
    rng = random.Random(0)
    passed = sum(late_over_early([rng.random() for _ in range(30)]) >= 30 for _ in range(4000))
    assert 0.02 < passed / 4000 < 0.045  # the exact rate of U >= 30 for 6 against 6 is 3.2%


def test_a_small_but_sure_rise_fails_on_its_size():
    rewards = [0.100] * 6 + [0.11] * 18 + [0.120] * 6
    v = verdict(rewards)
    assert v.pairs == 36 and not v.learned and "rose by 0.020" in v.failures[0]


def test_a_reward_earned_while_more_answers_are_cut_off_fails():
    trunc = [20.0] * 6 + [25.0] * 24  # every step after the first 6 cuts off more than 22%
    v = verdict(RISING, trunc)
    assert not v.learned and v.trunc_best == 25.0 and "cut off 25.0%" in v.failures[0]
    assert verdict(RISING, [20.0] * 6 + [21.9] * 24).learned  # within the 2 points of noise


def test_truncation_is_judged_on_the_best_steps_not_the_last():
    rewards = RISING[:26] + [0.3, 0.1, 0.05, 0.2]  # the collapse begins at step 26
    trunc = [22.0] * 6 + [10.0] * 20 + [70.0] * 4
    assert best_window(rewards) == 20
    assert verdict(rewards, trunc).trunc_best == 10.0


def test_collapse_is_a_rise_then_nothing():
    assert collapsed(RISING[:22] + [0.2, 0.1, 0.05, 0.02, 0.0, 0.01, 0.0, 0.0])
    assert not collapsed([0.01] * 30)  # never rose: not learning, not a collapse
    assert not collapsed(RISING)


def test_a_collapse_begun_is_one_whose_last_steps_cut_off_half_the_answers():
    rewards = RISING[:27] + [0.12, 0.05, 0.16]  # a run of 2026-11-27: it still passed with 30 pairs
    trunc = [22.0] * 27 + [60.0, 90.0, 80.0]
    assert collapsed(rewards, trunc) and verdict(rewards, trunc).collapsed
    assert not collapsed(rewards) and not collapsed(rewards, trunc[:27] + [40.0, 50.0, 50.0])


def test_a_run_too_short_to_judge_is_an_error():
    with pytest.raises(ValueError, match="11 steps"):
        verdict(RISING[:11])
