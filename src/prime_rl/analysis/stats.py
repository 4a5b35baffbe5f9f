"""From parsed events to per-metric series, counts and time spans: everything the rules look at.

Which tag and event feeds which series is fixed by the tagged-line grammar in ``docs/design.md``;
the series are the ones the stats files of ``bottleneck_logs/README.md`` describe.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from prime_rl.analysis.parser import Event, ParseStats
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
)
"""Every per-metric series, in the order summary.json lists them."""

UPDATE_SERIES = ("queue_ms", "rpc_ms", "wall_ms", "server_rpc_ms", "send_to_recv_ms")
"""The series taken from the joined weight updates (one value per update)."""


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


@dataclass
class Span:
    """Something that took time: a generation batch, a checkpoint wait or write, a weight update."""

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
    series: dict[str, list[float]]
    counts: Counter
    async_level: int | None
    run_seconds: float | None = None
    """First to last timestamped event (None with fewer than two distinct timestamps)."""
    staleness_by_step: dict[int, int] = field(default_factory=dict)
    """[rollout] staleness of each step's batch (its oldest sample), by ``current_step``."""
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
        """Only [collect] lines: an offline collection, which never updates weights."""
        return self.counts.get("collect.rollout.done", 0) > 0 and not self.series["gen_dur_ms"]


class _Collector:
    """Folds events into series, counts and spans; one method per tag."""

    def __init__(self) -> None:
        self.series: dict[str, list[float]] = {k: [] for k in SERIES}
        self.spans: list[Span] = []
        self.counts: Counter = Counter()
        self.join = UpdateJoin()
        self.open_gen: dict[str, float] = {}
        self.open_wait: dict[str, float] = {}
        self.staleness_by_step: dict[int, int] = {}
        self.by_tag: dict[str, Callable[[Event], None]] = {
            "weights": self.weights,
            "ckpt": self.ckpt,
            "gen": self.gen,
            "rollout": self.rollout,
            "verify": self.verify,
            "train": self.train,
            "collect": self.collect,
            "env": self.env,
        }

    def _add(self, key: str, value: float | None) -> None:
        if value is not None:
            self.series[key].append(value)

    def _retry(self, ev: Event) -> None:
        self.counts[f"retry.{ev.fields.get('status', '?')}"] += 1
        self._add("retry_wait_ms", ev.num("wait_ms"))

    def weights(self, ev: Event) -> None:
        if ev.tid:
            self.join.add(ev)

    def ckpt(self, ev: Event) -> None:
        if ev.event == "wait.start" and ev.ts is not None:
            self.open_wait[ev.fields.get("target_step", "?")] = ev.ts
        elif ev.event == "wait.done":
            ms = ev.num("wait_ms")
            if ms is not None:
                self.series["ckpt_wait_ms"].append(ms)
                end = ev.ts or 0.0
                start = self.open_wait.pop(ev.fields.get("target_step", "?"), end - ms / 1000.0)
                label = f"wait for weights step {ev.fields.get('target_step')}"
                self.spans.append(Span("ckpt_wait", start, end, label, {"wait_ms": ms}))
        elif ev.event == "write.done" and ev.num("write_ms") is not None:
            ms = ev.num("write_ms")
            self.series["write_ms"].append(ms)
            if ev.ts is not None:
                label = f"write weights step {ev.fields.get('step')}"
                self.spans.append(Span("ckpt_write", ev.ts - ms / 1000.0, ev.ts, label))

    def gen(self, ev: Event) -> None:
        key = ev.fields.get("step", str(self.counts["gen.batch.start"]))
        if ev.event == "batch.start" and ev.ts is not None:
            self.open_gen[key] = ev.ts
        elif ev.event == "batch.done":
            ms = ev.num("dur_ms")
            if ms is not None:
                self.series["gen_dur_ms"].append(ms)
                end = ev.ts or 0.0
                start = self.open_gen.pop(key, end - ms / 1000.0)
                label = f"generate step {ev.fields.get('step', '?')}"
                info = {"completions": ev.fields.get("completions"), "dur_ms": ms}
                self.spans.append(Span("gen", start, end, label, info))
            self.counts["completions"] += int(ev.num("completions") or 0)
        elif ev.event == "request.retry":
            self._retry(ev)

    def rollout(self, ev: Event) -> None:
        self._add("trunc_pct", ev.num("trunc_pct"))
        staleness, step = ev.num("staleness"), ev.num("current_step")
        self._add("staleness", staleness)
        if staleness is not None and step is not None:
            self.staleness_by_step[int(step)] = int(staleness)

    def verify(self, ev: Event) -> None:
        if ev.event == "batch.done":
            self._add("verify_dur_ms", ev.num("dur_ms"))

    def train(self, ev: Event) -> None:
        if ev.event == "step.done":
            # step 0's wait is start-up (the servers start, the first batch is generated with
            # nothing to overlap it), not the steady state a bottleneck is judged on
            if ev.fields.get("step") == "0":
                self.counts["train_startup_wait_ms"] = int(ev.num("wait_ms") or 0)
            else:
                self._add("train_wait_ms", ev.num("wait_ms"))
            self._add("train_ms", ev.num("train_ms"))

    def collect(self, ev: Event) -> None:
        """The offline collector: one rollout.done per sample."""
        if ev.event == "request.retry":
            self._retry(ev)
            return
        self._add("collect_ms", ev.num("dur_ms"))
        if ev.event == "rollout.done":
            self.counts["completions"] += 1
            for key in ("queue_ms", "gen_ms", "verify_ms"):
                self._add(f"collect_{key}", ev.num(key))
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

    def update_spans(self, updates: list[Update]) -> None:
        """The joined updates' series and spans, then every span in start order."""
        for u in updates:
            for key in UPDATE_SERIES:
                self._add(key, getattr(u, key))
            if u.start is not None and u.end is not None:
                info = {"queue_ms": u.queue_ms, "rpc_ms": u.rpc_ms}
                self.spans.append(Span("update", u.start, u.end, f"update {u.tid}", info))
        self.spans.sort(key=lambda s: s.start)


def collect(events: Iterable[Event], parse: ParseStats, async_level: int | None = None) -> Collected:
    """Fold the parsed events (``parse`` fills as they are read) into a :class:`Collected`."""
    c = _Collector()
    counts, by_tag = c.counts, c.by_tag
    first_ts, last_ts = math.inf, -math.inf
    for ev in events:
        counts[f"{ev.tag}.{ev.event or '-'}"] += 1
        if ev.ts is not None:
            first_ts, last_ts = min(first_ts, ev.ts), max(last_ts, ev.ts)
        handler = by_tag.get(ev.tag)
        if handler is not None:
            handler(ev)
    updates = c.join.updates()
    c.update_spans(updates)
    run_s = (last_ts - first_ts) if last_ts > first_ts else None
    return Collected(parse, updates, c.spans, c.series, counts, async_level, run_s, c.staleness_by_step)
