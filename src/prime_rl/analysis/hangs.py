"""Hangs and pauses: the ``rl`` launcher's watchdog's ``[hang]`` lines placed among the runs of
:mod:`~prime_rl.analysis.restarts`, and whether the run went on after each.

A hang the ``rl`` launcher's watchdog saw before a restart of the orchestrator, after which the
processes it named made no progress before that restart (the run hung, was killed and resumed), is
kept with that restart (:attr:`~prime_rl.analysis.restarts.Restart.hangs_before`): it is over, no
finding; one they made progress after before the restart is a pause of that run (:class:`Pause`), as
one of the last run is.
A hang is placed among the runs by its time; a ``[hang]`` line with none (a console capture, a time
that could not be read) by its position: its segment of the orchestrator's log when it is in that
log, else the times of the lines around it in its own file (a process writes its log in time order).
One that a restart of the orchestrator may lie before or after cannot be placed
(:func:`place_hangs`): it is neither this run's hang nor kept with a restart, and the report says so.
Whether the run went on after a placed one is judged at the silence of the logs its placement
leaves it in (:meth:`ProgressGaps._placed`; a file's lines with no time in their order there,
:meth:`ProgressGaps._file_order`), when that is one.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from prime_rl.analysis.restarts import STEP_LINE_OF, HangBefore, Restart, hang_said
from prime_rl.analysis.tagged import Event, TaggedLines, step_numbers
from prime_rl.tracing import PROGRESS


@dataclass(frozen=True)
class Hang:
    """A ``[hang] detected`` line of the watchdog (or a launcher's :data:`STOPS` line), with what
    places it among the runs."""

    event: Event
    earliest: float
    """The earliest time it can have: its own, or for a line with none the time of the line with one
    before it in its file (-inf: none)."""
    latest: float
    """The latest: its own, or the time of the line with one after it in its file (inf: none)."""
    segment: int | None = None
    """For a line with no time in the orchestrator's log: the segment of that log it falls in (0:
    before its first restart), by its position (None: in another file, or it has a time)."""


STOPS = (("launcher", "child.exit"), ("launcher", "interrupted"))
"""The ``rl`` launcher's lines as it stops its children (a child exited, or it was interrupted):
every child ran up to it (:func:`down_after_hangs`)."""

LAUNCHER_TAGS = ("hang", *dict.fromkeys(tag for tag, _ in STOPS))
"""The tags only the launcher writes (its watchdog's ``[hang]``, its :data:`STOPS` lines): a batch of
these alone is the launcher's, no time of the run's window."""


class HangLines:
    """Reads the watchdog's ``[hang] detected`` lines and the launcher's :data:`STOPS` lines from every
    batch (:meth:`observe`), each with the times around it in its file (:class:`Hang`); :meth:`finish`
    hands the hangs over, in the order read, and keeps the stops in :attr:`stops`."""

    def __init__(self) -> None:
        self._hangs: list[list] = []
        """Each hang or stop as [event, earliest, latest, segment] (latest None: waiting for a later
        line), in the order read."""
        self.stops: list[Hang] = []
        """The launcher's :data:`STOPS` lines, placed as hangs are (:meth:`finish`)."""
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
        if any((tag, event) == ("hang", "detected") or (tag, event) in STOPS for tag, event, _ in counts):
            self._add(b, key, segment_starts)
        if last is not None:
            self._latest[key] = max(self._latest.get(key, -math.inf), last)

    def _add(self, b: TaggedLines, key: str, segment_starts: tuple[np.ndarray, int]) -> None:
        """Keep the batch's hang and stop lines: a line with no time between the last time before it
        (of the batch, else of the file so far) and the first after it (else waiting for one)."""
        frame = b.frame
        tag, event = frame.get_column("tag"), frame.get_column("event")
        hangs = (tag == "hang") & (event == "detected")
        for stop in STOPS:
            hangs = hangs | ((tag == stop[0]) & (event == stop[1]))
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
        """The hangs read (the stops go to :attr:`stops`); one still waiting for a later time takes
        its file's last line's (a line at or after it; none, or the hang line itself: inf)."""
        for key, waiting in self._waiting.items():
            ts = last_lines.get(key, (None, ""))[0]
            for k in waiting:
                self._hangs[k][2] = ts if ts is not None else math.inf
        self._waiting = {}
        read = [Hang(*h) for h in self._hangs]
        self.stops = [h for h in read if h.event.tag == "launcher"]
        return [h for h in read if h.event.tag == "hang"]


@dataclass(frozen=True)
class PlacedHangs:
    """The watchdog's hangs placed among the runs (:func:`place_hangs`)."""

    current: list[Event]
    """This run's: since the orchestrator's last restart, and the run did not go on after them."""
    restarts: list[Restart]
    """The restarts, each of the orchestrator with its hangs before it (:attr:`~prime_rl.analysis.restarts.Restart.hangs_before`)."""
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
    last: float = math.inf
    """The last time of the other logs (inf: unknown): a ``[hang]`` line with no time and none after
    it in its file is looked for before it and after it alike (:meth:`ProgressGaps._placed`); with
    none known, it is not placed."""


WentOn = Callable[[list[tuple[Hang, RunBounds]]], "list[Pause | None]"]
"""For each hang with its run, the pause it was part of within that run, the processes it named
having made progress after it there; None: the run did not go on (:meth:`ProgressGaps.pauses`,
which judges them together: a file's lines with no time by their order in it)."""


def place_hangs(
    restarts: list[Restart],
    hangs: list[Hang],
    start: float | None,
    went_on: WentOn | None = None,
    logs_end: float | None = None,
) -> PlacedHangs:
    """Each of ``hangs`` placed: one of an earlier run (it ends before ``start``, the run's start;
    rl.log keeps them over --clean) is left out; one after which the processes it named made
    progress again before the orchestrator's next restart (``went_on``) is a pause of its run; one
    before a restart of the orchestrator is kept by the first after it, in time order (lines with
    none where they were read); the rest are this run's. A hang in the orchestrator's log with no
    time goes by its segment of that log; any other by its time, or with none by the times around it
    (:class:`Hang`): it cannot be placed when a restart with a time lies between them. Without any
    process's time (``start`` None; rl.log alone), a hang that is not in the orchestrator's log is
    this run's. ``logs_end``: the other logs' last time (None: unknown), which a line with no time and
    none after it in its file is looked for before and after (:meth:`ProgressGaps._placed`)."""
    ordered = [k for k, r in enumerate(restarts) if r.process == "orchestrator"]
    timed = sorted((restarts[k].ts, k) for k in ordered if restarts[k].ts is not None)
    at = [ts for ts, _ in timed]
    current, unplaced, pauses, before = [], [], [], {}
    placed: list[tuple[int, Hang, int | None]] = []  # each with its index and the restart after it
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
        placed.append((n, h, k))
    # did its run go on after it, before the restart? (judged together: a file's order tells)
    runs = {}
    for n, h, k in placed:
        until = math.inf if k is None else restarts[k].ts
        if went_on is not None and until is not None:
            bounds = _bounds(restarts, timed, start, until, k)
            runs[n] = (h, bounds if logs_end is None else replace(bounds, last=logs_end))
    went = dict(zip(runs, went_on(list(runs.values())), strict=True)) if runs else {}
    for n, h, k in placed:
        paused = went.get(n)
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


def down_after_hangs(
    down: list[tuple[float, float]], hangs: list[Hang], resumes: list[float], stops: list[Hang] = ()
) -> list[tuple[float, float]]:
    """Each of ``down`` (:meth:`~prime_rl.analysis.restarts.Segments.down_intervals`, in time order)
    begun no earlier than the last ``[hang]`` line or launcher's stop (``stops``: its
    ``[launcher] child.exit`` or ``interrupted`` line, :data:`STOPS`) of the crashed run within it:
    the ``rl`` launcher's watchdog writes one only while every child runs (its loop checks for a hang,
    then for an exited child, and on the first it writes its ``child.exit`` line, stops the others and
    writes no more), so the processes ran up to that line, silent in a hang (a trainer's wait for
    rollouts that ends in its ``data.wait_timeout_s``, its error on stderr), not down. The crashed
    run's lines are those before the first of ``resumes`` in the down time
    (:meth:`~prime_rl.analysis.restarts.Segments.resumes_began`): one after it is the resumed run's
    start-up, which the run's time leaves out as it does the first run's. A stop counts only when its
    launch had started its children before the down time began (its time less its ``up_s``): a
    relaunch whose child died in its start-up, before it logged a step line, is no part of the
    crashed run; nor does a ``child.exit`` without ``code=`` (:func:`_all_ran`). A line with no time
    counts at the earliest it can have, when its latest is before that too."""
    out = []
    for start, end in down:
        began = min((b for b in resumes if start < b <= end), default=end)
        alive = [h.earliest for h in hangs if start < h.earliest and h.latest < began]
        alive += [
            h.earliest
            for h in stops
            if start < h.earliest and h.latest < began and _launched_by(h, start) and _all_ran(h)
        ]
        out.append((max([start, *alive]), end))
    return out


def _all_ran(stop: Hang) -> bool:
    """Whether every child ran up to a :data:`STOPS` line: not for a ``child.exit`` without ``code=``
    (the trainer had not exited long after the orchestrator finished: the orchestrator had exited,
    no step was in flight)."""
    return stop.event.event != "child.exit" or "code" in stop.event.fields


def _launched_by(stop: Hang, t: float) -> bool:
    """Whether the launch a :data:`STOPS` line ends had started its children before ``t`` (by its
    ``up_s``; none readable: not known, False)."""
    up = _seconds(stop.event, "up_s")
    return up is not None and stop.latest - up < t


def watched_running(hangs: list[Hang], stops: list[Hang] = ()) -> list[tuple[float, float]]:
    """The times the watchdog's timed ``[hang]`` lines and the launcher's timed :data:`STOPS` lines
    prove the launcher's children ran through, in time order: each ``[hang]`` line's ``silent_s``
    before it (the watchdog measures the silence of the children it started and watches, and writes
    only while they all run), a hang, no restart; each stop line's ``up_s`` before it (one launch's
    children, started then and stopped there: the launcher restarts none of them in between)."""
    spans = []
    for lines, key in ((hangs, "silent_s"), (stops, "up_s")):
        for h in lines:
            before = _seconds(h.event, key)
            if h.event.ts is not None and before is not None:
                spans.append((h.event.ts - before, h.event.ts))
    return sorted(spans)


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
    the run's time leaves out (:func:`~prime_rl.analysis.restarts.run_time_within`; None: not known, all of them)."""
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

    @property
    def costs_nothing(self) -> bool:
        """Less than :data:`PAUSE_FREE_S` of it is run time (a pause in start-up, which the run's time
        leaves out): no finding, a note among the warnings (the servers took that long to load)."""
        return self.run_seconds is not None and self.run_seconds < PAUSE_FREE_S


PAUSE_FREE_S = 0.5
"""A pause with less run time than this (:attr:`Pause.run_seconds`) costs the run nothing: it is no
finding, and SUMMARY.md's warnings note it (:func:`~prime_rl.analysis.run_warnings.free_pauses`)."""


class ProgressGaps:
    """The orchestrator's and the trainer's logs' progress (:data:`~prime_rl.tracing.PROGRESS`), to tell a hang the run
    went on after from one it ends in: for each log, its first and last progress line's time and its
    :data:`GAPS_KEPT` longest silences between two progress lines, each with the step logged last
    before it (memory: a few numbers a log, whatever its length)."""

    def __init__(self) -> None:
        self._logs: dict[str, list] = {}
        """By file: [process, first time, last time, last step, gaps (rows of start, end, step), the
        step of its first step line (NaN: none yet)]."""
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
        log = self._logs.setdefault(
            key, [b.source, math.inf, -math.inf, math.nan, np.empty((0, 3)), math.nan]
        )
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
        if math.isnan(log[5]) and len(step_rows):
            first = step_numbers(pl.Series(b.rows_text(step_rows[:1], "step"), dtype=pl.String))[0]
            log[5] = float(first) if first is not None else math.nan

    def pause(self, hang: Hang, run: RunBounds = RunBounds(-math.inf)) -> Pause | None:
        """The pause ``hang`` was part of, when every process its ``waits=`` names (of those with a
        log here; none: any) made progress after it within its ``run`` (before the orchestrator's
        next restart: progress after it is the next run's); None: the run did not go on, or a line
        with no time could not be judged (:attr:`untold`). Each log's last progress before it and
        first after are its silence around the hang (a log whose silence there is none of its longest
        kept is left out); with no progress before it in its run (its start-up), the pause is from
        the run's start. A line with no time is judged at the time its placement leaves it
        (:meth:`_placed`; the lines of one file together: :meth:`pauses`)."""
        return self.pauses([(hang, run)])[0]

    def pauses(self, hangs: list[tuple[Hang, RunBounds]]) -> list[Pause | None]:
        """:meth:`pause` of each of ``hangs`` (each with its run), the silences that may hold a line
        with no time (:meth:`_placed`) narrowed by its file's order (:meth:`_file_order`)."""
        out: list[Pause | None] = [None] * len(hangs)
        if not self._logs:
            return out
        held: dict[int, tuple[dict[tuple[float, float], tuple], float, float]] = {}
        at: dict[int, tuple[float, float]] = {}  # a line with a time: its silence (start, end)
        for n, (hang, run) in enumerate(hangs):
            ev = hang.event
            if ev.ts is None:
                held[n] = self._placed(hang, run)
                continue
            silence = self._silence(ev, ev.ts, run)
            if silence is not None and silence[4]:
                out[n] = self._pause(ev, silence, run)
            silence = self._silence(ev, ev.ts, run, every_log=True)
            if silence is not None:
                at[n] = (silence[0], silence[1] if silence[4] else math.inf)
        self._file_order(hangs, held, at)
        for n, (found, lo, hi) in held.items():
            hang, run = hangs[n]
            if len(found) != 1:
                self.untold.append(hang)
                continue
            (silence,) = found.values()
            if silence[4]:
                out[n] = self._pause(hang.event, silence, run, (lo, hi if math.isfinite(hi) else run.last))
        return out

    def _file_order(
        self,
        hangs: list[tuple[Hang, RunBounds]],
        held: dict[int, tuple[dict[tuple[float, float], tuple], float, float]],
        at: dict[int, tuple[float, float]],
    ) -> None:
        """Narrow the silences that may hold each line with no time (``held``, by its index in
        ``hangs``: :meth:`_placed`) by the order of its file's ``[hang]`` lines: the watchdog writes
        one a silence, and again only after progress (:class:`~prime_rl.launcher.watchdog.Watchdog`),
        so each came in a silence after the one of the line before it in its file (that of a line
        with a time: ``at``), when the orchestrator's and the trainer's logs are here (their progress
        is the watchdog's; a log missing, progress the others do not show may have parted two lines
        in one silence of theirs: at or after it). A line no silence or several may hold bounds the
        others by what is known of it; one none may hold (or not known) bounds none. When no order
        of the lines fits, two in one silence (progress the logs do not show: an inference server's
        ``[weights] rpc.done`` whose answer the orchestrator never had, a progress line with no time)
        is allowed; when none fits still, every line with no time of that file is judged in no one
        silence (:attr:`untold`): its lines or its logs are not what they seem."""
        files: dict[str, list[int]] = {}
        for n, (hang, _) in enumerate(hangs):
            if n in at or (n in held and held[n][0]):
                ev = hang.event
                files.setdefault(str(ev.path) if ev.path is not None else ev.source, []).append(n)
        every = {"orchestrator", "trainer"} <= {log[0] for log in self._logs.values()}
        for lines in files.values():
            if len(lines) < 2 or not any(n in held for n in lines):
                continue
            lines.sort(key=lambda n: hangs[n][0].event.line)
            may = [sorted(held[n][0]) if n in held else [at[n]] for n in lines]
            kept = (_in_order(may, True) if every else None) or _in_order(may, False)
            for k, n in enumerate(lines):
                if n in held:
                    found, lo, hi = held[n]
                    allowed = set(kept[k]) if kept is not None else set()
                    held[n] = ({key: s for key, s in found.items() if key in allowed}, lo, hi)

    def _placed(self, hang: Hang, run: RunBounds) -> tuple[dict[tuple[float, float], tuple], float, float]:
        """The silences that may hold a ``[hang]`` line with no time, by (start, end; inf: the run did
        not go on), and the times it came between: those around it in its file (:class:`Hang`),
        within its run. It came there at the end of a silence of every log that had lasted the
        ``silent_s`` it says (else its ``threshold_s``), and that the steps logged before it allow
        (:meth:`_may_hold`). When exactly one such silence of the logs can hold it (with the other
        ``[hang]`` lines of its file: :meth:`_file_order`), it is judged as a line with a time in it
        would be; when none or several can (or the times around it, or its silence, are not known),
        it is kept in :attr:`untold` and judged the run did not go on after it, as a line with no
        time was before (:meth:`pauses`).
        With no time after it in its file (nothing later in rl.log, or a console capture with no time
        at all), it is looked for within the run's other logs (the launcher writes it while its
        children run) and after their last line (:attr:`RunBounds.last`; a run that hung where its
        logs end) alike: a silence within them is not preferred to the one after them."""
        ev = hang.event
        silent = next(
            (v for v in (_seconds(ev, "silent_s"), _seconds(ev, "threshold_s")) if v is not None), None
        )
        lo, hi = max(hang.earliest, run.since), min(hang.latest, run.until)
        found: dict[tuple[float, float], tuple] = {}
        # no time after it in its file: within the other logs' time and after their last line alike
        # (the launcher writes it while its children run, or the run hung where its logs end)
        if (
            silent is not None
            and math.isfinite(lo)
            and lo <= hi
            and (math.isfinite(hi) or math.isfinite(run.last))
        ):
            # where each silence it may have ended had lasted ``silent``: after the run's start, each
            # kept silence's start, each log's last progress
            begins = [run.since, *(log[2] for log in self._logs.values())]
            begins += [float(t) for log in self._logs.values() for t in log[4][:, 0]]
            at_lo = [lo] if math.isfinite(hi) else []
            for at in sorted({*at_lo, *(t + silent for t in begins if lo <= t + silent <= hi)}):
                silence = self._silence(ev, at, run, every_log=True)
                if silence is None or at - silence[0] < silent - PLACED_SLACK_S:
                    continue  # some log made progress too close before it for the watchdog's silence
                if not self._may_hold(ev, silence, run):
                    continue  # the steps logged before it contradict the line's waits= or pace
                found.setdefault((silence[0], silence[1] if silence[4] else math.inf), silence)
        return found, lo, hi

    def _may_hold(self, hang: Event, silence: tuple, run: RunBounds) -> bool:
        """Whether ``silence`` (:meth:`_silence`) can hold the ``[hang]`` line ``hang`` by the steps
        logged before it in its run. The watchdog names the steps its waits are for
        (:func:`_waited_steps`): each was logged, or the one before it was, before the hang (some log's
        step before the silence is at least N - 1); the trainer waiting for ``rollouts/step_N`` had
        logged step N - 1 last; the orchestrator waiting for ``weights/step_N``, the trainer had logged
        no step after N (it writes them after step N - 1); the orchestrator waiting for the
        generation of step N, it had logged that batch's start last. A line with a ``median_step_s``
        came after the watchdog saw the steps' pace (before it, its threshold is ``first_step_s``): two
        steps of its run were logged before it, so it is in no start-up and in no silence after the
        run's first step. A log whose step before the silence is not known (none in its run) is no
        evidence."""
        _, _, start_up, step, _, steps = silence
        if _seconds(hang, "median_step_s") is not None:
            if start_up:
                return False
            first = run.resumed
            if first is None:
                firsts = [log[5] for log in self._logs.values() if not math.isnan(log[5])]
                first = min(firsts) if firsts else None
            if first is not None and not math.isnan(step) and step <= first:
                return False
        for who, what, n in _waited_steps(hang):
            if not math.isnan(step) and step < n - 1:
                return False
            trainer, orchestrator = steps.get("trainer", math.nan), steps.get("orchestrator", math.nan)
            if who == "trainer" and what == "rollouts" and not math.isnan(trainer) and trainer != n - 1:
                return False
            if who == "orchestrator" and what == "weights" and not math.isnan(trainer) and trainer > n:
                return False
            if (
                who == "orchestrator"
                and what == "generation"
                and not math.isnan(orchestrator)
                and orchestrator != n
            ):
                return False
        return True

    def _silence(
        self, hang: Event, h: float, run: RunBounds, every_log: bool = False
    ) -> tuple[float, float, bool, float, bool, dict[str, float]] | None:
        """The silence of the logs around time ``h`` of ``run``: its start (the last progress of any
        log before ``h`` in its run; none: the run's start, in start-up), end (the first progress of
        any after ``h`` in its run; inf: none), whether it is the start-up, the step logged last
        before it (NaN: none), whether every process ``hang`` names made progress after it, and by
        process the step it logged last before it in its run (none: left out);
        None: no log's silence there is known (``every_log``: some log's is not: it made progress
        close to ``h``), or the run's start is not."""
        around: list[tuple[str, float, float, float]] = []  # (process, before, after, step before)
        for process, first, last, last_step, gaps, _ in self._logs.values():
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
        by_process: dict[str, float] = {}
        for p, _, _, s in around:
            if not math.isnan(s):
                by_process[p] = max(by_process.get(p, -math.inf), s)
        return (
            start,
            min(a for _, _, a, _ in around),
            start_up,
            max(steps, default=math.nan),
            went_on,
            by_process,
        )

    def _pause(
        self,
        hang: Event,
        silence: tuple[float, float, bool, float, bool, dict[str, float]],
        run: RunBounds,
        placed: tuple[float, float] | None = None,
    ) -> Pause | None:
        """The pause of ``silence`` (:meth:`_silence`, one the processes went on after)."""
        start, end, start_up, step, *_ = silence
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


def _waited_steps(hang: Event) -> list[tuple[str, str, int]]:
    """The steps a hang's ``waits=`` names, each as (who waits, what: ``rollouts``, ``weights`` or
    ``generation``, its step N): ``rollouts/step_N``, ``weights/step_N``, ``generation_of_step_N``
    (the watchdog's :meth:`~prime_rl.launcher.watchdog.Watchdog._waits`)."""
    waited = []
    for wait in (hang.fields.get("waits") or "").split(","):
        if ">" not in wait or ":" not in wait:
            continue
        who, what = wait.split(">", 1)[0].strip(), wait.split(":", 1)[1].strip()
        for kind, head in (
            ("rollouts", "rollouts/step_"),
            ("weights", "weights/step_"),
            ("generation", "generation_of_step_"),
        ):
            if what.startswith(head) and what[len(head) :].isdigit():
                waited.append((who, kind, int(what[len(head) :])))
    return waited


def _named(hang: Event) -> set[str]:
    """The processes a hang's ``waits=who>whom:what,...`` names."""
    named = set()
    for wait in (hang.fields.get("waits") or "").split(","):
        if ">" in wait:
            who, whom = wait.split(":", 1)[0].split(">", 1)
            named |= {who.strip(), whom.strip()}
    return named


def _in_order(may: list[list[tuple[float, float]]], after: bool) -> list[list[tuple[float, float]]] | None:
    """Of the silences each line of a file may be in (``may``, in the file's order, each sorted),
    those some order of all of them allows: each line in a silence after the one of the line before
    it (``after``; else at or after it); None: no order fits."""
    lows, low = [], (-math.inf, -math.inf)
    for silences in may:
        low = next((s for s in silences if s > low or (not after and s == low)), None)
        if low is None:
            return None
        lows.append(low)
    highs, high = [], (math.inf, math.inf)
    for silences in reversed(may):
        high = next(s for s in reversed(silences) if s < high or (not after and s == high))
        highs.append(high)
    highs.reverse()
    return [[s for s in silences if lo <= s <= hi] for silences, lo, hi in zip(may, lows, highs, strict=True)]
