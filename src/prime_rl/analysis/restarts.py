"""Restarts: several runs appended to one log (a crash, then ``rl --resume``) split into segments.

A process starts again where it logs ``run.start`` (``[gen] run.start step=`` of the orchestrator,
``[train] run.start step=`` of the trainer) after lines of its own, or, in logs written before that
line, where its step counter goes back: the orchestrator's ``[gen] batch.start step=`` or the
trainer's ``[train] step.done step=`` at or below a step it already reached (a resume at checkpoint
``N`` redoes the steps from ``N`` on; a resume at the step after the last one logged, where a crash
fell between a checkpoint and the next step's line, has no step going back to show it). Each such
line opens a new segment.
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
A hang the ``rl`` launcher's watchdog saw before a restart of the orchestrator, after which the
processes it named made no progress before that restart (the run hung, was killed and resumed), is
kept with that restart (:attr:`Restart.hangs_before`): it is over, no finding; one they made progress
after before the restart is a pause of that run (:class:`Pause`), as one of the last run is.
A hang is placed among the runs by its time; a ``[hang]`` line with none (a console capture, a time
that could not be read) by its position: its segment of the orchestrator's log when it is in that
log, else the times of the lines around it in its own file (a process writes its log in time order).
One that a restart of the orchestrator may lie before or after cannot be placed
(:func:`place_hangs`): it is neither this run's hang nor kept with a restart, and the report says so.
Whether the run went on after a placed one is judged at the silence of the logs its placement
leaves it in (:meth:`ProgressGaps._placed`), when that is one.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from prime_rl.analysis.tagged import RESUME_LOAD, RUN_START, Event, TaggedLines, start_up, step_numbers
from prime_rl.tracing import PROGRESS

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
    progress before this restart: the run hung, then was killed and resumed (:func:`place_hangs`;
    one they made progress after is a :class:`Pause`)."""


def last_restart(restarts: list[Restart], process: str = "orchestrator") -> float | None:
    """The time of ``process``'s last restart with a time (None: none): what it waited for before is
    over."""
    return max((r.ts for r in restarts if r.process == process and r.ts is not None), default=None)


@dataclass(frozen=True)
class Hang:
    """A ``[hang] detected`` line of the watchdog, with what places it among the runs."""

    event: Event
    earliest: float
    """The earliest time it can have: its own, or for a line with none the time of the line with one
    before it in its file (-inf: none)."""
    latest: float
    """The latest: its own, or the time of the line with one after it in its file (inf: none)."""
    segment: int | None = None
    """For a line with no time in the orchestrator's log: the segment of that log it falls in (0:
    before its first restart), by its position (None: in another file, or it has a time)."""


class HangLines:
    """Reads the watchdog's ``[hang] detected`` lines from every batch (:meth:`observe`), each with the
    times around it in its file (:class:`Hang`); :meth:`finish` hands them over, in the order read."""

    def __init__(self) -> None:
        self._hangs: list[list] = []
        """Each hang as [event, earliest, latest, segment] (latest None: waiting for a later line)."""
        self._latest: dict[str, float] = {}
        """By file, the latest time of its lines read so far."""
        self._waiting: dict[str, list[int]] = {}
        """By file, the hangs with no time and no line with one after them yet."""

    def observe(self, b: TaggedLines, segment_starts: tuple[np.ndarray, int]) -> None:
        """Fold a batch of one file: its first time ends the wait of that file's hangs waiting for
        a later time; its hang lines are kept, each with the times around it (``segment_starts``:
        the lines that start a new segment of the batch's process and the segment before them,
        which place a hang with no time in the orchestrator's log)."""
        key = str(b.path) if b.path is not None else b.source
        counts, _, last = b.overview()
        waiting = self._waiting.pop(key, None)
        if waiting:
            ts = b.frame.get_column("ts").drop_nulls()
            if len(ts):
                for k in waiting:
                    self._hangs[k][2] = float(ts[0])
            else:
                self._waiting[key] = waiting
        if any((tag, event) == ("hang", "detected") for tag, event, _ in counts):
            self._add(b, key, segment_starts)
        if last is not None:
            self._latest[key] = max(self._latest.get(key, -math.inf), last)

    def _add(self, b: TaggedLines, key: str, segment_starts: tuple[np.ndarray, int]) -> None:
        """Keep the batch's hang lines: a line with no time between the last time before it (of the
        batch, else of the file so far) and the first after it (else waiting for one)."""
        frame = b.frame
        hangs = (frame.get_column("tag") == "hang") & (frame.get_column("event") == "detected")
        ts = frame.get_column("ts").to_numpy()
        stamped = np.flatnonzero(~np.isnan(ts))
        lines = frame.get_column("line").to_numpy()
        starts, before = segment_starts
        for i in np.flatnonzero(hangs.fill_null(False).to_numpy()).tolist():
            if not np.isnan(ts[i]):
                self._hangs.append([b.event(i), float(ts[i]), float(ts[i]), None])
                continue
            at = int(np.searchsorted(stamped, i))
            earliest = float(ts[stamped[at - 1]]) if at else self._latest.get(key, -math.inf)
            latest = float(ts[stamped[at]]) if at < len(stamped) else None
            segment = None
            if b.source == "orchestrator":  # its position among the log's restarts
                segment = before + int(np.searchsorted(starts, lines[i], side="right"))
            if latest is None:
                self._waiting.setdefault(key, []).append(len(self._hangs))
            self._hangs.append([b.event(i), earliest, latest, segment])

    def finish(self, last_lines: dict[str, tuple[float | None, str]]) -> list[Hang]:
        """The hangs read; one still waiting for a later time takes its file's last line's (a line
        at or after it; none, or the hang line itself: inf)."""
        for key, waiting in self._waiting.items():
            ts = last_lines.get(key, (None, ""))[0]
            for k in waiting:
                self._hangs[k][2] = ts if ts is not None else math.inf
        self._waiting = {}
        return [Hang(*h) for h in self._hangs]


@dataclass(frozen=True)
class PlacedHangs:
    """The watchdog's hangs placed among the runs (:func:`place_hangs`)."""

    current: list[Event]
    """This run's: since the orchestrator's last restart, and the run did not go on after them."""
    restarts: list[Restart]
    """The restarts, each of the orchestrator with its hangs before it (:attr:`Restart.hangs_before`)."""
    unplaced: list[Event]
    """Lines with no time that a restart of the orchestrator may lie before or after."""
    pauses: list[Pause] = field(default_factory=list)
    """The hangs after which the processes they named made progress again within their run (before
    the orchestrator's next restart, if any): the run paused and went on."""


@dataclass(frozen=True)
class RunBounds:
    """One run of the orchestrator among its restarts, which a hang in it is judged within."""

    since: float
    """Its start: the orchestrator's restart that began it, else the run's first time (-inf: unknown)."""
    until: float = math.inf
    """The orchestrator's next restart (inf: none): progress after it is the next run's."""
    resumed: int | None = None
    """The step it resumed at (None: the first run, or not known)."""
    reached: int | None = None
    """The step it reached before its next restart (None: the logs' last)."""


WentOn = Callable[[Hang, RunBounds], "Pause | None"]
"""The pause a hang was part of within its run, the processes it named having made progress after
it there; None: the run did not go on (:meth:`ProgressGaps.pause`)."""


def place_hangs(
    restarts: list[Restart], hangs: list[Hang], start: float | None, went_on: WentOn | None = None
) -> PlacedHangs:
    """Each of ``hangs`` placed: one of an earlier run (it ends before ``start``, the run's start;
    rl.log keeps them over --clean) is left out; one after which the processes it named made
    progress again before the orchestrator's next restart (``went_on``) is a pause of its run; one
    before a restart of the orchestrator is kept by the first after it, in time order (lines with
    none where they were read); the rest are this run's. A hang in the orchestrator's log with no
    time goes by its segment of that log; any other by its time, or with none by the times around it
    (:class:`Hang`): it cannot be placed when a restart with a time lies between them. Without any
    process's time (``start`` None; rl.log alone), a hang that is not in the orchestrator's log is
    this run's."""
    ordered = [k for k, r in enumerate(restarts) if r.process == "orchestrator"]
    timed = sorted((restarts[k].ts, k) for k in ordered if restarts[k].ts is not None)
    at = [ts for ts, _ in timed]
    current, unplaced, pauses, before = [], [], [], {}
    for n, h in enumerate(hangs):
        if h.segment is not None:  # by its position in the orchestrator's log
            k = ordered[h.segment] if h.segment < len(ordered) else None
        elif start is None:
            k = None
        elif h.latest < start:  # an earlier run's
            continue
        else:
            first, last = bisect.bisect_right(at, h.earliest), bisect.bisect_right(at, h.latest)
            if first != last:
                unplaced.append(h.event)
                continue
            k = timed[first][1] if first < len(timed) else None
        until = math.inf if k is None else restarts[k].ts
        paused = None
        if went_on is not None and until is not None:  # did its run go on after it, before the restart?
            paused = went_on(h, _bounds(restarts, timed, start, until, k))
        if paused is not None:
            pauses.append(paused)
        elif k is None:
            current.append(h.event)
        else:
            before.setdefault(k, []).append((h.earliest, n, h))
    kept = [
        replace(r, hangs_before=tuple(_before(h) for *_, h in sorted(before[k], key=lambda x: x[:2])))
        if k in before
        else r
        for k, r in enumerate(restarts)
    ]
    return PlacedHangs(current, kept, unplaced, pauses)


def _bounds(
    restarts: list[Restart], timed: list[tuple[float, int]], start: float | None, until: float, k: int | None
) -> RunBounds:
    """The run a hang is in: from the orchestrator's last restart with a time before ``until`` (the
    next, ``restarts[k]``; inf, None: none), else ``start``, the run's first time."""
    began = [(ts, n) for ts, n in timed if ts < until]
    if began:
        since, resumed = began[-1][0], restarts[began[-1][1]].resumed
    else:
        since, resumed = (start if start is not None else -math.inf), None
    return RunBounds(since, until, resumed, restarts[k].reached if k is not None else None)


def _before(h: Hang) -> HangBefore:
    """A hang kept with the restart after it."""
    return HangBefore(h.event.ts, h.event.where(), hang_said(h.event))


PLACED_SLACK_S = 1.0
"""Seconds a silence of the logs may fall short of the ``silent_s`` a ``[hang]`` line with no time
says and still hold it (:meth:`ProgressGaps._placed`): the watchdog reads the lines a moment after
they are written."""

GAPS_KEPT = 64
"""The longest silences between progress lines kept for each log (:class:`ProgressGaps`): a hang
that more than this many longer silences of one log come before or after is not told apart from
that log's progress."""


@dataclass(frozen=True)
class Pause:
    """A hang of the watchdog after which the processes it named made progress again: the run went on."""

    hang: Event
    """The ``[hang] detected`` line."""
    start: float
    """The last progress line (:data:`~prime_rl.tracing.PROGRESS`) of the orchestrator's or the trainer's logs before it
    in its run (with none, :attr:`start_up`: the run's start)."""
    end: float
    """The first after it."""
    step: int | None
    """The last step logged before it (the orchestrator's batch.start, the trainer's step.done; None: none)."""
    reached: int | None
    """The last step its run logged in the end (the run went on to it): before the orchestrator's
    next restart, or the logs' last."""
    resumed: int | None = None
    """For a pause in start-up, the step its run resumed at (None: the first run, or none known)."""
    start_up: bool = False
    """No progress came before it in its run: the pause is the run's start-up, from its start (its
    ``run.start``, the orchestrator's restart, or the run's first time) to its first progress."""
    run_seconds: float | None = None
    """Its seconds that are run time: less any down time, and for a pause in start-up the start-up
    the run's time leaves out (:func:`run_time_within`; None: not known, all of them)."""
    placed: tuple[float, float] | None = None
    """For a ``[hang]`` line with no time: the times between which it was placed in this pause's
    silence: those around it in its file, within its run (:meth:`ProgressGaps._placed`)."""

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def counted(self) -> float:
        """Its seconds in the run's time (:attr:`run_seconds`, else all of them)."""
        return self.seconds if self.run_seconds is None else self.run_seconds


class ProgressGaps:
    """The orchestrator's and the trainer's logs' progress (:data:`~prime_rl.tracing.PROGRESS`), to tell a hang the run
    went on after from one it ends in: for each log, its first and last progress line's time and its
    :data:`GAPS_KEPT` longest silences between two progress lines, each with the step logged last
    before it (memory: a few numbers a log, whatever its length)."""

    def __init__(self) -> None:
        self._logs: dict[str, list] = {}
        """By file: [process, first time, last time, last step, gaps (rows of start, end, step)]."""
        self.untold: list[Hang] = []
        """``[hang]`` lines with no time whose placement leaves none or several silences of the logs
        they may have ended (:meth:`_placed`): whether the run went on after them is not known."""

    def observe(self, b: TaggedLines) -> None:
        """Fold a batch of one file (of the orchestrator or the trainer; others are no matter)."""
        if b.source not in STEP_LINE_OF:
            return
        pairs = [(tag, event) for tag, event, _ in b.overview().counts if (tag, event) in PROGRESS]
        if not pairs:
            return
        frame = b.frame
        tag, event = frame.get_column("tag"), frame.get_column("event")
        progress = np.zeros(len(frame), dtype=bool)
        for t, e in pairs:
            progress |= ((tag == t) & (event == e)).fill_null(False).to_numpy()
        ts = frame.get_column("ts").to_numpy()
        rows = np.flatnonzero(progress & ~np.isnan(ts))
        if not len(rows):
            return
        key = str(b.path) if b.path is not None else b.source
        log = self._logs.setdefault(key, [b.source, math.inf, -math.inf, math.nan, np.empty((0, 3))])
        t = ts[rows]
        start = np.concatenate([[log[2]], t[:-1]])
        with np.errstate(invalid="ignore"):
            length = np.where(np.isfinite(start), t - start, -math.inf)
        kept = np.flatnonzero(length > 0)
        if len(kept) > GAPS_KEPT:
            kept = kept[np.argsort(-length[kept], kind="stable")[:GAPS_KEPT]]
        # the step logged last before each kept silence, and before the batch's end: the last step
        # line at or before the progress line it starts at (the log's from before the batch)
        step_tag, step_event = STEP_LINE_OF[b.source]
        step_rows = np.flatnonzero(((tag == step_tag) & (event == step_event)).fill_null(False).to_numpy())
        ends = np.append(rows[np.maximum(kept - 1, 0)], rows[-1])
        at = np.searchsorted(step_rows, ends, side="right") - 1
        wanted = np.unique(step_rows[at[at >= 0]])
        numbers = step_numbers(pl.Series(b.rows_text(wanted, "step"), dtype=pl.String)).cast(pl.Float64)
        step_of = dict(zip(wanted.tolist(), numbers.fill_null(math.nan).to_list(), strict=True))
        steps = np.array([step_of[step_rows[a]] if a >= 0 else log[3] for a in at.tolist()], dtype=np.float64)
        steps[:-1][kept == 0] = log[3]  # a silence from the batch's first line: the step before it
        gaps = np.concatenate([log[4], np.column_stack([start[kept], t[kept], steps[:-1]])])
        if len(gaps) > GAPS_KEPT:
            gaps = gaps[np.argsort(gaps[:, 0] - gaps[:, 1], kind="stable")[:GAPS_KEPT]]
        log[1], log[2] = min(log[1], float(t.min())), max(log[2], float(t[-1]))
        log[3], log[4] = float(steps[-1]), gaps

    def pause(self, hang: Hang, run: RunBounds = RunBounds(-math.inf)) -> Pause | None:
        """The pause ``hang`` was part of, when every process its ``waits=`` names (of those with a
        log here; none: any) made progress after it within its ``run`` (before the orchestrator's
        next restart: progress after it is the next run's); None: the run did not go on, or a line
        with no time could not be judged (:attr:`untold`). Each log's last progress before it and
        first after are its silence around the hang (a log whose silence there is none of its longest
        kept is left out); with no progress before it in its run (its start-up), the pause is from
        the run's start. A line with no time is judged at the time its placement leaves it
        (:meth:`_placed`)."""
        if not self._logs:
            return None
        if hang.event.ts is None:
            return self._placed(hang, run)
        silence = self._silence(hang.event, hang.event.ts, run)
        return self._pause(hang.event, silence, run) if silence is not None and silence[4] else None

    def _placed(self, hang: Hang, run: RunBounds) -> Pause | None:
        """A ``[hang]`` line with no time, judged by its placement: it came between the times around it
        in its file (:class:`Hang`) and within its run, at the end of a silence of every log that had
        lasted the ``silent_s`` it says (else its ``threshold_s``) there. When exactly one such
        silence of the logs can hold it, it is judged as a line with a time in it would be; when none
        or several can (or the times around it, or its silence, are not known), it is kept in
        :attr:`untold` and judged the run did not go on after it, as a line with no time was before."""
        ev = hang.event
        silent = next(
            (v for v in (_seconds(ev, "silent_s"), _seconds(ev, "threshold_s")) if v is not None), None
        )
        lo, hi = max(hang.earliest, run.since), min(hang.latest, run.until)
        found: dict[tuple[float, float], tuple] = {}
        if silent is not None and math.isfinite(lo) and math.isfinite(hi) and lo <= hi:
            # where each silence it may have ended had lasted ``silent``: after the run's start, each
            # kept silence's start, each log's last progress
            begins = [run.since, *(log[2] for log in self._logs.values())]
            begins += [float(t) for log in self._logs.values() for t in log[4][:, 0]]
            for at in sorted({lo, *(t + silent for t in begins if lo <= t + silent <= hi)}):
                silence = self._silence(ev, at, run, every_log=True)
                if silence is None or at - silence[0] < silent - PLACED_SLACK_S:
                    continue  # some log made progress too close before it for the watchdog's silence
                found.setdefault((silence[0], silence[1] if silence[4] else math.inf), silence)
        if len(found) != 1:
            self.untold.append(hang)
            return None
        (silence,) = found.values()
        return self._pause(ev, silence, run, (lo, hi)) if silence[4] else None

    def _silence(
        self, hang: Event, h: float, run: RunBounds, every_log: bool = False
    ) -> tuple[float, float, bool, float, bool] | None:
        """The silence of the logs around time ``h`` of ``run``: its start (the last progress of any
        log before ``h`` in its run; none: the run's start, in start-up), end (the first progress of
        any after ``h`` in its run; inf: none), whether it is the start-up, the step logged last
        before it (NaN: none), and whether every process ``hang`` names made progress after it;
        None: no log's silence there is known (``every_log``: some log's is not: it made progress
        close to ``h``), or the run's start is not."""
        around: list[tuple[str, float, float, float]] = []  # (process, before, after, step before)
        for process, first, last, last_step, gaps in self._logs.values():
            if h < first:
                around.append((process, -math.inf, first, math.nan))
            elif h >= last:
                around.append((process, last, math.inf, last_step))
            else:
                inside = gaps[(gaps[:, 0] <= h) & (h < gaps[:, 1])]
                if len(inside):
                    around.append((process, float(inside[0, 0]), float(inside[0, 1]), float(inside[0, 2])))
                elif every_log:
                    return None
        # progress before the run's start or after the orchestrator's next restart is another run's
        around = [
            (p, b, a, s) if b >= run.since else (p, -math.inf, a, math.nan)
            for p, b, a, s in ((p, b, a if a < run.until else math.inf, s) for p, b, a, s in around)
        ]
        if not around:
            return None
        named = _named(hang) & {p for p, *_ in around} or {p for p, *_ in around}
        went_on = all(any(a < math.inf for p, _, a, _ in around if p == n) for n in named)
        start = max((b for _, b, _, _ in around if b > -math.inf), default=None)
        start_up = start is None  # no progress before it in its run: from the run's start
        if start is None:
            start = run.since
        if not math.isfinite(start):
            return None
        steps = [s for *_, s in around if not math.isnan(s)]
        return start, min(a for _, _, a, _ in around), start_up, max(steps, default=math.nan), went_on

    def _pause(
        self,
        hang: Event,
        silence: tuple[float, float, bool, float, bool],
        run: RunBounds,
        placed: tuple[float, float] | None = None,
    ) -> Pause | None:
        """The pause of ``silence`` (:meth:`_silence`, one the processes went on after)."""
        start, end, start_up, step, _ = silence
        if not end > start:
            return None
        reached = run.reached
        if reached is None:
            last_steps = [log[3] for log in self._logs.values() if not math.isnan(log[3])]
            reached = int(max(last_steps)) if last_steps else None
        return Pause(
            hang,
            start,
            end,
            None if math.isnan(step) else int(step),
            reached,
            run.resumed if start_up else None,
            start_up,
            placed=placed,
        )


def _seconds(ev: Event, key: str) -> float | None:
    """A field of ``ev`` as a number of seconds (None: missing, or no positive number)."""
    try:
        value = float(ev.fields.get(key) or "")
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def run_time_within(
    spans: list[tuple[float, float]], run: tuple[float, float], down: list[tuple[float, float]]
) -> float:
    """The seconds of the union of ``spans`` that are run time: within ``run`` (its first and last
    time) and outside each of ``down`` (:meth:`Segments.down_intervals`)."""
    cut: list[tuple[float, float]] = []  # the down times, merged where they overlap
    for d0, d1 in sorted(down):
        if cut and d0 <= cut[-1][1]:
            cut[-1] = (cut[-1][0], max(cut[-1][1], d1))
        else:
            cut.append((d0, d1))
    total, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        a, b = max(start, reach, run[0]), min(end, run[1])
        reach = max(reach, end)
        if b <= a:
            continue
        total += b - a - sum(max(0.0, min(b, d1) - max(a, d0)) for d0, d1 in cut)
    return max(total, 0.0)


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


def _named(hang: Event) -> set[str]:
    """The processes a hang's ``waits=who>whom:what,...`` names."""
    named = set()
    for wait in (hang.fields.get("waits") or "").split(","):
        if ">" in wait:
            who, whom = wait.split(":", 1)[0].split(">", 1)
            named |= {who.strip(), whom.strip()}
    return named


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
        self._gap_at: dict[str, tuple[float, float]] = {}
        """By process, for the silence of :attr:`_gap` (in an earlier batch): when it began and the time
        of the process's first line after it that is no start-up (NaN: none yet)."""
        self.batch_loads: np.ndarray = np.empty(0, np.int64)
        """The ``line`` of the last batch's ``[ckpt] wait.done`` lines that are a resume's load of weights
        by the orchestrator found restarted by its step going back: after its silence, before the
        first ``[gen] batch.start`` after it (:meth:`_old_resume`)."""

    def observe(self, lines: TaggedLines) -> list[int]:
        """Fold a batch of one process's lines; the rows that start a new segment of it. The downtime
        is the longest silence of the process since its previous step line (the crash, then the
        start-up)."""
        source = lines.source
        if source not in ("orchestrator", "trainer"):
            return []
        rows, longest, starts, gaps = self._step_lines(lines, source)
        carried = self._gap.pop(source, -np.inf)  # since the last step line of an earlier batch
        carried_at = self._gap_at.pop(source, (math.nan, math.nan))
        ts = lines.frame.get_column("ts").to_numpy()
        work = self._work(lines, source, ts)
        self.batch_loads = np.empty(0, np.int64)
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
            start = starts[stepped]
            reached = self._reached.get(source)
            # what each line leaves reached: its step, or for a run.start the step before the one
            # it starts at (its first step line then goes on from there)
            reach = np.where(start, steps - 1, steps)
            before = np.concatenate([[-1 if reached is None else reached], reach[:-1]])
            seen = np.arange(len(steps)) > 0 if reached is None else np.ones(len(steps), dtype=bool)
            done = np.where(start, -1, steps)  # the steps logged (a run.start's is none)
            ended = 0  # where the current segment's lines in the batch begin
            # a restart: the step went back, or the process started again after lines of its own
            for k in np.flatnonzero(np.where(start, seen, steps <= before)).tolist():
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
        self._resumed(lines, source, out, ts)
        self.resumed_at.update(old)
        self._pace(source, ts[rows], starts, starts | np.isin(rows, out))
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
        if source == "orchestrator":
            frame = lines.frame
            quiet = np.flatnonzero(~np.isnan(ts[lo : i + 1]) & (ts[lo : i + 1] > began)) + lo
            if len(quiet):
                rows = np.arange(int(quiet[0]), i)
                done = (frame.get_column("tag") == RESUME_LOAD[0]) & (
                    frame.get_column("event") == "wait.done"
                )
                rows = rows[done.fill_null(False).to_numpy()[rows]]
                self.batch_loads = np.union1d(self.batch_loads, frame.get_column("line").to_numpy()[rows])

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
            (r, self.silent_from.get(k, r.ts - r.down_s), self._back(k, r.ts))
            for k, r in enumerate(self.restarts)
            if r.ts is not None and r.down_s is not None
        ]
        down, used = [], set()
        for first, silent, resumed in (t for t in timed if t[0].process == min(processes)):
            start, end, group = silent, resumed, [id(first)]
            for process in sorted(processes - {first.process}):
                match = next(
                    (
                        (r, silent, back)
                        for r, silent, back in timed
                        if r.process == process and id(r) not in used and silent < end and back > start
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
        kept."""
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
        events = frame.get_column("event")
        ours = (frame.get_column("tag") == tag) & events.is_in((event, RUN_START))
        rows = np.flatnonzero(ours.fill_null(False).to_numpy())
        starts = (events.gather(rows) == RUN_START).fill_null(False).to_numpy()
        # the longest silence before each step line since the one before it, and after the last
        bounds = np.concatenate([[0], rows + 1])
        longest = np.maximum.reduceat(np.append(gaps, -np.inf), bounds)
        return rows, longest, starts, gaps
