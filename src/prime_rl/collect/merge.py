"""``collect-rollouts merge``: shard (or partial) outputs -> one file, each pair once, sorted.

Two streaming passes: the first indexes every record (pair, file, byte range, a hash of its
task), the second copies the chosen lines in (task, repeat) order into a temporary file that is
fsynced and renamed over the output. Inputs are only read. The same pair in two inputs keeps the
first copy; the same pair with a *different task* means the inputs come from different task
files, which is an error rather than a silent mix.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loguru import logger

from prime_rl.collect.config import MergeConfig
from prime_rl.collect.interrupt import check
from prime_rl.collect.runner import write_aggregates
from prime_rl.collect.store import (
    Key,
    OutputError,
    exclusive,
    find_torn_tail,
    is_side_file,
    iter_raw_records,
    record_key,
)
from prime_rl.paths import fsync_dir


@dataclass
class MergeResult:
    output: Path
    records: int = 0
    duplicates: int = 0
    per_input: dict[str, int] = field(default_factory=dict)
    aggregates: dict[str, Any] = field(default_factory=dict)


def _task_hash(record: dict[str, Any]) -> bytes:
    return hashlib.blake2b(json.dumps(record.get("task"), sort_keys=True).encode(), digest_size=8).digest()


def _copy_sorted(index: dict[Key, tuple[int, int, int, bytes]], handles: list, tmp: Path) -> None:
    with open(tmp, "wb") as dst:
        for key in sorted(index):
            check()  # a SIGTERM whose KeyboardInterrupt was dropped
            file_no, offset, length, _ = index[key]
            src = handles[file_no]
            src.seek(offset)
            dst.write(src.read(length))
        dst.flush()
        os.fsync(dst.fileno())


def merge(cfg: MergeConfig) -> MergeResult:
    """Merge under the collector's lock of the output and of every input (a run still writing a
    shard, or writing the output, makes the merge fail with that file named)."""
    for path in cfg.inputs:
        if not path.is_file():
            raise OutputError(f"merge input {path} not found")
    side = [p for p in cfg.inputs if is_side_file(p)]
    if side:  # a glob such as rollouts_*.jsonl also matches rollouts_0_failures.jsonl
        logger.warning(f"skipping {', '.join(map(str, side))}: failures or rejects files, not rollouts")
        inputs = [p for p in cfg.inputs if not is_side_file(p)]
        if not inputs:
            raise OutputError("merge: every input is a failures or rejects file; name the rollout files")
        cfg = cfg.model_copy(update={"inputs": inputs})
    with contextlib.ExitStack() as locks:
        for path in dict.fromkeys(os.path.realpath(p) for p in (cfg.output_jsonl_fpath, *cfg.inputs)):
            locks.enter_context(exclusive(Path(path)))
        _check_replaceable(Path(os.path.realpath(cfg.output_jsonl_fpath)))
        return _merge(cfg)


FIRST_LINE_MAX = 64 << 20
"""How much of an existing output is read for its first record."""


def _check_replaceable(out: Path) -> None:
    """The merge replaces its output: an earlier merge's (or a run's) rollouts are replaced, an empty
    file too; a file whose first non-blank line is no rollout record (a task file or a config named
    by mistake), or that is no regular file or cannot be read, is refused with its name, and left as
    it is."""
    try:
        mode = os.stat(out).st_mode
    except FileNotFoundError:
        return
    except OSError as e:
        raise OutputError(f"merge output {out}: cannot look at it ({e.strerror or e})") from None
    if stat.S_ISDIR(mode):
        raise OutputError(f"merge output {out} is a directory; give a file name")
    if not stat.S_ISREG(mode):
        raise OutputError(f"merge output {out} is not a regular file (a pipe or a device); give a file name")
    try:
        with open(out, "rb") as f:
            lineno = 0
            while not (first := f.readline(FIRST_LINE_MAX)).strip():
                if not first:
                    return  # empty, or blank lines only
                lineno += 1
            lineno += 1
    except OSError as e:
        raise OutputError(f"merge output {out}: cannot read it ({e.strerror or e})") from None
    try:
        record_key(json.loads(first))
    except (ValueError, RecursionError) as e:  # not JSON, not UTF-8, not a record; nested too deep
        raise OutputError(
            f"{out}:{lineno}: the merge output exists and holds no rollout record ({e}); the merge would "
            f"replace it: give another --output, or remove {out} first"
        ) from None


def _merge(cfg: MergeConfig) -> MergeResult:
    result = MergeResult(cfg.output_jsonl_fpath)
    index: dict[Key, tuple[int, int, int, bytes]] = {}
    for file_no, path in enumerate(cfg.inputs):  # each checked to be a file by merge()
        torn = find_torn_tail(path)
        if torn is not None:
            logger.warning(
                f"{path}: ignoring a partial last line ({len(torn.data)} bytes, an interrupted write)"
            )
        kept = 0
        for lineno, offset, raw, record in iter_raw_records(path, tolerant=not cfg.strict):
            check()
            key = record_key(record)
            digest = _task_hash(record)
            if key in index:
                if index[key][3] != digest:
                    first = cfg.inputs[index[key][0]]
                    raise OutputError(
                        f"{path}:{lineno}: task {key[0]} repeat {key[1]} is a different task than in {first}; "
                        f"these files come from different task files and cannot be merged"
                    )
                result.duplicates += 1
                continue
            index[key] = (file_no, offset, len(raw), digest)
            kept += 1
        result.per_input[str(path)] = kept
    out = Path(os.path.realpath(cfg.output_jsonl_fpath))  # replace the file, never a symlink to it
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.merging")
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(open(p, "rb")) for p in cfg.inputs]
        try:
            _copy_sorted(index, handles, tmp)
            check()  # the last chance to leave the output as it was
            os.replace(tmp, out)
            fsync_dir(out.parent)
        finally:
            tmp.unlink(missing_ok=True)
    result.records = len(index)
    logger.info(
        f"merged {len(cfg.inputs)} files into {out}: {result.records} records, "
        f"{result.duplicates} duplicates dropped"
    )
    result.aggregates = write_aggregates(out, cfg.pass_threshold)
    return result
