"""The output file and its siblings: append-only records, resume scan, torn-line repair, failures.

Each record is one JSON line written with a single ``write(2)`` on an ``O_APPEND`` descriptor,
so it reaches the kernel the moment it completes: a SIGKILL loses nothing finished and can leave
at most one partial last line, which the next run detects and cuts off (the pair is then done
again). Lines before it are never rewritten. A record's identity is ``(task_index,
repeat_index)``; resume skips the pairs already present.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import fcntl
import json
import os
import socket
import threading
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


class OutputWriteError(RuntimeError):
    """Writing an output file (or a sibling) failed: a full disk, a quota, an I/O error. The run
    stops at the first one; what was written before it is intact, and a resume goes on from there."""

    def __init__(self, path: Path, error: OSError):
        self.path, self.error = path, error
        what = errno.errorcode.get(error.errno, "") if error.errno is not None else ""
        reason = error.strerror or str(error)
        super().__init__(
            f"cannot write {path}: {reason}{f' ({what})' if what else ''}; every record written before is "
            "intact: free space (or fix the error) and run the same command again to resume"
        )


def sibling(output: Path, suffix: str) -> Path:
    """``rollouts.jsonl`` + ``_failures.jsonl`` -> ``rollouts_failures.jsonl`` (same directory)."""
    return output.with_name(output.stem + suffix)


FAILURES_SUFFIX = "_failures.jsonl"
REJECTS_SUFFIX = "_rejects.jsonl"
SIDE_FILE_SUFFIXES = (FAILURES_SUFFIX, REJECTS_SUFFIX)
"""Siblings of an output that hold JSON lines but no rollouts (``merge rollouts_*.jsonl`` skips them)."""


def failures_path(output: Path) -> Path:
    return sibling(output, FAILURES_SUFFIX)


def rejects_path(output: Path) -> Path:
    """Every rejected line of the task file, with its line number and reason."""
    return sibling(output, REJECTS_SUFFIX)


def is_side_file(path: Path) -> bool:
    return Path(path).name.endswith(SIDE_FILE_SUFFIXES)


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
    a complete record that only lacks its newline gets the newline. Returns the bytes removed.
    (An output is checked by :func:`check_tail` first: see :func:`scan_output`.)"""
    return _repair(path)[0]


def check_tail(path: Path) -> None:
    """Raise :class:`OutputError`, naming the file and line and changing nothing, when the last line
    of ``path`` has no newline and cannot be a record of ours cut short: no record's start (``{"``:
    how every record is written; NUL bytes, what a power loss can leave, are a cut write too), or a
    whole JSON line that is no record. A file of someone else's, given as the output, must not lose
    its last line to :func:`repair_torn_tail`."""
    torn = find_torn_tail(path)
    if torn is None:
        return
    try:
        whole = json.loads(torn.data)
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        if not (b'{"'.startswith(torn.data[:2]) or torn.data.startswith(b"\x00")):
            _not_ours(path, torn, "its last line, without a newline, is not the start of a record")
        return
    try:
        record_key(whole)
    except ValueError as e:
        _not_ours(path, torn, str(e))


def _repair(path: Path) -> tuple[int, dict[str, Any] | None]:
    """:func:`repair_torn_tail`, and the record it completed with a newline (if it did)."""
    torn = find_torn_tail(path)
    if torn is None:
        return 0, None
    try:
        whole = json.loads(torn.data)
        record_key(whole)
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        whole = None
    if whole is not None:
        with open(path, "ab") as f:  # the whole record is there, only the newline is missing
            f.write(b"\n")
        return 0, whole
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
    return len(torn.data), None


def _not_ours(path: Path, torn: Torn, why: str) -> None:
    line, left = 1, torn.offset
    with open(path, "rb") as f:
        while left > 0 and (block := f.read(min(left, 1 << 20))):
            line, left = line + block.count(b"\n"), left - len(block)
    raise OutputError(
        f"{path}:{line}: not a rollout record ({why}); it was not written by collect-rollouts (or was "
        "edited): give another output, or fix or delete that line"
    )


@dataclass
class OutputState:
    """What an existing output holds."""

    done: set[Key] = field(default_factory=set)
    records: int = 0
    duplicates: int = 0
    repaired_bytes: int = 0
    first: dict[str, Any] | None = None
    """The first record (its model and params are checked against this run's)."""

    def add(self, record: dict[str, Any]) -> None:
        key = record_key(record)
        if key in self.done:
            self.duplicates += 1
        self.done.add(key)
        self.records += 1
        if self.first is None:
            self.first = record


def scan_output(path: Path, repair: bool = True) -> OutputState:
    """Read an existing output for resume, and repair its torn last line when ``repair`` (else
    :func:`repair_output` does it later). Every line is checked before anything is cut: a file that
    is not an output of ours is refused (:class:`OutputError`, naming file and line) as it was found."""
    state = OutputState()
    if not path.exists():
        return state
    records = (record for _, record in iter_records(path))  # complete lines; raises on one not a record
    for record in records:
        state.add(record)
    check_tail(path)
    if repair:
        repair_output(path, state)
    return state


def repair_output(path: Path, state: OutputState) -> None:
    """Repair the torn last line of an output :func:`scan_output` read (with ``repair=False``) into
    ``state``; a whole record that only lacked its newline is added to it."""
    if not path.exists():
        return
    state.repaired_bytes, completed = _repair(path)
    if completed is not None:
        state.add(completed)


def dumps(record: dict[str, Any]) -> bytes:
    return (json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


class AppendWriter:
    """Appends JSON lines, each with one ``write(2)`` (visible to readers, and to the next run
    after a kill, as soon as it returns). ``fsync`` on close and every ``fsync_every_s``.

    A failed write (a full disk) cuts off the part of the line that did reach the file, so the
    file keeps only whole records, and raises :class:`OutputWriteError`; the writer is then
    closed for good (every later write raises the same error)."""

    def __init__(self, path: Path, fsync_every_s: float = 5.0, lazy: bool = False):
        self.path = path
        self._fd = -1
        self._fsync_every_s = fsync_every_s
        self._last_sync = time.monotonic()
        self._failed: OutputWriteError | None = None
        self.written = 0
        if not lazy:  # a lazy writer creates its file on the first record
            self._open()

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise self._fail(e) from None

    def _fail(self, e: OSError) -> OutputWriteError:
        self._failed = OutputWriteError(self.path, e)
        return self._failed

    def write(self, record: dict[str, Any]) -> None:
        if self._failed is not None:
            raise self._failed
        if self._fd < 0:
            self._open()
        data = memoryview(dumps(record))
        sent = 0
        try:
            while sent < len(data):
                sent += os.write(self._fd, data[sent:])
            if time.monotonic() - self._last_sync > self._fsync_every_s:
                os.fsync(self._fd)
                self._last_sync = time.monotonic()
        except OSError as e:
            if sent < len(data):
                self._cut(sent)
            raise self._fail(e) from None
        self.written += 1

    def _cut(self, partial: int) -> None:
        """Remove the ``partial`` bytes of a line cut short (the writer holds the output's lock:
        they are the file's last bytes). If even that fails, the next run's torn-tail repair does it."""
        if partial == 0:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, os.fstat(self._fd).st_size - partial)

    def close(self) -> None:
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        try:
            if self._failed is None:
                os.fsync(fd)
        except OSError as e:
            raise self._fail(e) from None
        finally:
            os.close(fd)

    def __enter__(self) -> AppendWriter:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:  # the run is already failing: keep its error, not one from the final fsync
            with contextlib.suppress(OutputWriteError):
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


LOCK_STALE_S = 60.0
"""A holder on another host whose heartbeat is older than this is taken to be gone."""
LOCK_HEARTBEAT_S = 10.0
"""How often the holder of an output's lock refreshes the heartbeat in it."""
LOCK_SETTLE_S = 0.25
"""After writing its entry a run waits this long and reads the lock file again: a machine that
wrote its own entry in the same instant has overwritten ours by then, and this run refuses."""


def _read_holder(lock: Path) -> dict[str, Any] | None:
    """The entry in ``lock`` (opened afresh, so that an NFS client revalidates what it cached), or
    None when the file is missing, empty or holds no entry (an old run's empty lock file)."""
    try:
        with open(lock, "rb") as f:
            line = f.readline(4096)
    except FileNotFoundError:
        return None
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("host"), str)
        or not isinstance(entry.get("heartbeat"), int | float)
    ):
        return None
    return entry


def _who(entry: dict[str, Any]) -> str:
    return f"pid {entry.get('pid')} on host {entry['host']} (started {entry.get('started')})"


class _LockEntry:
    """This run's entry in an output's lock file: one JSON line ``{"host", "pid", "started",
    "heartbeat"}`` written through the locked descriptor and refreshed by a daemon thread (so
    neither a busy nor a blocked event loop lets it go stale)."""

    def __init__(self, fd: int, lock: Path, output: Path):
        self.fd, self.lock, self.output = fd, lock, output
        started = datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")
        self.entry: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(), "started": started}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def ours(self, entry: dict[str, Any] | None) -> bool:
        return entry is not None and all(entry.get(k) == self.entry[k] for k in ("host", "pid", "started"))

    def write(self) -> None:
        self.entry["heartbeat"] = time.time()
        data = (json.dumps(self.entry) + "\n").encode()
        os.pwrite(self.fd, data, 0)  # then cut: a reader never finds the file empty
        os.ftruncate(self.fd, len(data))
        os.fsync(self.fd)  # an NFS client would otherwise keep it until close

    def start(self, interval_s: float) -> None:
        self._thread = threading.Thread(
            target=self._beat, args=(interval_s,), name=f"lock {self.output.name}", daemon=True
        )
        self._thread.start()

    def _beat(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                current = _read_holder(self.lock)
                if not self.ours(current):
                    logger.error(
                        f"{self.output}: its lock {self.lock} no longer names this run but "
                        f"{_who(current) if current else 'no one'}: another run may be writing the same "
                        "output (this one's heartbeat was stale, or the lock file was removed)"
                    )
                    return
                self.write()
            except OSError as e:
                logger.warning(f"{self.lock}: heartbeat not written ({e}); trying again in {interval_s:g} s")

    def close(self) -> None:
        """Stop the heartbeat and empty the file if it still names this run."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            if self.ours(_read_holder(self.lock)):
                os.ftruncate(self.fd, 0)
                os.fsync(self.fd)
        except OSError as e:
            logger.warning(
                f"{self.lock}: not emptied ({e}); the next run on another host waits for it to go stale"
            )


@contextlib.contextmanager
def exclusive(
    output: Path,
    *,
    stale_s: float | None = None,
    heartbeat_s: float | None = None,
    settle_s: float | None = None,
) -> Iterator[None]:
    """Hold ``.<name>.lock`` beside ``output`` for the run: a second process writing the same
    output would duplicate pairs, so it is refused with a clear error instead.

    The lock sits beside the file ``output`` really is (symlinks of the file or of its dirs
    resolved), so two runs naming one file by different paths still exclude each other. It is
    an ``flock``, which excludes processes of one machine; on a filesystem shared between
    machines it may not reach across them (NFS mounted ``local_lock=flock`` or ``nolock``,
    Lustre's ``localflock``, many FUSE filesystems). For those, the holder also writes one JSON
    line in the file, ``{"host", "pid", "started", "heartbeat"}``, and refreshes ``heartbeat``
    (its own clock, unix seconds) every ``heartbeat_s`` from a thread; at exit it empties the
    file. A run that gets the flock and finds an entry of another host with a heartbeat younger
    than ``stale_s`` refuses, naming it; an older one is taken over with a warning. An entry of
    this host is stale by construction (its flock is free). The content's heartbeat, not the
    file's mtime, is what counts: NFS clients cache attributes for up to a minute, and the
    content is revalidated on each open; clocks of the machines must agree to well within
    ``stale_s``.

    Best effort, not a distributed lock: two machines starting in the same instant both find
    the file empty; each writes its entry, waits ``settle_s`` and reads the file again, and the
    one whose entry was overwritten refuses. A holder stopped for longer than ``stale_s`` (or
    whose lock file is deleted) can be taken over while still alive; it then logs an error.
    """
    stale_s = LOCK_STALE_S if stale_s is None else stale_s
    heartbeat_s = LOCK_HEARTBEAT_S if heartbeat_s is None else heartbeat_s
    settle_s = LOCK_SETTLE_S if settle_s is None else settle_s
    output = Path(os.path.realpath(output))
    output.parent.mkdir(parents=True, exist_ok=True)
    lock = output.with_name(f".{output.name}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)  # no O_APPEND: pwrite at 0
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(lock)
            raise OutputError(
                f"{output} is being written by another process "
                f"({_who(holder) + ', ' if holder else ''}lock {lock.name}); "
                "wait for it or write to another --output"
            ) from None
        me = _LockEntry(fd, lock, output)
        try:
            holder = _read_holder(lock)
            if holder is not None and holder["host"] != me.entry["host"]:
                age = time.time() - holder["heartbeat"]
                seen = f"last seen {max(age, 0):.0f} s ago"
                if age < stale_s:
                    raise OutputError(
                        f"{output} is being written by another machine: {_who(holder)}, {seen} "
                        f"(lock {lock}). Wait for it, write to another --output, or if that run is "
                        f"gone delete {lock}"
                    )
                logger.warning(
                    f"{output}: taking over its lock from {_who(holder)}, {seen} "
                    f"(over {stale_s:g} s: taken to be gone)"
                )
            me.write()
            time.sleep(settle_s)
            holder = _read_holder(lock)
            if not me.ours(holder):
                raise OutputError(
                    f"{output}: another machine took its lock {lock} at the same time "
                    f"(it now names {_who(holder) if holder else 'no one'}). Wait for it, write to "
                    f"another --output, or if that run is gone delete {lock}"
                )
            me.start(heartbeat_s)
            yield
        finally:
            me.close()
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
