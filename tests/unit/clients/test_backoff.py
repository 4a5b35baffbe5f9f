"""The one retry delay (capped exponential backoff with jitter) and Retry-After parsing."""

from __future__ import annotations

import email.utils
import random
import time

import pytest
from multidict import CIMultiDict

from prime_rl.clients.backoff import backoff_delay, parse_duration, parse_retry_after, quota_reset_after
from prime_rl.clients.config import ClientConfig, RetryPolicy
from prime_rl.clients.errors import RateLimited, Rejected, ServerError, status_error
from prime_rl.collect.config import RetryConfig
from prime_rl.orchestrator.config import OrchestratorConfig


@pytest.mark.parametrize("attempt", range(1, 12))
def test_delay_lies_in_the_upper_half_of_the_capped_ceiling(attempt):
    rng = random.Random(attempt)
    ceiling = min(10.0, 0.5 * 2 ** (attempt - 1))
    delays = [backoff_delay(attempt, 0.5, 10.0, rng) for _ in range(2000)]
    assert all(ceiling / 2 <= d <= ceiling for d in delays)
    # jitter spreads the whole band, not one point of it
    assert min(delays) < ceiling * 0.52 and max(delays) > ceiling * 0.98


def test_cap_bounds_every_delay_even_for_huge_attempts():
    rng = random.Random(0)
    assert all(1.5 <= backoff_delay(a, 0.5, 3.0, rng) <= 3.0 for a in (4, 5, 50, 10_000))
    assert backoff_delay(3, 0.0, 30.0, rng) == 0.0  # base 0: retry at once


def test_retry_after_is_honoured_as_given():
    rng = random.Random(0)
    assert backoff_delay(1, 0.5, 10.0, rng, retry_after=7.0) == 7.0  # neither jittered nor capped
    assert backoff_delay(9, 0.5, 10.0, rng, retry_after=42.0) == 42.0
    assert backoff_delay(1, 0.5, 10.0, rng, retry_after=0.0) == 0.0
    assert backoff_delay(1, 0.5, 10.0, rng, retry_after=-3.0) == 0.0


def test_parse_retry_after():
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after("0") == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("") is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("inf") is None and parse_retry_after("nan") is None
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < parse_retry_after(future) <= 30


def test_parse_duration_reads_seconds_and_openai_durations():
    assert parse_duration("12") == 12.0 and parse_duration("0.5") == 0.5
    assert parse_duration("1s") == 1.0 and parse_duration("20ms") == pytest.approx(0.02)
    assert parse_duration("6m0s") == 360.0 and parse_duration("1h2m3.5s") == pytest.approx(3723.5)
    assert parse_duration(None) is None and parse_duration("") is None
    assert parse_duration("soon") is None and parse_duration("5 s") is None and parse_duration("5x") is None


def test_a_used_up_quota_is_read_from_the_rate_limit_headers():
    h = CIMultiDict
    assert (
        quota_reset_after(h({"X-RateLimit-Remaining-Requests": "0", "x-ratelimit-reset-requests": "1.5s"}))
        == 1.5
    )
    assert (
        quota_reset_after(h({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "6m0s"}))
        == 360.0
    )
    assert quota_reset_after(h({"RateLimit-Remaining": "0", "RateLimit-Reset": "7"})) == 7.0
    assert quota_reset_after(h({"x-ratelimit-remaining-requests": "0"})) == 0.0  # used up, no reset given
    # quota left (or no headers): only this request was refused
    assert (
        quota_reset_after(h({"x-ratelimit-remaining-requests": "12", "x-ratelimit-reset-requests": "1s"}))
        is None
    )
    assert quota_reset_after(h()) is None


def test_status_errors_carry_retry_after_and_whether_every_request_should_wait():
    h = CIMultiDict
    e = status_error(429, b"slow down", "http://s", h({"Retry-After": "2"}))
    assert isinstance(e, RateLimited) and e.retry_after == 2.0 and not e.server_wide
    e = status_error(
        429, b"", "http://s", h({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "3s"})
    )
    assert isinstance(e, RateLimited) and e.retry_after == 3.0 and e.server_wide
    e = status_error(
        429, b"", "http://s", h({"Retry-After": "1", "ratelimit-remaining": "0", "ratelimit-reset": "9"})
    )
    assert e.retry_after == 1.0 and e.server_wide  # Retry-After wins over the reset
    e = status_error(503, b"overloaded", "http://s", h({"Retry-After": "4"}))
    assert isinstance(e, ServerError) and e.retry_after == 4.0 and e.server_wide
    e = status_error(500, b"oops", "http://s", h({"Retry-After": "4"}))
    assert isinstance(e, ServerError) and e.retry_after == 4.0 and not e.server_wide
    e = status_error(503, b"", "http://s")
    assert isinstance(e, ServerError) and e.retry_after is None and not e.server_wide
    assert isinstance(status_error(400, b"bad", "http://s"), Rejected)


def test_policy_delay_is_the_one_function():
    policy = RetryPolicy(backoff_s=0.2, backoff_max_s=1.0)
    a, b = random.Random(5), random.Random(5)
    assert [policy.delay(n, a) for n in range(1, 6)] == [backoff_delay(n, 0.2, 1.0, b) for n in range(1, 6)]
    assert policy.delay(3, a, retry_after=4.0) == 4.0


def test_each_caller_keeps_its_base_and_cap():
    orch = OrchestratorConfig().request_retry
    assert (orch.max_retries, orch.backoff_s, orch.backoff_max_s) == (5, 0.5, 10.0)
    assert orch.connect_timeout_s == OrchestratorConfig().client.connect_timeout_s
    admin = ClientConfig().admin
    assert (admin.max_retries, admin.backoff_s, admin.backoff_max_s, admin.connect_timeout_s) == (
        3,
        0.5,
        30.0,
        5.0,
    )
    collect = RetryConfig()
    assert (collect.max_retries, collect.backoff_s, collect.backoff_max_s, collect.connect_timeout_s) == (
        4,
        0.5,
        30.0,
        10.0,
    )
    assert isinstance(admin, RetryPolicy) and isinstance(collect, RetryPolicy)
