"""Issue 18 items 3, 4 (the log side) and 5: staleness violations with their steps, restarts split
into segments with redone steps counted once, and logs that end inside a wait."""

from __future__ import annotations

import dataclasses
import math
import statistics
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.synthetic_logs import Shape, appended, make_run

from prime_rl.analysis.hangs import Hang, place_hangs
from prime_rl.analysis.restarts import Restart, Segments
from prime_rl.analysis.tagged import Event, TaggedLines
from prime_rl.tracing import format_tagged


def _appended(tmp_path, first, second):
    """The two runs' logs appended file by file, as `rl --resume` appends to logs/*.log."""
    return appended(tmp_path / "logs", first, second)


def test_a_resumed_run_appended_to_the_same_logs_is_split_and_counted_once(tmp_path, analyze):
    first = make_run("healthy", steps=10, seed=1)  # steps 0..9, then a crash
    second = make_run("healthy", steps=8, seed=2, start_offset_s=600.0, first_step=6)  # resumed at 6: 6..13
    summary, md = analyze(_appended(tmp_path, first, second), tmp_path / "out")
    restarts = {r["process"]: r for r in summary["restarts"]}
    assert set(restarts) == {"orchestrator", "trainer"}
    o = restarts["orchestrator"]
    assert (o["reached"], o["resumed"], o["redone"]) == (9, 6, 4)
    assert o["where"].endswith(
        "orchestrator.log:" + str(1 + _line_of(first.orchestrator, second.orchestrator))
    )
    assert 500 < o["down_s"] < 700
    # one value per step, 0..13: the redone steps 6..9 keep the resumed run's numbers
    assert summary["stats"]["gen_dur_ms"]["count"] == 14
    assert summary["stats"]["train_ms"]["count"] == 14
    assert summary["counts"]["redone.gen_dur_ms"] == 4
    assert (
        "## Restarts" in md
        and "orchestrator restarted at" in md
        and "resumed at step 6; 4 step(s) redone" in md
    )


def _line_of(first: list[str], second: list[str]) -> int:
    """0-based index, in the appended orchestrator log, of the resumed run's first batch.start."""
    return len(first) + next(i for i, x in enumerate(second) if "batch.start" in x)


def test_the_time_between_a_crash_and_its_resume_is_not_run_time(tmp_path, analyze):
    """A checkpoint-I/O run resumed 50 minutes after its crash: the shares of the run are of the
    time it ran (the silence counted as run time made it look healthy, its checkpoint wait 5%)."""
    first = make_run("checkpoint_io", steps=20)
    second = make_run("checkpoint_io", steps=15, first_step=12, start_offset_s=3000.0, seed=1)
    summary, md = analyze(_appended(tmp_path, first, second), tmp_path / "out")
    assert summary["primary"]["kind"] == "checkpoint_io", summary["findings"]
    assert 2800 < summary["down_seconds"] < 3000 and summary["run_seconds"] < 400
    assert f"leaves out the {summary['down_seconds']:.0f} s in which no process ran" in md


def _restart(process: str, ts: float, down_s: float) -> Restart:
    return Restart(process, f"{process}.log:1", ts, 9, 5, down_s)


def test_down_time_is_where_every_process_was_silent_at_once():
    both = Segments()
    both._reached = {"orchestrator": 9, "trainer": 9}
    both.restarts = [_restart("orchestrator", 1000.0, 500.0), _restart("trainer", 1010.0, 490.0)]
    assert both.down_seconds() == 480.0  # [520, 1000]: the overlap of [500, 1000] and [520, 1010]
    alone = Segments()  # the trainer restarted while the orchestrator went on waiting for it
    alone._reached = {"orchestrator": 9, "trainer": 9}
    alone.restarts = [_restart("trainer", 1000.0, 500.0)]
    assert alone.down_seconds() == 0.0
    apart = Segments()  # both restarted, at different times: never down together
    apart._reached = {"orchestrator": 9, "trainer": 9}
    apart.restarts = [_restart("orchestrator", 1000.0, 100.0), _restart("trainer", 2000.0, 100.0)]
    assert apart.down_seconds() == 0.0
    only = Segments()  # only the orchestrator's log was given
    only._reached = {"orchestrator": 9}
    only.restarts = [_restart("orchestrator", 1000.0, 300.0), _restart("orchestrator", 5000.0, 200.0)]
    assert only.down_seconds() == 500.0 and Segments().down_seconds() == 0.0


def test_a_log_that_ends_inside_a_checkpoint_wait_names_the_stall(tmp_path, analyze):
    run = make_run("healthy", steps=12, seed=4)
    # the trainer dies after writing weights for step 6; the orchestrator waits for step 9's
    cut = next(i for i, x in enumerate(run.trainer) if "write.done step=7" in x)
    run.trainer = run.trainer[:cut]
    wait = next(i for i, x in enumerate(run.orchestrator) if "wait.start target_step=9" in x)
    run.orchestrator = run.orchestrator[: wait + 1]
    run.orchestrator.append(_stamp(run.orchestrator[-1], 40.0) + "still waiting")  # past stall_min_s
    summary, md = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    p = summary["primary"]
    assert p["kind"] == "stall", summary["findings"]
    assert p["title"] == "Stall: the orchestrator waits for weights step 9, which the trainer never wrote"
    assert f"orchestrator.log:{wait + 1}" in p["evidence"]
    assert "the trainer's last line" in p["evidence"] and run.trainer[-1][-60:] in p["evidence"]
    assert "the last weights it wrote: step 6" in p["evidence"]
    assert md.startswith("# Bottleneck analysis\n\n**Primary bottleneck: Stall:")


def test_an_update_without_an_answer_is_a_stall(tmp_path, analyze):
    run = make_run("healthy", steps=8, seed=4)
    send = max(i for i, x in enumerate(run.orchestrator) if "client.send" in x)
    run.orchestrator = run.orchestrator[: send + 1]
    tid = run.orchestrator[-1].split("[weights][")[1].split("]")[0]
    run.inference = [x for x in run.inference if not (tid in x and "rpc.done" in x)]
    run.inference.append("2026-01-01 12:30:00.000 | INFO    | engine still loading")  # half an hour later
    run.trainer = []
    summary, _ = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    p = summary["primary"]
    assert p["kind"] == "stall" and tid in p["title"] and "http://h:8000" in p["title"]
    assert "the server received it and its rpc never finished" in p["evidence"]


def test_a_run_cut_while_healthy_is_no_stall(tmp_path, analyze):
    run = make_run("healthy", steps=8, seed=4)
    summary, _ = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    assert summary["primary"] is None


def test_every_staleness_violation_is_listed_with_its_step(tmp_path, analyze):
    log = tmp_path / "orchestrator.log"
    lines = []
    for step in range(40):
        s = 3 if step % 2 else 1  # 20 steps above async_level 1, more than the warning lists
        line = format_tagged(
            "rollout", None, trunc_pct=0.0, current_step=step, ckpt_step=step - s, staleness=s
        )
        lines.append(f"2026-01-01 12:00:{step:02d}.000 | INFO    | {line}")
    lines.append(
        "2026-01-01 12:00:50.000 | INFO    | "
        + format_tagged("rollout", None, trunc_pct=0.0, current_step=1, ckpt_step=1, staleness=0)
    )
    log.write_text("\n".join(lines) + "\n")
    summary, md = analyze([log], tmp_path / "out", "--async_level", "1")
    bad = [v["step"] for v in summary["staleness"]["violations"]]
    # step 1 was redone with staleness 0 (the histogram takes that line), but its first run violated
    assert bad == list(range(1, 40, 2))
    assert "Above async_level: steps " + ", ".join(map(str, bad)) + "." in md
    assert summary["staleness"]["histogram"] == {"0": 1, "1": 20, "3": 19}


# --- restarts found column-wise are the ones the line-by-line fold found -----------------------


class _LineByLine(Segments):
    """The fold before it was column-wise (the oracle): each step line in turn; the steps each
    segment logged kept as sets."""

    def __init__(self) -> None:
        super().__init__()
        self.logged: dict[str, list[tuple[int | None, set[int]]]] = {}
        """By process, each segment's restart (its index; None: the first) and the steps it logged."""

    def finish(self) -> None:
        for segments in self.logged.values():
            for n, (k, steps) in enumerate(segments):
                if k is not None:
                    earlier = set().union(*(s for _, s in segments[:n]))
                    self.restarts[k] = dataclasses.replace(self.restarts[k], redone=len(steps & earlier))

    def observe(self, lines: TaggedLines) -> list[int]:
        source = lines.source
        rows, longest, starts, _, _ = self._step_lines(lines, source)  # the orchestrator: no wait reopened
        longest = longest.tolist()
        steps = lines.rows_text(rows, "step")
        out = []
        for k, i in enumerate(rows.tolist()):
            gap = max(self._gap.pop(source, -np.inf), longest[k])
            raw = steps[k] or ""
            if not (raw.isascii() and raw.isdigit() and len(raw) <= 8):  # the old isdigit() took "²"
                self._gap[source] = gap
                continue
            step, reached = int(raw), self._reached.get(source)
            # a run.start: a restart after any line of its own; the next step line goes on from it
            self._reached[source] = step - 1 if starts[k] else step
            segments = self.logged.setdefault(source, [(None, set())])
            if reached is None or (not starts[k] and step > reached):
                if not starts[k]:
                    segments[-1][1].add(step)
                continue
            segments.append((len(self.restarts), set() if starts[k] else {step}))
            ev = lines.event(i)
            self.restarts.append(
                Restart(source, ev.where(), ev.ts, reached, step, gap if gap > -np.inf else None)
            )
            out.append(i)
        if longest[-1] > -np.inf:
            self._gap[source] = max(self._gap.get(source, -np.inf), longest[-1])
        return out


STEP_LINE = st.tuples(
    st.sampled_from(["batch.start", "batch.done", "request.retry", "run.start"]),
    st.one_of(
        st.none(), st.sampled_from(["0", "1", "2", "3", "5", "9", "", "x", "²", "-1", "+2", "123456789"])
    ),
    st.one_of(st.none(), st.floats(0, 100)),
)


@settings(max_examples=300, deadline=None)
@given(batches=st.lists(st.lists(STEP_LINE, max_size=8), max_size=5))
def test_restarts_found_column_wise_are_the_line_by_line_fold_s(batches):
    """Where the step goes back, when, after how long a silence (carried across batches, over step
    lines without a step), the steps redone: the same restarts and rows as the line-by-line fold,
    whatever the steps (digits, none, signs, words, other scripts' digits: no crash)."""
    new, old = Segments(), _LineByLine()
    for n, rows in enumerate(batches):
        events = [
            Event("gen", e, None, {} if step is None else {"step": step}, ts, "orchestrator", line=n * 10 + i)
            for i, (e, step, ts) in enumerate(rows)
        ]
        if events:
            lines = TaggedLines.from_events(events)
            assert new.observe(lines) == old.observe(lines)
    new.finish()
    old.finish()
    assert new.restarts == old.restarts and new._reached == old._reached
    assert {k: v for k, v in new._gap.items() if v > -np.inf} == {
        k: v for k, v in old._gap.items() if v > -np.inf
    }


def test_a_step_in_another_script_s_digits_is_no_step_and_no_crash(tmp_path, analyze):
    """``step=²`` passes str.isdigit() but is no number: it was a crash (ValueError) of the whole report."""
    log = tmp_path / "orchestrator.log"
    lines = [
        f"2026-01-01 12:00:0{i}.000 | INFO    | " + format_tagged("gen", "batch.start", step=s)
        for i, s in enumerate(["1", "²", "0"])
    ]
    log.write_text("\n".join(lines) + "\n")
    summary, _ = analyze([log], tmp_path / "out")
    assert [(r["reached"], r["resumed"]) for r in summary["restarts"]] == [(1, 0)]


def _stamp(line: str, dt: float) -> str:
    """A loguru file prefix ``dt`` seconds after ``line``'s."""
    from datetime import datetime, timedelta

    t = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f") + timedelta(seconds=dt)
    return t.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " | INFO    | "


def test_an_update_left_unanswered_by_a_crash_is_no_stall_once_the_run_resumed(tmp_path, analyze):
    """The update in flight when the orchestrator died is over: the resumed run finished (it was the
    primary 'stall', 604 s to the end of the logs, before)."""
    first = make_run("healthy", steps=10, seed=1)
    last = first.orchestrator[-1]
    first.orchestrator.append(
        _stamp(last, 0.1)
        + format_tagged(
            "weights", "client.send", "deadbeef", url="http://h:8000", path="/update_weights", t=2e3
        )
    )
    first.inference.append(
        _stamp(last, 0.2) + format_tagged("weights", "server.recv", "deadbeef", path="/update_weights", t=2e3)
    )
    second = make_run("healthy", steps=12, seed=2, start_offset_s=600.0, first_step=8)
    summary, _ = analyze(_appended(tmp_path, first, second), tmp_path / "out")
    assert [r["process"] for r in summary["restarts"]] == ["orchestrator", "trainer"]
    assert not any(f["kind"] == "stall" for f in summary["findings"]), summary["findings"]


def test_logs_read_inside_an_ordinary_wait_are_no_stall_and_a_long_one_is(tmp_path, analyze):
    """Logs copied while the run goes on end inside a wait, the other side at work and silent since
    before it: no stall (it was one, 'stall_min_s' crossed at 0 s). The same wait 3x its median and
    stall_min_s long is one, and its share is of the run (it was a thousandth of it)."""
    run = make_run("trainer_bound", steps=12, seed=4)
    wait = next(i for i, x in enumerate(run.orchestrator) if "wait.start target_step=9" in x)
    run.orchestrator = run.orchestrator[: wait + 1]
    since = run.orchestrator[-1]
    run.trainer = [x for x in run.trainer if x[:23] < since[:23]]  # the trainer computes, silent
    # read 8 s into the wait, the orchestrator still logging (its scrapes of the servers)
    run.orchestrator.append(_stamp(since, 8.0) + "GET /metrics 200")
    summary, _ = analyze(run.write(tmp_path / "live").values(), tmp_path / "out")
    assert not any(f["kind"] == "stall" for f in summary["findings"]), summary["findings"]
    run.orchestrator.append(_stamp(since, 600.0) + "still waiting")  # ten minutes later
    summary, _ = analyze(run.write(tmp_path / "dead").values(), tmp_path / "out2")
    stall = summary["primary"]
    assert stall["kind"] == "stall" and "600 s to the end of the logs" in stall["evidence"]
    assert stall["share"] > 0.5


def test_a_stalled_update_quotes_its_own_server_s_last_line(tmp_path, analyze):
    """Two servers: the one that never answered is quoted, not the one still logging health checks."""
    from tests.support.synthetic_logs import Shape

    run = make_run("healthy", steps=8, seed=4, shape=Shape(servers=2))
    files = run.write(tmp_path / "logs")
    send = max(i for i, x in enumerate(run.orchestrator) if "client.send" in x and "http://h1:8000" in x)
    tid = run.orchestrator[send].split("[weights][")[1].split("]")[0]
    orchestrator = [x for x in run.orchestrator if not (tid in x and "client.done" in x and "h1:8000" in x)]
    files["orchestrator"].write_text("\n".join(orchestrator) + "\n")
    h1 = next(p for p in files.values() if p.name != "inference.log" and "inference" in p.name)
    server = [x for x in h1.read_text().splitlines() if not (tid in x and "rpc.done" in x)]
    h1.write_text("\n".join(server) + "\n")
    healthy = tmp_path / "logs" / "inference.log"
    healthy.write_text(healthy.read_text() + _stamp(orchestrator[-1], 600.0) + "GET /health 200\n")
    summary, _ = analyze(files.values(), tmp_path / "out")
    stall = summary["primary"]
    assert stall["kind"] == "stall" and "http://h1:8000" in stall["title"], summary["findings"]
    assert server[-1][-50:] in stall["evidence"] and "GET /health" not in stall["evidence"]


def test_a_wait_for_weights_the_trainer_wrote_says_the_orchestrator_does_not_see_them(tmp_path, analyze):
    run = make_run("healthy", steps=12, seed=4)
    wait = next(i for i, x in enumerate(run.orchestrator) if "wait.start target_step=9" in x)
    run.orchestrator = run.orchestrator[: wait + 1]
    run.trainer.append(_stamp(run.orchestrator[-1], 600.0) + "waiting for rollouts")
    summary, _ = analyze(run.write(tmp_path / "logs").values(), tmp_path / "out")
    stall = summary["primary"]
    assert (
        stall["kind"] == "stall"
        and "which the trainer wrote; the orchestrator does not see it" in stall["title"]
    )


def test_the_watchdog_s_hang_line_in_the_launcher_s_log_is_read_from_the_run_directory(tmp_path, analyze):
    """The launcher writes [hang] detected into logs/rl.log, which the analysis of a run directory
    left out with the console copies: the documented hang finding never showed."""
    from loguru import logger

    from prime_rl.launcher.supervise import _report_hang
    from prime_rl.launcher.watchdog import Hang, Wait
    from prime_rl.logging import LOG_FORMAT

    run = make_run("healthy", steps=12, seed=4)
    logs = tmp_path / "run" / "logs"
    for name in ("orchestrator", "inference", "trainer"):
        (logs / f"{name}.log").parent.mkdir(parents=True, exist_ok=True)
        (logs / f"{name}.log").write_text("\n".join(getattr(run, name)) + "\n")
    sink = logger.add(logs / "rl.log", level="INFO", format=LOG_FORMAT)
    try:
        wait = Wait("orchestrator", "trainer", "weights/step_9", 0.0)
        _report_hang(Hang(130.0, 120.0, 1.6, (wait,), ()), [], stacks=False)
    finally:
        logger.remove(sink)
    summary, _ = analyze([tmp_path / "run"], tmp_path / "out")
    assert str(logs / "rl.log") in summary["parse"]["files"]
    hang = summary["primary"]
    assert hang["kind"] == "hang" and "orchestrator>trainer:weights/step_9" in hang["evidence"]


def test_a_resume_at_the_step_after_the_last_one_logged_is_a_restart_by_its_run_start_lines(
    tmp_path, analyze
):
    """The crash fell between a checkpoint and the next step's line: the resumed run goes on at the
    next step, no step goes back, and the 50 minutes down counted as run time ('no bottleneck
    found' for a checkpoint-I/O run). The processes' run.start lines mark the restart."""
    first = make_run("checkpoint_io", steps=20)
    second = make_run("checkpoint_io", steps=15, first_step=20, start_offset_s=3000.0, seed=1)
    for name, tag in (("orchestrator", "gen"), ("trainer", "train")):
        lines = getattr(second, name)
        start = _stamp(lines[0], -1.0) + format_tagged(tag, "run.start", step=20, resume=True)
        setattr(second, name, [start, *lines])
    summary, md = analyze(_appended(tmp_path, first, second), tmp_path / "out")
    restarts = {r["process"]: r for r in summary["restarts"]}
    assert set(restarts) == {"orchestrator", "trainer"}
    assert (restarts["orchestrator"]["reached"], restarts["orchestrator"]["resumed"]) == (19, 20)
    assert restarts["orchestrator"]["redone"] == 0
    assert summary["primary"]["kind"] == "checkpoint_io", summary["findings"]
    assert summary["down_seconds"] > 2500 and summary["run_seconds"] < 600


def test_a_process_s_run_start_line_is_no_time_of_the_run(tmp_path, analyze):
    """The trainer starts (and logs run.start, then wait.start for its first rollouts) while the
    servers load, a minute before any step: the run's length and shares are the same as without the
    lines (make demo's verdict went from trainer-bound to 'no bottleneck found' with each)."""
    run = make_run("trainer_bound", steps=10, seed=2)
    expected, _ = analyze(run.write(tmp_path / "plain").values(), tmp_path / "a")
    first = run.trainer[0]
    run.trainer[0:0] = [
        _stamp(first, -60.0) + format_tagged("train", "run.start", step=0, resume=False),
        _stamp(first, -59.9) + format_tagged("train", "wait.start", step=0),
        _stamp(first, -1.0) + format_tagged("train", "wait.done", step=0, wait_ms=58900.0),
    ]
    run.orchestrator.insert(
        0, _stamp(run.orchestrator[0], -30.0) + format_tagged("gen", "run.start", step=0, resume=False)
    )
    summary, _ = analyze(run.write(tmp_path / "started").values(), tmp_path / "b")
    assert summary["run_seconds"] == expected["run_seconds"] and summary["restarts"] == []
    assert summary["primary"]["kind"] == expected["primary"]["kind"] == "trainer_bound"


def test_a_staleness_violation_before_a_restart_is_still_listed(tmp_path, analyze):
    """Step 4 ran 3 steps ahead of its weights (async_level 1), then the run crashed and redid steps
    2..: the redone step's line replaced the violation, and a barrier defect vanished from the report."""
    import re as _re

    first = make_run("healthy", steps=8, seed=1)
    first.orchestrator = [
        _re.sub(r"staleness=\d+", "staleness=3", x) if "[rollout]" in x and "current_step=4 " in x else x
        for x in first.orchestrator
    ]
    assert any("current_step=4 " in x and "staleness=3" in x for x in first.orchestrator)
    second = make_run("healthy", steps=8, seed=2, start_offset_s=600.0, first_step=2)
    summary, _ = analyze(_appended(tmp_path, first, second), tmp_path / "out", "--async-level", "1")
    assert {"step": 4, "staleness": 3} in summary["staleness"]["violations"]


def test_a_hang_of_an_earlier_run_in_the_launcher_s_log_is_not_this_run_s(tmp_path, analyze):
    """rl.log keeps its history over --clean: a [hang] line of a run a day before was this run's
    primary finding, and began its run a day early."""
    run = make_run("trainer_bound", steps=10, seed=2)
    files = run.write(tmp_path / "run" / "logs")
    expected, _ = analyze(files.values(), tmp_path / "a")
    old = format_tagged(
        "hang", "detected", silent_s=130.0, threshold_s=120.0, median_step_s=1.0, waits="none"
    )
    (tmp_path / "run" / "logs" / "rl.log").write_text(
        f"{_stamp(run.orchestrator[0], -86400.0)}{old}\n{_stamp(run.orchestrator[0], -1.0)}started the processes\n"
    )
    summary, _ = analyze([tmp_path / "run"], tmp_path / "b")
    assert not any(f["kind"] == "hang" for f in summary["findings"]), summary["findings"]
    assert summary["run_seconds"] == expected["run_seconds"]
    assert summary["primary"]["kind"] == expected["primary"]["kind"] == "trainer_bound"


def test_a_resume_that_crashed_right_after_its_run_start_keeps_the_run_s_length(tmp_path, analyze):
    """The resumed processes logged run.start and nothing more: the run's end left out their lines
    while the down time ran up to them, and the run had no length ('no bottleneck found')."""
    first = make_run("trainer_bound", steps=10, seed=2)
    expected, _ = analyze(first.write(tmp_path / "first").values(), tmp_path / "a")
    for name, tag in (("orchestrator", "gen"), ("trainer", "train")):
        lines = getattr(first, name)
        lines.append(_stamp(lines[-1], 600.0) + format_tagged(tag, "run.start", step=9, resume=True))
    summary, _ = analyze(first.write(tmp_path / "resumed").values(), tmp_path / "b")
    assert [r["process"] for r in summary["restarts"]] == ["orchestrator", "trainer"]
    assert summary["run_seconds"] == pytest.approx(expected["run_seconds"], abs=1.0)
    assert summary["primary"]["kind"] == "trainer_bound"


def test_a_hang_while_the_servers_load_and_one_in_rl_log_alone_are_kept(tmp_path, analyze):
    """A hang after the processes' run.start lines but before their first step (the servers still
    loading) was dropped with the earlier runs' hangs, and so was every hang of rl.log analysed alone."""
    hang = format_tagged(
        "hang", "detected", silent_s=1800.0, threshold_s=1800.0, median_step_s="unknown", waits="none"
    )
    logs = tmp_path / "run" / "logs"
    logs.mkdir(parents=True)
    t0 = "2026-01-01 12:00:00.000 | INFO    | "
    (logs / "orchestrator.log").write_text(
        t0 + format_tagged("gen", "run.start", step=0, resume=False) + "\n"
    )
    (logs / "rl.log").write_text(f"{_stamp(t0, 1800.0)}{hang}\n")
    summary, _ = analyze([tmp_path / "run"], tmp_path / "a")
    assert summary["primary"]["kind"] == "hang", summary["findings"]
    summary, _ = analyze([logs / "rl.log"], tmp_path / "b")
    assert summary["primary"]["kind"] == "hang", summary["findings"]


def test_a_trainer_waiting_for_rollouts_the_orchestrator_died_writing_is_a_stall(tmp_path, analyze):
    """The orchestrator died between batches (a full disk writing step 9's rollouts): no batch was
    open, and the trainer's ten minutes of waiting read 'no bottleneck found'. Its wait.start line,
    open where its log ends, tells the wait from a long compute (whose wait.done came)."""
    run = make_run("healthy", steps=10, seed=4)
    run.trainer = [x for x in run.trainer if "step=9 " not in x and not x.endswith("step=9")]
    last = run.orchestrator[-1]
    run.orchestrator += [
        _stamp(last, 0.1).replace("INFO   ", "ERROR  ")
        + "orchestrator failed: OSError: [Errno 28] No space left",
        "Traceback (most recent call last):",
        "OSError: [Errno 28] No space left on device",
    ]
    run.trainer.append(_stamp(run.trainer[-1], 0.01) + format_tagged("train", "wait.start", step=9))
    run.trainer.append(_stamp(last, 600.0) + "step 9: still waiting for rollouts/step_9/rank_0.safetensors")
    summary, _ = analyze(run.write(tmp_path / "dead").values(), tmp_path / "out")
    stall = summary["primary"]
    assert stall["kind"] == "stall", summary["findings"]
    assert (
        stall["title"]
        == "Stall: the trainer waits for the rollouts of step 9, which the orchestrator never wrote"
    )
    assert "No space left on device" in stall["evidence"]
    # the same trainer 600 s into computing step 9: its wait is over (wait.done), no stall
    run.trainer.insert(
        -1, _stamp(run.trainer[-2], 0.5) + format_tagged("train", "wait.done", step=9, wait_ms=500.0)
    )
    summary, _ = analyze(run.write(tmp_path / "computing").values(), tmp_path / "out2")
    assert not any(f["kind"] == "stall" for f in summary["findings"]), summary["findings"]


def _orchestrator_log(path, segments: list[tuple[int | None, list[int]]]):
    """An orchestrator log of ``segments``: each (the step of a ``run.start`` line before it, or None
    for none; the steps it logs, one batch.start and batch.done each), one second a line."""
    lines = []
    for start, steps in segments:
        tagged = [] if start is None else [format_tagged("gen", "run.start", step=start, resume=True)]
        for step in steps:
            tagged.append(format_tagged("gen", "batch.start", step=step, inflight=64, target_batch=256))
            tagged.append(format_tagged("gen", "batch.done", step=step, completions=256, dur_ms=1000.0))
        lines += tagged
    stamped = [f"2026-01-01 12:{i // 60:02d}:{i % 60:02d}.000 | INFO    | {x}" for i, x in enumerate(lines)]
    path.write_text("\n".join(stamped) + "\n")
    return path


def test_the_steps_redone_are_those_logged_again_not_every_step_up_to_the_one_reached(tmp_path, analyze):
    """Steps 5..7 were never logged (their lines lost), then a resume at 3 that crashed after step 6,
    then a resume at 5 that went on to 12: the first redid 3 and 4 (not 3..9: 7), the second 5, 6, 8
    and 9 (not 5..6: 2). Each counts the steps of its run that an earlier run had logged."""
    log = _orchestrator_log(
        tmp_path / "orchestrator.log",
        [(None, [0, 1, 2, 3, 4, 8, 9]), (None, [3, 4, 5, 6]), (5, list(range(5, 13)))],
    )
    summary, md = analyze([log], tmp_path / "out")
    found = [(r["reached"], r["resumed"], r["redone"]) for r in summary["restarts"]]
    assert found == [(9, 3, 2), (6, 5, 4)]
    assert summary["counts"]["redone.gen_dur_ms"] == 2 + 4  # the per-step series agree
    assert "resumed at step 3; 2 step(s) redone" in md and "resumed at step 5; 4 step(s) redone" in md


def _rollout_log(path, runs: list[tuple[int | None, list[tuple[int, int]]]]):
    """An orchestrator log of ``runs``: each its run.start's async_level (None: a run.start without
    one, as before the field) and its (step, staleness) [rollout] lines, one second a line."""
    lines = []
    for level, pairs in runs:
        fields = {} if level is None else {"async_level": level}
        lines.append(format_tagged("gen", "run.start", step=pairs[0][0], resume=bool(lines), **fields))
        lines += [
            format_tagged("rollout", None, trunc_pct=0.0, current_step=s, ckpt_step=s - v, staleness=v)
            for s, v in pairs
        ]
    stamped = [f"2026-01-01 12:{i // 60:02d}:{i % 60:02d}.000 | INFO    | {x}" for i, x in enumerate(lines)]
    path.write_text("\n".join(stamped) + "\n")
    return path


def test_each_run_s_staleness_is_judged_by_the_async_level_it_ran_with(tmp_path, analyze):
    """The first run had async_level 2 (staleness 2: legal), the resume async_level 1: the config's 1
    listed the first run's steps 2..5 as violations. Step 7 at 2 in the second run is one; a run.start
    without async_level (an older orchestrator) falls back to the given level."""
    log = _rollout_log(
        tmp_path / "orchestrator.log",
        [
            (2, [(0, 0), (1, 1), (2, 2), (3, 2), (4, 2), (5, 2)]),
            (1, [(4, 1), (5, 1), (6, 1), (7, 2), (8, 1)]),
        ],
    )
    summary, md = analyze([log], tmp_path / "out", "--async-level", "1")
    assert summary["staleness"]["violations"] == [{"step": 7, "staleness": 2}]
    assert summary["staleness"]["async_levels"] == [2, 1]
    assert "async_level 2, then 1 (each run's own" in md and "Above async_level: steps 7." in md
    assert summary["async_level"] == 1  # the level given
    old = _rollout_log(tmp_path / "old.log", [(None, [(0, 0), (1, 1), (2, 2)]), (2, [(2, 2), (3, 3)])])
    summary, md = analyze([old], tmp_path / "out2", "--async-level", "1")
    assert summary["staleness"]["violations"] == [{"step": 2, "staleness": 2}, {"step": 3, "staleness": 3}]
    assert summary["staleness"]["async_levels"] == [1, 2]
    single = _rollout_log(tmp_path / "single.log", [(1, [(0, 0), (1, 1), (2, 2)])])
    summary, md = analyze([single], tmp_path / "out3")  # no level given: the run.start's
    assert summary["staleness"]["violations"] == [{"step": 2, "staleness": 2}]
    assert "async_level 1; steps per staleness" in md and "Above async_level: steps 2." in md


def _hung_and_resumed(tmp_path, after: bool = False):
    """A run that hung at step 9 (the watchdog's [hang] line 130 s after the orchestrator's last
    line), was killed and resumed at step 6 ten minutes later (each process's run.start line), and
    finished; ``after``: a second hang, of the resumed run, at its end. rl.log holds an earlier
    run's hang too, a day before."""
    first = make_run("healthy", steps=10, seed=1)
    second = make_run("healthy", steps=8, seed=2, start_offset_s=600.0, first_step=6)
    for name, tag in (("orchestrator", "gen"), ("trainer", "train")):
        lines = getattr(second, name)
        lines.insert(0, _stamp(lines[0], -1.0) + format_tagged(tag, "run.start", step=6, resume=True))
    paths = _appended(tmp_path, first, second)
    hang = lambda waits: format_tagged(  # noqa: E731
        "hang", "detected", silent_s=130.0, threshold_s=120.0, median_step_s=1.5, waits=waits
    )
    lines = [
        _stamp(first.orchestrator[0], -86400.0) + hang("none"),
        _stamp(first.orchestrator[-1], 130.0) + hang("orchestrator>trainer:weights/step_9"),
    ]
    if after:
        lines.append(_stamp(second.orchestrator[-1], 130.0) + hang("trainer>orchestrator:rollouts/step_13"))
    (tmp_path / "logs" / "rl.log").write_text("\n".join(lines) + "\n")
    return [*paths, tmp_path / "logs" / "rl.log"], first


def test_a_hang_before_the_last_restart_is_listed_beside_the_restart_and_is_no_finding(tmp_path, analyze):
    """The run hung, was killed and resumed, and finished: the hang before the restart was dropped
    with the earlier runs' and left no trace. It is listed beside the restart it preceded (not a
    finding: the resumed run finished); an earlier run's hang (a day before) is not."""
    from datetime import datetime, timedelta

    paths, first = _hung_and_resumed(tmp_path)
    summary, md = analyze(paths, tmp_path / "out")
    assert not any(f["kind"] == "hang" for f in summary["findings"]), summary["findings"]
    restarts = {r["process"]: r for r in summary["restarts"]}
    hung_at = datetime.strptime(first.orchestrator[-1][:23], "%Y-%m-%d %H:%M:%S.%f") + timedelta(seconds=130)
    said = "no progress for 130 s (threshold 120 s, median step 1.5 s); waits: orchestrator>trainer:weights/step_9"
    assert restarts["orchestrator"]["hangs_before"] == [
        {"ts": hung_at.timestamp(), "where": f"{tmp_path / 'logs' / 'rl.log'}:2", "said": said}
    ]
    assert restarts["trainer"]["hangs_before"] == []
    section = md.split("## Restarts", 1)[1].split("\n## ", 1)[0]
    assert (
        f"  - before it, the launcher's watchdog saw a hang at {hung_at:%Y-%m-%d %H:%M:%S} "
        f"({tmp_path / 'logs' / 'rl.log'}:2): {said}." in section
    )
    assert section.count("watchdog saw a hang") == 1  # the day-old hang is another run's


def _hang(n: int, earliest: float, latest: float | None = None, segment: int | None = None) -> Hang:
    """The hang on line ``n`` of rl.log: at ``earliest`` (a line with a time), or with none between
    ``earliest`` and ``latest``; ``segment``: with none, in the orchestrator's log."""
    ts = earliest if latest is None else None
    ev = Event("hang", "detected", None, {"waits": "a>b:c"}, ts, "rl", Path("rl.log"), n)
    return Hang(ev, earliest, earliest if latest is None else latest, segment)


def test_each_hang_is_kept_by_the_first_restart_of_the_orchestrator_after_it():
    restarts = [_restart("orchestrator", 1000.0, 10.0), _restart("trainer", 1500.0, 10.0)]
    restarts.append(_restart("orchestrator", 2000.0, 10.0))
    out = place_hangs(restarts, [_hang(3, 1600.0), _hang(1, 900.0), _hang(2, 950.0), _hang(4, 2100.0)], 0.0)
    assert [[h.where for h in r.hangs_before] for r in out.restarts] == [
        ["rl.log:1", "rl.log:2"],
        [],
        ["rl.log:3"],
    ]
    assert (
        out.restarts[0].hangs_before[0].said
        == "no progress for ? s (threshold ? s, median step ? s); waits: a>b:c"
    )
    assert [h.where() for h in out.current] == ["rl.log:4"] and out.unplaced == []


def test_a_hang_with_no_time_is_placed_by_the_lines_around_it_or_not_at_all():
    """A [hang] line with no time was this run's (the last restart's) wherever it lay. It goes by the
    times of the lines around it in its file when no restart of the orchestrator lies between them,
    by its segment when it is in the orchestrator's log (its position there), and is placed nowhere
    when a restart may lie before or after it; one whose next line is before the run's start is an
    earlier run's."""
    restarts = [_restart("orchestrator", 1000.0, 10.0), _restart("trainer", 1500.0, 10.0)]
    restarts.append(_restart("orchestrator", 2000.0, 10.0))
    out = place_hangs(
        restarts,
        [
            _hang(1, 900.0, 950.0),  # before the first restart
            _hang(2, 1100.0, 1900.0),  # between the two (the trainer's restart is no matter)
            _hang(3, 2100.0, math.inf),  # after the last: this run's
            _hang(4, 1900.0, 2100.0),  # the last restart may lie before or after it
            _hang(5, -math.inf, math.inf),  # nothing around it with a time
            _hang(6, -math.inf, 10.0),  # an earlier run's (the run starts at 500)
            _hang(7, -math.inf, math.inf, segment=1),  # in the orchestrator's log, after its first restart
            _hang(8, -math.inf, math.inf, segment=2),  # after its last
        ],
        500.0,
    )
    assert [[(h.ts, h.where) for h in r.hangs_before] for r in out.restarts] == [
        [(None, "rl.log:1")],
        [],
        [(None, "rl.log:7"), (None, "rl.log:2")],
    ]
    assert [h.where() for h in out.current] == ["rl.log:3", "rl.log:8"]
    assert [h.where() for h in out.unplaced] == ["rl.log:4", "rl.log:5"]
    # without any process's time (rl.log alone) every hang but one placed in the orchestrator's log is this run's
    alone = place_hangs(
        restarts, [_hang(5, -math.inf, math.inf), _hang(7, -math.inf, math.inf, segment=1)], None
    )
    assert [h.where() for h in alone.current] == ["rl.log:5"] and alone.unplaced == []


def test_a_hang_after_the_last_restart_is_still_the_finding(tmp_path, analyze):
    paths, _ = _hung_and_resumed(tmp_path, after=True)
    summary, md = analyze(paths, tmp_path / "out")
    hang = summary["primary"]
    assert hang["kind"] == "hang", summary["findings"]
    assert (
        hang["evidence"].startswith("1 time(s)")
        and "trainer>orchestrator:rollouts/step_13" in hang["evidence"]
    )
    restarts = {r["process"]: r for r in summary["restarts"]}
    assert [h["where"].rsplit(":", 1)[1] for h in restarts["orchestrator"]["hangs_before"]] == ["2"]


def test_a_hang_line_with_no_time_before_a_restart_is_no_finding_of_the_resumed_run(tmp_path, analyze):
    """The run hung at step 9, was killed and resumed, and finished; the watchdog's [hang] line has no
    time (a console capture, a time that could not be read). It was this run's hang, the primary
    finding, wherever it lay. Now: between a day-old hang and the end of rl.log nothing tells whether
    it came before the restart or after, and the report says it cannot be placed; a timed hang of the
    first run after it places it before the restart; in the orchestrator's own log its position does."""
    paths, _ = _hung_and_resumed(tmp_path)
    rl = tmp_path / "logs" / "rl.log"
    day_old, hung = rl.read_text().splitlines()
    rl.write_text(f"{day_old}\n{hung[36:]}\n")  # the second line without its time
    summary, md = analyze(paths, tmp_path / "unplaced")
    assert not any(f["kind"] == "hang" for f in summary["findings"]), summary["findings"]
    assert all(r["hangs_before"] == [] for r in summary["restarts"])
    assert any(f"cannot be placed among the runs these logs hold ({rl}:2;" in w for w in summary["warnings"])
    assert "orchestrator>trainer:weights/step_9" in md
    # a timed hang of the first run after it (a minute later, before the restart) places it
    rl.write_text(f"{day_old}\n{hung[36:]}\n{_stamp(hung, 60.0)}{hung[36:]}\n")
    summary, md = analyze(paths, tmp_path / "placed")
    assert not any(f["kind"] == "hang" for f in summary["findings"]), summary["findings"]
    restarts = {r["process"]: r for r in summary["restarts"]}
    assert [(h["ts"], h["where"]) for h in restarts["orchestrator"]["hangs_before"]][0] == (None, f"{rl}:2")
    assert f"saw a hang ({rl}:2; its line has no time, placed by the lines around it)" in md
    assert not summary["warnings"] or "cannot be placed" not in " ".join(summary["warnings"])
    # in the orchestrator's log, before its restart's run.start, with rl.log not given
    orchestrator = tmp_path / "logs" / "orchestrator.log"
    lines = orchestrator.read_text().splitlines()
    start = next(i for i, x in enumerate(lines) if "[gen] run.start" in x)
    orchestrator.write_text("\n".join([*lines[:start], hung[36:], *lines[start:]]) + "\n")
    summary, md = analyze([p for p in paths if p != rl], tmp_path / "in_the_log")
    assert not any(f["kind"] == "hang" for f in summary["findings"]), summary["findings"]
    restarts = {r["process"]: r for r in summary["restarts"]}
    assert [h["where"] for h in restarts["orchestrator"]["hangs_before"]] == [f"{orchestrator}:{start + 1}"]


def test_a_trace_id_sent_again_after_a_restart_is_a_new_update_not_a_retry(tmp_path, analyze):
    """The orchestrator died waiting for update deadbeef; the resumed run sent deadbeef again
    (attempt=1: replayed or synthetic logs repeat trace ids) and got its answer in 0.3 s. The second
    send continued the unanswered update as a retry: the outage (10 minutes) read as failed
    attempts, the primary finding. Now it starts a new update. And the 40 s load the server finished
    for the first after the orchestrator died (down time) made the steps' weight updates a slow
    reload: an update left unanswered before the orchestrator's last restart counts no time."""
    summary, _ = analyze(_died_waiting_for_deadbeef(tmp_path), tmp_path / "out")
    again = [u for u in summary["updates"] if u["tid"] == "deadbeef"]
    assert [(u["wall_ms"], u["done_ts"] is None) for u in again] == [(None, True), (300.0, False)]
    assert "weight update: failed attempts" not in {s["name"] for s in summary["stages"]}
    findings = [f["kind"] for f in summary["findings"]]
    assert not {"failed_attempts", "stall", "slow_reload"} & set(findings), findings
    # every step's update at its client's rpc_ms; the 40 s load the dead orchestrator waited for: none
    rpc = {s["name"]: s["total_ms"] for s in summary["stages"]}["weight update: rpc"]
    assert rpc == pytest.approx(sum(u["rpc_ms"] for u in summary["updates"] if u["rpc_ms"] is not None))


def _died_waiting_for_deadbeef(tmp_path: Path) -> list[Path]:
    """A run whose orchestrator died waiting for update deadbeef, which its server finished 40 s later
    (rpc_ms 39998), resumed ten minutes later; the resumed run sends deadbeef again (attempt=1), answered
    in 0.3 s. The logs appended, as `rl --resume` appends them."""
    send = {"url": "http://h:8000", "path": "/update_weights"}
    first = make_run("healthy", steps=10, seed=1)
    first.orchestrator.append(
        _stamp(first.orchestrator[-1], 0.1)
        + format_tagged("weights", "client.send", "deadbeef", **send, t=2e3, attempt=1)
    )
    # the server outlived the orchestrator and finished that load 40 s later: down time, no step's
    # (the orchestrator died at its client.send: the stages count none of it)
    first.inference += [
        _stamp(first.orchestrator[-1], 0.2)
        + format_tagged("weights", "server.recv", "deadbeef", path="/update_weights", t=2e3),
        _stamp(first.orchestrator[-1], 40.2)
        + format_tagged("weights", "rpc.done", "deadbeef", op="update_weights", t=2040.0, rpc_ms=39_998.0),
    ]
    second = make_run("healthy", steps=12, seed=2, start_offset_s=600.0, first_step=8)
    at = second.orchestrator[-1]
    second.orchestrator += [
        _stamp(at, 0.1) + format_tagged("weights", "client.send", "deadbeef", **send, t=3e3, attempt=1),
        _stamp(at, 0.4)
        + format_tagged(
            "weights", "client.done", "deadbeef", **send, wall_ms=300.0, rpc_ms=250.0, server_ms=250.0,
            queue_ms=50.0, attempts=1,
        ),
    ]  # fmt: skip
    return _appended(tmp_path, first, second)


def test_an_update_the_orchestrator_died_waiting_for_is_not_ranked_and_its_server_counts_it_apart(
    tmp_path, analyze
):
    """No answer timed update deadbeef (the orchestrator died waiting for it), yet
    slowest_updates.txt ranked it first (rpc 39998.0 ms, no wall time) and its server's row counted it
    among its 21 updates (22), its 40 s in the rpc_ms median's values. Now it is named under the list,
    not ranked, and counted in the row's own 'unanswered' column, which the report explains."""
    summary, md = analyze(_died_waiting_for_deadbeef(tmp_path), tmp_path / "out")
    slowest = (tmp_path / "out" / "slowest_updates.txt").read_text().splitlines()
    ranked, note = slowest[1:-1], slowest[-1]
    assert len(ranked) == 10 and not any("39998.0" in row for row in ranked), ranked
    assert note.startswith(
        "(not ranked: 1 update(s) the orchestrator died waiting for, sent before its restart"
    )
    assert "never answered: deadbeef to http://h:8000; the stages count them up to the crash" in note
    answered = [u for u in summary["updates"] if u["done_ts"] is not None and u["url"] == "http://h:8000"]
    (server,) = summary["servers"]
    assert (server["updates"], server["unanswered"]) == (len(answered), 1) == (21, 1)
    assert server["rpc_ms_p50"] == statistics.median(u["rpc_ms"] for u in answered)  # not its 39998.0
    table = md.split("## Per server", 1)[1].split("\n## ", 1)[0]
    head = "| server | updates | failed | retried | wall_ms p50 | rpc_ms p50 | queue_ms p50 | unanswered |"
    p50 = " | ".join(f"{server[f'{key}_p50']:.1f}" for key in ("wall_ms", "rpc_ms", "queue_ms"))
    assert head in table and f"| http://h:8000 | 21 | 0 | 0 | {p50} | 1 | 0 | 0 |" in table
    assert "`unanswered`: weight updates never answered, not in `updates` or the medians: those the " in table
    assert (
        "died waiting for (sent before its last restart) count in the weight-update stages up to the crash"
        in table
    )


def test_an_update_still_unanswered_where_the_logs_end_is_counted_apart_in_its_server_s_row(
    tmp_path, analyze
):
    """Two servers; the last update to http://h1:8000 got no answer where the logs end (its server
    finished it, rpc.done logged; the orchestrator's client.done never came; 600 s of lines after it)
    and no restart followed (the stall rule names it). Its row counted it as an ordinary update: 6
    updates like http://h:8000's 6 answered ones, its server's rpc_ms among the median's values (the
    reviewer's s07); the unanswered column (edd45c2) took only updates sent before a restart. It is
    counted there now, its values out of the medians, and the note under the table says both cases."""
    from tests.support.synthetic_logs import Shape

    run = make_run("healthy", steps=8, seed=4, shape=Shape(servers=2))
    files = run.write(tmp_path / "logs")
    send = max(i for i, x in enumerate(run.orchestrator) if "client.send" in x and "http://h1:8000" in x)
    tid = run.orchestrator[send].split("[weights][")[1].split("]")[0]
    orchestrator = [x for x in run.orchestrator if not (tid in x and "client.done" in x and "h1:8000" in x)]
    orchestrator.append(_stamp(orchestrator[-1], 600.0) + "still waiting")
    files["orchestrator"].write_text("\n".join(orchestrator) + "\n")
    summary, md = analyze(files.values(), tmp_path / "out")
    assert summary["primary"]["kind"] == "stall" and tid in summary["primary"]["title"], summary["findings"]
    by_url = {s["url"]: s for s in summary["servers"]}
    answered = [u for u in summary["updates"] if u["url"] == "http://h1:8000" and u["done_ts"] is not None]
    assert len(answered) == 5
    assert {u: (s["updates"], s["unanswered"]) for u, s in by_url.items()} == {
        "http://h:8000": (6, 0),
        "http://h1:8000": (5, 1),
    }
    h1 = by_url["http://h1:8000"]
    assert h1["rpc_ms_p50"] == statistics.median(u["rpc_ms"] for u in answered)
    assert h1["wall_ms_p50"] == statistics.median(u["wall_ms"] for u in answered)
    table = md.split("## Per server", 1)[1].split("\n## ", 1)[0]
    assert (
        "| server | updates | failed | retried | wall_ms p50 | rpc_ms p50 | queue_ms p50 | unanswered |"
        in table
    )
    p50 = " | ".join(f"{h1[f'{key}_p50']:.1f}" for key in ("wall_ms", "rpc_ms", "queue_ms"))
    assert f"| http://h1:8000 | 5 | 0 | 0 | {p50} | 1 | 0 | 0 |" in table
    assert (
        "those sent after it (or with no restart) are still waiting where the logs end (see Stall, when it "
        "lasted long enough)." in table
    )


def _resumed_twice(path: Path) -> Path:
    """An orchestrator resumed at step 5 (async_level 1) that loads weights step 5 (a wait of 1 s, the
    trainer publishing them again: start-up), generates steps 5 and 6, waits 40 s for weights step 6,
    generates step 7 and dies; it resumes at 5 again (a load of 0.5 s), and its wait for step 6 takes
    0.1 s."""
    stamp = lambda s: f"2026-01-01 12:{s // 60:02d}:{s % 60:02d}.000 | INFO    | "  # noqa: E731
    batch = lambda at, step: [  # noqa: E731
        stamp(at) + format_tagged("gen", "batch.start", step=step, inflight=64, target_batch=256),
        stamp(at + 2) + format_tagged("gen", "batch.done", step=step, completions=256, dur_ms=2000.0),
    ]
    lines = []
    for at, load_ms, wait_ms in ((0, 1000.0, 40_000.0), (120, 500.0, 100.0)):
        waited = at + 5 + int(wait_ms // 1000)
        lines += [
            stamp(at) + format_tagged("gen", "run.start", step=5, resume=True, async_level=1),
            stamp(at) + format_tagged("ckpt", "wait.start", target_step=5),
            stamp(at + 1) + format_tagged("ckpt", "wait.done", target_step=5, wait_ms=load_ms),
            *batch(at + 1, 5),
            *batch(at + 3, 6),
            stamp(at + 5) + format_tagged("ckpt", "wait.start", target_step=6),
            stamp(waited) + format_tagged("ckpt", "wait.done", target_step=6, wait_ms=wait_ms),
            *batch(waited, 7),
        ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_every_wait_for_weights_counts_also_a_second_wait_for_the_same_step(tmp_path, analyze):
    """The checkpoint waits were a per-step series keyed by target_step: the resumed orchestrator's
    40 s wait for weights step 6 was replaced by the next run's 0.1 s wait for step 6, and 40 s of
    the run's 40.1 s of waits vanished from the checkpoint-wait stage and ckpt_wait_stats.txt. Each
    wait counts now; so do the waits of a crashed run and of its resume for the same steps. (Each
    resume's load of weights step 5 is start-up, no wait of the run's.)"""
    summary, _ = analyze([_resumed_twice(tmp_path / "orchestrator.log")], tmp_path / "out")
    waits = summary["stats"]["ckpt_wait_ms"]
    assert (waits["count"], waits["min"], waits["max"]) == (2, 100.0, 40_000.0)
    stage = next(s for s in summary["stages"] if s["name"] == "checkpoint wait")
    assert stage["total_ms"] == 40_100.0
    assert summary["counts"]["ckpt_startup_wait_ms"] == 1500
    assert summary["counts"]["redone.gen_dur_ms"] == 3  # the steps' own series still count 5..7 once
    assert "count:   2" in (tmp_path / "out" / "ckpt_wait_stats.txt").read_text()
    # a crash after step 9 and a resume at 6: both runs waited for weights steps 6..8 (the resume's
    # first wait, for weights step 5 before its first batch, is its load: start-up, as after a
    # run.start, though these logs have none)
    first = make_run("healthy", steps=10, seed=1)
    second = make_run("healthy", steps=8, seed=2, start_offset_s=600.0, first_step=6)
    (tmp_path / "appended").mkdir()
    summary, _ = analyze(_appended(tmp_path / "appended", first, second), tmp_path / "out2")
    waited = first.values["ckpt_wait_ms"] + second.values["ckpt_wait_ms"][1:]
    assert summary["stats"]["ckpt_wait_ms"]["count"] == len(waited) == 8 + 7
    assert summary["counts"]["ckpt_startup_wait_ms"] == round(second.values["ckpt_wait_ms"][0])
    stage = next(s for s in summary["stages"] if s["name"] == "checkpoint wait")
    assert stage["total_ms"] == pytest.approx(sum(waited), abs=1.0)


def _stamped(path, tagged: list[str]):
    """``tagged`` lines written to ``path``, one second a line."""
    stamped = [f"2026-01-01 12:{i // 60:02d}:{i % 60:02d}.000 | INFO    | {x}" for i, x in enumerate(tagged)]
    path.write_text("\n".join(stamped) + "\n")
    return path


def _twice_in_a_run(tmp_path):
    """An orchestrator and a trainer log of a run (steps 0..4) resumed at step 3 (3..6), each run
    logging one step's lines twice: step 2's in the first run, step 4's in the second (a batch.done,
    a [rollout] line, a [ckpt] write.done written again, without any restart between them)."""
    orchestrator, trainer = [], []
    for start, steps, twice in ((0, range(5), 2), (3, range(3, 7), 4)):
        orchestrator.append(format_tagged("gen", "run.start", step=start, resume=start > 0))
        trainer.append(format_tagged("train", "run.start", step=start, resume=start > 0))
        for step in steps:
            done = format_tagged("gen", "batch.done", step=step, completions=8, dur_ms=1000.0 + step)
            rollout = format_tagged(
                "rollout", None, trunc_pct=0.0, current_step=step, ckpt_step=step, staleness=0
            )
            write = format_tagged("ckpt", "write.done", step=step, write_ms=50.0, bytes=1, shards=1)
            orchestrator += [
                format_tagged("gen", "batch.start", step=step, inflight=8, target_batch=8),
                done,
                rollout,
            ]
            trainer += [format_tagged("train", "step.done", step=step, wait_ms=1.0, train_ms=900.0), write]
            if step == twice:
                orchestrator += [done, rollout]
                trainer.append(write)
    logs = tmp_path / "logs"
    logs.mkdir()
    return [_stamped(logs / "orchestrator.log", orchestrator), _stamped(logs / "trainer.log", trainer)]


def test_a_step_logged_twice_within_one_run_is_not_redone(tmp_path, analyze):
    """Step 2's lines logged twice in the first run and step 4's twice in the resumed one: redone.*
    counted each as a step redone (redone.gen_dur_ms 4, redone.write_ms 4), with no restart between
    the two lines. Redone is logged again in a later run than one that logged it: 3 and 4, once each."""
    summary, md = analyze(_twice_in_a_run(tmp_path), tmp_path / "out")
    assert [(r["process"], r["reached"], r["resumed"], r["redone"]) for r in summary["restarts"]] == [
        ("orchestrator", 4, 3, 2),
        ("trainer", 4, 3, 2),
    ]
    redone = {k: n for k, n in summary["counts"].items() if k.startswith("redone.")}
    assert redone == {
        "redone.gen_dur_ms": 2,
        "redone.trunc_pct": 2,
        "redone.staleness": 2,
        "redone.train_wait_ms": 1,  # step 4: the resumed trainer's first wait (step 3) is start-up
        "redone.train_ms": 2,
        "redone.write_ms": 2,
    }
    assert summary["stats"]["gen_dur_ms"]["count"] == 7  # one value per step, 0..6
    assert "resumed at step 3; 2 step(s) redone" in md


def test_a_resumed_trainer_s_first_wait_is_start_up_as_step_0_s(tmp_path, analyze):
    """A trainer-bound run (steps 0..19) resumed at step 12: the trainer logged run.start and waited
    240 s for the servers to load before its first step.done (wait_ms 240000). Step 0's wait, the
    same start-up in the first run, is left out of the waits for rollouts; the resumed run's was
    counted: train_wait_ms max 240000, and 'generation-bound' (49% of the run) came first. Now the
    first step.done of each run of the trainer is start-up too (after its run.start, or in older
    logs the step.done that went back), and the run reads trainer-bound."""
    first = make_run("trainer_bound", steps=20, seed=1)
    second = make_run("trainer_bound", steps=14, seed=2, start_offset_s=900.0, first_step=12)
    orchestrator, trainer = second.orchestrator, second.trainer
    orchestrator.insert(
        0, _stamp(orchestrator[0], -1.0) + format_tagged("gen", "run.start", step=12, resume=True)
    )
    done = next(i for i, x in enumerate(trainer) if "step.done" in x)
    trainer[done] = trainer[done].replace("wait_ms=30.0", "wait_ms=240000.0")
    trainer.insert(
        0, _stamp(trainer[done], -241.0) + format_tagged("train", "run.start", step=12, resume=True)
    )
    (tmp_path / "resumed").mkdir()
    summary, _ = analyze(_appended(tmp_path / "resumed", first, second), tmp_path / "out")
    assert summary["primary"]["kind"] == "trainer_bound", summary["findings"]
    assert not any(f["kind"] == "generation_bound" for f in summary["findings"])
    waits = summary["stats"]["train_wait_ms"]
    assert (waits["count"], waits["max"]) == (25, 30.0)  # steps 1..25, step 12 the first run's
    # an older log: no run.start, the resumed trainer's first step.done is where its step goes back
    del trainer[0]
    (tmp_path / "older").mkdir()
    summary, _ = analyze(_appended(tmp_path / "older", first, second), tmp_path / "out2")
    assert summary["stats"]["train_wait_ms"]["max"] == 30.0


def _trainer_bound_live(root: Path, copied_after_s: float, trainer_dead_s: float = 0.0) -> dict[str, Path]:
    """A trainer-bound run (async_level 1) read while it goes on: the trainer computes 120 s a step,
    a batch takes 100 s, so the orchestrator waits 20 s for each step's weights; its logs are
    copied ``copied_after_s`` into its wait for weights step 12 (it scrapes the servers every 5 s,
    so its log runs up to the copy; the wait's end, 20 s in, is not in it). ``trainer_dead_s``: the
    trainer's lines of the last that many seconds before the copy are lost (it died then)."""
    from tests.support.synthetic_logs import _line

    t0, compute, generate = 1_767_268_800.0, 120.0, 100.0  # 2026-01-01 12:00 UTC
    o = [(t0, format_tagged("gen", "run.start", step=0, resume=False, async_level=1))]
    t = [(t0, format_tagged("train", "run.start", step=0, resume=False))]
    rollouts, weights, orch, trainer, k = {}, {0: t0}, t0, t0, 0  # k: the trainer's next step
    for step in range(14):
        if step > 1:
            while step - 1 not in weights:  # the trainer trains step k once its rollouts are there
                begin = max(trainer, rollouts[k])
                waited = 1000 * (begin - trainer)
                trainer = weights[k + 1] = begin + compute
                t.append((begin, format_tagged("train", "wait.start", step=k)))
                t.append((begin, format_tagged("train", "wait.done", step=k, wait_ms=waited)))
                t.append((trainer, format_tagged("ckpt", "write.done", step=k + 1, write_ms=500.0)))
                t.append((trainer, format_tagged("train", "step.done", step=k, train_ms=1000 * compute)))
                k += 1
            done = max(orch, weights[step - 1])
            o.append((orch, format_tagged("ckpt", "wait.start", target_step=step - 1)))
            o.append(
                (done, format_tagged("ckpt", "wait.done", target_step=step - 1, wait_ms=1000 * (done - orch)))
            )
            orch = done
        o.append((orch, format_tagged("gen", "batch.start", step=step, inflight=8, target_batch=64)))
        orch = rollouts[step] = orch + generate
        o.append(
            (orch, format_tagged("gen", "batch.done", step=step, completions=64, dur_ms=1000 * generate))
        )
    t.append((trainer, format_tagged("train", "wait.start", step=k)))
    o = o[: max(i for i, (_, x) in enumerate(o) if "wait.start" in x) + 1]  # for weights step 12
    copied = o[-1][0] + copied_after_s
    o += [(s, "[server] metrics url=http://h:8000 running=8 waiting=0 kv_cache_pct=30.0 preemptions=0 requests=5 scrape_ms=2.0")
          for s in np.arange(t0, copied + 1e-6, 5.0)]  # fmt: skip
    root.mkdir(parents=True)
    files = {}
    for name, lines, until in (("orchestrator", o, copied), ("trainer", t, copied - trainer_dead_s)):
        kept = sorted(((ts, x) for ts, x in lines if ts <= until), key=lambda line: line[0])  # stable
        files[name] = root / f"{name}.log"
        files[name].write_text("\n".join(_line(ts, x) for ts, x in kept) + "\n")
    return files


def test_logs_copied_while_the_trainer_computes_as_every_step_are_no_stall(tmp_path, analyze):
    """Logs copied 10 s into an ordinary 20 s wait for weights, the trainer computing its 120 s step
    since 110 s: 'Stall: the orchestrator waits for weights step 12, which the trainer never wrote
    ... 10 s to the end of the logs (stall_min_s 30, and 3x the median wait)', a primary stall whose
    text claimed thresholds its 10 s did not reach. The trainer's silence (110 s, over stall_min_s
    and 3x the 20 s median wait) is judged by its own pace, 120 s between steps: no stall. A trainer
    silent 3x its pace since before the wait is one, and the evidence names what was crossed."""
    summary, _ = analyze(_trainer_bound_live(tmp_path / "live", 10.0).values(), tmp_path / "out")
    assert not any(f["kind"] == "stall" for f in summary["findings"]), summary["findings"]
    # the trainer's lines of the last 400 s lost (silent 470 s > 3 x 120 s), the orchestrator's wait 10 s
    summary, _ = analyze(_trainer_bound_live(tmp_path / "dead", 10.0, 400.0).values(), tmp_path / "out2")
    stall = summary["primary"]
    assert stall["kind"] == "stall", summary["findings"]
    assert (
        "10 s to the end of the logs, the trainer silent since before it: 470 s (at least stall_min_s 30 s "
        "and 3x its median time between steps, 120.0 s)" in stall["evidence"]
    )
    # the wait itself 3x the median wait (20 s) and stall_min_s long: a stall, by those numbers
    summary, _ = analyze(_trainer_bound_live(tmp_path / "long", 70.0).values(), tmp_path / "out3")
    stall = summary["primary"]
    assert stall["kind"] == "stall", summary["findings"]
    assert (
        "70 s to the end of the logs (at least stall_min_s 30 s and 3x the median wait, 20.0 s)"
        in stall["evidence"]
    )


def _paused(
    tmp_path: Path, went_on: tuple[str, ...] = ("orchestrator", "inference", "trainer")
) -> list[Path]:
    """A 40-step run that paused 200 s after step 19 (every process silent: a slow shared
    filesystem), the launcher's watchdog logging a [hang] 150 s into it; then the processes of
    ``went_on`` went on with steps 20..39 (no restart)."""
    from datetime import datetime

    first = make_run("healthy", steps=20, seed=1)
    end = max(
        datetime.strptime(x[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()
        for x in first.trainer + first.orchestrator
    )
    begin = datetime.strptime(first.orchestrator[0][:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()
    second = make_run("healthy", steps=20, seed=2, first_step=20, start_offset_s=end - begin + 200.0)
    for name in ("orchestrator", "inference", "trainer"):
        if name not in went_on:
            setattr(second, name, [])
    (tmp_path / "run").mkdir(parents=True)
    paths = _appended(tmp_path / "run", first, second)
    logs = tmp_path / "run" / "logs"
    hang = format_tagged(
        "hang", "detected", silent_s=150.0, threshold_s=120.0, median_step_s=1.6,
        waits="orchestrator>trainer:weights/step_19",
    )  # fmt: skip
    (logs / "rl.log").write_text(f"{_stamp(first.orchestrator[-1], 150.0)}{hang}\n")
    return [*paths, logs / "rl.log"]


def _progress_around_hang(paths: list[Path]) -> tuple[float, float]:
    """The last progress line before the [hang] line of rl.log (``paths[-1]``) and the first after it,
    of the orchestrator's and the trainer's logs (``paths[0]``, ``paths[2]``)."""
    hung = _ts(paths[-1].read_text())
    progress = _progress_times(paths[0]) + _progress_times(paths[2])
    return max(t for t in progress if t <= hung), min(t for t in progress if t > hung)


def _progress_times(path: Path) -> list[float]:
    """The times of a log's progress lines, as the watchdog counts them."""
    import re
    from datetime import datetime

    from prime_rl.tracing import PROGRESS

    out = []
    for line in path.read_text().splitlines():
        m = re.search(r"\| \[(\w+)\](?:\[[^\]]*\])? (\S+)", line)
        if m and (m.group(1), m.group(2)) in PROGRESS:
            out.append(datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp())
    return out


def test_a_hang_the_run_went_on_after_is_a_pause_ranked_by_its_time(tmp_path, analyze):
    """The watchdog's [hang] came 150 s into a 200 s pause after which the run finished its 40 steps:
    'Hang: the launcher's watchdog saw no process make progress', primary with share 1.0, and no word
    that the run went on. Now it is a pause: its time from the last progress line before the hang to
    the first after it, its share of the run, after step 19, and that the run went on to step 39."""
    paths = _paused(tmp_path)
    summary, md = analyze(paths, tmp_path / "out")
    assert not any(f["kind"] == "hang" for f in summary["findings"]), summary["findings"]
    pause = next(f for f in summary["findings"] if f["kind"] == "pause")
    before, after = _progress_around_hang(paths)
    assert 199.0 < after - before < 201.0
    assert pause["share"] == pytest.approx((after - before) / summary["run_seconds"])
    assert pause["title"] == (
        f"Pause: no progress for {after - before:.0f} s after step 19, then the run went on (the launcher's "
        "watchdog saw a hang)"
    )
    assert (
        "waits: orchestrator>trainer:weights/step_19; then the run went on, to step 39" in pause["evidence"]
    )
    assert "rl.log:1): no progress for 150 s" in pause["evidence"]


def test_a_hang_with_no_progress_after_it_of_a_process_it_names_stays_a_hang(tmp_path, analyze):
    """The logs end in the pause, or only the orchestrator went on while the trainer it waited for
    never logged again: a hang, ranked first, as before."""
    for n, went_on in enumerate([(), ("orchestrator", "inference")]):
        summary, _ = analyze(_paused(tmp_path / str(n), went_on), tmp_path / f"out{n}")
        hang = summary["primary"]
        assert hang["kind"] == "hang" and hang["share"] == 1.0, summary["findings"]
        assert not any(f["kind"] == "pause" for f in summary["findings"])


def _ts(line: str) -> float:
    from datetime import datetime

    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()


def _field_sum(lines: list[str], head: str, key: str) -> float:
    """The sum of field ``key`` over the lines that hold ``head``."""
    return sum(float(x.split(f" {key}=")[1].split()[0]) for x in lines if head in x)


def test_a_redone_step_s_first_run_counts_in_the_stages_and_both_runs_start_up_is_left_out(tmp_path, analyze):
    """A crash after step 11 (the trainer finished step 10), resumed at step 8, each run starting with
    run.start lines 1 s before its first step. The stages kept each step's last value: the first run's
    generation and training of steps 8..11 (about 6 s of generation) were in the run's wall time but
    in no stage, while its weight updates and waits for weights were. Now a stage is the time of every
    run (the statistics keep one value per step, the later run's). And the first run's time began at
    its first line after run.start but the resumed run's at its run.start (down time ended there):
    both begin at their first line that is no start-up."""
    first = make_run("healthy", steps=12, seed=1)
    first.trainer = [x for x in first.trainer if "step=11" not in x]  # the trainer crashed in step 11
    end = max(_ts(x) for x in first.orchestrator + first.trainer + first.inference)
    second = make_run(
        "healthy", steps=12, seed=2, first_step=8, start_offset_s=end - _ts(first.orchestrator[0]) + 600.0
    )
    for run, step in ((first, 0), (second, 8)):
        began = _stamp(run.orchestrator[0], -1.0)
        run.orchestrator.insert(0, began + format_tagged("gen", "run.start", step=step, resume=step > 0))
        run.trainer.insert(0, began + format_tagged("train", "run.start", step=step, resume=step > 0))
    summary, md = analyze(_appended(tmp_path, first, second), tmp_path / "out")
    orchestrator = first.orchestrator + second.orchestrator
    trainer = first.trainer + second.trainer
    stages = {s["name"]: s["total_ms"] for s in summary["stages"]}
    gen = _field_sum(orchestrator, "[gen] batch.done", "dur_ms")
    assert (
        gen - _field_sum(second.orchestrator, "[gen] batch.done", "dur_ms") > 17000
    )  # the first run's 12 batches
    assert stages["generation"] + stages["verification (scoring)"] == pytest.approx(gen)
    assert stages["verification (scoring)"] == pytest.approx(
        _field_sum(orchestrator, "[verify] batch.done", "dur_ms")
    )
    assert stages["trainer compute"] == pytest.approx(_field_sum(trainer, "[train] step.done", "train_ms"))
    assert stages["publish (weight write)"] == pytest.approx(
        _field_sum(trainer, "[ckpt] write.done", "write_ms")
    )
    # the statistics: one value per step, 0..19, the redone steps' from the later run
    assert summary["stats"]["gen_dur_ms"]["count"] == summary["stats"]["train_ms"]["count"] == 20
    assert summary["stats"]["gen_dur_ms"]["max"] == max(
        float(x.split(" dur_ms=")[1].split()[0])
        for x in first.orchestrator[
            : next(i for i, x in enumerate(first.orchestrator) if "batch.start step=8" in x)
        ]
        + second.orchestrator
        if "[gen] batch.done" in x
    )
    # each run from its first line after its run.start lines to its last
    runs = [
        (min(_ts(x) for x in run.orchestrator[1:] + run.trainer[1:]), max(_ts(x) for x in run.orchestrator + run.trainer + run.inference))
        for run in (first, second)
    ]  # fmt: skip
    assert summary["run_seconds"] == pytest.approx(sum(b - a for a, b in runs), abs=1e-3)
    assert "the stages count the time of both runs" in md


def _resumed_with_a_load(tmp_path: Path, load_s: float = 60.0, gap_s: float = 600.0):
    """A healthy run (steps 0..11; the trainer crashed in step 11) resumed at step 8 ten minutes later
    (the reviewer's s49): each process logs run.start; the resumed orchestrator waits ``load_s`` for
    weights step 8 (its resume's load, before its first batch) while the trainer loads its
    checkpoint and publishes them again ([ckpt] write.done ``load_s`` after its run.start); then
    steps 8..19 as usual (a resumed orchestrator waits for no weights before its first batch but
    the load). The paths, the two runs and the resume's time."""
    first = make_run("healthy", steps=12, seed=1)
    first.trainer = [x for x in first.trainer if "step=11" not in x]
    end = max(_ts(x) for x in first.orchestrator + first.trainer + first.inference)
    resume = end + gap_s
    begin = _ts(first.orchestrator[0])
    second = make_run("healthy", steps=12, seed=2, first_step=8, start_offset_s=resume - begin + load_s + 0.5)
    batch = next(i for i, x in enumerate(second.orchestrator) if "[gen] batch.start" in x)
    second.orchestrator = [x for i, x in enumerate(second.orchestrator) if i >= batch or "[ckpt]" not in x]
    second.trainer = [x for x in second.trainer if "write.done step=7 " not in x]
    began = _stamp(first.orchestrator[0], -1.0)
    first.orchestrator.insert(
        0, began + format_tagged("gen", "run.start", step=0, resume=False, async_level=1)
    )
    first.trainer.insert(0, began + format_tagged("train", "run.start", step=0, resume=False))
    at = lambda dt: _stamp(first.orchestrator[0], resume - begin + 1.0 + dt)  # noqa: E731
    second.orchestrator[:0] = [
        at(0.0) + format_tagged("gen", "run.start", step=8, resume=True, async_level=1),
        at(0.2) + format_tagged("ckpt", "wait.start", target_step=8),
        at(load_s + 0.2) + format_tagged("ckpt", "wait.done", target_step=8, wait_ms=load_s * 1000.0),
    ]
    second.trainer[:0] = [
        at(0.0) + format_tagged("train", "run.start", step=8, resume=True),
        at(load_s) + format_tagged("ckpt", "write.done", step=8, write_ms=500.0),
    ]
    return _appended(tmp_path, first, second), first, second, resume


def test_a_resume_s_load_of_weights_is_start_up_not_a_wait_of_the_run(tmp_path, analyze):
    """The resumed orchestrator waited 60 s for weights step 8 while the trainer loaded its checkpoint
    and published them again (loop.py loads weights/step_N on every resume): every wait for weights
    counted, so a healthy run read 'Checkpoint I/O: the orchestrator waits for the trainer's weight
    writes' (60.5 s of waits, 60% of a 101 s run). That load is the resumed run's start-up, as the
    resumed trainer's first wait for rollouts is: no wait of the run's (ckpt_startup_wait_ms) and
    no time of the run (down time ends at the first line after it). The first run's first wait for
    weights (step 2's, for weights step 1, after its first batches) is a wait of the run, as
    before: every wait after a run's first batch counts, the fresh run's and the resumed run's."""
    paths, first, second, resume = _resumed_with_a_load(tmp_path)
    summary, md = analyze(paths, tmp_path / "out")
    assert summary["primary"] is None, summary["findings"]
    assert summary["counts"]["ckpt_startup_wait_ms"] == 60_000
    waits = [x for x in first.orchestrator + second.orchestrator[3:] if "[ckpt] wait.done" in x]
    assert "target_step=1 " in waits[0]  # the first run's first wait counts
    assert summary["stats"]["ckpt_wait_ms"]["count"] == len(waits)
    assert summary["stats"]["ckpt_wait_ms"]["max"] < 100.0
    stage = next(s for s in summary["stages"] if s["name"] == "checkpoint wait")
    assert stage["total_ms"] == pytest.approx(_field_sum(waits, "[ckpt] wait.done", "wait_ms"), abs=1.0)
    # the resumed run's time begins where the load ended: the trainer's write of weights step 8
    runs = [
        (_ts(first.orchestrator[1]), max(_ts(x) for x in first.orchestrator + first.trainer + first.inference)),
        (_ts(second.trainer[1]), max(_ts(x) for x in second.orchestrator + second.trainer + second.inference)),
    ]  # fmt: skip
    assert summary["run_seconds"] == pytest.approx(sum(b - a for a, b in runs), abs=1e-3)


def test_a_resume_s_load_of_weights_is_start_up_also_in_logs_without_run_start_lines(tmp_path, analyze):
    """The logs of test_a_resume_s_load_of_weights_is_start_up_not_a_wait_of_the_run without their
    run.start lines (an orchestrator and trainer older than that line): the restart is still found
    (the steps go back), but the resumed orchestrator's 60 s wait for weights step 8 counted as a
    wait of the run ('Checkpoint I/O', 60.5 s of waits, 60% of a 101.0 s run), and the crash's
    600 s silence was placed as if it ended at each process's first step line after the resume
    (down 600.2 s of the 660 s between the crash and the load's end). The orchestrator's [ckpt]
    waits after its silence, before the first [gen] batch.start after it that goes back, are its
    load, as after a run.start; each process's silence begins at its last line before it."""
    paths, first, second, _ = _resumed_with_a_load(tmp_path)
    for path in paths:
        path.write_text("".join(x for x in path.read_text().splitlines(True) if "run.start" not in x))
    summary, md = analyze(paths, tmp_path / "out")
    assert {r["process"] for r in summary["restarts"]} == {"orchestrator", "trainer"}
    assert summary["primary"] is None, summary["findings"]
    assert summary["counts"]["ckpt_startup_wait_ms"] == 60_000
    waits = [x for x in first.orchestrator + second.orchestrator[3:] if "[ckpt] wait.done" in x]
    assert summary["stats"]["ckpt_wait_ms"]["count"] == len(waits)
    assert summary["stats"]["ckpt_wait_ms"]["max"] < 100.0
    # the run's time as with the run.start lines: the resumed run's begins where the load ended
    runs = [
        (_ts(first.orchestrator[1]), max(_ts(x) for x in first.orchestrator + first.trainer + first.inference)),
        (_ts(second.trainer[1]), max(_ts(x) for x in second.orchestrator + second.trainer + second.inference)),
    ]  # fmt: skip
    assert summary["run_seconds"] == pytest.approx(sum(b - a for a, b in runs), abs=1e-3)
    assert summary["down_seconds"] == pytest.approx(runs[1][0] - runs[0][1], abs=1e-3)


def _without_run_start(paths: list[Path]) -> None:
    """The logs as an orchestrator and a trainer older than the run.start lines wrote them."""
    for path in paths:
        path.write_text("".join(x for x in path.read_text().splitlines(True) if "run.start" not in x))


def test_a_resume_s_start_up_longer_than_the_crash_is_no_crash_in_logs_without_run_start_lines(
    tmp_path, analyze
):
    """Logs without run.start lines, a crash shorter than the resume's start-up: (a) the reviewer's
    s49 with a 30 s crash and a 60 s load of weights by the resumed orchestrator read run 71.4 s, down
    59.8 s (the load taken for the crash, the crash counted as run time), where the same logs with
    run.start lines read 41.2 s and 90.0 s; (b) a slow-reload run resumed at step 10 10 s after its
    crash (its first weight update after the resume 28 s, the trainer waiting 30 s for rollouts
    meanwhile) read down 28.5 s, not 10.0. The orchestrator's silence within a wait it logged (a
    [ckpt] wait for weights, a weight update's client.send to its answer) is no crash; a process
    that logs no wait (the trainer) has its silence taken where every process was silent at once."""
    paths, *_ = _resumed_with_a_load(tmp_path / "with", gap_s=30.0)
    with_lines, _ = analyze(paths, tmp_path / "out_with")
    _without_run_start(paths)
    plain, _ = analyze(paths, tmp_path / "out_plain")
    assert with_lines["down_seconds"] == pytest.approx(90.0, abs=0.1)
    assert plain["run_seconds"] == pytest.approx(with_lines["run_seconds"], abs=0.01)
    assert plain["down_seconds"] == pytest.approx(with_lines["down_seconds"], abs=0.01)
    # (b): the trainer's longest silence is its start-up's wait for rollouts, not the crash
    first = make_run("slow_reload", steps=12, seed=0)
    end = max(_ts(x) for x in first.orchestrator + first.trainer + first.inference)
    begin = _ts(first.orchestrator[0])
    second = make_run("slow_reload", steps=12, seed=1, first_step=10, start_offset_s=end - begin + 10.0)
    resumed = min(_ts(x) for x in second.orchestrator + second.trainer + second.inference)
    paths = _appended(tmp_path / "b", first, second)
    summary, _ = analyze(paths, tmp_path / "out_b")
    assert {r["process"] for r in summary["restarts"]} == {"orchestrator", "trainer"}
    assert summary["down_seconds"] == pytest.approx(resumed - end, abs=0.01)
    last = max(_ts(x) for x in second.orchestrator + second.trainer + second.inference)
    assert summary["run_seconds"] == pytest.approx(last - begin - (resumed - end), abs=0.01)


def test_a_silence_of_every_process_in_logs_without_run_start_lines_is_warned_of(tmp_path, analyze):
    """A healthy run (steps 0..11, 1.7 s a step) that crashed and was resumed 120 s later at step 12,
    redoing no step, in logs without run.start lines: no restart is found (no step goes back) and
    the 120 s count as run time (run 160.9 s, where the same logs with run.start lines read 41.0 s
    and 120.0 s down), without a word. A silence of every process that long against the run's pace
    (silence_pace_ratio x its median step, at least stall_min_s) is warned of, with when and how
    long; a slow step is no such silence, and logs with run.start lines need no warning."""
    first = make_run("healthy", steps=12, seed=0)
    end = max(_ts(x) for x in first.orchestrator + first.trainer + first.inference)
    begin = _ts(first.orchestrator[0])
    second = make_run("healthy", steps=12, seed=1, first_step=12, start_offset_s=end - begin + 120.0)
    paths = _appended(tmp_path / "a", first, second)
    summary, md = analyze(paths, tmp_path / "out")
    assert summary["restarts"] == [] and summary["run_seconds"] > 150.0
    (warning,) = [
        w for w in summary["warnings"] if "neither the orchestrator nor the trainer wrote a line" in w
    ]
    assert warning.startswith("1 time(s) in which")
    assert "each of at least 30 s (`silence_pace_ratio` 10 x the steps' pace of 1.7 s" in warning
    assert ": 120 s from " in warning and "cannot be told from a pause" in warning
    assert f"- {warning}" in md
    # the same logs with run.start lines: the restart is found, its silence is down time
    second.orchestrator.insert(
        0, _stamp(second.orchestrator[0], -0.2) + format_tagged("gen", "run.start", step=12)
    )
    second.trainer.insert(
        0, _stamp(second.orchestrator[0], -0.1) + format_tagged("train", "run.start", step=12)
    )
    summary, _ = analyze(_appended(tmp_path / "b", first, second), tmp_path / "out_b")
    assert 119.0 < summary["down_seconds"] < 121.0
    assert not any("wrote a line" in w for w in summary["warnings"])
    # a healthy run alone: no silence that long
    summary, _ = analyze(_appended(tmp_path / "c", first, make_run("healthy", steps=0)), tmp_path / "out_c")
    assert not any("wrote a line" in w for w in summary["warnings"])


def _at(lines: list, t: float, *tagged, **fields) -> None:
    """A tagged line ``t`` seconds after 2026-01-01 12:10:00 (:func:`_clock`), kept with its time."""
    lines.append((t, _clock(t) + " | INFO    | " + format_tagged(*tagged, **fields)))


def _batch(orchestrator: list, t: float, step: int, dur: float = 4.99, done: bool = True) -> float:
    """The orchestrator's step ``step`` from ``t`` (async_level 2): its [ckpt] wait of 10 ms for weights
    ``step - 2`` (from step 2), then a batch of ``dur`` seconds (``done``: its batch.done too); when it
    ends."""
    if step > 1:
        _at(orchestrator, t, "ckpt", "wait.start", target_step=step - 2)
        _at(orchestrator, t + 0.01, "ckpt", "wait.done", target_step=step - 2, wait_ms=10.0)
        t += 0.01
    _at(orchestrator, t, "gen", "batch.start", step=step, inflight=64, target_batch=256)
    if done:
        done_at = dict(step=step, completions=256, dur_ms=dur * 1000, inflight=64)
        _at(orchestrator, t + dur, "gen", "batch.done", **done_at)
    return t + dur


def _trained(trainer: list, step: int, waits: float, ready: float) -> float:
    """The trainer's step ``step``: its wait for the rollouts from ``waits`` to ``ready``, then 3 s of
    training; when it ends."""
    wait_ms = (ready - waits) * 1000
    _at(trainer, waits, "train", "wait.start", step=step)
    _at(trainer, ready, "train", "wait.done", step=step, wait_ms=wait_ms)
    _at(trainer, ready + 3, "train", "step.done", step=step, wait_ms=wait_ms, train_ms=3000.0)
    return ready + 3


def _write_sorted(path: Path, lines: list[tuple[float, str]]) -> Path:
    """``lines`` (each with its time) written to ``path`` in time order."""
    path.write_text("\n".join(line for _, line in sorted(lines, key=lambda x: x[0])) + "\n")
    return path


def _step_logs(
    tmp_path: Path,
    slow: tuple[int, float] | list[tuple[int, float]] | None = None,
    lead_s: float = 0.0,
    run_start: bool = False,
    hung_at: int | None = None,
) -> list[Path]:
    """Hand-built logs of a healthy run of 5 s steps 0..19 (async_level 2: the orchestrator's [ckpt]
    wait for weights step s-2 before batch s, the trainer's [train] wait for each step's rollouts),
    without run.start lines unless ``run_start``; ``slow``: (step, seconds) a batch that takes that
    long (a list: several); ``lead_s``: the orchestrator's first line a [server] metrics line that long before its first
    batch (the servers loading), the trainer's wait for step 0 from then on; ``hung_at``: the run hung
    in that step (its batch and the trainer's wait for it begun, nothing after)."""
    orchestrator, trainer = [], []
    if run_start:
        _at(orchestrator, -0.5, "gen", "run.start", step=0, resume=False, async_level=2)
        _at(trainer, -0.5, "train", "run.start", step=0, resume=False)
    if lead_s:
        metrics = dict(url="http://h:8000", running=0, waiting=0, kv_cache_pct=0.0, preemptions=0)
        _at(orchestrator, -lead_s, "server", "metrics", **metrics)
    t, done = 0.0, -lead_s  # the trainer waits for step 0's rollouts from its start
    slow_s = dict(slow if isinstance(slow, list) else [slow] if slow is not None else [])
    for step in range(20 if hung_at is None else hung_at + 1):
        dur = slow_s.get(step, 4.99)
        if step == hung_at:  # its batch and the trainer's wait for it begun, nothing after
            _batch(orchestrator, t, step, dur, done=False)
            _at(trainer, done, "train", "wait.start", step=step)
            break
        t = _batch(orchestrator, t, step, dur)
        done = _trained(trainer, step, done, max(done, t))
    tmp_path.mkdir(parents=True, exist_ok=True)
    return [
        _write_sorted(tmp_path / f"{name}.log", lines)
        for name, lines in (("orchestrator", orchestrator), ("trainer", trainer))
    ]


@pytest.mark.parametrize("case", ["first batch", "a later batch", "before the first step"])
def test_a_silence_a_batch_or_the_start_holds_is_no_restart_to_warn_of(tmp_path, analyze, case):
    """A healthy fresh run in logs without run.start lines (5 s steps 0..19) whose first batch took
    75 s (the servers warming up, a first compile) warned '1 time(s) in which neither the orchestrator
    nor the trainer wrote a line ... 75 s from 2026-01-01 12:00:00 ... a restart there ... cannot be
    told from a pause' (the reviewer's d4). A silence within a [gen] batch is none: its batch.done
    proves the orchestrator alive, as a [ckpt] wait's wait.done does (a later batch of 75 s too); nor is
    one before every process logged a step line (75 s of loading before the first batch): a resume
    that redid no step needs a step done before it, and any other sends a step back (is found)."""
    slow, lead = {"first batch": ((0, 75.0), 0.0), "a later batch": ((10, 75.0), 0.0)}.get(case, (None, 75.0))
    summary, md = analyze(_step_logs(tmp_path / "logs", slow, lead), tmp_path / "out", "--async-level", "2")
    assert summary["restarts"] == [] and summary["run_seconds"] > 172.0
    assert not any("wrote a line" in w for w in summary["warnings"]), summary["warnings"]


def _two_ranks(trainer: Path) -> Path:
    """The logs' directory of ``trainer`` (its trainer.log) in the layout of a trainer on two GPUs:
    trainer.log as trainer/rank_0.log, beside it trainer/rank_1.log with rank 1's lines, a [train]
    compute.done at each of rank 0's step.done (train.py logs wait.start, wait.done and step.done on
    rank 0 only, compute.done on every rank)."""
    root = trainer.parent
    (root / "trainer").mkdir()
    rank_1 = []
    for line in trainer.read_text().splitlines():
        if "[train] step.done " in line:
            step = int(line.split(" step=")[1].split()[0])
            done = format_tagged("train", "compute.done", step=step, rank=1, train_ms=3000.0)
            rank_1.append(line.split(" | ")[0] + " | INFO    | " + done)
    trainer.rename(root / "trainer" / "rank_0.log")
    (root / "trainer" / "rank_1.log").write_text("\n".join(rank_1) + "\n")
    return root


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_silence_that_holds_a_restart_found_is_no_restart_to_warn_of(tmp_path, analyze, ranks):
    """Logs without run.start lines: the orchestrator alone died 1 s into its [ckpt] wait for weights
    step 8 (at 50 s, 5 s steps); the trainer went on to step 9 and waited for step 10's rollouts from 58
    s; the orchestrator was resumed at 171 s, loaded weights for 4 s and redid steps 8 and 9 (the
    reviewer's d7). SUMMARY.md's Restarts listed 'orchestrator restarted at 12:02:55 ... after 121 s
    without a line: it had reached step 9 and resumed at step 8', and its Warnings '113 s from 12:00:58
    ... a restart there ... cannot be told from a pause': the silence of both processes (58 to 171 s)
    is the found restart's own, not down time only because the trainer was alive. A silence of the
    trainer within a wait it logged and closed is none (its wait.done proves it alive; a resumed
    trainer's first line is a wait.start), so no time of both processes' silence is left. With the
    trainer on two GPUs (``ranks`` 2: logs/trainer/rank_0.log, rank_1.log with only compute.done
    lines) rank 1's silence from its step 9 to its step 10 brought the warning back ('113 s from
    12:00:58', the rev_q reviewer's d1): a process is silent only where none of its logs wrote a line,
    and rank 0's wait proves the trainer alive through rank 1's silence."""
    orchestrator, trainer = [], []

    for step in range(10):
        _batch(orchestrator, 5.0 * step, step)
        done = _trained(trainer, step, 0.0 if step == 0 else 5 * step + 3.0, 5 * step + 5.0)
    _at(orchestrator, 50.0, "ckpt", "wait.start", target_step=8)  # dies at 51: no more line
    _at(orchestrator, 171.0, "ckpt", "wait.start", target_step=7)  # resumed: its load of weights
    _at(orchestrator, 175.0, "ckpt", "wait.done", target_step=7, wait_ms=4000.0)
    t = 175.0
    for step in (8, 9):
        _at(orchestrator, t, "gen", "batch.start", step=step, inflight=64, target_batch=256)
        _at(orchestrator, t + 5, "gen", "batch.done", step=step, completions=256, dur_ms=5000.0, inflight=64)
        t += 5
    for step in range(10, 20):
        t = _batch(orchestrator, t, step)
        done = _trained(trainer, step, done, max(done, t))
    logs = tmp_path / "logs"
    logs.mkdir()
    for name, lines in (("orchestrator", orchestrator), ("trainer", trainer)):
        _write_sorted(logs / f"{name}.log", lines)
    paths = (
        [logs / "orchestrator.log", logs / "trainer.log"]
        if ranks == 1
        else [_two_ranks(logs / "trainer.log")]
    )
    summary, md = analyze(paths, tmp_path / "out", "--async-level", "2")
    assert len(summary["parse"]["files"]) == ranks + 1
    (restart,) = summary["restarts"]
    assert (restart["process"], restart["reached"], restart["resumed"]) == ("orchestrator", 9, 8)
    assert not any("wrote a line" in w for w in summary["warnings"]), summary["warnings"]


def _paused_then_resumed(tmp_path: Path, hang_after_s: float = 150.0) -> tuple[list[Path], list]:
    """The paused run of :func:`_paused` (200 s of silence after step 19, the watchdog's [hang]
    ``hang_after_s`` into it, then steps 20..39), which then crashed after step 39 and was resumed
    at step 35 five minutes later (each process's run.start), finishing steps 35..44 (the
    reviewer's s40)."""
    first = make_run("healthy", steps=20, seed=1)
    begin = _ts(first.orchestrator[0])
    end = max(_ts(x) for x in first.trainer + first.orchestrator + first.inference)
    second = make_run("healthy", steps=20, seed=2, first_step=20, start_offset_s=end - begin + 200.0)
    end2 = max(_ts(x) for x in second.trainer + second.orchestrator + second.inference)
    third = make_run("healthy", steps=10, seed=3, first_step=35, start_offset_s=end2 - begin + 300.0)
    for name, tag in (("orchestrator", "gen"), ("trainer", "train")):
        lines = getattr(third, name)
        lines.insert(0, _stamp(lines[0], -1.0) + format_tagged(tag, "run.start", step=35, resume=True))
    logs = tmp_path / "logs"
    paths = appended(logs, first, second, third)
    hang = format_tagged(
        "hang", "detected", silent_s=hang_after_s, threshold_s=120.0, median_step_s=1.6,
        waits="orchestrator>trainer:weights/step_19",
    )  # fmt: skip
    (logs / "rl.log").write_text(f"{_stamp(first.orchestrator[-1], hang_after_s)}{hang}\n")
    return [*paths, logs / "rl.log"], [first, second, third]


def test_a_pause_the_run_went_on_after_before_a_later_crash_is_still_a_pause(tmp_path, analyze):
    """The run paused 200 s after step 19 (the watchdog's [hang] 150 s in), went on to step 39, then
    crashed and was resumed at step 35: every hang before the orchestrator's restart was kept with
    that restart before the pause test ran, so the pause vanished ('No bottleneck found') and the
    restart read 'before it, the launcher's watchdog saw a hang', as if the hang had been its
    cause. The hang is a pause of the run before the restart: the processes it named made progress
    after it before the restart; a hang with none after it before the restart is still kept with
    the restart (test_a_hang_before_the_last_restart_is_listed_beside_the_restart_and_is_no_finding)."""
    paths, _ = _paused_then_resumed(tmp_path)
    summary, md = analyze(paths, tmp_path / "out")
    assert summary["primary"]["kind"] == "pause", summary["findings"]
    pause = summary["primary"]
    before, after = _progress_around_hang(paths)
    assert 199.0 < after - before < 201.0
    assert pause["share"] == pytest.approx((after - before) / summary["run_seconds"])
    assert pause["title"] == (
        f"Pause: no progress for {after - before:.0f} s after step 19, then the run went on (the launcher's "
        "watchdog saw a hang)"
    )
    assert pause["evidence"].endswith("then the run went on, to step 39")  # the run before the restart
    assert all(r["hangs_before"] == [] for r in summary["restarts"])
    assert "watchdog saw a hang at" not in md.split("## Restarts", 1)[1]


def _hang_in_start_up(tmp_path: Path, resumed: bool) -> tuple[list[Path], float]:
    """The servers take 1900 s to load: the run.start lines at once, the watchdog's [hang] 1800 s
    after them (first_step_s), then the run goes on, steps 0..9 (the reviewer's s45); ``resumed``:
    that is the start-up of a run resumed at step 5, 300 s after the first run (steps 0..9) crashed
    (s44). The paths and the run's start (its run.start lines)."""
    runs = []
    if resumed:
        runs.append(make_run("healthy", steps=10, seed=1))
        end = max(_ts(x) for x in runs[0].orchestrator + runs[0].trainer + runs[0].inference)
        began = end + 300.0
    else:
        began = _ts(make_run("healthy", steps=1, seed=1).orchestrator[0])
    base = _ts(make_run("healthy", steps=1, seed=1).orchestrator[0])
    first = 5 if resumed else 0
    second = make_run("healthy", steps=10, seed=2, first_step=first, start_offset_s=began - base + 1900.0)
    start = _stamp(second.orchestrator[0], -1900.0)
    second.orchestrator.insert(0, start + format_tagged("gen", "run.start", step=first, resume=resumed))
    second.trainer.insert(0, start + format_tagged("train", "run.start", step=first, resume=resumed))
    runs.append(second)
    logs = tmp_path / "logs"
    logs.mkdir(parents=True)
    paths = []
    for name in ("orchestrator", "inference", "trainer"):
        path = logs / f"{name}.log"
        path.write_text("\n".join(x for run in runs for x in getattr(run, name)) + "\n")
        paths.append(path)
    hang = format_tagged(
        "hang", "detected", silent_s=1800.0, threshold_s=1800.0, median_step_s=0.0,
        waits="orchestrator>inference:servers",
    )  # fmt: skip
    (logs / "rl.log").write_text(f"{_stamp(second.orchestrator[0], 1800.0)}{hang}\n")
    return [*paths, logs / "rl.log"], began


def test_a_hang_in_start_up_the_run_went_on_after_is_a_pause_in_start_up_of_no_run_time(tmp_path, analyze):
    """A fresh run whose servers took 1900 s to load, the watchdog's [hang] at 1800 s, then all its
    steps: 'Hang', share 1.0, nothing saying the run went on (a pause needed progress before the
    hang). After a resume the same read 'Pause: no progress for 2200 s after step 9' with share 32
    (3200% of the run): the crash and the start-up, which the report leaves out of the run's time
    as down time. A hang the run went on after is a pause also without progress before it in its
    run: from the run's start (its run.start), in start-up, its share the part of it in the run's
    time. None of it is (start-up and down time are left out): then it was still the primary
    finding, 'Pause in start-up: no progress for 1900 s' at 0% of the run, above the healthy
    verdict, which only told how long the servers took to load. A pause that costs the run nothing
    is no finding: the warnings note it, with how long the start-up took."""
    for resumed in (False, True):
        paths, began = _hang_in_start_up(tmp_path / str(resumed), resumed)
        summary, md = analyze(paths, tmp_path / f"out{resumed}")
        assert summary["findings"] == [], summary["findings"]
        assert summary["primary"] is None
        run = "the run resumed at step 5" if resumed else "the run"
        (note,) = [w for w in summary["warnings"] if "watchdog saw 1 hang(s) the run went on after" in w]
        assert "none of whose time is run time" in note and "so no finding" in note
        assert f"no progress for 1900 s from the start of {run} to its first progress at " in note
        assert f"- {note}" in md
        assert summary["run_seconds"] < 100.0
        if resumed:  # the crash and the start-up are down time
            assert 2199.0 < summary["down_seconds"] < 2201.0


def test_a_pause_s_time_in_the_run_leaves_out_down_time_and_what_is_outside_the_run():
    from prime_rl.analysis.restarts import run_time_within

    # two pauses that overlap count once; a down time inside one, and the run's ends, are left out
    assert run_time_within([(10.0, 30.0), (20.0, 40.0)], (0.0, 100.0), [(25.0, 35.0), (30.0, 36.0)]) == 19.0
    assert run_time_within([(-50.0, 10.0), (90.0, 200.0)], (0.0, 100.0), []) == 20.0
    assert run_time_within([(10.0, 20.0)], (0.0, 100.0), [(0.0, 50.0)]) == 0.0


def test_a_hang_line_with_no_time_is_judged_by_its_placement(tmp_path, analyze):
    """The paused run of _paused (200 s after step 19, then steps 20..39) whose [hang] line has no
    time (a console capture), between a line of rl.log before the run and one a second after the
    pause (the reviewer's s47): placed by its position, yet always 'Hang', share 1.0, though the
    steps logged after it show the run went on. Between those times the logs hold one silence as
    long as its silent_s (150 s), the pause: it is judged there as a line with that time would be.
    When the times around it leave several such silences (the pause, and the end of the logs after
    it) and the steps its waits= names leave both, or it has none, whether the run went on is not
    known: a hang, as before, and it says so."""
    paths = _paused(tmp_path / "a")
    rl = paths[-1]
    hung = rl.read_text()
    line = hung[36:]  # the [hang] line without its time
    pause_end = min(t for t in _progress_times(paths[0]) if t > _ts(hung))
    rl.write_text(
        f"{_stamp(hung, -3000.0)}starting\n{line}{_stamp(hung, pause_end - _ts(hung) + 1.0)}went on\n"
    )
    summary, md = analyze(paths, tmp_path / "out")
    assert not any(f["kind"] == "hang" for f in summary["findings"]), summary["findings"]
    pause = summary["primary"]
    assert pause["kind"] == "pause" and pause["title"].startswith(
        "Pause: no progress for 200 s after step 19"
    )
    assert 0.5 < pause["share"] < 1.0
    assert f"({rl}:2; its line has no time: placed between " in pause["evidence"]
    assert pause["evidence"].endswith("then the run went on, to step 39")
    # the line after it an hour later: the end of the logs is a silence it may have ended too, but
    # the trainer had logged step 39 there, past the weights/step_19 its waits= names: the pause
    rl.write_text(f"{_stamp(hung, -3000.0)}starting\n{line}{_stamp(hung, 3600.0)}went on\n")
    summary, md = analyze(paths, tmp_path / "out3")
    assert summary["primary"]["kind"] == "pause", summary["findings"]
    # with waits= naming no step, nothing tells the two apart
    line = line.replace("waits=orchestrator>trainer:weights/step_19", "waits=none")
    rl.write_text(f"{_stamp(hung, -3000.0)}starting\n{line}{_stamp(hung, 3600.0)}went on\n")
    summary, md = analyze(paths, tmp_path / "out2")
    hang = summary["primary"]
    assert hang["kind"] == "hang" and hang["share"] == 1.0, summary["findings"]
    assert "its line has no time, and the times around it in its file (" in hang["evidence"]
    assert "whether the run went on after it is not known, so it is taken as a hang" in hang["evidence"]
    # the logs end in the pause: the only silence it may have ended is the last, a hang it is
    paths = _paused(tmp_path / "b", went_on=())
    paths[-1].write_text(f"{_stamp(hung, -3000.0)}starting\n{line}{_stamp(hung, 3600.0)}went on\n")
    summary, md = analyze(paths, tmp_path / "out4")
    hang = summary["primary"]
    assert hang["kind"] == "hang" and "is not known" not in hang["evidence"], summary["findings"]


def test_a_retried_update_never_answered_is_unanswered_alone_not_retried(tmp_path, analyze):
    """The columns do not overlap: `retried` counts updates answered after more than one attempt, an
    update never answered is `unanswered` alone, also when the orchestrator had retried it. The last
    update to http://h1:8000 failed once (the client's retry warning), was sent again (attempt=2) and
    never answered where the logs end (600 s later): h1 reads 5 updates, 0 retried, 1 unanswered."""
    from tests.support.synthetic_logs import Shape

    run = make_run("healthy", steps=8, seed=4, shape=Shape(servers=2))
    files = run.write(tmp_path / "logs")
    send = max(i for i, x in enumerate(run.orchestrator) if "client.send" in x and "http://h1:8000" in x)
    tid = run.orchestrator[send].split("[weights][")[1].split("]")[0]
    orchestrator = [x for x in run.orchestrator if not (tid in x and "client.done" in x and "h1:8000" in x)]
    at = orchestrator.index(run.orchestrator[send])
    t0 = float(orchestrator[at].split(" t=")[1].split()[0])
    warning = _stamp(orchestrator[at], 0.2).replace("INFO   ", "WARNING") + (
        f"[weights][{tid}] /update_weights to http://h1:8000 failed (503); retry 1 in 0.30s"
    )
    again = _stamp(orchestrator[at], 0.5) + format_tagged(
        "weights", "client.send", tid, url="http://h1:8000", path="/update_weights", t=t0 + 0.5, attempt=2
    )
    orchestrator[at + 1 : at + 1] = [warning, again]
    orchestrator.append(_stamp(orchestrator[-1], 600.0) + "still waiting")
    files["orchestrator"].write_text("\n".join(orchestrator) + "\n")
    summary, md = analyze(files.values(), tmp_path / "out")
    by_url = {s["url"]: (s["updates"], s["retried"], s["unanswered"]) for s in summary["servers"]}
    assert by_url == {"http://h:8000": (6, 0, 0), "http://h1:8000": (5, 0, 1)}
    assert "| http://h1:8000 | 5 | 0 | 0 |" in md


def test_a_hang_line_with_no_time_around_it_is_placed_within_the_other_logs_time(tmp_path, analyze):
    """The [hang] line of test_a_hang_line_with_no_time_is_judged_by_its_placement alone in rl.log (a
    console capture: no line of its file has a time) stayed 'Hang', share 1.0, though the run went on
    for 20 steps after the pause: with no time after it, the search for the silence it ended had no
    end. The launcher writes it while its children run: it is looked for within the other logs' time
    first, where the pause is the one silence of 150 s and more (the logs' end comes right after the
    last step), and judged there; only when none fits there is it looked for after their last line
    too: a run whose logs end in the pause is a hang, known as one."""
    paths = _paused(tmp_path / "a")
    rl = paths[-1]
    hung = rl.read_text()
    line = hung[36:]  # the [hang] line without its time
    rl.write_text(line)
    summary, md = analyze(paths, tmp_path / "out")
    assert not any(f["kind"] == "hang" for f in summary["findings"]), summary["findings"]
    pause = summary["primary"]
    assert pause["kind"] == "pause" and pause["title"].startswith(
        "Pause: no progress for 200 s after step 19"
    )
    assert 0.5 < pause["share"] < 1.0
    assert f"({rl}:1; its line has no time: placed between " in pause["evidence"]
    assert pause["evidence"].endswith("then the run went on, to step 39")
    # the logs end in the pause: no silence within them holds it, the one after their end does
    paths = _paused(tmp_path / "b", went_on=())
    paths[-1].write_text(line)
    summary, md = analyze(paths, tmp_path / "out2")
    hang = summary["primary"]
    assert hang["kind"] == "hang" and hang["share"] == 1.0, summary["findings"]
    assert "is not known" not in hang["evidence"] and "no line around it" not in hang["evidence"]


def _clock(t: float) -> str:
    """The loguru time of ``t`` seconds after 2026-01-01 12:10:00."""
    from datetime import datetime, timedelta

    return (datetime(2026, 1, 1, 12, 10) + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


@pytest.mark.parametrize(
    "median, waits",
    [
        ("5.0", "trainer>orchestrator:rollouts/step_20"),
        ("unknown", "trainer>orchestrator:rollouts/step_20"),
        ("5.0", "none"),
        ("unknown", "none"),
    ],
)
def test_a_hang_line_with_no_time_is_not_put_in_a_silence_its_steps_rule_out(
    tmp_path, analyze, median, waits
):
    """A run whose first batch took 200 s (within the watchdog's first_step_s: no [hang] then), then 5 s
    steps 1..19, that hung in step 20 where its logs end; rl.log a console capture with the one
    untimed [hang] line (silent_s=150; the reviewer's d6). It read 'Pause: no progress for 200 s after
    step 0, then the run went on' (share 0.67): the line was looked for within the other logs' time
    first, and the first batch's silence is as long as its silent_s. The trainer waiting for
    rollouts/step_20 had logged step 19, and a line with a median_step_s came after two steps of its
    run: either puts it after the logs' end, a hang. With neither, both silences fit: whether the run
    went on is not known, a hang, as a line with no time was before, and it says so."""
    logs = tmp_path / "logs"
    _step_logs(logs, slow=(0, 200.0), run_start=True, hung_at=20)
    rl = logs / "rl.log"
    hang = format_tagged(
        "hang", "detected", silent_s=150.0, threshold_s=120.0, median_step_s=median, waits=waits
    )
    rl.write_text(hang + "\n")
    summary, md = analyze([logs / "orchestrator.log", logs / "trainer.log", rl], tmp_path / "out")
    assert not any(f["kind"] == "pause" for f in summary["findings"]), summary["findings"]
    hang = summary["primary"]
    assert hang["kind"] == "hang" and hang["share"] == 1.0, summary["findings"]
    assert ("is not known" in hang["evidence"]) == ((median, waits) == ("unknown", "none")), hang["evidence"]


def _crashed_inside(tmp_path: Path, inside: str, resumed: str = "run.start", resume_waits: bool = False):
    """A healthy run of 5 s batches (steps 0..9) that crashed 40 s into a batch or a wait of step 10's,
    every process silent from then on, resumed at step 8 ten minutes later (``resumed``: ``run.start``,
    each process's run.start line; ``old``: none, the steps go back; ``none``: the logs end there).
    ``inside``: ``generation`` (its [gen] batch.start, then the orchestrator's [server] metrics every
    5 s until the crash; the trainer waits for its rollouts: [train] wait.start) or ``checkpoint
    wait`` (its [ckpt] wait.start for weights step 9 while the trainer computes step 9 for 40 s and
    dies writing them). ``resume_waits``: the resumed trainer waits for rollouts (start-up) before its
    first step.done. The paths and the runs."""
    first = make_run("healthy", steps=10, seed=1, shape=Shape(gen_ms=5000.0))
    last = max(first.orchestrator + first.trainer + first.inference, key=_ts)
    if inside == "generation":
        first.orchestrator.append(
            _stamp(last, 0.1) + format_tagged("gen", "batch.start", step=10, inflight=64, target_batch=256)
        )
        first.trainer.append(_stamp(last, 0.1) + format_tagged("train", "wait.start", step=10))
        for k in range(1, 9):  # the last at 40.1 s: the crash
            metrics = dict(url="http://h:8000", running=8, waiting=0, kv_cache_pct=30.0, preemptions=7)
            first.orchestrator.append(
                _stamp(last, 0.1 + 5 * k) + format_tagged("server", "metrics", **metrics)
            )
    else:
        first.orchestrator.append(_stamp(last, 0.1) + format_tagged("ckpt", "wait.start", target_step=9))
        first.trainer.append(
            _stamp(last, 40.1) + format_tagged("train", "compute.done", step=9, train_ms=40000.0)
        )
    offset = _ts(last) - _ts(first.orchestrator[0]) + 640.0
    second = make_run(
        "healthy", steps=6, seed=2, first_step=8, start_offset_s=offset, shape=Shape(gen_ms=5000.0)
    )
    if resume_waits:
        i = next(k for k, x in enumerate(second.trainer) if "[train] step.done" in x)
        second.trainer[i:i] = [
            _stamp(second.trainer[i], -2.0) + format_tagged("train", "wait.start", step=8),
            _stamp(second.trainer[i], -1.5) + format_tagged("train", "wait.done", step=8, wait_ms=500.0),
        ]
    if resumed == "run.start":
        for run, step in ((first, 0), (second, 8)):
            began = _stamp(run.orchestrator[0], -1.0)
            run.orchestrator.insert(0, began + format_tagged("gen", "run.start", step=step, resume=step > 0))
            run.trainer.insert(0, began + format_tagged("train", "run.start", step=step, resume=step > 0))
    runs = (first,) if resumed == "none" else (first, second)
    return appended(tmp_path / "logs", *runs), runs


@pytest.mark.parametrize("resumed", ["run.start", "old", "none"])
def test_a_batch_or_wait_a_crash_left_open_counts_in_its_stage(tmp_path, analyze, resumed):
    """A run that crashed 40 s into a generation batch (its steps take 5 s) and was resumed: the time
    from the batch's [gen] batch.start to the crash (where the down time begins: every process silent)
    is run time, but no line ended the batch, so no stage counted it: generation read 78.0 s of a
    121.6 s run and the orchestrator's rows added up to 81.5 s; the trainer's wait for those rollouts
    (its [train] wait.start, open too) was in no stage either. The same with a crash 40 s into a wait
    for weights ([ckpt] wait.start): checkpoint wait 0.3 s where the orchestrator waited 40.3 s. The
    batch or wait open where a run crashed counts in its stage up to the crash, as one open where the
    logs end counts up to their end (the stall rule's wait; ``none``: the logs end 40 s into it), also
    in logs without run.start lines (``old``)."""
    paths, runs = _crashed_inside(tmp_path / "gen", "generation", resumed)
    summary, md = analyze(paths, tmp_path / "out")
    stages = {s["name"]: s["total_ms"] for s in summary["stages"]}
    done = _field_sum([x for run in runs for x in run.orchestrator], "[gen] batch.done", "dur_ms")
    # the open batch from its batch.start to the crash (the orchestrator's last [server] metrics line)
    assert stages["generation"] + stages["verification (scoring)"] == pytest.approx(done + 40_000.0, abs=1.0)
    # the trainer's wait for them, from its wait.start 0.1 s into the batch (each run's first step's
    # wait is start-up)
    steps = [[x for x in run.trainer if "[train] step.done" in x][1:] for run in runs]
    waits = _field_sum([x for run in steps for x in run], "[train] step.done", "wait_ms")
    assert stages["trainer waits for rollouts"] == pytest.approx(waits + 40_000.0, abs=1.0)
    # the orchestrator's rows add up to its time (each step's lines but its updates' and waits' come
    # in the same millisecond, the first batch's 0.5 ms before the run starts)
    orchestrator = [s for s in summary["stages"] if s["process"] == "orchestrator" and not s.get("within")]
    assert math.fsum(s["share"] for s in orchestrator if not s.get("beside")) == pytest.approx(1.0, abs=0.01)

    paths, runs = _crashed_inside(tmp_path / "ckpt", "checkpoint wait", resumed)
    summary, md = analyze(paths, tmp_path / "out2")
    stages = {s["name"]: s["total_ms"] for s in summary["stages"]}
    # the resumed run's wait before its first batch is its load of weights: start-up
    waits = [[x for x in run.orchestrator if "[ckpt] wait.done" in x][k:] for k, run in enumerate(runs)]
    waited = _field_sum([x for run in waits for x in run], "[ckpt] wait.done", "wait_ms")
    # the open wait from its wait.start to the crash (the trainer's compute.done of step 9)
    assert stages["checkpoint wait"] == pytest.approx(waited + 40_000.0, abs=1.0)
    orchestrator = [s for s in summary["stages"] if s["process"] == "orchestrator" and not s.get("within")]
    assert math.fsum(s["share"] for s in orchestrator if not s.get("beside")) == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("resumed", ["run.start", "old"])
def test_a_trainer_wait_a_crash_left_open_is_no_stall_once_the_run_resumed(tmp_path, analyze, resumed):
    """The run of test_a_batch_or_wait_a_crash_left_open_counts_in_its_stage whose trainer crashed in its
    wait for step 10's rollouts ([train] wait.start, no wait.done) and was resumed at step 8. In logs
    without run.start lines (``old``) the crashed wait stayed the trainer's open wait, whatever the
    resumed run did after it: 'Stall: the trainer waits for the rollouts of step 10, which the
    orchestrator never wrote', though the resumed run trained steps 8..13. The step going back (the
    resumed run's first step.done) closes it, as run.start does."""
    paths, runs = _crashed_inside(tmp_path / "gen", "generation", resumed)
    summary, md = analyze(paths, tmp_path / "out")
    assert not [f for f in summary["findings"] if f["kind"] == "stall"], summary["findings"]
    assert "Stall" not in md


def _crashed_in_an_update(
    tmp_path: Path, received: bool, resumed: str, gap_s: float = 600.0, background=False
):
    """The run of :func:`_crashed_inside` (5 s batches, steps 0..9) whose orchestrator waited for weights
    step 9 and sent their update t0010 (``[weights] client.send``, 0.1 s after the run's last line), then
    logged only its [server] metrics every 5 s until the crash 40.1 s after that line: every process
    silent from then on. ``received``: the server logged ``server.recv`` and ``rpc.start`` 5 ms after
    the send and no ``rpc.done`` (its engine reloading for 40 s); else no line (the request never
    reached it). Resumed at step 8 ``gap_s`` later (``resumed`` as for :func:`_crashed_inside`): the
    resumed run sends t0010 again (attempt=1) and it is answered. The paths and the runs."""
    first = make_run("healthy", steps=10, seed=1, shape=Shape(gen_ms=5000.0))
    last = max(first.orchestrator + first.trainer + first.inference, key=_ts)
    clock = 1000.0 + _ts(last) - _ts(first.orchestrator[0])  # the t= clock of the synthetic run
    first.orchestrator += [
        _stamp(last, 0.05) + format_tagged("ckpt", "wait.start", target_step=9),
        _stamp(last, 0.08) + format_tagged("ckpt", "wait.done", target_step=9, wait_ms=30.0),
        _stamp(last, 0.1)
        + format_tagged(
            "weights", "client.send", "t0010", url="http://h:8000", path="/update_weights",
            t=f"{clock + 0.1:.6f}", attempt=1, background="true" if background else "false",
        ),
    ]  # fmt: skip
    if received:
        first.inference += [
            _stamp(last, 0.105)
            + format_tagged(
                "weights", "server.recv", "t0010", path="/update_weights", t=f"{clock + 0.105:.6f}"
            ),
            _stamp(last, 0.105)
            + format_tagged("weights", "rpc.start", "t0010", op="update_weights", t=f"{clock + 0.105:.6f}"),
        ]
    for k in range(1, 9):  # the last at 40.1 s: the crash
        metrics = dict(url="http://h:8000", running=0, waiting=0, kv_cache_pct=30.0, preemptions=7)
        first.orchestrator.append(_stamp(last, 0.1 + 5 * k) + format_tagged("server", "metrics", **metrics))
    offset = _ts(last) - _ts(first.orchestrator[0]) + 40.1 + gap_s
    second = make_run(
        "healthy", steps=6, seed=2, first_step=8, start_offset_s=offset, shape=Shape(gen_ms=5000.0)
    )
    assert any("[weights][t0010] client.done" in x for x in second.orchestrator)  # the resend, answered
    if resumed == "run.start":
        for run, step in ((first, 0), (second, 8)):
            began = _stamp(run.orchestrator[0], -1.0)
            run.orchestrator.insert(0, began + format_tagged("gen", "run.start", step=step, resume=step > 0))
            run.trainer.insert(0, began + format_tagged("train", "run.start", step=step, resume=step > 0))
    runs = (first,) if resumed == "none" else (first, second)
    return appended(tmp_path / "logs", *runs), runs


@pytest.mark.parametrize(
    "resumed, gap_s", [("run.start", 600.0), ("old", 600.0), ("run.start", 20.0), ("none", 0.0)]
)
@pytest.mark.parametrize("received", [True, False], ids=["rpc", "queue"])
def test_a_weight_update_a_crash_left_unanswered_counts_in_its_stage(
    tmp_path, analyze, resumed, gap_s, received
):
    """A run that crashed 40 s into a weight update (client.send; the server's server.recv and rpc.start,
    no rpc.done) and was resumed: the 40 s from the send to the crash (where the down time begins,
    every process silent) are run time, but no stage counted them: 'weight update: rpc' read 2.7 s of
    a 121.6 s run, the orchestrator's rows added up to 0.670 of it. They count now, as a batch left open
    does (test_a_batch_or_wait_a_crash_left_open_counts_in_its_stage): rpc from the server's rpc.start
    (39.995 s), queue before its server.recv (5 ms); where the server never received it, all 40 s are
    queue. The resumed run's resend under the same trace id (attempt=1) is an update of its own, also
    when the resume came 20 s after the crash (one trace id, one ten-minute window); ``none``: the logs
    end 40 s into the update (the stall rule's), which counts up to their end."""
    paths, runs = _crashed_in_an_update(tmp_path / "logs", received, resumed, gap_s)
    summary, md = analyze(paths, tmp_path / "out")
    stages = {s["name"]: s["total_ms"] for s in summary["stages"]}
    answered = [x for run in runs for x in run.orchestrator]
    rpc = _field_sum(answered, "client.done", "rpc_ms")  # every answered update's, both runs'
    # the answered updates' queue: client.send -> server.recv (no server_ms: the server had each from
    # its server.recv on), paired in order, the crashed update's lines left out
    sends = [x for x in answered if "client.send" in x]
    recvs = [x for run in runs for x in run.inference if "server.recv" in x]
    sends = [x for x in sends if not ("[t0010]" in x and x in runs[0].orchestrator)]
    recvs = [x for x in recvs if not ("[t0010]" in x and x in runs[0].inference)]
    t = lambda x: float(x.split(" t=")[1].split()[0])  # noqa: E731
    assert len(sends) == len(recvs) == len([x for x in answered if "client.done" in x])
    queue = math.fsum((t(r) - t(c)) * 1000.0 for c, r in zip(sends, recvs, strict=True))
    # the crashed update: sent 0.1 s after the run's last line, received at 0.105 s, its rpc.start then;
    # the crash (the orchestrator's last line) at 40.1 s
    if received:
        assert stages["weight update: rpc"] == pytest.approx(rpc + 39_995.0, abs=1.0)
        assert stages["weight update: queue"] == pytest.approx(queue + 5.0, abs=1.0)
    else:
        assert stages["weight update: rpc"] == pytest.approx(rpc, abs=1.0)
        assert stages["weight update: queue"] == pytest.approx(queue + 40_000.0, abs=1.0)
    orchestrator = [s for s in summary["stages"] if s["process"] == "orchestrator" and not s.get("within")]
    assert math.fsum(s["share"] for s in orchestrator if not s.get("beside")) == pytest.approx(1.0, abs=0.01)


def test_a_health_loop_update_a_crash_left_unanswered_counts_in_no_stage(tmp_path, analyze):
    """The update of test_a_weight_update_a_crash_left_unanswered_counts_in_its_stage sent by the
    orchestrator's health loop (background=true): no step waited for it, so no weight-update stage
    counts it, unanswered or not."""
    paths, runs = _crashed_in_an_update(tmp_path / "logs", True, "run.start", background=True)
    summary, md = analyze(paths, tmp_path / "out")
    stages = {s["name"]: s["total_ms"] for s in summary["stages"]}
    answered = [x for run in runs for x in run.orchestrator]
    assert stages["weight update: rpc"] == pytest.approx(
        _field_sum(answered, "client.done", "rpc_ms"), abs=1.0
    )


@pytest.mark.parametrize("resumed", ["run.start", "old"])
def test_a_trainer_wait_a_crash_left_open_counts_also_when_its_resume_waits_before_its_first_step(
    tmp_path, analyze, resumed
):
    """The generation crash of test_a_batch_or_wait_a_crash_left_open_counts_in_its_stage (every process
    silent from 40.1 s into step 10's batch; the trainer in its wait for those rollouts since 0.1 s)
    whose resumed trainer waits for rollouts before its first step.done (start-up): in logs without
    run.start lines that wait's wait.done ended the crashed wait, which then counted in no stage
    (trainer waits 0.42 s, with run.start lines 40.42 s). The lines a resume logs after its process's
    silence, before its step goes back, are the resumed run's: the crashed wait counts its 40 s in
    both."""
    paths, runs = _crashed_inside(tmp_path / "gen", "generation", resumed, resume_waits=True)
    summary, md = analyze(paths, tmp_path / "out")
    stages = {s["name"]: s["total_ms"] for s in summary["stages"]}
    steps = [[x for x in run.trainer if "[train] step.done" in x][1:] for run in runs]
    waits = _field_sum([x for run in steps for x in run], "[train] step.done", "wait_ms")
    assert stages["trainer waits for rollouts"] == pytest.approx(waits + 40_000.0, abs=1.0)


def _alone_at(t: float, tag: str, event: str, tid: str | None = None, /, **fields) -> tuple[float, str]:
    """A line ``t`` seconds after 2026-01-01 12:00:00 (kept with its time, to sort a log by; ``tid``:
    its trace id)."""
    from datetime import datetime, timedelta

    stamp = (datetime(2026, 1, 1, 12) + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return t, f"{stamp} | INFO    | " + format_tagged(tag, event, tid, **fields)


def _crashed_alone(
    root: Path, crashed: str, run_start: bool, before_start: bool = False, resume_at: int = 8
) -> list[Path]:
    """A run of 5 s steps (async level 2; steps 0..19) of which one process crashed alone while the
    other went on (processes run by hand: the launcher stops every process when one exits), resumed
    at an earlier step (``run_start``: each run's ``run.start`` lines, 0.5 s before its first line;
    else none, its step goes back). The orchestrator's step ``s`` from ``5 s``: a 10 ms wait for
    weights ``s - 2`` (from step 2), a 4.99 s batch; the trainer's step ``s`` waits for its rollouts
    from ``5 s + 3`` to ``5 s + 5`` (step 0: from 0), then trains 3 s. ``crashed``:

    - ``trainer``: its last line is its [train] wait.start step=10 at 53 s; the orchestrator wrote
      step 10's rollouts at 54.99 s and goes on to step 11, then waits for weights step 10 from 60
      s. The trainer is resumed at 100 s: a start-up wait (no time), steps 8, 9, 10 done at 103, 106,
      109 s (its write of step 10 ends the orchestrator's wait), 11 and 12 after them.
    - ``compute``: as ``trainer``, but its wait for step 10 ended ([train] wait.done step=10
      wait_ms=2000 at 55 s, its last line): it crashed computing step 10. ``publish``: as ``compute``
      and its [train] compute.done step=10 train_ms=3000 at 58 s, its last line: it crashed
      publishing step 10. ``resume_at``: the trainer's resume is at that step (8 or 10), steps from it
      to 10 each done 3 s after the one before (from 100 s), the orchestrator's wait for weights
      step 10 ended by the last.
    - ``batch``: the orchestrator's last lines are its [gen] batch.start step=10 at 50.01 s and a
      request.retry at 53 s; resumed at 90 s, it loads weights until 100 s, redoes steps 9 and 10
      (5 s each); the trainer waits for step 10's rollouts from 53 to 110 s.
    - ``checkpoint``: the orchestrator's last line is its [ckpt] wait.start target_step=8 at 50 s
      (weights the trainer wrote at 48 s); resumed at 171 s, it loads weights until 175 s, redoes
      steps 8 and 9 (5 s each); the trainer waits for step 10's rollouts from 58 s.
    - ``update``: after its wait for weights step 8 (50 -> 50.01 s) the orchestrator sends their update
      t0010 at 50.01 s ([weights] client.send; the server's server.recv and rpc.start 5 ms later, no
      rpc.done) and its last line is a [server] metrics line at 53.01 s, 3 s into the update; resumed
      at 173.01 s, it loads weights until 177.01 s, sends t0010 again (attempt=1, a new process: 5 ms
      of queue, 195 ms of rpc; start-up, before its first batch), redoes steps 8 and 9 (5 s each); the
      trainer waits for step 10's rollouts from 58 s. The server's lines are inference.log's (its clock ``t=`` the
      seconds of the lines' times).

    ``before_start``: the resumed process logs a line of its start-up before its run.start time (in both
    formats): the trainer publishes weights/step_8 again from its checkpoint ([ckpt] write.done at 99 s,
    as train.py does when the crash tore them or retention deleted them), the orchestrator a [server]
    metrics line 0.2 s before it."""
    orchestrator: list[tuple[float, str]] = []
    trainer: list[tuple[float, str]] = []
    inference: list[tuple[float, str]] = []

    def update(t: float, attempt: int, rpc_s: float | None) -> None:
        url, path = "http://h:8000", "/update_weights"
        orchestrator.append(
            _alone_at(t, "weights", "client.send", "t0010", url=url, path=path, t=f"{t:.6f}", attempt=attempt)
        )
        recv = t + 0.005
        inference.append(_alone_at(recv, "weights", "server.recv", "t0010", path=path, t=f"{recv:.6f}"))
        inference.append(
            _alone_at(recv, "weights", "rpc.start", "t0010", op="update_weights", t=f"{recv:.6f}")
        )
        if rpc_s is None:  # no answer: the crash
            return
        end = recv + rpc_s
        rpc_ms = rpc_s * 1000.0
        inference.append(
            _alone_at(end, "weights", "rpc.done", "t0010", op="update_weights", t=f"{end:.6f}", rpc_ms=rpc_ms)
        )
        wall_ms = (end - t) * 1000.0
        done = dict(url=url, wall_ms=wall_ms, rpc_ms=rpc_ms, queue_ms=wall_ms - rpc_ms)
        orchestrator.append(_alone_at(end, "weights", "client.done", "t0010", **done))

    def orchestrator_step(s: int, t: float, batch_s: float = 4.99, wait: bool = True) -> float:
        if s > 1 and wait:
            orchestrator.append(_alone_at(t, "ckpt", "wait.start", target_step=s - 2))
            orchestrator.append(_alone_at(t + 0.01, "ckpt", "wait.done", target_step=s - 2, wait_ms=10.0))
            t += 0.01
        orchestrator.append(_alone_at(t, "gen", "batch.start", step=s, inflight=64, target_batch=256))
        done = dict(step=s, completions=256, dur_ms=batch_s * 1000.0, inflight=64)
        orchestrator.append(_alone_at(t + batch_s, "gen", "batch.done", **done))
        orchestrator.append(
            _alone_at(t + batch_s, "verify", "batch.done", step=s, completions=256, dur_ms=10.0)
        )
        return t + batch_s

    def trainer_step(s: int, waits: float, waited: float) -> float:
        wait_ms = (waited - waits) * 1000.0
        trainer.append(_alone_at(waits, "train", "wait.start", step=s))
        trainer.append(_alone_at(waited, "train", "wait.done", step=s, wait_ms=wait_ms))
        done = dict(step=s, wait_ms=wait_ms, train_ms=3000.0, write_ms=40.0)
        trainer.append(_alone_at(waited + 3.0, "train", "step.done", **done))
        trainer.append(_alone_at(waited + 3.0, "ckpt", "write.done", step=s, write_ms=40.0))
        return waited + 3.0

    def begun(log: list[tuple[float, str]], t: float, tag: str, step: int, **fields) -> None:
        if run_start:
            log.append(_alone_at(t - 0.5, tag, "run.start", step=step, resume=step > 0, **fields))

    begun(orchestrator, 0.0, "gen", 0, async_level=2)
    begun(trainer, 0.0, "train", 0)
    done = trainer_step(0, 0.0, 5.0)
    for s in range(1, 10):
        done = trainer_step(s, 5 * s + 3.0, 5 * s + 5.0)  # step 9 done at 53 s
    if crashed in ("trainer", "compute", "publish"):
        for s in range(12):
            t = orchestrator_step(s, 5.0 * s)
        trainer.append(_alone_at(53.0, "train", "wait.start", step=10))  # the crash (trainer)
        if crashed != "trainer":  # its wait for step 10 ends at 55 s, then it computes
            trainer.append(_alone_at(55.0, "train", "wait.done", step=10, wait_ms=2000.0))
        if crashed == "publish":
            trainer.append(_alone_at(58.0, "train", "compute.done", step=10, train_ms=3000.0))
        orchestrator.append(_alone_at(60.0, "ckpt", "wait.start", target_step=10))
        if before_start:  # the resumed trainer publishes weights/step_8 again before its run.start
            republished = dict(step=8, write_ms=900.0, bytes=1000, shards=1, background="false")
            trainer.append(_alone_at(99.0, "ckpt", "write.done", **republished))
        begun(trainer, 100.0, "train", resume_at)
        done = 100.0
        for s in range(resume_at, 11):
            done = trainer_step(s, done, done)
        waited = dict(target_step=10, wait_ms=(done - 60.0) * 1000.0)
        orchestrator.append(_alone_at(done, "ckpt", "wait.done", **waited))
        t = orchestrator_step(12, done, 5.0, wait=False)
        done = trainer_step(12, trainer_step(11, done, done), t)  # waits 112..114 s
        first = 13
    else:
        for s in range(10):
            t = orchestrator_step(s, 5.0 * s)
        if crashed == "batch":
            orchestrator.append(_alone_at(50.0, "ckpt", "wait.start", target_step=8))
            orchestrator.append(_alone_at(50.01, "ckpt", "wait.done", target_step=8, wait_ms=10.0))
            orchestrator.append(
                _alone_at(50.01, "gen", "batch.start", step=10, inflight=64, target_batch=256)
            )
            retry = dict(url="http://h:8000", status=500, attempt=1, wait_ms=100.0)
            orchestrator.append(_alone_at(53.0, "gen", "request.retry", **retry))  # the crash
            t, step, load = 90.0, 9, 10.0
        elif crashed == "update":
            orchestrator.append(_alone_at(50.0, "ckpt", "wait.start", target_step=8))
            orchestrator.append(_alone_at(50.01, "ckpt", "wait.done", target_step=8, wait_ms=10.0))
            update(50.01, 1, None)
            metrics = dict(url="http://h:8000", running=0, waiting=0, kv_cache_pct=30.0, preemptions=7)
            orchestrator.append(_alone_at(53.01, "server", "metrics", **metrics))  # the crash
            t, step, load = 173.01, 8, 4.0
        else:
            orchestrator.append(_alone_at(50.0, "ckpt", "wait.start", target_step=8))  # the crash
            t, step, load = 171.0, 8, 4.0
        if before_start:  # the resumed orchestrator's scraper logs before its run.start
            metrics = dict(url="http://h:8000", running=0, waiting=0, kv_cache_pct=0.0, preemptions=0)
            orchestrator.append(_alone_at(t - 0.7, "server", "metrics", **metrics))
        begun(orchestrator, t, "gen", step, async_level=2)
        orchestrator.append(_alone_at(t, "ckpt", "wait.start", target_step=7))
        t += load
        orchestrator.append(_alone_at(t, "ckpt", "wait.done", target_step=7, wait_ms=load * 1000.0))
        if crashed == "update":  # the resume's update of the weights it loaded: start-up
            update(t, 1, 0.195)
            t += 0.2
        for s in (step, step + 1):
            t = orchestrator_step(s, t, 5.0, wait=False)
        if crashed == "batch":  # the trainer waits for step 10's rollouts until the resumed run wrote them
            done = trainer_step(10, 53.0, t)
        first = step + 2
    for s in range(first, 20):
        t = orchestrator_step(s, t)
        done = trainer_step(s, 58.0 if s == 10 else done, max(done, t))
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, log in (("orchestrator", orchestrator), ("trainer", trainer), ("inference", inference)):
        if not log:
            continue
        paths.append(_write_sorted(root / f"{name}.log", log))
    return paths


def _alone_read(
    tmp_path: Path, analyze, crashed: str, before_start: bool = False, resume_at: int = 8
) -> dict:
    """:func:`_crashed_alone`'s run read with and without run.start lines: its summary, checked to read
    the same in both (the stages to the millisecond, the findings' kinds and shares)."""
    read = {}
    for run_start in (True, False):
        paths = _crashed_alone(tmp_path / f"logs_{run_start}", crashed, run_start, before_start, resume_at)
        summary, _ = analyze(paths, tmp_path / f"out_{run_start}", "--async-level", "2")
        stages = {s["name"]: round(s["total_ms"]) for s in summary["stages"]}
        findings = [(f["kind"], round(f["share"], 3)) for f in summary["findings"]]
        read[run_start] = (summary, stages, findings)
    assert read[True][1:] == read[False][1:]
    assert read[True][0]["down_seconds"] == read[False][0]["down_seconds"] == 0.0  # the other process went on
    return read[True][0]


def _stage_ms(summary: dict, name: str) -> float:
    return next(s["total_ms"] for s in summary["stages"] if s["name"] == name)


def test_a_trainer_that_crashed_alone_in_its_wait_for_rollouts_waited_no_longer_than_it_lived(
    tmp_path, analyze
):
    """The trainer alone crashed in its wait for step 10's rollouts (its last line, [train] wait.start at
    53 s) and was resumed at 100 s while the orchestrator went on (_crashed_alone ``trainer``): with
    run.start lines the open wait counted to the resume's run.start at 99.5 s, 46.5 s in which the
    trainer was dead (the rollouts it waited for were there at 54.99 s): trainer waits 80.5 s of a 152 s
    run and the primary 'Generation-bound', where logs without run.start lines read 34.0 s and
    'Checkpoint I/O'. A process that crashed alone (no down time: the other went on) was alive up to
    its last line: its open wait ends there. 34.0 s: steps 1..9 wait 2 s each (18 s; the first run's
    steps 8 and 9 are the earlier run's time), the resumed run's steps 8..11 none (the first,
    start-up, and rollouts already there), steps 12..19 2 s each (16 s); the open wait 53 -> 53 s."""
    summary = _alone_read(tmp_path, analyze, "trainer")
    assert _stage_ms(summary, "trainer waits for rollouts") == pytest.approx(34_000.0, abs=1.0)
    # the orchestrator waited for weights step 10 from 60 s to the resumed trainer's write at 109 s
    assert _stage_ms(summary, "checkpoint wait") == pytest.approx(49_000.0 + 17 * 10.0, abs=1.0)
    assert summary["primary"]["kind"] == "checkpoint_io", summary["findings"]
    assert not any(f["kind"] == "generation_bound" for f in summary["findings"]), summary["findings"]


@pytest.mark.parametrize("crashed", ["trainer", "batch"])
def test_a_crashed_run_fell_silent_before_the_lines_its_resume_logs_before_its_run_start(
    tmp_path, analyze, crashed
):
    """The trainer alone crashed in its wait for step 10's rollouts (its last line, [train] wait.start at
    53 s) and its resume published weights/step_8 again from its checkpoint ([ckpt] write.done at 99 s,
    as train.py does before its run.start when the crash tore them or retention deleted them) before its
    run.start at 99.5 s (_crashed_alone ``trainer``, ``before_start``): with run.start lines the crashed
    run was taken to fall silent at its last line before the run.start, the resume's write.done, so its
    open wait counted 53 -> 99 s: trainer waits 80.0 s and the primary 'Generation-bound', where the
    same logs without run.start lines (and with them, without the republish) read 34.0 s and
    'Checkpoint I/O' (the reviewer's d1). The crashed run fell silent before the silence that precedes
    the run.start, the lines the resume may log before it (a republish, a [server] metrics line of the
    orchestrator) being the resumed run's: 34.0 s, as
    test_a_trainer_that_crashed_alone_in_its_wait_for_rollouts_waited_no_longer_than_it_lived reckons.
    An orchestrator that crashed alone 2.99 s into a batch whose resume logs a [server] metrics line
    before its run.start (``batch``) generates 107.59 s (143.79 s before), as
    test_an_orchestrator_that_crashed_alone_in_a_batch_generated_no_longer_than_it_lived reckons."""
    summary = _alone_read(tmp_path, analyze, crashed, before_start=True)
    if crashed == "trainer":
        assert _stage_ms(summary, "trainer waits for rollouts") == pytest.approx(34_000.0, abs=1.0)
        assert summary["primary"]["kind"] == "checkpoint_io", summary["findings"]
    else:
        assert _stage_ms(summary, "generation") == pytest.approx(
            19 * 4_990.0 + 10_000.0 - 210.0 + 2_990.0, abs=1.0
        )


def test_an_orchestrator_that_crashed_alone_in_a_batch_generated_no_longer_than_it_lived(tmp_path, analyze):
    """The orchestrator alone crashed 2.99 s into step 10's batch ([gen] batch.start at 50.01 s, its last
    line at 53 s), was resumed at 90 s, loaded weights until 100 s and redid steps 9 and 10 while the
    trainer waited (_crashed_alone ``batch``): the open batch counted to the orchestrator's restart,
    the run.start at 89.5 s (generation 144.09 s) or in logs without run.start lines the step going
    back at 100 s (154.59 s: the resume's load of weights too, start-up). It ends at the orchestrator's
    last line: 2.99 s, and generation 107.59 s in both: 19 batches of 4.99 s (steps 0..8 and 11..19,
    and step 9's first run, the earlier run's time: 94.81 s) and the resumed steps 9 and 10 (10 s),
    less the 0.21 s of verification, its own row."""
    summary = _alone_read(tmp_path, analyze, "batch")
    assert _stage_ms(summary, "generation") == pytest.approx(
        19 * 4_990.0 + 10_000.0 - 210.0 + 2_990.0, abs=1.0
    )
    assert _stage_ms(summary, "checkpoint wait") == pytest.approx(18 * 10.0, abs=1.0)  # the load is start-up


def test_an_orchestrator_that_crashed_alone_in_a_wait_for_weights_is_no_checkpoint_i_o(tmp_path, analyze):
    """The orchestrator alone crashed in its wait for weights step 8 ([ckpt] wait.start at 50 s, its last
    line; the trainer wrote them at 48 s), and was resumed at 171 s while the trainer went on
    (_crashed_alone ``checkpoint``): the open wait counted to its restart, the run.start at 170.5 s
    (checkpoint wait 120.68 s) or in logs without run.start lines the step going back at 175 s (125.18
    s, the resume's load of weights too), and 'Checkpoint I/O: the orchestrator waits for the trainer's
    weight writes' was a finding at a share of 0.51 / 0.53. It ends at the orchestrator's last line,
    its wait.start: checkpoint wait 0.18 s (18 waits of 10 ms), and no such finding."""
    summary = _alone_read(tmp_path, analyze, "checkpoint")
    assert _stage_ms(summary, "checkpoint wait") == pytest.approx(18 * 10.0, abs=1.0)
    assert not any(f["kind"] == "checkpoint_io" for f in summary["findings"]), summary["findings"]
    assert summary["primary"]["kind"] == "generation_bound", summary["findings"]


def test_an_orchestrator_that_crashed_alone_in_a_weight_update_updated_no_longer_than_it_lived(
    tmp_path, analyze
):
    """The orchestrator alone crashed 3 s into its update of weights step 8 (t0010: client.send at 50.01
    s, the server's rpc.start 5 ms later, no rpc.done; its last line at 53.01 s), was resumed at 173.01
    s, loaded weights for 4 s and sent t0010 again (0.2 s, answered) while the trainer went on
    (_crashed_alone ``update``): the unanswered update counted to the orchestrator's restart, the
    run.start at 172.51 s ('weight update: rpc' 122.69 s, the resend's 0.195 s with it) or in logs
    without run.start lines the step going back at 177.21 s (127.195 s: the resend, logged before it,
    in the crashed update's group, left out as the faster), and 'slow_reload' was a finding at a share
    of 0.511 / 0.53, though no stage counts the dead orchestrator's silence. It ends at the
    orchestrator's last line, as a batch left open does
    (test_an_orchestrator_that_crashed_alone_in_a_batch_generated_no_longer_than_it_lived): the
    weight-update stages add 3 s (5 ms of queue, 2.995 s of rpc) to the resend's 0.2 s, in both log
    formats; the resend (a start-up line, the resumed run's) is an update of the resumed run."""
    summary = _alone_read(tmp_path, analyze, "update")
    updates = {s["name"]: s["total_ms"] for s in summary["stages"] if s["name"].startswith("weight update")}
    assert math.fsum(updates.values()) == pytest.approx(3_000.0 + 200.0, abs=2.0), updates
    assert updates["weight update: rpc"] == pytest.approx(2_995.0 + 195.0, abs=2.0), updates
    assert updates["weight update: queue"] == pytest.approx(5.0 + 5.0, abs=2.0), updates


def _whole_run_crash(
    root: Path, trainer_in: str, run_start: bool, crash_s: float = 1.0, down_s: float = 120.0
) -> list[Path]:
    """Logs of 5 s steps (async level 2) whose whole run crashed ``crash_s`` (1 s) after its last line
    and was resumed ``down_s`` (120 s) later at its checkpoint, each run's ``run.start`` lines 0.5 s before its first line
    with ``run_start``. The orchestrator's step ``s``: a 10 ms wait for weights ``s - 2`` (from step
    2), a 4.99 s batch; the trainer's step ``s`` waits from its last step.done (step 0: from 0) for
    batch ``s``, trains 3 s, then step.done and [ckpt] write.done of ``s + 1``. The orchestrator has
    done batches 0..11 (the last at 59.98 s) and logged its wait for weights 10 and [gen] batch.start
    step=12 at 59.99 s. ``trainer_in``:

    - ``wait``: the trainer has done steps 0..11 (the last at 62.98 s) and logged its [train] wait.start
      step=12 then; the crash at 63.98 s, the resume at 183.98 s at step 12: the orchestrator loads
      weights for 4 s and generates steps 12..24; the trainer waits for step 12 (its wait.start again),
      trains it and steps 13..24. The trainer redoes no step.
    - ``compute``: the trainer's last lines are its wait.start and wait.done of step 11 (59.98 s): it
      crashed 1 s into that step's compute (60.99 s); the resume at 180.99 s is at step 11 (both
      processes: the orchestrator redoes batch 11). The trainer redoes no step.done.
    - ``step``: as ``wait`` without the trainer's wait.start step=12: it crashed after its step.done
      11 (62.98 s; saving its checkpoint), before it waited for step 12; nothing in its lines tells
      its resume at step 12 from a trainer that went on."""
    orchestrator: list[tuple[float, str]] = []
    trainer: list[tuple[float, str]] = []

    def orchestrator_step(s: int, t: float, wait_s: float | None = 0.01) -> float:
        if s > 1 and wait_s is not None:
            orchestrator.append(_alone_at(t, "ckpt", "wait.start", target_step=s - 2))
            orchestrator.append(
                _alone_at(t + wait_s, "ckpt", "wait.done", target_step=s - 2, wait_ms=wait_s * 1e3)
            )
            t += wait_s
        orchestrator.append(_alone_at(t, "gen", "batch.start", step=s, inflight=64, target_batch=256))
        done = dict(step=s, completions=256, dur_ms=4990.0, inflight=64)
        orchestrator.append(_alone_at(t + 4.99, "gen", "batch.done", **done))
        orchestrator.append(_alone_at(t + 4.99, "verify", "batch.done", step=s, completions=256, dur_ms=10.0))
        return t + 4.99

    def trainer_step(s: int, waits: float, ready: float, crash: bool = False) -> float:
        wait_ms = (ready - waits) * 1000.0
        trainer.append(_alone_at(waits, "train", "wait.start", step=s))
        trainer.append(_alone_at(ready, "train", "wait.done", step=s, wait_ms=wait_ms))
        if crash:
            return ready
        done = dict(step=s, wait_ms=wait_ms, train_ms=3000.0, write_ms=40.0)
        trainer.append(_alone_at(ready + 3.0, "train", "step.done", **done))
        trainer.append(_alone_at(ready + 3.0, "ckpt", "write.done", step=s + 1, write_ms=40.0))
        return ready + 3.0

    def begun(t: float, step: int) -> None:
        if run_start:
            orchestrator.append(
                _alone_at(t - 0.5, "gen", "run.start", step=step, resume=step > 0, async_level=2)
            )
            trainer.append(_alone_at(t - 0.5, "train", "run.start", step=step, resume=step > 0))

    begun(0.0, 0)
    t = done = 0.0
    last = 12 if trainer_in in ("wait", "step") else 11
    for s in range(12):
        waits = done
        t = orchestrator_step(s, t)
        done = trainer_step(s, waits, max(done, t), crash=s == last)
    orchestrator.append(_alone_at(t, "ckpt", "wait.start", target_step=10))
    orchestrator.append(_alone_at(t + 0.01, "ckpt", "wait.done", target_step=10, wait_ms=10.0))
    orchestrator.append(_alone_at(t + 0.01, "gen", "batch.start", step=12, inflight=64, target_batch=256))
    if trainer_in == "wait":
        trainer.append(_alone_at(done, "train", "wait.start", step=12))
    resumed = max(t + 0.01, done) + crash_s + down_s
    begun(resumed, last)
    orchestrator.append(_alone_at(resumed, "ckpt", "wait.start", target_step=last - 1))  # the resume's load
    orchestrator.append(_alone_at(resumed + 4.0, "ckpt", "wait.done", target_step=last - 1, wait_ms=4000.0))
    t, done = resumed + 4.0, resumed
    for s in range(last, 25):
        waits = done
        t = orchestrator_step(s, t, None if s == last else 0.01)
        done = trainer_step(s, waits, max(done, t))
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, log in (("orchestrator", orchestrator), ("trainer", trainer)):
        paths.append(_write_sorted(root / f"{name}.log", log))
    return paths


def _hung_in_step_12() -> tuple[float, str]:
    """The watchdog's one [hang] line of _whole_run_crash ``wait``'s hang: at 112.98 s, no progress
    for 53 s, the trainer waiting for step 12's rollouts."""
    return _alone_at(
        112.98,
        "hang",
        "detected",
        silent_s=53.0,
        threshold_s=50.0,
        median_step_s=5.0,
        waits="trainer>orchestrator:rollouts/step_12",
    )


def test_a_run_that_hung_until_it_was_killed_ran_up_to_the_watchdog_s_last_hang_line(tmp_path, analyze):
    """The run hung (the orchestrator stuck in batch 12 from 59.99 s, the trainer's [train] wait.start
    step=12 at 62.98 s its last line: a trainer that waits until its data.wait_timeout_s writes its
    RolloutTimeoutError on stderr, and the launcher stops the others), was killed and resumed at step
    12 (_whole_run_crash ``wait``); rl.log holds the watchdog's [hang] line at 112.98 s (no progress
    for 53 s). The down time began at the trainer's last line (62.98 s) in both formats: run 130.97 s,
    down 125.0 s, while SUMMARY.md listed the hang at 12:01:52 before the restart (the reviewer's d3).
    The watchdog writes only while every child runs, so the down time begins at its last [hang] line in
    it: down 75.0 s (112.98 to 187.98 s), run 180.97 s; the 50 s of the hang after the trainer's last
    line are in the stages the crash left open (trainer waits 45.99 + 50 = 95.99 s; generation's batch
    12 from 59.99 s), the hang is listed under the orchestrator's restart and is no finding, and the
    silence the [hang] line proves the processes lived through is no silence to warn of. Both formats
    read the same."""
    read = {}
    for run_start in (True, False):
        root = tmp_path / f"logs_{run_start}"
        paths = _whole_run_crash(root, "wait", run_start)
        hang = _hung_in_step_12()[1]
        (root / "rl.log").write_text(hang + "\n")
        summary, md = analyze([*paths, root / "rl.log"], tmp_path / f"out_{run_start}", "--async-level", "2")
        assert summary["down_seconds"] == pytest.approx(75.0, abs=0.01)
        assert summary["run_seconds"] == pytest.approx(180.97, abs=0.01)
        assert _stage_ms(summary, "trainer waits for rollouts") == pytest.approx(95_990.0, abs=5.0)
        restarts = {r["process"]: r for r in summary["restarts"]}
        assert [h["said"][:23] for h in restarts["orchestrator"]["hangs_before"]] == [
            "no progress for 53 s (t"
        ]
        assert not any(f["kind"] in ("hang", "pause") for f in summary["findings"]), summary["findings"]
        assert not any("wrote a line" in w for w in summary["warnings"]), summary["warnings"]
        assert "leaves out the 75 s in which no process ran" in md
        read[run_start] = [(f["kind"], round(f["share"], 3)) for f in summary["findings"]]
    assert read[True] == read[False] and read[False][0][0] == "generation_bound"


def test_a_run_that_hung_until_the_trainer_timed_out_ran_up_to_the_launcher_s_exit_line(tmp_path, analyze):
    """The run hung (the orchestrator stuck in batch 12 from 59.99 s, the trainer's [train] wait.start
    step=12 at 62.98 s its last line), the watchdog's one [hang] line at 112.98 s; the trainer's wait
    ran out its data.wait_timeout_s (600 s): it exited at 662.98 s, the launcher wrote its
    ``[launcher] child.exit process=trainer code=1 up_s=663.98`` line (and its untagged error) and
    stopped the others; a rerun 60 s later resumed at step 12 (_whole_run_crash ``wait``, resume at
    722.98 s, its load of weights to 726.98 s). The down time began at the [hang] line: run 180.97 s,
    down 614.0 s in both formats (the rev_r reviewer's d1), though every process ran to 662.98 s. The
    launcher writes the line as it sees the child's exit, before it stops the others: down 64.0 s
    (662.98 to 726.98), run 730.97 s, the 600 s of the
    trainer's wait in its stage (45.99 + 600 = 645.99 s), the crashed batch 12's generation up to
    662.98 s in its stage (25 batches' 4.98 s, 124.5 s, + 602.99 s = 727.49 s), and no silence to warn of (the line's up_s proves one launch's children ran from -1 s to it). A
    relaunch whose inference died 5 s into its start-up (its [launcher] line at 687.98 s, up_s=5)
    is no part of the crashed run: the same numbers. The [launcher] tag is a known one."""
    read = {}
    for run_start, relaunch_failed in ((True, False), (False, False), (False, True)):
        root = tmp_path / f"logs_{run_start}_{relaunch_failed}"
        paths = _whole_run_crash(root, "wait", run_start, crash_s=600.0, down_s=60.0)
        lines = [
            _hung_in_step_12(),
            (
                662.98,
                "2026-01-01 12:11:02.980 | ERROR   | trainer exited with code 1: RolloutTimeoutError; stopping the others. Last lines of logs/trainer/stdout.log:",
            ),
            _alone_at(662.98, "launcher", "child.exit", process="trainer", code=1, up_s=663.98),
            (
                721.98,
                "2026-01-01 12:12:01.980 | INFO    | started inference, trainer (1 process(es)) and orchestrator; logs in logs",
            ),
        ]
        if relaunch_failed:
            lines.append(_alone_at(687.98, "launcher", "child.exit", process="inference", code=1, up_s=5.0))
        _write_sorted(root / "rl.log", lines)
        out = tmp_path / f"out_{run_start}_{relaunch_failed}"
        summary, md = analyze([*paths, root / "rl.log"], out, "--async-level", "2")
        assert summary["down_seconds"] == pytest.approx(64.0, abs=0.01)
        assert summary["run_seconds"] == pytest.approx(730.97, abs=0.01)
        assert _stage_ms(summary, "trainer waits for rollouts") == pytest.approx(645_990.0, abs=5.0)
        assert _stage_ms(summary, "generation") == pytest.approx(727_490.0, abs=5.0)
        assert summary["unknown_tags"] == {}
        assert not any("wrote a line" in w for w in summary["warnings"]), summary["warnings"]
        assert "leaves out the 64 s in which no process ran" in md
        read[run_start, relaunch_failed] = [(f["kind"], round(f["share"], 3)) for f in summary["findings"]]
    assert len(set(map(tuple, read.values()))) == 1 and read[False, False][0][0] == "generation_bound"


def test_a_trainer_that_reopens_the_wait_its_crashed_run_left_open_restarted(tmp_path, analyze):
    """The whole run crashed while the orchestrator generated step 12 and the trainer waited for its
    rollouts (its last line, [train] wait.start step=12 at 62.98 s), and was resumed 120 s later at
    step 12 (_whole_run_crash ``wait``): the trainer redid no step (its last step.done 11, its first
    after 12), so in logs without run.start lines only the orchestrator's restart was found (its batch
    12 again); the 125 s of down time counted as run time (run 255.97 s, down 0) and no finding was
    made (trainer waits 54.98 s of it, 21.5%), with no word of it: 696f97d left out a silence of every
    process that overlaps a found restart's (the reviewer's d2). The same logs with run.start lines read
    run 130.97 s, down 125.0 s, trainer waits 45.99 s and 'Generation-bound' at 0.351. A trainer's
    wait.start for the step whose wait.start is open (no wait.done since) is a new process: the trainer
    restarted there, and both formats read the same. Down 125.0 s: from the trainer's last line (62.98
    s, the later of the two processes' last lines) to the orchestrator's first batch after its 4 s load
    (187.98 s); run 130.97 s: 0 to 62.98 s (batches 0..11 to 59.98 s, step 11's 3 s of training) and
    187.98 to 255.97 s (batch 12's 4.99 s, 12 steps of 5 s, step 24's 3 s of training); trainer waits
    45.99 s: steps 1..11 (21.99 s, step 1's 1.99 s) and 13..24 (24 s), 2 s each (step 0 and the resumed
    run's first, step 12, are start-up; the wait the crash left open ends where the down time begins)."""
    read = {}
    for run_start in (True, False):
        paths = _whole_run_crash(tmp_path / f"logs_{run_start}", "wait", run_start)
        summary, _ = analyze(paths, tmp_path / f"out_{run_start}", "--async-level", "2")
        restarts = sorted((r["process"], r["reached"], r["resumed"]) for r in summary["restarts"])
        assert restarts == [("orchestrator", 12, 12), ("trainer", 11, 12)], summary["restarts"]
        assert summary["down_seconds"] == pytest.approx(125.0, abs=0.01)
        assert summary["run_seconds"] == pytest.approx(130.97, abs=0.01)
        assert _stage_ms(summary, "trainer waits for rollouts") == pytest.approx(45_990.0, abs=5.0)
        assert summary["primary"]["kind"] == "generation_bound", summary["findings"]
        assert not any("wrote a line" in w for w in summary["warnings"]), summary["warnings"]
        read[run_start] = [(f["kind"], round(f["share"], 3)) for f in summary["findings"]]
    assert read[True] == read[False] and read[False][0] == ("generation_bound", 0.351)


def test_a_silence_that_holds_a_restart_found_is_warned_of_unless_the_others_lived_through_it(
    tmp_path, analyze
):
    """The whole run crashed after the trainer's step.done 11 (62.98 s; before its wait.start step=12)
    while the orchestrator generated step 12, and was resumed 120 s later at step 12 (_whole_run_crash
    ``step``): in logs without run.start lines the orchestrator's restart is found (its batch 12
    again), the trainer's not (it redid no step.done, and its resume's wait.start 12 follows its
    step.done 11 as a live trainer's would); 696f97d left out the silence of both processes (62.98 to
    183.98 s) as a found restart's, taking the trainer for alive, so the 121 s counted as run time
    with no word. A silence that holds a found restart is left out only when each other process is
    proven alive through it (its silence lies within a wait or a step it logged and closed, as the
    trainer's in test_a_silence_that_holds_a_restart_found_is_no_restart_to_warn_of): here it is
    warned of, 121 s from 12:01:02 (62.98 s, the trainer's last line; to the resume's first lines at
    183.98 s). (A crash in the trainer's compute is found: its resume waits again for the step it
    computed, test_a_trainer_that_waits_again_for_the_step_it_crashed_computing_restarted.)"""
    paths = _whole_run_crash(tmp_path / "logs", "step", run_start=False)
    summary, md = analyze(paths, tmp_path / "out", "--async-level", "2")
    assert [(r["process"], r["reached"], r["resumed"]) for r in summary["restarts"]] == [
        ("orchestrator", 12, 12)
    ]
    assert summary["down_seconds"] == 0.0
    (warning,) = [
        w for w in summary["warnings"] if "neither the orchestrator nor the trainer wrote a line" in w
    ]
    assert ": 121 s from 2026-01-01 12:01:02." in warning, warning
    # with run.start lines both restarts are found: the silence is down time, no warning
    summary, _ = analyze(_whole_run_crash(tmp_path / "rs", "step", run_start=True), tmp_path / "out_rs")
    assert summary["down_seconds"] > 120.0 and not any("wrote a line" in w for w in summary["warnings"])


def test_a_trainer_that_waits_again_for_the_step_it_crashed_computing_restarted(tmp_path, analyze):
    """The whole run crashed 1 s into the trainer's compute of step 11 (its last line, [train] wait.done
    step=11 at 59.98 s) while the orchestrator generated step 12, and was resumed 120 s later at step
    11 (_whole_run_crash ``compute``): in logs without run.start lines only the orchestrator's restart
    was found (its batch 11 again; the trainer redid no step.done), the 121 s counted as run time
    (run 257.98 s, down 0, no finding) and were warned of ('121 s from 12:00:59'), where the same logs
    with run.start lines read run 132.98 s, down 125.0 s and 'Generation-bound' at 0.346 (the rev_q
    reviewer's first note). The trainer logs wait.start, wait.done, then step.done for each step, so
    a wait.start for the step whose wait.done is its last such line is a new process (as one for the
    step whose wait.start is: test_a_trainer_that_reopens_the_wait_its_crashed_run_left_open_restarted):
    the trainer restarted there (reached 10, resumed 11), and both formats read the same, with one
    trainer log or two (logs/trainer/rank_0.log and rank_1.log: _two_ranks). Generation-bound's share
    is the trainer's waits for rollouts, 47.99 s of 132.98 s (0.361): with the crashed run's 2 s wait
    for step 11, which its wait.done logged and no step.done did (0.346 before:
    test_a_whole_run_crash_in_the_trainer_s_compute_counts_its_wait_and_compute)."""
    read = {}
    for run_start in (True, False):
        for ranks in (1, 2):
            paths = _whole_run_crash(tmp_path / f"logs_{run_start}_{ranks}", "compute", run_start)
            if ranks == 2:
                paths = [_two_ranks(paths[1])]
            summary, _ = analyze(paths, tmp_path / f"out_{run_start}_{ranks}", "--async-level", "2")
            restarts = sorted((r["process"], r["reached"], r["resumed"]) for r in summary["restarts"])
            assert restarts == [("orchestrator", 12, 11), ("trainer", 10, 11)], summary["restarts"]
            assert summary["down_seconds"] == pytest.approx(125.0, abs=0.01)
            assert summary["run_seconds"] == pytest.approx(132.98, abs=0.01)
            assert not any("wrote a line" in w for w in summary["warnings"]), summary["warnings"]
            read[run_start, ranks] = [(f["kind"], round(f["share"], 3)) for f in summary["findings"]]
    assert len(set(map(tuple, read.values()))) == 1 and read[False, 1][0] == ("generation_bound", 0.361), read


@pytest.mark.parametrize("batch_rows", [None, 2])
@pytest.mark.parametrize("crashed", ["compute", "publish"])
@pytest.mark.parametrize("resume_at", [10, 8])
def test_a_trainer_that_crashed_alone_computing_a_step_counts_its_wait_and_compute(
    tmp_path, analyze, monkeypatch, crashed, resume_at, batch_rows
):
    """The trainer alone crashed computing step 10 after its 2 s wait for its rollouts ([train] wait.start
    at 53 s, wait.done wait_ms=2000 at 55 s, its last line: _crashed_alone ``compute``; or its
    compute.done train_ms=3000 at 58 s too, then it died publishing: ``publish``) and was resumed at
    100 s at step 10 or 8 while the orchestrator went on. Trainer waits for rollouts read 34.0 s, as
    with a crash in the wait itself (test_a_trainer_that_crashed_alone_in_its_wait_for_rollouts_waited_no_longer_than_it_lived):
    the per-step series was read from step.done lines, and the crashed run logged none for step 10
    (the rev_r reviewer's d4, 2 s of a 103 s run there); and the compute.done's 3 s were in no stage.
    Both happened: 36.0 s (steps 1..9 and 12..19 2 s each, the crashed run's wait for 10; the
    resumed run's first wait, start-up, and its steps up to 11, no wait, add nothing) and trainer
    compute 3 s a step done (20 steps, resumed at 8: steps 8 and 9 twice) plus the crashed run's
    compute of step 10 when its compute.done said so (with none: to its last line, its wait.done, 0 s:
    a process that crashed alone was alive up to its last line). The statistics keep one value per
    step: resumed at 10, the crashed run's wait is step 10's (19 values, steps 1..19); resumed at 8, the
    resumed run's replaces it. The same in both log formats, and when the logs are read two lines a
    batch (``batch_rows``: a restart found by the step going back, in a later batch than the resumed
    run's first wait.done, is not taken for the crashed run's)."""
    from prime_rl.analysis import parser

    if batch_rows:
        monkeypatch.setattr(parser, "BATCH_ROWS", batch_rows)
        monkeypatch.setattr(parser, "CHUNK", 100)
        summaries = []
        for run_start in (True, False):
            paths = _crashed_alone(tmp_path / f"logs_{run_start}", crashed, run_start, resume_at=resume_at)
            summaries.append(analyze(paths, tmp_path / f"out_{run_start}", "--async-level", "2")[0])
    else:
        summaries = [_alone_read(tmp_path, analyze, crashed, resume_at=resume_at)]
    for summary in summaries:
        assert _stage_ms(summary, "trainer waits for rollouts") == pytest.approx(36_000.0, abs=1.0)
        steps = 20 + (2 if resume_at == 8 else 0)  # each step done (8 and 9 twice when resumed at 8)
        computed = steps * 3_000.0 + (3_000.0 if crashed == "publish" else 0.0)
        assert _stage_ms(summary, "trainer compute") == pytest.approx(computed, abs=1.0)
        waits = summary["stats"]["train_wait_ms"]
        assert (waits["count"], waits["max"]) == (19, 2_000.0)
        assert summary["stats"]["train_ms"]["count"] == 20  # step 10's: the resumed run's


def _split_at_resume(path: Path, root: Path) -> tuple[Path, Path]:
    """``path``'s lines up to its longest silence (its process's crash and resume) as
    ``root/first/<name>``, the rest as ``root/second/<name>``."""
    lines = path.read_text().splitlines()
    times = [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp() for line in lines]
    cut = 1 + max(range(len(lines) - 1), key=lambda i: times[i + 1] - times[i])
    parts = []
    for part, kept in (("first", lines[:cut]), ("second", lines[cut:])):
        (root / part).mkdir(parents=True, exist_ok=True)
        parts.append(root / part / path.name)
        parts[-1].write_text("\n".join(kept) + "\n")
    return parts[0], parts[1]


@pytest.mark.parametrize("run_start", [True, False])
@pytest.mark.parametrize(
    ("case", "waits_ms"),
    [
        ("alone compute 10", 36_000.0),
        ("alone publish 10", 36_000.0),
        ("whole compute 11", 47_990.0),
        ("alone trainer 8", 34_000.0),
        ("alone compute 8", 36_000.0),
        ("alone publish 8", 36_000.0),
    ],
)
def test_a_step_the_trainer_crashed_in_counts_the_same_with_its_resume_in_another_file(
    tmp_path, analyze, case, waits_ms, run_start
):
    """The step the trainer crashed computing (a [train] wait.done, no step.done: _crashed_alone
    ``compute``/``publish`` resumed at 10, _whole_run_crash ``compute``) counts its wait and compute
    whether the resume is in the crashed run's file or in a file of its own: ``first/`` and
    ``second/`` (given in that order or the other: read in time order), or the rotated parts
    ``trainer.log.1`` and ``trainer.log``. The steps begun since the last step.done were carried to
    the next file by their line numbers and compared with the new file's, which start again at 1: the
    crashed run's wait.done was never found there (trainer waits for rollouts 34.0 s for 36.0 s,
    trainer compute 60.0 s for 63.0 s with the compute.done; the whole-run crash 45.99 s for 47.99 s
    and 75.0 s for 75.01 s). Resumed at 8, in a file of its own, the resumed log's write.done of
    steps 8 and 9 (redone: the orchestrator had their weights from the crashed run 50 s before) bounded
    its clock from below: it was read 51 s ahead and moved (run 149.0 s for 152.0 s), its first
    wait.done then lay before the crashed run fell silent and was taken for the crashed run's step
    (waits 32.0 s for 34.0 s or 36.0 s; publishing, compute 71.99 s for 69.0 s). The stages, the
    run's and down time, the findings and the clock offsets (none) read the same."""
    kind, crashed, resume_at = case.split()
    read = {}
    for layout in ("one", "first second", "second first", "rotated"):
        root = tmp_path / layout.replace(" ", "_")
        if kind == "alone":
            orchestrator, trainer = _crashed_alone(
                root / "one", crashed, run_start, resume_at=int(resume_at)
            )[:2]
        else:
            orchestrator, trainer = _whole_run_crash(root / "one", crashed, run_start)[:2]
        if layout == "one":
            paths = [orchestrator, trainer]
        elif layout == "rotated":
            first, second = _split_at_resume(trainer, root)
            first.rename(root / "one" / "trainer.log.1")
            second.replace(trainer)
            paths = [root / "one"]
        else:
            (oa, ob), (ta, tb) = _split_at_resume(orchestrator, root), _split_at_resume(trainer, root)
            paths = [oa, ob, ta, tb] if layout == "first second" else [ob, oa, tb, ta]
        summary, _ = analyze(paths, root / "out", "--async-level", "2")
        read[layout] = (
            {s["name"]: round(s["total_ms"]) for s in summary["stages"]},
            round(summary["run_seconds"], 2),
            round(summary["down_seconds"], 2),
            [(f["kind"], round(f["share"], 3)) for f in summary["findings"]],
            summary["clock_offsets"],
        )
    assert read["one"][0]["trainer waits for rollouts"] == waits_ms and not read["one"][-1]
    for layout, figures in read.items():
        assert figures == read["one"], layout


@pytest.mark.parametrize("launcher", [False, True])
def test_a_whole_run_crash_in_the_trainer_s_compute_counts_its_wait_and_compute(tmp_path, analyze, launcher):
    """The whole run crashed in the trainer's compute of step 11 (its last line, [train] wait.done
    step=11 wait_ms=2000 at 59.98 s) and was resumed at step 11 (_whole_run_crash ``compute``): trainer
    waits for rollouts read 45.99 s, leaving out the crashed run's wait for step 11 (no step.done
    logged it), and trainer compute 75.0 s, the compute it crashed in in no stage, also when the
    launcher's [launcher] child.exit process=trainer line says the trainer ran (hung in its compute)
    for 600 s more (crash_s=600: the run's time runs to it, generation counts the orchestrator's open
    batch up to it, the trainer's compute nothing). The wait counts: 47.99 s (steps 1..11 and 13..24, 2
    s each but step 1's 1.99 s; the resumed run's first wait, for step 11 again, is start-up), in
    both log formats; and the compute from the wait.done to where the down time begins, as a wait a
    crash left open: to the orchestrator's last line at 59.99 s (10 ms), or to the launcher's line at
    659.98 s (600 s)."""
    for run_start in (True, False):
        root = tmp_path / f"logs_{run_start}"
        extra = dict(crash_s=600.0, down_s=60.0) if launcher else {}
        paths = _whole_run_crash(root, "compute", run_start, **extra)
        if launcher:
            exited = _alone_at(659.98, "launcher", "child.exit", process="trainer", code=1, up_s=660.98)
            paths.append(_write_sorted(root / "rl.log", [exited]))
        summary, _ = analyze(paths, tmp_path / f"out_{run_start}", "--async-level", "2")
        assert _stage_ms(summary, "trainer waits for rollouts") == pytest.approx(47_990.0, abs=1.0)
        open_compute = 600_000.0 if launcher else 10.0
        assert _stage_ms(summary, "trainer compute") == pytest.approx(25 * 3_000.0 + open_compute, abs=1.0)
        assert summary["stats"]["train_wait_ms"]["count"] == 24  # steps 1..24: step 11's the crashed run's


@pytest.mark.parametrize("batch_rows", [None, 2])
@pytest.mark.parametrize("last", ["wait.done", "compute.done"])
def test_the_step_the_trainer_computes_where_its_log_ends_counts_its_wait_and_compute(
    tmp_path, analyze, monkeypatch, last, batch_rows
):
    """A healthy run of 5 s steps (_step_logs) whose trainer's log ends at its [train] wait.done
    step=15 (a 2 s wait; its compute at 77.98 s, the orchestrator's log goes on to 99.98 s) or its
    compute.done step=15 train_ms=3000 after it: trainer waits for rollouts read 27.99 s (steps 1..14)
    and trainer compute 45.0 s (steps 0..14), the step the trainer computes in no stage. Its wait
    counts (29.99 s, 15 values) and so does its compute: the compute.done's 3 s, or with none, from the
    wait.done to the logs' end (20 s), as a wait open where the logs end counts."""
    from prime_rl.analysis import parser

    if batch_rows:
        monkeypatch.setattr(parser, "BATCH_ROWS", batch_rows)
        monkeypatch.setattr(parser, "CHUNK", 100)
    orchestrator, trainer = _step_logs(tmp_path / "logs")
    lines = trainer.read_text().splitlines()
    i = next(k for k, x in enumerate(lines) if "[train] wait.done step=15 " in x)
    kept = lines[: i + 1]
    if last == "compute.done":
        computed = format_tagged("train", "compute.done", step=15, train_ms=3000.0)
        kept.append(lines[i + 1].split(" | ")[0] + " | INFO    | " + computed)
    trainer.write_text("\n".join(kept) + "\n")
    summary, _ = analyze([orchestrator, trainer], tmp_path / "out", "--async-level", "2")
    assert _stage_ms(summary, "trainer waits for rollouts") == pytest.approx(29_990.0, abs=1.0)
    assert summary["stats"]["train_wait_ms"]["count"] == 15
    computed = 15 * 3_000.0 + (3_000.0 if last == "compute.done" else 99_980.0 - 79_980.0)
    assert _stage_ms(summary, "trainer compute") == pytest.approx(computed, abs=1.0)


def test_a_silence_of_a_trainer_on_two_gpus_is_warned_of_once(tmp_path, analyze):
    """The whole run crashed after the trainer's step.done 11 and only the orchestrator's restart is
    found in logs without run.start lines (_whole_run_crash ``step``, as in
    test_a_silence_that_holds_a_restart_found_is_warned_of_unless_the_others_lived_through_it), the
    trainer on two GPUs (logs/trainer/rank_0.log, rank_1.log with only compute.done lines: _two_ranks):
    the warning listed the one crash once per trainer log, '2 time(s) ... 121 s from 2026-01-01
    12:01:02, 121 s from 2026-01-01 12:01:02' (the rev_q reviewer's d2, with a crash in the compute
    then not found), each rank's silence met with the orchestrator's on its own. The trainer is
    silent where neither rank wrote a line: once, as with one trainer log."""
    paths = _whole_run_crash(tmp_path / "logs", "step", run_start=False)
    summary, _ = analyze([_two_ranks(paths[1])], tmp_path / "out", "--async-level", "2")
    assert len(summary["parse"]["files"]) == 3
    assert [(r["process"], r["reached"], r["resumed"]) for r in summary["restarts"]] == [
        ("orchestrator", 12, 12)
    ]
    (warning,) = [
        w for w in summary["warnings"] if "neither the orchestrator nor the trainer wrote a line" in w
    ]
    assert warning.startswith("1 time(s) ") and ": 121 s from 2026-01-01 12:01:02." in warning, warning


def test_silence_pace_ratio_says_which_silences_are_left_out(tmp_path, analyze):
    """SUMMARY.md prints each threshold with its docstring: silence_pace_ratio's still said 'one that
    overlaps a found restart's silence, are left out', a rule 8e8dd72 removed (the rev_q reviewer's
    d5). It says the trainer is not silent within its closed wait or step, and that a whole-run
    crash of which only the orchestrator's restart is found still warns."""
    paths = _whole_run_crash(tmp_path / "logs", "compute", run_start=False)
    _, md = analyze(paths, tmp_path / "out", "--async-level", "2")
    (line,) = [x for x in md.splitlines() if x.startswith("- `silence_pace_ratio` = ")]
    assert "overlaps a found restart" not in line, line
    assert "nor the trainer within a wait for rollouts or a step it logged and closed" in line, line
    assert "only the orchestrator's restart is found still warns" in line, line


def test_a_trainer_that_did_not_exit_after_the_last_step_adds_no_run_time(tmp_path, analyze):
    """The orchestrator finished (exit 0) and the trainer did not exit within TRAINER_FINISH_S: the
    launcher's [launcher] child.exit has no code=, 600 s after the orchestrator's last line, then a
    resume 60 s later redid steps 8-9. That line was taken as every child running up to it, so the
    600 s in which no step was in flight were run time: run 697.45 s and "No bottleneck found", where
    the run is 96.95 s and generation-bound (the same without the line). A child.exit without code=
    bounds no down time."""
    from datetime import datetime

    first = make_run("generation_bound", steps=10, seed=3)
    last = max(line[:23] for line in first.orchestrator + first.trainer)
    t_last = datetime.strptime(last, "%Y-%m-%d %H:%M:%S.%f").timestamp()
    t0 = datetime(2026, 1, 1, 12, 0, 0).timestamp()
    second = make_run("generation_bound", steps=2, seed=4, first_step=8, start_offset_s=t_last - t0 + 660.0)

    def at(t: float) -> str:
        return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]

    readings = []
    for tagged in (False, True):
        logs = tmp_path / f"logs_{tagged}"
        appended(logs, first, second)
        rl = [f"{at(t0 - 2)} | INFO    | started inference, trainer (1 process(es)) and orchestrator"]
        if tagged:
            line = format_tagged(
                "launcher", "child.exit", process="trainer", up_s=round(t_last + 602.5 - t0, 3)
            )
            rl.append(f"{at(t_last + 600.5)} | INFO    | {line}")
        rl.append(
            f"{at(t_last + 600.5)} | ERROR   | trainer did not exit 600 s after the orchestrator finished"
        )
        rl.append(
            f"{at(t_last + 658.0)} | INFO    | started inference, trainer (1 process(es)) and orchestrator"
        )
        (logs / "rl.log").write_text("\n".join(rl) + "\n")
        summary, _ = analyze([logs], tmp_path / f"out_{tagged}")
        readings.append((round(summary["run_seconds"], 2), (summary["primary"] or {}).get("kind")))
    assert readings[1] == readings[0] == (96.95, "generation_bound")


_WAITS = {
    "any": "none",
    "step 5": "trainer>orchestrator:rollouts/step_5",
    "step 12": "trainer>orchestrator:rollouts/step_12",
    "hung": "trainer>orchestrator:rollouts/step_20",
    "gen 5": "orchestrator>inference:generation_of_step_5",
}


def _untimed_hangs(tmp_path: Path, lines: list[str], after_s: float | None = None) -> list[Path]:
    """A run of 5 s steps whose batches of steps 5 and 12 took 200 s each (two silences of 197 s, after
    steps 5 and 12), hung in step 20 where its logs end; rl.log a console capture of untimed [hang]
    lines (silent_s=150, median step 5 s), one for each of ``lines`` in that order, each with the waits=
    of :data:`_WAITS` it names; ``after_s``: then a line with a time, that many seconds into the run.
    The orchestrator's, the trainer's logs and rl.log."""
    logs = tmp_path / "logs"
    paths = _step_logs(logs, slow=[(5, 200.0), (12, 200.0)], run_start=True, hung_at=20)
    hangs = [
        format_tagged(
            "hang", "detected", silent_s=150.0, threshold_s=120.0, median_step_s=5.0, waits=_WAITS[k]
        )
        for k in lines
    ]
    if after_s is not None:
        hangs.append(f"{_clock(after_s)} | INFO    | went on")
    (logs / "rl.log").write_text("\n".join(hangs) + "\n")
    return [*paths, logs / "rl.log"]


@pytest.mark.parametrize(
    "lines, pauses, hangs, untold",
    [
        (["step 5", "any", "hung"], [5, 12], 1, False),
        (["any", "step 12", "hung"], [5, 12], 1, False),
        (["step 5", "any"], [5], 1, True),  # the second after the first: after step 12, or hung
        (["step 12", "step 5", "hung"], [], 3, True),  # no order fits: which is which is not known
        (["step 5", "step 5", "hung"], [5], 1, False),  # one silence the logs show: progress they miss
    ],
    ids=["second between", "first before", "second after", "no order fits", "one silence"],
)
def test_untimed_hang_lines_of_one_file_are_placed_in_their_order(
    tmp_path, analyze, lines, pauses, hangs, untold
):
    """A run that paused twice, 197 s after step 5 and after step 12, each time the watchdog's [hang],
    and hung in step 20 where its logs end; rl.log a console capture of its [hang] lines, with no time
    (the reviewer's note on the untimed placement). Each line was placed on its own: the one whose
    waits=none fits both pauses and the logs' end, so after the line of the pause after step 5 it read
    'Hang ... 2 time(s), first at ? (rl.log:2) ... whether the run went on after it is not known' and
    one pause, though the watchdog writes one line a silence and again only after progress: the second
    line came after the first's pause, and before the third's hang: the pause after step 12. A line
    before that of the pause after step 12 is the pause after step 5. The order ruling out every
    placement (the pause after step 12's line first) leaves both not known, where they were two pauses
    in the wrong order; two lines the one silence after step 5 holds stay there (progress the logs do
    not show parted them: an inference server's rpc.done)."""
    paths = _untimed_hangs(tmp_path, lines)
    summary, md = analyze(paths, tmp_path / "out", "--async-level", "2")
    findings = {f["kind"]: f for f in summary["findings"]}
    hang = findings["hang"]
    assert hang["evidence"].startswith(f"{hangs} time(s), first at ? "), hang["evidence"]
    assert ("is not known" in hang["evidence"]) == untold, hang["evidence"]
    if not pauses:
        assert "pause" not in findings, summary["findings"]
        return
    pause = findings["pause"]
    if len(pauses) == 1:
        assert pause["title"].startswith(f"Pause: no progress for 197 s after step {pauses[0]},"), pause
    else:
        assert pause["evidence"].startswith("2 pauses, 394 s in all; the longest: "), pause["evidence"]
        assert "rl.log:1; its line has no time" in pause["evidence"]  # the pause after step 5


def test_untimed_hang_lines_in_one_silence_of_the_logs_when_a_log_is_missing(tmp_path, analyze):
    """The run of test_untimed_hang_lines_of_one_file_are_placed_in_their_order, rl.log's untimed lines
    the orchestrator's wait for the generation of step 5 (the pause after it) and one with waits=none,
    then a line with a time after the pause after step 12 (the logs' end no silence of theirs): the
    second came after the first's silence, the pause after step 12, so the run paused twice. Without the
    trainer's log, its progress (a step.done) may have parted two lines within one silence of the
    orchestrator's log: the second may be in the first's, and is not known."""
    paths = _untimed_hangs(tmp_path, ["gen 5", "any"], after_s=470.0)
    summary, _ = analyze(paths, tmp_path / "out", "--async-level", "2")
    (pause,) = [f for f in summary["findings"] if f["kind"] == "pause"]
    assert pause["evidence"].startswith("2 pauses, 394 s in all"), summary["findings"]
    assert not any(f["kind"] == "hang" for f in summary["findings"]), summary["findings"]
    summary, _ = analyze([paths[0], paths[2]], tmp_path / "out2", "--async-level", "2")
    hang = summary["primary"]
    assert hang["kind"] == "hang" and "rl.log:2" in hang["evidence"], summary["findings"]
    assert "is not known" in hang["evidence"], hang["evidence"]


def test_an_untimed_hang_line_after_a_timed_one_is_in_a_later_silence(tmp_path, analyze):
    """The run of test_untimed_hang_lines_of_one_file_are_placed_in_their_order without its hang (steps
    0..19), rl.log a [hang] line with a time in the pause after step 5, then one with none (waits=none),
    then a line with a time after the pause after step 12. The untimed line came after 12:12:58 (the
    line before it), where the pause after step 5 still went on: it read 'Hang ... (rl.log:2) ... the
    times around it in its file (12:12:58 to 12:17:50) do not tell ... not known' beside the one pause.
    The timed line before it is in that pause, so the untimed one is in the pause after step 12."""
    logs = tmp_path / "logs"
    paths = _step_logs(logs, slow=[(5, 200.0), (12, 200.0)], run_start=True)
    hang = format_tagged(
        "hang", "detected", silent_s=150.0, threshold_s=120.0, median_step_s=5.0, waits="none"
    )
    rl = logs / "rl.log"
    rl.write_text(f"{_clock(178.0)} | WARNING | {hang}\n{hang}\n{_clock(470.0)} | INFO    | went on\n")
    summary, _ = analyze([*paths, rl], tmp_path / "out", "--async-level", "2")
    assert not any(f["kind"] == "hang" for f in summary["findings"]), summary["findings"]
    (pause,) = [f for f in summary["findings"] if f["kind"] == "pause"]
    assert pause["evidence"].startswith("2 pauses, 394 s in all"), pause["evidence"]


_CUT_READS = {
    "whole run crashed computing": lambda root: _whole_run_crash(root, "compute", run_start=True),
    "whole run crashed waiting": lambda root: _whole_run_crash(root, "wait", run_start=True),
    "trainer crashed alone computing": lambda root: _crashed_alone(root, "compute", run_start=True),
    "orchestrator crashed alone in a weight update": lambda root: _crashed_alone(
        root, "update", run_start=True
    ),
    "whole run crashed computing, no run.start": lambda root: _whole_run_crash(
        root, "compute", run_start=False
    ),
    "whole run crashed waiting, no run.start": lambda root: _whole_run_crash(root, "wait", run_start=False),
    "orchestrator crashed alone waiting for weights, no run.start": lambda root: _crashed_alone(
        root, "checkpoint", run_start=False
    ),
    "trainer crashed alone waiting, weights published again before its run.start": lambda root: (
        _crashed_alone(root, "trainer", run_start=True, before_start=True)
    ),
    "orchestrator crashed alone in a batch, a metrics line before its run.start": lambda root: _crashed_alone(
        root, "batch", run_start=True, before_start=True
    ),
    "orchestrator crashed alone waiting for weights, a metrics line before its run.start": lambda root: (
        _crashed_alone(root, "checkpoint", run_start=True, before_start=True)
    ),
    "whole run crashed in a wait for weights": lambda root: _crashed_inside(root, "checkpoint wait")[0],
    "whole run crashed in a wait for weights, no run.start": lambda root: _crashed_inside(
        root, "checkpoint wait", "old"
    )[0],
}
"""The logs :func:`test_a_run_reads_the_same_wherever_the_parser_cuts_its_logs_into_batches` reads."""


def _cut_anywhere(summary: dict) -> dict:
    """A summary but what says how the logs were read (the parse's files, lines and seconds)."""
    return {k: v for k, v in summary.items() if k != "parse"}


@pytest.mark.parametrize("batch_rows, chunk", [(1, 1), (1, 100), (2, 100), (3, 100)])
@pytest.mark.parametrize("case", sorted(_CUT_READS))
def test_a_run_reads_the_same_wherever_the_parser_cuts_its_logs_into_batches(
    tmp_path, analyze, monkeypatch, case, batch_rows, chunk
):
    """A multi-GB log is cut into batches (parser.BATCH_ROWS lines) wherever its chunks end; the
    analysis is the same wherever that is. Read one to three lines a batch (``batch_rows``, chunks of
    100 bytes; or every line a batch of its own: chunks of 1 byte, a line each): a run whose processes log ``run.start`` 0.5 s before their first line (_whole_run_crash,
    _crashed_alone) ran 0.5 s longer (133.48 s for the whole-run crash's 132.98 s): a batch of nothing
    but a run.start started the run at that line, while read whole the file's first line that is no
    start-up does. Without run.start lines the resume's load of weights (its [ckpt] wait of 4 s before
    the [gen] batch.start whose step goes back) read as a wait of the run where a batch ended between
    them: checkpoint wait 4.24 s for 0.24 s (the restart is found at the batch.start, after the wait
    was counted). A process that crashed alone and whose resume logged a line before its run.start
    (_crashed_alone ``before_start``: the trainer's weights published again, the orchestrator's
    [server] metrics) fell silent at that line where a batch ended between it and the run.start (only
    the run.start's batch was looked at): the trainer's open wait counted 53 -> 99 s (trainer waits
    80.0 s for 34.0 s, primary 'Generation-bound' for 'Checkpoint I/O'), the orchestrator's open batch
    generated 143.89 s for 107.59 s, its open wait for weights 120.48 s for 0.18 s. A whole run that
    crashed 40 s into the orchestrator's wait for weights (_crashed_inside ``checkpoint wait``) lost
    that open wait where a batch ended between it and the restart: checkpoint wait 0.27 s for 40.27 s
    and no 'Checkpoint I/O' finding (its [ckpt] lines alone kept what was open, and a batch with none
    of them ended nothing at a restart; without run.start lines the resume's load of weights, in
    batches before the step going back, had closed it). Every figure of summary.json reads as with
    the logs read whole."""
    from prime_rl.analysis import parser

    paths = _CUT_READS[case](tmp_path / "logs")
    whole, _ = analyze(paths, tmp_path / "whole", "--async-level", "2")
    monkeypatch.setattr(parser, "BATCH_ROWS", batch_rows)
    monkeypatch.setattr(parser, "CHUNK", chunk)
    cut, _ = analyze(paths, tmp_path / "cut", "--async-level", "2")
    assert _cut_anywhere(cut) == _cut_anywhere(whole)
    if case.startswith("whole run crashed computing"):
        assert cut["run_seconds"] == pytest.approx(132.98, abs=0.01)
        assert _stage_ms(cut, "checkpoint wait") == pytest.approx(240.0, abs=1.0)  # 24 waits of 10 ms
    if case.startswith("trainer crashed alone waiting, weights"):
        assert _stage_ms(cut, "trainer waits for rollouts") == pytest.approx(34_000.0, abs=1.0)
        assert cut["primary"]["kind"] == "checkpoint_io", cut["findings"]
    if case.startswith("orchestrator crashed alone in a batch, a metrics"):
        assert _stage_ms(cut, "generation") == pytest.approx(
            19 * 4_990.0 + 10_000.0 - 210.0 + 2_990.0, abs=1.0
        )
    if case.startswith("orchestrator crashed alone waiting for weights, a metrics"):
        assert _stage_ms(cut, "checkpoint wait") == pytest.approx(18 * 10.0, abs=1.0)
    if case.startswith("whole run crashed in a wait for weights"):
        assert _stage_ms(cut, "checkpoint wait") == pytest.approx(40_269.0, abs=1.0)
        assert cut["primary"]["kind"] == "checkpoint_io", cut["findings"]


@pytest.mark.parametrize("name", ["orchestrator.log", "all.log"])
def test_the_open_and_end_lines_kept_between_batches_stay_few(tmp_path, monkeypatch, analyze, name):
    """The lines that open or end a batch or wait, kept between batches for a restart a later batch
    may find (the collector's open_marks), are those since the process's last step line: a few,
    whatever the log's length. A log of every process's lines under a name that is no process's
    (all.log: no restart is looked for there) kept every one of them, each batch copying them all
    again (the 10M-line benchmark log: 1.2 s more, quadratic in the log's length)."""
    from prime_rl.analysis import parser
    from prime_rl.analysis.stats import _Collector

    run = make_run("healthy", steps=60, seed=0)
    log = tmp_path / name
    log.write_text("".join(line + "\n" for line in sorted(run.orchestrator + run.inference + run.trainer)))
    kept: list[int] = []
    keep = _Collector._keep_open_marks

    def counted(self, b):
        keep(self, b)
        kept.append(sum(len(marks[0]) for marks in self.open_marks.values()))

    monkeypatch.setattr(_Collector, "_keep_open_marks", counted)
    monkeypatch.setattr(parser, "BATCH_ROWS", 40)
    monkeypatch.setattr(parser, "CHUNK", 2000)
    analyze([log], tmp_path / "out")
    assert len(kept) > 20  # the log was read in many batches
    assert max(kept) <= 12, kept  # a step's waits and batches, not the run's
