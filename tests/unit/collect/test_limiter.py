"""prime_rl.collect.limiter: AIMD over windows of answers (cut in proportion to the 429s above the
tolerance, grow back), the server-wide pause, wake-ups handed on under cancellation."""

from __future__ import annotations

import asyncio

import pytest

from prime_rl.collect.limiter import AdaptiveLimiter


def answer_window(lim: AdaptiveLimiter, refused: int, accepted: int | None = None):
    """``refused`` 429s, then ``accepted`` accepted answers (default: enough to close a window);
    returns the change the window made."""
    if accepted is None:
        accepted = max(lim.current, lim.min_window)
    change = None
    for i in range(refused + accepted):
        change = lim.on_answer(i < refused) or change
    return change


def test_a_window_of_429s_cuts_the_limit_in_proportion_never_by_more_than_half():
    lim = AdaptiveLimiter(16, minimum=2, min_window=8)
    assert answer_window(lim, refused=15, accepted=15) is None  # 15 of 16 accepted: still open
    lim = AdaptiveLimiter(16, minimum=2, min_window=8)
    change = answer_window(lim, refused=30, accepted=2)  # 2 W answers close it: 94% refused
    assert (change.before, change.after, change.answers, change.refused) == (16, 8, 32, 30)  # at most half
    change = answer_window(lim, refused=4)  # W = 8 accepted, 4 refused: 8 * (2/3) / .75 = 7.1
    assert change.after == 7 and lim.decreases == 2
    answer_window(lim, refused=16, accepted=0)
    answer_window(lim, refused=16, accepted=0)
    answer_window(lim, refused=16, accepted=0)
    assert lim.current == 2 and lim.min_seen == 2  # never below the minimum


def test_429s_at_or_below_the_tolerance_leave_the_limit_where_it_is():
    lim = AdaptiveLimiter(12, min_window=8)
    for _ in range(20):
        assert answer_window(lim, refused=4, accepted=12) is None  # 25%: the tolerance itself
    assert lim.current == 12 and lim.decreases == 0


@pytest.mark.parametrize("maximum", [4, 16, 64])
def test_a_steady_20_percent_of_random_429s_keeps_the_parallelism_near_its_maximum(maximum):
    """The old limiter halved on the first 429 of each round trip: parallelism collapsed to 1-2.
    The default window (at least 32 accepted answers) tells a steady 20% from an excess over 25%."""
    import random

    rng = random.Random(maximum)
    lim = AdaptiveLimiter(maximum)
    seen = []
    for _ in range(20_000):
        lim.on_answer(rng.random() < 0.2)
        seen.append(lim.current)
    assert min(seen) >= maximum // 2 and sum(seen) / len(seen) > 0.9 * maximum


def test_a_server_at_capacity_brings_the_limit_near_capacity_over_one_minus_tolerance():
    lim = AdaptiveLimiter(64, min_window=8)
    history = []
    for _ in range(100):  # per turn the server serves 16 and refuses the rest of what was sent
        answer_window(lim, refused=max(0, lim.current - 16), accepted=16)
        history.append(lim.current)
    assert history[:4] == [64, 32, 32, 21]  # halved (75% refused), then cut in proportion (32 * .5 / .75)
    steady = history[4:]
    assert min(steady) >= 16 and max(steady) <= 16 / 0.75 + 2 * lim.step
    assert 18 < sum(steady) / len(steady) < 16 / 0.75 + lim.step


def test_clean_windows_grow_the_limit_back_by_its_step_up_to_the_maximum():
    lim = AdaptiveLimiter(32, step=4, min_window=8)
    answer_window(lim, refused=64, accepted=0)
    assert lim.current == 16
    changes = [answer_window(lim, refused=0) for _ in range(4)]
    assert [(c.before, c.after, c.refused) for c in changes] == [
        (16, 20, 0),
        (20, 24, 0),
        (24, 28, 0),
        (28, 32, 0),
    ]
    assert answer_window(lim, refused=0) is None and lim.current == 32  # at the maximum
    assert AdaptiveLimiter(64).step == 4 and AdaptiveLimiter(8).step == 1  # default: a sixteenth, at least 1


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
    lim.pause(0.2)  # the server asked every request to wait
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
