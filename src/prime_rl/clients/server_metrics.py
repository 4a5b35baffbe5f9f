"""Each inference server's load, scraped from its Prometheus ``/metrics`` at a fixed interval.

vLLM exports its scheduler state (requests running and waiting), KV-cache use, a counter of
preemptions and latency histograms (time in the waiting queue, time to first token). A
:class:`ServerMetricsScraper` reads them from every server of a run every
``server_metrics.interval_s`` seconds on a small session of its own (never queued behind the
inference pool), logs one ``[server] metrics`` line per scrape and server (grammar in
docs/design.md), and keeps the latest :class:`ServerLoad` of each server (:meth:`ServerMetricsScraper.latest`) for whoever routes
requests by headroom. It never stops a run: a failed scrape is counted and logged once per run
of failures (again at the 10th, 100th, ...); a server without vLLM's metrics (a hosted API: 404
or another 4xx, or a page without them) is scraped no more after one warning.

The text is parsed by ``prometheus_client`` (a dependency of vLLM's). Gauges and counters are
summed over vLLM's engines (data parallelism), KV-cache use is the fullest engine's; the
histograms' mean and median are over the requests that finished (queue time: vLLM records it
when a request ends) or got their first token (TTFT) since the previous scrape, from the
differences of their buckets.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import aiohttp
from loguru import logger
from prometheus_client.parser import text_string_to_metric_families
from pydantic import Field

from prime_rl.clients.errors import TRANSPORT_EXCEPTIONS, describe
from prime_rl.config import StrictModel
from prime_rl.logging import log_tagged
from prime_rl.tracing import now, one_line

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
KV_CACHE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
"""KV-cache use as a fraction (1 = full); vLLM before 0.10 named it ``gpu_cache_usage_perc``."""
PREEMPTIONS = "vllm:num_preemptions"
QUEUE_TIME = "vllm:request_queue_time_seconds"
TTFT = "vllm:time_to_first_token_seconds"
_FAMILIES = (RUNNING, WAITING, *KV_CACHE, PREEMPTIONS, QUEUE_TIME, TTFT)
_WANTED = frozenset(
    f"{name}{suffix}" for name in _FAMILIES for suffix in ("", "_total", "_bucket", "_count", "_sum")
)
"""Sample and family names the scraper reads; every other line of the page is dropped unparsed."""
LOG_AGAIN_AT = (1, 10, 100, 1000, 10000)
"""Consecutive failed scrapes of a server at which a ``scrape.error`` line is logged."""


class ServerMetricsConfig(StrictModel):
    """Scraping each inference server's Prometheus ``/metrics`` into ``[server] metrics`` lines."""

    interval_s: float = Field(default=5.0, ge=0)
    """Seconds between two scrapes of one server; 0 turns scraping off."""

    timeout_s: float = Field(default=2.0, gt=0)
    """Seconds one scrape may take (a server that does not answer in time counts as a failed scrape)."""


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram summed over its series: cumulative counts per upper bound."""

    buckets: tuple[tuple[float, float], ...]
    """``(le, cumulative count)`` by ascending bound, ``+Inf`` last."""
    count: float
    total: float
    """The sum of the observed values."""

    def since(self, before: Histogram | None) -> Histogram:
        """The observations made after ``before`` (itself when ``before`` is None, has other
        buckets, or has larger counts: the server restarted and its counters began again)."""
        if before is None or [b for b, _ in before.buckets] != [b for b, _ in self.buckets]:
            return self
        if before.count > self.count or any(
            c0 > c1 for (_, c0), (_, c1) in zip(before.buckets, self.buckets, strict=True)
        ):
            return self
        diff = tuple((b, c1 - c0) for (b, c1), (_, c0) in zip(self.buckets, before.buckets, strict=True))
        return Histogram(diff, self.count - before.count, self.total - before.total)

    def mean(self) -> float | None:
        """The mean observed value; None without observations."""
        return self.total / self.count if self.count > 0 else None

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile as Prometheus' ``histogram_quantile`` estimates it: linear within
        the bucket that holds it (from 0 for the first); the largest finite bound when it lies in
        the ``+Inf`` bucket. None without observations."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        for bound, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(bound):
                    return lower
                inside = cumulative - below
                return bound if inside <= 0 else lower + (bound - lower) * (rank - below) / inside
            lower, below = bound, cumulative
        return lower


@dataclass(frozen=True)
class MetricsSnapshot:
    """What one ``/metrics`` page says (None: the page lacks the metric)."""

    running: float | None
    waiting: float | None
    kv_cache_pct: float | None
    """KV-cache use in percent (0-100), of the fullest engine."""
    preemptions: float | None
    """Preemptions since the server started (a counter)."""
    queue_time: Histogram | None
    ttft: Histogram | None

    @property
    def is_vllm(self) -> bool:
        """Whether the page holds vLLM's scheduler metrics at all."""
        return self.running is not None or self.waiting is not None


@dataclass(frozen=True)
class ServerLoad:
    """One scrape of one server: its load now, and its latencies since the previous scrape."""

    url: str
    at: float
    """When it was scraped (``time.monotonic()``): how fresh it is."""
    running: int
    """Requests in the engine's batch."""
    waiting: int
    """Requests waiting to be scheduled (for KV-cache room or batch capacity)."""
    kv_cache_pct: float | None
    """KV-cache use in percent (0-100)."""
    preemptions: int | None
    """Preemptions since the server started."""
    queue_ms: float | None = None
    """Mean time in the waiting queue of the requests that finished since the previous scrape
    (vLLM records a request's queue time when it ends)."""
    queue_p50_ms: float | None = None
    """Their median (estimated from the histogram's buckets)."""
    ttft_ms: float | None = None
    """Mean time to first token of the requests that got one since the previous scrape."""
    ttft_p50_ms: float | None = None
    requests: int | None = None
    """Requests that finished since the previous scrape (None on the first scrape)."""


def _wanted_lines(text: str) -> str:
    """The lines of ``text`` that describe or sample a metric the scraper reads."""
    keep = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            name = parts[2] if len(parts) > 2 else ""
        else:
            name = line.split("{", 1)[0].split(None, 1)[0] if line.strip() else ""
        if name in _WANTED:
            keep.append(line)
    return "\n".join(keep) + "\n"


def _histogram(samples: list) -> Histogram | None:
    buckets: dict[float, float] = {}
    count = total = 0.0
    for s in samples:
        if s.name.endswith("_bucket") and "le" in s.labels:
            bound = float(s.labels["le"])
            buckets[bound] = buckets.get(bound, 0.0) + s.value
        elif s.name.endswith("_count"):
            count += s.value
        elif s.name.endswith("_sum"):
            total += s.value
    if not buckets:
        return None
    return Histogram(tuple(sorted(buckets.items())), count, total)


def parse_metrics(text: str) -> MetricsSnapshot:
    """The metrics a :class:`ServerLoad` is made of, from a Prometheus text page.

    Raises ``ValueError`` on a page the Prometheus parser cannot read.
    """
    summed: dict[str, float] = {}
    peak: dict[str, float] = {}
    histograms: dict[str, Histogram | None] = {}
    for family in text_string_to_metric_families(_wanted_lines(text)):
        name = family.name
        if name in (QUEUE_TIME, TTFT):
            histograms[name] = _histogram(family.samples)
            continue
        values = [s.value for s in family.samples if s.name in (name, f"{name}_total")]
        if values:
            summed[name] = summed.get(name, 0.0) + sum(values)
            peak[name] = max(peak.get(name, -math.inf), *values)
    kv = next((peak[n] for n in KV_CACHE if n in peak), None)
    return MetricsSnapshot(
        running=summed.get(RUNNING),
        waiting=summed.get(WAITING),
        kv_cache_pct=None if kv is None else 100.0 * kv,
        preemptions=summed.get(PREEMPTIONS),
        queue_time=histograms.get(QUEUE_TIME),
        ttft=histograms.get(TTFT),
    )


def metrics_url(base: str) -> str:
    """The ``/metrics`` URL of a server given by its base URL, with or without ``/v1``."""
    base = base.rstrip("/")
    return f"{base[:-3] if base.endswith('/v1') else base}/metrics"


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def load_of(url: str, at: float, snap: MetricsSnapshot, before: MetricsSnapshot | None) -> ServerLoad:
    """The :class:`ServerLoad` of a scrape ``snap``, its latencies taken since ``before``."""
    queue = ttft = None
    if before is not None:  # the first scrape's histograms hold the server's whole life: no delta
        queue = snap.queue_time.since(before.queue_time) if snap.queue_time is not None else None
        ttft = snap.ttft.since(before.ttft) if snap.ttft is not None else None
    return ServerLoad(
        url=url,
        at=at,
        running=round(snap.running or 0.0),
        waiting=round(snap.waiting or 0.0),
        kv_cache_pct=None if snap.kv_cache_pct is None else round(snap.kv_cache_pct, 2),
        preemptions=None if snap.preemptions is None else round(snap.preemptions),
        queue_ms=_ms(queue.mean()) if queue else None,
        queue_p50_ms=_ms(queue.quantile(0.5)) if queue else None,
        ttft_ms=_ms(ttft.mean()) if ttft else None,
        ttft_p50_ms=_ms(ttft.quantile(0.5)) if ttft else None,
        requests=None if queue is None else round(queue.count),
    )


class ServerMetricsScraper:
    """Scrape every server's ``/metrics`` every ``config.interval_s`` seconds (one task each).

    Use as ``async with ServerMetricsScraper(urls, config):`` or :meth:`start` / :meth:`aclose`
    around a run. :meth:`latest` gives each server's last :class:`ServerLoad`; ``errors`` counts
    failed scrapes per server; ``off`` names the servers no longer scraped, with the reason.
    """

    def __init__(
        self, urls: Iterable[str], config: ServerMetricsConfig, headers: Mapping[str, str] | None = None
    ):
        self.urls = list(dict.fromkeys(u.rstrip("/") for u in urls))
        self.config = config
        self.headers = dict(headers or {})
        self.errors: dict[str, int] = dict.fromkeys(self.urls, 0)
        self.scrapes: dict[str, int] = dict.fromkeys(self.urls, 0)
        self.off: dict[str, str] = {}
        self._streak: dict[str, int] = dict.fromkeys(self.urls, 0)
        self._latest: dict[str, ServerLoad] = {}
        self._before: dict[str, MetricsSnapshot] = {}
        self._tasks: list[asyncio.Task] = []
        self._session: aiohttp.ClientSession | None = None

    @property
    def enabled(self) -> bool:
        return self.config.interval_s > 0

    def latest(self, url: str) -> ServerLoad | None:
        """The last successful scrape of ``url`` (None before the first; see ``at`` for its age)."""
        return self._latest.get(url.rstrip("/"))

    def loads(self) -> dict[str, ServerLoad]:
        """The last successful scrape of every server scraped so far, by base URL."""
        return dict(self._latest)

    def start(self) -> None:
        """Start one scrape loop per server (in the running event loop); nothing when disabled."""
        if not self.enabled or self._tasks:
            return
        self._tasks = [asyncio.create_task(self._loop(url), name=f"metrics {url}") for url in self.urls]

    async def aclose(self) -> None:
        """Stop every loop and close the session (a scrape in progress is cancelled)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> ServerMetricsScraper:
        self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.config.timeout_s),
                connector=aiohttp.TCPConnector(limit_per_host=1),
            )
        return self._session

    async def _loop(self, url: str) -> None:
        while url not in self.off:
            started = now()
            try:
                await self.scrape(url)
            except Exception as e:  # noqa: BLE001 - whatever a page holds, scraping goes on
                self._failed(url, f"{type(e).__name__}: {e}")
            await asyncio.sleep(max(0.0, self.config.interval_s - (now() - started)))

    async def scrape(self, url: str) -> ServerLoad | None:
        """Scrape ``url`` once and log the result; None when it failed. Never raises (but
        ``CancelledError``)."""
        url = url.rstrip("/")
        start = now()
        try:
            async with self.session.get(metrics_url(url), headers=self.headers) as resp:
                status = resp.status
                text = await resp.text(errors="replace") if status == 200 else ""
        except TRANSPORT_EXCEPTIONS as e:
            return self._failed(url, describe(e))
        if 400 <= status < 500 and status not in (408, 429):
            return self._turn_off(url, f"HTTP {status}", status)
        if status != 200:
            return self._failed(url, f"HTTP {status}")
        try:
            snap = parse_metrics(text)
        except ValueError as e:
            return self._failed(url, f"not a Prometheus page: {e}")
        if not snap.is_vllm:
            return self._turn_off(url, "no vLLM metrics on the page", status)
        load = load_of(url, start, snap, self._before.get(url))
        self._before[url] = snap
        self._latest[url] = load
        self.scrapes[url] = self.scrapes.get(url, 0) + 1
        if self._streak.get(url):
            log_tagged("server", "scrape.ok", url=url, failures=self._streak[url])
            self._streak[url] = 0
        log_tagged(
            "server",
            "metrics",
            url=url,
            running=load.running,
            waiting=load.waiting,
            kv_cache_pct=load.kv_cache_pct,
            preemptions=load.preemptions,
            queue_ms=load.queue_ms,
            queue_p50_ms=load.queue_p50_ms,
            ttft_ms=load.ttft_ms,
            ttft_p50_ms=load.ttft_p50_ms,
            requests=load.requests,
            scrape_ms=(now() - start) * 1000.0,
        )
        return load

    def _failed(self, url: str, error: str) -> None:
        self.errors[url] = self.errors.get(url, 0) + 1
        streak = self._streak[url] = self._streak.get(url, 0) + 1
        if streak in LOG_AGAIN_AT:
            log_tagged("server", "scrape.error", url=url, error=one_line(error, 200), failures=streak)
        return None

    def _turn_off(self, url: str, reason: str, status: int) -> None:
        self.off[url] = reason
        log_tagged("server", "scrape.off", url=url, status=status, reason=reason)
        logger.warning(
            f"{metrics_url(url)} has no vLLM metrics ({reason}): server metrics of {url} are off for this run"
        )
        return None
