"""Logs whose times have no date (console captures: ``tee``) are placed on the date that fits them:
the date in their file name, else the one date on which their times overlap the dated logs'; a
guess is named as one, and a capture its weight updates put on another date is not a clock off."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from tests.support.synthetic_logs import Shape, make_run

from prime_rl.analysis.clock import Placed, name_date, place_undated
from prime_rl.analysis.parser import ParseStats, parse_files
from prime_rl.tracing import format_tagged

DAY = 86400.0


def _at(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").timestamp()


def _resumed_run(root, capture: str, resume_at: int = 8):
    """A run on 2026-01-01 12:00 that crashed after step 9 and its resume from step ``resume_at`` on
    2026-01-03 12:00 (the orchestrator's and trainer's logs, with dates, hold both); the inference
    server, restarted for the resume, captured with tee (no dates) into ``capture``: the resume's
    lines only."""
    first = make_run("healthy", steps=10, seed=1)
    again = make_run(
        "healthy", steps=12, seed=2, first_step=resume_at, start_offset_s=2 * DAY, shape=Shape(console=True)
    )
    base = _at("2026-01-01 12:00:00")

    def start(at: float, tag: str, step: int, resume: bool) -> str:
        extra = {"async_level": 1} if tag == "gen" else {}
        line = format_tagged(tag, "run.start", step=step, resume=resume, **extra)
        return datetime.fromtimestamp(at - 1).strftime("%Y-%m-%d %H:%M:%S.000") + " | INFO    | " + line

    logs = {
        "orchestrator.log": [start(base, "gen", 0, False), *first.orchestrator]
        + [start(base + 2 * DAY, "gen", resume_at, True), *again.orchestrator],
        "trainer.log": [start(base, "train", 0, False), *first.trainer]
        + [start(base + 2 * DAY, "train", resume_at, True), *again.trainer],
        capture: again.inference,
    }
    root.mkdir(parents=True)
    for name, lines in logs.items():
        (root / name).write_text("\n".join(lines) + "\n")
    assert again.inference[0][2] == ":" and not again.inference[0].startswith("2026")  # HH:MM:SS, no date
    return root


def test_a_capture_named_by_the_guide_is_placed_on_its_date_not_a_clock_off(tmp_path, analyze):
    """The README's capture, ``inference_20260103_115959.log``, of the resume two days after the run's
    first date: it was placed on the earliest date of the logs (2026-01-01) and named "172800 s
    behind it (another time zone, or a clock not synced)". Now its name dates it: no warning, no
    offset, its updates' receipts on 2026-01-03."""
    root = _resumed_run(tmp_path / "named", "inference_20260103_115959.log")
    summary, md = analyze([root], tmp_path / "out")
    assert summary["clock_offsets"] == {} and summary["warnings"] == []
    assert "behind" not in md and "clock" not in "".join(summary["warnings"])
    stats = ParseStats()
    events = list(parse_files([("inference", root / "inference_20260103_115959.log")], stats))
    assert events and all(_at("2026-01-03 11:59:00") < e.ts < _at("2026-01-03 12:10:00") for e in events)
    assert list(stats.undated.values()) == [Placed("2026-01-03", "name")]


def test_a_capture_without_a_date_in_its_name_that_fits_several_dates_says_so(tmp_path, analyze):
    """``inference.log`` (no date anywhere): its times of day fit the first run's date, the day
    between (inside the orchestrator's first and last line) and the resume's. Placed on the first,
    its weight updates put it two days later: a note that says so, not a clock warning."""
    root = _resumed_run(tmp_path / "plain", "inference.log")
    summary, md = analyze([root], tmp_path / "out")
    (warning,) = summary["warnings"]
    assert "has times without a date (a console capture), placed on 2026-01-01" in warning
    assert "(2026-01-01, 2026-01-02, 2026-01-03)" in warning
    assert (
        "its weight updates put it 2 day(s) later, on 2026-01-03" in warning and "not a clock off" in warning
    )
    assert "clock is off" not in md  # the clock warning is not given


def test_a_trainer_capture_its_steps_put_on_another_date_is_no_clock_off(tmp_path, analyze):
    """The trainer's console captured (no dates) for the resume only (from step 10: no step of it ran
    on the first day): placed on the first of the dates it fits, its steps put it two days later,
    where its times are read, as those of the same lines with their dates; not a clock off."""
    out = {}
    for name, cut in (("dated", 0), ("console", len("2026-01-03 "))):
        root = _resumed_run(tmp_path / name, "inference_20260103_115959.log", resume_at=10)
        lines = (root / "trainer.log").read_text().splitlines()
        resumed = next(i for i, line in enumerate(lines) if "run.start step=10" in line)
        (root / "trainer.log").unlink()
        (root / "trainer_console.log").write_text("".join(line[cut:] + "\n" for line in lines[resumed:]))
        out[name] = analyze([root], tmp_path / f"out_{name}")
    summary, md = out["console"]
    (warning,) = summary["warnings"]
    assert "trainer_console.log has times without a date (a console capture), placed on 2026-01-01" in warning
    assert "its steps put it 2 day(s) later, on 2026-01-03: its times are read there" in warning
    assert "clock is off" not in md and out["dated"][0]["warnings"] == []
    for key in ("run_seconds", "down_seconds"):
        assert summary[key] == pytest.approx(out["dated"][0][key], abs=0.1)
    assert summary["stats"] == out["dated"][0]["stats"]


def test_a_capture_of_an_overnight_run_is_placed_on_the_day_its_times_overlap(tmp_path):
    """A run from 20:00 to 04:00 the next morning, the server captured from 01:00: before, the
    earliest date of the logs (its times 19 hours before the run's); now the next day, the one date
    on which its times overlap the run's."""
    orchestrator = tmp_path / "orchestrator.log"
    start = _at("2026-01-01 20:00:00")
    orchestrator.write_text(
        "".join(
            datetime.fromtimestamp(start + k * 600).strftime("%Y-%m-%d %H:%M:%S.000")
            + f" | INFO    | [gen] batch.done step={k} completions=4 dur_ms=10.0\n"
            for k in range(49)
        )
    )
    capture = tmp_path / "inference.log"
    capture.write_text(
        "".join(f"0{h}:00:00.000 | INFO    | [weights][t{h}] server.recv t={h}\n" for h in (1, 2, 3))
    )
    stats = ParseStats()
    events = list(parse_files([("orchestrator", orchestrator), ("inference", capture)], stats))
    received = [e.ts for e in events if e.tag == "weights"]
    assert received == [_at(f"2026-01-02 0{h}:00:00") for h in (1, 2, 3)]
    assert list(stats.undated.values()) == [Placed("2026-01-02", "overlap")]


def test_a_capture_begun_before_midnight_and_a_rotated_capture_go_on_to_the_next_day(tmp_path):
    """A capture named 23:59:59 whose first line is 00:00:01 is the next day's; the rotated parts of
    a capture are one log: a part that starts after midnight goes on from the part before it."""
    late = tmp_path / "inference_20260103_235959.log"
    late.write_text("00:00:01.000 | INFO    | [weights][t1] server.recv t=1\n")
    (event,) = parse_files([("inference", late)], ParseStats())
    assert event.ts == _at("2026-01-04 00:00:01")

    older, newer = tmp_path / "console.log.1", tmp_path / "console.log"
    older.write_text("23:59:00.000 | INFO    | [gen] batch.done step=1 dur_ms=1\n")
    newer.write_text("00:01:00.000 | INFO    | [gen] batch.done step=2 dur_ms=1\n")
    dated = tmp_path / "trainer.log"
    dated.write_text("2026-01-05 23:58:00.000 | INFO    | [train] step.done step=1 wait_ms=1\n")
    stats = ParseStats()
    events = list(parse_files([("trainer", dated), ("orchestrator", older), ("orchestrator", newer)], stats))
    assert [e.ts for e in events] == [
        _at(t) for t in ("2026-01-05 23:58:00", "2026-01-05 23:59:00", "2026-01-06 00:01:00")
    ]


@pytest.mark.parametrize(
    ("name", "want"),
    [
        ("inference_20260103_115959.log", ("2026-01-03", 43199.0)),
        ("vllm-2026-01-03.log", ("2026-01-03", None)),
        ("inference_2026-01-03T23-59-59.log", ("2026-01-03", 86399.0)),
        ("inference_12345678.log", None),  # no date: a process id
        ("inference_1720260103.log", None),  # digits around it: no date
        ("inference.log", None),
    ],
)
def test_the_date_in_a_file_name(name, want):
    assert name_date(name) == want


def test_placing_a_log_without_dates():
    day = _at("2026-01-01 00:00:00")
    one = [(day + 12 * 3600, day + 13 * 3600)]  # a run from 12:00 to 13:00
    assert place_undated("x.log", [12.5 * 3600], one, "2026-01-01") == (Placed("2026-01-01", "overlap"), None)
    # 13:45 is within the slack (an hour) of the run's end; 15:30 is not
    assert place_undated("x.log", [13.75 * 3600], one, "2026-01-01")[0].how == "overlap"
    assert place_undated("x.log", [15.5 * 3600], one, "2026-01-01") == (Placed("2026-01-01", "none"), None)
    three = [(day + 12 * 3600, day + 2 * DAY + 13 * 3600)]  # from 12:00 to 13:00 two days later
    assert place_undated("x.log", [12.5 * 3600], three, "2026-01-01") == (
        Placed("2026-01-01", "several", ("2026-01-01", "2026-01-02", "2026-01-03")),
        None,
    )
    assert place_undated("x.log", [1.0], [], "2026-01-01")[0].how == "alone"
    assert place_undated("x_20260109.log", [1.0], one, "2026-01-01")[0] == Placed("2026-01-09", "name")


def test_a_log_with_dates_is_not_placed_whatever_its_name_says(tmp_path, analyze):
    """Logs with dates keep them (no note), whatever date their names hold."""
    run = make_run("healthy", steps=6)
    files = run.write(tmp_path / "logs")
    renamed = files["inference"].with_name("inference_20250101_120000.log")  # a date unlike its lines'
    files["inference"].rename(renamed)
    summary, _ = analyze([tmp_path / "logs"], tmp_path / "out")
    assert summary["warnings"] == [] and json.dumps(summary["clock_offsets"]) == "{}"
    assert summary["parse"]["undated"] == {}


def test_summary_json_names_every_log_without_dates_and_where_it_was_placed(tmp_path, analyze):
    """ParseStats.undated (the logs whose times have no date, each with the date it was placed on and
    how) went only into the warnings, and only when the placement was a guess or moved: the guide's
    capture placed by its name, inference_20260103_115959.log, left no trace in summary.json, nor did
    a capture placed on the first of three dates it fits. Now summary.json's parse.undated names each."""
    named = _resumed_run(tmp_path / "named", "inference_20260103_115959.log")
    summary, _ = analyze([named], tmp_path / "out_named")
    assert summary["warnings"] == []
    (log,) = summary["parse"]["undated"]
    assert log.endswith("inference_20260103_115959.log")
    assert summary["parse"]["undated"][log] == {"date": "2026-01-03", "how": "name", "fits": []}
    plain = _resumed_run(tmp_path / "plain", "inference.log")
    summary, _ = analyze([plain], tmp_path / "out_plain")
    assert list(summary["parse"]["undated"].values()) == [
        {"date": "2026-01-01", "how": "several", "fits": ["2026-01-01", "2026-01-02", "2026-01-03"]}
    ]
