"""Publishing ``weights/step_N``: HF-format sharded safetensors the inference servers load.

The full state dict is gathered from the FSDP shards onto rank 0 (CPU), split into shards of at
most ``max_shard_bytes`` with a ``model.safetensors.index.json``, written with the config and
tokenizer into a temporary directory (each shard straight from the tensors' memory, hashed as it
is written: :func:`write_shard`), described by ``manifest.json`` (each file's size and
checksum), fsynced, renamed into place, and only then marked ``STABLE``. Tied weights (``lm_head`` sharing the embedding) are written once, as HF does.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
import time
from pathlib import Path

import torch
import xxhash

from prime_rl import failpoints
from prime_rl.logging import log_tagged
from prime_rl.paths import STABLE, fsync_dir, is_stable, mark_stable, step_dirs
from prime_rl.transport.weights import (
    INDEX_FILE,
    manifest,
    resolve_model_dir,
    weight_files,
    write_file_manifest,
)


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Gather the full (unsharded) state dict on CPU; collective under FSDP (every rank calls it).

    Rank 0 gets the tensors; other ranks of a distributed run get an empty dict.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def tied_keys(model: torch.nn.Module) -> set[str]:
    """Names of parameters that are tied to another one (not written separately)."""
    config = getattr(model, "config", None)
    if not getattr(config, "tie_word_embeddings", False):
        return set()
    tied = getattr(model, "_tied_weights_keys", None) or {}
    return set(tied.keys() if isinstance(tied, dict) else tied)


def plan_shards(state_dict: dict[str, torch.Tensor], max_shard_bytes: int) -> list[list[str]]:
    """Group tensor names, in order, into shards of at most ``max_shard_bytes`` (a bigger tensor is alone)."""
    shards: list[list[str]] = [[]]
    size = 0
    for name, tensor in state_dict.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


_SAFETENSORS_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}


def write_shard(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> tuple[int, str]:
    """Write one safetensors file from contiguous host tensors, hashing it as it goes, and fsync it;
    returns (size, xxh3_128 checksum) for the manifest.

    The format: 8 bytes of header length (little-endian), the JSON header (``__metadata__``, then
    each tensor's dtype, shape and ``data_offsets``, in the order given, contiguous from 0) padded
    with spaces to a multiple of 8, then each tensor's bytes, written from the tensor's own memory
    (no serialised copy of the shard, and the checksum needs no read back)."""
    header: dict[str, object] = {"__metadata__": metadata}
    offset = 0
    for name, t in tensors.items():
        if t.dtype not in _SAFETENSORS_DTYPES:
            raise ValueError(
                f"{path.name}: tensor {name!r} has dtype {t.dtype}, which this writer does not write"
            )
        nbytes = t.numel() * t.element_size()
        header[name] = {
            "dtype": _SAFETENSORS_DTYPES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    digest = xxhash.xxh3_128()
    with open(path, "wb") as f:
        for part in (struct.pack("<Q", len(raw)), raw):
            f.write(part)
            digest.update(part)
        for t in tensors.values():
            data = memoryview(t.reshape(-1).view(torch.uint8).numpy())
            f.write(data)
            digest.update(data)
        f.flush()
        os.fsync(f.fileno())
    return 8 + len(raw) + offset, digest.hexdigest()


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


class WeightPublisher:
    """Writes complete weight dirs for one model; created on rank 0 only."""

    def __init__(self, model: torch.nn.Module, model_name: str, weights_root: Path, max_shard_bytes: int):
        self.root = Path(weights_root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_shard_bytes = max_shard_bytes
        self.skip = tied_keys(model)
        self.static_files = self._static_files(model, model_name)
        self.dtypes = self._base_dtypes(model_name)
        for stale in self.root.glob(".step_*.tmp*"):  # left by a crash mid-write: never complete
            shutil.rmtree(stale, ignore_errors=True)

    @staticmethod
    def _static_files(model: torch.nn.Module, model_name: str) -> dict[str, bytes]:
        """config.json, generation config and tokenizer files, rendered once."""
        from transformers import AutoTokenizer

        with tempfile.TemporaryDirectory() as tmp:
            model.config.save_pretrained(tmp)
            gen = getattr(model, "generation_config", None)
            if gen is not None:
                gen.save_pretrained(tmp)
            AutoTokenizer.from_pretrained(model_name).save_pretrained(tmp)
            return {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file()}

    @staticmethod
    def _base_dtypes(model_name: str) -> dict[str, torch.dtype]:
        """dtype of every tensor of the base checkpoint: published weights keep them (a bf16 trainer on an
        fp32 checkpoint still publishes fp32), so the servers' name/shape/dtype check always passes."""
        floats = {name: dtype for dtype, name in _SAFETENSORS_DTYPES.items() if dtype.is_floating_point}
        info = manifest(weight_files(resolve_model_dir(model_name)))
        return {k: floats[v.dtype] for k, v in info.items() if v.dtype in floats}

    def publish(
        self, state_dict: dict[str, torch.Tensor], step: int, *, background: bool = False
    ) -> tuple[Path, float, int]:
        """Write ``weights/step_{step}``; returns (path, write_ms, bytes of tensors).

        ``background`` only marks the ``[ckpt] write.done`` line (``background=true``: this ran on
        the writer thread of :mod:`prime_rl.trainer.publish_async`, beside the next step)."""
        start = time.monotonic()
        tensors = {
            k: v.to(self.dtypes.get(k, v.dtype)).contiguous()
            for k, v in state_dict.items()
            if k not in self.skip
        }
        dest = self.root / f"step_{step}"
        tmp = Path(tempfile.mkdtemp(prefix=f".step_{step}.tmp", dir=self.root))
        try:
            shards = plan_shards(tensors, self.max_shard_bytes)
            weight_map: dict[str, str] = {}
            written: dict[str, tuple[int, str]] = {}
            total = 0
            for i, names in enumerate(shards, start=1):
                fname = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
                written[fname] = write_shard(tmp / fname, {n: tensors[n] for n in names}, {"format": "pt"})
                if i == 1:
                    failpoints.hit("trainer.publish.shard_written", step)
                for n in names:
                    weight_map[n] = fname
                    total += tensors[n].numel() * tensors[n].element_size()
            index = {"metadata": {"total_size": total, "step": step}, "weight_map": weight_map}
            (tmp / INDEX_FILE).write_text(json.dumps(index, indent=2))
            for name, data in self.static_files.items():
                (tmp / name).write_bytes(data)
            # every file is final: sizes and checksums (the shards' from their writing), before fsync and rename
            write_file_manifest(tmp, known=written)
            for path in tmp.iterdir():
                if not path.name.endswith(".safetensors"):
                    _fsync_file(path)
            fsync_dir(tmp)
            if dest.exists():  # a resumed run re-publishing a step: swap the old one out first
                old = self.root / f".step_{step}.tmp-old"
                shutil.rmtree(old, ignore_errors=True)
                os.replace(dest, old)
                shutil.rmtree(old, ignore_errors=True)
            os.replace(tmp, dest)
            failpoints.hit("trainer.publish.renamed", step)
            fsync_dir(self.root)
            mark_stable(dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        write_ms = (time.monotonic() - start) * 1000.0
        log_tagged(
            "ckpt",
            "write.done",
            step=step,
            write_ms=write_ms,
            bytes=total,
            shards=len(shards),
            background=background,
        )
        return dest, write_ms, total

    def prune(self, keep: int, newest: int) -> list[Path]:
        """Delete complete weight dirs older than the ``keep`` newest; never ``step_{newest}``."""
        steps = [s for s, p in step_dirs(self.root).items() if is_stable(p)]
        doomed = [s for s in steps[:-keep] if s != newest] if keep > 0 else []
        removed = []
        for s in doomed:
            path = self.root / f"step_{s}"
            (path / STABLE).unlink(missing_ok=True)  # unmark first: a half-deleted dir is never "complete"
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        return removed
