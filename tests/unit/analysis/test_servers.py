"""Issue 18 item 2: several servers, one trace id per update fanned out to all of them; per-server
figures and a slow server named with its ratio; console captures keep the client/server match."""

from __future__ import annotations

import re
import statistics
from array import array
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.support.synthetic_logs import Shape, appended, make_run

from prime_rl.analysis.compare import APART_RETRY_FIGURES
from prime_rl.analysis.servers import ServerRow, _median


def test_an_update_fanned_out_to_four_servers_counts_once_per_server(tmp_path, analyze):
    run = make_run("healthy", steps=12, seed=2, shape=Shape(servers=4, slow_server=2))
    summary, md = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    updates = summary["updates"]
    assert len(updates) == len(run.values["rpc_ms"]) == 4 * 10  # steps 2..11, four servers each
    assert len({u["tid"] for u in updates}) == 10
    # every client part found its own server's lines (the server file, equal rpc_ms)
    assert all(u["server"] is not None and abs(u["server_rpc_ms"] - u["rpc_ms"]) < 0.06 for u in updates)
    by_url = {s["url"]: s for s in summary["servers"]}
    assert sorted(by_url) == ["http://h1:8000", "http://h2:8000", "http://h3:8000", "http://h:8000"]
    assert all(s["updates"] == 10 for s in by_url.values())
    slow = next(f for f in summary["findings"] if f["kind"] == "slow_server")
    assert "http://h2:8000" in slow["title"]
    ratio = float(re.search(r"takes ([0-9.]+)x", slow["title"]).group(1))
    assert 4.5 < ratio < 5.5 and "server_slow_ratio 2" in slow["evidence"]
    assert "## Per server" in md and "| http://h2:8000 | 10 | 0 |" in md


def test_servers_that_agree_are_not_named(tmp_path, analyze):
    run = make_run("healthy", steps=8, seed=2, shape=Shape(servers=3))
    summary, _ = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    assert not any(f["kind"] == "slow_server" for f in summary["findings"])
    assert len(summary["servers"]) == 3


def test_console_captured_server_logs_still_match_the_client(tmp_path, analyze):
    # the inference logs as `tee` captures the console: HH:MM:SS.mmm, no date
    run = make_run("frontend_queue_saturation", steps=10, seed=5, shape=Shape(servers=2, console=True))
    files = run.write(tmp_path / "logs")
    assert re.match(r"\d{2}:\d{2}:\d{2}\.\d{3} \| INFO", files["inference"].read_text())
    summary, md = analyze(files.values(), tmp_path / "out")
    assert not any("server-side" in w for w in summary["warnings"]), summary["warnings"]
    gaps = [u["send_to_recv_ms"] for u in summary["updates"]]
    assert len(gaps) == 2 * 8 and all(g is not None and 0 <= g < 60_000 for g in gaps), gaps
    # the date-less server times were put on the client's date: wall clocks agree within a minute
    assert all(u["recv_ts"] is not None and 0 <= u["recv_ts"] - u["send_ts"] < 60 for u in summary["updates"])
    assert "client.send -> server.recv median" in summary["primary"]["evidence"]


def _collect_log(path, gen_ms_by_url: dict[str, float], n: int = 20):
    """A collector's log: ``n`` samples per server, each server at its own generation time; one
    429 retry and one failed sample on the last server."""
    from prime_rl.tracing import format_tagged

    lines = []
    for i in range(n):
        for j, (url, gen) in enumerate(gen_ms_by_url.items()):
            ts = f"2026-01-01 12:00:{(i * len(gen_ms_by_url) + j) % 60:02d}.000"
            tagged = format_tagged(
                "collect", "rollout.done", f"t{i}-{j}", task=i, repeat=j, status=200, dur_ms=gen + 5,
                queue_ms=0.0, gen_ms=gen, verify_ms=5.0, out_tokens=8, attempts=1, url=url,
            )  # fmt: skip
            lines.append(f"{ts} | INFO    | {tagged}")
    last = list(gen_ms_by_url)[-1]
    for tagged in (
        format_tagged("collect", "request.retry", "r1", status=429, wait_ms=100.0, attempt=1, url=last),
        format_tagged(
            "collect", "rollout.failed", "f1", task=99, repeat=0, status=500, dur_ms=5.0, kind="X", url=last
        ),
    ):
        lines.append(f"2026-01-01 12:00:59.000 | INFO    | {tagged}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_collector_s_servers_get_their_own_rows_and_a_slow_one_is_named(tmp_path, analyze):
    log = _collect_log(
        tmp_path / "collect.log", {"http://a:1": 100.0, "http://b:1": 100.0, "http://c:1": 300.0}
    )
    summary, md = analyze([log], tmp_path / "out")
    by_url = {s["url"]: s for s in summary["servers"]}
    assert {u: (s["samples"], s["gen_ms_p50"]) for u, s in by_url.items()} == {
        "http://a:1": (20, 100.0),
        "http://b:1": (20, 100.0),
        "http://c:1": (20, 300.0),
    }
    assert by_url["http://c:1"]["failed"] == 1 and by_url["http://c:1"]["retries"] == {"retry.429": 1}
    slow = next(f for f in summary["findings"] if f["kind"] == "slow_server")
    assert slow["title"] == "Slow server: http://c:1 takes 3.0x as long as its peers to generate"
    assert (
        "| server | samples | failed | gen_ms p50 |" in md and "| http://c:1 | 20 | 1 | 300.0 | 1 | 0 |" in md
    )


def test_a_collector_s_two_slow_servers_of_four_are_both_named_against_the_two_that_are_not(
    tmp_path, analyze
):
    # as for weight updates: the peers are the faster half, so one slow server is no peer of the other
    log = _collect_log(
        tmp_path / "collect.log",
        {"http://a:1": 100.0, "http://b:1": 100.0, "http://c:1": 500.0, "http://d:1": 400.0},
    )
    summary, _ = analyze([log], tmp_path / "out")
    slow = [f for f in summary["findings"] if f["kind"] == "slow_server"]
    assert len(slow) == 1
    assert slow[0]["title"] == (
        "Slow servers: http://c:1 (5.0x), http://d:1 (4.0x) take that many times as long as their peers to generate"
    )
    assert "vs 100 ms on the 2 other server(s)" in slow[0]["evidence"]
    # the time each slow server's samples took beyond the peers' median, of the samples' summed time
    # (dur_ms: gen_ms + 5 ms each, and the failed sample's 5 ms); not its quarter of the samples by count
    busy = 20 * (105 + 105 + 505 + 405) + 5.0
    assert slow[0]["share"] == pytest.approx((20 * (500 - 100) + 20 * (400 - 100)) / busy)


def test_more_than_half_the_servers_are_never_the_slow_ones(tmp_path, analyze):
    # of five at 20, 20, 100, 100 and 100 ms the two are fast: the three were named "5.0x slow"
    log = _collect_log(
        tmp_path / "collect.log",
        {
            "http://a:1": 20.0,
            "http://b:1": 20.0,
            "http://c:1": 100.0,
            "http://d:1": 100.0,
            "http://e:1": 100.0,
        },
    )
    summary, _ = analyze([log], tmp_path / "out")
    assert not any(f["kind"] == "slow_server" for f in summary["findings"]), summary["findings"]
    # and three of five at 5x the other two's: no more slow than fast ones either way
    from prime_rl.analysis.servers import _slower

    assert _slower({"a": 20, "b": 20, "c": 100, "d": 100, "e": 100}, 2.0)[2] == []
    assert _slower({"a": 20, "b": 20, "c": 20, "d": 100, "e": 100}, 2.0)[2] == ["d", "e"]
    # more than half at the ratio: the slowest up to half, none of a tie at the cut; a 10x server stays named
    assert _slower({"a": 10, "b": 10, "c": 25, "d": 25, "e": 100}, 2.0)[2] == ["e"]
    assert _slower({"a": 10, "b": 10, "c": 25, "d": 50, "e": 100}, 2.0)[2] == ["e", "d"]


def _four_slots(hour: int = 12, minute: int = 0) -> list[str]:
    """A collector's log lines: four slots of 30 s samples from 12:00:00 to 12:02:00 (16 samples; or
    from ``hour``:``minute``:00, two minutes)."""
    from prime_rl.tracing import format_tagged

    lines = []
    for r in range(4):
        for slot in range(4):
            tagged = format_tagged(
                "collect", "rollout.done", f"t{r}-{slot}", task=r, repeat=slot, status=200, dur_ms=30_000.0,
                queue_ms=0.0, gen_ms=29_000.0, verify_ms=1000.0, out_tokens=8, attempts=1, url="http://a:1",
            )  # fmt: skip
            at, second = divmod(30 * (r + 1), 60)
            lines.append(f"2026-01-01 {hour}:{minute + at:02d}:{second:02d}.{slot:03d} | INFO    | {tagged}")
    return lines


def test_a_collector_s_samples_in_flight_count_from_its_first_sample_s_start(tmp_path, analyze):
    """A collector's line is written as its sample ends: four slots of 30 s samples from 12:00:00 to
    12:02:00 are 4.0 in flight, not 16 samples' time over the 90 s from the first line (5.3), and
    the run began with them (generation read 128.9% of a run that began at the first line); a deferred
    verification pass an hour later leaves the samples in flight as they were (it read 0.1)."""
    from prime_rl.tracing import format_tagged

    lines = _four_slots()
    log = tmp_path / "collect.log"
    log.write_text("\n".join(lines) + "\n")
    summary, _ = analyze([log], tmp_path / "out")
    stage = next(s for s in summary["stages"] if s["name"] == "collector generation")
    assert stage["how"] == "[collect] gen_ms summed / 4.0 samples in flight (mean)"
    assert stage["total_ms"] == pytest.approx(16 * 29_000.0 / (16 * 30_000.0 / 120_003.0))
    # of a run that began as the first samples did, not at the first line: 96.7%, not 128.9%
    assert summary["run_seconds"] == pytest.approx(120.003)
    assert stage["share"] == pytest.approx(stage["total_ms"] / 120_003.0)
    # a deferred verification an hour later (collect-rollouts verify) is no time of sampling
    verified = [
        f"2026-01-01 13:00:{k:02d}.000 | INFO    | "
        + format_tagged("collect", "verify.done", None, task=k // 4, repeat=k % 4, dur_ms=500.0)
        for k in range(16)
    ]
    log.write_text("\n".join(lines + verified) + "\n")
    summary, _ = analyze([log], tmp_path / "out2")
    stage = next(s for s in summary["stages"] if s["name"] == "collector generation")
    assert stage["how"] == "[collect] gen_ms summed / 4.0 samples in flight (mean)"
    # and in a log whose run says where it starts (the run's lines of every tag end it: not these)
    start = "2026-01-01 12:00:00.000 | INFO    | " + format_tagged(
        "collect", "run.start", None, todo=16, done=0, resume=False
    )
    log.write_text("\n".join([start, *lines, *verified]) + "\n")
    summary, _ = analyze([log], tmp_path / "out3")
    stage = next(s for s in summary["stages"] if s["name"] == "collector generation")
    assert stage["how"] == "[collect] gen_ms summed / 4.0 samples in flight (mean)"


def test_a_collector_run_again_into_the_same_log_is_measured_run_by_run(tmp_path, analyze):
    """collect-rollouts run again (a crash, then the same command) appends to its log: the hour
    between the runs was sampling time, so the samples in flight read 0.1 and generation 96.7% of a
    run of 1 h 4 min. Each run now starts at its run.start line, the restart is listed, and the hour
    between is no time of the run."""
    from prime_rl.tracing import format_tagged

    def start(at: str, done: int) -> str:
        return f"2026-01-01 {at} | INFO    | " + format_tagged(
            "collect", "run.start", None, todo=16, done=done, resume=bool(done)
        )

    # the second run: the same four slots of 30 s, an hour later
    later = [line.replace("2026-01-01 12:", "2026-01-01 13:", 1) for line in _four_slots()]
    lines = [start("12:00:00.000", 0), *_four_slots(), start("13:00:00.000", 16), *later]
    log = tmp_path / "collect.log"
    log.write_text("\n".join(lines) + "\n")
    summary, md = analyze([log], tmp_path / "out")
    stage = next(s for s in summary["stages"] if s["name"] == "collector generation")
    assert stage["how"] == "[collect] gen_ms summed / 4.0 samples in flight (mean)"
    assert summary["run_seconds"] == pytest.approx(2 * 120.003)
    (restart,) = summary["restarts"]
    assert (restart["process"], restart["reached"], restart["where"]) == ("collector", None, f"{log}:18")
    assert restart["down_s"] == pytest.approx(3600 - 120.003)
    assert f"- collector started again at 2026-01-01 13:00:00 ({log}:18), after 3480 s without a line" in md


def _collect_lines(lines: list[str], hours: int = 0) -> list[str]:
    """``lines`` of a collector's log moved ``hours`` later."""
    return [line.replace("2026-01-01 12:", f"2026-01-01 {12 + hours}:", 1) for line in lines]


def test_a_collector_that_hung_then_was_run_again_keeps_its_hang_as_run_time(tmp_path, analyze):
    """The collector hung for 30 minutes after its last sample (its scrapes of the server still
    logged, the samples never finished), was killed and run again at 14:00: the hang was taken for
    time between runs and left out of the run. A run ends at its log's last line of any tag."""
    from prime_rl.tracing import format_tagged

    def start(at: str) -> str:
        return f"2026-01-01 {at} | INFO    | " + format_tagged(
            "collect", "run.start", None, todo=16, done=0, resume=False
        )

    scrapes = [
        f"2026-01-01 12:{minute:02d}:30.000 | INFO    | "
        + format_tagged(
            "server",
            "metrics",
            None,
            url="http://a:1",
            running=4,
            waiting=0,
            kv_cache_pct=10.0,
            preemptions=0,
            requests=0,
            scrape_ms=1.0,
        )  # fmt: skip
        for minute in range(2, 33)
    ]
    lines = [
        start("12:00:00.000"),
        *_four_slots(),
        *scrapes,
        start("14:00:00.000"),
        *_collect_lines(_four_slots(), 2),
    ]
    log = tmp_path / "collect.log"
    log.write_text("\n".join(lines) + "\n")
    summary, _ = analyze([log], tmp_path / "out")
    assert summary["run_seconds"] == pytest.approx(32 * 60 + 30 + 120.003, abs=0.01)
    (restart,) = summary["restarts"]
    assert restart["down_s"] == pytest.approx(2 * 3600 - (32 * 60 + 30))


def _start(at: str, done: int = 0, **mode) -> str:
    """A collector's ``run.start`` line at ``at`` (HH:MM:SS.mmm) on 2026-01-01 (``mode``: its
    ``mode=``, ``pass=``; none: an older collector's)."""
    from prime_rl.tracing import format_tagged

    return f"2026-01-01 {at} | INFO    | " + format_tagged(
        "collect", "run.start", None, todo=16, done=done, resume=bool(done), **mode
    )


def test_the_passes_of_a_diagnose_are_one_run_and_no_restart(tmp_path, analyze):
    """collect-rollouts diagnose collects the same sample at low, then at high parallelism, each pass
    a run of its own that logged run.start: the second pass was listed as a restart ('collector
    started again at 12:02:00'). Its run.start says what it is (mode=diagnose pass=2): no restart,
    the same command's run goes on. The same diagnose run again later (pass=1) is one; a log from
    before mode= is read as before (each run.start a run)."""

    def diagnose(hour: int) -> list[str]:
        """A diagnose's two passes from ``hour``:00:00 (each four slots of 30 s, two minutes)."""
        low = [_start(f"{hour}:00:00.000", mode="diagnose", **{"pass": 1}), *_four_slots(hour, 0)]
        return [*low, _start(f"{hour}:02:00.100", mode="diagnose", **{"pass": 2}), *_four_slots(hour, 2)]

    log = tmp_path / "collect.log"
    log.write_text("\n".join(diagnose(12)) + "\n")
    summary, md = analyze([log], tmp_path / "out")
    assert summary["restarts"] == [] and "## Restarts" not in md
    assert summary["run_seconds"] == pytest.approx(240.003) and summary["down_seconds"] == 0.0
    stage = next(s for s in summary["stages"] if s["name"] == "collector generation")
    assert stage["how"] == "[collect] gen_ms summed / 4.0 samples in flight (mean)"
    # the diagnose run again an hour later: a restart, its two passes one run
    log.write_text("\n".join(diagnose(12) + diagnose(14)) + "\n")
    summary, _ = analyze([log], tmp_path / "out2")
    (restart,) = summary["restarts"]
    assert restart["where"] == f"{log}:35" and restart["down_s"] == pytest.approx(7200 - 240.003)
    # an older collector's log (run.start without mode=): each run.start a run, as before
    older = [line.split(" mode=")[0] for line in diagnose(12)]
    log.write_text("\n".join(older) + "\n")
    summary, _ = analyze([log], tmp_path / "out3")
    assert [(r["where"], round(r["down_s"], 3)) for r in summary["restarts"]] == [(f"{log}:18", 0.097)]


def _verify_pass(hour: int) -> list[str]:
    """A deferred verify pass's lines (collect-rollouts verify): 16 verifications of 60 s, four at a
    time, from ``hour``:00:00 to ``hour``:04:00.003."""
    from prime_rl.tracing import format_tagged

    lines = []
    for k in range(16):
        minute = k // 4 + 1
        tagged = format_tagged("collect", "verify.done", None, task=k // 4, repeat=k % 4, dur_ms=60_000.0)
        lines.append(f"2026-01-01 {hour}:{minute:02d}:00.{k % 4:03d} | INFO    | {tagged}")
    return lines


@pytest.mark.parametrize("own_log", [False, True])
def test_a_verify_pass_is_run_time_between_two_runs_as_after_the_last(tmp_path, analyze, own_log):
    """A verify pass of 4 minutes (13:00-13:04) an hour after a run (12:00-12:02) was run time, and the
    hour before it with it (run_seconds 3840 where 6 minutes were at work); the same pass between two
    runs (12:00-12:02, 14:00-14:02) was down time (run_seconds 240, its 4 minutes left out). A verify
    pass is the collector at work wherever it lies, but no sampling (4.0 samples in flight still);
    the time around it in which nothing was at work is down time. In a log of its own as in the
    run's (``--log_file``), where the restart at 14:00 came 3360 s after the log's last line, not 7080."""
    run = [_start("12:00:00.000"), *_four_slots()]
    again = [_start("14:00:00.000", 16), *_collect_lines(_four_slots(), 2)]
    one = 120.003  # a run's time, 12:00:00.000 to 12:02:00.003; the verify pass's is 240.003
    for between in (True, False):
        logs = tmp_path / f"between_{between}"
        logs.mkdir()
        if own_log:
            (logs / "collect.log").write_text("\n".join(run + (again if between else [])) + "\n")
            (logs / "scored_collect.log").write_text("\n".join(_verify_pass(13)) + "\n")
        else:
            (logs / "collect.log").write_text(
                "\n".join(run + _verify_pass(13) + (again if between else [])) + "\n"
            )
        summary, md = analyze([logs], tmp_path / f"out_{between}")
        assert summary["run_seconds"] == pytest.approx((2 if between else 1) * one + 240.003, abs=0.01)
        idle = (3600 - one) + (3600 - 240.003 if between else 0.0)
        assert summary["down_seconds"] == pytest.approx(idle, abs=0.01)
        assert f"leaves out the {idle:.0f} s in which no process ran" in md
        stage = next(s for s in summary["stages"] if s["name"] == "collector generation")
        assert stage["how"] == "[collect] gen_ms summed / 4.0 samples in flight (mean)"
        if between:
            (restart,) = summary["restarts"]
            down = 2 * 3600 - one if own_log else 3600 - 240.003  # since its own log's last line
            assert restart["down_s"] == pytest.approx(down, abs=0.01)


def test_a_verify_pass_has_a_verification_stage_of_its_own(tmp_path, analyze):
    """A verify pass analysed alone (16 verifications of 60 s, 4 at a time, 13:00-13:04) had no stage
    at all: the collector's stages were measured over its samples in flight, and it has none. Its
    stage is its verifications' summed time over the verifications in flight (4.0): its wall time,
    all of the run. Beside a run, its verifications were divided by the run's samples in flight too
    (collector verification 244.0 s, the samples' own 4.0 s among it); they are its own row now."""
    log = tmp_path / "scored_collect.log"
    log.write_text("\n".join(_verify_pass(13)) + "\n")
    summary, md = analyze([log], tmp_path / "out")
    assert summary["run_seconds"] == pytest.approx(240.003)
    (stage,) = summary["stages"]
    assert (stage["name"], stage["process"]) == ("collector deferred verification", "collector")
    assert stage["how"] == "[collect] verify.done dur_ms summed / 4.0 verifications in flight (mean)"
    assert stage["total_ms"] == pytest.approx(240_003.0) and stage["share"] == pytest.approx(1.0)
    assert "| collector | collector deferred verification | 240.0 | 100.0% |" in md
    # beside a run (12:00-12:02): the samples' verify_ms over their 4.0 in flight, the pass on its own
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "collect.log").write_text("\n".join([_start("12:00:00.000"), *_four_slots()]) + "\n")
    (runs / "scored_collect.log").write_text("\n".join(_verify_pass(13)) + "\n")
    summary, _ = analyze([runs], tmp_path / "out2")
    stages = {s["name"]: s for s in summary["stages"]}
    assert stages["collector verification"]["total_ms"] == pytest.approx(16 * 1000.0 / 4.0, rel=1e-4)
    assert stages["collector deferred verification"]["total_ms"] == pytest.approx(240_003.0)


def test_a_verify_pass_s_verifications_are_not_the_samples_own(tmp_path, analyze):
    """A run collected with --no-verify (16 samples of 30 s, gen_ms 29 s, 4 at a time, 12:00-12:02, no
    verify_ms) and its verify pass (16 verifications of 60 s, 4 at a time, 13:00-13:04): the pass's
    dur_ms fed the samples' verify_ms series (summary.json's collect_verify_ms: 16 of 60000 ms), so
    the run read "Verification-bound: samples wait longer for the verifier than for the model"
    (verify_ms mean 60000 ms vs gen_ms 29000 ms), which samples that never met a verifier did not.
    The samples' verification figures are their own (none here); the pass's have a series of their
    own (collect_deferred_verify_ms) and, 240 s of the run's 360 s, a finding of their own, ranked
    above the samples' generation, whose share is of the run too (116 s of 360)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    no_verify = [line.replace(" verify_ms=1000.0", "") for line in _four_slots()]
    assert not any("verify_ms" in line for line in no_verify)
    (runs / "collect.log").write_text("\n".join([_start("12:00:00.000"), *no_verify]) + "\n")
    (runs / "scored_collect.log").write_text("\n".join(_verify_pass(13)) + "\n")
    summary, md = analyze([runs], tmp_path / "out")
    assert summary["run_seconds"] == pytest.approx(360.006, abs=0.01)
    found = [(f["kind"], round(f["share"], 3)) for f in summary["findings"]]
    assert found == [("collect_deferred_verification", 0.667), ("collect_generation_bound", 0.322)]
    primary = summary["primary"]
    assert (
        primary["title"]
        == "Deferred verification: the verify pass (collect-rollouts verify) takes 67% of the run"
    )
    assert primary["evidence"] == (
        "[collect] verify.done: 16 verifications, dur_ms mean 60000 ms, 4.0 in flight (mean), 240.0 s of "
        "the run's 360.0 s (> verify_pass_share 50%)"
    )
    assert primary["thresholds"] == ["verify_pass_share"]
    assert "Verification-bound: samples wait" not in md
    stats = summary["stats"]
    assert stats["collect_verify_ms"]["count"] == 0
    deferred = stats["collect_deferred_verify_ms"]
    assert (deferred["count"], deferred["mean"]) == (16, 60_000.0)
    assert (
        "| Deferred verification per record (collect-rollouts verify: [collect] verify.done dur_ms) | 16 |"
        in md
    )
    assert "Offline collection: verification wait per sample" not in md
    names = [s["name"] for s in summary["stages"]]
    assert names == ["collector deferred verification", "collector generation", "collector client-side queue"]
    assert "count:   16" in (tmp_path / "out" / "collect_deferred_verify_ms_stats.txt").read_text()
    assert "count: 0" in (tmp_path / "out" / "collect_verify_ms_stats.txt").read_text()
    # samples that waited 20 s each for their verifier (over half their 29 s of generation): judged
    # on their own verify_ms, the pass's 60 s apart
    slow = [line.replace(" verify_ms=1000.0", " verify_ms=20000.0") for line in _four_slots()]
    (runs / "collect.log").write_text("\n".join([_start("12:00:00.000"), *slow]) + "\n")
    summary, _ = analyze([runs], tmp_path / "out2")
    bound = next(f for f in summary["findings"] if f["kind"] == "verification_bound")
    assert bound["evidence"] == (
        "[collect] verify_ms mean 20000 ms vs gen_ms mean 29000 ms (0.7x); 67% of the samples' time, 22% of "
        "the run (the collector sampled 120.0 s of the run's 360.0 s)"
    )
    assert (
        summary["stats"]["collect_verify_ms"]["count"],
        summary["stats"]["collect_verify_ms"]["mean"],
    ) == (
        16,
        20_000.0,
    )
    stages = {s["name"]: s for s in summary["stages"]}
    assert stages["collector verification"]["total_ms"] == pytest.approx(16 * 20_000.0 / 4.0, rel=1e-4)
    # a pass under verify_pass_share of the run is its stage alone
    summary, _ = analyze([runs], tmp_path / "out3", "--threshold", "verify_pass_share=0.7")
    assert "collect_deferred_verification" not in [f["kind"] for f in summary["findings"]]
    assert summary["primary"]["kind"] == "verification_bound"


def test_a_verification_that_began_long_before_its_log_is_a_bad_value(tmp_path, analyze):
    """A verify pass's verification of dur_ms 1e12 (31 years) would begin the pass, and the run, 31
    years before its log: a bad value, named with its line, as a sample's."""
    from prime_rl.tracing import format_tagged

    wrong = "2026-01-01 13:04:30.000 | INFO    | " + format_tagged(
        "collect", "verify.done", None, task=9, repeat=0, dur_ms=1e12
    )
    log = tmp_path / "scored_collect.log"
    log.write_text("\n".join([*_verify_pass(13), wrong]) + "\n")
    summary, _ = analyze([log], tmp_path / "out")
    assert summary["run_seconds"] == pytest.approx(270.0, abs=0.01)  # 13:00:00 to 13:04:30
    assert summary["bad_values"]["examples"] == [f"{log}:17: dur_ms=1000000000000.0 ([collect] verify.done)"]


def test_a_line_stamped_before_its_run_s_start_has_a_bad_time_not_a_bad_dur_ms(tmp_path, analyze):
    """A clock set back after the run started: a sample's line (and a scrape's) written after the
    run.start at 12:00:00 but stamped 11:59:45 (11:59:50). Its dur_ms (30 s, measured on a monotonic
    clock, right) was refused as a bad value, and its time began the run 15 s early (run_seconds
    135.003). The wrong value is the line's time: it is counted and named as such, used nowhere (the
    run is 120.003 s again), and the sample's times count (17 samples: 4.2 in flight)."""
    from prime_rl.tracing import format_tagged

    sample = format_tagged(
        "collect", "rollout.done", "e", task=9, repeat=0, status=200, dur_ms=30_000.0, queue_ms=0.0,
        gen_ms=29_000.0, verify_ms=1000.0, out_tokens=8, attempts=1, url="http://a:1",
    )  # fmt: skip
    scrape = format_tagged(
        "server", "metrics", None, url="http://a:1", running=4, waiting=0, kv_cache_pct=10.0,
        preemptions=0, requests=0, scrape_ms=1.0,
    )  # fmt: skip
    slots = _four_slots()
    early = [f"2026-01-01 11:59:45.000 | INFO    | {sample}", f"2026-01-01 11:59:50.000 | INFO    | {scrape}"]
    log = tmp_path / "collect.log"
    log.write_text("\n".join([_start("12:00:00.000"), *slots[:4], *early, *slots[4:]]) + "\n")
    summary, _ = analyze([log], tmp_path / "out")
    assert summary["bad_values"]["count"] == 0
    assert summary["bad_times"] == {
        "count": 2,
        "examples": [
            f"{log}:6: 2026-01-01 11:59:45, 15.0 s before its run's start",
            f"{log}:7: 2026-01-01 11:59:50, 10.0 s before its run's start",
        ],
    }
    assert summary["run_seconds"] == pytest.approx(120.003)
    stage = next(s for s in summary["stages"] if s["name"] == "collector generation")
    assert stage["how"] == "[collect] gen_ms summed / 4.2 samples in flight (mean)"
    assert stage["total_ms"] == pytest.approx(17 * 29_000.0 / (17 * 30_000.0 / 120_003.0))
    assert any("2 collector line(s) stamped more than a second before" in w for w in summary["warnings"])


def test_collector_shards_at_the_same_time_are_one_collector_with_their_samples_together(tmp_path, analyze):
    """Two --shard logs of the same hour: 8.0 samples in flight over 120 s. Read as one collector's
    runs, the second log's run.start was a restart "after 0 s" and the runs' times were added up
    (4.0 in flight, generation 192.5% of the run); a newer log read before an older one made every
    sample of the older one a bad value. Each log's runs are its own; the collector's time is their
    union."""
    from prime_rl.tracing import format_tagged

    start = "2026-01-01 12:00:00.000 | INFO    | " + format_tagged(
        "collect", "run.start", None, todo=16, done=0, resume=False
    )
    logs = []
    for shard in (0, 1):  # each shard its own tasks (ids): a byte-identical copy would be read once
        logs.append(tmp_path / f"shard{shard}_collect.log")
        lines = [x.replace("][t", f"][s{shard}t") for x in _four_slots()]
        logs[-1].write_text("\n".join([start, *lines]) + "\n")
    summary, _ = analyze(logs, tmp_path / "out")
    stage = next(s for s in summary["stages"] if s["name"] == "collector generation")
    assert stage["how"] == "[collect] gen_ms summed / 8.0 samples in flight (mean)"
    assert summary["restarts"] == [] and summary["run_seconds"] == pytest.approx(120.003)
    # an older log (no run.start: from before it) read after a newer one: none of its samples is bad
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "a_collect.log").write_text(
        "\n".join(_collect_lines([start, *_four_slots()], 2)) + "\n"
    )
    (tmp_path / "new" / "b_collect.log").write_text("\n".join(_four_slots()) + "\n")
    summary, _ = analyze(sorted((tmp_path / "new").iterdir()), tmp_path / "out2")
    assert summary["bad_values"]["count"] == 0
    assert summary["run_seconds"] == pytest.approx(2 * 120.003, abs=0.01)  # the two hours between: idle


def test_a_collector_log_rotated_mid_run_is_one_log_and_a_refused_sample_counts_no_time(tmp_path, analyze):
    """collect.log.1 holds the run.start and the first samples, collect.log the rest and a sample
    whose dur_ms (3 h) begins it long before its run: the parts were two logs, the second without a
    run.start, and the sample passed (a run of 3 h at 1.0 in flight); refused, its gen_ms still
    counted."""
    from prime_rl.tracing import format_tagged

    start = "2026-01-01 12:00:00.000 | INFO    | " + format_tagged(
        "collect", "run.start", None, todo=17, done=0, resume=False
    )
    wrong = "2026-01-01 12:01:50.000 | INFO    | " + format_tagged(
        "collect", "rollout.done", "w", task=9, repeat=0, status=200, dur_ms=10_800_000.0, queue_ms=0.0,
        gen_ms=10_799_000.0, verify_ms=1000.0, out_tokens=8, attempts=1, url="http://a:1",
    )  # fmt: skip
    samples = _four_slots()
    (tmp_path / "collect.log.1").write_text("\n".join([start, *samples[:8]]) + "\n")
    (tmp_path / "collect.log").write_text("\n".join([*samples[8:], wrong]) + "\n")
    summary, _ = analyze([tmp_path], tmp_path / "out")
    assert summary["bad_values"]["count"] == 1 and summary["run_seconds"] == pytest.approx(120.003)
    stage = next(s for s in summary["stages"] if s["name"] == "collector generation")
    assert stage["how"] == "[collect] gen_ms summed / 4.0 samples in flight (mean)"
    assert stage["total_ms"] == pytest.approx(16 * 29_000.0 / 4.0, rel=1e-4)  # not the refused 3 h


def test_samples_of_an_hour_and_a_half_in_a_log_from_before_run_start_are_no_bad_values(tmp_path, analyze):
    """Such a log's first line is its first sample's end: a 90-minute sample began 90 minutes before
    it (refused as a bad value by a first version of the rule, which allowed one hour)."""
    from prime_rl.tracing import format_tagged

    lines = []
    for slot in range(4):
        tagged = format_tagged(
            "collect", "rollout.done", f"t{slot}", task=slot, repeat=0, status=200, dur_ms=5_400_000.0,
            queue_ms=0.0, gen_ms=5_399_000.0, verify_ms=1000.0, out_tokens=8, attempts=1, url="http://a:1",
        )  # fmt: skip
        lines.append(f"2026-01-01 13:30:00.{slot:03d} | INFO    | {tagged}")
    log = tmp_path / "collect.log"
    log.write_text("\n".join(lines) + "\n")
    summary, _ = analyze([log], tmp_path / "out")
    assert summary["bad_values"]["count"] == 0 and summary["run_seconds"] == pytest.approx(5400.003)


def _with_a_sample_31_years_long(log):
    """``log`` written with :func:`_four_slots` and, as line 17, a failed sample of dur_ms 1e12."""
    from prime_rl.tracing import format_tagged

    failed = format_tagged(
        "collect",
        "rollout.failed",
        "f1",
        task=9,
        repeat=0,
        status=500,
        dur_ms=1e12,
        kind="X",
        url="http://a:1",
    )
    log.write_text("\n".join([*_four_slots(), f"2026-01-01 12:01:10.000 | INFO    | {failed}"]) + "\n")
    return log


def test_a_refused_sample_is_a_bad_value_on_the_events_path_too(tmp_path):
    """collect() of events (what tests and small callers use): refusing a dur_ms raised KeyError
    there and the whole [collect] batch was lost."""
    from prime_rl.analysis.parser import parse_files
    from prime_rl.analysis.stats import collect
    from prime_rl.analysis.tagged import ParseStats

    log = _with_a_sample_31_years_long(tmp_path / "collect.log")
    stats = ParseStats()
    d = collect(list(parse_files([("collect", log)])), stats)
    assert stats.bad_values == 1 and d.counts["completions"] == 16
    assert d.collect_seconds == pytest.approx(120.003)


def test_a_collector_sample_that_began_long_before_its_log_is_a_bad_value(tmp_path, analyze):
    """A failed sample's dur_ms of 1e12 put its start 31 years before the log: the run's length
    (1e9 s) made every share 0.0. It is a bad value now, named with its line, and its time unused."""
    log = _with_a_sample_31_years_long(tmp_path / "collect.log")
    summary, _ = analyze([log], tmp_path / "out")
    assert summary["run_seconds"] == pytest.approx(120.003)
    assert summary["bad_values"]["count"] == 1
    assert summary["bad_values"]["examples"] == [
        f"{log}:17: dur_ms=1000000000000.0 ([collect] rollout.failed)"
    ]
    stage = next(s for s in summary["stages"] if s["name"] == "collector generation")
    assert stage["how"] == "[collect] gen_ms summed / 4.0 samples in flight (mean)"


def test_a_collector_s_servers_that_agree_are_not_named(tmp_path, analyze):
    log = _collect_log(tmp_path / "collect.log", {"http://a:1": 100.0, "http://b:1": 150.0})
    summary, _ = analyze([log], tmp_path / "out")
    assert not any(f["kind"] == "slow_server" for f in summary["findings"])


def test_the_per_update_tables_are_made_once_per_analysis(tmp_path, analyze, monkeypatch):
    """The rules and report sections ask for the updates' columns and the per-server rows several
    times; a big log has hundreds of thousands of updates, so each table is made once."""
    from prime_rl.analysis import servers, stats

    calls = {"frame": 0, "rows": 0}
    real_frame, real_rows = stats.update_frame, servers._server_rows

    def frame(updates):
        calls["frame"] += 1
        return real_frame(updates)

    def rows(d):
        calls["rows"] += 1
        return real_rows(d)

    monkeypatch.setattr(stats, "update_frame", frame)
    monkeypatch.setattr(servers, "_server_rows", rows)
    run = make_run("healthy", steps=12, seed=2, shape=Shape(servers=2, slow_server=1))
    summary, md = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    assert calls == {"frame": 1, "rows": 1}
    assert any(f["kind"] == "slow_server" for f in summary["findings"]) and "## Per server" in md


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=64), min_size=1, max_size=60))
def test_a_servers_median_is_what_statistics_median_gives(values):
    # the per-server medians come from a partial sort in numpy: a collector run has millions
    assert _median(values) == statistics.median(values)
    assert _median(array("d", values)) == statistics.median(values)
    row = ServerRow("http://h:1", gen_ms=array("d", values))
    assert row.median("gen_ms") == statistics.median(values) and row.median("wall_ms") is None


def test_an_update_retried_by_the_real_admin_client_counts_its_whole_wait(tmp_path, analyze):
    """The admin client's client.done wall_ms is its last attempt's: a server that failed twice before
    each answer looked as fast as its peer and the run had "no bottleneck". The update's wall time is
    now the client's whole wait (first send to answer), the server is named with its retried updates,
    and the client's retry warnings ([weights][tid] heads at WARNING) are not malformed lines."""
    import asyncio

    from loguru import logger
    from tests.support.http_server import LocalTestServer, Reply

    from prime_rl.clients.admin import AdminClient
    from prime_rl.clients.config import ClientConfig
    from prime_rl.logging import LOG_FORMAT

    log = tmp_path / "orchestrator.log"
    with LocalTestServer() as flaky, LocalTestServer() as fine:
        # each retry waits 0.15-0.3 s, then 0.3-0.6 s: far past RETRY_GAP_MS
        cfg = ClientConfig(base_urls=[flaky.base_url, fine.base_url], admin={"backoff_s": 0.3})

        async def updates() -> list[int]:
            admin = AdminClient(cfg)
            try:
                attempts = []
                for step in range(3):
                    flaky.state.script("/update_weights", Reply(status=503), Reply(status=503))
                    results = await admin.update_weights(f"/w/step_{step}", trace_id=f"up{step}")
                    attempts += [r.attempts for r in results if r.url == flaky.base_url]
                return attempts
            finally:
                await admin.aclose()

        sink = logger.add(log, level="INFO", format=LOG_FORMAT)
        try:
            assert asyncio.run(updates()) == [3, 3, 3]
        finally:
            logger.remove(sink)
    assert log.read_text().count("| WARNING | [weights][up") == 6  # the client's retry warnings
    summary, md = analyze([log], tmp_path / "out")
    assert summary["parse"]["malformed"] == 0
    by_url = {s["url"]: s for s in summary["servers"]}
    flaky_row, fine_row = by_url[flaky.base_url], by_url[fine.base_url]
    assert (flaky_row["retried"], fine_row["retried"]) == (3, 0)
    assert flaky_row["wall_ms_p50"] > 450 > 100 > fine_row["wall_ms_p50"]  # two backoffs at least
    assert summary["primary"]["kind"] == "slow_server" and flaky.base_url in summary["primary"]["title"]
    assert f"3 of the 3 updates of {flaky.base_url} were retried" in summary["primary"]["evidence"]
    stages = {s["name"]: s for s in summary["stages"]}
    assert stages["weight update: failed attempts"]["total_ms"] > 3 * 450
    assert any(f"3 weight update(s) were retried (3 on {flaky.base_url})" in w for w in summary["warnings"])
    assert f"| {flaky.base_url} | 3 | 0 | 3 |" in md


def test_attempts_that_reached_the_real_admin_server_are_one_update_each(tmp_path, analyze):
    """Each attempt of a retried update that reaches the server logs its own server.recv under the
    update's trace id. Those were each an update: three updates that failed once at the server (a
    load that failed and rolled back, answered 500) counted six, three of them server parts with no
    client. The admin routes (FirstByteMiddleware, the swapper with a fake engine) over real HTTP,
    the real AdminClient, the server's and the client's lines in their own log files."""
    import asyncio

    import torch
    from fastapi import FastAPI
    from loguru import logger
    from safetensors.torch import save_file
    from tests.support.fake_engine import FakeEngine
    from tests.support.http_server import ThreadedApp

    from prime_rl.clients.admin import AdminClient
    from prime_rl.clients.config import ClientConfig
    from prime_rl.inference.admin import FirstByteMiddleware, ServedPolicy, WeightSwapper, build_admin_router
    from prime_rl.logging import LOG_FORMAT
    from prime_rl.transport.weights import write_file_manifest

    base, root = tmp_path / "base", tmp_path / "weights"
    base.mkdir()
    save_file({"w": torch.zeros(2, 2)}, str(base / "model.safetensors"))
    for step in range(3):
        d = root / f"step_{step}"
        d.mkdir(parents=True)
        save_file({"w": torch.full((2, 2), float(step))}, str(d / "model.safetensors"))
        write_file_manifest(d)
        (d / "STABLE").touch()
    engine = FakeEngine()
    swapper = WeightSwapper(
        engine=engine, base_files=[base / "model.safetensors"], weights_root=root, served=ServedPolicy()
    )
    app = FastAPI()
    app.include_router(build_admin_router(swapper, None))
    app.add_middleware(FirstByteMiddleware, served=swapper.served)
    logs = tmp_path / "logs"
    with ThreadedApp(app) as server:
        server_thread = server._thread.ident
        cfg = ClientConfig(base_urls=[server.base_url], admin={"backoff_s": 0.3})  # retries wait 0.15-0.3 s

        async def updates() -> list[int]:
            admin = AdminClient(cfg)
            try:
                attempts = []
                for step in range(3):
                    engine.fail_loads = 1  # the first load fails (and rolls back): a 500, retried
                    results = await admin.update_weights(str(root / f"step_{step}"), trace_id=f"up{step}")
                    attempts += [r.attempts for r in results]
                return attempts
            finally:
                await admin.aclose()

        sinks = [
            logger.add(logs / "orchestrator.log", level="INFO", format=LOG_FORMAT,
                       filter=lambda r: r["thread"].id != server_thread),
            logger.add(logs / "inference.log", level="INFO", format=LOG_FORMAT,
                       filter=lambda r: r["thread"].id == server_thread),
        ]  # fmt: skip
        try:
            assert asyncio.run(updates()) == [2, 2, 2]
        finally:
            for sink in sinks:
                logger.remove(sink)
    assert (logs / "inference.log").read_text().count(" server.recv ") == 6  # two attempts each
    summary, _ = analyze([logs / "orchestrator.log", logs / "inference.log"], tmp_path / "out")
    updates = summary["updates"]
    assert [u["tid"] for u in updates] == ["up0", "up1", "up2"]
    # the answer's server time (the second attempt's rpc.done), the first attempt's receipt; the server
    # logs its rpc_ms to 0.1 ms, the client the answer's (rounded to 0.001 ms by the server) to 0.1 ms:
    # the two roundings differ by up to 0.1 ms (0.3499 is 0.3 in the one, 0.35 -> 0.4 in the other)
    assert all(
        u["server"] is not None and abs(u["server_rpc_ms"] - u["rpc_ms"]) <= 0.1 + 1e-9 for u in updates
    )
    assert all(u["target"] == f"step_{i}" for i, u in enumerate(updates))
    assert all(0 <= u["send_to_recv_ms"] < 1000 for u in updates)
    (row,) = summary["servers"]
    assert (row["url"], row["updates"], row["retried"]) == (server.base_url, 3, 3)


@pytest.mark.parametrize("marked", [True, False], ids=["background-said", "older-log"])
def test_a_steps_update_that_failed_in_the_end_counts_its_wait_and_the_health_loop_s_counts_none(
    tmp_path, analyze, marked
):
    """An update of the steps that failed in the end kept the orchestrator waiting through every
    attempt (20 s here) and added nothing to the run's time; the health loop's update that brought
    the server back (background=true: no step waits for it) added its 5 s to the weight-update
    stages. Now the first is the failed attempts' time (without the rpc_ms of the server that finished
    after the client gave up) and the second counts only in its server's row. A log from before
    ``background=`` cannot tell the steps' updates from the health loop's: there a failed update still
    adds nothing (the health loop's failures would read as the steps')."""
    from prime_rl.tracing import format_tagged

    a, b = "http://a:1", "http://b:1"
    said = lambda background: {"background": background} if marked else {}  # noqa: E731

    def line(second: float, event: str, tid: str, tag: str = "weights", **fields) -> str:
        minute, sec = divmod(second, 60)
        stamp = f"2026-01-01 12:{int(minute):02d}:{sec:06.3f} | INFO    | "
        return stamp + format_tagged(tag, event, tid, **fields)

    def send(second: float, tid: str, url: str, attempt: int = 1, background: bool = False) -> str:
        fields = {"url": url, "path": "/update_weights", "t": second, "attempt": attempt, **said(background)}
        return line(second, "client.send", tid, **fields)

    def done(
        second: float, tid: str, url: str, wall: float, rpc: float, background: bool = False
    ) -> list[str]:
        return [
            send(second, tid, url, background=background),
            line(second + wall / 1000, "client.done", tid, url=url, path="/update_weights", wall_ms=wall,
                 rpc_ms=rpc, server_ms=rpc, queue_ms=wall - rpc, attempts=1),
        ]  # fmt: skip

    def served(recv: float, tid: str, rpc: float) -> list[str]:  # b's own log of an update
        return [
            line(recv, "server.recv", tid, path="/update_weights", t=recv),
            line(recv, "rpc.start", tid, op="update_weights", t=recv, target="step_2"),
            line(recv + rpc / 1000, "rpc.done", tid, op="update_weights", t=recv + rpc / 1000, rpc_ms=rpc),
        ]

    lines = [*done(0, "s0", a, 100, 90), *done(10, "s1", a, 100, 90), *done(20, "s2", a, 100, 90)]
    lines += [send(second, "s2", b, attempt) for attempt, second in enumerate((20, 25, 32), start=1)]
    # s2 to b given up at 40 s; b finished its third attempt at 45 s
    lines.append(
        line(40, "client.error", "s2", url=b, path="/update_weights", wall_ms=8000, status=503, attempts=3)
    )
    # the health loop's first try to bring b back failed too; its second did
    lines.append(send(41, "h0", b, background=True))
    lines.append(
        line(43, "client.error", "h0", url=b, path="/update_weights", wall_ms=2000, status=503, attempts=1)
    )
    lines += done(46, "h1", b, 5000, 4900, background=True)
    lines += done(60, "s3", a, 100, 90)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "orchestrator.log").write_text("\n".join(lines) + "\n")
    (logs / "inference.log").write_text(
        "\n".join(served(32.0, "s2", 13_000) + served(46.01, "h1", 4900)) + "\n"
    )
    summary, _ = analyze([logs / "orchestrator.log", logs / "inference.log"], tmp_path / "out")
    stages = {s["name"]: s["total_ms"] for s in summary["stages"]}
    by_url = {s["url"]: s for s in summary["servers"]}
    assert (by_url[b]["updates"], by_url[b]["failed"]) == (3, 2)  # the health loop's updates are b's
    s2 = next(u for u in summary["updates"] if u["tid"] == "s2" and u["url"] == b)
    assert s2["server_rpc_ms"] == 13_000  # b's own log, joined
    if marked:
        assert stages["weight update: failed attempts"] == pytest.approx(20_000)  # s2's whole wait at b
        # s0, s1, s3; not s2 at b (its 13 s on the server came after the client gave up), not h1
        assert stages["weight update: rpc"] == pytest.approx(3 * 90)
        assert stages["weight update: queue"] == pytest.approx(3 * 10)
        assert summary["primary"]["kind"] == "failed_attempts"  # 20 s of a 60 s run
        assert f"{b}: 0 retried, 1 failed" in summary["primary"]["evidence"]  # s2; not the health loop's h0
        assert [u["background"] for u in summary["updates"] if u["url"] == b] == [False, True, True]
    else:
        assert "weight update: failed attempts" not in stages
        assert [u["background"] for u in summary["updates"] if u["url"] == b] == [None, None, None]


def test_a_collector_s_429s_are_counted_once_and_their_waits_are_wall_time(tmp_path, analyze):
    """Thirty samples in flight wait a second each after the same 429 burst: that is one second of
    the run, not thirty (the stage read 334% of the run, labelled as the orchestrator's); the
    collector's parallel.pause status=429 after those retries and a failed sample that answered 429
    are no more retries (the finding said 33, the per-server table 30)."""
    from prime_rl.tracing import format_tagged

    lines = []
    for i in range(30):  # 30 samples, each retried after a 429 at 12:00:01, waiting 1 s
        lines.append(
            "2026-01-01 12:00:01.000 | INFO    | "
            + format_tagged(
                "collect", "request.retry", f"s{i}", status=429, wait_ms=1000.0, attempt=1, url="http://a:1"
            )
        )
    lines.append(
        "2026-01-01 12:00:01.000 | INFO    | "
        + format_tagged("collect", "parallel.pause", None, wait_ms=1000.0, status=429)
    )
    lines.append(
        "2026-01-01 12:00:02.000 | INFO    | "
        + format_tagged(
            "collect", "rollout.failed", "f1", task=99, repeat=0, status=429, dur_ms=5.0, kind="X"
        )
    )
    for i in range(30):
        tagged = format_tagged(
            "collect", "rollout.done", f"s{i}", task=i, repeat=0, status=200, dur_ms=9000.0, queue_ms=0.0,
            gen_ms=8000.0, verify_ms=5.0, out_tokens=8, attempts=2, url="http://a:1",
        )  # fmt: skip
        lines.append(f"2026-01-01 12:00:10.000 | INFO    | {tagged}")
    log = tmp_path / "collect.log"
    log.write_text("\n".join(lines) + "\n")
    summary, md = analyze([log], tmp_path / "out")
    assert summary["counts"]["retry.429"] == 30
    finding = next(f for f in summary["findings"] if f["kind"] == "rate_limited")
    assert finding["evidence"].startswith("30 retries after HTTP 429") and finding["share"] == pytest.approx(
        1 / 9
    )
    (stage,) = [s for s in summary["stages"] if s["name"] == "rate-limit waits (429)"]
    assert stage["process"] == "collector" and stage["total_ms"] == pytest.approx(1000.0)


def test_a_collector_s_failed_samples_are_a_warning_and_the_per_sample_time_is_of_the_done_ones(
    tmp_path, analyze
):
    """Half the samples of one server failed: no warning said so, and the generation finding read
    "gen_ms mean 1012 ms of 584 ms per sample" (the failed samples' and deferred verifications'
    dur_ms in the mean)."""
    from prime_rl.tracing import format_tagged

    lines = []
    for i in range(20):
        url = "http://a:1" if i % 2 else "http://b:1"
        if url == "http://b:1" and i % 4 == 0:
            tagged = format_tagged(
                "collect",
                "rollout.failed",
                f"s{i}",
                task=i,
                repeat=0,
                status=500,
                dur_ms=10.0,
                kind="X",
                url=url,
            )
        else:
            tagged = format_tagged(
                "collect", "rollout.done", f"s{i}", task=i, repeat=0, status=200, dur_ms=1000.0, queue_ms=0.0,
                gen_ms=950.0, verify_ms=50.0, out_tokens=8, attempts=1, url=url,
            )  # fmt: skip
        lines.append(f"2026-01-01 12:00:{i:02d}.000 | INFO    | {tagged}")
    lines.append(
        "2026-01-01 12:00:20.000 | INFO    | "
        + format_tagged("collect", "verify.done", "v1", task=1, dur_ms=40.0)
    )
    log = tmp_path / "collect.log"
    log.write_text("\n".join(lines) + "\n")
    summary, _ = analyze([log], tmp_path / "out")
    assert "5 of 20 sample(s) failed ([collect] rollout.failed): 5 on http://b:1" in " ".join(
        summary["warnings"]
    )
    gen = next(f for f in summary["findings"] if f["kind"] == "collect_generation_bound")
    assert gen["evidence"].startswith("[collect] gen_ms mean 950 ms of 1000 ms per sample")
    assert summary["stats"]["collect_verify_ms"]["count"] == 15  # the samples'; the deferred one apart
    assert summary["stats"]["collect_deferred_verify_ms"]["count"] == 1


def test_two_slow_servers_of_four_are_both_named_with_what_every_update_waited_for_them(tmp_path, analyze):
    """The slowest server was named against its peers' median, which held the other slow one: two
    servers 10x slower than the other two gave one name and '0.5 s in all' for some 18 s of waiting."""
    run = make_run("healthy", steps=12, seed=3, shape=Shape(servers=4, slow_servers=(2, 3)))
    summary, _ = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    slow = next(f for f in summary["findings"] if f["kind"] == "slow_server")
    assert slow["title"].startswith("Slow servers: ") and "http://h2:8000" in slow["title"]
    assert "http://h3:8000" in slow["title"] and "http://h1:8000" not in slow["title"]
    waited = float(re.search(r"every update waits for them, ([0-9.]+) s in all", slow["evidence"]).group(1))
    assert waited > 5.0


def test_a_trio_server_slow_to_a_first_token_is_named_from_its_metrics(tmp_path, analyze):
    """The [server] lines said one server's requests waited 80x longer for a first token; its weight
    updates were as fast as its peer's, and no server was named."""
    from prime_rl.tracing import format_tagged

    run = make_run("healthy", steps=12, seed=2, shape=Shape(servers=2))
    t0 = run.orchestrator[0][:23]
    for i in range(10):
        for url, ttft in (("http://h:8000", 100.0), ("http://h1:8000", 8000.0)):
            line = format_tagged(
                "server", "metrics", url=url, running=16, waiting=4, kv_cache_pct=50.0, preemptions=0,
                queue_ms=ttft - 50, requests=20, ttft_ms=ttft, scrape_ms=3.0,
            )  # fmt: skip
            run.orchestrator.append(f"{t0[:17]}{10 + i:02d}{t0[19:]} | INFO    | {line}")
    run.orchestrator.sort(key=lambda x: x[:23])
    summary, md = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    slow = next(f for f in summary["findings"] if f["kind"] == "slow_server")
    assert slow["title"] == "Slow server: http://h1:8000 takes 80.0x as long as its peers to a first token"
    assert "mean time to first token 8000 ms on http://h1:8000 vs 100 ms" in slow["evidence"]


def test_a_server_slow_to_a_first_token_costs_its_extra_wait_once_per_batch_not_the_batch(tmp_path, analyze):
    """h1's requests waited 300 ms for a first token, h's 50 ms, in batches of some 1.5 s: the share
    was generation's share of the run x half the servers x (1 - 50/300), as if the batches' whole
    time were time to first token: 0.37 here, where 250 ms in each of 12 batches is 0.15 of the run.
    Each batch waits for its last answer: about the 250 ms more, once per batch."""
    from prime_rl.tracing import format_tagged

    run = make_run("healthy", steps=12, seed=2, shape=Shape(servers=2))
    t0 = run.orchestrator[0][:23]
    for i in range(10):
        for url, ttft in (("http://h:8000", 50.0), ("http://h1:8000", 300.0)):
            line = format_tagged(
                "server", "metrics", url=url, running=16, waiting=0, kv_cache_pct=50.0, preemptions=0,
                queue_ms=ttft - 40, requests=20, ttft_ms=ttft, scrape_ms=3.0,
            )  # fmt: skip
            run.orchestrator.append(f"{t0[:17]}{10 + i:02d}{t0[19:]} | INFO    | {line}")
    run.orchestrator.sort(key=lambda x: x[:23])
    summary, _ = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    slow = next(f for f in summary["findings"] if f["kind"] == "slow_server")
    assert slow["title"] == "Slow server: http://h1:8000 takes 6.0x as long as its peers to a first token"
    batches = summary["stats"]["gen_dur_ms"]
    assert batches["count"] == 12 and batches["min"] > 250.0
    run_ms = summary["run_seconds"] * 1000.0
    assert slow["share"] == pytest.approx(12 * 250.0 / run_ms)
    old = batches["mean"] * batches["count"] / run_ms * 1 / 2 * (1 - 50 / 300)  # the share it had
    assert slow["share"] < old / 2
    assert (
        "wait about 250 ms longer for a first token; a batch waits for its last answer, so each of the 12 "
        in slow["evidence"]
    )
    assert (
        "about 250 ms longer (at most its dur_ms): ~3.0 s of the run (estimated from the means)"
        in slow["evidence"]
    )


def test_a_first_token_s_extra_wait_counts_once_per_turn_and_at_most_the_batch(collected):
    """A multi-turn episode's turns wait one after the other, each its extra time to first token;
    a batch cannot lose more than its own time."""
    from prime_rl.analysis.server_load import ServerLoadSeries
    from prime_rl.analysis.servers import slow_server
    from prime_rl.analysis.tagged import Event
    from prime_rl.analysis.thresholds import Thresholds

    loads = {}
    for url, ttft in (("http://h:8000", 50.0), ("http://h1:8000", 300.0)):
        loads[url] = ServerLoadSeries(url)
        for i in range(5):
            loads[url].add(
                Event("server", "metrics", None, {"url": url, "ttft_ms": str(ttft)}, 1000.0 + 5 * i, "o")
            )
    multi = collected(gen_dur_ms=[1000.0] * 10, episode_turns=[2.0, 4.0], fields={"server_load": loads})
    found = slow_server(multi, Thresholds())
    assert found.share == pytest.approx(10 * 250.0 * 3 / 100_000)  # 750 ms per batch of the 100 s run
    assert "each of the 10 batches takes about 250 ms x 3.0 turns per episode longer" in found.evidence
    short = collected(gen_dur_ms=[500.0] * 10, episode_turns=[3.0], fields={"server_load": loads})
    assert slow_server(short, Thresholds()).share == pytest.approx(10 * 500.0 / 100_000)


def test_retries_on_a_single_server_are_a_finding(tmp_path, analyze):
    """With one server no slow server can be named: the retries' 66% of a run read 'no bottleneck
    found'."""
    import asyncio

    from loguru import logger
    from tests.support.http_server import LocalTestServer, Reply

    from prime_rl.clients.admin import AdminClient
    from prime_rl.clients.config import ClientConfig
    from prime_rl.logging import LOG_FORMAT

    log = tmp_path / "orchestrator.log"
    with LocalTestServer() as flaky:
        cfg = ClientConfig(base_urls=[flaky.base_url], admin={"backoff_s": 0.3, "max_retries": 2})

        async def updates() -> None:
            admin = AdminClient(cfg)
            try:
                for step in range(2):  # each retried twice, then done
                    flaky.state.script("/update_weights", Reply(status=503), Reply(status=503))
                    await admin.update_weights(f"/w/step_{step}", trace_id=f"up{step}")
            finally:
                await admin.aclose()

        sink = logger.add(log, level="INFO", format=LOG_FORMAT)
        try:
            asyncio.run(updates())
        finally:
            logger.remove(sink)
    summary, _ = analyze([log], tmp_path / "out")
    assert summary["primary"]["kind"] == "failed_attempts", summary["findings"]
    assert f"{flaky.base_url}: 2 retried, 0 failed" in summary["primary"]["evidence"]
    (stage,) = [s for s in summary["stages"] if s["name"] == "weight update: failed attempts"]
    assert stage["total_ms"] > 2 * (150 + 300)  # both updates' backoffs at least


def test_servers_whose_peers_take_no_time_name_none():
    """Peers at 0 ms (servers that report no time) make no multiple: every server was 'inf x'."""
    from prime_rl.analysis.servers import _slower

    assert _slower({"a": 0.0, "b": 0.0, "c": 50.0}, 2.0) == (0.0, {}, [])
    peers, ratios, slow = _slower({"a": 10.0, "b": 11.0, "c": 50.0, "d": 52.0}, 2.0)
    assert peers == 10.5 and slow == ["d", "c"] and ratios["a"] == pytest.approx(10 / 10.5)


def test_a_collector_analysed_with_a_trio_run_keeps_its_per_server_figures_and_its_own_time(
    tmp_path, analyze
):
    """A directory with a trio run's logs and an offline collector's: the per-server table took the
    updates' layout, so the collector's servers showed 0 (their samples, failures and gen_ms p50
    lost), and the collector's samples in flight were measured over both runs' time (the trio ran
    ten minutes later), not the collector's own minute."""
    run = make_run("healthy", steps=12, seed=2, start_offset_s=600.0, shape=Shape(servers=2))
    files = list(run.write(tmp_path / "logs").values())
    # 20 samples on each of two servers (http://h:8000 is the trio's too), 12:00:00..12:00:39; a failed one at 12:00:59
    collector = _collect_log(tmp_path / "logs" / "collect.log", {"http://h:8000": 100.0, "http://c:1": 300.0})
    summary, md = analyze([*files, collector], tmp_path / "out")
    by_url = {s["url"]: s for s in summary["servers"]}
    assert {
        u: (s["updates"], s["samples"], s["samples_failed"], s["gen_ms_p50"]) for u, s in by_url.items()
    } == {
        "http://c:1": (0, 20, 1, 300.0),
        "http://h1:8000": (10, 0, 0, None),
        "http://h:8000": (10, 20, 0, 100.0),
    }
    table = md.split("## Per server", 1)[1].split("\n## ", 1)[0]
    assert (
        "| server | updates | failed | retried | wall_ms p50 | rpc_ms p50 | queue_ms p50 | samples | failed samples "
        "| gen_ms p50 | 429 retries (orchestrator) | other retries (orchestrator) | 429 retries (collector) "
        "| other retries (collector) |" in table
    )
    assert "| http://c:1 | 0 | 0 | 0 | - | - | - | 20 | 1 | 300.0 | 0 | 0 | 1 | 0 |" in table
    h = by_url["http://h:8000"]
    assert (
        f"| http://h:8000 | 10 | 0 | 0 | {h['wall_ms_p50']:.1f} | {h['rpc_ms_p50']:.1f} | {h['queue_ms_p50']:.1f} | 20 | 0 | 100.0 | 0 | 0 | 0 | 0 |"
        in table
    )
    # samples in flight: the samples' summed time (20 x 105 ms + 20 x 305 ms + the failed one's 5 ms)
    # over the collector's own 59.105 s (from its first sample's start, 105 ms before its line at
    # 12:00:00, to its last [collect] line), not the ~10-minute run
    inflight = (20 * 105.0 + 20 * 305.0 + 5.0) / 59_105.0
    stage = next(s for s in summary["stages"] if s["name"] == "collector generation")
    assert stage["how"] == f"[collect] gen_ms summed / {inflight:.1f} samples in flight (mean)"
    assert stage["total_ms"] == pytest.approx((20 * 100.0 + 20 * 300.0) / inflight)
    # the run: the collector's 59.105 s and the trio's time, the nine minutes between them down time
    alone, _ = analyze(files, tmp_path / "trio_alone")
    assert summary["run_seconds"] == pytest.approx(alone["run_seconds"] + 59.105, abs=0.01)
    assert summary["down_seconds"] == pytest.approx(600.0 - 59.0, abs=0.01)


def test_a_collection_hours_before_a_trio_run_leaves_the_hours_between_out_of_the_run(tmp_path, analyze):
    """A trainer-bound trio run (14:00, every step waits ~6 s for the trainer's weights) analysed with
    an offline collector's log of two hours before (12:00:00-12:00:59): the run's time was the trio's
    last line less the collector's first sample's start, two hours of neither at work in it, so the
    trio's checkpoint waits were ~1% of a ~2 h run and its trainer-bound finding was gone. The run is
    now the union of the trio's time (first to last line) and the collector's run, the time between
    them down time as between two collector runs; a collector beside the trio (the usual case) adds
    only what it ran outside the trio's lines, as before."""
    run = make_run("trainer_bound", steps=20, seed=1, start_offset_s=7200.0)
    files = list(run.write(tmp_path / "trio").values())
    alone, _ = analyze(files, tmp_path / "alone")
    trio_s = alone["run_seconds"]
    (bound,) = [f for f in alone["findings"] if f["kind"] == "trainer_bound"]
    waits_ms = bound["share"] * trio_s * 1000.0
    collector = _collect_log(tmp_path / "collect.log", {"http://h:8000": 100.0, "http://c:1": 300.0})
    summary, md = analyze([*files, collector], tmp_path / "out")
    run_s = (
        trio_s + 59.105
    )  # the collector's run: its first sample's start (105 ms before 12:00:00) to 12:00:59
    assert summary["run_seconds"] == pytest.approx(run_s, abs=0.01)
    assert summary["down_seconds"] == pytest.approx(7200.0 - 59.0, abs=0.01)
    assert f"leaves out the {7200 - 59:.0f} s in which no process ran" in md
    # the trio's shares are of that run: its checkpoint waits ~60% of it, trainer-bound again
    (found,) = [f for f in summary["findings"] if f["kind"] == "trainer_bound"]
    assert found["share"] == pytest.approx(waits_ms / 1000.0 / run_s) and found["share"] > 0.5
    wait = next(s for s in summary["stages"] if s["name"] == "checkpoint wait")
    assert wait["share"] == pytest.approx(waits_ms / 1000.0 / run_s)
    # the same collector beside the trio (both from 12:00): no down time, the run from the first
    # sample's start to the trio's last line
    beside = make_run("trainer_bound", steps=20, seed=1)
    files = list(beside.write(tmp_path / "beside").values())
    summary, md = analyze([*files, collector], tmp_path / "out_beside")
    assert summary["run_seconds"] == pytest.approx(trio_s + 0.105, abs=0.01)
    assert summary["down_seconds"] == 0.0 and "leaves out" not in md


def test_the_orchestrator_s_and_the_collector_s_429s_on_one_server_are_counted_apart(tmp_path, analyze):
    """A rate-limited trio run (ten [gen] request.retry status=429 a step on http://h:8000, 120 in all)
    analysed with a collector's log whose one 429 was on the same server: the per-server table's
    '429 retries' said 121, neither's number. Each has its column now, in the table, in summary.json
    (retries, sample_retries: the collector's part) and in the comparison."""
    run = make_run("rate_limited", steps=12, seed=2, start_offset_s=600.0)
    files = list(run.write(tmp_path / "logs").values())
    collector = _collect_log(tmp_path / "logs" / "collect.log", {"http://h:8000": 100.0})
    summary, md = analyze([*files, collector], tmp_path / "out")
    table = md.split("## Per server", 1)[1].split("\n## ", 1)[
        0
    ]  # the ten minutes between: down time under it
    rows = [line for line in table.strip().splitlines() if line.startswith("|")]
    head, _, row = ([c.strip() for c in line.strip("|").split("|")] for line in rows)
    assert dict(zip(head[-4:], row[-4:], strict=True)) == {
        "429 retries (orchestrator)": "120",
        "other retries (orchestrator)": "0",
        "429 retries (collector)": "1",
        "other retries (collector)": "0",
    }
    (h,) = summary["servers"]
    assert h["retries"] == {"retry.429": 121} and h["sample_retries"] == {"retry.429": 1}
    server = ServerRow("http://h:8000", retries=Counter({"retry.429": 121, "retry.500": 2}))
    server.sample_retries.update({"retry.429": 1})
    figures = {name: value(server) for name, value in APART_RETRY_FIGURES}
    assert figures == {
        "429 retries (orchestrator)": 120,
        "other retries (orchestrator)": 2,
        "429 retries (collector)": 1,
        "other retries (collector)": 0,
    }


def test_a_collector_s_findings_beside_a_trio_s_are_shares_of_the_run_as_its_stages_are(tmp_path, analyze):
    """A trainer-bound trio run analysed with a collector's log of the same day (reviewer's s43): the
    collector's findings were shares of its samples' own time while the report called them shares of
    the run and ranked them with the trio's, which are: its generation finding read 0.975 ("98% of
    the run", above the trio's trainer-bound) where the stage table gave collector generation 28%. Now each is its share
    of the samples' time times the collector's part of the run (its 59.105 s of sampling), as the
    stage table's is, and the evidence says both; a collector alone keeps its shares."""
    collector = _collect_log(tmp_path / "collect.log", {"http://h:8000": 100.0, "http://c:1": 300.0})
    alone, _ = analyze([collector], tmp_path / "alone")
    found = {f["kind"]: f for f in alone["findings"]}
    gen_part = (20 * 100.0 + 20 * 300.0) / (20 * 105.0 + 20 * 305.0 + 5.0)  # of the samples' time
    assert found["collect_generation_bound"]["share"] == pytest.approx(gen_part)
    # c:1's samples took 20 x 200 ms longer than at the peers' 100 ms, of the samples' summed time
    slow_part = 20 * (300.0 - 100.0) / (20 * 105.0 + 20 * 305.0 + 5.0)
    assert found["slow_server"]["share"] == pytest.approx(slow_part)
    assert all("of the samples' time" not in f["evidence"] for f in alone["findings"])
    stage = next(s for s in alone["stages"] if s["name"] == "collector generation")
    assert stage["share"] == pytest.approx(gen_part, rel=1e-3)

    run = make_run("trainer_bound", steps=20, seed=1, start_offset_s=7200.0)
    files = list(run.write(tmp_path / "trio").values())
    summary, md = analyze([*files, collector], tmp_path / "out")
    run_s = summary["run_seconds"]
    of_run = 59.105 / run_s
    found = {f["kind"]: f for f in summary["findings"]}
    gen = found["collect_generation_bound"]
    stage = next(s for s in summary["stages"] if s["name"] == "collector generation")
    assert gen["share"] == pytest.approx(gen_part * of_run, rel=1e-3) == pytest.approx(stage["share"])
    assert gen["share"] < found["trainer_bound"]["share"]
    clause = f"of the run (the collector sampled 59.1 s of the run's {run_s:.1f} s)"
    assert gen["evidence"].endswith(
        f"; {100 * gen_part:.0f}% of the samples' time, {100 * gen_part * of_run:.0f}% {clause}"
    )
    slow = found["slow_server"]
    assert slow["share"] == pytest.approx(slow_part * of_run, rel=1e-3)
    assert slow["evidence"].endswith(
        f"; {100 * slow_part:.0f}% of the samples' time, {100 * slow_part * of_run:.0f}% {clause}"
    )
    assert f"{clause}. ({100 * gen['share']:.0f}% of the run)" in md


def test_a_collector_run_through_a_trio_s_crash_leaves_no_down_time(tmp_path, analyze):
    """A trio crashed after step 11 (about 12:00:20) and was resumed at step 10 two minutes later;
    a collector analysed with it sampled from 12:00:00 to 12:04:00 without a break. The trio's down
    time was left out all the same (120 s in which 'no process ran', a run of 120 s instead of 240 s,
    every share of it twice too large): a restart's down time is down only where no run of the
    collector covers it."""
    from datetime import datetime

    first = make_run("healthy", steps=12, seed=1)
    second = make_run("healthy", steps=10, seed=2, first_step=10, start_offset_s=140.0)
    paths = appended(tmp_path / "logs", first, second)
    collect = tmp_path / "logs" / "collect.log"  # 30 s samples, back to back, 12:00:00 to 12:04:00.003
    collect.write_text("\n".join(_four_slots() + _four_slots(minute=2)) + "\n")
    summary, md = analyze([*paths, collect], tmp_path / "out")
    assert {r["process"] for r in summary["restarts"]} == {"orchestrator", "trainer"}
    assert summary["down_seconds"] == pytest.approx(0.0, abs=1e-6)
    start = datetime(2026, 1, 1, 12, 0, 0).timestamp()
    last = max(
        datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()
        for p in [*paths, collect]
        for line in p.read_text().splitlines()
    )
    assert summary["run_seconds"] == pytest.approx(last - start, abs=1e-3)
    assert "in which no process ran" not in md
    assert all(s["share"] <= 1.0 for s in summary["stages"]), summary["stages"]


def test_a_resumed_run_on_two_servers_counts_each_server_s_updates_of_both_runs(tmp_path, analyze):
    """Two runs on two servers appended file by file (a crash and a resume): each server's log holds
    both runs' lines, and each server's row counts the updates of both (the test helper had written the
    first server's logs alone)."""
    first = make_run("healthy", steps=8, seed=1, shape=Shape(servers=2))
    second = make_run("healthy", steps=6, seed=2, first_step=6, start_offset_s=200.0, shape=Shape(servers=2))
    paths = appended(tmp_path / "logs", first, second)
    assert [p.name for p in paths] == ["orchestrator.log", "inference.log", "trainer.log", "inference_1.log"]
    summary, _ = analyze(paths, tmp_path / "out")
    sent = [u for u in summary["updates"] if u["done_ts"] is not None]
    assert len(sent) == len(first.values["rpc_ms"]) + len(second.values["rpc_ms"])
    by_url = {s["url"]: s["updates"] for s in summary["servers"]}
    assert len(by_url) == 2 and sum(by_url.values()) == len(sent)
    assert len(set(by_url.values())) == 1  # every update went to both servers
    assert all(u["server"] is not None for u in sent)  # each joined its own server's lines


@pytest.mark.parametrize("trio_slow", [False, True], ids=["healthy-trio", "slow-trio-server"])
def test_a_collector_s_slow_server_is_named_beside_a_trio_of_several_servers(tmp_path, analyze, trio_slow):
    """A collector's log with http://c:1 at 3x its peers' generation time, analysed with a trio's logs
    of two (three) servers (the rev_v reviewer's D1). Alone it was "Slow server: http://c:1 takes 3.0x
    as long as its peers to generate"; beside the trio no slow server was named at all: the rule
    judged the trio's updates once two servers had three or more, found none slow, and never looked
    at the samples; one finding at most, so a slow trio server (h2, 5x to update) would have hidden
    it too. Now each is named by a finding of its own."""
    shape = Shape(servers=3, slow_server=2) if trio_slow else Shape(servers=2)
    files = make_run("healthy", steps=12, seed=2, shape=shape).write(tmp_path / "logs").values()
    collector = _collect_log(
        tmp_path / "logs" / "collect.log", {"http://a:1": 100.0, "http://b:1": 100.0, "http://c:1": 300.0}
    )
    summary, _ = analyze([*files, collector], tmp_path / "out")
    titles = sorted(f["title"] for f in summary["findings"] if f["kind"] == "slow_server")
    expected = ["Slow server: http://c:1 takes 3.0x as long as its peers to generate"]
    if trio_slow:
        assert len(titles) == 2 and re.fullmatch(
            r"Slow server: http://h2:8000 takes [0-9.]+x as long as its peers to update", titles[1]
        ), titles
        assert titles[:1] == expected
    else:
        assert titles == expected


def test_a_collector_s_slow_server_costs_its_samples_time_not_its_count(tmp_path, analyze):
    """h2 generates 5x slower (2500 ms vs 500 ms) and answers a quarter of 400 samples, 16 in flight
    (the rev_v reviewer's D4). The finding's share was its quarter of the samples times (1 - 1/5):
    0.20 ("20% of the samples' time"), while the run took 26.55 s where it takes 12.55 s with h2 as
    fast as its peers: h2 cost 53% of the run. Now the share is the time h2's samples took beyond
    the peers' median, of the samples' summed time: 100 x 2000 ms of 100 x 2502 + 300 x 502 ms,
    0.50, what the run's two lengths say within a few percent."""
    from prime_rl.tracing import format_tagged

    def write(path, slow_ms: float):
        slots, lines = [0.0] * 16, []
        for i in range(400):
            k = i % 4
            j = min(range(16), key=lambda s: slots[s])
            gen = slow_ms if k == 2 else 500.0
            slots[j] += (gen + 2.0) / 1000
            tagged = format_tagged(
                "collect", "rollout.done", f"t{i}", task=i, repeat=0, status=200, dur_ms=gen + 2.0,
                queue_ms=2.0, gen_ms=gen, verify_ms=0.0, out_tokens=8, attempts=1, url=f"http://h{k}:8000",
            )  # fmt: skip
            lines.append((slots[j], tagged))
        lines.sort(key=lambda x: x[0])
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "".join(
                f"2026-01-01 12:{int(t // 60):02d}:{t % 60:06.3f} | INFO    | {tagged}\n"
                for t, tagged in [(0.0, format_tagged("collect", "run.start", todo=400, done=0))] + lines
            )
        )
        return path

    slow, _ = analyze([write(tmp_path / "slow" / "collect.log", 2500.0)], tmp_path / "out_slow")
    fast, _ = analyze([write(tmp_path / "fast" / "collect.log", 500.0)], tmp_path / "out_fast")
    (finding,) = [f for f in slow["findings"] if f["kind"] == "slow_server"]
    assert finding["title"] == "Slow server: http://h2:8000 takes 5.0x as long as its peers to generate"
    assert finding["share"] == pytest.approx(100 * 2000 / (100 * 2502 + 300 * 502))
    cost = 1 - fast["run_seconds"] / slow["run_seconds"]
    assert finding["share"] == pytest.approx(cost, abs=0.05), (cost, slow["run_seconds"], fast["run_seconds"])
    assert (
        "http://h2:8000 answered 100 of 400 samples, which took 200.0 s longer in all" in finding["evidence"]
    )


def _failing_trio(path, last_failed: int | None = None):
    """An orchestrator log of six updates 10 s apart to a, b and c: a and b answer in 200 ms; c
    answers none (client.error after 5 s, attempts=1, no retry), or only its last ``last_failed``."""
    from prime_rl.tracing import format_tagged

    def line(second: float, event: str, tid: str, **fields) -> str:
        return f"2026-01-01 12:00:{second:06.3f} | INFO    | " + format_tagged(
            "weights", event, tid, **fields
        )

    lines = []
    for i in range(6):
        t, tid = 10.0 * i, f"s{i}"
        for url in ("http://a:1", "http://b:1", "http://c:1"):
            lines.append(
                line(t, "client.send", tid, url=url, path="/update_weights", t=t, attempt=1, background=False)
            )
            if url == "http://c:1" and (last_failed is None or i >= 6 - last_failed):
                lines.append(line(t + 5, "client.error", tid, url=url, path="/update_weights", wall_ms=5000.0,
                                  status=500, attempts=1))  # fmt: skip
            else:
                lines.append(line(t + 0.2, "client.done", tid, url=url, path="/update_weights", wall_ms=200.0,
                                  rpc_ms=190.0, server_ms=190.0, queue_ms=10.0, attempts=1))  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(sorted(lines)) + "\n")
    return path


def test_a_server_that_fails_every_update_is_named_for_its_failures_not_as_slow(tmp_path, analyze):
    """c fails every weight update (client.error after 5 s, attempts=1; the rev_v reviewer's D6).
    The primary said "Failed weight-update attempts: the orchestrator waits for retries" though
    nothing was retried (30.0 s, 55% of the run); a second finding said c "takes 25.0x as long as its
    peers to update", 28.8 s (52%), the same waits counted again, for a server that never finished an
    update; the warning
    ("6 weight update(s) failed (client.error)") named neither c nor that it never loaded new weights.
    Now the slow-server rule judges the answered updates only (c has none), the title says the
    updates failed, and the finding and the warning name c and its stale weights."""
    log = _failing_trio(tmp_path / "logs" / "orchestrator.log")
    summary, _ = analyze([log], tmp_path / "out")
    assert [f["kind"] for f in summary["findings"]] == ["failed_attempts"]
    primary = summary["primary"]
    assert primary["title"] == "Failed weight-update attempts: the orchestrator waits for updates that fail"
    stale = (
        "every update to http://c:1 failed (6): it never loaded new weights, so what it served all run came from "
        "the weights it was started with"
    )
    assert primary["evidence"].startswith("the waits for updates that failed 30.0 s")
    assert primary["evidence"].endswith(f"http://c:1: 0 retried, 6 failed; {stale}")
    assert f"6 weight update(s) failed (client.error; 6 on http://c:1): {stale}" in summary["warnings"]


def test_a_server_whose_last_updates_failed_is_named_with_its_stale_weights(tmp_path, analyze):
    """c answers its first four updates and fails the last two: it serves step s3's weights from then on."""
    log = _failing_trio(tmp_path / "logs" / "orchestrator.log", last_failed=2)
    summary, _ = analyze([log], tmp_path / "out")
    stale = "the last 2 of the 6 updates to http://c:1 failed: it served the weights of its last loaded update from then on"
    assert f"2 weight update(s) failed (client.error; 2 on http://c:1): {stale}" in summary["warnings"]
    assert not any(f["kind"] == "slow_server" for f in summary["findings"])
