"""Checks on a weight directory before anything is swapped, and the safetensors reader.

A weight dir is accepted only if it resolves (symlinks included) inside the configured weights
root, carries ``STABLE``, holds only safetensors weights (never pickle) and its tensors match the
served model's base checkpoint in names, shapes and dtypes. Headers are read without loading
any tensor, so a bad dir is refused in milliseconds and the served weights stay as they were.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prime_rl.paths import STABLE

INDEX_FILE = "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
MAX_HEADER_BYTES = 100 * 1024 * 1024
_DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "U16": 2,
    "U32": 4,
    "U64": 8,
}


class WeightDirError(Exception):
    """A weight dir was refused; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]


def resolve_weight_dir(weight_dir: str, root: Path) -> Path:
    """Resolve ``weight_dir`` and check it is inside ``root`` and complete (``STABLE``)."""
    if not isinstance(weight_dir, str) or not weight_dir.strip():
        raise WeightDirError(400, "weight_dir must be a non-empty string")
    if "\x00" in weight_dir:
        raise WeightDirError(400, "weight_dir contains a NUL byte")
    root_real = Path(os.path.realpath(root))
    candidate = Path(weight_dir)
    if not candidate.is_absolute():
        candidate = root_real / candidate
    real = Path(os.path.realpath(candidate))
    if real != root_real and root_real not in real.parents:
        raise WeightDirError(
            403, f"weight_dir {weight_dir!r} resolves to {real}, outside the weights root {root_real}"
        )
    if not real.is_dir():
        raise WeightDirError(404, f"weight_dir {weight_dir!r} is not a directory")
    if not (real / STABLE).is_file():
        raise WeightDirError(
            409, f"weight_dir {weight_dir!r} has no {STABLE} marker (incomplete or still being written)"
        )
    return real


def read_safetensors_header(path: Path) -> dict[str, TensorInfo]:
    """Tensor names, dtypes and shapes from a safetensors header, with its offsets checked."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw_len = f.read(8)
            if len(raw_len) != 8:
                raise WeightDirError(422, f"{path.name}: too short to be a safetensors file")
            (header_len,) = struct.unpack("<Q", raw_len)
            if header_len > MAX_HEADER_BYTES or 8 + header_len > size:
                raise WeightDirError(
                    422, f"{path.name}: header length {header_len} does not fit the file ({size} bytes)"
                )
            header = json.loads(f.read(header_len))
    except OSError as e:
        raise WeightDirError(422, f"{path.name}: cannot read: {e}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise WeightDirError(422, f"{path.name}: header is not valid JSON: {e}") from e
    if not isinstance(header, dict):
        raise WeightDirError(422, f"{path.name}: header is not a JSON object")
    data_len = size - 8 - header_len
    out: dict[str, TensorInfo] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = (
                meta["dtype"],
                tuple(int(d) for d in meta["shape"]),
                meta["data_offsets"],
            )
        except (KeyError, TypeError, ValueError) as e:
            raise WeightDirError(422, f"{path.name}: tensor {name!r} has a malformed header entry") from e
        width = _DTYPE_BYTES.get(dtype)
        if width is None:
            raise WeightDirError(422, f"{path.name}: tensor {name!r} has unknown dtype {dtype!r}")
        numel = 1
        for d in shape:
            numel *= d
        if not (0 <= begin <= end <= data_len) or end - begin != numel * width:
            raise WeightDirError(
                422,
                f"{path.name}: tensor {name!r} data offsets do not match its shape/dtype or the file size",
            )
        out[name] = TensorInfo(dtype, shape)
    return out


def weight_files(directory: Path) -> list[Path]:
    """The safetensors files of a model directory (from the index when there is one)."""
    pickles = sorted(p.name for p in directory.iterdir() if p.suffix in PICKLE_SUFFIXES)
    index = directory / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
            names = sorted(set(weight_map.values()))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
            raise WeightDirError(422, f"{INDEX_FILE}: malformed ({e})") from e
        files = []
        for name in names:
            if not isinstance(name, str) or "/" in name or not name.endswith(".safetensors"):
                raise WeightDirError(422, f"{INDEX_FILE}: bad shard name {name!r}")
            if not (directory / name).is_file():
                raise WeightDirError(422, f"{INDEX_FILE} names {name}, which is missing")
            files.append(directory / name)
    else:
        files = sorted(directory.glob("*.safetensors"))
    if not files:
        hint = f" (found {', '.join(pickles)}: pickle formats are never loaded)" if pickles else ""
        raise WeightDirError(422, f"no .safetensors weights in {directory}{hint}")
    return files


def manifest(files: list[Path]) -> dict[str, TensorInfo]:
    """Every tensor of a checkpoint (all shards); a tensor in two shards is an error."""
    out: dict[str, TensorInfo] = {}
    for path in files:
        for name, info in read_safetensors_header(path).items():
            if name in out:
                raise WeightDirError(422, f"tensor {name!r} appears in more than one shard")
            out[name] = info
    return out


def check_compatible(candidate: dict[str, TensorInfo], base: dict[str, TensorInfo]) -> None:
    """Refuse a checkpoint whose tensor names, shapes or dtypes differ from the served model's."""
    problems = []
    missing = sorted(set(base) - set(candidate))
    extra = sorted(set(candidate) - set(base))
    if missing:
        problems.append(
            f"missing tensors {missing[:5]}{' ...' if len(missing) > 5 else ''} ({len(missing)} in all)"
        )
    if extra:
        problems.append(
            f"unexpected tensors {extra[:5]}{' ...' if len(extra) > 5 else ''} ({len(extra)} in all)"
        )
    for name in sorted(set(base) & set(candidate)):
        b, c = base[name], candidate[name]
        if b.shape != c.shape:
            problems.append(f"{name}: shape {list(c.shape)}, served model has {list(b.shape)}")
        elif b.dtype != c.dtype:
            problems.append(f"{name}: dtype {c.dtype}, served model has {b.dtype}")
        if len(problems) >= 8:
            break
    if problems:
        raise WeightDirError(422, "weights do not match the served model: " + "; ".join(problems))


def iter_safetensors(files: list[str]) -> Iterator[tuple[str, object]]:
    """Yield ``(name, tensor)`` from safetensors files (memory-mapped; never pickle)."""
    from safetensors import safe_open

    for path in files:
        with safe_open(path, framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                yield name, f.get_tensor(name)


def resolve_model_dir(model: str) -> Path:
    """A local directory for ``model``: the path itself, or the HF cache snapshot of a hub name."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path.resolve()
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model, allow_patterns=["*.safetensors", "*.json"]))
