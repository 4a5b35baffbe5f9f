"""read_fields: the fields of a batch's lines read shape by shape, as the key-by-key read gives them."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from prime_rl.analysis.tagged import fields_by_key, read_fields


def test_lines_of_a_few_shapes_and_odd_lines_read_as_written():
    rest = pl.Series(
        [
            "step=1 dur_ms=2.5 url=http://h:1/a?b=c",  # a shape
            "step=2 dur_ms= url=u",  # the same shape, an empty value
            None,  # no fields part
            "url=v step=3",  # another shape: same keys, other order
            "step=4  dur_ms=5",  # two spaces: read key by key
            "step=5 step=6",  # a key twice: the last value, as a dict built left to right
            "x\tstep=7",  # a tab: "step" starts a token after it
            "no_fields_here",
            "step=8 dur_ms=9 url=w",
            "",
        ],
        dtype=pl.String,
    )
    got = read_fields(rest, ["step", "dur_ms", "url", "missing"])
    assert got.columns == ["step", "dur_ms", "url", "missing"]
    assert got.get_column("step").to_list() == ["1", "2", None, "3", "4", "6", "7", None, "8", None]
    assert got.get_column("dur_ms").to_list() == ["2.5", "", None, None, "5", None, None, None, "9", None]
    assert got.get_column("url").to_list() == [
        "http://h:1/a?b=c",
        "u",
        None,
        "v",
        None,
        None,
        None,
        None,
        "w",
        None,
    ]
    assert got.get_column("missing").null_count() == len(rest)


KEY = st.sampled_from(["step", "dur_ms", "url", "a.b", "a-b", "x\tstep", "ü", "", "=", "step=", "9"])
VALUE = st.sampled_from(["1", "2.5", "", "=", "v=w", "nan", "ünï", "a\tb", "a b", "\u0085", "step=3"])
SEP = st.sampled_from([" ", " ", " ", "  ", "\t"])


@st.composite
def batches(draw):
    """Rows of one to three shapes (the same keys in the same order, values drawn anew for each
    row), in any order, among odd rows (any tokens, any separators, keys twice, no fields)."""
    shapes = draw(st.lists(st.lists(KEY, min_size=1, max_size=4), min_size=1, max_size=3))
    rows = []
    for _ in range(draw(st.integers(1, 40))):
        if draw(st.integers(0, 3)):
            keys = draw(st.sampled_from(shapes))
            rows.append(" ".join(f"{k}={draw(VALUE)}" for k in keys))
        elif draw(st.booleans()):
            tokens = draw(st.lists(st.tuples(SEP, KEY, VALUE), max_size=5))
            rows.append("".join(f"{s}{k}={v}" for s, k, v in tokens).lstrip(" "))
        else:
            rows.append(draw(st.sampled_from([None, "", "word", "step", "step=1  step=2"])))
    return rows


@settings(max_examples=300, deadline=None)
@given(
    batches(),
    st.lists(st.sampled_from(["step", "dur_ms", "url", "a.b", "a-b", "ü", "9"]), unique=True, min_size=3),
)
def test_any_batch_reads_as_the_key_by_key_read(rows, keys):  # three keys or more: read by shape
    rest = pl.Series(rows, dtype=pl.String)
    assert read_fields(rest, keys).equals(fields_by_key(rest, keys))


def test_more_shapes_than_are_tried_are_read_key_by_key():
    # 20 shapes (the key "k" after i other keys), each twice: the first 16 matched whole, the rest
    # read key by key, every value where the key-by-key read puts it
    rows = [" ".join([*(f"p{j}={j}" for j in range(i)), f"k={i}"]) for i in range(20) for _ in range(2)]
    rest = pl.Series(rows, dtype=pl.String)
    got = read_fields(rest, ["k", "p0", "p1"])
    assert got.equals(fields_by_key(rest, ["k", "p0", "p1"]))
    assert got.get_column("k").to_list() == [str(i) for i in range(20) for _ in range(2)]
