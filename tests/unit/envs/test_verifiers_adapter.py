"""The ``verifiers`` environment: real verifiers 0.4 tasksets and envs played by our episodes.

Two tiny verifiers plugins are written as packages verifiers can import by id (as an installed
taskset would be): ``vf_toy_single``, a plain single-turn taskset with two weighted rewards and a
metric, and ``vf_toy_game``, a guessing game whose ``Env.run()`` answers the model host-side
(``interaction.turn``) with a ``@vf.stop`` after three turns. Episodes are driven by a scripted
model through the same loop the orchestrator uses. Skipped where verifiers is not installed,
except the error that says how to install it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import textwrap

import pytest

from prime_rl.envs.base import EnvError
from prime_rl.envs.registry import load_env
from prime_rl.envs.verify import Verdict, VerifierPool
from prime_rl.orchestrator.episode import Episode, EpisodeLimits, SampledTurn, play

SINGLE = """
import verifiers.v1 as vf


class ToyData(vf.TaskData):
    answer: str


class ToyConfig(vf.TasksetConfig):
    size: int = 3


class ToyTask(vf.Task[ToyData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=2.0)
    async def exact(self, task: ToyData, trace: vf.Trace) -> float:
        return float(trace.last_reply == task.answer)

    @vf.reward(weight=0.5)
    async def short(self, trace: vf.Trace) -> float:
        if "boom" in trace.last_reply:
            raise ZeroDivisionError("boom")
        return 1.0 if len(trace.last_reply) <= 3 else 0.25

    @vf.metric
    async def words(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply.split()))


class ToyTaskset(vf.Taskset[ToyTask, ToyConfig]):
    def load(self):
        for i in range(self.config.size):
            data = ToyData(id=f"toy{i}", prompt=f"Say {i}.", system_prompt="Be brief.", answer=str(i))
            yield ToyTask(data, self.config.task)


__all__ = ["ToyTaskset"]
"""

GAME = """
import verifiers.v1 as vf


class GameData(vf.TaskData):
    secret: int


class GameTask(vf.Task[GameData, vf.State, vf.TaskConfig]):
    @vf.reward(weight=1.0)
    async def solved(self, task: GameData, trace: vf.Trace) -> float:
        return float(trace.last_reply == str(task.secret))

    @vf.reward(weight=0.25)
    async def fast(self, trace: vf.Trace) -> float:
        return 1.0 / trace.num_turns

    @vf.stop
    async def three_turns(self, trace: vf.Trace) -> bool:
        return trace.num_turns >= 3


class GameTaskset(vf.Taskset[GameTask, vf.TasksetConfig]):
    def load(self):
        for i, secret in enumerate([5, 2]):
            data = GameData(id=f"game{i}", prompt="Guess my number from 1 to 9.", secret=secret)
            yield GameTask(data, self.config.task)


class GameEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class GameEnv(vf.Env[GameEnvConfig]):
    async def run(self, task, agents):
        won = False
        async with agents.player.interaction(task) as game:
            segment = await game.turn()
            while not segment.terminated:
                guess = segment.last_reply
                if guess == "crash":
                    raise RuntimeError("the game engine broke")
                if guess == str(task.data.secret):
                    won = True
                    break
                segment = await game.turn("higher" if int(guess) < task.data.secret else "lower")
        game.trace.record_reward("won", float(won), 1.0)

    async def finalize(self, task, episode):
        for trace in episode.traces:
            trace.record_metric("guesses", float(trace.num_turns))


__all__ = ["GameTaskset", "GameEnv"]
"""


@pytest.fixture(scope="module")
def vf(tmp_path_factory):
    """verifiers, with the two plugins importable by id (here and in spawned worker processes)."""
    vf = pytest.importorskip("verifiers.v1", reason="verifiers is not installed (an optional package)")
    root = tmp_path_factory.mktemp("vf_plugins")
    for name, source in (("vf_toy_single", SINGLE), ("vf_toy_game", GAME)):
        (root / f"{name}.py").write_text(textwrap.dedent(source))
    sys.path.insert(0, str(root))
    yield vf
    sys.path.remove(str(root))


class ScriptedModel:
    """Answers each later turn with the next scripted text."""

    def __init__(self, texts: list[str]):
        self.texts, self.next_id = list(texts), 100

    def turn(self, text: str) -> SampledTurn:
        self.next_id += 2
        return SampledTurn([self.next_id - 2, self.next_id - 1], [-0.5, -0.5], text, "stop", 0)

    async def __call__(self, prompt_ids: list[int], max_tokens: int) -> SampledTurn:
        return self.turn(self.texts.pop(0))


def env_step(env):
    """A verifier worker's ``step`` in-process: a raising environment is an error, as in the worker."""

    async def step(task, messages):
        try:
            return Verdict(0.0, {}, None, 1.0, turn=env.step(task, [dict(m) for m in messages]))
        except Exception as e:
            return Verdict(0.0, {}, f"environment raised {type(e).__name__}: {e}", 1.0)

    return step


def episode(env, task, *answers: str) -> Episode:
    """Play ``task`` with a model that answers ``answers`` in turn (the orchestrator's loop)."""
    model = ScriptedModel(list(answers[1:]))
    ep = Episode([1, 2, 3], [dict(m) for m in task["prompt"]])
    ep.add_turn(model.turn(answers[0]), 1.0)
    limits = EpisodeLimits(max_turns=env.max_turns, max_tokens=512, turn_max_tokens=8)
    delta = None if env.max_turns == 1 else (lambda history, new, last: [900])
    return asyncio.run(play(task, ep, limits, env_step(env), model, delta))


def test_a_plain_taskset_is_single_turn_and_its_reward_is_the_weighted_sum_of_its_rewards(vf):
    env = load_env("verifiers", {"env_id": "vf_toy_single", "env_args": {"size": 3}})
    assert env.max_turns == 1
    tasks = list(itertools.islice(env.tasks(0), 6))  # endless: epochs of the 3 tasks
    assert sorted(t["id"] for t in tasks[:3]) == ["toy0#0@0", "toy1#1@0", "toy2#2@0"]
    assert [t["id"] for t in tasks] == [t["id"] for t in itertools.islice(env.tasks(0), 6)]  # seeded
    assert tasks[3]["id"].endswith("@1")
    task = next(t for t in tasks if t["id"].startswith("toy1#"))
    assert task["prompt"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say 1."},
    ]
    json.dumps(task)  # tasks travel to worker processes and into rollout files

    right = episode(env, task, "1")
    assert right.outcome == "done" and right.turns == 1
    assert right.reward == pytest.approx(2.0 * 1.0 + 0.5 * 1.0)
    assert right.score.metrics == {"reward/exact": 1.0, "reward/short": 1.0, "metric/words": 1.0}
    wrong = env.score(task, "it is 7")
    assert wrong.reward == pytest.approx(2.0 * 0.0 + 0.5 * 0.25)
    assert wrong.metrics == {"reward/exact": 0.0, "reward/short": 0.25, "metric/words": 3.0}
    # a collect-rollouts row in the taskset's own shape (no vf_task) is scored the same way
    row = {"id": "r1", "prompt": "Say 1.", "answer": "1"}
    assert env.prompt(row) == [{"role": "user", "content": "Say 1."}]
    assert env.score(row, "1").reward == pytest.approx(2.5)


def test_an_env_run_drives_the_turns_and_its_stop_ends_the_episode(vf):
    env = load_env("verifiers", {"env_id": "vf_toy_game"})
    assert env.max_turns == 16
    task = next(t for t in env.tasks(0) if t["id"].startswith("game0#"))  # secret 5

    won = episode(env, task, "2", "7", "5")
    assert won.outcome == "done" and won.turns == 3
    assert [m["content"] for m in won.messages[1:]] == ["2", "higher", "7", "lower", "5"]
    # solved (1.0 x 1), fast (0.25 x 1/3), and the reward run() recorded itself (won, 1.0 x 1)
    assert won.reward == pytest.approx(1.0 + 0.25 / 3 + 1.0)
    assert won.score.metrics == {
        "reward/solved": 1.0,
        "reward/fast": pytest.approx(1 / 3),
        "reward/won": 1.0,
        "metric/guesses": 3.0,
    }

    quick = episode(env, task, "5")
    assert (quick.outcome, quick.turns, quick.reward) == ("done", 1, pytest.approx(1.0 + 0.25 + 1.0))

    # @vf.stop (three turns) ends the exchange before a fourth: its hint is never sent
    lost = episode(env, task, "1", "1", "1", "1")
    assert lost.outcome == "done" and lost.turns == 3
    assert [m["content"] for m in lost.messages[1:]] == ["1", "higher", "1", "higher", "1"]
    assert lost.reward == pytest.approx(0.25 / 3)
    # so does the role's max_turns (verifiers' own limit)
    capped = load_env("verifiers", {"env_id": "vf_toy_game", "env": {"player": {"max_turns": 2}}})
    short = episode(capped, task, "1", "1", "1")
    assert (short.outcome, short.turns, short.reward) == ("done", 2, pytest.approx(0.25 / 2))


def test_a_failure_inside_the_wrapped_env_is_a_recorded_outcome_with_its_reason(vf):
    single = load_env("verifiers", {"env_id": "vf_toy_single"})
    task = next(single.tasks(0))
    ep = episode(single, task, "boom")  # a reward function raises
    assert ep.outcome == "env_error" and ep.reward == 0.0
    assert "scoring raised TaskError" in ep.error and "ZeroDivisionError: boom" in ep.error

    game = load_env("verifiers", {"env_id": "vf_toy_game"})
    task = next(game.tasks(0))
    crashed = episode(game, task, "2", "crash")  # run(), the env's answer to a turn, raises
    assert crashed.outcome == "env_error" and crashed.turns == 2
    assert "GameEnv.run() raised RuntimeError: the game engine broke" in crashed.error
    bad = episode(game, task, "two")  # int("two") inside run()
    assert bad.outcome == "env_error" and "ValueError" in bad.error

    # step is stateless: run() is replayed, and a conversation it would not produce is refused
    tampered = [*task["prompt"], {"role": "assistant", "content": "2"}, {"role": "user", "content": "lower"}]
    with pytest.raises(RuntimeError, match="must answer the same conversation the same way"):
        game.step(task, [*tampered, {"role": "assistant", "content": "4"}])


def test_episode_steps_run_in_the_verifier_workers(vf):
    pool = VerifierPool("verifiers", {"env_id": "vf_toy_game"}, workers=1, timeout_s=60)
    task = next(load_env("verifiers", {"env_id": "vf_toy_game"}).tasks(0))
    try:

        async def go():
            first = [*task["prompt"], {"role": "assistant", "content": "2"}]
            hint = await pool.step(task, first)
            later = [*first, *hint.turn.messages, {"role": "assistant", "content": "crash"}]
            crash = await pool.step(task, later)
            return hint, crash

        hint, crash = asyncio.run(go())
    finally:
        pool.close()
    assert hint.error is None and hint.turn.messages == ({"role": "user", "content": "higher"},)
    assert crash.turn is None and "the game engine broke" in crash.error


def test_options_and_loading_errors_name_the_problem(vf):
    with pytest.raises(EnvError, match="env_id"):
        load_env("verifiers", {})
    with pytest.raises(EnvError, match="bad options"):
        load_env("verifiers", {"env_id": "vf_toy_single", "unknown": 1})
    with pytest.raises(EnvError, match="cannot load.*no_such_taskset"):
        load_env("verifiers", {"env_id": "no_such_taskset"})
    with pytest.raises(EnvError, match="cannot load"):
        load_env("verifiers", {"env_id": "vf_toy_single", "env_args": {"size": "many"}})


def test_without_verifiers_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "verifiers", None)  # import verifiers -> ImportError
    monkeypatch.setitem(sys.modules, "verifiers.v1", None)
    with pytest.raises(
        EnvError, match=r"needs the verifiers package: install it with `pip install verifiers"
    ):
        load_env("verifiers", {"env_id": "anything"})
