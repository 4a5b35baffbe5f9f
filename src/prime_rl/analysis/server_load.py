"""Each inference server's load from its ``[server]`` lines, one series per server URL.

The orchestrator and the collector scrape every server's ``/metrics``
(:mod:`prime_rl.clients.server_metrics`) into ``[server] metrics url= running= waiting=
kv_cache_pct= preemptions= queue_ms= ...`` lines. Per server URL this module keeps their
series (:class:`ServerLoadSeries`); :mod:`~prime_rl.analysis.servers` names KV-cache pressure
from them (``kv_cache_pressure``) and renders the per-server load table of SUMMARY.md.

Time between two scrapes is taken from the lines' timestamps. A pause in scraping (a gap more
than ten times the median interval and over a minute: logs of two runs appended, a process
down) is not counted as time of the server's, and the preemptions across it are left out.
``preemptions=`` is the server's cumulative counter: a value lower than the one before means the
server restarted and counts from 0 again.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from prime_rl.analysis.parser import Event

GAP_FACTOR = 10.0
GAP_MIN_S = 60.0


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolation percentile (as :func:`prime_rl.analysis.stats.describe`)."""
    vals = sorted(values)
    if not vals:
        return None
    k = (len(vals) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(vals) - 1)
    return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)


@dataclass
class ServerLoadSeries:
    """One server's ``[server]`` lines: one entry per scrape in the series, in log order."""

    url: str
    ts: list[float | None] = field(default_factory=list)
    running: list[float] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)
    kv_cache_pct: list[float | None] = field(default_factory=list)
    preemptions: list[float | None] = field(default_factory=list)
    queue_ms: list[tuple[float, float]] = field(default_factory=list)
    """(mean queue ms, requests) of the scrapes after which requests had finished."""
    ttft_ms: list[tuple[float, float]] = field(default_factory=list)
    """(mean TTFT ms, 1) of the scrapes after which requests had got their first token (the line
    does not count them: each scrape's mean weighs the same)."""
    scrape_errors: int = 0
    """Failed scrapes (from ``scrape.error failures=`` and ``scrape.ok failures=``)."""
    off: str | None = None
    """Why scraping the server was given up (``scrape.off``), if it was."""
    _streak: int = 0

    def add(self, ev: Event) -> None:
        """Fold one ``[server]`` event of this server."""
        if ev.event == "metrics":
            self.ts.append(ev.ts)
            self.running.append(ev.num("running") or 0.0)
            self.waiting.append(ev.num("waiting") or 0.0)
            self.kv_cache_pct.append(ev.num("kv_cache_pct"))
            self.preemptions.append(ev.num("preemptions"))
            queue, requests, ttft = ev.num("queue_ms"), ev.num("requests"), ev.num("ttft_ms")
            if queue is not None and requests:
                self.queue_ms.append((queue, requests))
            if ttft is not None:
                self.ttft_ms.append((ttft, 1.0))
        elif ev.event == "scrape.error":
            self._streak = max(self._streak, int(ev.num("failures") or 1))
        elif ev.event == "scrape.ok":
            self.scrape_errors += max(self._streak, int(ev.num("failures") or 0))
            self._streak = 0
        elif ev.event == "scrape.off":
            self.off = f"HTTP {ev.fields['status']}" if "status" in ev.fields else "off"
            if ev.fields.get("reason"):
                self.off = ev.fields["reason"].replace("_", " ")

    @property
    def scrapes(self) -> int:
        return len(self.ts)

    @property
    def errors(self) -> int:
        """Failed scrapes, an unfinished run of failures at the end of the logs included."""
        return self.scrape_errors + self._streak

    def intervals(self) -> list[tuple[int, float]]:
        """(index of the later scrape, seconds) of every interval between two timestamped
        scrapes that is no pause in scraping (see the module docstring)."""
        pairs = [
            (i, b - a)
            for i, (a, b) in enumerate(zip(self.ts, self.ts[1:], strict=False), 1)
            if a is not None and b is not None and b >= a
        ]
        if not pairs:
            return []
        limit = max(GAP_MIN_S, GAP_FACTOR * statistics.median(s for _, s in pairs))
        return [(i, s) for i, s in pairs if s <= limit]

    def preempted_in(self, i: int) -> float:
        """Preemptions between scrape ``i - 1`` and scrape ``i`` (a lower count: a restart)."""
        before, now = self.preemptions[i - 1], self.preemptions[i]
        if now is None:
            return 0.0
        if before is None or now < before:
            return now if before is not None else 0.0
        return now - before

    def covered_s(self) -> float:
        """Seconds between the server's scrapes, pauses left out."""
        return sum(s for _, s in self.intervals())

    def preempted(self) -> float:
        """Preemptions during the scraped time."""
        return sum(self.preempted_in(i) for i, _ in self.intervals())

    def preemptions_per_min(self) -> float | None:
        covered = self.covered_s()
        return 60.0 * self.preempted() / covered if covered > 0 else None

    def under_pressure(self, i: int, kv_high: float) -> bool:
        """Scrape ``i`` (and the interval before it) shows pressure: requests were preempted in
        the interval, or the KV cache is at least ``kv_high`` percent full while requests wait."""
        kv = self.kv_cache_pct[i]
        return (i > 0 and self.preempted_in(i) > 0) or (
            kv is not None and kv >= kv_high and self.waiting[i] > 0
        )

    def pressure_s(self, kv_high: float) -> float:
        """Seconds of intervals that ended under pressure (:meth:`under_pressure`)."""
        return sum(s for i, s in self.intervals() if self.under_pressure(i, kv_high))

    def kv_values(self) -> list[float]:
        return [v for v in self.kv_cache_pct if v is not None]

    @staticmethod
    def weighted_mean(pairs: list[tuple[float, float]]) -> float | None:
        n = sum(w for _, w in pairs)
        return sum(v * w for v, w in pairs) / n if n else None

    def to_dict(self) -> dict[str, object]:
        """The server's load for summary.json."""
        kv = self.kv_values()
        return {
            "scrapes": self.scrapes,
            "scrape_errors": self.errors,
            "off": self.off,
            "running_p50": percentile(self.running, 0.5),
            "running_max": max(self.running, default=None),
            "waiting_p50": percentile(self.waiting, 0.5),
            "waiting_max": max(self.waiting, default=None),
            "kv_cache_pct_p50": percentile(kv, 0.5),
            "kv_cache_pct_p95": percentile(kv, 0.95),
            "kv_cache_pct_max": max(kv, default=None),
            "preemptions": self.preempted(),
            "preemptions_per_min": self.preemptions_per_min(),
            "queue_ms_mean": self.weighted_mean(self.queue_ms),
            "ttft_ms_mean": self.weighted_mean(self.ttft_ms),
        }


class ServerLoads:
    """Folds ``[server]`` events into one :class:`ServerLoadSeries` per URL."""

    def __init__(self) -> None:
        self.by_url: dict[str, ServerLoadSeries] = {}

    def add(self, ev: Event) -> None:
        url = ev.fields.get("url")
        if url:
            self.by_url.setdefault(url, ServerLoadSeries(url)).add(ev)
