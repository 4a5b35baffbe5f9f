"""The waits after a 429, client by client: the orchestrator's (``[gen] request.retry status=429``)
and the offline collector's (``[collect] request.retry status=429``) apart, so that a trio's logs
and a collector's analysed together give each its own rate limit (their sum is neither's), and the
wall time in which some request of a client waited (the union of its waits: concurrent requests
wait together, so their summed waits can be many times the run). A wait ends where its client could
still have waited (:meth:`RateLimitWaits.clip`): a client stopped while its requests wait out a
Retry-After of 120 s logged that whole wait, of which the logs hold none."""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

import numpy as np

from prime_rl.analysis.bars import merge_intervals
from prime_rl.analysis.restarts import uncovered

ORCHESTRATOR = "orchestrator"
COLLECTOR = "collector"
CLIENTS = (ORCHESTRATOR, COLLECTOR)
"""The clients whose requests are retried after a 429, by the process name the stages give them."""
COLLECTOR_429 = "collector.retry.429"
"""The collector's part of the counts' ``retry.429`` (its ``[collect]`` lines'), which
:func:`~prime_rl.analysis.rules.rate_limited` judges against its own completions, the orchestrator's
(the rest) against its own."""
COLLECTOR_COMPLETIONS = "collector.completions"
"""The collector's part of the counts' ``completions`` (its ``rollout.done`` lines)."""


@dataclass
class RateLimitWaits:
    """Each client's waits after a 429: those of lines with a time as (start, end) seconds, in pairs;
    those of lines without one summed (ms)."""

    windows: dict[str, array] = field(default_factory=lambda: {c: array("d") for c in CLIENTS})
    untimed_ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CLIENTS, 0.0))
    logs: dict[str, list[str]] = field(default_factory=lambda: {c: [] for c in CLIENTS})
    """Each wait's (of :attr:`windows`) log, until :meth:`clip` cuts them."""
    cut_ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CLIENTS, 0.0))
    """The time of each client's waits (of their union) that :meth:`clip` left out, ms."""

    def add(self, client: str, ts: float | None, wait_ms: float, log: str = "") -> None:
        """One wait of ``client``'s, ``wait_ms`` from ``ts`` (None: the line has no time), logged in
        ``log``."""
        if ts is None:
            self.untimed_ms[client] += wait_ms
        else:
            self.windows[client].extend((ts, ts + wait_ms / 1000.0))
            self.logs[client].append(log)

    def has(self, client: str) -> bool:
        """Whether ``client`` waited after some 429 (also where none of its waits lies in the run)."""
        return bool(self.windows[client]) or self.untimed_ms[client] > 0 or self.cut_ms[client] > 0

    def merged(self, *clients: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The stretches (start, end; sorted, apart) in which some request of ``clients`` waited after a
        429; None when none of their waits has a time."""
        pairs = [np.frombuffer(self.windows[c], dtype=np.float64) for c in clients if self.windows[c]]
        if not pairs:
            return None
        start, end = np.concatenate(pairs).reshape(-1, 2).T
        return merge_intervals(start, end, 0.0)

    def clip(
        self, client: str, ends: np.ndarray, run: tuple[float, float], down: list[tuple[float, float]]
    ) -> None:
        """Cut each of ``client``'s timed waits at its end in ``ends`` (where its client could still
        have waited: :func:`orchestrator_ends`, :meth:`~prime_rl.analysis.collector_runs.CollectorRuns.run_ends`),
        and their union to ``run`` (first and last time) less ``down`` (time between a crash and its
        resume in which no process ran), as other stages are cut (:func:`~prime_rl.analysis.restarts.open_time_within`):
        a wait logged as a client is stopped (the end of the logs, a crash) lasts only to there. The
        union's time left out is added to :attr:`cut_ms`; each wait's log is let go."""
        merged = self.merged(client)
        if merged is None:
            return
        before = float(np.sum(merged[1] - merged[0]))
        start, end = np.frombuffer(self.windows[client], dtype=np.float64).reshape(-1, 2).T
        end = np.minimum(end, ends)
        start, end = np.clip(start, *run), np.clip(end, *run)
        start, end = merge_intervals(start, np.maximum(start, end), 0.0)
        if down:
            d0, d1 = merge_intervals(*(np.array(x, dtype=np.float64) for x in zip(*down, strict=True)), 0.0)
            kept = uncovered(
                list(zip(start.tolist(), end.tolist(), strict=True)), list(zip(d0, d1, strict=True))
            )
            start = np.array([a for a, _ in kept], dtype=np.float64)
            end = np.array([b for _, b in kept], dtype=np.float64)
        self.cut_ms[client] += max(before - float(np.sum(end - start)), 0.0) * 1000.0
        self.windows[client] = array("d", np.column_stack((start, end)).ravel().tolist())
        self.logs[client] = []

    def cut_note(self, client: str) -> str:
        """A clause naming the time :meth:`clip` left out of ``client``'s waits ("" when none)."""
        cut = self.cut_ms[client]
        if cut < 50.0:  # under the 0.1 s the figures are printed to
            return ""
        return (
            f"{cut / 1000:.1f} s more of its waits lay past where its logs end or it crashed, or in down "
            "time: not counted"
        )

    def logged_in(self, client: str) -> list[str]:
        """Each of ``client``'s timed waits' log, in :attr:`windows`' order."""
        return self.logs[client]

    def starts(self, client: str) -> np.ndarray:
        """Each of ``client``'s timed waits' start (its line's time), in :attr:`windows`' order."""
        return np.frombuffer(self.windows[client], dtype=np.float64)[0::2]


def orchestrator_ends(
    starts: np.ndarray, restarted: list[tuple[float, float]], down: list[tuple[float, float]]
) -> np.ndarray:
    """Where each of the orchestrator's waits begun at ``starts`` could last to, as a wait it left open
    is cut (:func:`~prime_rl.analysis.restarts.open_spans`): where the first down time after it begins,
    when that is before the orchestrator's next restart (the whole run went down), else its last line
    before that restart (it crashed alone: its silence after it is a dead process's); ``inf`` where no
    restart follows it (``restarted``: for each restart with a time, in order, when the crashed run
    fell silent and the restart's time)."""
    silent = np.array([t for t, _ in restarted] + [math.inf], dtype=np.float64)
    again = np.array([r for _, r in restarted] + [math.inf], dtype=np.float64)
    run = np.searchsorted(silent[:-1], starts, side="left")  # the run that logged it
    downs = np.array(sorted(a for a, _ in down) + [math.inf], dtype=np.float64)
    at = downs[np.searchsorted(downs[:-1], starts, side="left")]
    return np.where(at <= again[run], at, np.maximum(starts, silent[run]))
