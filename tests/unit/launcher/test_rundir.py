"""The run directory before a start: refused, cleaned, or resumed at the latest complete checkpoint."""

from __future__ import annotations

import pytest

from prime_rl.config import ConfigError, load_config
from prime_rl.launcher.config import RLConfig
from prime_rl.launcher.rundir import prepare_run_dir
from prime_rl.paths import mark_stable


def test_rl_refuses_a_used_run_dir_without_resume_or_clean(tmp_path):
    (tmp_path / "rollouts" / "step_0").mkdir(parents=True)
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path)])
    with pytest.raises(ConfigError, match="--resume.*--clean"):
        prepare_run_dir(cfg)
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path), "--resume"])
    with pytest.raises(ConfigError, match="no checkpoint"):
        prepare_run_dir(cfg)
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path), "--clean"])
    assert prepare_run_dir(cfg) is None and not (tmp_path / "rollouts").exists()


def test_resume_takes_the_latest_complete_checkpoint_and_drops_what_came_after(tmp_path):
    for step in (2, 4):
        for component in ("trainer", "orchestrator"):
            (tmp_path / "checkpoints" / f"step_{step}" / component).mkdir(parents=True)
            if step == 2 or component == "trainer":  # step 4: the orchestrator never finished
                mark_stable(tmp_path / "checkpoints" / f"step_{step}" / component)
    for step in range(5):
        (tmp_path / "rollouts" / f"step_{step}").mkdir(parents=True)
        (tmp_path / "weights" / f"step_{step}").mkdir(parents=True)
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path), "--resume"])
    assert prepare_run_dir(cfg) == 2
    assert sorted(p.name for p in (tmp_path / "rollouts").iterdir()) == ["step_0", "step_1"]
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["step_0", "step_1", "step_2"]
