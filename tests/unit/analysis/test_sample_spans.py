"""A collector's samples as spans and bars (:class:`~prime_rl.analysis.sample_spans.SampleSpans`):
its cheaper batch work keeps, drops and draws what the work it replaced did."""

from __future__ import annotations

from unittest import mock

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from prime_rl.analysis import stats
from prime_rl.analysis.sample_spans import SampleSpans
from prime_rl.analysis.stats import _Spans


class _OldSampleSpans(SampleSpans):
    """The batch work before: every timed row's URL gathered as text and cast to categories, and
    every timed row of a batch given to the spans gathered into a frame (the spans cut it down)."""

    def add(self, ts, dur, tid, info):
        end = ts.to_numpy()
        start = (ts - dur.clip(lower_bound=0.0) / 1000.0).to_numpy()
        with np.errstate(invalid="ignore"):
            timed = np.isfinite(start) & np.isfinite(end)
        rows = np.flatnonzero(timed)
        if not len(rows):
            return
        url = info.get("url")
        self._old_bars(start[rows], end[rows], url.gather(rows) if url is not None else None)
        columns = {"start": pl.Series(start), "end": ts, "tid": tid, **info}
        if self._head < self._kept:
            self._give(columns, rows)
            return
        self._waiting.append((columns, rows, len(rows)))
        self._waiting_rows += len(rows)
        while self._waiting and self._waiting_rows - self._waiting[0][2] >= self._kept:
            _, _, n = self._waiting.popleft()
            self._waiting_rows -= n
            self._spans.dropped[self._kind] = self._spans.dropped.get(self._kind, 0) + n

    def _give(self, columns, rows):
        frame = pl.DataFrame(columns)[rows]
        self._head += frame.height
        self._spans.add_frame(self._kind, self._kind + " {}", frame, self._info, "tid", True)

    def _old_bars(self, start, end, url):
        if url is None:
            self._row(None, start, end)
            return
        codes = url.fill_null("").cast(pl.Categorical).to_physical().to_numpy()
        if codes.min() == codes.max():
            self._row(url[0], start, end)
            return
        order = np.argsort(codes, kind="stable")
        cuts = np.flatnonzero(np.diff(codes[order])) + 1
        for at in np.split(order, cuts):
            self._row(url[int(at[0])], start[at], end[at])


_URLS = st.sampled_from(["http://a:1", "http://b:1", "http://c:1", "", None])
_LINE = st.tuples(
    st.integers(0, 400),  # the line's time, tenths of a second
    st.one_of(st.none(), st.floats(0.0, 30_000.0), st.just(-5.0)),  # dur_ms (none: no sample)
    _URLS,
)


def _batch(lines: list[tuple[int, float | None, str | None]], first: int):
    ts = pl.Series("ts", [t / 10.0 for t, _, _ in lines], dtype=pl.Float64)
    dur = pl.Series("dur_ms", [d for _, d, _ in lines], dtype=pl.Float64)
    tid = pl.Series("tid", [f"s{first + k}" for k in range(len(lines))], dtype=pl.String)
    url = pl.Series("url", [u for _, _, u in lines], dtype=pl.String)
    status = pl.Series("status", ["200"] * len(lines), dtype=pl.String)
    return ts, dur, tid, {"url": url, "status": status}


def _state(kind: type[SampleSpans], batches, kept: int, with_url: bool):
    """What the spans hold after ``batches``: the kept spans, the counts dropped and each row's bars
    (the spans keep ``SAMPLES_KEPT`` samples, the number the collector gives SampleSpans)."""
    with mock.patch.object(stats, "SAMPLES_KEPT", kept):
        return _fold(kind, batches, kept, with_url)


def _fold(kind: type[SampleSpans], batches, kept: int, with_url: bool):
    spans = _Spans()
    samples = kind(spans, kept, info=("url", "status") if with_url else ("status",))
    first = 0
    for lines in batches:
        ts, dur, tid, info = _batch(lines, first)
        first += len(lines)
        samples.add(ts, dur, tid, info if with_url else {"status": info["status"]})
    samples.finish()
    kept_spans = [(s.kind, s.start, s.end, s.label, s.info) for s in spans.kept()]
    bars = {key: tuple(a.tolist() for a in b.bars()) + (b.spans,) for key, b in spans.bars.items()}
    return kept_spans, dict(spans.dropped), bars


@settings(max_examples=400, deadline=None)
@given(
    batches=st.lists(st.lists(_LINE, max_size=30), max_size=8),
    kept=st.integers(1, 12),
    with_url=st.booleans(),
)
def test_a_batch_s_samples_are_kept_dropped_and_barred_as_the_old_batch_work_did(batches, kept, with_url):
    """_give gathers only the rows the spans keep (a 65,536-line batch's 2,000, not all of them) and
    counts the others dropped, as the spans did; _bars reads each server's code at the timed rows
    of the whole URL column's cast, without gathering the URLs as text first: the same spans kept,
    the same counts dropped and the same bars per server, whatever the batches, lines without a
    sample, URLs (empty, none) and number kept."""
    assert _state(SampleSpans, batches, kept, with_url) == _state(_OldSampleSpans, batches, kept, with_url)


def test_a_long_batch_gives_the_spans_only_the_rows_they_keep(monkeypatch):
    """A batch of 10,000 samples, 5 kept of the first and of the last: the frames made for the spans
    hold the 5 first and the 5 last (the batch's 10,000 were gathered into a frame before, 2.6 ms
    for a batch of 84,000 lines), the 9,990 between counted dropped."""
    monkeypatch.setattr(stats, "SAMPLES_KEPT", 5)
    spans = _Spans()
    heights: list[int] = []
    add_frame = spans.add_frame

    def counted(kind, label, frame, *args):
        heights.append(frame.height)
        add_frame(kind, label, frame, *args)

    monkeypatch.setattr(spans, "add_frame", counted)
    samples = SampleSpans(spans, 5, info=("url", "status"))
    samples.add(*_batch([(k, 100.0, "http://a:1") for k in range(10_000)], 0))
    samples.finish()
    assert heights == [10] and spans.dropped == {"sample": 9_990}
    assert [s.label for s in spans.kept()] == [f"sample s{k}" for k in (*range(5), *range(9_995, 10_000))]
