"""Restarts: several runs appended to one log (a crash, then ``rl --resume``) split into segments.

A process starts again when its step counter goes back: the orchestrator's ``[gen] batch.start
step=`` or the trainer's ``[train] step.done step=`` at or below a step it already reached (a
resume at checkpoint ``N`` redoes the steps from ``N`` on). Each such line opens a new segment.
The per-step series of :mod:`~prime_rl.analysis.stats` keep one value per step (the redone
step's), so a redone step is counted once.
"""

from __future__ import annotations

from dataclasses import dataclass

from prime_rl.analysis.parser import Event

STEP_LINES = {("gen", "batch.start"): "orchestrator", ("train", "step.done"): "trainer"}
"""The lines whose ``step=`` counts a process's progress, and the process they belong to."""


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

    def observe(self, ev: Event) -> bool:
        """Fold one event; True when it starts a new segment of its process. The downtime is the
        longest silence of the process since its previous step line (the crash, then the start-up)."""
        source = ev.source
        if ev.ts is not None and source in ("orchestrator", "trainer"):
            before = self._last_ts.get(source)
            if before is not None:
                self._gap[source] = max(self._gap.get(source, 0.0), ev.ts - before)
            self._last_ts[source] = ev.ts
        process = STEP_LINES.get((ev.tag, ev.event))
        if process is None or source != process:
            return False
        raw = ev.fields.get("step", "")
        if not raw.isdigit():
            return False
        step, reached = int(raw), self._reached.get(process)
        self._reached[process] = step
        gap = self._gap.pop(process, None)
        if reached is None or step > reached:
            return False
        self.restarts.append(Restart(process, ev.where(), ev.ts, reached, step, gap))
        return True
