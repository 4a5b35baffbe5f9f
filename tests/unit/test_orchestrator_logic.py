"""Barrier, advantages, rank packing, environments, verifier faults, task ledger."""

from __future__ import annotations

import asyncio
import json

import pytest
from tests.support import FAULTY_ENV

from prime_rl.envs.base import EnvError
from prime_rl.envs.registry import available, load_env
from prime_rl.envs.verify import VerifierPool
from prime_rl.orchestrator.advantages import group_advantages, is_degenerate
from prime_rl.orchestrator.barrier import groups_wanted, is_usable, update_target
from prime_rl.orchestrator.batch import Rollout, assign_to_ranks, write_step_batches
from prime_rl.transport.rollouts import read_rollout_batch


def simulate(async_level: int, steps: int, trainer_lag: int = 0) -> list[tuple[int, int]]:
    """(step, ckpt_step used) when every barrier update happens as soon as allowed."""
    ckpt, out = 0, []
    for s in range(steps):
        target = update_target(s, ckpt, async_level)
        if target is not None:
            assert target <= s  # never waits for weights the trainer cannot have made yet
            ckpt = target
        out.append((s, ckpt))
    return out


@pytest.mark.parametrize("async_level", [0, 1, 2, 3])
def test_barrier_keeps_staleness_within_async_level(async_level):
    trace = simulate(async_level, 12)
    assert all(0 <= s - c <= async_level for s, c in trace)
    # updates happen exactly when the lag would exceed async_level, to step - async_level
    assert [c for s, c in trace] == [max(0, s - async_level) for s in range(12)]


def test_barrier_examples():
    assert update_target(0, 0, 0) is None
    assert update_target(1, 0, 0) == 1  # on-policy: step 1 needs the weights after step 0
    assert update_target(1, 0, 1) is None
    assert update_target(2, 0, 1) == 1
    assert update_target(5, 1, 2) == 3
    assert is_usable(3, 4, 1) and not is_usable(2, 4, 1) and is_usable(4, 4, 0)


def test_groups_wanted_never_overproduces_for_the_current_policy():
    # on-policy: the base policy can serve step 0 only: one step's worth of groups
    assert groups_wanted(step=0, ckpt_step=0, async_level=0, groups_per_step=8, have=0) == 8
    assert groups_wanted(0, 0, 0, 8, have=8) == 0
    # async 1 at step 0: policy 0 serves steps 0 and 1
    assert groups_wanted(0, 0, 1, 8, have=3) == 13
    # policy too old for the current step: nothing
    assert groups_wanted(step=4, ckpt_step=1, async_level=2, groups_per_step=8, have=0) == 0


def test_group_advantages():
    assert group_advantages([1.0, 0.0, 0.5, 0.5]) == [0.5, -0.5, 0.0, 0.0]
    norm = group_advantages([1.0, 0.0], std_normalize=True)
    assert norm == pytest.approx([1.0, -1.0], abs=1e-5)
    assert is_degenerate(group_advantages([0.3, 0.3, 0.3]))
    assert not is_degenerate(norm)
    assert group_advantages([]) == []


def rollout(n_prompt: int, n_completion: int, adv: float = 0.0) -> Rollout:
    return Rollout(
        list(range(1, n_prompt + 1)), [7] * n_completion, [-1.0] * n_completion, "x", False, advantage=adv
    )


def test_rank_assignment_balances_tokens():
    rs = [rollout(2, n) for n in (10, 9, 8, 2, 2, 1)]
    ranks = assign_to_ranks(rs, 2)
    loads = [sum(r.num_tokens for r in rank) for rank in ranks]
    assert loads == [23, 21]  # greedy longest-first: 12,4,4,3 vs 11,10
    assert sorted(id(r) for rank in ranks for r in rank) == sorted(id(r) for r in rs)


def test_step_batches_are_complete_files_per_rank(tmp_path):
    rs = [rollout(3, 4, adv=0.5), rollout(2, 5, adv=-0.5), rollout(4, 1, adv=0.0)]
    paths = write_step_batches(tmp_path / "step_0", 0, rs, world_size=2, temperature=0.7)
    assert [p.name for p in paths] == ["rank_0.safetensors", "rank_1.safetensors"]
    batches = [read_rollout_batch(p, vocab_size=100) for p in paths]
    assert sum(b.num_samples for b in batches) == 3 and all(b.temperature == 0.7 for b in batches)
    assert sum(b.num_loss_tokens for b in batches) == 10
    with pytest.raises(ValueError, match="cannot feed 4 trainer ranks"):
        write_step_batches(tmp_path / "step_1", 1, rs, world_size=4, temperature=1.0)


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
    with pytest.raises(EnvError, match="bad options"):
        load_env("toy", {"unexpected": 1})
    with pytest.raises(EnvError, match="cannot import"):
        load_env("no.such.module:Env")


@pytest.mark.parametrize("mode", ["raise", "hang", "die"])
def test_verifier_faults_become_recorded_failures(mode):
    """Real worker processes: a raising, hanging or dying verifier yields reward 0 + error, and later
    calls still work (a hung or dead pool is replaced)."""

    async def go():
        pool = VerifierPool(FAULTY_ENV, {"mode": mode}, workers=1, timeout_s=3.0)
        try:
            bad = await pool.score({"n": 0}, "text")
            good = await pool.score({"n": 1}, "text")
            again = await pool.score({"n": 3}, "text")
            return bad, good, again
        finally:
            pool.close()

    bad, good, again = asyncio.run(go())
    assert bad.reward == 0.0 and bad.error
    assert {"raise": "ValueError", "hang": "timed out", "die": "died"}[mode] in bad.error
    assert good.error is None and good.reward == 1.0 and again.reward == 1.0


def test_task_ledger_survives_resume_without_repeating_or_skipping():
    from prime_rl.orchestrator.ledger import TaskLedger

    ledger = TaskLedger()
    for i in (0, 1, 2, 4, 6):  # groups finish out of order; 3 and 5 still in flight at the checkpoint
        ledger.mark(i)
    saved = ledger.snapshot()
    assert saved == {"low_water": 3, "used_above": [4, 6]}

    resumed = TaskLedger.restore(saved)
    handed_out = [i for i in range(10) if not resumed.skip(i)]
    assert handed_out == [3, 5, 7, 8, 9]  # the in-flight ones are redone, the used ones never again
    for i in (3, 5, 7):
        resumed.mark(i)
    assert resumed.snapshot() == {"low_water": 8, "used_above": []}  # the watermark moves past old and new
