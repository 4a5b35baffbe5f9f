"""The weight-update join one line at a time: what ``UpdateJoin.add_lines`` did before it folded a
batch's lines column-wise (the reference its column-wise fold is checked against)."""

from __future__ import annotations

from prime_rl.analysis.updates import _OP_PATHS, Update


class ReferenceJoin:
    """The client's and the server's parts of each update, built line by line."""

    def __init__(self) -> None:
        self.client: dict[tuple[str, str | None], list[Update]] = {}
        self.last_url: dict[str, str | None] = {}
        self.server: dict[tuple[str, str], list[Update]] = {}
        self.order: list[Update] = []

    def add(self, event, tid, source, ts, url, path, t, wall, rpc, queue, target, op, lock) -> None:
        """One ``[weights]`` line (``t`` as read for client.send and server.recv, ``rpc`` for
        client.done and rpc.done, the other numbers for their own events)."""
        if not tid:
            return
        if event.startswith("client."):
            self._client(event, tid, ts, url, path, t, wall, rpc, queue)
        elif event in ("server.recv", "rpc.start", "rpc.done"):
            self._server(event, tid, source, ts, t, path, target, op, rpc, lock)

    def _client(self, event, tid, ts, url, path, t, wall, rpc, queue) -> None:
        url = url or self.last_url.get(tid)
        occ = self.client.setdefault((tid, url), [])
        self.last_url[tid] = url
        if event == "client.send":
            if not occ or occ[-1].done_ts is not None or occ[-1].failed or occ[-1].wall_ms is not None:
                occ.append(Update(tid, url=url))
                self.order.append(occ[-1])
            u = occ[-1]
            if u.send_ts is None and u.send_t is None:
                u.send_ts, u.send_t = ts, t
            u.path = path
            return
        if not occ:
            occ.append(Update(tid, url=url, path=path))
            self.order.append(occ[-1])
        u = occ[-1]
        if event == "client.done":
            u.done_ts, u.wall_ms, u.rpc_ms, u.queue_ms = ts, wall, rpc, queue
            if queue is None and wall is not None and rpc is not None:
                u.queue_ms = wall - rpc
        elif event == "client.error":
            u.failed, u.done_ts = True, ts

    def _server(self, event, tid, source, ts, t, path, target, op, rpc, lock) -> None:
        occ = self.server.setdefault((tid, source), [])
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
