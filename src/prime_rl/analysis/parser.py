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
import math
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prime_rl.analysis.clock import Clock, reference_date

TAGS = (b"weights", b"ckpt", b"gen", b"rollout", b"verify", b"collect", b"train", b"env", b"server", b"hang")
_TAG_ALT = b"|".join(TAGS)
_MARKERS = re.compile(rb"\[(?:" + _TAG_ALT + rb")\]")
# from a marker: the tag, an optional trace id, then whitespace and the rest of the line (no rest:
# the marker is not followed by whitespace, a malformed line)
_AT_MARKER = re.compile(rb"\[(" + _TAG_ALT + rb")\](?:\[([A-Za-z0-9_.-]{1,64})\])?(?:[ \t]+([^\n]*))?")
_TAG_NAMES = {t: t.decode() for t in TAGS}
_EVENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
# loguru's file and console prefixes (logging.LOG_FORMAT, CONSOLE_FORMAT): the message starts after it
_LOGURU_PREFIX = re.compile(rb"(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}\.\d{3} \| [A-Z]+ *\| ")
# a tagged-looking head with a tag the analyzer does not know, at a line's or a loguru message's
# start; it begins with the literal "[" (the lookbehinds come after it), so the regex engine skips
# to each "[" at memory speed instead of trying every position of the chunk
_UNKNOWN = re.compile(
    rb"\[(?:(?<=\n\[)|(?<=\| \[))(?!(?:"
    + _TAG_ALT
    + rb")\])([A-Za-z0-9_.-]{1,40})\](?:\[[A-Za-z0-9_.-]{1,64}\])?[ \t]+[A-Za-z_][A-Za-z0-9_.]*[= \t\n]"
)
_LOGURU_LEN = 36
"""Length of loguru's file prefix ``YYYY-MM-DD HH:MM:SS.mmm | LEVEL    | `` (levels padded to 8)."""
CHUNK = 8 << 20
EXAMPLES = 5
"""How many malformed lines and bad values are kept as ``file:line: text`` examples."""


@dataclass
class ParseStats:
    files: list[str] = field(default_factory=list)
    lines: int = 0
    tagged: int = 0
    malformed: int = 0
    malformed_examples: list[str] = field(default_factory=list)
    bad_values: int = 0
    """Fields a number was expected in that hold none (``wait_ms=abc``, ``nan``, ``inf``)."""
    bad_value_examples: list[str] = field(default_factory=list)
    """The first few as ``file:line: key=value (tag event)``."""
    unknown_tags: Counter = field(default_factory=Counter)
    """Lines that look tagged (``[x] event ...`` at a message's start) with a tag the analyzer does not read."""
    last_lines: dict[str, tuple[float | None, str]] = field(default_factory=dict)
    """Each file's last non-empty line with its timestamp: where a log ends (see stalls)."""
    ref_date: str | None = None
    """The date given to timestamps without one (console captures)."""
    seconds: float = 0.0


class _Where:
    """Where the current chunk lies in its file: turns an event's offset into ``file:line`` (counted
    only when asked, for the few lines that are reported)."""

    __slots__ = ("path", "first_line", "chunk", "stats")

    def __init__(self, path: Path, first_line: int, chunk: bytes, stats: ParseStats) -> None:
        self.path, self.first_line, self.chunk, self.stats = path, first_line, chunk, stats

    def line(self, offset: int) -> int:
        return self.first_line + self.chunk.count(b"\n", 0, offset)


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
    loc: _Where | None = None
    offset: int = 0
    bad: tuple[str, ...] = ()

    def num(self, key: str) -> float | None:
        """The field as a finite float; None when absent. A value that is no finite number counts
        as a bad value (once per event and key), named by file and line (:class:`ParseStats`)."""
        raw = self.fields.get(key)
        if raw is None:
            return None
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return value
        if key not in self.bad:
            self.bad += (key,)
            if self.loc is not None:
                stats = self.loc.stats
                stats.bad_values += 1
                if len(stats.bad_value_examples) < EXAMPLES:
                    where = f"{self.loc.path}:{self.loc.line(self.offset)}"
                    stats.bad_value_examples.append(f"{where}: {key}={raw[:80]} ([{self.tag}] {self.event})")
        return None

    def where(self) -> str:
        """``file:line`` of the line (``source`` when the event was not read from a file)."""
        return f"{self.loc.path}:{self.loc.line(self.offset)}" if self.loc is not None else self.source

    def text(self) -> str:
        """The tagged part of the line again (for reports)."""
        head = f"[{self.tag}][{self.tid}]" if self.tid else f"[{self.tag}]"
        return " ".join(
            [head, *([self.event] if self.event else []), *(f"{k}={v}" for k, v in self.fields.items())]
        )


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
    start = time.perf_counter()
    stats.ref_date = reference_date([p for _, p in paths], open_log)
    clock = Clock(stats.ref_date)
    seconds = clock.loguru_seconds
    events_seen: set[str] = set()
    for label, path in paths:
        stats.files.append(str(path))
        clock.new_file()
        lines_before = 0  # lines of this file in earlier chunks: a bad line is named file:line
        last_chunk = b""
        for chunk in _chunks(path):
            last_chunk = chunk
            where = _Where(path, lines_before + 1, chunk, stats)
            _count_unknown(stats, chunk)
            last_line = -1
            for m in _AT_MARKER.finditer(chunk):
                pos = m.start()
                line_start = chunk.rfind(b"\n", 0, pos) + 1
                if line_start == last_line:  # a second marker on a line already handled
                    continue
                last_line = line_start
                loguru = pos - line_start == _LOGURU_LEN and chunk[pos - 2 : pos] == b"| "
                if pos > line_start and not loguru:
                    head = _LOGURU_PREFIX.match(chunk, line_start, pos)
                    if head is not None and head.end() != pos:
                        continue  # a marker inside a free-form message: text, not a tagged line
                raw = m.group(3)
                parts = raw.decode("utf-8", "replace").split(None, 1) if raw else None
                if not parts:
                    _bad(stats, chunk, line_start, f"{path}:{lines_before + 1}")
                    continue
                first = parts[0]
                if "=" in first:
                    event, fields = "", _fields(" ".join(parts).split())
                elif first in events_seen or _new_event(events_seen, first):
                    event, fields = first, _fields(parts[1].split()) if len(parts) > 1 else {}
                else:
                    _bad(stats, chunk, line_start, f"{path}:{lines_before + 1}")
                    continue
                if not event and not fields:  # "[ckpt] =3": neither an event nor a key
                    _bad(stats, chunk, line_start, f"{path}:{lines_before + 1}")
                    continue
                stats.tagged += 1
                tid = m.group(2)
                if loguru and chunk[line_start + 4] == 45 and chunk[line_start + 19] == 46:  # "-", "."
                    # loguru's file prefix: the second's epoch seconds looked up by its bytes
                    second = chunk[line_start : line_start + 19]
                    millis = chunk[line_start + 20 : line_start + 23]
                    base = seconds.get(second)
                    if base is not None and millis.isdigit():
                        ts = base + int(millis) / 1000.0
                    else:
                        ts = clock.loguru(second, millis)
                else:
                    ts = clock(chunk[line_start:pos].decode("utf-8", "replace")) if pos > line_start else None
                yield Event(
                    _TAG_NAMES[m.group(1)],
                    event,
                    tid.decode() if tid else None,
                    fields,
                    ts,
                    label,
                    where,
                    line_start,
                )
            n = chunk.count(b"\n")
            stats.lines += n
            lines_before += n
        _last_line(stats, path, last_chunk, clock)
    stats.seconds += time.perf_counter() - start


def _fields(tokens: list[str]) -> dict[str, str]:
    """``key=value`` tokens as a dict (the last of a repeated key wins); tokens without ``=`` and
    empty keys are no fields."""
    try:
        fields = dict(tok.split("=", 1) for tok in tokens)  # every token has a "=": the usual case
    except ValueError:
        fields = {}
        for tok in tokens:
            k, sep, v = tok.partition("=")
            if sep:
                fields[k] = v
    fields.pop("", None)
    return fields


def _new_event(seen: set[str], word: str) -> bool:
    """Whether ``word`` is an event name; remembered (up to 4096 names) so each is checked once."""
    if not _EVENT.fullmatch(word):
        return False
    if len(seen) < 4096:
        seen.add(word)
    return True


def _count_unknown(stats: ParseStats, chunk: bytes) -> None:
    """Count tagged-looking lines whose tag is not one of :data:`TAGS`."""
    if chunk.startswith(b"[") and not _MARKERS.match(chunk):
        m = _UNKNOWN.match(b"\n" + chunk[:200], 1)
        if m:
            stats.unknown_tags[m.group(1).decode()] += 1
    for m in _UNKNOWN.finditer(chunk):
        stats.unknown_tags[m.group(1).decode()] += 1


def _last_line(stats: ParseStats, path: Path, chunk: bytes, clock: Clock) -> None:
    """Keep the file's last non-empty line and its timestamp."""
    lines = chunk.rstrip().rsplit(b"\n", 1)
    text = lines[-1].decode("utf-8", "replace")[:300] if lines and lines[-1] else ""
    if text:
        head = _LOGURU_PREFIX.match(lines[-1])
        stats.last_lines[str(path)] = (clock(text[: head.end()] if head else text[:40]), text)


def _bad(stats: ParseStats, chunk: bytes, start: int, where: str) -> None:
    """Count a malformed tagged line; the first few are kept as ``file:line: text`` (``where`` is
    ``file:first line of the chunk``, the line number is counted only for those kept)."""
    stats.malformed += 1
    if len(stats.malformed_examples) < EXAMPLES:
        path, _, first = where.rpartition(":")
        line = int(first) + chunk.count(b"\n", 0, start)
        end = chunk.find(b"\n", start)
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
