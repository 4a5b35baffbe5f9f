"""The whole loop: real vLLM server, real trainer, real orchestrator, through the `rl` launcher."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support import FAULTY_ENV
from tests.support.learning import Verdict, verdict
from tests.support.processes import descendants, new_descendants

from prime_rl.config import load_config
from prime_rl.dev.server import free_port
from prime_rl.paths import RunPaths
from prime_rl.tracing import parse_tagged
from prime_rl.transport.rollouts import read_rollout_batch

pytestmark = pytest.mark.slow

DEBUG_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "debug" / "rl.toml"
GUESS_CONFIG = DEBUG_CONFIG.with_name("rl_guess.toml")


def rl(
    model: Path, out: Path, *args: str, timeout: float = 600, config: Path = DEBUG_CONFIG
) -> subprocess.CompletedProcess:
    argv = [
        sys.executable,
        "-m",
        "prime_rl.launcher.main",
        "--config",
        str(config),
        "--model",
        str(model),
        "--output_dir",
        str(out),
        "--inference",
        json.dumps({"port": free_port()}),
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def tagged(path: Path, tag: str) -> list:
    return [p for p in map(parse_tagged, path.read_text().splitlines()) if p and p.tag == tag]


def metrics(out: Path, process: str) -> list[dict]:
    rows = [json.loads(x) for x in RunPaths(out).metrics_file.read_text().splitlines()]
    return [r for r in rows if r["process"] == process]


def assert_learned(rewards: list[float], trunc_pct: list[float] | None = None) -> None:
    """The run's reward rose for real, on answers it ends (tests/support/learning.py's verdict)."""
    v = verdict(rewards, trunc_pct)
    assert v.learned, (v.failures, rewards, trunc_pct)


def describe(v: Verdict) -> str:
    trunc = (
        "" if v.trunc_first is None else f", cut off {v.trunc_first:.1f}% -> {v.trunc_best:.1f}% (best steps)"
    )
    return f"reward rose by {v.rise:.3f}, {v.pairs:g} of 36 pairs{trunc}"


def learning_run(model: Path, tmp_path: Path, config: Path = DEBUG_CONFIG, *, with_trunc: bool = True):
    """One run of a demo, and a second when the first did not learn or collapsed; the second must learn.

    RL of a random tiny model, sampled unseeded at temperature 1 on two shared cores, is not learned
    in every run. On 2026-11-28, with the trainer on one thread, the toy demo collapsed in 1 run of 8
    (its policy sharpened onto repeating ``ua`` past the answer's end, every answer cut off), and a CI
    run that rose by 0.26 had late steps under early ones: 26 of the 36 pairs, 30 asked. The demo's
    entropy bonus is now 0.05 (10 runs of 10 learned, none collapsed); a rare failed run costs one
    more run, not the suite. A loop that does not learn (steps that differ by noise of sd 0.02, 20,000
    simulated runs) passes the rank and rise criteria by chance in 0.4% of runs, so in under 1% with
    the second: the test still catches it. Returns the judged run's directory, launcher result and orchestrator rows."""
    for attempt in ("run", "second_run"):
        out = tmp_path / attempt
        done = rl(model, out, "--max_steps", "30", config=config)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        rows = metrics(out, "orchestrator")
        rewards = [r["reward_mean"] for r in rows]
        trunc = [r["trunc_pct"] for r in rows] if with_trunc else None
        v = verdict(rewards, trunc)
        print(f"{attempt}: {describe(v)}{', collapsed' if v.collapsed else ''} {v.failures}")
        if v.learned and not v.collapsed:
            break
        print(f"{attempt} did not learn or collapsed: {rewards} {trunc}")
    return out, done, rows


def test_toy_task_learns_on_answers_it_ends_with_staleness_bounded_by_async_level(tiny_model, tmp_path):
    out, done, rows = learning_run(tiny_model, tmp_path)
    assert "| step 29 |" in done.stdout  # the orchestrator's reward per step reaches the console

    rollout_lines = tagged(out / "logs" / "orchestrator.log", "rollout")
    assert [int(x.fields["current_step"]) for x in rollout_lines] == list(range(30))
    assert all(0 <= int(x.fields["staleness"]) <= 1 for x in rollout_lines)

    # the barrier asked for weights/step_{s-1} before steps 2..29, and the server loaded exactly those
    waits = [
        int(x.fields["target_step"])
        for x in tagged(out / "logs" / "orchestrator.log", "ckpt")
        if x.event == "wait.done"
    ]
    assert waits == list(range(1, 29))
    loaded = [
        x.fields["target"]
        for x in tagged(out / "logs" / "inference.log", "weights")
        if x.event == "rpc.start"
    ]
    assert loaded == [f"step_{s}" for s in range(1, 29)]

    for step in range(30):  # every step's batch is complete
        batch = read_rollout_batch(RunPaths(out).rollouts_dir(step) / "rank_0.safetensors")
        assert batch.num_samples == 64 and batch.step == step

    # the reward rose, earned on answers the model ends (stop strings), not on cut-off ones (issue 12
    # item 17): a cut-off answer earns 0 (truncated_reward; tests/unit/orchestrator/test_truncation.py
    # checks that exactly), and the steps where the policy is best cut off no more answers than the
    # first ones (tests/support/learning.py says why it is judged so)
    assert_learned([r["reward_mean"] for r in rows], [r["trunc_pct"] for r in rows])
    trainer_steps = [r["step"] for r in metrics(out, "trainer")]
    assert trainer_steps == list(range(30))

    # the analyzer on this real run's logs: every update joined across client and server, no malformed
    # line, and the diagnosis this 2-core toy run deserves: the trainer limits it (it computes most of
    # the run; generation then waits for its weights), named trainer-bound when those waits cross
    # ckpt_wait_share, else "the trainer is the limit" of a balanced run
    from prime_rl.analysis.__main__ import main as analyze

    analyze([str(out), "--out", str(tmp_path / "analysis")])
    summary = json.loads((tmp_path / "analysis" / "summary.json").read_text())
    assert summary["parse"]["malformed"] == 0
    assert summary["stats"]["queue_ms"]["count"] == 28 and summary["stats"]["server_rpc_ms"]["count"] == 28
    assert all(u["send_to_recv_ms"] is not None for u in summary["updates"])
    if summary["primary"] is None:
        assert "the trainer is the limit" in (tmp_path / "analysis" / "SUMMARY.md").read_text()
    else:
        assert summary["primary"]["kind"] == "trainer_bound", summary["findings"]
    compute = {st["name"]: st["share"] for st in summary["stages"]}
    assert compute["trainer compute"] > compute["generation"], summary["stages"]
    assert summary["async_level"] == 1 and not any("async_level" in w for w in summary["warnings"])
    assert summary["clock_offsets"] == {}  # one machine's clock: no log is judged off (the bounds hold 0)
    assert (tmp_path / "analysis" / "timeline.png").stat().st_size > 1000


def test_the_multi_turn_demo_learns_the_guessing_game(tiny_model, tmp_path):
    """configs/debug/rl_guess.toml (issue 16 item 5): episodes of up to 4 turns, every later turn
    continuing from the tokens sampled so far. 30 steps (~110 s), as the demo's config; a turn is one
    token. At 8 tokens a turn 2 runs in 4 failed the rank test (one token repeated with no stop took
    over, or the policy collapsed onto tokens that are no letter); at one token 8 runs of 8 rose by
    0.18-0.35, 36 pairs of 36 (benchmarks/RESULTS.md, "The demo learns")."""
    out, done, rows = learning_run(tiny_model, tmp_path, GUESS_CONFIG, with_trunc=False)
    assert "| step 29 |" in done.stdout  # the reward per step reaches the console

    assert [r["step"] for r in rows] == list(range(30))
    assert all(r["turns_mean"] > 1 for r in rows[:3]), [r["turns_mean"] for r in rows]  # multi-turn
    assert_learned([r["reward_mean"] for r in rows])


def test_orchestrator_without_server_fails_with_a_countdown(tmp_path):
    argv = [
        sys.executable,
        "-m",
        "prime_rl.orchestrator.main",
        "--output_dir",
        str(tmp_path),
        "--startup_timeout_s",
        "3",
        "--client.base_urls",
        '["http://127.0.0.1:9"]',
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "waiting for inference server(s) http://127.0.0.1:9" in done.stderr
    assert "not reachable after 3s" in done.stderr


def orchestrator_config(server, out: Path, urls: list[str], *extra: str):
    from prime_rl.orchestrator.config import OrchestratorConfig

    cfg, _ = load_config(
        OrchestratorConfig,
        [
            "--output_dir",
            str(out),
            "--model",
            server.model,
            "--max_steps",
            "2",
            "--async_level",
            "1",
            "--batch_size",
            "32",
            "--rollouts_per_example",
            "4",
            "--sampling.max_tokens",
            "48",
            "--client.base_urls",
            json.dumps(urls),
            "--verify.workers",
            "1",
            *extra,
        ],
    )
    return cfg


def test_a_server_dying_mid_run_has_its_requests_retried_on_the_other_and_stays_out(
    inference_server, tmp_path
):
    """The dead server never comes back here; a server that does (and the staleness of what it
    serves then) is tests/integration/test_policy_staleness.py."""
    from tests.support.proxy import TcpProxy

    from prime_rl.orchestrator.loop import Orchestrator

    port = int(inference_server.base_url.rsplit(":", 1)[1])

    async def scenario():
        proxy = await TcpProxy(port).start()
        cfg = orchestrator_config(
            inference_server, tmp_path, [proxy.url, inference_server.base_url], "--max_inflight", "8"
        )
        orch = Orchestrator(cfg)
        run = asyncio.create_task(orch.run())
        # killed the moment a request through it has gone to the server (a fixed pause could land
        # between two batches: nothing in flight, the health loop marking it down first, no retry;
        # a poll of the waiting requests could miss one answered in a few milliseconds)
        proxy.kill_in_flight()  # requests in flight through it fail mid-stream
        await asyncio.wait_for(run, timeout=300)
        assert proxy.killed_in_flight.is_set(), "the run ended before a request went through the proxy"
        return orch

    orch = asyncio.run(scenario())
    assert orch.counters["retries"] >= 1
    assert orch.down == {orch.pool.base_urls[0]}
    for step in range(2):
        assert (
            read_rollout_batch(RunPaths(tmp_path).rollouts_dir(step) / "rank_0.safetensors").num_samples == 32
        )


@pytest.mark.parametrize("mode", ["raise", "hang"])
def test_verifier_faults_are_recorded_and_the_run_goes_on(inference_server, tmp_path, mode):
    from prime_rl.orchestrator.loop import Orchestrator

    cfg = orchestrator_config(
        inference_server,
        tmp_path,
        [inference_server.base_url],
        "--env.name",
        FAULTY_ENV,
        "--env.options",
        json.dumps({"mode": mode, "every": 4}),
        "--verify.workers",
        "2",
        "--verify.timeout_s",
        "1",
        "--sampling.max_tokens",
        "8",
        "--batch_size",
        "16",
    )
    asyncio.run(Orchestrator(cfg).run())
    rows = metrics(tmp_path, "orchestrator")
    assert [r["step"] for r in rows] == [0, 1]
    # which groups fill a batch depends on when their generations finish (and a hung group only
    # fails after its timeout), so one batch may hold no faulty group: across the run they are counted
    assert sum(r["verify_failures"] for r in rows) > 0
    for r in rows:  # failed rollouts score 0, the others 1
        expected = 1.0 - r["verify_failures"] / 16
        assert r["reward_mean"] == pytest.approx(expected)


def _rl_argv(model: Path, out: Path, port: int, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "prime_rl.launcher.main",
        "--config",
        str(DEBUG_CONFIG),
        "--model",
        str(model),
        "--output_dir",
        str(out),
        "--inference",
        json.dumps({"port": port}),
        *args,
    ]


def test_a_busy_inference_port_fails_the_run_before_anything_starts(tiny_model, tmp_path):
    out = tmp_path / "run"
    with socket.socket() as busy:  # an earlier run's server, say
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        started = time.monotonic()
        done = subprocess.run(_rl_argv(tiny_model, out, port), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stderr.startswith(f"error: inference cannot start: port {port} on 127.0.0.1 is in use")
    assert done.stderr.count("\n") == 1
    assert not (out / "configs" / "rl_inference_input.json").exists()  # nothing was started
    assert time.monotonic() - started < 60


def test_a_dying_process_stops_the_others_and_is_named(tiny_model, tmp_path):
    out = tmp_path / "run"
    # a model dir the launcher's up-front check accepts (it has a config.json) but the trainer
    # cannot load: the trainer dies after start, and the launcher must stop the others
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    before = descendants()
    done = rl(tiny_model, out, "--trainer", json.dumps({"model": {"name": str(broken)}}), timeout=300)
    assert done.returncode == 1
    assert "trainer exited with code" in done.stderr and "Last lines of" in done.stderr
    assert "broken-model" in done.stderr  # the end of the trainer's log says why
    assert new_descendants(before) == []


def test_async_level_0_is_on_policy_and_ctrl_c_stops_everything(tiny_model, tmp_path):
    """One run for two checks (each needs a whole launcher start): with async_level 0 every
    sample is on-policy and the trainer's ratio is ~1; Ctrl-C then stops every process."""
    out = tmp_path / "run"
    argv = [
        sys.executable,
        "-m",
        "prime_rl.launcher.main",
        "--config",
        str(DEBUG_CONFIG),
        "--model",
        str(tiny_model),
        "--output_dir",
        str(out),
        "--inference",
        json.dumps({"port": free_port()}),
        "--max_steps",
        "200",
        "--async_level",
        "0",
    ]
    before = descendants()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        metrics_file = RunPaths(out).metrics_file
        while not (metrics_file.is_file() and metrics_file.read_text().count('"process": "trainer"') >= 3):
            assert proc.poll() is None and time.monotonic() < deadline, "the run did not get going"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and "interrupted" in err
    assert new_descendants(before) == []

    staleness = [int(x.fields["staleness"]) for x in tagged(out / "logs" / "orchestrator.log", "rollout")]
    assert len(staleness) >= 3 and set(staleness) == {0}, staleness
    # on-policy with processed (post-temperature) logprobs: the trainer's ratio is ~1
    kls = [r["mismatch_kl"] for r in metrics(out, "trainer")]
    assert len(kls) >= 3 and max(kls) < 1e-4, kls
