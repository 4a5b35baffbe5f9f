"""prime_rl.orchestrator.barrier: the barrier loads the weights a step needs, no newer and no later;
no rollout in a batch is more than async_level steps old; the producer starts no group that goes
stale before a batch takes it (no overproduction).

The three functions are checked at hand-worked points and, together, in :func:`run_pipeline`: the
step loop and the producer of ``orchestrator/loop.py`` reduced to counting (groups are answered
at once; what is checked is which policy serves them and which step takes them). The last test
runs the real :class:`~prime_rl.orchestrator.loop.Orchestrator` against the fake server and
counts what it asks for."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass, field

import pytest
from loguru import logger
from tests.support.http_server import LocalTestServer

from prime_rl.orchestrator.barrier import groups_wanted, is_usable, update_target
from prime_rl.orchestrator.config import OrchestratorConfig
from prime_rl.orchestrator.loop import Orchestrator
from prime_rl.paths import RunPaths, mark_stable
from prime_rl.tracing import parse_tagged


@dataclass
class Pipeline:
    ckpt: list[int] = field(default_factory=list)
    """The policy loaded on the servers when each step's batch is collected."""
    batches: list[list[int]] = field(default_factory=list)
    """The policy that generated each group of each step's batch."""
    stale: list[tuple[int, int]] = field(default_factory=list)
    """(step, policy) of every group started and then dropped as too stale for its step."""


def run_pipeline(async_level: int, groups_per_step: int, steps: int) -> Pipeline:
    """``Orchestrator`` of orchestrator/loop.py as counting: ``_run_step`` wakes the producer, waits
    at the barrier (``update_target``; the trainer is never late), then takes ``groups_per_step``
    usable groups in order (``_collect``: ``is_usable``, the rest dropped as stale), waking the
    producer after each group; ``_produce`` starts ``groups_wanted(step, ckpt_step, ...,
    have=inflight + ready + taken)`` groups under the loaded policy each time it wakes."""
    out, ckpt = Pipeline(), 0
    queue: deque[int] = deque()  # policy of every group started and not yet taken (inflight + ready)
    batch: list[int] = []  # the groups the current step has taken

    def produce(step: int) -> None:
        want = groups_wanted(step, ckpt, async_level, groups_per_step, len(queue) + len(batch))
        assert want >= 0
        queue.extend([ckpt] * want)

    for step in range(steps):
        batch = []
        produce(step)
        target = update_target(step, ckpt, async_level)
        if target is not None:
            # weights/step_N exist once the trainer has trained on steps 0..N-1: never wait past step
            assert ckpt < target <= step
            ckpt = target
            produce(step)
        out.ckpt.append(ckpt)
        while len(batch) < groups_per_step:
            assert queue, f"step {step}: starved, nothing in flight and the producer starts nothing"
            policy = queue.popleft()
            if is_usable(policy, step, async_level):
                batch.append(policy)
            else:
                out.stale.append((step, policy))
                assert len(out.stale) <= steps * groups_per_step, "groups dropped as stale without end"
            produce(step)
        out.batches.append(batch)
    return out


@pytest.mark.parametrize("async_level", [0, 1, 2, 3])
def test_barrier_keeps_staleness_within_async_level(async_level):
    run = run_pipeline(async_level, groups_per_step=3, steps=12)
    # no rollout in a batch is more than async_level steps old
    assert all(0 <= step - policy <= async_level for step, b in enumerate(run.batches) for policy in b)
    # the barrier loads weights exactly when the lag would exceed async_level, to step - async_level
    # (sooner would wait on the trainer for nothing, later would serve a too-old policy)
    assert run.ckpt == [max(0, s - async_level) for s in range(12)]


def test_update_target_and_is_usable_at_the_async_level_boundary():
    assert update_target(0, 0, 0) is None
    assert update_target(1, 0, 0) == 1  # on-policy: step 1 needs the weights after step 0
    assert update_target(1, 0, 1) is None
    assert update_target(2, 0, 1) == 1
    assert update_target(5, 1, 2) == 3
    assert update_target(5, 3, 2) is None
    assert is_usable(3, 4, 1) and not is_usable(2, 4, 1) and is_usable(4, 4, 0) and not is_usable(3, 4, 0)
    assert is_usable(2, 4, 2) and not is_usable(1, 4, 2)


def test_groups_wanted_fills_the_policy_window_less_what_is_outstanding():
    # on-policy: the base policy can serve step 0 only: one step's worth of groups
    assert groups_wanted(step=0, ckpt_step=0, async_level=0, groups_per_step=8, have=0) == 8
    assert groups_wanted(0, 0, 0, 8, have=8) == 0
    # async 1 at step 0: policy 0 serves steps 0 and 1
    assert groups_wanted(0, 0, 1, 8, have=3) == 13
    # async 1 at step 1, still policy 0: step 1 only
    assert groups_wanted(1, 0, 1, 8, have=3) == 5
    # policy too old for the current step: nothing
    assert groups_wanted(step=4, ckpt_step=1, async_level=2, groups_per_step=8, have=0) == 0


@pytest.mark.parametrize("async_level", [0, 1, 2])
def test_the_producer_never_starts_a_group_that_goes_stale(async_level):
    run = run_pipeline(async_level, groups_per_step=4, steps=8)
    assert all(len(b) == 4 for b in run.batches)  # and no step waits on groups never started
    assert run.stale == []


@pytest.mark.parametrize("async_level", [0, 1])
def test_the_orchestrator_asks_for_exactly_the_groups_its_batches_take(tmp_path, async_level):
    steps, groups_per_step = 4, 4
    paths = RunPaths(tmp_path)
    for step in range(1, steps + 1):  # the trainer is never late: every weight step is published
        paths.weights_dir(step).mkdir(parents=True)
        mark_stable(paths.weights_dir(step))
    with LocalTestServer() as server:
        server.state.default_delay_s = 0.01  # groups in flight while the step loop takes others
        cfg = OrchestratorConfig(
            output_dir=tmp_path,
            client={"base_urls": [server.base_url]},
            verify={"workers": 1},
            max_steps=steps,
            batch_size=2 * groups_per_step,
            rollouts_per_example=2,
            async_level=async_level,
            advantage={"filter_zero": False},  # the fake server's answers all score the same
        )
        orch = Orchestrator(cfg)
        said: list[str] = []
        sink = logger.add(lambda m: said.append(m.record["message"]), level="INFO")
        try:
            asyncio.run(orch.run())
        finally:
            logger.remove(sink)
        asked = sum(1 for path, _, _ in server.state.seen if path.endswith("completions"))
    assert orch.counters["stale_dropped"] == 0
    assert asked == steps * groups_per_step  # not one group more than the batches took
    rows = [json.loads(line) for line in paths.metrics_file.read_text().splitlines()]
    staleness = [r["staleness"] for r in rows if r.get("process") == "orchestrator"]
    assert len(staleness) == steps and all(0 <= x <= async_level for x in staleness)
    # its run.start names the async_level it runs with (the analyzer judges each run's staleness by it)
    starts = [p.fields for p in map(parse_tagged, said) if p and (p.tag, p.event) == ("gen", "run.start")]
    assert starts == [{"step": "0", "resume": "false", "async_level": str(async_level)}]


def test_a_resumed_orchestrator_says_run_start_before_it_loads_the_resume_weights(tmp_path):
    """The analyzer splits a log at run.start; the resume's weight load came before it, so a load
    that hung was the crashed run's ("an update the orchestrator died waiting for": no time, no
    stall) instead of this run's stall."""
    paths = RunPaths(tmp_path)
    for step in range(1, 7):
        paths.weights_dir(step).mkdir(parents=True)
        mark_stable(paths.weights_dir(step))
    with LocalTestServer() as server:
        base = dict(
            output_dir=tmp_path,
            client={"base_urls": [server.base_url]},
            verify={"workers": 1},
            batch_size=4,
            rollouts_per_example=2,
            async_level=1,
            ckpt_interval=2,
            advantage={"filter_zero": False},
        )
        asyncio.run(Orchestrator(OrchestratorConfig(**base, max_steps=4)).run())
        said: list[str] = []
        sink = logger.add(lambda m: said.append(m.record["message"]), level="INFO")
        try:
            asyncio.run(Orchestrator(OrchestratorConfig(**base, max_steps=6, resume=True)).run())
        finally:
            logger.remove(sink)
    lines = [(p.tag, p.event, p.fields) for p in map(parse_tagged, said) if p]
    first = lines[0]
    assert first == ("gen", "run.start", {"step": "4", "resume": "true", "async_level": "1"}), lines[:3]
    assert ("ckpt", "wait.start", {"target_step": "4"}) in lines[1:]  # the resume's load, after it
