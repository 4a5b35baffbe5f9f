"""Configuration of the ``orchestrator`` process."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from prime_rl.clients.config import ClientConfig, RetryPolicy
from prime_rl.clients.fleet import FleetConfig
from prime_rl.clients.server_metrics import ServerMetricsConfig
from prime_rl.config import BaseConfig, OutputDir, ResumeConfig, StrictModel
from prime_rl.envs.config import EnvConfig, EpisodeConfig, VerifyConfig
from prime_rl.monitor import MonitorConfig

__all__ = [
    "AdvantageConfig",
    "EnvConfig",
    "OrchestratorConfig",
    "SamplingConfig",
    "VerifyConfig",
]

# rollout requests back off from 0.5 s, doubling up to 10 s (see prime_rl.clients.backoff)
REQUEST_BACKOFF_S = 0.5
REQUEST_BACKOFF_MAX_S = 10.0


OWN_REQUEST_FIELDS = frozenset(
    {"model", "messages", "prompt", "n", "max_tokens", "temperature", "top_p", "logprobs"}
    | {"return_token_ids", "skip_special_tokens", "stop", "seed", "tools", "tool_choice"}
)
"""Request fields the orchestrator sets (``sampling.extra`` cannot replace them)."""


class SamplingConfig(StrictModel):
    """Sampling parameters of every rollout request."""

    max_tokens: int = Field(default=128, ge=1)
    """Completion length limit (a completion that hits it counts as truncated)."""

    temperature: float = Field(default=1.0, gt=0)
    """Sampling temperature (the trainer rescales its logits by the same value)."""

    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus sampling; 1.0 keeps the trainer's ratio exact."""

    seed: int | None = None
    """Base sampling seed (each request gets seed + a counter); None: unseeded."""

    stop: list[str] = Field(default_factory=list)
    """Stop strings: generation ends at the first one (a finished answer, not a truncated one;
    the text excludes it, the token ids keep every sampled token)."""

    extra: dict[str, Any] = Field(default_factory=dict)
    """More fields for every generation request, passed to the server as given (vLLM sampling
    parameters such as ``top_k``, ``min_p``, ``repetition_penalty``, ``structured_outputs``).
    They may not replace a field the orchestrator sets itself (the error names it)."""

    @field_validator("extra")
    @classmethod
    def _no_override(cls, extra: dict[str, Any]) -> dict[str, Any]:
        taken = sorted(set(extra) & OWN_REQUEST_FIELDS)
        if taken:
            raise ValueError(f"sampling.extra may not set {', '.join(taken)}: the orchestrator sets them")
        return extra


class AdvantageConfig(StrictModel):
    """Group-relative advantages."""

    std_normalize: bool = False
    """Divide by the group's reward std (GRPO); off: Dr.GRPO-style mean baseline only."""

    filter_zero: bool = False
    """Drop groups whose advantages are all zero (every rollout got the same reward)."""


class OrchestratorConfig(BaseConfig):
    """The orchestrator: keeps rollouts in flight, scores them, enforces async_level, feeds the trainer."""

    process: ClassVar[str] = "orchestrator"

    output_dir: OutputDir = Path("outputs")
    """Run directory shared with the trainer and the inference server."""

    max_steps: int = Field(default=10, ge=1)
    """Produce batches for steps 0..max_steps-1."""

    model: str = "models/tiny"
    """Model name the servers serve (the `model` field of requests)."""

    batch_size: int = Field(default=64, ge=1)
    """Rollouts per step (a multiple of rollouts_per_example)."""

    rollouts_per_example: int = Field(default=8, ge=1)
    """Group size: completions sampled per task (one request with n=group size)."""

    async_level: int = Field(default=1, ge=0)
    """Max policy lag: step s uses weights of step >= s - async_level (0 = on-policy)."""

    max_inflight: int = Field(default=32, ge=1)
    """Tasks (groups) in flight at once across all servers."""

    seq_len: int = Field(default=2048, ge=2)
    """Max prompt + completion tokens; longer samples are dropped."""

    trainer_world_size: int = Field(default=1, ge=1)
    """Trainer ranks: one rollout file per rank per step."""

    ckpt_interval: int | None = Field(default=None, ge=1)
    """Save orchestrator progress every this many steps (use the trainer's ckpt.interval)."""

    startup_timeout_s: float = Field(default=600.0, gt=0)
    """Wait this long for the inference servers at start (with a countdown), then fail."""

    request_timeout_s: float = Field(default=600.0, gt=0)
    """Seconds one rollout request may take before it is retried."""

    max_request_retries: int = Field(default=5, ge=0)
    """Retries of a failed rollout request (on any server), then the run fails."""

    weights_timeout_s: float = Field(default=3600.0, gt=0)
    """Wait this long for weights/step_N/STABLE at the async barrier."""

    resume: ResumeConfig = ResumeConfig()
    """Resume from checkpoints/step_N/orchestrator: --resume (latest) or --resume.step N."""

    client: ClientConfig = ClientConfig()
    """Inference servers, shared pool and admin client."""

    server_metrics: ServerMetricsConfig = ServerMetricsConfig()
    """Each server's load (requests running and waiting, KV-cache use, preemptions, queue time)
    scraped from its /metrics into ``[server] metrics`` lines; ``interval_s`` 0 turns it off."""

    fleet: FleetConfig = FleetConfig()
    """How generation requests are spread over the servers: with server_metrics on, each server gets
    an in-flight limit that backs off on preemption and a full KV cache, and the request goes to
    the server with the most headroom."""

    sampling: SamplingConfig = SamplingConfig()
    """Sampling parameters."""

    env: EnvConfig = EnvConfig()
    """Environment."""

    verify: VerifyConfig = VerifyConfig()
    """Verification (and the environment's turns of multi-turn episodes: the same workers)."""

    episode: EpisodeConfig = EpisodeConfig()
    """Multi-turn episodes: turn, time and token limits, tool-call format."""

    truncated_reward: float | None = None
    """Reward of a truncated completion (one that hit ``sampling.max_tokens``) in place of its
    score, before advantages; None: scored like any other. 0 means an answer the policy never
    ends earns nothing, however it scores (the simplest form of DAPO's overlong shaping), so
    learning cannot drift onto answers that are cut off. Its score stays in the env metrics."""

    advantage: AdvantageConfig = AdvantageConfig()
    """Advantages."""

    monitor: MonitorConfig = MonitorConfig()
    """Per-step metrics to Weights & Biases and TensorBoard besides metrics.jsonl (both off by default)."""

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Log level of the console and of logs/orchestrator.log."""

    @model_validator(mode="after")
    def _check(self) -> OrchestratorConfig:
        if self.batch_size % self.rollouts_per_example:
            raise ValueError(
                f"batch_size {self.batch_size} is not a multiple of rollouts_per_example {self.rollouts_per_example}"
            )
        if self.sampling.max_tokens >= self.seq_len:
            raise ValueError(
                f"sampling.max_tokens {self.sampling.max_tokens} leaves no room for a prompt in seq_len {self.seq_len}"
            )
        return self

    @property
    def groups_per_step(self) -> int:
        return self.batch_size // self.rollouts_per_example

    @property
    def request_retry(self) -> RetryPolicy:
        """The retry policy of rollout requests, in the shared client shape: ``max_request_retries``
        retries, the inference pool's connect timeout, backoff from 0.5 s capped at 10 s."""
        return RetryPolicy(
            connect_timeout_s=self.client.connect_timeout_s,
            max_retries=self.max_request_retries,
            backoff_s=REQUEST_BACKOFF_S,
            backoff_max_s=REQUEST_BACKOFF_MAX_S,
        )
