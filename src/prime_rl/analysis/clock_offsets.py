"""The inference logs' clocks against the orchestrator's, from the weight updates both sides log.

Each update bounds a server log's clock offset from both sides. The server receives it after the
client first sent it, so ``server.recv - client.send`` is at least the offset (more by the network
and any queueing, and by a retry's wait); it finishes it before the client has its last reply
(``client.done``, of any server), so ``rpc.done - that reply`` is at most the offset (less by the
reply's trip, and by how much later another server answered). Over up to :data:`PROBE` of a log's
updates, sampled by trace id (:class:`Sample`: the same ids on both sides, so a log that starts
late in a long run is measured too), when even the upper bound's low end (:data:`QUANTILE`) lies
more than :data:`SLACK_S` below 0, or the lower bound's high end more than that above, the log
keeps a clock of its own (another time zone, a clock not synced). Clocks in step never do: on them
every update's bounds hold 0, however slow the server, its queue or a retry. Its offset is taken at
the lower bound (the receipts' bound carries the queue; moved by the lower, no receipt lands before
its send), or at the upper where the log has no rpc.done lines. Rotated parts of one log are
measured together (:func:`log_of`).

The join then takes that log's ``[weights]`` lines on the orchestrator's clock
(:func:`on_orchestrator_clock`: a server behind would otherwise receive every update before it was
sent, and be paired with none), and the run's length is measured the same way (:func:`run_window`):
measured from first to last line as they are, a server log two hours ahead made the run two hours
longer and every share of it small.

The trainer's logs are measured on the steps they share with the orchestrator's, and moved as
they are read (:mod:`~prime_rl.analysis.trainer_clock`, with :func:`judge`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from prime_rl.analysis.log_files import log_of

SLACK_S = 5.0
"""How far past 0 a log's bound must lie before its clock counts as off: far above NTP's
milliseconds, far below a time zone."""
PROBE = 1024
"""Trace ids a server log's clock is measured on (at most; sampled by their hash, :class:`Sample`)."""
CLIENT_SAMPLE = 4 * PROBE
"""Trace ids the client's sends and replies are kept for by their hash, besides the first
:data:`PROBE` (:class:`Sample`): a server log that starts late in a long run shares a sample of
them, one of a few updates among the first 1,024 shares them all."""
MIN_UPDATES = 3
"""A log's clock is judged on at least this many updates."""
QUANTILE = 0.1
"""The bounds are read at this quantile from their far end (the 10th percentile of the upper bounds,
the 90th of the lower): a few updates whose lines are wrong do not move them."""

Offsets = dict[str, tuple[float, int]]
"""Per server log (:func:`log_of` its files): (seconds its clock is ahead of the orchestrator's,
negative: behind; the updates it was measured on)."""

_REPLIES = ("client.done",)
"""The replies that bound a server's finish: a client that gave up (``client.error``, a timeout)
may see the server finish later."""


_HASH_SEED = 20261128


def tid_hash(tid: pl.Expr) -> pl.Expr:
    """The hash that samples trace ids (:class:`Sample`): the same for an id in any batch."""
    return tid.cast(pl.String).hash(seed=_HASH_SEED)


def tid_hashes(tids: pl.Series) -> list[int]:
    """:func:`tid_hash` of each of ``tids``."""
    return pl.select(tid_hash(pl.lit(tids))).to_series().to_list()


class Sample:
    """Entries by trace id: the first ``head`` ids seen, and of the others those whose hash is a
    multiple of :attr:`every`, a power of two doubled while more than ``cap`` of them are kept. The
    ids kept are the first ``head`` and, of the rest seen, those whose hash is a multiple of the
    least such power, whatever the batches they came in; each entry is made at its id's first
    line. Two samples share the ids both keep: a server log's sample and the client's share the
    whole log when it is short and early (the head), and a sample of it when it is long."""

    __slots__ = ("cap", "head", "every", "entries", "hashes", "first", "_first_hashes")

    def __init__(self, cap: int, head: int = 0) -> None:
        self.cap = cap
        self.head = head
        self.every = 1
        self.entries: dict[str, list] = {}
        self.hashes: dict[str, int] = {}
        self.first: set[str] = set()
        """The head's ids."""
        self._first_hashes: pl.Series | None = None

    def first_hashes(self) -> pl.Series:
        """The hashes of :attr:`first` as a column (made again only when the head grew)."""
        if self._first_hashes is None or len(self._first_hashes) != len(self.first):
            self._first_hashes = pl.Series("h", [self.hashes[t] for t in self.first], dtype=pl.UInt64)
        return self._first_hashes

    @property
    def full(self) -> bool:
        """The head is complete: an id is kept from now on only by its hash."""
        return len(self.first) >= self.head

    def add(self, tid: str, h: int, entry: list) -> None:
        """``entry`` for ``tid`` (hash ``h``), unless it has one or is not kept."""
        if tid in self.entries:
            return
        if not self.full:
            self.first.add(tid)
        elif h % self.every:
            return
        self.entries[tid] = entry
        self.hashes[tid] = h
        while len(self.entries) - len(self.first) > self.cap:
            self.every *= 2
            for t in [t for t, x in self.hashes.items() if x % self.every and t not in self.first]:
                del self.entries[t], self.hashes[t]


class ClockProbe:
    """Sampled trace ids' (:class:`Sample`) first ``client.send`` and last reply, and of each server
    log's sampled trace ids the first ``server.recv`` and first ``rpc.done``, kept as the
    ``[weights]`` lines come (:meth:`add`, whichever log is read first); :meth:`offsets` from them."""

    def __init__(self) -> None:
        self.sent = Sample(CLIENT_SAMPLE, PROBE)
        """Trace id: [the time of its first client.send]."""
        self.replied = Sample(CLIENT_SAMPLE, PROBE)
        """Trace id: [the time of its last client.done]."""
        self.received: dict[str, Sample] = {}
        """Server log: trace id -> [the time of its first server.recv there, of its first rpc.done]."""

    def add(self, lines: ProbeLines) -> None:
        """A batch's lines as :func:`probe_lines` reduced them, in line order."""
        for tid, ts, h in _sampled(lines.sends, self.sent).iter_rows():
            self.sent.add(tid, h, [ts])
        for tid, ts, h in _sampled(lines.replies, self.replied).iter_rows():
            self.replied.add(tid, h, [-math.inf])
            if (entry := self.replied.entries.get(tid)) is not None:
                entry[0] = max(entry[0], ts)
        for source, rows in lines.received:
            got = self.received.setdefault(log_of(source), Sample(PROBE))
            for event, tid, ts, h in _sampled(rows, got).iter_rows():
                if event == "server.recv":
                    got.add(tid, h, [ts, None])
                elif ts is not None and (entry := got.entries.get(tid)) is not None and entry[1] is None:
                    entry[1] = ts

    def offsets(self) -> Offsets:
        """The server logs whose clock is off the orchestrator's (:data:`Offsets`)."""
        return probe_offsets(self.sent, self.replied, self.received)


@dataclass(frozen=True, slots=True)
class ProbeLines:
    """A batch's ``[weights]`` lines as :class:`ClockProbe` reads them, each with its trace id's hash
    ``h`` (:func:`tid_hash`): what does not depend on the samples, made by :func:`probe_lines` in the
    parse's thread (its hashes, first sends and last replies of every line cost 0.9 s of the
    collector's thread on the 10M-line all-tagged log); the probe samples them in order."""

    sends: pl.DataFrame
    """``tid``, ``ts``, ``h`` of each trace id's first client.send, in line order."""
    replies: pl.DataFrame
    """``tid``, ``ts`` (the latest), ``h`` of each trace id's replies, in first-seen order."""
    received: list[tuple[str, pl.DataFrame]]
    """Per server file (first seen first): ``event``, ``tid``, ``ts``, ``h`` of its server.recv and
    rpc.done lines."""


def probe_lines(client: pl.DataFrame | None, server: pl.DataFrame | None) -> ProbeLines:
    """A batch's client and server lines (the join's frames: ``event``, ``tid``, ``ts`` and, of the
    server's, ``source``: the file), in line order, reduced for :meth:`ClockProbe.add`."""
    h = tid_hash(pl.col("tid")).alias("h")
    empty = pl.DataFrame(schema={"tid": pl.String, "ts": pl.Float64, "h": pl.UInt64})
    sends = replies = empty
    if client is not None:
        event = pl.col("event")
        sends = (
            client.filter(event == "client.send")
            .unique("tid", keep="first", maintain_order=True)
            .select("tid", "ts", h)
        )
        replies = (
            client.filter(event.cast(pl.String).is_in(_REPLIES) & pl.col("ts").is_not_null())
            .group_by("tid", maintain_order=True)
            .agg(pl.col("ts").max())
            .select("tid", "ts", h)
        )
    received = []
    if server is not None:
        lines = server.filter(pl.col("event").cast(pl.String).is_in(("server.recv", "rpc.done"))).select(
            pl.col("source").cast(pl.String), pl.col("event").cast(pl.String), "tid", "ts", h
        )
        for (source,), rows in lines.partition_by("source", maintain_order=True, as_dict=True).items():
            if source is not None:  # None: no file to name (events made, not read)
                received.append((source, rows.drop("source")))
    return ProbeLines(sends, replies, received)


def _sampled(rows: pl.DataFrame, sample: Sample) -> pl.DataFrame:
    """The ``rows`` (``h``: their trace id's :func:`tid_hash`) ``sample`` may keep or keeps: all while
    its head is not complete, then those of its head and those whose hash is a multiple of its power.
    The head's are found by their hashes (numbers, not text): an id that shares one passes and is let
    go by :meth:`Sample.add`, which keeps an id by its hash or as one of the head it knows by name."""
    if not sample.full:
        return rows
    kept = pl.col("h") % sample.every == 0
    return rows.filter(kept | pl.col("h").is_in(sample.first_hashes().implode()) if sample.first else kept)


def probe_offsets(sent: Sample, replied: Sample, received: Mapping[str, Sample]) -> Offsets:
    """The offsets of the server logs of ``received`` (:func:`offsets_of`), each measured on the
    trace ids it shares with the client's samples."""
    return offsets_of(
        {t: e[0] for t, e in sent.entries.items()},
        {t: e[0] for t, e in replied.entries.items()},
        {log: {t: e[0] for t, e in got.entries.items()} for log, got in received.items()},
        {log: {t: e[1] for t, e in got.entries.items() if e[1] is not None} for log, got in received.items()},
    )


def offsets_of(
    sent: Mapping[str, float | None],
    replied: Mapping[str, float],
    received: Mapping[str, Mapping[str, float | None]],
    finished: Mapping[str, Mapping[str, float]],
) -> Offsets:
    """:meth:`ClockProbe.offsets` from what it kept, as plain values: first sends and last replies
    by trace id, first receipts and first rpc.done by server log and trace id."""
    out: Offsets = {}
    for log, got in received.items():
        above = [
            recv - send
            for tid, recv in got.items()
            if recv is not None and (send := sent.get(tid)) is not None and math.isfinite(recv - send)
        ]
        below = [
            done - replied[tid]
            for tid, done in finished.get(log, {}).items()
            if tid in replied and math.isfinite(done - replied[tid])
        ]
        if (judged := judge(above, below)) is not None:
            out[log] = judged
    return out


def judge(above: list[float], below: list[float]) -> tuple[float, int] | None:
    """A log's clock from the bounds its lines put on its offset (``above``: values the offset is at
    most, give or take the network; ``below``: values it is at least): (its offset, the bounds it was
    measured on) when it is off by more than :data:`SLACK_S`, else None. Read at :data:`QUANTILE`
    from each side's far end; taken at the lower bounds where there are enough (the upper ones carry
    the queues), else at the upper."""
    if max(len(above), len(below)) < MIN_UPDATES:
        return None
    upper = quantile(above, QUANTILE) if len(above) >= MIN_UPDATES else math.inf
    lower = quantile(below, 1.0 - QUANTILE) if len(below) >= MIN_UPDATES else -math.inf
    # bounds that contradict each other (lines of two runs under one trace id or step) judge nothing;
    # by less than the slack they are the lines' own timing (a line logged a moment after its event)
    off, n = (lower, len(below)) if len(below) >= MIN_UPDATES else (upper, len(above))
    if (lower > SLACK_S or upper < -SLACK_S) and abs(off) > SLACK_S and lower <= upper + SLACK_S:
        return off, n
    return None


def quantile(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile of ``values`` (at least one)."""
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, max(0, math.ceil(q * len(ranked)) - 1))]


def on_orchestrator_clock(servers: pl.DataFrame, offsets: Offsets) -> pl.DataFrame:
    """Server lines ``servers`` (``source``: the file, ``ts``) with the times of the logs of
    ``offsets`` moved onto the orchestrator's clock."""
    if not offsets or not servers.height:
        return servers
    moved = {}
    for source in servers.get_column("source").cast(pl.String).unique().to_list():
        if source is not None and (off := offsets.get(log_of(source))) is not None:
            moved[source] = off[0]
    if not moved:
        return servers
    off = pl.col("source").cast(pl.String).replace_strict(moved, default=0.0, return_dtype=pl.Float64)
    return servers.with_columns(ts=pl.col("ts") - off)


def run_window(windows: Mapping[str, tuple[float, float]], offsets: Offsets) -> tuple[float, float]:
    """The run's first and last time from each file's ``windows`` (its first and last time), those
    of the logs of ``offsets`` moved onto the orchestrator's clock."""
    moved = []
    for path, (first, last) in windows.items():
        off = offsets.get(log_of(path), (0.0, 0))[0]
        moved.append((first - off, last - off))
    return min(a for a, _ in moved), max(b for _, b in moved)
