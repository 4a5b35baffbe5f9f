"""Staleness against the real vLLM server: the step each answer reports, through a server loss.

The orchestrator runs against the session's vLLM server three times over (directly, and through
two TCP proxies, one of which the test kills and restarts), with the fleet balancer reading the
servers' /metrics, and a fake trainer that publishes perturbed weights. Mid-run the killed
"server" dies and the engine is put back on its base weights, as a restarted server would be; the
run must go on on the other two, bring the server back with the current policy, and train no
sample whose staleness (from the ``x-policy-step`` the server reported) leaves ``0..async_level``.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from tests.conftest import ADMIN_TOKEN
from tests.support.proxy import TcpProxy

from prime_rl.config import load_config
from prime_rl.dev.weights import write_perturbed_weights
from prime_rl.orchestrator.config import OrchestratorConfig
from prime_rl.paths import RunPaths, rollout_path
from prime_rl.transport.rollouts import read_rollout_batch

pytestmark = pytest.mark.slow

MAX_STEPS = 5
ASYNC_LEVEL = 1


async def fake_trainer(paths: RunPaths, model, max_steps: int, hold=lambda step: False) -> None:
    """Publishes step + 1's weights once step's rollouts are written; waits while ``hold(step)``."""
    for step in range(max_steps):
        while not rollout_path(paths.rollouts_dir(step), 0).is_file() or hold(step):
            await asyncio.sleep(0.05)
        await asyncio.to_thread(write_perturbed_weights, model, paths.weights_dir(step + 1), 0.05, step + 1)


def test_a_server_lost_and_restarted_mid_run_never_yields_samples_beyond_async_level(
    inference_server, tiny_model, tmp_path
):
    from prime_rl.orchestrator.loop import Orchestrator

    port = int(inference_server.base_url.rsplit(":", 1)[1])
    out = tmp_path / "run"
    # the server accepts weight dirs inside its weights root only: the run's weights live there
    shared = inference_server.weights_root / f"policy-staleness-{tmp_path.name}"
    shared.mkdir(parents=True)
    out.mkdir()
    (out / "weights").symlink_to(shared)

    async def scenario():
        proxy = await TcpProxy(port).start()
        other = await TcpProxy(port).start()
        cfg, _ = load_config(
            OrchestratorConfig,
            [
                "--output_dir", str(out), "--model", inference_server.model,
                "--max_steps", str(MAX_STEPS), "--async_level", str(ASYNC_LEVEL),
                "--batch_size", "16", "--rollouts_per_example", "4", "--sampling.max_tokens", "24",
                "--client.base_urls", json.dumps([proxy.url, other.url, inference_server.base_url]),
                "--server_metrics.interval_s", "0.5",
                "--client.admin.token", ADMIN_TOKEN, "--client.admin.max_retries", "0",
                "--verify.workers", "1", "--max_inflight", "4",
            ],
        )  # fmt: skip
        orch = Orchestrator(cfg)
        run = asyncio.create_task(orch.run())
        restarted = asyncio.Event()
        # The last step needs policy MAX_STEPS - 1 - ASYNC_LEVEL; the trainer holds it back until
        # the killed server is restarted and back, so the run cannot end before the health loop
        # (every 2 s) brings it back. (Holding only once it was restarted was not enough: steps
        # take about 0.1 s here, and the trainer had published every policy the run needed while
        # the server was down.)
        last_needed = MAX_STEPS - 1 - ASYNC_LEVEL
        hold = lambda step: step + 1 >= last_needed and not (restarted.is_set() and not orch.down)  # noqa: E731
        trainer = asyncio.create_task(fake_trainer(orch.paths, tiny_model, MAX_STEPS, hold))
        while orch.ckpt_step < 1 and not run.done():
            await asyncio.sleep(0.05)
        await proxy.kill()  # the proxied server dies mid-request ...
        async with httpx.AsyncClient() as c:  # ... and its engine restarts on the base weights
            r = await c.post(
                f"{inference_server.base_url}/reload_weights", headers=inference_server.admin_headers()
            )
            assert r.status_code == 200
        # the run finds it dead (a refused request, or the next policy's update) and goes on
        # without it: the steps before the held policy need no more than the two others
        for _ in range(2400):
            if proxy.url in orch.down or run.done():
                break
            await asyncio.sleep(0.05)
        noticed = proxy.url in orch.down
        await asyncio.sleep(0.5)
        killed_at = proxy.connections
        await proxy.start()  # back up on the same address
        restarted.set()
        try:
            await asyncio.wait_for(run, timeout=400)
        finally:
            trainer.cancel()
            await proxy.kill()
            await other.kill()
        return orch, noticed, proxy.connections - killed_at, other.connections

    try:
        orch, noticed, connections_after, other_connections = asyncio.run(scenario())
    finally:  # the server is shared by the session: later tests expect the base weights (policy 0)
        r = httpx.post(
            f"{inference_server.base_url}/reload_weights",
            headers=inference_server.admin_headers(),
            timeout=120,
        )
        assert r.status_code == 200, r.text
    for step in range(MAX_STEPS):
        batch = read_rollout_batch(rollout_path(RunPaths(out).rollouts_dir(step), 0))
        assert batch.num_samples == 16
        staleness = [step - p for p in batch.policy_steps.tolist()]
        assert all(0 <= s <= ASYNC_LEVEL for s in staleness), (step, staleness)
    assert noticed  # the killed server was held down ...
    assert orch.down == set()  # ... the restarted one brought back ...
    assert connections_after > 0  # ... and used again
    assert other_connections > 0  # the third server took requests too
    assert orch.pool.balancer is not None and orch.server_metrics.scrapes[inference_server.base_url] > 0
    rows = [json.loads(x) for x in RunPaths(out).metrics_file.read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(MAX_STEPS))
