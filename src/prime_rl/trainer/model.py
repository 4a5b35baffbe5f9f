"""Process group, model loading and FSDP2 sharding for the trainer, and packed attention.

One process on a CPU or GPU, or ``torchrun --nproc-per-node K`` (rendezvous is torchrun's, from
its environment variables): gloo on CPU, NCCL on GPU. With several ranks every decoder layer and
the root module are wrapped with ``torch.distributed.fsdp.fully_shard``, after the optional
activation checkpointing and ``torch.compile`` of each decoder layer (torchtitan's order).

A micro-batch packs several samples into one row; each token attends causally within its own
sample only. ``sdpa`` runs PyTorch's scaled_dot_product_attention once per sample of the row
(:func:`packed_sdpa_attention`), ``flex`` runs FlexAttention once over the row with a
block-sparse ``BlockMask`` (:func:`document_block_mask`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from prime_rl.trainer.config import ModelConfig
from prime_rl.trainer.logprobs import install_logprob_head

PACKED_SDPA = "prime_rl_packed_sdpa"
"""Name of :func:`packed_sdpa_attention` among transformers' attention implementations."""
_HF_ATTENTION = {"sdpa": PACKED_SDPA, "flex": "flex_attention"}
PAD_SAMPLE = -1
"""Sample id of the padding tokens at the end of a padded micro-batch (a sample of their own)."""


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


def resolve_attention(cfg: ModelConfig, device: torch.device) -> str:
    """``sdpa`` or ``flex`` (``auto``: flex on a GPU, sdpa on CPU). flex on CPU is refused: the
    trainer needs gradients, and FlexAttention has no backward pass on CPU."""
    if cfg.attention == "auto":
        return "flex" if device.type == "cuda" else "sdpa"
    if cfg.attention == "flex" and device.type != "cuda":
        raise ValueError(
            f"model.attention=flex needs a CUDA device, and this trainer runs on {device}: FlexAttention "
            "has no backward pass on CPU. Use model.attention=sdpa (or auto, which picks it on CPU)."
        )
    return cfg.attention


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's decoder layers (``model.model.layers`` in Hugging Face causal LMs)."""
    return list(getattr(getattr(model, "model", model), "layers", []))


def load_model(cfg: ModelConfig, world: World, shard: bool | None = None) -> torch.nn.Module:
    """Load the HF causal LM (directory or hub name), set up its layers (checkpointing, compile,
    the chunked logprob head) and shard it with FSDP2: when distributed, or as ``shard`` says (a
    started process group of one rank, for tests)."""
    from transformers import AutoModelForCausalLM

    register_packed_sdpa()
    dtype = resolve_dtype(cfg, world.device)
    attention = _HF_ATTENTION[resolve_attention(cfg, world.device)]
    model = AutoModelForCausalLM.from_pretrained(cfg.name, dtype=dtype, attn_implementation=attention)
    if attention == PACKED_SDPA:
        check_packed_sdpa(model.config)
    model.to(world.device)
    model.config.use_cache = False
    if cfg.activation_checkpointing:
        # non-reentrant: works with FSDP2 and with inputs that do not require grad
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if cfg.compile:
        for layer in decoder_layers(model):
            layer.compile()  # in place: the state dict's names stay those of the checkpoint
    install_logprob_head(model, cfg.logprob_chunk_tokens)
    if world.distributed if shard is None else shard:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(world.device.type, (world.world_size,))
        mp = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        for layer in decoder_layers(model):
            fully_shard(layer, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
    return model


def sample_lengths_of(sample_ids: torch.Tensor) -> torch.Tensor:
    """The token count of each sample of a packed row, in order (its tokens are contiguous), as an
    int64 tensor on the CPU: a tensor, so that a compiled layer sees one input whose size changes,
    not a tuple of ints it would be compiled again for at every new count of samples."""
    return torch.unique_consecutive(sample_ids.cpu(), return_counts=True)[1]


@torch.compiler.disable  # a loop over the row's samples: a compiled layer runs it eagerly
def packed_sdpa_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    sample_lengths: torch.Tensor | Sequence[int] | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention function for a packed row: causal attention within each sample,
    one ``scaled_dot_product_attention`` call per sample, so no [T, T] mask or score matrix exists
    and the cost grows with the sum of the samples' squared lengths, not with T^2.

    query [1, H, T, D], key and value [1, H_kv, T, D] (grouped-query heads are shared, as in the
    model's own attention); returns [1, T, H, D]. ``sample_lengths`` (:func:`sample_lengths_of`;
    the model's forward hands its keyword arguments down to here) must sum to T."""
    name = type(module).__name__
    if sample_lengths is None:
        raise RuntimeError(
            f"{name}: the packed sdpa attention got no sample_lengths: pass the row's sample lengths to "
            "the model's forward (sample_lengths=prime_rl.trainer.model.sample_lengths_of(sample_ids), as "
            "the trainer does), to a model whose forward hands its keyword arguments to its attention"
        )
    if sliding_window is not None or softcap is not None:
        raise NotImplementedError(
            f"{name}: the packed sdpa attention has no sliding-window or soft-capped attention"
        )
    if attention_mask is not None or query.shape[0] != 1:
        raise ValueError(
            f"{name}: the packed sdpa attention takes one packed row and no attention mask (got a batch of "
            f"{query.shape[0]}{' and a mask' if attention_mask is not None else ''}); the samples' lengths are its mask"
        )
    lengths = sample_lengths.tolist() if isinstance(sample_lengths, torch.Tensor) else list(sample_lengths)
    if sum(lengths) != query.shape[2]:
        raise ValueError(f"{name}: sample_lengths sum to {sum(lengths)}, the row has {query.shape[2]} tokens")
    gqa = query.shape[1] != key.shape[1]
    split = (t.split(lengths, 2) for t in (query, key, value))
    parts = [
        F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout, is_causal=True, scale=scaling, enable_gqa=gqa
        )
        for q, k, v in zip(*split, strict=True)
    ]
    return torch.cat([part.transpose(1, 2) for part in parts], 1), None


def register_packed_sdpa() -> None:
    """Make :data:`PACKED_SDPA` an attention implementation transformers can load a model with
    (with no mask function: transformers then makes no mask for it)."""
    from transformers import AttentionInterface

    AttentionInterface.register(PACKED_SDPA, packed_sdpa_attention)


def check_packed_sdpa(config) -> None:
    """Refuse, at load, a model whose attention the packed sdpa attention does not implement:
    sliding-window layers or soft-capped attention logits."""
    types = getattr(config, "layer_types", None)
    sliding = "sliding_attention" in types if types else getattr(config, "sliding_window", None) is not None
    softcap = getattr(config, "attn_logit_softcapping", None) is not None
    if sliding or softcap:
        what = "sliding-window attention layers" if sliding else "soft-capped attention logits"
        raise ValueError(
            f"model.attention=sdpa: {getattr(config, 'name_or_path', '') or config.model_type} has {what}, "
            "which the trainer's packed sdpa attention does not implement (use model.attention=flex on a GPU)"
        )


def document_block_mask(sample_ids: torch.Tensor):
    """FlexAttention ``BlockMask`` [1, 1, T, T], causal within each packed sample: only the 128 x
    128 blocks that hold an allowed pair are computed (compiled mask creation on a GPU, so the
    dense [T, T] mask never exists)."""
    from torch.nn.attention.flex_attention import create_block_mask

    def same_sample_causal(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (sample_ids[q_idx] == sample_ids[kv_idx])

    t = sample_ids.numel()
    return create_block_mask(
        same_sample_causal, None, None, t, t, device=sample_ids.device, _compile=sample_ids.is_cuda
    )


def packed_attention_kwargs(sample_ids: torch.Tensor, attention: str, device: torch.device) -> dict:
    """The model forward's keyword arguments that keep a packed row's samples apart (``sample_ids``
    on the CPU): the block mask for ``flex`` (on ``device``), the samples' lengths for ``sdpa``."""
    if attention == "flex":
        return {"attention_mask": document_block_mask(sample_ids.to(device))}
    return {"sample_lengths": sample_lengths_of(sample_ids)}


def padded_length(tokens: int, micro_batch_tokens: int) -> int:
    """Length a packed row is padded to for compiled attention: ``micro_batch_tokens`` (every
    packed micro-batch fits it), or for one sample longer than that the smallest power-of-two
    multiple of it that holds the sample, so that few shapes are ever compiled."""
    length = micro_batch_tokens
    while length < tokens:
        length *= 2
    return length


def all_reduce_sum(t: torch.Tensor, world: World) -> torch.Tensor:
    """Sum a tensor over ranks (identity on one rank)."""
    if world.distributed:
        t = t.to(world.device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.cpu()
