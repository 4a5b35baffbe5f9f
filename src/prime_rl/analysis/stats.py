"""From parsed lines to per-metric series, counts and time spans: everything the rules look at.

Which tag and event feeds which series is fixed by the tagged-line grammar in ``docs/design.md``;
the series are the ones the stats files of ``bottleneck_logs/README.md`` describe. The collector
takes the parser's batches (one file's lines, :class:`~prime_rl.analysis.tagged.TaggedLines`) tag
by tag: each tag's handler reads the fields it needs as columns, sets the per-step values of the
whole batch at once and walks the lines in order only for what pairs them (a wait with its start,
a batch with its start, a weight update's client and server lines).
"""

from __future__ import annotations

import gc
import itertools
import math
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import polars as pl

from prime_rl.analysis.bars import Bars
from prime_rl.analysis.clock_offsets import Offsets, run_window
from prime_rl.analysis.collector_runs import CollectorRuns, VerifyPasses
from prime_rl.analysis.hangs import (
    LAUNCHER_TAGS,
    Hang,
    HangLines,
    Pause,
    ProgressGaps,
    down_after_hangs,
    place_hangs,
    watched_running,
)
from prime_rl.analysis.log_files import LAUNCHER, log_or_source
from prime_rl.analysis.pairing import or_unknown, or_zero, pair
from prime_rl.analysis.rate_limits import (
    CLIENTS,
    COLLECTOR,
    COLLECTOR_429,
    COLLECTOR_COMPLETIONS,
    ORCHESTRATOR,
    RateLimitWaits,
    orchestrator_ends,
)
from prime_rl.analysis.restarts import (
    NO_TAIL,
    STEP_LINE_OF,
    QuietTail,
    Restart,
    Segments,
    fell_silent_before_start,
    last_restart,
    open_spans,
    open_time_within,
    quiet_tail,
    run_time_within,
    silent_together,
    uncovered,
)
from prime_rl.analysis.sample_spans import COLLECTOR_KINDS, SAMPLE, VERIFICATION, SampleSpans
from prime_rl.analysis.sample_spans import INFO as SAMPLE_INFO
from prime_rl.analysis.server_load import ServerLoads, ServerLoadSeries
from prime_rl.analysis.spans import KeptSpans, Part, Span, SpanBlock
from prime_rl.analysis.step_staleness import StepStaleness
from prime_rl.analysis.tagged import (
    EXAMPLES,
    NUMBER,
    RESUME_LOAD,
    RUN_START,
    STEP_NUMBER,
    Event,
    ParseStats,
    TaggedLines,
    batches_from_events,
    fields_by_key,
    start_up,
    step_numbers,
    tag_said,
)
from prime_rl.analysis.updates import (
    WEIGHTS_FIELDS,
    WEIGHTS_NUMBERS,
    Update,
    UpdateJoin,
    of_the_steps,
    prepare_weights,
    unanswered,
    update_frame,
)

SERIES = (
    "queue_ms",
    "rpc_ms",
    "wall_ms",
    "server_rpc_ms",
    "send_to_recv_ms",
    "ckpt_wait_ms",
    "write_ms",
    "publish_ms",
    "gen_dur_ms",
    "verify_dur_ms",
    "trunc_pct",
    "staleness",
    "retry_wait_ms",
    "rate_limit_wait_ms",
    "collect_ms",
    "collect_done_ms",
    "train_wait_ms",
    "train_ms",
    "collect_queue_ms",
    "collect_gen_ms",
    "collect_verify_ms",
    "collect_deferred_verify_ms",
    "env_ms",
    "tool_ms",
    "episode_gen_ms",
    "episode_turns",
    "verify_tail_ms",
    "lock_wait_ms",
    "server_ms",
    "validate_ms",
)
"""Every per-metric series, in the order summary.json lists them."""

UPDATE_SERIES = (
    "queue_ms",
    "rpc_ms",
    "wall_ms",
    "server_rpc_ms",
    "send_to_recv_ms",
    "lock_wait_ms",
    "server_ms",
    "validate_ms",
)
"""The series taken from the joined weight updates (one value per update)."""
_UPDATE_COLUMNS = ("queue", "rpc", "wall", "server_rpc", "send_to_recv", "lock", "handling", "validate")
"""Their columns in :func:`~prime_rl.analysis.updates.update_frame`."""


REPEATED = "repeated."
"""The prefix of :attr:`Collected.counts`' keys that count the lines that set a per-step series'
step again in the run (segment) that had set it (``repeated.gen_dur_ms``): the last line wins, as a
restart's does, and the lines are named in a warning (:attr:`Collected.repeated_steps`)."""

AT_NO_STEP = "nostep."
"""The prefix of :attr:`Collected.counts`' keys that count the values of a per-step series
(:data:`PER_STEP`) on lines at no step (``nostep.staleness``): kept in the series, in no step's value."""

PER_STEP = {
    "gen_dur_ms": "gen",
    "verify_dur_ms": "verify",
    "verify_tail_ms": "verify",
    "trunc_pct": "rollout",
    "staleness": "rollout",
    "train_wait_ms": "train",
    "train_ms": "train",
    "write_ms": "write",
    "publish_ms": "train",
}
"""Series with one value per step: a step done again after a restart replaces its first value (the
values replaced are time the earlier run spent all the same: :attr:`Collected.earlier_runs_ms`,
which :meth:`Collected.total` adds). Not ``ckpt_wait_ms``: every wait for weights is time the
orchestrator waited (a crashed run's wait for weights step N and its resume's later wait for the
same N alike), so each ``[ckpt] wait.done`` adds its ``wait_ms``, in line order, but a resume's load
of weights: the resumed orchestrator's wait before its first batch
(:func:`~prime_rl.analysis.tagged.start_up`), while the resumed trainer loads its checkpoint and
publishes them again, is start-up, as the trainer's first wait for rollouts of each run is (counted
apart: ``ckpt_startup_wait_ms``)."""

ONE_AT_A_TIME = ("gen_dur_ms", "ckpt_wait_ms", "train_ms", "train_wait_ms", "publish_ms", "write_ms")
"""Series whose values are wall time one at a time within their process (a batch, a wait, a step's
compute, its publish: the next begins after the last ends): their summed time can be no longer
than the run, so a stage's or a finding's share of the run made of it is at most 100%.
:meth:`Collected.total` clips it to the run's time: a sum that passes it holds a duration that
began before the logs did (a log that starts mid-run, rotated parts missing; a wait logged when it
ends), or one no run can have (``wait_ms=1e15``, a unit bug's 400 s wait in a 35 s run), whose
time within the run cannot be told. Such a value is kept in the series (its statistics show it);
the clip is named in the warnings (:meth:`Collected.clipped`)."""
SERIAL = ("gen_dur_ms", "ckpt_wait_ms")
"""The series of :data:`ONE_AT_A_TIME` logged by the orchestrator, one process: each of its values
begins no earlier than the one before it in its log ended (a value that reaches back over it holds
time no run can have, counted from that end: :meth:`_Collector.reaching_back`). Not the trainer's:
its ranks may log into one file."""
ROUNDING_S = 0.01
"""How far a duration may reach back over the end of the one before it in its series (:data:`SERIAL`)
or before the logs' window (:attr:`Collected.before_logs_ms`) and be counted whole: a line's time is
to the millisecond, its duration finer (a batch of 8412.7 ms logged at .963 after one that ended at
.551)."""
CLIPPED_NAMED = 0.01
"""A clip (:data:`ONE_AT_A_TIME`) is named when the series' sum passes the run's time by more than
this part of it (the times of a log's lines are to the millisecond, its durations finer)."""

SPANS_KEPT = 20_000
"""Spans of each kind kept from the start of the run, and as many from its end: timeline.txt and
the trace of a long run show its first and last steps; the spans between are counted
(``Collected.spans_dropped``). timeline.png (``Collected.bars``) and the statistics use every span
and line whatever this limit."""
SAMPLES_KEPT = 2_000
"""An offline collector's samples kept from its start and as many from its end (timeline.txt's
lines; at most :data:`SPANS_KEPT`): a collector's log has a sample a line, and the trio's 20,000 of
each kind would be 40,000 lines of samples, 0.15 s of a 1M-line log's report to write, for a listing
whose start and end show how the run went. A deferred verify pass's verifications (a line each
too) are kept as many."""


def kept_of(kind: str) -> int:
    """How many of the first (and of the last) spans of ``kind`` are kept."""
    return min(SAMPLES_KEPT, SPANS_KEPT) if kind in COLLECTOR_KINDS else SPANS_KEPT


def describe(values: Iterable[float | None]) -> dict[str, float]:
    """count, mean, stddev, min, p50, p95, p99, max (linear interpolation percentiles); None and NaN
    are left out."""
    if isinstance(values, array):
        vals = (
            np.frombuffer(values, dtype=np.float64) if values.typecode == "d" else np.asarray(values, float)
        )
    else:
        vals = np.asarray([v for v in values if v is not None], dtype=np.float64)
    vals = np.sort(vals[~np.isnan(vals)])
    n = len(vals)
    if not n:
        return {"count": 0}
    p50, p95, p99 = np.percentile(vals, [50, 95, 99])  # numpy's default is the linear interpolation
    return {
        "count": n,
        "mean": float(vals.mean()),
        "stddev": float(vals.std(ddof=1)) if n > 1 else 0.0,
        "min": float(vals[0]),
        "p50": float(p50),
        "p95": float(p95),
        "p99": float(p99),
        "max": float(vals[-1]),
    }


class ScoringPairs(NamedTuple):
    """Scoring against the batches, like with like: of the steps with both a summed scoring time
    ([verify] cpu_ms or dur_ms) and a batch time above 0 ([gen] batch.done dur_ms), their summed
    scoring and their batches' time (ms) and how many they are; and the steps with a scoring time and
    no batch time (no batch line: their scoring lies in no batch the logs time), how many, and their
    summed scoring (ms)."""

    scoring_ms: float
    batch_ms: float
    steps: int
    unpaired_steps: int
    unpaired_ms: float


@dataclass
class Collected:
    """What the logs say, before any judgement: the input of every rule and of the report."""

    parse: ParseStats
    updates: Sequence[Update]
    """The weight updates in order (an :class:`~prime_rl.analysis.updates.UpdateTable` from the
    join: columns, records made when asked); their columns: :meth:`update_frame`."""
    spans: Sequence[Span]
    """In start order (from the logs: :class:`~prime_rl.analysis.spans.KeptSpans`, made when asked)."""
    series: dict[str, array]
    """Each :data:`SERIES` as an ``array('d')`` of its values (8 bytes a value)."""
    counts: Counter
    async_level: int | None
    """The ``async_level`` given (``--async-level``, else the run's config): the bound of the
    staleness of [rollout] lines whose run did not say its own (a ``[gen] run.start`` without
    ``async_level=``, or before any); a run that said its own is judged by that, what it ran with."""
    run_seconds: float | None = None
    """First to last timestamped event, less :attr:`down_seconds` (None with fewer than two distinct
    timestamps)."""
    staleness_by_step: StepStaleness = field(default_factory=StepStaleness)
    """[rollout] staleness of each step's batch (its oldest sample), by ``current_step``, with each
    line's run's ``async_level``."""
    restarts: list[Restart] = field(default_factory=list)
    """Where a process started again in the same log (a crash and a ``--resume``), each restart of the
    orchestrator with the watchdog's hangs before it (:attr:`Restart.hangs_before`)."""
    last_events: dict[str, Event] = field(default_factory=dict)
    """The last tagged event of each process (by file label)."""
    open_wait: tuple[str, float | None, Event] | None = None
    """The orchestrator's last [ckpt] wait.start with no wait.done after it: (target step, since, event)."""
    open_batch: Event | None = None
    """The orchestrator's last [gen] batch.start with no batch.done after it."""
    last_write: Event | None = None
    """The trainer's last [ckpt] write.done."""
    server_counts: dict[str, Counter] = field(default_factory=dict)
    """Per server URL: the orchestrator's retried requests by status (``retry.429``, ``retry.error``,
    ...; ``[gen] request.retry``), the collector's apart (``collect.retry.429``, ...; ``[collect]
    request.retry``), and the collector's failed samples (``failed``)."""
    verify_workers: int | None = None
    """Verifier processes ([verify] workers= or the run's config), for verification's utilisation."""
    server_load: dict[str, ServerLoadSeries] = field(default_factory=dict)
    """Per server URL: its load scraped from /metrics ([server] lines, :mod:`~prime_rl.analysis.server_load`)."""
    server_gen_ms: dict[str, array] = field(default_factory=dict)
    """Per server URL: the collector's generation time of each sample it answered ([collect] url=)."""
    hangs: list[Event] = field(default_factory=list)
    """The ``rl`` launcher watchdog's ``[hang] detected`` lines since the orchestrator's last restart
    after which the run did not go on: no process made progress (those before it after which its
    run went on no further are in :attr:`restarts`, those a run went on after in :attr:`pauses`; a
    line with no time goes by its position, :func:`~prime_rl.analysis.hangs.place_hangs`, and is
    judged by the times around it, or stays here when they do not tell: :attr:`hangs_untold`)."""
    spans_dropped: dict[str, int] = field(default_factory=dict)
    """Spans of each kind (sorted by kind) left out of ``spans`` between the first and last :data:`SPANS_KEPT`."""
    spill_failed: str | None = None
    """Why the weight-update lines stayed in memory instead of waiting for their join on disk (None:
    they went to disk, or there were too few to need it)."""
    bars: dict[str, Bars] = field(default_factory=dict, compare=False, repr=False)
    """Every span of each kind, kept or not, as merged bars (:mod:`~prime_rl.analysis.bars`): the
    rows of timeline.png. Empty: the plot makes them from :attr:`spans`."""
    down_seconds: float = 0.0
    """Time between a crash and its resume in which no process ran (:meth:`Segments.down_intervals`,
    each begun no earlier than the watchdog's last ``[hang]`` line or the launcher's ``[launcher]
    child.exit`` / ``interrupted`` line in it: :func:`down_after_hangs`; less where a collector's run or verify pass was at work: :meth:`CollectorRuns.at_work`; of
    a collector's logs, when neither a run, a deferred verification nor the trio whose logs are
    analysed with them (first to last line) was at work: :meth:`CollectorRuns.idle_seconds`):
    left out of :attr:`run_seconds`, so the shares of the run are of the time it ran."""
    clock_offsets: Offsets = field(default_factory=dict)
    """Server logs whose clock is off the orchestrator's: (seconds ahead, updates measured on)
    (:mod:`~prime_rl.analysis.clock_offsets`); :attr:`run_seconds` has their times moved by it."""
    train_wait: Event | None = None
    """The trainer's wait for rollouts open where its log ends ([train] wait.start, no wait.done)."""
    rate_limits: RateLimitWaits = field(default_factory=RateLimitWaits, repr=False)
    """Each wait after a 429 (``request.retry status=429 wait_ms=``), the orchestrator's and the
    collector's apart (:class:`~prime_rl.analysis.rate_limits.RateLimitWaits`)."""
    batch_windows: array = field(default_factory=lambda: array("d"), repr=False)
    """Each generation batch with a time (``[gen] batch.start`` to ``batch.done``, else its ``dur_ms``
    before its ``batch.done``) as (start, end) seconds, in pairs: what the orchestrator's waits after
    a 429 are compared with (:func:`~prime_rl.analysis.stages.rate_limit_parts`)."""
    collect_seconds: float | None = None
    """The offline collector's sampling time: the union of its runs, log by log
    (:class:`~prime_rl.analysis.collector_runs.CollectorRuns`; None: none). Its samples in flight
    are measured over it, not over the run, which a trio's logs analysed beside it make longer."""
    hangs_unplaced: list[Event] = field(default_factory=list)
    """``[hang] detected`` lines with no time that a restart of the orchestrator may lie before or
    after (:func:`~prime_rl.analysis.hangs.place_hangs`): neither this run's nor a restart's."""
    verify_passes: VerifyPasses | None = None
    """The collector's deferred verify passes (``collect-rollouts verify``: ``verify.done``): their
    verifications' count, summed ``dur_ms`` (each in the ``collect_deferred_verify_ms`` series, never
    in the samples' ``collect_verify_ms``) and wall time (None: none)."""
    verify_busiest: tuple[str, float, float] | None = None
    """The step whose scoring time summed over its completions ([verify] cpu_ms or dur_ms) is the
    largest multiple of its batch's wall time ([gen] batch.done dur_ms): (step, summed ms, batch ms);
    None without a step that has both. Above 1, the verifier's workers ran side by side: at least
    that many of them (:func:`~prime_rl.analysis.stages.fewest_verify_workers`)."""
    verify_paired: ScoringPairs | None = None
    """The steps with both a summed scoring time and a batch time, and those with scoring alone
    (:class:`ScoringPairs`); None without a step that has both."""
    pauses: list[Pause] = field(default_factory=list)
    """The watchdog's hangs after which every process they named made progress again within their
    run, before the orchestrator's next restart if any
    (:meth:`~prime_rl.analysis.hangs.ProgressGaps.pause`): the run paused, then went on."""
    hangs_untold: list[Hang] = field(default_factory=list)
    """Those of :attr:`hangs` whose line has no time and whose placement (the times around it in its
    file) leaves none or several silences of the logs it may have ended: whether the run went on
    after it is not known (:meth:`~prime_rl.analysis.hangs.ProgressGaps.pause`)."""
    paused_seconds: float | None = None
    """The :attr:`pauses`' time in the run's time: their union (two [hang] lines in one pause count
    it once), less any down time and the start-up the run's time leaves out
    (:func:`~prime_rl.analysis.restarts.run_time_within`; None: not known, their union)."""
    step_seconds: dict[str, float] = field(default_factory=dict)
    """By process, its pace: the median time between two consecutive step lines of one of its runs
    (:meth:`~prime_rl.analysis.restarts.Segments.step_seconds`); the stall rule judges a silence of
    the process by it."""
    earlier_runs_ms: dict[str, float] = field(default_factory=dict)
    """By per-step series (:data:`PER_STEP`), the sum of the values a later run replaced: each step's
    last value in each run of its process but the last that logged it (a step logged twice within
    one run is one value). It is time the earlier run spent, which the run's wall time holds:
    :meth:`total` adds it; the statistics keep one value per step."""
    overlapping: list[str] = field(default_factory=list)
    """The first few values of :data:`SERIAL` that reached back over the end of the one before them
    in their series (``file:line: series N ms``; counted in :attr:`counts`: ``overlapping.<series>``):
    counted from that end (:attr:`before_logs_ms`)."""
    first_ts: float | None = None
    """The logs' window's start (the run's first time, on the orchestrator's clock; None: unknown):
    a duration known from its done line alone counts from no earlier (:attr:`before_logs_ms`; a
    weight update's: :func:`~prime_rl.analysis.stages.update_critical`)."""
    before_logs_ms: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """By series of :data:`ONE_AT_A_TIME`, its durations that reach out of their bounds, each as (its
    value, its part within them), ms: one that began before the run's first line (a log that starts
    mid-run, its wait or batch begun in a rotated part that is gone) counts from that line on, as a
    429 wait is cut at the window; one of :data:`SERIAL` that reaches back over the end of the one
    before it (:attr:`overlapping`), from that end (:meth:`_Collector.reaching_back`). :meth:`total`
    counts their parts within (:meth:`counted`); the values stay whole in their statistics."""
    silences: list[tuple[float, float]] = field(default_factory=list)
    """In logs without run.start lines (none of the orchestrator's or the trainer's): the times in which
    the orchestrator and the trainer were silent at once (no line with a time), outside any down time
    (:func:`~prime_rl.analysis.restarts.silent_together`): a restart that redid no step is not found
    there, and a resume's start-up may hide its crash; the warnings name the long ones."""
    open_ms: dict[str, float] = field(default_factory=dict)
    """By series (``gen_dur_ms``, ``ckpt_wait_ms``, ``train_wait_ms``, ``train_ms``), the run time of the
    batches, waits and computes no line ended: each from its open line (``[gen] batch.start``, ``[ckpt]
    wait.start``, the trainer's ``[train] wait.start`` but a run's first, its ``wait.done`` with no
    ``compute.done`` nor ``step.done`` after it: :meth:`_Collector._unfinished_steps`) to where the
    down time after it begins (a crash
    of the whole run, then a resume; else, its process crashed alone, that process's last line before
    its restart) or the logs end (the stall rule's wait open at their end), less down time
    (:func:`~prime_rl.analysis.restarts.open_time_within`). It is time the stage
    spent in the run's wall time: :meth:`total` adds it."""
    open_updates: pl.DataFrame | None = None
    """The steps' weight updates never answered (:func:`~prime_rl.analysis.updates.unanswered`), each
    counted from its ``client.send`` to where the down time after it begins (the orchestrator died
    waiting: a crash of the whole run, then a resume; else, the orchestrator crashed alone, its last
    line before its restart) or the logs end, less down time, as the batches and waits left open
    (:attr:`open_ms`): ``k`` (its row of :meth:`update_frame`),
    ``open_wall`` (ms), ``open_handling`` (the part after its server's ``server.recv``; null: none)
    and ``open_rpc`` (the part after the server's ``rpc.start`` that no ``rpc.done`` followed; null:
    none). :func:`~prime_rl.analysis.stages.update_critical` counts them; None: no such update."""
    orchestrator_fell_silent: list[float] = field(default_factory=list)
    """For each restart of the orchestrator with a time, in order, when its crashed run fell silent
    (:meth:`_Collector._fell_silent`: its last line before the silence before a ``run.start``; before a
    restart found by its step going back, where its silence began): its lines after that, a resume's
    start-up too, are the resumed run's. :func:`~prime_rl.analysis.stages.update_critical` splits the
    weight updates into the orchestrator's runs there."""
    _described: dict[str, dict[str, float]] = field(default_factory=dict, repr=False, compare=False)
    _memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    repeated_steps: list[str] = field(default_factory=list)
    """The first few lines that set a per-step series' step again in the run that had set it (no
    restart between: the last line wins), one a line, with the line that had set it, as ``file:line
    then file:line (kept): series, ... step N ([tag] event)``; counted by series in :attr:`counts`
    (``repeated.<series>``)."""

    def rate_limited_ms(self, client: str | None = None) -> float:
        """The wall time in which some request (of ``client``, ``orchestrator`` or ``collector``; None:
        of either) waited after a 429 (the union of the waits: concurrent requests wait together, so
        their summed waits can be many times the run), ms; without the waits' times, their sum, at
        most the run."""
        return self.memo(f"rate_limited_ms.{client}", lambda: self._rate_limited_ms(client))

    def _rate_limited_ms(self, client: str | None) -> float:
        clients = CLIENTS if client is None else (client,)
        merged = self.rate_limits.merged(*clients)
        if merged is None:  # the waits' sum: of both clients' lines, less those cut (RateLimitWaits.clip)
            whole = client is None and not any(self.rate_limits.cut_ms.values())
            summed = (
                self.total("rate_limit_wait_ms")
                if whole
                else math.fsum(self.rate_limits.untimed_ms[c] for c in clients)
            )
            return min(summed, self.run_ms or math.inf)
        start, end = merged  # the stretches in which some request waited
        return float(np.sum(end - start)) * 1000.0

    def memo(self, key: str, make: Callable[[], Any]) -> Any:
        """``make()`` computed once for this collection (rules and report sections ask for the same
        per-update tables several times; the collection does not change after it is made)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    @property
    def orchestrator_restarted(self) -> float | None:
        """The time of the orchestrator's last restart (None: none with a time): what it waited for
        before is over."""
        return last_restart(self.restarts)

    def update_frame(self) -> pl.DataFrame:
        """The updates as columns, in order (:func:`~prime_rl.analysis.updates.update_frame`, made once)."""
        return self.memo("update_frame", lambda: update_frame(self.updates))

    @property
    def run_ms(self) -> float:
        """The run's length in ms; 0.0 when unknown."""
        return (self.run_seconds or 0) * 1000.0

    def describe(self, key: str) -> dict[str, float]:
        """:func:`describe` of one series (computed once; the series do not change after collection)."""
        out = self._described.get(key)
        if out is None:
            out = self._described[key] = describe(self.series[key])
        return out

    def stat(self, key: str, what: str) -> float | None:
        """One statistic of a series (``mean``, ``p50`` ...); None when the series is empty."""
        return self.describe(key).get(what)

    def total(self, key: str) -> float:
        """The time spent in a series: its sum, in line order, and for a per-step series the values of
        steps a later run redid (:attr:`earlier_runs_ms`): a stage's total is time spent in the run's
        wall time (computed once)."""
        return self.memo(("total", key), lambda: self._total(key))

    def overlapped(self) -> list[tuple[str, int]]:
        """By series of :data:`SERIAL`, how many of its values reached back over the one before them."""
        return [
            (key, self.counts[f"overlapping.{key}"]) for key in SERIAL if self.counts[f"overlapping.{key}"]
        ]

    def _total(self, key: str) -> float:
        out = self.counted(key)
        run = self.run_ms
        return min(out, run) if key in ONE_AT_A_TIME and run else out

    def summed(self, key: str) -> float:
        """:meth:`total` before a series of :data:`ONE_AT_A_TIME` is clipped to the run's time."""
        out = sum(self.series[key])
        out = out + self.earlier_runs_ms[key] if key in self.earlier_runs_ms else out
        return out + self.open_ms[key] if key in self.open_ms else out

    def clipped(self) -> list[tuple[str, float]]:
        """The series of :data:`ONE_AT_A_TIME` whose summed time passes the run's by more than
        :data:`CLIPPED_NAMED` of it, with that sum (ms): their :meth:`total` is the run's time."""
        run = self.run_ms
        return [
            (key, self.counted(key))
            for key in ONE_AT_A_TIME
            if run and self.series[key] and self.counted(key) > run * (1 + CLIPPED_NAMED)
        ]

    def counted(self, key: str) -> float:
        """:meth:`summed` with each value cut (:attr:`before_logs_ms`) counted as its part within its
        bounds (an exact sum: a cut value of 1e300 ms would leave nothing of the others)."""
        cut = self.before_logs_ms.get(key)
        if not cut:
            return self.summed(key)
        values = np.asarray(self.series[key], dtype=np.float64)
        left = np.ones(len(values), dtype=bool)
        for whole, _ in cut:  # each cut value out of the series once (its part within is added)
            at = np.flatnonzero(left & (values == whole))
            if len(at):
                left[at[0]] = False
        rest = [self.earlier_runs_ms.get(key, 0.0), self.open_ms.get(key, 0.0), *(kept for _, kept in cut)]
        try:
            return math.fsum([*values[left].tolist(), *rest])
        except OverflowError:  # values whose sum is no float: more than any run
            return math.inf

    def staleness_histogram(self) -> dict[int, int]:
        """Steps per staleness value (from [rollout] lines)."""
        return self.staleness_by_step.histogram()

    def staleness_at_no_step(self) -> list[int]:
        """The staleness of every [rollout] line at no step (its ``current_step`` none or no step
        number) above the async_level of its run (else the one given), in line order."""
        return self.staleness_by_step.above_at_no_step(self.async_level)

    def staleness_violations(self) -> list[tuple[int, int]]:
        """(step, staleness) of every step whose staleness is above the async_level of its run
        (:attr:`async_level` where the run did not say; unknown: none)."""
        return self.staleness_by_step.above(self.async_level)

    def async_levels(self) -> list[int]:
        """The async_level the [rollout] lines were judged by, each once, in the order of the runs
        (:meth:`StepStaleness.levels`)."""
        return self.staleness_by_step.levels(self.async_level)

    def async_level_text(self) -> str:
        """:meth:`async_levels` as the report names them: ``1``; ``2, then 1 (each run's own, ...)``
        where the runs' differ or differ from the one given; ``unknown``."""
        levels = self.async_levels()
        text = ", then ".join(map(str, levels)) or "unknown"
        if len(levels) > 1 or (self.async_level is not None and levels != [self.async_level]):
            text += " (each run's own, from its [gen] run.start line; else the one given)"
        return text

    @property
    def nothing_tagged(self) -> bool:
        """Files were read and not one line of them is a tagged timing line (the wrong file, an empty log)."""
        return bool(self.parse.files) and not self.parse.tagged

    @property
    def is_collector_run(self) -> bool:
        """[collect] lines and none of the trio's: an offline collection, which never updates weights."""
        return collector_only(self.counts)


def collector_only(counts: Counter) -> bool:
    """The lines counted (``tag.event``) are [collect] lines and none of the trio's."""
    trio = ("gen.", "ckpt.", "train.", "weights.", "rollout.", "verify.batch")
    has = lambda prefix: any(k.startswith(prefix) and n for k, n in counts.items())  # noqa: E731
    return has("collect.") and not any(has(p) for p in trio)


_TAGS = frozenset(("weights", "ckpt", "gen", "rollout", "verify", "train", "collect", "env", "server"))
"""The tags the collector folds, each by its method of the same name (the [hang] lines are read
with the lines around them, :class:`~prime_rl.analysis.hangs.HangLines`)."""

FIELDS: dict[str, tuple[str, ...]] = {
    "weights": WEIGHTS_FIELDS,
    "ckpt": ("target_step", "step", "wait_ms", "write_ms", "background"),
    "gen": ("step", "completions", "dur_ms"),
    "rollout": ("current_step", "trunc_pct", "staleness"),
    "verify": ("step", "cpu_ms", "dur_ms", "tail_ms", "workers"),
    "train": ("step", "wait_ms", "train_ms", "write_ms", "fwd_bwd_ms", "optim_ms"),
    "collect": ("url", "status", "dur_ms", "queue_ms", "gen_ms", "verify_ms"),
    "env": ("env_ms", "tool_ms", "gen_ms", "turns", "tool_errors", "outcome"),
}
"""The fields each tag's handler reads on every line (read in one query, by :func:`prepared`)."""

_DONE = ("batch.done",)
NUMBERS: dict[str, tuple[tuple[str, tuple[str, ...] | None], ...]] = {
    "weights": WEIGHTS_NUMBERS,
    "ckpt": (("wait_ms", ("wait.done",)), ("write_ms", ("write.done",))),
    "gen": (("dur_ms", _DONE), ("completions", _DONE)),
    "rollout": (("trunc_pct", None), ("staleness", None)),
    "verify": (("cpu_ms", _DONE), ("dur_ms", _DONE), ("tail_ms", _DONE), ("workers", _DONE)),
    "train": (
        ("wait_ms", ("step.done",)),
        ("wait_ms", ("wait.done",)),
        ("train_ms", ("step.done", "compute.done")),
        ("write_ms", ("step.done", "compute.done")),
        ("fwd_bwd_ms", ("compute.done",)),
        ("optim_ms", ("compute.done",)),
    ),
    "collect": (
        ("queue_ms", ("rollout.done",)),
        ("gen_ms", ("rollout.done",)),
        ("verify_ms", ("rollout.done",)),
        ("dur_ms", ("verify.done",)),
    ),
}
"""The numbers (field, the events whose lines are read) each tag's handler reads, converted ahead
by :func:`prepared`: each is one of the handler's own :meth:`~TaggedLines.num_series` calls."""

STEPS: dict[str, tuple[str, ...]] = {
    "ckpt": ("target_step", "step"),
    "gen": ("step",),
    "rollout": ("current_step",),
    "verify": ("step",),
    "train": ("step",),
}
"""The fields each tag's handler keeps per-step values by (:meth:`~TaggedLines.step_numbers`, made
ahead by :func:`prepared`)."""

_MORE_NUMBERS = {"collect": ("dur_ms",)}
"""Fields a handler converts on lines known from its batch alone (not in :data:`NUMBERS`)."""

FIELD_KINDS: dict[str, dict[str, int]] = {
    tag: {
        key: (
            NUMBER
            if any(k == key for k, _ in NUMBERS.get(tag, ())) or key in _MORE_NUMBERS.get(tag, ())
            else 0
        )
        | (STEP_NUMBER if key in STEPS.get(tag, ()) else 0)
        for key in keys
    }
    for tag, keys in FIELDS.items()
}
"""Which of :data:`FIELDS` are numbers (:data:`NUMBERS` and the like) and :data:`STEPS`: the C scan
reads those as numbers too (a plain decimal's number, or a step's digits); polars still casts a
tag's column of a batch where any of its values is other text, or a line was not taken apart by the
scan."""


def prepared(batches: Iterator[TaggedLines]) -> Iterator[TaggedLines]:
    """``batches``, each split by tag with each tag's :data:`FIELDS` read: the polars part of the
    collection, which the parse's thread does (:mod:`~prime_rl.analysis.read_ahead`) while the
    collector's Python folds the batch before."""
    try:
        for b in batches:
            b.overview()
            for tag, lines in b.by_tag():
                keys = FIELDS.get(tag)
                if keys:
                    lines.fields(*keys)
                    lines.numbers(*NUMBERS.get(tag, ()), steps=STEPS.get(tag, ()))
                if tag == "weights":
                    prepare_weights(lines)
            yield b
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


Position = tuple[int, int]
"""Where a line lies in the order of the logs: (batch number, its line number)."""


def _first(rows: pl.Series) -> int | None:
    """The first row that is true (None: none)."""
    return rows.arg_max() if rows.any() else None


def _in_order(keys: pl.Series, values: pl.Series) -> list[tuple[str, pl.Series]]:
    """``values`` grouped by ``keys``, the keys in the order they first appear, each group's values
    in row order."""
    frame = pl.DataFrame({"key": keys, "value": values})
    return [
        (part.item(0, "key"), part.get_column("value"))
        for part in frame.partition_by("key", maintain_order=True)
    ]


def _extend(series: array, values: pl.Series) -> None:
    """Append a Float64 column's values (nulls left out) to a series, in order, from their memory
    (no Python float per value)."""
    series.frombytes(values.drop_nulls().to_numpy().astype(np.float64, copy=False).tobytes())


_NO_MARKS: tuple[np.ndarray, np.ndarray, np.ndarray, float] = (
    np.empty(0, np.int64),
    np.empty(0),
    np.empty(0),
    math.nan,
)
"""No lines of :attr:`_Collector.open_marks`, nothing open after them."""
_TRAIN_STEP_ENDS = ("step.done", "wait.start", RUN_START)
"""The trainer's lines after which no step is left unfinished: its ``step.done``, or a new wait or
process (:meth:`_Collector._unfinished_steps`)."""
_TRAIN_STEP_MARKS = ("wait.done", "compute.done", *_TRAIN_STEP_ENDS)
"""The trainer's lines :meth:`_Collector._unfinished_steps` follows a step by."""
_HISTORY = 8
"""The trainer's last lines of :data:`_TRAIN_STEP_MARKS` (but ``compute.done``) with no ``step.done``
after them that :meth:`_Collector._unfinished_steps` carries to the next batch: a resume logs two
(its ``wait.start`` and ``wait.done``) before its first ``step.done``, where logs without
``run.start`` lines find its restart."""


class _Unfinished(NamedTuple):
    """A step of the trainer with a ``wait.done`` and no ``step.done`` (yet): the ``wait.done``'s line,
    its step, its row in the current batch (-1: an earlier batch's) and wait_ms (None: start-up or
    none), the row and train_ms of a ``compute.done`` of the step after it (-1, None: none), the
    segment of its process the lines are in, and the ``wait.done``'s time (NaN: none), where its
    compute began."""

    line: int
    step: str | None
    wait_row: int
    wait: float | None
    compute_row: int
    compute: float | None
    segment: int
    since: float


class _Collector:
    """Folds batches of tagged lines into series, counts and spans; one method per tag, which reads
    the columns it needs and walks the lines in order (a tag's lines keep their order; only the
    restarts relate lines of different tags, by position)."""

    def __init__(self, spill_dir: str | Path | None = None) -> None:
        self.series: dict[str, array] = {k: array("d") for k in SERIES}
        self.spans = _Spans()
        self.samples = SampleSpans(self.spans, kept_of(SAMPLE))
        """The offline collector's samples ([collect] lines with a ``dur_ms``) as spans and bars."""
        self.verifications = SampleSpans(
            self.spans, kept_of(VERIFICATION), VERIFICATION, (), lambda _: VERIFICATION
        )
        """A deferred verify pass's verifications ([collect] verify.done) as spans and a row of bars."""
        self.counts: Counter = Counter()
        self.repeated_examples: dict[str, tuple[str, str, list[str]]] = {}
        """The first few lines that set a step again in its run, by ``file:line``: (the line that had set
        it, what it is: ``step N ([tag] event)``, the series it set again)."""
        self.files: dict[str, int] = {}
        """Each file's number (:meth:`_PerStep.set_many`'s ``file``), by its path."""
        """The first few lines that set a step again in the same run (:meth:`_per_step`)."""
        self.join = UpdateJoin(spill_dir=spill_dir)
        self.open_gen: dict[str, float] = {}
        self.open_wait: dict[str, float] = {}
        self.last_wait: tuple[Position, TaggedLines, int, str] | None = None
        """The last [ckpt] wait.start with no wait.done after it: where, its batch, row, target."""
        self.staleness_by_step = StepStaleness()
        self.run_level = -1
        """The ``async_level`` of the orchestrator's current run (its last ``[gen] run.start``'s; -1:
        not said)."""
        self.run_starts: tuple[np.ndarray, np.ndarray, int] = (np.empty(0), np.empty(0, np.int64), -1)
        """The batch's ``[gen] run.start`` lines (their ``line``, in order), their ``async_level``
        (-1: none) and the level before the batch (:meth:`_run_levels`)."""
        self.by_step: dict[str, _PerStep] = {k: _PerStep() for k in PER_STEP}
        self.batches_started = 0
        self.segments = Segments()
        self.segment_starts: tuple[np.ndarray, int] = (np.empty(0, np.int64), 0)
        """The batch's lines that start a new segment of its process (their ``line``, in order) and
        the segment its lines before them are in (:meth:`_segment_starts`)."""
        self.segments_begun: Counter = Counter()
        """By process, its restarts before the current batch: the segment its lines are in there
        (the first is 0)."""
        self.restarted: Position = (-1, -1)
        """Where the orchestrator last started again: what was open before it is no longer waited on."""
        self.last_start: tuple[Position, TaggedLines, int] | None = None
        """The last [gen] batch.start with no batch.done after it."""
        self.last_write: tuple[TaggedLines, int] | None = None
        self.server_counts: dict[str, Counter] = {}
        self.verify_workers: int | None = None
        self.server_loads = ServerLoads()
        self.hangs = HangLines()
        self.progress = ProgressGaps()
        self.resume_loads = np.empty(0, np.int64)
        """The batch's ``[ckpt] wait.done`` lines (their ``line``) that end a resume's load of weights:
        start-up, no wait of the run's (:meth:`_resume_loads`)."""
        self.recent_waits: dict[int, tuple[float, int]] = {}
        """The orchestrator's ``[ckpt] wait.done`` lines counted as waits of the run that a restart found
        in a later batch may find its resume's load
        (:attr:`~prime_rl.analysis.restarts.Segments.waits_since_step`): by ``line``, its ``wait_ms``
        and its place in the ``ckpt_wait_ms`` series (:meth:`_earlier_loads`)."""
        self.loading: dict[str, bool] = {}
        """By source, whether its last ``[gen]`` run.start or batch.start so far is a run.start: a
        wait for weights now is a resume's load."""
        self.train_wait: tuple[TaggedLines, int] | None = None
        """The trainer's last [train] wait.start with no wait.done (nor run.start) after it."""
        self.trainer_starting = False
        """The trainer started again (run.start) and has logged no step.done since."""
        self.unfinished: dict[str, list[tuple[int, float, _Unfinished | None]]] = {}
        """By source, the trainer's lines of :data:`_TRAIN_STEP_MARKS` but ``compute.done`` since its
        last ``step.done`` (and restart), each as its ``line``, time and the step it began (its
        ``wait.done``; None: a step ended, or a new wait or process): the last is a step it may never
        finish (:meth:`_unfinished_steps`)."""
        self.unfinished_file: dict[str, Path | None] = {}
        """By source, the file whose lines :attr:`unfinished` names by their ``line``: a later file's
        lines start again at 1, and each of that file's is after every one of them."""
        self.rate_limits = RateLimitWaits()
        self.batch_windows = array("d")
        self.server_gen_ms: dict[str, array] = {}
        self.collector_runs = CollectorRuns()
        self.compute_start: dict[str, float] = {}
        self.reach_back: list[tuple[str, str, float, float, float]] = []
        """Durations of :data:`ONE_AT_A_TIME` that may have begun before the logs' window, as (series,
        log, start, end, ms) (:meth:`reaching_back`)."""
        self.first_at: dict[str, float] = {}
        """By log (:func:`~prime_rl.analysis.log_files.log_of`), its earliest time seen so far that the
        logs' window counts (:meth:`saw_first`)."""
        self.last_end: dict[tuple[str, str], float] = {}
        """By series of :data:`SERIAL` and log, the latest end of one of its values so far."""
        self.overlap_ms: list[tuple[str, float, float]] = []
        """The values of :data:`SERIAL` that reach back over the one before them: (series, value, its
        part after that one's end), ms."""
        self.overlap_examples: list[str] = []
        self.rebuilt_first: dict[str, tuple[str, float]] = {}
        """For ``gen`` and ``train``, the earliest start of a batch or a step's compute rebuilt from its done
        line alone (``batch.done`` less ``dur_ms``; ``step.done`` less ``write_ms`` and ``train_ms``), with its
        log: in the older log format (no ``[gen] batch.start``; no ``[train]`` ``compute.done`` or
        ``wait.*`` lines) the run begins there (:func:`_collect`)."""
        self.errors: list[tuple[TaggedLines, int, Exception]] = []
        self.fell_silent: tuple[np.ndarray, np.ndarray, np.ndarray] = (
            np.empty(0, np.int64),
            np.empty(0),
            np.empty(0),
        )
        """For each of the batch's lines that start a new segment of its process (:attr:`segment_starts`):
        the ``line`` before which the process's lines are the crashed run's, when that run fell silent
        (its last line with a time) and the time of the restart's line (NaN: none) (:meth:`_fell_silent`)."""
        self.quiet_tails: dict[str, QuietTail] = {}
        """By source, its :data:`~prime_rl.analysis.restarts.QuietTail` of the batches before the
        current one: its lines at their end that a resumed process may log before its ``run.start``,
        and the time of its last other line with a time (:meth:`_fell_silent`)."""
        self.orchestrator_silent: list[tuple[float, float]] = []
        """For each restart of the orchestrator with a time, in order: when its crashed run fell silent
        (:attr:`fell_silent`; the restart's time where no line before it has one) and the time of the
        restart's line."""
        self.open_since: dict[tuple[str, str], float] = {}
        """By series and source, the time of the line that opened a batch or wait still open (no line
        that ends it, nor a restart of its process, since): :meth:`_left_open`."""
        self.open_marks: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray, float]] = {}
        """By series and source (as :attr:`open_since`), its lines that open or end a batch or wait in
        the batches before the current one since the process's last step line or restart (as their
        ``line``, their time and the time of the one open after each, NaN: none), and the one open just
        after that step line: a restart found in a later batch whose crashed run fell silent before
        some of them (the resume's start-up lines came first) finds there what it left open
        (:meth:`_left_open`; moved on by :meth:`_keep_open_marks`)."""
        self.open_marks_path: dict[str, Path | None] = {}
        """By source, the file of its last batch (:attr:`open_marks`' lines are that file's)."""
        self.batch_marks: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        """By series, the current batch's lines of :attr:`open_marks` (:meth:`_left_open`)."""
        self.left_open: dict[str, list[tuple[float, float, float]]] = {}
        """By series, each batch or wait left open where its process started again (a crash, then a
        resume): the time of its open line, of the crashed run's last line and of the restart's line
        (``inf``: none; :func:`~prime_rl.analysis.restarts.open_time_within`)."""

    def handler(self, tag: str) -> Callable[[int, TaggedLines], None] | None:
        """The method that folds ``tag``'s lines (looked up per batch: a table of bound methods
        kept on the collector would make it a reference cycle, left for the garbage collector)."""
        return getattr(self, tag) if tag in _TAGS else None

    def _add(self, key: str, value: float | None) -> None:
        """Add a value to a series with no per-step values."""
        if value is not None:
            self.series[key].append(value)

    def _per_step(self, key: str, b: TaggedLines, step_key: str, values: pl.Series) -> None:
        """A per-step series (:data:`PER_STEP`) keeps one value per step (field ``step_key``), the
        last; a value on a line without a step is kept as it is. ``redone.{key}`` counts the steps
        set again in a later segment of their process than one that set them (a restart), once per
        segment; a step logged twice in one run is none."""
        steps = b.text_series(step_key)
        starts, before = self.segment_starts
        line = b.frame.get_column("line").to_numpy()
        segments = before + np.searchsorted(starts, line, side="right")  # each line's segment
        file = -1 if b.path is None else self.files.setdefault(str(b.path), len(self.files))
        again, loose = self.by_step[key].set_many(
            steps, values, b.step_numbers(step_key), segments, line, file
        )
        if again:
            self.counts[f"redone.{key}"] += again
        repeats = self.by_step[key].repeats
        # a step's line again in the same run: the last wins, named; but a [ckpt] write.done, which a
        # resumed trainer writes again for the step whose weights it loaded as it publishes them
        if len(repeats) and key != "write_ms":
            self.counts[f"{REPEATED}{key}"] += len(repeats)
            paths = list(self.files)
            for i, (f, n) in zip(repeats.tolist(), self.by_step[key].earlier, strict=True):
                ev = b.event(i)
                said = self.repeated_examples.get(ev.where())  # one example a line, its series together
                if said is None:
                    if len(self.repeated_examples) >= EXAMPLES:
                        continue
                    before = "an earlier line" if n < 0 else f"{paths[f]}:{n}" if f >= 0 else f"line {n}"
                    what = f"step {steps[i]} ({tag_said(ev.tag, ev.event)})"
                    said = self.repeated_examples[ev.where()] = (before, what, [])
                said[2].append(key)
        if loose:  # values at no step: the series' count is no number of steps
            self.counts[f"{AT_NO_STEP}{key}"] += len(loose)
        self.series[key].extend(loose)

    def _left_open(
        self,
        key: str,
        b: TaggedLines,
        opening: np.ndarray,
        closing: np.ndarray,
        counts: np.ndarray | None = None,
    ) -> None:
        """Keep the batch or wait of series ``key`` open where its process started again in ``b``
        (rows ``opening`` open one, ``closing`` end it): as the stall rule's wait open where the logs
        end (:attr:`Collected.open_batch`), one is open when the last of those lines the crashed run
        logged (before its silence: :attr:`fell_silent`; a resume's start-up lines before its restart's
        line are the new run's) opens it. Each is kept with the time of its open line, of the crashed
        run's last line and of the restart's line (:attr:`left_open`). The one open after ``b``'s last
        restart waits for a later batch (:attr:`open_since`).
        ``counts``: whether each opening row's wait is one of the run's (a trainer run's first wait
        for rollouts is start-up)."""
        line = b.frame.get_column("line").to_numpy()
        ts = b.frame.get_column("ts").to_numpy()
        marks = np.flatnonzero(opening | closing)
        since = self.open_since.pop((key, b.source), None)

        def at(i: int) -> float | None:
            counted = opening[i] and (counts is None or counts[i]) and not math.isnan(ts[i])
            return float(ts[i]) if counted else None

        lo = 0
        ends, silent, restart = self.fell_silent
        for k, (before, last, again) in enumerate(
            zip(np.searchsorted(line[marks], ends).tolist(), silent.tolist(), restart.tolist(), strict=True)
        ):
            if before > lo:  # the crashed run's last line that opens or ends one
                since = at(int(marks[before - 1]))
            elif not k:  # an earlier batch's, which may come before the resume's start-up lines
                since = self._open_when(key, b.source, last, since)
            if since is not None:
                again = math.inf if math.isnan(again) else again
                self.left_open.setdefault(key, []).append((since, again if math.isnan(last) else last, again))
            since, lo = None, before
        if len(marks) > lo:
            since = at(int(marks[-1]))
        if since is not None:
            self.open_since[key, b.source] = since
        opens = opening[marks] & ~np.isnan(ts[marks])
        if counts is not None:
            opens &= counts[marks]
        if b.source in STEP_LINE_OF:  # only the processes whose restarts are found (Segments) need them
            self.batch_marks[key] = (line[marks], ts[marks], np.where(opens, ts[marks], math.nan))
            self.open_marks.setdefault((key, b.source), _NO_MARKS)

    def _open_when(self, key: str, source: str, quiet: float, since: float | None) -> float | None:
        """What of series ``key`` ``source`` had open when its crashed run fell silent at ``quiet``
        (NaN: not known), by its lines of :attr:`open_marks` with a time up to then (``since``: what
        it has open after them all)."""
        lines, ts, opened, before = self.open_marks.get((key, source), _NO_MARKS)
        if math.isnan(quiet) or not len(lines):
            return since
        at = int(np.searchsorted(np.fmax.accumulate(ts), quiet, side="right")) - 1
        if at == len(lines) - 1:  # all of them the crashed run's
            return since
        value = opened[at] if at >= 0 else before
        return None if math.isnan(value) else float(value)

    def _keep_open_marks(self, b: TaggedLines) -> None:
        """Move :attr:`open_marks` of ``b``'s source on past batch ``b``: a restart in it applied to each
        series that had no line in it (:meth:`_left_open`); the lines of each kept from the last step
        line or restart of the batch on (:data:`~prime_rl.analysis.restarts.STEP_LINE_OF`)."""
        keys = [key for key, source in self.open_marks if source == b.source]
        if not keys:
            return
        none = np.zeros(len(b), dtype=bool)
        for key in keys:
            if len(self.fell_silent[0]) and key not in self.batch_marks:
                self._left_open(key, b, none, none)
        if self.open_marks_path.get(b.source, b.path) != b.path:  # another file: its lines all before
            for key in keys:
                lines, _, opened, before = self.open_marks[key, b.source]
                self.open_marks[key, b.source] = (*_NO_MARKS[:3], float(opened[-1]) if len(lines) else before)
        self.open_marks_path[b.source] = b.path
        if b.source in STEP_LINE_OF:
            tag, event = STEP_LINE_OF[b.source]
            pairs = {(t, e) for t, e, _ in b.overview().counts}
            stepped = (tag, event) in pairs or (tag, RUN_START) in pairs
        else:
            stepped = False
        starts = self.segment_starts[0]
        cut = -1
        if stepped:
            frame = b.frame
            ours = (frame.get_column("tag") == tag) & frame.get_column("event").is_in((event, RUN_START))
            cut = int(frame.get_column("line").filter(ours.fill_null(False)).max())
        if len(starts):
            cut = max(cut, int(starts[-1]))
        for key in keys:
            lines, ts, opened, before = self.open_marks[key, b.source]
            if key in self.batch_marks:
                more = self.batch_marks[key]
                lines, ts, opened = (
                    np.concatenate([a, m]) for a, m in zip((lines, ts, opened), more, strict=True)
                )
            if cut >= 0:  # what is open just after the cut: its last line's, unless a restart since
                at = int(np.searchsorted(lines, cut, side="right")) - 1
                ends = self.fell_silent[0]
                reset = ends[ends <= cut]
                if len(reset) and (at < 0 or lines[at] < reset[-1]):
                    before = math.nan
                elif at >= 0:
                    before = float(opened[at])
                lines, ts, opened = lines[at + 1 :], ts[at + 1 :], opened[at + 1 :]
            self.open_marks[key, b.source] = (lines, ts, opened, before)
        self.batch_marks = {}

    def reaching_back(
        self, key: str, b: TaggedLines, end: np.ndarray, ms: np.ndarray, rows: np.ndarray | None = None
    ) -> None:
        """Keep the durations ``ms`` of series ``key`` (each ending at ``end``, seconds; NaN: not
        counted; at ``rows`` of ``b``, default each row) whose start lies before the earliest time of
        their log seen so far: only those can begin before the logs' window, which :func:`_collect`
        cuts them at (:attr:`Collected.before_logs_ms`). Of a series of :data:`SERIAL`, one that reaches
        back over the end of the one before it counts from that end (:attr:`overlap_ms`, named)."""
        log = log_or_source(b.path, b.source)
        first = self.first_at.get(log)
        if first is None:  # a log the window does not count (the launcher's): its batch's first time
            ts = b.frame.get_column("ts").drop_nulls()
            first = float(ts.min()) if len(ts) else math.inf  # type: ignore[arg-type]
        with np.errstate(invalid="ignore"):
            start = end - ms / 1000.0
            counted = ~np.isnan(start)
            back = counted & (start < first)
        if key in SERIAL and b.source == "orchestrator" and counted.any():
            carried = self.last_end.get((key, log), -math.inf)
            ended = np.sort(np.append(end[counted], carried))
            at = np.searchsorted(ended, end, side="left") - 1  # the last value that ended before
            before = np.where(at >= 0, ended[np.maximum(at, 0)], -np.inf)
            self.last_end[key, log] = max(carried, float(np.max(end[counted])))
            with np.errstate(invalid="ignore"):
                over = counted & (start < before - ROUNDING_S)
            back &= np.isinf(before)  # the first of its series in its log: bounded by the window
            if over.any():
                kept = (end[over] - before[over]) * 1000.0
                self.overlap_ms.extend((key, float(m), float(k)) for m, k in zip(ms[over], kept, strict=True))
                self.counts[f"overlapping.{key}"] += int(over.sum())
                at_rows = np.flatnonzero(over) if rows is None else np.asarray(rows)[over]
                for i, r in zip(np.flatnonzero(over), at_rows, strict=True):
                    if len(self.overlap_examples) >= EXAMPLES:
                        break
                    ev = b.event(int(r))
                    self.overlap_examples.append(f"{ev.where()}: {key} {ms[i]:g} ms")
        back = np.flatnonzero(back)
        self.reach_back.extend((key, log, float(start[i]), float(end[i]), float(ms[i])) for i in back)

    def saw_first(self, b: TaggedLines, first: float | None) -> None:
        """Batch ``b``'s first time that the logs' window counts (``first``: no start-up line's, as
        :func:`_add_windows` takes it) into :attr:`first_at`, before its lines are folded."""
        if b.path is not None or b.events is None:
            if first is not None:
                log = log_or_source(b.path, b.source)
                self.first_at[log] = min(self.first_at.get(log, math.inf), first)
            return
        for ev in b.events:  # a batch of events: its events' own files
            if ev.ts is not None:
                log = log_or_source(ev.path, ev.source)
                self.first_at[log] = min(self.first_at.get(log, math.inf), ev.ts)

    def _rebuilt(self, kind: str, b: TaggedLines, starts: np.ndarray) -> None:
        """Keep the earliest of ``starts`` (rebuilt from done lines alone) in :attr:`rebuilt_first`."""
        starts = starts[~np.isnan(starts)]
        if len(starts) and (kind not in self.rebuilt_first or starts.min() < self.rebuilt_first[kind][1]):
            self.rebuilt_first[kind] = (log_or_source(b.path, b.source), float(starts.min()))

    def _extend(self, key: str, values: list[float | None]) -> None:
        """Add every value that is not None (a series with no per-step values)."""
        self.series[key].extend(v for v in values if v is not None)

    def _retry(self, b: TaggedLines, rows: list[int], by: str = "") -> None:
        """request.retry lines: by status, their waits (after a 429: the client's, ``by``), per server URL
        (there under ``by`` + ``retry.<status>``: ``""`` the orchestrator's, ``"collect."`` the
        collector's, which may share a server with it)."""
        status, url = b.text("status"), b.text("url")
        wait = b.num("wait_ms", ("request.retry",))
        ts = b.column("ts")
        client = COLLECTOR if by == SAMPLE_RETRY else ORCHESTRATOR
        log = self.collector_runs.log(b) if client == COLLECTOR else ""
        for i in rows:
            code = status[i] or "?"
            self.counts[f"retry.{code}"] += 1
            self._add("retry_wait_ms", wait[i])
            if code == "429":
                if client == COLLECTOR:
                    self.counts[COLLECTOR_429] += 1
                self._add("rate_limit_wait_ms", wait[i])
                if wait[i] is not None:
                    self.rate_limits.add(client, ts[i], wait[i], log)
            if url[i]:
                self.server_counts.setdefault(url[i], Counter())[f"{by}retry.{code}"] += 1

    def server(self, seq: int, b: TaggedLines) -> None:
        for i in range(len(b)):
            self.server_loads.add(b.event(i))

    def weights(self, seq: int, b: TaggedLines) -> None:
        self.join.add_lines(b)

    def ckpt(self, seq: int, b: TaggedLines) -> None:
        b.fields(*FIELDS["ckpt"])
        frame = b.frame
        event, ts = frame.get_column("event"), frame.get_column("ts")
        target, step = b.text_series("target_step"), b.text_series("step")
        wait, write = b.num_series("wait_ms", ("wait.done",)), b.num_series("write_ms", ("write.done",))
        loads = (
            frame.get_column("line").is_in(self.resume_loads) & (event == "wait.done")
            if len(self.resume_loads)
            else None
        )
        counted = wait
        if loads is not None and loads.any():  # a resume's load of weights: start-up, counted apart
            self.counts["ckpt_startup_wait_ms"] += round(wait.filter(loads).fill_null(0.0).sum())
            counted = wait.filter(~loads)
        if b.source == "orchestrator":  # a restart found in a later batch may find them a resume's load
            kept = wait.is_not_null() if loads is None else wait.is_not_null() & ~loads
            at = len(self.series["ckpt_wait_ms"]) + np.arange(int(kept.sum()))
            lines = frame.get_column("line").filter(kept).to_list()
            self.recent_waits.update(
                zip(lines, zip(wait.filter(kept).to_list(), at.tolist(), strict=True), strict=True)
            )
        _extend(self.series["ckpt_wait_ms"], counted)  # every wait, not one per target (see PER_STEP)
        t_all = ts.cast(pl.Float64).to_numpy()
        counted_at = wait if loads is None else pl.select(pl.when(~loads).then(wait)).to_series()
        self.reaching_back("ckpt_wait_ms", b, t_all, counted_at.to_numpy())
        self.reaching_back("write_ms", b, t_all, write.to_numpy())
        b.step_numbers("target_step")  # a target that is no step number: a bad value, as a step's
        self._per_step("write_ms", b, "step", write)
        starts, dones = (event == "wait.start").fill_null(False), (event == "wait.done").fill_null(False)
        key = pl.select(or_unknown(target)).to_series()
        t = ts.to_numpy()
        rows, found, took = pair(
            key, starts & ts.is_not_null(), dones & wait.is_not_null(), t, self.open_wait
        )
        if len(rows):  # a wait.done with its wait_ms: the wait since its wait.start (or wait_ms before it)
            end = or_zero(t[rows])
            waited = wait.gather(rows)
            start = np.where(found, took, end - waited.to_numpy() / 1000.0)
            spans = pl.DataFrame({"start": start, "end": end, "arg": target.gather(rows), "wait_ms": waited})
            self.spans.add_frame("ckpt_wait", "wait for weights step {}", spans, ("wait_ms",))
        written = (event == "write.done").fill_null(False) & write.is_not_null()
        if written.any():
            self.last_write = (b, int(written.arg_true()[-1]))
            # written beside the next step, off its critical path
            background = int(((b.text_series("background") == "true").fill_null(False) & written).sum())
            if background:
                self.counts["write.background"] += background
            timed = (written & ts.is_not_null()).arg_true()
            end, took_ms = ts.gather(timed), write.gather(timed)
            spans = pl.DataFrame({"start": end - took_ms / 1000.0, "end": end, "arg": step.gather(timed)})
            self.spans.add_frame("ckpt_write", "write weights step {}", spans)
        opening, closing = starts.to_numpy().copy(), dones.to_numpy().copy()
        if loads is not None and loads.any():  # a resume's load (and its wait.start) ends no wait of the run
            marks = np.flatnonzero(opening | closing)
            load = np.flatnonzero(loads.fill_null(False).to_numpy()[marks])
            closing[marks[load]] = False
            load = load[load > 0]
            opening[marks[load - 1]] = False
        self._left_open("ckpt_wait_ms", b, opening, closing)
        marks = (starts | dones).arg_true()
        if len(marks):  # an open wait is the last wait.start with no wait.done after it
            i = int(marks[-1])
            self.last_wait = ((seq, frame.item(i, "line")), b, i, key[i]) if starts[i] else None

    def gen(self, seq: int, b: TaggedLines) -> None:
        b.fields(*FIELDS["gen"])
        frame = b.frame
        event, ts = frame.get_column("event"), frame.get_column("ts")
        step, dur = b.text_series("step"), b.num_series("dur_ms", ("batch.done",))
        self._per_step("gen_dur_ms", b, "step", dur)
        starts, dones = (event == "batch.start").fill_null(False), (event == "batch.done").fill_null(False)
        # no step= on the line: batches are paired by their count (the starts so far, this one included)
        started = starts.cast(pl.Int64).cum_sum() + self.batches_started
        key = pl.select(pl.when(step.is_null()).then(started.cast(pl.String)).otherwise(step)).to_series()
        t = ts.to_numpy()
        rows, found, took = pair(key, starts & ts.is_not_null(), dones & dur.is_not_null(), t, self.open_gen)
        if len(rows):
            end = or_zero(t[rows])
            ms = dur.gather(rows)
            start = np.where(found, took, end - ms.to_numpy() / 1000.0)
            timed = ~np.isnan(t[rows])
            self._rebuilt("gen", b, np.where(found, np.nan, start)[timed])
            self.reaching_back("gen_dur_ms", b, end[timed], ms.to_numpy()[timed], rows[timed])
            self.batch_windows.extend(np.column_stack((start[timed], end[timed])).ravel().tolist())
            spans = pl.DataFrame(
                {
                    "start": start,
                    "end": end,
                    "arg": pl.select(or_unknown(step.gather(rows))).to_series(),
                    "completions": b.text_series("completions").gather(rows),
                    "dur_ms": ms,
                }
            )
            self.spans.add_frame("gen", "generate step {}", spans, ("completions", "dur_ms"))
        self.batches_started += int(starts.sum())
        if dones.any():
            done_completions = b.num_series("completions", ("batch.done",)).filter(dones).drop_nulls()
            self.counts["completions"] += sum(map(int, done_completions.to_list()))
        self._left_open("gen_dur_ms", b, starts.to_numpy(), dones.to_numpy())
        marks = (starts | dones).arg_true()
        if len(marks):  # an open batch is the last batch.start with no batch.done after it
            i = int(marks[-1])
            self.last_start = ((seq, frame.item(i, "line")), b, i) if starts[i] else None
        drops = (event == "group.drop").fill_null(False)
        if drops.any():
            for reason in b.text_series("reason").filter(drops).to_list():
                self.counts[f"drop.{reason or '?'}"] += 1
        retries = (event == "request.retry").fill_null(False)
        if retries.any():
            self._retry(b, retries.arg_true().to_list())

    def rollout(self, seq: int, b: TaggedLines) -> None:
        b.fields(*FIELDS["rollout"])
        trunc, staleness = b.num_series("trunc_pct"), b.num_series("staleness")
        # a percent outside 0-100, a staleness below 0: bad values, as a negative duration is
        trunc = _refuse(b, "trunc_pct", trunc, (trunc < 0) | (trunc > 100))
        staleness = _refuse(b, "staleness", staleness, staleness < 0)
        self._per_step("trunc_pct", b, "current_step", trunc)
        self._per_step("staleness", b, "current_step", staleness)
        # the step as every per-step figure takes it: no step number (x, 123456789012, 1.5), no step
        step_num = b.step_numbers("current_step").cast(pl.Float64)
        both = staleness.is_not_null() & step_num.is_not_null()
        loose = staleness.is_not_null() & step_num.is_null()
        if both.any():
            self.staleness_by_step.add(
                step_num.filter(both), staleness.filter(both), self._run_levels_of(b, both)
            )
        if loose.any():  # judged by async_level all the same
            self.staleness_by_step.add_at_no_step(staleness.filter(loose), self._run_levels_of(b, loose))

    def _run_levels_of(self, b: TaggedLines, rows: pl.Series) -> np.ndarray:
        """The ``async_level`` of the run of each line of ``rows`` (the last run.start before it in
        the orchestrator's lines; -1: not said)."""
        starts, levels, before = self.run_starts
        line = b.frame.get_column("line").filter(rows).to_numpy()
        return np.concatenate(([before], levels))[np.searchsorted(starts, line, side="right")]

    def verify(self, seq: int, b: TaggedLines) -> None:
        """[verify] batch.done: ``dur_ms`` is scoring time summed over the batch's completions (CPU
        time of concurrent workers, not wall time); ``tail_ms`` and ``workers`` when the line has them."""
        done = ("batch.done",)
        b.fields(*FIELDS["verify"])
        cpu, dur = b.num_series("cpu_ms", done), b.num_series("dur_ms", done)
        tail, workers = b.num_series("tail_ms", done), b.num_series("workers", done)
        # the CPU time when the line has it (and it is not 0), else dur_ms
        scoring = pl.select(pl.when(cpu.is_not_null() & (cpu != 0)).then(cpu).otherwise(dur)).to_series()
        self._per_step("verify_dur_ms", b, "step", scoring)
        self._per_step("verify_tail_ms", b, "step", tail)
        given = workers.filter(workers.is_not_null() & (workers != 0))
        if len(given):
            self.verify_workers = int(given[-1])

    def train(self, seq: int, b: TaggedLines) -> None:
        lines = ("step.done", "compute.done")
        b.fields(*FIELDS["train"])
        step_s = b.text_series("step")
        wait_s = b.num_series("wait_ms", ("step.done",))
        train_s, write_s = b.num_series("train_ms", lines), b.num_series("write_ms", lines)
        done = (b.frame.get_column("event") == "step.done").fill_null(False)
        is_done = done.to_numpy()
        only = lambda keep, values: pl.select(pl.when(keep).then(values)).to_series()  # noqa: E731
        # step 0's wait is start-up (the servers start, the first batch is generated with nothing
        # to overlap it), not the steady state a bottleneck is judged on; so is a resumed run's first
        starting = self.trainer_starting
        start_up = (step_s == "0").fill_null(False) | pl.Series(self._first_steps(b, done))
        counts = self._train_wait_left_open(b, step_s, is_done, starting)
        # a step its run never finished (a crash after its wait.done or compute.done): those lines' values
        waited_s = b.num_series("wait_ms", ("wait.done",))
        waited, computed = self._unfinished_steps(b, step_s, counts, waited_s, train_s)
        waits = pl.select(pl.when(pl.Series(waited)).then(waited_s).when(~start_up).then(wait_s)).to_series()
        self._per_step("train_wait_ms", b, "step", waits)
        trained = only(done | pl.Series(computed), train_s)
        self._per_step("train_ms", b, "step", trained)
        # step.done write_ms: what publishing cost the step itself (with background writes: the
        # copy to host memory and any wait for the previous write; else the whole write)
        published = only(done, write_s)
        self._per_step("publish_ms", b, "step", published)
        # each duration's end: a step.done's compute ended its write_ms before it, its wait before that
        t = b.frame.get_column("ts").cast(pl.Float64).to_numpy()
        wrote = np.where(is_done, write_s.fill_null(0.0).to_numpy(), 0.0) / 1000.0
        self.reaching_back("train_ms", b, t - wrote, trained.to_numpy())
        before = np.where(is_done, t - wrote - np.nan_to_num(train_s.to_numpy()) / 1000.0, t)
        self.reaching_back("train_wait_ms", b, before, waits.to_numpy())
        self.reaching_back("publish_ms", b, t, published.to_numpy())
        if is_done.any():
            self._rebuilt("train", b, np.where(is_done, t - wrote - train_s.to_numpy() / 1000.0, np.nan))
        self._train_spans(b, step_s, wait_s, train_s, write_s)
        events = b.frame.get_column("event")
        # the trainer's wait for rollouts open at the batch's end: a new run closes it, by its run.start
        # or, in logs without those, by the line its step went back at (a segment's start)
        marks = events.is_in(("wait.start", "wait.done", "run.start")).fill_null(False).to_numpy()
        marks |= np.isin(b.frame.get_column("line").to_numpy(), self.segment_starts[0])
        if marks.any():
            i = int(np.flatnonzero(marks)[-1])
            self.train_wait = (b, i) if events[i] == "wait.start" else None

    def _train_wait_left_open(
        self, b: TaggedLines, step: pl.Series, done: np.ndarray, starting: bool
    ) -> np.ndarray:
        """The trainer's waits for rollouts left open (:meth:`_left_open`): a ``wait.start`` opens one, a
        ``wait.done`` or ``run.start`` ends it; a wait before the run's first ``step.done`` (after its
        ``run.start`` or a step going back; ``starting``: one before ``b`` has had none since), or for
        step 0, is start-up, as its wait_ms is. Returns which rows' waits are the run's (not start-up)."""
        events = b.frame.get_column("event")
        opening = (events == "wait.start").fill_null(False).to_numpy()
        began = (events == RUN_START).fill_null(False).to_numpy()
        closing = (events == "wait.done").fill_null(False).to_numpy() | began
        began |= np.isin(b.frame.get_column("line").to_numpy(), self.segment_starts[0])
        rows = np.arange(len(opening))
        last_done = np.maximum.accumulate(np.where(done, rows, -1))
        last_start = np.maximum.accumulate(np.where(began, rows, -1))
        # a step.done that starts a segment (its step went back) is the run's first: the waits after it count
        ran = np.where(last_start >= 0, last_done >= last_start, (last_done >= 0) | (not starting))
        counts = ran & (step != "0").fill_null(True).to_numpy()
        self._left_open("train_wait_ms", b, opening, closing, counts)
        return counts

    def _unfinished_steps(
        self, b: TaggedLines, step: pl.Series, counts: np.ndarray, waited: pl.Series, train: pl.Series
    ) -> tuple[np.ndarray, np.ndarray]:
        """The trainer's steps its run never finished: the run's last line of
        :data:`_TRAIN_STEP_MARKS` before its process started again (before where the crashed run fell
        silent: :attr:`fell_silent`) is a step's ``wait.done``, or a ``compute.done`` of the step after
        it (it crashed computing or publishing that step), no ``step.done`` logged. The wait (the
        ``wait.done``'s wait_ms; not a start-up one: ``counts``) and the compute (the ``compute.done``'s
        train_ms) were time the run spent, which only a ``step.done`` line would have brought to the
        per-step series: they are that step's values, in the crashed run's segment (a later run's
        replaces them, :attr:`Collected.earlier_runs_ms`); with no ``compute.done``, the compute from the
        ``wait.done`` to the crash is left open (:attr:`left_open`, ``train_ms``). Returns the rows of
        ``b`` whose values those are; a step whose lines came in an earlier batch is set here. The
        steps begun since the last ``step.done`` wait for a later batch (:attr:`unfinished`: a restart
        found there, by a step going back, may have fallen silent before them), or the logs' end
        (:meth:`finish_unfinished`: the trainer computing that step where the logs end)."""
        events = b.frame.get_column("event")
        waits = (events == "wait.done").fill_null(False).to_numpy()
        ends_step = events.is_in(_TRAIN_STEP_ENDS).fill_null(False).to_numpy()
        is_done = (events == "step.done").fill_null(False).to_numpy()
        marks = np.flatnonzero(waits | ends_step)  # each sets the state: a step begun (wait.done), or none
        computes = np.flatnonzero((events == "compute.done").fill_null(False).to_numpy())
        wait_rows, compute_rows = np.zeros(len(b), bool), np.zeros(len(b), bool)
        history = self.unfinished.pop(b.source, [])
        if history and self.unfinished_file.get(b.source) != b.path:  # an earlier file's: before b's lines
            history = [(-1, t, s) for _, t, s in history]
        self.unfinished_file[b.source] = b.path
        if not len(marks) and not (len(computes) and history):
            if history:
                self.unfinished[b.source] = history
            return wait_rows, compute_rows
        line, ts = b.frame.get_column("line").to_numpy(), b.frame.get_column("ts").to_numpy()
        starts, before = self.segment_starts
        ends, silent, restart = self.fell_silent
        marked, computed = line[marks], line[computes]

        def begun(r: int) -> _Unfinished | None:  # the state a mark of b sets
            if not waits[r]:
                return None
            segment = before + int(np.searchsorted(starts, line[r], side="right"))
            wait = waited[r] if counts[r] else None
            return _Unfinished(int(line[r]), step[r], r, wait, -1, None, segment, float(ts[r]))

        def with_compute(state: _Unfinished, after: int, until: float) -> _Unfinished:
            k = int(np.searchsorted(computed, until)) - 1  # b's last compute.done before line ``until``
            c = int(computes[k]) if k >= 0 else -1
            if c > after and step[c] == state.step:
                return state._replace(compute_row=c, compute=train[c])
            return state

        floor = -1  # the first line of b's current run of the trainer
        for k, end in enumerate(ends.tolist()):
            j = int(np.searchsorted(marked, end)) - 1
            if j >= 0 and marked[j] >= floor:  # the crashed run's last mark is one of b's
                state = begun(int(marks[j]))
                after = int(marks[j])
            elif k == 0:  # an earlier batch's: the last before it fell silent (b's first line: by its time)
                quiet = silent[k]
                state = next((s for at, t, s in reversed(history) if at < end and not t > quiet), None)
                after = -1
            else:
                state = None
            if state is not None:
                self._crashed_in(
                    with_compute(state, after, end), wait_rows, compute_rows, silent[k], restart[k]
                )
            floor = end
        # what the next batch needs: the marks since b's last step.done and its last restart (a restart
        # found in a later batch, by a step going back, may have fallen silent before the last of them)
        done = np.flatnonzero(is_done[marks])
        since = int(np.searchsorted(marked, floor))
        if len(done) or len(ends):
            history, since = [], max(since, int(done[-1]) if len(done) else 0)
        elif history and history[-1][2] is not None:  # the step begun before b: a compute.done of it in b
            at, t, state = history[-1]
            history[-1] = (at, t, with_compute(state, -1, marked[0] if len(marks) else math.inf))
        for j in range(max(since, len(marks) - _HISTORY), len(marks)):
            state = begun(int(marks[j]))
            if state is not None:
                state = with_compute(state, int(marks[j]), marked[j + 1] if j + 1 < len(marks) else math.inf)
            history.append((int(marked[j]), float(ts[marks[j]]), state))
        if history:  # rows of b are no rows of the next batch
            self.unfinished[b.source] = [
                (at, t, s if s is None else s._replace(wait_row=-1, compute_row=-1))
                for at, t, s in history[-_HISTORY:]
            ]
        return wait_rows, compute_rows

    def _crashed_in(
        self,
        state: _Unfinished,
        wait_rows: np.ndarray,
        compute_rows: np.ndarray,
        silent: float,
        restart: float,
    ) -> None:
        """A step the trainer crashed in (:meth:`_unfinished_steps`): its values, at their rows of the
        current batch (``wait_rows``, ``compute_rows``) or set now; with no ``compute.done``, its
        compute from its ``wait.done`` to the crash (the crashed run fell ``silent``, its process
        started again at ``restart``: :attr:`left_open`)."""
        if state.wait_row >= 0:
            wait_rows[state.wait_row] = state.wait is not None
        elif state.wait is not None:
            self._set_unfinished("train_wait_ms", state.step, state.wait, state.segment)
        if state.compute_row >= 0:
            compute_rows[state.compute_row] = True
        elif state.compute is not None:
            self._set_unfinished("train_ms", state.step, state.compute, state.segment)
        elif not math.isnan(state.since):  # as a wait left open: to the crash
            again = math.inf if math.isnan(restart) else restart
            self.left_open.setdefault("train_ms", []).append(
                (state.since, again if math.isnan(silent) else silent, again)
            )

    def _set_unfinished(self, key: str, step: str | None, value: float, segment: int) -> None:
        """Set an unfinished step's value (:meth:`_unfinished_steps`) whose line came in an earlier
        batch than the one its run's crash is found in (or the logs' end)."""
        steps = pl.Series("step", [step], dtype=pl.String)
        again, loose = self.by_step[key].set_many(steps, [value], None, np.array([segment]))
        if again:
            self.counts[f"redone.{key}"] += again
        if loose:
            self.counts[f"{AT_NO_STEP}{key}"] += len(loose)
        self.series[key].extend(loose)

    def finish_unfinished(self) -> None:
        """The trainer's steps still unfinished where the logs end (:meth:`_unfinished_steps`): it was
        computing or publishing them; their wait and compute are the run's time, set as those steps'
        values."""
        for history in self.unfinished.values():
            state = history[-1][2]
            if state is None:
                continue
            if state.wait is not None:
                self._set_unfinished("train_wait_ms", state.step, state.wait, state.segment)
            if state.compute is not None:
                self._set_unfinished("train_ms", state.step, state.compute, state.segment)
            elif not math.isnan(state.since):  # computing where the logs end: up to their end
                self.left_open.setdefault("train_ms", []).append((state.since, math.inf, math.inf))
        self.unfinished.clear()

    def _first_steps(self, b: TaggedLines, done: pl.Series) -> np.ndarray:
        """Which of the [train] lines ``b`` are the first ``step.done`` (``done``) of a run of the
        trainer: the first after its ``run.start``, or in older logs a step.done that starts a new
        segment (its step went back); :attr:`trainer_starting` carries a start with no step.done
        yet to the next batch."""
        lines = b.frame.get_column("line").to_numpy()
        starts = (b.frame.get_column("event") == RUN_START).fill_null(False).to_numpy()
        seen = np.cumsum(starts | np.isin(lines, self.segment_starts[0]))  # starts at or before each line
        rows = np.flatnonzero(done.to_numpy())
        first = np.zeros(len(lines), dtype=bool)
        if len(rows):  # a step.done with a start since the one before it
            first[rows[0]] = self.trainer_starting or seen[rows[0]] > 0
            first[rows[1:]] = np.diff(seen[rows]) > 0
            self.trainer_starting = bool(seen[-1] > seen[rows[-1]])
        elif len(seen):
            self.trainer_starting = self.trainer_starting or bool(seen[-1])
        return first

    def _train_spans(
        self, b: TaggedLines, step: pl.Series, wait: pl.Series, train: pl.Series, write: pl.Series
    ) -> None:
        """The trainer's spans: each step's compute (a compute.done line ends it: forward/backward,
        then the optimizer; from a trainer that writes none, the step.done line's train_ms ended
        write_ms before it) and its wait for rollouts before the compute."""
        frame = b.frame
        event, ts = frame.get_column("event"), frame.get_column("ts")
        steps, computes = (event == "step.done").fill_null(False), (event == "compute.done").fill_null(False)
        # step 0's wait is start-up (not a steady-state wait): counted apart, the last one's
        startup = (steps & (step == "0").fill_null(False)).arg_true()
        if len(startup):
            self.counts["train_startup_wait_ms"] = int(wait[int(startup[-1])] or 0)
        timed = ts.is_not_null() & train.is_not_null()
        key = pl.select(
            pl.when(computes).then(or_unknown(step)).otherwise(step.fill_null("None"))
        ).to_series()
        t, took_ms = ts.to_numpy(), train.to_numpy()
        compute_start = t - took_ms / 1000.0  # where a compute.done line's compute started
        rows, found, took = pair(key, computes & timed, steps & timed, compute_start, self.compute_start)
        end = t[rows] - write.fill_null(0.0).to_numpy()[rows] / 1000.0
        start = np.where(found, took, end - took_ms[rows] / 1000.0)
        computed = (computes & timed).arg_true().to_numpy()
        alone = rows[~found]  # a step.done with no compute.done before it: its compute from its own line
        at = np.concatenate([computed, alone])
        order = np.argsort(at, kind="stable")
        at = at[order]
        spans = pl.DataFrame(
            {
                "start": np.concatenate([compute_start[computed], start[~found]])[order],
                "end": np.concatenate([t[computed], end[~found]])[order],
                "arg": key.gather(at),
                "train_ms": train.gather(at),
            }
        )
        self.spans.add_frame("train", "train step {}", spans, ("train_ms",))
        part = self.spans.add_frame
        fwd = b.num_series("fwd_bwd_ms", ("compute.done",)).to_numpy()[computed]
        optim = b.num_series("optim_ms", ("compute.done",)).to_numpy()[computed]
        begun, ended = compute_start[computed], t[computed]
        some = (fwd != 0) & ~np.isnan(fwd)
        args = key.gather(computed)
        if some.any():
            spans = pl.DataFrame(
                {"start": begun[some], "end": (begun + fwd / 1000.0)[some], "arg": args.filter(some)}
            )
            part("train_fwd_bwd", "forward/backward {}", spans)
        some = (optim != 0) & ~np.isnan(optim)
        if some.any():
            spans = pl.DataFrame(
                {"start": (ended - optim / 1000.0)[some], "end": ended[some], "arg": args.filter(some)}
            )
            part("train_optim", "optimizer {}", spans)
        waited = wait.to_numpy()[rows]
        some = (waited != 0) & ~np.isnan(waited)
        if some.any():
            spans = pl.DataFrame(
                {"start": (start - waited / 1000.0)[some], "end": start[some], "arg": key.gather(rows[some])}
            )
            part("train_wait", "wait for rollouts {}", spans)

    def collect(self, seq: int, b: TaggedLines) -> None:
        """The offline collector: one rollout.done per sample (column-wise; every value, count and
        server in the order the lines give them)."""
        b.fields(*FIELDS["collect"])
        event = b.frame.get_column("event")
        # a sample's time: each done or failed sample's (what keeps a slot busy); a deferred
        # verification's (collect-rollouts verify: verify.done) is no sample's: a series of its own
        lines = [
            e
            for e in event.unique(maintain_order=True).to_list()
            if e not in ("request.retry", "verify.done")
        ]
        dur = b.num_series("dur_ms", lines)
        done = ("rollout.done",)
        queue, gen, verify = (b.num_series(key, done) for key in ("queue_ms", "gen_ms", "verify_ms"))
        deferred = b.num_series("dur_ms", ("verify.done",))
        # the runs of the collector's log; a sample that would have begun before its run: a bad dur_ms
        refused = self.collector_runs.observe(b, event, dur, deferred)
        if refused.any():  # its other times are no better: none of the sample's is used
            kept = ~refused
            dur, queue, gen, verify, deferred = (
                s.zip_with(kept, pl.Series([None] * len(s), dtype=pl.Float64))
                for s in (dur, queue, gen, verify, deferred)
            )
        # a part of a sample longer than the whole sample: a bad value, the sample's other times kept
        queue, gen, verify = (
            _refuse(b, key, part, part > dur)
            for key, part in (("queue_ms", queue), ("gen_ms", gen), ("verify_ms", verify))
        )
        url, status = b.text_series("url"), b.text_series("status")
        is_done = (event == "rollout.done").fill_null(False)
        has_url = (url.is_not_null() & (url != "")).fill_null(False)
        failed = (event == "rollout.failed").fill_null(False) & has_url
        retry = (event == "request.retry").fill_null(False)
        # an older collector's 429: a line with status=429 of no event the collector writes now (its
        # parallel.pause status=429 follows a request.retry already counted; a failed sample is no retry)
        n429 = ~event.is_in(_COLLECT_EVENTS).fill_null(False) & (status == "429").fill_null(False)
        _extend(self.series["collect_ms"], dur)
        _extend(self.series["collect_done_ms"], dur.filter(is_done))
        firsts = [(_first(is_done), "completions", is_done), (_first(n429), "retry.429", n429)]
        for _, key, rows in sorted(f for f in firsts if f[0] is not None):  # as the lines first count them
            self.counts[key] += int(rows.sum())
            self.counts[COLLECTOR_COUNTS[key]] += int(rows.sum())  # the collector's part, apart
        for key, values in (
            ("collect_queue_ms", queue),
            ("collect_gen_ms", gen),
            ("collect_verify_ms", verify),
            ("collect_deferred_verify_ms", deferred),
        ):
            _extend(self.series[key], values)
        by_server = is_done & has_url & gen.is_not_null()
        if by_server.any():
            for u, values in _in_order(url.filter(by_server), gen.filter(by_server)):
                _extend(self.server_gen_ms.setdefault(u, array("d")), values)
        if failed.any():  # per server, in the order the failures first name them
            per_url = pl.DataFrame({"url": url.filter(failed)}).group_by("url", maintain_order=True).len()
            for u, n in per_url.iter_rows():
                self.server_counts.setdefault(u, Counter())["failed"] += n
        if retry.any():
            self._retry(b, retry.arg_true().to_list(), by=SAMPLE_RETRY)
        self.samples.add(
            b.frame.get_column("ts"),
            dur,
            b.frame.get_column("tid"),
            dict(zip(SAMPLE_INFO, (url, status, queue, gen, verify, event), strict=True)),
        )
        if deferred.is_not_null().any():  # a verify pass's verifications: named by task and repeat
            rows = deferred.is_not_null().arg_true()
            what = _task_and_repeat(b, rows)
            self.verifications.add(b.frame.get_column("ts").gather(rows), deferred.gather(rows), what, {})

    def env(self, seq: int, b: TaggedLines) -> None:
        """Multi-turn episodes ([env] episode.done): the environment's and its tools' time, the
        model's generation time and the turns of each episode; outcomes and tool errors counted."""
        done = ("episode.done",)
        events = b.column("event")
        if "episode.done" not in events:
            return
        b.fields(*FIELDS["env"])
        rows = [i for i, e in enumerate(events) if e == "episode.done"]
        for key, series in (("env_ms", "env_ms"), ("tool_ms", "tool_ms"), ("gen_ms", "episode_gen_ms")):
            values = b.num(key, done)
            self._extend(series, [values[i] for i in rows])
        turns, errors, outcome = b.num("turns", done), b.num("tool_errors", done), b.text("outcome")
        self._extend("episode_turns", [turns[i] for i in rows])
        for i in rows:
            self.counts[f"episode.{outcome[i] or '?'}"] += 1
            self.counts["episode.tool_errors"] += int(errors[i] or 0)

    def fold(self, seq: int, b: TaggedLines) -> None:
        """One batch (one source): restarts first, then each tag's lines."""
        restarts = self.segments.observe(b)
        self.segment_starts = self._segment_starts(b, restarts)
        self.fell_silent = self._fell_silent(b, restarts)
        if b.source == "orchestrator":
            _, silent, again = self.fell_silent
            self.orchestrator_silent += [
                (r if math.isnan(t) else t, r)
                for t, r in zip(silent.tolist(), again.tolist(), strict=True)
                if not math.isnan(r)
            ]
        if restarts and b.source == "orchestrator":
            self.restarted = (seq, b.column("line")[restarts[-1]])
        self.run_starts = self._run_levels(b)
        self.resume_loads = self._resume_loads(b)
        if len(self.segments.batch_loads):  # a restart found by its step going back: its load of weights
            self.resume_loads = np.union1d(self.resume_loads, self.segments.batch_loads)
            self._earlier_loads(self.segments.earlier_loads)
        self.hangs.observe(b, self.segment_starts)
        self.progress.observe(b)
        for tag, lines in b.by_tag():
            handler = self.handler(tag)
            if handler is not None:
                try:
                    handler(seq, lines)
                except _HANDLER_ERRORS as e:  # never a crash: count it, name the line it failed on
                    self.errors.append((lines, _failing_row(tag, seq, lines), e))
        self._keep_open_marks(b)
        if self.recent_waits and b.source == "orchestrator":  # those a later restart may still find
            since = set(self.segments.waits_since_step[1].tolist())
            self.recent_waits = {line: v for line, v in self.recent_waits.items() if line in since}

    def _earlier_loads(self, lines: np.ndarray) -> None:
        """The orchestrator's ``[ckpt] wait.done`` ``lines`` of earlier batches found a resume's load
        of weights (its restart, found by its step going back, in this batch): counted as waits of the
        run there (:attr:`recent_waits`), now as start-up, as where one batch holds them and the restart."""
        moved = sorted(
            (self.recent_waits.pop(line) for line in lines.tolist() if line in self.recent_waits),
            key=lambda x: x[1],
        )
        if not moved:
            return
        series = self.series["ckpt_wait_ms"]
        for _, at in reversed(moved):
            del series[at]
        self.counts["ckpt_startup_wait_ms"] += round(math.fsum(ms for ms, _ in moved))
        gone = np.array([at for _, at in moved])
        self.recent_waits = {
            line: (ms, at - int(np.searchsorted(gone, at))) for line, (ms, at) in self.recent_waits.items()
        }

    def _fell_silent(self, b: TaggedLines, restarts: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each restart of batch ``b`` (rows ``restarts``), where the crashed run of its process fell
        silent (:attr:`fell_silent`): before a ``run.start``, at the process's last line before the
        silence before it (:func:`~prime_rl.analysis.restarts.fell_silent_before_start`: a resumed
        trainer may publish its weights again before its run.start, a line of the resumed run); before a restart found by its step going back, whose resume's start-up lines come
        before its line, where its silence began (:attr:`~prime_rl.analysis.restarts.Segments.silent_from`,
        its down time's start), the lines after it being the resumed run's."""
        ts = b.frame.get_column("ts").to_numpy()
        stamped = np.flatnonzero(~np.isnan(ts))
        carried = self.quiet_tails.get(b.source, NO_TAIL)
        self.quiet_tails[b.source] = quiet_tail(b.frame, b.source, carried)
        if not restarts:
            return np.empty(0, np.int64), np.empty(0), np.empty(0)
        line = b.frame.get_column("line").to_numpy()
        first = len(self.segments.restarts) - len(restarts)
        ends, times = [], []
        for k, i in enumerate(restarts, first):
            before = stamped[stamped < i]
            began = self.segments.silent_from.get(k)
            if began is None:  # a run.start: the lines before the silence before it are the crashed run's
                end, last = fell_silent_before_start(b.frame, b.source, before, i, carried)
                ends.append(end)
                times.append(last)
            else:
                quiet = before[ts[before] <= began]
                ends.append(int(line[quiet[-1]]) + 1 if len(quiet) else int(line[0]))
                times.append(began)
        return np.maximum.accumulate(np.array(ends, np.int64)), np.array(times), ts[restarts]

    def _segment_starts(self, b: TaggedLines, restarts: list[int]) -> tuple[np.ndarray, int]:
        """The lines of batch ``b`` that start a new segment of its process (rows ``restarts``;
        their ``line``) and the segment of its lines before them; :attr:`segments_begun` moves on
        past them (a line's segment: the one before the batch, and one for each start at or before it)."""
        before = self.segments_begun[b.source]
        if not restarts:
            return np.empty(0, np.int64), before
        self.segments_begun[b.source] += len(restarts)
        return b.frame.get_column("line").to_numpy()[restarts], before

    def _resume_loads(self, b: TaggedLines) -> np.ndarray:
        """The ``line`` of batch ``b``'s ``[ckpt] wait.done`` lines that end a resume's load of weights
        (after a ``[gen] run.start``, before the run's first ``[gen] batch.start``:
        :func:`~prime_rl.analysis.tagged.start_up`); :attr:`loading` moves on past the batch."""
        pairs = {(tag, event) for tag, event, _ in b.overview().counts}
        loading = self.loading.get(b.source, False)
        begun = ("gen", RUN_START) in pairs
        if begun or loading:
            frame = b.frame
            tag, event = frame.get_column("tag"), frame.get_column("event")
            if begun:  # the last of the batch's run.start and batch.start lines
                marks = ((tag == "gen") & event.is_in((RUN_START, "batch.start"))).fill_null(False)
                self.loading[b.source] = event.filter(marks)[-1] == RUN_START
            elif ("gen", "batch.start") in pairs:
                self.loading[b.source] = False
            if ("ckpt", "wait.done") in pairs:
                done = (event == "wait.done").fill_null(False).to_numpy()
                return frame.get_column("line").to_numpy()[start_up(frame, loading) & done]
        return np.empty(0, np.int64)

    def _run_levels(self, b: TaggedLines) -> tuple[np.ndarray, np.ndarray, int]:
        """The batch's ``[gen] run.start`` lines (their ``line``), the ``async_level`` each says (-1:
        none, an older orchestrator's) and the level before the batch; :attr:`run_level` moves on to
        the last (a [rollout] line of the batch takes the last run.start before it, by line order)."""
        before = self.run_level
        if not any((tag, event) == ("gen", RUN_START) for tag, event, _ in b.overview().counts):
            return np.empty(0, np.int64), np.empty(0, np.int64), before
        frame = b.frame
        ours = (frame.get_column("tag") == "gen") & (frame.get_column("event") == RUN_START)
        rows = np.flatnonzero(ours.fill_null(False).to_numpy())
        said = step_numbers(pl.Series(b.rows_text(rows, "async_level"), dtype=pl.String))
        levels = said.fill_null(-1).to_numpy()
        self.run_level = int(levels[-1])
        return frame.get_column("line").to_numpy()[rows], levels, before

    def update_spans(self, frame: pl.DataFrame) -> None:
        """The joined updates' series and spans (``frame``: :func:`~prime_rl.analysis.updates.update_frame`)."""
        for key, column in zip(UPDATE_SERIES, _UPDATE_COLUMNS, strict=True):
            _extend(self.series[key], frame.get_column(column))
        timed = frame.filter(pl.col("start").is_not_null() & pl.col("end").is_not_null())
        info = {"queue": "queue_ms", "rpc": "rpc_ms", "send_to_recv": "send_to_recv_ms"}
        label = pl.when(pl.col("url").is_not_null() & (pl.col("url") != "")).then(
            pl.concat_str("tid", pl.lit(" "), "url")
        )
        self.spans.add_frame(
            "update", "update {}", timed.rename(info), tuple(info.values()), label.otherwise("tid")
        )

    def open_wait_event(self) -> tuple[str, float | None, Event] | None:
        if self.last_wait is None or self.last_wait[0] < self.restarted:
            return None
        _, b, i, target = self.last_wait
        ev = b.event(i)
        return target, ev.ts, ev

    def open_batch_event(self) -> Event | None:
        if self.last_start is None or self.last_start[0] < self.restarted:
            return None
        return self.last_start[1].event(self.last_start[2])


def collect(
    lines: Iterable[TaggedLines] | Iterable[Event],
    parse: ParseStats,
    async_level: int | None = None,
    spill_dir: str | Path | None = None,
) -> Collected:
    """Fold the parsed lines (batches from :func:`~prime_rl.analysis.parser.scan_files`, or events;
    ``parse`` fills as they are read) into a :class:`Collected`. A long run's weight-update lines
    wait for their join on disk, in a temporary directory under ``spill_dir`` (None: the system's
    temporary directory; see :mod:`~prime_rl.analysis.spill`)."""
    gc_was_on = gc.isenabled()
    gc.disable()  # many small objects and no cycles: the collector's passes would cost ~10%
    try:
        return _collect(_batches(lines, parse), parse, async_level, spill_dir)
    finally:
        if gc_was_on:
            gc.enable()


def _refuse(b: TaggedLines, key: str, values: pl.Series, bad: pl.Series) -> pl.Series:
    """``values`` (field ``key``) without the rows ``bad`` (a Boolean column; null: not bad), which
    are counted as bad values, named by file:line (:meth:`~prime_rl.analysis.tagged.TaggedLines.refuse`):
    a number no run can have there."""
    bad = bad.fill_null(False)
    if not bad.any():
        return values
    b.refuse(key, bad)
    return values.zip_with(~bad, pl.Series([None] * len(values), dtype=pl.Float64))


def _task_and_repeat(b: TaggedLines, rows: pl.Series) -> pl.Series:
    """The lines ``rows`` of ``b`` as "task=T repeat=R" (their fields read there alone)."""
    keys = ["task", "repeat"]
    if b.events is None:
        read = fields_by_key(b.frame.get_column("rest").gather(rows), keys)
    else:
        at = rows.to_list()
        read = pl.DataFrame({k: b.rows_text(at, k) for k in keys}, schema=dict.fromkeys(keys, pl.String))
    dash = [pl.col(k).fill_null("-") for k in keys]
    return read.select(pl.format("task={} repeat={}", *dash)).to_series()


def _add_windows(
    windows: dict[str, tuple[float, float]],
    b: TaggedLines,
    first: float | None,
    last: float,
    collector_logs: set[str] | None = None,
) -> None:
    """Widen each file's first and last time by batch ``b`` (its first and last time: ``first``,
    ``last``; ``first`` None: it has no line with a time but start-up, and a file of no other line
    starts at its last: :func:`_windows_begun`), its files named as the weight updates name a
    server's (:func:`~prime_rl.analysis.updates.weights_frames`); with ``collector_logs`` (the batch
    has [collect] lines), those files are added to it."""
    if b.path is not None or b.events is None:
        spans = [
            (str(b.path) if b.path is not None else b.source, math.inf if first is None else first, last)
        ]
    else:  # a batch of events of one source: its events' own files
        spans = [
            (str(ev.path) if ev.path is not None else ev.source, ev.ts, ev.ts)
            for ev in b.events
            if ev.ts is not None
        ]
    for log, a, z in spans:
        if collector_logs is not None:
            collector_logs.add(log)
        was = windows.get(log)
        windows[log] = (min(was[0], a), max(was[1], z)) if was else (a, z)


def _windows_begun(windows: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """Each file's first and last time (:func:`_add_windows`), a file with no line but start-up
    (a log resumed into a part of its own) starting at its last: the run reaches that line (its
    restart's down time is measured up to it), wherever the parser's batches cut the file."""
    return {log: (a if a <= z else z, z) for log, (a, z) in windows.items()}


def _first_of_run(b: TaggedLines, first: float | None, loading: bool) -> float | None:
    """Batch ``b``'s first time but a start-up line's (``first``: its
    :meth:`~prime_rl.analysis.tagged.TaggedLines.overview`'s); ``loading``: its orchestrator's last
    ``[gen]`` run.start or batch.start before it is a run.start (:attr:`_Collector.loading`), so its
    ``[ckpt]`` waits before its first such line are a resume's load too, as where the batch holds the
    run.start (:func:`~prime_rl.analysis.tagged.start_up`)."""
    if not loading or not any((tag, event) in _LOAD_MARKS for tag, event, _ in b.overview().counts):
        return first
    ts = b.frame.get_column("ts").filter(pl.Series(~start_up(b.frame, True)))
    return ts.min() if ts.null_count() < len(ts) else None  # type: ignore[return-value]


_LOAD_MARKS = {(RESUME_LOAD[0], event) for event in RESUME_LOAD[1]}
"""The orchestrator's ``[ckpt]`` lines of a wait for weights (:data:`~prime_rl.analysis.tagged.RESUME_LOAD`)."""


def _has_collect(counts: Iterable[tuple[str, str | None, int]]) -> bool:
    """Whether a batch's lines counted by (tag, event) hold a [collect] line: its file is a collector's."""
    return any(tag == "collect" for tag, _, _ in counts)


def _run_start(first_ts: float, segments: Segments) -> float | None:
    """Where this run begins for its hangs: its first line (``first_ts``) or its first ``run.start``
    (a hang while the servers load is this run's); None without the processes' times (rl.log alone)."""
    begun = [t for t in (first_ts, segments.first_start) if t is not None and math.isfinite(t)]
    return min(begun) if begun else None


def _batches(items: Iterable[TaggedLines] | Iterable[Event], parse: ParseStats) -> Iterator[TaggedLines]:
    """Batches as they come; events grouped into batches of one source."""
    it = iter(items)
    first = next(it, None)
    if first is None:
        return
    if isinstance(first, TaggedLines):
        yield first
        yield from it  # type: ignore[misc]
        return
    yield from batches_from_events(itertools.chain([first], it), parse)  # type: ignore[list-item]


REBUILT_FROM = {"gen": ("gen_dur_ms",), "train": ("train_ms", "publish_ms")}
"""The per-step series a batch's or a step's start is rebuilt from in the older log format (its done
line less them)."""
REBUILT_MEDIANS = 10.0
"""A rebuilt start that reaches back before the logs' first line by more than this many times the
median of its durations (:data:`REBUILT_FROM`, summed) is refused: the run begins at the logs' first
line, as before the rebuild, and the count ``rebuilt_start_refused.<gen|train>`` (ms) names it. One
corrupt ``dur_ms=400000`` on the first batch.done of a 168 s run had made it 559 s."""
REBUILT_REFUSED = "rebuilt_start_refused."


def _typical_ms(series: dict[str, array], keys: tuple[str, ...]) -> float | None:
    """The sum of the medians of ``series[key]`` for ``keys`` (None: one has fewer than 3 values)."""
    total = 0.0
    for key in keys:
        values = np.frombuffer(series[key], dtype=np.float64) if key in series else np.empty(0)
        if len(values) < 3:
            return None
        total += float(np.median(values))
    return total


def _collect(
    batches: Iterable[TaggedLines], parse: ParseStats, async_level: int | None, spill_dir: str | Path | None
) -> Collected:
    c = _Collector(spill_dir)
    counts, last_events = c.counts, {}
    windows: dict[str, tuple[float, float]] = {}  # each log's first and last time
    collector_logs: set[str] = set()  # those of windows with [collect] lines
    lines: Counter = Counter()  # by (tag, event): counts' "tag.event" keys are made once at the end
    for seq, b in enumerate(batches):
        if b.source == "collect":  # first: a line stamped before its run's start has no time, which
            c.collector_runs.see(b)  # then begins nothing; the lines of every tag end the log's runs
        counts_of, first, last = b.overview()
        for tag, event, n in counts_of:
            lines[tag, event] += n
        # the launcher's log keeps every run's lines over --clean: its [hang] and [launcher] lines are no
        # time of this one, whatever the file is called (rl.log renamed: its lines are the launcher's)
        launcher = (
            b.source == LAUNCHER or bool(counts_of) and all(tag in LAUNCHER_TAGS for tag, _, _ in counts_of)
        )
        if last is not None and not launcher:
            first = _first_of_run(b, first, c.loading.get(b.source, False))
            _add_windows(windows, b, first, last, collector_logs if _has_collect(counts_of) else None)
            c.saw_first(b, first)
        last_events[b.source] = (b, len(b) - 1)
        c.fold(seq, b)
    for b, i, e in c.errors:
        _handler_error(parse, b.event(i), e)
    for (tag, event), n in lines.items():
        counts[f"{tag}.{event or '-'}"] += n
    busiest = _busiest_scoring(c.by_step["verify_dur_ms"], c.by_step["gen_dur_ms"])
    paired = _paired_scoring(c.by_step["verify_dur_ms"], c.by_step["gen_dur_ms"])
    c.finish_unfinished()
    earlier_runs_ms = {}
    for key in list(c.by_step):  # each let go once in its series, before the join
        per_step = c.by_step.pop(key)
        per_step.extend_into(c.series[key])
        if per_step.replaced:
            earlier_runs_ms[key] = math.fsum(per_step.replaced)
    updates = c.join.updates()
    frame = update_frame(updates)
    c.update_spans(frame)
    c.samples.finish()
    c.verifications.finish()
    offsets = c.join.offsets
    windows = _windows_begun(windows)
    # the run's first and last time, a server log on a clock of its own moved onto the orchestrator's
    first_ts, last_ts = run_window(windows, offsets) if windows else (math.inf, -math.inf)
    if (began := c.collector_runs.first) is not None:  # its first line is written as a sample ends
        first_ts = min(first_ts, began)
    # the older log format: a batch's or a step's start is known only from its done line, so the run
    # begins at the first one's rebuilt start, not at its done line (then its time lies in the run)
    older = {
        "gen": not lines["gen", "batch.start"],
        "train": not any(lines["train", e] for e in ("compute.done", "wait.start", "wait.done")),
    }
    for kind, (log, began) in c.rebuilt_first.items():
        if older[kind] and math.isfinite(first_ts):
            began -= offsets.get(log, (0.0, 0))[0]
            typical = _typical_ms(c.series, REBUILT_FROM[kind])
            if typical is not None and (first_ts - began) * 1000.0 > REBUILT_MEDIANS * typical:
                # one value no run of these durations has (a unit bug): it would move the run's start
                counts[f"{REBUILT_REFUSED}{kind}"] = round((first_ts - began) * 1000.0)
                continue
            first_ts = min(first_ts, began)
    c.segments.finish()
    # a trio's down time in which a collector's run or verify pass was at work is run time, and so is
    # its part up to the launcher's watchdog's last [hang] line in it (the processes ran, hung) or its
    # [launcher] line as it stopped them (a child exited: the others ran up to it)
    watched = c.hangs.finish(parse.last_lines)
    down = uncovered(
        down_after_hangs(c.segments.down_intervals(), watched, c.segments.resumes_began(), c.hangs.stops),
        c.collector_runs.at_work(),
    )
    down_s = math.fsum(end - start for start, end in down)
    # between two collector runs nothing ran, nor between them and a trio's logs (first to last line)
    trio = {log: w for log, w in windows.items() if log not in collector_logs}
    down_s += c.collector_runs.idle_seconds(run_window(trio, offsets) if trio else None)
    run_s = (last_ts - first_ts - down_s) if last_ts - down_s > first_ts else None
    before_logs_ms = _before_logs(c.reach_back, first_ts, offsets)
    for key, ms, kept in c.overlap_ms:  # time no run can have: left out as what lies before the logs
        before_logs_ms.setdefault(key, []).append((ms, kept))
    hangs = place_hangs(
        c.segments.restarts,
        watched,
        _run_start(first_ts, c.segments),
        c.progress.pauses,
        last_ts if math.isfinite(last_ts) else None,
    )
    # a pause's time in the run's: its start-up and any down time left out, as the run's time leaves them
    window = (first_ts, last_ts)
    pauses = [replace(p, run_seconds=run_time_within([(p.start, p.end)], window, down)) for p in hangs.pauses]
    last_write = c.last_write[0].event(c.last_write[1]) if c.last_write else None
    # the batches and waits no line ended: left open by a crash, or where the logs end
    for (key, _), since in c.open_since.items():
        c.left_open.setdefault(key, []).append((since, math.inf, math.inf))
    open_ms = {key: open_time_within(opens, window, down) * 1000.0 for key, opens in c.left_open.items()}
    orchestrator_silent = sorted(c.orchestrator_silent)
    # a wait after a 429 lasts at most to where its client was stopped: the end of its logs, a crash
    waits = c.rate_limits
    ends = orchestrator_ends(waits.starts(ORCHESTRATOR), orchestrator_silent, down)
    waits.clip(ORCHESTRATOR, ends, run_window(trio, offsets) if trio else window, down)
    ends = c.collector_runs.run_ends(waits.logged_in(COLLECTOR), waits.starts(COLLECTOR))
    waits.clip(COLLECTOR, ends, window, down)
    open_updates = _open_updates(frame, c.join.rpc_left_open(), orchestrator_silent, window, down)
    collected = Collected(
        parse,
        updates,
        c.spans.kept(),
        c.series,
        counts,
        async_level,
        run_s,
        c.staleness_by_step,
        hangs.restarts + c.collector_runs.restarts,
        {source: b.event(i) for source, (b, i) in last_events.items()},
        c.open_wait_event(),
        c.open_batch_event(),
        last_write,
        c.server_counts,
        c.verify_workers,
        c.server_loads.by_url,
        c.server_gen_ms,
        hangs.current,
        dict(sorted(c.spans.dropped.items())),
        c.join.spill.failed,
        c.spans.bars,
        down_seconds=down_s,
        clock_offsets=offsets,
        rate_limits=c.rate_limits,
        batch_windows=c.batch_windows,
        collect_seconds=c.collector_runs.seconds(),
        verify_passes=c.collector_runs.verify_passes(),
        train_wait=c.train_wait[0].event(c.train_wait[1]) if c.train_wait else None,
        hangs_unplaced=hangs.unplaced,
        verify_busiest=busiest,
        verify_paired=paired,
        pauses=pauses,
        repeated_steps=[
            f"{before} then {kept} (kept): {', '.join(keys)} {what}"
            for kept, (before, what, keys) in c.repeated_examples.items()
        ],
        hangs_untold=[h for h in c.progress.untold if any(h.event is e for e in hangs.current)],
        paused_seconds=run_time_within([(p.start, p.end) for p in pauses], window, down),
        step_seconds=c.segments.step_seconds(),
        earlier_runs_ms=earlier_runs_ms,
        first_ts=first_ts if math.isfinite(first_ts) else None,
        before_logs_ms=before_logs_ms,
        overlapping=c.overlap_examples,
        open_ms={key: ms for key, ms in open_ms.items() if ms > 0},
        open_updates=open_updates,
        orchestrator_fell_silent=[silent for silent, _ in orchestrator_silent],
        # a time the watchdog's [hang] lines prove the processes ran through is a hang, no restart, as
        # is one the launcher's stop lines prove one launch's children ran through
        silences=uncovered(
            silent_together(c.segments.silences, down, c.segments.all_stepped()),
            watched_running(watched, c.hangs.stops),
        )
        if c.segments.first_start is None
        else [],
    )
    collected.memo("update_frame", lambda: frame)  # made once, above
    return collected


def _before_logs(
    reach_back: list[tuple[str, str, float, float, float]], first_ts: float, offsets: Offsets
) -> dict[str, list[tuple[float, float]]]:
    """By series, the durations ``reach_back`` (:attr:`_Collector.reach_back`) that begin before the
    logs' window (its start ``first_ts``, on the orchestrator's clock), each as (its value, its part from
    ``first_ts`` to its end), ms."""
    out: dict[str, list[tuple[float, float]]] = {}
    if not math.isfinite(first_ts):
        return out
    for key, log, start, end, ms in reach_back:
        off = offsets.get(log, (0.0, 0))[0]
        if start - off < first_ts - ROUNDING_S:
            out.setdefault(key, []).append((ms, min(max(end - off - first_ts, 0.0) * 1000.0, ms)))
    return out


def _open_updates(
    frame: pl.DataFrame,
    rpc_left_open: pl.DataFrame,
    restarted: list[tuple[float, float]],
    window: tuple[float, float],
    down: list[tuple[float, float]],
) -> pl.DataFrame | None:
    """:attr:`Collected.open_updates` of the updates ``frame`` (:func:`update_frame`): each of the
    steps' updates never answered runs from its client.send to where the down time after it begins,
    when that is before the orchestrator's next restart (the whole run went down), else to the
    orchestrator's last line before that restart (it crashed alone: its silence after it is a dead
    process's) (``restarted``: for each restart, when the crashed run fell silent and the restart's
    time; the restart whose crashed run logged the client.send, a resume's start-up lines being the
    resumed run's; :func:`~prime_rl.analysis.restarts.open_spans`), within ``window`` less ``down``;
    its server had it from its server.recv on, its engine from the last ``rpc.start`` left open
    (``rpc_left_open``: :meth:`~prime_rl.analysis.updates.UpdateJoin.rpc_left_open`) of its trace id
    and server file after that. One after which the orchestrator sent another update before that
    end went on without its answer: it is none (it was not what the orchestrator waited for)."""
    rows = frame.with_row_index("k").filter(unanswered() & of_the_steps())
    if not rows.height:
        return None
    silent = np.array([t for t, _ in restarted])
    sent = (
        frame.filter(of_the_steps() & pl.col("send_ts").is_not_null())
        .select("send_ts", "tid")
        .sort("send_ts")
    )
    sent_ts, sent_tid = sent.get_column("send_ts").to_numpy(), sent.get_column("tid").to_list()
    rpc_starts: dict[tuple[str, str], list[float]] = {}
    for tid, server, ts in rpc_left_open.iter_rows():
        if ts is not None:
            rpc_starts.setdefault((tid, server), []).append(ts)
    out = []

    def run_ms(since: float, end: float) -> float:
        return run_time_within([(since, end)], window, down) * 1000.0

    columns = rows.select("k", "send_ts", "recv_ts", "tid", pl.col("server").cast(pl.String))
    for k, send, recv, tid, server in columns.iter_rows():
        run = int(np.searchsorted(silent, send, side="left"))  # the run that logged it
        last, until = restarted[run] if run < len(restarted) else (math.inf, math.inf)
        ((_, end),) = open_spans([(send, last, until)], down)
        later = int(np.searchsorted(sent_ts, send, side="right"))
        while later < len(sent_tid) and sent_tid[later] == tid:
            later += 1
        if later < len(sent_tid) and sent_ts[later] < end:  # the orchestrator went on without it
            continue
        handling = rpc = None
        if recv is not None and recv < end:
            handling = run_ms(max(recv, send), end)
            engine = [t for t in rpc_starts.get((tid, server), ()) if recv <= t < end]
            if engine:
                rpc = run_ms(max(engine), end)
        out.append((k, run_ms(send, end), handling, rpc))
    return pl.DataFrame(
        out,
        schema={"k": pl.UInt32, "open_wall": pl.Float64, "open_handling": pl.Float64, "open_rpc": pl.Float64},
        orient="row",
    )


SAMPLE_RETRY = "collect."
"""The prefix of the collector's retries in :attr:`Collected.server_counts` (``collect.retry.429``)."""
COLLECTOR_COUNTS = {"retry.429": COLLECTOR_429, "completions": COLLECTOR_COMPLETIONS}
"""The collector's part of each of these :attr:`Collected.counts`, counted apart."""

_COLLECT_EVENTS = (
    RUN_START,
    "rollout.done",
    "rollout.failed",
    "request.retry",
    "parallel.change",
    "parallel.pause",
    "verify.done",
)
"""The events of the collector's [collect] lines (docs/design.md)."""


def _busiest_scoring(scoring: _PerStep, batch: _PerStep) -> tuple[str, float, float] | None:
    """:attr:`Collected.verify_busiest`: of the steps with both a summed scoring time and a batch
    time above 0, the one whose scoring is the largest multiple of its batch (the first of equals)."""
    size = min(scoring.size, batch.size)
    cpu, wall = scoring.by_number[:size], batch.by_number[:size]
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(~np.isnan(cpu) & (wall > 0), cpu / wall, -1.0)
    pairs = [(k, v, batch.other[k]) for k, v in scoring.other.items() if batch.other.get(k, 0.0) > 0]
    if size and ratio.max() >= 0:  # the numbered steps' busiest, then the named ones
        i = int(np.argmax(ratio))
        pairs.insert(0, (str(i), float(cpu[i]), float(wall[i])))
    return max(pairs, key=lambda p: p[1] / p[2], default=None)


def _paired_scoring(scoring: _PerStep, batch: _PerStep) -> ScoringPairs | None:
    """:attr:`Collected.verify_paired`: the summed scoring and batch times of the steps with both (a
    batch time above 0), and the steps with a scoring time and no batch time (none at all; one of 0
    pairs with nothing but is a batch line)."""
    cpu = scoring.by_number[: scoring.size]
    wall = np.full(len(cpu), np.nan)
    size = min(scoring.size, batch.size)
    wall[:size] = batch.by_number[:size]
    scored = ~np.isnan(cpu)
    both = scored & (np.nan_to_num(wall) > 0)
    alone = scored & np.isnan(wall)
    named = [(v, batch.other[k]) for k, v in scoring.other.items() if batch.other.get(k, 0.0) > 0]
    n = int(both.sum()) + len(named)
    if not n:
        return None
    unnamed = [v for k, v in scoring.other.items() if k not in batch.other]
    return ScoringPairs(
        math.fsum([*cpu[both].tolist(), *(v for v, _ in named)]),
        math.fsum([*wall[both].tolist(), *(w for _, w in named)]),
        n,
        int(alone.sum()) + len(unnamed),
        math.fsum([*cpu[alone].tolist(), *unnamed]),
    )


class _PerStep:
    """One value per step, the last: a float array indexed by the step number (NaN where a step
    has none; values are finite), a dict for steps that are no small integer; beside each, the
    segment of its process (:mod:`~prime_rl.analysis.restarts`) that last set it."""

    __slots__ = (
        "by_number",
        "segment_of",
        "size",
        "other",
        "other_segment",
        "replaced",
        "repeats",
        "top",
        "top_line",
        "other_line",
        "earlier",
    )

    def __init__(self) -> None:
        self.by_number = np.full(1024, np.nan)
        self.segment_of = np.full(1024, -1, dtype=np.int64)
        """The segment that last set each numbered step (-1: none)."""
        self.size = 0
        """Numbered steps below this may have a value."""
        self.other: dict[str, float] = {}
        self.other_segment: dict[str, int] = {}
        self.replaced = array("d")
        """The values a later segment replaced: each step's last value in each segment that set it
        but the last (:attr:`Collected.earlier_runs_ms`)."""
        self.repeats = np.empty(0, np.int64)
        """The rows of the last :meth:`set_many`'s lines that set a step again in the segment that
        had set it (a step's line logged twice in one run, no restart between: the last wins)."""
        self.top = (-1, -1)
        """The segment of the last numbered line set and its highest step (:func:`_repeated`)."""
        self.top_line = (-1, -1)
        """The line that last set the step of :attr:`top` (its file's number, its line; -1: none): the
        one a repeat in a later batch repeats (:func:`_repeated` finds a step set again only at the
        highest of its segment so far, that step)."""
        self.other_line: dict[str, tuple[int, int]] = {}
        self.earlier: list[tuple[int, int]] = []
        """For each of :attr:`repeats`, the line that had set its step before: (file, line)."""

    def set_many(
        self,
        steps: pl.Series | list[str | None],
        values: pl.Series | list[float | None],
        numbers: pl.Series | None = None,
        segments: np.ndarray | None = None,
        lines: np.ndarray | None = None,
        file: int = -1,
    ) -> tuple[int, list[float]]:
        """Set each step's value, in order (the last of a step wins). Returns how many steps were
        redone and the values without a step. ``segments``: each line's segment of its process
        (0, 1, ... by restart, never falling; None: all in segment 0). A step is redone once in each
        segment that sets it after an earlier segment did (a resume that logs it again); a step
        logged twice in one segment is not. A step is one when it is 1-8 ASCII digits (``numbers``:
        :func:`~prime_rl.analysis.tagged.step_numbers` of ``steps``, made here when not given); any
        other text (``x``, 123456789012: a bad value) is no step, and its value is one without a
        step, as on a line with none. A step is numbered below the steps seen so far plus 100,000 (a
        step number far beyond the others is kept by name); column-wise, the few named steps one by one.
        ``lines``: each row's line in file number ``file``, kept by step to name a repeat's earlier line
        (:attr:`earlier`)."""
        steps = pl.Series("step", steps, dtype=pl.String) if isinstance(steps, list) else steps
        values = pl.Series("value", values, dtype=pl.Float64) if isinstance(values, list) else values
        numbers = step_numbers(steps) if numbers is None else numbers
        value = values.to_numpy()  # null: NaN (the values are finite)
        segment = np.zeros(len(value), np.int64) if segments is None else np.asarray(segments, np.int64)
        keep = ~np.isnan(value)
        self.repeats = np.empty(0, np.int64)
        self.earlier = []
        line = np.full(len(value), -1, np.int64) if lines is None else np.asarray(lines, np.int64)
        if not keep.any():
            return 0, []
        has_step = numbers.is_not_null().to_numpy()
        loose = value[keep & ~has_step].tolist()
        number = numbers.to_numpy()  # null: NaN
        with np.errstate(invalid="ignore"):
            numbered = keep & (number < self.size + 100_000)
        named = keep & has_step & ~numbered
        again = 0
        repeats: list[np.ndarray] = []
        earlier: list[tuple[int, int]] = []
        if numbered.any():
            idx, seg = number[numbered].astype(np.int64), segment[numbered]
            top_line = self.top_line
            repeated, self.top = _repeated(idx, seg, self.segment_of, self.top)
            rows = np.flatnonzero(numbered)
            at_top = np.flatnonzero((idx == self.top[1]) & (seg == self.top[0]))
            if len(at_top):  # the last line that set the (new) highest step
                self.top_line = (file, int(line[rows[at_top[-1]]]))
            repeats.append(rows[repeated])
            if repeated.any():  # the line before each: an earlier row of these for its step, or the kept one
                order = np.lexsort((rows, idx))
                same = idx[order][1:] == idx[order][:-1]
                prev = np.full(len(idx), -1, np.int64)
                prev[order[1:][same]] = order[:-1][same]
                for k in np.flatnonzero(repeated).tolist():
                    p = int(prev[k])
                    if p >= 0:
                        earlier.append((file, int(line[rows[p]])))
                    else:  # set before these lines: the highest step so far, the one of top_line
                        earlier.append(top_line)
        if named.any():
            names = steps.filter(pl.Series(named)).to_list()
            rows = np.flatnonzero(named).tolist()
            for row, name, g in zip(rows, names, segment[named].tolist(), strict=True):
                if self.other_segment.get(name, -1) == g:
                    repeats.append(np.array([row], np.int64))
                    earlier.append(self.other_line.get(name, (-1, -1)))
                self.other_line[name] = (file, int(line[row]))
            for name, v, g in zip(names, value[named].tolist(), segment[named].tolist(), strict=True):
                if self.other_segment.get(name, g) < g:
                    again += 1
                    self.replaced.append(self.other[name])
                self.other[name] = v
                self.other_segment[name] = g
        if numbered.any():
            again += self._set_numbered(number[numbered].astype(np.int64), value[numbered], segment[numbered])
        if repeats:
            rows = np.concatenate(repeats)
            order = np.argsort(rows, kind="stable")
            self.repeats = rows[order]
            self.earlier = [earlier[k] for k in order.tolist()]
        return again, loose

    def _set_numbered(self, idx: np.ndarray, values: np.ndarray, segment: np.ndarray) -> int:
        """Set the numbered steps ``idx`` (with their lines' ``segment``); how many were redone."""
        top = int(idx.max()) + 1
        if top > len(self.by_number):
            size = max(top, 2 * len(self.by_number))
            grown, segments = np.full(size, np.nan), np.full(size, -1, dtype=np.int64)
            grown[: self.size], segments[: self.size] = (
                self.by_number[: self.size],
                self.segment_of[: self.size],
            )
            self.by_number, self.segment_of = grown, segments
        self.size = max(self.size, top)
        if len(idx) < 2 or bool((idx[1:] > idx[:-1]).all()):  # the usual case: steps in order, once each
            last = np.arange(len(idx))
        else:  # the last value of each step (numpy's assignment does not promise an order for repeats)
            last = len(idx) - 1 - np.unique(idx[::-1], return_index=True)[1]
        again = _redone(idx, segment, self.segment_of)
        if again:
            self.replaced.extend(_replaced(idx, values, segment, self.by_number, self.segment_of))
        self.by_number[idx[last]] = values[last]
        self.segment_of[idx[last]] = segment[last]  # the segments never fall: the last is the latest
        return again

    def extend_into(self, out: array) -> None:
        """Append every step's value to ``out``: numbered steps in step order (one block of doubles),
        then the others."""
        numbered = self.by_number[: self.size]
        out.frombytes(numbered[~np.isnan(numbered)].astype(np.float64).tobytes())
        out.extend(self.other.values())


def _repeated(
    idx: np.ndarray, segment: np.ndarray, segment_of: np.ndarray, top: tuple[int, int]
) -> tuple[np.ndarray, tuple[int, int]]:
    """Which lines at steps ``idx`` in ``segment`` (never falling) set a step again in the segment that
    set it (an earlier of these lines did, or it was last set in that segment before them:
    ``segment_of``) at the segment's highest step so far: a line logged twice. A step below one logged
    after it in its segment is a resume's redone step whose restart is found at a later line (a resumed
    trainer's ``[ckpt] write.done`` before its first ``step.done``), no repeat. ``top``: (segment,
    highest step) before these lines; returned with the lines' own."""
    top_segment, top_step = top
    before = np.empty(len(idx), dtype=np.int64)  # the segment's highest step before each line
    # the segments never fall: one when the first and last are (the usual batch), else each in turn
    for g in [int(segment[0])] if len(segment) and segment[0] == segment[-1] else np.unique(segment).tolist():
        rows = np.flatnonzero(segment == g)
        start = top_step if g == top_segment else -1
        highest = np.maximum.accumulate(np.concatenate(([start], idx[rows])))
        before[rows] = highest[:-1]
        top_segment, top_step = g, int(highest[-1])
    n = len(idx)
    out = np.zeros(n, dtype=bool)
    inside = idx < len(segment_of)
    out[inside] = segment_of[idx[inside]] == segment[inside]
    if n > 1 and not bool((idx[1:] > idx[:-1]).all()):  # a step twice among these lines (in order: none)
        order = np.lexsort((np.arange(n), segment, idx))
        step, seg = idx[order], segment[order]
        again = np.zeros(n, dtype=bool)
        again[1:] = (step[1:] == step[:-1]) & (seg[1:] == seg[:-1])
        out[order[again]] = True
    return out & (idx >= before), (top_segment, top_step)


def _redone(idx: np.ndarray, segment: np.ndarray, segment_of: np.ndarray) -> int:
    """How many of the (step, segment) pairs of lines at steps ``idx`` in ``segment`` (never
    falling) are a step redone: set in a segment later than one that set it before, once each;
    ``segment_of``: the segment that last set each step before these lines (-1: none)."""
    order = np.lexsort((segment, idx))
    step, seg = idx[order], segment[order]
    pair = np.ones(len(step), dtype=bool)  # each (step, segment) once
    pair[1:] = (step[1:] != step[:-1]) | (seg[1:] != seg[:-1])
    step, seg = step[pair], seg[pair]
    first = np.ones(len(step), dtype=bool)  # a step's first segment here, else a later one
    first[1:] = step[1:] != step[:-1]
    before = segment_of[step]
    return int((~first).sum()) + int((first & (before >= 0) & (before < seg)).sum())


def _replaced(
    idx: np.ndarray, values: np.ndarray, segment: np.ndarray, by_number: np.ndarray, segment_of: np.ndarray
) -> list[float]:
    """The values lines at steps ``idx`` in ``segment`` (never falling) replace from an earlier
    segment: each step's last value in each segment here but its last, and the value it had
    (``by_number``, set in ``segment_of``) when that was set in an earlier segment than its first here."""
    order = np.lexsort((np.arange(len(idx)), segment, idx))
    step, seg, value = idx[order], segment[order], values[order]
    last = np.ones(len(step), dtype=bool)  # the last line of each (step, segment)
    last[:-1] = (step[1:] != step[:-1]) | (seg[1:] != seg[:-1])
    step, seg, value = step[last], seg[last], value[last]
    latest = np.ones(len(step), dtype=bool)  # each step's latest segment here
    latest[:-1] = step[1:] != step[:-1]
    first = np.ones(len(step), dtype=bool)  # and its first
    first[1:] = step[1:] != step[:-1]
    before = segment_of[step[first]]
    earlier = (before >= 0) & (before < seg[first])
    return value[~latest].tolist() + by_number[step[first]][earlier].tolist()


class _Spans:
    """The spans of each kind: the first :data:`SPANS_KEPT` (a collector's samples:
    :data:`SAMPLES_KEPT`) and the last as many, the rest counted.
    Spans come in blocks of columns; the kept rows become :class:`Span` objects only when a report
    asks for them (:class:`~prime_rl.analysis.spans.KeptSpans`)."""

    def __init__(self) -> None:
        self.head: dict[str, list[Part]] = {}
        self.head_rows: dict[str, int] = {}
        self.tail: dict[str, deque[SpanBlock]] = {}
        self.tail_rows: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self.bars: dict[str, Bars] = {}
        """Every span of each kind, kept or not (:mod:`~prime_rl.analysis.bars`)."""

    def bars_of(self, kind: str) -> Bars:
        """The bars of ``kind`` (made at its first span)."""
        out = self.bars.get(kind)
        if out is None:
            out = self.bars[kind] = Bars()
        return out

    def extend(
        self,
        kind: str,
        start: Sequence[float],
        end: Sequence[float],
        label: str,
        args: Sequence,
        info: dict[str, Sequence] | None = None,
        barred: bool = False,
    ) -> None:
        """Spans of ``kind`` as columns (``label`` a format with one ``{}`` for each span's ``args``),
        added to the kind's bars too (``barred``: they are already, with the rows that
        :meth:`rows_kept` left out)."""
        if len(start):
            if not barred:
                self.bars_of(kind).add(start, end)
            self.add(kind, SpanBlock(start, end, label, args, info))

    def add_frame(
        self,
        kind: str,
        label: str,
        frame: pl.DataFrame,
        info: tuple[str, ...] = (),
        arg: pl.Expr | str = "arg",
        barred: bool = False,
    ) -> None:
        """Spans of ``kind`` as a frame's columns ``start``, ``end`` and the ``info`` keys', with the
        label's argument ``arg`` (a column, or an expression made for the kept rows only): every one
        to the bars (``barred``: the caller added them to bars of its own), the kept ones
        (:meth:`rows_kept`) as lists."""
        if not frame.height:
            return
        if not barred:
            self.bars_of(kind).add(frame.get_column("start").to_numpy(), frame.get_column("end").to_numpy())
        kept = self.rows_kept(kind, frame).select("start", "end", arg, *info)
        # kept as columns: the block's lists are made when a report first asks for one of its spans,
        # by then only for the blocks still kept (most of a long run's tail blocks are let go first)
        start, end, args, *values = kept.get_columns()
        self.extend(kind, start, end, label, args, dict(zip(info, values, strict=True)) or None, barred=True)

    def rows_kept(self, kind: str, frame: pl.DataFrame) -> pl.DataFrame:
        """Of ``frame``'s rows, spans of ``kind`` about to be added as one block, the ones that would be
        kept (the rest counted as dropped now): a block of every update of a long run would hold all
        their values in Python lists only for the first and last :data:`SPANS_KEPT` to be used."""
        kept = kept_of(kind)
        head = min(max(kept - self.head_rows.get(kind, 0), 0), frame.height)
        tail = min(frame.height - head, kept)
        cut = frame.height - head - tail
        if not cut:
            return frame
        self.dropped[kind] = self.dropped.get(kind, 0) + cut
        return pl.concat([frame.head(head), frame.tail(tail)])

    def add(self, kind: str, block: SpanBlock) -> None:
        kept = kept_of(kind)
        room = kept - self.head_rows.get(kind, 0)
        if room > 0:
            n = min(room, len(block.start))
            self.head.setdefault(kind, []).append((kind, block, 0, n))
            self.head_rows[kind] = self.head_rows.get(kind, 0) + n
            if n == len(block.start):
                return
            block.first = n
        tail = self.tail.setdefault(kind, deque())
        tail.append(block)
        rows = self.tail_rows.get(kind, 0) + len(block)
        while rows > kept:  # drop the oldest rows of the tail
            oldest = tail[0]
            cut = min(rows - kept, len(oldest))
            oldest.first += cut
            rows -= cut
            self.dropped[kind] = self.dropped.get(kind, 0) + cut
            if not len(oldest):
                tail.popleft()
        self.tail_rows[kind] = rows

    def kept(self) -> KeptSpans:
        """Every kept span in start order (made into objects when asked)."""
        parts = [p for kind_parts in self.head.values() for p in kind_parts]
        for kind, blocks in self.tail.items():
            parts += [(kind, b, b.first, len(b.start)) for b in blocks]
        return KeptSpans(parts)


_HANDLER_ERRORS = (ValueError, TypeError, OverflowError, KeyError)


def _failing_row(tag: str, seq: int, lines: TaggedLines) -> int:
    """The row of ``lines`` that makes ``tag``'s handler raise: halves of the rows are run through
    a scratch collector (the real one keeps what the batch added before it raised) until one row
    is left; the first row when no single row raises alone."""
    lo, hi = 0, len(lines)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _raises(tag, seq, lines.rows(lo, mid)):
            hi = mid
        elif _raises(tag, seq, lines.rows(mid, hi)):
            lo = mid
        else:
            return 0
    return lo


def _raises(tag: str, seq: int, lines: TaggedLines) -> bool:
    lines.stats = None  # a scratch slice: its bad values were counted with its batch
    try:
        _Collector().handler(tag)(seq, lines)  # type: ignore[misc]
    except _HANDLER_ERRORS:
        return True
    return False


def _handler_error(parse: ParseStats, ev: Event, e: Exception) -> None:
    """A line whose values the collector could not use: counted with the bad values, named by file:line."""
    parse.bad_values += 1
    if len(parse.bad_value_examples) < EXAMPLES:
        parse.bad_value_examples.append(f"{ev.where()}: {type(e).__name__}: {e} ({ev.text()[:120]})")
