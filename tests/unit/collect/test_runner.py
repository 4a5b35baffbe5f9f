"""prime_rl.collect.runner: where the API key comes from, the request body per sample."""

from __future__ import annotations

import json

import pytest

from prime_rl.collect.config import CollectConfig
from prime_rl.collect.runner import CollectError, request_body, resolve_api_key
from prime_rl.config import load_config


def test_api_key_from_env_var_then_env_file(tmp_path, monkeypatch):
    monkeypatch.delenv("MY_KEY", raising=False)
    env_file = tmp_path / "env.yaml"
    base = [
        "--input",
        "t.jsonl",
        "--output",
        "o.jsonl",
        "--api_key_env",
        "MY_KEY",
        "--env_file",
        str(env_file),
    ]
    cfg, _ = load_config(CollectConfig, base)
    assert resolve_api_key(cfg) is None
    env_file.write_text('MY_KEY: "sk-from-file"\n')
    assert resolve_api_key(cfg) == "sk-from-file"
    monkeypatch.setenv("MY_KEY", "sk-from-env")
    assert resolve_api_key(cfg) == "sk-from-env"
    assert "sk-" not in json.dumps(cfg.model_dump(mode="json"))


def test_an_env_file_that_is_a_directory_is_an_error(tmp_path, monkeypatch):
    monkeypatch.delenv("MY_KEY", raising=False)
    (tmp_path / "env.yaml").mkdir()
    argv = ["--input", "t.jsonl", "--output", "o.jsonl", "--api_key_env", "MY_KEY"]
    cfg, _ = load_config(CollectConfig, [*argv, "--env_file", str(tmp_path / "env.yaml")])
    with pytest.raises(CollectError, match=r"env file .*env.yaml: not a file"):
        resolve_api_key(cfg)


def test_request_body_maps_params_and_varies_the_seed_per_sample():
    params = {
        "model": "m",
        "max_output_tokens": 7,
        "temperature": 0.5,
        "seed": 1,
        "extra_body": {"service_tier": "flex"},
    }
    a = request_body(params, [{"role": "user", "content": "hi"}], 3, 0)
    b = request_body(params, [{"role": "user", "content": "hi"}], 3, 1)
    assert a["max_completion_tokens"] == 7 and a["service_tier"] == "flex" and a["seed"] != b["seed"]
