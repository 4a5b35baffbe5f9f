"""Multi-turn episodes in ``collect-rollouts``: the environment answers each model turn.

After the first answer, the environment's :meth:`~prime_rl.envs.base.Environment.step` (inline or
in the verifier workers) gets the conversation and answers with the next user/tool messages or
the end of the episode with its score; each later turn is one more chat request (retried and
rate-limited like the first). Collection records what was said rather than training on token
ids, so each turn is an ordinary chat request over the whole conversation. Tool calls come from
the server's tool-call parser (``tool_calls`` in the answer; ``inference.tool_call_parser``) or,
without one, are read from the text (``episode.tool_parser``).

The record then carries the whole trajectory: ``messages`` (every turn, tool calls included),
``turns`` (per turn: usage, generation time, finish reason), ``outcome`` (``done``,
``max_turns``, ``timeout``, ``env_error``) and the summed usage. Only ``done`` keeps the
environment's reward; ``max_turns`` and ``timeout`` earn 0; ``env_error`` is recorded as a
verification error (no reward).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from prime_rl.clients.chat import Completion
from prime_rl.collect.scoring import Scorer, apply_verdict
from prime_rl.envs.base import Task
from prime_rl.envs.tool_calls import ToolParser, parse_tool_calls
from prime_rl.envs.verify import Verdict

NextTurn = Callable[[list[dict[str, Any]]], Awaitable[tuple[Completion, float]]]


@dataclass
class CollectedEpisode:
    messages: list[dict[str, Any]]
    turns: list[dict[str, Any]] = field(default_factory=list)
    outcome: str = "done"
    verdict: Verdict | None = None
    env_ms: float = 0.0
    last: Completion | None = None

    @property
    def totals(self) -> Completion:
        """The last answer, with the usage of every turn summed."""
        assert self.last is not None
        return dataclasses.replace(
            self.last,
            input_tokens=sum(t["usage"]["input_tokens"] for t in self.turns),
            output_tokens=sum(t["usage"]["output_tokens"] for t in self.turns),
        )


def assistant_message(comp: Completion, parser: ToolParser) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": comp.text}
    calls = comp.tool_calls or parse_tool_calls(comp.text, parser)
    if calls:
        message["tool_calls"] = calls
    return message


def _turn(comp: Completion, gen_ms: float) -> dict[str, Any]:
    return {
        "usage": {"input_tokens": comp.input_tokens, "output_tokens": comp.output_tokens},
        "gen_ms": gen_ms,
        "finish_reason": comp.finish_reason,
    }


async def play_episode(
    task: Task,
    prompt: list[dict[str, Any]],
    first: Completion,
    first_ms: float,
    scorer: Scorer,
    next_turn: NextTurn,
    timeout_s: float | None = None,
    parser: ToolParser = "hermes",
) -> CollectedEpisode:
    """Play an episode from its first answer to its end (request errors propagate: the pair fails)."""
    ep = CollectedEpisode([*prompt, assistant_message(first, parser)], [_turn(first, first_ms)], last=first)
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                verdict = await scorer.step(task, ep.messages)
                ep.env_ms += verdict.ms
                if verdict.error is not None or verdict.turn is None:
                    ep.outcome, ep.verdict = "env_error", verdict
                    return ep
                if verdict.turn.done:
                    ep.outcome, ep.verdict = "done", verdict
                    return ep
                if len(ep.turns) >= scorer.max_turns:
                    ep.outcome = "max_turns"
                    return ep
                ep.messages += [dict(m) for m in verdict.turn.messages]
                comp, ms = await next_turn(ep.messages)
                ep.messages.append(assistant_message(comp, parser))
                ep.turns.append(_turn(comp, ms))
                ep.last = comp
    except TimeoutError:
        ep.outcome = "timeout"
    return ep


def add_episode(record: dict[str, Any], ep: CollectedEpisode) -> None:
    """Put an episode's trajectory, usage, timings and reward on its record."""
    last = ep.totals
    record["messages"] = ep.messages
    record["turns"] = ep.turns
    record["outcome"] = ep.outcome
    record["response"] = {"text": last.text, "finish_reason": last.finish_reason}
    if last.tool_calls:
        record["response"]["tool_calls"] = last.tool_calls
    record["usage"] = {
        "input_tokens": last.input_tokens,
        "output_tokens": last.output_tokens,
        "total_tokens": last.input_tokens + last.output_tokens,
    }
    verdict = ep.verdict
    if ep.outcome in ("max_turns", "timeout"):
        verdict = Verdict(0.0, {}, None, 0.0)
    assert verdict is not None
    apply_verdict(record, verdict)
    record["timings"]["gen_ms"] = sum(t["gen_ms"] for t in ep.turns)
    record["timings"]["verify_ms"] = ep.env_ms
    record["timings"]["env_ms"] = ep.env_ms
