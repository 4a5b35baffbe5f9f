"""Each log's tagged lines against the times of the lines around them in their file.

A process writes its log in time order, so a line whose time lies far from both its neighbours,
which agree with each other, has a wrong time (a clock that was wrong for a moment, a corrupt
date): it is left out, counted and named by file and line. Kept, one line dated two months late
would stretch the run it is measured against to two months, and every share of the run to
nothing. Time that goes back for good (logs joined out of order, a clock set back) cannot tell
which side is wrong: it is kept and named in a warning. A file's first and last lines have one
neighbour each and are not judged (a process that waited long before it logged again, a hang's
end). How far is "far" is the threshold ``time_jump_s`` (0: nothing is judged).
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


class TimeOrder:
    """One file's tagged lines, judged batch by batch in line order (:meth:`judge`). A batch's
    last line with a time is judged with the next batch, once the line after it is known."""

    def __init__(self, path: Path, stats: ParseStats, jump_s: float) -> None:
        self.path, self.stats, self.jump_s = path, stats, jump_s
        self.before = math.nan
        """The time of the last line judged (kept or not): the first line's neighbour before it."""
        self.kept = math.nan
        """The time of the last line kept: what a later line going back is measured against."""

    def judge(self, frame: pl.DataFrame, final: bool) -> tuple[pl.DataFrame, pl.DataFrame | None]:
        """``frame``'s lines (the file's next lines, in line order) as (those judged, without the
        ones left out; those held for the next call: from the last line with a time on, None when
        there are none or ``final``, the file's end)."""
        ts = frame.get_column("ts").to_numpy()
        stamped = np.flatnonzero(~np.isnan(ts))
        if self.jump_s <= 0 or not len(stamped):
            return frame, None
        t = ts[stamped]
        judged = len(t) if final else len(t) - 1
        before = np.concatenate(([self.before], t[:-1]))
        after = np.concatenate((t[1:], [math.nan]))
        up, down, jump = t - before, t - after, self.jump_s
        lone = (
            (np.abs(up) > jump)
            & (np.abs(down) > jump)
            & (np.sign(up) == np.sign(down))
            & (np.abs(after - before) <= jump)
        )[:judged]
        kept = t[:judged][~lone]
        earlier = np.concatenate(([self.kept], kept[:-1]))
        back = earlier - kept > jump
        if judged:
            self.before = float(t[judged - 1])
        if len(kept):
            self.kept = float(kept[-1])
        lines = frame.get_column("line").to_numpy()
        rows = stamped[:judged]
        if lone.any():
            self._left_out(lines[rows[lone]].tolist(), t[:judged][lone].tolist())
        if back.any():
            self._goes_back(lines[rows[~lone][back]].tolist(), kept[back].tolist(), earlier[back].tolist())
        held = None if final else frame[int(stamped[-1]) :]
        out = frame if final else frame[: int(stamped[-1])]
        if lone.any():
            out = out.filter(~pl.Series(np.isin(np.arange(out.height), rows[lone])))
        return out, held

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
