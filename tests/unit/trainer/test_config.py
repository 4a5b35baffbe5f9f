"""prime_rl.trainer.config: resume flag forms and the weight retention bound."""

from __future__ import annotations

import pytest

from prime_rl.config import ConfigError, load_config
from prime_rl.trainer.config import TrainerConfig


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
