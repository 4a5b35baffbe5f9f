"""timeline.png: one row per kind of event over the whole run, drawn from the bars the collection
merged (:mod:`~prime_rl.analysis.bars`), in this process or in a child of its own.

Importing matplotlib and drawing took 0.4-0.5 s of the analyzer's main thread, holding the GIL
that the parse threads need. The CLI starts :class:`PlotProcess` first: a child that imports
matplotlib while the logs are read (at a lower priority than the parse's), then draws what it is sent (:class:`PlotData`: a few arrays)
while the other files are written. The child reads its work from a pipe: when the analyzer ends
(or dies) without sending any, the pipe closes and the child exits. Should the child fail, the
analyzer draws the picture itself.

This module imports numpy alone (matplotlib when it draws), so that the child starts fast.
"""

from __future__ import annotations

import contextlib
import pickle
import subprocess
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROWS = ("gen", "ckpt_wait", "ckpt_write", "update", "train", "train_wait")
_LABELS = (
    "generation",
    "ckpt wait",
    "ckpt write",
    "weight update\n(hatched: queue)",
    "trainer compute",
    "trainer waits\nfor rollouts",
)
_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:gray")
WAIT_S = 300.0
"""How long the analyzer waits for the child's picture before it kills the child and draws it itself."""


@dataclass(frozen=True)
class PlotData:
    """What the picture is drawn from."""

    bars: dict[str, tuple[np.ndarray, np.ndarray]]
    """Each kind's bars (start and end times, sorted by start), merged at the run's resolution."""
    queued: tuple[np.ndarray, np.ndarray]
    """The updates' queue parts: start (seconds since the first bar's) and width, sorted by both."""
    t0: float
    """The first bar's start: the picture's time zero."""
    resolution: float
    """Bars closer than this (seconds) are drawn as one: :data:`~prime_rl.analysis.bars.PLOT_BARS` per row."""
    title: str


def draw(data: PlotData, path: Path) -> None:
    """Draw ``data`` into the PNG ``path``: one drawing call per row (bars merged to the resolution)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(12, 4.2))
    for i, (kind, color) in enumerate(zip(ROWS, _COLORS, strict=True)):
        if kind in data.bars:
            start, end = data.bars[kind]
            bars = zip((start - data.t0).tolist(), (end - start).tolist(), strict=True)
            ax.broken_barh(merge_sorted(bars, data.resolution), (i - 0.35, 0.7), color=color)
    start, width = data.queued
    if len(start):  # the queue part of the updates, hatched
        bars = zip(start.tolist(), width.tolist(), strict=True)
        ax.broken_barh(
            merge_sorted(bars, data.resolution),
            (3 - 0.35, 0.7),
            facecolor="none",
            edgecolor="black",
            hatch="///",
        )
    ax.set_yticks(range(len(ROWS)), list(_LABELS))
    ax.set_xlabel("seconds since the first event")
    ax.set_title(data.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def merge_bars(bars: list[tuple[float, float]], resolution: float) -> list[tuple[float, float]]:
    """(start, width) bars sorted by start, neighbours closer than ``resolution`` merged into one:
    at most about span / resolution bars, whatever the number of spans."""
    return merge_sorted(sorted(bars), resolution)


def merge_sorted(bars: Iterable[tuple[float, float]], resolution: float) -> list[tuple[float, float]]:
    """:func:`merge_bars` of bars already sorted (by start, then width)."""
    out: list[tuple[float, float]] = []
    first = True
    at = wide = 0.0  # the bar being merged into
    for start, width in bars:
        if not first and start - (at + wide) < resolution:
            reach = start + width - at
            if reach > wide:
                wide = reach
        else:
            if not first:
                out.append((at, wide))
            at, wide, first = start, width, False
    if not first:
        out.append((at, wide))
    return out


NICE = 10
"""How much lower the child's priority is than the analyzer's."""


class PlotProcess:
    """A child that imports matplotlib now and draws one picture when sent it (:meth:`submit`), in
    the same process group as the analyzer. Use as a context manager: on exit the child is waited
    for a moment after its pipe is closed, then killed."""

    command = (sys.executable, "-m", "prime_rl.analysis.timeline_plot")
    """The child (this module's :func:`_child`)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = subprocess.Popen(
            self.command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL
        )
        self._writer: threading.Thread | None = None

    def submit(self, data: PlotData, path: Path) -> None:
        """Send the child its picture (from a thread: a child still importing matplotlib reads it
        later, and a pipe holds 64 KB); :meth:`result` says whether it drew it."""
        proc = self._proc
        if proc is None or proc.stdin is None or self._writer is not None:
            raise RuntimeError("the plot process has no picture to take")
        pipe = proc.stdin

        def write() -> None:
            with contextlib.suppress(OSError):  # the child is gone (a broken pipe): result() says so
                pickle.dump((data, str(path)), pipe, protocol=pickle.HIGHEST_PROTOCOL)
                pipe.close()

        self._writer = threading.Thread(target=write, name="analysis-plot-send", daemon=True)
        self._writer.start()

    def result(self, timeout: float = WAIT_S) -> bool:
        """Whether the child drew the picture it was sent (False: it failed, died or took longer
        than ``timeout`` seconds, and then it is killed)."""
        proc = self._proc
        if proc is None or self._writer is None:
            return False
        try:
            return proc.wait(timeout) == 0
        except subprocess.TimeoutExpired:
            proc.kill()  # a writer blocked on the full pipe gets a broken pipe and ends
            proc.wait()
            return False
        finally:
            self._writer.join()

    def close(self, wait: float = 5.0) -> None:
        """End the child: its pipe closed (without a picture it exits), waited for ``wait`` seconds,
        then killed."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if self._writer is None and proc.stdin is not None and not proc.stdin.closed:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self._writer is not None:
            self._writer.join()

    def __enter__(self) -> PlotProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _child() -> int:
    """The child: matplotlib imported first (while the analyzer reads the logs), then one picture
    drawn from the pipe; a pipe that ends first means there is nothing to draw."""
    import gc
    import os

    # below the analyzer: its import of matplotlib (0.5 CPU-s) takes what the parse leaves of the
    # cores (the 3M-line all-tagged log's parse and collection, 4 runs each: 2.77-2.84 s with no
    # child, 2.85-3.37 s beside it at the same priority, 2.78-3.10 s beside it niced)
    with contextlib.suppress(OSError):
        os.nice(NICE)
    gc.disable()  # one picture, then exit: the collector's passes took a sixth of the child's CPU
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401  # imported now, while the parent parses

    try:
        data, path = pickle.load(sys.stdin.buffer)
    except EOFError:  # the analyzer ended without a picture to draw
        return 0
    except pickle.UnpicklingError:  # it died while it sent one
        return 1
    draw(data, Path(path))
    return 0


if __name__ == "__main__":
    sys.exit(_child())
