"""Each step's staleness is kept as arrays (a dict cost about 100 bytes a step): it must say what the
dict said, the step and staleness as int() takes them, the last line of a step winning (the
violations of async_level: any line of a step, at its highest, each line judged by its run's
async_level, else the one given)."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from prime_rl.analysis.step_staleness import StepStaleness

NUMBER = st.one_of(
    st.integers(-3, 40).map(float),
    st.sampled_from([-0.0, 0.5, -0.5, 2.9, -2.9, 1e6 + 0.25, 2.0**53 + 2, -(2.0**60), 1e20]),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.tuples(NUMBER, NUMBER, st.integers(-1, 4)), max_size=12), max_size=5),
    st.one_of(st.none(), st.integers(-2, 5)),
)
def test_the_arrays_say_what_the_dict_of_each_step_said(batches, level):
    """Each line's run's async_level (-1: its run did not say, ``level`` judges it; None: unknown)."""
    kept, by_step, worst, used = StepStaleness(), {}, {}, []
    for lines in batches:
        steps = pl.Series([s for s, _, _ in lines], dtype=pl.Float64)
        values = pl.Series([v for _, v, _ in lines], dtype=pl.Float64)
        kept.add(steps, values, np.array([r for _, _, r in lines], dtype=np.int64))
        by_step.update((int(s), int(v)) for s, v, _ in lines)  # what the collector did
        for (
            s,
            v,
            run,
        ) in lines:  # a violation counts from any line of its step (a redone step's first run too)
            limit = run if run >= 0 else level
            if limit is not None and limit not in used:
                used.append(limit)
            if limit is not None and int(v) > limit:
                worst[int(s)] = max(worst.get(int(s), int(v)), int(v))
    assert kept.as_dict() == by_step and len(kept) == len(by_step)
    hist: dict[int, int] = {}
    for s in by_step.values():
        hist[s] = hist.get(s, 0) + 1
    assert list(kept.histogram().items()) == sorted(hist.items())
    assert kept.above(level) == sorted(worst.items()) and kept.levels(level) == used
