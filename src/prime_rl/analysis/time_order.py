"""Each log's tagged lines against the times of the lines around them in their file.

A process writes its log in time order. So a line, or a few lines in a row (at most
:data:`BURST_LINES`), whose times lie far from the line before them and from the line after them,
which agree with each other, have a wrong time (a clock that was wrong for a moment, a corrupt
date): they are left out, counted and named by file and line. Kept, one line dated two months late
would stretch the run it is measured against to two months, and every share of the run to
nothing. Time that jumps back and does not return within those lines (logs joined out of order, a
clock set back) cannot tell which side is wrong: it is kept and named in a warning. A file's first
line with a time has no line before it and is not judged (a process that waited long before it
logged again); time that jumps forward and stays is a pause, or a hang's end. How far is "far" is
the threshold ``time_jump_s`` (0: nothing is judged). Each file is judged on its own (rotated parts
too).
"""

from __future__ import annotations

import math
from datetime import datetime
from pathlib import Path

import numpy as np
import polars as pl

from prime_rl.analysis.tagged import EXAMPLES, ParseStats


def _when(ts: float) -> str:
    """A time as the logs write it (local time, to the second)."""
    try:
        return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return f"{ts:.0f} s after 1970"


BURST_LINES = 16
"""At most this many lines in a row may be left out as one wrong time: a clock wrong for longer is
time that jumps, kept (and warned of when it goes back)."""
HELD_MAX = 1 << 16
"""A file's lines held for the next batch past this many (a long stretch of lines without a time
after the last with one) are judged as if the file ended there: the held lines are bounded."""


class TimeOrder:
    """One file's tagged lines, judged batch by batch in line order (:meth:`judge`). A batch's last
    :data:`BURST_LINES` lines with a time are judged with the next batch, once the lines after them
    are known."""

    def __init__(self, path: Path, stats: ParseStats, jump_s: float) -> None:
        self.path, self.stats, self.jump_s = path, stats, jump_s
        self.kept = math.nan
        """The time of the last line judged and kept: the next line's neighbour before it."""

    def judge(self, frame: pl.DataFrame, final: bool) -> tuple[pl.DataFrame, pl.DataFrame | None]:
        """``frame``'s lines (the file's next lines, in line order) as (those judged, without the
        ones left out; those held for the next call: from the :data:`BURST_LINES`-th last line with
        a time on, None when there are none or ``final``, the file's end)."""
        ts = frame.get_column("ts").to_numpy()
        stamped = np.flatnonzero(~np.isnan(ts))
        if self.jump_s <= 0 or not len(stamped):
            return frame, None
        if not final and frame.height - stamped[max(len(stamped) - BURST_LINES, 0)] > HELD_MAX:
            final = True
        t = ts[stamped]
        limit = len(t) if final else max(len(t) - BURST_LINES, 0)
        drop, back, end = self._jumps(t, limit)
        lines = frame.get_column("line").to_numpy()
        if drop:
            self._left_out(lines[stamped[drop]].tolist(), t[drop].tolist())
        if back:
            at = [i for i, _ in back]
            self._goes_back(lines[stamped[at]].tolist(), t[at].tolist(), [e for _, e in back])
        cut = frame.height if end >= len(t) else int(stamped[end])
        out, held = frame[:cut], (frame[cut:] if cut < frame.height else None)
        if drop:
            out = out.filter(~pl.Series(np.isin(np.arange(out.height), stamped[drop])))
        return out, held

    def _jumps(self, t: np.ndarray, limit: int) -> tuple[list[int], list[tuple[int, float]], int]:
        """Of times ``t`` (lines with a time, in line order; those from ``limit`` on are only looked
        ahead to): the lines left out (up to :data:`BURST_LINES` in a row, more than ``jump_s``
        from the kept line before them and from the line after them, which agree), the lines where
        time goes back for good with the time before them, and where the lines not yet judged start."""
        jump = self.jump_s
        kept = self.kept
        steps = np.abs(np.diff(t, prepend=kept if not math.isnan(kept) else t[0])) > jump
        drop: list[int] = []
        back: list[tuple[int, float]] = []
        i = 0
        for c in np.flatnonzero(steps).tolist():
            if c >= limit:
                break
            if c < i:  # inside the lines left out just before
                continue
            if i < c:
                kept = float(t[c - 1])
            i = c
            if math.isnan(kept) or abs(t[c] - kept) <= jump:  # the file's first line; back where it was
                continue
            ahead = t[c + 1 : c + 1 + BURST_LINES]
            home = np.flatnonzero(np.abs(ahead - kept) <= jump)
            if len(home):
                j = c + 1 + int(home[0])
                burst = t[c:j]
                if (np.abs(burst - t[j]) > jump).all():
                    drop.extend(range(c, j))
                    i = j
                    continue
            if kept - t[c] > jump:
                back.append((c, kept))
            kept, i = float(t[c]), c + 1
        end = max(i, limit)
        if end > 0:
            judged = np.ones(end, bool)
            judged[drop] = False
            last = np.flatnonzero(judged)
            if len(last):
                self.kept = float(t[last[-1]])
        return drop, back, end

    def _left_out(self, lines: list[int], times: list[float]) -> None:
        stats = self.stats
        stats.out_of_order += len(lines)
        for line, t in zip(lines, times, strict=True):
            if len(stats.out_of_order_examples) < EXAMPLES:
                stats.out_of_order_examples.append(f"{self.path}:{line}: {_when(t)}")

    def _goes_back(self, lines: list[int], times: list[float], earlier: list[float]) -> None:
        stats = self.stats
        stats.time_goes_back += len(lines)
        for line, t, e in zip(lines, times, earlier, strict=True):
            if len(stats.time_goes_back_examples) < EXAMPLES:
                stats.time_goes_back_examples.append(
                    f"{self.path}:{line}: {_when(t)}, {e - t:.0f} s before an earlier line's {_when(e)}"
                )
