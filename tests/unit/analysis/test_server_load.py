"""Issue 17 item 4: the analyzer reads the [server] lines scraped from /metrics, reports each server's
load, and names KV-cache pressure / preemption as the bottleneck when a server preempts or runs
full while requests wait; a healthy run's metrics raise no alarm.

Expected findings are written down from the generated logs (tests/support/synthetic_logs.py):
scenario ``kv_cache_pressure`` is a generation-bound run (8 s batches, the trainer waiting 80% of
them) whose server is scraped every 5 s of generation at 92-100% KV cache, 4-20 requests waiting
and 2-4 preemptions per scrape (about 36 a minute); ``Shape(server_metrics=True)`` scrapes a healthy
load (20-60%, nothing waiting, no preemption)."""

from __future__ import annotations

from datetime import datetime

import pytest
from tests.support.synthetic_logs import Shape, make_run

from prime_rl.analysis.parser import ParseStats, parse_files
from prime_rl.analysis.stats import collect
from prime_rl.tracing import format_tagged

T0 = datetime(2026, 1, 1, 12, 0, 0).timestamp()


def log(path, entries: list[tuple[float, str, dict]]):
    """A log file of ``[server]`` lines: (seconds after T0, event, fields) each, with loguru's prefix."""
    lines = [
        datetime.fromtimestamp(T0 + s).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        + " | INFO    | "
        + format_tagged("server", event, **fields)
        for s, event, fields in entries
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def metrics(url="http://s:1", running=8, waiting=0, kv=50.0, preemptions=0, **more) -> dict:
    return dict(url=url, running=running, waiting=waiting, kv_cache_pct=kv, preemptions=preemptions, **more)


def test_kv_cache_pressure_is_the_primary_finding_above_the_generation_time_it_explains(tmp_path, analyze):
    run = make_run("kv_cache_pressure", steps=20, seed=1)
    summary, md = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out", "--async_level", "1")
    kinds = [f["kind"] for f in summary["findings"]]
    assert kinds == ["kv_cache_pressure", "generation_bound"], kinds
    primary = summary["primary"]
    assert primary["explains"] == "generation_bound"
    assert primary["thresholds"] == ["preemptions_per_min", "kv_cache_pct_high"]
    # the numbers of the generated lines: preemptions after the first scrape, over the scraped time
    url = "http://h:8000"
    preempted = sum(run.values[f"preempted {url}"][1:])
    load = next(s["load"] for s in summary["servers"] if s["url"] == url)
    assert load["preemptions"] == preempted and load["scrapes"] == len(run.values[f"preempted {url}"])
    assert 30 < load["preemptions_per_min"] < 42  # 2-4 every 5 s, less the pauses between batches
    assert load["kv_cache_pct_p95"] > 98 and load["waiting_max"] <= 20
    assert f"{preempted:.0f} preemptions in" in primary["evidence"]
    assert (
        "> preemptions_per_min 2" in primary["evidence"] and "> kv_cache_pct_high 90%" in primary["evidence"]
    )
    assert 0.9 < primary["share"] <= 1.0  # every interval scraped was under pressure
    assert "KV-cache pressure / preemption" in md.split("\n")[2]
    assert "## Server load (from /metrics)" in md and f"| {url} | {load['scrapes']} |" in md
    assert "--max-num-seqs" in md  # its next steps


@pytest.mark.parametrize("servers", [1, 3])
def test_a_healthy_load_raises_no_alarm_and_is_reported_per_server(tmp_path, analyze, servers):
    run = make_run("healthy", steps=20, seed=1, shape=Shape(server_metrics=True, servers=servers))
    summary, md = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out", "--async_level", "1")
    assert summary["primary"] is None, summary["findings"]
    assert "No bottleneck found" in md and "## Server load (from /metrics)" in md
    loads = {s["url"]: s["load"] for s in summary["servers"]}
    assert len(loads) == servers and all(x["scrapes"] >= 3 and x["preemptions"] == 0 for x in loads.values())
    assert all(20 <= x["kv_cache_pct_p50"] <= 60 and x["waiting_max"] == 0 for x in loads.values())
    assert not summary["unknown_tags"]  # [server] is a tag the analyzer reads


def test_a_full_kv_cache_with_nothing_waiting_is_a_cache_well_used(tmp_path, analyze):
    entries = [(5.0 * i, "metrics", metrics(kv=97.0, running=32, preemptions=3)) for i in range(12)]
    summary, md = analyze([log(tmp_path / "orchestrator.log", entries)], tmp_path / "out")
    assert summary["primary"] is None, summary["findings"]
    load = summary["servers"][0]["load"]
    assert load["kv_cache_pct_p95"] == 97.0 and load["preemptions"] == 0 and load["preemptions_per_min"] == 0


def test_a_full_kv_cache_with_requests_waiting_fires_without_any_preemption(tmp_path, analyze):
    entries = [
        (5.0 * i, "metrics", metrics(kv=95.0 if i % 4 else 60.0, waiting=6 if i % 4 else 0))
        for i in range(12)
    ]
    summary, _ = analyze([log(tmp_path / "orchestrator.log", entries)], tmp_path / "out")
    primary = summary["primary"]
    assert primary["kind"] == "kv_cache_pressure" and primary["thresholds"] == ["kv_cache_pct_high"]
    assert "0 preemptions in 0.9 min (0.0/min <= preemptions_per_min 2)" in primary["evidence"]
    assert "under pressure 45 s of 55 s scraped" in primary["evidence"]  # 9 of the 11 intervals


def test_preemptions_below_the_rate_or_too_few_scrapes_are_not_judged(tmp_path, analyze):
    # 3 preemptions in 5 minutes: 0.6 a minute
    slow = [(30.0 * i, "metrics", metrics(preemptions=i // 3)) for i in range(11)]
    summary, _ = analyze([log(tmp_path / "a.log", slow)], tmp_path / "a")
    assert summary["primary"] is None and summary["servers"][0]["load"][
        "preemptions_per_min"
    ] == pytest.approx(0.6)
    # two scrapes, 30 preemptions between them: fewer than server_min_scrapes (3)
    few = [(0.0, "metrics", metrics()), (5.0, "metrics", metrics(preemptions=30, kv=99.0, waiting=9))]
    summary, _ = analyze([log(tmp_path / "b.log", few)], tmp_path / "b")
    assert summary["primary"] is None
    summary, _ = analyze(
        [log(tmp_path / "b.log", few)], tmp_path / "c", "--threshold", "server_min_scrapes=2"
    )
    assert summary["primary"]["kind"] == "kv_cache_pressure"


def test_a_restarted_server_and_a_pause_in_scraping_are_not_counted_as_preemptions(tmp_path):
    entries = [
        (0.0, "metrics", metrics(preemptions=100)),
        (5.0, "metrics", metrics(preemptions=104)),  # +4
        (10.0, "metrics", metrics(preemptions=2)),  # restarted: 2 since
        (15.0, "metrics", metrics(preemptions=3)),  # +1
        (3600.0, "metrics", metrics(preemptions=50)),  # an hour later (another run): a pause, left out
        (3605.0, "metrics", metrics(preemptions=51)),  # +1
    ]
    parse = ParseStats()
    d = collect(parse_files([("orchestrator", log(tmp_path / "o.log", entries))], parse), parse)
    s = d.server_load["http://s:1"]
    assert s.scrapes == 6 and s.preempted() == 4 + 2 + 1 + 1 and s.covered_s() == 20.0
    assert s.preemptions_per_min() == pytest.approx(60 * 8 / 20)


def test_failed_scrapes_and_a_server_without_metrics_are_reported(tmp_path, analyze):
    a, b = "http://a:1", "https://api.example.com/v1"
    entries = [
        (0.0, "metrics", metrics(url=a)),
        (0.0, "scrape.off", dict(url=b, status=404, reason="HTTP 404")),
        (5.0, "scrape.error", dict(url=a, error="ConnectError:_refused", failures=1)),
        (50.0, "scrape.error", dict(url=a, error="ConnectError:_refused", failures=10)),
        (70.0, "scrape.ok", dict(url=a, failures=13)),
        (70.0, "metrics", metrics(url=a)),
        (75.0, "scrape.error", dict(url=a, error="HTTP_500", failures=1)),  # still failing at the end
    ]
    summary, md = analyze([log(tmp_path / "collect.log", entries)], tmp_path / "out")
    loads = {s["url"]: s["load"] for s in summary["servers"]}
    assert loads[a]["scrape_errors"] == 14 and loads[a]["scrapes"] == 2
    assert loads[b]["off"] == "HTTP 404" and loads[b]["scrapes"] == 0
    assert f"| {b} | 0 | - | - | - | - | - | - | 0; off: HTTP 404 |" in md
    assert summary["primary"] is None
