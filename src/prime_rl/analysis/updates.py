"""Weight updates: the client's and the server's ``[weights]`` lines joined by trace id.

The lines are kept as columns while the logs are read; :meth:`UpdateJoin.updates` joins them at
the end: the usual updates column-wise (:mod:`~prime_rl.analysis.update_columns`), every other
trace id line by line (:class:`~prime_rl.analysis.update_parts.LineJoin`). The events
(``client.send``, ``client.done``, ``client.error``, ``server.recv``, ``rpc.start``, ``rpc.done``)
and their fields are defined in ``docs/design.md``.
"""

from __future__ import annotations

from operator import attrgetter, itemgetter

import polars as pl

from prime_rl.analysis.tagged import TaggedLines
from prime_rl.analysis.update_columns import (
    CLIENT_SCHEMA,
    SERVER_SCHEMA,
    alone_updates,
    client_updates,
    usual_updates,
)
from prime_rl.analysis.update_parts import (
    OP_PATHS,
    UPDATE_PATHS,
    LineJoin,
    Update,
    same_rpc,
    server_urls,
)

__all__ = ["OP_PATHS", "UPDATE_PATHS", "Update", "UpdateJoin", "same_rpc", "update_frame"]

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

_SERVER_EVENTS = ["server.recv", "rpc.start", "rpc.done"]


class UpdateJoin:
    """Collects ``[weights]`` lines; :meth:`updates` joins them into :class:`Update` records, one per
    trace id *and server* (one update goes to every server under one trace id)."""

    def __init__(self) -> None:
        self._client: list[pl.DataFrame] = []
        self._server: list[pl.DataFrame] = []
        self._updates: list[Update] | None = None

    def add_lines(self, lines: TaggedLines) -> None:
        """Keep a batch's ``[weights]`` lines that have a trace id, as columns: the client's and the
        server's apart, each in line order."""
        lines.fields(*WEIGHTS_FIELDS)
        frame = lines.frame
        event, tid = frame.get_column("event"), frame.get_column("tid")
        has_tid = (tid.is_not_null() & (tid != "")).fill_null(False)
        client = has_tid & event.str.starts_with("client.")
        server = has_tid & event.is_in(_SERVER_EVENTS)
        t = lines.num_series("t", ("client.send", "server.recv"))
        rpc = lines.num_series("rpc_ms", ("client.done", "rpc.done"))
        common = {"event": event, "tid": tid, "ts": frame.get_column("ts"), "t": t, "rpc": rpc}
        path = lines.text_series("path")
        if client.any():
            columns = common | {
                "url": lines.text_series("url"),
                "path": path,
                "wall": lines.num_series("wall_ms", ("client.done",)),
                "queue": lines.num_series("queue_ms", ("client.done",)),
            }
            self._client.append(_frame(columns, CLIENT_SCHEMA, client))
        if server.any():
            if lines.events is not None and lines.path is None:  # a batch of events: each event's own file
                sources = [str(ev.path) if ev.path is not None else ev.source for ev in lines.events]
                source = pl.Series("source", sources, dtype=pl.String)
            else:
                name = str(lines.path) if lines.path is not None else lines.source
                source = pl.Series("source", [name], dtype=pl.String).new_from_index(0, len(frame))
            columns = common | {
                "source": source,
                "path": path,
                "target": lines.text_series("target"),
                "op": lines.text_series("op"),
                "lock": lines.num_series("lock_wait_ms", ("rpc.done",)),
            }
            self._server.append(_frame(columns, SERVER_SCHEMA, server))

    def updates(self) -> list[Update]:
        """The weight updates (other admin paths left out), one per trace id and server: client parts
        in first-seen order with their server parts joined, then server parts without a client part
        (in the order their trace id and file were first seen), each with its file's URL when the
        votes name one. Joined once (the lines' columns are let go then), at the first call."""
        if self._updates is None:
            self._updates = self._join()
        return self._updates

    def _join(self) -> list[Update]:
        clients = _concat(self._client, CLIENT_SCHEMA).with_row_index("i")
        servers = _concat(self._server, SERVER_SCHEMA).with_row_index("j")
        self._client, self._server = [], []
        usual = usual_updates(clients, servers)
        lines = LineJoin()
        others = pl.col("tid").is_in(usual.others.implode())
        lines.add_clients(*_lists(clients.filter(others), "i", *CLIENT_SCHEMA))
        lines.add_servers(*_lists(servers.filter(others), "j", *SERVER_SCHEMA))
        del clients, servers  # the lines' columns, let go before the records are made
        votes = usual.votes
        lines.vote(votes)
        mapping = server_urls(votes)
        alone = lines.pair(mapping)
        usual_alone = alone_updates(usual.alone)
        for _, s in usual_alone:
            s.url = mapping.get(s.server or "")
        # each list is in row order already: the sorts merge two runs
        order = sorted(client_updates(usual.clients) + lines.order, key=itemgetter(0))
        alone = sorted(usual_alone + alone, key=itemgetter(0))
        return [u for _, u in order + alone if u.path in UPDATE_PATHS]


def _frame(columns: dict[str, pl.Series], schema: dict, keep: pl.Series) -> pl.DataFrame:
    return pl.DataFrame({name: columns[name] for name in schema}, schema=schema).filter(keep)


def _concat(frames: list[pl.DataFrame], schema: dict) -> pl.DataFrame:
    return pl.concat(frames, rechunk=False) if frames else pl.DataFrame(schema=schema)


def _lists(frame: pl.DataFrame, *names: str) -> list[list]:
    return [frame.get_column(name).to_list() for name in names]


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
