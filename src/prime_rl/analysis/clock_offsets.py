"""The inference logs' clocks against the orchestrator's, from the weight updates both sides log.

A server receives an update after the client sent it and before the client has its reply: its
``server.recv`` lies between the client's ``client.send`` and ``client.send + wall_ms``, on clocks
in step (NTP keeps machines milliseconds apart). A server log whose receipts lie, at their median,
more than :data:`SLACK_S` outside that window keeps a clock of its own (another time zone, a clock
not synced), off by that median. It is measured on the first :data:`PROBE` updates
(:class:`ClockProbe`), before the join, which then takes that log's server lines on the
orchestrator's clock (:func:`on_orchestrator_clock`: a server behind would otherwise receive every
update before it was sent, and be paired with none). The run's length is measured with its times
moved the same way (:func:`run_window`): measured from first to last line as they are, a server
log two hours ahead made the run two hours longer and every share of it small. Its other lines
keep their own times (timeline, trace), which the warning says.

The trainer's logs share no such pair with the orchestrator's and are taken as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import median

import polars as pl

SLACK_S = 5.0
"""How far outside its update's send..reply window a server's receipt may lie (at the median)
before its log's clock counts as off: far above NTP's milliseconds, far below a time zone."""
PROBE = 1024
"""Updates a server log's clock is measured on: the first this many trace ids the client sent."""
MIN_UPDATES = 3
"""A log's clock is judged on at least this many updates."""

Offsets = dict[str, tuple[float, int]]
"""Per server log (the file its lines came from): (seconds it is ahead of the orchestrator's
clock, negative: behind; the updates it was measured on)."""


class ClockProbe:
    """The first :data:`PROBE` trace ids' client sends with the client's ``wall_ms``, and each
    server log's first :data:`PROBE` trace ids' receipts, kept as the ``[weights]`` lines come
    (:meth:`add`, whichever log is read first); :meth:`offsets` from the trace ids both have. Each
    is its trace id's first such line (a retried send keeps its first attempt's time)."""

    def __init__(self) -> None:
        self.sent: dict[str, float | None] = {}
        """Trace id: the time of its first client.send."""
        self.walls: dict[str, float] = {}
        """Trace id (the first :data:`PROBE` that have one): the first wall_ms a client line gave it."""
        self.received: dict[str, dict[str, float | None]] = {}
        """Server log: trace id -> the time of its first server.recv there."""

    def add(self, client: pl.DataFrame | None, server: pl.DataFrame | None) -> None:
        """A batch's client and server lines (the join's frames: ``event``, ``tid``, ``ts``, and
        ``wall`` or ``source``), in line order."""
        if client is not None:
            if len(self.sent) < PROBE:
                sends = client.filter(pl.col("event") == "client.send").unique(
                    "tid", keep="first", maintain_order=True
                )
                for tid, ts in sends.select("tid", "ts").iter_rows():
                    if tid not in self.sent and len(self.sent) < PROBE:
                        self.sent[tid] = ts
            if len(self.walls) < PROBE:
                walled = client.filter(pl.col("wall").is_not_null()).unique(
                    "tid", keep="first", maintain_order=True
                )
                for tid, wall in walled.select("tid", "wall").iter_rows():
                    if len(self.walls) >= PROBE:
                        break
                    self.walls.setdefault(tid, wall)
        if server is not None:
            recvs = server.filter(pl.col("event") == "server.recv").select(
                pl.col("source").cast(pl.String), "tid", "ts"
            )
            for (source,), rows in recvs.partition_by("source", maintain_order=True, as_dict=True).items():
                got = self.received.setdefault(source, {})
                for tid, ts in rows.select("tid", "ts").iter_rows():  # until the log has its PROBE
                    if len(got) >= PROBE:
                        break
                    got.setdefault(tid, ts)

    def offsets(self) -> Offsets:
        """The server logs whose clock is off the orchestrator's (:data:`Offsets`)."""
        out: Offsets = {}
        for source, got in self.received.items():
            gaps = [
                (recv - sent, max(self.walls.get(tid, 0.0), 0.0) / 1000.0)
                for tid, recv in got.items()
                if recv is not None and (sent := self.sent.get(tid)) is not None
            ]
            if len(gaps) < MIN_UPDATES:
                continue
            gap, wall = median(g for g, _ in gaps), median(w for _, w in gaps)
            if gap < -SLACK_S or gap > wall + SLACK_S:
                out[source] = (gap, len(gaps))
        return out


def on_orchestrator_clock(servers: pl.DataFrame, offsets: Offsets) -> pl.DataFrame:
    """Server lines ``servers`` (``source``, ``ts``) with the times of the logs of ``offsets``
    moved onto the orchestrator's clock."""
    if not offsets:
        return servers
    off = (
        pl.col("source")
        .cast(pl.String)
        .replace_strict({k: v for k, (v, _) in offsets.items()}, default=0.0, return_dtype=pl.Float64)
    )
    return servers.with_columns(ts=pl.col("ts") - off)


def run_window(windows: Mapping[str, tuple[float, float]], offsets: Offsets) -> tuple[float, float]:
    """The run's first and last time from each log's ``windows`` (its first and last time), the
    logs of ``offsets`` moved onto the orchestrator's clock."""
    moved = [
        (a - offsets[k][0], b - offsets[k][0]) if k in offsets else (a, b) for k, (a, b) in windows.items()
    ]
    return min(a for a, _ in moved), max(b for _, b in moved)
