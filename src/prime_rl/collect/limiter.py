"""Adaptive concurrency under rate limits: AIMD over windows of answers, not per 429.

``acquire`` admits a request while fewer than ``limit`` are in flight and no server-wide pause is
running. Every answer (accepted or 429) is counted into a window. With ``W = max(limit,
min_window)`` a window closes after ``W`` accepted answers (a full turn of the pipeline, so that
fast 429s and slow accepted answers are counted over the same span) or ``2 W`` answers in all (a
storm of nothing but 429s), and only then does the limit move:

- more than ``tolerance`` of the window was refused (429): the limit is cut in proportion to the
  excess, ``limit * (1 - refused) / (1 - tolerance)``, never by more than half. A server at
  capacity C refusing the rest of L requests brings the limit to about ``C / (1 - tolerance)`` in
  a window or two; a server that refuses a steady fraction below ``tolerance`` whatever the load
  (random 429s) leaves it where it is;
- otherwise it grows back by ``step`` (default: a sixteenth of the maximum, at least 1) up to the
  configured maximum.

A 429 does not stop other requests: the refused request waits on its own (see the
runner); only :meth:`pause`, for a server that asks every request to wait, holds new ones back.

A waiter woken for a free slot that is cancelled before it takes it hands the wake-up on to the
next waiter (no slot is ever left free while requests wait).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class LimitChange:
    """A window closed and moved the limit."""

    before: int
    after: int
    answers: int
    """Answers in the window."""
    refused: int
    """Of them, 429s."""


class AdaptiveLimiter:
    def __init__(
        self,
        maximum: int,
        minimum: int = 1,
        clock=time.monotonic,
        *,
        tolerance: float = 0.25,
        min_window: int = 32,
        step: float | None = None,
    ):
        if not 0 <= tolerance < 1:
            raise ValueError(f"tolerance must be in [0, 1), got {tolerance}")
        self.maximum, self.minimum = maximum, minimum
        self.tolerance, self.min_window = tolerance, min_window
        self.step = step if step is not None else max(1.0, maximum / 16)
        self.limit = float(maximum)
        self.inflight = 0
        self.paused_until = 0.0
        self.min_seen = maximum
        self.decreases = 0
        self._clock = clock
        self._answers = 0
        self._refused = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def current(self) -> int:
        """Requests admitted at once right now."""
        return max(self.minimum, int(self.limit))

    async def acquire(self) -> None:
        while True:
            await self.wait_pause()
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

    async def wait_pause(self) -> None:
        """Until the server-wide pause, if any, is over: a request admitted before the pause began
        (its slot taken, not yet sent) waits too, holding its slot."""
        while (pause := self.paused_until - self._clock()) > 0:
            await asyncio.sleep(pause)

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

    def on_answer(self, rate_limited: bool) -> LimitChange | None:
        """Count one answer (``rate_limited``: it was a 429). Returns the change when this answer
        closed a window that moved the limit."""
        self._answers += 1
        self._refused += rate_limited
        window = max(self.current, self.min_window)
        if self._answers - self._refused < window and self._answers < 2 * window:
            return None
        answers, refused = self._answers, self._refused
        self._answers = self._refused = 0
        before = self.current
        share = refused / answers
        if share > self.tolerance:
            factor = max(0.5, (1.0 - share) / (1.0 - self.tolerance))
            self.limit = max(float(self.minimum), self.limit * factor)
            self.decreases += 1
            self.min_seen = min(self.min_seen, self.current)
        elif self.limit < self.maximum:
            self.limit = min(float(self.maximum), self.limit + self.step)
            self._wake()
        if self.current == before:
            return None
        return LimitChange(before, self.current, answers, refused)

    def pause(self, seconds: float) -> None:
        """Hold every new request back for ``seconds`` (the server asked all of them to wait);
        requests already in flight go on."""
        self.paused_until = max(self.paused_until, self._clock() + seconds)
