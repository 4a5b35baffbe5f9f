"""Issue 18 item 8: the timeline's cost grows with the log, not with updates x batches: one drawing
call per row whatever the number of spans, overlaps found by bisection."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from prime_rl.analysis.analyze import Analysis
from prime_rl.analysis.report import PLOT_BARS, plot_timeline, timeline
from prime_rl.analysis.stats import Span
from prime_rl.analysis.thresholds import Thresholds
from prime_rl.analysis.timeline_plot import merge_bars
from prime_rl.analysis.updates import Update


def _many(n: int) -> tuple[list[Span], list[Update]]:
    """n steps of 2 s: a generation batch, then a 0.2 s update of one server."""
    spans, updates = [], []
    for i in range(n):
        t = 2.0 * i
        spans.append(Span("gen", t, t + 1.7, f"generate step {i}"))
        updates.append(
            Update(f"t{i}", url="http://h", send_ts=t + 1.75, wall_ms=200.0, rpc_ms=190.0, queue_ms=10.0)
        )
        spans.append(Span("update", t + 1.75, t + 1.95, f"update t{i}", {"queue_ms": 10.0, "rpc_ms": 190.0}))
    return spans, updates


def test_the_plot_makes_one_call_per_row_for_thousands_of_updates(tmp_path, collected, monkeypatch):
    import matplotlib.axes

    spans, updates = _many(5000)
    d = collected(updates=tuple(updates))
    d.spans.extend(spans)
    calls: list[int] = []
    real = matplotlib.axes.Axes.broken_barh
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "broken_barh",
        lambda self, bars, *a, **k: calls.append(len(bars)) or real(self, bars, *a, **k),
    )
    assert plot_timeline(Analysis(d, Thresholds(), (), ()), tmp_path / "t.png")
    assert len(calls) == 3  # generation, updates, their hatched queue parts
    assert all(n <= PLOT_BARS + 1 for n in calls), calls


def test_merge_bars_keeps_far_bars_and_merges_close_ones():
    assert merge_bars([(5.0, 1.0), (0.0, 1.0), (1.05, 1.0)], 0.1) == [(0.0, 2.05), (5.0, 1.0)]
    assert len(merge_bars([(float(i), 0.5) for i in range(100_000)], 100_000 / 2000)) <= 2001


def test_each_update_lists_the_batches_it_overlapped(collected):
    spans, updates = _many(3)
    spans.append(Span("update", 1.0, 4.5, "update long", {"queue_ms": 1.0, "rpc_ms": 3499.0}))
    d = collected()
    d.spans.extend(sorted(spans, key=lambda s: s.start))
    text = timeline(d)
    assert "update t0  queue_ms=10.0 rpc_ms=190.0  overlaps: no batch" in text
    assert (
        "update long  queue_ms=1.0 rpc_ms=3499.0  overlaps: generate step 0, generate step 1, generate step 2"
        in text
    )


@settings(max_examples=300, deadline=None)
@given(
    bars=st.lists(
        st.tuples(st.floats(-10, 100, allow_nan=False), st.floats(-1, 20, allow_nan=False)), max_size=40
    ),
    resolution=st.sampled_from([1e-3, 0.1, 0.5, 3.0]),
)
def test_merge_bars_merges_as_the_list_of_lists_did(bars, resolution):
    """The bar merge, written with the merged bar in two locals, gives what the first version
    (a list of [start, width] lists) gave, to the bit."""
    out: list[list[float]] = []
    for start, width in sorted(bars):
        if out and start - (out[-1][0] + out[-1][1]) < resolution:
            out[-1][1] = max(out[-1][1], start + width - out[-1][0])
        else:
            out.append([start, width])
    assert merge_bars(bars, resolution) == [(a, b) for a, b in out]


# --- a long run's rows drawn whole ----------------------------------------------------------------


def test_a_long_runs_timeline_draws_the_middle_the_kept_spans_leave_out(tmp_path, analyze, monkeypatch):
    """The spans kept as objects are the first and last SPANS_KEPT of each kind; the plot of them
    left a long run's middle empty. Every row is drawn from every span now: each has bars in the
    run's middle third."""
    import matplotlib.axes
    from tests.support.synthetic_logs import make_run

    from prime_rl.analysis import stats

    monkeypatch.setattr(stats, "SPANS_KEPT", 20)
    files = make_run("healthy", steps=300, seed=2).write(tmp_path / "logs")
    drawn: dict[float, list[tuple[float, float]]] = {}
    real = matplotlib.axes.Axes.broken_barh
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "broken_barh",
        lambda self, bars, yrange, **k: (
            drawn.setdefault(yrange[0], list(bars)) and real(self, bars, yrange, **k)
        ),
    )
    summary, _ = analyze(files.values(), tmp_path / "out")
    assert summary["spans_dropped"]["gen"] > 200  # most spans are not kept as objects
    rows = sorted(drawn)  # generation, ckpt wait, ckpt write, update, trainer compute, trainer waits
    assert len(rows) == 6
    run_end = max(a + w for bars in drawn.values() for a, w in bars)
    for y in rows:
        middle = [a for a, _ in drawn[y] if run_end / 3 < a < 2 * run_end / 3]
        assert len(middle) > 10, f"row at {y}: nothing drawn in the run's middle third"


SPAN = st.tuples(st.integers(0, 400), st.integers(0, 6))


@settings(max_examples=200, deadline=None)
@given(blocks=st.lists(st.lists(SPAN, max_size=12), max_size=12), plot_bars=st.sampled_from([2, 5, 50]))
def test_bars_merged_as_they_come_draw_what_every_span_merged_at_once_draws(blocks, plot_bars):
    """Spans added a block at a time, in any order, merged whenever more than CAP wait (at the
    resolution of the run so far), then merged at the plot's resolution: the bars a merge of every
    span at that resolution gives."""
    from unittest import mock

    from prime_rl.analysis import bars as bars_mod
    from prime_rl.analysis.timeline_plot import merge_sorted as _merge_sorted

    with mock.patch.object(bars_mod, "CAP", 5), mock.patch.object(bars_mod, "PLOT_BARS", plot_bars):
        kind = bars_mod.Bars()
        for block in blocks:
            kind.add([float(s) for s, _ in block], [float(s + w) for s, w in block])
        start, end = kind.bars()
    spans = [(float(s), float(max(w, bars_mod.MIN_WIDTH))) for block in blocks for s, w in block]
    if not spans:
        assert not len(start)
        return
    # the plot's resolution (no less than any the bars were merged at), half-way between two whole
    # numbers so that no gap between these spans is on the edge
    resolution = (kind.hi - kind.lo) // plot_bars + 1.5
    once = merge_bars(spans, resolution)
    as_they_came = _merge_sorted(zip(start.tolist(), (end - start).tolist(), strict=True), resolution)
    assert len(as_they_came) == len(once)
    for (a, w), (b, v) in zip(as_they_came, once, strict=True):
        assert a == b and abs((a + w) - (b + v)) < 1e-9
    assert kind.spans == len(spans) and (kind.lo, kind.hi) == (
        min(s for s, _ in spans),
        max(s + w for s, w in spans),
    )
