"""Restarts: several runs appended to one log (a crash, then ``rl --resume``) split into segments.

A process starts again when its step counter goes back: the orchestrator's ``[gen] batch.start
step=`` or the trainer's ``[train] step.done step=`` at or below a step it already reached (a
resume at checkpoint ``N`` redoes the steps from ``N`` on). Each such line opens a new segment.
The per-step series of :mod:`~prime_rl.analysis.stats` keep one value per step (the redone
step's), so a redone step is counted once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prime_rl.analysis.tagged import TaggedLines

STEP_LINE_OF = {"orchestrator": ("gen", "batch.start"), "trainer": ("train", "step.done")}
"""The line whose ``step=`` counts a process's progress, by process."""


@dataclass(frozen=True)
class Restart:
    """One restart of one process."""

    process: str
    """``orchestrator`` or ``trainer``."""
    where: str
    """``file:line`` of the first line of the new segment."""
    ts: float | None
    """Its timestamp."""
    reached: int
    """The highest step the process had reached before."""
    resumed: int
    """The step it started again at."""
    down_s: float | None
    """Seconds between the process's last line before and this one (None without timestamps)."""

    @property
    def redone(self) -> int:
        """Steps done again: ``resumed`` .. ``reached``."""
        return self.reached - self.resumed + 1


class Segments:
    """Watches the step lines of every process; :meth:`observe` says when a new segment starts."""

    def __init__(self) -> None:
        self.restarts: list[Restart] = []
        self._reached: dict[str, int] = {}
        self._last_ts: dict[str, float] = {}
        self._gap: dict[str, float] = {}

    def observe(self, lines: TaggedLines) -> list[int]:
        """Fold a batch of one process's lines; the rows that start a new segment of it. The downtime
        is the longest silence of the process since its previous step line (the crash, then the
        start-up)."""
        source = lines.source
        if source not in ("orchestrator", "trainer"):
            return []
        ts = lines.frame.get_column("ts").to_numpy()
        # each row's silence before it: the time since the process's previous timestamped line
        gaps = np.full(len(ts), -np.inf)
        stamped = np.flatnonzero(~np.isnan(ts))
        if len(stamped):
            before = self._last_ts.get(source)
            stamps = ts[stamped]
            gaps[stamped[1:]] = np.maximum(np.diff(stamps), 0.0)
            if before is not None:
                gaps[stamped[0]] = max(stamps[0] - before, 0.0)
            self._last_ts[source] = float(stamps[-1])
        tag, event = STEP_LINE_OF[source]
        frame = lines.frame
        rows = np.flatnonzero(
            ((frame.get_column("tag") == tag) & (frame.get_column("event") == event)).to_numpy()
        )
        # the longest silence before each step line since the one before it, and after the last
        bounds = np.concatenate([[0], rows + 1])
        longest = np.maximum.reduceat(np.append(gaps, -np.inf), bounds).tolist()
        steps = lines.rows_text(rows, "step")  # only the step lines' fields are read
        out = []
        for k, i in enumerate(rows.tolist()):
            gap = max(self._gap.pop(source, -np.inf), longest[k])
            raw = steps[k] or ""
            if not raw.isdigit():
                self._gap[source] = gap
                continue
            step, reached = int(raw), self._reached.get(source)
            self._reached[source] = step
            if reached is None or step > reached:
                continue
            ev = lines.event(i)
            self.restarts.append(
                Restart(source, ev.where(), ev.ts, reached, step, gap if gap > -np.inf else None)
            )
            out.append(i)
        if longest[-1] > -np.inf:
            self._gap[source] = max(self._gap.get(source, -np.inf), longest[-1])
        return out
