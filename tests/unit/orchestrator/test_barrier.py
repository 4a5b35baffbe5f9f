"""prime_rl.orchestrator.barrier: staleness never exceeds async_level; no overproduction."""

from __future__ import annotations

import pytest

from prime_rl.orchestrator.barrier import groups_wanted, is_usable, update_target


def simulate(async_level: int, steps: int, trainer_lag: int = 0) -> list[tuple[int, int]]:
    """(step, ckpt_step used) when every barrier update happens as soon as allowed."""
    ckpt, out = 0, []
    for s in range(steps):
        target = update_target(s, ckpt, async_level)
        if target is not None:
            assert target <= s  # never waits for weights the trainer cannot have made yet
            ckpt = target
        out.append((s, ckpt))
    return out


@pytest.mark.parametrize("async_level", [0, 1, 2, 3])
def test_barrier_keeps_staleness_within_async_level(async_level):
    trace = simulate(async_level, 12)
    assert all(0 <= s - c <= async_level for s, c in trace)
    # updates happen exactly when the lag would exceed async_level, to step - async_level
    assert [c for s, c in trace] == [max(0, s - async_level) for s in range(12)]


def test_barrier_examples():
    assert update_target(0, 0, 0) is None
    assert update_target(1, 0, 0) == 1  # on-policy: step 1 needs the weights after step 0
    assert update_target(1, 0, 1) is None
    assert update_target(2, 0, 1) == 1
    assert update_target(5, 1, 2) == 3
    assert is_usable(3, 4, 1) and not is_usable(2, 4, 1) and is_usable(4, 4, 0)


def test_groups_wanted_never_overproduces_for_the_current_policy():
    # on-policy: the base policy can serve step 0 only: one step's worth of groups
    assert groups_wanted(step=0, ckpt_step=0, async_level=0, groups_per_step=8, have=0) == 8
    assert groups_wanted(0, 0, 0, 8, have=8) == 0
    # async 1 at step 0: policy 0 serves steps 0 and 1
    assert groups_wanted(0, 0, 1, 8, have=3) == 13
    # policy too old for the current step: nothing
    assert groups_wanted(step=4, ckpt_step=1, async_level=2, groups_per_step=8, have=0) == 0
