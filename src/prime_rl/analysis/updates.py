"""Weight updates: the client's and the server's ``[weights]`` lines joined by trace id.

The lines are kept as columns while the logs are read; :meth:`UpdateJoin.updates` joins them at
the end: the usual updates column-wise (:mod:`~prime_rl.analysis.update_columns`), every other
trace id line by line (:class:`~prime_rl.analysis.update_parts.LineJoin`). The events
(``client.send``, ``client.done``, ``client.error``, ``server.recv``, ``rpc.start``, ``rpc.done``)
and their fields are defined in ``docs/design.md``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from operator import attrgetter
from pathlib import Path

import polars as pl

from prime_rl.analysis.clock_offsets import ClockProbe, Offsets, on_orchestrator_clock, probe_lines
from prime_rl.analysis.spill import Spill
from prime_rl.analysis.tagged import TaggedLines
from prime_rl.analysis.update_columns import (
    CLIENT_SCHEMA,
    SERVER_SCHEMA,
    Usual,
    usual_updates,
)
from prime_rl.analysis.update_parts import (
    OP_PATHS,
    RETRY_GAP_MS,
    UPDATE_PATHS,
    LineJoin,
    Update,
    Votes,
    same_rpc,
    server_urls,
)
from prime_rl.analysis.update_table import UPDATE_SCHEMA, UpdateTable, conform, frame_of

__all__ = [
    "OP_PATHS",
    "RETRY_GAP_MS",
    "UPDATE_PATHS",
    "Update",
    "UpdateJoin",
    "UpdateTable",
    "same_rpc",
    "update_frame",
]

WEIGHTS_FIELDS = (
    "url",
    "path",
    "t",
    "wall_ms",
    "queue_ms",
    "rpc_ms",
    "lock_wait_ms",
    "server_ms",
    "validate_ms",
    "target",
    "op",
    "background",
    "attempt",
)
"""The fields of ``[weights]`` lines the join reads."""

WEIGHTS_NUMBERS = (
    ("t", ("client.send", "server.recv")),
    ("rpc_ms", ("client.done", "rpc.done")),
    ("wall_ms", ("client.done",)),
    ("queue_ms", ("client.done",)),
    ("lock_wait_ms", ("rpc.done",)),
    ("server_ms", ("client.done",)),
    ("validate_ms", ("rpc.done",)),
)
"""The numbers (field, the events whose lines are read) the join reads."""

_SERVER_EVENTS = ["server.recv", "rpc.start", "rpc.done"]


def prepare_weights(lines: TaggedLines) -> None:
    """Make a batch's :func:`weights_frames` and the clock probe's reduction of them
    (:func:`~prime_rl.analysis.clock_offsets.probe_lines`) in the parse's thread (the casts to
    categories took about a tenth of the collector's thread on a long run, the probe's reductions
    0.9 s of it at 10M all-tagged lines); :meth:`UpdateJoin.add_lines` takes them."""
    if lines.events is None:
        lines.fields(*WEIGHTS_FIELDS)
        numbers = {key: lines.num_ahead(key, events) for key, events in WEIGHTS_NUMBERS}
        frames = weights_frames(lines, numbers)
        lines.ahead["weights"] = (*frames, probe_lines(*frames))


def weights_frames(
    lines: TaggedLines, numbers: dict[str, pl.Series]
) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """A batch's ``[weights]`` lines that have a trace id as the client's and the server's frames
    (:data:`CLIENT_SCHEMA`, :data:`SERVER_SCHEMA`; None: no such line), with the numbers
    ``numbers`` (of :data:`WEIGHTS_NUMBERS`)."""
    frame = lines.frame
    event, tid = frame.get_column("event"), frame.get_column("tid")
    has_tid = (tid.is_not_null() & (tid != "")).fill_null(False)
    client = has_tid & event.str.starts_with("client.")
    server = has_tid & event.is_in(_SERVER_EVENTS)
    common = {
        "event": event,
        "tid": tid,
        "ts": frame.get_column("ts"),
        "t": numbers["t"],
        "rpc": numbers["rpc_ms"],
    }
    path = lines.text_series("path")
    clients = servers = None
    if client.any():
        columns = common | {
            "url": lines.text_series("url"),
            "path": path,
            "wall": numbers["wall_ms"],
            "queue": numbers["queue_ms"],
            "handling": numbers["server_ms"],
            "background": lines.text_series("background") == "true",
            "first": lines.text_series("attempt") == "1",
        }
        clients = _frame(columns, CLIENT_SCHEMA, client)
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
            "lock": numbers["lock_wait_ms"],
            "validate": numbers["validate_ms"],
        }
        servers = _frame(columns, SERVER_SCHEMA, server)
    return clients, servers


class UpdateJoin:
    """Collects ``[weights]`` lines; :meth:`updates` joins them into :class:`Update` records, one per
    trace id *and server* (one update goes to every server under one trace id)."""

    def __init__(
        self,
        split_rows: int | None = None,
        max_parts: int | None = None,
        spill_rows: int | None = None,
        spill_dir: str | Path | None = None,
    ) -> None:
        self.spill = Spill(spill_dir)
        """Where a long log's kept lines go on disk (``spill_dir``: under it, else the system's
        temporary directory)."""
        spill_rows = SPILL_ROWS if spill_rows is None else spill_rows
        self._client = _Kept("i", self.spill, spill_rows)
        self._server = _Kept("j", self.spill, spill_rows)
        self._split_rows = SPLIT_ROWS if split_rows is None else split_rows
        """Kept lines per part past which the parts are split :data:`PARTS` ways again (tests: 0)."""
        self._max_parts = MAX_PARTS if max_parts is None else max_parts
        self._updates: UpdateTable | None = None
        self._probe = ClockProbe()
        self._rpc_open = RpcLeftOpen()
        self.offsets: Offsets = {}
        """Server logs whose clock is off the orchestrator's (:mod:`~prime_rl.analysis.clock_offsets`),
        found before the join, which takes their lines on the orchestrator's clock."""

    def add_lines(self, lines: TaggedLines) -> None:
        """Keep a batch's ``[weights]`` lines that have a trace id, as columns: the client's and the
        server's apart, each in line order (made ahead by :func:`prepare_weights` when it could)."""
        lines.fields(*WEIGHTS_FIELDS)
        # every number read here (its bad values counted in the collector's order), made or not
        numbers = {key: lines.num_series(key, events) for key, events in WEIGHTS_NUMBERS}
        ahead = lines.ahead.pop("weights", None)
        if ahead is None:
            client, server = weights_frames(lines, numbers)
            probed = probe_lines(client, server)
        else:
            client, server, probed = ahead
        self._probe.add(probed)
        if client is not None:
            self._client.add(client)
        if server is not None:
            self._server.add(server)
            self._rpc_open.add(server)
        n = self._client.parts_n
        if n < self._max_parts and self._client.rows + self._server.rows > self._split_rows * n:
            self._client.split(n * PARTS)
            self._server.split(n * PARTS)

    def updates(self) -> UpdateTable:
        """The weight updates (other admin paths left out), one per trace id and server: client parts
        in first-seen order with their server parts joined, then server parts without a client part
        (in the order their trace id and file were first seen), each with its file's URL when the
        votes name one. Joined once (the lines' columns are let go then), at the first call."""
        if self._updates is None:
            self.offsets = self._probe.offsets()
            try:
                self._updates = self._join()
            finally:
                self.spill.close()
        return self._updates

    def rpc_left_open(self) -> pl.DataFrame:
        """The servers' ``rpc.start`` lines that no ``rpc.done`` of their trace id and file followed
        (:class:`RpcLeftOpen`), on the orchestrator's clock: ``tid``, ``server`` (the file) and ``ts``.
        After :meth:`updates` (which finds the clocks)."""
        return self._rpc_open.frame(self.offsets)

    def _take(self, part: int) -> tuple[pl.DataFrame, pl.DataFrame, Usual]:
        """One part's lines (client, server) and their usual updates: the join's column work, which
        runs without the GIL (:data:`JOIN_THREADS` parts at a time)."""
        clients = self._client.take(part, CLIENT_SCHEMA)
        servers = on_orchestrator_clock(self._server.take(part, SERVER_SCHEMA), self.offsets)
        return clients, servers, usual_updates(clients, servers)

    def _join(self) -> UpdateTable:
        if not self._client.rows and not self._server.rows:
            # no [weights] line (a collector's log, a run without updates): no update, without the
            # dozens of queries on empty frames the join would make (19 ms of a 20-line log's 30 ms
            # of collection)
            return UpdateTable(pl.DataFrame(schema=UPDATE_SCHEMA))
        return self._join_parts()

    def _join_parts(self) -> UpdateTable:
        lines = LineJoin()
        votes: Votes = {}
        order: list[pl.DataFrame | Path] = []  # the usual updates' client parts, with their row i
        spilled = self.spill.files > 0  # a long log: each part's updates wait on disk too
        usual_alone: list[pl.DataFrame] = []  # and server parts alone, with their row j
        # trace ids are independent in the join but for the votes, so a long log's are joined a part
        # of them at a time: the column work's copies of the lines are a part's, not all of theirs
        parts = self._client.parts_n
        with ThreadPoolExecutor(JOIN_THREADS, thread_name_prefix="analysis-join") as ahead:
            taken = [ahead.submit(self._take, part) for part in range(min(JOIN_THREADS, parts))]
            for part in range(parts):  # the parts' line-by-line rest in order, here
                clients, servers, usual = taken.pop(0).result()
                others = pl.col("tid").is_in(usual.others.implode())
                lines.add_clients(*_lists(clients.filter(others), "i", *CLIENT_SCHEMA))
                lines.add_servers(*_lists(servers.filter(others), "j", *SERVER_SCHEMA))
                del clients, servers  # the lines' columns, let go before the next part's are read
                if part + JOIN_THREADS < parts:
                    taken.append(ahead.submit(self._take, part + JOIN_THREADS))
                for source, counter in usual.votes.items():
                    votes.setdefault(source, Counter()).update(counter)
                keyed = _keyed(usual.clients, 0, usual.clients.get_column("i"))
                order.append((self.spill.write(keyed) if spilled else None) or keyed)
                usual_alone.append(usual.alone)
        lines.vote(votes)
        mapping = server_urls(votes)
        alone = lines.pair(mapping)
        # the usual server parts alone get their file's URL as the pairing gives it to the others
        server = pl.col("server").cast(pl.String).fill_null("")
        url = (
            server.replace_strict(mapping, default=None, return_dtype=pl.String)
            if mapping
            else pl.lit(None, pl.String)
        )
        order += [_keyed(frame.with_columns(url=url), 1, frame.get_column("j")) for frame in usual_alone]
        order.append(_keyed(frame_of(u for _, u in lines.order), 0, [row for row, _ in lines.order]))
        keys = [key for key, _ in alone]
        order.append(_keyed(frame_of(u for _, u in alone), 1, [r for r, _ in keys], [p for _, p in keys]))
        return UpdateTable(_in_order(order, self.spill))


class RpcLeftOpen:
    """The servers' ``rpc.start`` lines no ``rpc.done`` followed: of the lines of their trace id in
    their file, the next is a ``server.recv`` or an ``rpc.start`` (another update under the trace id,
    another attempt) or none (the logs end). An update a crash of the orchestrator left unanswered
    had its engine's reload running from there (:func:`~prime_rl.analysis.stages.update_critical`).
    Few are kept: an rpc.start whose rpc.done comes next is let go a batch at a time, column-wise."""

    _KEY = ("tid", "source")

    def __init__(self) -> None:
        self.left: list[pl.DataFrame] = []
        self.pending = pl.DataFrame(
            schema={"event": pl.String, "tid": pl.String, "source": pl.String, "ts": pl.Float64}
        )
        """The rpc.start lines with no later line of their trace id and file yet (a batch's last)."""

    def add(self, servers: pl.DataFrame) -> None:
        """A batch's server lines (:data:`SERVER_SCHEMA`, in line order)."""
        lines = servers.select(
            pl.col("event").cast(pl.String), "tid", pl.col("source").cast(pl.String), "ts"
        ).filter(pl.col("event").is_in(_SERVER_EVENTS))
        if self.pending.height:
            lines = pl.concat([self.pending, lines])
        col = pl.col
        # the common case: the line after an rpc.start is its rpc.done
        answered = (
            (col("event").shift(-1) == "rpc.done")
            & (col("tid").shift(-1) == col("tid"))
            & (col("source").shift(-1) == col("source"))
        ).fill_null(False)
        open_tids = lines.filter((col("event") == "rpc.start") & ~answered).get_column("tid").unique()
        if not len(open_tids):
            self.pending = self.pending.clear()
            return
        starts = (
            lines.filter(col("tid").is_in(open_tids.implode()))
            .with_columns(next=col("event").shift(-1).over(self._KEY))
            .filter((col("event") == "rpc.start") & (col("next") != "rpc.done").fill_null(True))
        )
        left = starts.filter(col("next").is_not_null()).drop("next")
        if left.height:
            self.left.append(left)
        self.pending = starts.filter(col("next").is_null()).drop("next")

    def frame(self, offsets: Offsets) -> pl.DataFrame:
        """Every rpc.start left open (those where the logs end too): ``tid``, ``server``, ``ts`` on the
        orchestrator's clock (``offsets``)."""
        lines = pl.concat([*self.left, self.pending])
        return on_orchestrator_clock(lines, offsets).select("tid", server="source", ts="ts")


def _in_order(parts: list[pl.DataFrame | Path], spill: Spill) -> pl.DataFrame:
    """The parts' updates (weight updates only: other admin paths left out) ordered by their key:
    client parts by their first row, then server parts alone by (first row, place); each key is one
    update's. A part is a frame, or a file of one (removed here). Gathered a few columns at a time
    (:data:`JOIN_THREADS`, each in a thread), each let go once gathered (``parts`` is emptied): a
    sort of the whole frame would hold every column twice (200 MB more at 714k updates), and the
    parts on disk are read a column at a time."""
    keys = ("_group", "_row", "_place", "path")
    path = pl.col("path")
    rows = (
        pl.DataFrame([_column(parts, spill, name) for name in keys])
        .with_row_index("k")
        .filter(path.is_null() | path.is_in([p for p in UPDATE_PATHS if p is not None]))
        .sort("_group", "_row", "_place", maintain_order=True)
        .get_column("k")
    )
    columns = []
    names = list(UPDATE_SCHEMA)
    with ThreadPoolExecutor(JOIN_THREADS, thread_name_prefix="analysis-join") as pool:
        # JOIN_THREADS columns at a time (reading the files and gathering run without the GIL),
        # each let go from the parts in memory once gathered
        for at in range(0, len(names), JOIN_THREADS):
            some = names[at : at + JOIN_THREADS]
            columns += pool.map(lambda name: _column(parts, spill, name).gather(rows), some)
            for k, part in enumerate(parts):
                if isinstance(part, pl.DataFrame):
                    parts[k] = part.drop(some)
    for part in parts:
        if isinstance(part, Path):
            spill.remove(part)
    parts.clear()
    return pl.DataFrame(columns)


def _column(parts: list[pl.DataFrame | Path], spill: Spill, name: str) -> pl.Series:
    """Column ``name`` of every part, in order (read from the files alone)."""
    pieces = []
    for part in parts:
        if isinstance(part, Path):
            pieces.append(spill.read(part, [name], remove=False).get_column(name))
        else:
            pieces.append(part.get_column(name))
    return pl.concat(pieces, rechunk=False)


def _keyed(
    frame: pl.DataFrame, group: int, row: Sequence[int], place: Sequence[int] | None = None
) -> pl.DataFrame:
    """A part of the updates in :data:`~prime_rl.analysis.update_table.UPDATE_SCHEMA`, with the key
    they are ordered by: ``_group`` (0 client parts, 1 server parts alone), ``_row`` (the row that
    started each) and ``_place`` (0 unless given)."""
    return conform(frame).with_columns(
        _group=pl.lit(group, pl.Int64),
        _row=pl.Series(row, dtype=pl.Int64),
        _place=pl.lit(0, pl.Int64) if place is None else pl.Series(place, dtype=pl.Int64),
    )


JOIN_THREADS = 2
"""Parts whose column work (:meth:`UpdateJoin._take`) runs at once, each in a thread: one part's
queries kept about 1.3 of the two cores busy, two keep both (the 10M-line all-tagged benchmark's
join: 2.0-2.4 s -> 1.5-1.65 s); one more part's lines are in memory meanwhile (a part's are let go
before the next is read)."""
SPLIT_ROWS = 1 << 20
"""Kept lines (client and server) per part past which the parts are split :data:`PARTS` ways again
(one part; 8 past 1M lines, 64 past 8M, ...): each part's join costs the same few dozen queries
over its lines, so a part's join holds about as much memory whatever the log's length."""
PARTS = 8
"""How many ways the parts are split each time, by a hash of the trace id (the parts are joined one
at a time: on the 10M-line all-tagged benchmark the join's RSS peaked 480 MB above the lines' in
one part, 220 MB in 8; on 50M lines, about 600 MB above in 8 parts, about 300 MB in 64)."""
MAX_PARTS = PARTS**3
"""No more splits past this many parts (512 parts of 1M lines: a log of some 150 GB)."""
SPILL_ROWS = 1 << 19
"""One side's kept lines in memory past which they are written to disk (:mod:`~prime_rl.analysis.spill`),
a file per part: about 30 MB of lines; a log with fewer weight-update lines writes nothing."""
_COALESCE = 64
"""A part's frames added since it was last coalesced (a split makes a small frame per part of each
batch) that are made one frame: a frame costs a few kB besides its rows."""


class _Kept:
    """One side's kept lines, each with its row among all of that side's lines (``row``: ``i`` for the
    client's, ``j`` for the server's); one part, or parts by a hash of the trace id once split,
    each in row order. Each part is a list of frames in memory and of files written to ``spill``
    (a part's frames go to one file whenever more than ``spill_rows`` lines are in memory)."""

    def __init__(self, row: str, spill: Spill | None = None, spill_rows: int = SPILL_ROWS) -> None:
        self.row = row
        self.rows = 0
        self.parts: list[list[pl.DataFrame | Path]] = [[]]
        self._fresh = [0]
        """Per part: frames added since it was last coalesced."""
        self._spill = spill
        self._spill_rows = spill_rows
        self.in_memory = 0
        """Lines kept in memory (not written to ``spill``)."""

    @property
    def parts_n(self) -> int:
        return len(self.parts)

    def add(self, frame: pl.DataFrame) -> None:
        if not frame.height:
            return
        end = self.rows + frame.height
        # the row as with_row_index numbers them (UInt32), over every batch of this side
        frame = frame.with_columns(pl.int_range(self.rows, end, dtype=pl.UInt32).alias(self.row))
        self.rows = end
        self._route(frame)
        self._maybe_spill()

    def _route(self, frame: pl.DataFrame) -> None:
        self.in_memory += frame.height
        n = len(self.parts)
        if n == 1:
            self._append(0, frame)
            return
        part = (frame.get_column("tid").hash() % n).cast(pl.Int64)
        for (k,), rows in frame.with_columns(_part=part).partition_by("_part", as_dict=True).items():
            self._append(k, rows.drop("_part"))

    def _append(self, k: int, frame: pl.DataFrame) -> None:
        frames = self.parts[k]
        frames.append(frame)
        self._fresh[k] += 1
        if self._fresh[k] == _COALESCE:
            frames[-_COALESCE:] = [pl.concat(frames[-_COALESCE:]).rechunk()]
            self._fresh[k] = 0

    def _maybe_spill(self) -> None:
        """Each part's frames in memory written to a file of the part's, once more than
        ``spill_rows`` lines are in memory (kept in memory when the spill fails)."""
        if self._spill is None or self.in_memory <= self._spill_rows or self._spill.failed is not None:
            return
        for k, items in enumerate(self.parts):
            held = [item for item in items if isinstance(item, pl.DataFrame)]
            if not held:
                continue
            # a part's files come before its frames in memory: the frames are the newest rows
            files = items[: len(items) - len(held)]
            assert all(isinstance(f, Path) for f in files)
            frame = pl.concat(held, rechunk=False) if len(held) > 1 else held[0]
            path = self._spill.write(frame)
            if path is None:
                return
            self.parts[k] = [*files, path]
            self._fresh[k] = 0
            self.in_memory -= frame.height

    def split(self, parts: int) -> None:
        """Into ``parts`` parts (the lines kept so far routed again, a frame at a time, each part's in
        row order)."""
        # the parts go from PARTS**k to PARTS**(k + 1): a new part's lines all come from one old
        # part (hash % 64 gives hash % 8), so routing each old part's frames in order keeps each new
        # part's lines in row order
        items = [f for part in reversed(self.parts) for f in reversed(part)]
        self.parts, self._fresh, self.in_memory = [[] for _ in range(parts)], [0] * parts, 0
        while items:  # let go as routed
            item = items.pop()
            self._route(self._spill.read(item) if isinstance(item, Path) else item)
            self._maybe_spill()

    def take(self, part: int, schema: dict) -> pl.DataFrame:
        """One part's lines in row order (let go here), with their row column first."""
        items, self.parts[part] = self.parts[part], []
        if not items:
            return pl.DataFrame(schema={self.row: pl.UInt32, **schema})
        frames = [self._spill.read(item) if isinstance(item, Path) else item for item in items]
        return pl.concat(frames, rechunk=False).select(self.row, *schema)

    def frames(self) -> list[pl.DataFrame]:
        """Every frame kept in memory (for their sizes)."""
        return [f for frames in self.parts for f in frames if isinstance(f, pl.DataFrame)]


def _frame(columns: dict[str, pl.Series], schema: dict, keep: pl.Series) -> pl.DataFrame:
    return pl.DataFrame({name: columns[name] for name in schema}, schema=schema).filter(keep)


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
            ("handling", "server_ms"),
            ("validate", "validate_ms"),
        )
    },
    "failed": ("failed", pl.Boolean),
    "background": ("background", pl.Boolean),
    "server": ("server", pl.String),
}
"""update_frame's first columns: name -> (the Update attribute, its type)."""


def of_the_steps() -> pl.Expr:
    """Of :func:`update_frame`'s rows: the updates the steps wait for, not the health loop's
    (:attr:`Update.background`; a log from before the field: the steps')."""
    return ~pl.col("background").fill_null(False)


def unanswered() -> pl.Expr:
    """Of :func:`update_frame`'s rows: the updates sent and never answered (no client.done, no
    client.error, no wall time): the orchestrator still waited when its log ended or it died."""
    col = pl.col
    return col("send_ts").is_not_null() & col("done_ts").is_null() & ~col("failed") & col("wall").is_null()


def died_waiting(restarted: float | None) -> pl.Expr:
    """Of :func:`update_frame`'s rows: the updates left :func:`unanswered` before the orchestrator's
    last restart at ``restarted`` (None: it never restarted, none): it died waiting for them. The
    stages count each up to the crash, where the down time begins
    (:attr:`~prime_rl.analysis.stats.Collected.open_updates`); slowest_updates.txt leaves them out (no
    answer says how long they took) and the per-server table counts them apart (``unanswered``)."""
    if restarted is None:
        return pl.lit(False)
    return unanswered() & (pl.col("send_ts") < restarted)


def update_frame(updates: Sequence[Update]) -> pl.DataFrame:
    """The updates as columns, in order: ``tid``, ``url``, ``start``, ``end`` (the properties of
    :class:`Update`), ``wall``: the client's wait for it (``wall_ms``, or from its first send to its
    answer when it was retried, or to its error when the steps' update failed in the end:
    :attr:`Update.waited_ms`), ``rpc`` (the client's), ``server_rpc``, ``queue``, ``lock``,
    ``handling`` (the client's ``server_ms``), ``validate``,
    ``send_to_recv``, ``failed``, ``background`` (:attr:`Update.background`), ``gave_up``
    (:attr:`Update.gave_up`), ``retried``, ``retry``
    (:attr:`Update.retry_ms`: the failed attempts and the backoff after them), ``took``: how long it took,
    ``wall or server_rpc_ms`` (the first that is neither None nor 0; null when neither is), and
    ``send_ts``, ``recv_ts``, ``recv_t``, ``done_ts``, ``server`` as the updates have them. From an
    :class:`UpdateTable`'s columns, or from records."""
    if isinstance(updates, UpdateTable):
        frame = updates.frame.select(pl.col(attr).alias(name) for name, (attr, _) in _FRAME_COLUMNS.items())
    else:
        frame = pl.DataFrame(
            {name: list(map(attrgetter(attr), updates)) for name, (attr, _) in _FRAME_COLUMNS.items()},
            schema={name: dtype for name, (_, dtype) in _FRAME_COLUMNS.items()},
        )
    col = pl.col
    waited = (col("done_ts") - col("send_ts")) * 1000.0
    frame = frame.with_columns(
        retried=(waited - col("wall") > RETRY_GAP_MS).fill_null(False),
        gave_up=(col("failed") & col("background").eq_missing(False) & waited.is_not_null()).fill_null(False),
    )
    frame = frame.with_columns(
        wall=pl.when(col("retried") | col("gave_up")).then(waited).otherwise("wall"),
        retry=pl.when("gave_up").then(waited).when("retried").then(waited - col("wall")).otherwise(0.0),
    )
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
        handling="handling",
        validate="validate",
        send_to_recv=pl.when(gap.is_not_null() & (gap >= 0) & (gap <= limit))
        .then(gap)
        .when(col("send_ts").is_not_null() & col("recv_ts").is_not_null())
        .then((col("recv_ts") - col("send_ts")) * 1000.0),
        failed="failed",
        background="background",
        gave_up="gave_up",
        retried="retried",
        retry="retry",
        took=took,
        send_ts="send_ts",
        recv_ts="recv_ts",
        recv_t="recv_t",
        done_ts="done_ts",
        server="server",
    )
