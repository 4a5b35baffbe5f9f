"""The worker side of ``collect-rollouts --ray``: one :class:`CollectWorker` per Ray actor.

A worker runs the single-process collector's own code for each pair the driver hands it
(:meth:`Collector._one`: the request with its retries, 429 backoff and server pauses, scoring,
multi-turn episodes) against the servers of its node, under its own
:class:`~prime_rl.collect.limiter.AdaptiveLimiter` sized to its share of the parallelism. It
writes nothing: the records, the failures and its log lines go to an :class:`Outbox` that
:meth:`CollectWorker.stream` sends to the driver in batches (at once when something is there,
a little later when more is coming, every second with the worker's counters when idle). The
driver is the only writer of the output, so a worker that dies loses only what it had not sent.

This module imports no Ray: the driver wraps :class:`CollectWorker` with ``ray.remote``, and
tests can drive it directly in an event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from loguru import logger

from prime_rl.clients.chat import ChatBackend
from prime_rl.clients.server_metrics import ServerMetricsScraper
from prime_rl.collect.config import CollectConfig
from prime_rl.collect.runner import Collector, chat_backend, request_params
from prime_rl.collect.scoring import Scorer
from prime_rl.logging import intercept_stdlib

Pair = tuple[int, int, dict[str, Any], list[dict[str, Any]]]
"""What the driver hands out: (task_index, repeat_index, the task's row, its prompt messages)."""

HEARTBEAT_S = 1.0
"""A batch (the worker's counters, maybe nothing else) goes out at least this often."""
LINGER_S = 0.02
"""After the first item of a batch, wait this long for more (a pause goes out at once)."""
MAX_BATCH = 512
"""Items (records, failures, log lines) that end the linger early."""
PAUSE_SHARE_STEP_S = 0.1
"""A server pause is shared again only when it reaches this much further than the last one shared."""


class Outbox:
    """What a worker has for the driver: records, failures, log lines, server pauses, a fatal error."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.failures: list[dict[str, Any]] = []
        self.logs: list[tuple[str, str, Any]] = []
        self.pauses: list[tuple[float, Any]] = []
        self.fatal: str | None = None
        self.ready = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.get_ident()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the outbox is read in (items from other threads are handed to it)."""
        self._loop, self._thread = loop, threading.get_ident()

    def _add(self, items: list, item: Any) -> None:
        if self._loop is not None and threading.get_ident() != self._thread:
            self._loop.call_soon_threadsafe(self._add, items, item)
            return
        items.append(item)
        self.ready.set()

    def record(self, record: dict[str, Any]) -> None:
        self._add(self.records, record)

    def failure(self, failure: dict[str, Any]) -> None:
        self._add(self.failures, failure)

    def log(self, level: str, message: str, when: Any) -> None:
        self._add(self.logs, (level, message, when))

    def pause(self, seconds: float, status: Any) -> None:
        self._add(self.pauses, (seconds, status))

    def set_fatal(self, message: str) -> None:
        if self.fatal is None:
            self.fatal = message
        self.ready.set()

    @property
    def size(self) -> int:
        return len(self.records) + len(self.failures) + len(self.logs)

    @property
    def urgent(self) -> bool:
        return bool(self.pauses) or self.fatal is not None

    def take(self, stats: dict[str, Any]) -> dict[str, Any]:
        """Everything in the outbox as one batch (and the outbox emptied)."""
        batch = {
            "records": self.records,
            "failures": self.failures,
            "logs": self.logs,
            "pauses": self.pauses,
            "fatal": self.fatal,
            "stats": stats,
        }
        self.records, self.failures, self.logs, self.pauses = [], [], [], []
        self.ready.clear()
        return batch


class _Sink:
    """Stands in for the output's (or the failures file's) writer in :meth:`Collector._one`."""

    def __init__(self, put) -> None:
        self.write = put


class _NoAdmission:
    """The driver's window bounds what a worker holds; :meth:`Collector._one` releases this."""

    @staticmethod
    def release() -> None:
        pass


class WorkerCollector(Collector):
    """The single-process collector's per-pair code, with the counting the driver does left out
    and each new server pause also put in the outbox (the driver shares it with the workers that
    use the same servers)."""

    def __init__(self, cfg: CollectConfig, outbox: Outbox):
        super().__init__(cfg)
        self.outbox = outbox
        self._shared_until = 0.0

    def _count(self, record: dict, input_tokens: int, output_tokens: int) -> None:
        self.result.written += 1  # tokens, rewards and cost are counted by the driver, from the record

    def _pause(self, seconds: float, status: int | None) -> None:
        super()._pause(seconds, status)
        until = self.limiter.paused_until
        if until > self._shared_until + PAUSE_SHARE_STEP_S:
            self._shared_until = until
            self.outbox.pause(until - time.monotonic(), status)


def set_share(limiter, share: int, minimum: int) -> None:
    """Give a worker's limiter a new share of the parallelism (workers came or went): the limit
    keeps its ratio to the maximum, so a cut made under 429s stays cut."""
    share = max(1, share)
    minimum = max(1, min(minimum, share))
    ratio = limiter.limit / limiter.maximum if limiter.maximum else 1.0
    limiter.maximum, limiter.minimum = share, minimum
    limiter.step = max(1.0, share / 16)
    limiter.limit = max(float(minimum), min(float(share), share * ratio))
    # the lowest limit 429s brought it to; before any cut, the share itself
    limiter.min_seen = min(limiter.min_seen, limiter.current) if limiter.decreases else limiter.current
    limiter._wake()


class CollectWorker:
    """One worker: ``start`` once, then ``submit`` pairs while one ``stream`` call returns
    batches; ``set_share``, ``scrape`` and ``pause`` come from the driver; ``close`` at the end.

    Ray runs an async actor's calls in no guaranteed order, even calls from one caller. A
    ``set_share`` or ``scrape`` therefore carries the driver's sequence number for this worker,
    and one that arrives after a later one of its kind is dropped: otherwise a worker could keep
    a share the driver had already cut, and the workers of one server exceed the parallelism.
    (``pause`` needs none: it only ever extends the pause.)"""

    def __init__(self, cfg: CollectConfig, name: str, base_urls: list[str], own_logs: bool = True):
        self.name = name
        self.outbox = Outbox()
        self._own_logs = own_logs
        self._log_sink = self._capture_logs()
        self.cfg = cfg.model_copy(update={"base_urls": list(base_urls)})
        self.c = WorkerCollector(self.cfg, self.outbox)
        self.queue: deque[Pair] = deque()
        self.has_work = asyncio.Event()
        self.backend: ChatBackend | None = None
        self.scorer: Scorer | None = None
        self.params: dict[str, Any] | None = None
        self.pending: set[asyncio.Task] = set()
        self._records = _Sink(self.outbox.record)
        self._failures = _Sink(self.outbox.failure)
        self._dispatcher: asyncio.Task | None = None
        self._api_key: str | None = None
        self._scraper: ServerMetricsScraper | None = None
        self._latest: dict[str, int] = {}
        self._scraping = asyncio.Lock()
        """Held while the scraper changes: close() waits for a change under way."""

    def _latest_order(self, kind: str, seq: int) -> bool:
        """Whether the driver's order ``seq`` of this kind is newer than every one applied so far
        (then it is recorded as the latest)."""
        if seq <= self._latest.get(kind, -1):
            return False
        self._latest[kind] = seq
        return True

    def _capture_logs(self) -> int:
        """Every log line of this process goes to the driver (which writes it to the run's log file
        with its original time); nothing is printed here (``own_logs``: the worker owns the
        process's logging, as in a Ray actor; else its sink is added beside the others)."""
        outbox = self.outbox

        def sink(message) -> None:
            rec = message.record
            outbox.log(rec["level"].name, rec["message"], rec["time"])

        if self._own_logs:
            logger.remove()
        handler = logger.add(sink, level="INFO", format="{message}", catch=True)
        if self._own_logs:
            intercept_stdlib(("",), "INFO")  # libraries' warnings (aiohttp, ...) travel the same way
        return handler

    async def start(
        self, api_key: str | None, params: dict[str, Any] | None, share: int, minimum: int
    ) -> dict[str, Any]:
        """Open the connection pool and the verifiers; with no ``params`` (the first worker), find
        the model (the config's, else the first one its servers list) and return the run's
        parameters."""
        self.outbox.bind(asyncio.get_running_loop())
        cfg = self.cfg
        self._api_key = api_key
        self.backend = chat_backend(cfg, api_key)
        if params is None:
            model = cfg.responses_create_params.model or await self.backend.first_model()
            params = request_params(cfg, model)
        self.params = params
        if self.c.verify:
            self.scorer = Scorer(cfg.env, cfg.env_options, cfg.verify, cfg.episode.max_turns)  # type: ignore[arg-type]
        set_share(self.c.limiter, share, minimum)
        self._dispatcher = asyncio.create_task(self._dispatch())
        return {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "params": params,
            "urls": list(self.backend.base_urls),
        }

    async def submit(self, pairs: list[Pair]) -> None:
        self.queue.extend(pairs)
        self.has_work.set()

    async def set_share(self, share: int, minimum: int, seq: int) -> None:
        """Take this share of the parallelism, unless a later order (``seq``) came first."""
        if self._latest_order("share", seq):
            set_share(self.c.limiter, share, minimum)

    async def scrape(self, urls: list[str], seq: int) -> None:
        """Scrape these servers' /metrics into ``[server]`` lines (the driver gives each server to
        one worker); an empty list stops scraping. An order older than one applied is dropped."""
        if self._latest_order("scrape", seq):
            await self._scrape(urls, seq)

    async def _scrape(self, urls: list[str], seq: int) -> None:
        async with self._scraping:
            if self._scraper is not None:
                scraper, self._scraper = self._scraper, None
                await scraper.aclose()
            if urls and self._latest["scrape"] == seq:  # no later order came while the old one closed
                auth = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
                self._scraper = ServerMetricsScraper(urls, self.cfg.server_metrics, auth)
                self._scraper.start()

    async def pause(self, seconds: float) -> None:
        """Another worker's server asked every request to wait: hold this worker's new requests
        back too (no line is logged: the worker that was told logged it)."""
        self.c.limiter.pause(seconds)

    async def _dispatch(self) -> None:
        c = self.c
        while True:
            if not self.queue:
                self.has_work.clear()
                await self.has_work.wait()
                continue
            await c.limiter.acquire()
            if not self.queue:
                c.limiter.release()
                continue
            ti, rep, row, messages = self.queue.popleft()
            task = asyncio.create_task(
                c._one(
                    self.backend,  # type: ignore[arg-type]
                    self.scorer,
                    self._records,  # type: ignore[arg-type]
                    self._failures,  # type: ignore[arg-type]
                    self.params,  # type: ignore[arg-type]
                    ti,
                    rep,
                    row,
                    messages,
                    _NoAdmission,
                )
            )
            self.pending.add(task)
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task) -> None:
        self.pending.discard(task)
        if not task.cancelled() and (e := task.exception()) is not None:
            # a bug, not a failed request (those are failures records): the driver stops the run
            detail = "".join(traceback.format_exception(e)).strip()
            self.outbox.set_fatal(f"worker {self.name} (pid {os.getpid()}): {detail}")

    def stats(self) -> dict[str, Any]:
        r, lim = self.c.result, self.c.limiter
        return {
            "written": r.written,
            "failed": r.failed,
            "rate_limited": r.rate_limited,
            "retries": r.retries,
            "pauses": r.pauses,
            "inflight": lim.inflight,
            "current": lim.current,
            "maximum": lim.maximum,
            "min_seen": lim.min_seen,
            "queued": len(self.queue),
        }

    async def stream(self) -> AsyncIterator[dict[str, Any]]:
        """Batches for the driver, for as long as the worker lives."""
        box = self.outbox
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(box.ready.wait(), HEARTBEAT_S)
            if box.size and not box.urgent and box.size < MAX_BATCH:
                await asyncio.sleep(LINGER_S)
            yield box.take(self.stats())

    async def close(self) -> None:
        """Cancel what is in flight, stop the verifiers, close the connections."""
        self._latest_order("scrape", sys.maxsize)  # the last order: no scraping after this
        await self._scrape([], sys.maxsize)
        if self._dispatcher is not None:
            self._dispatcher.cancel()
        for task in list(self.pending):
            task.cancel()
        await asyncio.gather(*self.pending, return_exceptions=True)
        if self.scorer is not None:
            self.scorer.close()
        if self.backend is not None:
            await self.backend.__aexit__(None, None, None)
        if not self._own_logs:
            logger.remove(self._log_sink)
