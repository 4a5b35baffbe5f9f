"""The waits after a 429 last only as long as their client could wait: a client stopped (the end of
its logs, a crash) while its requests wait out a long Retry-After logged waits that its logs hold
none or part of (a collector's 120 s waits read 928% of a 12.9 s run). And each client's 429s are
judged against its own completions: a collector rate-limited on every request, analysed with a
trio's logs, was 0.8% of the pooled completions and no finding."""

from __future__ import annotations

from datetime import datetime

import pytest
from tests.support.synthetic_logs import appended, make_run

from prime_rl.analysis import rules
from prime_rl.analysis.thresholds import Thresholds
from prime_rl.tracing import format_tagged

CUT = "s more of its waits lay past where its logs end or it crashed, or in down time: not counted"


def _stamp(line: str) -> float:
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()


def _at(ts: float, tagged: str) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + f" | INFO    | {tagged}"


def _retries(ts: float, n: int, wait_ms: float, tag: str = "gen") -> list[str]:
    """``n`` requests that wait ``wait_ms`` after a 429 from ``ts``: the orchestrator's ([gen]) or the
    collector's ([collect])."""
    if tag == "gen":
        tagged = format_tagged(
            "gen", "request.retry", url="http://h:8000", status=429, attempt=1, wait_ms=wait_ms
        )
        return [_at(ts, tagged)] * n
    return [
        _at(ts, format_tagged("collect", "request.retry", f"r{i}", status=429, wait_ms=wait_ms, attempt=1, url="http://c:8000"))
        for i in range(n)
    ]  # fmt: skip


def _ten_samples(at: float) -> list[str]:
    """Ten collector samples of 10 s on one server, all ending at ``at``."""
    return [
        _at(at, format_tagged(
            "collect", "rollout.done", f"s{i}", task=i, repeat=0, status=200, dur_ms=9990.0, queue_ms=0.0,
            gen_ms=9900.0, verify_ms=5.0, out_tokens=8, attempts=1, url="http://c:8000",
        ))
        for i in range(10)
    ]  # fmt: skip


def test_a_collector_stopped_while_its_requests_wait_counts_their_waits_up_to_its_last_line(
    tmp_path, analyze
):
    # a collector's run of 10 s (run.start at 12:00:00, ten samples of 10 s end at 12:00:10); at
    # 12:00:08 ten requests wait out a Retry-After of 120 s, and the collector is stopped at 12:00:10:
    # 2.0 s of those waits lie in its logs. The stage row said 120.0 s, 1200.0% of the run (the
    # finding's share 12.0), and nothing said the waits ran past the logs.
    t0 = datetime(2026, 1, 1, 12, 0, 0).timestamp()
    lines = [_at(t0, format_tagged("collect", "run.start", todo=10, done=0, resume=False, mode="collect"))]
    lines += _retries(t0 + 8.0, 10, 120_000.0, tag="collect")
    lines += _ten_samples(t0 + 10.0)
    log = tmp_path / "collect.log"
    log.write_text("\n".join(lines) + "\n")
    summary, md = analyze([log], tmp_path / "out")
    assert summary["run_seconds"] == pytest.approx(10.0)
    (row,) = [s for s in summary["stages"] if s["name"] == "rate-limit waits (429)"]
    assert row["process"] == "collector" and row["total_ms"] == pytest.approx(2000.0)
    assert row["share"] == pytest.approx(0.2) and f"118.0 {CUT}" in row["how"]
    assert "| collector | (beside the samples) rate-limit waits (429) | 2.0 | 20.0% |" in md
    finding = next(f for f in summary["findings"] if f["kind"] == "rate_limited")
    assert finding["share"] == pytest.approx(0.2)
    assert f"the collector's for 2.0 s (118.0 {CUT})" in finding["evidence"]


def test_a_collector_s_waits_end_with_its_run_in_a_trio_s_longer_logs(tmp_path, analyze):
    # the same collector stopped at 12:00:10, analysed with a rate-limited trio's 34.8 s (12:00:00 on):
    # its waits end with its log's run, not with the trio's last line (116.0 s past it, 333% of the run)
    t0 = datetime(2026, 1, 1, 12, 0, 0).timestamp()
    files = list(make_run("rate_limited", steps=20).write(tmp_path / "logs").values())
    lines = _retries(t0 + 8.0, 10, 120_000.0, tag="collect")
    lines += _ten_samples(t0 + 10.0)
    log = tmp_path / "logs" / "collect.log"
    log.write_text("\n".join(lines) + "\n")
    summary, _ = analyze([*files, log], tmp_path / "out")
    rows = {(s["process"], s["name"]): s for s in summary["stages"]}
    assert rows["collector", "rate-limit waits (429)"]["total_ms"] == pytest.approx(2000.0)
    assert f"118.0 {CUT}" in rows["collector", "rate-limit waits (429)"]["how"]
    assert rows["orchestrator", "rate-limit waits (429)"]["total_ms"] == pytest.approx(10000.0)
    assert CUT not in rows["orchestrator", "rate-limit waits (429)"]["how"]


def test_an_orchestrator_stopped_while_its_requests_wait_counts_none_past_the_logs(tmp_path, analyze):
    # the rate-limited trio (10 requests of each ~1.5 s batch wait 500 ms after a 429: 10.0 s of a
    # 34.8 s run) opens batch 20 at its last line, where ten requests wait out 120 s and the logs end
    # (the reviewer's t_429tail): "(beside the steps) rate-limit waits (429) outside generation" said
    # 120.0 s, 345%. None of those waits lies in the logs.
    run = make_run("rate_limited", steps=20)
    end = _stamp(run.orchestrator[-1])
    batch = format_tagged("gen", "batch.start", step=20, inflight=64, target_batch=256)
    run.orchestrator += [_at(end, batch), *_retries(end, 10, 120_000.0)]
    summary, md = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    rows = {s["name"]: s for s in summary["stages"] if s["process"] == "orchestrator"}
    assert "rate-limit waits (429) outside generation" not in rows and "outside generation" not in md
    within = rows["rate-limit waits (429)"]
    assert within["within"] == "generation" and within["total_ms"] == pytest.approx(10000.0)
    assert f"120.0 {CUT}" in within["how"]
    finding = next(f for f in summary["findings"] if f["kind"] == "rate_limited")
    assert finding["share"] == pytest.approx(10.0 / summary["run_seconds"])
    assert (
        f"the orchestrator's for 10.0 s (within its generation batches) (120.0 {CUT})" in finding["evidence"]
    )


def test_waits_cut_short_by_a_whole_run_crash_do_not_run_on_into_its_down_time(tmp_path, analyze):
    # the rate-limited trio (20 steps, 10.0 s of waits in its batches) crashes whole after step 19,
    # 1 s after ten of its requests began to wait out 120 s; resumed 600 s later at step 15 (5 steps,
    # 2.5 s of waits). 1.0 s of the long waits lies before the crash; the other 119.0 s fell in the
    # down time, which the run's 43.4 s leave out, yet they were "(beside the steps) rate-limit waits
    # (429) outside generation 119.0 s, 273.9%".
    first = make_run("rate_limited", steps=20)
    end = _stamp(first.orchestrator[-1])
    first.orchestrator[-1:-1] = _retries(end - 1.0, 10, 120_000.0)  # within batch 19, 1 s before its end
    second = make_run("rate_limited", steps=5, first_step=15, start_offset_s=600.0)
    summary, md = analyze(appended(tmp_path / "logs", first, second), tmp_path / "out")
    assert [(r["process"], r["reached"], r["resumed"]) for r in summary["restarts"]] == [
        ("orchestrator", 19, 15),
        ("trainer", 19, 15),
    ]
    rows = {s["name"]: s for s in summary["stages"] if s["process"] == "orchestrator"}
    assert "rate-limit waits (429) outside generation" not in rows
    within = rows["rate-limit waits (429)"]
    assert within["total_ms"] == pytest.approx(10_000.0 + 2_500.0 + 1_000.0, abs=5.0)
    assert f"119.0 {CUT}" in within["how"]
    assert within["share"] < rows["generation"]["share"] < 1.0


def _collector_every_request_429(path, samples: int = 40):
    """A collector's log from 12:00:00: ``samples`` samples of 3 s side by side, each of whose request
    waited 1 s after a 429 at 12:00:01 (every request rate-limited)."""
    t0 = datetime(2026, 1, 1, 12, 0, 0).timestamp()
    lines = [
        _at(t0, format_tagged("collect", "run.start", todo=samples, done=0, resume=False, mode="collect"))
    ]
    lines += _retries(t0 + 1.0, samples, 1000.0, tag="collect")
    lines += [
        _at(t0 + 3.0, format_tagged(
            "collect", "rollout.done", f"r{i}", task=i, repeat=0, status=200, dur_ms=3000.0, queue_ms=0.0,
            gen_ms=1900.0, verify_ms=5.0, out_tokens=8, attempts=2, url="http://c:8000",
        ))
        for i in range(samples)
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_collector_rate_limited_on_every_request_is_named_beside_a_trio_s_logs(tmp_path, analyze):
    # a collector whose 40 requests each waited 1 s after a 429 (40 of its 40 completions), analysed with
    # a healthy trio's logs (5120 completions, no 429): the pooled 40 of 5160 (0.8%) stayed under
    # rate_limited_frac (1%) and no finding said so, while its stage row read 1.0 s of waits. Each
    # client is judged against its own completions, and the finding names the collector.
    files = list(make_run("healthy", steps=20).write(tmp_path / "logs").values())
    log = _collector_every_request_429(tmp_path / "logs" / "collect.log")
    summary, _ = analyze([*files, log], tmp_path / "out")
    assert (summary["counts"]["retry.429"], summary["counts"]["completions"]) == (40, 5160)
    finding = next((f for f in summary["findings"] if f["kind"] == "rate_limited"), None)
    assert finding is not None, [f["kind"] for f in summary["findings"]]
    assert finding["title"] == "Rate-limited: the server answers 429 to the collector's requests"
    assert finding["evidence"].startswith(
        "the collector's 40 retries after HTTP 429 for its 40 completions (the orchestrator's: 0 for its 5120 "
        "completions); "
    )
    assert finding["share"] == pytest.approx(1.0 / summary["run_seconds"])
    assert (summary["counts"]["collector.retry.429"], summary["counts"]["collector.completions"]) == (40, 40)
    # alone, its finding reads as it always did
    alone, _ = analyze([log], tmp_path / "alone")
    finding = next(f for f in alone["findings"] if f["kind"] == "rate_limited")
    assert finding["title"] == "Rate-limited: the server answers 429"
    assert finding["evidence"].startswith("40 retries after HTTP 429 for 40 completions; ")


def test_each_client_s_429s_are_judged_against_its_own_completions(collected):
    th = Thresholds()
    # the orchestrator's 60 429s for its 5120 completions (1.2%), a collector's 2000 completions without
    # one: the pooled 60 of 7120 (0.8%) was no finding
    d = collected(counts={"retry.429": 60, "completions": 7120, "collector.completions": 2000})
    f = rules.rate_limited(d, th)
    assert f is not None and f.title == "Rate-limited: the server answers 429 to the orchestrator's requests"
    assert f.evidence == (
        "the orchestrator's 60 retries after HTTP 429 for its 5120 completions (the collector's: 0 for its 2000 "
        "completions)"
    )
    # both over: both named
    d = collected(
        counts={"retry.429": 100, "completions": 5140, "collector.retry.429": 40, "collector.completions": 20}
    )
    f = rules.rate_limited(d, th)
    assert f is not None and f.title.endswith("to the orchestrator's and the collector's requests")
    assert f.evidence == (
        "the orchestrator's 60 retries after HTTP 429 for its 5120 completions and the collector's 40 retries "
        "after HTTP 429 for its 20 completions"
    )
    # a collector's 429s without a completion of its own are a finding whatever the trio completed
    assert rules.rate_limited(
        collected(counts={"retry.429": 3, "completions": 5120, "collector.retry.429": 3}), th
    )
    # neither over
    d = collected(
        counts={
            "retry.429": 50,
            "completions": 7120,
            "collector.retry.429": 10,
            "collector.completions": 2000,
        }
    )
    assert rules.rate_limited(d, th) is None
