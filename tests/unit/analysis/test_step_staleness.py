"""Each step's staleness is kept as arrays (a dict cost about 100 bytes a step): it must say what the
dict said, the step and staleness as int() takes them, the last line of a step winning (the
violations of async_level: any line of a step, at its highest)."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from prime_rl.analysis.step_staleness import StepStaleness

NUMBER = st.one_of(
    st.integers(-3, 40).map(float),
    st.sampled_from([-0.0, 0.5, -0.5, 2.9, -2.9, 1e6 + 0.25, 2.0**53 + 2, -(2.0**60), 1e20]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(NUMBER, NUMBER), max_size=12), max_size=5), st.integers(-2, 5))
def test_the_arrays_say_what_the_dict_of_each_step_said(batches, level):
    kept, by_step, worst = StepStaleness(), {}, {}
    for pairs in batches:
        steps = pl.Series([s for s, _ in pairs], dtype=pl.Float64)
        values = pl.Series([v for _, v in pairs], dtype=pl.Float64)
        kept.add(steps, values)
        by_step.update((int(s), int(v)) for s, v in pairs)  # what the collector did
        for s, v in pairs:  # a violation counts from any line of its step (a redone step's first run too)
            worst[int(s)] = max(worst.get(int(s), int(v)), int(v))
    assert kept.as_dict() == by_step and len(kept) == len(by_step)
    hist: dict[int, int] = {}
    for s in by_step.values():
        hist[s] = hist.get(s, 0) + 1
    assert list(kept.histogram().items()) == sorted(hist.items())
    assert kept.above(level) == sorted((step, s) for step, s in worst.items() if s > level)
