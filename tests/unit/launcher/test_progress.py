"""The launcher's progress line, from metrics.jsonl: plain lines off a terminal, a live bar on one."""

from __future__ import annotations

import io
import json

from prime_rl.launcher import progress
from prime_rl.launcher.progress import Progress, format_duration


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def append(path, *rows, raw: str = ""):
    with open(path, "a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
        f.write(raw)


def orchestrator(step, reward, tps=900.0):
    return {"process": "orchestrator", "step": step, "reward_mean": reward, "tokens_per_s": tps}


def trainer(step, tps=3000.0):
    return {"process": "trainer", "step": step, "loss": 0.1, "tokens_per_s": tps}


def test_plain_lines_one_per_finished_step_with_reward_tokens_per_s_and_eta(tmp_path):
    metrics, out, clock = tmp_path / "metrics.jsonl", io.StringIO(), Clock()
    bar = Progress(metrics, max_steps=10, stream=out, clock=clock)
    assert bar.bar is None  # StringIO is no terminal
    append(metrics, orchestrator(0, 0.25))
    bar.poll()
    assert out.getvalue() == ""  # no step is done before the trainer's row
    append(metrics, trainer(0))
    bar.poll()
    clock.t += 20.0
    append(
        metrics, orchestrator(1, 0.5, tps=1200.0), trainer(1), orchestrator(2, 0.75), trainer(2, tps=2500.0)
    )
    bar.poll()
    # step 1 ended at t=100, steps 2 and 3 at t=120: 20 s for 1 step, then 20 s for 2 steps
    assert out.getvalue().splitlines() == [
        "[rl] step 1/10 | reward 0.250 | gen 900 tok/s | train 3,000 tok/s | ETA -",
        "[rl] step 2/10 | reward 0.500 | gen 1,200 tok/s | train 3,000 tok/s | ETA 2m40s",
        "[rl] step 3/10 | reward 0.750 | gen 900 tok/s | train 2,500 tok/s | ETA 1m10s",
    ]
    assert bar.eta_s() == 70.0


def test_rows_of_an_earlier_run_and_a_torn_last_line_are_not_counted(tmp_path):
    metrics, out = tmp_path / "metrics.jsonl", io.StringIO()
    append(metrics, orchestrator(0, 0.1), trainer(0), trainer(1))  # before a resume at step 2
    bar = Progress(metrics, max_steps=4, start_step=2, stream=out, clock=Clock())
    append(metrics, orchestrator(2, 0.9), raw='{"process": "trainer", "st')
    bar.poll()
    assert bar.done == 2 and bar.reward == 0.9 and out.getvalue() == ""
    append(metrics, raw='ep": 2, "tokens_per_s": 10.0}\nnot json\n')
    bar.poll()
    assert bar.done == 3
    assert out.getvalue() == "[rl] step 3/4 | reward 0.900 | gen 900 tok/s | train 10 tok/s | ETA -\n"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_live_bar_with_echoed_lines_printed_above_it(tmp_path):
    metrics, term = tmp_path / "metrics.jsonl", Terminal()
    bar = Progress(metrics, max_steps=5, stream=term, clock=Clock())
    try:
        assert bar.bar is not None
        append(metrics, orchestrator(0, 0.4), trainer(0))
        bar.poll()
        progress.write("[orchestrator] step 0 | reward 0.400\n", term)
        screen = term.getvalue()
        assert "1/5" in screen and "reward 0.400" in screen and "gen 900 tok/s" in screen
        assert "[rl] step" not in screen  # no plain lines on a terminal
        assert "[orchestrator] step 0 | reward 0.400\n" in screen
    finally:
        bar.close()
    plain = io.StringIO()
    progress.write("after\n", plain)  # with the bar gone, writes are plain again
    assert plain.getvalue() == "after\n"


def test_durations_read_as_hours_minutes_seconds():
    assert [format_duration(s) for s in (5, 65, 3600 + 120 + 10)] == ["5s", "1m05s", "1h02m"]
