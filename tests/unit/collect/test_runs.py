"""Whole collector runs in this process (``collect``, ``diagnose``, ``merge``) over real HTTP against
the fake OpenAI-compatible server of ``tests.support.http_server``: scoring and aggregates,
resuming, shards, 429 storms, 5xx, a dead server, dropped connections, the failures file,
``diagnose`` and ``--estimate``. The collector as a process (signals, kills, the CLI) and against
the real vLLM server is in tests/integration/test_collect.py."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from tests.support import FAULTY_ENV
from tests.support.collect import collect_config, keys, records, write_tasks
from tests.support.http_server import LocalTestServer, text_by_seed
from tests.support.proxy import TcpProxy

from prime_rl.collect.config import DiagnoseConfig, MergeConfig
from prime_rl.collect.diagnose import diagnose
from prime_rl.collect.merge import merge
from prime_rl.collect.runner import collect
from prime_rl.config import load_config
from prime_rl.dev.server import free_port


def test_collects_scores_and_resumes_against_a_server(tmp_path, monkeypatch):
    write_tasks(tmp_path / "tasks.jsonl", 12)
    monkeypatch.setenv("TEST_COLLECT_KEY", "sk-test-secret-123")
    with LocalTestServer() as server:
        cfg = collect_config(
            server.base_url,
            tmp_path,
            "--num_repeats",
            "3",
            "--verify.workers",
            "2",
            "--api_key_env",
            "TEST_COLLECT_KEY",
        )
        first = asyncio.run(collect(cfg))
        again = asyncio.run(collect(cfg))
    assert first.written == 36 and first.failed == 0 and again.written == 0 and again.already_done == 36
    rows = records(tmp_path / "out.jsonl")
    assert keys(tmp_path / "out.jsonl") == Counter({(t, r): 1 for t in range(12) for r in range(3)})
    row = rows[0]
    assert row["task"]["id"].startswith("t") and row["response"]["text"] == "x" * 6
    assert len(row["response"]["token_ids"]) == row["usage"]["output_tokens"] == 6
    assert row["usage"]["total_tokens"] == row["usage"]["input_tokens"] + 6
    assert row["reward"] == 0.0 and row["metrics"] == {"vowel_frac": 0.0, "letters": 6.0} and row["verified"]
    assert set(row["timings"]) == {"queue_ms", "gen_ms", "verify_ms", "total_ms"}
    assert row["params"] == {"model": "m", "max_output_tokens": 6, "temperature": 1.0}
    agg = json.loads((tmp_path / "out_aggregate_metrics.json").read_text())
    assert agg["num_records"] == 36 and agg["pass@3"] == 0.0 and agg["letters"] == 6.0
    # the key reached the server, and nothing written holds it
    assert {h.get("authorization") for p, _, h in server.state.seen if p.endswith("completions")} == {
        "Bearer sk-test-secret-123"
    }
    for f in tmp_path.iterdir():
        assert "sk-test-secret" not in f.read_text(errors="replace"), f


def test_aggregates_of_mixed_rewards_and_verifier_failures_match_hand_computed_values(tmp_path):
    # toy env, pass threshold 1.0: A = "aeiou" (reward 1, passes), W1 = "aab" (2/3), W2 = "bcd" (0)
    A, W1, W2 = "aeiou", "aab", "bcd"
    answers = {0: [A, A, A, A], 1: [W1, A, W2, A], 2: [W1, W1, W1, A], 3: [W2, W2, W2, W2]}
    write_tasks(tmp_path / "tasks.jsonl", 4)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    with LocalTestServer() as server:
        server.state.reply_text = text_by_seed(lambda t, r: answers[t][r])
        result = asyncio.run(
            collect(
                collect_config(
                    server.base_url,
                    mixed,
                    "--num_repeats",
                    "4",
                    "--responses_create_params.seed",
                    "0",  # the server reads (task, repeat) back from each sample's seed
                    "--verify.workers",
                    "2",
                    tasks=tmp_path / "tasks.jsonl",
                )
            )
        )
    assert result.written == 16 and result.failed == 0
    rows = records(mixed / "out.jsonl")
    assert {(r["task_index"], r["repeat_index"]): r["response"]["text"] for r in rows} == {
        (t, i): text for t, texts in answers.items() for i, text in enumerate(texts)
    }
    assert {r["response"]["text"]: r["reward"] for r in rows} == {A: 1.0, W1: pytest.approx(2 / 3), W2: 0.0}
    agg = json.loads((mixed / "out_aggregate_metrics.json").read_text())
    # reward: t0 4*1 + t1 (2/3 + 1 + 0 + 1) + t2 (3 * 2/3 + 1) + t3 0 = 4 + 8/3 + 3 = 29/3, over 16
    assert agg["reward"] == pytest.approx(29 / 48)
    assert agg["num_records"] == 16 and agg["num_tasks"] == 4 and agg["samples_per_task"] == 4
    assert agg["unscored"] == 0 and agg["verify_failures"] == 0 and agg["verify_failure_rate"] == 0.0
    # passing per task c = 4, 2, 1, 0 of n = 4. pass@1 = (4/4 + 2/4 + 1/4 + 0) / 4 = 7/16
    assert agg["pass@1"] == pytest.approx(7 / 16)
    # pass@2 = 1 - C(n-c,2)/C(4,2): 1, 1 - 1/6 = 5/6, 1 - 3/6 = 1/2, 0 -> (1 + 5/6 + 1/2) / 4 = 7/12
    assert agg["pass@2"] == pytest.approx(7 / 12)
    # pass@4: tasks 0-2 have a passing sample, task 3 none -> 3/4
    assert agg["pass@4"] == pytest.approx(3 / 4)
    # majority@2 (repeats 0,1): t0 A,A passes; t1 W1,A tie -> W1 (first) fails; t2 W1; t3 W2 -> 1/4
    assert agg["majority@2"] == pytest.approx(1 / 4)
    # majority@4: t0 A; t1 A (2 votes) beats W1, W2 (1 each): passes; t2 W1 (3); t3 W2 -> 2/4
    assert agg["majority@4"] == pytest.approx(2 / 4)

    # verifier failures: FaultyEnv raises on tasks whose n is even (every=2), else rewards 1.0
    faulty_tasks = tmp_path / "faulty_tasks.jsonl"
    faulty_tasks.write_text(
        "".join(
            json.dumps({"id": f"f{i}", "prompt": f"Say anything ({i}).", "n": i}) + "\n" for i in range(4)
        )
    )
    faulty = tmp_path / "faulty"
    faulty.mkdir()
    with LocalTestServer() as server:
        result = asyncio.run(
            collect(
                collect_config(
                    server.base_url,
                    faulty,
                    "--num_repeats",
                    "2",
                    "--env",
                    FAULTY_ENV,
                    "--env_options",
                    json.dumps({"mode": "raise", "every": 2}),
                    tasks=faulty_tasks,
                )
            )
        )
    assert result.written == 8 and result.verify_failures == 4
    rows = records(faulty / "out.jsonl")
    assert sorted((r["task_index"], r["reward"], bool(r.get("verify_error"))) for r in rows) == [
        (0, None, True), (0, None, True), (1, 1.0, False), (1, 1.0, False),
        (2, None, True), (2, None, True), (3, 1.0, False), (3, 1.0, False),
    ]  # fmt: skip
    agg = json.loads((faulty / "out_aggregate_metrics.json").read_text())
    # reward: the mean over the 4 scored samples only (all 1.0); the 4 failures are reported apart
    assert agg["reward"] == 1.0 and agg["unscored"] == 4
    assert agg["num_records"] == 8 and agg["num_tasks"] == 4 and agg["samples_per_task"] == 2
    assert agg["verify_failures"] == 4 and agg["verify_failure_rate"] == pytest.approx(4 / 8)
    # a verifier failure is a failed sample: c = 0, 2, 0, 2 of n = 2 per task
    # pass@1 = (0 + 1 + 0 + 1) / 4 = 1/2 (dropping the failures gave 2/2 = 1.0)
    assert agg["pass@1"] == pytest.approx(1 / 2)
    # pass@2 and majority@2: tasks 1 and 3 pass, tasks 0 and 2 (no vote at all) fail -> 2/4
    assert agg["pass@2"] == pytest.approx(2 / 4) and agg["majority@2"] == pytest.approx(2 / 4)


def test_shards_merged_equal_an_unsharded_run(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 23)
    whole_dir, shard_dir = tmp_path / "whole", tmp_path / "shards"
    whole_dir.mkdir(), shard_dir.mkdir()
    with LocalTestServer() as server:
        asyncio.run(
            collect(
                collect_config(
                    server.base_url,
                    whole_dir,
                    "--num_repeats",
                    "2",
                    "--limit",
                    "20",
                    tasks=tmp_path / "tasks.jsonl",
                )
            )
        )
        for i in range(3):
            cfg = collect_config(
                server.base_url,
                shard_dir,
                "--num_repeats",
                "2",
                "--limit",
                "20",
                "--shard",
                f"{i}/3",
                "--output",
                str(shard_dir / f"out_{i}.jsonl"),
                tasks=tmp_path / "tasks.jsonl",
            )
            asyncio.run(collect(cfg))
    shards = [shard_dir / f"out_{i}.jsonl" for i in range(3)]
    assert sum(len(records(s)) for s in shards) == 40 and all(len(records(s)) > 0 for s in shards)
    # the first shard listed twice: its pairs are deduplicated, not doubled
    cfg, _ = load_config(
        MergeConfig, ["--output", str(tmp_path / "merged.jsonl"), *map(str, shards), str(shards[0])]
    )
    result = merge(cfg)
    assert result.records == 40 and result.duplicates == len(records(shards[0]))

    def essence(path: Path) -> list:
        return [
            (r["task_index"], r["repeat_index"], r["task"], r["response"]["text"], r["reward"], r["metrics"])
            for r in records(path)
        ]

    assert essence(tmp_path / "merged.jsonl") == sorted(essence(whole_dir / "out.jsonl"), key=lambda e: e[:2])
    merged_agg = json.loads((tmp_path / "merged_aggregate_metrics.json").read_text())
    whole_agg = json.loads((whole_dir / "out_aggregate_metrics.json").read_text())
    for k in ("reward", "pass@1", "pass@2", "majority@2", "num_records", "num_tasks", "usage.total_tokens"):
        assert merged_agg[k] == pytest.approx(whole_agg[k]), k


def test_a_429_storm_honours_retry_after_and_parallelism_falls_and_recovers(tmp_path):
    """48 refusals in the first window of 64 answers cut the parallelism (to 8-10); the ~350
    accepted answers after it are more than the 8 windows of 32 it takes to climb back to 16.
    (A storm of 1.2 s instead of 48 requests cut it twice on a loaded machine, and 400 tasks were
    then too few to climb back: 15 at the end.)"""
    write_tasks(tmp_path / "tasks.jsonl", 400)
    with LocalTestServer() as server:
        server.state.storm_retry_after = 0.3
        server.state.storm_requests = 48
        result = asyncio.run(collect(collect_config(server.base_url, tmp_path, "--parallel", "16")))
        answered = list(server.state.answered)
    assert result.written == 400 and result.failed == 0
    assert result.rate_limited > 0
    assert result.min_parallel < 16  # it backed off ...
    assert result.final_parallel == 16  # ... and climbed back once the storm was over
    by_trace = defaultdict(list)
    for t, status, trace in answered:
        by_trace[trace].append((t, status))
    waits = [
        b[0] - a[0] for seq in by_trace.values() for a, b in zip(seq, seq[1:], strict=False) if a[1] == 429
    ]
    assert waits and min(waits) >= 0.3 - 0.02  # no retry came before its Retry-After
    assert keys(tmp_path / "out.jsonl") == Counter({(t, 0): 1 for t in range(400)})


def test_random_429s_are_retried_per_request_and_the_parallelism_stays_up(tmp_path):
    """Old limiter: each 429 paused every request and halved the parallelism, which fell to 1-2
    under a steady 20% of 429s and never recovered."""
    write_tasks(tmp_path / "tasks.jsonl", 300)
    with LocalTestServer() as server:
        server.state.rate_limit_fraction = 0.2
        server.state.rate_limit_retry_after = 0.2
        server.state.default_delay_s = 0.02
        result = asyncio.run(collect(collect_config(server.base_url, tmp_path, "--parallel", "16")))
        answered = list(server.state.answered)
    assert result.written == 300 and result.failed == 0 and result.pauses == 0
    assert 30 < result.rate_limited < 150  # about a fifth of ~375 requests
    assert result.min_parallel >= 10 and result.final_parallel == 16
    refused_at: dict[str, float] = {}
    retried_early = 0
    for t, status, trace in answered:  # a refused request came back only after its Retry-After
        if status == 429:
            refused_at[trace] = t
        elif trace in refused_at and t - refused_at[trace] < 0.2 - 0.02:
            retried_early += 1
    assert retried_early == 0
    assert keys(tmp_path / "out.jsonl") == Counter({(t, 0): 1 for t in range(300)})


def test_a_used_up_quota_pauses_every_request_until_it_resets(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 60)
    with LocalTestServer() as server:
        server.state.default_delay_s = 0.01
        server.state.quota_until = time.monotonic() + 0.6  # 429 + x-ratelimit-remaining-requests: 0
        result = asyncio.run(collect(collect_config(server.base_url, tmp_path, "--parallel", "8")))
        seen = [t for p, t, _ in server.state.seen if p.endswith("completions")]
        first_refused = min(t for t, status, _ in server.state.answered if status == 429)
        quota_until = server.state.quota_until
    assert result.written == 60 and result.failed == 0 and result.rate_limited >= 1 and result.pauses >= 1
    # after the first refusal no request was sent until the quota reset (those already in flight
    # arrive within a few ms of it)
    assert not [t for t in seen if first_refused + 0.05 < t < quota_until - 0.01]
    assert keys(tmp_path / "out.jsonl") == Counter({(t, 0): 1 for t in range(60)})


def test_server_errors_and_a_dead_server_are_retried(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 40)
    dead = f"http://127.0.0.1:{free_port()}"
    # Every 4th request fails, whichever task sent it: one task's retries can land on those turns
    # again and again (the default 4 retries ran out for one task in a loaded CI run; in 300 runs
    # here 61 tasks needed all 5 attempts). 12 retries, at most 0.1 s apart, put that out of reach.
    retries = ("--retry.max_retries", "12", "--retry.backoff_max_s", "0.1")
    with LocalTestServer() as server:
        server.state.fail_every = 4  # every 4th request: HTTP 500
        result = asyncio.run(
            collect(collect_config([dead, server.base_url], tmp_path, "--parallel", "4", *retries))
        )
    assert result.failed == 0, (tmp_path / "out_failures.jsonl").read_text()
    assert result.written == 40 and result.failed == 0 and result.retries >= 10
    assert keys(tmp_path / "out.jsonl") == Counter({(t, 0): 1 for t in range(40)})


def test_connections_dropped_mid_request_are_retried_on_another_server(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 60)
    with LocalTestServer() as server:
        server.state.default_delay_s = 0.1  # requests are in flight when the proxy dies

        async def scenario():
            proxy = await TcpProxy(server.port).start()
            run = asyncio.create_task(
                collect(collect_config([proxy.url, server.base_url], tmp_path, "--parallel", "8"))
            )
            while proxy.connections < 2 and not run.done():
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            await proxy.kill()  # drops every connection through it, mid-request
            return await asyncio.wait_for(run, 120)

        result = asyncio.run(scenario())
    assert result.written == 60 and result.failed == 0 and result.retries >= 1
    assert keys(tmp_path / "out.jsonl") == Counter({(t, 0): 1 for t in range(60)})


def test_failed_pairs_go_to_the_failures_file_and_are_retried_next_run_bounded(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 6)
    out, failures = tmp_path / "out.jsonl", tmp_path / "out_failures.jsonl"
    args = ("--retry.max_retries", "1", "--retry.max_attempts", "2")
    with LocalTestServer() as server:
        server.state.fail_every = 1  # everything fails
        first = asyncio.run(collect(collect_config(server.base_url, tmp_path, *args)))
        assert first.failed == 6 and not out.read_text()
        rows = records(failures)
        assert len(rows) == 6 and "HTTP 500" in rows[0]["error"] and rows[0]["attempts"] == 2
        second = asyncio.run(
            collect(collect_config(server.base_url, tmp_path, *args))
        )  # the next run retries them
        assert second.failed == 6 and len(records(failures)) == 12
        server.state.fail_every = 0
        third = asyncio.run(collect(collect_config(server.base_url, tmp_path, *args)))
        assert third.given_up == 6 and third.written == 0  # two runs failed them: bounded
        fourth = asyncio.run(collect(collect_config(server.base_url, tmp_path, "--retry.max_attempts", "3")))
    assert fourth.written == 6 and fourth.given_up == 0
    assert keys(out) == Counter({(t, 0): 1 for t in range(6)})


@pytest.mark.slow  # two runs at two parallelism levels each, timed: about 5 s
def test_diagnose_tells_a_slow_server_from_a_slow_verifier(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 20)
    with LocalTestServer() as server:
        server.state.default_delay_s = 0.15
        model_bound = asyncio.run(
            diagnose(
                collect_config(server.base_url, tmp_path, "--low", "2", "--high", "10", model=DiagnoseConfig)
            )
        )
        server.state.default_delay_s = 0.0
        verify_bound = asyncio.run(
            diagnose(
                collect_config(
                    server.base_url,
                    tmp_path,
                    "--low",
                    "2",
                    "--high",
                    "10",
                    "--env",
                    FAULTY_ENV,
                    "--env_options",
                    json.dumps({"mode": "slow", "delay_s": 0.05}),
                    "--verify.workers",
                    "1",
                    model=DiagnoseConfig,
                )
            )
        )
    assert model_bound["verdict"] == "under_parallelised", model_bound
    assert verify_bound["verdict"] == "verification", verify_bound
    assert not (tmp_path / "out.jsonl").exists()  # diagnose never writes the real output
    assert (tmp_path / "out_diagnose" / "diagnosis.json").exists()


def test_estimate_extrapolates_cost_and_time_to_the_whole_file(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 40)
    prices = json.dumps({"m": {"input_per_1m": 1.0, "output_per_1m": 2.0}})
    with LocalTestServer() as server:
        result = asyncio.run(
            collect(
                collect_config(server.base_url, tmp_path, "--limit", "10", "--estimate", "--prices", prices)
            )
        )
    est = json.loads((tmp_path / "out_estimate.json").read_text())
    per_sample = (3 * 1.0 + 6 * 2.0) / 1e6  # the test server: 3 prompt tokens, 6 generated
    assert result.cost == pytest.approx(10 * per_sample)
    assert est["samples_in_file"] == 40 and est["samples_remaining"] == 30
    assert est["projected_total_cost"] == pytest.approx(40 * per_sample)
    assert est["projected_remaining_s"] > 0
