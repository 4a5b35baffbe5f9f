"""The Python sandbox: output, errors and every limit, provoked; nothing outlives a call."""

from __future__ import annotations

import asyncio
import os
import signal

import psutil

from prime_rl.envs import sandbox
from prime_rl.envs.sandbox import run_python, run_python_async


def test_code_runs_in_a_fresh_directory_that_is_removed_afterwards():
    r = run_python("import os; print(os.getcwd()); open('f.txt', 'w').write('x')")
    assert r.ok and r.exit_code == 0
    workdir = r.stdout.strip()
    assert "prime-rl-sandbox-" in workdir and not os.path.exists(workdir)


def test_an_exception_is_an_error_with_its_traceback():
    r = run_python("raise ValueError('no')")
    assert r.reason == "error" and "ValueError: no" in r.stderr and "[error:" in r.text()


def test_an_endless_loop_is_killed_at_the_wall_limit_with_its_whole_process_group():
    async def go():
        seen: list[int] = []
        real = asyncio.create_subprocess_exec

        async def spy(*args, **kw):
            proc = await real(*args, **kw)
            seen.append(proc.pid)
            return proc

        sandbox.asyncio.create_subprocess_exec = spy
        try:
            code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
            return await run_python_async(code, wall_s=1.0), seen[0]
        finally:
            sandbox.asyncio.create_subprocess_exec = real

    r, pid = asyncio.run(go())
    assert r.reason == "timeout" and r.exit_code is None
    alive = []
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pid and p.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            pass
    assert alive == []  # the group, the code's own child included, is gone


def test_cpu_memory_and_file_limits_hold():
    assert run_python("while True: pass", cpu_s=1, wall_s=10).reason == "cpu"
    assert run_python("x = bytearray(2 * 1024**3)", memory_mb=256).reason == "memory"
    big = run_python("open('big', 'wb').write(b'0' * (64 * 1024 * 1024))", file_mb=8)
    assert big.reason == "error" and "File too large" in big.stderr


def test_output_is_cut_at_the_limit():
    r = run_python("print('y' * 50000)", output_limit=1000)
    assert r.reason == "output_limit" and len(r.stdout) == 1000


def test_no_network():
    r = run_python("import socket; socket.create_connection(('127.0.0.1', 9), timeout=2)")
    assert r.reason == "error"
    assert (
        "disabled in the sandbox" in r.stderr
        or "Network is unreachable" in r.stderr
        or "refused" not in r.stderr
    )
    if r.network_isolated:  # an empty namespace: not even loopback is up
        assert "Network is unreachable" in r.stderr or "disabled in the sandbox" in r.stderr


def test_code_that_signals_its_process_group_reaches_only_its_own_session():
    r = run_python("import os, signal; os.killpg(0, signal.SIGTERM)")
    assert r.reason == "error" and r.exit_code == -signal.SIGTERM  # and this test process lives on
