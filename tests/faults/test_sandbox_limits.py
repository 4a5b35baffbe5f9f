"""Sandbox faults: a caller that dies or exits mid-run takes its sandbox with it; numpy's memory."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.processes import dead, wait_until

from prime_rl.envs.sandbox import run_python


def start_caller(tmp_path: Path, body: str) -> tuple[subprocess.Popen, Path]:
    """A Python process that runs a sandbox whose code writes its pgid to a file, then sleeps."""
    marker = tmp_path / "pgid"
    code = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpgid(0)))\ntime.sleep(60)"
    script = f"from prime_rl.envs.sandbox import run_python\nCODE = {code!r}\n{body}"
    caller = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    assert wait_until(lambda: marker.exists() and marker.read_text() != ""), "the sandbox never started"
    return caller, marker


def cleanup(caller: subprocess.Popen, marker: Path) -> None:
    for pgid in (caller.pid, int(marker.read_text() or 0)):
        if pgid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
    caller.wait(timeout=10)


def test_a_sigkilled_caller_takes_its_running_sandbox_with_it(tmp_path):
    caller, marker = start_caller(tmp_path, "run_python(CODE, wall_s=60, cpu_s=60)")
    try:
        leader = int(marker.read_text())
        assert not dead(leader)
        os.kill(caller.pid, signal.SIGKILL)  # no atexit, no finally: only PR_SET_PDEATHSIG is left
        caller.wait(timeout=10)
        assert wait_until(lambda: dead(leader), 5), "the sandbox outlived its SIGKILLed caller"
    finally:
        cleanup(caller, marker)


def test_a_caller_that_exits_mid_run_kills_its_sandbox_at_exit(tmp_path):
    body = (
        "import threading\n"
        "threading.Thread(target=run_python, args=(CODE,), kwargs={'wall_s': 60}, daemon=True).start()\n"
        "import time\n"
        "time.sleep(1.5)\n"
    )
    caller, marker = start_caller(tmp_path, body)
    try:
        leader = int(marker.read_text())
        assert caller.wait(timeout=10) == 0
        assert wait_until(lambda: dead(leader), 5), "the sandbox outlived its caller's exit"
    finally:
        cleanup(caller, marker)


def test_numpy_running_out_of_memory_is_a_memory_error():
    pytest.importorskip("numpy")
    r = run_python("import numpy as np\nx = np.ones(10**9)", memory_mb=512)
    assert r.reason == "memory" and "Unable to allocate" in r.stderr
    ok = run_python("import numpy as np\nprint(np.ones(10**6).sum())", memory_mb=512)
    assert ok.stdout == "1000000.0\n"
