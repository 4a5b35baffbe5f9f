"""Offline collector logic: aggregates, the output store, task selection, AIMD, config, diagnose rules."""

from __future__ import annotations

import asyncio
import json

import pytest

from prime_rl.clients.backoff import parse_retry_after
from prime_rl.clients.chat import parse_completion
from prime_rl.collect.config import CollectConfig, MergeConfig, Price
from prime_rl.collect.diagnose import judge
from prime_rl.collect.limiter import AdaptiveLimiter
from prime_rl.collect.metrics import PriceTable, aggregate, pass_at_k
from prime_rl.collect.runner import request_body, resolve_api_key
from prime_rl.collect.store import (
    AppendWriter,
    OutputError,
    iter_records,
    read_failures,
    repair_torn_tail,
    scan_output,
)
from prime_rl.collect.tasks import InputError, iter_tasks, scan_tasks
from prime_rl.config import ConfigError, load_config
from prime_rl.envs.registry import load_env


def rec(task: int, repeat: int, reward: float | None, text: str = "", **extra) -> dict:
    return {
        "task_index": task,
        "repeat_index": repeat,
        "task": {"q": task},
        "response": {"text": text},
        "reward": reward,
        **extra,
    }


# --------------------------------------------------------------------------- aggregates


def test_pass_at_k_matches_the_unbiased_estimator():
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # 1 - C(3,2)/C(4,2)
    assert pass_at_k(4, 2, 4) == 1.0


def test_aggregates_of_a_hand_made_file(tmp_path):
    # task 0: rewards 1,0,0,1 answers a,b,b,a -> majority@4 tie (a first) passes; pass@1 .5
    # task 1: rewards 0,0,0,1 answers c,c,c,d  -> majority wrong; pass@1 .25
    # task 2: rewards 0,0,0,0                   -> nothing passes
    rows = [
        rec(0, 0, 1.0, "A", metrics={"accuracy": 1.0}, usage={"output_tokens": 10}),
        rec(0, 1, 0.0, "b", metrics={"accuracy": 0.0}, usage={"output_tokens": 20}),
        rec(0, 2, 0.0, " b ", metrics={"accuracy": 0.0}),
        rec(0, 3, 1.0, "a", metrics={"accuracy": 1.0}),
        rec(1, 0, 0.0, answer="c"),
        rec(1, 1, 0.0, answer="c"),
        rec(1, 2, 0.0, answer="c"),
        rec(1, 3, 1.0, answer="d"),
        *[rec(2, r, 0.0, "z") for r in range(4)],
        rec(3, 0, None, "unscored", verify_error="verifier timed out"),
    ]
    path = tmp_path / "hand.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    agg = aggregate((r for _, r in iter_records(path)), pass_threshold=1.0)
    assert agg["reward"] == pytest.approx(3 / 12)
    assert agg["accuracy"] == pytest.approx(0.5)  # only task 0 reports it
    assert agg["usage.output_tokens"] == pytest.approx(15.0)
    assert agg["num_records"] == 13 and agg["num_tasks"] == 3 and agg["unscored"] == 1
    assert agg["verify_failures"] == 1
    assert agg["pass@1"] == pytest.approx((0.5 + 0.25 + 0.0) / 3)
    assert agg["pass@2"] == pytest.approx((pass_at_k(4, 2, 2) + pass_at_k(4, 1, 2)) / 3)
    assert agg["pass@4"] == pytest.approx(2 / 3)
    assert agg["majority@4"] == pytest.approx(1 / 3)
    assert agg["majority@2"] == pytest.approx(1 / 3)  # task 0: 'a','b' tie -> 'a' (first) passes
    assert list(agg)[0] == "reward"


def test_single_samples_get_no_pass_at_k():
    agg = aggregate([rec(0, 0, 1.0), rec(1, 0, 0.0)])
    assert agg["reward"] == 0.5 and not any(k.startswith(("pass@", "majority@")) for k in agg)


def test_price_table_matches_prefixes_and_computes_cost():
    table = PriceTable(
        {
            "gpt-4o": Price(input_per_1m=2.5, output_per_1m=10),
            "gpt-4o-mini": Price(input_per_1m=0.15, output_per_1m=0.6),
        }
    )
    assert table.lookup("gpt-4o-mini-2024-07-18").input_per_1m == 0.15
    assert table.lookup("gpt-4o-2024-08-06").input_per_1m == 2.5
    assert table.lookup("tiny") is None
    assert PriceTable.cost(table.lookup("gpt-4o-mini"), 1_000_000, 500_000) == pytest.approx(0.45)
    assert PriceTable.cost(None, 1, 1) is None


# --------------------------------------------------------------------------- the output store


def test_a_torn_last_line_is_cut_and_nothing_before_it_changes(tmp_path):
    out = tmp_path / "out.jsonl"
    with AppendWriter(out) as w:
        for i in range(3):
            w.write(rec(i, 0, 1.0, "x" * 50))
    good = out.read_bytes()
    with open(out, "ab") as f:
        f.write(b'{"task_index": 3, "repeat_index": 0, "task": {"q"')  # a write cut by SIGKILL
    state = scan_output(out)
    assert state.done == {(0, 0), (1, 0), (2, 0)} and state.repaired_bytes > 0
    assert out.read_bytes() == good
    assert b'"task_index": 3' in (tmp_path / "out_torn.log").read_bytes()
    assert repair_torn_tail(out) == 0  # idempotent


def test_a_complete_record_missing_only_its_newline_is_kept(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text(json.dumps(rec(0, 0, 1.0)) + "\n" + json.dumps(rec(1, 0, 0.5)))
    assert scan_output(out).done == {(0, 0), (1, 0)}
    assert out.read_text().endswith("}\n")


def test_a_corrupt_line_inside_the_output_is_named_and_nothing_is_touched(tmp_path):
    out = tmp_path / "out.jsonl"
    text = json.dumps(rec(0, 0, 1.0)) + "\nnot json\n" + json.dumps(rec(1, 0, 1.0)) + "\n"
    out.write_text(text)
    with pytest.raises(OutputError, match=r"out.jsonl:2: not a rollout record"):
        scan_output(out)
    assert out.read_text() == text


def test_failures_count_per_pair(tmp_path):
    path = tmp_path / "f.jsonl"
    with AppendWriter(path) as w:
        for _ in range(2):
            w.write({"task_index": 1, "repeat_index": 0, "error": "boom"})
        w.write({"task_index": 2, "repeat_index": 1, "error": "boom"})
    assert read_failures(path) == {(1, 0): 2, (2, 1): 1}
    assert read_failures(tmp_path / "none.jsonl") == {}


# --------------------------------------------------------------------------- tasks


def write_tasks(path, n: int, bad: dict[int, str] | None = None):
    lines = []
    for i in range(n):
        lines.append((bad or {}).get(i) or json.dumps({"id": i, "prompt": f"task {i}", "answer": str(i)}))
    path.write_text("\n".join(lines) + "\n")


def test_bad_task_lines_are_reported_with_line_numbers(tmp_path):
    path = tmp_path / "tasks.jsonl"
    write_tasks(path, 6, {1: "{oops", 3: json.dumps({"id": 3}), 4: "[1, 2]"})
    sel = scan_tasks(path, None)
    assert [(i.line, i.problem.split(" (")[0].split(":")[0]) for i in sel.issues] == [
        (2, "not valid JSON"),
        (4, "no prompt"),
        (5, "expected a JSON object, got list"),
    ]
    assert sel.selected == [0, 2, 5] and sel.valid_total == 3
    with pytest.raises(InputError, match=r"tasks.jsonl:2: not valid JSON.*--strict"):
        scan_tasks(path, None, strict=True)


def test_env_required_fields_are_checked(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        json.dumps({"question": "1+1?", "answer": "2"}) + "\n" + json.dumps({"question": "2+2?"}) + "\n"
    )
    sel = scan_tasks(path, load_env("math"))
    assert sel.selected == [0]
    assert sel.issues[0].line == 2 and "missing field 'answer'" in sel.issues[0].problem
    ((_, _, messages),) = list(iter_tasks(path, {0}, load_env("math")))
    assert messages[0]["role"] == "system" and messages[-1] == {"role": "user", "content": "1+1?"}


def test_limit_then_shard_is_deterministic(tmp_path):
    path = tmp_path / "tasks.jsonl"
    write_tasks(path, 10, {2: "{bad"})
    full = scan_tasks(path, None, limit=6).selected
    assert full == [0, 1, 3, 4, 5, 6]
    shards = [scan_tasks(path, None, limit=6, shard=(i, 3)).selected for i in range(3)]
    assert sorted(sum(shards, [])) == full
    assert all(t % 3 == i for i, s in enumerate(shards) for t in s)
    assert scan_tasks(path, None, shard=(1, 3)).shard_total == 3  # 1, 4, 7


# --------------------------------------------------------------------------- AIMD


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_limiter_halves_once_per_window_and_climbs_back():
    clock = FakeClock()
    lim = AdaptiveLimiter(16, minimum=2, clock=clock)
    sent = clock.t
    clock.t += 0.1
    assert lim.on_rate_limited(sent, 0.5) and lim.current == 8
    assert not lim.on_rate_limited(sent, 0.5)  # same window: already halved
    assert lim.paused_until == pytest.approx(clock.t + 0.5)
    for _ in range(3):
        clock.t += 0.1
        lim.on_rate_limited(clock.t - 0.01, 0.1)
    assert lim.current == 2 and lim.min_seen == 2  # never below the minimum
    successes = 0
    while lim.current < 16:
        lim.on_success()
        successes += 1
    assert 30 < successes < 200  # about one slot per window of successes
    lim.on_success()
    assert lim.current == 16


async def test_limiter_admits_at_most_limit_and_waits_out_the_pause():
    lim = AdaptiveLimiter(2)
    await lim.acquire()
    await lim.acquire()
    third = asyncio.create_task(lim.acquire())
    await asyncio.sleep(0.01)
    assert not third.done()
    lim.release()
    await asyncio.wait_for(third, 1)
    for _ in range(2):
        lim.release()
    lim.on_rate_limited(sent_at=lim._clock(), retry_after_s=0.2)
    start = lim._clock()
    await lim.acquire()
    assert lim._clock() - start >= 0.19


# --------------------------------------------------------------------------- config, requests


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


def test_retry_after_and_completion_parsing():
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after(None) is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past
    comp = parse_completion(
        {
            "model": "m",
            "choices": [{"message": {"content": "hi"}, "finish_reason": "stop", "token_ids": [1, 2]}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 2},
        },
        "u",
    )
    assert (comp.text, comp.token_ids, comp.input_tokens, comp.output_tokens) == ("hi", [1, 2], 5, 2)


# --------------------------------------------------------------------------- diagnose rules


def row(level, wall, gen, verify=None, n429=0, failed=0):
    return {
        "parallelism": level,
        "wall_s": wall,
        "gen_ms_mean": gen,
        "verify_ms_mean": verify,
        "rate_limited": n429,
        "failed": failed,
    }


def test_diagnose_follows_the_three_bottleneck_guide():
    assert judge(row(5, 10, 100), row(20, 3, 110)).kind == "under_parallelised"
    assert judge(row(5, 10, 100, verify=400), row(20, 9, 100, verify=1500)).kind == "verification"
    assert judge(row(5, 10, 100), row(20, 9.5, 380)).kind == "model_saturated"
    assert judge(row(5, 10, 100), row(20, 9.5, 110)).kind == "network"
    assert judge(row(5, 10, 100), row(20, 3, 100, n429=12)).kind == "rate_limited"
    assert judge(row(5, 10, 100), row(20, 3, 100, failed=3)).kind == "overloaded"


def test_the_shipped_collect_config_loads():
    from pathlib import Path

    conf = Path(__file__).resolve().parents[2] / "configs" / "collect.yaml"
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


def test_a_second_writer_of_the_same_output_is_refused(tmp_path):
    from prime_rl.collect.store import exclusive

    out = tmp_path / "out.jsonl"
    with exclusive(out):
        second = exclusive(out)
        with pytest.raises(OutputError, match="being written by another process"):
            second.__enter__()
    with exclusive(out):  # released
        pass
