"""Configuration of the ``trainer`` process."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from loguru import logger
from pydantic import Field, model_validator

from prime_rl.config import BaseConfig, OutputDir, ResumeConfig, StrictModel
from prime_rl.monitor import MonitorConfig


class ModelConfig(StrictModel):
    """The policy model."""

    name: str = Field(default="models/tiny", min_length=1)
    """HF model directory or hub name (the same base model the inference server serves)."""

    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """Parameter dtype. auto: float32 on CPU (AVX2 has no native bf16), bfloat16 on GPU
    (gradients reduced in float32)."""

    attention: Literal["auto", "sdpa", "flex"] = "auto"
    """Attention over packed micro-batches (each sample attends causally to itself only). sdpa:
    PyTorch's scaled_dot_product_attention, one call per sample of the row (no [T, T] mask: time
    and memory grow with the sum of the samples' squared lengths; a compiled layer runs it
    eagerly; a model with sliding-window layers or soft-capped attention logits is refused at
    start); flex: FlexAttention with a block-sparse document mask (blocks of 128 x 128 tokens
    outside every sample are skipped; compiled, and micro-batches are padded to
    micro_batch_tokens so that one compiled kernel serves every step). auto: flex on a GPU, sdpa
    on CPU. flex on CPU is refused at start: FlexAttention has no backward pass there."""

    logprob_chunk_tokens: int | None = Field(default=2048, ge=1)
    """Tokens whose logits exist at once when computing the loss's logprobs and entropies: the
    output projection, log-softmax and their gradient run chunk by chunk, so that part needs
    O(chunk x vocab) memory instead of several fp32 [tokens x vocab] tensors (the backward pass
    computes each chunk's logits again). None: the model's full logits (the reference; more
    memory). Models that change their logits after the projection (soft-capping, scaling) always
    use full logits, with a warning."""

    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them:
    less memory for long micro-batches, about a third more compute in the layers. On one H100
    (Qwen2.5-0.5B's shape, 32,768-token micro-batches) the peak was 9.4 GB instead of 55.6 GB and
    the step 4% slower (benchmarks/RESULTS.md)."""

    compile: bool = False
    """torch.compile each decoder layer (in place: parameter names unchanged). The first steps
    pay the compilation (over two minutes for Qwen2.5-0.5B's 24 layers on an H100, with
    FlexAttention's kernels); with attention=flex the padded micro-batches keep one shape."""


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


# (eps_low, eps_high) when unset: PPO/DAPO-style token-level bounds for the token-level losses;
# GSPO's sequence ratio is a geometric mean, so its bounds are orders of magnitude tighter (the
# GSPO paper uses 3e-4 / 4e-4).
LOSS_EPS_DEFAULTS: dict[str, tuple[float, float]] = {
    "grpo": (0.2, 0.28),
    "dr_grpo": (0.2, 0.28),
    "gspo": (3e-4, 4e-4),
}
# an eps on the wrong side of this looks sized for the other kind of ratio (token vs sequence)
SEQUENCE_EPS_LIMIT = 0.01


class LossConfig(StrictModel):
    """Policy-gradient loss (GRPO family). Formulas: ``prime_rl/trainer/loss.py``'s docstring."""

    type: Literal["grpo", "dr_grpo", "gspo"] = "grpo"
    """grpo: token-level PPO-style objective normalised by the global number of loss tokens;
    dr_grpo: the same objective without length normalisation (divided by num_samples *
    dr_grpo_norm); gspo: sequence-level ratio (geometric mean over the sequence's tokens)."""

    ratio_mode: Literal["clip", "mask"] = "clip"
    """What happens to the policy ratio pi_theta/pi_old (the trainer's policy now over the
    trainer's policy at sampling time; per token, gspo: per sequence) outside [1-eps_low,
    1+eps_high]. clip: PPO clipping; mask: no gradient there. With one optimizer step per batch
    pi_old is the current policy, so the ratio is 1 and neither triggers; the trainer/inference
    mismatch is is_correction's job."""

    eps_low: float | None = Field(default=None, ge=0, lt=1)
    """Lower policy-ratio bound is 1 - eps_low. None: the loss type's default (grpo/dr_grpo 0.2,
    gspo 3e-4). A token-level-sized value (> 0.01) with gspo, or a gspo-sized one (< 0.01) with a
    token-level loss, is logged as a warning."""

    eps_high: float | None = Field(default=None, ge=0)
    """Upper policy-ratio bound is 1 + eps_high. None: the loss type's default (grpo/dr_grpo
    0.28, gspo 4e-4). Warned about like eps_low."""

    dr_grpo_norm: int = Field(default=1024, ge=1)
    """Dr.GRPO's constant normaliser per sample (typically the max completion length)."""

    is_correction: Literal["none", "truncate", "mask"] = "truncate"
    """Importance-sampling correction of the trainer/inference mismatch, per sequence, applied once
    as a detached weight: rho = exp(mean over the sequence's loss tokens of (logp_old -
    logp_inference)) = geometric mean of pi_old/pi_inference. truncate (TIS): weight min(rho,
    is_max); mask (MIS): weight 0 for sequences with rho outside [is_min, is_max], 1 otherwise;
    none: weight 1 (no correction). It is not part of the clipped policy ratio. The default,
    truncate, is what corrects rollouts generated by an older policy (async_level > 0): with one
    optimizer step per batch the policy ratio itself is 1."""

    is_min: float = Field(default=0.5, ge=0)
    """Lower bound of the sequence IS ratio (mask)."""

    is_max: float = Field(default=2.0, gt=0)
    """Upper bound of the sequence IS ratio: the truncation cap (truncate) and the mask's upper
    bound (mask)."""

    entropy_coef: float = Field(default=0.0, ge=0)
    """Entropy bonus: the loss subtracts this times the mean entropy of the policy's next-token
    distribution over the step's loss tokens (whatever the loss type), so that the policy does not
    sharpen onto a few tokens faster than the reward asks for (the toy demo's collapse: entropy 6 ->
    0.1 in 6 steps, every answer cut off). 0: no bonus (the entropy is only reported). Above 0 the
    backward pass of the output projection holds one more [chunk, vocab] tensor."""

    @property
    def clip_bounds(self) -> tuple[float, float]:
        """(1 - eps_low, 1 + eps_high) with unset eps replaced by the loss type's default."""
        low, high = self.resolved_eps
        return 1.0 - low, 1.0 + high

    @property
    def resolved_eps(self) -> tuple[float, float]:
        """(eps_low, eps_high), an unset one replaced by the loss type's default."""
        low_default, high_default = LOSS_EPS_DEFAULTS[self.type]
        return (
            low_default if self.eps_low is None else self.eps_low,
            high_default if self.eps_high is None else self.eps_high,
        )

    @model_validator(mode="after")
    def _warn_eps_sized_for_the_other_loss(self) -> LossConfig:
        sequence_level = self.type == "gspo"
        for name in ("eps_low", "eps_high"):
            value = getattr(self, name)
            if value is None:
                continue
            if sequence_level and value > SEQUENCE_EPS_LIMIT:
                logger.warning(
                    f"loss.{name}={value} with loss.type=gspo looks sized for a token-level ratio: "
                    f"GSPO's sequence ratio (a geometric mean) rarely leaves 1 +- {value}, so it is "
                    f"effectively unclipped (GSPO default: {LOSS_EPS_DEFAULTS['gspo']}; unset it to get it)"
                )
            elif not sequence_level and value < SEQUENCE_EPS_LIMIT:
                logger.warning(
                    f"loss.{name}={value} with loss.type={self.type} looks sized for GSPO's sequence "
                    f"ratio: a token-level ratio would be clipped almost always (token-level default: "
                    f"{LOSS_EPS_DEFAULTS[self.type]}; unset it to get it)"
                )
        return self


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

    background: bool = True
    """Write each weights/step_N on a background thread while the next step trains. The step's
    critical path still pays the gather of the full state dict (a collective under FSDP) and its
    copy into host buffers allocated once and reused (pinned with CUDA; plain host memory on a
    CPU), plus any wait for the previous write (never two in flight). Conversion to the published
    dtypes, shards, manifest, fsyncs, rename, STABLE and pruning run on the writer thread; a
    failed write is raised at the next publish or at the end of training. False: the whole write
    runs in the step, as before. Republishing a weight dir on --resume is always synchronous."""


class CheckpointConfig(StrictModel):
    """Full checkpoints for resume (model, optimizer, scheduler, progress)."""

    interval: int | None = Field(default=None, ge=1)
    """Write a checkpoint every this many steps (None: never)."""

    keep: int | None = Field(default=2, ge=1)
    """Checkpoints to keep (newest first); None keeps all."""


class TrainerConfig(BaseConfig):
    """The RL trainer: reads rollouts/step_N, takes one optimizer step, publishes weights/step_N+1."""

    process: ClassVar[str] = "trainer"

    output_dir: OutputDir = Path("outputs")
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

    monitor: MonitorConfig = MonitorConfig()
    """Per-step metrics to Weights & Biases and TensorBoard besides metrics.jsonl (both off by default)."""

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
