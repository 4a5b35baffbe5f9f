"""prime_rl.collect.config: short aliases, key-by-key merge, merge's positional inputs, the shipped config."""

from __future__ import annotations

import pytest

from prime_rl.collect.config import CollectConfig, MergeConfig
from prime_rl.config import ConfigError, load_config


def test_collect_config_aliases_and_key_by_key_merge(tmp_path):
    conf = tmp_path / "c.yaml"
    conf.write_text(
        "responses_create_params:\n  model: gpt-4o-mini\n  max_output_tokens: 256\n  temperature: 0.7\n"
    )
    cfg, _ = load_config(
        CollectConfig,
        [
            "--config",
            str(conf),
            "--input",
            "t.jsonl",
            "--output",
            "o.jsonl",
            "--responses_create_params.temperature",
            "0.3",
            "--no-verify",
            "--shard",
            "1/4",
            "--parallel",
            "8",
        ],
    )
    p = cfg.responses_create_params
    assert (p.model, p.max_output_tokens, p.temperature) == ("gpt-4o-mini", 256, 0.3)
    assert cfg.verify.enabled is False and cfg.shard_index == (1, 4) and cfg.num_samples_in_parallel == 8
    assert str(cfg.input_jsonl_fpath) == "t.jsonl"
    with pytest.raises(ConfigError, match="shard '4/4' must be 'i/n'"):
        load_config(CollectConfig, ["--input", "t.jsonl", "--output", "o.jsonl", "--shard", "4/4"])
    with pytest.raises(ConfigError, match="same file"):
        load_config(CollectConfig, ["--input", "t.jsonl", "--output", "t.jsonl"])
    with pytest.raises(ConfigError, match="input_jsonl_fpath: Field required"):
        load_config(CollectConfig, ["--output", "o.jsonl"])


def test_merge_takes_positional_inputs_and_refuses_to_overwrite_one():
    cfg, _ = load_config(MergeConfig, ["--output", "m.jsonl", "a.jsonl", "b.jsonl"])
    assert [str(p) for p in cfg.inputs] == ["a.jsonl", "b.jsonl"]
    with pytest.raises(ConfigError, match="also an input"):
        load_config(MergeConfig, ["--output", "a.jsonl", "a.jsonl", "b.jsonl"])


def test_the_shipped_collect_config_loads():
    from pathlib import Path

    conf = Path(__file__).resolve().parents[3] / "configs" / "collect.yaml"
    cfg, _ = load_config(
        CollectConfig,
        [
            "--config",
            str(conf),
            "--input",
            "t.jsonl",
            "--output",
            "o.jsonl",
            "--responses_create_params.temperature",
            "0.3",
        ],
    )
    assert cfg.num_repeats == 4 and cfg.responses_create_params.max_output_tokens == 512
    assert cfg.responses_create_params.temperature == 0.3 and cfg.retry.max_attempts == 3
