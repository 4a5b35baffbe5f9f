"""The waits after a 429, client by client: the orchestrator's (``[gen] request.retry status=429``)
and the offline collector's (``[collect] request.retry status=429``) apart, so that a trio's logs
and a collector's analysed together give each its own rate limit (their sum is neither's), and the
wall time in which some request of a client waited (the union of its waits: concurrent requests
wait together, so their summed waits can be many times the run)."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

import numpy as np

from prime_rl.analysis.bars import merge_intervals

ORCHESTRATOR = "orchestrator"
COLLECTOR = "collector"
CLIENTS = (ORCHESTRATOR, COLLECTOR)
"""The clients whose requests are retried after a 429, by the process name the stages give them."""


@dataclass
class RateLimitWaits:
    """Each client's waits after a 429: those of lines with a time as (start, end) seconds, in pairs;
    those of lines without one summed (ms)."""

    windows: dict[str, array] = field(default_factory=lambda: {c: array("d") for c in CLIENTS})
    untimed_ms: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CLIENTS, 0.0))

    def add(self, client: str, ts: float | None, wait_ms: float) -> None:
        """One wait of ``client``'s, ``wait_ms`` from ``ts`` (None: the line has no time)."""
        if ts is None:
            self.untimed_ms[client] += wait_ms
        else:
            self.windows[client].extend((ts, ts + wait_ms / 1000.0))

    def has(self, client: str) -> bool:
        """Whether ``client`` waited after some 429."""
        return bool(self.windows[client]) or self.untimed_ms[client] > 0

    def merged(self, *clients: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The stretches (start, end; sorted, apart) in which some request of ``clients`` waited after a
        429; None when none of their waits has a time."""
        pairs = [np.frombuffer(self.windows[c], dtype=np.float64) for c in clients if self.windows[c]]
        if not pairs:
            return None
        start, end = np.concatenate(pairs).reshape(-1, 2).T
        return merge_intervals(start, end, 0.0)
