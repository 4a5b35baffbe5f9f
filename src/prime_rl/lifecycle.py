"""Process groups and parent death: the processes ``rl`` starts never outlive it.

The launcher starts each child in a session (process group) of its own; what a child starts
inherits that group: vLLM's ``VLLM::EngineCore`` and ``VLLM::Worker`` (renamed, so nothing that
matches command lines finds them), verifier pools, multiprocessing's resource tracker (torchrun
is the exception: it starts each rank in a session of its own and stops them itself). A group is
therefore the unit that is stopped, and it is tracked by its id, never by command line:

- :func:`stop_group` (the launcher stopping a child): SIGTERM to the group, SIGKILL to what is left
  after a grace period, done when no process of the group runs, whether or not the group's leader
  (the child the launcher started) has exited already.
- :func:`watch_launcher` (each child's entry point): the launcher puts its PID in
  ``PRIME_RL_LAUNCHER_PID``; a daemon thread waits for that process to die (a pidfd where the
  kernel has them, else polling) and then stops its own group: SIGTERM to the other members (so
  vLLM's engine shuts down and frees its shared memory), SIGKILL to the whole group after a grace
  period (a trainer rank also kills torchrun's group, at once). A launcher killed with SIGKILL thus takes every process
  of the run with it. The launcher counts as gone once it is no longer an ancestor of this process
  (an orphan is re-parented), so a launcher that died before the watch began is noticed at once,
  and a reused PID is not mistaken for it. A rank also goes when torchrun, between it and the
  launcher, dies.

Stack dumps: a watched child also dumps the Python stacks of all its threads into its output
(``faulthandler``) when it gets :data:`STACK_DUMP_SIGNAL` (SIGUSR1); the launcher's hang watchdog
sends it (:func:`dump_stacks`) only to processes that catch that signal, so a process without the
handler is never killed by it.

Linux reads process groups from ``/proc``; elsewhere a group counts as alive while ``killpg(pgid,
0)`` reaches it and the launcher is watched as the direct parent only.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

LAUNCHER_PID_ENV = "PRIME_RL_LAUNCHER_PID"
STACK_DUMP_SIGNAL = signal.SIGUSR1
"""The signal on which a child of ``rl`` writes every thread's Python stack to its stderr."""

_PROC = Path("/proc")


def _stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, ppid, pgrp)`` of a process from ``/proc/<pid>/stat``, or None when it is gone."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:  # gone (or not ours to read)
        return None
    fields = text.rpartition(")")[2].split()  # the name may hold spaces and parentheses
    return fields[0], int(fields[1]), int(fields[2])


def group_members(pgid: int) -> list[int]:
    """The running (not zombie) processes of process group ``pgid``.

    Without ``/proc`` the members cannot be listed: ``[pgid]`` when the group can be signalled.
    """
    if not _PROC.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    found = []
    for entry in os.listdir(_PROC):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            state, _, pgrp = st
            if pgrp == pgid and state not in ("Z", "X"):
                found.append(int(entry))
    return found


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_gone(pgid: int, timeout_s: float, exclude: Iterable[int] = ()) -> bool:
    skip = set(exclude)
    deadline = time.monotonic() + timeout_s
    while True:
        if not [p for p in group_members(pgid) if p not in skip]:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def stop_group(pgid: int, timeout_s: float = 15.0, kill_timeout_s: float = 10.0) -> bool:
    """Stop every process of group ``pgid``: SIGTERM, then SIGKILL what still runs after ``timeout_s``.

    Returns whether the group is empty at the end. A group whose leader has exited is still
    stopped: its other members (vLLM's engine, a worker) would otherwise run on as orphans.
    """
    if not group_members(pgid):
        return True
    _killpg(pgid, signal.SIGTERM)
    if _wait_gone(pgid, timeout_s):
        return True
    _killpg(pgid, signal.SIGKILL)
    return _wait_gone(pgid, kill_timeout_s)


def launcher_env() -> dict[str, str]:
    """What the launcher adds to a child's environment so that the child watches it."""
    return {LAUNCHER_PID_ENV: str(os.getpid())}


def _chain(launcher: int) -> list[tuple[int, int]] | None:
    """``(pid, pgid)`` of this process's ancestors, from its parent up to ``launcher`` included;
    None when ``launcher`` is not an ancestor (it is gone). Without /proc: the parent only."""
    if not _PROC.is_dir():
        return [(launcher, -1)] if os.getppid() == launcher else None
    chain = []
    current = os.getppid()
    for _ in range(256):  # a loop guard; real chains are short
        st = _stat(current)
        if current <= 1 or st is None:
            return None
        chain.append((current, st[2]))
        if current == launcher:
            return chain
        current = st[1]
    return None


def _groups(chain: list[tuple[int, int]]) -> list[int]:
    """This process's group and those of its ancestors below the launcher (the last of ``chain``),
    less the launcher's own group, own group first."""
    launcher_pgid = chain[-1][1]
    groups = [os.getpgrp(), *(pgid for _, pgid in chain[:-1])]
    return [g for g in dict.fromkeys(groups) if g != launcher_pgid]


def _wait_for_exit(launcher: int, poll_s: float) -> list[int] | None:
    """Return once the launcher, or any process between it and this one (torchrun, for a trainer
    rank), has exited, with the groups to stop (:func:`_groups`, as they were while the chain
    lived); None when the launcher was gone already."""
    chain = _chain(launcher)
    if chain is None:
        return None
    groups = _groups(chain)
    fds: list[int] = []
    try:
        if hasattr(os, "pidfd_open"):
            try:
                fds = [os.pidfd_open(pid) for pid, _ in chain]
            except ProcessLookupError:
                return groups
            except OSError:
                fds = []  # an old kernel: poll instead
        if _chain(launcher) != chain:  # checked after the pidfds are open: they are the chain's
            return groups
        if fds:
            poller = select.poll()
            for fd in fds:
                poller.register(fd, select.POLLIN)
            while not poller.poll():
                pass
            return groups
        while _chain(launcher) == chain:
            time.sleep(poll_s)
        return groups
    finally:
        for fd in fds:
            os.close(fd)


def _ignore_termination() -> None:
    """Ignore SIGTERM in this whole process from any thread (``signal.signal`` is for the main thread
    only): a process being stopped here (torchrun, stopping its ranks) must not end this one before
    it has stopped the rest."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None)
            libc.signal.restype = ctypes.c_void_p
            libc.signal(ctypes.c_int(signal.SIGTERM), ctypes.c_void_p(1))  # SIG_IGN


def _take_groups_down(groups: list[int] | None, grace_s: float, reason: str) -> None:
    """Stop ``groups`` (own group first; this process's own group when None). The ancestors' groups
    (torchrun's) are killed at once: they only supervise, and torchrun, given SIGTERM, would SIGTERM
    this process in turn. In the own group every member but this process gets SIGTERM (vLLM's engine
    shuts down cleanly), then SIGKILL after ``grace_s`` or once they are gone, this process last."""
    me = os.getpid()
    if groups is None:
        # the launcher died before it could be seen: our own group, if it is one the launcher made
        groups = [os.getpgrp()] if os.getpgrp() == os.getsid(0) else []
    _ignore_termination()
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(f"{reason}: stopping process group(s) {', '.join(map(str, groups)) or '-'}\n")
        sys.stderr.flush()
    own, ancestors = groups[:1], groups[1:]
    for pgid in ancestors:
        _killpg(pgid, signal.SIGKILL)
    for pgid in own:
        for pid in group_members(pgid):
            if pid != me:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGTERM)
        _wait_gone(pgid, grace_s, exclude=(me,))
        _killpg(pgid, signal.SIGKILL)  # this process included
    os.kill(me, signal.SIGKILL)


def watch_launcher(grace_s: float = 5.0, poll_s: float = 0.5) -> threading.Thread | None:
    """In a child of ``rl``: when the launcher dies, stop this process's whole group, and those of
    its ancestors below the launcher (torchrun's, for a trainer rank); likewise when one of those
    ancestors dies (torchrun killed under a rank).

    Does nothing (returns None) outside ``rl`` (no ``PRIME_RL_LAUNCHER_PID``). The variable is
    removed from this process's environment, so the processes this one starts do not inherit it;
    torchrun's ranks get it from torchrun, which is no child of ours.
    """
    value = os.environ.pop(LAUNCHER_PID_ENV, None)
    if not value:
        return None
    try:
        launcher = int(value)
    except ValueError:
        return None
    enable_stack_dumps()
    if _chain(launcher) is None:  # gone already: stop right here, before this process starts anything
        _take_groups_down(None, grace_s, f"the rl launcher (pid {launcher}) is gone")

    def watch() -> None:
        groups = _wait_for_exit(launcher, poll_s)
        _take_groups_down(groups, grace_s, f"the rl launcher (pid {launcher}) is gone")

    thread = threading.Thread(target=watch, name="watch-launcher", daemon=True)
    thread.start()
    return thread


def enable_stack_dumps() -> None:
    """Dump every thread's Python stack to stderr on :data:`STACK_DUMP_SIGNAL` (the process goes on)."""
    with contextlib.suppress(AttributeError, ValueError, OSError, RuntimeError):  # no SIGUSR1 / no stderr
        faulthandler.register(STACK_DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)


def catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (``SigCgt`` of ``/proc/<pid>/status``)."""
    try:
        for line in (_PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def dump_stacks(leader: int) -> list[int]:
    """Ask a child of ``rl`` and the ranks it started (torchrun's children, which run in sessions of
    their own) for their Python stacks: :data:`STACK_DUMP_SIGNAL` goes to each of them that catches
    it, never to one that does not (its default action would end it). Returns the pids signalled."""
    candidates = [leader]
    if _PROC.is_dir():
        for entry in os.listdir(_PROC):
            if entry.isdigit() and (st := _stat(int(entry))) is not None:
                state, ppid, pgrp = st
                if ppid == leader and pgrp == int(entry) and state not in ("Z", "X"):
                    candidates.append(int(entry))
    signalled = []
    for pid in candidates:
        if catches(pid, STACK_DUMP_SIGNAL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, STACK_DUMP_SIGNAL)
                signalled.append(pid)
    return signalled
