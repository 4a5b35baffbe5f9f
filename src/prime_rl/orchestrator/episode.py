"""Episodes: the model's turns and the environment's answers, kept as the exact token sequence.

Every rollout is an episode. Its first model turn is one choice of the group's chat request (the
server renders the task's messages); the environment then answers each model turn
(:meth:`prime_rl.envs.base.Environment.step`, in a verifier worker) until it ends the episode.
A single-turn environment ends it at the first answer: the same loop, one turn.

Token-exact trajectories: the trainer must train on exactly the tokens the model sampled. The
sequence is built incrementally, never re-tokenized as a whole::

    prompt ids (server) | turn 1 ids (sampled) | env ids (tokenized here) | turn 2 ids (sampled) | ...

Each later turn is generated from that sequence itself (``/v1/completions`` with the token ids
as the prompt), so the model continues from what it sampled. Only the environment's messages are
tokenized, as the chat template renders them after the last model turn (:class:`ChatDelta`). The
loss mask covers the sampled ids only, and the inference logprobs line up with them (0 on the
environment's ids).

Limits (:class:`prime_rl.envs.config.EpisodeConfig`): model turns, total tokens (the run's
``seq_len``) and wall time per episode. Whatever ends an episode is recorded in ``outcome``:
``done`` (the environment ended it), ``max_turns``, ``max_tokens``, ``timeout``, ``env_error``
(the environment raised or timed out; ``error`` says how), or ``abort`` (a turn aborted by a
weight swap: the group is regenerated). Only ``done`` carries the environment's reward; every
other outcome earns 0 and is trained on as such. A model turn cut off at ``sampling.max_tokens``
is answered like any other; the episode counts as truncated (``truncated_reward``) when its last
turn was.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prime_rl.envs.base import Score, Task
from prime_rl.envs.tool_calls import ToolParser, parse_tool_calls
from prime_rl.envs.verify import Verdict
from prime_rl.logging import log_tagged

OUTCOMES = ("done", "max_turns", "max_tokens", "timeout", "env_error", "abort")
"""Every way an episode ends (see the module docstring)."""


@dataclass
class SampledTurn:
    """One model turn as the server sampled it."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str | None
    policy_step: int


@dataclass
class Episode:
    """One rollout: the exact token sequence, its masks, the conversation and how it ended."""

    prompt_ids: list[int]
    messages: list[dict[str, Any]]
    completion_ids: list[int] = field(default_factory=list)
    """Every id after the prompt: sampled turns and the environment's messages, in order."""
    logprobs: list[float] = field(default_factory=list)
    """Inference logprob of each completion id (0 on the environment's ids)."""
    mask: list[bool] = field(default_factory=list)
    """True on sampled ids: what the loss trains on."""
    turns: int = 0
    policy_steps: list[int] = field(default_factory=list)
    """The policy step that sampled each model turn (the oldest one bounds the staleness)."""
    finish_reason: str | None = None
    """How the last model turn ended (``stop``, ``length``, ``abort``)."""
    outcome: str = "done"
    error: str | None = None
    score: Score | None = None
    env_ms: float = 0.0
    """Time inside the environment's ``step`` calls (tools included)."""
    tool_ms: float = 0.0
    tool_errors: list[str] = field(default_factory=list)
    turn_gen_ms: list[float] = field(default_factory=list)
    sampled_at: float = 0.0
    """``time.monotonic()`` when the last turn was sampled."""

    def add_turn(self, turn: SampledTurn, gen_ms: float) -> None:
        self.completion_ids += turn.token_ids
        self.logprobs += turn.logprobs
        self.mask += [True] * len(turn.token_ids)
        self.messages.append({"role": "assistant", "content": turn.text})
        self.turns += 1
        self.policy_steps.append(turn.policy_step)
        self.finish_reason = turn.finish_reason
        self.turn_gen_ms.append(gen_ms)
        self.sampled_at = time.monotonic()

    def add_env_ids(self, ids: list[int]) -> None:
        self.completion_ids += ids
        self.logprobs += [0.0] * len(ids)
        self.mask += [False] * len(ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)

    @property
    def reward(self) -> float:
        return self.score.reward if self.outcome == "done" and self.score is not None else 0.0

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    @property
    def sampled_ids(self) -> list[int]:
        return [t for t, m in zip(self.completion_ids, self.mask, strict=True) if m]


class ChatDelta:
    """The token ids of environment messages as the chat template renders them after a model turn.

    ``render(history)`` ends with the model's turn closed by the template (``...<|im_end|>\\n`` in
    ChatML); ``render(history + new, add_generation_prompt=True)`` adds the new messages and the
    next turn's header. The ids to append after the sampled turn are the template's text after
    that turn's end-of-turn token (prefixed by the token itself when the model stopped without
    sampling it: on a stop string, a length cut, or another of its stop tokens such as
    ``<|endoftext|>``) plus the rendered new messages. Fits templates
    whose assistant turns end with the tokenizer's eos text (ChatML: Qwen, Hermes; Llama 3's
    ``<|eot_id|>``); a template that re-renders earlier turns differently raises
    :class:`EpisodeError` instead of producing a sequence the model never saw.
    """

    def __init__(self, tokenizer: Any, tools: Sequence[dict[str, Any]] = ()):
        self.tokenizer = tokenizer
        self.tools = list(tools) or None
        eos = tokenizer.eos_token
        if not eos:
            raise EpisodeError("the tokenizer has no eos token: cannot find where a model turn ends")
        self.eos_text = eos
        self.eos_ids = {tokenizer.convert_tokens_to_ids(eos)}

    def _render(self, messages: list[dict[str, Any]], generation: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages, tools=self.tools, tokenize=False, add_generation_prompt=generation
        )

    def __call__(
        self, history: list[dict[str, Any]], new: Sequence[dict[str, Any]], last_ids: list[int]
    ) -> list[int]:
        before = self._render(history, generation=False)
        after = self._render([*history, *new], generation=True)
        if not after.startswith(before):
            raise EpisodeError(
                "the chat template renders the earlier turns differently once new messages follow"
            )
        end = before.rfind(self.eos_text)
        if end < 0:
            raise EpisodeError(f"the chat template does not close the model's turn with {self.eos_text!r}")
        tail = before[end:]
        if last_ids and last_ids[-1] in self.eos_ids:
            tail = tail[len(self.eos_text) :]
        return list(self.tokenizer.encode(tail + after[len(before) :], add_special_tokens=False))


class EpisodeError(RuntimeError):
    """The episode's token sequence cannot be continued exactly (the chat template does not fit)."""


StepFn = Callable[[Task, list[dict[str, Any]]], Awaitable[Verdict]]
SampleFn = Callable[[list[int], int], Awaitable[SampledTurn]]
DeltaFn = Callable[[list[dict[str, Any]], Sequence[dict[str, Any]], list[int]], list[int]]


@dataclass
class EpisodeLimits:
    max_turns: int
    max_tokens: int
    """Prompt + completion ids (the run's ``seq_len``)."""
    turn_max_tokens: int
    """Sampled ids per model turn (``sampling.max_tokens``)."""
    timeout_s: float | None = None
    tool_parser: ToolParser = "hermes"


async def play(
    task: Task,
    episode: Episode,
    limits: EpisodeLimits,
    step: StepFn,
    sample: SampleFn,
    delta: DeltaFn | None,
    log: dict[str, object] | None = None,
) -> Episode:
    """Run ``episode`` (its first model turn already added) until it ends; returns it.

    ``step``: the environment's answer (a verifier-pool call); ``sample``: the next model turn
    from a token prompt; ``delta``: the environment messages' ids (None when the environment has
    a single turn, which never needs one). With ``log`` (fields such as ``step=`` and ``task=``),
    each answer of the environment is an ``[env] turn.done`` line."""
    try:
        async with asyncio.timeout(limits.timeout_s):
            await _turns(task, episode, limits, step, sample, delta, log)
    except TimeoutError:
        episode.outcome, episode.error = "timeout", f"episode took over {limits.timeout_s:.0f}s"
    except EpisodeError as e:
        episode.outcome, episode.error = "env_error", str(e)
    return episode


def _turn_end(verdict: Verdict) -> str:
    """How the environment's answer ends the turn: ``done`` (the episode), ``no`` or ``env_error``."""
    if verdict.error is not None or verdict.turn is None:
        return "env_error"
    return "done" if verdict.turn.done else "no"


async def _turns(
    task: Task,
    ep: Episode,
    limits: EpisodeLimits,
    step: StepFn,
    sample: SampleFn,
    delta: DeltaFn | None,
    log: dict[str, object] | None,
) -> None:
    while True:
        if ep.finish_reason == "abort":
            ep.outcome = "abort"
            return
        last = ep.messages[-1]
        calls = parse_tool_calls(last["content"], limits.tool_parser)
        if calls:
            last["tool_calls"] = calls
        verdict = await step(task, ep.messages)
        ep.env_ms += verdict.ms
        if log is not None:
            answer = verdict.turn
            log_tagged(
                "env",
                "turn.done",
                **log,
                turn=ep.turns,
                policy_step=ep.policy_steps[-1],
                gen_ms=ep.turn_gen_ms[-1],
                env_ms=verdict.ms,
                tool_ms=answer.tool_ms if answer is not None else 0.0,
                tool_calls=len(calls),
                tool_errors=len(answer.tool_errors) if answer is not None else 0,
                end=_turn_end(verdict),
            )
        if verdict.error is not None or verdict.turn is None:
            ep.outcome, ep.error = "env_error", verdict.error or "no answer"
            return
        turn = verdict.turn
        ep.tool_ms += turn.tool_ms
        ep.tool_errors += turn.tool_errors
        if turn.done:
            ep.outcome, ep.score = "done", turn.score
            return
        if ep.turns >= limits.max_turns:
            ep.outcome = "max_turns"
            return
        if delta is None:
            raise EpisodeError("the environment answered a single-turn episode with more messages")
        ids = delta(ep.messages, turn.messages, ep.completion_ids)
        room = limits.max_tokens - ep.num_tokens - len(ids)
        if room < 1:  # the sequence stays within max_tokens: the answer is not added
            ep.outcome = "max_tokens"
            return
        ep.messages += [dict(m) for m in turn.messages]
        ep.add_env_ids(ids)
        t0 = time.monotonic()
        sampled = await sample(ep.prompt_ids + ep.completion_ids, min(limits.turn_max_tokens, room))
        ep.add_turn(sampled, (time.monotonic() - t0) * 1000.0)
