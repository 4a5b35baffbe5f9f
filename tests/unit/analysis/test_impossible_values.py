"""Values no run can have, repeated step lines and unknown tags, each inserted alone into a healthy
run's orchestrator.log: counted and named by file:line, never silently kept (the rev_v reviewer's
D5, D7, D8). Each test failed on the code before its fix."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.synthetic_logs import Shape, make_run

AT = 16
"""Lines are inserted after this line of the healthy run's orchestrator.log (step 2's batch.done),
with its timestamp: the new lines are lines AT + 1, AT + 2, ..."""


def _run_with(tmp_path: Path, *lines: str, at: int = AT) -> tuple[Path, Path]:
    """The healthy run's logs with ``lines`` (tagged parts) inserted after line ``at`` of
    orchestrator.log; (the logs' directory, orchestrator.log)."""
    logs = tmp_path / "logs"
    log = make_run("healthy", seed=1).write(logs)["orchestrator"]
    text = log.read_text().split("\n")
    stamp = text[at - 1][:23]
    text[at:at] = [f"{stamp} | INFO    | {line}" for line in lines]
    log.write_text("\n".join(text))
    return logs, log


def test_an_unknown_tag_is_named_by_its_first_line_and_an_overlong_one_is_counted(tmp_path, analyze):
    long_tag = "z" * 5000
    logs, log = _run_with(
        tmp_path, "[frobnicate] thing.done x=1", f"[{long_tag}] thing.done x=1", "[frobnicate] thing.done x=2"
    )
    summary, md = analyze([logs], tmp_path / "out")
    long_name = "z" * 40 + "... (5000 characters)"
    assert summary["unknown_tags"] == {"frobnicate": 2, long_name: 1}
    assert summary["unknown_tag_lines"] == {"frobnicate": f"{log}:{AT + 1}", long_name: f"{log}:{AT + 2}"}
    assert f"[frobnicate] x2 (first at {log}:{AT + 1})" in md
    assert f"[{long_name}] x1 (first at {log}:{AT + 2})" in md
    assert "3 line(s) with a tag the analyzer does not read" in md


def test_a_percent_outside_0_to_100_and_a_negative_staleness_are_bad_values(tmp_path, analyze):
    logs, log = _run_with(
        tmp_path,
        "[rollout] trunc_pct=250 current_step=55 ckpt_step=54 staleness=1",
        "[rollout] trunc_pct=1e308 current_step=56 ckpt_step=54 staleness=-3",
    )
    summary, md = analyze([logs], tmp_path / "out")
    assert summary["bad_values"] == {
        "count": 3,
        "examples": [
            f"{log}:{AT + 1}: trunc_pct=250 ([rollout])",
            f"{log}:{AT + 2}: trunc_pct=1e308 ([rollout])",
            f"{log}:{AT + 2}: staleness=-3 ([rollout])",
        ],
    }
    assert summary["stats"]["trunc_pct"]["max"] == 2.0  # the healthy run's own
    assert "-3" not in summary["staleness"]["histogram"]
    assert "a trunc_pct outside 0-100, a staleness below 0" in md


def test_a_collector_samples_part_longer_than_the_sample_is_a_bad_value(tmp_path, analyze):
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = []
    for i in range(40):  # 40 samples of 1 s, 4 in flight: 10 s
        t = 12 * 3600 + (i // 4) + 1
        stamp = f"2026-01-01 {t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}.000 | INFO    | "
        lines.append(
            f"{stamp}[collect][c{i}] rollout.done task={i} repeat=0 status=200 dur_ms=1000 queue_ms=1 gen_ms=900 "
            "verify_ms=50 out_tokens=10 attempts=1 url=http://h0:8000"
        )
    lines.insert(
        20,
        lines[19][:36] + "[collect][x7] rollout.done task=99 repeat=0 status=200 dur_ms=10 queue_ms=1 "
        "gen_ms=90000 verify_ms=1 out_tokens=10 attempts=1 url=http://h0:8000",
    )
    log = logs / "collect.log"
    log.write_text("\n".join(lines) + "\n")
    summary, _ = analyze([log], tmp_path / "out")
    assert summary["bad_values"]["examples"] == [f"{log}:21: gen_ms=90000 ([collect] rollout.done)"]
    assert summary["stats"]["collect_gen_ms"]["max"] == 900.0
    assert summary["stats"]["collect_ms"]["count"] == 41  # the sample's own dur_ms is kept
    assert all(stage["share"] <= 1.0 for stage in summary["stages"])


def test_one_at_a_time_durations_that_pass_the_run_are_clipped_to_it_and_named(tmp_path, analyze):
    """A 400 s checkpoint wait (a unit bug) and a 1e300 ms (1e297 s) batch logged at step 2's
    batch.done, about 4.7 s into a run of about 34 s: the orchestrator waits and generates one at a
    time, so each counts from the end of the one before it in its series (the wait from step 1's
    wait.done at 3.016 s: 1.66 s), named with its line; the code before made checkpoint wait 100% of
    the run. Three 25 s waits logged together near the end add up to more than the run: that sum is
    clipped to the run's time and named in a warning; the values stay in their statistics."""
    logs, log = _run_with(
        tmp_path,
        "[ckpt] wait.done target_step=2 wait_ms=400000",
        "[gen] batch.done step=55 completions=256 dur_ms=1e300 inflight=64",
    )
    summary, md = analyze([logs], tmp_path / "out")
    stages = {stage["name"]: stage for stage in summary["stages"]}
    assert 1900 < stages["checkpoint wait"]["total_ms"] < 2100  # 1.66 s and the run's other waits (0.37 s)
    assert stages["generation"]["share"] < 1.0
    assert all(stage["share"] <= 1.0 for stage in summary["stages"])
    assert all(finding["share"] <= 1.0 for finding in summary["findings"])
    assert summary["stats"]["ckpt_wait_ms"]["max"] == 400000.0
    assert summary["counts"]["overlapping.ckpt_wait_ms"] == summary["counts"]["overlapping.gen_dur_ms"] == 1
    (warning,) = [w for w in summary["warnings"] if "reach back over the end of the one before them" in w]
    assert (
        f"{log}:{AT + 1}: ckpt_wait_ms 400000 ms" in warning
        and f"{log}:{AT + 2}: gen_dur_ms 1e+300 ms" in warning
    )
    assert "clipped to the run's time" not in warning
    # the trainer's compute is no series of SERIAL (its ranks may log into one file): 3 x 25 s more
    logs = tmp_path / "late"
    trainer = make_run("healthy", seed=1).write(logs)["trainer"]
    text = trainer.read_text().rstrip("\n").split("\n")
    text += [
        f"{text[-1][:23]} | INFO    | [train] step.done step={s} wait_ms=0 train_ms=25000 write_ms=0"
        for s in (20, 21, 22)
    ]
    trainer.write_text("\n".join(text) + "\n")
    summary, md = analyze([logs], tmp_path / "out_late")
    run_ms = summary["run_seconds"] * 1000
    stages = {stage["name"]: stage for stage in summary["stages"]}
    assert stages["trainer compute"]["total_ms"] == run_ms and stages["trainer compute"]["share"] == 1.0
    (warning,) = [w for w in summary["warnings"] if "clipped to the run's time" in w]
    assert "train_ms 99.0 s" in warning  # with its other steps' 24 s


def test_a_step_logged_twice_in_one_run_is_named_and_its_last_line_wins(tmp_path, analyze, monkeypatch):
    """A second [gen] batch.done for step 2 (100 s, at its real one's time; no restart) replaced the
    real 1.5 s, and a second [rollout] line for step 2 (staleness 7) was likewise kept over the real
    one, both without a word (the rev_v reviewer's D7). The last line of a step wins, as a restart's
    does, and each such line is counted by series and named by file:line."""
    logs, log = _run_with(
        tmp_path,
        "[rollout] trunc_pct=99 current_step=2 ckpt_step=1 staleness=7",  # before step 2's real one
        "[gen] batch.done step=2 completions=256 dur_ms=99999 inflight=64",  # after step 2's real one
        at=AT,
    )
    summary, _ = analyze([logs], tmp_path / "out")
    assert summary["counts"]["repeated.gen_dur_ms"] == 1
    assert summary["counts"]["repeated.trunc_pct"] == summary["counts"]["repeated.staleness"] == 1
    assert "redone.gen_dur_ms" not in summary["counts"]  # no restart
    (warning,) = [w for w in summary["warnings"] if "logged again for a step" in w]
    assert "3 per-step value(s)" in warning and "the last line's value is kept" in warning
    # each repeat once, with the line it repeats (the stray one) and the one kept; no empty event
    # (the code before named the kept line alone, the [rollout] line twice: "([rollout] )")
    assert f"{log}:{AT} then {log}:{AT + 2} (kept): gen_dur_ms step 2 ([gen] batch.done)" in warning
    assert f"{log}:{AT + 1} then {log}:{AT + 4} (kept): trunc_pct, staleness step 2 ([rollout])" in warning
    assert warning.count(f"{log}:{AT + 4}") == 1 and "([rollout] )" not in warning
    assert summary["stats"]["gen_dur_ms"]["max"] == 99999.0  # the last line's
    assert summary["stats"]["trunc_pct"]["max"] == 2.0 and "7" not in summary["staleness"]["histogram"]
    # the line repeated in an earlier batch of the parser's (a line a batch): named the same
    from prime_rl.analysis import parser

    monkeypatch.setattr(parser, "BATCH_ROWS", 1)
    monkeypatch.setattr(parser, "CHUNK", 100)
    cut, _ = analyze([logs], tmp_path / "out_cut")
    (again,) = [w for w in cut["warnings"] if "logged again for a step" in w]
    assert f"{log}:{AT} then {log}:{AT + 2} (kept): gen_dur_ms step 2 ([gen] batch.done)" in again
    assert f"{log}:{AT + 1} then {log}:{AT + 4} (kept): trunc_pct, staleness step 2 ([rollout])" in again


def test_a_wait_begun_before_a_log_that_starts_mid_run_counts_from_its_first_line(tmp_path, analyze):
    """A healthy run's orchestrator.log that starts mid-run: its first line ends a 600 s wait for
    weights begun in a rotated part that is gone. The wait counts from the logs' first line, so
    almost none of it (the code before clipped the sum of the waits to the run: checkpoint wait
    34.8 s, 100%, primary Checkpoint I/O, and a warning)."""
    logs = tmp_path / "logs"
    log = make_run("healthy", steps=20).write(logs)["orchestrator"]
    text = log.read_text().splitlines()
    text.insert(0, text[0][:23] + " | INFO    | [ckpt] wait.done target_step=0 wait_ms=600000.0")
    log.write_text("\n".join(text) + "\n")
    summary, _ = analyze([logs], tmp_path / "out")
    stages = {stage["name"]: stage for stage in summary["stages"]}
    assert stages["checkpoint wait"]["total_ms"] < 1000 and summary["primary"] is None
    assert summary["stats"]["ckpt_wait_ms"]["max"] == 600000.0
    assert not [w for w in summary["warnings"] if "clipped to the run's time" in w]


def test_the_older_log_format_begins_the_run_at_its_first_batch_or_step(tmp_path, analyze):
    """Logs without [gen] batch.start or [train] wait.* lines (the older format): the run begins at
    the first batch's (or step's compute's) start rebuilt from its done line, as with the start
    lines. The code before began it at the first done line: a generation-bound run read 159.4 s for
    168.0 s and a trainer's 20 steps 95.0 s for 99.9 s, each with a false clip warning."""
    new, old = tmp_path / "new", tmp_path / "old"
    make_run("generation_bound", steps=20).write(new)
    old.mkdir()
    for f in new.iterdir():
        kept = [x for x in f.read_text().splitlines() if "batch.start" not in x and "[train] wait." not in x]
        (old / f.name).write_text("\n".join(kept) + "\n")
    with_starts, _ = analyze([new], tmp_path / "out_new")
    summary, _ = analyze([old], tmp_path / "out_old")
    assert abs(summary["run_seconds"] - with_starts["run_seconds"]) < 0.001  # dur_ms to the 0.1 ms
    assert not [w for w in summary["warnings"] if "clipped to the run's time" in w]
    trainer = tmp_path / "trainer.log"
    trainer.write_text(
        "".join(
            f"2026-01-01 12:00:{5 * i:02d}.000 | INFO    | [train] step.done step={i} wait_ms=50.0 "
            "train_ms=4900.0 write_ms=40.0\n"
            for i in range(12)
        )
    )
    summary, _ = analyze([trainer], tmp_path / "out_trainer")
    assert abs(summary["run_seconds"] - (55 + 4.94)) < 1e-6
    stages = {stage["name"]: stage for stage in summary["stages"]}
    assert stages["trainer compute"]["total_ms"] == 12 * 4900.0
    assert not [w for w in summary["warnings"] if "clipped to the run's time" in w]


def test_the_older_log_format_s_run_does_not_begin_at_a_corrupt_first_duration(tmp_path, analyze):
    """The older format's run begins at its first batch's start rebuilt from its done line, but not
    one more than 10 median batches before the logs' first line: a corrupt dur_ms=400000 on the first
    batch.done of a generation-bound 168 s run made it 559.4 s with no finding and no word (the rev_x
    reviewer's R1). The run now begins at the logs' first line, the verdict stands and a warning
    names the refused start."""
    new, old = tmp_path / "new", tmp_path / "old"
    make_run("generation_bound", steps=20).write(new)
    old.mkdir()
    for f in new.iterdir():
        kept = [x for x in f.read_text().splitlines() if "batch.start" not in x and "[train] wait." not in x]
        if f.name == "orchestrator.log":
            first = next(i for i, x in enumerate(kept) if "[gen] batch.done" in x)
            kept[first] = re.sub(r"dur_ms=[0-9.]+", "dur_ms=400000.0", kept[first])
        (old / f.name).write_text("\n".join(kept) + "\n")
    summary, _ = analyze([old], tmp_path / "out")
    assert summary["run_seconds"] < 168.0 and summary["primary"]["kind"] == "generation_bound"
    assert summary["counts"]["rebuilt_start_refused.gen"] > 390_000
    assert [w for w in summary["warnings"] if "began more than 10 times its durations' median" in w]


def test_a_weight_update_counts_from_the_one_before_it_and_their_sum_is_clipped_to_the_run(tmp_path, analyze):
    """One client.done of a 400 s update (no client.send) in a healthy 2-server trio of about 34 s,
    logged at 8.39 s: the orchestrator waits for one update after another, so it counts from the end
    of the update before it (6.81 s: 1.58 s), not as primary "Slow engine reload ... 1157% of the run"
    with no warning (the code before). An update whose client.send is 0.2 s before its client.done but
    whose wall_ms is 400 s (its start known, its value kept): the updates' sum passes the run, is
    clipped to it, each part alike, and named."""
    logs = tmp_path / "logs"
    log = make_run("healthy", steps=20, shape=Shape(servers=2)).write(logs)["orchestrator"]
    text = log.read_text().splitlines()
    assert "[weights][t0004] client.done url=http://h1:8000" in text[37] and text[40][11:23] == "12:00:08.390"
    done = "client.done url=http://h:8000 path=/update_weights wall_ms=400000 rpc_ms=399000 attempts=1"
    text.insert(41, f"{text[40][:23]} | INFO    | [weights][zz] {done}")
    log.write_text("\n".join(text) + "\n")
    summary, _ = analyze([logs], tmp_path / "out")
    stages = {stage["name"]: stage for stage in summary["stages"]}
    assert 4000 < stages["weight update: rpc"]["total_ms"] < 6000  # 3.6 s of the real ones, 1.58 s of it
    assert summary["primary"] is None
    assert not [w for w in summary["warnings"] if "clipped to the run's time" in w]
    send = f"{text[40][:23]} | INFO    | [weights][zz] client.send url=http://h:8000 path=/update_weights attempt=1 background=false"
    text.insert(41, send)
    log.write_text("\n".join(text) + "\n")
    summary, _ = analyze([logs], tmp_path / "out_sent")
    stages = {stage["name"]: stage for stage in summary["stages"]}
    update = sum(stage["share"] for stage in stages.values() if stage["name"].startswith("weight update"))
    assert abs(update - 1.0) < 1e-9 and stages["weight update: rpc"]["share"] > 0.99
    (warning,) = [w for w in summary["warnings"] if "clipped to the run's time" in w]
    assert "weight updates (wall_ms at the slowest server) 403.7 s" in warning
