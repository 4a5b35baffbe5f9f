"""Per server: with several inference servers, every figure broken down by server URL.

Weight updates come from the client's ``[weights]`` lines (``url=``), one update per trace id and
server (:mod:`~prime_rl.analysis.updates`); retries (429 and errors) from ``[gen] request.retry
url=``; failed updates from ``client.error``. A server whose median update wall time is
``server_slow_ratio`` times its peers' median is named, with the ratio.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field

from prime_rl.analysis.findings import Finding
from prime_rl.analysis.stages import update_groups
from prime_rl.analysis.stats import Collected
from prime_rl.analysis.thresholds import Thresholds


@dataclass
class ServerRow:
    """One server's figures."""

    url: str
    updates: int = 0
    failed: int = 0
    wall_ms: list[float] = field(default_factory=list)
    rpc_ms: list[float] = field(default_factory=list)
    queue_ms: list[float] = field(default_factory=list)
    retries: Counter = field(default_factory=Counter)

    def median(self, key: str) -> float | None:
        values = getattr(self, key)
        return statistics.median(values) if values else None

    def to_dict(self) -> dict[str, object]:
        return {
            "url": self.url,
            "updates": self.updates,
            "failed": self.failed,
            "wall_ms_p50": self.median("wall_ms"),
            "rpc_ms_p50": self.median("rpc_ms"),
            "queue_ms_p50": self.median("queue_ms"),
            "retries": dict(self.retries),
        }


def server_rows(d: Collected) -> list[ServerRow]:
    """One row per server URL seen in [weights] or [gen] request.retry lines, by URL."""
    rows: dict[str, ServerRow] = {}
    for u in d.updates:
        if not u.url:
            continue
        row = rows.setdefault(u.url, ServerRow(u.url))
        row.updates += 1
        row.failed += u.failed
        for key in ("wall_ms", "queue_ms"):
            value = getattr(u, key)
            if value is not None:
                getattr(row, key).append(value)
        rpc = u.rpc_ms if u.rpc_ms is not None else u.server_rpc_ms
        if rpc is not None:
            row.rpc_ms.append(rpc)
    for url, counts in d.server_counts.items():
        rows.setdefault(url, ServerRow(url)).retries.update(counts)
    return [rows[k] for k in sorted(rows)]


def slow_server(d: Collected, th: Thresholds) -> Finding | None:
    """One server markedly slower than its peers: its median update wall_ms (rpc_ms when the client
    gives no wall time) at least ``server_slow_ratio`` times the median of the other servers'
    medians, over at least ``server_min_updates`` updates. Every update waits for the slowest
    server, so its share is the time the others spent waiting for it."""
    rows = [r for r in server_rows(d) if r.updates >= th.server_min_updates]
    if len(rows) < 2:
        return None
    key = "wall_ms" if all(r.wall_ms for r in rows) else "rpc_ms"
    medians = {r.url: r.median(key) for r in rows if r.median(key) is not None}
    if len(medians) < 2:
        return None
    slow_url = max(medians, key=lambda u: medians[u])
    peers = statistics.median(v for u, v in medians.items() if u != slow_url)
    ratio = medians[slow_url] / peers if peers > 0 else float("inf")
    if ratio < th.server_slow_ratio:
        return None
    waited = 0.0  # per update: the slow server's time beyond the slowest of its peers
    for group in update_groups(d.updates):
        mine = [getattr(u, key) for u in group if u.url == slow_url and getattr(u, key) is not None]
        others = [getattr(u, key) for u in group if u.url != slow_url and getattr(u, key) is not None]
        if mine and others:
            waited += max(0.0, max(mine) - max(others))
    run = d.run_ms
    return Finding(
        kind="slow_server",
        title=f"Slow server: {slow_url} takes {ratio:.1f}x as long as its peers to update",
        evidence=f"median update {key} {medians[slow_url]:.0f} ms on {slow_url} vs {peers:.0f} ms on the "
        f"{len(medians) - 1} other server(s) ({ratio:.1f}x >= server_slow_ratio {th.server_slow_ratio:g}); "
        f"every update waits for it, {waited / 1000:.1f} s in all",
        share=waited / run if run else 0.0,
        next=(
            f"Check {slow_url}'s host: storage it loads weights from, GPU health, other load on it.",
            "Take it out of the pool (orchestrator client.base_url) until it is fixed.",
        ),
        thresholds=("server_slow_ratio", "server_min_updates"),
        explains="slow_reload",
    )


def server_dicts(d: Collected) -> list[dict[str, object]]:
    """The rows for summary.json."""
    return [r.to_dict() for r in server_rows(d)]
