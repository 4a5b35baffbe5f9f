"""Configuration of the ``trainer`` process."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from prime_rl.config import BaseConfig, ResumeConfig, StrictModel


class ModelConfig(StrictModel):
    """The policy model."""

    name: str = Field(default="models/tiny", min_length=1)
    """HF model directory or hub name (the same base model the inference server serves)."""

    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Parameter dtype. auto: float32 on CPU (AVX2 has no native bf16), bfloat16 on GPU
    (gradients reduced in float32)."""


class OptimizerConfig(StrictModel):
    """AdamW and gradient clipping."""

    lr: float = Field(default=1e-5, gt=0)
    """Peak learning rate."""

    weight_decay: float = Field(default=0.0, ge=0)
    """Decoupled weight decay."""

    betas: tuple[float, float] = (0.9, 0.999)
    """Adam betas."""

    eps: float = Field(default=1e-8, gt=0)
    """Adam epsilon."""

    max_grad_norm: float = Field(default=1.0, gt=0)
    """Clip the global gradient norm to this value."""


class SchedulerConfig(StrictModel):
    """Learning-rate schedule (per optimizer step)."""

    type: Literal["constant", "linear", "cosine"] = "constant"
    """Shape after warmup: constant, linear decay to min_lr_ratio*lr, or cosine decay to it."""

    warmup_steps: int = Field(default=0, ge=0)
    """Steps of linear warmup from 0 to lr."""

    min_lr_ratio: float = Field(default=0.0, ge=0, le=1)
    """Final learning rate of the decaying schedules, as a fraction of lr."""


class LossConfig(StrictModel):
    """Policy-gradient loss (GRPO family)."""

    type: Literal["grpo", "dr_grpo", "gspo"] = "grpo"
    """grpo: token-level PPO-style objective normalised by the global number of loss tokens;
    dr_grpo: the same objective without length normalisation (divided by num_samples *
    dr_grpo_norm); gspo: sequence-level ratio (geometric mean over the sequence's tokens)."""

    ratio_mode: Literal["clip", "mask"] = "clip"
    """clip: PPO clipping of the ratio to [1-eps_low, 1+eps_high]; mask: tokens (gspo: sequences)
    whose ratio leaves the bounds get no gradient."""

    eps_low: float = Field(default=0.2, ge=0, lt=1)
    """Lower ratio bound is 1 - eps_low."""

    eps_high: float = Field(default=0.28, ge=0)
    """Upper ratio bound is 1 + eps_high."""

    dr_grpo_norm: int = Field(default=1024, ge=1)
    """Dr.GRPO's constant normaliser per sample (typically the max completion length)."""

    is_correction: Literal["none", "truncate", "mask"] = "none"
    """Importance-sampling correction for the trainer/inference mismatch, per sequence: the
    detached sequence ratio rho = exp(mean(logp_trainer - logp_inference)) either weights the
    sequence by min(rho, is_max) (truncate) or drops sequences with rho outside [is_min, is_max]."""

    is_min: float = Field(default=0.5, ge=0)
    """Lower bound of the sequence IS ratio (mask)."""

    is_max: float = Field(default=2.0, gt=0)
    """Upper bound of the sequence IS ratio (truncate and mask)."""


class DataConfig(StrictModel):
    """How the trainer gets its rollout batches."""

    micro_batch_tokens: int = Field(default=4096, ge=1)
    """Token budget of one micro-batch (samples are packed up to it; a longer sample is alone)."""

    wait_timeout_s: float = Field(default=3600.0, gt=0)
    """Give up waiting for a step's rollout file after this many seconds (the error names the file)."""

    poll_interval_s: float = Field(default=0.05, gt=0)
    """How often to look for the rollout file while waiting."""


class WeightsConfig(StrictModel):
    """Publishing weights for the inference servers (``weights/step_N``)."""

    max_shard_bytes: int = Field(default=2 * 1024**3, ge=1024)
    """Largest safetensors shard; bigger models are split and indexed."""

    keep: int | None = Field(default=None, ge=1)
    """Weight dirs to keep (newest first). Default and minimum: async_level + 1."""


class CheckpointConfig(StrictModel):
    """Full checkpoints for resume (model, optimizer, scheduler, progress)."""

    interval: int | None = Field(default=None, ge=1)
    """Write a checkpoint every this many steps (None: never)."""

    keep: int | None = Field(default=2, ge=1)
    """Checkpoints to keep (newest first); None keeps all."""


class TrainerConfig(BaseConfig):
    """The RL trainer: reads rollouts/step_N, takes one optimizer step, publishes weights/step_N+1."""

    process: ClassVar[str] = "trainer"

    output_dir: Path = Path("outputs")
    """Run directory shared with the orchestrator and the inference server."""

    max_steps: int = Field(default=10, ge=1)
    """Train steps 0..max_steps-1 (publishing weights/step_1 .. weights/step_max_steps)."""

    async_level: int = Field(default=1, ge=0)
    """The orchestrator's async_level: how many policy steps rollouts may lag (sets weight retention)."""

    seed: int = 0
    """Seed of torch's generators."""

    cpu_threads: int | None = Field(default=None, ge=1)
    """torch intra-op threads on CPU (None: torch's default, all cores). On a small machine that
    also runs the inference server, 1 leaves the other cores to generation."""

    model: ModelConfig = ModelConfig()
    """The model."""

    optim: OptimizerConfig = OptimizerConfig()
    """The optimizer."""

    scheduler: SchedulerConfig = SchedulerConfig()
    """The learning-rate schedule."""

    loss: LossConfig = LossConfig()
    """The loss."""

    data: DataConfig = DataConfig()
    """Rollout input."""

    weights: WeightsConfig = WeightsConfig()
    """Weight publishing."""

    ckpt: CheckpointConfig = CheckpointConfig()
    """Full checkpoints."""

    resume: ResumeConfig = ResumeConfig()
    """Resume from a full checkpoint: --resume (latest complete) or --resume.step N."""

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """Log level of the console and of logs/trainer/rank_<r>.log."""

    @model_validator(mode="after")
    def _check(self) -> TrainerConfig:
        if self.weights.keep is not None and self.weights.keep < self.async_level + 1:
            raise ValueError(
                f"weights.keep={self.weights.keep} is below async_level + 1 = {self.async_level + 1}: "
                "an orchestrator could still need a deleted weight dir"
            )
        return self

    @property
    def weights_keep(self) -> int:
        return self.weights.keep or self.async_level + 1
