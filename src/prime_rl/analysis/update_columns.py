"""The usual weight updates joined from columns, the rest left to the line-by-line join.

Almost every update in a log follows one pattern: its trace id has one ``client.send`` and one
``client.done`` (to one URL), and one server file's ``server.recv``, ``rpc.start`` and ``rpc.done``
(or a prefix of them). Such trace ids are found with window expressions over all the ``[weights]``
lines at once and turned into rows of updates in bulk (columns named as
:class:`~prime_rl.analysis.update_parts.Update`'s fields), built as
:class:`~prime_rl.analysis.update_parts.LineJoin` would build them line by line; every
other trace id (retries, several servers, repeats, lines missing or out of order) goes to
``LineJoin`` whole (trace ids are independent in the join, apart from the server files' URL votes,
which both add to).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import polars as pl

from prime_rl.analysis.update_parts import Votes

CLIENT_SCHEMA = {
    "event": pl.Categorical,
    "tid": pl.String,
    "ts": pl.Float64,
    "url": pl.Categorical,
    "path": pl.Categorical,
    "t": pl.Float64,
    "wall": pl.Float64,
    "rpc": pl.Float64,
    "queue": pl.Float64,
    "handling": pl.Float64,
    "background": pl.Boolean,
    "first": pl.Boolean,
}
"""The client lines' columns (``t`` of client.send, the numbers of client.done, else null;
``handling``: client.done's ``server_ms``;
``background``: the line says ``background=true`` (null without ``background=``); ``first``: ``attempt=1``, null without ``attempt=``). Every
update's lines are kept until the join; the words that repeat on every line (event, URL, path, and
the server's file and op below) are categories, kept once each (the 10M-line all-tagged log's peak
RSS 1.53-1.61 GB -> 1.23-1.30 GB); a trace id or a target names one update and stays text."""

SERVER_SCHEMA = {
    "event": pl.Categorical,
    "tid": pl.String,
    "source": pl.Categorical,
    "ts": pl.Float64,
    "t": pl.Float64,
    "path": pl.Categorical,
    "target": pl.String,
    "op": pl.Categorical,
    "rpc": pl.Float64,
    "lock": pl.Float64,
    "validate": pl.Float64,
}
"""The server lines' columns (``source``: the server log file; ``t`` of server.recv, the numbers of
rpc.done, else null)."""


@dataclass
class Usual:
    """The usual updates, and which trace ids were left to the line-by-line join."""

    others: pl.Series
    """The trace ids of every other update: their lines go to the line-by-line join."""
    clients: pl.DataFrame
    """Client parts (joined with their server part when it has one), with the row ``i`` that
    started each, in the columns of :class:`~prime_rl.analysis.update_parts.Update`'s fields."""
    alone: pl.DataFrame
    """Server parts with no client part, with their row ``j`` (no URL yet: it comes from the votes)."""
    votes: Votes
    """Which URL each server file is, from the trace ids with one client and one server part."""


def _truthy(c: str | pl.Expr) -> pl.Expr:
    c = pl.col(c) if isinstance(c, str) else c
    return c.is_not_null() & (c != "")


def _op_path(c: pl.Expr) -> pl.Expr:
    """``OP_PATHS.get(op)``: the request path an rpc line's op names (null: none)."""
    return (
        pl.when(c == "update_weights")
        .then(pl.lit("/update_weights"))
        .when(c == "reload_weights")
        .then(pl.lit("/reload_weights"))
    )


def _client_parts(clients: pl.DataFrame) -> pl.DataFrame:
    """One row per trace id (its first client line, row ``i``) with its part's fields and whether
    it is the usual pattern: a send alone, or a send then a done to the same URL."""
    # the lines sorted by trace id (stably): each trace id's first and last line are where the id
    # changes; 6x faster than window expressions over every line, and no groups to hold
    lines = clients.sort("tid", maintain_order=True)
    tid = lines.get_column("tid")
    starts = tid.is_first_distinct().arg_true()
    ends = (tid != tid.shift(-1)).fill_null(True).arg_true()
    n = (ends - starts + 1).alias("n")
    last = lines.select(
        done_event="event",
        done_url="url",
        done_ts="ts",
        done_wall="wall",
        done_rpc="rpc",
        done_queue="queue",
        done_handling="handling",
    )
    parts = (
        pl.concat([lines[starts], last[ends]], how="horizontal")
        .with_columns(n)
        .with_columns(pl.when(pl.col("n") == 2).then(c).name.keep() for c in last.columns)
        .sort("i")
    )
    return client_part_fields(parts)


def client_part_fields(parts: pl.DataFrame) -> pl.DataFrame:
    """From each trace id's first client line with ``n`` (its client lines) and its last line's
    ``done_*`` columns (null unless ``n`` is 2): the part's fields and whether it is the usual pattern."""
    same_url = ~_truthy("done_url") | (_truthy("url") & (pl.col("done_url") == pl.col("url")))
    usual = (pl.col("event") == "client.send") & (
        (pl.col("n") == 1) | ((pl.col("n") == 2) & (pl.col("done_event") == "client.done") & same_url)
    )
    wall, rpc, queue = pl.col("done_wall"), pl.col("done_rpc"), pl.col("done_queue")
    handling = pl.col("done_handling")
    # queue_ms = wall_ms - server_ms (rpc_ms where the server reports no server_ms), as the client has it
    served = pl.coalesce(handling, rpc)
    return parts.select(
        "i",
        "tid",
        usual=usual,
        path="path",
        url=pl.when(_truthy("url")).then("url"),
        send_ts="ts",
        send_t="t",
        background="background",
        done_ts="done_ts",
        wall=wall,
        rpc=rpc,
        queue=pl.when(queue.is_null() & wall.is_not_null() & served.is_not_null())
        .then(wall - served)
        .otherwise(queue),
        handling=handling,
    )


def _server_parts(servers: pl.DataFrame) -> pl.DataFrame:
    """One row per (trace id, server file) (its first line, row ``j``) with its part's fields and
    whether it is the usual pattern: server.recv, then rpc.start and rpc.done, or one of them; and
    ``files``: how many server files have lines of the trace id."""
    key = ["tid", "source"]
    code = (
        pl.when(pl.col("event") == "server.recv")
        .then(1)
        .when(pl.col("event") == "rpc.start")
        .then(2)
        .otherwise(3)
    )
    of = lambda c, k: pl.col(c).filter(pl.col("code") == k).first().over(key)  # noqa: E731
    parts = (
        servers.with_columns(code=code)
        .with_columns(
            n=pl.len().over(key),
            pos=pl.int_range(pl.len()).over(key),
            last_code=pl.col("code").last().over(key),
            code_sum=pl.col("code").sum().over(key),
            target=of("target", 2),
            start_op=of("op", 2),
            done_op=of("op", 3),
            rpc=of("rpc", 3),
            lock=of("lock", 3),
            validate=of("validate", 3),
        )
        .filter(pl.col("pos") == 0)
    )
    n, last = pl.col("n"), pl.col("last_code")
    usual = (pl.col("code") == 1) & (
        (n == 1) | ((n == 2) & (last != 1)) | ((n == 3) & (last == 3) & (pl.col("code_sum") == 6))
    )
    return parts.select(
        "j",
        "tid",
        "source",
        usual=usual,
        files=pl.len().over("tid"),
        path=_server_path((n == 3) | ((n == 2) & (last == 2)), (n == 3) | ((n == 2) & (last == 3))),
        recv_ts="ts",
        recv_t="t",
        target="target",
        rpc="rpc",
        lock="lock",
        validate="validate",
    )


def _server_path(has_start: pl.Expr, has_done: pl.Expr) -> pl.Expr:
    """The path as the lines set it: server.recv's, then ``path or OP_PATHS.get(op)`` at rpc.start,
    then at rpc.done."""
    p = pl.col("path")
    p = pl.when(has_start & ~_truthy(p)).then(_op_path(pl.col("start_op"))).otherwise(p)
    return pl.when(has_done & ~_truthy(p)).then(_op_path(pl.col("done_op"))).otherwise(p)


def usual_updates(clients: pl.DataFrame, servers: pl.DataFrame) -> Usual:
    """``clients`` (:data:`CLIENT_SCHEMA` and row ``i``) and ``servers`` (:data:`SERVER_SCHEMA` and
    row ``j``): every [weights] line with a trace id, in line order."""
    c = _client_parts(clients)
    s = _server_parts(servers)
    others = pl.concat(
        [
            c.filter(~pl.col("usual")).get_column("tid"),
            s.filter(~pl.col("usual") | (pl.col("files") > 1)).get_column("tid"),
        ]
    ).unique()
    c = c.filter(pl.col("usual") & ~pl.col("tid").is_in(others.implode()))
    s = s.filter(pl.col("usual") & ~pl.col("tid").is_in(others.implode()))
    both = c.join(s.select(pl.exclude("usual", "files")), on="tid", how="left", maintain_order="left")
    has_server = pl.col("j").is_not_null()
    late = (
        has_server
        & pl.col("send_ts").is_not_null()
        & pl.col("recv_ts").is_not_null()
        & (pl.col("send_ts") > pl.col("recv_ts") + 1.0)
    )
    both = both.with_columns(joined=has_server & ~late.fill_null(False), late=late.fill_null(False))
    votes: Votes = {}
    voters = both.filter(has_server & _truthy("url")).group_by("source", "url", maintain_order=True).len()
    for source, url, count in voters.iter_rows():
        votes.setdefault(source, Counter())[url] = count
    joined = lambda c: pl.when(pl.col("joined")).then(c)  # noqa: E731
    clients_out = both.select(
        "i",
        "tid",
        path=pl.when(pl.col("joined") & ~_truthy("path")).then("path_right").otherwise("path"),
        url="url",
        send_ts="send_ts",
        send_t="send_t",
        done_ts="done_ts",
        wall_ms="wall",
        rpc_ms="rpc",
        queue_ms="queue",
        recv_ts=joined("recv_ts"),
        recv_t=joined("recv_t"),
        server_rpc_ms=joined("rpc_right"),
        target=joined("target"),
        failed=pl.lit(False),
        server=joined("source"),
        lock_wait_ms=joined("lock"),
        background="background",
        server_ms="handling",
        validate_ms=joined("validate"),
    )
    server_only = (
        "j",
        "tid",
        "path",
        "recv_ts",
        "recv_t",
        "server_rpc_ms",
        "target",
        "server",
        "lock_wait_ms",
        "validate_ms",
    )
    late_servers = both.filter(pl.col("late")).rename(
        {
            "path": "client_path",
            "path_right": "path",
            "rpc_right": "server_rpc_ms",
            "source": "server",
            "lock": "lock_wait_ms",
            "validate": "validate_ms",
        }
    )
    lone_servers = s.filter(~pl.col("tid").is_in(c.get_column("tid").implode())).rename(
        {"rpc": "server_rpc_ms", "source": "server", "lock": "lock_wait_ms", "validate": "validate_ms"}
    )
    alone = pl.concat([late_servers.select(server_only), lone_servers.select(server_only)])
    return Usual(others, clients_out, alone, votes)
