"""``analyze-logs --trace``: the whole run as a Chrome / Perfetto trace (JSON trace-event format).

Open the file in https://ui.perfetto.dev (or ``chrome://tracing``): one track group per process on
one time axis, the first event of the run at 0:

- **orchestrator**: generation batches, checkpoint waits, and one row per server for the weight
  updates it sent (client wall time, with the queue part as a nested slice);
- **inference <url>** (one per server): the server-side rpc of each update (from the server log),
  and an offline collector's samples it answered (``[collect]`` lines with a ``dur_ms``, from the
  line's time less its ``dur_ms`` to the line): a track ``sample``, and a track ``failed sample``
  for those of ``rollout.failed`` lines (a sample without a URL: server ``server``);
- **offline collector**: a deferred verify pass's verifications (``verify.done``), a track
  ``verification``;
- **trainer**: each step's compute (forward/backward and optimizer nested in it, from
  ``[train] compute.done``), its wait for rollouts, and the weight writes (publish).

Every span of the trio is a complete event (``"ph": "X"``, ``ts``/``dur`` in microseconds). Spans of
one kind never overlap on one row (they are sequential by construction), and kinds get rows of
their own, so Perfetto nests nothing it should not. A collector's samples overlap (many in flight
at once): each is an async slice (``"ph": "b"`` then ``"e"``, an ``id`` of its own), and Perfetto
draws a process's async slices of one name as one track, as many levels deep as were in flight.
Processes and rows are named with metadata events.

A long run's trace holds its first and last :data:`~prime_rl.analysis.stats.SPANS_KEPT` spans of
each kind (a collector's samples and verifications: :data:`~prime_rl.analysis.stats.SAMPLES_KEPT`,
as timeline.txt) and as many weight updates, as the timeline does; how many were left out between
them is in the trace's ``otherData`` (``left_out``, by kind). The file is written an event at a
time, so its size and the memory it takes do not grow with the run past that.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from prime_rl.analysis import stats
from prime_rl.analysis.output import dumps, open_text
from prime_rl.analysis.sample_spans import COLLECTOR_KINDS, SAMPLE, VERIFICATION
from prime_rl.analysis.spans import Span
from prime_rl.analysis.stats import Collected
from prime_rl.analysis.update_parts import Update

_ORCH, _TRAINER, _COLLECTOR, _FIRST_SERVER = 1, 2, 3, 10
_FAILED = "rollout.failed"
"""The ``event`` of a failed sample's line (a sample's ``status`` may be 200: a malformed answer)."""
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


def trace_events(d: Collected) -> Iterator[dict[str, Any]]:
    """The trace's events: metadata first, then one complete event per span and per update kept
    (:func:`kept_updates`)."""
    t0 = _first_start(d)
    if t0 is None:
        return

    def us(t: float) -> float:
        return round((t - t0) * 1e6, 1)

    # the processes and rows with events only (a collector's trace has no orchestrator or trainer)
    process = {_ORCH: "orchestrator", _TRAINER: "trainer"}
    names: dict[tuple[int, int | None], str] = {}
    for pid, tid, row in (_ROWS[kind] for kind in {s.kind for s in d.spans} if kind in _ROWS):
        names[(pid, None)], names[(pid, tid)] = process[pid], row
    samples = [s for s in d.spans if s.kind in COLLECTOR_KINDS]
    updated = _server_urls(d)
    sampled = [_sample_url(s) for s in samples if s.kind != VERIFICATION]  # a verification has no server
    servers = {url: k for k, url in enumerate(dict.fromkeys([*updated, *sampled]))}
    for url in updated:
        names[(_FIRST_SERVER + servers[url], 1)] = "weight update rpc (server side)"
        names[(_ORCH, None)], names[(_ORCH, 10 + servers[url])] = "orchestrator", f"weight updates to {url}"
    for url, k in servers.items():
        names[(_FIRST_SERVER + k, None)] = f"inference {url}"
    if any(s.kind == VERIFICATION for s in samples):
        names[(_COLLECTOR, None)] = "offline collector"
    for (pid, tid), name in sorted(names.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        if tid is None:
            yield {"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": name}}
            yield {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}}
        else:
            yield {"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}
    for s in d.spans:
        if s.kind not in _ROWS:
            continue
        pid, tid, _ = _ROWS[s.kind]
        args = {k: v for k, v in s.info.items() if v is not None}
        yield _slice(s.label, s.kind, us(s.start), (s.end - s.start) * 1e6, pid, tid, args)
    for u in kept_updates(d.updates):
        srv = servers[u.url or "server"]
        if u.start is not None and u.end is not None:
            args = {"tid": u.tid, "queue_ms": u.queue_ms, "rpc_ms": u.rpc_ms, "target": u.target}
            args = {k: v for k, v in args.items() if v is not None}
            start, dur = us(u.start), (u.end - u.start) * 1e6
            yield _slice(f"update {u.tid}", "update", start, dur, _ORCH, 10 + srv, args)
            if u.queue_ms:  # the client-side wait before the server's rpc, nested at its start
                queue = min(u.queue_ms * 1e3, dur)
                yield _slice("queue", "update", start, queue, _ORCH, 10 + srv, {})
        if u.recv_ts is not None and u.server_rpc_ms is not None:
            rpc = u.server_rpc_ms * 1e3
            yield _slice(f"rpc {u.tid}", "rpc", us(u.recv_ts), rpc, _FIRST_SERVER + srv, 1, {"tid": u.tid})
    for n, s in enumerate(samples):
        pid = _COLLECTOR if s.kind == VERIFICATION else _FIRST_SERVER + servers[_sample_url(s)]
        yield from _async_slice(_sample_track(s), us(s.start), us(s.end), pid, n, s)


def _sample_url(s: Span) -> str:
    """The server of a collector's span: its URL (``server`` for a sample without one)."""
    return s.info.get("url") or "server"


def _sample_track(s: Span) -> str:
    """The name of a collector's span, which is its track's: ``sample``, ``failed sample`` (a
    ``rollout.failed`` line's) or ``verification``."""
    if s.kind == SAMPLE and s.info.get("event") == _FAILED:
        return f"failed {SAMPLE}"
    return s.kind


def _async_slice(name: str, ts: float, end: float, pid: int, n: int, s: Span) -> Iterator[dict[str, Any]]:
    """Span ``s`` (``ts`` to ``end``, microseconds), which may overlap others of its track
    (``name``), as an async slice of process ``pid``: its begin (the span's label and info its args)
    and end events, id ``n``."""
    args = {"label": s.label, **{k: v for k, v in s.info.items() if v is not None}}
    yield {"name": name, "cat": s.kind, "ph": "b", "ts": ts, "pid": pid, "tid": pid, "id": n, "args": args}
    yield {"name": name, "cat": s.kind, "ph": "e", "ts": max(end, ts), "pid": pid, "tid": pid, "id": n}


def kept_updates(updates: Sequence[Update]) -> Iterator[Update]:
    """The updates a trace shows, in order: the first and last ``SPANS_KEPT`` (made into records a
    slice at a time; :func:`_updates_left_out` counts the rest)."""
    n, kept = len(updates), stats.SPANS_KEPT
    if not _updates_left_out(n):
        return iter(updates)
    return itertools.chain(updates[:kept], updates[n - kept :])


def _updates_left_out(n: int) -> int:
    """How many of ``n`` updates a trace leaves out between its first and last ``SPANS_KEPT``."""
    return max(0, n - 2 * stats.SPANS_KEPT)


def _first_start(d: Collected) -> float | None:
    """When the run's first span or update started (None: nothing did)."""
    first = d.update_frame().get_column("start").min()
    return min([s.start for s in d.spans] + ([first] if first is not None else []), default=None)


def _server_urls(d: Collected) -> list[str]:
    """Each server's URL (``server`` for updates without one), in the order the updates first name them."""
    url = pl.col("url")
    named = pl.when(url.is_null() | (url == "")).then(pl.lit("server")).otherwise(url)
    return d.update_frame().select(named.unique(maintain_order=True)).to_series().to_list()


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


def left_out(d: Collected) -> dict[str, int]:
    """Spans of each kind and updates (``update``) a trace leaves out of a long run, by kind."""
    out = {k: n for k, n in d.spans_dropped.items() if k in _ROWS or k in COLLECTOR_KINDS}
    updates = _updates_left_out(len(d.updates))  # a count: no records made
    return out | ({"update": updates} if updates else {})


def write_trace(d: Collected, path: Path) -> Path:
    """Write the run's trace to ``path``, an event at a time: ``{"traceEvents": [...],
    "displayTimeUnit": "ms", "otherData": {"left_out": {kind: count}}}``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_text(path) as f:
        f.write('{"traceEvents": [')
        for i, event in enumerate(trace_events(d)):
            f.write(", " if i else "")
            f.write(dumps(event))
        f.write(f'], "displayTimeUnit": "ms", "otherData": {dumps({"left_out": left_out(d)})}}}')
    return path
