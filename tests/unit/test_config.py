from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import pytest

from prime_rl.config import BaseConfig, ConfigError, HelpRequested, StrictModel, load_config, parse_config
from prime_rl.inference.config import InferenceConfig


class Sampling(StrictModel):
    max_tokens: int = 128
    """Completion length."""

    temperature: float = 1.0
    """Sampling temperature."""


class DemoConfig(BaseConfig):
    """A demo process."""

    process: ClassVar[str] = "demo"

    output_dir: Path = Path("out")
    """Where things go."""

    max_steps: int = 10
    """How many steps."""

    verbose: bool = False
    """Talk more."""

    tags: list[str] = []
    """Free-form tags."""

    sampling: Sampling = Sampling()
    """Sampling block."""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for key in ("PRIME_MAX_STEPS", "PRIME_SAMPLING__MAX_TOKENS", "PRIME_ADMIN_TOKEN"):
        monkeypatch.delenv(key, raising=False)


def test_defaults_and_cli_overrides_with_nested_keys():
    cfg, rest = load_config(
        DemoConfig, ["--output_dir", "/x", "--max-steps=3", "--sampling.max_tokens", "512", "--verbose"]
    )
    assert rest == []
    assert cfg.output_dir == Path("/x") and cfg.max_steps == 3 and cfg.verbose is True
    assert cfg.sampling.max_tokens == 512 and cfg.sampling.temperature == 1.0


def test_bool_flags_and_lists():
    cfg, _ = load_config(DemoConfig, ["--no-verbose", "--tags", "a,b"])
    assert cfg.verbose is False and cfg.tags == ["a", "b"]
    cfg, _ = load_config(DemoConfig, ["--verbose", "false", "--tags", '["x y"]'])
    assert cfg.verbose is False and cfg.tags == ["x y"]


@pytest.mark.parametrize("suffix", [".yaml", ".toml"])
def test_file_then_env_then_cli_priority(tmp_path, monkeypatch, suffix):
    path = tmp_path / f"c{suffix}"
    if suffix == ".yaml":
        path.write_text("max_steps: 5\nsampling:\n  max_tokens: 64\n  temperature: 0.5\n")
    else:
        path.write_text("max_steps = 5\n[sampling]\nmax_tokens = 64\ntemperature = 0.5\n")
    cfg, _ = load_config(DemoConfig, ["--config", str(path)])
    assert (cfg.max_steps, cfg.sampling.max_tokens, cfg.sampling.temperature) == (5, 64, 0.5)

    monkeypatch.setenv("PRIME_MAX_STEPS", "7")
    monkeypatch.setenv("PRIME_SAMPLING__MAX_TOKENS", "99")
    cfg, _ = load_config(DemoConfig, ["--config", str(path)])
    # env beats the file, and a nested env var merges key by key (temperature kept from the file)
    assert (cfg.max_steps, cfg.sampling.max_tokens, cfg.sampling.temperature) == (7, 99, 0.5)

    cfg, _ = load_config(
        DemoConfig, ["--config", str(path), "--max_steps", "9", "--sampling.temperature", "0.1"]
    )
    assert (cfg.max_steps, cfg.sampling.max_tokens, cfg.sampling.temperature) == (9, 99, 0.1)


def test_several_files_merge_in_order(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.toml"
    a.write_text("max_steps: 1\nsampling: {max_tokens: 10, temperature: 0.2}\n")
    b.write_text("[sampling]\nmax_tokens = 20\n")
    cfg, _ = load_config(DemoConfig, ["--config", str(a), "--config", str(b)])
    assert (cfg.max_steps, cfg.sampling.max_tokens, cfg.sampling.temperature) == (1, 20, 0.2)


def test_unknown_key_in_file_names_the_key(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("sampling:\n  max_tokenz: 5\n")
    with pytest.raises(ConfigError, match=r"sampling\.max_tokenz: unknown key"):
        load_config(DemoConfig, ["--config", str(path)])


def test_unknown_flag_suggests_the_close_one():
    with pytest.raises(ConfigError, match=r"unknown option --sampling\.max_tokenz.*--sampling\.max_tokens"):
        load_config(DemoConfig, ["--sampling.max_tokenz", "5"])


def test_bad_value_names_key_reason_and_input():
    with pytest.raises(ConfigError) as e:
        load_config(DemoConfig, ["--sampling.max_tokens", "lots"])
    assert "sampling.max_tokens" in str(e.value) and "integer" in str(e.value) and "'lots'" in str(e.value)


def test_a_bad_value_names_where_it_came_from(tmp_path, monkeypatch):
    a, b = tmp_path / "a.toml", tmp_path / "b.yaml"
    a.write_text("max_steps = 2\n[sampling]\nmax_tokens = 5\n")
    b.write_text("max_steps: two\nsampling: {max_tokenz: 5}\n")
    with pytest.raises(ConfigError) as e:
        load_config(DemoConfig, ["--config", str(a), "--config", str(b)])
    assert (
        f"max_steps: Input should be a valid integer, unable to parse string as an integer (got 'two') [from {b}]"
        in str(e.value)
    )
    assert f"sampling.max_tokenz: unknown key [from {b}]" in str(e.value)
    b.write_text("sampling: {max_tokens: many}\n")  # the last file that sets it
    with pytest.raises(ConfigError, match=rf"sampling\.max_tokens: .* \[from {b}\]"):
        load_config(DemoConfig, ["--config", str(a), "--config", str(b)])
    monkeypatch.setenv("PRIME_SAMPLING__MAX_TOKENS", "lots")
    with pytest.raises(ConfigError, match=r"\[from the environment variable PRIME_SAMPLING__MAX_TOKENS\]"):
        load_config(DemoConfig, [])
    with pytest.raises(ConfigError, match=r"\[from the command line\]"):
        load_config(DemoConfig, ["--config", str(a), "--sampling.max-tokens", "x"])
    with pytest.raises(ConfigError, match=r"sampling\.max_tokens: .* \[from the command line\]"):
        load_config(DemoConfig, ["--config", str(a), "--sampling", '{"max_tokens": "y"}'])  # a block's JSON


def test_a_short_name_in_a_config_file_is_shown_its_key(tmp_path):
    from prime_rl.collect.config import CollectConfig

    path = tmp_path / "c.toml"
    path.write_text('input = "t.jsonl"\n')
    with pytest.raises(
        ConfigError,
        match=r"input: unknown key \(input is the command line's short name: in a config file write input_jsonl_fpath\)",
    ):
        load_config(CollectConfig, ["--config", str(path), "--output", "o.jsonl"])


def test_unreadable_or_bad_files_are_named(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(DemoConfig, ["--config", str(tmp_path / "missing.yaml")])
    bad = tmp_path / "bad.toml"
    bad.write_text("max_steps = = 3\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: cannot parse"):
        load_config(DemoConfig, ["--config", str(bad)])
    lst = tmp_path / "list.yaml"
    lst.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(DemoConfig, ["--config", str(lst)])
    other = tmp_path / "c.ini"
    other.write_text("x=1")
    with pytest.raises(ConfigError, match="unknown format"):
        load_config(DemoConfig, ["--config", str(other)])


def test_missing_value_and_positional_are_errors():
    with pytest.raises(ConfigError, match="--max_steps needs a value"):
        load_config(DemoConfig, ["--max_steps"])
    with pytest.raises(ConfigError, match="unexpected argument"):
        load_config(DemoConfig, ["stray"])


def test_help_lists_fields_with_docstrings_and_defaults():
    with pytest.raises(HelpRequested) as h:
        load_config(DemoConfig, ["--help"])
    text = str(h.value)
    assert "--sampling.max_tokens INT  (default: 128)" in text
    assert "Completion length." in text and "--verbose  (default: False)" in text


def test_parse_config_exits_2_with_message(capsys):
    with pytest.raises(SystemExit) as e:
        parse_config(DemoConfig, ["--max_steps", "x"])
    assert e.value.code == 2
    assert "max_steps" in capsys.readouterr().err


def test_resolved_config_is_written_with_secrets_masked(tmp_path):
    cfg, _ = load_config(
        InferenceConfig, ["--model", "m", "--admin_token", "s3cret", "--output_dir", str(tmp_path)]
    )
    out = tmp_path / "configs" / "inference.json"
    cfg.write_resolved(out)
    data = json.loads(out.read_text())
    assert data["model"] == "m" and data["admin_token"] == "**********"
    assert "s3cret" not in out.read_text()


def test_inference_passes_unknown_flags_through():
    cfg, rest = load_config(
        InferenceConfig, ["--model", "m", "--enable-prefix-caching", "--max-logprobs", "5", "--", "--x"]
    )
    assert cfg.model == "m"
    assert rest == ["--enable-prefix-caching", "--max-logprobs", "5", "--x"]


def test_inference_requires_token_beyond_loopback(monkeypatch):
    with pytest.raises(ConfigError, match="admin_token"):
        load_config(InferenceConfig, ["--model", "m", "--host", "0.0.0.0"])
    cfg, _ = load_config(InferenceConfig, ["--model", "m", "--host", "::1"])
    assert cfg.admin_token is None
    monkeypatch.setenv("PRIME_ADMIN_TOKEN", "tok")
    cfg, _ = load_config(InferenceConfig, ["--model", "m", "--host", "0.0.0.0"])
    assert cfg.admin_token.get_secret_value() == "tok"


def test_inference_vllm_argv_is_parsed_by_vllm():
    from prime_rl.inference.server import parse_vllm_args, vllm_argv

    cfg, rest = load_config(
        InferenceConfig, ["--model", "m", "--port", "8123", "--enforce-eager", "--max-logprobs", "7"]
    )
    args = parse_vllm_args(vllm_argv(cfg, rest))
    assert args.port == 8123 and args.enforce_eager is True and args.max_logprobs == 7
    assert args.worker_extension_cls == "prime_rl.inference.worker.WeightUpdateExtension"
    assert "prime_rl.inference.admin.FirstByteMiddleware" in args.middleware
    with pytest.raises(SystemExit):
        parse_vllm_args(vllm_argv(cfg, ["--no-such-vllm-flag"]))
    assert not args.enable_auto_tool_choice
    tools, _ = load_config(InferenceConfig, ["--model", "m", "--tool_call_parser", "hermes"])
    args = parse_vllm_args(vllm_argv(tools, []))
    assert args.enable_auto_tool_choice is True and args.tool_call_parser == "hermes"


def test_none_empty_lists_bare_block_flags_and_stray_words():
    from prime_rl.orchestrator.config import OrchestratorConfig

    cfg, _ = load_config(OrchestratorConfig, ["--sampling.seed", "none", "--resume", "--resume.step", "3"])
    assert cfg.sampling.seed is None and (cfg.resume.enabled, cfg.resume.step) == (True, 3)
    cfg, _ = load_config(OrchestratorConfig, ["--sampling.seed", "5", "--no-resume"])
    assert cfg.sampling.seed == 5 and not cfg.resume.enabled
    cfg, _ = load_config(DemoConfig, ["--tags", "", "--sampling.max-tokens=5", "--max_steps=-1"])
    assert cfg.tags == [] and cfg.sampling.max_tokens == 5 and cfg.max_steps == -1
    with pytest.raises(ConfigError, match="unexpected argument 'stray'"):
        load_config(InferenceConfig, ["--model", "m", "--enforce-eager", "stray"])


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_no_config_number_is_infinite_or_nan(value):
    from prime_rl.collect.config import CollectConfig

    with pytest.raises(ConfigError, match=r"pass_threshold: Input should be a finite number"):
        load_config(CollectConfig, ["--input", "t.jsonl", "--output", "o.jsonl", f"--pass_threshold={value}"])
    with pytest.raises(ConfigError, match=r"sampling.temperature: Input should be a finite number"):
        load_config(DemoConfig, [f"--sampling.temperature={value}"])


def test_a_run_directory_that_is_a_file_or_under_one_is_refused_at_load(tmp_path):
    from prime_rl.launcher.config import RLConfig
    from prime_rl.orchestrator.config import OrchestratorConfig

    afile = tmp_path / "afile"
    afile.write_text("x\n")
    with pytest.raises(ConfigError, match=r"output_dir: .*afile is a file, not a directory"):
        load_config(OrchestratorConfig, ["--output_dir", str(afile)])
    with pytest.raises(ConfigError, match=r"afile is a file, not a directory \(in .*afile/run\)"):
        load_config(RLConfig, ["--output_dir", str(afile / "run"), "--model", str(tmp_path)])
    assert load_config(OrchestratorConfig, ["--output_dir", str(tmp_path / "new" / "run")])[
        0
    ].output_dir == Path(tmp_path / "new" / "run")
