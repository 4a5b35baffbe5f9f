"""The fleet balancer on hand-made scrapes: limits back off on preemption and on a full KV cache
with requests waiting, grow back while they bind, and requests go to the server with most headroom."""

from __future__ import annotations

from loguru import logger

from prime_rl.clients.config import ClientConfig
from prime_rl.clients.fleet import FleetBalancer, FleetConfig
from prime_rl.clients.pool import InferencePool
from prime_rl.clients.server_metrics import ServerLoad

A, B, C = "http://a:8000", "http://b:8000", "http://c:8000"


class Scrapes:
    """What the scraper would hold: each server's last load, and a clock."""

    def __init__(self) -> None:
        self.now = 100.0
        self.loads: dict[str, ServerLoad] = {}

    def set(self, url: str, waiting: int = 0, kv: float = 10.0, preemptions: int = 0) -> None:
        self.now += 1.0
        self.loads[url] = ServerLoad(
            url, self.now, running=4, waiting=waiting, kv_cache_pct=kv, preemptions=preemptions
        )


def _fleet(urls=(A, B), max_limit=16, **cfg):
    scrapes, inflight = Scrapes(), dict.fromkeys(urls, 0)
    fleet = FleetBalancer(
        list(urls), FleetConfig(**cfg), max_limit, scrapes.loads.get, inflight, lambda: scrapes.now
    )
    return fleet, scrapes, inflight


def test_a_preempting_server_gets_a_lower_limit_and_fewer_requests(tmp_path):
    fleet, scrapes, inflight = _fleet()
    scrapes.set(A, preemptions=3)
    scrapes.set(B, preemptions=0)
    fleet.refresh()  # the first scrape is the baseline: a server's counter since it started
    assert fleet.limit(A) == fleet.limit(B) == 16
    inflight.update({A: 10, B: 10})
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), format="{message}")
    try:
        scrapes.set(A, preemptions=7)  # preempted since the last scrape
        scrapes.set(B, preemptions=0)
        fleet.refresh()
    finally:
        logger.remove(sink)
    assert fleet.limit(A) == 5 and fleet.limit(B) == 16  # half of the 10 in flight
    assert any(
        x.startswith("[gen] fleet.backoff url=http://a:8000 limit=5 was=16 inflight=10 reason=preemption")
        for x in lines
    )
    inflight.update({A: 5, B: 10})
    assert fleet.choose([A, B]) == B  # A is at its limit
    inflight.update({A: 2, B: 12})
    assert fleet.choose([A, B]) == A  # 2/5 < 12/16


def test_a_full_kv_cache_with_requests_waiting_backs_off_and_a_full_idle_one_does_not():
    fleet, scrapes, inflight = _fleet(min_inflight=2)
    inflight.update({A: 3, B: 3})
    scrapes.set(A, waiting=0, kv=99.0)  # full, nothing waits: no pressure
    scrapes.set(B, waiting=4, kv=97.0)
    fleet.refresh()
    assert fleet.limit(A) == 16 and fleet.limit(B) == 2  # floor(3 * 0.5) = 1, raised to min_inflight


def test_a_limit_grows_back_by_one_per_clean_scrape_while_it_binds():
    fleet, scrapes, inflight = _fleet()
    scrapes.set(A, preemptions=0)
    fleet.refresh()
    inflight[A] = 8
    scrapes.set(A, preemptions=1)
    fleet.refresh()
    assert fleet.limit(A) == 4
    inflight[A] = 4
    for expected in (5, 6, 7):
        scrapes.set(A, preemptions=1)
        fleet.refresh()
        assert fleet.limit(A) == expected
        inflight[A] = expected
    inflight[A] = 1  # the limit does not bind: it stays
    scrapes.set(A, preemptions=1)
    fleet.refresh()
    assert fleet.limit(A) == 7


def test_waiting_requests_count_against_headroom_and_stale_scrapes_are_not_read():
    fleet, scrapes, inflight = _fleet(urls=(A, B, C), stale_after_s=30)
    scrapes.set(A, waiting=6)
    scrapes.set(B, waiting=0)
    scrapes.set(C, waiting=0)
    inflight.update({A: 1, B: 3, C: 5})
    assert fleet.choose([A, B, C]) == B  # A: (1 + 6) / 16 > B: 3 / 16
    scrapes.now += 60  # A's /metrics stopped answering: its old scrape is not read, A is judged
    scrapes.set(B, waiting=0)  # by its in-flight count alone
    scrapes.set(C, waiting=0)
    assert fleet.choose([A, B, C]) == A


def test_a_restarted_server_s_counter_reset_is_no_preemption():
    fleet, scrapes, inflight = _fleet()
    inflight[A] = 8
    scrapes.set(A, preemptions=40)
    fleet.refresh()
    scrapes.set(A, preemptions=0)  # a new process counts from zero
    fleet.refresh()
    assert fleet.limit(A) == 16


def test_the_pool_tells_a_busy_fleet_from_a_dead_one():
    pool = InferencePool(ClientConfig(base_urls=[A, B]))
    fleet, scrapes, _ = _fleet(max_limit=2)
    fleet.inflight = pool.inflight
    pool.balancer = fleet
    pool.inflight.update({A: 2, B: 2})
    assert pool.pick() is None and pool.pick(limits=False) in (A, B)  # busy: wait for a slot
    pool.inflight[B] = 1
    assert pool.pick() == B
    pool.mark_down(A)
    pool.mark_down(B)
    assert pool.pick() is None and pool.pick(limits=False) is None  # dead
