"""A file's tagged lines as columns: what the collector folds.

The parser (:mod:`~prime_rl.analysis.parser`) hands on a file's tagged lines in batches, each a
:class:`TaggedLines`: a polars frame with one row per tagged line (its line number in the file,
timestamp, tag, trace id, event and the ``key=value`` rest). The collector asks it for the fields
it needs, one column at a time (:meth:`TaggedLines.text`, :meth:`TaggedLines.num`), so no per-line
dict or object is made; a line is turned into an :class:`Event` only when one is kept (the last
line of a process, an open wait, a restart).

A batch can also be made of events (:meth:`TaggedLines.from_events`: tests, callers that build
events themselves); its fields then come from the events' dicts, with the same results.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import polars as pl

TRAIN_WAIT = ("train", "wait.start")
"""The trainer's line as it starts to wait for a step's rollouts."""
RUN_START = "run.start"
"""The line each process writes as it starts (``[gen]``/``[train] run.start step=``, the step it
starts at): :mod:`~prime_rl.analysis.restarts` splits a log appended over a restart there."""

RESUME_LOAD = ("ckpt", ("wait.start", "wait.done"))
"""The orchestrator's wait for weights: before its run's first ``[gen] batch.start`` (after its
``[gen] run.start``) it is a resume's load of ``weights/step_N``, which the resumed trainer loads and
publishes again (:func:`start_up`)."""


def start_up(frame: pl.DataFrame, loading: bool = False) -> np.ndarray:
    """Which lines of ``frame`` are a process starting, no time of the run: a :data:`RUN_START`, the
    trainer's :data:`TRAIN_WAIT` (it waits for its first rollouts while the servers load), and the
    orchestrator's wait for weights between its ``[gen] run.start`` and its first ``[gen]
    batch.start`` (:data:`RESUME_LOAD`; a fresh run generates its first batches before its first
    wait). ``loading``: the frame's lines before its first ``[gen]`` run.start or batch.start follow
    a run.start (an earlier batch's)."""
    tag, event = frame.get_column("tag"), frame.get_column("event")
    starting = (event == RUN_START) | ((tag == TRAIN_WAIT[0]) & (event == TRAIN_WAIT[1]))
    out = starting.fill_null(False).to_numpy()
    waits = ((tag == RESUME_LOAD[0]) & event.is_in(RESUME_LOAD[1])).fill_null(False).to_numpy()
    if waits.any():
        gen = (tag == "gen").fill_null(False).to_numpy()
        begun = gen & (event == RUN_START).fill_null(False).to_numpy()
        marks = begun | (gen & (event == "batch.start").fill_null(False).to_numpy())
        at = np.maximum.accumulate(np.where(marks, np.arange(len(out)), -1))
        out |= waits & np.where(at >= 0, begun[np.maximum(at, 0)], loading)
    return out


EXAMPLES = 5
"""How many malformed lines and bad values are kept as ``file:line: text`` examples."""


def tag_said(tag: str, event: str | None) -> str:
    """A line's tag and event as the reports name them: ``[gen] batch.done``, ``[rollout]`` (no event)."""
    return f"[{tag}] {event}" if event else f"[{tag}]"


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
    out_of_order: int = 0
    """Tagged lines left out: their time lies more than ``time_jump_s`` from both lines around them
    in their file, which lie within it of each other (:mod:`~prime_rl.analysis.time_order`)."""
    out_of_order_examples: list[str] = field(default_factory=list)
    """The first few as ``file:line: time``."""
    bad_times: int = 0
    """Tagged lines of a collector's log stamped more than a second before the ``[collect] run.start``
    above them (a clock set back after it): their time is used nowhere, as a line's without one; their
    values are (:mod:`~prime_rl.analysis.collector_runs`)."""
    bad_time_examples: list[str] = field(default_factory=list)
    """The first few as ``file:line: time, N s before its run's start``."""
    time_goes_back: int = 0
    """Lines kept where a file's time goes back by more than ``time_jump_s`` (logs joined out of
    order, a clock set back)."""
    time_goes_back_examples: list[str] = field(default_factory=list)
    """The first few as ``file:line: time, N s before an earlier line's time``."""
    unknown_tags: Counter = field(default_factory=Counter)
    """Lines that look tagged (``[x] event ...`` at a message's start) with a tag the analyzer does not read."""
    unknown_tag_lines: dict[str, str] = field(default_factory=dict)
    """Each unknown tag's first line, as ``file:line`` (a typo such as ``[weight]`` is found there)."""
    last_lines: dict[str, tuple[float | None, str]] = field(default_factory=dict)
    """Each file's last non-empty line with its timestamp: where a log ends (see stalls)."""
    clock_offsets: dict[str, tuple[float, int]] = field(default_factory=dict)
    """Trainer logs on a clock of their own, moved onto the orchestrator's as they were read: (seconds
    ahead, negative: behind; the steps measured on), by log (:mod:`~prime_rl.analysis.trainer_clock`)."""
    cut_lines: list[str] = field(default_factory=list)
    """Tagged lines cut as they were written, each a file's last line with no newline after it
    (loguru ends every line with one), as ``file:line: text``: counted in ``malformed``, none of
    their values used."""
    cut_files: list[str] = field(default_factory=list)
    """Files that could not be read to their end (a compressed log cut short or corrupt), as
    ``file: what went wrong after N lines``; their lines up to there are read."""
    duplicate_files: list[str] = field(default_factory=list)
    """Files read once that were given twice as different files (the same bytes; the same part of a log,
    one of them compressed; a console copy beside its process's log), as ``kept and left out: why``:
    their lines would be read twice."""
    reordered: list[str] = field(default_factory=list)
    """Processes whose files were read in another order than given, by their dated lines (a later run's
    log given before an earlier one's, rotated parts named against their times), as ``label: the files
    in the order read (given as the files in those places)`` (:func:`~prime_rl.analysis.parser.scan_files`):
    read as given, the later lines first would read as a restart."""
    ref_date: str | None = None
    """The earliest date of the logs (:func:`~prime_rl.analysis.clock.reference_date`)."""
    undated: dict[str, Any] = field(default_factory=dict)
    """Logs (:func:`~prime_rl.analysis.log_files.log_of` their files) whose times have no date (console
    captures): the date they were placed on and how (:class:`~prime_rl.analysis.clock.Placed`)."""
    seconds: float = 0.0


def is_duration(key: str) -> bool:
    """A field that holds a duration (``*_ms``): below 0 it is a bad value, as one that is no number
    (every process writes 0 or more; the weights client clamps its queue_ms at 0)."""
    return key.endswith("_ms")


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
    path: Path | None = None
    """The file it was read from (None: made, not read)."""
    line: int = 0
    """Its line number in that file."""
    stats: ParseStats | None = None
    """Where a bad value in it is counted."""
    bad: tuple[str, ...] = ()

    def num(self, key: str) -> float | None:
        """The field as a finite float; None when absent. A value that is no finite number, or a
        duration below 0 (:func:`is_duration`), counts as a bad value (once per event and key), named by file and line (:class:`ParseStats`)."""
        raw = self.fields.get(key)
        if raw is None:
            return None
        try:  # the grammar polars casts: float() alone would also take 1_000 and other digits than ASCII
            value = float(raw) if raw.isascii() and "_" not in raw else math.nan
        except ValueError:
            value = math.nan
        if math.isfinite(value) and not (value < 0 and is_duration(key)):
            return abs(value) if is_duration(key) else value  # a duration of -0 is 0
        if key not in self.bad:
            self.bad += (key,)
            stats = self.stats
            if stats is not None:
                stats.bad_values += 1
                if len(stats.bad_value_examples) < EXAMPLES:
                    stats.bad_value_examples.append(
                        f"{self.where()}: {key}={raw[:80]} ({tag_said(self.tag, self.event)})"
                    )
        return None

    def where(self) -> str:
        """``file:line`` of the line (``source`` when the event was not read from a file)."""
        return f"{self.path}:{self.line}" if self.path is not None else self.source

    def text(self) -> str:
        """The tagged part of the line again (for reports)."""
        head = f"[{self.tag}][{self.tid}]" if self.tid else f"[{self.tag}]"
        return " ".join(
            [head, *([self.event] if self.event else []), *(f"{k}={v}" for k, v in self.fields.items())]
        )


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


READ = "_read"
"""A frame column: true on the lines whose fields the C scan read as it took them apart (null on
the others); their values are in the columns :data:`VALUE` 0, 1, ... in the order of the tag's keys."""
VALUE = "_value"
NUM = "_num"
"""Frame columns :data:`NUM` 0, 1, ...: the C scan's :data:`VALUE` columns read as numbers where the
tag's kinds ask for it (null: no plain decimal there, or a line the scan did not take apart)."""
STEP = "_step"
"""Frame columns :data:`STEP` 0, 1, ...: the same values read as steps (1-8 digits, else null)."""
NUMBER = 1
"""A field's kind (``scan_files``' ``kinds``): read as a number by the C scan as well."""
STEP_NUMBER = 2
"""A field's kind: read as a step by the C scan as well."""

SCHEMA = {
    "line": pl.Int64,
    "ts": pl.Float64,
    "tag": pl.String,
    "tid": pl.String,
    "event": pl.String,
    "rest": pl.String,
}
"""The frame's columns: the line's number in its file, wall-clock seconds (null: none), tag,
trace id (null: none), event ("" for event-less lines) and the fields part of the line."""


@lru_cache(maxsize=256)
def _key_patterns(key: str) -> tuple[str, str, str]:
    """The first ``key=`` token's value, the last one's (the greedy prefix makes the match end at
    the last), and the literal that a line with the key twice has twice."""
    k = re.escape(key)
    return r"(?:^|\s)" + k + r"=(\S*)", r"^.*(?:^|\s)" + k + r"=(\S*)", key + "="


def _last_of_twice(raw: pl.Series, rest: pl.Series, twice: pl.Series, key: str) -> pl.Series:
    """``raw`` (each row's first value of ``key``) with the rows that give the key twice read again
    for their last value (as in a dict built left to right)."""
    if twice.any():
        rows = twice.arg_true()
        raw = raw.scatter(rows, rest.gather(rows).str.extract(_key_patterns(key)[1], 1))
    return raw.rename(key)


def fields_by_key(rest: pl.Series, keys: Sequence[str]) -> pl.DataFrame:
    """Each of ``keys`` (distinct) read from every ``rest`` on its own: one regex and one literal
    count per key over every row (the key's first value; a row that gives it twice read again for
    the last). Any text; :func:`read_fields` uses it for the rows of no common shape."""
    frame = pl.DataFrame({"rest": rest}).select(
        *(pl.col("rest").str.extract(_key_patterns(k)[0], 1).alias(f"v{i}") for i, k in enumerate(keys)),
        *(
            (pl.col("rest").str.count_matches(_key_patterns(k)[2], literal=True) > 1).alias(f"n{i}")
            for i, k in enumerate(keys)
        ),
    )
    return pl.DataFrame(
        [
            _last_of_twice(frame.get_column(f"v{i}"), rest, frame.get_column(f"n{i}"), k)
            for i, k in enumerate(keys)
        ]
    )


_SHAPES = 16
"""Shapes of line tried per batch by :func:`read_fields` (a call site of ``format_tagged`` writes
one shape per event, with a few variants); the rows of no shape tried are read key by key."""
_PROBE = 64
"""Rows looked at for a shape not tried yet (rows of no shape are left to the key-by-key read)."""
_SHAPE_KEY = re.compile(r"[A-Za-z0-9_.\-]+")
_SHAPE_KEYS = 3
"""Fewest keys read by shape (CPU on the same 557k lines of a synthetic run: 1 key 0.10 s key by key
against 0.23 s by shape, 2 keys 0.19 against 0.29, 3 keys 0.30 against 0.28, 10 keys 0.45 against 0.28)."""


def _shape(text: str) -> tuple[str, ...] | None:
    """The keys of a fields part written as ``format_tagged`` writes it: ``key=value`` tokens
    separated by single spaces, each key once and made of ASCII letters, digits, ``_.-`` (so no
    whitespace of any kind can be in one); None for any other text."""
    keys = []
    for token in text.split(" "):
        key, sep, _ = token.partition("=")
        if not sep or not _SHAPE_KEY.fullmatch(key):
            return None
        keys.append(key)
    return tuple(keys) if len(set(keys)) == len(keys) else None


@lru_cache(maxsize=256)
def _shape_pattern(shape: tuple[str, ...], wanted: frozenset[str]) -> tuple[str, dict[str, int]]:
    """The whole fields part in ``shape`` (values without whitespace) with a group for the first
    value (a row that matches has it) and for each value of a ``wanted`` key; and the group of each
    wanted key."""
    pieces, groups = [], {}
    for i, key in enumerate(shape):
        if i == 0 or key in wanted:
            groups[key] = len(groups)
            pieces.append(re.escape(key) + r"=(\S*)")
        else:
            pieces.append(re.escape(key) + r"=\S*")
    return "^" + " ".join(pieces) + "$", groups


def read_fields(rest: pl.Series, keys: Sequence[str]) -> pl.DataFrame:
    """Each of ``keys`` (distinct) read from every ``rest``, as :func:`fields_by_key` reads them
    (null where a row has none), in a few regex passes instead of two per key: the rows written in a
    shape seen in the batch (the same keys, in the same order, one space apart) are matched whole
    against it, one pass per shape, each wanted value taken from its group. In such a row a key is at the
    start or after whitespace only where its token starts, and only once, so that value is the one
    the key-by-key read finds; a row matches one shape at most. The other rows are read key by key,
    and so are all rows for fewer than :data:`_SHAPE_KEYS` keys (two passes a key cost less then)."""
    if len(keys) < _SHAPE_KEYS:
        return fields_by_key(rest, keys)
    done = rest.is_null()  # no fields part: no fields
    wanted = frozenset(keys)
    found: dict[str, list[pl.Series]] = {k: [] for k in keys}
    tried: set[tuple[str, ...]] = set()
    for _ in range(_SHAPES):
        free = (~done).arg_true()
        if not len(free):
            break
        probe = rest.gather(free.head(_PROBE)).to_list()
        shape = next((s for s in map(_shape, probe) if s is not None and s not in tried), None)
        if shape is None:
            break
        tried.add(shape)
        pattern, where = _shape_pattern(shape, wanted)
        groups = rest.str.extract_groups(pattern).struct.unnest()
        done = done | groups.to_series(0).is_not_null()
        for key, j in where.items():
            if key in found:
                found[key].append(groups.to_series(j))
    values = pl.select(*((pl.coalesce(found[k]) if found[k] else _nulls(len(rest))).alias(k) for k in keys))
    rows = (~done).arg_true()
    if len(rows):
        other = fields_by_key(rest.gather(rows), keys)
        values = pl.DataFrame([values.get_column(k).scatter(rows, other.get_column(k)) for k in keys])
    return values


def _values_read(part: pl.DataFrame, keys: Sequence[str]) -> dict[str, pl.Series]:
    """The fields ``keys`` of one tag's lines (``part``: their rest, :data:`READ` and the
    :data:`VALUE` columns in the order of ``keys``) as :func:`read_fields` reads them: the C scan's
    values, and the lines it did not take apart read here. (The columns the weight-update join keeps
    until the end are no copies: since the scan's columns are string views, whose data buffers hold
    only one field's values longer than 12 bytes, a copy by ``str.slice(0)`` kept the same buffers
    and cost CPU alone; the 10M all-tagged log's peak RSS 916-993 MB with it, 941-977 MB without.)"""
    rows = part.get_column(READ).is_null().arg_true()
    other = read_fields(part.get_column("rest").gather(rows), list(keys)) if len(rows) else None
    out = {}
    for j, key in enumerate(keys):
        value = part.get_column(f"{VALUE}{j}")
        if other is not None:
            value = value.scatter(rows, other.get_column(key))
        out[key] = value.rename(key)
    return out


def _nulls(n: int) -> pl.Series:
    return pl.repeat(None, n, dtype=pl.String, eager=True)


class _Number(NamedTuple):
    """A field converted to numbers: the values (null: none or no finite number), the text they were
    read from, and the rows that held no finite number (None: no such row)."""

    value: pl.Series
    raw: pl.Series
    bad: pl.Series | None


class TaggedLines:
    """Tagged lines of one file (or a run of events of one source), in line order."""

    __slots__ = (
        "frame",
        "source",
        "path",
        "events",
        "stats",
        "_cols",
        "_raws",
        "_parts",
        "_nums",
        "_read_numbers",
        "_steps",
        "_steps_counted",
        "_bad",
        "_overview",
        "ahead",
    )

    def __init__(
        self,
        frame: pl.DataFrame,
        source: str,
        path: Path | None = None,
        events: list[Event] | None = None,
        stats: ParseStats | None = None,
    ) -> None:
        self.frame = frame
        self.source = source
        """Which process (the file's label)."""
        self.path = path
        """The file the lines were read from."""
        self.events = events
        """The events themselves, for a batch made of events."""
        self.stats = stats
        self._cols: dict[str, list] = {}
        self._raws: dict[str, pl.Series] = {}
        self._parts: list[tuple[str, TaggedLines]] | None = None
        self._nums: dict[tuple[str, tuple[str, ...] | None], _Number] = {}
        self._read_numbers: dict[str, pl.Series] = {}
        """Fields the C scan read as numbers (Float64; null where absent or not a plain decimal)."""
        self._steps: dict[str, pl.Series] = {}
        self._steps_counted: set[str] = set()
        self._bad: dict[str, set[int]] = {}
        """The rows whose field (the key) was counted as a bad value (a batch made of events keeps
        them in the events' own ``bad``)."""
        self._overview: Overview | None = None
        self.ahead: dict[str, Any] = {}
        """What the parse's thread made of these lines ahead for a tag's handler (by the tag)."""

    @classmethod
    def from_events(cls, events: list[Event], stats: ParseStats | None = None) -> TaggedLines:
        """A batch of events of one source (their fields are read from the events' dicts)."""
        frame = pl.DataFrame(
            {
                "line": list(range(len(events))),  # their order (their own lines are kept in them)
                "ts": [ev.ts for ev in events],
                "tag": [ev.tag for ev in events],
                "tid": [ev.tid for ev in events],
                "event": [ev.event for ev in events],
                "rest": [" ".join(f"{k}={v}" for k, v in ev.fields.items()) for ev in events],
            },
            schema=SCHEMA,
        )
        return cls(frame, events[0].source if events else "", None, list(events), stats)

    def __len__(self) -> int:
        return self.frame.height

    def overview(self) -> Overview:
        """The batch's lines counted by (tag, event), its first timestamp but a start-up line's
        (:func:`start_up`: a process starting, the trainer starting to wait, a resume's load of
        weights begin no time of the run: the trainer starts and waits for its first rollouts while
        the servers load; None: the batch has no other line with a time, and where its file has none
        either the file starts at its last: :func:`~prime_rl.analysis.stats._add_windows`) and its last
        (made once: :func:`~prime_rl.analysis.stats.prepared` makes it in the parse's thread, off the
        collector's)."""
        if self._overview is None:
            counts = self.frame.group_by("tag", "event", maintain_order=True).len().rows()
            ts = self.frame.get_column("ts")
            last = ts.max() if ts.null_count() < len(ts) else None
            if any(event == RUN_START or (tag, event) == TRAIN_WAIT for tag, event, _ in counts):
                ts = ts.filter(pl.Series(~start_up(self.frame)))
            first = ts.min() if ts.null_count() < len(ts) else None
            self._overview = Overview(counts, first, last)  # type: ignore[arg-type]
        return self._overview

    def forget_times(self, rows: pl.Series) -> None:
        """The lines of ``rows`` (a Boolean column) have no time: one known to be wrong is used nowhere,
        as a line's without one (the parts they are split into, and the events of a batch of events,
        too)."""
        lines = self.frame.get_column("line").filter(rows)
        ts = pl.when(pl.col("line").is_in(lines.implode())).then(None).otherwise(pl.col("ts")).alias("ts")
        self.frame = self.frame.with_columns(ts)
        for _, part in self._parts or ():
            part.frame = part.frame.with_columns(ts)
            part._cols.pop("ts", None)
            part._overview = None
        for i in rows.arg_true().to_list() if self.events is not None else ():
            self.events[i].ts = None  # type: ignore[index]
        self._cols.pop("ts", None)
        self._overview = None

    def move_clock(self, seconds: float) -> None:
        """Every time of these lines ``seconds`` earlier (a log on a clock of its own onto the
        orchestrator's), before anything is read from them (the parts they are split into too)."""
        ts = pl.col("ts") - seconds
        self.frame = self.frame.with_columns(ts)
        for _, part in self._parts or ():
            part.frame = part.frame.with_columns(ts)
        self._cols.pop("ts", None)
        self._overview = None

    def column(self, name: str) -> list:
        """One of the frame's columns as a list (made once)."""
        out = self._cols.get(name)
        if out is None:
            out = self._cols[name] = self.frame.get_column(name).to_list()
        return out

    def rows(self, start: int, stop: int) -> TaggedLines:
        """Rows ``start:stop`` as a batch of their own."""
        events = self.events[start:stop] if self.events is not None else None
        return TaggedLines(self.frame[start:stop], self.source, self.path, events, self.stats)

    def by_tag(self) -> list[tuple[str, TaggedLines]]:
        """(tag, the lines with that tag) in line order within each tag; made once (the parts keep
        the fields read from them)."""
        if self._parts is not None:  # split before (the parse's thread splits every batch)
            return self._parts
        tags = self.frame.get_column("tag")
        if tags.n_unique() == 1:  # not kept: a batch that held itself would be a reference cycle
            return [(tags[0], self)]
        self._parts = self._split()
        return self._parts

    def _split(self) -> list[tuple[str, TaggedLines]]:
        if self.events is not None:
            groups: dict[str, list[int]] = {}
            for i, tag in enumerate(self.column("tag")):
                groups.setdefault(tag, []).append(i)
            return [
                (
                    tag,
                    TaggedLines(
                        self.frame[rows], self.source, None, [self.events[i] for i in rows], self.stats
                    ),
                )
                for tag, rows in groups.items()
            ]
        parts = self.frame.partition_by("tag", as_dict=True, maintain_order=True)
        return [
            (tag, TaggedLines(frame, self.source, self.path, None, self.stats))
            for (tag,), frame in parts.items()
        ]

    def event(self, i: int) -> Event:
        """Row ``i`` as an :class:`Event` (for the few lines that are kept)."""
        if self.events is not None:
            return self.events[i]
        row = self.frame.row(i, named=True)
        return Event(
            row["tag"],
            row["event"],
            row["tid"],
            _fields(row["rest"].split()) if row["rest"] else {},
            row["ts"],
            self.source,
            self.path,
            row["line"],
            self.stats,
        )

    def fields(self, *keys: str) -> None:
        """Read the fields ``keys`` of every row now (:func:`read_fields`); :meth:`text` and
        :meth:`num` then find them read."""
        missing = [k for k in dict.fromkeys(keys) if k not in self._raws]
        if not missing or self.events is not None:
            return
        values = read_fields(self.frame.get_column("rest"), missing)
        for key in missing:
            self._raws[key] = values.get_column(key)

    def take_read(
        self, read: Mapping[str, tuple[str, ...]], kinds: Mapping[str, Mapping[str, int]] | None = None
    ) -> None:
        """Give each tag's lines the fields the C scan read (``read``: the keys of each tag, in the
        order of the :data:`VALUE` columns; :meth:`fields` then finds them) and the numbers and steps
        it read (``kinds``: which, per tag; :meth:`numbers` and :meth:`step_numbers` take them when it
        took apart every line of the tag), and let go of the columns they came in before the batch is
        split by tag: carried with it, the columns of every key of every tag raised the peak memory
        by 0.3 GB at 10M tagged lines."""
        frame = self.frame
        if READ not in frame.columns:
            return
        self.frame = frame.select(c for c in frame.columns if not c.startswith("_"))
        tags = frame.get_column("tag")
        one = tags.n_unique() == 1
        taken, numbers, steps = {}, {}, {}
        for tag in tags.unique(maintain_order=True).to_list():
            keys = read.get(tag)
            if not keys:
                continue
            kind = (kinds or {}).get(tag, {})
            made = {
                name: key
                for j, key in enumerate(keys)
                for name, bit in ((f"{NUM}{j}", NUMBER), (f"{STEP}{j}", STEP_NUMBER))
                if kind.get(key, 0) & bit and name in frame.columns
            }
            columns = ["rest", READ, *(f"{VALUE}{j}" for j in range(len(keys))), *made]
            part = frame.select(columns) if one else frame.select(columns).filter(tags == tag)
            taken[tag] = _values_read(part, keys)
            if part.get_column(READ).null_count() == 0:  # every line's numbers read by the scan
                numbers[tag] = {key: part.get_column(n) for n, key in made.items() if n.startswith(NUM)}
                steps[tag] = {
                    key: part.get_column(n).rename("number") for n, key in made.items() if n.startswith(STEP)
                }
        for tag, lines in self.by_tag():
            lines._raws.update(taken.get(tag, {}))
            lines._read_numbers.update(numbers.get(tag, {}))
            lines._steps.update(steps.get(tag, {}))

    def text(self, key: str) -> list[str | None]:
        """Field ``key`` of every row (None where the line has none)."""
        if self.events is not None:
            return [ev.fields.get(key) for ev in self.events]
        return self._raw(key).to_list()

    def rows_text(self, rows: Sequence[int], key: str) -> list[str | None]:
        """Field ``key`` of the rows ``rows`` only (a few rows of a big batch: only they are read)."""
        if self.events is not None or key in self._raws:
            column = self.text(key)
            return [column[i] for i in rows]
        rest = self.frame.get_column("rest").gather(list(rows))
        return fields_by_key(rest, [key]).get_column(key).to_list()

    def text_series(self, key: str) -> pl.Series:
        """:meth:`text` as a column."""
        if self.events is not None:
            return pl.Series(key, self.text(key), dtype=pl.String)
        return self._raw(key)

    def _raw(self, key: str) -> pl.Series:
        """The field's text in every row; of a key given twice, the last."""
        if key not in self._raws:
            self.fields(key)
        return self._raws[key]

    def num(self, key: str, events: Iterable[str] | None = None) -> list[float | None]:
        """Field ``key`` of every row as a finite float; None where absent. Only rows whose event is
        in ``events`` (all when None) are read; a value there that is no finite number counts as a bad
        value (once per line and key), the first few named by file and line (:class:`ParseStats`)."""
        if self.events is not None:
            wanted = None if events is None else set(events)
            return [ev.num(key) if wanted is None or ev.event in wanted else None for ev in self.events]
        return self.num_series(key, events).to_list()

    def num_series(self, key: str, events: Iterable[str] | None = None) -> pl.Series:
        """:meth:`num` as a Float64 column (null: none)."""
        if self.events is not None:
            return pl.Series(key, self.num(key, events), dtype=pl.Float64)
        wanted = None if events is None else tuple(events)
        number = self._nums.pop((key, wanted), None) or self._number(key, wanted)
        if number.bad is not None:  # counted when read (in the reader's order), not when made
            self._count_bad(key, number.raw, number.bad)
        return number.value

    def num_ahead(self, key: str, events: Iterable[str] | None = None) -> pl.Series:
        """:meth:`num_series`' column, made now without counting its bad values: the
        :meth:`num_series` call that takes it counts them (in the collector's order, not the
        parse thread's). Not for a batch made of events (whose events count as they are read)."""
        wanted = None if events is None else tuple(events)
        number = self._nums.get((key, wanted))
        if number is None:
            number = self._nums[key, wanted] = self._number(key, wanted)
        return number.value

    def step_numbers(self, key: str) -> pl.Series:
        """:func:`step_numbers` of field ``key`` (made once). A value there that is no step number
        (``abc``, ``-1``, ``1.5``, 9 digits or more) counts as a bad value, the first time it is read."""
        out = self._steps.get(key)
        if out is None:
            out = self._steps[key] = step_numbers(self.text_series(key))
        if key not in self._steps_counted:
            self._steps_counted.add(key)
            raw = self.text_series(key)
            bad = raw.is_not_null() & out.is_null()
            if bad.any():
                self._count_bad(key, raw, bad)
        return out

    def numbers(self, *wanted: tuple[str, tuple[str, ...] | None], steps: Sequence[str] = ()) -> None:
        """Convert the fields ``(key, events)`` and the step numbers of ``steps`` now, in one polars
        query (without the GIL: the parse's thread does it ahead); the next :meth:`num_series` of
        each takes its column, and counts its bad values, and :meth:`step_numbers` finds them made."""
        if self.events is None:
            steps = [key for key in steps if key not in self._steps]
            numbers, made = self._convert(wanted, steps)
            self._nums.update(numbers)
            self._steps.update(made)

    def _number(self, key: str, events: tuple[str, ...] | None) -> _Number:
        return self._convert([(key, events)], ())[0][key, events]

    def _convert(
        self, wanted: Sequence[tuple[str, tuple[str, ...] | None]], steps: Sequence[str]
    ) -> tuple[dict[tuple[str, tuple[str, ...] | None], _Number], dict[str, pl.Series]]:
        """Fields ``(key, events)`` as finite floats, only on the lines of ``events`` (all: None;
        bad: a value there that is no finite number, or a duration below 0), and the step numbers of ``steps``."""
        raws = {key: self._raw(key) for key in dict.fromkeys([k for k, _ in wanted] + list(steps))}
        names = {key: f"r{i}" for i, key in enumerate(raws)}
        # the C scan's numbers, where it read every value there is as one (the nulls of the text are
        # all of the numbers': no value was left to the cast), are the cast's (finite, never bad)
        read = {
            key: f"n{i}"
            for i, (key, number) in enumerate(self._read_numbers.items())
            if key in raws and number.null_count() == raws[key].null_count()
        }
        exprs: list[pl.Expr] = []
        for j, (key, events) in enumerate(wanted):
            raw = pl.col(names[key])
            there = raw.is_not_null()
            if events is not None:
                there = there & pl.col("event").is_in(list(events))
            if key in read and not is_duration(key):
                exprs += [pl.when(there).then(pl.col(read[key])).alias(f"v{j}"), pl.lit(False).alias(f"b{j}")]
                continue
            value = pl.col(read[key]) if key in read else raw.cast(pl.Float64, strict=False)
            good = there & value.is_finite().fill_null(False)
            if is_duration(key):  # below 0: bad; -0 is 0
                good, value = good & (value >= 0).fill_null(False), value.abs()
            exprs += [pl.when(good).then(value).alias(f"v{j}"), (there & ~good).alias(f"b{j}")]
        exprs += [step_number_expr(pl.col(names[key])).alias(f"s{j}") for j, key in enumerate(steps)]
        frame = pl.DataFrame(
            {
                "event": self.frame.get_column("event"),
                **{names[k]: v for k, v in raws.items()},
                **{name: self._read_numbers[k] for k, name in read.items()},
            }
        )
        out = frame.select_seq(exprs)  # one thread: the other core has the scan and the collector
        numbers = {}
        for j, (key, events) in enumerate(wanted):
            bad = out.get_column(f"b{j}")
            value = out.get_column(f"v{j}").rename(key)
            numbers[key, events] = _Number(value, raws[key], bad if bad.any() else None)
        made = {key: out.get_column(f"s{j}").rename("number") for j, key in enumerate(steps)}
        return numbers, made

    def refuse(self, key: str, bad: pl.Series) -> None:
        """Count the rows ``bad`` (a Boolean column) of field ``key`` as bad values: numbers a handler
        finds impossible where they are (a collector sample that began long before its log)."""
        if bad.any():
            self._count_bad(key, self.text_series(key), bad)

    def _count_bad(self, key: str, raw: pl.Series, bad: pl.Series) -> None:
        """Count the rows ``bad`` of field ``key`` as bad values, each row and key once."""
        stats = self.stats
        if stats is None:
            return
        rows = bad.arg_true().to_list()
        if self.events is not None:
            rows = [i for i in rows if key not in self.events[i].bad]
            for i in rows:
                self.events[i].bad += (key,)
        else:
            counted = self._bad.setdefault(key, set())
            rows = [i for i in rows if i not in counted]
            counted.update(rows)
        stats.bad_values += len(rows)
        room = EXAMPLES - len(stats.bad_value_examples)
        for i in rows[: max(room, 0)]:
            ev = self.event(i)
            stats.bad_value_examples.append(
                f"{ev.where()}: {key}={raw[i][:80]} ({tag_said(ev.tag, ev.event)})"
            )


class Overview(NamedTuple):
    """A batch's lines counted by (tag, event), and the range of its timestamps (None: it has none)."""

    counts: list[tuple[str, str, int]]
    first_ts: float | None
    last_ts: float | None


def step_numbers(steps: pl.Series) -> pl.Series:
    """The steps that are 1-8 ASCII digits as integers, else null (an integer cast reads a sign too:
    those are left out; no regex, which took 3x the time)."""
    return pl.select(step_number_expr(pl.lit(steps))).to_series().rename("number")


def step_number_expr(steps: pl.Expr) -> pl.Expr:
    """:func:`step_numbers` as an expression."""
    number = steps.cast(pl.Int64, strict=False)
    digits = (
        number.is_not_null()
        & (steps.str.len_bytes() <= 8)
        & ~steps.str.starts_with("+")
        & ~steps.str.starts_with("-")
    )
    return pl.when(digits).then(number)


def batches_from_events(events: Iterable[Event], stats: ParseStats | None = None, size: int = 4096):
    """Events in order as batches of consecutive events of one source."""
    run: list[Event] = []
    for ev in events:
        if run and (ev.source != run[0].source or len(run) >= size):
            yield TaggedLines.from_events(run, stats)
            run = []
        run.append(ev)
    if run:
        yield TaggedLines.from_events(run, stats)
