"""A trainer log on a clock of its own (another machine's time zone, a clock not synced) is named,
and read on the orchestrator's clock. Before, a trainer log two hours ahead made a checkpoint-bound
run two hours longer: "no bottleneck found", and no warning."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from tests.support.synthetic_logs import _line, make_run
from tests.unit.analysis.test_clock_offsets import _shifted

from prime_rl.tracing import format_tagged


@pytest.mark.parametrize("offset_s", [7200.0, -10800.0])
def test_a_trainer_log_hours_off_is_named_and_read_on_the_orchestrators_clock(tmp_path, analyze, offset_s):
    expected, _ = analyze(
        make_run("checkpoint_io", steps=20).write(tmp_path / "same").values(), tmp_path / "a"
    )
    run = make_run("checkpoint_io", steps=20)
    run.trainer = _shifted(run.trainer, offset_s)
    files = run.write(tmp_path / "off")
    # the trainer's log first: the orchestrator's is still read before it
    summary, md = analyze([files["trainer"], files["orchestrator"], files["inference"]], tmp_path / "b")
    assert expected["primary"]["kind"] == summary["primary"]["kind"] == "checkpoint_io"
    assert summary["run_seconds"] == pytest.approx(expected["run_seconds"], abs=0.1)  # the bound: 0.05 s
    ((log, got),) = summary["clock_offsets"].items()
    assert log == str(files["trainer"])
    # ahead: measured on the 18 checkpoints the orchestrator waited for (0.05 s after they were
    # written); behind: the same bound, the one taken where there are enough
    assert got == {"seconds": pytest.approx(offset_s, abs=0.1), "steps": 18}
    side = "ahead of" if offset_s > 0 else "behind"
    assert f"{files['trainer']} is {abs(offset_s):.0f} s {side} it (measured on 18 step(s))" in md
    assert expected["clock_offsets"] == {}
    # every figure of the trainer's lines as on a clock in step: its spans' shares and the timeline
    for got_stage, stage in zip(summary["stages"], expected["stages"], strict=True):
        assert got_stage["name"] == stage["name"] and got_stage["share"] == pytest.approx(
            stage["share"], abs=0.01
        )
    assert [f["kind"] for f in summary["findings"]] == [f["kind"] for f in expected["findings"]]


def _after_compute(lines: list[str]) -> list[str]:
    """The synthetic trainer's ``step.done`` lines, stamped at their step's ``[rollout]`` line, moved
    ``train_ms`` later: as the trainer logs them, after the compute that followed its read."""
    out = []
    for line in lines:
        if "step.done" in line:
            line = _shifted([line], float(line.split("train_ms=")[1].split()[0]) / 1000.0)[0]
        out.append(line)
    return out


def test_a_trainer_log_behind_with_only_its_reads_of_rollouts_is_measured_on_them(tmp_path, analyze):
    """A rank that does not publish logs no checkpoint: its reads of the rollouts bound it from
    above, enough to see it behind; it waited for each (30 ms), so the bound is the offset."""
    run = make_run("healthy", steps=20)
    run.trainer = _shifted(_after_compute([x for x in run.trainer if "write.done" not in x]), -3600.0)
    files = run.write(tmp_path / "off")
    summary, md = analyze(files.values(), tmp_path / "b")
    ((log, got),) = summary["clock_offsets"].items()
    assert log == str(files["trainer"]) and got["steps"] == 20
    assert got["seconds"] == pytest.approx(-3600.0, abs=0.01)
    assert "is 3600 s behind it (measured on 20 step(s))" in md


def test_durations_that_are_no_finite_number_or_longer_than_the_step_bound_nothing(tmp_path, analyze):
    """``train_ms=nan``, ``inf`` or ``1e12`` on a line: not read as an end of the wait (before, one
    such line gave no offset, the run two hours long, or an offset of -inf)."""
    run = make_run("healthy", steps=10)
    trainer = _after_compute([x for x in run.trainer if "write.done" not in x])
    done = [i for i, x in enumerate(trainer) if "step.done" in x]
    for i, bad in zip(done[1:4], ("nan", "inf", "1e12"), strict=True):
        trainer[i] = trainer[i].replace("train_ms=1200.0", f"train_ms={bad}")
    run.trainer = _shifted(trainer, -3600.0)
    files = run.write(tmp_path / "off")
    summary, _ = analyze(files.values(), tmp_path / "b")
    got = summary["clock_offsets"][str(files["trainer"])]
    assert got == {"seconds": pytest.approx(-3600.0, abs=0.01), "steps": 7}
    assert summary["bad_values"]["count"] == 2  # nan and inf, counted as ever


def test_a_generation_bound_trainer_is_read_on_its_waits_for_rollouts(tmp_path, analyze):
    """Generation-bound, the weights are written long before the orchestrator asks for them: it
    does not wait (wait_ms 0.3), so ``write.done - wait.done`` lies 6.8 s below the offset. The
    trainer waits for its rollouts: that bound is tight and the offset is read on it."""
    run = make_run("generation_bound", steps=20)
    run.orchestrator = [
        x.split("wait_ms=")[0] + "wait_ms=0.3" if "wait.done" in x else x for x in run.orchestrator
    ]
    trainer = _after_compute(run.trainer)
    run.trainer = _shifted([_shifted([x], -6.8)[0] if "write.done" in x else x for x in trainer], 7200.0)
    files = run.write(tmp_path / "off")
    summary, _ = analyze(files.values(), tmp_path / "b")
    got = summary["clock_offsets"][str(files["trainer"])]
    assert got == {"seconds": pytest.approx(7200.0, abs=0.01), "steps": 20}


def test_a_trainer_log_that_starts_late_in_a_long_run_is_measured(tmp_path, analyze):
    """The trainer's log holds only steps 1,030 and on (its older parts gone) of an 1,100-step run
    whose orchestrator log is whole: measured on the steps both have."""
    run = make_run("checkpoint_io", steps=1100)
    run.trainer = _shifted([x for x in run.trainer if int(x.split(" step=")[1].split()[0]) >= 1030], 7200.0)
    files = run.write(tmp_path / "off")
    summary, _ = analyze(files.values(), tmp_path / "b")
    got = summary["clock_offsets"][str(files["trainer"])]
    assert got["steps"] == 69 and got["seconds"] == pytest.approx(7200.0, abs=0.1)  # writes of 1,030-1,098


def test_trainers_in_step_with_the_orchestrator_are_not_moved(tmp_path, analyze):
    """Clocks a few seconds apart (NTP) are no offset."""
    run = make_run("generation_bound", steps=20)
    run.trainer = _shifted(_after_compute(run.trainer), 2.0)
    files = run.write(tmp_path / "logs")
    summary, md = analyze(files.values(), tmp_path / "b")
    assert summary["clock_offsets"] == {}
    assert "clock is off" not in md


def test_a_trainer_log_read_without_the_orchestrators_keeps_its_times(tmp_path, analyze):
    run = make_run("checkpoint_io", steps=20)
    files = run.write(tmp_path / "same")
    expected, _ = analyze([files["trainer"]], tmp_path / "a")
    run.trainer = _shifted(run.trainer, 7200.0)
    summary, _ = analyze([run.write(tmp_path / "off")["trainer"]], tmp_path / "b")
    assert summary["clock_offsets"] == {}
    assert summary["run_seconds"] == pytest.approx(expected["run_seconds"])
    first = [(tmp_path / d / "timeline.txt").read_text().splitlines()[3].split()[0] for d in "ab"]
    assert first[0] != first[1]  # its own times: two hours apart


@pytest.mark.parametrize("offset_s", [-7200.0, 7200.0])
def test_a_rank_that_publishes_nothing_is_measured_on_its_compute_lines(tmp_path, analyze, offset_s):
    """``[train] compute.done`` (every rank) ends ``read_ms + train_ms`` after the wait for the
    rollouts, and comes before the weights it publishes: a rank log 2 hours behind or ahead,
    measured on those lines alone, is placed to the second (on its waits for the rollouts)."""
    run = make_run("healthy", steps=12)
    lines = []
    for line in run.trainer:
        if "step.done" in line:
            step = int(line.split("step=")[1].split()[0])
            fields = {"step": step, "rank": 1, "wait_ms": 30.0, "read_ms": 500.0, "train_ms": 700.0}
            lines.append(line[: line.index("[train]")] + format_tagged("train", "compute.done", **fields))
    (tmp_path / "logs").mkdir()
    files = run.write(tmp_path / "logs")
    rank = tmp_path / "logs" / "trainer_rank_1.log"
    rank.write_text("\n".join(_shifted(lines, offset_s + 1.2)) + "\n")  # 1.2 s after the rollouts
    summary, _ = analyze([*files.values(), rank], tmp_path / "b")
    got = summary["clock_offsets"][str(rank)]
    assert got["steps"] == 12 and got["seconds"] == pytest.approx(offset_s, abs=0.01)
    assert str(files["trainer"]) not in summary["clock_offsets"]


@pytest.mark.parametrize("offset_s", [0.0, 7200.0])
def test_a_resumed_trainer_s_log_is_measured_on_the_steps_it_did_not_redo(tmp_path, analyze, offset_s):
    """The trainer alone crashed in step 10 and was resumed 45 s later at step 8 into a log of its own
    (_crashed_alone ``compute``, split at the resume). That log's write.done of steps 8 and 9 came
    50 s after the orchestrator's waits for them had ended (it had those weights from the crashed
    run): read as bounds from below, its clock was 51 s ahead (2 of its first 10 steps; run 149.0 s
    for 152.0 s). A step an earlier trainer log wrote (or computed, on the same rank) bounds nothing:
    on the same clock the log is not moved; 2 hours ahead it is measured on its writes of steps 10
    to 17 (the orchestrator waited for weights up to step 17)."""
    from tests.unit.analysis.test_restarts_stalls import _crashed_alone, _split_at_resume

    orchestrator, trainer = _crashed_alone(tmp_path / "one", "compute", True, resume_at=8)[:2]
    first, second = _split_at_resume(trainer, tmp_path)
    second.write_text("\n".join(_shifted(second.read_text().splitlines(), offset_s)) + "\n")
    summary, _ = analyze([orchestrator, first, second], tmp_path / "out", "--async-level", "2")
    if offset_s:
        assert summary["clock_offsets"] == {str(second): {"seconds": pytest.approx(offset_s), "steps": 8}}
    else:
        assert summary["clock_offsets"] == {}
    assert summary["run_seconds"] == pytest.approx(152.0)


def test_a_stall_with_the_trainer_log_ahead_is_timed_on_the_orchestrators_clock(tmp_path, analyze):
    """The trainer dies after step 6's weights; its log, two hours ahead, would end the logs two
    hours after the orchestrator's wait began: its last line is moved with the rest."""

    def stalled():
        run = make_run("healthy", steps=12, seed=4)
        cut = next(i for i, x in enumerate(run.trainer) if "write.done step=7" in x)
        run.trainer = run.trainer[:cut]
        wait = next(i for i, x in enumerate(run.orchestrator) if "wait.start target_step=9" in x)
        run.orchestrator = run.orchestrator[: wait + 1]
        run.orchestrator.append(
            _shifted(run.orchestrator[-1:], 40.0)[0][:36] + "still waiting"
        )  # stall_min_s on
        return run

    expected, _ = analyze(stalled().write(tmp_path / "same").values(), tmp_path / "a")
    run = stalled()
    run.trainer = _shifted(run.trainer, 7200.0)
    summary, _ = analyze(run.write(tmp_path / "off").values(), tmp_path / "b")
    assert summary["clock_offsets"]  # measured on the steps before the stall
    p, q = summary["primary"], expected["primary"]
    assert p["kind"] == q["kind"] == "stall" and p["title"] == q["title"]
    assert p["share"] == pytest.approx(q["share"], abs=0.01)
    assert summary["run_seconds"] == pytest.approx(expected["run_seconds"], abs=0.1)


def _orchestrator(steps: int, wait_ms: float) -> list[tuple[float, str]]:
    """The orchestrator's lines of a hand-made run of 10 s steps: step n's rollouts logged at
    10n - 5 s, weights/step_n had (after ``wait_ms`` of waiting) at 10n."""
    lines = []
    for n in range(1, steps + 1):
        lines.append(
            (10 * n - 5, format_tagged("rollout", None, current_step=n, ckpt_step=n - 1, staleness=1))
        )
        lines.append((10 * n, format_tagged("ckpt", "wait.done", target_step=n, wait_ms=wait_ms)))
    return lines


def _write_logs(tmp_path, logs: dict[str, list[tuple[float, str]]]) -> list[Path]:
    """Each log's ``(seconds into the run, text)`` lines, in time order, as a file of that name."""
    t0 = datetime(2026, 1, 1, 12, 0, 0).timestamp()
    paths = []
    for name, lines in logs.items():
        paths.append(tmp_path / name)
        paths[-1].write_text("".join(_line(t0 + t, text) + "\n" for t, text in sorted(lines)))
    return paths


def _trainer_bound_logs(tmp_path, off: float, train_ms: bool = True) -> tuple[Path, Path]:
    """A trainer-bound run by hand, 12 steps of 10 s: the trainer's compute of step N-1 is done at
    10N - 0.05 s, the orchestrator (which waited 3 s) has weights/step_N at 10N, its rollouts of
    step s were logged at 10s - 5 and read without a wait. Rank 1's log holds its compute lines
    only (``train_ms=9000 read_ms=100``, or neither), on a clock ``off`` seconds ahead."""
    rank = []
    for n in range(1, 13):
        times = {"train_ms": 9000.0, "read_ms": 100.0} if train_ms else {}
        fields = {"step": n - 1, "rank": 1, "wait_ms": 0.0, **times}
        rank.append((10 * n - 0.05 + off, format_tagged("train", "compute.done", **fields)))
    orchestrator, rank_log = _write_logs(
        tmp_path, {"orchestrator.log": _orchestrator(12, wait_ms=3000.0), "trainer_rank_1.log": rank}
    )
    return orchestrator, rank_log


def test_compute_lines_bound_the_weights_of_the_next_step_not_their_own(tmp_path, analyze):
    """In step, rank 1's compute of step N ends 9.95 s after the orchestrator had weights/step_N
    (the trainer limits the run): paired with weights/step_N+1, which come after it, it is no
    offset; paired with its own step's it would read 9.95 s ahead."""
    summary, _ = analyze(_trainer_bound_logs(tmp_path, 0.0), tmp_path / "out")
    assert summary["clock_offsets"] == {}


def test_a_rank_bounded_only_from_below_is_read_on_its_compute_lines(tmp_path, analyze):
    """Compute lines without ``train_ms``: no end of a wait to bound the log from above, so the
    offset is read on the compute lines, which come 0.05 s before the weights they publish."""
    orchestrator, rank = _trainer_bound_logs(tmp_path, 7200.0, train_ms=False)
    summary, _ = analyze([orchestrator, rank], tmp_path / "out")
    assert summary["clock_offsets"][str(rank)] == {
        "seconds": pytest.approx(7200.0 - 0.05, abs=1e-3),
        "steps": 12,
    }


def test_a_publishing_rank_with_no_tight_bound_counts_each_step_once(tmp_path, analyze):
    """Neither side waited (wait_ms 0.3): rank 0's write and compute lines bound each step from
    below, counted once a step, and the offset is read on the writes (before: 20 "steps" of 10,
    read on a mix of both)."""
    run = make_run("healthy", steps=12)
    run.orchestrator = [
        x.split("wait_ms=")[0] + "wait_ms=0.3" if "wait.done" in x else x for x in run.orchestrator
    ]
    trainer = []
    for line in _after_compute(run.trainer):
        if "step.done" in line:
            step = int(line.split("step=")[1].split()[0])
            fields = {"step": step, "rank": 0, "wait_ms": 0.3, "read_ms": 0.0, "train_ms": 1200.0}
            trainer.append(line[: line.index("[train]")] + format_tagged("train", "compute.done", **fields))
        trainer.append(line.replace("wait_ms=30.0", "wait_ms=0.3"))
    run.trainer = _shifted(trainer, 7200.0)
    files = run.write(tmp_path / "off")
    summary, _ = analyze(files.values(), tmp_path / "b")
    assert summary["clock_offsets"][str(files["trainer"])] == {
        "seconds": pytest.approx(7200.0 - 0.05, abs=1e-3),
        "steps": 10,
    }


def test_a_rank_bounded_loosely_from_both_sides_is_read_between_them(tmp_path, analyze):
    """Trainer-bound, rank 1 never waits for its rollouts: its reads bound it 5.85 s above the
    offset (how long the rollouts waited), its compute lines 0.05 s below (the publish). Read in
    the middle, 2.9 s off, not at either end (the reads alone: 5.85 s, beyond the 5 s slack)."""
    orchestrator, rank = _trainer_bound_logs(tmp_path, 7200.0)
    summary, _ = analyze([orchestrator, rank], tmp_path / "out")
    got = summary["clock_offsets"][str(rank)]
    assert got["seconds"] == pytest.approx(7200.0 + (5.85 - 0.05) / 2, abs=1e-3) and got["steps"] == 12


def test_a_reading_outside_what_bounds_the_log_is_not_taken(tmp_path, analyze):
    """Rank 0's log, 600 s ahead, holds 3 lines of another run's first steps on the clock in step
    (a log appended to). Those are its only tight bounds (it waited 30 ms for their rollouts), and
    they read 5.85 s: below its writes' bound (599.95 s) by more than the slack, so the log is read
    as judged on all its bounds, not moved by 5.85 s."""
    trainer = []
    for n in range(1, 41):
        off, wait = (0.0, 30.0) if n <= 3 else (600.0, 0.0)
        fields = {"step": n, "rank": 0, "wait_ms": wait, "read_ms": 100.0, "train_ms": 9000.0}
        trainer.append((10 * n + 4.95 + off, format_tagged("train", "compute.done", **fields)))
        trainer.append((10 * n - 0.05 + 600.0, format_tagged("ckpt", "write.done", step=n, write_ms=40.0)))
    paths = _write_logs(
        tmp_path, {"orchestrator.log": _orchestrator(40, wait_ms=0.3), "trainer.log": trainer}
    )
    summary, _ = analyze(paths, tmp_path / "out")
    got = summary["clock_offsets"][str(paths[1])]
    assert got["seconds"] == pytest.approx(599.95, abs=1e-3)
