"""From parsed events to per-metric series, counts and time spans: everything the rules look at.

Which tag and event feeds which series is fixed by the tagged-line grammar in ``docs/design.md``;
the series are the ones the stats files of ``bottleneck_logs/README.md`` describe.
"""

from __future__ import annotations

import gc
import math
from array import array
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from prime_rl.analysis.parser import EXAMPLES, Event, ParseStats
from prime_rl.analysis.restarts import Restart, Segments
from prime_rl.analysis.server_load import ServerLoads, ServerLoadSeries
from prime_rl.analysis.updates import Update, UpdateJoin

SERIES = (
    "queue_ms",
    "rpc_ms",
    "wall_ms",
    "server_rpc_ms",
    "send_to_recv_ms",
    "ckpt_wait_ms",
    "write_ms",
    "gen_dur_ms",
    "verify_dur_ms",
    "trunc_pct",
    "staleness",
    "retry_wait_ms",
    "rate_limit_wait_ms",
    "collect_ms",
    "train_wait_ms",
    "train_ms",
    "collect_queue_ms",
    "collect_gen_ms",
    "collect_verify_ms",
    "env_ms",
    "tool_ms",
    "episode_gen_ms",
    "episode_turns",
    "verify_tail_ms",
    "lock_wait_ms",
)
"""Every per-metric series, in the order summary.json lists them."""

UPDATE_SERIES = ("queue_ms", "rpc_ms", "wall_ms", "server_rpc_ms", "send_to_recv_ms", "lock_wait_ms")
"""The series taken from the joined weight updates (one value per update)."""


PER_STEP = {
    "gen_dur_ms": "gen",
    "verify_dur_ms": "verify",
    "verify_tail_ms": "verify",
    "trunc_pct": "rollout",
    "staleness": "rollout",
    "train_wait_ms": "train",
    "train_ms": "train",
    "ckpt_wait_ms": "wait",
    "write_ms": "write",
}
"""Series with one value per step: a step done again after a restart replaces its first value."""

SPANS_KEPT = 20_000
"""Spans of each kind kept from the start of the run, and as many from its end: the timeline and
the trace of a long run show its first and last steps; the spans between are counted
(``Collected.spans_dropped``). The statistics use every line whatever this limit."""


def describe(values: list[float]) -> dict[str, float]:
    """count, mean, stddev, min, p50, p95, p99, max (linear interpolation percentiles)."""
    vals = sorted(v for v in values if v is not None and not math.isnan(v))
    n = len(vals)
    if not n:
        return {"count": 0}

    def pct(q: float) -> float:
        k = (n - 1) * q
        lo = int(k)
        hi = min(lo + 1, n - 1)
        return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)

    mean = sum(vals) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else 0.0
    return {
        "count": n,
        "mean": mean,
        "stddev": std,
        "min": vals[0],
        "p50": pct(0.5),
        "p95": pct(0.95),
        "p99": pct(0.99),
        "max": vals[-1],
    }


@dataclass(slots=True)
class Span:
    """Something that took time: a generation batch, a checkpoint wait or write, a weight update, a
    trainer step's compute and its wait for rollouts."""

    kind: str
    start: float
    end: float
    label: str
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Collected:
    """What the logs say, before any judgement: the input of every rule and of the report."""

    parse: ParseStats
    updates: list[Update]
    spans: list[Span]
    """In start order."""
    series: dict[str, array]
    """Each :data:`SERIES` as an ``array('d')`` of its values (8 bytes a value)."""
    counts: Counter
    async_level: int | None
    run_seconds: float | None = None
    """First to last timestamped event (None with fewer than two distinct timestamps)."""
    staleness_by_step: dict[int, int] = field(default_factory=dict)
    """[rollout] staleness of each step's batch (its oldest sample), by ``current_step``."""
    restarts: list[Restart] = field(default_factory=list)
    """Where a process started again in the same log (a crash and a ``--resume``)."""
    last_events: dict[str, Event] = field(default_factory=dict)
    """The last tagged event of each process (by file label)."""
    open_wait: tuple[str, float | None, Event] | None = None
    """The orchestrator's last [ckpt] wait.start with no wait.done after it: (target step, since, event)."""
    open_batch: Event | None = None
    """The orchestrator's last [gen] batch.start with no batch.done after it."""
    last_write: Event | None = None
    """The trainer's last [ckpt] write.done."""
    server_counts: dict[str, Counter] = field(default_factory=dict)
    """Per server URL: retried requests by status (``retry.429``, ``retry.error``, ...)."""
    verify_workers: int | None = None
    """Verifier processes ([verify] workers= or the run's config), for verification's utilisation."""
    server_load: dict[str, ServerLoadSeries] = field(default_factory=dict)
    """Per server URL: its load scraped from /metrics ([server] lines, :mod:`~prime_rl.analysis.server_load`)."""
    server_gen_ms: dict[str, list[float]] = field(default_factory=dict)
    """Per server URL: the collector's generation time of each sample it answered ([collect] url=)."""
    hangs: list[Event] = field(default_factory=list)
    """The ``rl`` launcher watchdog's ``[hang] detected`` lines: no process made progress."""
    spans_dropped: dict[str, int] = field(default_factory=dict)
    """Spans of each kind left out of ``spans`` between the first and last :data:`SPANS_KEPT`."""
    _described: dict[str, dict[str, float]] = field(default_factory=dict, repr=False, compare=False)

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
        return sum(self.series[key])

    def staleness_histogram(self) -> dict[int, int]:
        """Steps per staleness value (from [rollout] lines)."""
        hist: dict[int, int] = {}
        for s in self.staleness_by_step.values():
            hist[s] = hist.get(s, 0) + 1
        return dict(sorted(hist.items()))

    def staleness_violations(self) -> list[tuple[int, int]]:
        """(step, staleness) of every step whose staleness is above the run's async_level."""
        if self.async_level is None:
            return []
        return sorted((step, s) for step, s in self.staleness_by_step.items() if s > self.async_level)

    @property
    def is_collector_run(self) -> bool:
        """[collect] lines and none of the trio's: an offline collection, which never updates weights."""
        trio = ("gen.", "ckpt.", "train.", "weights.", "rollout.", "verify.batch")
        has = lambda prefix: any(k.startswith(prefix) and n for k, n in self.counts.items())  # noqa: E731
        return has("collect.") and not any(has(p) for p in trio)


class _Collector:
    """Folds events into series, counts and spans; one method per tag."""

    def __init__(self) -> None:
        self.series: dict[str, array] = {k: array("d") for k in SERIES}
        self.spans = _Spans()
        self.counts: Counter = Counter()
        self.join = UpdateJoin()
        self.open_gen: dict[str, float] = {}
        self.open_wait: dict[str, float] = {}
        self.last_open_wait: tuple[str, float | None, Event] | None = None
        self.staleness_by_step: dict[int, int] = {}
        self.by_step: dict[str, _PerStep] = {k: _PerStep() for k in PER_STEP}
        self.batches_started = 0
        self.segments = Segments()
        self.last_events: dict[str, Event] = {}
        self.open_batch: Event | None = None
        self.last_write: Event | None = None
        self.server_counts: dict[str, Counter] = {}
        self.verify_workers: int | None = None
        self.server_loads = ServerLoads()
        self.hangs: list[Event] = []
        self.server_gen_ms: dict[str, list[float]] = {}
        self.compute_start: dict[str, float] = {}
        self.by_tag: dict[str, Callable[[Event], None]] = {
            "weights": self.weights,
            "ckpt": self.ckpt,
            "gen": self.gen,
            "rollout": self.rollout,
            "verify": self.verify,
            "train": self.train,
            "collect": self.collect,
            "env": self.env,
            "server": self.server_loads.add,
            "hang": self.hang,
        }

    def _add(self, key: str, value: float | None, step: str | None = None) -> None:
        """Add a value; a per-step series (:data:`PER_STEP`) keeps one value per step, the last."""
        if value is None:
            return
        if step is not None and key in self.by_step:
            if self.by_step[key].set(step, value):
                self.counts[f"redone.{key}"] += 1
        else:
            self.series[key].append(value)

    def _retry(self, ev: Event) -> None:
        status = ev.fields.get("status", "?")
        self.counts[f"retry.{status}"] += 1
        self._add("retry_wait_ms", ev.num("wait_ms"))
        if status == "429":
            self._add("rate_limit_wait_ms", ev.num("wait_ms"))
        url = ev.fields.get("url")
        if url:
            self.server_counts.setdefault(url, Counter())[f"retry.{status}"] += 1

    def hang(self, ev: Event) -> None:
        if ev.event == "detected":
            self.hangs.append(ev)

    def weights(self, ev: Event) -> None:
        if ev.tid:
            self.join.add(ev)

    def ckpt(self, ev: Event) -> None:
        if ev.event == "wait.start":
            target = ev.fields.get("target_step", "?")
            if ev.ts is not None:
                self.open_wait[target] = ev.ts
            self.last_open_wait = (target, ev.ts, ev)
        elif ev.event == "wait.done":
            self.last_open_wait = None
            ms = ev.num("wait_ms")
            if ms is not None:
                self._add("ckpt_wait_ms", ms, ev.fields.get("target_step"))
                end = ev.ts or 0.0
                start = self.open_wait.pop(ev.fields.get("target_step", "?"), end - ms / 1000.0)
                label = f"wait for weights step {ev.fields.get('target_step')}"
                self.spans.append(Span("ckpt_wait", start, end, label, {"wait_ms": ms}))
        elif ev.event == "write.done" and (ms := ev.num("write_ms")) is not None:
            self.last_write = ev
            self._add("write_ms", ms, ev.fields.get("step"))
            if ev.ts is not None:
                label = f"write weights step {ev.fields.get('step')}"
                self.spans.append(Span("ckpt_write", ev.ts - ms / 1000.0, ev.ts, label))

    def gen(self, ev: Event) -> None:
        if ev.event == "batch.start":
            self.batches_started += 1
        key = ev.fields.get("step")
        if key is None:  # no step= on the line: batches are paired by their count
            key = str(self.batches_started)
        if ev.event == "batch.start":
            self.open_batch = ev
            if ev.ts is not None:
                self.open_gen[key] = ev.ts
        elif ev.event == "batch.done":
            self.open_batch = None
            ms = ev.num("dur_ms")
            if ms is not None:
                self._add("gen_dur_ms", ms, ev.fields.get("step"))
                end = ev.ts or 0.0
                start = self.open_gen.pop(key, end - ms / 1000.0)
                label = f"generate step {ev.fields.get('step', '?')}"
                info = {"completions": ev.fields.get("completions"), "dur_ms": ms}
                self.spans.append(Span("gen", start, end, label, info))
            self.counts["completions"] += int(ev.num("completions") or 0)
        elif ev.event == "request.retry":
            self._retry(ev)
        elif ev.event == "group.drop":
            self.counts[f"drop.{ev.fields.get('reason', '?')}"] += 1

    def rollout(self, ev: Event) -> None:
        step = ev.fields.get("current_step")
        self._add("trunc_pct", ev.num("trunc_pct"), step)
        staleness, step_num = ev.num("staleness"), ev.num("current_step")
        self._add("staleness", staleness, step)
        if staleness is not None and step_num is not None:
            self.staleness_by_step[int(step_num)] = int(staleness)

    def verify(self, ev: Event) -> None:
        """[verify] batch.done: ``dur_ms`` is scoring time summed over the batch's completions (CPU
        time of concurrent workers, not wall time); ``tail_ms`` and ``workers`` when the line has them."""
        if ev.event == "batch.done":
            step = ev.fields.get("step")
            self._add("verify_dur_ms", ev.num("cpu_ms") or ev.num("dur_ms"), step)
            self._add("verify_tail_ms", ev.num("tail_ms"), step)
            workers = ev.num("workers")
            if workers:
                self.verify_workers = int(workers)

    def train(self, ev: Event) -> None:
        if ev.event == "step.done":
            # step 0's wait is start-up (the servers start, the first batch is generated with
            # nothing to overlap it), not the steady state a bottleneck is judged on
            step = ev.fields.get("step")
            if step == "0":
                self.counts["train_startup_wait_ms"] = int(ev.num("wait_ms") or 0)
            else:
                self._add("train_wait_ms", ev.num("wait_ms"), step)
            self._add("train_ms", ev.num("train_ms"), step)
            self._train_spans(ev, str(step))
        elif ev.event == "compute.done" and ev.ts is not None:
            train = ev.num("train_ms")
            if train is not None:  # the line ends the compute: forward/backward, then the optimizer
                start, step = ev.ts - train / 1000.0, ev.fields.get("step", "?")
                self.spans.append(Span("train", start, ev.ts, f"train step {step}", {"train_ms": train}))
                fwd, opt = ev.num("fwd_bwd_ms"), ev.num("optim_ms")
                if fwd:
                    self.spans.append(
                        Span("train_fwd_bwd", start, start + fwd / 1000.0, f"forward/backward {step}")
                    )
                if opt:
                    self.spans.append(Span("train_optim", ev.ts - opt / 1000.0, ev.ts, f"optimizer {step}"))
                self.compute_start[step] = start

    def _train_spans(self, ev: Event, step: str) -> None:
        """The step's wait for rollouts (before its compute) and, from a trainer that writes no
        ``compute.done`` line, the compute itself: it ended ``write_ms`` before this line."""
        train, wait = ev.num("train_ms"), ev.num("wait_ms")
        if ev.ts is None or train is None:
            return
        start = self.compute_start.pop(step, None)
        if start is None:
            end = ev.ts - (ev.num("write_ms") or 0.0) / 1000.0
            start = end - train / 1000.0
            self.spans.append(Span("train", start, end, f"train step {step}", {"train_ms": train}))
        if wait:
            self.spans.append(Span("train_wait", start - wait / 1000.0, start, f"wait for rollouts {step}"))

    def collect(self, ev: Event) -> None:
        """The offline collector: one rollout.done per sample."""
        if ev.event == "request.retry":
            self._retry(ev)
            return
        self._add("collect_ms", ev.num("dur_ms"))
        url = ev.fields.get("url")
        if ev.event == "rollout.done":
            self.counts["completions"] += 1
            for key in ("queue_ms", "gen_ms", "verify_ms"):
                self._add(f"collect_{key}", ev.num(key))
            gen = ev.num("gen_ms")
            if url and gen is not None:
                self.server_gen_ms.setdefault(url, []).append(gen)
        elif ev.event == "rollout.failed" and url:
            self.server_counts.setdefault(url, Counter())["failed"] += 1
        elif ev.fields.get("status") == "429":  # older collector lines: a 429 with its dur_ms
            self.counts["retry.429"] += 1

    def env(self, ev: Event) -> None:
        """Multi-turn episodes ([env] episode.done): the environment's and its tools' time, the
        model's generation time and the turns of each episode; outcomes and tool errors counted."""
        if ev.event != "episode.done":
            return
        self._add("env_ms", ev.num("env_ms"))
        self._add("tool_ms", ev.num("tool_ms"))
        self._add("episode_gen_ms", ev.num("gen_ms"))
        self._add("episode_turns", ev.num("turns"))
        self.counts[f"episode.{ev.fields.get('outcome', '?')}"] += 1
        self.counts["episode.tool_errors"] += int(ev.num("tool_errors") or 0)

    def restart(self, ev: Event) -> None:
        """A process started again in the same log: what was open in it is no longer waited on."""
        if ev.source == "orchestrator":
            self.last_open_wait, self.open_batch = None, None

    def update_spans(self, updates: list[Update]) -> None:
        """The joined updates' series and spans, then every span in start order."""
        for u in updates:
            for key in UPDATE_SERIES:
                self._add(key, getattr(u, key))
            if u.start is not None and u.end is not None:
                info = {"queue_ms": u.queue_ms, "rpc_ms": u.rpc_ms, "send_to_recv_ms": u.send_to_recv_ms}
                label = f"update {u.tid}" + (f" {u.url}" if u.url else "")
                self.spans.append(Span("update", u.start, u.end, label, info))


def collect(events: Iterable[Event], parse: ParseStats, async_level: int | None = None) -> Collected:
    """Fold the parsed events (``parse`` fills as they are read) into a :class:`Collected`."""
    gc_was_on = gc.isenabled()
    gc.disable()  # millions of small objects and no cycles: the collector's passes would cost ~10%
    try:
        return _collect(events, parse, async_level)
    finally:
        if gc_was_on:
            gc.enable()


def _collect(events: Iterable[Event], parse: ParseStats, async_level: int | None) -> Collected:
    c = _Collector()
    counts, by_tag, last_events, segments = c.counts, c.by_tag, c.last_events, c.segments
    first_ts, last_ts = math.inf, -math.inf
    lines: Counter = Counter()  # by (tag, event): counts' "tag.event" keys are made once at the end
    for ev in events:
        lines[ev.tag, ev.event] += 1
        ts = ev.ts
        if ts is not None:
            if ts < first_ts:
                first_ts = ts
            if ts > last_ts:
                last_ts = ts
        last_events[ev.source] = ev
        if segments.observe(ev):
            c.restart(ev)
        handler = by_tag.get(ev.tag)
        if handler is not None:
            try:
                handler(ev)
            except (ValueError, TypeError, OverflowError, KeyError) as e:  # never a crash: count it
                _handler_error(parse, ev, e)
    for (tag, event), n in lines.items():
        counts[f"{tag}.{event or '-'}"] += n
    for key, values in c.by_step.items():
        c.series[key].extend(values.values())
    updates = c.join.updates()
    c.update_spans(updates)
    run_s = (last_ts - first_ts) if last_ts > first_ts else None
    return Collected(
        parse,
        updates,
        c.spans.kept(),
        c.series,
        counts,
        async_level,
        run_s,
        c.staleness_by_step,
        segments.restarts,
        last_events,
        c.last_open_wait,
        c.open_batch,
        c.last_write,
        c.server_counts,
        c.verify_workers,
        c.server_loads.by_url,
        c.server_gen_ms,
        c.hangs,
        c.spans.dropped,
    )


class _PerStep:
    """One value per step, the last: an ``array('d')`` indexed by the step number (NaN where a
    step has none; values are finite), a dict for steps that are no small integer."""

    __slots__ = ("by_number", "other")

    def __init__(self) -> None:
        self.by_number = array("d")
        self.other: dict[str, float] = {}

    def set(self, step: str, value: float) -> bool:
        """Set the step's value; True when it had one (the step was done again)."""
        values = self.by_number
        if step.isdigit() and len(step) < 9 and (i := int(step)) < len(values) + 100_000:
            if i >= len(values):
                values.extend(array("d", [math.nan]) * (i + 1 - len(values)))
                values[i] = value
                return False
            had = values[i] == values[i]  # not NaN
            values[i] = value
            return had
        had = step in self.other
        self.other[step] = value
        return had

    def values(self) -> Iterable[float]:
        """Every step's value: numbered steps in step order, then the others."""
        yield from (v for v in self.by_number if v == v)
        yield from self.other.values()


class _Spans:
    """The spans of each kind: the first :data:`SPANS_KEPT` and the last as many, the rest counted."""

    def __init__(self) -> None:
        self.head: dict[str, list[Span]] = {}
        self.tail: dict[str, deque[Span]] = {}
        self.dropped: dict[str, int] = {}

    def append(self, span: Span) -> None:
        head = self.head.setdefault(span.kind, [])
        if len(head) < SPANS_KEPT:
            head.append(span)
            return
        tail = self.tail.get(span.kind)
        if tail is None:
            tail = self.tail[span.kind] = deque(maxlen=SPANS_KEPT)
        if len(tail) == SPANS_KEPT:
            self.dropped[span.kind] = self.dropped.get(span.kind, 0) + 1
        tail.append(span)

    def kept(self) -> list[Span]:
        """Every kept span in start order."""
        out = [s for spans in self.head.values() for s in spans]
        out += [s for spans in self.tail.values() for s in spans]
        out.sort(key=lambda s: s.start)
        return out


def _handler_error(parse: ParseStats, ev: Event, e: Exception) -> None:
    """A line whose values the collector could not use: counted with the bad values, named by file:line."""
    parse.bad_values += 1
    if len(parse.bad_value_examples) < EXAMPLES:
        parse.bad_value_examples.append(f"{ev.where()}: {type(e).__name__}: {e} ({ev.text()[:120]})")
