"""The inference logs' clocks against the orchestrator's, from the weight updates both sides log.

Each update bounds a server log's clock offset from both sides. The server receives it after the
client first sent it, so ``server.recv - client.send`` is at least the offset (more by the network
and any queueing, and by a retry's wait); it finishes it before the client has its last reply
(``client.done``, of any server), so ``rpc.done - that reply`` is at most the
offset (less by the reply's trip, and by how much later another server answered). Over a log's
first :data:`PROBE` updates, when even the upper bound's low end (:data:`QUANTILE`) lies more than
:data:`SLACK_S` below 0, or the lower bound's high end more than that above, the log keeps a clock
of its own (another time zone, a clock not synced). Clocks in step never do: on them every
update's bounds hold 0, however slow the server, its queue or a retry. Its offset is taken at the
lower bound (the receipts' bound carries the queue; moved by the lower, no receipt lands before
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
"""Updates a server log's clock is measured on: the first this many trace ids it received, of the
first this many the client sent."""
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


class ClockProbe:
    """The first :data:`PROBE` trace ids' first ``client.send`` and last reply, and each server
    log's first :data:`PROBE` trace ids' first ``server.recv`` and first ``rpc.done``, kept as the
    ``[weights]`` lines come (:meth:`add`, whichever log is read first); :meth:`offsets` from them."""

    def __init__(self) -> None:
        self.sent: dict[str, float | None] = {}
        """Trace id: the time of its first client.send."""
        self.replied: dict[str, float] = {}
        """Trace id (the first :data:`PROBE` that have one): the time of its last client.done."""
        self.received: dict[str, dict[str, float | None]] = {}
        """Server log: trace id -> the time of its first server.recv there."""
        self.finished: dict[str, dict[str, float]] = {}
        """Server log: trace id (of :attr:`received`) -> the time of its first rpc.done there."""

    def add(self, client: pl.DataFrame | None, server: pl.DataFrame | None) -> None:
        """A batch's client and server lines (the join's frames: ``event``, ``tid``, ``ts`` and, of
        the server's, ``source``: the file), in line order."""
        if client is not None:
            if len(self.sent) < PROBE:
                sends = client.filter(pl.col("event") == "client.send").unique(
                    "tid", keep="first", maintain_order=True
                )
                for tid, ts in sends.select("tid", "ts").iter_rows():
                    if tid not in self.sent and len(self.sent) < PROBE:
                        self.sent[tid] = ts
            replies = client.filter(
                pl.col("event").cast(pl.String).is_in(_REPLIES) & pl.col("ts").is_not_null()
            )
            if len(self.replied) < PROBE:
                for tid in (
                    replies.unique("tid", keep="first", maintain_order=True).get_column("tid").to_list()
                ):
                    if tid not in self.replied and len(self.replied) < PROBE:
                        self.replied[tid] = -math.inf
            replies = replies.filter(pl.col("tid").is_in(list(self.replied)))
            for tid, ts in replies.group_by("tid").agg(pl.col("ts").max()).iter_rows():
                self.replied[tid] = max(self.replied[tid], ts)
        if server is not None:
            lines = server.filter(pl.col("event").cast(pl.String).is_in(("server.recv", "rpc.done"))).select(
                pl.col("source").cast(pl.String), pl.col("event").cast(pl.String), "tid", "ts"
            )
            for (source,), rows in lines.partition_by("source", maintain_order=True, as_dict=True).items():
                if source is None:  # no file to name (events made, not read)
                    continue
                log = log_of(source)
                got = self.received.setdefault(log, {})
                done = self.finished.setdefault(log, {})
                if len(got) >= PROBE:  # only the lines of the trace ids it has
                    rows = rows.filter(pl.col("tid").is_in(list(got)))
                for event, tid, ts in rows.select("event", "tid", "ts").iter_rows():
                    if event == "server.recv":
                        if tid not in got and len(got) < PROBE:
                            got[tid] = ts
                    elif tid in got and ts is not None:
                        done.setdefault(tid, ts)

    def offsets(self) -> Offsets:
        """The server logs whose clock is off the orchestrator's (:data:`Offsets`)."""
        return offsets_of(self.sent, self.replied, self.received, self.finished)


def offsets_of(
    sent: Mapping[str, float | None],
    replied: Mapping[str, float],
    received: Mapping[str, Mapping[str, float | None]],
    finished: Mapping[str, Mapping[str, float]],
) -> Offsets:
    """:meth:`ClockProbe.offsets` from what it kept (its attributes, by name)."""
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
