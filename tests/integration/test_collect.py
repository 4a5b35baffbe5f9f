"""collect-rollouts as a process, end to end: the real CLI in a child process, real signals and
SIGKILLs, real files, the deferred ``verify`` and the log analyzer on its log, and a run against the
real vLLM server. The fake OpenAI-compatible server (``tests.support.http_server``) stands in for
the model server where a test needs to control it: hold requests at a chosen point, answer 429s.
Whole runs in-process against the fake server are unit tests (tests/unit/collect/test_runs.py)."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from tests.support import FAULTY_ENV
from tests.support.collect import (
    CLI,
    cli_command,
    collect_config,
    keys,
    records,
    sigint_reaches_children,
    wait_for,
    write_tasks,
)
from tests.support.http_server import LocalTestServer, Reply

from prime_rl.collect.runner import collect, request_body
from prime_rl.collect.store import failures_path
from prime_rl.envs.registry import load_env


def completions_seen(server: LocalTestServer) -> int:
    """Chat completion requests the server has received so far (answered, failed or held)."""
    return sum(1 for path, _, _ in server.state.seen if path.endswith("completions"))


def analysed(log, report) -> dict:
    """summary.json of ``analyze-logs LOG --out REPORT``, run as a user runs it."""
    subprocess.run(
        [sys.executable, "-m", "prime_rl.analysis", str(log), "--out", str(report)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return json.loads((report / "summary.json").read_text())


def test_sigkill_at_several_points_then_rerun_keeps_each_pair_exactly_once(tmp_path):
    tasks = write_tasks(tmp_path / "tasks.jsonl", 150)
    out = tmp_path / "out.jsonl"
    with LocalTestServer() as server:
        server.state.default_delay_s = 0.03
        cmd = cli_command(
            tasks, out, server.base_url, "--num_repeats", "2", "--parallel", "8", "--verify.workers", "1"
        )
        for kill_at in (15, 90, 200):
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            while not out.exists() or out.read_bytes().count(b"\n") < kill_at:
                assert proc.poll() is None, "the collector finished before it was killed"
                assert time.monotonic() < deadline
                time.sleep(0.005)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        before = out.read_bytes()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming" in done.stderr
    after = out.read_bytes()
    complete = before[: before.rfind(b"\n") + 1]
    assert after.startswith(complete)  # nothing finished before a kill was rewritten
    assert keys(out) == Counter({(t, r): 1 for t in range(150) for r in range(2)})
    assert json.loads((tmp_path / "out_aggregate_metrics.json").read_text())["num_records"] == 300
    # each run says where it starts in the log it appends to; the analyzer splits the log there
    log = tmp_path / "out_collect.log"
    assert log.read_text().count("[collect] run.start") == 4
    summary = analysed(log, tmp_path / "report")
    assert [r["process"] for r in summary["restarts"]] == ["collector"] * 3


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupt_exits_130_keeps_every_finished_record_and_the_rerun_does_the_rest(tmp_path, sig):
    n, answered, parallel = 40, 10, 4
    tasks = write_tasks(tmp_path / "tasks.jsonl", n)
    out = tmp_path / "out.jsonl"
    with LocalTestServer() as server, sigint_reaches_children():
        cmd = cli_command(tasks, out, server.base_url, "--parallel", str(parallel))
        # the first `answered` requests are answered; every later one waits, unanswered, until
        # released. The signal goes once those records are written and `parallel` requests are held:
        # the run can then neither finish nor write anything more before the signal reaches it.
        server.state.hold_after = answered
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(
                lambda: (
                    server.state.held == parallel
                    and out.exists()
                    and out.read_bytes().count(b"\n") == answered
                ),
                proc,
                f"{answered} records written and {parallel} requests held",
            )
            before = out.read_bytes()
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:  # it did not stop: no collector outlives the test
                proc.kill()
                proc.communicate()
        server.state.release()
        assert proc.returncode == 130, err[-2000:]
        assert "interrupted: every finished sample is in the output" in err
        assert "run the same command again to resume" in err
        # every finished record is there, whole; nothing torn, nothing added, no failure recorded
        assert out.read_bytes() == before and before.endswith(b"\n")
        assert sorted(keys(out).values()) == [1] * answered
        assert not failures_path(out).exists()
        sent_before = completions_seen(server)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        resent = completions_seen(server) - sent_before
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{answered} of {n} samples already there, {n - answered} to go" in done.stderr
    assert resent == n - answered  # nothing finished is asked for again
    assert out.read_bytes().startswith(before)
    assert keys(out) == Counter({(t, 0): 1 for t in range(n)})
    assert json.loads((tmp_path / "out_aggregate_metrics.json").read_text())["num_records"] == n


def test_malformed_task_lines_are_reported_and_skipped_or_fail_with_strict(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    write_tasks(tasks, 5)
    lines = tasks.read_text().splitlines()
    lines[1] = '{"id": "t1", "prompt": '
    lines[3] = '{"id": "t3"}'
    tasks.write_text("\n".join(lines) + "\n")
    with LocalTestServer() as server:
        base = cli_command(tasks, tmp_path / "out.jsonl", server.base_url)
        ok = subprocess.run(base, capture_output=True, text=True, timeout=120)
        written = (tmp_path / "out.jsonl").read_bytes()
        strict = subprocess.run([*base, "--strict"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert "tasks.jsonl:2: not valid JSON" in ok.stderr and "tasks.jsonl:4: no prompt" in ok.stderr
    assert sorted(k[0] for k in keys(tmp_path / "out.jsonl")) == [0, 2, 4]
    assert strict.returncode == 2 and "tasks.jsonl:2: not valid JSON" in strict.stderr
    assert (tmp_path / "out.jsonl").read_bytes() == written


def test_no_verify_then_verify_rollouts_scores_like_inline(tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 10)
    raw, scored = tmp_path / "raw.jsonl", tmp_path / "scored.jsonl"
    with LocalTestServer() as server:
        asyncio.run(
            collect(
                collect_config(
                    server.base_url, tmp_path, "--no-verify", "--output", str(raw), "--num_repeats", "2"
                )
            )
        )
        inline = asyncio.run(collect(collect_config(server.base_url, tmp_path, "--num_repeats", "2")))
    assert all(r["reward"] is None and not r["verified"] for r in records(raw))
    proc = subprocess.run(
        [
            *CLI,
            "verify",
            "--input",
            str(raw),
            "--output",
            str(scored),
            "--env",
            "toy",
            "--verify.workers",
            "2",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["num_records"] == 20
    got = {(r["task_index"], r["repeat_index"]): (r["reward"], r["metrics"]) for r in records(scored)}
    want = {
        (r["task_index"], r["repeat_index"]): (r["reward"], r["metrics"])
        for r in records(tmp_path / "out.jsonl")
    }
    assert got == want and inline.written == 20
    again = subprocess.run(
        [*CLI, "verify", "--input", str(raw), "--output", str(scored), "--env", "toy", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0 and len(records(scored)) == 20  # resumed: nothing twice


@pytest.mark.parametrize("case", ["slow_verifier", "rate_limited"])
def test_the_analyzer_reads_the_collector_log(tmp_path, case):
    tasks = write_tasks(tmp_path / "tasks.jsonl", 30)
    out = tmp_path / "out.jsonl"
    with LocalTestServer() as server:
        extra = ["--env", "toy"]
        if case == "slow_verifier":
            extra = [
                "--env",
                FAULTY_ENV,
                "--env_options",
                json.dumps({"mode": "slow", "delay_s": 0.03}),
                "--verify.workers",
                "1",
            ]
        else:  # the first 16 requests are refused, however long the collector takes to start
            server.state.script("/v1/chat/completions", *[Reply(429, retry_after=0.2)] * 16)
        proc = subprocess.run(
            [
                *CLI,
                "--input",
                str(tasks),
                "--output",
                str(out),
                "--base_urls",
                server.base_url,
                "--model",
                "m",
                "--parallel",
                "8",
                "--no-progress",
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = tmp_path / "out_collect.log"
    assert log.read_text().count("rollout.done") == 30
    summary = analysed(log, tmp_path / "report")
    kinds = [f["kind"] for f in summary["findings"]]
    if case == "slow_verifier":
        assert summary["primary"]["kind"] == "verification_bound", kinds
    else:
        assert "rate_limited" in kinds and summary["counts"]["retry.429"] > 0
    assert summary["stats"]["collect_gen_ms"]["count"] == 30


@pytest.mark.slow
def test_records_from_the_real_vllm_server_hold_its_tokens_their_text_and_the_env_score(
    inference_server, tiny_model, tmp_path
):
    from transformers import AutoTokenizer

    tasks = write_tasks(tmp_path / "tasks.jsonl", 6)
    max_tokens, seed = 8, 7
    cfg = collect_config(
        inference_server.base_url,
        tmp_path,
        "--num_repeats",
        "2",
        "--model",
        inference_server.model,
        "--responses_create_params.max_output_tokens",
        str(max_tokens),
        "--responses_create_params.seed",
        str(seed),
    )
    result = asyncio.run(collect(cfg))
    assert result.written == 12 and result.failed == 0 and result.samples_per_s > 0
    out = tmp_path / "out.jsonl"
    assert keys(out) == Counter({(t, r): 1 for t in range(6) for r in range(2)})
    tok = AutoTokenizer.from_pretrained(tiny_model)
    vocab = json.loads((tiny_model / "config.json").read_text())["vocab_size"]  # more than len(tok)
    env = load_env("toy", {})
    rows = [json.loads(line) for line in tasks.read_text().splitlines()]
    params = {
        "model": inference_server.model,
        "max_output_tokens": max_tokens,
        "temperature": 1.0,
        "seed": seed,
    }
    rewards = []
    for r in records(out):
        t, rep, resp, usage = r["task_index"], r["repeat_index"], r["response"], r["usage"]
        assert r["task"] == rows[t]
        # the prompt vLLM saw is the chat template of this task's prompt
        want_prompt = tok.apply_chat_template(
            env.prompt(rows[t]), add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]
        assert resp["prompt_token_ids"] == list(want_prompt)
        assert usage["input_tokens"] == len(want_prompt)
        # the text is what the token ids decode to, and the counts and finish reason agree with them
        ids = resp["token_ids"]
        assert 1 <= len(ids) == usage["output_tokens"] <= max_tokens
        assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
        assert all(isinstance(i, int) and 0 <= i < vocab for i in ids)
        assert resp["text"] == tok.decode(ids, skip_special_tokens=True)
        assert resp["finish_reason"] in ("stop", "length")
        assert resp["finish_reason"] == "stop" or len(ids) == max_tokens
        # the reward and metrics are the env's score of that text
        score = env.score(rows[t], resp["text"])
        assert r["verified"] and "verify_error" not in r
        assert r["reward"] == pytest.approx(score.reward)
        assert r["metrics"] == pytest.approx(score.metrics)
        rewards.append(r["reward"])
        # what answered, and the sampling parameters, with the seed this sample was sent
        sent = request_body(params, env.prompt(rows[t]), t, rep)
        assert r["params"] == {**params, "seed": sent["seed"]}
        assert r["model"] == inference_server.model and r["server"] == inference_server.base_url
        assert r["attempts"] == 1
    assert len({r["params"]["seed"] for r in records(out)}) == 12  # a seed per sample
    agg = json.loads((tmp_path / "out_aggregate_metrics.json").read_text())
    assert agg["num_records"] == 12 and agg["unscored"] == 0
    assert agg["reward"] == pytest.approx(sum(rewards) / 12)


@pytest.mark.slow
def test_nemo_gym_rows_with_their_own_tools_and_sampling_run_unchanged_against_the_real_server(
    inference_server, tmp_path
):
    """Each row's responses_create_params (Responses-shaped tools, tool_choice, temperature,
    max_output_tokens, vLLM's structured_outputs) reach vLLM: its validation accepts the tools in
    chat shape, and the answer is the text the row's own regex forces."""
    forced = '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    add = {
        "type": "function",
        "name": "add",
        "description": "Add numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]},
    }
    rows = [
        {
            "responses_create_params": {
                "input": [{"role": "user", "content": f"add {i} and 1"}],
                "tools": [add],
                "tool_choice": "none",
                "temperature": 0.5 + i / 10,
                "max_output_tokens": 96,
                "structured_outputs": {"regex": re.escape(forced)},
            },
            "id": f"row-{i}",
        }
        for i in range(3)
    ]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = collect_config(inference_server.base_url, tmp_path, "--model", inference_server.model)
    result = asyncio.run(collect(cfg))
    assert result.written == 3 and result.failed == 0
    for r in records(tmp_path / "out.jsonl"):
        i = r["task_index"]
        assert r["task"] == rows[i]  # the row is recorded as it was read
        assert r["response"]["text"] == forced
        assert r["params"]["temperature"] == pytest.approx(0.5 + i / 10)
        assert r["params"]["max_output_tokens"] == 96 and r["params"]["model"] == inference_server.model
        assert r["params"]["extra_body"]["tools"] == [add]


@pytest.mark.slow
def test_the_responses_api_backend_collects_from_the_real_server(inference_server, tmp_path):
    write_tasks(tmp_path / "tasks.jsonl", 3)
    cfg = collect_config(
        inference_server.base_url,
        tmp_path,
        "--api",
        "responses",
        "--model",
        inference_server.model,
        "--responses_create_params.max_output_tokens",
        "5",
    )
    result = asyncio.run(collect(cfg))
    assert result.written == 3 and result.failed == 0
    for r in records(tmp_path / "out.jsonl"):
        assert 1 <= r["usage"]["output_tokens"] <= 5 and r["usage"]["input_tokens"] > 0
        assert r["response"]["finish_reason"] in ("stop", "length") and "token_ids" not in r["response"]
        assert r["verified"] and r["reward"] is not None
