"""A tagged line whose time is far from the lines around it in its file (a wrong clock, a corrupt
date) is left out and named by file and line; a file whose time goes back is named in a warning.
Before, one orchestrator line dated two months late stretched the run to two months: the
checkpoint-bound run below was reported as "no bottleneck found"."""

from __future__ import annotations

import pytest
from tests.support.synthetic_logs import make_run

from prime_rl.analysis import parser, time_order
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


@pytest.mark.parametrize("batch_rows", [2, 3, 5, 1 << 16])
def test_a_few_wrong_lines_in_a_row_are_left_out_whatever_the_batches(tmp_path, monkeypatch, batch_rows):
    """The last lines of a batch are held for the next, so that the lines after them are known:
    the result does not depend on where the batches end. Two wrong lines in a row (a year late, a
    year early) are left out as one wrong time, as one is."""
    monkeypatch.setattr(parser, "BATCH_ROWS", batch_rows)
    lines = [_line(m, m) for m in range(30)]
    lines[2] = lines[2].replace("2026-01-01", "2027-01-01")
    lines[3] = lines[3].replace("2026-01-01", "2025-01-01")
    lines[20] = lines[20].replace("2026-01-01", "2026-04-01")
    log = tmp_path / "orchestrator.log"
    log.write_text("".join(lines))
    stats = ParseStats()
    events = list(parse_files([("orchestrator", log)], stats))
    assert [e.line for e in events] == [n for n in range(1, 31) if n not in (3, 4, 21)]
    assert stats.out_of_order == 3 and stats.time_goes_back == 0
    assert stats.out_of_order_examples == [
        f"{log}:3: 2027-01-01 12:02:00",
        f"{log}:4: 2025-01-01 12:03:00",
        f"{log}:21: 2026-04-01 12:20:00",
    ]


def test_wrong_times_longer_than_a_burst_are_a_jump_kept_and_warned_of(tmp_path, monkeypatch):
    """BURST_LINES + 1 lines a day early, then back: no longer a moment's wrong clock but time that
    goes back (warned of, at the first of them) and forward again (a gap); every line kept."""
    n = time_order.BURST_LINES + 1
    lines = [_line(m, m, day=2) for m in range(n + 4)]
    for k in range(2, 2 + n):
        lines[k] = lines[k].replace("2026-01-02", "2026-01-01")
    log = tmp_path / "orchestrator.log"
    log.write_text("".join(lines))
    stats = ParseStats()
    assert len(list(parse_files([("orchestrator", log)], stats))) == n + 4
    assert stats.out_of_order == 0 and stats.time_goes_back == 1
    assert stats.time_goes_back_examples == [
        f"{log}:3: 2026-01-01 12:02:00, 86340 s before an earlier line's 2026-01-02 12:01:00"
    ]


def test_lines_without_a_time_after_the_last_with_one_are_not_held_without_bound(tmp_path, monkeypatch):
    """Lines without a time are held with the timed line before them; past HELD_MAX held lines the
    batch is judged as if the file ended there, so what is held stays bounded."""
    monkeypatch.setattr(parser, "BATCH_ROWS", 4)
    monkeypatch.setattr(time_order, "HELD_MAX", 10)
    log = tmp_path / "orchestrator.log"
    log.write_text(_line(0, 0) + "[gen] batch.done step=1 completions=4 dur_ms=5\n" * 40 + _line(1, 2))
    heights = []
    judge = time_order.TimeOrder.judge

    def judged(self, frame, final):
        out, held = judge(self, frame, final)
        heights.append(0 if held is None else held.height)
        return out, held

    monkeypatch.setattr(time_order.TimeOrder, "judge", judged)
    assert len(list(parse_files([("orchestrator", log)], ParseStats()))) == 42
    assert max(heights) <= 10 + 4


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
