"""Weight updates: the client's and the server's ``[weights]`` lines joined by trace id.

The events (``client.send``, ``client.done``, ``client.error``, ``server.recv``, ``rpc.start``,
``rpc.done``) and their fields are defined in ``docs/design.md``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

import polars as pl

from prime_rl.analysis.tagged import TaggedLines

WEIGHTS_FIELDS = ("url", "path", "t", "wall_ms", "queue_ms", "rpc_ms", "lock_wait_ms", "target", "op")
"""The fields of ``[weights]`` lines the join reads."""

WEIGHTS_NUMBERS = (
    ("t", ("client.send", "server.recv")),
    ("rpc_ms", ("client.done", "rpc.done")),
    ("wall_ms", ("client.done",)),
    ("queue_ms", ("client.done",)),
    ("lock_wait_ms", ("rpc.done",)),
)
"""The numbers (field, the events whose lines are read) the join reads."""

UPDATE_PATHS = (None, "/update_weights", "/reload_weights")
"""The request paths that are weight updates (None: the path was never logged)."""


@dataclass(slots=True)
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
    server: str | None = None
    """The server log file the server's lines came from (None: no server lines)."""
    lock_wait_ms: float | None = None
    """The server's wait for its swap lock (rpc.done lock_wait_ms): server-side queueing."""

    def to_dict(self) -> dict[str, Any]:
        """Every field, with ``send_to_recv_ms`` (summary.json)."""
        return {f.name: getattr(self, f.name) for f in _FIELDS} | {"send_to_recv_ms": self.send_to_recv_ms}

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


_FIELDS = fields(Update)


class UpdateJoin:
    """Collects ``[weights]`` events into :class:`Update` objects: one per trace id *and server*.

    One update goes to every server under one trace id, so the client's lines are kept apart by
    ``url=`` and the server's by the file they come from; :meth:`updates` then pairs each server
    part with its client part (see :meth:`_pair`). A trace id that repeats (logs appended over
    several runs) starts a new update at a client.send after a finished one.
    """

    def __init__(self) -> None:
        self._client: dict[tuple[str, str | None], list[Update]] = {}
        self._last_url: dict[str, str | None] = {}
        self._server: dict[tuple[str, str], list[Update]] = {}
        self._order: list[Update] = []

    def add_lines(self, lines: TaggedLines) -> None:
        """Fold a batch of ``[weights]`` lines (those with a trace id) into their updates. The
        client's lines and the server's are folded apart (neither's state depends on the other's),
        each in line order."""
        lines.fields(*WEIGHTS_FIELDS)
        event, tid, ts = (
            lines.frame.get_column("event"),
            lines.frame.get_column("tid"),
            lines.frame.get_column("ts"),
        )
        has_tid = (tid.is_not_null() & (tid != "")).fill_null(False)
        client = has_tid & event.str.starts_with("client.")
        server = has_tid & event.is_in(_SERVER_EVENTS)
        t = lines.num_series("t", ("client.send", "server.recv"))
        rpc = lines.num_series("rpc_ms", ("client.done", "rpc.done"))
        path = lines.text_series("path")
        if client.any():
            pick = lambda c: c.filter(client).to_list()  # noqa: E731
            self._add_clients(
                pick(event),
                pick(tid),
                pick(ts),
                pick(lines.text_series("url")),
                pick(path),
                pick(t),
                pick(lines.num_series("wall_ms", ("client.done",))),
                pick(rpc),
                pick(lines.num_series("queue_ms", ("client.done",))),
            )
        if server.any():
            rows = server.arg_true().to_list()
            if lines.path is not None:
                sources = [str(lines.path)] * len(rows)
            else:  # a batch of events: each event's own file
                sources = [
                    str(ev.path) if ev.path is not None else ev.source for ev in map(lines.event, rows)
                ]
            pick = lambda c: c.filter(server).to_list()  # noqa: E731
            self._add_servers(
                pick(event),
                pick(tid),
                sources,
                pick(ts),
                pick(t),
                pick(path),
                pick(lines.text_series("target")),
                pick(lines.text_series("op")),
                pick(rpc),
                pick(lines.num_series("lock_wait_ms", ("rpc.done",))),
            )

    def _add_clients(self, *columns: list) -> None:
        """Client lines in order: a line without ``url=`` belongs to its trace id's last URL; per
        (trace id, URL) a ``client.send`` starts a new update when the last one is finished, any
        line starts one when there is none, and a retried send keeps the first attempt's times."""
        client, last_url, order = self._client, self._last_url, self._order
        for event, tid, ts, url, path, t, wall, rpc, queue in zip(*columns, strict=True):
            url = url or last_url.get(tid)
            occ = client.get((tid, url))
            if occ is None:
                occ = client[tid, url] = []
            last_url[tid] = url
            if event == "client.send":
                if not occ or _finished(u := occ[-1]):
                    u = Update(tid, url=url)
                    occ.append(u)
                    order.append(u)
                if u.send_ts is None and u.send_t is None:  # first attempt (retries keep the same trace id)
                    u.send_ts, u.send_t = ts, t
                u.path = path
                continue
            if not occ:
                occ.append(Update(tid, url=url, path=path))
                order.append(occ[-1])
            u = occ[-1]
            if event == "client.done":
                u.done_ts, u.wall_ms, u.rpc_ms, u.queue_ms = ts, wall, rpc, queue
                if queue is None and wall is not None and rpc is not None:
                    u.queue_ms = wall - rpc
            elif event == "client.error":
                u.failed, u.done_ts = True, ts

    def _add_servers(self, *columns: list) -> None:
        """Server lines in order: per (trace id, server file) a ``server.recv`` starts a new update,
        any line starts one when there is none."""
        servers = self._server
        for event, tid, source, ts, t, path, target, op, rpc, lock in zip(*columns, strict=True):
            occ = servers.get((tid, source))
            if occ is None:
                occ = servers[tid, source] = []
            if event == "server.recv" or not occ:
                occ.append(Update(tid, server=source))
            u = occ[-1]
            if event == "server.recv":
                u.recv_ts, u.recv_t, u.path = ts, t, path
            elif event == "rpc.start":
                u.target = target
                u.path = u.path or _OP_PATHS.get(op or "")
            else:
                u.server_rpc_ms, u.lock_wait_ms = rpc, lock
                u.path = u.path or _OP_PATHS.get(op or "")

    def server_urls(self, clients_by_tid: dict[str, list[Update]] | None = None) -> dict[str, str]:
        """Which server URL each server log file belongs to, learned from the updates whose client
        and server parts can only be each other (one URL and one server file for a trace id) or
        whose ``rpc_ms`` agree to the logged decimal; a file is named when 80% of its votes agree."""
        votes: dict[str, Counter] = {}
        servers_by_tid = _by_tid(self._server)
        if clients_by_tid is None:
            clients_by_tid = _by_tid(self._client)
        for tid, servers in servers_by_tid.items():
            clients = clients_by_tid.get(tid, [])
            if len(servers) == 1 and len(clients) == 1:  # the usual case, decided as below
                if url := clients[0].url:
                    votes.setdefault(servers[0].server or "", Counter())[url] += 1
                continue
            urls = {c.url for c in clients if c.url}
            if len(urls) == 1 and len({s.server for s in servers}) == 1:
                votes.setdefault(servers[0].server or "", Counter())[next(iter(urls))] += 1
                continue
            for s in servers:
                same = [c.url for c in clients if c.url and _same_rpc(c, s)]
                if len(set(same)) == 1:
                    votes.setdefault(s.server or "", Counter())[same[0]] += 1
        out = {}
        for source, counter in votes.items():
            url, n = counter.most_common(1)[0]
            if n >= 0.8 * sum(counter.values()):
                out[source] = url
        return out

    def updates(self) -> list[Update]:
        """The weight updates (other admin paths left out), one per trace id and server: client parts
        in first-seen order with their server parts joined, then server parts without a client part."""
        clients_by_tid = _by_tid(self._client)
        mapping = self.server_urls(clients_by_tid)
        alone: list[Update] = []
        taken: set[int] = set()
        for (tid, source), parts in self._server.items():
            clients = clients_by_tid.get(tid, [])
            for s in parts:
                c = self._pair(s, mapping.get(source), clients, taken)
                if c is None:
                    s.url = mapping.get(source)
                    alone.append(s)
                else:
                    taken.add(id(c))
                    c.recv_ts, c.recv_t, c.server_rpc_ms = s.recv_ts, s.recv_t, s.server_rpc_ms
                    c.target, c.lock_wait_ms, c.server = s.target, s.lock_wait_ms, s.server
                    c.path = c.path or s.path
        return [u for u in self._order + alone if u.path in UPDATE_PATHS]

    @staticmethod
    def _pair(s: Update, url: str | None, clients: list[Update], taken: set[int]) -> Update | None:
        """The client part a server part belongs to: not yet paired, sent no later than 1 s after the
        server received it, to the server file's URL when that is known, with equal ``rpc_ms`` when
        several remain, else the one sent last before the server received it."""
        if len(clients) == 1:  # the usual case, decided as below (one client: the URL cannot rule it out)
            (c,) = clients
            late = s.recv_ts is not None and c.send_ts is not None and c.send_ts > s.recv_ts + 1.0
            return None if id(c) in taken or late else c
        free = [c for c in clients if id(c) not in taken]
        if s.recv_ts is not None:
            free = [c for c in free if c.send_ts is None or c.send_ts <= s.recv_ts + 1.0]
        if url is not None:
            free = [c for c in free if c.url == url] or ([] if any(c.url == url for c in clients) else free)
        if len(free) > 1:
            free = [c for c in free if _same_rpc(c, s)] or free
        if not free:
            return None
        if s.recv_ts is not None:
            return max(free, key=lambda c: c.send_ts if c.send_ts is not None else -math.inf)
        return free[0]


_OP_PATHS = {"update_weights": "/update_weights", "reload_weights": "/reload_weights"}


def _by_tid(parts: dict[tuple[str, str | None], list[Update]]) -> dict[str, list[Update]]:
    """The parts of each trace id, keys in first-seen order (a trace id with one key: its own list,
    which the callers only read)."""
    out: dict[str, list[Update]] = {}
    for (tid, _), those in parts.items():
        have = out.get(tid)
        out[tid] = those if have is None else have + those
    return out


def _finished(u: Update) -> bool:
    """The client's part of an update is over: answered, failed or timed."""
    return u.done_ts is not None or u.failed or u.wall_ms is not None


_SERVER_EVENTS = ["server.recv", "rpc.start", "rpc.done"]


def _same_rpc(c: Update, s: Update) -> bool:
    """The client's rpc_ms (from the server's answer) equals the server log's, to the logged decimal."""
    return c.rpc_ms is not None and s.server_rpc_ms is not None and abs(c.rpc_ms - s.server_rpc_ms) <= 0.051


_FRAME_COLUMNS = {
    "tid": ("tid", pl.String),
    "url": ("url", pl.String),
    **{
        name: (attr, pl.Float64)
        for name, attr in (
            ("send_ts", "send_ts"),
            ("send_t", "send_t"),
            ("recv_ts", "recv_ts"),
            ("recv_t", "recv_t"),
            ("done_ts", "done_ts"),
            ("wall", "wall_ms"),
            ("rpc", "rpc_ms"),
            ("server_rpc", "server_rpc_ms"),
            ("queue", "queue_ms"),
            ("lock", "lock_wait_ms"),
        )
    },
    "failed": ("failed", pl.Boolean),
}
"""update_frame's first columns: name -> (the Update attribute, its type)."""


def update_frame(updates: list[Update]) -> pl.DataFrame:
    """The updates as columns, in order: ``tid``, ``url``, ``start``, ``end`` (the properties of
    :class:`Update`), ``wall``, ``rpc`` (the client's), ``server_rpc``, ``queue``, ``lock``,
    ``send_to_recv``, ``failed`` and ``took``: how long it took, ``wall_ms or server_rpc_ms`` (the
    first that is neither None nor 0; null when neither is)."""
    frame = pl.DataFrame(
        {name: list(map(attrgetter(attr), updates)) for name, (attr, _) in _FRAME_COLUMNS.items()},
        schema={name: dtype for name, (_, dtype) in _FRAME_COLUMNS.items()},
    )
    col = pl.col
    truthy = lambda c: col(c).is_not_null() & (col(c) != 0)  # noqa: E731  # Python's "x or ..."
    start = pl.coalesce("send_ts", "recv_ts")
    took = pl.when(truthy("wall")).then("wall").when(truthy("server_rpc")).then("server_rpc")
    gap = (col("recv_t") - col("send_t")) * 1000.0
    limit = pl.when(truthy("wall")).then("wall").otherwise(float("inf")) + 1.0
    return frame.select(
        "tid",
        "url",
        start=start,
        end=pl.when(col("done_ts").is_not_null())
        .then("done_ts")
        .when(start.is_not_null() & took.is_not_null())
        .then(start + took / 1000.0),
        wall="wall",
        rpc="rpc",
        server_rpc="server_rpc",
        queue="queue",
        lock="lock",
        send_to_recv=pl.when(gap.is_not_null() & (gap >= 0) & (gap <= limit))
        .then(gap)
        .when(col("send_ts").is_not_null() & col("recv_ts").is_not_null())
        .then((col("recv_ts") - col("send_ts")) * 1000.0),
        failed="failed",
        took=took,
    )
