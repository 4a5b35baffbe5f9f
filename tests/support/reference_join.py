"""The weight-update join as it was written first, one line and one part at a time: the reference
``UpdateJoin`` (which folds a batch's lines from columns and pairs the usual parts directly) is
checked against."""

from __future__ import annotations

import math
from collections import Counter

import polars as pl

from prime_rl.analysis.clock_offsets import CLIENT_SAMPLE, PROBE, Sample, probe_offsets, tid_hashes
from prime_rl.analysis.log_files import log_of
from prime_rl.analysis.updates import OP_PATHS, UPDATE_PATHS, Update, same_rpc


class ReferenceJoin:
    """The client's and the server's parts of each update, built line by line."""

    def __init__(self) -> None:
        self.client: dict[tuple[str, str | None], list[Update]] = {}
        self.last_url: dict[str, str | None] = {}
        self.server: dict[tuple[str, str], list[Update]] = {}
        self.order: list[Update] = []
        # the clock probe, line by line: the sampled trace ids' first send and last reply and, per
        # server log, first receipt and first rpc.done
        self.sent = Sample(CLIENT_SAMPLE, PROBE)
        self.replied = Sample(CLIENT_SAMPLE, PROBE)
        self.received: dict[str, Sample] = {}

    def add(
        self,
        event,
        tid,
        source,
        ts,
        url,
        path,
        t,
        wall,
        rpc,
        queue,
        target,
        op,
        lock,
        background=None,
        first=False,
        handling=None,
        validate=None,
    ) -> None:
        """One ``[weights]`` line (``t`` as read for client.send and server.recv, ``rpc`` for
        client.done and rpc.done, the other numbers for their own events; ``background``: the line
        says ``background=true`` (False: another value, None: no ``background=``); ``first``: it says ``attempt=1``;
        ``handling``: client.done's ``server_ms``, ``validate``: rpc.done's ``validate_ms``)."""
        if not tid:
            return
        h = tid_hashes(pl.Series([tid]))[0]
        if event == "client.send":
            self.sent.add(tid, h, [ts])
        if event == "client.done" and ts is not None:
            self.replied.add(tid, h, [-math.inf])
            if (entry := self.replied.entries.get(tid)) is not None:
                entry[0] = max(entry[0], ts)
        if event in ("server.recv", "rpc.done") and source is not None:
            got = self.received.setdefault(log_of(source), Sample(PROBE))
            if event == "server.recv":
                got.add(tid, h, [ts, None])
            elif ts is not None and (entry := got.entries.get(tid)) is not None and entry[1] is None:
                entry[1] = ts
        if event.startswith("client."):
            self._client(event, tid, ts, url, path, t, wall, rpc, queue, background, first, handling)
        elif event in ("server.recv", "rpc.start", "rpc.done"):
            self._server(event, tid, source, ts, t, path, target, op, rpc, lock, validate)

    def _client(self, event, tid, ts, url, path, t, wall, rpc, queue, background, first, handling) -> None:
        url = url or self.last_url.get(tid)
        occ = self.client.setdefault((tid, url), [])
        self.last_url[tid] = url
        if event == "client.send":
            last = occ[-1] if occ else None
            sent = last is not None and (last.send_ts is not None or last.send_t is not None)
            if (
                last is None
                or last.done_ts is not None
                or last.failed
                or last.wall_ms is not None
                or (first and sent)
            ):
                occ.append(Update(tid, url=url))
                self.order.append(occ[-1])
            u = occ[-1]
            if u.send_ts is None and u.send_t is None:
                u.send_ts, u.send_t = ts, t
            u.path = path
            if background is not None:  # true on any attempt's send wins
                u.background = True if background else (u.background or False)
            return
        if not occ:
            occ.append(Update(tid, url=url, path=path))
            self.order.append(occ[-1])
        u = occ[-1]
        if event == "client.done":
            u.done_ts, u.wall_ms, u.rpc_ms, u.queue_ms, u.server_ms = ts, wall, rpc, queue, handling
            served = handling if handling is not None else rpc  # queue_ms = wall_ms - server_ms
            if queue is None and wall is not None and served is not None:
                u.queue_ms = wall - served
        elif event == "client.error":
            u.failed, u.done_ts = True, ts

    def _server(self, event, tid, source, ts, t, path, target, op, rpc, lock, validate) -> None:
        occ = self.server.setdefault((tid, source), [])
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

    def server_urls(self) -> dict[str, str]:
        votes: dict[str, Counter] = {}
        servers_by_tid: dict[str, list[Update]] = {}
        for (tid, _), parts in self.server.items():
            servers_by_tid.setdefault(tid, []).extend(parts)
        clients_by_tid: dict[str, list[Update]] = {}
        for (tid, _), parts in self.client.items():
            clients_by_tid.setdefault(tid, []).extend(parts)
        for tid, servers in servers_by_tid.items():
            clients = clients_by_tid.get(tid, [])
            urls = {c.url for c in clients if c.url}
            if len(urls) == 1 and len({s.server for s in servers}) == 1:
                votes.setdefault(servers[0].server or "", Counter())[next(iter(urls))] += 1
                continue
            for s in servers:
                same = [c.url for c in clients if c.url and same_rpc(c, s)]
                if len(set(same)) == 1:
                    votes.setdefault(s.server or "", Counter())[same[0]] += 1
        out = {}
        for source, counter in votes.items():
            url, n = counter.most_common(1)[0]
            if n >= 0.8 * sum(counter.values()):
                out[source] = url
        return out

    def updates(self) -> list[Update]:
        """The updates, joined once (the server parts of a log on a clock of its own moved onto the
        orchestrator's first)."""
        offsets = probe_offsets(self.sent, self.replied, self.received)
        for (_, source), parts in self.server.items():
            off = offsets.get(log_of(source))
            for s in parts:
                if off is not None and s.recv_ts is not None:
                    s.recv_ts -= off[0]
        self.received.clear()  # measured once: a second call moves nothing again
        mapping = self.server_urls()
        clients_by_tid: dict[str, list[Update]] = {}
        for (tid, _), parts in self.client.items():
            clients_by_tid.setdefault(tid, []).extend(parts)
        alone: list[Update] = []
        taken: set[int] = set()
        for (tid, source), parts in self.server.items():
            paired: list[Update] = []  # by this file's earlier parts
            for s in parts:
                c = _pair(s, mapping.get(source), clients_by_tid.get(tid, []), taken)
                first = _first_attempt(s, paired, c)
                if first is not None:  # a retry of an update the server received: one update
                    if s.server_rpc_ms is not None:
                        first.server_rpc_ms, first.lock_wait_ms = s.server_rpc_ms, s.lock_wait_ms
                        first.validate_ms = s.validate_ms
                    first.target = s.target or first.target
                    first.path = first.path or s.path
                    continue
                if c is not None:
                    paired.append(c)
                if c is None:
                    s.url = mapping.get(source)
                    alone.append(s)
                else:
                    taken.add(id(c))
                    c.recv_ts, c.recv_t, c.server_rpc_ms = s.recv_ts, s.recv_t, s.server_rpc_ms
                    c.target, c.lock_wait_ms, c.server = s.target, s.lock_wait_ms, s.server
                    c.validate_ms = s.validate_ms
                    c.path = c.path or s.path
        return [u for u in self.order + alone if u.path in UPDATE_PATHS]


def _pair(s: Update, url: str | None, clients: list[Update], taken: set[int]) -> Update | None:
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


def _first_attempt(s: Update, paired: list[Update], free: Update | None) -> Update | None:
    """The client part, of those the server file's earlier parts took, still waiting when ``s`` was
    received (sent by then, not done more than 1 s before), sent last; None when there is none or
    ``free`` went to its URL later (another update under the same trace id)."""
    best = None
    for c in paired:
        if s.recv_ts is None or c.send_ts is None or c.send_ts > s.recv_ts + 1.0:
            continue
        if c.done_ts is not None and s.recv_ts > c.done_ts + 1.0:
            continue
        if best is None or c.send_ts > best.send_ts:
            best = c
    later = free is not None and free.send_ts is not None and best is not None and free.send_ts > best.send_ts
    if later and free.url == best.url:
        return None
    return best
