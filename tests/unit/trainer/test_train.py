"""prime_rl.trainer.train: the learning-rate schedules."""

from __future__ import annotations

import pytest

from prime_rl.trainer.config import SchedulerConfig
from prime_rl.trainer.train import lr_factor


def test_lr_schedules():
    f = lr_factor(SchedulerConfig(type="constant", warmup_steps=4), 10)
    assert [f(s) for s in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    lin = lr_factor(SchedulerConfig(type="linear", min_lr_ratio=0.1), 10)
    assert lin(0) == 1.0 and lin(5) == pytest.approx(0.55) and lin(10) == pytest.approx(0.1)
    cos = lr_factor(SchedulerConfig(type="cosine", warmup_steps=2), 12)
    assert cos(1) == 1.0 and cos(2) == 1.0 and cos(7) == pytest.approx(0.5) and cos(12) == pytest.approx(0.0)
