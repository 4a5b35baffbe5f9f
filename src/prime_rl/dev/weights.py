"""Write perturbed copies of a model's weights as complete weight dirs (tests, demo, benchmarks)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from prime_rl.paths import fsync_dir, mark_stable
from prime_rl.transport.weights import weight_files, write_file_manifest

CONFIG_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)


def perturbed_state_dict(model_dir: Path, scale: float, seed: int) -> dict:
    """The model's tensors plus Gaussian noise of std ``scale`` (deterministic by ``seed``)."""
    import torch
    from safetensors.torch import load_file

    gen = torch.Generator().manual_seed(seed)
    out = {}
    for path in weight_files(Path(model_dir)):
        for name, tensor in load_file(str(path)).items():
            noise = torch.randn(tensor.shape, generator=gen, dtype=torch.float32).to(tensor.dtype)
            out[name] = tensor + scale * noise
    return out


def write_weight_dir(state_dict: dict, model_dir: Path, dest: Path) -> Path:
    """Publish ``state_dict`` (+ the model's config/tokenizer files) at ``dest`` with ``STABLE``.

    Written to a temporary sibling directory with its ``manifest.json`` (what the server checks),
    fsynced, renamed into place, then marked.
    """
    from safetensors.torch import save_file

    dest = Path(dest)
    tmp = dest.parent / f".{dest.name}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_file(
        {k: v.contiguous() for k, v in state_dict.items()},
        str(tmp / "model.safetensors"),
        metadata={"format": "pt"},
    )
    for name in CONFIG_FILES:
        if (Path(model_dir) / name).is_file():
            shutil.copy2(Path(model_dir) / name, tmp / name)
    write_file_manifest(tmp)
    for path in tmp.iterdir():
        with open(path, "rb") as f:
            os.fsync(f.fileno())
    fsync_dir(tmp)
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(tmp, dest)
    fsync_dir(dest.parent)
    mark_stable(dest)
    return dest


def write_perturbed_weights(model_dir: Path, dest: Path, scale: float = 0.05, seed: int = 1) -> Path:
    """A complete weight dir at ``dest`` holding the model's weights plus noise."""
    return write_weight_dir(perturbed_state_dict(model_dir, scale, seed), model_dir, dest)
