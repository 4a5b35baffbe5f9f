"""A sandboxed Python tool: model-written code runs in a separate, limited, throwaway process.

:func:`run_python` writes the code to ``main.py`` in a fresh temporary directory and runs it with
``python -I`` (:data:`sys.executable`, isolated mode: no user site, no ``PYTHON*`` variables, the
working directory not on ``sys.path``) in a new session (its own process group), with that
directory as its working directory, ``HOME`` and ``TMPDIR`` and an almost empty environment. The
directory is removed afterwards. Limits, set in the child before it executes Python
(``preexec_fn``):

- CPU time (``RLIMIT_CPU``, whole seconds, rounded up: reason ``cpu``), address space
  (``RLIMIT_AS`` = ``memory_mb``: reason ``memory``), size of any file written (``RLIMIT_FSIZE``
  = ``file_mb``: the write fails with ``File too large``), no core dumps, and for a non-root user
  at most ``max_processes`` more processes/threads (``RLIMIT_NPROC``; the kernel does not apply it
  to root, so it is not set then);
- a wall-clock limit enforced from outside (reason ``timeout``): the whole process group is
  SIGKILLed, then the program is reaped. Processes the code starts do not outlive the call: the
  program is their subreaper (``PR_SET_CHILD_SUBREAPER``) and kills and reaps them when it exits
  (so no zombies are left to an init that may not reap them), and its group is killed right after.
  After a wall-clock kill, those children are killed too but left to init to reap. A sandbox does
  not outlive its caller either: the child gets ``PR_SET_PDEATHSIG`` (SIGKILL) and live groups are
  killed at interpreter exit (only the code's own children survive a caller SIGKILLed mid-run);
- no network: on Linux the child moves into a new, empty network namespace (``unshare
  (CLONE_NEWNET)``: as root, or through a new user namespace for other users where the kernel
  allows it). Where that is refused the sandbox degrades, and :attr:`SandboxResult.network_isolated`
  is False (a warning is logged once): then only Python's own sockets are blocked. They are
  always blocked: an audit hook refuses to create any socket but a Unix-domain one (so asyncio's
  self-pipe still works) and refuses name lookups. Code that reaches the C library directly
  (``ctypes``) or runs another program gets past the audit hook, not past the namespace;
- stdout and stderr are each cut at ``output_limit`` characters (reason ``output_limit``,
  :attr:`SandboxResult.truncated`); a program that keeps writing well past that (four times the
  limit, in bytes) is stopped, since the rest could not be shown anyway.

Memory and CPU exhaustion are told apart from other errors: an uncaught ``MemoryError`` (or
``ENOMEM``) is reported by the prelude that runs the code, and the CPU limit kills with SIGXCPU.

This limits the blast radius of a model's honest mistakes (endless loops, huge allocations, writes
everywhere, calls home); it is not a security boundary against hostile code (the code runs as the
caller's user and can read what that user can): run untrusted workloads in a container or VM too.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import math
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from loguru import logger

from prime_rl.envs.tools import Tool

Reason = Literal["ok", "error", "timeout", "memory", "cpu", "output_limit"]
"""How a run ended: ``ok`` (exit 0), ``error`` (an exception or another non-zero exit),
``timeout`` (wall-clock limit), ``memory``, ``cpu``, ``output_limit`` (output cut)."""

MEMORY_EXIT = 107
"""Exit code of the prelude when the code died of an uncaught ``MemoryError`` / ``ENOMEM``."""

_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
"""Loaded in the parent: the child (after fork, before exec) only calls into it."""

_PRELUDE = f"""
import sys
def _sandbox_audit(event, args):
    if event == "socket.__new__" and args[1] != 1 or event in (
        "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo"
    ):  # 1 is AF_UNIX: local socket pairs (asyncio's self-pipe) stay allowed
        raise PermissionError("network access is disabled in the sandbox")
sys.addaudithook(_sandbox_audit)
del _sandbox_audit
def _sandbox_reap():
    # at exit (after multiprocessing's own clean-up): kill what the code started and reap it here,
    # as the subreaper, rather than leave zombies to an init that may never reap them
    import os, signal, time
    me = os.getpid()
    for _ in range(100):
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return
        if not os.path.isdir("/proc"):
            return
        for name in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{{name}}/stat") as f:
                    ppid, pgrp = f.read().rpartition(")")[2].split()[1:3]
                if name != str(me) and me in (int(ppid), int(pgrp)):
                    os.kill(int(name), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        time.sleep(0.01)
import atexit
atexit.register(_sandbox_reap)
del atexit, _sandbox_reap
sys.stdout.reconfigure(line_buffering=True)
sys.argv[:] = ["main.py"]
def _sandbox_main():
    try:
        with open("main.py", encoding="utf-8") as f:
            code = compile(f.read(), "main.py", "exec")
        exec(code, {{"__name__": "__main__", "__file__": "main.py", "__builtins__": __builtins__}})
    except SystemExit:
        raise
    except BaseException as e:
        import traceback
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        memory = isinstance(e, MemoryError) or isinstance(e, OSError) and e.errno == 12
        sys.exit({MEMORY_EXIT} if memory else 1)
_sandbox_main()
"""
"""Runs in the child (``python -I -c``): blocks sockets, then runs ``main.py`` as ``__main__``
with a traceback that starts at the code's own frames (a syntax error is reported the same way)."""


class SandboxError(RuntimeError):
    """The sandbox could not run the code at all (bad limits, the process could not start)."""


@dataclass(frozen=True)
class SandboxResult:
    """What a run printed and how it ended."""

    stdout: str
    stderr: str
    exit_code: int | None
    """The process's exit code (negative: killed by that signal); ``None`` when the sandbox
    stopped it (``timeout``, or too much output)."""
    reason: Reason
    ms: float
    """Wall-clock time of the run, start-up and clean-up included."""
    network_isolated: bool = False
    """True when the code ran in an empty network namespace; False when that was refused and only
    Python's sockets were blocked."""
    truncated: bool = False
    """Whether stdout or stderr was cut at ``output_limit`` characters."""

    @property
    def ok(self) -> bool:
        return self.reason == "ok"

    def text(self) -> str:
        """What the model is told: the output, and what went wrong if anything did."""
        parts = [self.stdout.rstrip("\n")] if self.stdout else []
        if self.stderr:
            parts.append(f"stderr:\n{self.stderr.rstrip(chr(10))}")
        if self.reason != "ok":
            parts.append(f"[{self.reason}: {_EXPLAIN[self.reason]}]")
        return "\n".join(parts) if parts else "(no output: print the values you want to see)"


_EXPLAIN: dict[str, str] = {
    "ok": "",
    "error": "the code raised an exception or exited with an error",
    "timeout": "the code ran past its wall-clock limit and was killed",
    "memory": "the code ran out of memory (its memory limit)",
    "cpu": "the code used up its CPU-time limit and was killed",
    "output_limit": "the output was cut at its limit",
}


@dataclass(frozen=True)
class _Limits:
    cpu_s: float
    memory_mb: int
    wall_s: float
    output_limit: int
    file_mb: int
    max_processes: int


def run_python(
    code: str,
    *,
    cpu_s: float = 5.0,
    memory_mb: int = 512,
    wall_s: float = 10.0,
    output_limit: int = 10_000,
    file_mb: int = 16,
    max_processes: int = 64,
) -> SandboxResult:
    """Run ``code`` in the sandbox (see the module docstring) and wait for it. Never raises for what
    the code does; raises :class:`SandboxError` for bad limits or when the process cannot start."""
    limits = _check_limits(cpu_s, memory_mb, wall_s, output_limit, file_mb, max_processes)
    return _run(code, limits, None)


async def run_python_async(
    code: str,
    *,
    cpu_s: float = 5.0,
    memory_mb: int = 512,
    wall_s: float = 10.0,
    output_limit: int = 10_000,
    file_mb: int = 16,
    max_processes: int = 64,
) -> SandboxResult:
    """:func:`run_python` without blocking the event loop (the run waits on a worker thread).
    Cancelling the awaiting task kills the run's process group within about 0.1 s."""
    limits = _check_limits(cpu_s, memory_mb, wall_s, output_limit, file_mb, max_processes)
    cancel = threading.Event()
    try:
        return await asyncio.to_thread(_run, code, limits, cancel)
    except asyncio.CancelledError:
        cancel.set()
        raise


def python_tool(
    *,
    cpu_s: float = 5.0,
    memory_mb: int = 512,
    wall_s: float = 10.0,
    output_limit: int = 10_000,
    file_mb: int = 16,
) -> Tool:
    """The ``python`` tool for models: runs code with :func:`run_python_async` under these limits
    and answers with :meth:`SandboxResult.text` (stdout, stderr, and what went wrong)."""
    limits = _check_limits(cpu_s, memory_mb, wall_s, output_limit, file_mb, 64)

    async def python(code: str) -> str:
        """Run Python code and return its stdout/stderr.

        Args:
            code: a complete Python program; print the values you want to see
        """
        result = await run_python_async(
            code,
            cpu_s=limits.cpu_s,
            memory_mb=limits.memory_mb,
            wall_s=limits.wall_s,
            output_limit=limits.output_limit,
            file_mb=limits.file_mb,
        )
        return result.text()

    description = (
        "Run Python code and return its stdout/stderr. Each call is a fresh process (nothing "
        f"persists between calls) without network access, limited to {limits.wall_s:g} s of wall "
        f"time, {limits.cpu_s:g} s of CPU and {limits.memory_mb} MB of memory; print the values "
        "you want to see."
    )
    return Tool.from_function(python, description=description)


def _check_limits(
    cpu_s: float, memory_mb: int, wall_s: float, output_limit: int, file_mb: int, max_processes: int
) -> _Limits:
    for name, value in (
        ("cpu_s", cpu_s),
        ("memory_mb", memory_mb),
        ("wall_s", wall_s),
        ("output_limit", output_limit),
        ("file_mb", file_mb),
        ("max_processes", max_processes),
    ):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise SandboxError(f"sandbox limit {name} must be a positive number, got {value!r}")
    return _Limits(
        float(cpu_s), int(memory_mb), float(wall_s), int(output_limit), int(file_mb), int(max_processes)
    )


# -- the run -------------------------------------------------------------------------------------

_LIVE: set[int] = set()
"""Process groups of runs in progress (killed at interpreter exit)."""
_LIVE_LOCK = threading.Lock()
_WARNED_NO_NETNS = False


@atexit.register
def _kill_live_groups() -> None:
    with _LIVE_LOCK:
        for pgid in list(_LIVE):
            with contextlib.suppress(OSError):
                os.killpg(pgid, signal.SIGKILL)


def _run(code: str, limits: _Limits, cancel: threading.Event | None) -> SandboxResult:
    start = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="prime-rl-sandbox-")
    proc: subprocess.Popen[bytes] | None = None
    try:
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as f:
            f.write(code)
        status_r, status_w = os.pipe()  # the child says whether it got its own network namespace
        try:
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-c", _PRELUDE],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=workdir,
                    env=_child_env(workdir),
                    start_new_session=True,
                    preexec_fn=_child_setup(limits, status_w),
                    close_fds=True,
                )
            except (OSError, subprocess.SubprocessError) as e:
                raise SandboxError(f"the sandbox process could not start: {e}") from e
            finally:
                os.close(status_w)
            with _LIVE_LOCK:
                _LIVE.add(proc.pid)
            isolated = os.read(status_r, 1) == b"1"
        finally:
            os.close(status_r)
        _note_isolation(isolated)
        deadline = start + limits.wall_s
        out, err, stopped = _collect(proc, deadline, 4 * (limits.output_limit + 1), cancel)
    finally:
        cpu_used = _end(proc) if proc is not None else 0.0
        shutil.rmtree(workdir, ignore_errors=True)
    assert proc is not None
    stdout = out.decode("utf-8", errors="replace")
    stderr = err.decode("utf-8", errors="replace")
    truncated = len(stdout) > limits.output_limit or len(stderr) > limits.output_limit
    reason = _reason(stopped, proc.returncode, stderr, cpu_used, limits.cpu_s, truncated)
    return SandboxResult(
        stdout[: limits.output_limit],
        stderr[: limits.output_limit],
        None if stopped else proc.returncode,
        reason,
        (time.monotonic() - start) * 1000.0,
        isolated,
        truncated,
    )


def _child_env(workdir: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        # one BLAS/OpenMP thread and few malloc arenas: thread pools and per-thread arenas reserve
        # address space, and would make numpy fail under a small RLIMIT_AS
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",
    }


def _child_setup(limits: _Limits, status_fd: int) -> Callable[[], None]:
    """The ``preexec_fn``: everything is computed here, in the parent; the child only applies it."""
    cpu = max(1, math.ceil(limits.cpu_s))
    wanted = [
        (resource.RLIMIT_CPU, cpu, cpu + 1),  # SIGXCPU at the soft limit, SIGKILL a second later
        (resource.RLIMIT_AS, limits.memory_mb * 2**20, limits.memory_mb * 2**20),
        (resource.RLIMIT_FSIZE, limits.file_mb * 2**20, limits.file_mb * 2**20),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    nproc = _nproc_limit(limits.max_processes)
    if nproc is not None:
        wanted.append((resource.RLIMIT_NPROC, nproc, nproc))
    settings = []
    for which, soft, hard in wanted:  # never above the caller's own hard limit (that would fail)
        current = resource.getrlimit(which)[1]
        cap = hard if current == resource.RLIM_INFINITY else min(hard, current)
        settings.append((which, (min(soft, cap), cap)))
    parent = os.getpid()
    libc = _LIBC

    def setup() -> None:  # in the child, after fork, before exec
        for which, value in settings:
            resource.setrlimit(which, value)
        isolated = False
        if libc is not None:
            isolated = libc.unshare(_CLONE_NEWNET) == 0 or libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) == 0
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans of the code come back to it
        if os.getppid() != parent:  # the caller died before PDEATHSIG was set
            os._exit(1)
        os.write(status_fd, b"1" if isolated else b"0")

    return setup


def _nproc_limit(extra: int) -> int | None:
    """``RLIMIT_NPROC`` for the child: the user's current tasks plus ``extra``. ``None`` for root (the
    kernel does not apply the limit to root) and where ``/proc`` cannot be read."""
    uid = os.geteuid()
    if uid == 0 or not os.path.isdir("/proc"):
        return None
    tasks = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{name}").st_uid == uid:
                    tasks += len(os.listdir(f"/proc/{name}/task"))
    return tasks + extra


def _note_isolation(isolated: bool) -> None:
    global _WARNED_NO_NETNS
    if not isolated and not _WARNED_NO_NETNS:
        _WARNED_NO_NETNS = True
        logger.warning(
            "sandbox: no network namespace could be created here; only Python's sockets are blocked "
            "in sandboxed code (programs it runs, or ctypes, could still reach the network)"
        )


def _collect(
    proc: subprocess.Popen[bytes], deadline: float, cap: int, cancel: threading.Event | None
) -> tuple[bytes, bytes, str | None]:
    """Read stdout and stderr (at most ``cap`` bytes each) until the program has exited and its
    output is drained. Returns them and why the sandbox stopped it (``timeout``, ``output_limit``)
    or ``None``. Once the program exits its group is killed, so leftover children cannot hold the
    pipes open; their output gets at most half a second more."""
    assert proc.stdout is not None and proc.stderr is not None
    bufs = (bytearray(), bytearray())
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, 0)
    sel.register(proc.stderr, selectors.EVENT_READ, 1)
    pidfd = _pidfd(proc.pid)
    if pidfd is not None:
        sel.register(pidfd, selectors.EVENT_READ, "exit")
    streams, exited, killed, stop_at = 2, False, False, deadline
    try:
        while streams or not exited:
            if not exited and (pidfd is None or streams == 0) and _has_exited(proc.pid):
                exited = True
            if exited and not killed:
                _killpg(proc.pid)  # the leader is a zombie still, so its group id is not reused
                killed, stop_at = True, min(deadline, time.monotonic() + 0.5)
                if not streams:
                    break
            now = time.monotonic()
            if now >= stop_at:
                return bytes(bufs[0]), bytes(bufs[1]), None if exited else "timeout"
            if cancel is not None and cancel.is_set():
                return bytes(bufs[0]), bytes(bufs[1]), "timeout"
            poll = 0.1 if (cancel is not None or pidfd is None or streams == 0) else stop_at - now
            for key, _ in sel.select(min(stop_at - now, poll)):
                if key.data == "exit":
                    sel.unregister(key.fileobj)
                    exited = True
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    streams -= 1
                    continue
                buf = bufs[key.data]
                buf += chunk[: cap - len(buf)]
                if len(buf) >= cap:
                    return bytes(bufs[0]), bytes(bufs[1]), "output_limit"
        return bytes(bufs[0]), bytes(bufs[1]), None
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)  # Linux 5.3+: readable when the process exits
    except (AttributeError, OSError):
        return None


def _has_exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it (its pid keeps naming the group)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # reaped by someone else


def _killpg(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _end(proc: subprocess.Popen[bytes]) -> float:
    """Kill the run's process group, reap the program and close its pipes; its CPU seconds."""
    _killpg(proc.pid)
    cpu = 0.0
    if proc.returncode is None:
        try:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            cpu = usage.ru_utime + usage.ru_stime
        except ChildProcessError:  # reaped elsewhere (a process-wide SIGCHLD handler)
            proc.returncode = -signal.SIGKILL
    with _LIVE_LOCK:
        _LIVE.discard(proc.pid)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
    return cpu


def _reason(
    stopped: str | None, code: int | None, stderr: str, cpu_used: float, cpu_s: float, truncated: bool
) -> Reason:
    if stopped == "timeout":
        return "timeout"
    if stopped == "output_limit":
        return "output_limit"
    if code == -signal.SIGXCPU or (code == -signal.SIGKILL and cpu_used >= math.ceil(cpu_s) - 0.05):
        return "cpu"
    lines = stderr.rstrip().splitlines()
    if code == MEMORY_EXIT or (code != 0 and lines and lines[-1].startswith("MemoryError")):
        return "memory"
    if code != 0:
        return "error"
    return "output_limit" if truncated else "ok"
