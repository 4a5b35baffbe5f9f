"""Weight updates: the client's and the server's ``[weights]`` lines joined by trace id.

The events (``client.send``, ``client.done``, ``client.error``, ``server.recv``, ``rpc.start``,
``rpc.done``) and their fields are defined in ``docs/design.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prime_rl.analysis.parser import Event

UPDATE_PATHS = (None, "/update_weights", "/reload_weights")
"""The request paths that are weight updates (None: the path was never logged)."""


@dataclass
class Update:
    """One weight update as seen by client and server, joined by trace id."""

    tid: str
    path: str | None = None
    url: str | None = None
    send_ts: float | None = None
    send_t: float | None = None
    done_ts: float | None = None
    wall_ms: float | None = None
    rpc_ms: float | None = None
    queue_ms: float | None = None
    recv_ts: float | None = None
    recv_t: float | None = None
    server_rpc_ms: float | None = None
    target: str | None = None
    failed: bool = False

    @property
    def send_to_recv_ms(self) -> float | None:
        """Client send -> server first byte: monotonic clocks when consistent, else wall clocks."""
        if self.send_t is not None and self.recv_t is not None:
            gap = (self.recv_t - self.send_t) * 1000.0
            if 0 <= gap <= (self.wall_ms or math.inf) + 1.0:
                return gap
        if self.send_ts is not None and self.recv_ts is not None:
            return (self.recv_ts - self.send_ts) * 1000.0
        return None

    @property
    def start(self) -> float | None:
        return self.send_ts if self.send_ts is not None else self.recv_ts

    @property
    def end(self) -> float | None:
        if self.done_ts is not None:
            return self.done_ts
        if self.start is not None and (self.wall_ms or self.server_rpc_ms):
            return self.start + (self.wall_ms or self.server_rpc_ms or 0) / 1000.0
        return None


class UpdateJoin:
    """Collects ``[weights]`` events into :class:`Update` objects, one per occurrence of a trace id."""

    def __init__(self) -> None:
        self._by_tid: dict[str, list[Update]] = {}

    def add(self, ev: Event) -> None:
        """Fold one ``[weights]`` event (with a trace id) into its update."""
        u = self._occurrence(ev)
        if ev.event == "client.send":
            if u.send_ts is None and u.send_t is None:  # first attempt (retries keep the same trace id)
                u.send_ts, u.send_t = ev.ts, ev.num("t")
            u.url, u.path = ev.fields.get("url"), ev.fields.get("path")
        elif ev.event == "client.done":
            u.done_ts, u.wall_ms, u.rpc_ms, u.queue_ms = (
                ev.ts,
                ev.num("wall_ms"),
                ev.num("rpc_ms"),
                ev.num("queue_ms"),
            )
            if u.queue_ms is None and u.wall_ms is not None and u.rpc_ms is not None:
                u.queue_ms = u.wall_ms - u.rpc_ms
        elif ev.event == "client.error":
            u.failed, u.done_ts = True, ev.ts
        elif ev.event == "server.recv":
            u.recv_ts, u.recv_t = ev.ts, ev.num("t")
            u.path = u.path or ev.fields.get("path")
        elif ev.event == "rpc.start":
            u.target = ev.fields.get("target")
        elif ev.event == "rpc.done":
            u.server_rpc_ms = ev.num("rpc_ms")

    def updates(self) -> list[Update]:
        """The weight updates (other admin paths left out), by trace id in first-seen order."""
        return [u for occ in self._by_tid.values() for u in occ if u.path in UPDATE_PATHS]

    def _occurrence(self, ev: Event) -> Update:
        """The update an event belongs to. Trace ids can repeat (logs appended over several runs): a
        client.send after a finished update starts a new one, and a server line joins the latest update
        sent at or before it that has no server part yet."""
        occ = self._by_tid.setdefault(ev.tid, [])
        if ev.event == "client.send":
            if not occ or occ[-1].done_ts is not None or occ[-1].failed:
                occ.append(Update(ev.tid))
            return occ[-1]
        if ev.event in ("client.done", "client.error"):
            if not occ:
                occ.append(Update(ev.tid))
            return occ[-1]
        open_ = (
            [u for u in occ if u.recv_ts is None and u.recv_t is None] if ev.event == "server.recv" else occ
        )
        if ev.event == "server.recv" and ev.ts is not None:
            before = [u for u in open_ if u.send_ts is None or u.send_ts <= ev.ts + 1.0]
            open_ = before or open_
        if not open_:
            occ.append(Update(ev.tid))
            return occ[-1]
        if ev.event == "server.recv":
            return open_[-1] if ev.ts is not None else open_[0]
        # rpc.start / rpc.done: the occurrence whose server.recv came last
        with_recv = [u for u in occ if u.recv_ts is not None or u.recv_t is not None]
        return with_recv[-1] if with_recv else occ[-1]
