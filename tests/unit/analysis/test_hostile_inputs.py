"""The analyzer's command line on inputs a probe found it mishandling: a bad run config, an output
directory it cannot make, file names that are not UTF-8, dates past the year 9999, labels from
directories, rotated parts, a file given twice, numbers too big for JSON, bad thresholds, logs with
no tagged line, --compare's arguments, a pipe. Each test failed (a traceback or a wrong report) before."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.synthetic_logs import Shape, appended, make_run

from prime_rl.analysis.__main__ import main as analyze_main
from prime_rl.analysis.log_files import discover, label_for
from prime_rl.analysis.thresholds import Thresholds
from prime_rl.tracing import format_tagged


def _strict_json(path: Path):
    """``path`` parsed as JSON that jq, browsers and Perfetto take: no NaN or Infinity."""

    def refuse(name):
        raise ValueError(f"{path.name} holds {name}")

    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


@pytest.mark.parametrize(
    ("config", "why"),
    [
        (b"{bad", "JSONDecodeError"),
        (b"[1, 2]", "not a JSON object"),
        (b"\xff\xfe{", "UnicodeDecodeError"),
        (b'{"async_level": "two"}', "'two' is not a whole number"),
        (b'{"async_level": -1}', "-1 is not a whole number"),
        (b'{"async_level": true}', "True is not a whole number"),
    ],
)
def test_a_run_config_without_a_usable_async_level_is_named_and_the_logs_still_analysed(
    tmp_path, capsys, config, why
):
    run = tmp_path / "run"
    make_run("slow_reload", seed=3).write(run / "logs")
    (run / "configs").mkdir()
    (run / "configs" / "orchestrator.json").write_bytes(config)
    analyze_main([str(run), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert f"{run / 'configs' / 'orchestrator.json'}: async_level" in err and why in err
    summary = _strict_json(tmp_path / "out" / "summary.json")
    assert summary["async_level"] is None and summary["primary"]["kind"] == "slow_reload"


def test_an_output_directory_that_cannot_be_made_is_an_error_before_the_logs_are_read(tmp_path, capsys):
    log = make_run("healthy").write(tmp_path / "logs")["orchestrator"]
    taken = tmp_path / "a_file"
    taken.write_text("not a directory")
    for out in (taken, taken / "below"):
        with pytest.raises(SystemExit) as exit_:  # the spill going elsewhere does not hide it
            analyze_main([str(log), "--out", str(out), "--tmp-dir", str(tmp_path / "spill")])
        assert exit_.value.code == 2
        assert f"cannot make the output directory {out}" in capsys.readouterr().err
    assert taken.read_text() == "not a directory" and not (tmp_path / "spill").exists()


def test_a_file_name_that_is_not_utf8_under_the_c_locale_gets_its_report(tmp_path):
    files = make_run("healthy").write(tmp_path / "logs")
    name = os.fsdecode(b"orchestrator-\xff\xe9.log")  # bytes no UTF-8 decoder takes: surrogates
    odd = tmp_path / "logs" / name
    files["orchestrator"].rename(odd)
    out = tmp_path / "out"
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "prime_rl.analysis", os.fsencode(odd), files["trainer"], "--out", out],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    md = (out / "SUMMARY.md").read_text(encoding="utf-8")
    assert "# Bottleneck analysis" in md and "orchestrator-\\udcff\\udce9.log" in md
    assert _strict_json(out / "summary.json")["parse"]["files"]


def test_a_date_past_the_year_9999_is_shown_as_unknown(tmp_path, analyze):
    log = tmp_path / "y.log"
    log.write_text(
        "2026-01-01 12:00:00.000 | INFO    | [gen] batch.start step=0 inflight=1 target_batch=4\n"
        "9999-12-31 23:59:60.999 | INFO    | [hang] detected silent_s=5 waits=a>b:c\n"
    )
    summary, md = analyze([log], tmp_path / "out")
    assert summary["parse"]["tagged"] == 2 and "first at ? (" in md  # the [hang] line's time


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("inference_debug/trainer.log", "trainer"),
        ("runs/inference_restart/logs/orchestrator.log.1", "orchestrator"),
        ("collect_runs/rank_3.log", "trainer"),
        ("logs/trainer/part.log", "trainer"),
        ("orchestrator/inference/x.log", "inference"),
        ("logs/other.log.gz", "other.log"),
    ],
)
def test_a_log_is_named_by_its_file_before_its_directories(path, label):
    assert label_for(Path(path)) == label


def test_rotated_parts_are_read_oldest_first_and_a_file_given_twice_is_read_once(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("orchestrator.log", "orchestrator.log.1", "orchestrator.log.2.gz", "trainer.log"):
        (logs / name).write_text("x\n")
    order = [f.name for _, f in discover([tmp_path, logs / "orchestrator.log", tmp_path / "logs" / "."])]
    assert order == ["orchestrator.log.2.gz", "orchestrator.log.1", "orchestrator.log", "trainer.log"]
    # a user's glob (orchestrator.log*) lists the live part first too
    given = [logs / "orchestrator.log", logs / "orchestrator.log.1"]
    assert [f.name for _, f in discover(given)] == ["orchestrator.log.1", "orchestrator.log"]
    dated = tmp_path / "dated"  # logrotate's dateext, the live file given first, by two paths
    dated.mkdir()
    for name in ("trainer.log", "trainer.log-20260102.gz", "trainer.log-20260101"):
        (dated / name).write_text("x\n")
    given = [dated / "trainer.log", tmp_path / "logs" / ".." / "dated" / "trainer.log-20260102.gz", dated]
    order = [f.name for _, f in discover(given)]
    assert order == ["trainer.log-20260101", "trainer.log-20260102.gz", "trainer.log"]


def test_logs_given_out_of_time_order_are_read_in_time_order(tmp_path, analyze):
    """A run resumed at step 5 into new logs: read as given (second_run's logs before first_run's,
    or parts numbered by attempt, trainer.log.1 then its resume trainer.log.2, which logrotate's
    numbering reads newest first), each process's steps 5-14 came before 0-9: a false restart
    (reached 14, resumed 0) and the real one (reached 9, resumed 5) lost. Each process's logs are
    read in the order of their dated lines, and a warning names them; logs that overlap in time (a
    trainer's ranks) and console captures without a date are read as given."""
    first = make_run("healthy", steps=10, seed=3)
    second = make_run("healthy", steps=10, seed=4, first_step=5, start_offset_s=300.0)
    a, b = first.write(tmp_path / "first_run"), second.write(tmp_path / "second_run")
    ordered, _ = analyze([*a.values(), *b.values()], tmp_path / "out_ordered")
    resumed = [(r["process"], r["reached"], r["resumed"], r["redone"]) for r in ordered["restarts"]]
    assert resumed == [("orchestrator", 9, 5, 5), ("trainer", 9, 5, 5)]
    read, md = analyze([tmp_path / "second_run", tmp_path / "first_run"], tmp_path / "out_given")
    assert [(r["process"], r["reached"], r["resumed"], r["redone"]) for r in read["restarts"]] == resumed
    assert read["stats"] == ordered["stats"] and read["stages"] == ordered["stages"]
    assert ordered["parse"]["reordered"] == []
    # each process's files in its places: the orchestrator's first, then the directories' order given
    places = [(a, "orchestrator"), (b, "orchestrator"), (a, "inference"), (a, "trainer"), (b, "inference")]
    assert read["parse"]["files"] == [str(run[name]) for run, name in [*places, (b, "trainer")]]
    trainer = f"trainer: {a['trainer']}, {b['trainer']} (given as {b['trainer']}, {a['trainer']})"
    assert len(read["parse"]["reordered"]) == 3 and read["parse"]["reordered"][2] == trainer
    assert "3 process(es)' logs read in the order of their dated lines, not as given" in md
    # one log's parts named against their times: .1 the first attempt, .2 its resume
    parts = tmp_path / "parts"
    parts.mkdir()
    for name in ("orchestrator", "inference", "trainer"):
        (parts / f"{name}.log.1").write_bytes(a[name].read_bytes())
        with gzip.open(parts / f"{name}.log.2.gz", "wb") as gz:
            gz.write(b[name].read_bytes())
    read, _ = analyze([parts], tmp_path / "out_parts")
    assert [(r["process"], r["reached"], r["resumed"], r["redone"]) for r in read["restarts"]] == resumed
    assert read["stats"] == ordered["stats"] and read["stages"] == ordered["stages"]
    assert read["parse"]["reordered"][2] == (
        f"trainer: {parts / 'trainer.log.1'}, {parts / 'trainer.log.2.gz'} "
        f"(given as {parts / 'trainer.log.2.gz'}, {parts / 'trainer.log.1'})"
    )
    # a trainer's ranks overlap: rank_1 begins first but is read where it was given, after rank_0
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    lines = a["trainer"].read_text().splitlines(keepends=True)
    (ranks / "rank_0.log").write_text("".join(lines[2:]))
    (ranks / "rank_1.log").write_text("".join(line.replace("step.done", "compute.done") for line in lines))
    read, _ = analyze([a["orchestrator"], a["inference"], ranks], tmp_path / "out_ranks")
    assert read["parse"]["reordered"] == [] and read["parse"]["files"][-2:] == [
        str(ranks / "rank_0.log"),
        str(ranks / "rank_1.log"),
    ]
    # console captures without a date keep their places (and their dates)
    shape = Shape(console=True)
    first = make_run("healthy", steps=10, seed=3, shape=shape).write(tmp_path / "c1")
    second = make_run("healthy", steps=10, seed=4, first_step=5, start_offset_s=300.0, shape=shape)
    second = second.write(tmp_path / "c2")
    read, _ = analyze([tmp_path / "c2", tmp_path / "c1"], tmp_path / "out_console")
    assert [(r["process"], r["reached"], r["resumed"], r["redone"]) for r in read["restarts"]] == resumed
    assert read["parse"]["files"][2:5:2] == [str(second["inference"]), str(first["inference"])]
    assert {log: u["how"] for log, u in read["parse"]["undated"].items()} == {
        str(second["inference"]): "overlap",
        str(first["inference"]): "overlap",
    }
    assert [r.split(":")[0] for r in read["parse"]["reordered"]] == ["orchestrator", "trainer"]


def test_a_log_split_into_rotated_parts_reads_as_the_whole_log(tmp_path, analyze):
    files = make_run("healthy", steps=30, seed=5).write(tmp_path / "whole")
    whole, _ = analyze(files.values(), tmp_path / "out_whole")
    lines = files["orchestrator"].read_text().splitlines(keepends=True)
    rotated = tmp_path / "rotated" / "logs"
    rotated.mkdir(parents=True)
    half = len(lines) // 2
    (rotated / "orchestrator.log.1").write_text("".join(lines[:half]))  # older
    (rotated / "orchestrator.log").write_text("".join(lines[half:]))  # newer, the live file
    for name in ("inference", "trainer"):
        (rotated / f"{name}.log").write_bytes(files[name].read_bytes())
    split, md = analyze([rotated.parent, rotated / "trainer.log"], tmp_path / "out_split")
    assert split["restarts"] == [] and "## Restarts" not in md
    assert split["counts"] == whole["counts"] and split["parse"]["tagged"] == whole["parse"]["tagged"]
    assert split["stats"] == whole["stats"]


def test_a_copy_of_a_log_given_beside_it_is_read_once_and_named(tmp_path, analyze):
    """A trainer log and a byte-for-byte copy of it under another name (a capture given explicitly beside
    it), or a rotated part beside its decompressed copy: its lines were read twice, a false trainer restart ("reached 19, resumed 0") and every trainer
    stage doubled (the reviewer's async-0 run: trainer waits 118.8% of the run, the primary's share
    1.188). The copy is left out, named in a warning and in summary.json; the run reads as with one."""
    files = make_run("healthy", steps=20, seed=3).write(tmp_path / "logs")
    once, _ = analyze(files.values(), tmp_path / "out_once")
    copy = tmp_path / "capture" / "trainer_console.log"
    copy.parent.mkdir()
    copy.write_bytes(files["trainer"].read_bytes())
    twice, md = analyze([*files.values(), copy], tmp_path / "out_twice")
    assert twice["restarts"] == [] and "## Restarts" not in md
    assert twice["stages"] == once["stages"] and twice["findings"] == once["findings"]
    assert twice["parse"]["duplicate_files"] == [f"{files['trainer']} and {copy}: the same bytes"]
    assert str(copy) not in twice["parse"]["files"]
    said = "1 file(s) read once, each the same log as another given, their lines not read twice"
    assert f"{said} ({files['trainer']} and {copy}: the same bytes)" in md
    # the same part of a log twice: trainer.log.1 beside the trainer.log.1.gz it was decompressed from
    # (other bytes, the same lines) read as two parts: a false restart, the part's stages twice
    rotated = tmp_path / "rotated"
    rotated.mkdir()
    lines = files["trainer"].read_text().splitlines(keepends=True)
    (rotated / "trainer.log.1").write_text("".join(lines[:50]))
    (rotated / "trainer.log").write_text("".join(lines[50:]))
    with gzip.open(rotated / "trainer.log.1.gz", "wt") as gz:
        gz.write("".join(lines[:50]))
    parts, md = analyze([files["orchestrator"], files["inference"], rotated], tmp_path / "out_parts")
    assert parts["restarts"] == [] and parts["stages"] == once["stages"]
    assert parts["parse"]["duplicate_files"] == [
        f"{rotated / 'trainer.log.1.gz'} and {rotated / 'trainer.log.1'}: the same lines, one of them compressed"
    ]
    # an empty file is no copy of another empty one: nothing to read twice
    (tmp_path / "e1.log").write_text("")
    (tmp_path / "e2.log").write_text("")
    again, _ = analyze([*files.values(), tmp_path / "e1.log", tmp_path / "e2.log"], tmp_path / "out_empty")
    assert again["parse"]["duplicate_files"] == []


def _console_copy(log: Path, copy: Path) -> Path:
    """``log``'s lines as the launcher's console copy of them (``copy``): times of day, no date."""
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text("".join(line[11:] for line in log.read_text().splitlines(keepends=True)))
    return copy


def test_a_console_copy_given_beside_its_process_log_is_not_read_one_given_alone_is(tmp_path, analyze):
    """The launcher writes each process's console output beside its log (logs/orchestrator.stdout.log,
    logs/inference.stdout.log, logs/trainer/stdout.log): the same lines, times of day only. A directory
    leaves them out; given by name (``analyze-logs logs/*.log``, ``logs/trainer/*``) they were read
    as a second log of the process: a false restart ("orchestrator reached 19, resumed 0"),
    generation counted twice (gen_dur_ms 61.5 s in a 34.8 s run, clipped and warned), the trainer's
    compute twice. A copy beside its process's log is left out and named; a console copy with no log
    of its process beside it (the user kept only the console) is that process's log, and is read."""
    files = make_run("healthy", steps=20, seed=3).write(tmp_path / "logs")
    once, _ = analyze(files.values(), tmp_path / "out_once")
    logs = tmp_path / "logs"
    copies = {
        name: _console_copy(files[name], logs / f"{name}.stdout.log")
        for name in ("orchestrator", "inference")
    }
    glob = sorted(logs.glob("*.log"))  # analyze-logs logs/*.log
    read, md = analyze(glob, tmp_path / "out_glob")
    assert read["restarts"] == [] and "## Restarts" not in md
    assert read["stages"] == once["stages"] and read["findings"] == once["findings"]
    assert read["run_seconds"] == once["run_seconds"] and read["counts"] == once["counts"]
    why = "the console copy of the log beside it (the same lines without their dates)"
    assert sorted(read["parse"]["duplicate_files"]) == [
        f"{files[name]} and {copies[name]}: {why}" for name in ("inference", "orchestrator")
    ]
    assert not any("stdout" in f for f in read["parse"]["files"])
    assert "2 file(s) read once, each the same log as another given" in md
    # the trainer's: logs/trainer/stdout.log beside logs/trainer/rank_0.log (analyze-logs logs/trainer/*)
    ranks = tmp_path / "ranks" / "logs"
    rank = ranks / "trainer" / "rank_0.log"
    rank.parent.mkdir(parents=True)
    rank.write_bytes(files["trainer"].read_bytes())
    copy = _console_copy(rank, ranks / "trainer" / "stdout.log")
    read, md = analyze(
        [files["orchestrator"], files["inference"], *sorted(rank.parent.iterdir())], tmp_path / "out_t"
    )
    assert read["restarts"] == [] and read["stages"] == once["stages"] and read["counts"] == once["counts"]
    assert read["parse"]["duplicate_files"] == [f"{rank} and {copy}: {why}"]
    # a console copy alone: the orchestrator's only log, read (its times placed on the others' date)
    alone, md = analyze(
        [copies["orchestrator"], files["inference"], files["trainer"]], tmp_path / "out_alone"
    )
    assert alone["parse"]["duplicate_files"] == [] and str(copies["orchestrator"]) in alone["parse"]["files"]
    assert alone["restarts"] == [] and alone["counts"] == once["counts"]
    assert alone["stages"] == once["stages"] and alone["findings"] == once["findings"]
    # a console copy in another directory than its process's log (another run's console) is read: only
    # its place beside the log says it is the log's copy
    other = _console_copy(files["orchestrator"], tmp_path / "second" / "orchestrator.stdout.log")
    apart, _ = analyze([files["orchestrator"], other], tmp_path / "out_apart")
    assert apart["parse"]["duplicate_files"] == [] and str(other) in apart["parse"]["files"]


def test_two_files_of_one_part_of_a_log_with_other_lines_are_both_read(tmp_path, analyze):
    """Only the same lines are read once: a run's logs compressed in place (gzip *.log) with its
    resume's new logs beside them (orchestrator.log.gz and orchestrator.log: one log's one place, other
    lines), and two jobs' logs linked into one store under one name (job1/trainer.log ->
    store/job1-trainer.log, job2/trainer.log -> store/job2-trainer.log), were read as one file each,
    'the same part ... (one of them compressed)', the second run thrown away. Both are read, the
    compressed one first, and read as the two runs appended to one log are."""
    first = make_run("healthy", steps=10, seed=3)
    second = make_run("healthy", steps=10, seed=4, first_step=10, start_offset_s=300.0)
    whole, _ = analyze(appended(tmp_path / "whole", first, second), tmp_path / "out_whole")
    inplace = tmp_path / "inplace"
    inplace.mkdir()
    for path in appended(tmp_path / "first", first):
        with gzip.open(inplace / f"{path.name}.gz", "wb") as gz:
            gz.write(path.read_bytes())
    for path in appended(tmp_path / "second", second):
        (inplace / path.name).write_bytes(path.read_bytes())
    read, _ = analyze([inplace], tmp_path / "out_inplace")
    assert read["parse"]["duplicate_files"] == [] and len(read["parse"]["files"]) == 6
    assert read["restarts"] == whole["restarts"] and read["stages"] == whole["stages"]
    assert read["run_seconds"] == whole["run_seconds"]
    store = tmp_path / "store"
    store.mkdir()
    linked = []
    for job, run in (("job1", first), ("job2", second)):
        (tmp_path / job).mkdir()
        for path in appended(tmp_path / f"{job}_logs", run):
            target = store / f"{job}-{path.name}"
            target.write_bytes(path.read_bytes())
            (tmp_path / job / path.name).symlink_to(target)
            linked.append(tmp_path / job / path.name)
    read, _ = analyze(linked, tmp_path / "out_linked")
    assert read["parse"]["duplicate_files"] == [] and len(read["parse"]["files"]) == 6
    assert read["counts"] == whole["counts"]


def test_a_launcher_log_under_another_name_adds_no_time_to_the_run(tmp_path, analyze):
    """rl.log keeps every launch's lines (over --clean and failed launches). Under its own name its
    lines are the launcher's and no time of the run; renamed (rl_run2.log, copied off a cluster beside
    other runs' logs) its [launcher] child.exit line of a launch two hours before stretched a healthy
    run to two hours (every share diluted). The launcher's tags alone are no time of the run's
    window, whatever their file is called."""
    files = make_run("healthy", steps=10, seed=3).write(tmp_path / "logs")
    alone, _ = analyze(files.values(), tmp_path / "out_alone")
    earlier = "2026-01-01 10:00:30.000 | INFO    | " + format_tagged(
        "launcher", "child.exit", process="inference", code=1, up_s=32.0
    )
    launcher = tmp_path / "logs" / "rl_run2.log"
    launcher.write_text(earlier + "\n")
    read, _ = analyze([*files.values(), launcher], tmp_path / "out_renamed")
    assert read["run_seconds"] == alone["run_seconds"] and read["stages"] == alone["stages"]
    assert read["counts"]["launcher.child.exit"] == 1


def test_a_compressed_snapshot_of_a_live_log_beside_it_is_not_read(tmp_path, analyze):
    """A ``gzip -c`` snapshot of each live log taken after step 9 (X.log.gz, the beginning of X.log)
    beside the logs: read as the log's first part, then the live file, steps 0-9 twice and a restart
    that redid every step. The snapshot (the beginning of a file of its part) is not read, and named."""
    files = make_run("healthy", steps=20, seed=3).write(tmp_path / "logs")
    alone, _ = analyze(files.values(), tmp_path / "out_alone")
    for path in files.values():
        text = path.read_bytes()
        with gzip.open(path.with_name(path.name + ".gz"), "wb") as gz:
            gz.write(text[: len(text) // 2])
    read, _ = analyze([tmp_path / "logs"], tmp_path / "out_both")
    assert read["restarts"] == [] and read["stages"] == alone["stages"]
    assert sorted(read["parse"]["duplicate_files"]) == sorted(
        f"{p.with_name(p.name + '.gz')}: the beginning of {p} (a snapshot of it), not read"
        for p in files.values()
    )


def test_numbers_too_big_for_their_statistics_leave_valid_json(tmp_path, analyze):
    log = tmp_path / "orchestrator.log"
    log.write_text(
        "".join(
            f"2026-01-01 12:00:{2 * i:02d}.000 | INFO    | [gen] batch.start step={i} inflight=1 target_batch=4\n"
            f"2026-01-01 12:00:{2 * i + 1:02d}.000 | INFO    | [gen] batch.done step={i} completions=4 "
            f"dur_ms={'1e200' if i % 2 else '1e308'} inflight=1\n"
            for i in range(4)
        )
    )
    analyze([log], tmp_path / "out", "--trace")
    summary = _strict_json(tmp_path / "out" / "summary.json")
    assert summary["stats"]["gen_dur_ms"]["count"] == 4
    _strict_json(tmp_path / "out" / "trace.json")


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("queue_ratio=nan", "finite number"),
        ("ckpt_wait_share=inf", "finite number"),
        ("rpc_ms_high=1e999", "finite number"),
        ("gen_share=-5", "must be 0 or more"),
        ("server_min_updates=-1", "must be 0 or more"),
        ("queue_ratio", "'queue_ratio': expected NAME=VALUE"),
    ],
)
def test_a_threshold_that_is_not_a_finite_number_0_or_more_is_refused(tmp_path, capsys, given, said):
    log = make_run("healthy").write(tmp_path / "logs")["orchestrator"]
    with pytest.raises(SystemExit) as exit_:
        analyze_main([str(log), "--out", str(tmp_path / "out"), "--threshold", given])
    assert exit_.value.code == 2 and said in capsys.readouterr().err


def test_the_defaults_the_command_takes_unchecked_pass_the_checks():
    """Without ``--threshold`` the command takes the defaults as they are (``model_construct``: the
    checks' schema is built only for overrides, 40 ms of every start): a default the checks would
    refuse must fail here, and the two must agree field by field."""
    unchecked, checked = Thresholds.model_construct(), Thresholds(**Thresholds.model_construct().__dict__)
    assert unchecked.__dict__ == checked.__dict__ == Thresholds().__dict__
    assert set(checked.__dict__) == set(Thresholds.model_fields)


@pytest.mark.parametrize("content", [b"", b"hello\nworld\n", bytes(range(256)) * 10])
def test_logs_without_a_tagged_line_are_not_called_a_healthy_run(tmp_path, capsys, analyze, content):
    log = tmp_path / "wrong.log"
    log.write_bytes(content)
    summary, md = analyze([log], tmp_path / "out")
    assert "Nothing to analyse: none of the" in md and "is a tagged timing line" in md
    assert "No bottleneck found" not in md and "Nothing to fix" not in md and "no [weights] lines" not in md
    assert "Give the processes' own logs" in md and summary["primary"] is None
    assert "no tagged timing line" in capsys.readouterr().err


def test_compare_finds_both_runs_before_reading_either_and_refuses_trace(tmp_path, capsys):
    run_a = tmp_path / "a"
    make_run("healthy").write(run_a / "logs")
    out = tmp_path / "out"
    with pytest.raises(SystemExit):
        analyze_main(["--compare", str(run_a), str(tmp_path / "missing"), "--out", str(out)])
    assert "no such log file" in capsys.readouterr().err and not out.exists()
    with pytest.raises(SystemExit):
        analyze_main(["--compare", str(run_a), str(run_a), "--out", str(out), "--trace"])
    assert "--trace writes one run's trace" in capsys.readouterr().err and not out.exists()


def test_a_pipe_is_refused_naming_it_not_called_missing(tmp_path, capsys):
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    with pytest.raises(SystemExit) as exit_:
        analyze_main([str(fifo), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"{fifo}: not a regular file (a pipe or a device)" in err


def test_a_logs_control_bytes_and_table_bars_do_not_break_summary_md(tmp_path, analyze):
    log = tmp_path / "orchestrator.log"
    head = "2026-01-01 12:00:0{}.000 | INFO    | "
    log.write_bytes(
        (
            head.format(0)
            + "[weights][t1] client.send url=http://h|x path=/update_weights t=1.0 attempt=1\n"
            + head.format(1)
            + "[weights][t1] client.done url=http://h|x path=/update_weights wall_ms=1000 "
            "rpc_ms=900 server_ms=950 queue_ms=50 attempts=1\n"
            + head.format(2)
            + "[gen][bad\x00id\x1b] batch.done dur_ms=5\n"
        ).encode()
    )
    _, md = analyze([log], tmp_path / "out")
    assert "\x00" not in md and "\x1b" not in md and "\\x00" in md  # the malformed line's example, escaped
    row = next(line for line in md.splitlines() if line.startswith("| http://h"))
    assert row.startswith("| http://h\\|x |") and row.count(" | ") == 8  # nine cells, as in its header
    analyze_main(["--compare", str(log), str(log), "--out", str(tmp_path / "cmp")])
    compare = (tmp_path / "cmp" / "COMPARE.md").read_text()
    row = next(line for line in compare.splitlines() if line.startswith("| http://h"))
    assert row.startswith("| http://h\\|x |") and row.count(" | ") == 4 and "\x00" not in compare
