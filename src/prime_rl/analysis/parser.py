"""Streaming parser for the tagged timing lines whose grammar is in ``docs/design.md``.

Logs are read in large binary chunks; one compiled regex finds the tag markers, so the rest of a
log (vLLM's request lines and the like) costs no Python. Gzip files (``.gz``) and rotated parts are
read the same way. A file's tagged lines are handed on in batches (:class:`~prime_rl.analysis.
tagged.TaggedLines`, at least :data:`BATCH_ROWS` lines of whole chunks): the lines in loguru's
file format, nearly all of them, are taken apart column-wise with polars (timestamp, tag, trace
id, event, fields), the few in other formats (console captures, foreign prefixes) one by one with
the same grammar. A line that carries a known tag but does not follow the grammar (cut mid-line,
garbled) is counted as malformed and skipped, never a crash. Each line keeps the log's wall-clock
timestamp (when it has one) and its line number in its file.

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
from pathlib import Path

import numpy as np
import polars as pl

from prime_rl.analysis.clock import Clock, reference_date
from prime_rl.analysis.tagged import EXAMPLES, Event, ParseStats, TaggedLines

TAGS = (b"weights", b"ckpt", b"gen", b"rollout", b"verify", b"collect", b"train", b"env", b"server", b"hang")
_TAG_ALT = b"|".join(TAGS)
_MARKERS = re.compile(rb"\[(?:" + _TAG_ALT + rb")\]")
# from a marker: the tag, an optional trace id, then whitespace and the rest of the line (no rest:
# the marker is not followed by whitespace, a malformed line)
_AT_MARKER = re.compile(rb"\[(" + _TAG_ALT + rb")\](?:\[([A-Za-z0-9_.-]{1,64})\])?(?:[ \t]+([^\n]*))?")
_TAG_NAMES = {t: t.decode() for t in TAGS}
_TAG_LIST = list(_TAG_NAMES.values())
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
BATCH_ROWS = 1 << 16
"""Tagged lines folded together (at least; one file's, from whole chunks): the collector's column
work costs per batch, so small batches of a log with few tagged lines would cost more than their lines."""


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


def scan_files(paths: list[tuple[str, Path]], stats: ParseStats | None = None) -> Iterator[TaggedLines]:
    """The tagged lines of ``(label, path)`` pairs, chunk by chunk, file by file, in file order."""
    stats = stats if stats is not None else ParseStats()
    start = time.perf_counter()
    stats.ref_date = reference_date([p for _, p in paths], open_log)
    clock = Clock(stats.ref_date)
    events_seen: set[str] = set()
    for label, path in paths:
        stats.files.append(str(path))
        clock.new_file()
        lines_before = 0  # lines of this file in earlier chunks: a line is named file:line
        last_chunk = b""
        pending = _Pending(path, clock, stats, events_seen)
        for chunk in _chunks(path):
            last_chunk = chunk
            _count_unknown(stats, chunk)
            n = _scan_chunk(chunk, lines_before + 1, pending)
            stats.lines += n
            lines_before += n
            if pending.rows >= BATCH_ROWS:
                yield TaggedLines(pending.flush(), label, path, None, stats)
        if pending.rows:
            yield TaggedLines(pending.flush(), label, path, None, stats)
        _last_line(stats, path, last_chunk, clock)
    stats.seconds += time.perf_counter() - start


def parse_files(paths: list[tuple[str, Path]], stats: ParseStats | None = None) -> Iterator[Event]:
    """Events from ``(label, path)`` pairs, file by file, in file order (:func:`scan_files`, one
    :class:`Event` per line: for tests and small logs)."""
    for lines in scan_files(paths, stats):
        yield from (lines.event(i) for i in range(len(lines)))


_NL = 10
# a tagged line's message from its marker: tag, trace id, then whitespace, the first word (an
# event, or the first key=value of an event-less line) and the rest (no whitespace after the
# marker: no first word, a malformed line)
_HEAD = r"^\[([a-z]+)\](?:\[([A-Za-z0-9_.-]{1,64})\])?(?:[ \t]+\s*(\S+)(?:\s+(.*))?)?"


class _Pending:
    """One file's tagged lines read so far and not yet yielded: those in loguru's file format as
    text (taken apart together, column-wise, when the batch is full), the others already parsed."""

    def __init__(self, path: Path, clock: Clock, stats: ParseStats, events_seen: set[str]) -> None:
        self.path, self.clock, self.stats, self.events_seen = path, clock, stats, events_seen
        self.lines: list[str] = []
        self.numbers: list[int] = []
        self.other: list[pl.DataFrame] = []
        self.rows = 0

    def flush(self) -> pl.DataFrame:
        """The lines as one frame (:data:`~prime_rl.analysis.tagged.SCHEMA`), in line order."""
        frames = self.other
        if self.lines:
            frame, malformed = _loguru_lines(self.lines, self.numbers, self.clock, self.events_seen)
            for i in malformed:
                _bad(self.stats, self.path, self.numbers[i], self.lines[i])
            frames = [frame, *frames]
        frame = frames[0] if len(frames) == 1 else pl.concat(frames).sort("line")
        self.stats.tagged += frame.height
        self.lines, self.numbers, self.other, self.rows = [], [], [], 0
        return frame


def _scan_chunk(chunk: bytes, first_line: int, pending: _Pending) -> int:
    """Find one chunk's tagged lines (the chunk starts at line ``first_line``) and add them to
    ``pending``; returns the chunk's number of lines. Lines in loguru's file format (nearly all)
    are kept as text for :func:`_loguru_lines`; the others are parsed one by one."""
    marks = [m.start() for m in _MARKERS.finditer(chunk)]
    if not marks:
        return chunk.count(b"\n")
    data = np.frombuffer(chunk, np.uint8)
    newlines = np.flatnonzero(data == _NL)
    pos = np.asarray(marks, dtype=np.int64)
    line_no = np.searchsorted(newlines, pos)
    first = np.flatnonzero(np.diff(line_no, prepend=-1))  # the first marker of each line
    pos, line_no = pos[first], line_no[first]
    starts = np.where(line_no > 0, newlines[np.maximum(line_no - 1, 0)] + 1, 0)
    ends = newlines[line_no]
    numbers = line_no + first_line
    fast = (pos - starts) == _LOGURU_LEN
    if fast.any():  # "YYYY-MM-DD HH:MM:SS.mmm | LEVEL   | [tag]"
        s = starts[fast]
        ok = (data[s + 34] == 124) & (data[s + 35] == 32) & (data[s + 4] == 45) & (data[s + 19] == 46)
        for k in (20, 21, 22):
            ok &= (data[s + k] >= 48) & (data[s + k] <= 57)
        fast[np.flatnonzero(fast)[~ok]] = False
    if fast.any():
        s, e = starts[fast].tolist(), ends[fast].tolist()
        if len(s) * 512 > len(chunk) and chunk.isascii():  # dense: decode the chunk once
            text = chunk.decode("ascii")
            pending.lines += [text[a:b] for a, b in zip(s, e, strict=True)]
        else:
            pending.lines += [chunk[a:b].decode("utf-8", "replace") for a, b in zip(s, e, strict=True)]
        pending.numbers += numbers[fast].tolist()
        pending.rows += len(s)
    slow = np.flatnonzero(~fast)
    if len(slow):
        s, n = starts[slow].tolist(), numbers[slow].tolist()
        frame, malformed = _other_lines(chunk, s, pos[slow].tolist(), n, pending.clock, pending.events_seen)
        for i in malformed:
            end = chunk.find(b"\n", s[i])
            _bad(pending.stats, pending.path, n[i], chunk[s[i] : end][:200].decode("utf-8", "replace"))
        if frame is not None and frame.height:
            pending.other.append(frame)
            pending.rows += frame.height
    return len(newlines)


def _loguru_lines(
    lines: list[str], numbers: list[int], clock: Clock, events_seen: set[str]
) -> tuple[pl.DataFrame, list[int]]:
    """Lines with loguru's file prefix and a marker right after it, column-wise; and the indices
    of the malformed ones."""
    line = pl.Series("line", lines, dtype=pl.String)
    second = line.str.slice(0, 19)
    unique = second.unique()
    seconds = dict(zip(unique.to_list(), _epoch_seconds(unique, clock).to_list(), strict=True))
    base = second.replace_strict(seconds, default=None, return_dtype=pl.Float64)
    ts = base + line.str.slice(20, 3).cast(pl.Int64) / 1000.0
    head = _heads(line.str.slice(_LOGURU_LEN)).with_columns(line=pl.Series(numbers, dtype=pl.Int64), ts=ts)
    return _finish(head, events_seen)


_SECOND = r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}$"


def _epoch_seconds(second: pl.Series, clock: Clock) -> pl.Series:
    """Epoch seconds of ``YYYY-MM-DD HH:MM:SS`` strings, column-wise: what ``clock`` gives each of
    them (local midnight of the date from ``clock``, once per date, plus the time of day), None
    where it gives None (not a date and time, hour over 23, minute over 59, second over 60)."""
    date = second.str.slice(0, 10)
    midnight = date.replace_strict(
        {d: clock.midnight(d) for d in date.unique().to_list()}, default=None, return_dtype=pl.Float64
    )
    h, m, s = (second.str.slice(at, 2).cast(pl.Int64, strict=False) for at in (11, 14, 17))
    ok = second.str.contains(_SECOND) & (h <= 23) & (m <= 59) & (s <= 60)
    frame = pl.DataFrame({"ok": ok, "midnight": midnight, "h": h, "m": m, "s": s})
    return frame.select(
        pl.when("ok").then(pl.col("midnight") + pl.col("h") * 3600 + pl.col("m") * 60 + pl.col("s"))
    ).to_series()


def _heads(msg: pl.Series) -> pl.DataFrame:
    """Messages that start with a marker, taken apart: tag, trace id, the first word and the rest
    (see :data:`_HEAD`). Messages with single spaces between the head and the first two words (all
    that ``format_tagged`` writes) are split on them; the others go through the regex."""
    split = msg.str.splitn(" ", 3).struct.unnest()
    split.columns = ["head", "first", "rest"]
    names = split.get_column("head").str.strip_chars_start("[").str.strip_chars_end("]")
    tag_tid = names.str.split_exact("][", 1).struct.unnest()
    tag_tid.columns = ["tag", "tid"]
    heads = pl.concat([tag_tid, split], how="horizontal")
    tid = pl.col("tid")
    again = pl.concat_str(
        [
            pl.lit("["),
            pl.col("tag"),
            pl.lit("]"),
            pl.when(tid.is_null()).then(pl.lit("")).otherwise("[" + tid + "]"),
        ]
    )
    clean = heads.select(
        (pl.col("head") == again)
        & pl.col("tag").is_in(_TAG_LIST)
        & (tid.is_null() | tid.str.contains(r"^[A-Za-z0-9_.-]{1,64}$"))
        & (pl.col("first").str.len_bytes() > 0)
        & ~pl.lit(msg).str.contains(r"[\t\r\x0b\x0c]")
    ).to_series()
    heads = heads.select("tag", "tid", "first", "rest")
    if clean.all():
        return heads
    other = msg.filter(~clean).str.extract_groups(_HEAD).struct.unnest()
    other.columns = heads.columns
    other = other.with_columns(index=(~clean).arg_true()).select("index", *heads.columns)
    out = pl.concat([heads.with_row_index().filter(clean), other])
    return out.sort("index").drop("index")


def _finish(head: pl.DataFrame, events_seen: set[str]) -> tuple[pl.DataFrame, list[int]]:
    """From (line, ts, tag, tid, first word, rest) to the lines' columns: the first word is the
    event, or (with a ``=``) the first field of an event-less line; lines without a first word,
    with one that is no event name, or with neither an event nor a field are malformed."""
    first = head.get_column("first")
    names = {w: _new_event(events_seen, w) for w in first.drop_nulls().unique().to_list() if "=" not in w}
    has_eq = first.str.contains("=", literal=True)
    rest = head.get_column("rest").fill_null("")
    frame = head.select(
        "line",
        "ts",
        "tag",
        "tid",
        event=pl.when(has_eq).then(pl.lit("")).otherwise(first),
        rest=pl.when(has_eq).then(pl.concat_str([first, pl.lit(" "), rest])).otherwise(rest),
    )
    fields = frame.get_column("rest").str.contains(r"(?:^|\s)[^\s=]+=")
    valid = first.is_not_null() & (has_eq & fields | ~has_eq & first.replace_strict(names, default=False))
    if valid.all():
        return frame, []
    return frame.filter(valid), (~valid).arg_true().to_list()


def _other_lines(
    chunk: bytes, starts: list[int], marks: list[int], numbers: list[int], clock: Clock, events_seen: set[str]
) -> tuple[pl.DataFrame | None, list[int]]:
    """Lines in other formats, one by one: a marker after a loguru prefix that is not where the
    message starts is text; the timestamp is whatever the line starts with. Returns the frame and
    the indices (into ``starts``) of the malformed lines."""
    rows: list[tuple] = []
    kept: list[int] = []
    for k, (line_start, pos, number) in enumerate(zip(starts, marks, numbers, strict=True)):
        if pos > line_start:
            head = _LOGURU_PREFIX.match(chunk, line_start, pos)
            if head is not None and head.end() != pos:
                continue  # a marker inside a free-form message: text, not a tagged line
        m = _AT_MARKER.match(chunk, pos)
        ts = clock(chunk[line_start:pos].decode("utf-8", "replace")) if pos > line_start else None
        raw = m.group(3)
        parts = raw.decode("utf-8", "replace").split(None, 1) if raw else []
        tid = m.group(2).decode() if m.group(2) else None
        kept.append(k)
        rows.append(
            (
                number,
                ts,
                _TAG_NAMES[m.group(1)],
                tid,
                parts[0] if parts else None,
                parts[1] if len(parts) > 1 else None,
            )
        )
    if not rows:
        return None, []
    schema = {
        "line": pl.Int64,
        "ts": pl.Float64,
        "tag": pl.String,
        "tid": pl.String,
        "first": pl.String,
        "rest": pl.String,
    }
    head = pl.DataFrame(rows, schema=schema, orient="row")
    frame, malformed = _finish(head, events_seen)
    return frame, [kept[j] for j in malformed]


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


def _bad(stats: ParseStats, path: Path, line: int, text: str) -> None:
    """Count a malformed tagged line; the first few are kept as ``file:line: text``."""
    stats.malformed += 1
    if len(stats.malformed_examples) < EXAMPLES:
        stats.malformed_examples.append(f"{path}:{line}: {text[:200]}")


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
