"""The episode loop with a scripted model and scripted environments: how episodes end, and the
token sequence, mask and logprobs they leave for the trainer."""

from __future__ import annotations

import asyncio

import pytest

from prime_rl.envs.base import Score, Turn
from prime_rl.envs.guess import GuessEnv
from prime_rl.envs.tool_calls import parse_tool_calls
from prime_rl.envs.verify import Verdict
from prime_rl.orchestrator.episode import ChatDelta, Episode, EpisodeLimits, SampledTurn, play

ENV_IDS = [900, 901]  # what the fake template turns every environment answer into


class ScriptedModel:
    """Answers each later turn with the next scripted text; records the prompts it was sent."""

    def __init__(self, texts: list[str], finish: str = "stop", delay_s: float = 0.0):
        self.texts, self.finish, self.delay_s = list(texts), finish, delay_s
        self.prompts: list[list[int]] = []
        self.next_id = 100

    def turn(self, text: str, finish: str = "stop", policy_step: int = 0) -> SampledTurn:
        ids = list(range(self.next_id, self.next_id + 3))
        self.next_id += 3
        return SampledTurn(ids, [-0.5, -1.0, -1.5], text, finish, policy_step)

    async def __call__(self, prompt_ids: list[int], max_tokens: int) -> SampledTurn:
        self.prompts.append(list(prompt_ids))
        await asyncio.sleep(self.delay_s)
        return self.turn(self.texts.pop(0), self.finish, policy_step=len(self.prompts))


def env_step(env):
    async def step(task, messages):
        try:
            return Verdict(0.0, {}, None, 1.0, turn=env.step(task, [dict(m) for m in messages]))
        except Exception as e:
            return Verdict(0.0, {}, f"environment raised {type(e).__name__}: {e}", 1.0)

    return step


def fake_delta(history, new, last_ids):
    assert new and history[-1]["role"] == "assistant"
    return list(ENV_IDS)


def start(model: ScriptedModel, first: str, finish: str = "stop") -> Episode:
    episode = Episode([1, 2, 3], [{"role": "user", "content": "go"}])
    episode.add_turn(model.turn(first, finish), 5.0)
    return episode


def limits(**kw) -> EpisodeLimits:
    return EpisodeLimits(**{"max_turns": 4, "max_tokens": 256, "turn_max_tokens": 8, **kw})


def run(env, model, first, delta=fake_delta, **kw) -> Episode:
    return asyncio.run(play({"secret": 3}, start(model, first), limits(**kw), env_step(env), model, delta))


def test_a_solved_game_is_one_exact_sequence_with_the_sampled_ids_masked_in():
    model = ScriptedModel(["b", "c"])
    ep = run(GuessEnv(high=4, max_turns=4), model, "a")
    assert ep.outcome == "done" and ep.turns == 3
    assert [m["content"] for m in ep.messages] == ["go", "a", "Later.", "b", "Later.", "c"]
    # prompt | turn 1 | env | turn 2 | env | turn 3
    assert ep.completion_ids == [100, 101, 102, *ENV_IDS, 103, 104, 105, *ENV_IDS, 106, 107, 108]
    assert ep.mask == [True] * 3 + [False] * 2 + [True] * 3 + [False] * 2 + [True] * 3
    assert ep.logprobs[3:5] == [0.0, 0.0] and ep.logprobs[:3] == [-0.5, -1.0, -1.5]
    assert ep.sampled_ids == list(range(100, 109))
    # each later turn was generated from the exact sequence so far
    assert model.prompts == [[1, 2, 3, 100, 101, 102, *ENV_IDS], [1, 2, 3, *ep.completion_ids[:10]]]
    assert ep.policy_steps == [0, 1, 2]
    assert ep.reward == pytest.approx(0.8 * (1 - 2 / 4) + 0.2 * 3 / 3)


def test_an_environment_that_never_ends_stops_at_max_turns_with_reward_0():
    class Chatty(GuessEnv):
        def step(self, task, messages):
            return Turn.reply({"role": "user", "content": "more"})

    ep = run(Chatty(), ScriptedModel(["a", "b", "c", "d"]), "x", max_turns=3)
    assert (ep.outcome, ep.turns, ep.reward) == ("max_turns", 3, 0.0)


def test_an_environment_that_raises_is_a_recorded_outcome_not_a_crash():
    class Broken(GuessEnv):
        def step(self, task, messages):
            raise KeyError("secret")

    ep = run(Broken(), ScriptedModel([]), "a")
    assert ep.outcome == "env_error" and "KeyError" in ep.error and ep.reward == 0.0


def test_a_cut_off_turn_is_answered_like_any_other_and_only_a_cut_off_last_turn_truncates():
    model = ScriptedModel(["c"])
    ep = asyncio.run(
        play(
            {"secret": 3},
            start(model, "a", finish="length"),
            limits(),
            env_step(GuessEnv()),
            model,
            fake_delta,
        )
    )
    assert (ep.outcome, ep.turns, ep.truncated) == ("done", 2, False) and ep.reward > 0.5
    cut = ScriptedModel(["b"], finish="length")
    ep = asyncio.run(play({"secret": 2}, start(cut, "a"), limits(), env_step(GuessEnv()), cut, fake_delta))
    assert ep.outcome == "done" and ep.truncated


def test_the_sequence_never_outgrows_max_tokens():
    model = ScriptedModel(["a", "b", "d"])
    ep = run(GuessEnv(), model, "a", max_tokens=3 + 3 + 2 + 3 + 1)  # room for turn 2 but not turn 3
    assert ep.outcome == "max_tokens" and ep.turns == 2
    assert ep.num_tokens <= 12 and ep.completion_ids[-3:] == [103, 104, 105]


def test_an_episode_past_its_wall_time_ends_with_outcome_timeout():
    ep = run(GuessEnv(), ScriptedModel(["b"], delay_s=5.0), "a", timeout_s=0.2)
    assert ep.outcome == "timeout" and ep.reward == 0.0 and "0s" in ep.error


def test_a_turn_aborted_by_a_weight_swap_marks_the_episode_for_regeneration():
    ep = run(GuessEnv(), ScriptedModel(["b"], finish="abort"), "a")
    assert ep.outcome == "abort" and ep.turns == 2


def test_tool_calls_in_the_sampled_text_reach_the_environment_as_openai_tool_calls():
    seen = []

    class Tools(GuessEnv):
        def step(self, task, messages):
            seen.append(messages[-1].get("tool_calls"))
            return Turn.end(Score(1.0))

    text = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    ep = run(Tools(), ScriptedModel([]), text)
    assert ep.outcome == "done"
    assert seen == [
        [{"id": "call_0", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]
    ]


def test_malformed_tool_calls_are_kept_for_the_tool_runner_to_report():
    calls = parse_tool_calls(
        '<tool_call>{"name": "add", "arguments": {"a": 1,</tool_call> <tool_call>[1]</tool_call>'
    )
    assert [c["function"]["name"] for c in calls] == ["add", ""]
    assert calls[0]["function"]["arguments"] == '{"name": "add", "arguments": {"a": 1,'
    assert parse_tool_calls("<tool_call>{}</tool_call>", "none") == []


class _Tokenizer:
    """Just enough of a HF tokenizer with a ChatML template for :class:`ChatDelta`."""

    eos_token = "<|im_end|>"

    def convert_tokens_to_ids(self, token):
        return 2

    def apply_chat_template(self, messages, tools=None, tokenize=False, add_generation_prompt=False):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    def encode(self, text, add_special_tokens=False):
        self.encoded = text
        return [ord(c) for c in text]


@pytest.mark.parametrize("ended_with_eos", [True, False])
def test_chat_delta_tokenizes_only_what_follows_the_sampled_turn(ended_with_eos):
    tok = _Tokenizer()
    history = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "1"}]
    last = [50, 2] if ended_with_eos else [50]  # stopped on the eos token, or on a stop string
    ChatDelta(tok)(history, [{"role": "user", "content": "Higher."}], last)
    prefix = "" if ended_with_eos else "<|im_end|>"
    assert tok.encoded == prefix + "\n<|im_start|>user\nHigher.<|im_end|>\n<|im_start|>assistant\n"
