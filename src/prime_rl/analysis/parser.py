"""Streaming parser for the tagged timing lines whose grammar is in ``docs/design.md``.

Logs are read in large binary chunks and scanned with one compiled regex, so Python only touches
tagged lines; gzip files (``.gz``) and rotated parts are read the same way. A line that carries
a known tag but does not follow the grammar (cut mid-line, garbled) is counted as malformed and
skipped, never a crash. Each event keeps the log's wall-clock timestamp (when the line has one)
and the process-local monotonic ``t=`` when present.

A tagged line starts its log message. On a line with loguru's prefix (``<date> <time> | LEVEL |``,
what every process writes) a tag marker anywhere else in the message is text, not an event: a
free-form message that quotes something a client sent (``weight dir '... [weights][x] rpc.done
...'``) cannot forge one. Lines in other formats are searched for the first marker.
"""

from __future__ import annotations

import gzip
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

TAGS = (b"weights", b"ckpt", b"gen", b"rollout", b"verify", b"collect", b"train", b"env")
_TAG_ALT = b"|".join(TAGS)
_MARKERS = re.compile(rb"\[(?:" + _TAG_ALT + rb")\]")
# anchored at a marker: the tag, an optional trace id, whitespace, the rest of the line
_AT_MARKER = re.compile(
    rb"\[(?P<tag>" + _TAG_ALT + rb")\](?:\[(?P<tid>[A-Za-z0-9_.-]{1,64})\])?[ \t]+(?P<rest>[^\n]*)"
)
_TS = re.compile(r"(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,6}))?")
_EVENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
# loguru's file and console prefixes (logging.LOG_FORMAT, CONSOLE_FORMAT): the message starts after it
_LOGURU_PREFIX = re.compile(rb"(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}\.\d{3} \| [A-Z]+ *\| ")
CHUNK = 8 << 20


@dataclass(slots=True)
class Event:
    """One tagged line."""

    tag: str
    event: str
    tid: str | None
    fields: dict[str, str]
    ts: float | None
    """Wall-clock seconds from the log line's timestamp (None when the line has none)."""
    source: str
    """Which file (its label) the line came from."""

    def num(self, key: str) -> float | None:
        raw = self.fields.get(key)
        if raw is None:
            return None
        try:
            return float(raw)
        except ValueError:
            return None


@dataclass
class ParseStats:
    files: list[str] = field(default_factory=list)
    lines: int = 0
    tagged: int = 0
    malformed: int = 0
    malformed_examples: list[str] = field(default_factory=list)
    seconds: float = 0.0


class _Clock:
    """Log timestamp -> epoch seconds, parsing each distinct second once."""

    def __init__(self) -> None:
        self._cache: dict[str, float] = {}

    def __call__(self, prefix: str) -> float | None:
        if (
            len(prefix) >= 23 and prefix[4] == "-" and prefix[10] == " " and prefix[19] == "."
        ):  # loguru's own prefix
            base = self._cache.get(prefix[:19])
            if base is not None and prefix[20:23].isdigit():
                return base + int(prefix[20:23]) / 1000.0
        m = _TS.search(prefix)
        if not m:
            return None
        key = f"{m.group(1)} {m.group(2)}"
        base = self._cache.get(key)
        if base is None:
            try:
                base = datetime.strptime(key, "%Y-%m-%d %H:%M:%S").timestamp()
            except ValueError:
                return None
            self._cache[key] = base
        frac = m.group(3)
        return base + (int(frac) / 10 ** len(frac) if frac else 0.0)


def open_log(path: Path):
    """Binary file object; gzip by suffix or magic bytes."""
    path = Path(path)
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def _chunks(path: Path) -> Iterator[bytes]:
    """Whole lines in big chunks; a final line without newline is yielded too (it may be cut)."""
    with open_log(path) as f:
        tail = b""
        while True:
            block = f.read(CHUNK)
            if not block:
                if tail:
                    yield tail + b"\n"
                return
            block = tail + block
            cut = block.rfind(b"\n")
            if cut < 0:
                tail = block
                continue
            tail = block[cut + 1 :]
            yield block[: cut + 1]


def parse_files(paths: list[tuple[str, Path]], stats: ParseStats | None = None) -> Iterator[Event]:
    """Events from ``(label, path)`` pairs, file by file, in file order."""
    stats = stats if stats is not None else ParseStats()
    clock = _Clock()
    start = time.perf_counter()
    for label, path in paths:
        stats.files.append(str(path))
        lines_before = 0  # lines of this file in earlier chunks: a bad line is named file:line
        for chunk in _chunks(path):
            last_line = -1
            for marker in _MARKERS.finditer(chunk):
                pos = marker.start()
                line_start = chunk.rfind(b"\n", 0, pos) + 1
                if line_start == last_line:  # a second marker on a line already handled
                    continue
                last_line = line_start
                if pos > line_start:
                    head = _LOGURU_PREFIX.match(chunk, line_start, pos)
                    if head is not None and head.end() != pos:
                        continue  # a marker inside a free-form message: text, not a tagged line
                line_end = chunk.find(b"\n", pos)
                m = _AT_MARKER.match(chunk, pos, line_end)
                rest = m.group("rest").decode("utf-8", "replace").split() if m else None
                if not rest:
                    _bad(stats, chunk, line_start, line_end, f"{path}:{lines_before + 1}")
                    continue
                first = rest[0]
                if "=" in first:
                    event, tokens = "", rest
                elif _EVENT.fullmatch(first):
                    event, tokens = first, rest[1:]
                else:
                    _bad(stats, chunk, line_start, line_end, f"{path}:{lines_before + 1}")
                    continue
                fields = {}
                for tok in tokens:
                    k, sep, v = tok.partition("=")
                    if sep and k:
                        fields[k] = v
                if not event and not fields:  # "[ckpt] =3": neither an event nor a key
                    _bad(stats, chunk, line_start, line_end, f"{path}:{lines_before + 1}")
                    continue
                stats.tagged += 1
                tid = m.group("tid")
                prefix = chunk[line_start:pos].decode("utf-8", "replace") if pos > line_start else ""
                yield Event(
                    m.group("tag").decode(),
                    event,
                    tid.decode() if tid else None,
                    fields,
                    clock(prefix),
                    label,
                )
            n = chunk.count(b"\n")
            stats.lines += n
            lines_before += n
    stats.seconds += time.perf_counter() - start


def _bad(stats: ParseStats, chunk: bytes, start: int, end: int, where: str) -> None:
    """Count a malformed tagged line; the first few are kept as ``file:line: text`` (``where`` is
    ``file:first line of the chunk``, the line number is counted only for those kept)."""
    stats.malformed += 1
    if len(stats.malformed_examples) < 5:
        path, _, first = where.rpartition(":")
        line = int(first) + chunk.count(b"\n", 0, start)
        stats.malformed_examples.append(f"{path}:{line}: {chunk[start:end][:200].decode('utf-8', 'replace')}")


def label_for(path: Path) -> str:
    """'orchestrator', 'inference', 'trainer' or the file stem, from the file name."""
    name = Path(path).name.lower()
    for label in ("orchestrator", "inference", "trainer", "rank_", "collect"):
        if label in name or label in str(path).lower():
            return "trainer" if label == "rank_" else label
    return Path(path).stem


def discover(inputs: list[Path]) -> list[tuple[str, Path]]:
    """Expand run directories (their logs/) and directories of logs into (label, file) pairs."""
    out: list[tuple[str, Path]] = []
    for p in inputs:
        p = Path(p)
        if p.is_dir():
            root = p / "logs" if (p / "logs").is_dir() else p
            files = sorted(
                f for f in root.rglob("*") if f.is_file() and (".log" in f.name or f.suffix == ".gz")
            )
            # the launcher's console copies (*stdout.log) and its own log repeat the processes' lines
            files = [f for f in files if "stdout" not in f.name and not f.name.startswith("rl.log")]
            out.extend((label_for(f), f) for f in files)
        elif p.is_file():
            out.append((label_for(p), p))
        else:
            raise FileNotFoundError(f"{p}: no such log file or directory")
    return out
