"""Restarts: several runs appended to one log (a crash, then ``rl --resume``) split into segments.

A process starts again where it logs ``run.start`` (``[gen] run.start step=`` of the orchestrator,
``[train] run.start step=`` of the trainer) after lines of its own, or, in logs written before that
line, where its step counter goes back: the orchestrator's ``[gen] batch.start step=`` or the
trainer's ``[train] step.done step=`` at or below a step it already reached (a resume at checkpoint
``N`` redoes the steps from ``N`` on; a resume at the step after the last one logged, where a crash
fell between a checkpoint and the next step's line, has no step going back to show it), or where the
trainer opens again the wait for rollouts its crashed run left open or closed last (``[train]
wait.start`` for the step of the open one, or of its last ``wait.done`` with no ``step.done`` since: a
resume at the step it crashed waiting for or computing; :meth:`Segments._reopening`). Each
such line opens a new segment.
The per-step series of :mod:`~prime_rl.analysis.stats` keep one value per step (the redone
step's), so a redone step is counted once in the statistics; the stages count the time of both runs
(the values replaced, :attr:`~prime_rl.analysis.stats.Collected.earlier_runs_ms`: the earlier run
spent it in the run's wall time; the orchestrator's waits for weights are no per-step series: each
wait counts, in either run, but a resume's load of weights before its first batch, start-up). A
restart's down time ends at the process's first line after it that is no start-up
(:func:`~prime_rl.analysis.tagged.start_up`), as the run's first time is its first such line
(:meth:`Segments.down_seconds`). A restart found by its step going back (no ``run.start``) has its
start-up lines before its line: its down time runs from the process's last line before its longest
silence since its last step line to its first line after that silence that is no start-up, the
orchestrator's ``[ckpt]`` waits there (its load of weights) included (:meth:`Segments._old_resume`). A segment's redone steps are the steps of its step lines
that an earlier segment of the process logged too (:attr:`Restart.redone`, known at the segment's end).
A hang the ``rl`` launcher's watchdog saw before a restart of the orchestrator, after which the run
made no progress before that restart, is kept with that restart (:attr:`Restart.hangs_before`):
:mod:`~prime_rl.analysis.hangs` places the hangs among the runs.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import polars as pl

from prime_rl.analysis.bars import merge_intervals, overlap_s
from prime_rl.analysis.log_files import log_of
from prime_rl.analysis.tagged import (
    RESUME_LOAD,
    RUN_START,
    TRAIN_WAIT,
    Event,
    TaggedLines,
    start_up,
    step_numbers,
)

STEP_LINE_OF = {"orchestrator": ("gen", "batch.start"), "trainer": ("train", "step.done")}
"""The line whose ``step=`` counts a process's progress, by process."""


def hang_said(ev: Event) -> str:
    """What a ``[hang] detected`` line says: how long nothing moved, and who waited on whom."""
    f = ev.fields
    return (
        f"no progress for {f.get('silent_s', '?')} s (threshold {f.get('threshold_s', '?')} s, median step "
        f"{f.get('median_step_s', '?')} s); waits: {f.get('waits', 'none').replace(',', ', ')}"
    )


@dataclass(frozen=True)
class HangBefore:
    """A hang the launcher's watchdog saw before a restart (``[hang] detected`` in rl.log)."""

    ts: float | None
    """The [hang] line's time (None: it has none, and was placed by its position)."""
    where: str
    """``file:line`` of the [hang] line."""
    said: str
    """What it says (:func:`hang_said`): no progress for how long, who waited on whom."""


@dataclass(frozen=True)
class Restart:
    """One restart of one process."""

    process: str
    """``orchestrator``, ``trainer`` or ``collector`` (a collect-rollouts run appended to its log)."""
    where: str
    """``file:line`` of the first line of the new segment."""
    ts: float | None
    """Its timestamp."""
    reached: int | None
    """The highest step the process had reached before (None: the collector, which has no steps)."""
    resumed: int | None
    """The step it started again at (None: the collector)."""
    down_s: float | None
    """Seconds between the process's last line before and this one (None without timestamps)."""
    redone: int = 0
    """Steps done again: the distinct steps of the new segment's step lines that an earlier segment
    of the process logged too (not ``resumed`` .. ``reached``: a step whose line an earlier segment
    lacks, or one the new segment never reached, is none). Set when the segment ends
    (:meth:`Segments.finish`)."""
    hangs_before: tuple[HangBefore, ...] = ()
    """The watchdog's hangs of this run since the orchestrator's restart before this one (or the
    run's start), for a restart of the orchestrator, after which the processes they named made no
    progress before this restart: the run hung, then was killed and resumed (:func:`~prime_rl.analysis.hangs.place_hangs`;
    one they made progress after is a :class:`~prime_rl.analysis.hangs.Pause`)."""


def last_restart(restarts: list[Restart], process: str = "orchestrator") -> float | None:
    """The time of ``process``'s last restart with a time (None: none): what it waited for before is
    over."""
    return max((r.ts for r in restarts if r.process == process and r.ts is not None), default=None)


def run_time_within(
    spans: list[tuple[float, float]], run: tuple[float, float], down: list[tuple[float, float]]
) -> float:
    """The seconds of the union of ``spans`` that are run time: within ``run`` (its first and last
    time) and outside each of ``down`` (:meth:`Segments.down_intervals`)."""
    if not spans:
        return 0.0
    start, end = (np.array(x, dtype=np.float64) for x in zip(*spans, strict=True))
    within = merge_intervals(np.clip(start, *run), np.clip(end, *run), 0.0)
    total = float(np.sum(within[1] - within[0]))
    if down:
        d0, d1 = (np.array(x, dtype=np.float64) for x in zip(*down, strict=True))
        total -= overlap_s(within, merge_intervals(d0, d1, 0.0))
    return max(total, 0.0)


def open_time_within(
    opens: list[tuple[float, float, float]], run: tuple[float, float], down: list[tuple[float, float]]
) -> float:
    """The seconds of run time of the batches and waits left open (``opens``: each its open line's
    time, its crashed process's last line's before its restart and its restart's; ``inf``, ``inf``
    where the logs end inside it), cut as :func:`open_spans` cuts them, counted within ``run`` less
    ``down`` (:func:`run_time_within`)."""
    return run_time_within(open_spans(opens, down), run, down)


def open_spans(
    opens: list[tuple[float, float, float]], down: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """Each of ``opens`` (its open line's time, its crashed process's last line's before its restart
    and its restart's; ``inf``, ``inf``: none) from its open line to its end. Each ends where the first
    down time after its open line begins, when that is before its process's restart: the whole run
    went down (every process silent), which in a wait of a process that logs nothing while it waits is
    its crash, as far as its lines tell; else (its process crashed alone, the others went on) at its
    process's last line: the process was alive up to there, and its silence after it, to its restart,
    may be minutes of a dead process, its time no stage's."""
    starts = sorted(a for a, _ in down)
    cut = []
    for since, last, until in opens:
        at = next((a for a in starts if a >= since), math.inf)
        cut.append((since, at if at <= until else max(since, last)))
    return cut


def uncovered(down: list[tuple[float, float]], spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of each of ``down`` that none of ``spans`` (merged, in time order) covers: a trio's
    down time in which another process (a collector's run) was at work is no down time of the run."""
    out = []
    for d0, d1 in down:
        at = d0
        for s0, s1 in spans:
            if s1 <= at or s0 >= d1:
                continue
            if s0 > at:
                out.append((at, s0))
            at = max(at, s1)
        if at < d1:
            out.append((at, d1))
    return out


WAITS = {"ckpt": ("wait.start", ("wait.done",)), "weights": ("client.send", ("client.done", "client.error"))}
"""The orchestrator's lines that open a wait and those that end it, by tag: its wait for weights
(``[ckpt]``) and for a server's answer to a weight update (``[weights]``, any trace id)."""


GEN_BATCH = {"gen": ("batch.start", ("batch.done",))}
"""The orchestrator's generation batch as a wait (:func:`_waiting`): its ``batch.done`` proves it alive
since its ``batch.start``. Not for finding restarts, only for :attr:`Segments.silences`."""


def _waiting(frame: pl.DataFrame, waits: dict[str, tuple[str, tuple[str, ...]]] = WAITS) -> np.ndarray:
    """The rows of a batch of the orchestrator's lines whose silence before them lies within one of its
    waits (``waits``, by default :data:`WAITS`): the first line of the wait's tag at or after them
    ends a wait, which the same process opened before them (a process that crashed while it waited
    ends none; the one resumed after it opens its own before it ends one). A row after the batch's
    last such line is not known to be: its silence stays one."""
    tag, event = frame.get_column("tag"), frame.get_column("event")
    out = np.zeros(len(frame), dtype=bool)
    for name, (opens, ends) in waits.items():
        lines = np.flatnonzero(((tag == name) & event.is_in((opens, *ends))).fill_null(False).to_numpy())
        if len(lines):
            done = event.gather(lines).is_in(ends).fill_null(False).to_numpy()
            at = np.searchsorted(lines, np.arange(len(frame)))  # the first such line at or after each row
            out |= (at < len(lines)) & done[np.minimum(at, len(lines) - 1)]
    return out


BEFORE_RUN_START = {"trainer": ("ckpt", ("write.done",)), "orchestrator": ("server", ("metrics",))}
"""By process, the tagged lines a resumed process may log before its ``run.start``: the trainer's
``[ckpt] write.done`` of ``weights/step_N`` published again from its checkpoint (retention deleted
it, or the crash tore it: the trainer publishes it before its run.start), the orchestrator's
``[server] metrics`` (its scraper starts just before its run.start). The crashed run may have logged
such lines last too (:func:`fell_silent_before_start`)."""


def before_start_lines(frame: pl.DataFrame, source: str) -> np.ndarray:
    """Whether each line of a batch of ``source``'s lines is one its resumed process may log before
    its ``run.start`` (:data:`BEFORE_RUN_START`)."""
    if source not in BEFORE_RUN_START:
        return np.zeros(len(frame), dtype=bool)
    tag, events = BEFORE_RUN_START[source]
    return (
        ((frame.get_column("tag") == tag) & frame.get_column("event").is_in(events))
        .fill_null(False)
        .to_numpy()
    )


QuietTail = tuple[np.ndarray, np.ndarray, float]
"""A process's lines with a time at the end of its batches so far that its resumed process may log
before its ``run.start`` (:data:`BEFORE_RUN_START`), as their ``line`` and their times, and the time
of its last line with a time before them (NaN: none): :func:`fell_silent_before_start` looks back
through them where a batch's run.start has none of its other lines before it."""

NO_TAIL: QuietTail = (np.empty(0, np.int64), np.empty(0), math.nan)


def quiet_tail(frame: pl.DataFrame, source: str, tail: QuietTail) -> QuietTail:
    """``tail`` (:data:`QuietTail`, of the batches before ``frame``) moved on past the batch ``frame``
    of ``source``'s lines."""
    ts = frame.get_column("ts").to_numpy()
    stamped = np.flatnonzero(~np.isnan(ts))
    if not len(stamped):
        return tail
    own = before_start_lines(frame, source)[stamped]
    other = np.flatnonzero(~own)
    line = frame.get_column("line").to_numpy()
    if len(other):
        rows = stamped[other[-1] + 1 :]
        return line[rows], ts[rows], float(ts[stamped[other[-1]]])
    lines, times, prior = tail
    return np.concatenate([lines, line[stamped]]), np.concatenate([times, ts[stamped]]), prior


def fell_silent_before_start(
    frame: pl.DataFrame, source: str, before: np.ndarray, at: int, tail: QuietTail
) -> tuple[int, float]:
    """For a ``run.start`` at row ``at`` of a batch of ``source``'s lines (``frame``; ``before``: its
    rows with a time before it; ``tail``: the process's :data:`QuietTail` of the earlier batches),
    where its crashed run fell silent: the ``line`` from which the lines are the resumed run's and the
    time of the crashed run's last line. That is the longest silence before the run.start or before
    one of the lines right before it that the resumed process may have logged before it
    (:data:`BEFORE_RUN_START`), in this batch or, where the batch has no other line before it, in
    earlier ones (``tail``): a trainer's republish of its weights is the resumed run's, one the
    crashed run wrote before it died is the crashed run's (the crash and the start-up are the silence)."""
    ts = frame.get_column("ts").to_numpy()
    line = frame.get_column("line").to_numpy()
    own = before_start_lines(frame, source)
    other = np.flatnonzero(~own[before])
    lo = int(other[-1]) + 1 if len(other) else 0
    rows = np.append(before[lo:], at)
    lines, times = line[rows], ts[rows]
    if lo:
        prior = np.concatenate([[ts[before[lo - 1]]], ts[before[lo:]]])
    else:  # the silence may lie in earlier batches: their lines of the start-up, and the one before
        lines, times = np.concatenate([tail[0], lines]), np.concatenate([tail[1], times])
        prior = np.concatenate([[tail[2]], times[:-1]])
    with np.errstate(invalid="ignore"):
        gaps = times - prior
    gaps = np.where(np.isnan(gaps), -np.inf, gaps)
    j = len(lines) - 1 if np.isneginf(gaps).all() else int(np.argmax(gaps))
    return int(lines[j]), float(prior[j])


TRAIN_SPANS = {"wait.start": "wait.done", "wait.done": "step.done"}
"""The trainer's [train] line that opens a wait for rollouts or a step's compute, and the one that
closes it (:meth:`Segments._trainer_alive`)."""
TRAIN_MARKS = ("wait.start", "wait.done", "step.done", RUN_START)
"""The trainer's [train] lines that open or close one of :data:`TRAIN_SPANS` (a ``run.start``: none)."""


SILENCES_KEPT = 64
"""How many of each log's longest silences, and of each process's, :attr:`Segments.silences` keeps: a
silence of every process at once that more than this many longer silences of one of them (or of one
of its logs) come with is not found."""


def _intersect(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The times in both ``a`` and ``b`` (each sorted, its spans apart), sorted, none empty."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def silent_together(
    silences: dict[str, np.ndarray], down: list[tuple[float, float]], stepped: float = -math.inf
) -> list[tuple[float, float]]:
    """The times in which every process of ``silences`` (:attr:`Segments.silences`) was silent at once,
    less the down times ``down`` (already left out of the run), in time order; those that end by
    ``stepped`` (before it, some process had logged no step line yet: no resume could redo no step,
    :meth:`Segments.all_stepped`) are left out. A silence of a process that a line of it proves it
    lived through (within a wait or a batch it logged and closed) is none of :attr:`Segments.silences`:
    a time that holds a restart found of another process is no restart to warn of when that process
    was alive, and one to warn of when it is not known to be (a whole-run crash whose other process
    redid no step)."""
    if not silences:
        return []
    spans = None
    for kept in silences.values():
        own = sorted(map(tuple, kept.tolist()))
        spans = (
            own
            if spans is None
            else [(max(a, c), min(b, d)) for a, b in spans for c, d in own if max(a, c) < min(b, d)]
        )
    return [(a, b) for a, b in uncovered(sorted(spans or []), sorted(down)) if b > a and b > stepped]


OTHER_SILENCES = 4
"""How many silences of a process before a restart found by its step going back are kept beside its
longest (:attr:`Segments.other_silences`)."""


class Segments:
    """Watches the step lines of every process; :meth:`observe` says when a new segment starts."""

    def __init__(self) -> None:
        self.restarts: list[Restart] = []
        self.first_start: float | None = None
        """The time of the first ``run.start`` line of any process (None: none)."""
        self._reached: dict[str, int] = {}
        self._last_ts: dict[str, float] = {}
        self._gap: dict[str, float] = {}
        self._logged: dict[str, np.ndarray] = {}
        """By process, the steps its ended segments logged (sorted, once each)."""
        self._open: dict[str, list[np.ndarray]] = {}
        """By process, the steps its current segment logged so far (an array per batch)."""
        self._opened_by: dict[str, int] = {}
        """By process, the index in :attr:`restarts` of the restart that began its current segment."""
        self.resumed_at: dict[int, float] = {}
        """By index in :attr:`restarts`: the time of the restarted process's first line after it that
        is no start-up (:func:`~prime_rl.analysis.tagged.start_up`: neither a ``run.start``, nor the
        trainer's ``[train] wait.start``, nor the resumed orchestrator's wait for weights before its
        first batch, while the resumed trainer loads and publishes them again), as the run's first
        time is its first such line (:meth:`~prime_rl.analysis.tagged.TaggedLines.overview`): its
        down time ends there (:meth:`down_seconds`). None known: at the restart's line."""
        self._starting: dict[str, int] = {}
        """By process, a restart whose first line after it that is no start-up is still to come."""
        self._intervals: dict[str, array] = {}
        """By process, the time between each two consecutive step lines of one of its runs."""
        self._last_step_ts: dict[str, float] = {}
        """By process, the time of its last step line (NaN: a run.start since, or none yet)."""
        self.silent_from: dict[int, float] = {}
        """By index in :attr:`restarts`, for a restart found by its step going back (a log written
        before ``run.start`` lines): when the process's silence before it began (the time of its last
        line before it); its down time starts there, not ``down_s`` before the restart's line (the
        process's first step line after the crash, which start-up lines come before)."""
        self.other_silences: dict[int, list[tuple[float, float]]] = {}
        """By index in :attr:`restarts`, for a restart found by its step going back: the next longest
        silences of its process before it (up to :data:`OTHER_SILENCES`, in its batch), each as when
        it began and the time of the first line of work after it (NaN: none). One of them, not the
        longest, may be its crash: a process that logs no wait (the trainer) has a resume's start-up
        as one silence, which may outlast the crash (:meth:`down_intervals` takes the one every
        process was silent in at once)."""
        self._file_silences: dict[str, dict[str | None, tuple[np.ndarray, float, float]]] = {}
        """By process, by its log (:func:`~prime_rl.analysis.log_files.log_of`; rotated parts are one):
        the log's :data:`SILENCES_KEPT` longest silences between two of its lines with a time (rows of
        start, end), its first and its last time (:attr:`silences` merges them)."""
        self._train_open: int | None = None
        """The step of the trainer's wait for rollouts or compute open at its last line of
        :data:`TRAIN_MARKS` so far (its ``wait.start``'s or ``wait.done``'s; None: none open)."""
        self._train_mark: str | None = None
        """The trainer's last [train] line of :data:`TRAIN_MARKS` so far (its event; None: none)."""
        self._first_step: dict[str, float] = {}
        """By process, the time of its first step line (no ``run.start``)."""
        self._gap_at: dict[str, tuple[float, float]] = {}
        """By process, for the silence of :attr:`_gap` (in an earlier batch): when it began and the time
        of the process's first line after it that is no start-up (NaN: none yet)."""
        self.batch_loads: np.ndarray = np.empty(0, np.int64)
        """The ``line`` of the last batch's ``[ckpt] wait.done`` lines that are a resume's load of weights
        by the orchestrator found restarted by its step going back: after its silence, before the
        first ``[gen] batch.start`` after it (:meth:`_old_resume`); those of earlier batches of its file
        (the batch's first step line is the restart's) in :attr:`earlier_loads`."""
        self.earlier_loads: np.ndarray = np.empty(0, np.int64)
        """Of :attr:`batch_loads`' lines, those of earlier batches (already counted as waits of the run)."""
        self.waits_since_step: tuple[Path | None, np.ndarray, np.ndarray] = (
            None,
            np.empty(0, np.int64),
            np.empty(0),
        )
        """The orchestrator's ``[ckpt] wait.done`` lines after its last step line (or ``run.start``) in
        the batches before the current one, as their file, ``line`` and time: a restart found by its
        step going back in a later batch of the file may find them its resume's load."""

    def observe(self, lines: TaggedLines) -> list[int]:
        """Fold a batch of one process's lines; the rows that start a new segment of it. The downtime
        is the longest silence of the process since its previous step line (the crash, then the
        start-up)."""
        source = lines.source
        if source not in ("orchestrator", "trainer"):
            return []
        rows, longest, starts, gaps, reopens = self._step_lines(lines, source)
        carried = self._gap.pop(source, -np.inf)  # since the last step line of an earlier batch
        carried_at = self._gap_at.pop(source, (math.nan, math.nan))
        ts = lines.frame.get_column("ts").to_numpy()
        work = self._work(lines, source, ts)
        self.batch_loads = self.earlier_loads = np.empty(0, np.int64)
        if source == "orchestrator" and self.waits_since_step[0] != lines.path:  # batches are one file's
            self.waits_since_step = (lines.path, np.empty(0, np.int64), np.empty(0))
        old: dict[int, float] = {}  # by restart, a step-back one's first line after its silence that is work
        # only the step lines' fields are read; a step is 1-8 ASCII digits, other lines are no step
        numbers = step_numbers(pl.Series(lines.rows_text(rows, "step"), dtype=pl.String))
        stepped = np.flatnonzero(numbers.is_not_null().to_numpy())
        out: list[int] = []
        if starts.any():
            stamps = lines.frame.get_column("ts").to_numpy()[rows[starts]]
            stamps = stamps[~np.isnan(stamps)]
            if len(stamps):
                first = float(stamps.min())
                self.first_start = first if self.first_start is None else min(self.first_start, first)
        if len(stepped):
            steps = numbers.gather(stepped).to_numpy()
            start, again = starts[stepped], reopens[stepped]
            reached = self._reached.get(source)
            # what each line leaves reached: its step, or for a run.start (or a wait reopened) the step
            # before the one it starts at (its first step line then goes on from there)
            reach = np.where(start | again, steps - 1, steps)
            before = np.concatenate([[-1 if reached is None else reached], reach[:-1]])
            seen = np.arange(len(steps)) > 0 if reached is None else np.ones(len(steps), dtype=bool)
            done = np.where(start | again, -1, steps)  # the steps logged (a run.start's is none)
            ended = 0  # where the current segment's lines in the batch begin
            # a restart: the step went back, the process started again after lines of its own, or the
            # trainer reopened the wait of the step its crashed run waited for or computed last (a
            # resume that redid no step)
            for k in np.flatnonzero(np.where(start, seen, again | (steps <= before))).tolist():
                self._log(source, done[ended:k])
                ended = k
                self._end_segment(source)
                self._opened_by[source] = len(self.restarts)
                since = stepped[k - 1] + 1 if k else 0  # the step lines since the last step
                gap = float(longest[since : stepped[k] + 1].max())
                if not k:  # the first step of the batch: the silence carried from the last batch too
                    gap = max(gap, carried)
                i = int(rows[stepped[k]])
                ev = lines.event(i)
                if not start[k]:  # its step went back: no run.start says where the resume began
                    lo = int(rows[stepped[k - 1]]) + 1 if k else 0
                    prior = (carried, carried_at) if not k else (-np.inf, (math.nan, math.nan))
                    self._old_resume(lines, source, len(self.restarts), (lo, i), gaps, work, prior, old)
                self.restarts.append(
                    Restart(
                        source,
                        ev.where(),
                        ev.ts,
                        int(before[k]),
                        int(steps[k]),
                        gap if gap > -np.inf else None,
                    )
                )
                out.append(i)
            self._log(source, done[ended:])
            self._reached[source] = int(reach[-1])
            carried, longest = -np.inf, longest[stepped[-1] + 1 :]
            carried_at = (math.nan, math.nan)
        gap = max(carried, float(longest.max()))
        if gap > -np.inf:
            self._gap[source] = gap
            tail = int(rows[stepped[-1]]) + 1 if len(stepped) else 0
            self._gap_at[source] = self._silence(tail, len(ts), gaps, ts, work, carried, carried_at)
        if source == "orchestrator":  # a silence within a batch is no restart's: batch.done ends it
            gaps = np.where(_waiting(lines.frame, GEN_BATCH), -np.inf, gaps)
        elif source == "trainer":  # nor one within a wait or a step the trainer closed
            gaps = np.where(self._trainer_alive(lines.frame), -np.inf, gaps)
        self._keep_silences(source, lines.path, gaps, ts)
        stamped = ts[rows[~(starts | reopens)]]
        stamped = stamped[~np.isnan(stamped)]
        if len(stamped) and source not in self._first_step:
            self._first_step[source] = float(stamped.min())
        self._resumed(lines, source, out, ts)
        self.resumed_at.update(old)
        if source == "orchestrator":
            self._keep_waits(lines, rows, ts)
        self._pace(source, ts[rows], starts | reopens, starts | reopens | np.isin(rows, out))
        return out

    def _trainer_alive(self, frame: pl.DataFrame) -> np.ndarray:
        """The rows of a batch of the trainer's lines whose silence before them lies within a wait for
        rollouts or a step it logged and closed (:data:`TRAIN_SPANS`): its [train] line before them (of
        those, a batch before this one's: :attr:`_train_mark`) opens one and its first at or after them
        closes it. The line that closes it proves it alive since: a resumed trainer's first such line
        is a ``wait.start`` (after its ``run.start``, if any), one that reopens its crashed run's wait
        too. A row after the batch's last such line is not known to be."""
        tag, event = frame.get_column("tag"), frame.get_column("event")
        marks = np.flatnonzero(((tag == "train") & event.is_in(TRAIN_MARKS)).fill_null(False).to_numpy())
        out = np.zeros(len(frame), dtype=bool)
        if not len(marks):
            return out
        events = event.gather(marks).to_list()
        closes = np.array(
            [
                TRAIN_SPANS.get(before) == e
                for before, e in zip([self._train_mark, *events[:-1]], events, strict=True)
            ]
        )
        self._train_mark = events[-1]
        at = np.searchsorted(marks, np.arange(len(frame)))  # the first such line at or after each row
        return (at < len(marks)) & closes[np.minimum(at, len(marks) - 1)]

    def _keep_silences(self, source: str, path: Path | None, gaps: np.ndarray, ts: np.ndarray) -> None:
        """Fold the batch's silences (``gaps``: each row's before it, since the process's line before
        it) into its log's (``path``'s) in :attr:`_file_silences`: the batch's first line with a time
        is silent since its log's line before it (none: the time before a log's first line is no
        silence of it, it had not begun)."""
        stamped = np.flatnonzero(~np.isnan(ts))
        if not len(stamped):
            return
        files = self._file_silences.setdefault(source, {})
        log = log_of(str(path)) if path is not None else None
        kept, first, last = files.get(log, (np.empty((0, 2)), math.nan, math.nan))
        gaps = gaps.copy()
        i = stamped[0]
        if np.isfinite(gaps[i]):  # the process's line before it may be another log's
            gaps[i] = max(ts[i] - last, 0.0) if not math.isnan(last) else -np.inf
        lo, hi = float(np.min(ts[stamped])), float(np.max(ts[stamped]))
        first = lo if math.isnan(first) else min(first, lo)
        last = hi if math.isnan(last) else max(last, hi)
        rows = np.flatnonzero(np.isfinite(gaps) & (gaps > 0))
        if len(rows):
            rows = rows[np.argsort(-gaps[rows], kind="stable")[:SILENCES_KEPT]]
            kept = np.concatenate([kept, np.column_stack([ts[rows] - gaps[rows], ts[rows]])])
            kept = kept[np.argsort(kept[:, 0] - kept[:, 1], kind="stable")[:SILENCES_KEPT]]
        files[log] = (kept, first, last)

    @property
    def silences(self) -> dict[str, np.ndarray]:
        """By process, its :data:`SILENCES_KEPT` longest silences (rows of start, end): the times in
        which none of its logs wrote a line (a trainer on more GPUs writes one per rank:
        logs/trainer/rank_0.log, rank_1.log), each log being silent between two of its lines with a
        time and before its first and after its last, within the process's first and last time. Where
        every process was silent at once, a log without run.start lines may hold a restart it cannot
        tell from a pause (:func:`silent_together`). The orchestrator's within a wait it logged
        (:data:`WAITS`) or a generation batch (:data:`GEN_BATCH`) are none, as the trainer's within a
        wait for rollouts or a step it logged and closed (:meth:`_trainer_alive`): the line that ends
        it proves it alive (rank 0's, through the other ranks' silences)."""
        out = {}
        for source, files in self._file_silences.items():
            spans = [(min(f[1] for f in files.values()), max(f[2] for f in files.values()))]
            for kept, first, last in files.values():
                own = [(-math.inf, first), *sorted(map(tuple, kept.tolist())), (last, math.inf)]
                spans = _intersect(spans, own)
            spans = sorted(spans, key=lambda span: span[0] - span[1])[:SILENCES_KEPT]
            out[source] = np.array(spans, dtype=np.float64).reshape(-1, 2)
        return out

    @staticmethod
    def _work(lines: TaggedLines, source: str, ts: np.ndarray) -> np.ndarray:
        """The batch's lines with a time that are no start-up, the orchestrator's ``[ckpt]`` waits
        left out too (a resume's load of weights, when a restart found by its step going back
        follows them: :meth:`_old_resume`)."""
        frame = lines.frame
        work = ~start_up(frame) & ~np.isnan(ts)
        if source == "orchestrator":
            tag, event = frame.get_column("tag"), frame.get_column("event")
            waits = ((tag == RESUME_LOAD[0]) & event.is_in(RESUME_LOAD[1])).fill_null(False).to_numpy()
            work &= ~waits
        return work

    @staticmethod
    def _silence(
        lo: int,
        hi: int,
        gaps: np.ndarray,
        ts: np.ndarray,
        work: np.ndarray,
        carried: float,
        carried_at: tuple[float, float],
    ) -> tuple[float, float]:
        """The longest silence before the rows ``lo``..``hi`` (exclusive) and within them (``carried``,
        which began and was followed by work at ``carried_at``, or one within): when it began and the
        time of the first row of work after it up to ``hi`` (NaN: none)."""
        if hi > lo and float(gaps[lo:hi].max()) > carried:
            e = lo + int(np.argmax(gaps[lo:hi]))
            began, after = float(ts[e] - gaps[e]), e
        else:
            (began, known), after = carried_at, lo
            if not math.isnan(known):
                return began, known
        at = after + int(np.argmax(work[after:hi])) if hi > after and work[after:hi].any() else -1
        return began, float(ts[at]) if at >= 0 else math.nan

    def _old_resume(
        self,
        lines: TaggedLines,
        source: str,
        k: int,
        bounds: tuple[int, int],
        gaps: np.ndarray,
        work: np.ndarray,
        prior: tuple[float, tuple[float, float]],
        old: dict[int, float],
    ) -> None:
        """Restart ``k`` of ``source``, found by its step line (row ``bounds[1]``) going back after the
        rows from ``bounds[0]`` (``prior``: the longest silence of an earlier batch before them, and
        :attr:`_gap_at`'s times of it): its silence began at the process's last line before the longest
        silence since its last step line (:attr:`silent_from`), and the resume's first line of work
        is its first after that silence that is no start-up (``old``): the orchestrator's ``[ckpt]``
        waits between them are its load of weights, as they are between a ``run.start`` and the
        first ``[gen] batch.start`` (:attr:`batch_loads`)."""
        lo, i = bounds
        ts = lines.frame.get_column("ts").to_numpy()
        began, after = self._silence(lo, i + 1, gaps, ts, work, *prior)
        if math.isnan(began):
            return
        self.silent_from[k] = began
        if not math.isnan(after):
            old[k] = after
        if i + 1 > lo:  # the next longest silences before it in the batch
            rows = lo + np.argsort(-gaps[lo : i + 1], kind="stable")[: OTHER_SILENCES + 1]
            rows = rows[np.isfinite(gaps[rows]) & (gaps[rows] > 0) & (ts[rows] - gaps[rows] != began)]
            work_rows = np.flatnonzero(work)
            others = []
            for e in rows[:OTHER_SILENCES].tolist():
                at = int(np.searchsorted(work_rows, e))
                end = float(ts[work_rows[at]]) if at < len(work_rows) and work_rows[at] <= i else math.nan
                others.append((float(ts[e] - gaps[e]), end))
            self.other_silences[k] = others
        if source == "orchestrator":
            frame = lines.frame
            if not lo:  # the batch's first step line: the loads may have begun in an earlier batch
                _, waits, at = self.waits_since_step
                after = np.flatnonzero(at > began)
                if len(after):
                    self.earlier_loads = waits[after[0] :]
                    self.batch_loads = np.union1d(self.batch_loads, self.earlier_loads)
            quiet = np.flatnonzero(~np.isnan(ts[lo : i + 1]) & (ts[lo : i + 1] > began)) + lo
            if len(quiet):
                rows = np.arange(int(quiet[0]), i)
                done = (frame.get_column("tag") == RESUME_LOAD[0]) & (
                    frame.get_column("event") == "wait.done"
                )
                rows = rows[done.fill_null(False).to_numpy()[rows]]
                self.batch_loads = np.union1d(self.batch_loads, frame.get_column("line").to_numpy()[rows])

    def _keep_waits(self, lines: TaggedLines, rows: np.ndarray, ts: np.ndarray) -> None:
        """Move :attr:`waits_since_step` on past a batch of the orchestrator's lines (``rows``: its step
        lines and ``run.start`` lines): its ``[ckpt] wait.done`` lines after the last of them (a batch
        without one: each, after those kept)."""
        frame = lines.frame
        done = (frame.get_column("tag") == RESUME_LOAD[0]) & (frame.get_column("event") == "wait.done")
        waits = np.flatnonzero(done.fill_null(False).to_numpy() & ~np.isnan(ts))
        path, kept, at = self.waits_since_step
        if len(rows):
            waits = waits[waits > rows[-1]]
            kept, at = kept[:0], at[:0]
        if len(waits):
            line = frame.get_column("line").to_numpy()
            kept, at = np.concatenate([kept, line[waits]]), np.concatenate([at, ts[waits]])
        self.waits_since_step = (path, kept, at)

    def _resumed(self, lines: TaggedLines, source: str, out: list[int], ts: np.ndarray) -> None:
        """Note where each restart of ``source`` (``out``: the batch's rows that start one; and one
        of an earlier batch still waiting) is followed by its first line that is no start-up
        (:attr:`resumed_at`); the last waits for a later batch when the batch has none after it."""
        waiting = self._starting.pop(source, None)
        if waiting is None and not out:
            return
        # a restart still waiting had no line but start-up after it: the batch goes on from there
        work = np.flatnonzero(~start_up(lines.frame, waiting is not None) & ~np.isnan(ts))
        first = len(self.restarts) - len(out)
        for k, lo, hi in zip(
            [waiting, *range(first, len(self.restarts))], [0, *out], [*out, len(ts)], strict=True
        ):
            if k is None:
                continue
            at = int(np.searchsorted(work, lo))
            if at < len(work) and work[at] < hi:
                self.resumed_at[k] = float(ts[work[at]])
            elif hi == len(ts):  # none yet: the next batch of the process may hold it
                self._starting[source] = k

    def _pace(self, source: str, ts: np.ndarray, starts: np.ndarray, breaks: np.ndarray) -> None:
        """Keep the time between each two consecutive step lines of ``source`` (their times ``ts``,
        NaN: none) within one run: none ends at a line that starts a segment (``breaks``: a
        ``run.start``, or a step going back), nor starts at a ``run.start`` (``starts``: start-up)."""
        if not len(ts):
            return
        carried = self._last_step_ts.get(source, math.nan)
        # after each line, the time of the last step line an interval may start at
        sets = breaks | ~np.isnan(ts)
        value = np.where(starts, math.nan, ts)
        at = np.maximum.accumulate(np.where(sets, np.arange(len(ts)), -1))
        last = np.where(at >= 0, value[np.maximum(at, 0)], carried)
        before = np.concatenate([[carried], last[:-1]])
        with np.errstate(invalid="ignore"):
            gaps = ts - before
            keep = ~breaks & (gaps >= 0)
        if keep.any():
            self._intervals.setdefault(source, array("d")).frombytes(gaps[keep].astype(np.float64).tobytes())
        self._last_step_ts[source] = float(last[-1])

    def step_seconds(self) -> dict[str, float]:
        """By process, the median time between two consecutive step lines of one of its runs (its
        pace: the orchestrator's ``[gen] batch.start``, the trainer's ``[train] step.done``); a
        process with none is left out."""
        return {
            p: float(np.median(np.frombuffer(v, dtype=np.float64))) for p, v in self._intervals.items() if v
        }

    def finish(self) -> None:
        """End every process's current segment (the logs end): each restart's :attr:`Restart.redone`
        is set."""
        for source in list(self._open):
            self._end_segment(source)

    def _log(self, source: str, steps: np.ndarray) -> None:
        """The current segment of ``source`` logged ``steps`` (-1: none); every 64 batches its steps
        are merged, once each (memory: the steps, not the lines)."""
        steps = steps[steps >= 0]
        if len(steps):
            parts = self._open.setdefault(source, [])
            parts.append(steps.astype(np.int64))
            if len(parts) >= 64:
                parts[:] = [np.unique(np.concatenate(parts))]

    def _end_segment(self, source: str) -> None:
        """End the current segment of ``source``: the restart that began it counts the steps it
        logged that an earlier one did too, and they join the steps logged."""
        logged = self._logged.get(source, np.empty(0, dtype=np.int64))
        parts = self._open.pop(source, [])
        steps = np.unique(np.concatenate(parts)) if parts else logged[:0]
        k = self._opened_by.pop(source, None)
        if k is not None:
            again = int(np.isin(steps, logged, assume_unique=True).sum())
            self.restarts[k] = replace(self.restarts[k], redone=again)
        self._logged[source] = np.union1d(logged, steps)

    def down_seconds(self) -> float:
        """Seconds in which the whole run was down (:meth:`down_intervals`)."""
        return math.fsum(end - start for start, end in self.down_intervals())

    def down_intervals(self) -> list[tuple[float, float]]:
        """The times in which the whole run was down: for each restart of the orchestrator, the time
        every process with step lines was silent before its own restart at the same time (the
        overlap of their silences, each taken to end where the process did its first thing after its
        restart: :attr:`resumed_at`, as the run's first time is its first line that is no start-up,
        so a resumed run's start-up is no more run time than the first run's). A process that
        restarted alone (the trainer, while the orchestrator waited for it) leaves the run's time as
        it is: the waiting was part of the run. The silence taken is each process's longest since
        its last step line before the restart (:attr:`Restart.down_s`), placed as if it ended at the
        restart (a ``run.start``; one found by its step going back: where the silence began,
        :attr:`silent_from`): a silence that ended earlier (a long checkpoint write, then lines but no
        step line, then the crash) in every process at once would be taken for down time too."""
        processes = set(self._reached)
        if not processes:
            return []
        timed = [
            (r, self.silent_from.get(k, r.ts - r.down_s), self._back(k, r.ts), k)
            for k, r in enumerate(self.restarts)
            if r.ts is not None and r.down_s is not None
        ]
        down, used = [], set()
        for first, silent, resumed, _ in (t for t in timed if t[0].process == min(processes)):
            start, end, group = silent, resumed, [id(first)]
            for process in sorted(processes - {first.process}):
                # its first restart whose silence overlaps, and of its silences the one that overlaps most
                match = next(
                    (
                        (r, *best)
                        for r, silent, back, k in timed
                        if r.process == process
                        and id(r) not in used
                        and (best := self._overlapping(k, (silent, back), start, end)) is not None
                    ),
                    None,
                )
                if match is None:
                    break
                r, silent, back = match
                start, end = max(start, silent), min(end, back)
                group.append(id(r))
            else:
                if end > start:
                    down.append((start, end))
                    used.update(group)
        return down

    def resumes_began(self) -> list[float]:
        """The time each restart's process logged its first line after its crash, start-up included
        (its ``run.start``; for one found by its step going back, where its longest silence before it
        ended: :attr:`silent_from` plus :attr:`Restart.down_s`), in time order: a line of the
        launcher from then on may be the resumed run's start-up."""
        return sorted(
            self.silent_from[k] + r.down_s if k in self.silent_from and r.down_s is not None else r.ts
            for k, r in enumerate(self.restarts)
            if r.ts is not None
        )

    def _overlapping(
        self, k: int, longest: tuple[float, float], start: float, end: float
    ) -> tuple[float, float] | None:
        """Of restart ``k``'s silences (its ``longest``, and for one found by its step going back its
        :attr:`other_silences`, each ended at its first line of work after it, else where the longest
        ends), the one that overlaps ``start``..``end`` most; None: none does."""
        silences = [longest] + [
            (began, longest[1] if math.isnan(after) else after)
            for began, after in self.other_silences.get(k, [])
        ]
        shared = [(min(end, b) - max(start, a), (a, b)) for a, b in silences if a < end and b > start]
        return max(shared, key=lambda x: x[0])[1] if shared else None

    def all_stepped(self) -> float:
        """The time by which every process with step lines had logged its first (-inf: none): a
        resume needs a step done by the trainer, for which the orchestrator finished a batch, so a
        restart before it sends some step back (is found)."""
        return max(self._first_step.values(), default=-math.inf)

    def _back(self, k: int, ts: float) -> float:
        """Where restart ``k`` (its line at ``ts``) ended its process's down time: its first line of work
        after it (:attr:`resumed_at`; a step-back restart's, after its silence, may come before its
        line: :meth:`_old_resume`), else the restart's line."""
        at = self.resumed_at.get(k, ts)
        return at if k in self.silent_from else max(at, ts)

    def _step_lines(
        self, lines: TaggedLines, source: str
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The rows of the batch's step lines (:data:`STEP_LINE_OF`, and its tag's ``run.start``),
        the longest silence before each since the one before it (the last value: after the last
        step line), which are ``run.start`` and every row's silence before it; the process's last time
        kept. A silence of the orchestrator within one of its waits (its ``[ckpt]`` wait for weights,
        a weight update's ``[weights] client.send`` to its answer: :func:`_waiting`) is none: it said
        it waits, and the line that ends a wait comes from the process that opened it (a resume's
        load of weights longer than the crash before it is no crash)."""
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
        frame = lines.frame
        if source == "orchestrator":
            gaps[_waiting(frame)] = -np.inf  # it said it waits: alive, no crash
        tag, event = STEP_LINE_OF[source]
        events = frame.get_column("event")
        ours = (
            ((frame.get_column("tag") == tag) & events.is_in((event, RUN_START))).fill_null(False).to_numpy()
        )
        reopening = self._reopening(lines) if source == "trainer" else np.zeros(len(ts), dtype=bool)
        rows = np.flatnonzero(ours | reopening)
        starts = (events.gather(rows) == RUN_START).fill_null(False).to_numpy()
        # the longest silence before each step line since the one before it, and after the last
        bounds = np.concatenate([[0], rows + 1])
        longest = np.maximum.reduceat(np.append(gaps, -np.inf), bounds)
        return rows, longest, starts, gaps, reopening[rows]

    def _reopening(self, lines: TaggedLines) -> np.ndarray:
        """The rows of a batch of the trainer's lines that reopen its wait for rollouts: a [train]
        ``wait.start`` for the step whose ``wait.start`` or ``wait.done`` is its last line of
        :data:`TRAIN_MARKS` before it (a batch before this one's: :attr:`_train_open`), no
        ``step.done`` nor ``run.start`` between. A trainer waits once per step, then computes it and
        logs its ``step.done``, so only a new process does this: one resumed at the step it crashed
        waiting for or computing, which redid no step (no ``step.done`` goes back)."""
        frame = lines.frame
        tag, event = frame.get_column("tag"), frame.get_column("event")
        marks = np.flatnonzero(((tag == "train") & event.is_in(TRAIN_MARKS)).fill_null(False).to_numpy())
        out = np.zeros(len(frame), dtype=bool)
        if not len(marks):
            return out
        events = event.gather(marks)
        waits = (events == TRAIN_WAIT[1]).fill_null(False).to_numpy()
        opens = events.is_in(tuple(TRAIN_SPANS)).fill_null(False).to_numpy()  # wait.start, wait.done
        steps = step_numbers(pl.Series(lines.rows_text(marks[opens], "step"), dtype=pl.String)).to_numpy()
        open_step = np.full(len(marks), np.nan)  # the step of each mark's wait.start or wait.done, NaN: none
        open_step[opens] = np.where(np.isnan(steps.astype(np.float64)), np.nan, steps)
        before = np.concatenate(
            [[math.nan if self._train_open is None else self._train_open], open_step[:-1]]
        )
        out[marks] = waits & (open_step == before)
        last = float(open_step[-1])
        self._train_open = None if math.isnan(last) else int(last)
        return out
