"""Adaptive concurrency: additive increase, multiplicative decrease (AIMD) on HTTP 429.

``acquire`` admits a request while fewer than ``limit`` are in flight and no rate-limit pause is
running. A 429 halves the limit and pauses every new request until its ``Retry-After`` has
passed; it halves only once per round trip (a 429 for a request sent before the last decrease
says nothing new), so a burst of 429s from one window costs one halving. Each success adds
``1/limit``, i.e. about one slot per window of successes, back up to the configured maximum.

A waiter woken for a free slot that is cancelled before it takes it hands the wake-up on to the
next waiter (no slot is ever left free while requests wait).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque


class AdaptiveLimiter:
    def __init__(self, maximum: int, minimum: int = 1, clock=time.monotonic):
        self.maximum, self.minimum = maximum, minimum
        self.limit = float(maximum)
        self.inflight = 0
        self.paused_until = 0.0
        self.min_seen = maximum
        self.decreases = 0
        self._last_decrease = float("-inf")
        self._clock = clock
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def current(self) -> int:
        """Requests admitted at once right now."""
        return max(self.minimum, int(self.limit))

    async def acquire(self) -> None:
        while True:
            pause = self.paused_until - self._clock()
            if pause > 0:
                await asyncio.sleep(pause)
                continue
            if self.inflight < self.current:
                self.inflight += 1
                return
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                # Woken (handed a free slot) but cancelled before taking it: hand it on, or the
                # slot stays free while every other waiter sleeps until some later release.
                if waiter.done() and not waiter.cancelled():
                    self._wake()
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def release(self) -> None:
        self.inflight -= 1
        self._wake()

    def _wake(self) -> None:
        free = self.current - self.inflight
        while free > 0 and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1

    def on_success(self) -> None:
        if self.limit < self.maximum:
            before = self.current
            self.limit = min(float(self.maximum), self.limit + 1.0 / self.limit)
            if self.current > before:
                self._wake()

    def on_rate_limited(self, sent_at: float, retry_after_s: float) -> bool:
        """A request sent at ``sent_at`` got a 429: pause new requests for ``retry_after_s`` and
        halve the limit unless it already was since that request left. Returns whether it halved."""
        now = self._clock()
        self.paused_until = max(self.paused_until, now + retry_after_s)
        if sent_at < self._last_decrease:
            return False
        self._last_decrease = now
        self.limit = max(float(self.minimum), self.limit / 2.0)
        self.min_seen = min(self.min_seen, self.current)
        self.decreases += 1
        return True
