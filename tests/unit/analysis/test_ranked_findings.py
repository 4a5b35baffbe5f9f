"""Issue 18 item 1: every stage's share, the primary bottleneck first, causes above what they explain,
a healthy run named as such; the runs are generated logs with one injected bottleneck each."""

from __future__ import annotations

import pytest
from tests.support.synthetic_logs import Shape, make_run

from prime_rl.analysis import rules
from prime_rl.analysis.stages import stages
from prime_rl.analysis.thresholds import Thresholds


def _run(tmp_path, analyze, scenario, shape, *extra):
    files = make_run(scenario, steps=20, seed=3, shape=shape).write(tmp_path / "logs")
    return analyze(files.values(), tmp_path / "out", "--async_level", "1", *extra)


def test_a_slow_reload_under_the_absolute_threshold_is_named_by_its_share(tmp_path, analyze):
    # 9.6 s reloads in a step of about 13 s: no queueing at all, still the bottleneck
    summary, md = _run(tmp_path, analyze, "healthy", Shape(rpc_ms=9600.0, gen_ms=3000.0))
    assert summary["primary"]["kind"] == "slow_reload", summary["findings"]
    assert summary["primary"]["thresholds"] == ["update_share"]
    assert "thresholds crossed: `update_share`" in md
    stage = {s["name"]: s["share"] for s in summary["stages"]}
    assert 0.6 < stage["weight update: rpc"] < 0.8 and stage["weight update: queue"] < 0.01


def test_slow_scoring_is_ranked_above_the_generation_bound_it_explains(tmp_path, analyze):
    # scoring sums to 13.4 s of a 16 s batch; the trainer waits for rollouts most of the time
    shape = Shape(gen_ms=16000.0, verify_ms=13400.0, train_wait_frac=0.8)
    summary, md = _run(tmp_path, analyze, "healthy", shape)
    kinds = [f["kind"] for f in summary["findings"]]
    assert kinds[:2] == ["verification_bound", "generation_bound"], kinds
    assert summary["primary"]["explains"] == "generation_bound"
    assert "workers unknown" in summary["primary"]["evidence"]
    assert "## Secondary findings" in md and "Generation-bound" in md.split("## Secondary findings")[1]


def test_heavy_truncation_is_the_primary_finding(tmp_path, analyze):
    summary, md = _run(tmp_path, analyze, "generation_bound", Shape(trunc_pct=38.0))
    kinds = [f["kind"] for f in summary["findings"]]
    assert kinds[:2] == ["truncation", "generation_bound"], kinds
    assert "38.0%" in summary["primary"]["evidence"] and "`trunc_pct_high`" in md
    assert not any("trunc_pct" in w for w in summary["warnings"])  # a finding now, not also a warning


def test_a_healthy_balanced_run_says_so_without_alarm(tmp_path, analyze):
    # the orchestrator waits for weights 1.1% of the run and the trainer for rollouts 1.7%: neither
    # side is the other's limit (this said "the trainer is the limit" from its compute share alone)
    summary, md = _run(tmp_path, analyze, "healthy", Shape())
    assert summary["primary"] is None and summary["findings"] == [] and summary["warnings"] == []
    assert "Healthy run: balanced, neither side waits much for the other" in md and "## Warnings" not in md
    assert "## Where the time goes" in md and "| trainer | trainer compute |" in md


def test_verification_with_known_workers_is_judged_by_their_utilisation(collected):
    th = Thresholds()
    busy = collected(verify_dur_ms=[7200.0], gen_dur_ms=[1000.0], fields={"verify_workers": 8})
    f = rules.verification_bound(busy, th)
    assert f is not None and "busy 90%" in f.evidence and f.thresholds == ("verify_util_high",)
    assert f.share == 0.009  # 7.2 s / 8 workers of a 100 s run
    idle = collected(verify_dur_ms=[4000.0], gen_dur_ms=[1000.0], fields={"verify_workers": 8})
    assert rules.verification_bound(idle, th) is None  # 4 s summed is 50% of 8 workers: not the limit
    tail = collected(verify_dur_ms=[4000.0], verify_tail_ms=[600.0], gen_dur_ms=[1000.0])
    assert "scoring wall 0.6 s" in rules.verification_bound(tail, th).evidence


def test_minor_findings_are_listed_apart_from_secondary_ones(collected):
    from prime_rl.analysis.analyze import Analysis
    from prime_rl.analysis.findings import Finding
    from prime_rl.analysis.report import summary_md

    big = Finding("a", "Big", "e1", 0.5, ())
    small = Finding("b", "Small", "e2", 0.01, ())
    md = summary_md(Analysis(collected(), Thresholds(), (big, small), ()), has_png=False)
    assert "## Secondary findings" not in md
    assert "## Minor findings (at most 5% of the run each: `secondary_share`)\n\n- **Small**: e2." in md


def test_a_collector_s_overlapping_samples_are_shares_of_the_samples_time_not_of_summed_time(collected):
    # 10 s of wall time, 400 samples of 1 s each: 40 in flight on average
    d = collected(
        run_s=10.0, collect_ms=[1000.0] * 400, collect_gen_ms=[900.0] * 400, collect_verify_ms=[100.0] * 400
    )
    rows = {s.name: s for s in stages(d)}
    assert rows["collector generation"].share == pytest.approx(0.9)  # was 36x the run, summed
    assert rows["collector generation"].total_ms == pytest.approx(9000.0)
    assert rows["collector verification"].share == pytest.approx(0.1)
    assert "40.0 samples in flight" in rows["collector generation"].how
