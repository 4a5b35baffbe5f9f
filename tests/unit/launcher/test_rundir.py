"""The run directory before a start: refused, cleaned, or resumed at the latest complete checkpoint."""

from __future__ import annotations

import json

import pytest

from prime_rl.config import ConfigError, load_config
from prime_rl.launcher.config import RLConfig
from prime_rl.launcher.rundir import RunComplete, prepare_run_dir
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


def _checkpoint(root, step, *components):
    for component in ("trainer", "orchestrator"):
        (root / "checkpoints" / f"step_{step}" / component).mkdir(parents=True, exist_ok=True)
    for component in components:
        mark_stable(root / "checkpoints" / f"step_{step}" / component)


def test_resume_drops_newer_incomplete_checkpoints_and_the_metric_rows_of_redone_steps(tmp_path):
    _checkpoint(tmp_path, 2, "trainer", "orchestrator")
    _checkpoint(tmp_path, 4, "trainer")  # the orchestrator never finished it
    (tmp_path / "checkpoints" / "step_6" / "trainer").mkdir(parents=True)  # cut short
    rows = [{"process": p, "step": s} for s in range(5) for p in ("orchestrator", "trainer")]
    lines = [json.dumps(r) for r in rows]
    lines.insert(3, "not json")  # kept as it is: what it was cannot be told
    lines.insert(5, json.dumps({"process": "trainer", "note": "no step"}))  # kept too
    text = "\n".join(lines) + '\n{"process": "trainer", "st'  # the crash cut the last write short
    (tmp_path / "metrics.jsonl").write_text(text)
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path), "--resume", "--max_steps", "10"])
    assert prepare_run_dir(cfg) == 2
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_2"]
    kept = (tmp_path / "metrics.jsonl").read_text()
    assert kept.endswith("\n")
    parsed = [json.loads(line) if line.startswith("{") else line for line in kept.splitlines()]
    assert [r["step"] for r in parsed if isinstance(r, dict) and "step" in r] == [0, 0, 1, 1]
    assert "not json" in parsed and {"process": "trainer", "note": "no step"} in parsed
    # resuming again at the same step changes nothing
    assert prepare_run_dir(cfg) == 2
    assert (tmp_path / "metrics.jsonl").read_text() == kept


@pytest.mark.parametrize("finished_by", ["checkpoint", "weights"])
def test_resume_on_a_finished_run_touches_nothing(tmp_path, finished_by):
    _checkpoint(tmp_path, 4, "trainer", "orchestrator")
    if finished_by == "checkpoint":
        _checkpoint(tmp_path, 6, "trainer", "orchestrator")
    else:  # max_steps not a multiple of the checkpoint interval: the last weights show it
        mark_stable(tmp_path / "weights" / "step_6")
    (tmp_path / "rollouts" / "step_5").mkdir(parents=True)
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"process": "trainer", "step": 5}) + "\n")
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path), "--resume", "--max_steps", "6"])
    with pytest.raises(RunComplete, match="complete"):
        prepare_run_dir(cfg)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    # a higher max_steps continues the run
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path), "--resume", "--max_steps", "8"])
    assert prepare_run_dir(cfg) == (6 if finished_by == "checkpoint" else 4)


def test_resume_and_clean_together_are_refused(tmp_path):
    (tmp_path / "rollouts" / "step_0").mkdir(parents=True)
    with pytest.raises(ConfigError, match="--resume and --clean contradict"):
        load_config(RLConfig, ["--output_dir", str(tmp_path), "--resume", "--clean"])
    assert (tmp_path / "rollouts" / "step_0").is_dir()
