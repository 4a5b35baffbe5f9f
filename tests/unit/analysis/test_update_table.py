"""The joined updates are kept as columns (a long run has hundreds of thousands): the table gives back
the records it was made from, and the rules that read it column-wise find what the loops over the
records found."""

from __future__ import annotations

from dataclasses import astuple
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prime_rl.analysis import update_parts, update_table
from prime_rl.analysis.servers import waited_for
from prime_rl.analysis.stalls import first_unanswered
from prime_rl.analysis.stats import collect
from prime_rl.analysis.tagged import Event, ParseStats, TaggedLines
from prime_rl.analysis.update_table import UpdateTable, frame_of
from prime_rl.analysis.updates import Update, UpdateJoin, update_frame

MS = st.one_of(st.none(), st.sampled_from([0.0, 1.5, 200.0, 200.0, 700.25, 1e4]))
TS = st.one_of(st.none(), st.sampled_from([0.0, 10.0, 10.0, 599.5, 600.0, 1300.0]))
TEXT = st.one_of(st.none(), st.sampled_from(["", "http://h:1", "http://h:2", "/update_weights"]))
UPDATES = st.lists(
    st.builds(
        Update,
        tid=st.sampled_from(["a", "b", "c"]),
        path=TEXT,
        url=st.sampled_from([None, "", "http://h:1", "http://h:2", "http://h:3"]),
        send_ts=TS,
        send_t=TS,
        done_ts=TS,
        wall_ms=MS,
        rpc_ms=MS,
        queue_ms=MS,
        recv_ts=TS,
        recv_t=TS,
        server_rpc_ms=MS,
        target=TEXT,
        failed=st.booleans(),
        server=st.sampled_from([None, "s1.log", "s2.log"]),
        lock_wait_ms=MS,
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(UPDATES, st.integers(-40, 40), st.integers(-40, 40))
def test_a_table_gives_back_the_records_it_was_made_from(updates, a, b):
    table = UpdateTable(frame_of(updates))
    want = [astuple(u) for u in updates]
    assert len(table) == len(updates) and bool(table) == bool(updates)
    assert [astuple(u) for u in table] == want
    assert [astuple(u) for u in table[a:b]] == want[a:b]
    assert [astuple(u) for u in table[::2]] == want[::2]
    if -len(updates) <= a < len(updates):
        assert astuple(table[a]) == want[a]
    else:
        with pytest.raises(IndexError):
            table[a]
    # the rules' columns are the same from the table as from the records
    assert update_frame(table).equals(update_frame(updates))


def _collected(updates: list[Update]):
    d = collect(iter([]), ParseStats())
    d.updates = UpdateTable(frame_of(updates))
    d._memo.clear()  # the tables made from the (empty) collection's updates
    return d


@settings(max_examples=300, deadline=None)
@given(UPDATES, st.sampled_from(["http://h:1", "http://h:2"]), st.sampled_from(["wall_ms", "rpc_ms"]))
def test_what_every_update_waited_for_a_server_column_wise_is_the_loop_over_updates(updates, url, key):
    waited = 0.0  # the loop over each update's servers (trace id, ten-minute window) it replaced
    groups: dict[tuple[str, int | None], list[Update]] = {}
    for u in updates:
        groups.setdefault((u.tid, None if u.start is None else int(u.start // 600)), []).append(u)
    attr = "waited_ms" if key == "wall_ms" else key  # a retried update's wall time is its whole wait
    for group in groups.values():
        # the server's own failed updates are the failed attempts' wait, not a slow answer's
        mine = [
            getattr(u, attr) for u in group if u.url == url and not u.failed and getattr(u, attr) is not None
        ]
        others = [getattr(u, attr) for u in group if u.url != url and getattr(u, attr) is not None]
        if mine and others:
            waited += max(0.0, max(mine) - max(others))
    assert waited_for(_collected(updates), url, key) == waited


@settings(max_examples=300, deadline=None)
@given(UPDATES)
def test_the_first_unanswered_update_column_wise_is_the_loop_s(updates):
    unanswered = [
        u
        for u in updates
        if u.send_ts is not None and u.done_ts is None and not u.failed and u.wall_ms is None
    ]
    found = first_unanswered(_collected(updates))
    if not unanswered:
        assert found is None
    else:
        assert astuple(found) == astuple(min(unanswered, key=lambda u: u.send_ts))


def test_the_usual_updates_are_joined_without_a_record_each(monkeypatch):
    # a record costs about 470 bytes (a float object per number): the join keeps the usual updates
    # as columns, and a record is made only when one is asked for
    made = []

    class Counted(Update):
        __slots__ = ()

        def __init__(self, *args, **kwargs) -> None:
            made.append(1)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(update_parts, "Update", Counted)
    monkeypatch.setattr(update_table, "Update", Counted)
    events = []
    for k in range(300):
        lines = [
            ("client.send", "o.log", {"url": "http://h:1", "path": "/update_weights", "t": "1.5"}),
            ("server.recv", "s.log", {"path": "/update_weights", "t": "1.6"}),
            ("rpc.done", "s.log", {"op": "update_weights", "rpc_ms": "9"}),
            ("client.done", "o.log", {"url": "http://h:1", "wall_ms": "10", "rpc_ms": "9", "queue_ms": "1"}),
        ]
        for event, source, fields in lines:
            events.append(
                Event("weights", event, f"t{k}", fields, float(k), "x", Path(source), len(events) + 1)
            )
    join = UpdateJoin()
    for source in ("o.log", "s.log"):
        join.add_lines(TaggedLines.from_events([ev for ev in events if ev.path == Path(source)]))
    updates = join.updates()
    assert len(updates) == 300 and not made
    last = updates[299]
    assert last.tid == "t299" and last.server == "s.log" and last.url == "http://h:1" and len(made) == 1
    assert sum(u.wall_ms for u in updates) == 3000.0 and len(made) == 301
