"""Streaming parser for the tagged timing lines whose grammar is in ``docs/design.md``.

Logs are read in large binary chunks. A chunk dense with tagged lines is split into lines by
polars' reader (one text column, multi-threaded); in a sparse one (mostly vLLM's request lines and
the like) the scan skips from bracket to bracket to the tag markers, so the rest costs no Python.
Where the install built ``_scan.c``, one C pass without the GIL does all of it, whatever the
chunk: it counts the lines, finds the markers, and takes apart the lines in the one shape
``format_tagged`` writes through loguru's file sink (handed to polars as Arrow columns); the rest
of this module is then the fallback for the lines it leaves (other formats, odd spacing, text that
is not ASCII). Chunks are scanned :data:`SCANNERS` at a time, in threads, while the next is read;
the file is read into a few buffers that are kept (a fresh one per chunk costs page faults). Gzip files
(``.gz``) and rotated parts are read the same way. A file's tagged lines are handed on in batches
(:class:`~prime_rl.analysis.tagged.TaggedLines`, at least :data:`BATCH_ROWS` lines of whole
chunks): the lines in loguru's file format, nearly all of them, are taken apart column-wise with
polars in one query (timestamp, tag, trace id, event, fields), the few in other formats (console
captures, foreign prefixes) one by one with the same grammar. A line that carries a known tag but
does not follow the grammar (cut mid-line, garbled, a token that is no ``key=value``) is counted as
malformed and skipped, never a crash; so is a file's last tagged line when no newline ends it (cut
as it was written: :func:`_torn_line`). Each line keeps the log's wall-clock timestamp (when it
has one) and its line number in its file. A compressed log cut short or corrupt is read up to
where it breaks. Which files are read, and in which order, is :mod:`~prime_rl.analysis.log_files`.

A tagged line starts its log message. On a line with loguru's prefix (``<date> <time> | LEVEL |``,
what every process writes) a tag marker anywhere else in the message is text, not an event: a
free-form message that quotes something a client sent (``weight dir '... [weights][x] rpc.done
...'``) cannot forge one. Lines in other formats are searched for the first marker.
"""

from __future__ import annotations

import gzip
import math
import os
import re
import stat
import time
import warnings
from collections import Counter, deque
from collections.abc import Generator, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import lru_cache
from pathlib import Path

import numpy as np
import polars as pl

from prime_rl.analysis.clock import Clock, Placed, local_midnight, reference_date
from prime_rl.analysis.log_files import _CUT, _distinct, _head, _places, _tail, _time_order, log_of, open_log
from prime_rl.analysis.tagged import EXAMPLES, NUM, READ, STEP, VALUE, Event, ParseStats, TaggedLines
from prime_rl.analysis.thresholds import Thresholds
from prime_rl.analysis.time_order import TimeOrder

_SCAN_VERSION = 7
"""The version of ``_scan.c`` this module speaks (its ``VERSION``)."""
try:  # the chunk scan in C, built by the package's install (setup.py); without it, the same in Python
    from prime_rl.analysis import _scan
except ImportError:  # a source tree run from PYTHONPATH, or a machine that could not build it
    _scan = None


def _usable(module):
    """``module`` if it is a build of the C scan this parser speaks, else None with a warning (a
    build left in the source tree by an older checkout takes other arguments)."""
    if module is not None and getattr(module, "VERSION", None) != _SCAN_VERSION:
        warnings.warn(
            f"{module.__file__} is a build of another version of the C scan: the Python scan is used "
            "(reinstall the package, e.g. make install, to rebuild it)",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return module


_scan = _usable(_scan)

TAGS = (
    b"weights",
    b"ckpt",
    b"gen",
    b"rollout",
    b"verify",
    b"collect",
    b"train",
    b"env",
    b"server",
    b"hang",
    b"launcher",
)
_TAG_ALT = b"|".join(TAGS)
_MARKERS = re.compile(rb"\[(?:" + _TAG_ALT + rb")\]")
# from a marker: the tag, an optional trace id, then whitespace and the rest of the line (no rest:
# the marker is not followed by whitespace, a malformed line)
_AT_MARKER = re.compile(rb"\[(" + _TAG_ALT + rb")\](?:\[([A-Za-z0-9_.-]{1,64})\])?(?:[ \t]+([^\n]*))?")
_TAG_LIST = [t.decode() for t in TAGS]
_TAG_SERIES = pl.Series("tag", _TAG_LIST, dtype=pl.String)
"""The tags by their index in :data:`TAGS` (the C scan gives a line's tag by it)."""
_EVENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
# loguru's file and console prefixes (logging.LOG_FORMAT, CONSOLE_FORMAT): the message starts after it
_LOGURU_PREFIX = re.compile(rb"(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}\.\d{3} \| [A-Z]+ *\| ")
# a tagged-looking head with a tag the analyzer does not know, from the bracket after its "["
_UNKNOWN_HEAD = (
    rb"(?!(?:"
    + _TAG_ALT
    + rb")\])([A-Za-z0-9_.-]+)\](?:\[[A-Za-z0-9_.-]{1,64}\])?[ \t]+[A-Za-z_][A-Za-z0-9_.]*[= \t\n]"
)
# the head where a line or a loguru message starts (in decoded text; a line read with a newline
# before and after it); it begins with the literal "[" (the lookbehinds come after it), so the
# regex engine skips to each "[" instead of trying every position
_UNKNOWN_S = re.compile(r"\[(?:(?<=\n\[)|(?<=\| \[))" + _UNKNOWN_HEAD.decode(), re.ASCII)
_UNKNOWN_AT = re.compile(rb"\[" + _UNKNOWN_HEAD)
"""The head from a "[" where the caller found a line or a loguru message to start."""
TAG_NAMED = 40
"""An unknown tag longer than this many characters is counted by its first 40 and its length."""


def _tag_name(tag: str) -> str:
    """An unknown tag as it is counted: itself, or a long one's first :data:`TAG_NAMED` characters and
    its length (a 5000-character tag is one too, not a key of 5000 characters in summary.json)."""
    return tag if len(tag) <= TAG_NAMED else f"{tag[:TAG_NAMED]}... ({len(tag)} characters)"


def _count_unknown(unknown: Counter, first: dict[str, int] | None, tag: str, line: int) -> None:
    """Count one line with the unknown tag ``tag`` at line ``line`` of its chunk (from 0), the first
    line of each tag kept in ``first``."""
    name = _tag_name(tag)
    unknown[name] += 1
    if first is not None and name not in first:
        first[name] = line


_MARKER_HEADS = tuple(b"[" + t + b"]" for t in TAGS)
# the same as str patterns, for lines already decoded (ASCII: \\d is 0-9 only, as in the bytes patterns)
_MARKERS_S, _LOGURU_PREFIX_S, _AT_MARKER_S = (
    re.compile(r.pattern.decode(), re.ASCII) for r in (_MARKERS, _LOGURU_PREFIX, _AT_MARKER)
)
_LOGURU_LEN = 36
"""Length of loguru's file prefix ``YYYY-MM-DD HH:MM:SS.mmm | LEVEL    | `` (levels padded to 8)."""
_DENSE = 512
"""A chunk with a marker in every this many bytes or more is split into lines by polars' reader."""
_SAMPLE = 1 << 18
"""The density is judged on a chunk's first this many bytes."""
CHUNK = 8 << 20
SCANNERS = 2
"""Chunks scanned at a time, each in a thread of its own (most of a scan is numpy, polars and reads,
which run without the GIL): 6% off the whole report of the 10M-line realistic log on two cores."""
MIN_BUFFER = 64 << 10
"""The smallest read buffer (see :func:`_buffer_size`)."""
BUFFERS = SCANNERS + 1
"""Read buffers of a file, used in turn: :data:`SCANNERS` chunks are scanned while the next is read
into the buffer whose scan is done."""
BATCH_ROWS = 1 << 16
"""Tagged lines folded together (at least; one file's, from whole chunks): the collector's column
work costs per batch, so small batches of a log with few tagged lines would cost more than their lines."""


def _buffer_size(f) -> int:
    """:data:`CHUNK`, or less for an uncompressed file ``f`` that fits: the size it has and a byte
    (then one read finds its end), but at least :data:`MIN_BUFFER` bytes (a file that grows while it
    is read is read on in chunks that double up to :data:`CHUNK`). Zeroing three 8 MB buffers took 11 ms, a quarter of the
    analysis of a log of a few lines."""
    if isinstance(f, gzip.GzipFile):  # its size says nothing of what it holds
        return CHUNK
    st = os.fstat(f.fileno())
    if not stat.S_ISREG(st.st_mode):  # not a file (discover refuses those): no size to go by
        return CHUNK
    return min(CHUNK, max(MIN_BUFFER, st.st_size + 1))


def _chunks(
    path: Path, cut: list[str], buffers: int = 1, torn: list[bytes] | None = None
) -> Generator[tuple[bytearray, int], None, None]:
    """Whole lines in big chunks (at most :data:`CHUNK` bytes, or one line when it is longer), read
    into ``buffers`` buffers kept for the whole file, in turn, and yielded as they are, with the
    chunk's size: the chunk is the buffer's first ``size`` bytes, valid until ``buffers`` more chunks
    are asked for (a copy of each cost 0.3 s a GB, most of it the page faults of a fresh 8 MB every
    time); the bytes after ``size`` are not the chunk's and may change. A final line without
    newline is not yielded: it is added to ``torn``, when given (loguru ends every line with a
    newline, so that line was cut as it was written: a log copied while it was written, a
    compressed one cut short).
    A compressed file that ends early or is corrupt yields what it held up to there (it is read a
    decompression step at a time); the error is added to ``cut`` (a log copied while it was
    written, a crash while it was compressed).
    An uncompressed file smaller than a chunk gets buffers of its size (:func:`_buffer_size`)."""
    turn = 0
    have = 0  # bytes read into buf and not yet yielded: the start of a line the last read cut
    error: str | None = None
    with open_log(path) as f:
        first = _buffer_size(f)
        bufs = [bytearray(first) for _ in range(buffers)]
        buf = bufs[0]
        fill = f.readinto1 if isinstance(f, gzip.GzipFile) else f.readinto
        done = False
        while not done:
            with memoryview(buf) as view:
                try:
                    while have < len(buf) and (got := fill(view[have:])):
                        have += got
                    done = have < len(buf)  # the end of the file
                except _CUT as e:
                    error, done = f"{type(e).__name__}: {e}", True
            end = buf.rfind(b"\n", 0, have) + 1
            if done and end < have and torn is not None:  # the file's last line has no newline
                torn.append(bytes(buf[end:have]))
            if not end:
                if done:
                    break
                buf.extend(bytes(len(buf)))  # one line longer than the buffer: a bigger buffer
                continue
            yield buf, end
            turn = (turn + 1) % buffers
            nxt = bufs[turn]
            want = len(buf)
            if not done and want < CHUNK:  # a file that grew after it was opened: reads twice as big
                want = min(CHUNK, 2 * want)
            if len(nxt) < want:
                nxt.extend(bytes(want - len(nxt)))
            with memoryview(buf) as view, memoryview(nxt) as to:
                to[: have - end] = view[end:have]  # the cut line's start, to the front of the next
            buf = nxt
            have -= end
    if error is not None:
        cut.append(error)


def scan_files(
    paths: list[tuple[str, Path]],
    stats: ParseStats | None = None,
    fields: Mapping[str, Sequence[str]] | None = None,
    kinds: Mapping[str, Mapping[str, int]] | None = None,
    jump_s: float = Thresholds.model_fields["time_jump_s"].default,
) -> Iterator[TaggedLines]:
    """The tagged lines of ``(label, path)`` pairs, chunk by chunk, file by file, in file order (each
    label's files in time order where their dated lines contradict it:
    :func:`~prime_rl.analysis.log_files._time_order`).
    ``fields``: the fields of each tag to read while the lines are taken apart, where the C scan
    can (:meth:`~prime_rl.analysis.tagged.TaggedLines.fields` finds them read); ``kinds``: of those,
    per tag, the ones also read as numbers or steps (:data:`~prime_rl.analysis.tagged.NUMBER`,
    :data:`~prime_rl.analysis.tagged.STEP_NUMBER`; :meth:`~prime_rl.analysis.tagged.TaggedLines.numbers`
    finds them converted). ``jump_s``: a line further than this from both lines around it in its
    file is left out (:mod:`~prime_rl.analysis.time_order`; 0: none is)."""
    stats = stats if stats is not None else ParseStats()
    start = time.perf_counter()
    paths = _distinct(paths, stats)
    heads = [_head(p) for _, p in paths]
    tails = [_tail(p) for _, p in paths]
    order = _time_order(paths, heads, tails, stats)
    paths, heads, tails = ([x[i] for i in order] for x in (paths, heads, tails))
    stats.ref_date = reference_date(heads)
    clock = Clock(stats.ref_date)
    places = _places(paths, heads, tails, stats.ref_date)
    events_seen: set[str] = set()
    read = {tag: tuple(fields.get(tag, ())) for tag in _TAG_LIST} if fields and _scan is not None else None
    kinds = {tag: dict(kinds.get(tag, {})) for tag in _TAG_LIST} if read and kinds else None
    with ThreadPoolExecutor(SCANNERS, thread_name_prefix="analyzer-scan") as pool:
        yield from _scan_paths(paths, stats, clock, places, events_seen, pool, read, kinds, jump_s)
    stats.seconds += time.perf_counter() - start


def _scan_paths(
    paths: list[tuple[str, Path]],
    stats: ParseStats,
    clock: Clock,
    places: dict[str, tuple[Placed, float | None]],
    events_seen: set[str],
    pool: ThreadPoolExecutor,
    read: dict[str, tuple[str, ...]] | None,
    kinds: dict[str, dict[str, int]] | None,
    jump_s: float,
) -> Iterator[TaggedLines]:
    keys: tuple = ()  # the C scan's fields and kinds arguments
    if read:
        keys = (tuple(tuple(k.encode() for k in read[tag]) for tag in _TAG_LIST),)
        if kinds:
            keys += (tuple(bytes(kinds[tag].get(k, 0) for k in read[tag]) for tag in _TAG_LIST),)
    previous = None
    for label, path in paths:
        stats.files.append(str(path))
        log = log_of(str(path))
        place, began = places.get(log, (None, None))
        clock.new_file(place.date if place else None, began, same_log=log == previous)
        previous = log
        lines_before = 0  # lines of this file in earlier chunks: a line is named file:line
        last = b""
        pending = _Pending(path, clock, stats, events_seen, jump_s)
        cut: list[str] = []
        torn: list[bytes] = []
        for found in _scanned(_chunks(path, cut, BUFFERS, torn), pool, keys):
            last = found.last or last
            found.into(pending, lines_before + 1)
            stats.lines += found.lines
            lines_before += found.lines
            if pending.rows >= BATCH_ROWS:
                yield from _batch(pending, label, path, stats, read, kinds)
        if pending.rows:
            yield from _batch(pending, label, path, stats, read, kinds, final=True)
        pending.count_bad()  # malformed lines after the last batch
        if torn:  # the last line, cut as it was written: a line of the file, no event
            stats.lines += 1
            lines_before += 1
            last = _last_line_of(torn[0], len(torn[0])) or last
            _torn_line(stats, path, lines_before, torn[0])
        if cut:
            stats.cut_files.append(f"{path}: cannot be read past line {lines_before} ({cut[0]})")
        _last_line(stats, path, last, clock)
        if clock.undated and place is not None:
            stats.undated.setdefault(log, place)


def _batch(
    pending: _Pending,
    label: str,
    path: Path,
    stats: ParseStats,
    read: dict[str, tuple[str, ...]] | None,
    kinds: dict[str, dict[str, int]] | None,
    final: bool = False,
) -> Iterator[TaggedLines]:
    """The pending lines as a batch (:meth:`_Pending.flush`; ``final``: the file's last), each
    tag's lines given the fields (and numbers) the C scan read; none when every pending line was
    malformed or is held (an empty batch has no last line to name)."""
    lines = TaggedLines(pending.flush(final), label, path, None, stats)
    if not len(lines):
        return
    if read:
        lines.take_read(read, kinds)
    yield lines


def _scanned(
    chunks: Generator[tuple[bytearray, int], None, None],
    pool: ThreadPoolExecutor,
    keys: tuple = (),
) -> Iterator[_Found]:
    """Each chunk of ``chunks`` (read into :data:`BUFFERS` buffers in turn) scanned in ``pool`` (the
    fields of each tag read by the C scan: ``keys``, its fields and kinds arguments), in order. At most ``BUFFERS - 1`` chunks are in
    the pool when the next is read, so the buffer it is read into is no longer scanned. When the caller stops early, the scans still running are waited
    for and the file is closed."""
    waiting: deque[Future] = deque()
    try:
        for chunk, size in chunks:
            waiting.append(pool.submit(_scan_chunk, chunk, size, keys))
            while len(waiting) >= BUFFERS or (waiting and waiting[0].done()):
                yield waiting.popleft().result()
        while waiting:
            yield waiting.popleft().result()
    finally:
        for f in waiting:
            f.cancel()
        for f in waiting:
            if not f.cancelled():
                f.exception()
        chunks.close()


def parse_files(paths: list[tuple[str, Path]], stats: ParseStats | None = None) -> Iterator[Event]:
    """Events from ``(label, path)`` pairs, file by file, in file order (:func:`scan_files`, one
    :class:`Event` per line: for tests and small logs)."""
    for lines in scan_files(paths, stats):
        yield from (lines.event(i) for i in range(len(lines)))


_NL = 10
# the head alone: "[tag]" or "[tag][trace id]"
_HEAD_TOKEN = r"^\[([a-z]+)\](?:\[([A-Za-z0-9_.-]{1,64})\])?$"
# a tagged line's message from its marker: tag, trace id, then whitespace, the first word (an
# event, or the first key=value of an event-less line) and the rest (no whitespace after the
# marker: no first word, a malformed line)
_HEAD = r"^\[([a-z]+)\](?:\[([A-Za-z0-9_.-]{1,64})\])?(?:[ \t]+\s*(\S+)(?:\s+(.*))?)?"


class _Pending:
    """One file's tagged lines read so far and not yet yielded: those in loguru's file format as
    text (taken apart together, column-wise, when the batch is full), the others already parsed.
    Their times are judged against the lines around them (``jump_s``: :class:`TimeOrder`)."""

    def __init__(
        self, path: Path, clock: Clock, stats: ParseStats, events_seen: set[str], jump_s: float = 0.0
    ) -> None:
        self.path, self.clock, self.stats, self.events_seen = path, clock, stats, events_seen
        self.order = TimeOrder(path, stats, jump_s)
        self.held: pl.DataFrame | None = None
        """The last lines of the batch before, from its last line with a time on (:meth:`TimeOrder.judge`)."""
        self.lines: list[pl.Series] = []
        self.numbers: list[pl.Series] = []
        self.other: list[pl.DataFrame] = []
        self.parsed: list[pl.DataFrame] = []
        self.bad: list[tuple[int, str]] = []
        """Malformed lines (line, text) not yet counted: the first by line (:meth:`_add_bad`)."""
        self.bad_count = 0
        self.rows = 0

    def add_loguru(self, lines: pl.Series, numbers: pl.Series) -> None:
        """Lines in loguru's file format whose message starts with a marker, and their numbers."""
        if len(lines):
            self.lines.append(lines)
            self.numbers.append(numbers.cast(pl.Int64))
            self.rows += len(lines)

    def add_other(self, texts: list[str], numbers: list[int]) -> None:
        """Lines in other formats with a marker somewhere (parsed now, one by one)."""
        frame, malformed = _other_lines(texts, numbers, self.clock, self.events_seen)
        self._add_bad([(numbers[i], texts[i]) for i in malformed])
        if frame is not None and frame.height:
            self.other.append(frame)
            self.rows += frame.height

    def add_parsed(self, head: pl.DataFrame) -> None:
        """Lines in loguru's file format the C scan took apart (:func:`_clean_lines`: the columns
        :func:`_finish` makes, and the fields the scan read)."""
        self.parsed.append(head)
        self.rows += head.height

    def flush(self, final: bool = False) -> pl.DataFrame:
        """The lines as one frame (:data:`~prime_rl.analysis.tagged.SCHEMA`), in line order; the
        malformed ones counted (:meth:`count_bad`), those out of time order left out and, unless
        ``final`` (the file's end), the last ones held for the next (:meth:`TimeOrder.judge`)."""
        frames = self.other
        if self.lines:
            lines, numbers = pl.concat(self.lines), pl.concat(self.numbers)
            frame, malformed = _loguru_lines(lines, numbers, self.clock, self.events_seen)
            self._add_bad([(numbers[i], lines[i]) for i in malformed])
            frames = [frame, *frames]
        if self.parsed:  # finished by the C scan (which left the malformed lines to the others)
            frames = [self.parsed[0] if len(self.parsed) == 1 else pl.concat(self.parsed), *frames]
        # the lines the C scan took apart have the fields it read; the others null there
        parts = [] if self.held is None else [self.held]  # lines before all of these
        if frames:
            frame = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal").sort("line")
            self.stats.tagged += frame.height
            parts.append(frame)
        frame = parts[0] if len(parts) == 1 else pl.concat(parts, how="diagonal_relaxed")
        frame, self.held = self.order.judge(frame, final)
        self.lines, self.numbers, self.other, self.parsed = [], [], [], []
        self.rows = self.held.height if self.held is not None else 0
        self.count_bad()
        return frame

    def _add_bad(self, bad: list[tuple[int, str]]) -> None:
        """Malformed lines (line, text), counted at :meth:`count_bad` (but free-form warnings:
        :func:`_free_form`); of those, only the first :data:`~prime_rl.analysis.tagged.EXAMPLES` by
        line can be named, so only they are kept (a file of malformed lines could otherwise be held
        until its end)."""
        bad = [(line, text) for line, text in bad if not _free_form(text)]
        self.bad_count += len(bad)
        self.bad += [(line, text[:_EXAMPLE_CHARS]) for line, text in bad]
        if len(self.bad) > 4 * EXAMPLES:
            self.bad = sorted(self.bad)[:EXAMPLES]

    def count_bad(self) -> None:
        """Count the malformed lines read so far, the first few named in line order (whichever way
        each was taken apart)."""
        stats = self.stats
        stats.malformed += self.bad_count
        for line, text in sorted(self.bad):
            if len(stats.malformed_examples) >= EXAMPLES:
                break
            stats.malformed_examples.append(f"{self.path}:{line}: {text}")
        self.bad, self.bad_count = [], 0


_LEVEL_S = re.compile(r"(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}\.\d{3} \| ([A-Z]+) *\| ", re.ASCII)
"""Loguru's file or console prefix, with the line's level."""


def _free_form(text: str) -> bool:
    """Whether a line with a tag's head that does not follow the grammar is a free-form message, not a
    malformed timing line: loguru wrote it at another level than INFO. Every timing line is written
    at INFO (``logging.log_tagged``); warnings and errors may start with a ``[weights][tid]`` head
    for grepping (the admin client's "... failed (...); retry 1 in 0.50s", a refused update), and
    the analyzer ignores them (docs/design.md)."""
    m = _LEVEL_S.match(text)
    return m is not None and m.group(1) != "INFO"


# loguru's file prefix (exactly _LOGURU_LEN characters) with a known marker where the message starts
_LOGURU_TAGGED = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} \| [A-Z ]{8}\| \[(?:"
    + _TAG_ALT.decode()
    + r")\]"
)


class _Found:
    """What the scan of one chunk found, its lines numbered from the chunk's start (0: its first
    line): chunks are scanned side by side, and added to the file's batch in order (:meth:`into`),
    once the lines before them are counted."""

    __slots__ = (
        "lines",
        "last",
        "loguru",
        "numbers",
        "texts",
        "text_numbers",
        "unknown",
        "unknown_at",
        "parsed",
    )

    def __init__(self, last: bytes) -> None:
        self.lines = 0
        """The chunk's number of lines."""
        self.last = last
        """The start of its last non-empty line (:func:`_last_line_of`)."""
        self.loguru: pl.Series | None = None
        self.numbers: np.ndarray | None = None
        self.texts: list[str] = []
        self.text_numbers: list[int] = []
        self.unknown: Counter = Counter()
        """The unknown tags it holds, counted."""
        self.unknown_at: dict[str, int] = {}
        """The line (from the chunk's start) of each unknown tag's first line."""
        self.parsed: pl.DataFrame | None = None
        """Lines the C scan took apart (:func:`_clean_lines`), to be finished (:func:`_finish`)."""

    def add_loguru(self, lines: pl.Series, numbers: np.ndarray) -> None:
        """Lines in loguru's file format whose message starts with a marker (:meth:`_Pending.add_loguru`)."""
        self.loguru, self.numbers = lines, numbers

    def add_other(self, texts: list[str], numbers: list[int]) -> None:
        """Lines in other formats with a marker somewhere (:meth:`_Pending.add_other`)."""
        self.texts, self.text_numbers = texts, numbers

    def add_parsed(self, head: pl.DataFrame) -> None:
        """Lines already taken apart (:meth:`_Pending.add_parsed`)."""
        self.parsed = head

    def into(self, pending: _Pending, first_line: int) -> None:
        """Add the chunk's lines to ``pending`` (the chunk starts at line ``first_line``)."""
        if self.parsed is not None:
            pending.add_parsed(self.parsed.with_columns(pl.col("line") + first_line))
        if self.loguru is not None:
            pending.add_loguru(self.loguru, pl.Series(self.numbers + first_line))
        if self.texts:
            pending.add_other(self.texts, [n + first_line for n in self.text_numbers])
        if self.unknown:
            pending.stats.unknown_tags.update(self.unknown)
            for tag, line in self.unknown_at.items():
                pending.stats.unknown_tag_lines.setdefault(tag, f"{pending.path}:{line + first_line}")


def _scan_chunk(chunk: bytes | bytearray, size: int, keys: tuple = ()) -> _Found:
    """The tagged lines of one chunk, the first ``size`` bytes of ``chunk``, its number of lines,
    its last line and its unknown tags counted (the buffer's bytes after them are not the chunk's).
    A chunk dense with tagged lines is split into lines by polars' reader (one column, no quoting);
    lines in loguru's file format with a marker where the message starts (nearly all tagged lines)
    are kept as text for :func:`_loguru_lines`, the other lines with a marker are parsed one by one.
    In a sparse chunk the markers are found from its brackets (:func:`_brackets`). Where the C scan
    is built, it does all of this, whatever the chunk (:func:`_scan_c`)."""
    if _scan is not None:
        return _scan_c(chunk, size, keys)
    sample = min(size, _SAMPLE)
    if (
        # few tagged lines: cheaper found from their markers
        chunk.count(b"[", 0, sample) * _DENSE < sample
        or sum(1 for _ in _MARKERS.finditer(chunk, 0, sample)) * _DENSE < sample
        # lines polars' reader would not keep as they are (it splits at NUL, drops the \r of CRLF
        # and a byte-order mark); "\r" first: a search for it alone is 15x faster
        or chunk.find(b"\x00", 0, size) >= 0
        or (chunk.find(b"\r", 0, size) >= 0 and chunk.find(b"\r\n", 0, size) >= 0)
        or chunk.startswith(b"\xef\xbb\xbf")
    ):
        return _scan_sparse(chunk, size, _Found(_last_line_of(chunk, size)))
    n = chunk.count(b"\n", 0, size)
    text = pl.read_csv(
        bytes(memoryview(chunk)[:size]),
        has_header=False,
        separator="\x00",
        quote_char=None,
        schema={"text": pl.String},
        encoding="utf8-lossy",
    ).get_column("text")
    found = _Found(_last_line_of(chunk, size))
    if len(text) != n:  # never seen; the line numbers must be right
        return _scan_sparse(chunk, size, found)
    t = pl.col("text")
    fast = t.str.contains(_LOGURU_TAGGED).fill_null(False)
    # where an unknown tag's head may be: at a line's start or after "| " (a loguru line whose
    # message starts with a known marker has its first "| [" taken by it)
    maybe = (
        pl.when(fast)
        .then(t.str.count_matches("| [", literal=True) > 1)
        .otherwise(t.str.starts_with("[") | t.str.contains("| [", literal=True))
        .fill_null(False)
    )
    frame = pl.DataFrame({"text": text}).with_row_index("line").with_columns(fast=fast, maybe=maybe)
    unknown = found.unknown
    maybe_lines = frame.filter("maybe")
    for i, line in zip(
        maybe_lines.get_column("line").to_list(), maybe_lines.get_column("text").to_list(), strict=True
    ):
        for m in _UNKNOWN_S.finditer(f"\n{line}\n"):
            _count_unknown(unknown, found.unknown_at, m.group(1), i)
    frame = frame.filter(pl.col("fast") | t.str.contains(_MARKERS_S.pattern))
    if frame.height:
        loguru = frame.filter("fast")
        found.add_loguru(loguru.get_column("text"), loguru.get_column("line").to_numpy())
        if loguru.height < frame.height:
            other = frame.filter(~pl.col("fast"))
            found.add_other(other.get_column("text").to_list(), other.get_column("line").to_list())
    found.lines = n
    return found


def _scan_sparse(chunk: bytes | bytearray, size: int, found: _Found) -> _Found:
    """:func:`_scan_chunk` from the chunk's markers, found from its brackets (:func:`_brackets`)
    and numpy."""
    marks = _brackets(chunk, size, found.unknown, found.unknown_at)
    if not marks:
        found.lines = chunk.count(b"\n", 0, size)
        return found
    data = np.frombuffer(chunk, np.uint8, size)
    newlines = np.flatnonzero(data == _NL)
    pos = np.asarray(marks, dtype=np.int64)
    line_no = np.searchsorted(newlines, pos)
    first = np.flatnonzero(np.diff(line_no, prepend=-1))  # the first marker of each line
    pos, line_no = pos[first], line_no[first]
    starts = np.where(line_no > 0, newlines[np.maximum(line_no - 1, 0)] + 1, 0)
    found.lines = len(newlines)
    ends = newlines[line_no]
    texts = [
        chunk[a:b].decode("utf-8", "replace") for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
    ]
    return _marked_lines(chunk, size, line_no, starts, pos, texts, found)


def _scan_c(chunk: bytes | bytearray, size: int, keys: tuple = ()) -> _Found:
    """:func:`_scan_chunk` by the C scan (``_scan.scan``): one pass without the GIL counts the
    lines, finds the markers and the unknown-tag candidates, and takes apart the lines in the shape
    ``format_tagged`` writes through loguru's file sink (nearly all; :func:`_clean_lines`), reading
    each tag's fields (``keys``: the scan's fields and kinds arguments, or none); the other lines with
    a marker go the way the Python scan sends them (:func:`_marked_lines`)."""
    found = _Found(_last_line_of(chunk, size))
    found.lines, candidates, rows, texts, clean = _scan.scan(chunk, size, _MARKER_HEADS, True, *keys)
    line, counted = 0, 0  # the line of position ``counted`` (the candidates come in order)
    for p in np.frombuffer(candidates, np.int64).tolist():
        m = _UNKNOWN_AT.match(chunk, p, size)
        if m:
            line, counted = line + chunk.count(b"\n", counted, p), p
            _count_unknown(found.unknown, found.unknown_at, m.group(1).decode(), line)
    if rows:
        line_no, starts, _, pos = np.frombuffer(rows, np.int64).reshape(-1, 4).T
        _marked_lines(chunk, size, line_no, starts, pos, texts, found)
    if clean is not None:
        _clean_lines(clean, found)
    return found


class _ArrowColumn:
    """A column the C scan made, for ``pl.Series`` (the Arrow PyCapsule interface: no copy through
    Python). It can be taken once: the taker owns the column's memory after."""

    __slots__ = ("_capsules",)

    def __init__(self, capsules: tuple[object, object]) -> None:
        self._capsules: tuple[object, object] | None = capsules

    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]:
        capsules, self._capsules = self._capsules, None
        if capsules is None:
            raise RuntimeError("a column of the C scan is taken once")
        return capsules


@lru_cache(maxsize=4096)
def _midnight(date: int) -> float:
    """Local midnight of the date ``YYYYMMDD`` in epoch seconds; NaN when it is no date."""
    value = local_midnight(f"{date // 10000:04d}-{date // 100 % 100:02d}-{date % 100:02d}")
    return math.nan if value is None else value


def _clean_lines(clean: tuple, found: _Found) -> None:
    """The lines the C scan took apart, as :func:`_loguru_lines` and :func:`_finish` take them apart
    (the timestamp is the same sum, in the same order, of local midnight and the time of day; the
    event and the fields part made in C as :func:`_finish` makes them). None of them is malformed: the
    C scan leaves those to :func:`_marked_lines`."""
    lines, dates, times, tags, tid, event, rest, values, nums, steps = clean
    date = np.frombuffer(dates, np.int32)
    h, m, sec, ms = np.frombuffer(times, np.int32).reshape(-1, 4).T.astype(np.int64)
    keys, inverse = np.unique(date, return_inverse=True)
    day = np.array([_midnight(k) for k in keys.tolist()], dtype=np.float64)[inverse]
    ok = (h <= 23) & (m <= 59) & (sec <= 60)
    ts = np.where(ok, day + h * 3600 + m * 60 + sec, np.nan) + ms / 1000.0
    found.add_parsed(
        pl.DataFrame(
            {
                "line": np.frombuffer(lines, np.int64),
                "ts": pl.Series("ts", ts, nan_to_null=True),
                "tag": _TAG_SERIES.gather(np.frombuffer(tags, np.uint8)),
                "tid": pl.Series(_ArrowColumn(tid)),
                "event": pl.Series(_ArrowColumn(event)),
                "rest": pl.Series(_ArrowColumn(rest)),
                **({READ: pl.repeat(True, len(ts), eager=True)} if values else {}),
                **{f"{VALUE}{j}": pl.Series(_ArrowColumn(v)) for j, v in enumerate(values)},
                **{f"{NUM}{j}": pl.Series(_ArrowColumn(v)) for j, v in enumerate(nums) if v is not None},
                **{f"{STEP}{j}": pl.Series(_ArrowColumn(v)) for j, v in enumerate(steps) if v is not None},
            }
        )
    )


_PREFIX_DIGITS = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22]
"""Where loguru's prefix ``YYYY-MM-DD HH:MM:SS.mmm | LEVEL    | `` has digits, and its other bytes
but the level's (:data:`_PREFIX_SIGN_BYTES`)."""
_PREFIX_SIGNS = [4, 7, 10, 13, 16, 19, 23, 24, 25, 34, 35]
_PREFIX_SIGN_BYTES = np.frombuffer(b"-- ::. | | ", np.uint8)


def _marked_lines(
    chunk: bytes | bytearray,
    size: int,
    numbers: np.ndarray,
    starts: np.ndarray,
    pos: np.ndarray,
    texts: list[str],
    found: _Found,
) -> _Found:
    """Add to ``found`` the lines with a marker (their numbers, where they start, where their first
    marker is and their text): those in loguru's file format with the marker where the message
    starts for :func:`_loguru_lines`, the others for :func:`_other_lines`."""
    data = np.frombuffer(chunk, np.uint8, size)
    fast = (pos - starts) == _LOGURU_LEN
    if fast.any():  # "YYYY-MM-DD HH:MM:SS.mmm | LEVEL   | [tag]"
        # the prefix the dense scan's pattern (_LOGURU_TAGGED) takes, byte by byte: any other line
        # is taken apart by _other_lines (which splits on any whitespace) in every scan. Such a
        # prefix is ASCII: _loguru_lines cuts the message at the 36th character, which is then the
        # 36th byte (a level like "INFÖ" put the marker at character 35, and the line was malformed)
        head = data[starts[fast][:, None] + np.arange(_LOGURU_LEN)]
        ok = ((head[:, _PREFIX_DIGITS] >= 48) & (head[:, _PREFIX_DIGITS] <= 57)).all(axis=1)
        ok &= (head[:, _PREFIX_SIGNS] == _PREFIX_SIGN_BYTES).all(axis=1)
        level = head[:, 26:34]
        ok &= (((level >= 65) & (level <= 90)) | (level == 32)).all(axis=1)
        fast[np.flatnonzero(fast)[~ok]] = False
    if fast.all():
        found.add_loguru(pl.Series(texts, dtype=pl.String), numbers)
        return found
    if fast.any():
        found.add_loguru(
            pl.Series([texts[i] for i in np.flatnonzero(fast).tolist()], dtype=pl.String), numbers[fast]
        )
    slow = np.flatnonzero(~fast)
    found.add_other([texts[i] for i in slow.tolist()], numbers[slow].tolist())
    return found


def _loguru_lines(
    line: pl.Series, numbers: pl.Series, clock: Clock, events_seen: set[str]
) -> tuple[pl.DataFrame, list[int]]:
    """Lines with loguru's file prefix and a marker right after it, column-wise, in one query:
    the timestamp (local midnight of the date from ``clock``, once per date, plus the time of day;
    null where ``clock`` would give none: no date and time, hour over 23, minute over 59, second
    over 60), the head's tag and trace id, the first word and the rest. Messages with single spaces
    between the head and the first two words (all that ``format_tagged`` writes) are split on them,
    the others go through the regex :data:`_HEAD`. Returns the lines and the indices of the
    malformed ones."""
    text, msg = pl.col("text"), pl.col("text").str.slice(_LOGURU_LEN)
    h, m, s = (text.str.slice(at, 2).cast(pl.Int64, strict=False) for at in (11, 14, 17))
    frame = (
        pl.DataFrame({"text": line, "line": numbers})
        .lazy()
        .select(
            "line",
            date=text.str.slice(0, 10),
            h=h,
            m=m,
            s=s,
            ms=text.str.slice(20, 3).cast(pl.Int64, strict=False),
            ok=text.str.slice(0, 19).str.contains(_SECOND),
            parts=msg.str.splitn(" ", 3).struct.rename_fields(["head", "first", "rest"]),
            clean=~msg.str.contains(r"[\t\r\x0b\x0c]"),
        )
        .unnest("parts")
        .with_columns(
            names=pl.col("head").str.extract_groups(_HEAD_TOKEN).struct.rename_fields(["tag", "tid"])
        )
        .unnest("names")
        .collect()
    )
    dates = frame.get_column("date").unique().to_list()
    midnight = {d: clock.midnight(d) for d in dates}
    if len(dates) == 1:
        day = pl.lit(midnight[dates[0]], dtype=pl.Float64)
    else:
        day = pl.col("date").replace_strict(midnight, default=None, return_dtype=pl.Float64)
    ok = pl.col("ok") & (pl.col("h") <= 23) & (pl.col("m") <= 59) & (pl.col("s") <= 60)
    head = frame.select(
        "line",
        ts=pl.when(ok).then(day + pl.col("h") * 3600 + pl.col("m") * 60 + pl.col("s"))
        + pl.col("ms") / 1000.0,
        tag="tag",
        tid="tid",
        first="first",
        rest="rest",
        clean=(
            pl.col("clean") & pl.col("tag").is_in(_TAG_LIST) & (pl.col("first").str.len_bytes() > 0)
        ).fill_null(False),
    )
    clean = head.get_column("clean")
    head = head.drop("clean")
    if not clean.all():
        bad = (~clean).arg_true()
        other = line.gather(bad).str.slice(_LOGURU_LEN).str.extract_groups(_HEAD).struct.unnest()
        other.columns = ["tag", "tid", "first", "rest"]
        head = head.with_columns(
            *(head.get_column(c).scatter(bad, other.get_column(c)) for c in other.columns)
        )
    return _finish(head, events_seen)


_SECOND = r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}$"


_BAD_TOKEN = r"(?:^|\s)(?:=|[^\s=]+(?:\s|$))"
"""A token of a fields part that is no ``key=value``: one that starts with ``=`` or has none
(``dur_ms=5.0 garbage``, ``=5``). The grammar has nothing but ``key=value`` after the event."""


def _finish(head: pl.DataFrame, events_seen: set[str]) -> tuple[pl.DataFrame, list[int]]:
    """From (line, ts, tag, tid, first word, rest) to the lines' columns: the first word is the
    event, or (with a ``=``) the first field of an event-less line; lines without a first word,
    with one that is no event name, or with a token in the fields part that is no ``key=value``
    (:data:`_BAD_TOKEN`; an event-less line's first word among them) are malformed."""
    first = head.get_column("first")
    extra = [c for c in head.columns if c.startswith("_")]  # the fields the C scan read, kept as they are
    names = {w: _new_event(events_seen, w) for w in first.drop_nulls().unique().to_list() if "=" not in w}
    f, rest = pl.col("first"), pl.col("rest").fill_null("")
    frame = (
        head.lazy()
        .with_columns(eq=f.str.contains("=", literal=True).fill_null(False))
        .with_columns(
            pl.when("eq").then(pl.lit("")).otherwise(f).alias("event"),
            pl.when("eq").then(pl.concat_str([f, pl.lit(" "), rest])).otherwise(rest).alias("fields"),
        )
        .select(
            "line",
            "ts",
            "tag",
            "tid",
            "event",
            pl.col("fields").alias("rest"),
            *extra,
            (
                f.is_not_null()
                & (pl.col("eq") | f.replace_strict(names, default=False, return_dtype=pl.Boolean))
                & ~pl.col("fields").str.contains(_BAD_TOKEN)
            ).alias("valid"),
        )
        .collect()
    )
    valid = frame.get_column("valid")
    frame = frame.drop("valid")
    if valid.all():
        return frame, []
    return frame.filter(valid), (~valid).arg_true().to_list()


def _other_lines(
    texts: list[str], numbers: list[int], clock: Clock, events_seen: set[str]
) -> tuple[pl.DataFrame | None, list[int]]:
    """Lines in other formats with a marker, one by one: a marker after a loguru prefix that is not
    where the message starts is text; the timestamp is whatever the line starts with before its
    first marker. Returns the frame and the indices (into ``texts``) of the malformed lines."""
    rows: list[tuple] = []
    kept: list[int] = []
    for k, (text, number) in enumerate(zip(texts, numbers, strict=True)):
        pos = _MARKERS_S.search(text).start()  # type: ignore[union-attr]  # every line has one
        if pos:
            head = _LOGURU_PREFIX_S.match(text, 0, pos)
            if head is not None and head.end() != pos:
                continue  # a marker inside a free-form message: text, not a tagged line
        m = _AT_MARKER_S.match(text, pos)
        ts = clock(text[:pos]) if pos else None
        parts = m.group(3).split(None, 1) if m.group(3) else []  # type: ignore[union-attr]
        kept.append(k)
        rows.append(
            (
                number,
                ts,
                m.group(1),  # type: ignore[union-attr]
                m.group(2),  # type: ignore[union-attr]
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


def _brackets(
    chunk: bytes | bytearray, size: int, unknown: Counter, first: dict[str, int] | None = None
) -> list[int]:
    """The positions of the markers in the chunk's first ``size`` bytes, with the unknown tags
    counted into ``unknown`` (what :data:`_MARKERS` finds and :data:`_UNKNOWN_S` counts; ``first``:
    the line of each one's first, from the chunk's start), in one
    pass over the chunk's ``[``: ``bytes.find`` skips to each at memory speed where a regex engine
    steps through every byte, so a chunk with few brackets costs little more than reading it."""
    marks: list[int] = []
    find, at = chunk.find, chunk.startswith
    line, counted = 0, 0  # the line of position ``counted``
    p = find(b"[", 0, size)
    while p >= 0:
        if at(_MARKER_HEADS, p):
            marks.append(p)
        elif not p or chunk[p - 1] == _NL or (p > 1 and at(b"| ", p - 2)):
            m = _UNKNOWN_AT.match(chunk, p, size)
            if m:
                line, counted = line + chunk.count(b"\n", counted, p), p
                _count_unknown(unknown, first, m.group(1).decode(), line)
        p = find(b"[", p + 1, size)
    return marks


def _torn_line(stats: ParseStats, path: Path, line: int, raw: bytes) -> None:
    """A file's last line without a newline (line number ``line``): loguru ends every line with one,
    so it was cut as it was written (a log copied while it was written, a compressed one cut short),
    and a value in it may be cut too (``dur_ms=15`` of 1546.2). When it is a tagged line (the line
    the scan would have read: its first marker where its message starts, or anywhere in a line
    without loguru's prefix; not a free-form warning) it is counted as malformed and named in
    ``cut_lines``; none of its values is used."""
    text = raw.decode("utf-8", "replace")
    marker = _MARKERS_S.search(text)
    if marker is None or _free_form(text):
        return
    if marker.start():
        head = _LOGURU_PREFIX_S.match(text, 0, marker.start())
        if head is not None and head.end() != marker.start():
            return  # a marker inside a free-form message: text
    stats.malformed += 1
    stats.cut_lines.append(f"{path}:{line}: {text[:_EXAMPLE_CHARS]}")


_LAST_BYTES = 1200
"""Of a file's last line, the first this many bytes are kept (its first 300 characters are shown)."""


def _last_line_of(chunk: bytes | bytearray, size: int) -> bytes:
    """The start of the last non-empty line of the chunk's first ``size`` bytes, trailing
    whitespace stripped (b"": none), read from its end a window at a time (a copy of the whole
    chunk would cost more)."""
    end, window = size, 1 << 12
    while end:
        lo = max(end - window, 0)
        tail = chunk[lo:end].rstrip()
        if tail:
            end = lo + len(tail)
            start = chunk.rfind(b"\n", 0, end) + 1
            return bytes(chunk[start : min(end, start + _LAST_BYTES)])
        end, window = lo, window * 2
    return b""


def _last_line(stats: ParseStats, path: Path, line: bytes, clock: Clock) -> None:
    """Keep the file's last non-empty line and its timestamp."""
    text = line.decode("utf-8", "replace")[:300]
    if text:
        head = _LOGURU_PREFIX.match(line)
        stats.last_lines[str(path)] = (clock(text[: head.end()] if head else text[:40]), text)


_EXAMPLE_CHARS = 200
"""A malformed line is named with its first this many characters."""
