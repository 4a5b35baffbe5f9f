"""A benchmark's child processes never outlive it.

:func:`run_grouped` runs a command as ``subprocess.run(..., capture_output=True, text=True)`` does,
and :func:`grouped` starts one as ``subprocess.Popen`` does, but each in a process group of its
own, and stops that group (SIGTERM, then SIGKILL) however the benchmark ends: the command's exit, a
timeout, Ctrl-C, or a SIGTERM to the benchmark (turned into an exit, so the stop still runs).
``rl`` stops the processes it started when it is stopped, and they stop themselves when it dies;
a group is tracked by its id, never by command line (vLLM renames its processes).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence

from prime_rl.lifecycle import stop_group

_LIVE: set[int] = set()
"""The process groups started by :func:`grouped` and not yet stopped."""


def _on_sigterm(signum, frame) -> None:
    """Stop every live group here, then exit through the ``finally`` blocks: an exception raised
    from a signal handler is dropped where it lands in a weakref callback or a ``__del__``, and
    the benchmark would go on, but its children are stopped already."""
    for pgid in list(_LIVE):
        stop_group(pgid)
    sys.exit(128 + signum)


def _exit_on_sigterm() -> None:
    """A SIGTERM ends the benchmark through its ``finally`` blocks (Python's default dies at once)."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


@contextlib.contextmanager
def grouped(argv: Sequence[str], **kwargs) -> Iterator[subprocess.Popen]:
    """``subprocess.Popen(argv, **kwargs)`` in a process group of its own, whatever of the group
    still runs stopped (and the process reaped) when the block is left, however it is left."""
    _exit_on_sigterm()
    proc = subprocess.Popen(list(argv), start_new_session=True, **kwargs)
    _LIVE.add(proc.pid)
    try:
        yield proc
    finally:
        stop_group(proc.pid)
        _LIVE.discard(proc.pid)
        proc.kill()  # a no-op when it exited; reaped below either way
        proc.wait()


def run_grouped(argv: Sequence[str], timeout: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run ``argv`` to its end (or ``timeout``: ``subprocess.TimeoutExpired``) with its output
    captured as text, then stop whatever of its process group still runs."""
    with grouped(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs) as proc:
        out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
