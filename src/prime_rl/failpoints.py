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
- ``trainer.ckpt.saved``: ``checkpoints/step_N/trainer`` is written, not yet ``STABLE``.
- ``orchestrator.rollouts.written``: ``rollouts/step_N`` is written, its metrics row is not.
"""

from __future__ import annotations

import os
import signal
import sys

ENV = "PRIME_RL_FAILPOINT"


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
