"""prime_rl.orchestrator.advantages: group-relative advantages."""

from __future__ import annotations

import pytest

from prime_rl.orchestrator.advantages import group_advantages, is_degenerate


def test_group_advantages():
    assert group_advantages([1.0, 0.0, 0.5, 0.5]) == [0.5, -0.5, 0.0, 0.0]
    norm = group_advantages([1.0, 0.0], std_normalize=True)
    assert norm == pytest.approx([1.0, -1.0], abs=1e-5)
    assert is_degenerate(group_advantages([0.3, 0.3, 0.3]))
    assert not is_degenerate(norm)
    assert group_advantages([]) == []
