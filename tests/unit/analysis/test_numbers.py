"""The report's numbers computed fast: statistics with numpy, clock times formatted once a second
(timeline.txt's all at once), summary.json through json's C encoder; each equal to the plain
computation it replaced."""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from array import array
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from prime_rl.analysis import report
from prime_rl.analysis.report import _clock, _clocks, _json_top_level_lines
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


# zones with daylight saving time, half and quarter hours, a half-hour DST (Lord Howe) and, before
# 1937, Amsterdam's offset of 19 minutes 32 seconds
ZONES = ["UTC", "Europe/Amsterdam", "America/St_Johns", "Asia/Kathmandu", "Australia/Lord_Howe"]
AMSTERDAM_1935 = -1092953972.0
DST_2026 = 1792890000.0  # 2026-10-25 01:00 UTC: Amsterdam's clocks go back, 03:00 -> 02:00
times = st.one_of(
    st.floats(-3e9, 4e9, allow_nan=False),
    st.floats(DST_2026 - 7200, DST_2026 + 7200),
    st.integers(-(2**41), 2**41).map(float),  # far out: formatted alone, or "?"
    st.sampled_from([math.nan, math.inf, -math.inf, 1e22, 0.9999995, 59.9999996, -0.0000004]),
    st.none(),
)


@pytest.fixture(params=ZONES)
def zone(request, monkeypatch):
    # the C library reads the zone from TZDIR; one it does not find is UTC, which tests nothing
    if not Path(os.environ.get("TZDIR", "/usr/share/zoneinfo"), request.param).is_file():
        pytest.skip(f"the time zone {request.param} is not installed (tzdata)")
    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    report._second.cache_clear()
    report._offset.cache_clear()
    yield request.param
    monkeypatch.undo()
    time.tzset()
    report._second.cache_clear()
    report._offset.cache_clear()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(ts=[DST_2026 - 3600.5, DST_2026 - 0.25, DST_2026 + 0.25, DST_2026 + 3599.75])
@example(ts=[-2e9, 0.0, None, 0.9999996])  # 1906 (Amsterdam: +00:19:32), 1970, a second carried
# Amsterdam's summer time began at 1935-05-15 01:40:28 UTC (+00:19:32 -> +01:19:32): inside a minute
@example(ts=[AMSTERDAM_1935 - 20.5, AMSTERDAM_1935 - 0.25, AMSTERDAM_1935 + 0.25, AMSTERDAM_1935 + 20.5])
@example(ts=[])
@given(ts=st.lists(times, max_size=40))
def test_the_clocks_made_together_are_each_ones_clock(zone, ts):
    assert _clocks(ts) == [_clock(t) for t in ts]


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
