"""Track the processes a test starts by process group, never by command line.

vLLM renames its engine and workers (``VLLM::EngineCore``, ``VLLM::Worker``), so nothing that
matches command lines finds them; everything a child of the launcher starts stays in that
child's process group. The pytest session is a child subreaper (tests/conftest.py), so what a
dead launcher left behind is re-parented to it and still found among its descendants.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import psutil


def children_groups(launcher: subprocess.Popen, n: int = 3, timeout_s: float = 120) -> dict[str, int]:
    """The process groups of the launcher's ``n`` children by child (the module each runs), once
    all are started. Everything the children start (vLLM's renamed engine and workers, torchrun's
    ranks) is in those groups, so processes are tracked by group, never by command line."""
    deadline = time.monotonic() + timeout_s
    while True:
        kids = psutil.Process(launcher.pid).children()
        # a child caught between fork and exec still shows the launcher's command line: wait for it
        names = [_module(kid) for kid in kids]
        if len(kids) >= n and all(name not in (None, "launcher") for name in names):
            break
        assert launcher.poll() is None and time.monotonic() < deadline, (
            f"the launcher did not start its children: {names}"
        )
        time.sleep(0.2)
    groups = {name: os.getpgid(kid.pid) for kid, name in zip(kids, names, strict=True)}
    assert len(set(groups.values())) == n and os.getpgid(launcher.pid) not in groups.values(), groups
    return groups


def _module(process: psutil.Process) -> str | None:
    """``inference`` for a process running ``prime_rl.inference.main`` (torchrun's ``-m`` target too)."""
    try:
        args = process.cmdline()
    except psutil.Error:
        return None
    return next((a.split(".")[1] for a in args if a.startswith("prime_rl.") and a.endswith(".main")), None)


def running_in_group(pgid: int) -> list[int]:
    """Pids of group ``pgid`` that run (zombies do not), found with psutil, not the code under test."""
    found = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return found


def running_in(groups) -> list[str]:
    """What still runs (zombies do not) in the process groups ``groups``: ``pid name pgid`` each."""
    pgids = set(groups)
    found = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if (pgid := os.getpgid(p.pid)) in pgids and p.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{p.pid} {p.name()} pgid={pgid}")
    return found


def wait_groups_gone(groups, timeout_s: float) -> list[str]:
    """Wait until nothing runs in ``groups``; returns what still runs after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (left := running_in(groups)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def kill_groups(groups) -> None:
    """Clean up after a failed test: SIGKILL every group (the test has failed already if it must)."""
    for pgid in set(groups):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)


def descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def new_descendants(before: set[int]) -> list[str]:
    """Running descendants of this test process not in ``before``. The session is a child subreaper
    (tests/conftest.py), so what a finished launcher left behind was re-parented to it."""
    found = []
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{p.pid} {p.name()} pgid={os.getpgid(p.pid)}")
    return found


def dead(pid: int) -> bool:
    """Gone, or a zombie (killed, waiting for a parent that may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def wait_until(predicate, timeout: float = 10.0) -> bool:
    """Poll ``predicate`` every 50 ms; whether it came true within ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False
