"""The analyzer's plot child (timeline.png for big logs) does not outlive an analyzer that is
SIGKILLed: its pipe closes with the analyzer, and it exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.support.processes import dead, wait_until

PARENT = """
import sys, time
from prime_rl.analysis.timeline_plot import PlotProcess
p = PlotProcess()
print(p._proc.pid, flush=True)
time.sleep(120)
"""


def test_the_plot_child_exits_when_the_analyzer_is_killed():
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = 0
    try:
        child = int(parent.stdout.readline())
        assert not dead(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        # it finishes importing matplotlib (a first import may build its font cache), then exits
        assert wait_until(lambda: dead(child), timeout=120), "the plot child outlived the analyzer"
    finally:
        parent.kill()
        parent.wait()
        if child and not dead(child):
            os.kill(child, signal.SIGKILL)
