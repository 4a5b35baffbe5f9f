"""The weight-update join folds a batch's lines column-wise, one group per update part; it must
build exactly the parts the line-by-line join builds, whatever the order, gaps and repeats of the
lines and wherever the batches are cut."""

from __future__ import annotations

import math
from dataclasses import astuple
from pathlib import Path

import polars as pl
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tests.support.reference_join import ReferenceJoin

from prime_rl.analysis.stats import collect
from prime_rl.analysis.tagged import Event, ParseStats, TaggedLines
from prime_rl.analysis.updates import PARTS, Update, UpdateJoin

EVENTS = [
    "client.send",
    "client.done",
    "client.error",
    "client.retry",
    "server.recv",
    "rpc.start",
    "rpc.done",
]
NUMBER = st.one_of(st.none(), st.sampled_from(["1", "2.5", "700", "-3", "nan", "x"]))
LINE = st.fixed_dictionaries(
    {
        "event": st.sampled_from(EVENTS),
        "tid": st.sampled_from(["a", "b", "c", None]),
        "source": st.sampled_from(["s1.log", "s2.log"]),
        "ts": st.one_of(st.none(), st.floats(0, 100, allow_nan=False)),
    },
    optional={
        "url": st.sampled_from(["", "http://h:1", "http://h:2"]),
        "path": st.sampled_from(["", "/update_weights", "/reload_weights", "/pause"]),
        "t": NUMBER,
        "wall_ms": NUMBER,
        "rpc_ms": NUMBER,
        "queue_ms": NUMBER,
        "lock_wait_ms": NUMBER,
        "server_ms": NUMBER,
        "validate_ms": NUMBER,
        "target": st.sampled_from(["", "step_1", "step_2"]),
        "op": st.sampled_from(["", "update_weights", "reload_weights", "pause"]),
        "background": st.sampled_from(["true", "false", ""]),
        "attempt": st.sampled_from(["1", "2", ""]),
    },
)


def _event(line: dict, number: int) -> Event:
    fields = {k: v for k, v in line.items() if k not in ("event", "tid", "source", "ts") and v is not None}
    source = line["source"]
    return Event("weights", line["event"], line["tid"], fields, line["ts"], source, Path(source), number)


def update_groups(updates: list[Update]) -> list[list[Update]]:
    """The reference for ``stages.update_group``: the updates of one trace id grouped, in first-seen
    order; a trace id seen again more than ten minutes later is another group."""
    groups: dict[tuple[str, int | None], list[Update]] = {}
    for u in updates:
        start = u.start
        groups.setdefault((u.tid, None if start is None else int(start // 600)), []).append(u)
    return list(groups.values())


def _reference(events: list[Event]) -> ReferenceJoin:
    ref = ReferenceJoin()
    for ev in events:
        e = ev.event

        def num(key: str, *on: str, ev: Event = ev) -> float | None:
            return ev.num(key) if ev.event in on else None

        ref.add(
            e,
            ev.tid,
            str(ev.path),
            ev.ts,
            ev.fields.get("url"),
            ev.fields.get("path"),
            num("t", "client.send", "server.recv"),
            num("wall_ms", "client.done"),
            num("rpc_ms", "client.done", "rpc.done"),
            num("queue_ms", "client.done"),
            ev.fields.get("target"),
            ev.fields.get("op"),
            num("lock_wait_ms", "rpc.done"),
            None if "background" not in ev.fields else ev.fields["background"] == "true",
            ev.fields.get("attempt") == "1",
            num("server_ms", "client.done"),
            num("validate_ms", "rpc.done"),
        )
    return ref


def _file_batch(events: list[Event]) -> TaggedLines:
    """The events as a parsed file's batch (fields read from the ``rest`` text, one source file)."""
    return TaggedLines(TaggedLines.from_events(events).frame, "inference", events[0].path)


def _line(event: str, **fields) -> dict:
    return {"event": event, "tid": "a", "source": "s1.log", "ts": 1.0, **fields}


@settings(max_examples=400, deadline=None)
@example(  # the path comes from the first rpc line whose op names one, not from the first rpc line
    lines=[
        _line("server.recv", path=""),
        _line("rpc.start", op="pause"),
        _line("rpc.done", op="update_weights"),
    ],
    cuts=[],
    files=True,
    split=False,
    spill=False,
)
@example(  # a done without a timestamp or wall_ms leaves its update open: the next send continues it
    lines=[_line("client.send", url="u"), {**_line("client.done"), "ts": None}, _line("client.send", t="5")],
    cuts=[2],
    files=False,
    split=False,
    spill=False,
)
@given(
    lines=st.lists(LINE, max_size=40),
    cuts=st.lists(st.integers(0, 40), max_size=4),
    files=st.booleans(),
    split=st.booleans(),
    spill=st.booleans(),
)
def test_the_column_wise_join_builds_the_updates_the_line_by_line_join_builds(
    lines, cuts, files, split, spill
):
    _check_against_the_reference(lines, cuts, files, split, spill)


def _check_against_the_reference(
    lines: list[dict], cuts: list[int], files: bool, split: bool = False, spill: bool = False
) -> None:
    """``split``: the kept lines split into parts by trace id from the first (a long log's join);
    ``spill``: every batch's kept lines written to disk, and each part's updates (a long log's)."""
    events = [_event(line, i + 1) for i, line in enumerate(lines)]
    # split: 8 parts from the first lines
    join = UpdateJoin(split_rows=0 if split else None, max_parts=PARTS, spill_rows=0 if spill else None)
    if files:  # batches of one file each: cut where the source changes too
        bounds = sorted({0, len(events), *(c for c in cuts if c < len(events))})
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            run: list[Event] = []
            for ev in events[lo:hi]:
                if run and ev.path != run[0].path:
                    join.add_lines(_file_batch(run))
                    run = []
                run.append(ev)
            if run:
                join.add_lines(_file_batch(run))
    else:  # batches made of events, sources mixed
        bounds = sorted({0, len(events), *(c for c in cuts if c < len(events))})
        for lo, hi in zip(bounds, bounds[1:], strict=False):
            if hi > lo:
                join.add_lines(TaggedLines.from_events(events[lo:hi]))
    assert [astuple(u) for u in join.updates()] == [astuple(u) for u in _reference_updates(events)]
    assert join.spill.directory is None or not join.spill.directory.exists()  # removed by the join


@st.composite
def _usual_updates(draw) -> list[dict]:
    """Updates as the trio logs them (client.send and client.done to one URL, server.recv, rpc.start
    and rpc.done in one server file), interleaved, with a few lines dropped, repeated, moved or
    changed: mostly the pattern the column-wise join takes, and the cases next to it."""
    lines: list[dict] = []
    for k in range(draw(st.integers(0, 12))):
        tid, url, source = (
            f"t{draw(st.integers(0, 9))}",
            draw(st.sampled_from(["http://h:1", "http://h:2", ""])),
            draw(st.sampled_from(["s1.log", "s2.log"])),
        )
        send = draw(st.floats(0, 50, allow_nan=False))
        gap = draw(st.sampled_from([0.01, 0.5, -2.0, None]))  # -2: sent after the server received it
        recv = None if gap is None else send + gap
        rpc = draw(st.sampled_from(["700", "700.04", "12.5", None]))
        op = draw(st.sampled_from(["update_weights", "reload_weights", "pause", None]))
        path = draw(st.sampled_from(["/update_weights", "/reload_weights", "", None]))
        one = [
            {
                "event": "client.send",
                "tid": tid,
                "source": "orch.log",
                "ts": send,
                "url": url,
                "path": path,
                "t": "3",
            },
            {
                "event": "client.done",
                "tid": tid,
                "source": "orch.log",
                "ts": send + 1,
                "url": draw(st.sampled_from([url, "", "http://h:3"])),
                "wall_ms": "800",
                "rpc_ms": rpc,
                "server_ms": draw(st.sampled_from(["760.5", None])),
            },
            {
                "event": "server.recv",
                "tid": tid,
                "source": source,
                "ts": recv,
                "path": draw(st.sampled_from([path, "", None])),
                "t": "4",
            },
            {"event": "rpc.start", "tid": tid, "source": source, "ts": recv, "target": f"step_{k}", "op": op},
            {
                "event": "rpc.done",
                "tid": tid,
                "source": source,
                "ts": recv,
                "rpc_ms": rpc,
                "lock_wait_ms": "2",
                "validate_ms": draw(st.sampled_from(["40", None])),
                "op": op,
            },
        ]
        for line in one:
            change = draw(st.sampled_from(["keep"] * 12 + ["drop", "twice"]))
            if change != "drop":
                lines.insert(draw(st.integers(0, len(lines))) if draw(st.booleans()) else len(lines), line)
            if change == "twice":
                lines.append(dict(line))
    return [{k: v for k, v in line.items() if v is not None or k in ("tid", "ts")} for line in lines]


@settings(max_examples=150, deadline=None)
@given(
    lines=_usual_updates(),
    cuts=st.lists(st.integers(0, 60), max_size=4),
    files=st.booleans(),
    split=st.booleans(),
    spill=st.booleans(),
)
def test_the_usual_updates_and_the_cases_next_to_them_join_as_line_by_line(lines, cuts, files, split, spill):
    _check_against_the_reference(lines, cuts, files, split, spill)


def _reference_updates(events: list[Event]):
    """The reference's parts joined by the reference's pairing."""
    return _reference(events).updates()


MS = st.one_of(st.none(), st.sampled_from([0.0, 1.5, 200.0, 200.0, 700.25, 1e4]))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.builds(
            Update,
            tid=st.sampled_from(["a", "b", "c"]),
            send_ts=st.one_of(st.none(), st.sampled_from([0.0, 10.0, 599.9, 600.0, 1300.0, -5.0])),
            recv_ts=st.one_of(st.none(), st.sampled_from([1.0, 700.0])),
            done_ts=st.one_of(st.none(), st.sampled_from([0.2, 10.3, 611.0, 1300.25])),  # some retried
            failed=st.booleans(),
            background=st.sampled_from([None, False, True]),
            wall_ms=MS,
            rpc_ms=MS,
            server_rpc_ms=MS,
            queue_ms=MS,
            server_ms=MS,
            lock_wait_ms=MS,
            validate_ms=MS,
        ),
        max_size=30,
    )
)
def test_the_critical_update_time_column_wise_is_the_slowest_server_of_each_update(updates):
    """Each update (trace id, ten-minute window) counts at its slowest server (the first of equals; a
    retried one by its whole wait, its retries apart too, and so does one of the steps that failed in
    the end); summed in order, as the loop over the groups did; the health loop's updates
    (background) are no step's and count nowhere; one that failed in the end has no server or queue
    time, all of it is its failed attempts. The server's handling is its server_ms (rpc_ms where the
    client has none, and at least the rpc, lock wait and validation its log gives; at most the last
    attempt's wall time; a client without server_ms: at least its wait after the server's server.recv),
    split into rpc, lock wait and validation in that order (each at most what is
    left) and the rest (the rest is unsplit, validation with any lock wait not logged, when the server
    logged no validate_ms: a server from before it logged its validation nowhere); the queue is the rest
    of the last attempt's wall time. One known from its client.done alone (no send, no server.recv)
    counts from no earlier than the end of the update before it nor the logs' first line, its parts
    in the same proportion (74b741f)."""
    from prime_rl.analysis.stages import UpdateTime, _update_critical

    def _rpc(u: Update) -> float:
        return u.rpc_ms if u.rpc_ms is not None else (u.server_rpc_ms or 0.0)

    def _handling(u: Update) -> float:
        said = u.server_ms if u.server_ms is not None else _rpc(u)
        h = max(said, _rpc(u) + (u.lock_wait_ms or 0.0) + (u.validate_ms or 0.0))
        if (
            u.server_ms is None
            and u.retry_ms == 0
            and u.waited_ms is not None
            and u.send_to_recv_ms is not None
        ):
            h = max(
                h, u.waited_ms - u.send_to_recv_ms
            )  # no server_ms: the server had it from its server.recv on
        return h if u.waited_ms is None else min(h, max(u.waited_ms - u.retry_ms, 0.0))

    def _update_ms(u: Update) -> float:
        return u.waited_ms if u.waited_ms is not None else _handling(u)

    sums = dict.fromkeys(("wall", "queue", "lock", "validate", "rpc", "other", "unsplit", "retry"), 0.0)
    groups = update_groups([u for u in updates if not u.background])
    d = collect(iter([]), ParseStats())
    slowest = [max(group, key=_update_ms) for group in groups]
    ends = sorted(s.end for s in slowest if s.end is not None)
    for slow in slowest:
        # one known from its client.done alone counts from no earlier than the end of the update
        # before it nor the logs' first line, each of its parts in the same proportion
        share, ms = 1.0, _update_ms(slow)
        if slow.start is None and slow.end is not None and ms > 0:
            lower = max(max((e for e in ends if e < slow.end), default=-math.inf), d.first_ts or -math.inf)
            share = min(max((slow.end - lower) * 1000.0 / ms, 0.0), 1.0)
        sums["wall"] += ms * share
        if not slow.gave_up:  # one that failed in the end is its failed attempts alone
            h = _handling(slow)
            if slow.waited_ms is not None:
                sums["queue"] += (max(slow.waited_ms - slow.retry_ms, 0.0) - h) * share
            rpc = min(_rpc(slow), h)
            lock = min(slow.lock_wait_ms or 0.0, h - rpc)
            validate = min(slow.validate_ms or 0.0, h - rpc - lock)
            split = slow.validate_ms is not None
            sums["lock"] += lock * share
            sums["validate"] += validate * share
            sums["rpc"] += rpc * share
            sums["other" if split else "unsplit"] += (h - rpc - lock - validate) * share
        sums["retry"] += slow.retry_ms * share
    d.updates = updates
    d._memo.clear()  # the tables made from the (empty) collection's updates
    assert _update_critical(d) == UpdateTime(**sums, updates=len(groups))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.builds(
            Update,
            tid=st.sampled_from(["a", "b"]),
            url=st.sampled_from([None, "", "http://h:1", "http://h:2"]),
            wall_ms=MS,
            rpc_ms=MS,
            server_rpc_ms=MS,
            queue_ms=MS,
            failed=st.booleans(),
        ),
        max_size=30,
    )
)
def test_the_per_server_rows_column_wise_are_the_loop_over_updates(updates):
    """Per URL: updates, failures and the wall, rpc (the server's when the client has none) and
    queue values in the updates' order, as the loop over the updates made them."""
    from prime_rl.analysis.servers import ServerRow, _server_rows

    rows: dict[str, ServerRow] = {}
    for u in updates:
        if not u.url:
            continue
        row = rows.setdefault(u.url, ServerRow(u.url))
        row.updates += 1
        row.failed += u.failed
        for key in ("wall_ms", "queue_ms"):
            if getattr(u, key) is not None:
                getattr(row, key).append(getattr(u, key))
        rpc = u.rpc_ms if u.rpc_ms is not None else u.server_rpc_ms
        if rpc is not None:
            row.rpc_ms.append(rpc)
    d = collect(iter([]), ParseStats())
    d.updates = updates
    d._memo.clear()  # the tables made from the (empty) collection's updates
    fields = lambda r: (r.url, r.updates, r.failed, list(r.wall_ms), list(r.rpc_ms), list(r.queue_ms))  # noqa: E731
    assert [fields(r) for r in _server_rows(d)] == [fields(rows[k]) for k in sorted(rows)]


TIME = st.one_of(st.none(), st.sampled_from([0.0, 1.0, 1.25, 3.0, -2.0, 100.5]))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.builds(
            Update,
            tid=st.sampled_from(["a", "b"]),
            url=st.sampled_from([None, "", "http://h:1"]),
            send_ts=TIME,
            send_t=TIME,
            recv_ts=TIME,
            recv_t=TIME,
            done_ts=TIME,
            wall_ms=MS,
            server_rpc_ms=MS,
        ),
        max_size=20,
    )
)
def test_the_update_columns_hold_what_each_update_s_properties_give(updates):
    """start, end, the send -> receive gap, the wall time and whether the update was retried,
    column-wise, are each update's properties; took is that wall time or the server's rpc_ms."""
    from prime_rl.analysis.updates import update_frame

    frame = update_frame(updates)
    assert frame.get_column("start").to_list() == [u.start for u in updates]
    assert frame.get_column("end").to_list() == [u.end for u in updates]
    assert frame.get_column("send_to_recv").to_list() == [u.send_to_recv_ms for u in updates]
    assert frame.get_column("wall").to_list() == [u.waited_ms for u in updates]
    assert frame.get_column("retried").to_list() == [u.retried for u in updates]
    assert frame.get_column("retry").to_list() == [u.retry_ms for u in updates]
    assert frame.get_column("took").to_list() == [(u.waited_ms or u.server_rpc_ms) or None for u in updates]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(MS, MS), max_size=25))
def test_the_slowest_updates_are_the_first_of_the_sorted_updates(times):
    """slowest_updates.txt lists the updates with a wall or server rpc time, longest first (wall_ms,
    else the server's rpc_ms), equals in the updates' order: the first ten of a stable sort."""
    from prime_rl.analysis.report import slowest_updates

    updates = [Update(f"u{i}", wall_ms=w, server_rpc_ms=r) for i, (w, r) in enumerate(times)]
    want = sorted(
        (u for u in updates if u.wall_ms is not None or u.server_rpc_ms is not None),
        key=lambda u: -(u.wall_ms or u.server_rpc_ms or 0),
    )[:10]
    d = collect(iter([]), ParseStats())
    d.updates = updates
    d._memo.clear()
    listed = [line.split()[0] for line in slowest_updates(d).splitlines()[1:]]
    assert listed == ([u.tid for u in want] or ["(no"])


def test_updates_are_joined_once_and_asked_again_give_the_same():
    events = [
        _event(_line("client.send", url="u", path="/update_weights"), 1),
        _event(_line("client.done"), 2),
    ]
    join = UpdateJoin()
    join.add_lines(TaggedLines.from_events(events))
    first = join.updates()
    assert len(first) == 1 and join.updates() == first


def test_no_kept_weight_update_line_gives_the_updates_the_whole_join_makes_of_none():
    # a collector's log, a run without updates: the join's dozens of queries on empty frames took
    # 19 ms of a 20-line log's 30 ms of collection
    join = UpdateJoin()
    join.add_lines(TaggedLines.from_events([_event(_line("client.send", url="u", tid=""), 1)]))  # no trace id
    none = join.updates()
    assert len(none) == 0 and list(none) == []
    whole = UpdateJoin()._join_parts()
    assert none.frame.schema == whole.frame.schema and none.frame.equals(whole.frame)


@pytest.mark.parametrize(
    ("split_rows", "parts"),
    [(None, 1), (3000, PARTS), (500, PARTS**2)],
    ids=["one-part", "split", "split-twice"],
)
def test_the_kept_lines_cost_few_bytes_each_and_join_as_before(split_rows, parts):
    # every update's lines wait for the join (the server file may come after the client's): the
    # words that repeat on every line (event, URL, path, op, server file) are kept once each, as
    # categories, so a kept line costs its numbers, trace id and 4 bytes a word
    events = []
    for k in range(2000):
        tid, url = f"t{k:05d}", f"http://10.0.0.{k % 4}:8000"
        lines = [
            ("client.send", "orchestrator.log", {"url": url, "path": "/update_weights", "t": "1.5"}),
            ("server.recv", f"inference_{k % 4}.log", {"path": "/update_weights", "t": "1.6"}),
            ("rpc.start", f"inference_{k % 4}.log", {"op": "update_weights", "t": "1.6"}),
            ("rpc.done", f"inference_{k % 4}.log", {"op": "update_weights", "rpc_ms": "9", "lock_wait_ms": "0"}),
            ("client.done", "orchestrator.log", {"url": url, "path": "/update_weights", "wall_ms": "10", "rpc_ms": "9", "queue_ms": "0"}),
        ]  # fmt: skip
        for event, source, fields in lines:
            events.append(Event("weights", event, tid, fields, float(k), "x", Path(source), len(events) + 1))
    # 3000: split after the client's 4000 lines; 500: again after the first server file's 1500
    join = UpdateJoin(split_rows=split_rows)
    for source in ("orchestrator.log", *(f"inference_{s}.log" for s in range(4))):
        join.add_lines(_file_batch([ev for ev in events if ev.path == Path(source)]))
    assert join._client.parts_n == join._server.parts_n == parts
    kept = [*join._client.frames(), *join._server.frames()]
    rows = sum(f.height for f in kept)
    assert rows == len(events)
    # 68.6 here (4 of them the line's row, 8 the client's server_ms or the server's validate_ms)
    assert sum(f.estimated_size() for f in kept) / rows < 72
    updates = join.updates()
    assert len(updates) == 2000 and {u.url for u in updates} == {f"http://10.0.0.{s}:8000" for s in range(4)}
    assert all(u.server == f"inference_{int(u.tid[1:]) % 4}.log" and u.rpc_ms == 9.0 for u in updates)
    assert [u.tid for u in updates] == [f"t{k:05d}" for k in range(2000)]  # in their lines' order


def test_a_split_join_counts_every_part_s_votes_for_a_server_file_s_url():
    # a server file's URL is named by the votes of all its trace ids (80% must agree), whichever
    # part of a split join each trace id falls in: 17 say h:1 and 3 (all in the last part) say h:2,
    # so the file is h:1 and its update without a client part gets h:1, as without the split
    tids = [f"t{k}" for k in range(200)]
    parts = (pl.Series(tids).hash() % PARTS).to_list()
    last = max(parts)
    h2 = [t for t, p in zip(tids, parts, strict=True) if p == last][:3]
    h1 = [t for t, p in zip(tids, parts, strict=True) if p != last][:17]
    lines = []
    for k, tid in enumerate(h1 + h2):
        url = "http://h:1" if tid in h1 else "http://h:2"
        lines += [
            {
                **_line("client.send", url=url, path="/update_weights", t=str(k)),
                "tid": tid,
                "source": "o.log",
            },
            {**_line("client.done", url=url, wall_ms="9", rpc_ms="8"), "tid": tid, "source": "o.log"},
            {**_line("server.recv", path="/update_weights", t=str(k)), "tid": tid},
            {**_line("rpc.done", op="update_weights", rpc_ms="8"), "tid": tid},
        ]
    lines += [{**_line("server.recv", path="/update_weights", t="99"), "tid": "lone"}]
    events = [_event(line, i + 1) for i, line in enumerate(lines)]
    for split in (False, True):
        join = UpdateJoin(split_rows=50 if split else None)  # 8 parts after the client's 60 lines
        for source in ("o.log", "s1.log"):
            join.add_lines(_file_batch([ev for ev in events if ev.path == Path(source)]))
        assert join._client.parts_n == (PARTS if split else 1)
        (lone,) = [u for u in join.updates() if u.tid == "lone"]
        assert lone.url == "http://h:1" and lone.server == "s1.log", split
    _check_against_the_reference(lines, [], True, split=True)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.floats(-1e6, 1e6), st.sampled_from([0.0, -0.0, 1e-300])), max_size=50))
def test_the_critical_sums_are_the_loops_to_the_bit(values):
    """Summed column-wise as one update after another: the Python loop's float, -0.0 included."""
    import math

    from prime_rl.analysis.stages import _in_order_sum

    total = 0.0
    for v in values:
        total += v
    got = _in_order_sum(pl.Series(values, dtype=pl.Float64))
    assert got == total and math.copysign(1.0, got) == math.copysign(1.0, total)
