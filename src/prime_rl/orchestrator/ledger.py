"""Which tasks went into written batches, so a resumed run neither repeats nor skips a task.

Tasks are numbered in the order the environment yields them. Groups finish out of order, so the
ledger keeps a watermark (every task below it is used) plus the used tasks above it; that pair is
what the orchestrator saves with each checkpoint and restores on resume.
"""

from __future__ import annotations

from typing import Any


class TaskLedger:
    def __init__(self, low_water: int = 0, used_above: list[int] | None = None):
        self.low_water = low_water
        self.used: set[int] = set(used_above or [])
        self._skip = frozenset(self.used)  # used before a resume: never handed out again

    def mark(self, index: int) -> None:
        """Task ``index`` is done with (in a written batch, dropped, or refused)."""
        self.used.add(index)

    def skip(self, index: int) -> bool:
        """Whether a task from the environment's stream was already used before a resume."""
        return index < self.low_water or index in self._skip

    def snapshot(self) -> dict[str, Any]:
        """Advance the watermark over contiguous used tasks and return what to save."""
        while self.low_water in self.used:
            self.used.discard(self.low_water)
            self.low_water += 1
        return {"low_water": self.low_water, "used_above": sorted(i for i in self.used if i > self.low_water)}

    @classmethod
    def restore(cls, saved: dict[str, Any]) -> TaskLedger:
        return cls(int(saved["low_water"]), [int(i) for i in saved["used_above"]])
