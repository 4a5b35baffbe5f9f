"""Configuration of an environment and of its verifier processes, shared by the orchestrator and
``collect-rollouts`` (the verifier pool itself is :class:`prime_rl.envs.verify.VerifierPool`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from prime_rl.config import StrictModel


class EnvConfig(StrictModel):
    """The environment: task source and verifier."""

    name: str = "toy"
    """Registered environment name (toy, reasoning_gym, math)."""

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
