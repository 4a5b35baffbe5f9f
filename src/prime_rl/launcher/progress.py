"""The launcher's progress line: step, reward, tokens/s and ETA, read from ``metrics.jsonl``.

:class:`Progress` follows the rows the trainer and the orchestrator append (from where the file
ended when the run started, so rows of an earlier, resumed run are not counted). A step counts as
done when the trainer's row for it is there; the reward and generation tokens/s are the newest
orchestrator row's, the training tokens/s the newest trainer row's. The ETA is the remaining steps
times the mean wall time of the steps done since the first one this launcher saw.

On a terminal it is a live bar at the bottom of the console (tqdm; the echoed log lines print
above it, :func:`write`); otherwise (a pipe, a log file, CI) one plain line per finished step.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

_LIVE: tqdm | None = None  # the bar on screen, if any: console writes go above it
_LOCK = threading.Lock()


def write(text: str, stream: TextIO) -> None:
    """Write console text; above the live bar when one is shown."""
    with _LOCK:
        bar = _LIVE
    if bar is not None:
        tqdm.write(text.rstrip("\n"), file=stream)
    else:
        stream.write(text)
        stream.flush()


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class Progress:
    """Follows ``metrics_file`` and shows how far the run is."""

    def __init__(
        self,
        metrics_file: Path,
        max_steps: int,
        start_step: int = 0,
        stream: TextIO | None = None,
        live: bool | None = None,
        clock: Any = time.monotonic,
    ):
        global _LIVE
        self.metrics_file, self.max_steps = Path(metrics_file), max_steps
        self.stream = stream or sys.stderr
        self.clock = clock
        self.done = start_step  # steps finished (the trainer's rows)
        self.first: tuple[int, float] | None = None  # (steps done, time) when the first step finished here
        self.reward: float | None = None
        self.gen_tps: float | None = None
        self.train_tps: float | None = None
        self._offset = self.metrics_file.stat().st_size if self.metrics_file.is_file() else 0
        self._partial = b""
        if live is None:
            live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar: tqdm | None = None
        if live:
            self.bar = tqdm(
                total=max_steps,
                initial=start_step,
                file=self.stream,
                desc="rl",
                unit="step",
                dynamic_ncols=True,
                bar_format="{desc} {bar} {n_fmt}/{total_fmt} | {postfix}",
            )
            self.bar.set_postfix_str(self.status(), refresh=True)
            with _LOCK:
                _LIVE = self.bar

    def eta_s(self) -> float | None:
        """Seconds left at the mean pace of the steps finished so far (None before two steps)."""
        if self.first is None or self.done <= self.first[0]:
            return None
        pace = (self.clock() - self.first[1]) / (self.done - self.first[0])
        return pace * max(self.max_steps - self.done, 0)

    def status(self) -> str:
        parts = [f"reward {self.reward:.3f}" if self.reward is not None else "reward -"]
        if self.gen_tps is not None:
            parts.append(f"gen {self.gen_tps:,.0f} tok/s")
        if self.train_tps is not None:
            parts.append(f"train {self.train_tps:,.0f} tok/s")
        eta = self.eta_s()
        parts.append(f"ETA {format_duration(eta)}" if eta is not None else "ETA -")
        return " | ".join(parts)

    def line(self) -> str:
        """The plain progress line: ``step 3/30 | reward 0.250 | gen 900 tok/s | ... | ETA 1m05s``."""
        return f"step {self.done}/{self.max_steps} | {self.status()}"

    def _rows(self) -> list[dict[str, Any]]:
        try:
            with open(self.metrics_file, "rb") as f:
                if f.seek(0, 2) < self._offset:  # rewritten (a resume trims it): start over at its end
                    self._offset = f.tell()
                    self._partial = b""
                    return []
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return []
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        rows = []
        for raw in lines:
            with contextlib.suppress(ValueError):
                row = json.loads(raw)
                if isinstance(row, dict):
                    rows.append(row)
        return rows

    def poll(self) -> None:
        """Read the rows appended since the last call and update the bar or print lines."""
        for row in self._rows():
            process, step = row.get("process"), row.get("step")
            if not isinstance(step, int):
                continue
            if process == "orchestrator":
                self.reward = _number(row.get("reward_mean"), self.reward)
                self.gen_tps = _number(row.get("tokens_per_s"), self.gen_tps)
            elif process == "trainer" and step + 1 > self.done:
                self.train_tps = _number(row.get("tokens_per_s"), self.train_tps)
                if self.first is None:  # its own duration is unknown here: the pace counts from its end
                    self.first = (step + 1, self.clock())
                self.done = step + 1
                if self.bar is not None:
                    self.bar.n = self.done
                else:
                    write(f"[rl] {self.line()}\n", self.stream)
        if self.bar is not None:
            self.bar.set_postfix_str(self.status(), refresh=True)

    def close(self) -> None:
        global _LIVE
        if self.bar is not None:
            with _LOCK:
                _LIVE = None
            self.bar.close()
            self.bar = None


def _number(value: Any, default: float | None) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default
