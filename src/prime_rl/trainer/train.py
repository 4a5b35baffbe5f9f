"""The trainer loop: step s reads ``rollouts/step_s``, takes one optimizer step, publishes
``weights/step_{s+1}`` and, every ``ckpt.interval`` steps, a full checkpoint."""

from __future__ import annotations

import math
import resource
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from loguru import logger

from prime_rl.logging import log_tagged, setup_logging
from prime_rl.monitor import record_metrics
from prime_rl.paths import STABLE, RunPaths, is_stable, rollout_path
from prime_rl.trainer import ckpt
from prime_rl.trainer.config import SchedulerConfig, TrainerConfig
from prime_rl.trainer.data import MicroBatch, micro_batches
from prime_rl.trainer.forward import micro_batch_loss
from prime_rl.trainer.loss import LossStats, normalizer_for
from prime_rl.trainer.model import (
    World,
    all_reduce_sum,
    load_model,
    resolve_attention,
    setup_world,
    teardown_world,
)
from prime_rl.trainer.publish_async import PublishTiming, StepPublisher
from prime_rl.trainer.weights import WeightPublisher, full_state_dict
from prime_rl.transport.rollouts import read_rollout_batch, wait_for_rollouts
from prime_rl.transport.weights import WeightDirError, verify_weight_dir


def lr_factor(cfg: SchedulerConfig, max_steps: int):
    """Multiplier of the peak lr at each optimizer step (warmup, then constant/linear/cosine)."""

    def factor(step: int) -> float:
        if cfg.warmup_steps and step < cfg.warmup_steps:
            return (step + 1) / cfg.warmup_steps
        if cfg.type == "constant":
            return 1.0
        span = max(max_steps - cfg.warmup_steps, 1)
        progress = min(max(step - cfg.warmup_steps, 0) / span, 1.0)
        decay = 1.0 - progress if cfg.type == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
        return cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * decay

    return factor


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: SchedulerConfig, max_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """The lr schedule as a stateful scheduler: after ``n`` optimizer steps (and ``n`` calls to
    ``step()``) the lr is ``optim.lr * lr_factor(n)``. Its state is saved in every checkpoint
    and restored on resume (:func:`prime_rl.trainer.ckpt.load_checkpoint`)."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(cfg, max_steps))


def _dummy_micro_batch() -> MicroBatch:
    """A one-token micro-batch with no loss tokens: keeps FSDP collectives in step across ranks."""
    one = torch.zeros(1, dtype=torch.int64)
    return MicroBatch(
        one, one.clone(), torch.zeros(1, dtype=torch.bool), torch.zeros(1), torch.zeros(1), one.clone(), 1
    )


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


@dataclass
class StepResult:
    loss: float
    stats: LossStats
    grad_norm: float
    tokens: int
    prep_s: float = 0.0
    """Before the first forward pass: micro-batching and the token counts summed over ranks (which
    waits for the slowest rank), this rank's wall time."""
    fwd_bwd_s: float = 0.0
    """Forward and backward passes over the micro-batches (this rank)."""
    optim_s: float = 0.0
    """Gradient clipping and the optimizer step (this rank; on a GPU what the host waited for: the
    optimizer's kernels may still run after it, no extra synchronisation is added)."""


def _sequences_with_loss(mbs: list[MicroBatch]) -> int:
    return sum(int(torch.unique(mb.sample_ids[mb.loss_mask]).numel()) for mb in mbs)


def _max_over_ranks(value: int, world: World) -> int:
    if not world.distributed:
        return value
    import torch.distributed as dist

    t = torch.tensor([value], device=world.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def train_step(model, optimizer, batch, cfg: TrainerConfig, world: World) -> StepResult:
    """Forward/backward over the rank's micro-batches, grad clip, optimizer step."""
    entered = time.monotonic()
    mbs = micro_batches(batch, cfg.data.micro_batch_tokens)
    local = torch.tensor([batch.num_loss_tokens, _sequences_with_loss(mbs)], dtype=torch.float64)
    global_tokens, global_seqs = (float(x) for x in all_reduce_sum(local, world))
    normalizer = normalizer_for(cfg.loss, global_tokens, global_seqs)
    # every rank must run as many forward/backward passes as the busiest one (FSDP collectives)
    mbs += [_dummy_micro_batch() for _ in range(_max_over_ranks(len(mbs), world) - len(mbs))]

    attention = resolve_attention(cfg.model, world.device)
    model.train()
    optimizer.zero_grad(set_to_none=True)
    started = time.monotonic()
    total_loss = 0.0
    stats = LossStats()
    for mb in mbs:
        loss, mb_stats = micro_batch_loss(
            model,
            mb,
            batch.temperature,
            attention,
            cfg.data.micro_batch_tokens,
            cfg.loss,
            normalizer,
            world.device,
            entropy_normalizer=max(global_tokens, 1.0),
        )
        # FSDP averages gradients over ranks; the objective is their sum (each rank's loss is
        # already divided by the global normaliser), so scale by the world size.
        (loss * world.world_size).backward()
        total_loss += float(loss.detach())
        stats.add(mb_stats)
    optim_start = time.monotonic()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.max_grad_norm)
    if hasattr(grad_norm, "full_tensor"):
        grad_norm = grad_norm.full_tensor()
    optimizer.step()
    optim_end = time.monotonic()
    reduced = all_reduce_sum(
        torch.cat([torch.tensor([total_loss], dtype=torch.float64), stats.as_tensor()]), world
    )
    tokens = int(all_reduce_sum(torch.tensor([batch.num_tokens], dtype=torch.float64), world)[0])
    return StepResult(
        float(reduced[0]),
        LossStats.from_tensor(reduced[1:]),
        float(grad_norm),
        tokens,
        started - entered,
        optim_start - started,
        optim_end - optim_start,
    )


def train(cfg: TrainerConfig) -> None:
    world = setup_world()
    paths = RunPaths(cfg.output_dir)
    setup_logging(paths.trainer_log(world.rank), level=cfg.log_level, console=world.is_main)
    if world.is_main:
        cfg.write_resolved(paths.config_file("trainer"))
    logger.info(f"trainer rank {world.rank}/{world.world_size} on {world.device}: {cfg.model.name}")
    torch.manual_seed(cfg.seed)
    if cfg.cpu_threads is not None:
        torch.set_num_threads(cfg.cpu_threads)
    try:
        _train(cfg, world, paths)
    finally:
        teardown_world()


def resume_weights_unusable(weight_dir: Path) -> str | None:
    """Why ``weights/step_N`` cannot serve a resume at step N, or None when it can (rank 0 only).

    Unusable: missing, without ``STABLE`` (retention deleted it), or failing
    :func:`verify_weight_dir`: a shard truncated by a crash, a flipped byte, or no ``manifest.json``
    (published by a version before manifests; the servers refuse those too, so republishing also
    upgrades it). A dir that fails verification is logged in one warning line naming the file and
    loses its ``STABLE`` at once, so an orchestrator that has not loaded it yet waits for the
    republished dir instead.
    """
    if not is_stable(weight_dir):
        return f"{weight_dir} is missing or incomplete (no {STABLE})"
    try:
        verify_weight_dir(weight_dir)
    except WeightDirError as e:
        (weight_dir / STABLE).unlink(missing_ok=True)
        reason = f"{weight_dir} fails verification: {e.reason}"
        logger.warning(f"{reason}: unmarked; republishing it from the checkpoint")
        return reason
    return None


def _train(cfg: TrainerConfig, world: World, paths: RunPaths) -> None:
    start_step, republish = 0, None
    if cfg.resume.enabled:
        # checked before the model loads: the orchestrator may already be waiting for this dir
        start_step = ckpt.resolve_resume_step(paths.checkpoints_root, cfg.resume.step)
        republish = resume_weights_unusable(paths.weights_dir(start_step)) if world.is_main else None
    model = load_model(cfg.model, world)
    optimizer = torch.optim.AdamW(
        model.parameters(),
        lr=cfg.optim.lr,
        betas=cfg.optim.betas,
        eps=cfg.optim.eps,
        weight_decay=cfg.optim.weight_decay,
    )
    scheduler = build_scheduler(optimizer, cfg.scheduler, cfg.max_steps)
    publisher = (
        WeightPublisher(model, cfg.model.name, paths.weights_root, cfg.weights.max_shard_bytes)
        if world.is_main
        else None
    )

    total_tokens = 0
    if cfg.resume.enabled:
        progress = ckpt.load_checkpoint(
            paths.checkpoints_root, start_step, model, optimizer, world, scheduler=scheduler
        )
        total_tokens = int(progress.get("total_tokens", 0))
        logger.info(f"resumed from checkpoint step {start_step} ({paths.checkpoint_dir(start_step)})")
        # the orchestrator resumes on weights/step_N, which retention may have deleted or a crash
        # torn: publish it again from the checkpoint's model state
        state = full_state_dict(model)
        if publisher is not None and republish is not None:
            logger.info(f"{republish}: republishing it from checkpoint step_{start_step}")
            publisher.publish(state, start_step)
        del state

    publishing = StepPublisher(publisher, model, cfg.weights_keep, cfg.weights.background)
    if world.is_main:  # where this run starts (rank 0's, as its step.done): the analyzer splits a
        # log appended over a crash and a resume here
        log_tagged("train", "run.start", step=start_step, resume=cfg.resume.enabled)
    try:
        _loop(cfg, world, paths, model, optimizer, scheduler, publishing, start_step, total_tokens)
        publishing.finish()  # weights/step_{max_steps} is complete before the trainer exits
    finally:
        publishing.close()  # an exception leaving the loop: the write in flight still ends


def _loop(
    cfg: TrainerConfig,
    world: World,
    paths: RunPaths,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    publishing: StepPublisher,
    start_step: int,
    total_tokens: int,
) -> None:
    """Steps ``start_step .. max_steps - 1``: read the batch, train, publish, log, checkpoint."""
    vocab_size = int(model.config.vocab_size)
    for step in range(start_step, cfg.max_steps):
        path = rollout_path(paths.rollouts_dir(step), world.rank)
        if world.is_main:  # an open wait in the log: the analyzer tells a trainer waiting from one computing
            log_tagged("train", "wait.start", step=step)
        # a failed background write is raised while waiting: with async_level 0 this very batch
        # waits for that write, and would never come
        waited = wait_for_rollouts(
            path, cfg.data.wait_timeout_s, cfg.data.poll_interval_s, check=publishing.raise_if_failed
        )
        if world.is_main:
            log_tagged("train", "wait.done", step=step, wait_ms=waited * 1000.0)
        if waited > 1.0:
            logger.info(f"step {step}: waited {waited:.1f}s for {path}")
        read_start = time.monotonic()
        batch = read_rollout_batch(path, vocab_size=vocab_size)
        t0 = time.monotonic()
        lr = scheduler.get_last_lr()[0]
        result = train_step(model, optimizer, batch, cfg, world)
        scheduler.step()
        train_s = time.monotonic() - t0
        # every rank, at the compute's end (step.done, rank 0's, comes after publishing): the
        # trace's trainer rows, one per rank; durations only, measured above, no extra syncs
        log_tagged(
            "train",
            "compute.done",
            step=step,
            rank=world.rank,
            wait_ms=waited * 1000.0,
            read_ms=(t0 - read_start) * 1000.0,
            train_ms=train_s * 1000.0,
            prep_ms=result.prep_s * 1000.0,
            fwd_bwd_ms=result.fwd_bwd_s * 1000.0,
            optim_ms=result.optim_s * 1000.0,
        )

        # background: the gather and the copy to host here, the write beside the next step;
        # a checkpoint needs no weight dir (a resume republishes weights/step_N when it is missing)
        timing = publishing.publish(model, step + 1)
        total_tokens += result.tokens
        if world.is_main:
            log_tagged(
                "train",
                "step.done",
                step=step,
                wait_ms=waited * 1000.0,
                train_ms=train_s * 1000.0,
                **_publish_fields(timing),
            )
            summary = result.stats.summary()
            metrics = {
                "process": "trainer",
                "step": step,
                "loss": result.loss,
                **summary,
                "grad_norm": result.grad_norm,
                "lr": lr,
                "tokens": result.tokens,
                "tokens_per_s": result.tokens / max(train_s, 1e-9),
                "train_s": train_s,
                "wait_s": waited,
                **_publish_fields(timing),
                "peak_mem_mb": _peak_memory_mb(world.device),
                "total_tokens": total_tokens,
            }
            logger.info(
                f"step {step} | loss {result.loss:.4f} | entropy {summary['entropy']:.3f} | mismatch_kl "
                f"{summary['mismatch_kl']:.2e} | grad_norm {result.grad_norm:.3f} | lr {lr:.2e} | "
                f"{metrics['tokens_per_s']:.0f} tok/s | peak {metrics['peak_mem_mb']:.0f} MiB | waited {waited:.2f}s"
            )
            record_metrics(cfg, metrics)  # metrics.jsonl, and W&B/TensorBoard when enabled

        # after the step's metrics row: a kill once the checkpoint is marked would resume past the
        # step with its row never written (a resume drops the rows of the steps it redoes)
        if cfg.ckpt.interval and (step + 1) % cfg.ckpt.interval == 0:
            ckpt.save_checkpoint(
                paths.checkpoints_root,
                step + 1,
                model,
                optimizer,
                {"total_tokens": total_tokens},
                world,
                scheduler=scheduler,
            )
            ckpt.prune_checkpoints(paths.checkpoints_root, cfg.ckpt.keep, world)


def _publish_fields(timing: PublishTiming | None) -> dict[str, float | None]:
    """``write_ms`` (the publish's time on the step's critical path) and, with background
    publishing, ``write_wait_ms`` (of it, the wait for the previous write) for step.done and metrics."""
    if timing is None:
        return {"write_ms": None}
    out: dict[str, float | None] = {"write_ms": timing.write_ms}
    if timing.write_wait_ms is not None:
        out["write_wait_ms"] = timing.write_wait_ms
    return out
