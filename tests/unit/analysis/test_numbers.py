"""The report's numbers computed fast: statistics with numpy, clock times formatted once a second,
summary.json through json's C encoder; each equal to the plain computation it replaced."""

from __future__ import annotations

import json
import math
import statistics
from array import array
from datetime import datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from prime_rl.analysis.report import _clock, _json_top_level_lines
from prime_rl.analysis.stats import describe


def _plain_describe(values):
    vals = sorted(v for v in values if v is not None and not math.isnan(v))
    n = len(vals)
    if not n:
        return {"count": 0}

    def pct(q):
        k = (n - 1) * q
        lo = int(k)
        hi = min(lo + 1, n - 1)
        return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)

    return {
        "count": n,
        "mean": statistics.fmean(vals),
        "stddev": statistics.stdev(vals) if n > 1 else 0.0,
        "min": vals[0],
        "p50": pct(0.5),
        "p95": pct(0.95),
        "p99": pct(0.99),
        "max": vals[-1],
    }


finite = st.floats(-1e9, 1e9, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(finite, st.none(), st.just(math.nan)), max_size=60), st.booleans())
def test_describe_equals_the_plain_computation(values, as_array):
    series = array("d", [v for v in values if v is not None]) if as_array else values
    got, want = describe(series), _plain_describe(values)
    assert got.keys() == want.keys()
    for key, value in want.items():
        assert math.isclose(got[key], value, rel_tol=1e-9, abs_tol=1e-6), (key, got[key], value)


@settings(max_examples=500, deadline=None)
@given(st.floats(0, 4e9, allow_nan=False))
def test_clock_shows_what_datetime_shows(ts):
    assert _clock(ts) == datetime.fromtimestamp(ts).strftime("%H:%M:%S.%f")[:-3]


def test_summary_json_has_one_top_level_key_a_line_and_loads_back():
    obj = {
        "parse": {"lines": 3, "seconds": 0.5},
        "updates": [{"tid": "a", "rpc_ms": None}],
        "path": datetime(2026, 1, 1),
    }
    text = _json_top_level_lines(obj)
    assert text.splitlines() == [
        "{",
        '"parse": {"lines": 3, "seconds": 0.5},',
        '"updates": [{"tid": "a", "rpc_ms": null}],',
        '"path": "2026-01-01 00:00:00"',
        "}",
    ]
    assert json.loads(text) == {**obj, "path": "2026-01-01 00:00:00"}
