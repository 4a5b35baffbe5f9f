"""The report: SUMMARY.md, summary.json and the text files, from hand-built analyses and synthetic logs."""

from __future__ import annotations

import pytest
from tests.support.synthetic_logs import Shape, make_run

from prime_rl.analysis.analyze import Analysis
from prime_rl.analysis.findings import Finding
from prime_rl.analysis.report import format_stats, slowest_updates, summary_md, timeline, to_json
from prime_rl.analysis.stats import describe
from prime_rl.analysis.thresholds import Thresholds
from prime_rl.analysis.updates import Update

PRIMARY = Finding("slow_reload", "Slow reload", "rpc_ms median 20000.0 ms", 0.6, ("Profile.", "Faster disk."))
SECOND = Finding("checkpoint_io", "Checkpoint I/O", "ckpt wait 30.0 s", 0.3, ("Use NVMe.",))


def test_summary_names_the_primary_then_the_rest(collected):
    a = Analysis(collected(rpc_ms=[20000.0] * 3), Thresholds(), (PRIMARY, SECOND), ("a warning",))
    md = summary_md(a, has_png=False)
    assert md.startswith(
        "# Bottleneck analysis\n\n**Primary bottleneck: Slow reload.**\n\nEvidence: rpc_ms median"
    )
    assert "- **Checkpoint I/O**: ckpt wait 30.0 s." in md and "- a warning" in md
    assert "1. Profile.\n2. Faster disk.\n3. Use NVMe." in md
    assert "| Server RPC time per weight update (client view) | 3 | 20000.0 |" in md
    assert "## Timeline" not in md and "- `queue_ratio` = 3.0: " in md


def test_summary_without_findings_gives_the_healthy_numbers(collected):
    a = Analysis(collected(queue_ms=[5.0, 7.0], ckpt_wait_ms=[20.0]), Thresholds(), (), ())
    md = summary_md(a, has_png=True)
    assert (
        "**No bottleneck found" in md and "queue_ms median 6.0 ms (max 7.0); ckpt wait median 20.0 ms." in md
    )
    assert "Nothing to fix" in md and "![timeline](timeline.png)" in md
    assert "No timed events to judge." in summary_md(Analysis(collected(), Thresholds(), (), ()), False)


def test_json_lists_findings_as_dicts(collected):
    a = Analysis(collected(rpc_ms=[1.0]), Thresholds(), (PRIMARY, SECOND), ())
    out = to_json(a)
    assert list(out) == [
        "primary",
        "findings",
        "warnings",
        "stats",
        "counts",
        "run_seconds",
        "down_seconds",
        "async_level",
        "staleness",
        "thresholds",
        "parse",
        "updates",
        "updates_total",
        "spans_dropped",
        "stages",
        "servers",
        "restarts",
        "bad_values",
        "out_of_order",
        "time_goes_back",
        "bad_times",
        "clock_offsets",
        "unknown_tags",
        "unknown_tag_lines",
    ]
    assert (
        out["primary"]
        == out["findings"][0]
        == {
            "kind": "slow_reload",
            "title": "Slow reload",
            "evidence": "rpc_ms median 20000.0 ms",
            "share": 0.6,
            "next": ["Profile.", "Faster disk."],
            "thresholds": [],
            "explains": None,
        }
    )
    assert out["stats"]["rpc_ms"]["count"] == 1 and out["stats"]["queue_ms"] == {"count": 0}
    assert to_json(Analysis(collected(), Thresholds(), (), ()))["primary"] is None


def test_text_files(collected):
    assert format_stats("T", {"count": 0}) == "T\n  count: 0 (no such lines)\n"
    assert "  count:   2\n  mean:    1.5\n" in format_stats("T", describe([1.0, 2.0]))
    d = collected(updates=(Update("t1", send_ts=100.0, wall_ms=800.0, rpc_ms=300.0, queue_ms=500.0),))
    text = slowest_updates(d)
    assert text.splitlines()[1].split()[:1] == ["t1"] and "800.0" in text and "500.0" in text
    assert "(no weight updates" in slowest_updates(collected())
    assert "(no timed events)" in timeline(collected())


def test_front_end_saturation_names_the_numbers_and_the_fix(tmp_path, analyze):
    files = make_run("frontend_queue_saturation", seed=2).write(tmp_path / "logs")
    summary, md = analyze(files.values(), tmp_path / "out")
    assert (
        "Front-end queue saturation" in md
        and "queue in front of the server mean" in md
        and "vs rpc_ms mean" in md
    )
    assert "client.send -> server.recv median" in summary["primary"]["evidence"]
    assert any("dedicated admin client" in s for s in summary["primary"]["next"])


def test_summary_json_lists_the_updates_as_their_records_say(tmp_path, collected):
    """summary.json's updates are written by polars from the columns: each is its record's
    to_dict() (every field, send_to_recv_ms), nulls and all, for a table of a real join (retries,
    several servers, updates with no server line) and for hand-made records; only the first
    JSON_UPDATES are listed."""
    import json

    from prime_rl.analysis import report
    from prime_rl.analysis.output import dumps
    from prime_rl.analysis.parser import ParseStats, parse_files
    from prime_rl.analysis.stats import collect
    from prime_rl.analysis.update_table import UpdateTable

    paths = []
    for scenario in ("slow_reload", "rate_limited"):
        run = make_run(scenario, steps=12, seed=5, shape=Shape(servers=3, slow_server=1))
        files = run.write(tmp_path / scenario)
        paths += [
            (name if name in ("orchestrator", "trainer") else "inference", p) for name, p in files.items()
        ]
    lonely = tmp_path / "orchestrator_more.log"  # an update no server logged, one that failed
    lonely.write_text(
        "2026-01-01 13:00:00.000 | INFO    | [weights][lonely1] client.send url=http://h:9 path=/update_weights t=1.0\n"
        "2026-01-01 13:00:00.300 | INFO    | [weights][lonely1] client.done wall_ms=300.0 rpc_ms=290.0 queue_ms=10.0\n"
        "2026-01-01 13:00:01.000 | INFO    | [weights][lonely2] client.send url=http://h:9 path=/update_weights t=2.0\n"
        "2026-01-01 13:00:01.100 | INFO    | [weights][lonely2] client.error status=500\n"
    )
    paths.append(("orchestrator", lonely))
    stats = ParseStats()
    d = collect(parse_files(paths, stats), stats)
    assert isinstance(d.updates, UpdateTable) and len(d.updates) > 30
    assert any(u.server is None for u in d.updates) and any(u.send_to_recv_ms is None for u in d.updates)
    records = [
        Update("a", url="http://h", send_ts=1.0, send_t=5.0, recv_ts=1.2, recv_t=5.1, wall_ms=300.0),
        Update("b", failed=True, target="x"),
    ]
    for updates in (d.updates, tuple(records)):
        written = json.loads(report._updates_json(collected(updates=updates)))
        assert written == json.loads(dumps([u.to_dict() for u in updates]))
    report.JSON_UPDATES, was = 3, report.JSON_UPDATES
    try:
        assert len(json.loads(report._updates_json(d))) == 3
    finally:
        report.JSON_UPDATES = was


def _collector_log(path, samples) -> None:
    """A collect-rollouts log: run.start at 12:00:00, then each sample (its end in seconds after
    that, dur_ms, server, status) as the collector writes it, when it ends."""
    from prime_rl.tracing import format_tagged

    def at(seconds: float) -> str:
        return f"2026-01-01 12:{int(seconds) // 60:02d}:{seconds % 60:06.3f} | INFO    | "

    lines = [at(0.0) + format_tagged("collect", "run.start", todo=len(samples), done=0, resume=False)]
    for k, (end, dur, url, status) in sorted(enumerate(samples), key=lambda s: s[1][0]):
        if status == 200:
            tagged = format_tagged(
                "collect", "rollout.done", f"s{k:03d}", task=k, repeat=0, status=200, dur_ms=dur,
                queue_ms=5.0, gen_ms=dur - 15.0, verify_ms=10.0, out_tokens=8, attempts=1, url=url,
            )  # fmt: skip
        else:
            tagged = format_tagged(
                "collect", "rollout.failed", f"s{k:03d}", task=k, repeat=0, status=status, dur_ms=dur,
                kind="http", url=url,
            )  # fmt: skip
        lines.append(at(end) + tagged)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def test_a_collectors_timeline_lists_its_samples(tmp_path, analyze):
    """An offline collector's log has only [collect] lines: timeline.txt said "(no timed events)"
    (reviewer's s08: 206 timed samples). It lists each sample now, from its line's time less its
    dur_ms to the line, with its server, status and times."""
    samples = [(2.0 * (k + 1), 2000.0, "http://fast:8000", 200) for k in range(4)]
    samples += [(6.0 * (k + 1), 6000.0, "http://slow:8000", 200) for k in range(2)]
    samples.append((13.0, 1000.0, "http://slow:8000", 500))
    _collector_log(tmp_path / "collect.log", samples)
    summary, _ = analyze([tmp_path / "collect.log"], tmp_path / "out")
    text = (tmp_path / "out" / "timeline.txt").read_text()
    assert "(no timed events)" not in text and text.startswith(
        "An offline collector's samples in time order."
    )
    lines = [line for line in text.splitlines() if " ms  sample " in line]
    assert len(lines) == 7 and summary["spans_dropped"] == {}
    assert lines[0].startswith(
        "12:00:00.000 -> 12:00:02.000    2000.0 ms  sample     sample s000 http://fast:8000"
    )
    assert "status=200 queue_ms=5.0 gen_ms=1985.0 verify_ms=10.0" in lines[0]
    assert (
        "12:00:06.000 -> 12:00:12.000    6000.0 ms  sample     sample s005 http://slow:8000  status=200"
        in text
    )
    assert (
        "12:00:12.000 -> 12:00:13.000    1000.0 ms  sample     sample s006 http://slow:8000  status=500 "
        "queue_ms=- gen_ms=- verify_ms=-" in text
    )
    starts = [line[:12] for line in lines]
    assert starts == sorted(starts)  # in time order


def _collect_then_verify(path, gap_s: float):
    """A collector's run 12:00:00-12:02:00 (4 slots, 4 samples of 30 s each) and, ``gap_s`` after its
    end, its verify pass: 16 verifications of 60 s, 4 at a time (240 s)."""
    from datetime import datetime

    from prime_rl.tracing import format_tagged

    base = datetime(2026, 1, 1, 12, 0, 0).timestamp()

    def line(t: float, tagged: str) -> str:
        return f"{datetime.fromtimestamp(t).strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} | INFO    | {tagged}"

    events = []
    for slot in range(4):
        for k in range(4):
            done = format_tagged(
                "collect", "rollout.done", f"{slot}{k:03d}", task=slot * 4 + k, repeat=0, status=200,
                dur_ms=30000.0, queue_ms=0.0, gen_ms=29000.0, out_tokens=100, attempts=1, url="http://h:8000",
            )  # fmt: skip
            events.append((base + 30 * (k + 1), done))
            verified = format_tagged("collect", "verify.done", task=slot * 4 + k, repeat=0, dur_ms=60000.0)
            events.append((base + 120 + gap_s + 60 * (k + 1), verified))
    start = format_tagged("collect", "run.start", todo=16, done=0, resume=False, mode="collect")
    lines = [line(base, start)] + [line(t, e) for t, e in sorted(events, key=lambda e: e[0])]
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_down_time_sentence_is_for_down_time_worth_a_sentence(tmp_path, analyze):
    # the reviewer's s42: a verify pass 0.5 s after its collect run ended: SUMMARY.md said "leaves
    # out the 0 s in which no process ran"; the run's 360.0 s (the union of the run's 120 s and the
    # pass's 240 s) and the 0.5 s down make the 360.5 s from the first line to the last
    log = _collect_then_verify(tmp_path / "half" / "rollouts_collect.log", 0.5)
    summary, md = analyze([log], tmp_path / "out_half")
    assert summary["run_seconds"] == 360.0 and summary["down_seconds"] == 0.5
    assert "in which no process ran" not in md
    # 5.5 s: to a tenth of a second ("the 6 s" before), 65.4 s to the second
    for gap, said in ((5.5, "5.5"), (65.4, "65")):
        log = _collect_then_verify(tmp_path / f"gap_{gap}" / "rollouts_collect.log", gap)
        summary, md = analyze([log], tmp_path / f"out_{gap}")
        assert summary["run_seconds"] + summary["down_seconds"] == pytest.approx(360.0 + gap, abs=0.002)
        assert f"The run's wall time leaves out the {said} s in which no process ran" in md
