"""Stages that overlap in time are counted as wall time, and the verdicts that read them name who
waits on whom: episodes that run side by side (their summed env_ms was taken as wall time: 317% of
a run), the waits after a 429 inside the batches (added beside generation: the orchestrator's rows
made 129%), summed scoring that proves parallel workers (taken as wall time when their number is
not logged), and a healthy run's limit (named from the trainer's compute share alone)."""

from __future__ import annotations

import math
from datetime import datetime

import pytest
from tests.support.synthetic_logs import Shape, make_run

from prime_rl.analysis.stages import run_limit
from prime_rl.analysis.thresholds import Thresholds
from prime_rl.tracing import format_tagged


def test_rate_limit_waits_are_a_part_of_generation_so_the_orchestrator_s_rows_add_up(tmp_path, analyze):
    # 10 requests of each ~1.5 s batch wait 500 ms after a 429, inside the batch: 10.0 s of a 34.8 s run,
    # listed beside generation's 86.7%: the orchestrator's rows made 128.8%
    summary, md = analyze(
        make_run("rate_limited", steps=20).write(tmp_path / "logs").values(), tmp_path / "out"
    )
    rows = [s for s in summary["stages"] if s["process"] == "orchestrator"]
    names = [s["name"] for s in rows]
    assert names[:2] == ["generation", "rate-limit waits (429)"], names
    assert rows[1]["within"] == "generation" and rows[1]["total_ms"] == pytest.approx(10000.0)
    assert [s["name"] for s in rows if s["within"]] == ["rate-limit waits (429)"]
    assert sum(s["share"] for s in rows if not s["within"]) == pytest.approx(1.0, abs=0.01)
    assert "| orchestrator | (within generation) rate-limit waits (429) | 10.0 | 28.8% |" in md
    assert 'A row marked "(within generation)" is a part of generation\'s time, not added to it.' in md


def _with_episodes(run, n: int, env_ms: float, gen_ms: float):
    """``n`` multi-turn episodes per step, all within its batch (logged at its batch.done)."""
    out = []
    for line in run.orchestrator:
        out.append(line)
        if "[gen] batch.done" in line:
            step = int(line.split("step=")[1].split()[0])
            stamp = line[:23]
            for task in range(n):
                tagged = format_tagged(
                    "env", "episode.done", step=step, task=task, turns=3, outcome="done", reward=1.0,
                    env_ms=env_ms, tool_ms=0.7 * env_ms, gen_ms=gen_ms, tokens=300, tool_errors=0,
                )  # fmt: skip
                out.append(f"{stamp} | INFO    | {tagged}")
    run.orchestrator = out
    return run


def test_concurrent_episodes_count_their_wall_time_and_do_not_outrank_a_trainer_bound_run(tmp_path, analyze):
    # the trainer-bound run waits for weights 77% of its 145 s; 32 episodes run side by side in each
    # ~1.5 s batch, 720 ms in the environment and 1200 ms generating each (0.6x: environment-bound).
    # Their summed env_ms is 461 s: it was the stage's time (318% of the run) and the finding's share
    # (capped at 1.0), which made it the primary bottleneck.
    run = _with_episodes(make_run("trainer_bound", steps=20, seed=6), 32, 720.0, 1200.0)
    summary, md = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    assert summary["primary"]["kind"] == "trainer_bound", summary["findings"]
    stage = {s["name"]: s for s in summary["stages"]}
    env, gen = stage["environment and tools"], stage["generation"]
    # the batches' generation time split as the episodes' time is: 720 of every 1920 ms
    assert env["total_ms"] == pytest.approx(gen["total_ms"] * 720 / 1920, rel=1e-6)
    assert env["within"] == "generation" and 0.07 < env["share"] < 0.08
    assert "episodes in flight" in env["how"]
    finding = next(f for f in summary["findings"] if f["kind"] == "environment_bound")
    assert finding["share"] == pytest.approx(env["share"])
    assert (
        "0.6x" in finding["evidence"]
        and "the environment's wall time 11.1 s, 8% of the run" in finding["evidence"]
    )
    assert "| orchestrator | (within generation) environment and tools | 11.1 | 7.7% |" in md


def _scored(run, summed_ms: float):
    """Every batch's scoring summed over its completions is ``summed_ms``; no workers=, no tail_ms."""
    run.orchestrator = [
        line.replace("dur_ms=30.0", f"dur_ms={summed_ms} cpu_ms={summed_ms}") if "[verify]" in line else line
        for line in run.orchestrator
    ]
    return run


def test_summed_scoring_beyond_its_batch_is_judged_on_the_fewest_workers_the_batches_allow(tmp_path, analyze):
    # 6 s of scoring summed in each 1.4-1.7 s batch: the workers ran side by side, at least 5 of them
    # (4.3x in the shortest batch); their number not logged, the summed time stood for wall time
    # ("verification-bound", scoring 100% of the batches, generation 0%). 5 workers would be busy 78%
    # of the batch time, more of them less: under verify_util_high (80%), no finding.
    run = _scored(make_run("healthy", steps=20, seed=0), 6000.0)
    summary, md = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    assert summary["findings"] == [], summary["findings"]
    batches = run.values["gen_dur_ms"]
    fewest = math.ceil(max(6000.0 / b for b in batches) / 1.01)
    assert fewest == 5
    stage = {s["name"]: s for s in summary["stages"]}
    assert stage["verification (scoring)"]["total_ms"] == pytest.approx(20 * 6000.0 / fewest)
    assert stage["verification (scoring)"]["how"].startswith("summed scoring time / 5 workers, the fewest")
    assert stage["generation"]["total_ms"] == pytest.approx(sum(batches) - 24000.0, abs=1.0)


def test_scoring_that_fills_the_fewest_workers_is_verification_bound_and_says_it_is_an_upper_bound(
    tmp_path, analyze
):
    # 4x every batch's time, summed: 4 workers (the fewest the batches allow) would be busy the whole
    # batch; the evidence said "workers unknown, so summed time stands for wall time"
    run = make_run("healthy", steps=20, shape=Shape(verify_ms=6000.0, gen_ms=1500.0))
    summary, _ = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    primary = summary["primary"]
    assert primary["kind"] == "verification_bound" and primary["thresholds"] == ["verify_util_high"]
    assert "the workers ran side by side, at least 4 of them (step " in primary["evidence"]
    assert (
        "4 workers would be busy 100% of the batch time (> verify_util_high 80%), more of them less"
        in (primary["evidence"])
    )
    assert "summed time stands for wall time" not in primary["evidence"]


def test_a_healthy_run_s_limit_is_named_from_who_waits_on_whom(tmp_path, analyze):
    # the orchestrator waits for weights 0.8% of the run, the trainer for rollouts 22% (under
    # train_wait_share, 30%): generation paces the run; it said "the trainer is the limit" because
    # the trainer computes 53% of the run
    run = make_run("healthy", steps=20, seed=0, shape=Shape(gen_ms=2000.0, train_wait_frac=0.25))
    summary, md = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    assert summary["primary"] is None and summary["findings"] == []
    assert (
        "Healthy run: generation is the limit: the trainer waits for rollouts 21.6% of the run, while the "
        "orchestrator waits for the trainer's weights 0.8% of the run (limit_wait_share 5%; no threshold "
        "crossed)." in md
    )
    assert "the trainer is the limit" not in md


@pytest.mark.parametrize(
    ("ckpt_s", "rollouts_s", "says"),
    [
        (
            10.0,
            1.0,
            "the trainer is the limit: the orchestrator waits for the trainer's weights 10.0% of the run",
        ),
        (1.0, 10.0, "generation is the limit: the trainer waits for rollouts 10.0% of the run"),
        (2.0, 3.0, "balanced, neither side waits much for the other"),
        (10.0, 6.0, "the trainer is the limit more often than generation (each waits for the other in turn)"),
        (6.0, 10.0, "generation is the limit more often than the trainer (each waits for the other in turn)"),
    ],
)
def test_the_limit_is_the_side_the_other_waits_for(collected, ckpt_s, rollouts_s, says):
    # a 100 s run in which the trainer computes 60%: its share alone named it the limit in every case
    d = collected(ckpt_wait_ms=[ckpt_s * 1000.0], train_wait_ms=[rollouts_s * 1000.0], train_ms=[60000.0])
    assert run_limit(d, Thresholds()).startswith(says)


def _collector_with_429s(path, at: str, retries: int, wait_ms: float):
    """An offline collector's log: ``retries`` requests to http://c:8000 wait ``wait_ms`` after a 429
    together at ``at`` (HH:MM:SS), as ten samples of 3 s begin; they end 3 s later (the waits within
    the log: one past its last line counts only up to it)."""
    end = datetime.strptime(f"2026-01-01 {at}", "%Y-%m-%d %H:%M:%S").timestamp() + 3.0
    lines = [
        f"2026-01-01 {at}.000 | INFO    | "
        + format_tagged("collect", "request.retry", f"r{i}", status=429, wait_ms=wait_ms, attempt=1, url="http://c:8000")
        for i in range(retries)
    ]  # fmt: skip
    lines += [
        datetime.fromtimestamp(end).strftime("%Y-%m-%d %H:%M:%S.000 | INFO    | ")
        + format_tagged(
            "collect", "rollout.done", f"s{i}", task=i, repeat=0, status=200, dur_ms=3000.0, queue_ms=0.0,
            gen_ms=2900.0, verify_ms=5.0, out_tokens=8, attempts=2, url="http://c:8000",
        )
        for i in range(10)
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_collector_s_429_waits_are_its_own_row_not_the_orchestrator_s(tmp_path, analyze):
    # a rate-limited trio (10 requests of each batch wait 500 ms after a 429 at its start: 10.0 s)
    # analysed with a collector whose 4 requests waited 2 s together at 12:01:00, after the trio's
    # 36 s: "(within generation) rate-limit waits (429)" of the orchestrator said 12.0 s, the
    # collector's 2 s in it
    files = list(make_run("rate_limited", steps=20).write(tmp_path / "logs").values())
    collector = _collector_with_429s(tmp_path / "logs" / "collect.log", "12:01:00", 4, 2000.0)
    summary, md = analyze([*files, collector], tmp_path / "out")
    rows = {(s["process"], s["name"]): s for s in summary["stages"]}
    orchestrator = rows["orchestrator", "rate-limit waits (429)"]
    assert orchestrator["within"] == "generation"
    assert orchestrator["total_ms"] == pytest.approx(10000.0)
    collector_row = rows["collector", "rate-limit waits (429)"]
    assert collector_row["within"] is None and collector_row["total_ms"] == pytest.approx(2000.0)
    assert collector_row["beside"] == "the samples"
    assert "[collect] request.retry" in collector_row["how"] and "[gen] request.retry" in orchestrator["how"]
    assert "| collector | (beside the samples) rate-limit waits (429) | 2.0 |" in md
    # the finding's share: the time some request of either waited
    finding = next(f for f in summary["findings"] if f["kind"] == "rate_limited")
    assert finding["share"] == pytest.approx(12.0 / summary["run_seconds"])


def test_a_collector_s_429_waits_are_marked_beside_its_samples_so_its_rows_add_up(tmp_path, analyze):
    # a collector alone, 3.0 s: ten samples of 3 s side by side (2.9 s generating), four requests
    # waiting 1 s together after a 429. Its rows are the samples' summed times over the samples in
    # flight (generation 96.7%, verification 0.2%, queue 0.0%) and its 429 row wall time (33.3%),
    # listed among them unmarked: the collector's rows made 130% (the reviewer's s08: 101.1%). The
    # 429 row is marked "(beside the samples)" and not added, as the orchestrator's outside generation.
    log = _collector_with_429s(tmp_path / "collect.log", "12:01:00", 4, 1000.0)
    summary, md = analyze([log], tmp_path / "out")
    rows = {s["name"]: s for s in summary["stages"] if s["process"] == "collector"}
    waits = rows["rate-limit waits (429)"]
    assert waits["beside"] == "the samples" and waits["within"] is None
    assert waits["share"] == pytest.approx(1.0 / 3.0)
    assert sum(s["share"] for s in rows.values() if not s["beside"]) == pytest.approx(2905.0 / 3000.0)
    assert "| collector | (beside the samples) rate-limit waits (429) | 1.0 | 33.3% |" in md
    assert (
        'A row marked "(beside the samples)" is wall time in which some request of the collector waited after a '
        "429 (the union of the waits, while other samples ran): it overlaps the collector's rows of the samples' "
        "time and is not added to them." in md
    )
    assert "beside the steps" not in md


def _stamp(line: str) -> float:
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()


def test_rate_limit_waits_outside_the_batches_are_no_part_of_generation(tmp_path, analyze):
    # a trainer-bound run (the orchestrator waits for weights 77% of its 145 s) whose producer is
    # rate-limited all along, also while the steps wait for weights: a request waits 1 s after a 429
    # every 2 s from the first line to the last (the reviewer's s48). "(within generation) rate-limit
    # waits (429)" said 73.0 s (50%) under generation's 29.7 s (20%).
    run = make_run("trainer_bound", steps=20, seed=6)
    t0, t1 = _stamp(run.orchestrator[0]), _stamp(run.orchestrator[-1])
    waits = [t0 + 2.0 * k for k in range(int((t1 - 1 - t0) / 2.0) + 1)]
    retry = format_tagged("gen", "request.retry", url="http://h:8000", status=429, attempt=1, wait_ms=1000.0)
    lines = [(_stamp(line), 0, line) for line in run.orchestrator]
    lines += [(t, -1, datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + f" | INFO    | {retry}") for t in waits]  # fmt: skip
    run.orchestrator = [line for *_, line in sorted(lines)]
    # the batches' times, as the log gives them, and the part of the waits inside them
    starts = [_stamp(line) for line in run.orchestrator if "[gen] batch.start" in line]
    ends = [_stamp(line) for line in run.orchestrator if "[gen] batch.done" in line]
    inside = sum(
        max(0.0, min(w + 1.0, e) - max(w, s)) for w in waits for s, e in zip(starts, ends, strict=True)
    )
    summary, md = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    rows = {s["name"]: s for s in summary["stages"] if s["process"] == "orchestrator"}
    within, outside = rows["rate-limit waits (429)"], rows["rate-limit waits (429) outside generation"]
    assert within["within"] == "generation" and within["beside"] is None
    assert within["total_ms"] == pytest.approx(inside * 1000.0, abs=1.0)
    assert within["total_ms"] < rows["generation"]["total_ms"]
    assert outside["within"] is None and outside["beside"] == "the steps"
    assert within["total_ms"] + outside["total_ms"] == pytest.approx(len(waits) * 1000.0)
    # the rows that add up still do: the marked ones are not in them
    assert sum(s["share"] for s in rows.values() if not s["within"] and not s["beside"]) == pytest.approx(
        1.0, abs=0.01
    )
    assert f"| orchestrator | (within generation) rate-limit waits (429) | {inside:.1f} |" in md
    assert "| orchestrator | (beside the steps) rate-limit waits (429) outside generation |" in md
    assert (
        'A row marked "(beside the steps)" is time of the orchestrator\'s requests outside generation' in md
    )
    # the finding's share is the whole union; its evidence says how much of it lay in the batches
    finding = next(f for f in summary["findings"] if f["kind"] == "rate_limited")
    assert finding["share"] == pytest.approx(len(waits) / summary["run_seconds"])
    assert (
        f"the orchestrator's for {len(waits):.1f} s ({inside:.1f} s of it within its generation batches, "
        f"{len(waits) - inside:.1f} s outside)" in finding["evidence"]
    )


def test_waits_outside_the_batches_that_are_rounding_get_no_row(tmp_path, analyze):
    # the rate-limited run of 34.8 s (10.0 s of waits after a 429, inside the batches) logged without
    # [gen] batch.start, as older logs are (the reviewer's d9 a): the batches are rebuilt as batch.done
    # less dur_ms, which the rounding of the logged times leaves a few ms short of the waits, so a
    # "(beside the steps) rate-limit waits (429) outside generation | 0.0 | 0.0%" row (2.9 ms) and
    # the evidence's "0.0 s outside" were made. Under 1 s (OUTSIDE_MS) and under 0.5% of the run
    # (OUTSIDE_SHARE) it gets neither.
    run = make_run("rate_limited", steps=20)
    run.orchestrator = [line for line in run.orchestrator if "[gen] batch.start" not in line]
    summary, md = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    rows = {s["name"]: s for s in summary["stages"] if s["process"] == "orchestrator"}
    assert "rate-limit waits (429) outside generation" not in rows and "outside generation" not in md
    assert rows["rate-limit waits (429)"]["within"] == "generation"
    assert rows["rate-limit waits (429)"]["total_ms"] == pytest.approx(10000.0, abs=10.0)
    finding = next(f for f in summary["findings"] if f["kind"] == "rate_limited")
    assert "the orchestrator's for 10.0 s (within its generation batches)" in finding["evidence"]
    assert "outside" not in finding["evidence"] and "beside the steps" not in md


def _scoring_log(path, steps: list[tuple[int, float | None, float]]):
    """An orchestrator's log: per (step, batch ms or None: no batch line, summed scoring ms), its
    [gen] batch.done and its [verify] batch.done (no workers=, no tail_ms), a second apart."""
    lines = [f"2026-01-01 12:00:00.000 | INFO    | {format_tagged('gen', 'run.start', step=0, resume=False)}"]
    for k, (step, batch, scoring) in enumerate(steps):
        stamp = f"2026-01-01 12:{(k + 1) // 60:02d}:{(k + 1) % 60:02d}.000 | INFO    | "
        if batch is not None:
            lines.append(stamp + format_tagged("gen", "batch.done", step=step, completions=8, dur_ms=batch))
        lines.append(stamp + format_tagged("verify", "batch.done", step=step, completions=8, dur_ms=scoring))
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_scoring_of_a_step_without_its_batch_line_is_not_compared_with_the_batches(tmp_path, analyze):
    # the reviewer's edge case h: step 0 sums 5 s of scoring in its 1 s batch (at least 5 workers),
    # step 1's 5 s of scoring has no batch line: both were set against step 0's batch, "5 workers
    # would be busy 200% of the batch time"
    log = _scoring_log(tmp_path / "h" / "orchestrator.log", [(0, 1000.0, 5000.0), (1, None, 5000.0)])
    summary, _ = analyze([log], tmp_path / "out_h")
    evidence = summary["primary"]["evidence"]
    assert summary["primary"]["kind"] == "verification_bound"
    assert "5 workers would be busy 100% of the batch time" in evidence, evidence
    assert (
        "scoring 5.0 s summed over completions in 1.0 s of batches (the 1 step(s) with both lines; 1 step(s) "
        "scored with no batch line left out)" in evidence
    )
    # ten steps of 1 s batches, one of them scoring 5 s summed (at least 5 workers), the others 1 s;
    # ten more steps scored 5 s each with no batch line: the 64 s of scoring set against the 10 s of
    # batches made 5 workers "busy 128%" (verification-bound), and scoring's stage all of the
    # batches' 10 s (64 s / 5 workers, at most the batches); those steps' own batches: 28%, 2.8 s
    steps = [(0, 1000.0, 5000.0)] + [(s, 1000.0, 1000.0) for s in range(1, 10)]
    steps += [(s, None, 5000.0) for s in range(10, 20)]
    summary, _ = analyze([_scoring_log(tmp_path / "v" / "orchestrator.log", steps)], tmp_path / "out_v")
    assert not [f for f in summary["findings"] if f["kind"] == "verification_bound"], summary["findings"]
    stage = {s["name"]: s for s in summary["stages"]}
    assert stage["verification (scoring)"]["total_ms"] == pytest.approx(14000.0 / 5)
    assert stage["generation"]["total_ms"] == pytest.approx(10000.0 - 14000.0 / 5)
