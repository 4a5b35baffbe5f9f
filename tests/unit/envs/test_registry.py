"""prime_rl.envs.registry and the built-in environments: scoring, and errors that name the problem."""

from __future__ import annotations

import json

import pytest

from prime_rl.envs.base import EnvError
from prime_rl.envs.registry import available, load_env


def test_environments_score_their_tasks(tmp_path):
    assert {"toy", "math", "reasoning_gym"} <= set(available())
    toy = load_env("toy")
    task = next(toy.tasks(0))
    assert task["prompt"][-1]["role"] == "user"
    assert toy.score(task, "aei ou!").reward == 1.0 and toy.score(task, "xyz").reward == 0.0
    assert toy.score(task, "").reward == 0.0

    data = tmp_path / "math.jsonl"
    data.write_text(json.dumps({"question": "1/2 + 1/4?", "answer": "3/4"}) + "\n")
    math_env = load_env("math", {"path": str(data)})
    t = next(math_env.tasks(0))
    assert math_env.score(t, "The answer is \\boxed{0.75}").reward == 1.0
    assert math_env.score(t, "\\boxed{2}").reward == 0.0

    rg = load_env("reasoning_gym", {"dataset": "basic_arithmetic", "size": 5})
    t = next(rg.tasks(3))
    assert rg.score(t, str(t["answer"])).reward == 1.0
    assert rg.score(t, "not a number").reward == 0.0


def test_environment_errors_name_the_problem(tmp_path):
    with pytest.raises(EnvError, match="unknown environment 'nope'"):
        load_env("nope")
    with pytest.raises(EnvError, match="needs the option 'path'"):
        load_env("math").tasks(0)  # scoring alone needs no path (offline collection)
    assert load_env("math").score({"answer": "4"}, "\\boxed{4}").reward == 1.0
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "1"}\n{"question": "q2"}\n')
    with pytest.raises(EnvError, match=r"bad.jsonl:2: missing field 'answer'"):
        load_env("math", {"path": str(bad)})
    bad.write_text("{oops\n")
    with pytest.raises(EnvError, match=r"bad.jsonl:1: not valid JSON"):
        load_env("math", {"path": str(bad)})
    bad.write_text('{"question": "q", "answer": "1"}\n{"question": "q", "answer": Infinity}\n')
    with pytest.raises(EnvError, match=r"bad.jsonl:2: not valid JSON: Infinity is not a JSON number"):
        load_env("math", {"path": str(bad)})
    bad.write_bytes(b'{"question": "q", "answer": "1"}\n{"question": "caf\xe9", "answer": "2"}\n')
    with pytest.raises(EnvError, match=r"bad.jsonl:2: not UTF-8 \(invalid continuation byte at byte 17\)"):
        load_env("math", {"path": str(bad)})
    bad.write_bytes(b'\xef\xbb\xbf{"question": "q", "answer": "1"}\n')  # a BOM, as collect-rollouts takes it
    assert next(load_env("math", {"path": str(bad)}).tasks(0))["answer"] == "1"
    with pytest.raises(EnvError, match="bad options"):
        load_env("toy", {"unexpected": 1})
    with pytest.raises(EnvError, match="cannot import"):
        load_env("no.such.module:Env")


def test_environments_load_from_a_module_path_or_a_file(tmp_path):
    from tests.support import FAULTY_ENV

    assert type(load_env(FAULTY_ENV, {"mode": "raise"})).__name__ == "FaultyEnv"
    assert type(load_env("prime_rl.envs.toy:VowelEnv")).__name__ == "VowelEnv"
    user = tmp_path / "my_env.py"
    user.write_text("from prime_rl.envs.toy import VowelEnv\n\nclass Mine(VowelEnv):\n    pass\n")
    env = load_env(f"{user}:Mine")
    assert type(env).__name__ == "Mine" and env.name == f"{user}:Mine"
    with pytest.raises(EnvError, match=r"cannot import: no file"):
        load_env(f"{tmp_path / 'missing.py'}:Mine")
    with pytest.raises(EnvError, match="cannot import"):
        load_env(f"{user}:NoSuchClass")
    with pytest.raises(EnvError, match=r"unknown environment 'nope'.*path/to/file.py:Class"):
        load_env("nope")


def test_toy_max_letters_gives_long_answers_nothing():
    plain, word = load_env("toy"), load_env("toy", {"max_letters": 4})
    assert plain.score({}, "aeiouaeiou").reward == 1.0
    assert word.score({}, "aei").reward == 1.0
    assert word.score({}, "aeiouaeiou").reward == 0.0  # not one word: however many vowels
    assert word.score({}, "abab").reward == pytest.approx(0.5)
    with pytest.raises(EnvError, match="max_letters must be a positive integer"):
        load_env("toy", {"max_letters": 0})


def test_an_unknown_environment_name_is_refused_when_the_config_loads(tmp_path):
    from prime_rl.config import ConfigError, load_config
    from prime_rl.launcher.config import RLConfig
    from prime_rl.orchestrator.config import OrchestratorConfig

    with pytest.raises(
        ConfigError, match=r"env\.name: .*unknown environment 'nosuchenv'; available: guess, math"
    ):
        load_config(OrchestratorConfig, ["--env.name", "nosuchenv"])
    with pytest.raises(ConfigError, match=r"orchestrator\.env\.name: .*unknown environment 'nosuchenv'"):
        load_config(RLConfig, ["--model", str(tmp_path), "--orchestrator.env.name", "nosuchenv"])
    for name in ("math", "some.module:Env", "envs/mine.py:Env"):  # import paths are resolved when built
        assert load_config(OrchestratorConfig, ["--env.name", name])[0].env.name == name
