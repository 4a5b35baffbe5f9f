"""Issue 18 item 8: the timeline's cost grows with the log, not with updates x batches: at most one
rectangle per pixel column of a row whatever the number of spans, overlaps found by bisection; the
picture puts each row's bars where its spans are."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, ImageDraw
from tests.support.synthetic_logs import make_run

from prime_rl.analysis.analyze import Analysis
from prime_rl.analysis.report import plot_timeline, timeline
from prime_rl.analysis.stats import Span
from prime_rl.analysis.thresholds import Thresholds
from prime_rl.analysis.timeline_plot import COLORS, ROWS, SIZE, PlotData, draw, merge_bars
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


def test_the_plot_draws_at_most_a_rectangle_per_pixel_column_of_a_row(tmp_path, collected, monkeypatch):
    """5000 steps: 5000 generation batches and updates, each its own bar; the picture draws a
    rectangle per run of covered pixel columns, so a row costs at most its width in rectangles."""
    spans, updates = _many(5000)
    d = collected(updates=tuple(updates))
    d.spans.extend(spans)
    calls: list[tuple] = []
    real = ImageDraw.ImageDraw.rectangle
    monkeypatch.setattr(
        ImageDraw.ImageDraw,
        "rectangle",
        lambda self, xy, *a, **k: calls.append(xy) or real(self, xy, *a, **k),
    )
    assert plot_timeline(Analysis(d, Thresholds(), (), ()), tmp_path / "t.png")
    rows: dict[tuple, int] = {}  # rectangles by the pixel rows they span: a row's bars, the frame
    for xy in calls:
        rows[xy[1], xy[3]] = rows.get((xy[1], xy[3]), 0) + 1
    assert len(rows) >= 3 and max(rows.values()) <= 3 * SIZE[0], rows  # updates: bars, mask, outline
    assert Image.open(tmp_path / "t.png").size == SIZE


def _colour_columns(png, colour: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The pixel columns and rows where ``colour`` is."""
    pixels = np.asarray(Image.open(png).convert("RGB"))
    rows, columns = np.nonzero((pixels == np.array(colour, dtype=np.uint8)).all(axis=2))
    return np.unique(columns), np.unique(rows)


def test_the_picture_puts_each_bar_where_its_span_is(tmp_path):
    """A run of 100 s: generation for its first half, the trainer computing for its second, one
    update at 90-100 s whose first half queued. Each colour is in its row (generation at the bottom,
    rows in the order of ROWS) and in the columns of its span; the queue part is hatched in black."""
    t0 = 1.7e9
    bars = {
        "gen": (np.array([t0]), np.array([t0 + 50.0])),
        "train": (np.array([t0 + 50.0]), np.array([t0 + 100.0])),
        "update": (np.array([t0 + 90.0]), np.array([t0 + 100.0])),
    }
    png = tmp_path / "t.png"
    draw(PlotData(bars, (np.array([90.0]), np.array([5.0])), t0, 100.0 / 2000, "a title"), png)
    assert Image.open(png).size == SIZE
    gen_x, gen_y = _colour_columns(png, COLORS[ROWS.index("gen")])
    train_x, train_y = _colour_columns(png, COLORS[ROWS.index("train")])
    update_x, update_y = _colour_columns(png, COLORS[ROWS.index("update")])
    assert gen_y.min() > update_y.max() and update_y.min() > train_y.max()  # gen at the bottom
    width = gen_x.max() - gen_x.min()
    assert abs(train_x.min() - gen_x.max()) <= 2 and abs((train_x.max() - train_x.min()) - width) <= 2
    assert (
        abs((update_x.max() - update_x.min()) - width / 5) <= 2 and abs(update_x.max() - train_x.max()) <= 2
    )
    # the update's queued first half: black hatch lines between its colour, none in its second half
    pixels = np.asarray(Image.open(png).convert("RGB"))
    band = pixels[update_y.min() + 2 : update_y.max() - 1]
    middle = (update_x.min() + update_x.max()) // 2
    black = (band == 0).all(axis=2)
    assert (
        black[:, update_x.min() + 2 : middle - 2].any()
        and not black[:, middle + 2 : update_x.max() - 2].any()
    )
    plot = pixels[train_y.min() : gen_y.max() + 1, gen_x.min() : train_x.max() + 1]  # the bars' area
    for kind in ("ckpt_wait", "ckpt_write", "train_wait"):  # no span: nothing of their colour there
        assert not (plot == np.array(COLORS[ROWS.index(kind)], dtype=np.uint8)).all(axis=2).any(), kind


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


def test_the_picture_of_hostile_times_and_titles_is_drawn_without_a_warning(tmp_path):
    """Bars at 1e300 s or without an end (inf, NaN), a queue part of NaN, and titles with line
    breaks, control characters, emoji or 500 characters: a picture, no error and no numpy warning
    (a cast of inf to a whole number warned, and gave a column anywhere)."""
    import warnings

    bars = {"gen": (np.array([0.0, 5.0, 1e300]), np.array([1.0, np.inf, np.nan]))}
    queued = (np.array([np.nan, 1.0]), np.array([1.0, 1e308]))
    for title in ("a\nb", "x" * 500, "é😀\x00\x1b[31m", ""):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            draw(PlotData(bars, queued, 0.0, 1e-3, title), tmp_path / "t.png")
        assert Image.open(tmp_path / "t.png").size == SIZE


def test_a_pillow_without_freetype_draws_with_its_bitmap_font(tmp_path, monkeypatch):
    """Pillow built without FreeType raises ImportError for its scalable font: the picture is drawn
    with the bitmap one instead of failing the report."""
    from PIL import ImageFont

    def no_freetype(size=None):
        raise ImportError("The _imagingft C module is not installed")

    bars = {"gen": (np.array([0.0]), np.array([10.0]))}
    for freetype in (True, False):
        if not freetype:
            monkeypatch.setattr(ImageFont, "load_default", no_freetype)
        png = tmp_path / f"t{freetype}.png"
        draw(PlotData(bars, (np.array([]), np.array([])), 0.0, 0.01, "títle ✓"), png)
        columns, rows = _colour_columns(png, COLORS[0])
        assert len(columns) > 100
        # the rows' names end left of the plot's frame (the bitmap font ignores anchors: they ran in)
        dark = np.asarray(Image.open(png).convert("L")) < 128
        frame = int(np.flatnonzero(dark.sum(axis=0) > SIZE[1] // 2)[0])  # the frame's left edge
        top, bottom = np.flatnonzero(dark[:, frame])[[0, -1]]
        assert not dark[top + 2 : bottom - 1, frame + 2 : columns.min() - 1].any(), freetype
        assert dark[top:bottom, : frame - 8].any(), freetype  # the names, left of it


def test_one_time_without_a_number_does_not_shrink_the_axis():
    """A row with one NaN end took the maximum as NaN and the axis as 1 ms long: the scale is the
    last finite end's; an end near the largest float no longer makes the scale 0 (a division by zero)."""
    from prime_rl.analysis.timeline_plot import Layout

    pen = ImageDraw.Draw(Image.new("RGB", SIZE))
    font = ImageFont_default()
    nan_end = PlotData(
        {"gen": (np.array([0.0, 50.0]), np.array([100.0, np.nan]))},
        (np.array([]), np.array([])),
        0.0,
        0.05,
        "",
    )
    layout = Layout.of(nan_end, pen, font)
    assert abs((layout.right - layout.left) / layout.scale - 108.0) < 1e-6
    huge = PlotData(
        {"gen": (np.array([0.0]), np.array([1.75e308]))}, (np.array([]), np.array([])), 0.0, 1.0, ""
    )
    assert Layout.of(huge, pen, font).scale > 0


def ImageFont_default():  # noqa: N802
    from prime_rl.analysis.timeline_plot import _font

    return _font()


def test_a_long_runs_timeline_draws_the_middle_the_kept_spans_leave_out(tmp_path, analyze, monkeypatch):
    """The spans kept as objects are the first and last SPANS_KEPT of each kind; the plot of them
    left a long run's middle empty. Every row is drawn from every span now: each row's colour is
    in many pixel columns of the picture's middle third."""
    from tests.support.synthetic_logs import make_run

    from prime_rl.analysis import stats

    monkeypatch.setattr(stats, "SPANS_KEPT", 20)
    files = make_run("healthy", steps=300, seed=2).write(tmp_path / "logs")
    summary, _ = analyze(files.values(), tmp_path / "out")
    assert summary["spans_dropped"]["gen"] > 200  # most spans are not kept as objects
    for kind, colour in zip(ROWS, COLORS, strict=True):
        columns, _ = _colour_columns(tmp_path / "out" / "timeline.png", colour)
        middle = columns[(columns > SIZE[0] * 0.4) & (columns < SIZE[0] * 0.6)]
        assert len(middle) > 10, f"{kind}: nothing drawn in the run's middle"


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


# --- an offline collector's samples ---------------------------------------------------------------


def _collector_log(path, samples) -> None:
    """A collect-rollouts log: each sample (its end in seconds after 12:00:00, dur_ms, server) as
    the collector writes it, when it ends."""
    from prime_rl.tracing import format_tagged

    lines = []
    for k, (end, dur, url) in sorted(enumerate(samples), key=lambda s: s[1][0]):
        tagged = format_tagged(
            "collect", "rollout.done", f"s{k:05d}", task=k, repeat=0, status=200, dur_ms=dur, queue_ms=1.0,
            gen_ms=dur - 2.0, verify_ms=1.0, out_tokens=8, attempts=1, url=url,
        )  # fmt: skip
        lines.append(f"2026-01-01 12:{int(end) // 60:02d}:{end % 60:06.3f} | INFO    | {tagged}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def test_a_collectors_picture_draws_a_row_per_server(tmp_path, analyze):
    """A collector's log (only [collect] lines) got no timeline.png (reviewer's s08). Each server's
    samples are a row now, where they ran: fast's four in flight for 0-60 s, slow's for 0-160 s, the
    first server (by URL) on top; no row of the trio's."""
    from prime_rl.analysis.timeline_plot import SAMPLE_COLORS

    samples = [(2.0 * (k // 4 + 1), 2000.0, "http://fast:8000") for k in range(120)]
    samples += [(8.0 * (k // 4 + 1), 8000.0, "http://slow:8000") for k in range(80)]
    _collector_log(tmp_path / "collect.log", samples)
    analyze([tmp_path / "collect.log"], tmp_path / "out")
    png = tmp_path / "out" / "timeline.png"
    fast_x, fast_y = _colour_columns(png, SAMPLE_COLORS[0])
    slow_x, slow_y = _colour_columns(png, SAMPLE_COLORS[1])
    assert len(fast_x) and len(slow_x) and fast_y.max() < slow_y.min()  # fast (first by URL) on top
    assert abs(fast_x.min() - slow_x.min()) <= 1
    ratio = (fast_x.max() - fast_x.min()) / (slow_x.max() - slow_x.min())
    assert abs(ratio - 60 / 160) < 0.01, ratio
    for colour in COLORS[:5]:  # no trio row drawn (the sixth, grey, is in the text's edges)
        assert not len(_colour_columns(png, colour)[0])


def test_a_long_collector_log_keeps_its_first_and_last_samples_and_draws_the_middle(
    tmp_path, analyze, monkeypatch
):
    """Samples are spans as the trio's are: timeline.txt lists the first and last SPANS_KEPT, the
    rest counted, whatever the batches the log is read in; the picture draws every one (its rows
    cover the middle of the run, which no kept sample is in)."""
    from prime_rl.analysis import parser, stats
    from prime_rl.analysis.timeline_plot import SAMPLE_COLORS

    monkeypatch.setattr(stats, "SPANS_KEPT", 20)
    monkeypatch.setattr(parser, "BATCH_ROWS", 7)
    # 300 samples, one every 0.5 s, each 1.2 s long, on two servers in turn; then a gap of 20 s and
    # 10 more samples of server a
    samples = [(1.2 + 0.5 * k, 1200.0, f"http://{'ab'[k % 2]}:1") for k in range(300)]
    samples += [(170.0 + k, 500.0, "http://a:1") for k in range(10)]
    _collector_log(tmp_path / "collect.log", samples)
    summary, _ = analyze([tmp_path / "collect.log"], tmp_path / "out")
    assert summary["spans_dropped"] == {"sample": 310 - 40}
    text = (tmp_path / "out" / "timeline.txt").read_text()
    listed = [line.split()[7] for line in text.splitlines() if " ms  sample " in line]
    assert listed == [f"s{k:05d}" for k in (*range(20), *range(290, 310))]
    assert "between them 270 sample spans are left out here" in text
    png = tmp_path / "out" / "timeline.png"
    a_x, _ = _colour_columns(png, SAMPLE_COLORS[0])
    b_x, _ = _colour_columns(png, SAMPLE_COLORS[1])
    middle = SIZE[0] // 2
    assert middle in a_x and middle in b_x  # a's and b's rows run through the run's middle
    gap = np.setdiff1d(np.arange(a_x.min(), a_x.max()), a_x)  # a's row: its 20 s without a sample
    assert len(gap) > 50 and b_x.max() < gap.min() + 3


def test_a_collector_s_samples_keep_fewer_lines_than_the_trio_s_spans(tmp_path, analyze, monkeypatch):
    """A collector's log has a sample a line: timeline.txt keeps its first and last SAMPLES_KEPT
    samples (the trio's kinds keep SPANS_KEPT each): 40,000 sample lines took 0.15 s of a 1M-line
    log's report. Beside a trio's run, the trio's spans keep their own number."""
    from prime_rl.analysis import stats

    monkeypatch.setattr(stats, "SAMPLES_KEPT", 5)
    samples = [(1.0 + 0.5 * k, 800.0, "http://a:1") for k in range(40)]
    _collector_log(tmp_path / "collect.log", samples)
    make_run("healthy", steps=12, seed=1).write(tmp_path / "trio")
    summary, _ = analyze([tmp_path / "collect.log", *sorted((tmp_path / "trio").iterdir())], tmp_path / "out")
    assert summary["spans_dropped"] == {"sample": 40 - 10}
    text = (tmp_path / "out" / "timeline.txt").read_text()
    listed = [line.split()[7] for line in text.splitlines() if " ms  sample " in line]
    assert listed == [f"s{k:05d}" for k in (*range(5), *range(35, 40))]
    assert sum(" ms  gen " in line for line in text.splitlines()) == 12  # the trio's: every batch
    assert "(a long run: the first and last 5 samples are shown; between them 30 sample spans" in text


def test_more_servers_than_rows_share_the_last_row(tmp_path):
    """Twelve servers: the first SAMPLE_ROWS - 1 by URL have their rows, the other five one row."""
    from prime_rl.analysis.__main__ import _arg_parser, _files, _run
    from prime_rl.analysis.report import plot_data
    from prime_rl.analysis.timeline_plot import SAMPLE_ROWS, rows

    samples = [(1.0 + k, 1500.0, f"http://h{k:02d}:1") for k in range(12)]
    _collector_log(tmp_path / "collect.log", samples)
    parser = _arg_parser()
    args = parser.parse_args([str(tmp_path / "collect.log")])
    analysis, _ = _run(parser, _files(parser, args.inputs), args.inputs, args, Thresholds(), tmp_path / "out")
    data = plot_data(analysis)
    assert data is not None
    names = [name for _, name, _ in rows(data.bars)]  # from the bottom
    assert len(names) == SAMPLE_ROWS == 8
    assert (
        names[-1] == "samples\nh00:1"
        and names[1] == "samples\nh06:1"
        and names[0] == "samples\n5 other servers"
    )
    start, end = data.bars["samples 5 other servers"]
    assert list(end - start) == [5.5] and start[0] - data.t0 == 7.0  # h07-h11: 6.5-12 s, one bar


@settings(max_examples=300, deadline=None)
@given(
    spans=st.lists(st.tuples(st.integers(0, 60), st.integers(1, 12)), max_size=40),
    by_end=st.booleans(),
)
def test_overlapping_samples_merge_as_merge_intervals_merges_them(spans, by_end):
    """The collector's batch merge (linear when the samples come as they end, as a collector's log
    has them) gives merge_intervals' bars at resolution 0, in any order."""
    from prime_rl.analysis.bars import merge_intervals, merge_overlapping

    if by_end:
        spans = sorted(spans, key=lambda s: s[0] + s[1])
    start = np.array([float(s) for s, _ in spans])
    end = np.array([float(s + w) for s, w in spans])
    got, want = merge_overlapping(start, end), merge_intervals(start, end, 0.0)
    assert got[0].tolist() == want[0].tolist() and got[1].tolist() == want[1].tolist()


def _verify_pass_log(path, first_s: float, n: int = 16) -> None:
    """A deferred verify pass's lines (collect-rollouts verify) appended to ``path``: ``n``
    verifications of 10 s, four at a time, from ``first_s`` after 12:00:00."""
    from prime_rl.tracing import format_tagged

    lines = []
    for k in range(n):
        end = first_s + 10.0 * (k // 4 + 1)
        tagged = format_tagged("collect", "verify.done", None, task=k, repeat=0, dur_ms=10_000.0)
        lines.append(f"2026-01-01 12:{int(end) // 60:02d}:{end % 60:06.3f} | INFO    | {tagged}")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write("\n".join(lines) + "\n")


def test_a_verify_pass_s_verifications_are_a_row_and_a_listing_of_their_own(tmp_path, analyze, monkeypatch):
    """A deferred verify pass was on no timeline (reviewer's s42b): analysed alone, timeline.txt said
    "(no timed events)" under the trio's header and there was no timeline.png; with its collect run,
    the timeline ended with the samples, the pass's minutes absent. Its verifications (each from its
    verify.done line's time less its dur_ms to the line) are now a row of timeline.png and spans
    "verification" of timeline.txt, the first and last SAMPLES_KEPT listed as the samples are, under a
    collector's header."""
    from prime_rl.analysis import parser, stats, timeline_plot

    monkeypatch.setattr(stats, "SAMPLES_KEPT", 5)
    monkeypatch.setattr(parser, "BATCH_ROWS", 7)
    # the pass alone: 16 verifications 12:00:30-12:01:10
    _verify_pass_log(tmp_path / "alone" / "scored_collect.log", 30.0)
    summary, _ = analyze([tmp_path / "alone" / "scored_collect.log"], tmp_path / "out_alone")
    assert summary["spans_dropped"] == {"verification": 16 - 10}
    text = (tmp_path / "out_alone" / "timeline.txt").read_text()
    assert text.startswith("An offline collector's verifications in time order.\n")
    assert "(no timed events)" not in text and "Weight updates" not in text
    listed = [line.split()[7] for line in text.splitlines() if " ms  verification " in line]
    assert listed == [f"task={k}" for k in (*range(5), *range(11, 16))]
    assert "12:00:30.000 -> 12:00:40.000   10000.0 ms  verification verification task=0 repeat=0" in text
    assert (
        "(a long run: the first and last 5 verifications are shown; between them 6 verification spans" in text
    )
    png = tmp_path / "out_alone" / "timeline.png"
    x, _ = _colour_columns(png, timeline_plot.VERIFICATION_COLOR)
    assert len(x) > SIZE[0] // 2  # 40 s of the 40 s drawn
    for colour in COLORS[:5]:  # no trio row drawn
        assert not len(_colour_columns(png, colour)[0])
    # with its run (40 samples 0.2-20.5 s, one log): the pass after the samples, a row above theirs
    samples = [(1.0 + 0.5 * k, 800.0, "http://a:1") for k in range(40)]
    _collector_log(tmp_path / "run" / "collect.log", samples)
    _verify_pass_log(tmp_path / "run" / "collect.log", 30.0)
    summary, _ = analyze([tmp_path / "run" / "collect.log"], tmp_path / "out_run")
    assert summary["spans_dropped"] == {"sample": 40 - 10, "verification": 16 - 10}
    text = (tmp_path / "out_run" / "timeline.txt").read_text()
    assert text.startswith("An offline collector's samples and verifications in time order.\n")
    assert text.splitlines()[-2].startswith("12:01:00.000 -> 12:01:10.000   10000.0 ms  verification")
    assert "the first and last 5 samples and as many verifications are shown" in text
    png = tmp_path / "out_run" / "timeline.png"
    sample_x, sample_y = _colour_columns(png, timeline_plot.SAMPLE_COLORS[0])
    verify_x, verify_y = _colour_columns(png, timeline_plot.VERIFICATION_COLOR)
    assert sample_x.max() < verify_x.min() and verify_y.max() < sample_y.min()  # later, on top
    ratio = (verify_x.max() - verify_x.min()) / (sample_x.max() - sample_x.min())
    assert abs(ratio - 40 / 20.3) < 0.02, ratio
    # a collector's log with no sample nor verification: a collector's header over "(no timed events)"
    log = tmp_path / "none" / "collect.log"
    log.parent.mkdir()
    log.write_text("2026-01-01 12:00:00.000 | INFO    | [collect] run.start todo=16 done=0 resume=false\n")
    analyze([log], tmp_path / "out_none")
    text = (tmp_path / "out_none" / "timeline.txt").read_text()
    assert text == "An offline collector's samples in time order.\n\n(no timed events)\n"
