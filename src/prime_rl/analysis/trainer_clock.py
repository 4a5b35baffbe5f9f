"""The trainer logs' clocks against the orchestrator's, from the steps both sides log.

A trainer on another machine may keep another clock (another time zone, a clock not synced). Two
hours ahead, its lines made a checkpoint-bound run two hours longer and every share of it small:
"no bottleneck found", and no warning. Each step bounds a trainer log's offset (its clock minus the
orchestrator's) from both sides:

- from below: the trainer logs ``[ckpt] write.done step=N`` once ``weights/step_N`` is marked
  stable, and the orchestrator logs ``[ckpt] wait.done target_step=N`` once it has seen the mark,
  so ``write.done - wait.done`` is at most the offset (less by how long after the mark the
  orchestrator looked). Every rank logs ``[train] compute.done step=N-1`` before it publishes
  ``weights/step_N``, so ``compute.done - wait.done`` is one too (less by the publish as well):
  a rank that publishes nothing is bounded from below;
- from above: the orchestrator logs ``[rollout] current_step=s`` before it writes
  ``rollouts/step_s``, and the trainer's ``[train] compute.done`` (or ``step.done``) of step s
  comes ``read_ms + train_ms`` (or more) after its wait for them ended, so ``that end - [rollout]``
  is at least the offset (more by how long the rollouts waited for the trainer).

Which side is tight depends on the run: a side that waited for the other (the orchestrator for
the weights, the trainer for the rollouts; both poll every 50 ms) logged its line right after the
other's, while one that did not wait may have come long after (in a generation-bound run the
weights are ready long before the barrier asks for them). Whether a log is off is judged on all
bounds, as the inference logs' are (:func:`~prime_rl.analysis.clock_offsets.judge`); its offset
is read on the bounds whose side waited (:data:`TIGHT_MS`), where there are enough (else on the
writes, else in the middle of what bounds it from both sides: :meth:`TrainerClock._measure`). A duration
that is no finite number of 0 or more, or that would end a step's wait before the log's line of
an earlier step, bounds nothing; nor does the write or compute of a step a trainer log read before
wrote or computed (on the same rank): a resumed run's redone step, whose weights the orchestrator
had from the crashed run (:attr:`TrainerClock.done`). The first batch of each trainer log is measured against every
step of the orchestrator's lines read before it (:func:`orchestrator_first` orders the files so).
A log off by more than :data:`~prime_rl.analysis.clock_offsets.SLACK_S` has its times moved onto
the orchestrator's clock before anything is collected from it, so every figure (the run's length,
spans, the timeline, stalls and the log's last line) reads it there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import polars as pl

from prime_rl.analysis.clock_offsets import MIN_UPDATES, PROBE, QUANTILE, SLACK_S, judge, quantile
from prime_rl.analysis.log_files import log_of
from prime_rl.analysis.tagged import ParseStats, TaggedLines, fields_by_key, step_numbers

_TRAIN_DONE = ("compute.done", "step.done")
"""The trainer's lines that end a step's compute (``read_ms`` and ``train_ms`` after its wait)."""
TIGHT_MS = 1.0
"""A side that waited at least this long (``wait_ms``) for the other logged its line within a poll
of the other's: its bound is tight. Not ready at the first look, a poll sleeps 50 ms."""


def orchestrator_first(files: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """``(label, path)`` pairs with the orchestrator's logs first, the rest in their order: a
    trainer log is measured against the orchestrator's lines read before it."""
    return sorted(files, key=lambda f: f[0] != "orchestrator")


class TrainerClock:
    """Between the parse and the collection (:meth:`place`): the orchestrator's checkpoint waits
    and rollouts by step, and each trainer log moved by its offset."""

    def __init__(self, stats: ParseStats) -> None:
        self.stats = stats
        self.waited: dict[int, tuple[float, bool]] = {}
        """Target step: the time of the orchestrator's first ``[ckpt] wait.done`` for it, and
        whether it waited (:data:`TIGHT_MS`). One entry a step, as the collector's step tables."""
        self.rolled: dict[int, float] = {}
        """Step: the time of the orchestrator's first ``[rollout]`` line of it."""
        self.moved: dict[str, float | None] = {}
        """Trainer log (:func:`log_of` its files): seconds its clock is ahead (None: in step with
        the orchestrator's, or not measured)."""
        self.done: dict[int, int] = {}
        """The last step the trainer logs read so far wrote weights of (key -1: ``[ckpt]
        write.done``) or computed (key: the rank of a ``[train] compute.done``, its ``rank`` field;
        none: 0, an older trainer's rank 0's): a later log's line of such a step (a run resumed at
        an earlier step: a step redone) came after the orchestrator had that step's weights from
        the earlier run, and bounds nothing (:meth:`_redone`)."""

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
        for step, ts, (wait,) in _steps(_rows(b, "ckpt", "wait.done"), "target_step", "wait_ms"):
            self.waited.setdefault(step, (ts, wait is not None and wait >= TIGHT_MS))
        for step, ts, _ in _steps(_rows(b, "rollout"), "current_step"):
            self.rolled.setdefault(step, ts)

    def _move(self, b: TaggedLines) -> None:
        log = log_of(str(b.path))
        if log not in self.moved:
            self.moved[log] = self._measure(b, log)
        if off := self.moved[log]:
            b.move_clock(off)
        self._note_done(b)

    def _note_done(self, b: TaggedLines) -> None:
        """:attr:`done` moves on past the trainer's batch ``b`` (after its log was measured)."""
        tag, event = pl.col("tag").cast(pl.String), pl.col("event").cast(pl.String)
        keep = ((tag == "ckpt") & (event == "write.done")) | ((tag == "train") & (event == "compute.done"))
        rows = b.frame.lazy().filter(keep.fill_null(False)).select("event", "rest").collect()
        if not rows.height:
            return
        fields = fields_by_key(rows.get_column("rest"), ["step", "rank"])
        key = pl.when(pl.col("event").cast(pl.String) == "write.done").then(-1).otherwise(pl.col("rank"))
        last = (
            pl.DataFrame(
                {
                    "event": rows.get_column("event"),
                    "step": step_numbers(fields.get_column("step")),
                    "rank": step_numbers(fields.get_column("rank")).fill_null(0),
                }
            )
            .select(key.alias("key"), "step")
            .drop_nulls()
            .group_by("key")
            .agg(pl.col("step").max())
        )
        for k, step in last.iter_rows():
            self.done[k] = max(self.done.get(k, -1), step)

    def _redone(self, key: int, step: int) -> bool:
        """Whether a trainer log read before the current one wrote (``key`` -1) or computed (``key``:
        the rank) ``step`` or a later step: the current log's line of it is a redone step's."""
        return step <= self.done.get(key, -1)

    def _measure(self, b: TaggedLines, log: str) -> float | None:
        """The offset of the trainer log ``log`` from its first batch ``b`` (None: in step). Judged
        on one bound a step from each side (from below the larger of a step's write and compute
        lines'). Read on the tight ones, else on the writes; else, where both sides bound it, in
        the middle of the two (the reads of rollouts are loose by how long the rollouts waited,
        up to a step; the compute lines by the publish: which is less depends on the run), else
        on the one side there is. A reading outside the two sides' bounds (lines of two runs
        under one step), or within the slack of 0, moves nothing."""
        wrote, tight_below = _bounds(self._written(b), self.waited)
        computed, _ = _bounds(self._computed(b), self.waited)
        ended, tight_above = _bounds(self._ended(b), {s: (ts, True) for s, ts in self.rolled.items()})
        below = computed | {step: max(v, computed.get(step, v)) for step, v in wrote.items()}
        judged = judge(list(ended.values()), list(below.values()))
        if judged is None:
            return None
        lower = quantile(list(below.values()), 1.0 - QUANTILE) if len(below) >= MIN_UPDATES else -math.inf
        upper = quantile(list(ended.values()), QUANTILE) if len(ended) >= MIN_UPDATES else math.inf
        for values, q in (
            (tight_below, 1.0 - QUANTILE),
            (tight_above, QUANTILE),
            (list(wrote.values()), 1.0 - QUANTILE),
        ):
            if len(values) >= MIN_UPDATES:
                read = quantile(values, q), len(values)
                break
        else:
            both = math.isfinite(lower) and math.isfinite(upper)
            read = ((lower + upper) / 2, len(below.keys() | ended.keys())) if both else judged
        if not lower - SLACK_S <= read[0] <= upper + SLACK_S:
            read = judged
        if abs(read[0]) <= SLACK_S:
            return None
        self.stats.clock_offsets[log] = read
        return read[0]

    def _written(self, b: TaggedLines) -> dict[int, tuple[float, bool]]:
        """Step: when the trainer wrote its weights (its first ``write.done``), among the steps the
        orchestrator waited for (not a step an earlier log wrote: :meth:`_redone`)."""
        out: dict[int, tuple[float, bool]] = {}
        for step, ts, _ in _steps(_rows(b, "ckpt", "write.done"), "step"):
            if step in self.waited and step not in out and len(out) < PROBE and not self._redone(-1, step):
                out[step] = (ts, True)
        return out

    def _computed(self, b: TaggedLines) -> dict[int, tuple[float, bool]]:
        """Step N: when the trainer's compute of step N - 1 was done (its first ``compute.done``,
        logged before it publishes ``weights/step_N``; every rank logs one, so a rank that
        publishes nothing is bounded from below too), among the steps the orchestrator waited for.
        Never tight: the publish lies between them. Not a step an earlier log computed on the same
        rank (:meth:`_redone`)."""
        out: dict[int, tuple[float, bool]] = {}
        for step, ts, (rank,) in _steps(_rows(b, "train", "compute.done"), "step", "rank"):
            if self._redone(0 if rank is None else int(rank), step):
                continue
            if step + 1 in self.waited and step + 1 not in out and len(out) < PROBE:
                out[step + 1] = (ts, False)
        return out

    def _ended(self, b: TaggedLines) -> dict[int, tuple[float, bool]]:
        """Step: when the trainer's wait for its rollouts ended at the latest (its earliest
        compute line's time less ``read_ms + train_ms``), and whether it waited, among the steps
        the orchestrator logged rollouts of."""
        out: dict[int, tuple[float, bool]] = {}
        earlier = current_last = -math.inf  # the log's last line of an earlier step; of this one
        current = None
        rows = _steps(
            _rows(b, "train", *_TRAIN_DONE), "step", "train_ms", "read_ms", "wait_ms", absent={"read_ms": 0.0}
        )
        for step, ts, (train, read, wait) in rows:
            if step != current:
                earlier, current, current_last = max(earlier, current_last), step, -math.inf
            current_last = max(current_last, ts)
            if train is None or read is None or step not in self.rolled:
                continue
            end = ts - (train + read) / 1000.0
            if end < earlier or (step not in out and len(out) >= PROBE):
                continue  # a duration longer than the time since the step before: no bound
            waited = wait is not None and wait >= TIGHT_MS
            if step not in out or end < out[step][0]:
                out[step] = (end, waited)
        return out


def _bounds(
    trainer: dict[int, tuple[float, bool]], orchestrator: dict[int, tuple[float, bool]]
) -> tuple[dict[int, float], list[float]]:
    """``trainer time - orchestrator time`` of each of ``trainer``'s steps (all in
    ``orchestrator``), and of those where both sides' flags say the second line came right after
    the first."""
    every: dict[int, float] = {}
    tight: list[float] = []
    for step, (ts, mine) in trainer.items():
        at, theirs = orchestrator[step]
        every[step] = ts - at
        if mine and theirs:
            tight.append(ts - at)
    return every, tight


def _rows(b: TaggedLines, tag: str, *events: str) -> pl.DataFrame:
    """The batch's timed lines of ``tag`` (and of ``events``, when given): ``ts`` and ``rest``."""
    keep = (pl.col("tag").cast(pl.String) == tag) & pl.col("ts").is_finite().fill_null(False)
    if events:
        keep = keep & pl.col("event").cast(pl.String).is_in(events)
    return b.frame.lazy().filter(keep).select("ts", "rest").collect()


def _steps(
    rows: pl.DataFrame, key: str, *numbers: str, absent: Mapping[str, float] | None = None
) -> list[tuple[int, float, tuple[float | None, ...]]]:
    """``(step, time, numbers)`` of each of ``rows`` whose field ``key`` is a step number, in line
    order; each of ``numbers`` a finite value of 0 or more, its ``absent`` value where the line has none,
    None where it is no such value."""
    if not rows.height:
        return []
    fields = fields_by_key(rows.get_column("rest"), [key, *numbers])
    values = []
    for k in numbers:
        raw = fields.get_column(k)
        value = raw.cast(pl.Float64, strict=False)
        good = value.is_finite().fill_null(False) & (value >= 0).fill_null(False)
        values.append(
            pl.select(pl.when(raw.is_null()).then((absent or {}).get(k)).when(good).then(value))
            .to_series()
            .to_list()
        )
    steps = step_numbers(fields.get_column(key)).to_list()
    times = rows.get_column("ts").to_list()
    return [
        (step, ts, tuple(v[i] for v in values))
        for i, (step, ts) in enumerate(zip(steps, times, strict=True))
        if step is not None
    ]
