"""timeline.png: one row per kind of event over the whole run, drawn from the bars the collection
merged (:mod:`~prime_rl.analysis.bars`) with Pillow.

The picture is rows of coloured bars on a time axis: each row's bars are merged at the run's
resolution (:func:`merge_sorted`), then turned into the pixel columns they cover, so that drawing
costs one rectangle per run of covered columns, at most the plot's width per row, whatever the
number of spans. matplotlib drew the same picture; importing it took 0.35-0.5 CPU-s of every
analysis (a child process imported it while a big log was read, and a short log waited for it):
Pillow's import and the drawing take about 0.03 s.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from prime_rl.analysis.bars import SAMPLES, is_sample_row
from prime_rl.analysis.sample_spans import VERIFICATION

ROWS = ("gen", "ckpt_wait", "ckpt_write", "update", "train", "train_wait")
_LABELS = (
    "generation",
    "ckpt wait",
    "ckpt write",
    "weight update\n(hatched: queue)",
    "trainer compute",
    "trainer waits\nfor rollouts",
)
COLORS = ((31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189), (127, 127, 127))
"""Each row's colour (matplotlib's first six "tab" colours, as the picture had)."""
SAMPLE_ROWS = 8
"""An offline collector's samples are drawn one row per server (above the trio's rows when its logs
are analysed too), at most this many rows: past the first ``SAMPLE_ROWS - 1`` servers (by URL), the
others' samples share the last row."""
SAMPLE_COLORS = ((140, 86, 75), (227, 119, 194), (188, 189, 34), (23, 190, 207))
"""The sample rows' colours, in turn (matplotlib's other four "tab" colours)."""
VERIFICATION_COLOR = (31, 31, 120)
"""The colour of a deferred verify pass's row (its verifications), drawn above the samples'."""
_URL_CHARS = 28
"""A sample row's name shows at most this many characters of its server's URL (its end)."""
SIZE = (1320, 462)
"""The picture's width and height in pixels."""
_FONT_PX = 13
Font = ImageFont.ImageFont | ImageFont.FreeTypeFont
_BAR = 0.7
"""A bar's height, as a share of its row's."""
_HATCH_PX = 7
"""The distance between the hatch lines of the updates' queue parts."""


@dataclass(frozen=True)
class PlotData:
    """What the picture is drawn from."""

    bars: dict[str, tuple[np.ndarray, np.ndarray]]
    """Each kind's bars (start and end times, sorted by start), merged at the run's resolution; a
    collector's samples as rows ``samples URL`` (:func:`~prime_rl.analysis.bars.sample_row`), in
    the order drawn from the top."""
    queued: tuple[np.ndarray, np.ndarray]
    """The updates' queue parts: start (seconds since the first bar's) and width, sorted by both."""
    t0: float
    """The first bar's start: the picture's time zero."""
    resolution: float
    """Bars closer than this (seconds) are drawn as one: :data:`~prime_rl.analysis.bars.PLOT_BARS` per row."""
    title: str


def rows(bars: dict[str, tuple[np.ndarray, np.ndarray]]) -> list[tuple[str, str, tuple[int, int, int]]]:
    """The picture's rows from the bottom, each (its key in ``bars``, its name, its colour): the
    trio's :data:`ROWS` (all of them, drawn or not; none for a collector's logs alone), then a
    collector's samples, a row per server (the first of ``bars`` at the top), then a deferred verify
    pass's verifications (:data:`~prime_rl.analysis.sample_spans.VERIFICATION`)."""
    samples = list(filter(is_sample_row, bars))
    collector = [*samples, *(k for k in bars if k == VERIFICATION)]
    trio = (
        list(zip(ROWS, _LABELS, COLORS, strict=True)) if not collector or set(bars) - set(collector) else []
    )
    drawn = [(k, _sample_label(k), SAMPLE_COLORS[i % len(SAMPLE_COLORS)]) for i, k in enumerate(samples)]
    if VERIFICATION in bars:
        drawn.insert(0, (VERIFICATION, "verify pass", VERIFICATION_COLOR))
    return trio + drawn[::-1]


def _sample_label(key: str) -> str:
    """A sample row's name: "samples" over its server's URL (without ``http://``; a long one's end)."""
    url = key[len(SAMPLES) + 1 :].removeprefix("http://")
    return (
        f"{SAMPLES}\n{url if len(url) <= _URL_CHARS else '...' + url[3 - _URL_CHARS :]}" if url else SAMPLES
    )


def draw(data: PlotData, path: Path) -> None:
    """Draw ``data`` into the PNG ``path``: one rectangle per run of pixel columns a row's bars
    cover (bars narrower than a pixel still show as one), gen at the bottom as :func:`rows` go."""
    font = _font()
    image = Image.new("RGB", SIZE, "white")
    pen = ImageDraw.Draw(image)
    layout = Layout.of(data, pen, font)
    drawn = rows(data.bars)
    for i, (kind, _, color) in enumerate(drawn):
        if kind in data.bars:
            start, end = data.bars[kind]
            bars = merge_sorted(
                zip((start - data.t0).tolist(), (end - start).tolist(), strict=True), data.resolution
            )
            top, bottom = layout.bar(i)
            for left, right in layout.runs(bars):
                pen.rectangle((left, top, right, bottom), fill=color)
    start, width = data.queued
    keys = [kind for kind, _, _ in drawn]
    if len(start) and "update" in keys:  # the queue part of the updates: hatched, outlined in black
        row = keys.index("update")
        top, bottom = layout.bar(row)
        runs = layout.runs(merge_sorted(zip(start.tolist(), width.tolist(), strict=True), data.resolution))
        hatch = Image.new("L", SIZE, 0)  # where the hatch lines are drawn: inside the queue parts only
        inside = ImageDraw.Draw(hatch)
        for left, right in runs:
            inside.rectangle((left, top, right, bottom), fill=255)
        lines = image.copy()
        ink = ImageDraw.Draw(lines)
        height = bottom - top
        for x in range(layout.left - height, layout.right + 1, _HATCH_PX):
            ink.line((x, bottom, x + height, top), fill="black")
        image.paste(lines, (0, 0), hatch)
        for left, right in runs:
            pen.rectangle((left, top, right, bottom), outline="black")
    layout.axes(pen, font)
    image.save(path, format="PNG")


@dataclass(frozen=True)
class Layout:
    """Where the plot area lies in the picture and how seconds map to its pixel columns."""

    left: int
    right: int
    top: int
    bottom: int
    lo: float
    """The time (seconds since the first bar's start) at the plot's left edge."""
    scale: float
    """Pixels per second."""
    title: str
    labels: tuple[str, ...] = _LABELS
    """The rows' names, from the bottom (:func:`rows`)."""

    @classmethod
    def of(cls, data: PlotData, pen: ImageDraw.ImageDraw, font: Font) -> Layout:
        labels = tuple(name for _, name, _ in rows(data.bars))
        label = max(pen.multiline_textbbox((0, 0), text, font=font)[2] for text in labels)
        left, right, top, bottom = label + 20, SIZE[0] - 20, 30, SIZE[1] - 48
        ends = [end - data.t0 for _, end in data.bars.values()]
        ends.append(data.queued[0] + data.queued[1])
        with np.errstate(invalid="ignore", over="ignore"):
            finite = [e[np.isfinite(e)] for e in ends]
        # the last finite end (a NaN or inf one left out), at most 1e300 s: the scale stays above 0
        span = min(max([float(e.max()) for e in finite if len(e)] + [1e-3]), 1e300)
        lo, hi = -0.04 * span, 1.04 * span  # a margin each side, as matplotlib's axes had
        return cls(left, right, top, bottom, lo, (right - left) / (hi - lo), data.title, labels)

    def x(self, seconds: float) -> float:
        return self.left + (seconds - self.lo) * self.scale

    def bar(self, row: int) -> tuple[int, int]:
        """The top and bottom pixel rows of row ``row``'s bars (row 0 at the bottom)."""
        height = (self.bottom - self.top) / len(self.labels)
        middle = self.bottom - (row + 0.5) * height
        return round(middle - _BAR * height / 2), round(middle + _BAR * height / 2)

    def runs(self, bars: list[tuple[float, float]]) -> list[tuple[int, int]]:
        """The runs of pixel columns (first, last) that ``bars`` (start, width) cover, in order."""
        if not bars:
            return []
        at = np.array(bars, dtype=np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            x0 = self.left + (at[:, 0] - self.lo) * self.scale
            x1 = self.left + (at[:, 0] + at[:, 1] - self.lo) * self.scale
        drawn = np.isfinite(x0) & np.isfinite(x1)  # clipped to the plot before they are made whole numbers
        first = np.clip(np.floor(x0[drawn]), self.left, self.right).astype(np.int64)
        last = np.maximum(np.clip(np.ceil(x1[drawn]) - 1, self.left, self.right).astype(np.int64), first)
        covered = np.zeros(self.right - self.left + 2, dtype=np.int64)
        np.add.at(covered, first - self.left, 1)
        np.add.at(covered, last - self.left + 1, -1)
        on = np.concatenate([[False], np.cumsum(covered)[:-1] > 0, [False]])
        edges = np.flatnonzero(on[1:] != on[:-1])
        return [
            (self.left + int(a), self.left + int(b) - 1) for a, b in zip(edges[::2], edges[1::2], strict=True)
        ]

    def axes(self, pen: ImageDraw.ImageDraw, font: Font) -> None:
        """The frame, the time ticks and their numbers, the rows' names, the axis label and the title."""
        pen.rectangle((self.left, self.top, self.right, self.bottom), outline="black")
        hi = self.lo + (self.right - self.left) / self.scale
        step = _nice_step((hi - self.lo) / 8)
        decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
        for k in range(math.ceil(self.lo / step), math.floor(hi / step) + 1):
            x = round(self.x(k * step))
            pen.line((x, self.bottom, x, self.bottom + 4), fill="black")
            value = k * step
            text = f"{value:.3g}" if abs(value) >= 1e7 else f"{value:.{decimals}f}"  # no 300-digit number
            _text(pen, (x, self.bottom + 6), text, font, "ma")
        for row, label in enumerate(self.labels):
            top, bottom = self.bar(row)
            middle = (top + bottom) / 2
            pen.line((self.left - 4, middle, self.left, middle), fill="black")
            _text(pen, (self.left - 8, middle), label, font, "rm")
        _text(pen, ((self.left + self.right) / 2, SIZE[1] - 6), "seconds since the first event", font, "md")
        _text(pen, (SIZE[0] / 2, 8), self.title, font, "ma")


def _text(pen: ImageDraw.ImageDraw, xy: tuple[float, float], text: str, font: Font, anchor: str) -> None:
    """``text`` (lines right-aligned) placed by its box: ``anchor`` is horizontal ``l``/``m``/``r``
    then vertical ``a`` (top), ``m`` or ``d`` (bottom). Pillow's bitmap font ignores anchors, and
    writes Latin-1 alone (other characters are drawn as ``?`` there)."""
    if not isinstance(font, ImageFont.FreeTypeFont):
        text = text.encode("latin-1", "replace").decode("latin-1")
    left, top, right, bottom = pen.multiline_textbbox((0, 0), text, font=font, align="right")
    x = xy[0] - left - {"l": 0.0, "m": 0.5, "r": 1.0}[anchor[0]] * (right - left)
    y = xy[1] - top - {"a": 0.0, "m": 0.5, "d": 1.0}[anchor[1]] * (bottom - top)
    pen.multiline_text((x, y), text, fill="black", font=font, align="right")


def _nice_step(rough: float) -> float:
    """1, 2 or 5 times a power of ten, the first at least ``rough``."""
    power = 10.0 ** math.floor(math.log10(rough))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= rough)


def _font() -> Font:
    """Pillow's own font at :data:`_FONT_PX` pixels (its bitmap font where Pillow was built without
    FreeType: the scalable one then raises ImportError)."""
    try:
        return ImageFont.load_default(size=_FONT_PX)
    except ImportError:
        return ImageFont.load_default_imagefont()


def merge_bars(bars: list[tuple[float, float]], resolution: float) -> list[tuple[float, float]]:
    """(start, width) bars sorted by start, neighbours closer than ``resolution`` merged into one:
    at most about span / resolution bars, whatever the number of spans."""
    return merge_sorted(sorted(bars), resolution)


def merge_sorted(bars: Iterable[tuple[float, float]], resolution: float) -> list[tuple[float, float]]:
    """:func:`merge_bars` of bars already sorted (by start, then width)."""
    out: list[tuple[float, float]] = []
    first = True
    at = wide = 0.0  # the bar being merged into
    for start, width in bars:
        if not first and start - (at + wide) < resolution:
            reach = start + width - at
            if reach > wide:
                wide = reach
        else:
            if not first:
                out.append((at, wide))
            at, wide, first = start, width, False
    if not first:
        out.append((at, wide))
    return out
