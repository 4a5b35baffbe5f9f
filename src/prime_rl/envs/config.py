"""Configuration of an environment and of its verifier processes, shared by the orchestrator and
``collect-rollouts`` (the verifier pool itself is :class:`prime_rl.envs.verify.VerifierPool`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from prime_rl.config import StrictModel


class EnvConfig(StrictModel):
    """The environment: task source and verifier."""

    name: str = "toy"
    """Registered environment name (toy, guess, math, math_tool, reasoning_gym, verifiers), or an import
    path ``package.module:Class`` or ``path/to/env.py:Class``. Checked at load: a name that is
    neither failed only once the orchestrator built it, after ``rl`` had started the server and the
    trainer."""

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        from prime_rl.envs.registry import check_name  # an EnvError is a ValueError: pydantic names the field

        return check_name(name)

    options: dict[str, Any] = {}
    """Options of the environment (e.g. {"path": "data/math.jsonl"} for math)."""

    seed: int = 0
    """Seed of the task order."""


class VerifyConfig(StrictModel):
    """Scoring off the event loop, in verifier processes with a per-call timeout."""

    workers: int = Field(default=2, ge=1)
    """Verifier processes."""

    timeout_s: float = Field(default=30.0, gt=0)
    """Seconds one score() call may take; a slower one is recorded as a failure (reward 0)."""


class EpisodeConfig(StrictModel):
    """Limits of multi-turn episodes, and how tool calls are read (see
    :mod:`prime_rl.orchestrator.episode`). Single-turn environments are not affected."""

    max_turns: int | None = Field(default=None, ge=1)
    """Model turns per episode; None: the environment's own ``max_turns``. An episode the
    environment has not ended by then ends with outcome ``max_turns`` and reward 0."""

    timeout_s: float | None = Field(default=300.0, gt=0)
    """Wall time one episode may take (all its turns, the environment's and tools' time
    included); a slower one ends with outcome ``timeout`` and reward 0. None: no limit."""

    tool_parser: Literal["hermes", "none"] = "hermes"
    """How tool calls are read from the sampled text: ``hermes`` (``<tool_call>{json}</tool_call>``,
    the Hermes/Qwen2.5/Qwen3 templates) or ``none`` (the model has no tools)."""

    tokenizer: str | None = None
    """Tokenizer (HF dir or hub name) used to render the environment's messages between model
    turns with its chat template; None: the ``model``. Only multi-turn episodes load it."""
