"""Run the real orchestrator against fake inference servers and a fake trainer (unit tests)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from loguru import logger
from tests.support.policy_server import PolicyServer

from prime_rl.orchestrator.config import OrchestratorConfig
from prime_rl.orchestrator.loop import Orchestrator
from prime_rl.paths import RunPaths, mark_stable, rollout_path
from prime_rl.tracing import parse_tagged

ASYNC_LEVEL = 1
MAX_STEPS = 8
BATCH = 8


@contextlib.contextmanager
def tagged_lines() -> Iterator[list]:
    """The tagged lines logged inside the block, parsed (the list fills when the block ends)."""
    raw: list[str] = []
    parsed: list = []
    sink = logger.add(raw.append, format="{message}")
    try:
        yield parsed
    finally:
        logger.remove(sink)
        parsed.extend(p for p in map(parse_tagged, raw) if p)


async def fake_trainer(paths: RunPaths, max_steps: int, step_s: float, hold=None) -> None:
    """Publish weights/step_{s+1} (an empty dir marked STABLE) ``step_s`` after rollouts/step_s
    exists, and once ``hold(s)`` (if given) is false."""
    for step in range(max_steps):
        while not rollout_path(paths.rollouts_dir(step), 0).is_file():
            await asyncio.sleep(0.01)
        await asyncio.sleep(step_s)
        while hold is not None and hold(step):
            await asyncio.sleep(0.05)
        weight_dir = paths.weights_dir(step + 1)
        weight_dir.mkdir(parents=True, exist_ok=True)
        mark_stable(weight_dir)


def run(
    tmp_path, servers: list[PolicyServer], train_s: float = 0.05, hold=None, **overrides
) -> tuple[Orchestrator, list]:
    """Run to MAX_STEPS; (the orchestrator, its parsed tagged lines). ``overrides``: config fields."""
    cfg = OrchestratorConfig(
        output_dir=tmp_path,
        client={
            "base_urls": [s.base_url for s in servers],
            "connect_timeout_s": 2,
            "admin": {"max_retries": 0},
        },
        verify={"workers": 1},
        max_steps=MAX_STEPS,
        async_level=ASYNC_LEVEL,
        batch_size=BATCH,
        rollouts_per_example=2,
        max_inflight=4,
        request_timeout_s=20,
        weights_timeout_s=30,
        sampling={"max_tokens": 4},
        **overrides,
    )
    lines: list[str] = []
    sink = logger.add(lines.append, format="{message}")
    orch = Orchestrator(cfg)

    async def go():
        trainer = asyncio.create_task(
            fake_trainer(orch.paths, MAX_STEPS, train_s, None if hold is None else lambda s: hold(orch, s))
        )
        try:
            await asyncio.wait_for(orch.run(), timeout=120)
        finally:
            trainer.cancel()

    try:
        asyncio.run(go())
    finally:
        logger.remove(sink)
    return orch, [p for p in map(parse_tagged, lines) if p]
