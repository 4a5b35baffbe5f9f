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

import polars as pl

from prime_rl.analysis.parser import log_of

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


def tid_hashes(tids: pl.Series) -> list[int]:
    """The hashes that sample trace ids (:class:`Sample`): the same for an id in any batch."""
    return tids.cast(pl.String).hash(seed=_HASH_SEED).to_list()


class Sample:
    """Entries by trace id: the first ``head`` ids seen, and of the others those whose hash is a
    multiple of :attr:`every`, a power of two doubled while more than ``cap`` of them are kept. The
    ids kept are the first ``head`` and, of the rest seen, those whose hash is a multiple of the
    least such power, whatever the batches they came in; each entry is made at its id's first
    line. Two samples share the ids both keep: a server log's sample and the client's share the
    whole log when it is short and early (the head), and a sample of it when it is long."""

    __slots__ = ("cap", "head", "every", "entries", "hashes", "first")

    def __init__(self, cap: int, head: int = 0) -> None:
        self.cap = cap
        self.head = head
        self.every = 1
        self.entries: dict[str, list] = {}
        self.hashes: dict[str, int] = {}
        self.first: set[str] = set()
        """The head's ids."""

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

    def add(self, client: pl.DataFrame | None, server: pl.DataFrame | None) -> None:
        """A batch's client and server lines (the join's frames: ``event``, ``tid``, ``ts`` and, of
        the server's, ``source``: the file), in line order."""
        if client is not None:
            sends = client.filter(pl.col("event") == "client.send").unique(
                "tid", keep="first", maintain_order=True
            )
            for tid, ts, h in _sampled(sends, self.sent).select("tid", "ts", "h").iter_rows():
                self.sent.add(tid, h, [ts])
            replies = client.filter(
                pl.col("event").cast(pl.String).is_in(_REPLIES) & pl.col("ts").is_not_null()
            )
            last = replies.group_by("tid", maintain_order=True).agg(pl.col("ts").max())
            for tid, ts, h in _sampled(last, self.replied).select("tid", "ts", "h").iter_rows():
                self.replied.add(tid, h, [-math.inf])
                if (entry := self.replied.entries.get(tid)) is not None:
                    entry[0] = max(entry[0], ts)
        if server is not None:
            lines = server.filter(pl.col("event").cast(pl.String).is_in(("server.recv", "rpc.done"))).select(
                pl.col("source").cast(pl.String), pl.col("event").cast(pl.String), "tid", "ts"
            )
            for (source,), rows in lines.partition_by("source", maintain_order=True, as_dict=True).items():
                if source is None:  # no file to name (events made, not read)
                    continue
                got = self.received.setdefault(log_of(source), Sample(PROBE))
                for event, tid, ts, h in _sampled(rows, got).select("event", "tid", "ts", "h").iter_rows():
                    if event == "server.recv":
                        got.add(tid, h, [ts, None])
                    elif ts is not None and (entry := got.entries.get(tid)) is not None and entry[1] is None:
                        entry[1] = ts

    def offsets(self) -> Offsets:
        """The server logs whose clock is off the orchestrator's (:data:`Offsets`)."""
        return probe_offsets(self.sent, self.replied, self.received)


def _sampled(rows: pl.DataFrame, sample: Sample) -> pl.DataFrame:
    """The ``rows`` (with their trace id's hash, ``h``) ``sample`` may keep or keeps: all while its
    head is not complete, then those of its head and those whose hash is a multiple of its power."""
    hashes = pl.Series("h", tid_hashes(rows.get_column("tid")), dtype=pl.UInt64)
    rows = rows.with_columns(h=hashes)
    if not sample.full:
        return rows
    kept = pl.col("h") % sample.every == 0
    return rows.filter(kept | pl.col("tid").is_in(list(sample.first)) if sample.first else kept)


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
