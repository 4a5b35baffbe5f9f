"""benchmarks/children.py: what a benchmark starts is stopped with it, even by a SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from prime_rl.lifecycle import group_members

ROOT = Path(__file__).resolve().parents[2]

_BENCHMARK = """
import sys
sys.path.insert(0, sys.argv[1])
from benchmarks.children import run_grouped
run_grouped(["sh", "-c", "echo $$ > " + sys.argv[2] + "; sleep 300 & sleep 300"])
"""


def test_a_sigterm_to_the_benchmark_stops_its_childs_whole_group(tmp_path):
    pid_file = tmp_path / "group"
    bench = subprocess.Popen([sys.executable, "-c", _BENCHMARK, str(ROOT), str(pid_file)])
    try:
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        group = int(pid_file.read_text())
        while len(group_members(group)) < 2 and time.monotonic() < deadline:  # sh and its two sleeps
            time.sleep(0.05)
        assert len(group_members(group)) >= 2
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=30) == 128 + signal.SIGTERM
        # the background sleep too: it is no child of the benchmark, only of its group
        assert group_members(group) == []
    finally:
        bench.kill()
        bench.wait()
        if pid_file.exists() and (group := int(pid_file.read_text() or 0)):
            for pid in group_members(group):
                os.kill(pid, signal.SIGKILL)


_LOST_EXIT = """
import sys, time
sys.path.insert(0, sys.argv[1])
from benchmarks.children import grouped
from tests.support.lost_signals import sigterm_inside_a_weakref_callback

with grouped(["sh", "-c", "echo $$ > " + sys.argv[2] + "; sleep 300 & sleep 300"]):
    while not open(sys.argv[2]).read().strip():
        time.sleep(0.05)
    time.sleep(0.5)  # sh has started its sleeps
    sigterm_inside_a_weakref_callback()  # which drops the handler's SystemExit
    from prime_rl.lifecycle import group_members
    print("went on with", len(group_members(int(open(sys.argv[2]).read()))), "processes left", flush=True)
"""


def test_a_sigterm_whose_exit_is_lost_in_a_weakref_callback_still_stops_the_group(tmp_path):
    pid_file = tmp_path / "group"
    pid_file.write_text("")
    bench = subprocess.run(
        [sys.executable, "-c", _LOST_EXIT, str(ROOT), str(pid_file)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    group = int(pid_file.read_text())
    try:
        assert "Exception ignored" in bench.stderr and "SystemExit" in bench.stderr  # the exit was lost,
        assert "went on with 0 processes left" in bench.stdout  # but the handler had stopped the group
    finally:
        for pid in group_members(group):
            os.kill(pid, signal.SIGKILL)
