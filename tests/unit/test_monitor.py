"""Per-step metrics (prime_rl.monitor): metrics.jsonl always, W&B and TensorBoard when enabled."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from prime_rl import monitor
from prime_rl.config import ConfigError, load_config
from prime_rl.launcher.config import RLConfig
from prime_rl.monitor import Monitor, MonitorConfig, record_metrics, scalars
from prime_rl.orchestrator.config import OrchestratorConfig
from prime_rl.paths import RunPaths
from prime_rl.trainer.config import TrainerConfig

TRAINER_ROWS = [
    {
        "process": "trainer",
        "step": s,
        "loss": 0.5 / (s + 1),
        "entropy": 2.0 - s,
        "mismatch_kl": 1e-4,
        "write_ms": None,
    }
    for s in range(3)
]
ORCHESTRATOR_ROW = {
    "process": "orchestrator",
    "step": 0,
    "reward_mean": 0.25,
    "trunc_pct": 12.5,
    "staleness": 1,
    "tokens_per_s": 900.0,
    "step_s": 3.5,
    "env/vowels": 0.4,
}


@pytest.fixture(autouse=True)
def no_prime_env(monkeypatch):
    for key in [k for k in os.environ if k.startswith(("PRIME_", "WANDB_"))]:
        monkeypatch.delenv(key)
    yield
    monitor.close_all()


def trainer_config(tmp_path, *flags: str) -> TrainerConfig:
    cfg, _ = load_config(TrainerConfig, ["--output_dir", str(tmp_path / "run"), *flags])
    return cfg


def test_scalars_are_the_numbers_keyed_by_process():
    assert scalars(ORCHESTRATOR_ROW) == {
        "orchestrator/reward_mean": 0.25,
        "orchestrator/trunc_pct": 12.5,
        "orchestrator/staleness": 1.0,
        "orchestrator/tokens_per_s": 900.0,
        "orchestrator/step_s": 3.5,
        "orchestrator/env/vowels": 0.4,
    }
    assert scalars(TRAINER_ROWS[0]) == {
        "trainer/loss": 0.5,
        "trainer/entropy": 2.0,
        "trainer/mismatch_kl": 1e-4,
    }


def test_off_by_default_rows_go_to_metrics_jsonl_only(tmp_path):
    cfg = trainer_config(tmp_path)
    assert (
        cfg.monitor == MonitorConfig()
        and not cfg.monitor.wandb.enabled
        and not cfg.monitor.tensorboard.enabled
    )
    for row in TRAINER_ROWS:
        record_metrics(cfg, row)
    run = tmp_path / "run"
    assert [json.loads(x) for x in RunPaths(run).metrics_file.read_text().splitlines()] == TRAINER_ROWS
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl"]


@pytest.mark.parametrize(("block", "package"), [("wandb", "wandb"), ("tensorboard", "tensorboard")])
def test_enabled_without_its_package_fails_at_load_naming_the_block_and_the_install(
    tmp_path, monkeypatch, block, package
):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a)
    )
    with pytest.raises(ConfigError) as e:
        trainer_config(tmp_path, f"--monitor.{block}")
    message = str(e.value)
    assert f"monitor.{block} is enabled but the {package} package is not installed" in message
    assert f"pip install 'prime-rl[{block}]'" in message
    with pytest.raises(ConfigError, match="not installed"):
        load_config(OrchestratorConfig, [f"--monitor.{block}.enabled", "true"])


def test_bad_monitor_keys_fail_at_load(tmp_path):
    with pytest.raises(ConfigError, match=r"monitor\.wandb\.mode"):
        trainer_config(tmp_path, "--monitor.wandb.mode", "sometimes")
    with pytest.raises(
        ConfigError, match=r"unknown option --monitor\.wandb\.projet \(did you mean --monitor\.wandb\.project"
    ):
        trainer_config(tmp_path, "--monitor.wandb.projet", "x")
    config_file = tmp_path / "trainer.toml"
    config_file.write_text('[monitor.tensorboard]\nlogdir = "x"\n')
    with pytest.raises(ConfigError, match=r"monitor\.tensorboard\.logdir: unknown key"):
        trainer_config(tmp_path, "--config", str(config_file))


def test_rl_sets_the_monitor_once_for_trainer_and_orchestrator(tmp_path):
    pytest.importorskip("tensorboard")
    cfg, _ = load_config(RLConfig, ["--output_dir", str(tmp_path), "--monitor.tensorboard"])
    assert cfg.trainer.monitor.tensorboard.enabled and cfg.orchestrator.monitor.tensorboard.enabled
    with pytest.raises(ConfigError, match="orchestrator.monitor = .* contradicts monitor"):
        load_config(RLConfig, ["--output_dir", str(tmp_path), "--orchestrator.monitor.tensorboard"])


def test_tensorboard_event_file_holds_every_step_of_every_scalar(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = trainer_config(tmp_path, "--monitor.tensorboard")
    for row in TRAINER_ROWS:
        record_metrics(cfg, row)
    monitor.close_all()
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard" / "trainer"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["trainer/entropy", "trainer/loss", "trainer/mismatch_kl"]
    loss = events.Scalars("trainer/loss")
    assert [e.step for e in loss] == [0, 1, 2]
    assert [e.value for e in loss] == pytest.approx([0.5, 0.25, 0.5 / 3])
    assert len(RunPaths(tmp_path / "run").metrics_file.read_text().splitlines()) == 3  # still written


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb_dir"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    (tmp_path / "wandb_dir").mkdir()
    yield tmp_path / "wandb_dir"
    monitor.close_all()
    wandb.teardown()  # stops the wandb-core service this process started


def test_wandb_offline_run_holds_each_step_keys_run_name_group_and_config(tmp_path, wandb_offline):
    import wandb
    from tests.support.wandb_offline import read_offline_run

    cfg = trainer_config(tmp_path, "--monitor.wandb", "--monitor.wandb.name", "exp1")
    for row in TRAINER_ROWS:
        record_metrics(cfg, row)
    orch, _ = load_config(
        OrchestratorConfig,
        ["--output_dir", str(tmp_path / "run"), "--monitor.wandb", "--monitor.wandb.name", "exp1"],
    )
    record_metrics(orch, ORCHESTRATOR_ROW)
    monitor.close_all()
    # finish() returns once wandb-core has the finish message, before that run's stream has written
    # its file: the run finished last could still be 7 bytes (CI saw it, while the core's log said
    # the stream closed 2 ms later). The service's teardown comes after every stream has closed.
    # (A process with one run exits through that teardown, so no run loses its data.)
    wandb.teardown()

    files = sorted(wandb_offline.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 2  # one run per process
    parsed = [read_offline_run(f) for f in files]
    runs = {r.job_type: r for r in parsed}
    # what each file held, should a run be missing (CI saw one without the trainer's once)
    found = [
        (f.stat().st_size, r.job_type, r.name, len(r.history)) for f, r in zip(files, parsed, strict=True)
    ]
    assert set(runs) == {"trainer", "orchestrator"}, found
    trainer, orchestrator = runs["trainer"], runs["orchestrator"]
    assert (trainer.name, trainer.group) == ("exp1-trainer", "exp1")
    assert (orchestrator.name, orchestrator.group) == ("exp1-orchestrator", "exp1")
    assert {"output_dir", "optim", "loss", "monitor"} <= set(trainer.config_keys)
    assert [step for step, _ in trainer.history] == [0, 1, 2]
    for (_, logged), row in zip(trainer.history, TRAINER_ROWS, strict=True):
        assert logged["trainer/loss"] == pytest.approx(row["loss"])
        assert logged["trainer/entropy"] == pytest.approx(row["entropy"])
        assert "trainer/write_ms" not in logged  # None is not logged
    ((_, logged),) = orchestrator.history
    assert {k: v for k, v in logged.items() if not k.startswith("_")} == pytest.approx(
        scalars(ORCHESTRATOR_ROW)
    )


def test_wandb_that_cannot_start_says_which_backend_and_what_to_do(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")

    def refuse(**kwargs):
        raise wandb.errors.UsageError("api_key not configured (no-tty)")

    monkeypatch.setattr(wandb, "init", refuse)
    cfg = trainer_config(tmp_path, "--monitor.wandb")
    with pytest.raises(
        monitor.MonitorError, match=r"monitor.wandb: cannot start a W&B run .*api_key not configured.*offline"
    ):
        Monitor(cfg.monitor, cfg.output_dir, "trainer")
