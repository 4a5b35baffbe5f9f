"""``analyze-logs --trace``: the whole run as a Chrome / Perfetto trace (JSON trace-event format).

Open the file in https://ui.perfetto.dev (or ``chrome://tracing``): one track group per process on
one time axis, the first event of the run at 0:

- **orchestrator**: generation batches, checkpoint waits, and one row per server for the weight
  updates it sent (client wall time, with the queue part as a nested slice);
- **inference <url>** (one per server): the server-side rpc of each update (from the server log);
- **trainer**: each step's compute (forward/backward and optimizer nested in it, from
  ``[train] compute.done``), its wait for rollouts, and the weight writes (publish).

Every span is a complete event (``"ph": "X"``, ``ts``/``dur`` in microseconds). Spans of one kind
never overlap on one row (they are sequential by construction), and kinds get rows of their own,
so Perfetto nests nothing it should not. Processes and rows are named with metadata events. The
cost is linear in the number of spans.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prime_rl.analysis.stats import Collected

_ORCH, _TRAINER, _FIRST_SERVER = 1, 2, 10
_ROWS = {
    # kind: (pid, tid, row name)
    "gen": (_ORCH, 1, "generation batches"),
    "ckpt_wait": (_ORCH, 2, "waits for weights/step_N"),
    "train": (_TRAINER, 1, "compute (forward, backward, optimizer)"),
    "train_fwd_bwd": (_TRAINER, 1, "compute (forward, backward, optimizer)"),
    "train_optim": (_TRAINER, 1, "compute (forward, backward, optimizer)"),
    "train_wait": (_TRAINER, 2, "waits for rollouts"),
    "ckpt_write": (_TRAINER, 3, "publish (weight write)"),
}


def trace_events(d: Collected) -> list[dict[str, Any]]:
    """The trace's events: metadata first, then one complete event per span."""
    starts = [s.start for s in d.spans] + [u.start for u in d.updates if u.start is not None]
    if not starts:
        return []
    t0 = min(starts)

    def us(t: float) -> float:
        return round((t - t0) * 1e6, 1)

    events: list[dict[str, Any]] = []
    names: dict[tuple[int, int | None], str] = {(_ORCH, None): "orchestrator", (_TRAINER, None): "trainer"}
    for pid, tid, row in _ROWS.values():
        names[(pid, tid)] = row
    for s in d.spans:
        if s.kind not in _ROWS:
            continue
        pid, tid, _ = _ROWS[s.kind]
        args = {k: v for k, v in s.info.items() if v is not None}
        events.append(_slice(s.label, s.kind, us(s.start), (s.end - s.start) * 1e6, pid, tid, args))
    servers: dict[str, int] = {}
    for u in d.updates:
        url = u.url or "server"
        if url not in servers:
            servers[url] = len(servers)
            pid = _FIRST_SERVER + servers[url]
            names[(pid, None)] = f"inference {url}"
            names[(pid, 1)] = "weight update rpc (server side)"
            names[(_ORCH, 10 + servers[url])] = f"weight updates to {url}"
        row = 10 + servers[url]
        if u.start is not None and u.end is not None:
            args = {"tid": u.tid, "queue_ms": u.queue_ms, "rpc_ms": u.rpc_ms, "target": u.target}
            args = {k: v for k, v in args.items() if v is not None}
            start, dur = us(u.start), (u.end - u.start) * 1e6
            events.append(_slice(f"update {u.tid}", "update", start, dur, _ORCH, row, args))
            if u.queue_ms:  # the client-side wait before the server's rpc, nested at its start
                queue = min(u.queue_ms * 1e3, dur)
                events.append(_slice("queue", "update", start, queue, _ORCH, row, {}))
        rpc = u.server_rpc_ms if u.server_rpc_ms is not None else None
        if u.recv_ts is not None and rpc is not None:
            pid = _FIRST_SERVER + servers[url]
            events.append(_slice(f"rpc {u.tid}", "rpc", us(u.recv_ts), rpc * 1e3, pid, 1, {"tid": u.tid}))
    meta = []
    for (pid, tid), name in sorted(names.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        if tid is None:
            meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}})
            meta.append(
                {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}}
            )
        else:
            meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
    return meta + events


def _slice(name: str, cat: str, ts: float, dur: float, pid: int, tid: int, args: dict) -> dict[str, Any]:
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": ts,
        "dur": round(max(dur, 0.0), 1),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def write_trace(d: Collected, path: Path) -> Path:
    """Write the run's trace to ``path`` (``{"traceEvents": [...], "displayTimeUnit": "ms"}``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"traceEvents": trace_events(d), "displayTimeUnit": "ms"}))
    return path
