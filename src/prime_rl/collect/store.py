"""The output file and its siblings: append-only records, resume scan, torn-line repair, failures.

Each record is one JSON line written with a single ``write(2)`` on an ``O_APPEND`` descriptor,
so it reaches the kernel the moment it completes: a SIGKILL loses nothing finished and can leave
at most one partial last line, which the next run detects and cuts off (the pair is then done
again). Lines before it are never rewritten. A record's identity is ``(task_index,
repeat_index)``; resume skips the pairs already present.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loguru import logger

Key = tuple[int, int]


class OutputError(ValueError):
    """An output (or merge input) file holds something that is not a record; names file and line."""


def sibling(output: Path, suffix: str) -> Path:
    """``rollouts.jsonl`` + ``_failures.jsonl`` -> ``rollouts_failures.jsonl`` (same directory)."""
    return output.with_name(output.stem + suffix)


def failures_path(output: Path) -> Path:
    return sibling(output, "_failures.jsonl")


def aggregates_path(output: Path) -> Path:
    return sibling(output, "_aggregate_metrics.json")


def record_key(record: Any) -> Key:
    """The pair a record is for; raises ValueError when it has none."""
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    ti, ri = record.get("task_index"), record.get("repeat_index")
    if not isinstance(ti, int) or not isinstance(ri, int):
        raise ValueError("no integer task_index/repeat_index")
    return ti, ri


@dataclass
class Torn:
    """A last line without its newline: a write cut short by a kill."""

    offset: int
    data: bytes


def iter_raw_records(
    path: Path, *, tolerant: bool = False
) -> Iterator[tuple[int, int, bytes, dict[str, Any]]]:
    """``(line number, byte offset, raw line, record)`` for every complete line of ``path``; a
    partial last line is skipped (see :func:`find_torn_tail`). A line that is not a record
    raises :class:`OutputError` naming file and line, or is logged and skipped when ``tolerant``."""
    offset = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            start, offset = offset, offset + len(raw)
            if not raw.endswith(b"\n"):
                return  # torn tail: not a record yet
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
                record_key(record)
            except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as e:
                msg = f"{path}:{lineno}: not a rollout record ({e})"
                if not tolerant:
                    raise OutputError(
                        f"{msg}; it was not written by collect-rollouts (or was edited): fix or delete that line"
                    ) from None
                logger.warning(f"{msg}; skipped")
                continue
            yield lineno, start, raw, record


def iter_records(path: Path, *, tolerant: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)``: :func:`iter_raw_records` without the bytes."""
    for lineno, _, _, record in iter_raw_records(path, tolerant=tolerant):
        yield lineno, record


def find_torn_tail(path: Path) -> Torn | None:
    """The partial last line of ``path``, if it does not end in a newline."""
    size = path.stat().st_size
    if size == 0:
        return None
    with open(path, "rb") as f:
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return None
        offset, pos = 0, size
        while pos > 0:  # back to the previous newline, a block at a time
            start = max(0, pos - (1 << 16))
            f.seek(start)
            cut = f.read(pos - start).rfind(b"\n")
            if cut >= 0:
                offset = start + cut + 1
                break
            pos = start
        f.seek(offset)
        return Torn(offset, f.read(size - offset))


def repair_torn_tail(path: Path) -> int:
    """Cut a partial last line off ``path`` (it is kept in ``<stem>_torn.log`` for inspection);
    a complete record that only lacks its newline gets the newline. Returns the bytes removed."""
    torn = find_torn_tail(path)
    if torn is None:
        return 0
    try:
        record_key(json.loads(torn.data))
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        pass
    else:  # the whole record is there, only the newline is missing
        with open(path, "ab") as f:
            f.write(b"\n")
        return 0
    with open(sibling(path, "_torn.log"), "ab") as f:
        f.write(f"# {time.strftime('%Y-%m-%dT%H:%M:%S')} offset {torn.offset}\n".encode() + torn.data + b"\n")
    with open(path, "r+b") as f:
        f.truncate(torn.offset)
        f.flush()
        os.fsync(f.fileno())
    logger.warning(
        f"{path}: cut a partial last line ({len(torn.data)} bytes, from an interrupted write) at byte "
        f"{torn.offset}; its pair is collected again (the bytes are kept in {sibling(path, '_torn.log').name})"
    )
    return len(torn.data)


@dataclass
class OutputState:
    """What an existing output holds."""

    done: set[Key] = field(default_factory=set)
    records: int = 0
    duplicates: int = 0
    repaired_bytes: int = 0
    first: dict[str, Any] | None = None
    """The first record (its model and params are checked against this run's)."""


def scan_output(path: Path, repair: bool = True) -> OutputState:
    """Read an existing output for resume (repairing a torn last line first when ``repair``)."""
    state = OutputState()
    if not path.exists():
        return state
    if repair:
        state.repaired_bytes = repair_torn_tail(path)
    for _, record in iter_records(path):
        key = record_key(record)
        if key in state.done:
            state.duplicates += 1
        state.done.add(key)
        state.records += 1
        if state.first is None:
            state.first = record
    return state


def dumps(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


class AppendWriter:
    """Appends JSON lines, each with one ``write(2)`` (visible to readers, and to the next run
    after a kill, as soon as it returns). ``fsync`` on close and every ``fsync_every_s``."""

    def __init__(self, path: Path, fsync_every_s: float = 5.0, lazy: bool = False):
        self.path = path
        self._fd = -1
        self._fsync_every_s = fsync_every_s
        self._last_sync = time.monotonic()
        self.written = 0
        if not lazy:  # a lazy writer creates its file on the first record
            self._open()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record: dict[str, Any]) -> None:
        if self._fd < 0:
            self._open()
        data = memoryview(dumps(record))
        while data:
            n = os.write(self._fd, data)
            data = data[n:]
        self.written += 1
        if time.monotonic() - self._last_sync > self._fsync_every_s:
            os.fsync(self._fd)
            self._last_sync = time.monotonic()

    def close(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> AppendWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_failures(path: Path) -> Counter[Key]:
    """How many runs gave up on each pair (from ``<stem>_failures.jsonl``)."""
    counts: Counter[Key] = Counter()
    if not path.exists():
        return counts
    repair_torn_tail(path)
    for _, record in iter_records(path, tolerant=True):
        counts[record_key(record)] += 1
    return counts


@contextlib.contextmanager
def exclusive(output: Path) -> Iterator[None]:
    """Hold ``.<name>.lock`` beside ``output`` for the run: a second process writing the same
    output would duplicate pairs, so it is refused with a clear error instead.

    The lock sits beside the file ``output`` really is (symlinks of the file or of its dirs
    resolved), so two runs naming one file by different paths still exclude each other. It is
    an ``flock``: it excludes processes of one machine; on a filesystem shared between machines
    each takes it, so never point two machines at one output.
    """
    output = Path(os.path.realpath(output))
    output.parent.mkdir(parents=True, exist_ok=True)
    lock = output.with_name(f".{output.name}.lock")
    with open(lock, "a") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputError(
                f"{output} is being written by another process (lock {lock.name}); "
                "wait for it or write to another --output"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
