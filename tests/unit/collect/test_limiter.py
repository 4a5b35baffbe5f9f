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


async def test_a_woken_waiter_cancelled_before_it_runs_hands_its_slot_on():
    """Old code: the slot handed to the cancelled waiter was lost; the next waiter slept on."""
    lim = AdaptiveLimiter(1)
    await lim.acquire()
    first = asyncio.create_task(lim.acquire())
    second = asyncio.create_task(lim.acquire())
    await asyncio.sleep(0.01)  # both wait
    lim.release()  # the free slot goes to the first waiter...
    first.cancel()  # ...which is cancelled before it runs
    await asyncio.wait_for(second, 1)
    assert lim.inflight == 1
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_cancellations_under_load_never_strand_a_slot():
    import random

    rng = random.Random(7)
    lim = AdaptiveLimiter(4)
    done = 0

    async def request() -> None:
        nonlocal done
        await lim.acquire()
        try:
            await asyncio.sleep(rng.random() * 0.002)
        finally:
            lim.release()
        done += 1

    tasks = [asyncio.create_task(request()) for _ in range(400)]
    for _ in range(150):  # cancel random requests, waiting or running, while the others go on
        await asyncio.sleep(rng.random() * 0.001)
        rng.choice(tasks).cancel()
    finished, pending = await asyncio.wait(tasks, timeout=10)
    assert not pending, f"{len(pending)} requests never got a slot"
    cancelled = sum(t.cancelled() for t in finished)
    assert done + cancelled == 400 and lim.inflight == 0 and not lim._waiters
