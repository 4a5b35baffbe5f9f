"""Full trainer checkpoints for resume: ``checkpoints/step_N/trainer/``.

``step_N`` holds the state after N optimizer steps (the state that published ``weights/step_N``),
so a resumed run continues at train step N. Model parameters and optimizer tensors are saved
sharded with ``torch.distributed.checkpoint`` in its safetensors format (every rank writes its
own shard; loading reshards, so a checkpoint loads on a different number of ranks). Scalars
(step, scheduler, token counts) go to ``progress.json``. Nothing is pickled. The directory is
written under a temporary name, renamed, and marked ``STABLE``; a checkpoint without ``STABLE``
(a torn one) is never picked up.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from prime_rl.logging import log_tagged
from prime_rl.paths import (
    STABLE,
    atomic_write_json,
    complete_checkpoint_steps,
    fsync_dir,
    mark_stable,
)
from prime_rl.paths import resolve_resume_step as paths_resolve_resume_step
from prime_rl.trainer.model import World

COMPONENT = "trainer"


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
) -> Path:
    """Collective: every rank writes its shard; rank 0 writes progress, renames and marks STABLE."""
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
        atomic_write_json(tmp / "progress.json", {**progress, "step": step, "world_size": world.world_size})
        fsync_dir(tmp)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        fsync_dir(step_dir)
        mark_stable(final)
        log_tagged("ckpt", "save.done", step=step, save_ms=(time.monotonic() - start) * 1000.0)
    _barrier(world)
    return final


def resolve_resume_step(root: Path, step: int | None) -> int:
    """The trainer checkpoint step to resume from: ``step`` (checked complete) or the latest one."""
    return paths_resolve_resume_step(root, step, COMPONENT)


def load_checkpoint(
    root: Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, world: World
) -> dict[str, Any]:
    """Collective: load model and optimizer state in place (resharding as needed); return progress."""
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
    return json.loads((path / "progress.json").read_text())


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
