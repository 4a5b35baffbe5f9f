"""The Python sandbox: output, errors and every limit, provoked; nothing outlives a call."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time

import pytest
from tests.support.processes import dead, wait_until

from prime_rl.envs import sandbox
from prime_rl.envs.sandbox import SandboxError, SandboxResult, run_python, run_python_async


def test_output_and_exit_code_come_back():
    r = run_python("import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert isinstance(r, SandboxResult) and (r.stdout, r.stderr, r.exit_code, r.reason) == (
        "out\n",
        "err\n",
        0,
        "ok",
    )
    assert r.ok and not r.truncated and r.ms > 0 and r.text() == "out\nstderr:\nerr"
    assert run_python("x = 1").text().startswith("(no output")


def test_an_exception_is_an_error_with_its_traceback():
    r = run_python("def f():\n    raise ValueError('no')\nf()")
    assert (r.reason, r.exit_code) == ("error", 1)
    assert r.stderr.startswith('Traceback (most recent call last):\n  File "main.py", line 3, in <module>')
    assert "raise ValueError('no')" in r.stderr and r.stderr.endswith("ValueError: no\n")
    assert "[error:" in r.text()
    syntax = run_python("x = (")
    assert syntax.reason == "error" and "SyntaxError" in syntax.stderr and "<string>" not in syntax.stderr
    assert run_python("import sys; sys.exit(3)").exit_code == 3


def test_code_runs_in_a_fresh_directory_with_an_empty_environment_removed_afterwards():
    r = run_python("import os; print(os.getcwd()); print(sorted(os.environ)); open('f.txt', 'w').write('x')")
    workdir, env = r.stdout.splitlines()
    assert r.ok and "prime-rl-sandbox-" in workdir and not os.path.exists(workdir)
    assert "HOME" in env and "PYTHONPATH" not in env and "VIRTUAL_ENV" not in env
    other = run_python("import os; print(os.getcwd(), os.listdir('.'))").stdout.split()[0]
    assert other != workdir


def test_an_endless_loop_is_killed_at_the_wall_limit_with_its_whole_process_group():
    code = (
        "import os, subprocess, sys\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(os.getpgid(0), child.pid, flush=True)\n"
        "while True: pass"
    )
    start = time.monotonic()
    # 5 s: time for the code to start its child and print, on a loaded machine too
    r = run_python(code, wall_s=5.0, cpu_s=60)
    assert (r.reason, r.exit_code) == ("timeout", None) and 5.0 <= time.monotonic() - start < 15
    pgid, child = map(int, r.stdout.split())  # output printed before the kill is kept
    # SIGKILL went to the whole group; the kernel delivers it when the child next runs, which on a
    # loaded machine can be a moment after the leader was reaped (CI once saw it still sleeping)
    assert dead(pgid) and wait_until(lambda: dead(child), 5), "the code's child outlived the sandbox"
    if not os.path.exists(f"/proc/{child}"):  # where init reaps, not even a zombie is left
        with pytest.raises(ProcessLookupError):
            os.killpg(pgid, 0)
    assert "[timeout:" in r.text()


def test_processes_the_code_leaves_behind_are_killed_and_reaped_when_it_exits():
    code = "import os, subprocess\np = subprocess.Popen(['sleep', '60'])\nprint(os.getpgid(0), p.pid)"
    r = run_python(code)
    pgid, child = map(int, r.stdout.split())
    assert r.ok and not os.path.exists(f"/proc/{child}")
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


def test_allocating_2_gb_is_a_memory_error():
    r = run_python("x = bytearray(2 * 1024**3)", memory_mb=512)
    assert (r.reason, r.exit_code) == ("memory", sandbox.MEMORY_EXIT) and "MemoryError" in r.stderr


def test_a_cpu_bound_loop_hits_the_cpu_limit():
    start = time.monotonic()
    r = run_python("while True: pass", cpu_s=1, wall_s=60)  # the reason says which limit ended it
    assert r.reason == "cpu" and r.exit_code == -signal.SIGXCPU and time.monotonic() - start < 30


def test_no_network():
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        r = run_python(f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)")
        assert (
            r.reason == "error" and "PermissionError: network access is disabled in the sandbox" in r.stderr
        )
        lookup = run_python("import socket; socket.getaddrinfo('example.com', 80)")
        assert "disabled in the sandbox" in lookup.stderr
        local = run_python("import asyncio; asyncio.run(asyncio.sleep(0)); print('unix sockets work')")
        assert local.stdout == "unix sockets work\n"
        if r.network_isolated:  # a program the code starts (no audit hook) finds no network either
            child = (
                "import subprocess, sys\n"
                f"c = 'import socket; socket.create_connection((\"127.0.0.1\", {port}), timeout=2)'\n"
                "p = subprocess.run([sys.executable, '-c', c], capture_output=True, text=True)\n"
                "print(p.returncode, p.stderr.strip().splitlines()[-1])\n"
                "print(open('/proc/net/dev').read())"
            )
            out = run_python(child).stdout
            assert out.startswith("1 OSError: [Errno 101] Network is unreachable")
            assert [line.split(":")[0].strip() for line in out.splitlines()[3:] if ":" in line] == ["lo"]
    finally:
        listener.close()


def test_without_a_network_namespace_python_sockets_are_still_blocked(monkeypatch):
    monkeypatch.setattr(sandbox, "_LIBC", None)  # as where unshare is not available
    r = run_python("import socket; socket.socket(socket.AF_INET, socket.SOCK_STREAM)")
    assert not r.network_isolated and r.reason == "error" and "disabled in the sandbox" in r.stderr


def test_writing_a_huge_file_is_limited(tmp_path):
    target = tmp_path / "big"
    r = run_python(f"open({str(target)!r}, 'wb').write(b'0' * (8 * 1024 * 1024))", file_mb=1)
    assert r.reason == "error" and "File too large" in r.stderr
    assert target.stat().st_size <= 1024 * 1024


def test_output_is_cut_at_the_limit():
    r = run_python("import sys\nprint('y' * 2500)\nprint('z' * 2500, file=sys.stderr)", output_limit=1000)
    assert (r.reason, r.exit_code, r.truncated) == ("output_limit", 0, True)
    assert r.stdout == "y" * 1000 and r.stderr == "z" * 1000
    start = time.monotonic()
    flood = run_python("while True: print('é' * 1000)", output_limit=1000, wall_s=60)
    assert (flood.reason, flood.exit_code) == ("output_limit", None) and flood.stdout.startswith("é" * 1000)
    assert len(flood.stdout) == 1000 and time.monotonic() - start < 30  # stopped, not left to the wall limit
    assert run_python("print('x' * 999)", output_limit=1000).reason == "ok"


def test_the_async_variant_and_its_cancellation(tmp_path):
    marker = tmp_path / "pgid"

    async def go():
        results = await asyncio.gather(run_python_async("print(1)"), run_python_async("print(2)"))
        code = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpgid(0)))\ntime.sleep(60)"
        with pytest.raises(TimeoutError):  # 5 s: the code has written its marker by then, loaded or not
            await asyncio.wait_for(run_python_async(code, wall_s=60), 5.0)
        return results

    start = time.monotonic()
    assert [r.stdout for r in asyncio.run(go())] == ["1\n", "2\n"]
    assert time.monotonic() - start < 30  # the cancelled run was not left to its 60 s
    with pytest.raises(ProcessLookupError):
        os.killpg(int(marker.read_text()), 0)


def test_code_that_signals_its_process_group_reaches_only_its_own_session():
    r = run_python("import os, signal; os.killpg(0, signal.SIGTERM)")
    assert r.reason == "error" and r.exit_code == -signal.SIGTERM  # and this test process lives on


@pytest.mark.parametrize(
    "limit", ["cpu_s", "memory_mb", "wall_s", "output_limit", "file_mb", "max_processes"]
)
def test_bad_limits_are_refused_by_name(limit):
    with pytest.raises(SandboxError, match=f"sandbox limit {limit} must be a positive number"):
        run_python("print(1)", **{limit: 0})


def test_no_process_limit_is_set_for_root_and_a_bounded_one_otherwise():
    limit = sandbox._nproc_limit(64)
    assert limit is None if os.geteuid() == 0 else limit >= 64
