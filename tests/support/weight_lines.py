"""Weight-update lines for the join's tests: usual updates as events, and a join fed a file at a time."""

from __future__ import annotations

from pathlib import Path

from prime_rl.analysis.tagged import Event, TaggedLines
from prime_rl.analysis.updates import UpdateJoin


def usual_update_events(n: int, servers: int = 4) -> list[Event]:
    """``n`` usual updates, each to one of ``servers`` servers: the client's two lines in
    orchestrator.log, the server's three in its own file."""
    events: list[Event] = []
    for k in range(n):
        tid, url, source = f"t{k:06d}", f"http://10.0.0.{k % servers}:8000", f"inference_{k % servers}.log"
        lines = [
            ("client.send", "orchestrator.log", {"url": url, "path": "/update_weights", "t": f"{k}.5"}),
            ("server.recv", source, {"path": "/update_weights", "t": f"{k}.6"}),
            ("rpc.start", source, {"op": "update_weights", "target": f"step_{k}"}),
            ("rpc.done", source, {"op": "update_weights", "rpc_ms": f"{k % 97}.5", "lock_wait_ms": "0"}),
            ("client.done", "orchestrator.log", {"url": url, "path": "/update_weights", "wall_ms": f"{k % 89 + 100}", "rpc_ms": f"{k % 97}.5", "queue_ms": "1"}),
        ]  # fmt: skip
        for event, file, fields in lines:
            events.append(Event("weights", event, tid, fields, float(k), "x", Path(file), len(events) + 1))
    return events


def add_by_file(join: UpdateJoin, events: list[Event], batch: int = 500) -> list[int]:
    """The events added a file at a time, ``batch`` lines a batch; returns the lines held in memory
    after each batch."""
    held = []
    for file in sorted({ev.path for ev in events}, key=str, reverse=True):  # the servers' files first
        mine = [ev for ev in events if ev.path == file]
        for lo in range(0, len(mine), batch):
            part = mine[lo : lo + batch]
            join.add_lines(TaggedLines(TaggedLines.from_events(part).frame, "x", file))
            held.append(join._client.in_memory + join._server.in_memory)
    return held
