"""Full trainer checkpoints for resume: ``checkpoints/step_N/trainer/``.

``step_N`` holds the state after N optimizer steps (the state that published ``weights/step_N``),
so a resumed run continues at train step N. Model parameters and optimizer tensors are saved
sharded with ``torch.distributed.checkpoint`` in its safetensors format (every rank writes its
own shard; loading reshards, so a checkpoint loads on a different number of ranks). Scalars go to
``progress.json``: ``step``, ``world_size``, token counts and, under ``"scheduler"``, the lr
scheduler's ``state_dict()`` without its lr lambdas (``last_epoch``, ``_step_count``, ``base_lrs``,
``_last_lr``, ...; the lambdas are rebuilt from the config). Nothing is pickled. The directory is
written under a temporary name, renamed, and marked ``STABLE``; a checkpoint without ``STABLE``
(a torn one) is never picked up. Overwriting a step removes the old directory's ``STABLE`` (and
syncs that) before deleting anything in it.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from loguru import logger
from torch.optim.lr_scheduler import LRScheduler

from prime_rl import failpoints
from prime_rl.logging import log_tagged
from prime_rl.paths import (
    STABLE,
    CheckpointError,
    atomic_write_json,
    complete_checkpoint_steps,
    fsync_dir,
    mark_stable,
)
from prime_rl.paths import resolve_resume_step as paths_resolve_resume_step
from prime_rl.trainer.model import World

COMPONENT = "trainer"
SCHEDULER_KEY = "scheduler"


def _barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def _tensor_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    model_sd = get_model_state_dict(model)
    optim_sd = get_optimizer_state_dict(
        model, optimizer, options=StateDictOptions(flatten_optimizer_state_dict=True)
    )
    out = {f"model.{k}": v for k, v in model_sd.items()}
    out.update({f"optim.{k}": v for k, v in optim_sd.items() if isinstance(v, torch.Tensor)})
    return out


def scheduler_state(scheduler: LRScheduler) -> dict[str, Any]:
    """``scheduler.state_dict()`` as plain JSON: the lr lambdas are left out (they are functions,
    rebuilt from the config); a tensor lr becomes a float."""
    out: dict[str, Any] = {}
    for key, value in scheduler.state_dict().items():
        if key == "lr_lambdas":
            continue
        if isinstance(value, (list, tuple)):
            value = [float(v) if isinstance(v, torch.Tensor) else v for v in value]
        elif isinstance(value, torch.Tensor):
            value = float(value)
        out[key] = value
    json.dumps(out)  # fail at save time, not at resume, if something is not JSON
    return out


def _derived_scheduler_state(scheduler: LRScheduler, step: int) -> dict[str, Any]:
    """The state a LambdaLR-style scheduler has after ``step`` optimizer steps from the start."""
    lambdas = getattr(scheduler, "lr_lambdas", None)
    if lambdas is None:
        raise CheckpointError(
            f"cannot derive the state of a {type(scheduler).__name__} from the step; "
            "the checkpoint has no scheduler state"
        )
    base_lrs = [float(b) for b in scheduler.base_lrs]
    return {
        "base_lrs": base_lrs,
        "last_epoch": step,
        "_step_count": step + 1,
        "_is_initial": False,
        "_get_lr_called_within_step": False,
        "_last_lr": [b * fn(step) for b, fn in zip(base_lrs, lambdas, strict=True)],
    }


def restore_scheduler(
    scheduler: LRScheduler, state: dict[str, Any] | None, step: int, *, source: Path | None = None
) -> None:
    """Load ``state`` (from :func:`scheduler_state`) into ``scheduler`` and set the optimizer's lr
    to the scheduler's current value. ``state=None`` (a checkpoint written before the scheduler
    was saved) derives the state from ``step`` instead, with a warning."""
    if state is None:
        logger.warning(
            f"checkpoint {source or f'step_{step}'} has no scheduler state (older format): "
            f"deriving it from the step ({step})"
        )
        state = _derived_scheduler_state(scheduler, step)
    elif state.get("last_epoch") != step:
        logger.warning(
            f"checkpoint step {step} holds scheduler state at last_epoch={state.get('last_epoch')}; "
            "using the saved state"
        )
    full = dict(state)
    if hasattr(scheduler, "lr_lambdas"):
        full["lr_lambdas"] = [None] * len(scheduler.lr_lambdas)
    scheduler.load_state_dict(full)
    lrs = scheduler.get_last_lr()
    if len(lrs) != len(scheduler.optimizer.param_groups):
        raise CheckpointError(
            f"scheduler state has {len(lrs)} learning rates for {len(scheduler.optimizer.param_groups)} "
            "optimizer param groups"
        )
    for group, lr in zip(scheduler.optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr


def complete_steps(root: Path) -> list[int]:
    """Steps under ``checkpoints/`` whose trainer part carries ``STABLE``, ascending."""
    return complete_checkpoint_steps(root, COMPONENT)


def save_checkpoint(
    root: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    progress: dict[str, Any],
    world: World,
    scheduler: LRScheduler | None = None,
) -> Path:
    """Collective: every rank writes its shard; rank 0 writes progress (with the scheduler's state
    under ``"scheduler"`` when one is given), renames and marks STABLE."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    start = time.monotonic()
    step_dir = Path(root) / f"step_{step}"
    final = step_dir / COMPONENT
    tmp = step_dir / f".{COMPONENT}.tmp"
    if world.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    _barrier(world)
    dcp.save(
        _tensor_state(model, optimizer),
        storage_writer=HuggingFaceStorageWriter(str(tmp), save_distributed=True),
    )
    _barrier(world)
    if world.is_main:
        scalars = {**progress, "step": step, "world_size": world.world_size}
        if scheduler is not None:
            scalars[SCHEDULER_KEY] = scheduler_state(scheduler)
        atomic_write_json(tmp / "progress.json", scalars)
        fsync_dir(tmp)
        if final.exists():
            # overwriting: un-mark first, so no reader ever sees a STABLE dir with files missing
            (final / STABLE).unlink(missing_ok=True)
            fsync_dir(final)
            shutil.rmtree(final)
        tmp.rename(final)
        fsync_dir(step_dir)
        failpoints.hit("trainer.ckpt.saved", step)
        mark_stable(final)
        failpoints.hit("trainer.ckpt.stable", step)
        log_tagged("ckpt", "save.done", step=step, save_ms=(time.monotonic() - start) * 1000.0)
    _barrier(world)
    return final


def resolve_resume_step(root: Path, step: int | None) -> int:
    """The trainer checkpoint step to resume from: ``step`` (checked complete) or the latest one."""
    return paths_resolve_resume_step(root, step, COMPONENT)


def load_checkpoint(
    root: Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    world: World,
    scheduler: LRScheduler | None = None,
) -> dict[str, Any]:
    """Collective: load model and optimizer state in place (resharding as needed) and, when given,
    the scheduler's (which also sets the optimizer's lr); return progress."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    path = Path(root) / f"step_{step}" / COMPONENT
    state = _tensor_state(model, optimizer)  # templates with this run's sharding
    dcp.load(state, storage_reader=HuggingFaceStorageReader(str(path)))
    set_model_state_dict(model, {k[len("model.") :]: v for k, v in state.items() if k.startswith("model.")})
    flat_opts = StateDictOptions(flatten_optimizer_state_dict=True)
    optim_sd = get_optimizer_state_dict(model, optimizer, options=flat_opts)
    for k, v in state.items():
        if k.startswith("optim."):
            optim_sd[k[len("optim.") :]] = v
    set_optimizer_state_dict(model, optimizer, optim_sd, options=flat_opts)
    progress = json.loads((path / "progress.json").read_text())
    if scheduler is not None:
        restore_scheduler(scheduler, progress.get(SCHEDULER_KEY), step, source=path)
    return progress


def prune_checkpoints(root: Path, keep: int | None, world: World) -> None:
    """Keep the ``keep`` newest complete checkpoints (rank 0 deletes; STABLE goes first)."""
    if keep is None or not world.is_main:
        return
    for s in complete_steps(root)[:-keep]:
        part = Path(root) / f"step_{s}" / COMPONENT
        (part / STABLE).unlink(missing_ok=True)
        shutil.rmtree(part, ignore_errors=True)
        parent = part.parent
        if parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
