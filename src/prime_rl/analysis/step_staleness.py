"""Each step's staleness ([rollout] ``current_step`` and ``staleness``), kept as arrays of doubles.

A dict of every step's staleness cost about 100 bytes a step (a key, an int object, the table) and
was half of what the per-step figures held on a long run; two arrays of doubles cost 16 bytes a
line. The step and staleness are taken as ``int()`` takes them (toward zero; values are finite, the
parser reads no other), the last line of a step wins (but for the violations of ``async_level``,
which keep every line's).
"""

from __future__ import annotations

import numpy as np
import polars as pl


class StepStaleness:
    """The [rollout] lines' (step, staleness) pairs, in line order."""

    __slots__ = ("_steps", "_values", "_last")

    def __init__(self) -> None:
        self._steps: list[np.ndarray] = []
        self._values: list[np.ndarray] = []
        self._last: tuple[np.ndarray, np.ndarray] | None = None

    def add(self, steps: pl.Series, values: pl.Series) -> None:
        """A batch's pairs (Float64 columns of the same length, no nulls), in line order."""
        self._steps.append(np.trunc(steps.to_numpy().astype(np.float64)))
        self._values.append(np.trunc(values.to_numpy().astype(np.float64)))
        self._last = None

    def _by_step(self) -> tuple[np.ndarray, np.ndarray]:
        """Each step once (ascending) with its last line's staleness."""
        if self._last is None:
            steps = np.concatenate(self._steps) if self._steps else np.empty(0)
            values = np.concatenate(self._values) if self._values else np.empty(0)
            # the last of each step: the first of each in the reversed lines
            unique, first = np.unique(steps[::-1], return_index=True)
            self._last = unique, values[::-1][first]
        return self._last

    def __len__(self) -> int:
        return len(self._by_step()[0])

    def histogram(self) -> dict[int, int]:
        """Steps per staleness value, by value."""
        values, counts = np.unique(self._by_step()[1], return_counts=True)
        return {int(v): int(n) for v, n in zip(values.tolist(), counts.tolist(), strict=True)}

    def above(self, level: int) -> list[tuple[int, int]]:
        """(step, staleness) of every step with a line whose staleness is above ``level``, by step,
        at its highest: a step done again after a restart keeps the violation of its first run (a
        barrier that let a batch run too far ahead, then crashed, is a defect all the same)."""
        steps = np.concatenate(self._steps) if self._steps else np.empty(0)
        values = np.concatenate(self._values) if self._values else np.empty(0)
        over = values > level
        steps, values = steps[over], values[over]
        order = np.lexsort((-values, steps))  # by step, the highest first
        steps, values = steps[order], values[order]
        first = np.concatenate(([True], steps[1:] != steps[:-1])) if len(steps) else np.empty(0, dtype=bool)
        return [(int(s), int(v)) for s, v in zip(steps[first].tolist(), values[first].tolist(), strict=True)]

    def as_dict(self) -> dict[int, int]:
        """Every step's staleness, by step."""
        steps, values = self._by_step()
        return {int(s): int(v) for s, v in zip(steps.tolist(), values.tolist(), strict=True)}
