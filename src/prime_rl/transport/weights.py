"""Checks on a weight directory before anything is swapped, and the safetensors reader.

A weight dir is accepted only if it resolves (symlinks included) inside the configured weights
root, carries ``STABLE``, holds only safetensors weights (never pickle) and its tensors match the
served model's base checkpoint in names, shapes and dtypes. Headers are read without loading
any tensor, so a bad dir is refused in milliseconds and the served weights stay as they were.

Every published weight dir also carries ``manifest.json``: each file's size and checksum, written
by the publisher before the dir is renamed into place. :func:`verify_weight_dir` checks a dir
against it (a shard truncated or rewritten after publishing, a missing file, a missing or garbled
manifest) and raises :class:`WeightDirError` naming the file.
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import xxhash

from prime_rl.paths import STABLE

INDEX_FILE = "model.safetensors.index.json"
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = "prime-rl-weight-manifest/1"
# xxh3_128, not blake2b: on 1 GiB in memory (2-core CPU) xxh3_128 hashes at ~10.7 GiB/s and blake2b
# at ~0.67 GiB/s (16x slower), and every server hashes each weight dir before loading it. The
# checksum guards against torn or corrupted files (truncation, flipped bytes), not an adversary:
# whoever can rewrite a shard under the weights root can rewrite the manifest too.
CHECKSUM_ALGORITHM = "xxh3_128"
_HASH_CHUNK_BYTES = 8 * 1024 * 1024
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

POLICY_HEADER = "x-policy-step"
"""Answer header of a generation request: the policy step the server served when it arrived."""
_STEP_DIR_RE = re.compile(r"step_(\d+)")


def policy_step_of(weight_dir: Path) -> int | None:
    """The policy step a weight dir holds, from its name ``step_N``; None for any other name."""
    m = _STEP_DIR_RE.fullmatch(Path(weight_dir).name)
    return int(m.group(1)) if m else None


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


def file_checksum(path: Path) -> tuple[int, str]:
    """(bytes read, xxh3_128 hex digest) of a file, streamed in 8 MiB chunks (never read whole)."""
    h = xxhash.xxh3_128()
    size = 0
    with open(path, "rb", buffering=0) as f:
        # no bigger than the file: zeroing an 8 MiB buffer per small config file costs more than hashing it
        buf = bytearray(max(1, min(_HASH_CHUNK_BYTES, os.fstat(f.fileno()).st_size)))
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
            size += n
    return size, h.hexdigest()


def _manifest_names(directory: Path) -> list[str]:
    """The files a manifest covers: every regular file but ``STABLE``, the manifest, hidden (temporary) files."""
    return sorted(
        p.name
        for p in directory.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.name not in (STABLE, MANIFEST_FILE)
    )


def write_file_manifest(directory: Path) -> dict:
    """Write ``manifest.json`` (size and checksum of every file) into a weight dir being built.

    Call it once every other file is written and before the dir is fsynced, renamed into place and
    marked ``STABLE``; the caller fsyncs the manifest with the other files. Returns the manifest.
    """
    directory = Path(directory)
    files = {}
    for name in _manifest_names(directory):
        size, digest = file_checksum(directory / name)
        files[name] = {"size": size, "checksum": digest}
    doc = {"format": MANIFEST_FORMAT, "algorithm": CHECKSUM_ALGORITHM, "files": files}
    (directory / MANIFEST_FILE).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return doc


def read_file_manifest(directory: Path) -> dict[str, tuple[int, str]]:
    """``{file name: (size, checksum)}`` from a weight dir's ``manifest.json``, its form checked."""
    path = Path(directory) / MANIFEST_FILE
    try:
        doc = json.loads(path.read_bytes())
    except FileNotFoundError as e:
        raise WeightDirError(
            422, f"{MANIFEST_FILE}: missing (the dir was not published by this trainer version)"
        ) from e
    except OSError as e:
        raise WeightDirError(422, f"{MANIFEST_FILE}: cannot read: {e}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise WeightDirError(422, f"{MANIFEST_FILE}: not valid JSON: {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise WeightDirError(422, f"{MANIFEST_FILE}: not a {MANIFEST_FORMAT} manifest")
    if doc.get("algorithm") != CHECKSUM_ALGORITHM:
        raise WeightDirError(
            422,
            f"{MANIFEST_FILE}: checksum algorithm {doc.get('algorithm')!r}, expected {CHECKSUM_ALGORITHM!r}",
        )
    files = doc.get("files")
    if not isinstance(files, dict) or not files:
        raise WeightDirError(422, f"{MANIFEST_FILE}: 'files' is not a non-empty object")
    out: dict[str, tuple[int, str]] = {}
    for name, entry in files.items():
        if not name or "/" in name or "\\" in name or name.startswith("."):
            raise WeightDirError(422, f"{MANIFEST_FILE}: bad file name {name!r}")
        size = entry.get("size") if isinstance(entry, dict) else None
        checksum = entry.get("checksum") if isinstance(entry, dict) else None
        if isinstance(size, bool) or not isinstance(size, int) or size < 0 or not isinstance(checksum, str):
            raise WeightDirError(422, f"{MANIFEST_FILE}: malformed entry for {name!r}")
        out[name] = (size, checksum)
    return out


def verify_weight_dir(directory: Path, *, checksums: bool = True) -> None:
    """Check a weight dir against its ``manifest.json``; raise :class:`WeightDirError` (422) naming the file.

    Refused: a missing, unreadable or malformed manifest; a listed file that is missing, of another
    size (truncated) or, with ``checksums``, of another checksum (rewritten, flipped bytes); a
    ``.safetensors`` file or the index that the manifest does not list (a loader would read it).
    Sizes of every file are checked before any byte is hashed, so a truncated shard is refused
    without reading the dir; checksums stream every file in 8 MiB chunks. ``checksums=False`` is
    the fast path (stat only).
    """
    directory = Path(directory)
    entries = read_file_manifest(directory)
    for name in _manifest_names(directory):
        if name not in entries and (name.endswith(".safetensors") or name == INDEX_FILE):
            raise WeightDirError(422, f"{name}: not listed in {MANIFEST_FILE}")
    for name, (size, _) in entries.items():
        path = directory / name
        try:
            actual = path.stat().st_size
        except FileNotFoundError as e:
            raise WeightDirError(422, f"{name}: missing (listed in {MANIFEST_FILE})") from e
        except OSError as e:
            raise WeightDirError(422, f"{name}: cannot read: {e}") from e
        if not path.is_file():
            raise WeightDirError(422, f"{name}: not a regular file (listed in {MANIFEST_FILE})")
        if actual != size:
            raise WeightDirError(
                422,
                f"{name}: size mismatch: {actual} != {size} bytes in {MANIFEST_FILE} (truncated or rewritten)",
            )
    if not checksums:
        return
    for name, (size, checksum) in entries.items():
        try:
            read, digest = file_checksum(directory / name)
        except OSError as e:
            raise WeightDirError(422, f"{name}: cannot read: {e}") from e
        if read != size:
            raise WeightDirError(422, f"{name}: size mismatch: {read} != {size} bytes in {MANIFEST_FILE}")
        if digest != checksum:
            raise WeightDirError(
                422,
                f"{name}: checksum mismatch: {CHECKSUM_ALGORITHM} {digest} != {checksum} in {MANIFEST_FILE}",
            )


def resolve_model_dir(model: str) -> Path:
    """A local directory for ``model``: the path itself, or the HF cache snapshot of a hub name."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path.resolve()
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model, allow_patterns=["*.safetensors", "*.json"]))
