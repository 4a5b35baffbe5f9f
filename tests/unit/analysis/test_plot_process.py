"""timeline.png drawn by a child process for big logs: the same picture as drawn in the analyzer,
drawn there when the child fails, and a child given nothing exits."""

from __future__ import annotations

import sys

from tests.support.synthetic_logs import make_run

import prime_rl.analysis.__main__ as cli
from prime_rl.analysis.timeline_plot import PlotProcess


class _Recorded(PlotProcess):
    """A plot process that records what it answered."""

    answers: list[bool] = []

    def result(self, timeout: float = 60.0) -> bool:
        answer = super().result(timeout)
        self.answers.append(answer)
        return answer


class _Failing(_Recorded):
    command = (sys.executable, "-c", "import sys; sys.stdin.buffer.read(); sys.exit(3)")


def _picture(run, out, monkeypatch, child_bytes: int, plotter: type = _Recorded) -> bytes:
    monkeypatch.setattr(cli, "PLOT_CHILD_BYTES", child_bytes)
    monkeypatch.setattr(cli, "PlotProcess", plotter)
    plotter.answers = []
    cli.main([str(run), "--out", str(out)])
    assert "timeline.png" in (out / "SUMMARY.md").read_text()
    return (out / "timeline.png").read_bytes()


def test_a_big_logs_picture_is_drawn_by_a_child_as_the_analyzer_draws_it(tmp_path, monkeypatch):
    run = tmp_path / "run"
    make_run("healthy", steps=40, seed=3).write(run)
    here = _picture(run, tmp_path / "here", monkeypatch, child_bytes=1 << 40)
    assert _Recorded.answers == []  # a small log: no child
    by_child = _picture(run, tmp_path / "child", monkeypatch, child_bytes=0)
    assert _Recorded.answers == [True] and by_child == here and here.startswith(b"\x89PNG")


class _Unstartable(_Recorded):
    command = ("/nonexistent/python",)


def test_a_child_that_fails_or_cannot_start_leaves_the_picture_to_the_analyzer(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    make_run("healthy", steps=40, seed=3).write(run)
    here = _picture(run, tmp_path / "here", monkeypatch, child_bytes=1 << 40)
    capsys.readouterr()
    assert _picture(run, tmp_path / "failed", monkeypatch, 0, _Failing) == here
    assert _Failing.answers == [False]
    assert "the plot process failed; timeline.png is drawn here" in capsys.readouterr().err
    assert _picture(run, tmp_path / "unstartable", monkeypatch, 0, _Unstartable) == here
    assert "timeline.png is drawn here (no plot process" in capsys.readouterr().err


def test_a_plot_process_given_nothing_exits_by_itself_when_closed():
    with PlotProcess() as p:
        child = p._proc
        assert not p.result()  # nothing was sent: nothing drawn
        p.close(wait=120)  # a first import of matplotlib may build its font cache
    assert child.returncode == 0  # it read the end of its pipe and exited, it was not killed


def test_the_plot_process_runs_below_the_analyzers_priority():
    """Its import of matplotlib takes what the parse leaves of the cores, not the parse's share."""
    import os
    import time

    from prime_rl.analysis.timeline_plot import NICE

    own = os.getpriority(os.PRIO_PROCESS, 0)
    with PlotProcess() as p:
        pid = p._proc.pid
        deadline = time.monotonic() + 60
        while os.getpriority(os.PRIO_PROCESS, pid) == own and time.monotonic() < deadline:
            time.sleep(0.01)  # the child lowers its own priority as it starts
        assert os.getpriority(os.PRIO_PROCESS, pid) == min(own + NICE, 19)
