"""The timeline's rows for a run of any length: each kind's spans as bars, merged as they come.

timeline.png draws one row per kind of span (generation batches, checkpoint waits and writes,
weight updates, trainer steps) over the whole run. The spans kept as objects (the first and last
:data:`~prime_rl.analysis.stats.SPANS_KEPT` of each kind, for timeline.txt and the trace) leave
the middle of a long run out, and a plot of them showed it empty. Every span is therefore also
added here as it is collected: a kind's bars are merged where they are closer than the resolution
the plot will draw (the run's length so far over :data:`PLOT_BARS`, which only grows), so a kind
keeps at most about :data:`CAP` + :data:`PLOT_BARS` bars whatever the number of its spans. Bars
merged at one resolution and again at a coarser one cover what one merge at the coarser one
covers, so the plot's own merge of these bars draws what a merge of every span would.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

PLOT_BARS = 2_000
"""timeline.png draws each row as at most about this many bars (neighbours closer than the run's
length over this merged)."""
CAP = 1 << 16
"""Bars added and not yet merged, at most (a kind's memory: a few MB)."""
MIN_WIDTH = 1e-3
"""A span shorter than this is drawn this wide (seconds), as the plot has always drawn it."""


def merge_intervals(start: np.ndarray, end: np.ndarray, resolution: float) -> tuple[np.ndarray, np.ndarray]:
    """The bars ``[start, end)`` (any order) as the fewest bars covering them, neighbours closer than
    ``resolution`` (gap from the end reached so far to the next start) made one; sorted by start."""
    if not len(start):
        return start, end
    order = np.argsort(start, kind="stable")  # timsort: linear on spans that came in order
    start, end = start[order], end[order]
    reach = np.maximum.accumulate(end)
    first = np.ones(len(start), dtype=bool)
    first[1:] = start[1:] - reach[:-1] >= resolution
    at = np.flatnonzero(first)
    return start[at], np.maximum.reduceat(end, at)


def covered_s(start: np.ndarray, end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """How much of the stretches ``[start, end)`` (sorted, apart: :func:`merge_intervals`) lies before
    each time of ``t``, seconds."""
    done = np.concatenate(([0.0], np.cumsum(end - start)))
    i = np.searchsorted(start, t, side="right")  # the stretches begun by t: all of them but the last done
    last = np.maximum(i - 1, 0)
    beyond = np.where(i > 0, np.clip(end[last] - t, 0.0, None), 0.0)  # the part of the last one after t
    return done[i] - beyond


def overlap_s(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """The time two sets of stretches (each sorted and apart) share, seconds."""
    start, end = a
    return float(np.sum(covered_s(*b, end) - covered_s(*b, start)))


SAMPLES = "samples"
"""timeline.png's rows of an offline collector's samples: one per server, its key ``samples URL``
(:func:`sample_row`) in :attr:`~prime_rl.analysis.stats.Collected.bars`."""


def sample_row(url: str | None) -> str:
    """The key of the row of the collector's samples answered by ``url`` (none: ``samples``)."""
    return f"{SAMPLES} {url}" if url else SAMPLES


def is_sample_row(key: str) -> bool:
    """Whether ``key`` (of :attr:`~prime_rl.analysis.stats.Collected.bars`) is a row of samples."""
    return key == SAMPLES or key.startswith(SAMPLES + " ")


def merge_overlapping(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`merge_intervals` at resolution 0 (overlapping bars made one), in linear time when
    ``end`` does not go down (a collector's samples: each line is written as its sample ends): then
    bar ``i`` and the next are apart exactly when bar ``i`` ends no later than the earliest start of
    the bars after it."""
    if len(end) < 2 or (np.diff(end) < 0).any():
        return merge_intervals(start, end, 0.0) if len(end) else (start, end)
    after = np.minimum.accumulate(start[::-1])[::-1]  # the earliest start from each bar on
    first = np.ones(len(start), dtype=bool)
    first[1:] = end[:-1] <= after[1:]
    at = np.flatnonzero(first)
    return np.minimum.reduceat(start, at), end[np.append(at[1:] - 1, len(end) - 1)]


class Bars:
    """One kind's spans, as bars merged at a resolution that grows with the run (see the module)."""

    __slots__ = ("start", "end", "waiting", "new", "spans")

    def __init__(self) -> None:
        self.start = np.empty(0)
        self.end = np.empty(0)
        self.waiting: list[tuple[Sequence[float] | np.ndarray, Sequence[float] | np.ndarray]] = []
        """Spans added since the last merge, as they came (made arrays together when merged)."""
        self.new = 0
        self.spans = 0
        """Spans added."""

    def add(self, start: Sequence[float] | np.ndarray, end: Sequence[float] | np.ndarray) -> None:
        """Spans ``[start[i], end[i])`` (each at least :data:`MIN_WIDTH` wide when drawn)."""
        if len(start):
            self.waiting.append((start, end))
            self.new += len(start)
            self.spans += len(start)
            if self.new > CAP:
                self._merge()

    def _merge(self) -> None:
        s = np.concatenate([self.start, *(np.asarray(a, dtype=np.float64) for a, _ in self.waiting)])
        e = np.concatenate([self.end, *(np.asarray(b, dtype=np.float64) for _, b in self.waiting)])
        old = len(self.start)
        e[old:] = np.maximum(e[old:], s[old:] + MIN_WIDTH)
        # s and e hold the bars merged before: the first start and last end of every span so far
        self.start, self.end = merge_intervals(s, e, max(float(e.max()) - float(s.min()), 1e-3) / PLOT_BARS)
        self.waiting, self.new = [], 0

    @property
    def lo(self) -> float:
        """The first start of the spans merged (all of them after :meth:`bars`)."""
        return float(self.start[0]) if len(self.start) else math.inf

    @property
    def hi(self) -> float:
        """The last end of the spans merged (all of them after :meth:`bars`)."""
        return float(self.end.max()) if len(self.end) else -math.inf

    def bars(self) -> tuple[np.ndarray, np.ndarray]:
        """Every span added, as bars sorted by start (merged at the resolution reached so far)."""
        if self.new:
            self._merge()
        return self.start, self.end


def bars_by_kind(spans: Iterable[tuple[str, float, float]]) -> dict[str, Bars]:
    """The bars of each kind of ``spans``, (kind, start, end) each (for spans collected without them)."""
    columns: dict[str, tuple[list[float], list[float]]] = {}
    for kind, span_start, span_end in spans:
        start, end = columns.setdefault(kind, ([], []))
        start.append(span_start)
        end.append(span_end)
    out = {kind: Bars() for kind in columns}
    for kind, (start, end) in columns.items():
        out[kind].add(start, end)
    return out
