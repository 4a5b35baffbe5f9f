"""guess-the-number: the environment's answers, rewards and errors, and its turns through the
verifier workers."""

from __future__ import annotations

import asyncio

import pytest

from prime_rl.envs.base import EnvError
from prime_rl.envs.registry import load_env
from prime_rl.envs.verify import VerifierPool


def talk(env, task, *answers):
    return env.step(task, [m for a in answers for m in ({"role": "assistant", "content": a},)])


def test_the_game_answers_higher_lower_and_ends_when_solved_with_fewer_turns_paying_more():
    env = load_env("guess", {"high": 4, "max_turns": 4})
    task = next(env.tasks(0)) | {"secret": 3}
    assert "from a to d" in task["prompt"][-1]["content"]
    assert talk(env, task, "all").messages[0]["content"] == "Later."
    assert talk(env, task, " D is it").messages[0]["content"] == "Earlier."
    assert "one letter from a to d" in talk(env, task, "zebra").messages[0]["content"]
    assert "one letter from a to d" in talk(env, task, "42").messages[0]["content"]
    first, later = talk(env, task, "c").score, talk(env, task, "a", "7", "cat").score
    assert first.reward == pytest.approx(1.0) and first.metrics["solved"] == 1.0
    assert later.reward == pytest.approx(0.8 * (1 - 2 / 4) + 0.2 * 2 / 3)
    lost = talk(env, task, "a", "b", "d", "a").score
    assert lost.metrics["solved"] == 0.0 and lost.reward == pytest.approx(0.2)


def test_bad_options_name_the_option():
    with pytest.raises(EnvError, match="high must be within 2..26"):
        load_env("guess", {"high": 27})
    with pytest.raises(EnvError, match="max_turns must be a positive integer"):
        load_env("guess", {"max_turns": 0})


def test_episode_steps_run_in_the_verifier_workers_and_a_bad_task_is_a_recorded_error():
    pool = VerifierPool("guess", {"high": 4}, workers=1, timeout_s=10)
    try:

        async def go():
            messages = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "b"}]
            ok = await pool.step({"secret": 4}, messages)
            bad = await pool.step({"id": "no-secret"}, messages)
            return ok, bad

        ok, bad = asyncio.run(go())
    finally:
        pool.close()
    assert ok.error is None and ok.turn.messages == ({"role": "user", "content": "Later."},)
    assert bad.turn is None and "environment raised KeyError" in bad.error
