"""The usual updates' client parts from runs of lines sorted by trace id, against the window
expressions they replaced (kept here as the oracle): the same rows, columns and values, in the same
order, for any client lines of any trace ids. (The join's own tests hold the joined updates to the
line-by-line join; a part wrongly left to that join would not show there.)"""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from prime_rl.analysis.update_columns import CLIENT_SCHEMA, _client_parts, client_part_fields


def reference_client_parts(clients: pl.DataFrame) -> pl.DataFrame:
    """One row per trace id (its first client line, row ``i``), its first and last lines found with
    window expressions; the part's fields from them as the join makes them (:func:`client_part_fields`)."""
    last = lambda c: pl.when(pl.col("n") == 2).then(pl.col(c).last().over("tid"))  # noqa: E731
    parts = (
        clients.with_columns(n=pl.len().over("tid"), pos=pl.int_range(pl.len()).over("tid"))
        .with_columns(
            done_event=last("event"),
            done_url=last("url"),
            done_ts=last("ts"),
            done_wall=last("wall"),
            done_rpc=last("rpc"),
            done_queue=last("queue"),
            done_handling=last("handling"),
        )
        .filter(pl.col("pos") == 0)
    )
    return client_part_fields(parts)


NUMBER = st.one_of(st.none(), st.sampled_from([0.0, 1.0, 2.5, 700.0]))
TEXT = st.one_of(st.none(), st.sampled_from(["", "http://h:1", "/update_weights", "update_weights", "x"]))
CLIENT = st.fixed_dictionaries(
    {
        "event": st.sampled_from(["client.send", "client.done", "client.error", "client.retry"]),
        "tid": st.sampled_from(["a", "b", "c", "d"]),
        "ts": NUMBER,
        "url": st.one_of(st.none(), st.sampled_from(["", "http://h:1", "http://h:2"])),
        "path": TEXT,
        "t": NUMBER,
        "wall": NUMBER,
        "rpc": NUMBER,
        "queue": NUMBER,
        "handling": NUMBER,
    }
)


@settings(max_examples=300, deadline=None)
@given(st.lists(CLIENT, max_size=30))
def test_client_parts_from_sorted_runs_are_the_window_expressions(rows):
    clients = pl.DataFrame(rows, schema=CLIENT_SCHEMA).with_row_index("i")
    assert _client_parts(clients).equals(reference_client_parts(clients))
