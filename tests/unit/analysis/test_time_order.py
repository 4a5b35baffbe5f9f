"""A tagged line whose time is far from the lines around it in its file (a wrong clock, a corrupt
date) is left out and named by file and line; a file whose time goes back is named in a warning.
Before, one orchestrator line dated two months late stretched the run to two months: the
checkpoint-bound run below was reported as "no bottleneck found"."""

from __future__ import annotations

import pytest
from tests.support.synthetic_logs import make_run

from prime_rl.analysis import parser
from prime_rl.analysis.parser import ParseStats, parse_files

PREFIX = "2026-01-0{day} 12:{minute:02d}:00.000 | INFO    | "


def _line(minute: int, step: int, day: int = 1) -> str:
    return PREFIX.format(day=day, minute=minute) + f"[gen] batch.done step={step} completions=4 dur_ms=5\n"


def test_one_line_dated_months_off_leaves_the_findings_as_they_were(tmp_path, analyze):
    good = make_run("checkpoint_io", steps=20).write(tmp_path / "good")
    run = make_run("checkpoint_io", steps=20)
    middle = len(run.orchestrator) // 2
    run.orchestrator[middle] = run.orchestrator[middle].replace("2026-01-01", "2026-03-01", 1)
    bad = run.write(tmp_path / "bad")
    expected, _ = analyze(good.values(), tmp_path / "out_good")
    summary, md = analyze(bad.values(), tmp_path / "out_bad")
    assert expected["primary"]["kind"] == "checkpoint_io"
    assert summary["primary"]["kind"] == "checkpoint_io"
    assert summary["run_seconds"] == pytest.approx(expected["run_seconds"])
    assert summary["out_of_order"]["count"] == 1
    (example,) = summary["out_of_order"]["examples"]
    assert example.startswith(f"{bad['orchestrator']}:{middle + 1}: 2026-03-01 ")
    assert any(
        "1 tagged line(s) left out: more than 3600 s from the lines before and after" in w
        for w in summary["warnings"]
    )
    assert "1 out of time order" in md


def test_a_line_far_before_both_neighbours_is_left_out_and_a_file_going_back_is_warned_of(tmp_path, analyze):
    log = tmp_path / "orchestrator.log"
    log.write_text(
        _line(0, 0)
        + PREFIX.format(day=1, minute=1).replace("2026-01-01", "1999-01-01")
        + "[gen] batch.done step=1 completions=4 dur_ms=5\n"
        + _line(2, 2)
        + _line(3, 3, day=5)  # four days on: a gap (a paused run), kept
        + _line(4, 4, day=2)  # back three days and staying there: warned of, kept
        + _line(5, 5, day=2)
    )
    summary, _ = analyze([log], tmp_path / "out")
    assert summary["out_of_order"] == {"count": 1, "examples": [f"{log}:2: 1999-01-01 12:01:00"]}
    assert summary["parse"]["tagged"] == 6
    assert summary["counts"]["gen.batch.done"] == 5
    assert summary["time_goes_back"]["count"] == 1
    (back,) = summary["time_goes_back"]["examples"]
    assert back.startswith(f"{log}:5: 2026-01-02 12:04:00, ")
    assert "2026-01-05 12:03:00" in back
    assert any("time goes back by more than 3600 s in 1 place(s)" in w for w in summary["warnings"])


def test_a_jump_across_batches_is_judged_with_the_lines_of_the_next_batch(tmp_path, monkeypatch):
    """The last line of a batch is held for the next, so that both its neighbours are known."""
    monkeypatch.setattr(parser, "BATCH_ROWS", 3)
    lines = [_line(m, m) for m in range(10)]
    lines[2] = lines[2].replace("2026-01-01", "2027-01-01")  # the last of the first batch of 3
    lines[3] = lines[3].replace("2026-01-01", "2025-01-01")  # and the first line after it: both left out?
    log = tmp_path / "orchestrator.log"
    log.write_text("".join(lines))
    stats = ParseStats()
    events = list(parse_files([("orchestrator", log)], stats))
    # two neighbours that are both off: neither lies within the threshold of the other's
    # neighbours, each is judged against a neighbour that is off too, so neither is a lone jump
    assert [e.line for e in events] == list(range(1, 11))
    assert stats.out_of_order == 0 and stats.time_goes_back == 1
    lines[3] = _line(3, 3)
    log.write_text("".join(lines))
    stats = ParseStats()
    events = list(parse_files([("orchestrator", log)], stats))
    assert [e.line for e in events] == [1, 2, 4, 5, 6, 7, 8, 9, 10]
    assert stats.out_of_order == 1 and stats.out_of_order_examples == [f"{log}:3: 2027-01-01 12:02:00"]


def test_a_files_first_and_last_lines_are_not_judged(tmp_path):
    """A first line long before the rest (a process that waited) and a last line long after (a
    hang's end) have one neighbour each: kept, and the time going forward is no warning."""
    log = tmp_path / "orchestrator.log"
    log.write_text(
        _line(0, 0).replace("2026-01-01", "2025-06-01") + _line(1, 1) + _line(2, 2) + _line(3, 3, day=9)
    )
    stats = ParseStats()
    assert len(list(parse_files([("orchestrator", log)], stats))) == 4
    assert stats.out_of_order == 0 and stats.time_goes_back == 0


def test_the_threshold_sets_how_far_a_line_may_be_and_zero_turns_it_off(tmp_path, analyze):
    log = tmp_path / "orchestrator.log"
    log.write_text(_line(0, 0) + _line(30, 1) + _line(1, 2) + _line(2, 3))
    summary, _ = analyze([log], tmp_path / "a")
    assert summary["out_of_order"]["count"] == 0  # 30 minutes: within the hour
    summary, _ = analyze([log], tmp_path / "b", "--threshold", "time_jump_s=600")
    assert summary["out_of_order"]["count"] == 1
    assert summary["out_of_order"]["examples"] == [f"{log}:2: 2026-01-01 12:30:00"]
    summary, _ = analyze([log], tmp_path / "c", "--threshold", "time_jump_s=0")
    assert summary["out_of_order"]["count"] == 0 and summary["time_goes_back"]["count"] == 0
