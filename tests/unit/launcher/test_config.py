"""The rl config: typed blocks, the shared keys set once at the top level, cross-process agreement."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from prime_rl.config import ConfigError, HelpRequested, load_config
from prime_rl.launcher.config import RLConfig, check_models, model_path_problem

DEBUG_CONFIG = Path(__file__).resolve().parents[3] / "configs" / "debug" / "rl.toml"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for key in ("PRIME_MAX_STEPS", "PRIME_OUTPUT_DIR", "PRIME_MODEL", "PRIME_ADMIN_TOKEN"):
        monkeypatch.delenv(key, raising=False)


def test_rl_config_is_checked_across_processes(tmp_path):
    base = ["--output_dir", str(tmp_path), "--model", "m"]
    cfg, _ = load_config(RLConfig, [*base, "--trainer_nproc", "2", "--trainer", '{"ckpt": {"interval": 5}}'])
    assert cfg.orchestrator.trainer_world_size == 2 and cfg.orchestrator.ckpt_interval == 5
    assert cfg.orchestrator.client.base_urls == ["http://127.0.0.1:8000"]
    assert cfg.inference.max_model_len == 2048 and cfg.trainer.model.name == "m"

    for bad, fragment in [
        (["--orchestrator", '{"async_level": 0}'], "async_level"),
        (["--trainer", '{"max_steps": 3}'], "max_steps"),
        (["--orchestrator", '{"model": "other"}'], "served model name"),
        (["--inference", '{"max_model_len": 64}'], "max_model_len"),
        (["--orchestrator", '{"batch_size": 10, "rollouts_per_example": 4}'], "multiple"),
        (["--trainer", '{"optim": {"lr": -1}}'], "trainer.optim.lr"),  # typed blocks: at load
        (["--orchestrator", '{"ckpt_interval": 3}', "--trainer.ckpt.interval", "5"], "checkpoint interval"),
    ]:
        with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
            load_config(RLConfig, [*base, *bad])


def test_typed_blocks_reject_an_unknown_key_at_load(tmp_path):
    path = tmp_path / "rl.toml"
    path.write_text("[orchestrator]\nbatch_sise = 64\n")
    with pytest.raises(ConfigError, match=r"orchestrator\.batch_sise: unknown key"):
        load_config(RLConfig, ["--config", str(path)])
    with pytest.raises(ConfigError, match=r"orchestrator\.sampling\.max_tokenz: unknown key"):
        load_config(RLConfig, ["--orchestrator", '{"sampling": {"max_tokenz": 5}}'])
    with pytest.raises(
        ConfigError, match=r"unknown option --orchestrator\.batch_sise.*--orchestrator\.batch_size"
    ):
        load_config(RLConfig, ["--orchestrator.batch_sise", "64"])


def test_rl_help_lists_the_block_keys():
    with pytest.raises(HelpRequested) as h:
        load_config(RLConfig, ["--help"])
    text = str(h.value)
    for fragment in (
        "--max_steps INT  (default: 20)",
        "[orchestrator] The orchestrator",
        "--orchestrator.batch_size INT  (default: 64)",
        "--orchestrator.sampling.max_tokens INT",
        "--inference.port INT  (default: 8000)",
        "--trainer.optim.lr FLOAT",
    ):
        assert fragment in text, fragment
    assert text.index("--model STR") < text.index("[inference]")  # top-level keys before the blocks


def test_a_top_level_key_fills_the_blocks(tmp_path):
    path = tmp_path / "rl.toml"
    # partial blocks: no model, output_dir or max_steps in them
    path.write_text(
        "max_steps = 7\nseq_len = 512\n[orchestrator]\nbatch_size = 16\n[inference]\nport = 8123\n"
    )
    cfg, _ = load_config(
        RLConfig,
        ["--config", str(path), "--output_dir", str(tmp_path), "--model", "m", "--trainer_nproc", "2"],
    )
    o, t, i = cfg.orchestrator, cfg.trainer, cfg.inference
    assert o.batch_size == 16 and o.max_steps == t.max_steps == 7
    assert o.output_dir == t.output_dir == i.output_dir == tmp_path
    assert o.async_level == t.async_level == cfg.async_level
    assert o.seq_len == i.max_model_len == 512
    assert i.model == t.model.name == o.model == "m"
    assert o.trainer_world_size == 2 and o.startup_timeout_s == cfg.startup_timeout_s
    assert o.client.base_urls == ["http://127.0.0.1:8123"]
    # a block may repeat a top-level key with the same value
    cfg, _ = load_config(RLConfig, ["--config", str(path), "--trainer.max_steps", "7"])
    assert cfg.trainer.max_steps == 7
    # the served name is what the orchestrator asks for
    cfg, _ = load_config(RLConfig, ["--model", "m", "--inference.served_model_name", "policy"])
    assert cfg.orchestrator.model == "policy" and cfg.trainer.model.name == "m"


def test_a_block_key_that_contradicts_the_top_level_is_an_error(tmp_path):
    path = tmp_path / "rl.toml"
    path.write_text("max_steps = 20\n[trainer]\nmax_steps = 3\n")
    with pytest.raises(ConfigError) as e:
        load_config(RLConfig, ["--config", str(path)])
    assert "trainer.max_steps = 3 contradicts max_steps = 20" in str(e.value)
    with pytest.raises(ConfigError, match=r"orchestrator\.output_dir = elsewhere contradicts output_dir"):
        load_config(RLConfig, ["--orchestrator.output_dir", "elsewhere"])
    with pytest.raises(
        ConfigError, match=r"orchestrator\.trainer_world_size = 4 contradicts trainer_nproc = 1"
    ):
        load_config(RLConfig, ["--orchestrator.trainer_world_size", "4"])


def test_the_demo_config_loads():
    cfg, _ = load_config(RLConfig, ["--config", str(DEBUG_CONFIG), "--max_steps", "40"])
    assert cfg.orchestrator.max_steps == cfg.trainer.max_steps == 40
    assert cfg.orchestrator.ckpt_interval == cfg.trainer.ckpt.interval == 10
    assert cfg.orchestrator.client.base_urls == ["http://127.0.0.1:8011"]
    assert cfg.inference.enforce_eager and cfg.orchestrator.env.name == "toy"


def test_model_names_a_readable_directory_or_a_hub_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "models" / "tiny" / "config.json").write_text("{}")
    (tmp_path / "models" / "empty").mkdir()
    (tmp_path / "weights.bin").write_text("")
    ok = [
        "models/tiny",
        str(tmp_path / "models" / "tiny"),
        "./models/tiny",
        "Qwen/Qwen3-0.6B",
        "org/my.model_v2",
    ]
    for name in ok:
        assert model_path_problem(name) is None, name
    bad = {
        "models/tny": "not found",  # models/ exists: a local path with a typo, not a hub name
        "./tiny": "not found",
        "/nowhere/tiny": "not found",
        "~/nowhere-at-all/tiny": "not found",
        "tiny": "not found",  # no '/': not a hub name (hub names are org/name)
        "a/b/c": "not found",
        "org/../name": "not found",
        "models/empty": "no config.json",
        "weights.bin": "not a directory",
    }
    for name, why in bad.items():
        problem = model_path_problem(name)
        assert problem is not None and why in problem and name in problem, (name, problem)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads everything")
def test_an_unreadable_model_directory_is_refused(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    model.chmod(0)
    try:
        assert "not readable" in model_path_problem(str(model))
    finally:
        model.chmod(0o755)


def test_the_model_check_names_the_block_that_differs(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    cfg, _ = load_config(RLConfig, ["--model", str(model), "--trainer.model.name", str(tmp_path / "gone")])
    with pytest.raises(ConfigError, match=r"gone: not found .*\(trainer\.model\.name\)"):
        check_models(cfg)
    cfg, _ = load_config(RLConfig, ["--model", str(model)])
    check_models(cfg)


@pytest.mark.parametrize("arg", ["--host=0.0.0.0", "--port", "--ho", "--por=9000"])
def test_host_or_port_in_the_passed_through_vllm_args_is_refused(arg):
    # the launcher checks inference.port and points the orchestrator at inference.host:port;
    # a --host/--port passed through to vLLM would serve somewhere else
    with pytest.raises(ConfigError, match=r"inference\.vllm_args sets --(host|port)"):
        load_config(RLConfig, ["--inference.vllm_args", f'["{arg}", "1"]'])
    load_config(RLConfig, ["--inference.vllm_args", '["--max-num-seqs", "8"]'])  # others pass
