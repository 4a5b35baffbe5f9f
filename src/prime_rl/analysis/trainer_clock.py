"""The trainer logs' clocks against the orchestrator's, from the steps both sides log.

A trainer on another machine may keep another clock (another time zone, a clock not synced). Two
hours ahead, its lines made a checkpoint-bound run two hours longer and every share of it small:
"no bottleneck found", and no warning. Each step bounds a trainer log's offset (its clock minus the
orchestrator's) from both sides:

- from below: the trainer logs ``[ckpt] write.done step=N`` once ``weights/step_N`` is marked
  stable, and the orchestrator logs ``[ckpt] wait.done target_step=N`` once it has seen the mark,
  so ``write.done - wait.done`` is at most the offset (less by how long after the mark the
  orchestrator looked);
- from above: the orchestrator logs ``[rollout] current_step=s`` before it writes
  ``rollouts/step_s``, and the trainer's ``[train] compute.done`` (or ``step.done``) of step s
  comes ``read_ms + train_ms`` (or more) after its wait for them ended, so ``that end - [rollout]``
  is at least the offset (more by how long the rollouts waited for the trainer).

They are judged as the inference logs' bounds are (:func:`~prime_rl.analysis.clock_offsets.judge`),
on the first batch of each trainer log, against the orchestrator's lines read before it
(:func:`orchestrator_first` orders the files so). A log off by more than
:data:`~prime_rl.analysis.clock_offsets.SLACK_S` has its times moved onto the orchestrator's clock
before anything is collected from it, so every figure (the run's length, spans, the timeline,
stalls and the log's last line) reads it there. A log with only the bound from above (a rank other
than the one that publishes) is measured when it is behind, not when it is ahead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import polars as pl

from prime_rl.analysis.clock_offsets import PROBE, judge
from prime_rl.analysis.parser import log_of
from prime_rl.analysis.tagged import ParseStats, TaggedLines, fields_by_key, step_numbers

_TRAIN_DONE = ("compute.done", "step.done")
"""The trainer's lines that end a step's compute (``read_ms`` and ``train_ms`` after its wait)."""


def orchestrator_first(files: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """``(label, path)`` pairs with the orchestrator's logs first, the rest in their order: a
    trainer log is measured against the orchestrator's lines read before it."""
    return sorted(files, key=lambda f: f[0] != "orchestrator")


class TrainerClock:
    """Between the parse and the collection (:meth:`place`): the orchestrator's first
    :data:`PROBE` checkpoint waits and rollouts, and each trainer log moved by its offset."""

    def __init__(self, stats: ParseStats) -> None:
        self.stats = stats
        self.waited: dict[int, float] = {}
        """Target step: the time of the orchestrator's first ``[ckpt] wait.done`` for it."""
        self.rolled: dict[int, float] = {}
        """Step: the time of the orchestrator's first ``[rollout]`` line of it."""
        self.moved: dict[str, float | None] = {}
        """Trainer log (:func:`log_of` its files): seconds its clock is ahead (None: in step with
        the orchestrator's, or not measured)."""

    def place(self, batches: Iterable[TaggedLines]) -> Iterator[TaggedLines]:
        """``batches`` in order, the trainer logs' on the orchestrator's clock; then the last
        lines of those logs (``stats.last_lines``) too."""
        for b in batches:
            if b.events is None and b.path is not None:
                if b.source == "orchestrator":
                    self._note(b)
                elif b.source == "trainer":
                    self._move(b)
            yield b
        for path, (ts, text) in list(self.stats.last_lines.items()):
            if ts is not None and (off := self.moved.get(log_of(path))):
                self.stats.last_lines[path] = (ts - off, text)

    def _note(self, b: TaggedLines) -> None:
        if len(self.waited) < PROBE:
            _first_by_step(_rows(b, "ckpt", "wait.done"), "target_step", self.waited)
        if len(self.rolled) < PROBE:
            _first_by_step(_rows(b, "rollout"), "current_step", self.rolled)

    def _move(self, b: TaggedLines) -> None:
        log = log_of(str(b.path))
        if log not in self.moved:
            self.moved[log] = self._measure(b, log)
        if off := self.moved[log]:
            b.move_clock(off)

    def _measure(self, b: TaggedLines, log: str) -> float | None:
        """The offset of the trainer log ``log`` from its first batch ``b`` (None: in step)."""
        written: dict[int, float] = {}
        _first_by_step(_rows(b, "ckpt", "write.done"), "step", written)
        below = [ts - self.waited[step] for step, ts in written.items() if step in self.waited]
        done = _rows(b, "train", *_TRAIN_DONE)
        ended: dict[int, float] = {}
        if done.height:
            fields = fields_by_key(done.get_column("rest"), ["step", "train_ms", "read_ms"])
            took = sum(
                fields.get_column(k).cast(pl.Float64, strict=False).fill_null(0.0)
                for k in ("train_ms", "read_ms")
            )
            ends = done.get_column("ts") - took / 1000.0
            for step, end in zip(
                step_numbers(fields.get_column("step")).to_list(), ends.to_list(), strict=True
            ):
                if step is not None and end is not None and (step in ended or len(ended) < PROBE):
                    ended[step] = min(end, ended.get(step, end))
        above = [end - self.rolled[step] for step, end in ended.items() if step in self.rolled]
        judged = judge(above, below)
        if judged is None:
            return None
        self.stats.clock_offsets[log] = judged
        return judged[0]


def _rows(b: TaggedLines, tag: str, *events: str) -> pl.DataFrame:
    """The batch's timed lines of ``tag`` (and of ``events``, when given): ``ts`` and ``rest``."""
    keep = (pl.col("tag").cast(pl.String) == tag) & pl.col("ts").is_not_null()
    if events:
        keep = keep & pl.col("event").cast(pl.String).is_in(events)
    return b.frame.lazy().filter(keep).select("ts", "rest").collect()


def _first_by_step(rows: pl.DataFrame, key: str, into: dict[int, float]) -> None:
    """Into ``into``: each step (field ``key``) of ``rows`` not there yet, at the time of its first
    line, until it holds :data:`PROBE`."""
    if not rows.height:
        return
    steps = step_numbers(fields_by_key(rows.get_column("rest"), [key]).get_column(key))
    for step, ts in zip(steps.to_list(), rows.get_column("ts").to_list(), strict=True):
        if len(into) >= PROBE:
            return
        if step is not None and step not in into:
            into[step] = ts
