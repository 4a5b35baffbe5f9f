"""The ``rl`` launcher's hang watchdog: who waits on whom when a run stops making progress.

The launcher copies every line its children print (:class:`~prime_rl.launcher.supervise.Child`);
the watchdog reads the tagged lines among them (docs/design.md) and keeps, live, the same waits
the analyzer names for a log that ends inside one (:mod:`prime_rl.analysis.stalls`):

- the orchestrator waiting for the trainer's ``weights/step_N`` (``[ckpt] wait.start`` without
  ``wait.done``);
- the orchestrator waiting for a server's answer to a weight update (``[weights] client.send``
  without ``client.done`` / ``client.error``);
- the orchestrator waiting for a generation batch (``[gen] batch.start`` without ``batch.done``);
- the trainer waiting for the orchestrator's ``rollouts/step_N`` (its last ``[train] step.done``
  was step N-1 and the rollouts file is not there), or computing step N (they are).

Progress is any of the step-level lines in :data:`~prime_rl.tracing.PROGRESS` from any process (periodic lines such
as ``[server] metrics`` are not progress). When none came for ``max(min_s, factor x median step
time)`` (``first_step_s`` until two steps were seen; the orchestrator's first ``async_level + 1``
batches need no trained weights and run ahead while the trainer loads and compiles, and the next
waits for that: they are left out of the pace), :meth:`Watchdog.check` returns a
:class:`Hang` once, and again only after progress resumed and stopped again. The launcher then
logs one ``[hang] detected`` line and asks every child for its Python stacks
(:func:`prime_rl.lifecycle.dump_stacks`).
"""

from __future__ import annotations

import collections
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import Field

from prime_rl.config import BaseConfig
from prime_rl.paths import RunPaths, rollout_path
from prime_rl.tracing import PROGRESS, TaggedLine, one_line, parse_tagged


class WatchdogConfig(BaseConfig):
    """The launcher's hang watchdog (``[hang]`` lines and stack dumps when a run stops moving)."""

    enabled: bool = True
    """Watch the run; off: no [hang] lines, no stack dumps."""

    factor: float = Field(default=10.0, gt=1.0)
    """A run hangs when no process made progress for this many median step times."""

    min_s: float = Field(default=120.0, gt=0)
    """Never call a silence shorter than this a hang (short steps vary a lot)."""

    first_step_s: float = Field(default=1800.0, gt=0)
    """The silence that counts as a hang before the steps have a pace (two of the trainer's, or two
    of the orchestrator's batches after its first async_level + 2: those run ahead while the
    trainer loads and compiles, or wait for that): model loading and the first steps' compilation
    take long."""

    dump_stacks: bool = True
    """On a hang, make every child write all its threads' Python stacks into its log."""


@dataclass(frozen=True)
class Wait:
    """One process waiting on another: ``who`` waits for ``whom`` to deliver ``what`` since ``since``."""

    who: str
    whom: str
    what: str
    since: float

    @property
    def code(self) -> str:
        """``who>whom:what`` (no spaces), for the ``waits=`` field of the ``[hang]`` line."""
        return f"{self.who}>{self.whom}:{self.what}".replace(" ", "_")


@dataclass(frozen=True)
class Hang:
    """A run without progress: how long, against which threshold, and who waits on whom."""

    silent_s: float
    threshold_s: float
    median_step_s: float | None
    waits: tuple[Wait, ...]
    notes: tuple[str, ...]
    """Each process's last line with its age, and what the trainer is doing if it waits for nobody."""

    def describe(self, now: float) -> str:
        """A few lines for the console and the launcher's log."""
        median = f"{self.median_step_s:.1f}s" if self.median_step_s is not None else "unknown"
        head = (
            f"no progress for {self.silent_s:.0f}s (threshold {self.threshold_s:.0f}s, median step {median})"
        )
        waits = [f"{w.who} waits for {w.whom}: {w.what} (for {now - w.since:.0f}s)" for w in self.waits]
        return "\n".join([head, *(waits or ["no open wait is known"]), *self.notes])


class Watchdog:
    """Live progress and waits of one run, fed the children's output lines (thread-safe)."""

    def __init__(
        self,
        cfg: WatchdogConfig,
        paths: RunPaths,
        clock: Callable[[], float] = time.monotonic,
        first_step: int | None = None,
        async_level: int = 1,
    ) -> None:
        """``first_step``: the step the run starts (or resumes) at, whose rollouts the trainer waits
        for before it logs a step (None: not known; the trainer's wait is named after its first
        step); ``async_level``: the orchestrator's, for how many batches run ahead of the trainer."""
        self.cfg, self.paths, self.clock = cfg, paths, clock
        self.async_level = async_level
        self._lock = threading.Lock()
        self._last_progress = clock()
        self._steps: dict[str, collections.deque[float]] = {
            "orchestrator": collections.deque(maxlen=64),
            "trainer": collections.deque(maxlen=64),
        }
        self._ckpt_wait: tuple[str, float] | None = None
        self._sends: dict[tuple[str | None, str], float] = {}
        self._batch: tuple[str, float] | None = None
        self._trainer_step: int | None = first_step - 1 if first_step is not None else None
        self._batches = 0
        self._last_line: dict[str, tuple[float, str]] = {}
        self._fired = False

    def feed(self, process: str, line: str) -> None:
        """Take one output line of ``process`` (orchestrator, trainer, inference)."""
        now = self.clock()
        text = line.rstrip("\n")
        tagged = parse_tagged(text) if "[" in text else None
        with self._lock:
            if text.strip():
                self._last_line[process] = (now, text)
            if tagged is not None:
                self._take(process, tagged, now)

    def _take(self, process: str, t: TaggedLine, now: float) -> None:
        key = (t.tag, t.event)
        if key in PROGRESS:
            self._last_progress = now
            self._fired = False
        if key == ("ckpt", "wait.start"):
            self._ckpt_wait = (t.fields.get("target_step", "?"), now)
        elif key == ("ckpt", "wait.done"):
            self._ckpt_wait = None
        elif key == ("weights", "client.send"):
            self._sends.setdefault((t.trace_id, t.fields.get("url", "?")), now)
        elif key in (("weights", "client.done"), ("weights", "client.error")):
            self._sends.pop((t.trace_id, t.fields.get("url", "?")), None)
        elif key == ("gen", "batch.start"):
            self._batch = (t.fields.get("step", "?"), now)
        elif key == ("gen", "batch.done"):
            self._batch = None
            self._batches += 1
            # batches 0..async_level need no trained weights and run ahead while the trainer loads
            # and compiles; the next waits for its first step, compile and all: the run's pace is
            # from the batch after that on
            if self._batches > self.async_level + 1:
                self._steps["orchestrator"].append(now)
        elif key == ("train", "step.done") and process == "trainer":
            step = t.num("step")
            if step is not None:
                self._trainer_step = int(step)
            self._steps["trainer"].append(now)

    def median_step_s(self) -> float | None:
        """The median time between consecutive steps (the orchestrator's batches, else the
        trainer's steps); None before two of either. The orchestrator's first ``async_level + 1``
        batches are left out (they need no trained weights and run ahead while the trainer loads
        and compiles its first step), and so is the gap to the next (it holds that first step)."""
        for ends in self._steps.values():
            if len(ends) >= 2:
                return statistics.median(b - a for a, b in zip(ends, list(ends)[1:], strict=False))
        return None

    def threshold_s(self) -> float:
        """How long a silence must last to be a hang."""
        median = self.median_step_s()
        if median is None:
            return self.cfg.first_step_s
        return max(self.cfg.min_s, self.cfg.factor * median)

    def check(self) -> Hang | None:
        """A :class:`Hang` the first time the silence crosses the threshold, else None."""
        now = self.clock()
        with self._lock:
            silent = now - self._last_progress
            threshold = self.threshold_s()
            if self._fired or silent < threshold:
                return None
            self._fired = True
            waits, notes = self._waits(now)
            return Hang(silent, threshold, self.median_step_s(), tuple(waits), tuple(notes))

    def _waits(self, now: float) -> tuple[list[Wait], list[str]]:
        waits: list[Wait] = []
        notes: list[str] = []
        if self._ckpt_wait is not None:
            step, since = self._ckpt_wait
            waits.append(Wait("orchestrator", "trainer", f"weights/step_{step}", since))
        for (tid, url), since in sorted(self._sends.items(), key=lambda kv: kv[1]):
            waits.append(Wait("orchestrator", f"inference {url}", f"weight update {tid}", since))
        if self._batch is not None and self._ckpt_wait is None and not self._sends:
            step, since = self._batch
            waits.append(Wait("orchestrator", "inference", f"generation of step {step}", since))
        if self._trainer_step is not None:
            step = self._trainer_step + 1
            since = self._steps["trainer"][-1] if self._steps["trainer"] else self._last_progress
            if rollout_path(self.paths.rollouts_dir(step), 0).is_file():
                notes.append(f"trainer: computing step {step} (rollouts/step_{step} is there)")
            else:
                waits.append(Wait("trainer", "orchestrator", f"rollouts/step_{step}", since))
        for process, (at, text) in sorted(self._last_line.items()):
            notes.append(f"{process}'s last line ({now - at:.0f}s ago): {one_line(text, 300)}")
        return waits, notes
