"""The rules one by one on minimal hand-built inputs (each fires, and does not fire when it must not),
the warnings, the ranking, and thresholds and warnings end to end."""

from __future__ import annotations

import polars as pl
import pytest
from tests.support.synthetic_logs import make_run

from prime_rl.analysis import analyze as analyze_mod
from prime_rl.analysis import rules, run_warnings
from prime_rl.analysis.analyze import rank_findings
from prime_rl.analysis.clock import Placed
from prime_rl.analysis.collector_runs import VerifyPasses
from prime_rl.analysis.findings import Finding
from prime_rl.analysis.hangs import Pause
from prime_rl.analysis.parser import Event, ParseStats
from prime_rl.analysis.server_load import ServerLoadSeries
from prime_rl.analysis.step_staleness import StepStaleness
from prime_rl.analysis.thresholds import Thresholds
from prime_rl.analysis.updates import Update

TH = Thresholds()
WAIT = Event("ckpt", "wait.start", None, {"target_step": "5"}, 10.0, "orchestrator")
HANG = Event(
    "hang",
    "detected",
    None,
    {
        "silent_s": "312.4",
        "threshold_s": "120.0",
        "median_step_s": "2.1",
        "waits": "orchestrator>trainer:weights/step_5",
    },
    50.0,
    "rl",
)
ENDS = {"/r/orchestrator.log": (100.0, "still waiting"), "/r/trainer/rank_0.log": (5.0, "Killed")}


def _servers(slow_ms: float) -> tuple[Update, ...]:
    """Four updates on each of three servers; server c takes ``slow_ms`` where a and b take 1000 ms."""
    return tuple(
        Update(
            f"t{i}",
            url=f"http://{h}",
            send_ts=10.0 * i,
            wall_ms=slow_ms if h == "c" else 1000.0,
            rpc_ms=900.0,
        )
        for i in range(4)
        for h in "abc"
    )


def _generating(slow_ms: float, n: int = 4) -> dict:
    """A collector's ``n`` samples on each of three servers: c generates for ``slow_ms`` where a
    and b take 100 ms (``dur_ms``: 5 ms more)."""
    gen = {f"http://{h}": [slow_ms if h == "c" else 100.0] * n for h in "abc"}
    return dict(collect_ms=[g + 5.0 for v in gen.values() for g in v], fields={"server_gen_ms": gen})


def _load(kv: float, waiting: float, preemptions: list[float]) -> dict:
    """``fields`` of one server scraped every 5 s (KV cache ``kv`` % full, ``waiting`` requests)."""
    s = ServerLoadSeries("http://a", ts=[5.0 * i for i in range(len(preemptions))])
    s.running, s.waiting = [8.0] * len(s.ts), [waiting] * len(s.ts)
    s.kv_cache_pct, s.preemptions = [kv] * len(s.ts), list(preemptions)
    return {"server_load": {s.url: s}}


# a 100 s run; series not given are empty (see the ``collected`` fixture)
FIRES = {
    rules.frontend_queue_saturation: dict(queue_ms=[5000.0] * 4, rpc_ms=[200.0] * 4),
    rules.slow_reload: dict(rpc_ms=[20000.0] * 3),
    rules.checkpoint_io: dict(ckpt_wait_ms=[10000.0] * 3, write_ms=[9000.0] * 3),
    rules.trainer_bound: dict(ckpt_wait_ms=[10000.0] * 3, write_ms=[40.0] * 3),
    rules.generation_bound: dict(train_wait_ms=[20000.0] * 2, gen_dur_ms=[20000.0] * 2),
    rules.verification_bound: dict(verify_dur_ms=[1000.0], gen_dur_ms=[1500.0]),
    rules.environment_bound: dict(
        env_ms=[3000.0] * 4, tool_ms=[2500.0] * 4, episode_gen_ms=[1000.0] * 4, episode_turns=[3.0] * 4
    ),
    rules.collect_verification_bound: dict(collect_gen_ms=[500.0], collect_verify_ms=[400.0]),
    # a verify pass of 60 s (16 verifications of 15 s, 4 at a time) in a run of 100 s
    rules.collect_deferred_verification: dict(fields={"verify_passes": VerifyPasses(16, 240_000.0, 60.0)}),
    rules.collect_generation_bound: dict(
        collect_gen_ms=[500.0], collect_verify_ms=[10.0], collect_queue_ms=[10.0], collect_ms=[520.0]
    ),
    rules.collect_queue: dict(collect_gen_ms=[500.0], collect_queue_ms=[1000.0]),
    rules.rate_limited: dict(
        counts={"retry.429": 5, "completions": 100}, retry_wait_ms=[500.0] * 5, rate_limit_wait_ms=[500.0] * 5
    ),
    rules.stall: dict(fields={"open_wait": ("5", 10.0, WAIT)}, last_lines=ENDS),
    rules.hang: dict(fields={"hangs": [HANG]}),
    # the run went on after the hang: 60 s without progress of the 100 s run, after step 4, on to 9
    rules.pause: dict(fields={"pauses": [Pause(HANG, 20.0, 80.0, 4, 9)]}),
    rules.truncation: dict(trunc_pct=[38.0] * 4, gen_dur_ms=[16000.0] * 4),
    rules.slow_server: dict(updates=_servers(5000.0)),
    rules.slow_generation: _generating(500.0),
    # one server, each update retried for 30 s (wall_ms, its last attempt's, 200 ms)
    rules.failed_attempts: dict(
        updates=tuple(
            Update(f"u{i}", url="http://a:1", send_ts=40.0 * i, done_ts=40.0 * i + 30.2, wall_ms=200.0)
            for i in range(2)
        )
    ),
    rules.kv_cache_pressure: dict(fields=_load(97.0, 5.0, [0.0, 3.0, 6.0, 9.0])),
}
QUIET = {
    rules.frontend_queue_saturation: [
        dict(queue_ms=[100.0] * 4, rpc_ms=[200.0] * 4),  # queue well below rpc
        dict(queue_ms=[900.0] * 4, rpc_ms=[10.0] * 4),  # large ratio, but p95 queue under queue_ms_min
        dict(queue_ms=[5000.0] * 4),  # no rpc time at all
    ],
    rules.slow_reload: [dict(rpc_ms=[500.0] * 3), dict(server_rpc_ms=[500.0] * 3), {}],
    rules.checkpoint_io: [
        dict(ckpt_wait_ms=[10000.0] * 3, write_ms=[40.0] * 3),  # long waits, short writes: trainer-bound
        dict(ckpt_wait_ms=[100.0] * 3, write_ms=[90.0] * 3),  # short waits
    ],
    rules.trainer_bound: [
        dict(ckpt_wait_ms=[10000.0] * 3, write_ms=[9000.0] * 3),  # the write explains the wait
        dict(ckpt_wait_ms=[10000.0] * 3),  # no write lines: counted as I/O
        dict(ckpt_wait_ms=[100.0] * 3, write_ms=[40.0] * 3),  # short waits
    ],
    rules.generation_bound: [
        dict(train_wait_ms=[100.0] * 2, gen_dur_ms=[45000.0] * 2),  # the trainer log overrules gen's share
        dict(gen_dur_ms=[45000.0] * 2, ckpt_wait_ms=[10000.0] * 3),  # no trainer log; waits explain the run
        dict(gen_dur_ms=[1000.0] * 2),
    ],
    rules.verification_bound: [dict(verify_dur_ms=[30.0], gen_dur_ms=[1500.0]), dict(verify_dur_ms=[30.0])],
    rules.environment_bound: [
        dict(env_ms=[100.0] * 4, episode_gen_ms=[1000.0] * 4),  # the environment is quick
        dict(episode_gen_ms=[1000.0] * 4),  # single-turn runs write no [env] lines
    ],
    rules.collect_verification_bound: [dict(collect_gen_ms=[500.0], collect_verify_ms=[100.0])],
    rules.collect_deferred_verification: [
        dict(fields={"verify_passes": VerifyPasses(16, 160_000.0, 40.0)}),  # 40% of the run
        dict(collect_verify_ms=[60_000.0] * 16),  # the samples' own verification: no pass
        {},
    ],
    rules.collect_generation_bound: [
        dict(collect_gen_ms=[500.0], collect_queue_ms=[1000.0]),  # queued: collect_queue instead
        dict(collect_gen_ms=[500.0], collect_verify_ms=[400.0]),  # verification-bound instead
        {},
    ],
    rules.collect_queue: [
        dict(collect_gen_ms=[500.0], collect_queue_ms=[10.0]),
        dict(collect_queue_ms=[10.0]),
    ],
    rules.rate_limited: [
        dict(counts={"completions": 100}),
        dict(counts={"retry.429": 1, "completions": 1000}),  # 0.1% of completions
    ],
    rules.stall: [
        dict(last_lines=ENDS),  # no wait open at the end
        # a wait open 5 s before the end, the trainer still writing after it began
        dict(
            fields={"open_wait": ("5", 95.0, WAIT)},
            last_lines={"/r/orchestrator.log": (100.0, "x"), "/r/trainer.log": (99.0, "y")},
        ),
        # a wait open 5 s, the trainer silent 50 s since before it: past stall_min_s and 3x the 5 s
        # waits, but a trainer that steps once a minute is that silent every step
        dict(
            fields={"open_wait": ("5", 95.0, WAIT), "step_seconds": {"trainer": 60.0}},
            ckpt_wait_ms=[5000.0] * 3,
            last_lines={"/r/orchestrator.log": (100.0, "x"), "/r/trainer.log": (50.0, "y")},
        ),
    ],
    rules.hang: [{}],
    rules.pause: [{}],
    rules.truncation: [dict(trunc_pct=[25.0] * 4, gen_dur_ms=[16000.0] * 4), {}],
    rules.slow_server: [
        dict(updates=_servers(1500.0)),
        dict(updates=_servers(5000.0)[:6]),
    ],  # 1.5x; 2 updates each
    rules.slow_generation: [_generating(150.0), _generating(500.0, n=2), dict(updates=_servers(5000.0)), {}],
    rules.failed_attempts: [
        dict(updates=(Update("u0", url="http://a:1", send_ts=0.0, done_ts=0.2, wall_ms=200.0),)),  # no retry
        dict(
            updates=(Update("u0", url="http://a:1", send_ts=0.0, done_ts=10.2, wall_ms=200.0),)
        ),  # 10% < 25%
    ],
    rules.kv_cache_pressure: [
        dict(fields=_load(97.0, 0.0, [4.0] * 4)),  # full, nothing waiting, no preemption: well used
        dict(fields=_load(50.0, 3.0, [0.0] * 11 + [1.0])),  # 1 preemption in 55 s: 1.1 a minute
        dict(fields=_load(99.0, 9.0, [0.0, 30.0])),  # two scrapes: fewer than server_min_scrapes
        {},
    ],
}
KINDS = {
    rules.collect_verification_bound: "verification_bound",
    rules.slow_generation: "slow_server",
}


def test_every_rule_is_listed_documented_and_tested():
    assert set(rules.RULES) == set(FIRES) == set(QUIET) and len(rules.RULES) == 20
    assert all(rule.__doc__ and len(rule.__doc__.split()) > 8 for rule in rules.RULES)


@pytest.mark.parametrize("rule", rules.RULES, ids=lambda r: r.__name__)
def test_rule_fires_on_its_signature(rule, collected):
    f = rule(collected(**FIRES[rule]), TH)
    assert isinstance(f, Finding)
    assert f.kind == KINDS.get(rule, rule.__name__)
    assert f.title and f.evidence and f.next and f.share > 0


@pytest.mark.parametrize("rule", rules.RULES, ids=lambda r: r.__name__)
def test_rule_stays_quiet_otherwise(rule, collected):
    for case in QUIET[rule]:
        assert rule(collected(**case), TH) is None, case


def test_a_watchdog_hang_is_ranked_first_and_says_who_waits_on_whom(collected):
    d = collected(fields={"hangs": [HANG, HANG]}, gen_dur_ms=[45000.0] * 2)
    first = rank_findings(d, TH).findings[0]
    assert first.kind == "hang"
    assert "2 time(s)" in first.evidence and "orchestrator>trainer:weights/step_5" in first.evidence


def test_a_verify_pass_outranks_the_samples_it_outlasts(collected):
    """A run of 100 s: 40 s of sampling (4 samples of 1 s in flight, generation 96% of their time),
    then a verify pass of 60 s. The samples' findings were shares of their own time (generation
    0.96), above the pass's 60% of the run; with a pass in the run they are shares of the run
    (0.96 x 40 s of 100: 0.384), the pass's finding first. Its verifications are none of the samples'."""
    d = collected(
        collect_ms=[1000.0] * 160,
        collect_gen_ms=[960.0] * 160,
        collect_queue_ms=[0.0] * 160,
        fields={"verify_passes": VerifyPasses(16, 240_000.0, 60.0), "collect_seconds": 40.0},
    )
    a = rank_findings(d, TH)
    assert [(f.kind, round(f.share, 3)) for f in a.findings] == [
        ("collect_deferred_verification", 0.6),
        ("collect_generation_bound", 0.384),
    ]
    assert rules.collect_verification_bound(d, TH) is None
    assert rules.collect_generation_bound(d, TH).evidence.endswith(
        "; 96% of the samples' time, 38% of the run (the collector sampled 40.0 s of the run's 100.0 s)"
    )
    # a collector alone (its sampling is the run): the samples' shares of their own time, as before
    alone = collected(
        run_s=40.0, collect_ms=[1000.0] * 160, collect_gen_ms=[960.0] * 160, fields={"collect_seconds": 40.0}
    )
    assert rules.collect_generation_bound(alone, TH).share == pytest.approx(0.96)
    assert "of the samples' time" not in rules.collect_generation_bound(alone, TH).evidence


def test_a_pause_the_run_went_on_after_is_ranked_by_its_time_not_first(collected):
    """A hang the run went on after is no run that ends hung: ranked by its share (the pause's time
    of the run), here below a generation-bound run's 60%, and its words say it went on."""
    d = collected(
        fields={"pauses": [Pause(HANG, 20.0, 50.0, 4, 9), Pause(HANG, 40.0, 60.0, 5, 9)]},
        train_wait_ms=[30000.0] * 2,
        gen_dur_ms=[20000.0] * 2,
    )
    kinds = [(f.kind, round(f.share, 2)) for f in rank_findings(d, TH).findings]
    assert kinds == [("generation_bound", 0.6), ("pause", 0.4)]  # 20..60 s, the two pauses' union
    pause = rank_findings(d, TH).findings[1]
    assert pause.title.startswith("Pause: no progress for 30 s after step 4, then the run went on")
    assert pause.evidence.startswith("2 pauses, 40 s in all; the longest: from ")
    assert "waits: orchestrator>trainer:weights/step_5; then the run went on, to step 9" in pause.evidence


def test_a_pause_of_no_run_time_is_no_finding(collected):
    """A pause in start-up none of whose 1900 s is run time was the primary finding of a healthy run
    ('Pause in start-up', share 0.0): it costs nothing, so it is no finding, and beside a pause that
    costs run time it is not the longest one named either."""
    free = Pause(HANG, 0.0, 1900.0, None, 9, start_up=True, run_seconds=0.0)
    assert rules.pause(collected(fields={"pauses": [free]}), TH) is None
    assert rank_findings(collected(fields={"pauses": [free]}), TH).primary is None
    costly = Pause(HANG, 2000.0, 2030.0, 4, 9, run_seconds=30.0)
    f = rules.pause(collected(fields={"pauses": [free, costly], "paused_seconds": 30.0}), TH)
    assert f.title.startswith("Pause: no progress for 30 s after step 4") and f.share == pytest.approx(0.3)


def test_rpc_time_falls_back_to_the_server_log(collected):
    assert rules.slow_reload(collected(server_rpc_ms=[20000.0] * 3), TH).kind == "slow_reload"
    d = collected(queue_ms=[5000.0] * 4, server_rpc_ms=[200.0] * 4)
    assert rules.frontend_queue_saturation(d, TH).kind == "frontend_queue_saturation"


def test_slow_writes_alone_are_checkpoint_io(collected):
    d = collected(ckpt_wait_ms=[100.0], write_ms=[40000.0])
    assert rules.checkpoint_io(d, TH) is not None and rules.trainer_bound(d, TH) is None


def test_generation_bound_without_a_trainer_log(collected):
    f = rules.generation_bound(collected(gen_dur_ms=[45000.0] * 2), TH)
    assert f is not None and "no trainer log" in f.evidence and f.share == 0.9


def test_rate_limited_with_no_completions_counted(collected):
    f = rules.rate_limited(collected(counts={"retry.429": 1}), TH)
    assert f is not None and f.evidence == "1 retries after HTTP 429" and f.share == 0.0


def test_thresholds_move_the_line(collected):
    d = collected(**FIRES[rules.slow_reload])
    assert rules.slow_reload(d, Thresholds(rpc_ms_high=30000, update_share=0.9)) is None
    assert rules.slow_reload(d, Thresholds(rpc_ms_high=30000)).thresholds == ("update_share",)


def test_findings_are_ranked_by_share(collected):
    # 20 s of reloads (the earlier rule), 50 s of checkpoint waits: the larger share comes first
    d = collected(rpc_ms=[20000.0], ckpt_wait_ms=[10000.0] * 5, write_ms=[9000.0] * 5)
    a = rank_findings(d, TH)
    assert [f.kind for f in a.findings] == ["checkpoint_io", "slow_reload"]
    assert a.primary is a.findings[0] and a.findings[1].share == pytest.approx(0.2)
    assert rank_findings(collected(), TH).primary is None


def test_equal_shares_keep_the_rule_order(collected, monkeypatch):
    def first(d, th):
        return Finding("a", "A", "e", 0.5, ())

    def second(d, th):
        return Finding("b", "B", "e", 0.5, ())

    def bigger(d, th):
        return Finding("c", "C", "e", 0.7, ())

    monkeypatch.setattr(analyze_mod, "RULES", (first, second, lambda d, th: None, bigger))
    assert [f.kind for f in rank_findings(collected(), TH).findings] == ["c", "a", "b"]


def _step_staleness(steps: list[int], values: list[int]) -> StepStaleness:
    """The [rollout] lines' (step, staleness) pairs as :class:`Collected` keeps them."""
    out = StepStaleness()
    out.add(pl.Series(steps, dtype=pl.Float64), pl.Series(values, dtype=pl.Float64))
    return out


WARNS = {
    run_warnings.staleness_above_async_level: (
        # the [rollout] lines' (step, staleness) pairs, as the collection keeps them
        dict(
            async_level=1, staleness=[0.0, 2.0], fields={"staleness_by_step": _step_staleness([0, 1], [0, 2])}
        ),
        dict(staleness=[5.0]),
    ),
    run_warnings.truncation: (dict(trunc_pct=[20.0, 30.0]), dict(trunc_pct=[5.0, 6.0])),
    run_warnings.missing_weight_lines: (dict(), dict(updates=(Update("t1", recv_ts=1.0),))),
    run_warnings.malformed_lines: (dict(malformed=2), dict()),
    run_warnings.clipped_to_the_run: (dict(ckpt_wait_ms=[400_000.0]), dict(ckpt_wait_ms=[100_000.0])),
    run_warnings.repeated_steps: (
        dict(counts={"repeated.gen_dur_ms": 1}, fields=dict(repeated_steps=["o.log:9: gen_dur_ms step 4"])),
        dict(counts={"redone.gen_dur_ms": 1}),
    ),
    run_warnings.clock_offsets: (dict(fields=dict(clock_offsets={"inference.log": (7200.0, 18)})), dict()),
    run_warnings.undated_logs: (
        dict(
            fields=dict(
                parse=ParseStats(undated={"c.log": Placed("2026-01-01", "several", ("2026-01-01", "x"))})
            )
        ),
        dict(fields=dict(parse=ParseStats(undated={"c.log": Placed("2026-01-03", "name")}))),
    ),
    run_warnings.failed_updates: (
        dict(updates=(Update("t1", recv_ts=1.0, failed=True),)),
        dict(updates=(Update("t1", recv_ts=1.0),)),
    ),
    run_warnings.failed_samples: (
        dict(counts={"collect.rollout.failed": 2, "collect.rollout.done": 8}),
        dict(counts={"collect.rollout.done": 8}),
    ),
    run_warnings.unplaced_hangs: (dict(fields={"hangs_unplaced": [HANG]}), dict(fields={"hangs": [HANG]})),
    run_warnings.silences_without_run_start: (
        dict(fields={"silences": [(0.0, 5.0), (100.0, 220.0)], "step_seconds": {"orchestrator": 1.5}}),
        dict(fields={"silences": [(0.0, 5.0), (100.0, 120.0)], "step_seconds": {"orchestrator": 1.5}}),
    ),
    run_warnings.free_pauses: (
        dict(fields={"pauses": [Pause(HANG, 0.0, 1900.0, None, 9, start_up=True, run_seconds=0.0)]}),
        dict(fields={"pauses": [Pause(HANG, 20.0, 50.0, 4, 9, run_seconds=30.0)]}),
    ),
}


@pytest.mark.parametrize("check", run_warnings.WARNINGS, ids=lambda c: c.__name__)
def test_each_warning_fires_and_stays_quiet(check, collected):
    fires, quiet = WARNS[check]
    assert check(collected(**fires), TH)
    assert check(collected(**quiet), TH) is None
    assert check.__doc__


def test_updates_without_server_lines_ask_for_the_inference_log(collected):
    text = run_warnings.missing_weight_lines(collected(updates=(Update("t1", send_ts=1.0),)), TH)
    assert "pass the inference log too" in text


def test_missing_server_log_still_diagnoses_with_a_warning(tmp_path, analyze):
    files = make_run("frontend_queue_saturation", seed=5).write(tmp_path / "logs")
    summary, md = analyze([files["orchestrator"]], tmp_path / "out")
    assert summary["primary"]["kind"] == "frontend_queue_saturation"
    assert "pass the inference log too" in md


def test_staleness_and_truncation_warnings_and_thresholds(tmp_path, analyze):
    files = make_run("generation_bound", seed=6, async_level=2).write(tmp_path / "logs")
    summary, md = analyze(
        files.values(), tmp_path / "out", "--async_level", "1", "--threshold", "trunc_pct_warn=20"
    )
    assert any("above async_level 1" in w for w in summary["warnings"])
    assert any("trunc_pct" in w for w in summary["warnings"])
    assert "`trunc_pct_warn` = 20.0" in md
    summary, _ = analyze(files.values(), tmp_path / "out2", "--threshold", "train_wait_share=0.99")
    assert summary["primary"] is None or summary["primary"]["kind"] != "generation_bound"
