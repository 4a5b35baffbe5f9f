"""Checks on a weight directory before anything is swapped, and the safetensors reader.

A weight dir is accepted only if it resolves (symlinks included) inside the configured weights
root, every file in it resolves inside the dir itself (a shard, the index or any other file that
is a symlink leaving the dir is refused with 403, even into another dir of the same root),
carries ``STABLE``, holds only safetensors weights (never pickle) whose headers pass the strict
check of :func:`read_safetensors_header`, and its tensors match the served model's base
checkpoint in names, shapes and dtypes. Headers are read without loading any tensor, so a bad dir
is refused in milliseconds and the served weights stay as they were.

Error texts name the file, the field and the rule they broke; they never quote a file's bytes
(a name taken from a header, an index or a manifest is shown only when it looks like a tensor or
file name) and quote at most 200 characters of a requested path. Every reason is one printable
line (:func:`prime_rl.tracing.one_line`), so it can go into a log line as it is.

Every published weight dir also carries ``manifest.json``: each file's size and checksum, written
by the publisher before the dir is renamed into place. :func:`verify_weight_dir` checks a dir
against it (a shard truncated or rewritten after publishing, a missing file, a missing or garbled
manifest) and raises :class:`WeightDirError` naming the file.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import xxhash

from prime_rl.paths import STABLE
from prime_rl.tracing import one_line

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

PATH_MAX = 4096
"""Longest ``weight_dir`` accepted (Linux ``PATH_MAX``); a longer one is refused with 400 unread."""
_QUOTE_CHARS = 200
_SHOWN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:+-]{0,199}")
"""A name taken from a file (tensor, shard, manifest entry) is shown in an error only if it matches."""
_SHARD_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,200}\.safetensors")

POLICY_HEADER = "x-policy-step"
"""Answer header of a generation request: the policy step the server served when it arrived."""
_STEP_DIR_RE = re.compile(r"step_(\d+)")


def policy_step_of(weight_dir: Path) -> int | None:
    """The policy step a weight dir holds, from its name ``step_N``; None for any other name."""
    m = _STEP_DIR_RE.fullmatch(Path(weight_dir).name)
    return int(m.group(1)) if m else None


class WeightDirError(Exception):
    """A weight dir was refused; ``status`` is the HTTP status to answer with.

    ``reason`` is one printable line (line breaks and control characters escaped), safe to log.
    """

    def __init__(self, status: int, reason: str):
        reason = one_line(reason, None)
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _quote(text: str) -> str:
    """``repr`` of a requested path, cut to 200 characters (its length said): never a whole request."""
    if len(text) <= _QUOTE_CHARS:
        return repr(text)
    return f"{text[:_QUOTE_CHARS]!r}... ({len(text)} characters)"


def _shown(name: object) -> str:
    """A name read from a file, quoted, if it looks like a tensor or file name; else only its length."""
    if isinstance(name, str) and _SHOWN_NAME.fullmatch(name):
        return repr(name)
    return f"<a name of {len(name) if isinstance(name, str) else '?'} characters, not shown>"


def _os_reason(e: OSError) -> str:
    """The OS error without the path it carries (which may be a client's 10,000 characters)."""
    return os.strerror(e.errno) if e.errno else type(e).__name__


def check_inside(directory: Path, names: Iterable[str]) -> None:
    """Refuse (403) any of ``names`` in ``directory`` whose real path (symlinks resolved) leaves it.

    A symlink to another file of the same dir is fine; one to a file elsewhere, another weight dir
    of the same root included, is not: a published dir holds its own files (the trainer writes
    them, ``dev.weights`` copies them). The error names the file and the rule, never the target.
    """
    base = os.path.realpath(directory)
    for name in names:
        real = os.path.realpath(os.path.join(base, name))
        if os.path.dirname(real) != base and not real.startswith(base + os.sep):
            raise WeightDirError(
                403,
                f"{name}: resolves outside the weight dir (a symlink leaving it; every file of a weight "
                "dir must lie inside it)",
            )


@dataclass(frozen=True)
class TensorInfo:
    """A tensor's dtype (safetensors name) and shape; ``offsets`` locate its bytes in the data
    section of its file (not compared: the same tensor may sit elsewhere in another file)."""

    dtype: str
    shape: tuple[int, ...]
    offsets: tuple[int, int] = field(default=(0, 0), compare=False)


def resolve_weight_dir(weight_dir: str, root: Path) -> Path:
    """Resolve ``weight_dir`` and check it is inside ``root``, complete (``STABLE``) and self-contained.

    Refused: not a non-empty string, a NUL byte, longer than :data:`PATH_MAX` or a name the OS
    cannot resolve (400); outside the root (403); not a directory, a symlink loop (404); no
    ``STABLE`` (409); a file in it that resolves outside it (403, :func:`check_inside`). The
    reason quotes at most 200 characters of ``weight_dir``.
    """
    if not isinstance(weight_dir, str) or not weight_dir.strip():
        raise WeightDirError(400, "weight_dir must be a non-empty string")
    shown = _quote(weight_dir)
    if "\x00" in weight_dir:
        raise WeightDirError(400, f"weight_dir {shown} contains a NUL byte")
    if len(weight_dir) > PATH_MAX:
        raise WeightDirError(400, f"weight_dir {shown} is longer than {PATH_MAX} characters")
    try:
        root_real = Path(os.path.realpath(root))
        candidate = Path(weight_dir)
        if not candidate.is_absolute():
            candidate = root_real / candidate
        real = Path(os.path.realpath(candidate))
        if real != root_real and root_real not in real.parents:
            raise WeightDirError(403, f"weight_dir {shown} resolves outside the weights root {root_real}")
        if not real.is_dir():
            raise WeightDirError(404, f"weight_dir {shown} is not a directory")
        if not (real / STABLE).is_file():
            raise WeightDirError(
                409, f"weight_dir {shown} has no {STABLE} marker (incomplete or still being written)"
            )
        check_inside(real, sorted(os.listdir(real)))
    except OSError as e:  # ENAMETOOLONG, ELOOP, EACCES, ...: the client's path, not the server, is wrong
        status = 400 if e.errno in (errno.ENAMETOOLONG, errno.EINVAL) else 404
        raise WeightDirError(status, f"weight_dir {shown} cannot be resolved: {_os_reason(e)}") from e
    return real


class _DuplicateKey(ValueError):
    pass


class _BadJSON(ValueError):
    """JSON that does not parse; the message gives the rule and the byte offset, never the bytes."""


def _unique_object(pairs: list[tuple[str, object]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise _DuplicateKey
    return out


def _is_count(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _load_json(raw: bytes, base: int) -> object:
    """JSON from ``raw`` (which starts at byte ``base`` of its file), no object naming a key twice."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _BadJSON(f"not valid JSON (not UTF-8 at byte {base + e.start})") from e
    try:
        return json.loads(text, object_pairs_hook=_unique_object)
    except _DuplicateKey as e:
        raise _BadJSON("an object names a key more than once") from e
    except json.JSONDecodeError as e:
        raise _BadJSON(f"not valid JSON (at byte {base + len(text[: e.pos].encode('utf-8'))})") from e
    except (ValueError, RecursionError) as e:  # a number of 5,000 digits, nesting 100,000 deep
        raise _BadJSON("not valid JSON (a number or a nesting too large)") from e


def read_safetensors_header(path: Path) -> dict[str, TensorInfo]:
    """Tensor names, dtypes and shapes from a safetensors header, checked as strictly as the loader does.

    The file is a regular file; bytes 0..7 hold the header length ``n``, at most
    :data:`MAX_HEADER_BYTES`; bytes 8..8+n hold a JSON object (no key twice) whose
    ``__metadata__``, if any, maps strings to strings and whose every other entry has a known
    ``dtype``, a ``shape`` of non-negative integers and ``data_offsets`` ``[begin, end]`` with
    ``end - begin = numel * dtype size``. Sorted by offset, the tensors start at 0 and are
    contiguous (no gap, no overlap), and the file ends exactly where the last one does:
    ``8 + n + end == file size`` (no trailing bytes, nothing cut). Anything else is refused with
    422 naming the file, the field and the rule, never the bytes read.
    """
    name = path.name
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # a FIFO, a device: nothing a loader may open
            raise WeightDirError(422, f"{name}: not a regular file")
        size = st.st_size
        with open(path, "rb") as f:
            raw_len = f.read(8)
            if len(raw_len) != 8:
                raise WeightDirError(422, f"{name}: too short to be a safetensors file (under 8 bytes)")
            (header_len,) = struct.unpack("<Q", raw_len)
            if header_len < 2 or header_len > MAX_HEADER_BYTES or 8 + header_len > size:
                raise WeightDirError(
                    422,
                    f"{name}: the header length (bytes 0-7) does not fit the file or the "
                    f"{MAX_HEADER_BYTES}-byte limit: not a safetensors file",
                )
            raw = f.read(header_len)
    except OSError as e:
        raise WeightDirError(422, f"{name}: cannot read: {_os_reason(e)}") from e
    try:
        header = _load_json(raw, 8)
    except _BadJSON as e:
        raise WeightDirError(422, f"{name}: header: {e}") from e
    if not isinstance(header, dict):
        raise WeightDirError(422, f"{name}: header is not a JSON object")
    meta = header.get("__metadata__")
    if meta is not None and (
        not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values())
    ):
        raise WeightDirError(422, f"{name}: __metadata__ is not an object of strings")
    data_len = size - 8 - header_len
    out: dict[str, TensorInfo] = {}
    spans: list[tuple[int, int, str]] = []
    for i, (key, entry) in enumerate(header.items()):
        if key == "__metadata__":
            continue
        label = f"tensor {key!r}" if _SHOWN_NAME.fullmatch(key) else f"header entry #{i} (name not shown)"
        if not isinstance(entry, dict):
            raise WeightDirError(422, f"{name}: {label} has a malformed header entry (not an object)")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        width = _DTYPE_BYTES.get(dtype) if isinstance(dtype, str) else None
        if width is None:
            raise WeightDirError(
                422, f"{name}: {label} has an unknown dtype (not one of {', '.join(_DTYPE_BYTES)})"
            )
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise WeightDirError(422, f"{name}: {label}: shape is not a list of non-negative integers")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(_is_count(o) for o in offsets)
            or offsets[0] > offsets[1]
        ):
            raise WeightDirError(
                422, f"{name}: {label}: data_offsets is not [begin, end] with integers 0 <= begin <= end"
            )
        numel = 1
        for d in shape:
            numel *= d
        begin, end = offsets
        if end - begin != numel * width:
            raise WeightDirError(
                422,
                f"{name}: {label}: data offsets do not match its shape and dtype "
                "(end - begin must be the number of elements times the dtype size)",
            )
        spans.append((begin, end, label))
        out[key] = TensorInfo(dtype, tuple(shape), (begin, end))
    pos = 0
    for begin, end, label in sorted(spans):
        if begin != pos:
            raise WeightDirError(
                422,
                f"{name}: {label}: data offsets leave a gap or overlap another tensor "
                "(tensors must be contiguous from byte 0 of the data)",
            )
        pos = end
    if pos != data_len:
        raise WeightDirError(
            422,
            f"{name}: the file size is not 8 + header length + the end of the last tensor "
            f"({'trailing bytes' if pos < data_len else 'the data is cut short'})",
        )
    return out


def weight_files(directory: Path, *, confine: bool | None = None) -> list[Path]:
    """The safetensors files of a model directory (from the index when there is one).

    Hidden names are never weights (temporaries; ``manifest.json`` does not cover them). With
    ``confine`` the index and every shard must resolve inside ``directory`` (:func:`check_inside`,
    403). By default a published weight dir (one that carries ``STABLE``) is confined and a base
    model dir is not: a Hugging Face cache snapshot links its files to ``../../blobs/``.
    """
    directory = Path(directory)
    if confine is None:
        confine = (directory / STABLE).exists()
    pickles = sorted(p.name for p in directory.iterdir() if p.suffix in PICKLE_SUFFIXES)
    index = directory / INDEX_FILE
    if index.is_file():
        if confine:
            check_inside(directory, [INDEX_FILE])
        try:
            doc = _load_json(index.read_bytes(), 0)
        except _BadJSON as e:
            raise WeightDirError(422, f"{INDEX_FILE}: malformed: {e}") from e
        except OSError as e:
            raise WeightDirError(422, f"{INDEX_FILE}: cannot read: {_os_reason(e)}") from e
        weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(weight_map, dict):
            raise WeightDirError(422, f"{INDEX_FILE}: malformed: 'weight_map' is not an object")
        for tensor, name in weight_map.items():
            if not isinstance(name, str) or not _SHARD_NAME.fullmatch(name):
                raise WeightDirError(
                    422,
                    f"{INDEX_FILE}: bad shard name for tensor {_shown(tensor)} (not a plain "
                    "'<name>.safetensors' in this dir: no path, no hidden name)",
                )
        files = []
        for name in sorted(set(weight_map.values())):
            if not (directory / name).is_file():
                raise WeightDirError(422, f"{INDEX_FILE} names {name}, which is missing")
            files.append(directory / name)
    else:
        files = sorted(p for p in directory.glob("*.safetensors") if not p.name.startswith("."))
    if not files:
        hint = f" (found {', '.join(pickles)}: pickle formats are never loaded)" if pickles else ""
        raise WeightDirError(422, f"no .safetensors weights in {directory}{hint}")
    if confine:
        check_inside(directory, [p.name for p in files])
    return files


def manifest(files: list[Path]) -> dict[str, TensorInfo]:
    """Every tensor of a checkpoint (all shards); a tensor in two shards is an error."""
    out: dict[str, TensorInfo] = {}
    for path in files:
        for name, info in read_safetensors_header(path).items():
            if name in out:
                raise WeightDirError(422, f"tensor {_shown(name)} appears in more than one shard")
            out[name] = info
    return out


def check_compatible(candidate: dict[str, TensorInfo], base: dict[str, TensorInfo]) -> None:
    """Refuse a checkpoint whose tensor names, shapes or dtypes differ from the served model's."""
    problems = []
    missing = sorted(set(base) - set(candidate))
    extra = sorted(set(candidate) - set(base))
    if missing:
        shown = ", ".join(_shown(n) for n in missing[:5])
        problems.append(
            f"missing tensors [{shown}]{' ...' if len(missing) > 5 else ''} ({len(missing)} in all)"
        )
    if extra:
        shown = ", ".join(_shown(n) for n in extra[:5])
        problems.append(
            f"unexpected tensors [{shown}]{' ...' if len(extra) > 5 else ''} ({len(extra)} in all)"
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


_TORCH_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "U16": "uint16",
    "U32": "uint32",
    "U64": "uint64",
}


class _ReadBuffers:
    """Two read buffers, taken in turn, each reused while nobody holds a view of it: a loader that
    copies each tensor into its parameter before taking the next (its loop variable still holds
    the last one, in the other buffer) reads every tensor into the same memory, with no fresh
    pages to fault in. A buffer someone kept a view of is theirs; its replacement is sized to the
    tensor, so a loader that keeps every tensor costs what it did without reuse."""

    def __init__(self) -> None:
        self.bufs: list = [None, None]
        self.idle = [0, 0]
        self.turn = 0
        self.allocations = 0

    def take(self, nbytes: int):
        import torch

        i = self.turn = 1 - self.turn
        buf = self.bufs[i]
        free = buf is not None and _use_count(buf) == self.idle[i]
        if not free or buf.numel() < nbytes:
            size = max(nbytes, buf.numel()) if free else nbytes
            buf = self.bufs[i] = torch.empty(size, dtype=torch.uint8)
            self.idle[i] = _use_count(buf)
            self.allocations += 1
        return buf[:nbytes]


def _use_count(tensor) -> int:
    import torch

    return torch._C._storage_Use_Count(tensor.untyped_storage()._cdata)


def _can_reuse() -> bool:
    import torch

    return hasattr(torch._C, "_storage_Use_Count")


def iter_tensors(files: Iterable[Path], reuse: bool = False) -> Iterator[tuple[str, object]]:
    """``(name, tensor)`` for every tensor of safetensors ``files``, each read into memory when it
    is reached (file by file, sorted by name within a file).

    Each header is checked strictly first (:func:`read_safetensors_header`). Tensors are read
    with ``preadv``, never memory-mapped: a file cut short or failing while it is read raises an
    ``OSError`` naming it, which a loader can handle (a mapped file cut short kills the reader
    with SIGBUS at first touch instead). One tensor at a time, as the loader takes it, so the
    bytes go from the page cache to the model while they are still in the CPU's cache.

    Each tensor has its own memory, unless ``reuse``: then a tensor's memory is reused for a later
    one once the caller holds no view of it (:class:`_ReadBuffers`), for a loader that copies
    each tensor where it belongs before taking the next.
    """
    import torch

    pool = _ReadBuffers() if reuse and _can_reuse() else None
    for path in files:
        path = Path(path)
        infos = read_safetensors_header(path)
        with open(path, "rb", buffering=0) as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            base = 8 + header_len
            for name in sorted(infos):
                info = infos[name]
                begin, end = info.offsets
                raw = pool.take(end - begin) if pool else torch.empty(end - begin, dtype=torch.uint8)
                view = memoryview(raw.numpy())
                got = 0
                while got < end - begin:
                    n = os.preadv(f.fileno(), [view[got:]], base + begin + got)
                    if not n:
                        raise OSError(errno.EIO, f"{path.name}: file ended inside tensor {name!r}")
                    got += n
                dtype = getattr(torch, _TORCH_DTYPES[info.dtype])
                yield name, raw.view(dtype).reshape(info.shape)
                del raw


def read_tensors(path: Path) -> list[tuple[str, object]]:
    """Every tensor of one safetensors file (see :func:`iter_tensors`), sorted by name."""
    return list(iter_tensors([path]))


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


def write_file_manifest(directory: Path, known: dict[str, tuple[int, str]] | None = None) -> dict:
    """Write ``manifest.json`` (size and checksum of every file) into a weight dir being built.

    Call it once every other file is written and before the dir is fsynced, renamed into place and
    marked ``STABLE``; the caller fsyncs the manifest with the other files. ``known``: (size,
    checksum) of files hashed as they were written (the shards), not read back; a size that is not
    the file's is a bug of the writer and raises. Returns the manifest.
    """
    directory = Path(directory)
    known = known or {}
    files = {}
    for name in _manifest_names(directory):
        if name in known:
            size, digest = known[name]
            if (on_disk := (directory / name).stat().st_size) != size:
                raise ValueError(f"{name}: written as {size} bytes, {on_disk} on disk")
        else:
            size, digest = file_checksum(directory / name)
        files[name] = {"size": size, "checksum": digest}
    doc = {"format": MANIFEST_FORMAT, "algorithm": CHECKSUM_ALGORITHM, "files": files}
    (directory / MANIFEST_FILE).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return doc


def read_file_manifest(directory: Path) -> dict[str, tuple[int, str]]:
    """``{file name: (size, checksum)}`` from a weight dir's ``manifest.json``, its form checked."""
    path = Path(directory) / MANIFEST_FILE
    try:
        raw = path.read_bytes()
    except FileNotFoundError as e:
        raise WeightDirError(
            422, f"{MANIFEST_FILE}: missing (the dir was not published by this trainer version)"
        ) from e
    except OSError as e:
        raise WeightDirError(422, f"{MANIFEST_FILE}: cannot read: {_os_reason(e)}") from e
    try:
        doc = _load_json(raw, 0)
    except _BadJSON as e:
        raise WeightDirError(422, f"{MANIFEST_FILE}: {e}") from e
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise WeightDirError(422, f"{MANIFEST_FILE}: not a {MANIFEST_FORMAT} manifest")
    if doc.get("algorithm") != CHECKSUM_ALGORITHM:
        raise WeightDirError(422, f"{MANIFEST_FILE}: checksum algorithm is not {CHECKSUM_ALGORITHM!r}")
    files = doc.get("files")
    if not isinstance(files, dict) or not files:
        raise WeightDirError(422, f"{MANIFEST_FILE}: 'files' is not a non-empty object")
    out: dict[str, tuple[int, str]] = {}
    for name, entry in files.items():
        if not name or "/" in name or "\\" in name or name.startswith(".") or not name.isprintable():
            raise WeightDirError(
                422,
                f"{MANIFEST_FILE}: bad file name {_shown(name)} (a path, a hidden or an unprintable name)",
            )
        size = entry.get("size") if isinstance(entry, dict) else None
        checksum = entry.get("checksum") if isinstance(entry, dict) else None
        if isinstance(size, bool) or not isinstance(size, int) or size < 0 or not isinstance(checksum, str):
            raise WeightDirError(422, f"{MANIFEST_FILE}: malformed entry for {_shown(name)}")
        out[name] = (size, checksum)
    return out


def verify_weight_dir(directory: Path, *, checksums: bool = True) -> None:
    """Check a weight dir against its ``manifest.json``; raise :class:`WeightDirError` (422) naming the file.

    Refused: a missing, unreadable or malformed manifest; a listed file that is missing, of another
    size (truncated) or, with ``checksums``, of another checksum (rewritten, flipped bytes); a
    ``.safetensors`` file or the index that the manifest does not list (a loader would read it).
    Before anything is read, the manifest, every file it lists, every ``.safetensors`` file and the
    index must resolve inside the dir (403, :func:`check_inside`).
    Sizes of every file are checked before any byte is hashed, so a truncated shard is refused
    without reading the dir; checksums stream every file in 8 MiB chunks. ``checksums=False`` is
    the fast path (stat only).
    """
    directory = Path(directory)
    present = _manifest_names(directory)
    check_inside(directory, [MANIFEST_FILE])
    entries = read_file_manifest(directory)
    check_inside(directory, sorted(set(entries) | set(present)))
    for name in present:
        if name not in entries and (name.endswith(".safetensors") or name == INDEX_FILE):
            raise WeightDirError(422, f"{name}: not listed in {MANIFEST_FILE}")
    for name, (size, _) in entries.items():
        path = directory / name
        try:
            actual = path.stat().st_size
        except FileNotFoundError as e:
            raise WeightDirError(422, f"{name}: missing (listed in {MANIFEST_FILE})") from e
        except OSError as e:
            raise WeightDirError(422, f"{name}: cannot read: {_os_reason(e)}") from e
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
            raise WeightDirError(422, f"{name}: cannot read: {_os_reason(e)}") from e
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
