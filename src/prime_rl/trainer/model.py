"""Process group, model loading and FSDP2 sharding for the trainer.

One process on a CPU or GPU, or ``torchrun --nproc-per-node K`` (rendezvous is torchrun's, from
its environment variables): gloo on CPU, NCCL on GPU. With several ranks every decoder layer and
the root module are wrapped with ``torch.distributed.fsdp.fully_shard``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from prime_rl.trainer.config import ModelConfig


@dataclass(frozen=True)
class World:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def setup_world() -> World:
    """Read torchrun's environment and start the process group when there are several ranks."""
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    return World(rank, world_size, local_rank, device)


def teardown_world() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def resolve_dtype(cfg: ModelConfig, device: torch.device) -> torch.dtype:
    if cfg.dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[cfg.dtype]


def load_model(cfg: ModelConfig, world: World) -> torch.nn.Module:
    """Load the HF causal LM (directory or hub name) and shard it when distributed."""
    from transformers import AutoModelForCausalLM

    dtype = resolve_dtype(cfg, world.device)
    model = AutoModelForCausalLM.from_pretrained(cfg.name, dtype=dtype, attn_implementation="sdpa")
    model.to(world.device)
    model.config.use_cache = False
    if world.distributed:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(world.device.type, (world.world_size,))
        mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        layers = getattr(getattr(model, "model", model), "layers", [])
        for layer in layers:
            fully_shard(layer, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
    return model


def block_causal_mask(sample_ids: torch.Tensor) -> torch.Tensor:
    """[1, 1, T, T] bool mask: causal within each packed sample, nothing across samples."""
    t = sample_ids.numel()
    causal = torch.ones(t, t, dtype=torch.bool, device=sample_ids.device).tril()
    same = sample_ids[:, None] == sample_ids[None, :]
    return (causal & same)[None, None]


def all_reduce_sum(t: torch.Tensor, world: World) -> torch.Tensor:
    """Sum a tensor over ranks (identity on one rank)."""
    if world.distributed:
        t = t.to(world.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.cpu()
