"""prime_rl.collect.limiter: AIMD on 429s (one halving per window), the pause honoured."""

from __future__ import annotations

import asyncio

import pytest

from prime_rl.collect.limiter import AdaptiveLimiter


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_limiter_halves_once_per_window_and_climbs_back():
    clock = FakeClock()
    lim = AdaptiveLimiter(16, minimum=2, clock=clock)
    sent = clock.t
    clock.t += 0.1
    assert lim.on_rate_limited(sent, 0.5) and lim.current == 8
    assert not lim.on_rate_limited(sent, 0.5)  # same window: already halved
    assert lim.paused_until == pytest.approx(clock.t + 0.5)
    for _ in range(3):
        clock.t += 0.1
        lim.on_rate_limited(clock.t - 0.01, 0.1)
    assert lim.current == 2 and lim.min_seen == 2  # never below the minimum
    successes = 0
    while lim.current < 16:
        lim.on_success()
        successes += 1
    assert 30 < successes < 200  # about one slot per window of successes
    lim.on_success()
    assert lim.current == 16


async def test_limiter_admits_at_most_limit_and_waits_out_the_pause():
    lim = AdaptiveLimiter(2)
    await lim.acquire()
    await lim.acquire()
    third = asyncio.create_task(lim.acquire())
    await asyncio.sleep(0.01)
    assert not third.done()
    lim.release()
    await asyncio.wait_for(third, 1)
    for _ in range(2):
        lim.release()
    lim.on_rate_limited(sent_at=lim._clock(), retry_after_s=0.2)
    start = lim._clock()
    await lim.acquire()
    assert lim._clock() - start >= 0.19
