"""``rl --print-commands``: the three commands, whose flags load back into the blocks rl resolved."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from prime_rl.config import ConfigError, load_config
from prime_rl.inference.config import InferenceConfig
from prime_rl.launcher.commands import process_commands, render_commands
from prime_rl.launcher.config import RLConfig
from prime_rl.launcher.main import main
from prime_rl.orchestrator.config import OrchestratorConfig
from prime_rl.trainer.config import TrainerConfig

DEBUG_CONFIG = Path(__file__).resolve().parents[3] / "configs" / "debug" / "rl.toml"
CLASSES = {"inference": InferenceConfig, "trainer": TrainerConfig, "orchestrator": OrchestratorConfig}


@pytest.fixture(autouse=True)
def no_prime_env(monkeypatch):
    import os

    for key in [k for k in os.environ if k.startswith("PRIME_")]:
        monkeypatch.delenv(key)


def rl_config(tmp_path, *extra: str) -> RLConfig:
    cfg, _ = load_config(
        RLConfig, ["--config", str(DEBUG_CONFIG), "--output_dir", str(tmp_path / "run"), *extra]
    )
    return cfg


def test_each_printed_command_loads_back_into_the_block_rl_resolved(tmp_path):
    cfg = rl_config(tmp_path, "--orchestrator.sampling.seed", "7", "--trainer.loss.type", "gspo")
    commands = process_commands(cfg)
    assert list(commands) == ["inference", "trainer", "orchestrator"]
    for name, argv in commands.items():
        assert argv[0] == name
        # through a shell and back, as a user pastes it
        args = shlex.split(render_commands(cfg).splitlines()[-3 + list(commands).index(name)])[1:]
        assert args == argv[1:]
        loaded, passthrough = load_config(CLASSES[name], args)
        assert passthrough == []
        assert loaded == getattr(cfg, name), name


def test_only_keys_that_differ_from_the_process_default_become_flags(tmp_path):
    commands = process_commands(rl_config(tmp_path))
    orchestrator = commands["orchestrator"]
    assert orchestrator[orchestrator.index("--sampling.max_tokens") + 1] == "12"
    # the command-line list parser keeps JSON escapes and trims spaces: such a list goes in its block's JSON
    assert orchestrator[orchestrator.index("--sampling") + 1] == '{"stop": [" ", "\\n"]}'
    assert "--sampling.stop" not in orchestrator
    assert orchestrator[orchestrator.index("--client.base_urls") + 1] == f'["http://127.0.0.1:{8011}"]'
    assert "--batch_size" not in orchestrator  # 64 is the orchestrator's own default
    assert "--enforce_eager" in commands["inference"]  # a true boolean is a bare flag
    assert commands["trainer"][commands["trainer"].index("--output_dir") + 1] == str(tmp_path / "run")


def test_several_trainer_ranks_run_under_torchrun(tmp_path):
    trainer = process_commands(rl_config(tmp_path, "--trainer_nproc", "2"))["trainer"]
    assert trainer[:5] == ["torchrun", "--standalone", "--nproc-per-node=2", "-m", "prime_rl.trainer.main"]


def test_an_admin_token_is_named_by_its_env_var_never_printed(tmp_path, monkeypatch):
    cfg = rl_config(tmp_path, "--inference.host", "0.0.0.0", "--inference.admin_token", "s3cret-value")
    text = render_commands(cfg)
    assert "s3cret-value" not in text and "--admin_token" not in text
    assert "export PRIME_ADMIN_TOKEN=" in text
    # with the token in the environment, the printed inference command loads (0.0.0.0 needs one)
    monkeypatch.setenv("PRIME_ADMIN_TOKEN", "s3cret-value")
    loaded, _ = load_config(InferenceConfig, process_commands(cfg)["inference"][1:])
    assert loaded.host == "0.0.0.0" and loaded.admin_token.get_secret_value() == "s3cret-value"


def test_rl_print_commands_prints_and_starts_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    with pytest.raises(SystemExit) as e:
        main(
            [
                "--config",
                str(DEBUG_CONFIG),
                "--model",
                str(model),
                "--output_dir",
                str(run),
                "--print-commands",
            ]
        )
    assert e.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines if not line.startswith("#")] == [
        "inference",
        "trainer",
        "orchestrator",
    ]
    assert not run.exists()  # no lock, no log, no configs


def test_print_commands_with_resume_or_clean_is_refused(tmp_path):
    for flag in ("--resume", "--clean"):
        with pytest.raises(ConfigError, match="--print-commands prints the commands of a fresh run"):
            rl_config(tmp_path, "--print-commands", flag)
