"""Each step's staleness ([rollout] ``current_step`` and ``staleness``), kept as arrays of doubles.

A dict of every step's staleness cost about 100 bytes a step (a key, an int object, the table) and
was half of what the per-step figures held on a long run; two arrays of doubles and one of int32
(the line's run's ``async_level``) cost 20 bytes a line. The step and staleness are taken as
``int()`` takes them (toward zero; values are finite, the parser reads no other; the collector
gives only lines whose step is a step number, as every per-step figure takes it), the last line of
a step wins (but for the violations of ``async_level``, which keep every line's, each judged by the
``async_level`` of the run it is in). A line whose ``current_step`` is none or no step number is at
no step: its staleness is in no step's, but it is judged all the same (:meth:`StepStaleness.above_at_no_step`).
"""

from __future__ import annotations

import numpy as np
import polars as pl


class StepStaleness:
    """The [rollout] lines' (step, staleness) pairs, in line order."""

    __slots__ = ("_steps", "_values", "_levels", "_last", "_loose")

    def __init__(self) -> None:
        self._steps: list[np.ndarray] = []
        self._values: list[np.ndarray] = []
        self._levels: list[np.ndarray] = []
        """Each line's run's ``async_level`` (int32; -1: its run did not say, the level given is its)."""
        self._last: tuple[np.ndarray, np.ndarray] | None = None
        self._loose: list[tuple[np.ndarray, np.ndarray]] = []
        """The staleness of the lines at no step, with their run's ``async_level`` (as ``_levels``)."""

    def add(self, steps: pl.Series, values: pl.Series, levels: np.ndarray | None = None) -> None:
        """A batch's pairs (Float64 columns of the same length, no nulls), in line order, and the
        ``async_level`` of each line's run (-1 or None: not said)."""
        self._steps.append(np.trunc(steps.to_numpy().astype(np.float64)))
        self._values.append(np.trunc(values.to_numpy().astype(np.float64)))
        self._levels.append(np.full(len(steps), -1, np.int32) if levels is None else levels.astype(np.int32))
        self._last = None

    def add_at_no_step(self, values: pl.Series, levels: np.ndarray) -> None:
        """A batch's staleness of lines at no step (a Float64 column, no nulls), with the
        ``async_level`` of each line's run (-1: not said)."""
        self._loose.append((np.trunc(values.to_numpy().astype(np.float64)), levels.astype(np.int32)))

    def above_at_no_step(self, level: int | None) -> list[int]:
        """The staleness of every line at no step above its run's ``async_level`` (else ``level``;
        None: not judged), in line order."""
        if not self._loose:
            return []
        values = np.concatenate([v for v, _ in self._loose])
        limits = self._limits(level, loose=True)[-len(values) :]
        return [int(v) for v in values[values > limits].tolist()]

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

    def _limits(self, level: int | None, loose: bool = False) -> np.ndarray:
        """Each line's ``async_level``: its run's, else ``level`` (None: unknown, as infinity); with
        ``loose``, the lines at no step's after the others'."""
        parts = self._levels + ([lv for _, lv in self._loose] if loose else [])
        levels = np.concatenate(parts) if parts else np.empty(0, np.int32)
        return np.where(levels >= 0, levels, np.inf if level is None else level)

    def levels(self, level: int | None) -> list[int]:
        """The ``async_level`` the lines were judged by, each once, in the order of the lines (the
        runs'; ``level`` for lines whose run did not say; none unknown; the lines at no step after
        the others)."""
        limits = self._limits(level, loose=True)
        unique, first = np.unique(limits, return_index=True)
        return [int(v) for v in unique[np.argsort(first)].tolist() if v != np.inf]

    def above(self, level: int | None) -> list[tuple[int, int]]:
        """(step, staleness) of every step with a line whose staleness is above its run's
        ``async_level`` (else ``level``; None: not judged), by step, at its highest: a step done again
        after a restart keeps the violation of its first run (a barrier that let a batch run too far
        ahead, then crashed, is a defect all the same), and a run's steps are judged by its own
        level (a resume with a lower one makes no violations of the earlier run's)."""
        steps = np.concatenate(self._steps) if self._steps else np.empty(0)
        values = np.concatenate(self._values) if self._values else np.empty(0)
        over = values > self._limits(level)
        steps, values = steps[over], values[over]
        order = np.lexsort((-values, steps))  # by step, the highest first
        steps, values = steps[order], values[order]
        first = np.concatenate(([True], steps[1:] != steps[:-1])) if len(steps) else np.empty(0, dtype=bool)
        return [(int(s), int(v)) for s, v in zip(steps[first].tolist(), values[first].tolist(), strict=True)]

    def as_dict(self) -> dict[int, int]:
        """Every step's staleness, by step."""
        steps, values = self._by_step()
        return {int(s): int(v) for s, v in zip(steps.tolist(), values.tolist(), strict=True)}
