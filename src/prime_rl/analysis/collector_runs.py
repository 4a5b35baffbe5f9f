"""An offline collector's sampling time, run by run and log by log.

``collect-rollouts`` logs ``[collect] run.start`` as a run starts and appends to its log when it is
run again (a crash, then the same command), so one log may hold several runs with hours between
them; several logs (shards) may run at the same time. ``collect-rollouts diagnose`` logs one
``run.start`` per pass (``mode=diagnose pass=1``, then ``pass=2``): its passes are one run, no
restart. A ``[collect]`` line is written as its sample ends: a run of a log from before
``run.start`` began at its first sample's start (the line's time less its ``dur_ms``). The collector's sampling time is the union of its runs (overlapping shards
count once). A deferred verification pass (``collect-rollouts verify``: ``verify.done`` lines, in a
log of its own or between runs of the same log) is no sampling: it ends no run and adds nothing
to the samples in flight. It is the collector at work all the same: each verification's time (the
line's time less its ``dur_ms``, to the line's time) is no time between runs, wherever the pass
lies. The time between runs is the time in which neither a run nor a verification was at work,
nor a trio whose logs are analysed with the collector's (its first to its last line: a collection
two hours before a training run leaves those two hours out of the run, as between two runs).

A line stamped before its run's ``run.start`` (more than :data:`SLACK_S`; written after it) has a
wrong time (a clock set back): it is used nowhere, as a line's without one, and counted (its
``dur_ms`` is kept: the collector measures it on a monotonic clock). A sample that would have
begun before its run's ``run.start`` (more than :data:`SLACK_S`), or, in a
log without ``run.start``, more than :data:`OLD_LOG_BEFORE_S` before the log's first line, has a
wrong ``dur_ms``: a bad value, not used (``dur_ms=1e12`` made a two-minute run 31 years long). So
has a verification that would have begun more than :data:`OLD_LOG_BEFORE_S` before its log's first
line (a verify pass logs no ``run.start``: a ``run.start`` above its lines is another run's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from prime_rl.analysis.bars import merge_intervals
from prime_rl.analysis.clock import local_time
from prime_rl.analysis.log_files import log_or_source
from prime_rl.analysis.restarts import Restart
from prime_rl.analysis.tagged import EXAMPLES, RUN_START, TaggedLines

SLACK_S = 1.0
"""How far before its run's ``run.start`` a sample may seem to begin (the line's milliseconds)."""
OLD_LOG_BEFORE_S = 86_400.0
"""In a log without ``run.start``: how far before the log's first line a sample may begin (a day:
the first line is the first sample's end, and a sample may take hours; a wrong value below a day
passes there, as a unit slip of hours would)."""
JOIN_S = 1.0
"""Verifications (``verify.done``) less than this apart are one stretch of a verify pass (its
verifier between two records), not time between runs."""


@dataclass(frozen=True)
class VerifyPasses:
    """The deferred verify passes' verifications (``verify.done``, those whose ``dur_ms`` was kept):
    how many, their summed ``dur_ms`` and the passes' wall time (the union of their times)."""

    count: int
    summed_ms: float
    seconds: float

    @property
    def in_flight(self) -> float:
        """The mean number of verifications at work over the passes' wall time (Little's law)."""
        return self.summed_ms / (1000.0 * self.seconds) if self.seconds else 0.0


def next_pass(fields: dict[str, str]) -> bool:
    """A ``run.start``'s ``fields`` say it is a pass after the first of one ``collect-rollouts
    diagnose`` (``mode=diagnose pass=N``, N above 1): the same command's run goes on, no restart
    (a collector's run.start from before ``mode=`` is a run of its own)."""
    number = fields.get("pass", "")
    return fields.get("mode") == "diagnose" and number.isascii() and number.isdigit() and int(number) > 1


def _key(b: TaggedLines) -> str:
    """The log a batch is of: rotated parts (collect.log.1, then collect.log) are one log."""
    return log_or_source(b.path, b.source)


@dataclass
class _Log:
    """One collector log's runs."""

    first: float | None = None
    """The time of its first timed [collect] line."""
    start: float | None = None
    """The time of its current run's ``run.start`` (None: none yet)."""
    runs: list[list[float]] = field(default_factory=list)
    """Each run's [start, end]."""
    verified: float = -np.inf
    """The time of its last ``verify.done`` line so far (-inf: none): a line of the log, not of a run."""


class CollectorRuns:
    """The [collect] lines' runs, per log (:meth:`observe`, batch by batch in line order)."""

    def __init__(self) -> None:
        self._logs: dict[str, _Log] = {}
        self.restarts: list[Restart] = []
        """A run after the first in the same log: ``Restart("collector", ...)`` (no steps)."""
        self._batch: tuple[str, np.ndarray, np.ndarray] | None = None
        """The last batch :meth:`see` was given: its log, every line's number and time."""
        self._verified: tuple[np.ndarray, np.ndarray] = (np.empty(0), np.empty(0))
        """Every log's verifications (``verify.done``) as (starts, ends), merged (:data:`JOIN_S`)."""
        self._verify_count, self._verify_ms = 0, 0.0
        """How many verifications were kept, and their summed ``dur_ms``."""

    def see(self, b: TaggedLines) -> None:
        """A collector log's whole batch, every tag, before anything reads it: a line stamped before
        its run's start has no time (:meth:`_forget_early`); each line's time ends the run it falls
        in (a collector that hung still logs its [server] lines: that is run time, not time between
        runs)."""
        self._forget_early(b, self._logs.setdefault(_key(b), _Log()))
        frame = b.frame
        # but a deferred verification's (collect-rollouts verify), which is no run's sampling
        verify = (frame.get_column("tag") == "collect") & (frame.get_column("event") == "verify.done")
        frame = frame.filter(~verify.fill_null(False))
        self._batch = (_key(b), frame.get_column("line").to_numpy(), frame.get_column("ts").to_numpy())

    def _forget_early(self, b: TaggedLines, log: _Log) -> None:
        """The lines stamped more than :data:`SLACK_S` before the ``run.start`` above them (this
        batch's, else ``log``'s current run's): written after it, they have a wrong time (a clock
        set back), not a wrong ``dur_ms``. Their time is used nowhere
        (:meth:`~prime_rl.analysis.tagged.TaggedLines.forget_times`), their values are; each is counted
        and the first few named by file and line (:class:`~prime_rl.analysis.tagged.ParseStats`)."""
        frame = b.frame
        starts = (
            (frame.get_column("tag") == "collect") & (frame.get_column("event") == RUN_START)
        ).fill_null(False)
        if log.start is None and not starts.any():
            return
        ts = frame.get_column("ts")
        floor = ts.zip_with(starts, ts.clear(len(ts))).forward_fill()  # the last run.start's time
        if log.start is not None:
            floor = floor.fill_null(log.start)
        early = (ts < floor - SLACK_S).fill_null(False) & ~starts
        if not early.any():
            return
        stats = b.stats
        if stats is not None:
            stats.bad_times += int(early.sum())
            for i in early.arg_true().to_list()[: max(EXAMPLES - len(stats.bad_time_examples), 0)]:
                when = local_time(ts[i], "%Y-%m-%d %H:%M:%S")
                stats.bad_time_examples.append(
                    f"{b.event(i).where()}: {when}, {floor[i] - ts[i]:.1f} s before its run's start"
                )
        b.forget_times(early)

    def observe(self, b: TaggedLines, event: pl.Series, dur: pl.Series, deferred: pl.Series) -> pl.Series:
        """Fold a batch's [collect] lines (their ``event``, the samples' ``dur_ms`` and the deferred
        verifications' ``dur_ms``, null where none); returns where either ``dur_ms`` is a bad value
        (see the module docstring), which is counted here."""
        key = _key(b)
        log = self._logs.setdefault(key, _Log())
        # the whole batch's lines (see), to end each run at its log's last line of any tag
        full = self._batch if self._batch is not None and self._batch[0] == key else None
        numbers = b.frame.get_column("line").to_numpy()
        stamps = b.frame.get_column("ts")
        verifying = (event == "verify.done").fill_null(False)
        length = dur.fill_null(deferred)  # a sample's, or a verification's
        began = stamps - length.clip(lower_bound=0.0).fill_null(0.0) / 1000.0
        starts = (event == RUN_START).fill_null(False)
        cuts = starts.arg_true().to_list() if starts.any() else []
        bounds = sorted({0, *cuts, len(event)})
        wrong: list[pl.Series] = []
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
            if lo in cuts and (ts := stamps[lo]) is not None:
                self._run_start(log, b, lo, ts)
            if full is not None and log.runs:  # the batch's lines of any tag up to the next run.start
                after = numbers[lo] if lo in cuts else -np.inf
                before = numbers[hi] if hi < len(numbers) else np.inf
                times = full[2][(full[1] >= after) & (full[1] < before)]
                times = times[~np.isnan(times)]
                if len(times):
                    log.runs[-1][1] = max(log.runs[-1][1], float(times.max()))
            n = hi - lo
            part_stamps, part_began = stamps.slice(lo, n), began.slice(lo, n)
            if log.first is None and part_stamps.null_count() < n:
                log.first = float(part_stamps.min())  # type: ignore[arg-type]
            old_floor = (log.first or 0.0) - OLD_LOG_BEFORE_S
            floor = log.start - SLACK_S if log.start is not None else old_floor
            verify = verifying.slice(lo, n)
            early = (part_began < floor) & ~verify | (part_began < old_floor) & verify
            bad = early.fill_null(False) & length.slice(lo, n).is_not_null()
            wrong.append(bad)
            self._verifications(length.slice(lo, n).filter(verify & ~bad))
            self._verified_lines(log, part_began, part_stamps, verify & ~bad)
            sampling = ~verify & ~bad
            first = part_began.filter(sampling).min()
            if first is None:
                continue
            last = float(part_stamps.filter(sampling).max())  # type: ignore[arg-type]
            if not log.runs:
                log.runs.append([float(first), last])  # type: ignore[arg-type]
            run = log.runs[-1]
            run[0], run[1] = min(run[0], float(first)), max(run[1], last)  # type: ignore[arg-type]
        refused = pl.concat(wrong) if wrong else pl.Series(dtype=pl.Boolean)
        b.refuse("dur_ms", refused)
        return refused

    def _verifications(self, durations: pl.Series) -> None:
        """Count the kept verifications' ``dur_ms`` (``durations``, null where a line has none)."""
        self._verify_count += len(durations) - durations.null_count()
        self._verify_ms += float(durations.sum() or 0.0)

    def _verified_lines(self, log: _Log, began: pl.Series, stamps: pl.Series, rows: pl.Series) -> None:
        """Keep the verifications of ``rows`` (from their start, ``began``, to their line's time) with
        every log's, and the last line's time in ``log``."""
        timed = rows & stamps.is_not_null()
        if not timed.any():
            return
        start, end = began.filter(timed).to_numpy(), stamps.filter(timed).to_numpy()
        log.verified = max(log.verified, float(end.max()))
        self._verified = merge_intervals(
            np.concatenate([self._verified[0], start]), np.concatenate([self._verified[1], end]), JOIN_S
        )

    def _run_start(self, log: _Log, b: TaggedLines, row: int, ts: float) -> None:
        """A ``run.start`` line: a new run of the log (after earlier lines of it: a restart, after the
        log's last line before it, of the run or of a verify pass); a ``collect-rollouts diagnose``
        pass after the first goes on with the run of the pass before it (:func:`next_pass`)."""
        if log.runs and next_pass(b.event(row).fields):
            log.start = ts  # its samples begin after it
            log.runs[-1][1] = max(log.runs[-1][1], ts)
            return
        if log.runs:
            gap = max(0.0, ts - max(log.runs[-1][1], log.verified))
            self.restarts.append(Restart("collector", b.event(row).where(), ts, None, None, gap))
        log.start = ts
        log.runs.append([ts, ts])

    def _merged(self, verifications: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Every log's runs (and with ``verifications``, every verify pass's verifications) as one
        time line (starts, ends): overlapping runs (shards) merged, in time order
        (:func:`~prime_rl.analysis.bars.merge_intervals`)."""
        runs = np.array([run for log in self._logs.values() for run in log.runs], dtype=np.float64).reshape(
            -1, 2
        )
        start, end = runs[:, 0], runs[:, 1]
        if verifications:
            start, end = np.concatenate([start, self._verified[0]]), np.concatenate([end, self._verified[1]])
        return merge_intervals(start, end, 0.0)

    @property
    def first(self) -> float | None:
        """When the first run or verification began (None: none)."""
        start, _ = self._merged(verifications=True)
        return float(start[0]) if len(start) else None

    def seconds(self) -> float | None:
        """The collector's sampling time: the union of its runs (None: none)."""
        start, end = self._merged()
        return float(np.sum(end - start)) or None

    def verify_passes(self) -> VerifyPasses | None:
        """The deferred verify passes' verifications, every log's (None: none kept)."""
        if not self._verify_count:
            return None
        start, end = self._verified
        return VerifyPasses(self._verify_count, self._verify_ms, float(np.sum(end - start)))

    def log(self, b: TaggedLines) -> str:
        """The log a batch is of (rotated parts are one log), as :meth:`run_ends` is given it."""
        return _key(b)

    def run_ends(self, logs: list[str], ts: np.ndarray) -> np.ndarray:
        """For each time of ``ts`` in the log of ``logs`` (:meth:`log`), the end of that log's run it
        lies in (its last line before the next ``run.start`` or the log's end: the collector was
        stopped there; a line up to :data:`SLACK_S` before a run's ``run.start`` is that run's); its own
        time where no run holds it."""
        out = np.asarray(ts, dtype=np.float64).copy()
        keys = np.array(logs, dtype=object)
        for key in set(logs):
            runs = self._logs[key].runs if key in self._logs else []
            if not runs:
                continue
            starts = np.array([r[0] for r in runs], dtype=np.float64) - SLACK_S
            ends = np.array([r[1] for r in runs], dtype=np.float64)
            rows = np.flatnonzero(keys == key)
            run = np.searchsorted(starts, out[rows], side="right") - 1
            inside = run >= 0
            out[rows[inside]] = np.maximum(out[rows[inside]], ends[run[inside]])
        return out

    def at_work(self) -> list[tuple[float, float]]:
        """The times in which a run or a verification of the collector was at work, merged, in time
        order: a trio's down time within one is no down time of the run."""
        start, end = self._merged(verifications=True)
        return list(zip(start.tolist(), end.tolist(), strict=True))

    def idle_seconds(self, beside: tuple[float, float] | None = None) -> float:
        """The time between the first start and the last end of the runs and verifications (and of
        ``beside``, the time of a trio's logs analysed with them: first to last line) in which
        neither a run, a verification nor the trio was at work."""
        start, end = self._merged(verifications=True)
        if beside is not None:
            start, end = merge_intervals(np.append(start, beside[0]), np.append(end, beside[1]), 0.0)
        return float(np.sum(start[1:] - end[:-1]))
