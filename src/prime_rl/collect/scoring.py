"""Scoring responses: the orchestrator's verifier processes, or inline for fast verifiers."""

from __future__ import annotations

import time
from typing import Any

from prime_rl.envs.base import Task, plain_score
from prime_rl.envs.config import VerifyConfig
from prime_rl.envs.registry import load_env
from prime_rl.envs.verify import Verdict, VerifierPool


class Scorer:
    """``await score(task, text) -> Verdict``; a verifier that raises, hangs or dies gives a
    Verdict with ``error`` set (the record keeps the response, without a reward). ``workers``
    0 in ``settings`` scores inline, in this process."""

    def __init__(
        self, env_name: str, options: dict[str, Any], settings: VerifyConfig, max_turns: int | None = None
    ):
        self.inline = settings.workers == 0
        self._env = load_env(env_name, options)
        self.max_turns = max_turns or self._env.max_turns
        """Model turns per episode (1: score the answer; more: the environment answers each turn)."""
        if not self.inline:
            self._pool = VerifierPool(env_name, options, settings.workers, settings.timeout_s)

    async def step(self, task: Task, messages: list[dict[str, Any]]) -> Verdict:
        """The environment's answer to the last model turn (``turn`` set; ``error`` when it fails)."""
        if not self.inline:
            return await self._pool.step(task, messages)
        start = time.perf_counter()
        try:
            turn = self._env.step(task, [dict(m) for m in messages])
            s = None if turn.score is None else plain_score(turn.score)
        except Exception as e:  # an environment bug is data, not a crash of the run
            ms = (time.perf_counter() - start) * 1000.0
            return Verdict(0.0, {}, f"environment raised {type(e).__name__}: {e}", ms, ms)
        ms = (time.perf_counter() - start) * 1000.0
        if s is None:
            return Verdict(0.0, {}, None, ms, ms, None, turn)
        return Verdict(s.reward, s.metrics, None, ms, ms, s.answer, turn)

    async def score(self, task: Task, text: str) -> Verdict:
        if not self.inline:
            return await self._pool.score(task, text)
        start = time.perf_counter()
        try:
            s = plain_score(self._env.score(task, text))
            ms = (time.perf_counter() - start) * 1000.0
            return Verdict(s.reward, s.metrics, None, ms, ms, s.answer)
        except Exception as e:  # a verifier bug is data, not a crash of the run
            ms = (time.perf_counter() - start) * 1000.0
            return Verdict(0.0, {}, f"verifier raised {type(e).__name__}: {e}", ms, ms)

    def close(self) -> None:
        if not self.inline:
            self._pool.close()


def apply_verdict(record: dict[str, Any], verdict: Verdict) -> None:
    """Put a verdict on a record: reward and metrics, or ``verify_error`` and no reward."""
    if verdict.error is None:
        record["reward"] = verdict.reward
        record["metrics"] = verdict.metrics
        if verdict.answer is not None:
            record["answer"] = verdict.answer
        record.pop("verify_error", None)
    else:
        record["reward"] = None
        record["metrics"] = {}
        record["verify_error"] = verdict.error
    record["verified"] = verdict.error is None
    record.setdefault("timings", {})["verify_ms"] = verdict.latency_ms
