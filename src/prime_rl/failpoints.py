"""Failpoints: named places where a process can be told to die, so faults hit exact points.

``PRIME_RL_FAILPOINT=<name>@<step>[,<name>@<step>...]`` (``@<step>`` optional: any step) makes
the process that reaches failpoint ``<name>`` at that step print one line to stderr and kill
itself with SIGKILL right there: no ``finally``, no flush, no atexit, as an external
``kill -9`` at that instant would. The fault suite (``tests/faults/``) uses it to kill the
trainer between renaming a weight dir into place and marking it ``STABLE``, and the
orchestrator between writing a step's rollouts and its metrics. Without the variable a
failpoint costs one environment lookup.

Failpoints (``docs/design.md``, fault matrix in ``benchmarks/RESULTS.md``):

- ``trainer.publish.renamed``: ``weights/step_N`` is in place, complete, but not yet ``STABLE``.
- ``trainer.publish.shard_written``: the first shard of ``weights/step_N`` is written and fsynced
  in its temporary dir, the other files are not (with ``weights.background`` this is the writer
  thread, while the training thread goes on).
- ``trainer.ckpt.saved``: ``checkpoints/step_N/trainer`` is written, not yet ``STABLE``.
- ``trainer.ckpt.stable``: ``checkpoints/step_N/trainer`` is marked ``STABLE`` (a resume starts there).
- ``orchestrator.rollouts.written``: ``rollouts/step_N`` is written, its metrics row is not.

Raise points (:func:`raise_if`) fail an operation instead of killing the process, so a test can
provoke a failed weight load in a server that must survive it. They are armed through a file,
re-read at every point, so one long-lived server takes a different fault per request:
``PRIME_RL_FAULT_FILE=<path>``; the file holds ``<name>@<index>`` items, comma- or
newline-separated. An item fires once: it is removed from the file as it fires (the file is
deleted when none is left), so a test sees that its fault was reached. Without the variable, or
without the file, a raise point costs one lookup.

- ``inference.load.tensor@K``: handing the K-th tensor (0-based) of a weight update to the model
  (K are loaded).
- ``inference.load.after``: after every tensor is loaded, before the swap is declared done.
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "PRIME_RL_FAILPOINT"
FAULT_FILE_ENV = "PRIME_RL_FAULT_FILE"


class InjectedFault(RuntimeError):
    """Raised by an armed raise point (:func:`raise_if`)."""


def hit(name: str, step: int) -> None:
    """Die here (SIGKILL) if ``PRIME_RL_FAILPOINT`` names this failpoint at this step."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    for item in spec.split(","):
        point, _, at = item.strip().partition("@")
        if point == name and (not at or at == str(step)):
            sys.stderr.write(f"failpoint {name}@{step}: SIGKILL (set by {ENV})\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGKILL)


def _items(spec: str) -> list[str]:
    return [item.strip() for item in spec.replace("\n", ",").split(",") if item.strip()]


def raise_if(name: str, index: int | None = None) -> None:
    """Raise :class:`InjectedFault` if the fault file arms ``name`` (at ``index``); disarm it."""
    path = os.environ.get(FAULT_FILE_ENV)
    if not path:
        return
    try:
        with open(path) as f:
            items = _items(f.read())
    except OSError:
        return
    for i, item in enumerate(items):
        point, _, at = item.partition("@")
        if point == name and (not at or (index is not None and at == str(index))):
            rest = items[:i] + items[i + 1 :]
            if rest:
                with open(path, "w") as f:
                    f.write(",".join(rest))
            else:
                os.unlink(path)
            where = f"{name}@{index}" if index is not None else name
            raise InjectedFault(f"injected fault {where} (armed by {FAULT_FILE_ENV})")
