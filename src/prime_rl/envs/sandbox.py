"""A sandboxed Python tool: model-written code runs in a separate, limited, throwaway process.

:func:`run_python` runs the code with ``python -I`` (isolated: no user site, no PYTHON* variables)
in a new session (its own process group), in a fresh temporary directory that is removed
afterwards, with an almost empty environment and these limits, set in the child before it runs:

- CPU time (``RLIMIT_CPU``), address space (``RLIMIT_AS``: ``memory_mb``), file size
  (``RLIMIT_FSIZE``), no core dumps, and a wall-clock limit enforced from outside: the whole
  process group is SIGKILLed and reaped when it expires;
- no network: on Linux the child moves into a new, empty network namespace (``unshare
  (CLONE_NEWNET)``, allowed for root or with user namespaces); where that is refused, a prelude
  blocks sockets inside Python (an audit hook refuses ``socket.connect``/``bind``/``getaddrinfo``),
  which code calling the C library directly could get around. ``SandboxResult.network_isolated``
  says which one held;
- stdout and stderr are cut at ``output_limit`` characters each (reason ``output_limit``).

This is a resource and blast-radius limit for honest mistakes of a model (endless loops, huge
allocations, writes everywhere, calls home), not a security boundary against hostile code: run
untrusted workloads in a container or VM as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import resource
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Literal

CLONE_NEWNET = 0x40000000
Reason = Literal["ok", "error", "timeout", "memory", "cpu", "output_limit"]

_PRELUDE = """
import sys
def _no_network(event, args):
    if event in ("socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto"):
        raise PermissionError("network access is disabled in the sandbox")
sys.addaudithook(_no_network)
del _no_network
__code = sys.stdin.read()
del sys.argv[1:]
exec(compile(__code, "<tool>", "exec"), {"__name__": "__main__"})
"""


@dataclass(frozen=True)
class SandboxResult:
    stdout: str
    stderr: str
    exit_code: int | None
    reason: Reason
    ms: float
    network_isolated: bool
    """True when the code ran in an empty network namespace (else only Python's sockets were blocked)."""

    @property
    def ok(self) -> bool:
        return self.reason == "ok"

    def text(self) -> str:
        """What the model is told: the output, and what went wrong if anything did."""
        parts = [self.stdout] if self.stdout else []
        if self.stderr:
            parts.append(f"stderr:\n{self.stderr}")
        if self.reason != "ok":
            parts.append(f"[{self.reason}: {_EXPLAIN[self.reason]}]")
        return "\n".join(parts) if parts else "(no output)"


_EXPLAIN = {
    "ok": "",
    "error": "the code raised an exception or exited with an error",
    "timeout": "the code ran past its wall-clock limit and was killed",
    "memory": "the code ran out of its memory limit",
    "cpu": "the code used up its CPU-time limit and was killed",
    "output_limit": "the output was cut at its limit",
}


def _limits(cpu_s: float, memory_mb: int, file_mb: int):
    def apply() -> None:  # runs in the child, before exec
        cpu = max(1, int(cpu_s + 0.999))
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        mem = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        size = file_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sys.platform.startswith("linux"):
            ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET)  # refused: the prelude still holds

    return apply


async def run_python_async(
    code: str,
    *,
    cpu_s: float = 5.0,
    memory_mb: int = 512,
    wall_s: float = 10.0,
    file_mb: int = 16,
    output_limit: int = 10_000,
) -> SandboxResult:
    """Run ``code`` in the sandbox (see the module docstring); never raises for what the code does."""
    start = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="prime-rl-sandbox-")
    env = {"PATH": "/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-c",
        _PRELUDE,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=workdir,
        env=env,
        start_new_session=True,
        preexec_fn=_limits(cpu_s, memory_mb, file_mb),
    )
    timed_out = False
    try:
        out, err = await asyncio.wait_for(proc.communicate(code.encode()), timeout=wall_s)
    except TimeoutError:
        timed_out = True
        out, err = b"", b""
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the code's own children go with it
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
    isolated = _netns_allowed()
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    reason = _reason(timed_out, proc.returncode, stderr)
    if reason == "ok" and (len(stdout) > output_limit or len(stderr) > output_limit):
        reason = "output_limit"
    return SandboxResult(
        stdout[:output_limit],
        stderr[:output_limit],
        None if timed_out else proc.returncode,
        reason,
        (time.monotonic() - start) * 1000.0,
        isolated,
    )


def run_python(code: str, **limits: float) -> SandboxResult:
    """:func:`run_python_async` for synchronous callers (an environment's ``step``)."""
    return asyncio.run(run_python_async(code, **limits))  # type: ignore[arg-type]


def _reason(timed_out: bool, code: int | None, stderr: str) -> Reason:
    if timed_out:
        return "timeout"
    if code == -signal.SIGXCPU or code == -signal.SIGKILL:
        return "cpu"
    if "MemoryError" in stderr:
        return "memory"
    return "ok" if code == 0 else "error"


_NETNS: bool | None = None


def _netns_allowed() -> bool:
    """Whether this machine lets a child unshare its network namespace (checked once, in a fork)."""
    global _NETNS
    if _NETNS is None:
        if not sys.platform.startswith("linux"):
            _NETNS = False
        else:
            pid = os.fork()
            if pid == 0:  # pragma: no cover - child
                libc = ctypes.CDLL(None, use_errno=True)
                os._exit(0 if libc.unshare(CLONE_NEWNET) == 0 else 1)
            _, status = os.waitpid(pid, 0)
            _NETNS = os.waitstatus_to_exitcode(status) == 0
    return _NETNS
