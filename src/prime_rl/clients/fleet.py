"""Fleet balancing: which server gets the next generation request, from each server's live metrics.

Without metrics the pool sends each request to the server with the fewest of our requests in
flight. With them (:class:`~prime_rl.clients.server_metrics.ServerMetricsScraper` scraping every
server's ``/metrics``), :class:`FleetBalancer` gives each server an *in-flight limit* that adapts
to what the server says, additive increase / multiplicative decrease per scrape:

- pressure, when the server preempted requests since the previous scrape (its KV cache ran out and
  running requests were evicted, to be recomputed), or when requests wait for room while its KV
  cache is fuller than ``kv_cache_pct_high``: the limit drops to ``backoff`` times what was in
  flight (never below ``min_inflight``), and one ``[gen] fleet.backoff`` line says why;
- otherwise, while the limit binds (as much was in flight as it allows), it grows by one.

A server at its limit gets no new request; among the others, the one with the most headroom wins:
the lowest ``(in flight + waiting at the server) / limit``. Requests that find every server at
its limit wait for one to finish (:meth:`~prime_rl.clients.pool.InferencePool.pick` returns None
then, and the caller tells that apart from every server being down). A scrape older than
``stale_after_s`` (a server whose ``/metrics`` stopped answering) is not read: that server is
judged by its in-flight count and its last limit. A restarted server's counters start again at
zero, which is no preemption.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pydantic import Field

from prime_rl.clients.server_metrics import ServerLoad
from prime_rl.config import StrictModel
from prime_rl.logging import log_tagged


class FleetConfig(StrictModel):
    """How generation requests are spread over the inference servers (``adaptive`` needs
    ``server_metrics.interval_s`` > 0)."""

    adaptive: bool = True
    """Give each server an in-flight limit that backs off on preemption and on a full KV cache with
    requests waiting, and grows back while it binds; off: the least-loaded server, no limit."""

    min_inflight: int = Field(default=1, ge=1)
    """The lowest a server's in-flight limit goes."""

    backoff: float = Field(default=0.5, gt=0, lt=1)
    """On pressure the limit becomes this share of the requests in flight then."""

    kv_cache_pct_high: float = Field(default=95.0, gt=0, le=100)
    """KV-cache use (percent) that, with requests waiting at the server, counts as pressure."""

    stale_after_s: float = Field(default=30.0, gt=0)
    """A scrape older than this is not read (the server is judged by its in-flight count)."""


@dataclass
class _Server:
    limit: float
    seen_at: float | None = None
    preemptions: int | None = None
    waiting: int = 0


class FleetBalancer:
    """Per-server in-flight limits from live metrics; :meth:`choose` picks among servers.

    ``latest(url)`` gives a server's last scrape (or None); ``inflight`` is the pool's count of our
    requests in flight per server; ``max_limit`` caps every limit (the caller's own in-flight cap)."""

    def __init__(
        self,
        urls: list[str],
        config: FleetConfig,
        max_limit: int,
        latest: Callable[[str], ServerLoad | None],
        inflight: Mapping[str, int],
        clock: Callable[[], float] = time.monotonic,
    ):
        self.config, self.max_limit, self.latest, self.inflight = config, max(1, max_limit), latest, inflight
        self.clock = clock
        self.servers = {u: _Server(limit=float(self.max_limit)) for u in urls}

    def limit(self, url: str) -> int:
        """The server's in-flight limit now."""
        return max(self.config.min_inflight, math.floor(self.servers[url].limit))

    def refresh(self) -> None:
        """Read every server's newest scrape once (each scrape moves its limit once)."""
        now = self.clock()
        for url, s in self.servers.items():
            load = self.latest(url)
            if load is None:
                continue
            if now - load.at > self.config.stale_after_s:  # its /metrics stopped answering
                s.waiting = 0
            elif load.at != s.seen_at:
                s.seen_at, s.waiting = load.at, load.waiting
                self._observe(url, s, load)

    def _observe(self, url: str, s: _Server, load: ServerLoad) -> None:
        preempted = (
            s.preemptions is not None and load.preemptions is not None and load.preemptions > s.preemptions
        )
        if load.preemptions is not None:
            s.preemptions = load.preemptions
        full = load.waiting > 0 and (load.kv_cache_pct or 0.0) >= self.config.kv_cache_pct_high
        inflight = self.inflight.get(url, 0)
        if preempted or full:
            before = self.limit(url)
            s.limit = max(
                float(self.config.min_inflight), math.floor(min(s.limit, inflight) * self.config.backoff)
            )
            log_tagged(
                "gen",
                "fleet.backoff",
                url=url,
                limit=self.limit(url),
                was=before,
                inflight=inflight,
                reason="preemption" if preempted else "kv_cache_full",
                kv_cache_pct=load.kv_cache_pct,
                waiting=load.waiting,
            )
        elif inflight >= self.limit(url) and s.limit < self.max_limit:
            s.limit = min(float(self.max_limit), s.limit + 1.0)

    def choose(self, candidates: list[str]) -> str | None:
        """The candidate with the most headroom; None when every one is at its limit."""
        self.refresh()
        best, best_score = None, math.inf
        for url in candidates:
            limit = self.limit(url)
            inflight = self.inflight.get(url, 0)
            if inflight >= limit:
                continue
            score = (inflight + self.servers[url].waiting) / limit
            if score < best_score:
                best, best_score = url, score
        return best
