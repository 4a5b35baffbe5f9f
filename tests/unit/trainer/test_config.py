"""prime_rl.trainer.config: resume flag forms, the weight retention bound, per-loss eps defaults."""

from __future__ import annotations

import pytest
from loguru import logger

from prime_rl.config import ConfigError, load_config
from prime_rl.trainer.config import LossConfig, TrainerConfig


def test_resume_flag_forms_and_weight_retention_bound():
    cfg, _ = load_config(TrainerConfig, ["--resume", "--max_steps", "3"])
    assert cfg.resume.enabled and cfg.resume.step is None and cfg.max_steps == 3
    cfg, _ = load_config(TrainerConfig, ["--resume.step", "3"])
    assert cfg.resume.enabled and cfg.resume.step == 3
    assert not load_config(TrainerConfig, [])[0].resume.enabled
    with pytest.raises(ConfigError, match="sampling|unknown option"):
        load_config(TrainerConfig, ["--sampling", "x"])
    cfg, _ = load_config(TrainerConfig, ["--async_level", "2"])
    assert cfg.weights_keep == 3
    with pytest.raises(ConfigError, match="async_level"):
        load_config(TrainerConfig, ["--async_level", "2", "--weights.keep", "2"])


def _warnings_while(fn) -> list[str]:
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(str(m)), level="WARNING")
    try:
        fn()
    finally:
        logger.remove(sink)
    return seen


def test_loss_eps_defaults_follow_the_loss_type():
    gspo = LossConfig(type="gspo")
    assert gspo.resolved_eps == (3e-4, 4e-4)
    assert gspo.clip_bounds == pytest.approx((1 - 3e-4, 1 + 4e-4))
    for kind in ("grpo", "dr_grpo"):
        assert LossConfig(type=kind).resolved_eps == (0.2, 0.28)
    assert LossConfig(type="gspo", eps_high=1e-3).resolved_eps == (3e-4, 1e-3)  # only the unset one
    # through the loader: the trainer's default loss block must not pin the token-level eps
    cfg, _ = load_config(TrainerConfig, ["--loss.type", "gspo"])
    assert cfg.loss.resolved_eps == (3e-4, 4e-4)
    cfg, _ = load_config(TrainerConfig, [])
    assert cfg.loss.resolved_eps == (0.2, 0.28)


@pytest.mark.parametrize(
    ("kind", "eps", "warned"),
    [
        ("gspo", {"eps_low": 0.2}, "eps_low"),
        ("gspo", {"eps_high": 0.28}, "eps_high"),
        ("grpo", {"eps_high": 4e-4}, "eps_high"),
        ("dr_grpo", {"eps_low": 3e-4}, "eps_low"),
        ("gspo", {"eps_low": 3e-4, "eps_high": 5e-4}, None),
        ("grpo", {"eps_low": 0.1, "eps_high": 0.3}, None),
        ("gspo", {}, None),
        ("grpo", {}, None),
    ],
)
def test_eps_sized_for_the_other_kind_of_loss_is_warned_about(kind, eps, warned):
    seen = _warnings_while(lambda: LossConfig(type=kind, **eps))
    if warned is None:
        assert seen == []
    else:
        assert len(seen) == 1 and f"loss.{warned}" in seen[0] and f"loss.type={kind}" in seen[0], seen
    argv = ["--loss.type", kind] + [a for k, v in eps.items() for a in (f"--loss.{k}", str(v))]
    seen = _warnings_while(lambda: load_config(TrainerConfig, argv))
    assert any(f"loss.{warned}" in w for w in seen) if warned else seen == [], seen
