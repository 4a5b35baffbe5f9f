"""A weight update's record, and the line-by-line join of the ``[weights]`` lines that are not the
usual pattern (:mod:`~prime_rl.analysis.update_columns` joins the usual ones from columns).

One update goes to every server under one trace id, so the client's lines are kept apart by
``url=`` and the server's by the file they come from; :meth:`LineJoin.pair` then pairs each server
part with its client part (see :func:`pair_one`); the later attempts of a retried update that
reached the same server are folded into it (:func:`attempt_of`). A trace id that repeats (logs appended over
several runs) starts a new update at a client.send after a finished one. The events and their
fields are defined in ``docs/design.md``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, fields
from typing import Any

UPDATE_PATHS = (None, "/update_weights", "/reload_weights")
"""The request paths that are weight updates (None: the path was never logged)."""

OP_PATHS = {"update_weights": "/update_weights", "reload_weights": "/reload_weights"}
"""The request path of an ``op=`` of the server's rpc lines."""

Votes = dict[str, Counter]
"""Per server log file: how many updates said it is each URL."""


RETRY_GAP_MS = 50.0
"""An update whose client waited longer, from its first ``client.send`` to its ``client.done`` by
the log's times, than that line's ``wall_ms`` by more than this was retried: ``wall_ms`` is the last
attempt's, and the update's wall time is the whole wait (the failed attempts and the backoff between
them: :attr:`Update.waited_ms`). Without a retry the two differ by the log's milliseconds alone (both
lines are written where the client starts and stops its clock); a retry waits at least the
backoff's first delay, 0.25 s by default."""


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
    background: bool | None = None
    """True: no step waited for it, the orchestrator's health loop brought a server back (its
    ``client.send`` says ``background=true``; it counts in its server's row, not in the steps' time).
    False: a steps' update (``background=false``). None: not said (a log from before the field)."""
    server_ms: float | None = None
    """The server's whole handling of the update as its answer reports it (client.done server_ms:
    lock wait, validation, rpc); None in a log from before the field."""
    validate_ms: float | None = None
    """The server's validation of the weight dir (rpc.done validate_ms: sizes and checksums)."""

    def to_dict(self) -> dict[str, Any]:
        """Every field, with ``send_to_recv_ms`` (summary.json)."""
        return {f.name: getattr(self, f.name) for f in _FIELDS} | {"send_to_recv_ms": self.send_to_recv_ms}

    @property
    def retried(self) -> bool:
        """Whether the update was retried (:data:`RETRY_GAP_MS`)."""
        if self.wall_ms is None or self.send_ts is None or self.done_ts is None:
            return False
        return (self.done_ts - self.send_ts) * 1000.0 - self.wall_ms > RETRY_GAP_MS

    @property
    def gave_up(self) -> bool:
        """A steps' update (``background=false``: a log from before the field cannot tell it from the
        health loop's) that failed in the end (``client.error``), with the times of its first send and
        its end."""
        return (
            self.failed and self.background is False and self.send_ts is not None and self.done_ts is not None
        )

    @property
    def waited_ms(self) -> float | None:
        """The client's whole wait for the update at its server: ``wall_ms``, or from its first send
        to its answer when it was retried (:attr:`retried`) or to its error when it failed in the
        end (:attr:`gave_up`)."""
        if self.retried or self.gave_up:
            return (self.done_ts - self.send_ts) * 1000.0  # type: ignore[operator]
        return self.wall_ms

    @property
    def retry_ms(self) -> float:
        """The time its failed attempts took, with the backoff after them: of a retried update, its
        wait before the last attempt; of one that failed in the end, its whole wait; else 0. (The
        health loop's updates, which no step waits for, are :attr:`background` and not counted.)"""
        if self.gave_up:
            return self.waited_ms  # type: ignore[return-value]
        return self.waited_ms - self.wall_ms if self.retried else 0.0  # type: ignore[operator]

    @property
    def send_to_recv_ms(self) -> float | None:
        """Client send -> server first byte: monotonic clocks when consistent (within the client's
        whole wait), else wall clocks."""
        if self.send_t is not None and self.recv_t is not None:
            gap = (self.recv_t - self.send_t) * 1000.0
            if 0 <= gap <= (self.waited_ms or math.inf) + 1.0:
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


class LineJoin:
    """The client's and the server's parts of the updates, built one line at a time. Each part is
    kept with the row (of all client lines, or of all server lines) that started it, for the order
    of the updates."""

    def __init__(self) -> None:
        self.client: dict[tuple[str, str | None], list[Update]] = {}
        self._last_url: dict[str, str | None] = {}
        self.server: dict[tuple[str, str], list[Update]] = {}
        self.order: list[tuple[int, Update]] = []
        """Client parts as they started: (row, part)."""
        self._first: dict[tuple[str, str], int] = {}
        """The first row of each (trace id, server file)."""
        self._by_tid_memo: dict[str, list[Update]] | None = None

    def add_clients(self, *columns: list) -> None:
        """Client lines in order (row, event, tid, ts, url, path, t, wall, rpc, queue, handling,
        background, first): a line without ``url=`` belongs to its trace id's last URL; per (trace id, URL) a
        ``client.send`` starts a new update when the last one is finished or when it says
        ``attempt=1`` after a send of the last one (a trace id sent again, the last update never
        answered: a crash and a resume, replayed logs), any line starts one when there is none, and a
        retried send keeps the first attempt's times."""
        client, last_url, order = self.client, self._last_url, self.order
        for row, event, tid, ts, url, path, t, wall, rpc, queue, handling, background, first in zip(
            *columns, strict=True
        ):
            url = url or last_url.get(tid)
            occ = client.get((tid, url))
            if occ is None:
                occ = client[tid, url] = []
            last_url[tid] = url
            if event == "client.send":
                if not occ or _finished(u := occ[-1]) or (first and _sent(u)):
                    u = Update(tid, url=url)
                    occ.append(u)
                    order.append((row, u))
                if not _sent(u):  # first attempt (retries keep the same trace id)
                    u.send_ts, u.send_t = ts, t
                u.path = path
                if background is not None:  # any attempt's background=true wins
                    u.background = bool(u.background) or background
                continue
            if not occ:
                occ.append(Update(tid, url=url, path=path))
                order.append((row, occ[-1]))
            u = occ[-1]
            if event == "client.done":
                u.done_ts, u.wall_ms, u.rpc_ms, u.queue_ms, u.server_ms = ts, wall, rpc, queue, handling
                served = handling if handling is not None else rpc
                if queue is None and wall is not None and served is not None:
                    u.queue_ms = wall - served
            elif event == "client.error":
                u.failed, u.done_ts = True, ts

    def add_servers(self, *columns: list) -> None:
        """Server lines in order (row, event, tid, source, ts, t, path, target, op, rpc, lock, validate): per
        (trace id, server file) a ``server.recv`` starts a new update, any line starts one when there
        is none."""
        servers, first = self.server, self._first
        for row, event, tid, source, ts, t, path, target, op, rpc, lock, validate in zip(
            *columns, strict=True
        ):
            occ = servers.get((tid, source))
            if occ is None:
                occ = servers[tid, source] = []
                first[tid, source] = row
            if event == "server.recv" or not occ:
                occ.append(Update(tid, server=source))
            u = occ[-1]
            if event == "server.recv":
                u.recv_ts, u.recv_t, u.path = ts, t, path
            elif event == "rpc.start":
                u.target = target
                u.path = u.path or OP_PATHS.get(op or "")
            else:
                u.server_rpc_ms, u.lock_wait_ms, u.validate_ms = rpc, lock, validate
                u.path = u.path or OP_PATHS.get(op or "")

    def _clients_by_tid(self) -> dict[str, list[Update]]:
        """The client parts of each trace id, made once (the votes and the pairing both read them;
        no line is added after)."""
        if self._by_tid_memo is None:
            self._by_tid_memo = _by_tid(self.client)
        return self._by_tid_memo

    def vote(self, votes: Votes) -> None:
        """Add these parts' votes for which server URL each server log file belongs to: from the
        updates whose client and server parts can only be each other (one URL and one server file
        for a trace id) or whose ``rpc_ms`` agree to the logged decimal."""
        clients_by_tid = self._clients_by_tid()
        for tid, servers in _by_tid(self.server).items():
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
                same = [c.url for c in clients if c.url and same_rpc(c, s)]
                if len(set(same)) == 1:
                    votes.setdefault(s.server or "", Counter())[same[0]] += 1

    def pair(self, mapping: dict[str, str]) -> list[tuple[tuple[int, int], Update]]:
        """Join each server part to its client part (copied into it); returns the server parts left
        alone, with the URL of their file, keyed by (first row of their trace id and file, place)."""
        clients_by_tid = self._clients_by_tid()
        alone: list[tuple[tuple[int, int], Update]] = []
        taken: set[int] = set()
        for (tid, source), parts in self.server.items():
            clients = clients_by_tid.get(tid, [])
            mine: list[Update] = []  # the client parts this file's earlier parts paired
            for place, s in enumerate(parts):
                c = pair_one(s, mapping.get(source), clients, taken)
                again = attempt_of(s, mine, c)
                if again is not None:  # a later attempt of an update this server already received
                    answer(again, s)
                elif c is None:
                    s.url = mapping.get(source)
                    alone.append(((self._first[tid, source], place), s))
                else:
                    taken.add(id(c))
                    mine.append(c)
                    c.recv_ts, c.recv_t, c.server_rpc_ms = s.recv_ts, s.recv_t, s.server_rpc_ms
                    c.target, c.lock_wait_ms, c.server = s.target, s.lock_wait_ms, s.server
                    c.validate_ms = s.validate_ms
                    c.path = c.path or s.path
        return alone


def server_urls(votes: Votes) -> dict[str, str]:
    """Which server URL each server log file belongs to: a file is named when 80% of its votes agree."""
    out = {}
    for source, counter in votes.items():
        url, n = counter.most_common(1)[0]
        if n >= 0.8 * sum(counter.values()):
            out[source] = url
    return out


def pair_one(s: Update, url: str | None, clients: list[Update], taken: set[int]) -> Update | None:
    """The client part a server part belongs to: not yet paired, sent no later than 1 s after the
    server received it, to the server file's URL when that is known, with equal ``rpc_ms`` when
    several remain, else the one sent last before the server received it."""
    if len(clients) == 1:  # the usual case, decided as below (one client: the URL cannot rule it out)
        (c,) = clients
        return None if id(c) in taken or late(c.send_ts, s.recv_ts) else c
    free = [c for c in clients if id(c) not in taken]
    if s.recv_ts is not None:
        free = [c for c in free if c.send_ts is None or c.send_ts <= s.recv_ts + 1.0]
    if url is not None:
        free = [c for c in free if c.url == url] or ([] if any(c.url == url for c in clients) else free)
    if len(free) > 1:
        free = [c for c in free if same_rpc(c, s)] or free
    if not free:
        return None
    if s.recv_ts is not None:
        return max(free, key=lambda c: c.send_ts if c.send_ts is not None else -math.inf)
    return free[0]


def attempt_of(s: Update, mine: list[Update], free: Update | None) -> Update | None:
    """The update whose later attempt the server part ``s`` is, of ``mine`` (the client parts the same
    server file's earlier parts of the trace id were paired with), or None. The admin client retries
    a failed update under its trace id, so each attempt that reached the server logs its own
    ``server.recv``; an update is one update however many attempts it took. ``s`` is an attempt of
    the last of ``mine`` sent before the server received it (1 s of slack, as :func:`pair_one`) that
    was still waiting then (not answered or given up more than 1 s before), unless ``free`` (the
    client part ``s`` would pair with otherwise) was sent to its URL after it: a trace id that
    repeats."""
    if s.recv_ts is None or not mine:
        return None
    waiting = [
        c
        for c in mine
        if c.send_ts is not None
        and c.send_ts <= s.recv_ts + 1.0
        and (c.done_ts is None or s.recv_ts <= c.done_ts + 1.0)
    ]
    if not waiting:
        return None
    c = max(waiting, key=lambda c: c.send_ts)  # type: ignore[arg-type,return-value]
    if free is not None and free.url == c.url and free.send_ts is not None and free.send_ts > c.send_ts:  # type: ignore[operator]
        return None
    return c


def answer(c: Update, s: Update) -> None:
    """Fold the later attempt ``s`` into the update ``c``: the server's numbers are the answer's (the
    last attempt's, where it logged them), its receipt stays the first attempt's (as the client's send
    does)."""
    if s.server_rpc_ms is not None:
        c.server_rpc_ms, c.lock_wait_ms, c.validate_ms = s.server_rpc_ms, s.lock_wait_ms, s.validate_ms
    c.target = s.target or c.target
    c.path = c.path or s.path


def late(send_ts: float | None, recv_ts: float | None) -> bool:
    """Sent more than 1 s after the server received it: not the request the server received."""
    return recv_ts is not None and send_ts is not None and send_ts > recv_ts + 1.0


def _by_tid(parts: dict[tuple[str, str | None], list[Update]]) -> dict[str, list[Update]]:
    """The parts of each trace id, keys in first-seen order (a trace id with one key: its own list,
    which the callers only read)."""
    out: dict[str, list[Update]] = {}
    for (tid, _), those in parts.items():
        have = out.get(tid)
        out[tid] = those if have is None else have + those
    return out


def _sent(u: Update) -> bool:
    """A ``client.send`` of the update was read (it has the first attempt's times)."""
    return u.send_ts is not None or u.send_t is not None


def _finished(u: Update) -> bool:
    """The client's part of an update is over: answered, failed or timed."""
    return u.done_ts is not None or u.failed or u.wall_ms is not None


def same_rpc(c: Update, s: Update) -> bool:
    """The client's rpc_ms (from the server's answer) equals the server log's, to the logged decimal."""
    return c.rpc_ms is not None and s.server_rpc_ms is not None and abs(c.rpc_ms - s.server_rpc_ms) <= 0.051
