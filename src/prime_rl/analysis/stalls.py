"""Stalls: the logs end (or go silent) inside a wait; say who waited on whom, since when, and what
the other side's last line was.

Three waits are recognised: the orchestrator waiting for ``weights/step_N`` (a ``[ckpt]
wait.start`` with no ``wait.done``: the trainer never wrote it), a weight update with no answer
(``client.send`` without ``client.done``/``client.error``: the server never finished its rpc),
and a generation batch that never ended (``[gen] batch.start`` without ``batch.done``: the
trainer waits for its rollouts). A wait counts as a stall when it lasted ``stall_min_s`` to the
end of the logs (the last line of any file), or when the other side fell silent before it began.
A stall is ranked first: a run that hangs has no other bottleneck that matters at its end.
"""

from __future__ import annotations

import polars as pl

from prime_rl.analysis.clock import local_time
from prime_rl.analysis.findings import Finding
from prime_rl.analysis.parser import label_for
from prime_rl.analysis.stats import Collected
from prime_rl.analysis.thresholds import Thresholds
from prime_rl.analysis.updates import Update


def _clock(ts: float | None) -> str:
    return local_time(ts)


def logs_end(d: Collected) -> float | None:
    """The latest timestamp of any line (tagged or not) of any file."""
    stamps = [ts for ts, _ in d.parse.last_lines.values() if ts is not None]
    stamps += [e.ts for e in d.last_events.values() if e.ts is not None]
    return max(stamps) if stamps else None


def last_line(d: Collected, process: str) -> tuple[float | None, str] | None:
    """The last line of a process's log files (the latest when there are several), with its time."""
    found = [v for path, v in d.parse.last_lines.items() if label_for(path) == process]
    if not found:
        return None
    return max(found, key=lambda v: v[0] if v[0] is not None else float("-inf"))


def _other_side(d: Collected, process: str) -> tuple[float | None, str]:
    """(time, words) of the other process's last line, or (None, that its log was not given)."""
    last = last_line(d, process)
    if last is None:
        return None, f"no {process} log was given"
    ts, text = last
    return ts, f"the {process}'s last line, at {_clock(ts)}: `{text[:200]}`"


def _is_stall(
    since: float | None, other: float | None, end: float | None, th: Thresholds, floor_s: float = 0.0
) -> bool:
    if since is None or end is None:
        return False
    return end - since >= max(th.stall_min_s, floor_s) or (other is not None and other < since)


def stall(d: Collected, th: Thresholds) -> Finding | None:
    """The logs end inside a wait (see the module docstring); None when they do not."""
    end = logs_end(d)
    found = _ckpt_stall(d, th, end) or _update_stall(d, th, end) or _batch_stall(d, th, end)
    if found is None:
        return None
    title, evidence, since = found
    return Finding(
        kind="stall",
        title=title,
        evidence=evidence,
        share=((end or 0) - (since or 0)) / d.run_ms if d.run_ms else 1.0,
        next=(
            "Look at the end of the silent process's log (and its console: a kill, an OOM, a traceback).",
            "Restart with `rl --resume` once the cause is fixed; the finished steps are kept.",
        ),
        thresholds=("stall_min_s",),
    )


def _ckpt_stall(d: Collected, th: Thresholds, end: float | None) -> tuple[str, str, float | None] | None:
    if d.open_wait is None:
        return None
    target, since, ev = d.open_wait
    other_ts, other = _other_side(d, "trainer")
    if not _is_stall(since, other_ts, end, th):
        return None
    wrote = (
        f"the last weights it wrote: step {d.last_write.fields.get('step')}"
        if d.last_write
        else "no weight write in its log"
    )
    return (
        f"Stall: the orchestrator waits for weights step {target}, which the trainer never wrote",
        f"waiting since {_clock(since)} ({ev.where()}), {(end or 0) - (since or 0):.0f} s to the end of the logs "
        f"(stall_min_s {th.stall_min_s:g}); {other}; {wrote}",
        since,
    )


def first_unanswered(d: Collected) -> Update | None:
    """The first sent of the weight updates sent and never answered (no client.done, no
    client.error, no wall time), the first in order of equals; None: there is none."""
    col = pl.col
    unanswered = (
        d.update_frame()
        .with_row_index("i")
        .filter(
            col("send_ts").is_not_null() & col("done_ts").is_null() & ~col("failed") & col("wall").is_null()
        )
        .sort("send_ts", "i")
    )
    return d.updates[unanswered.item(0, "i")] if unanswered.height else None


def _update_stall(d: Collected, th: Thresholds, end: float | None) -> tuple[str, str, float | None] | None:
    u = first_unanswered(d)
    if u is None:
        return None
    other_ts, other = _other_side(d, "inference")
    if not _is_stall(u.send_ts, other_ts, end, th):
        return None
    server = (
        "the server never received it"
        if u.recv_ts is None and u.recv_t is None
        else "the server received it and its rpc never finished"
        if u.server_rpc_ms is None
        else "the server finished its rpc but the answer never came back"
    )
    return (
        f"Stall: a weight update to {u.url or 'a server'} got no answer (trace id {u.tid})",
        f"sent at {_clock(u.send_ts)}, {(end or 0) - (u.send_ts or 0):.0f} s to the end of the logs "
        f"(stall_min_s {th.stall_min_s:g}); {server}; {other}",
        u.send_ts,
    )


def _batch_stall(d: Collected, th: Thresholds, end: float | None) -> tuple[str, str, float | None] | None:
    ev = d.open_batch
    if ev is None:
        return None
    other_ts, other = _other_side(d, "inference")
    typical = 3 * (d.stat("gen_dur_ms", "p50") or 0) / 1000.0
    if not _is_stall(ev.ts, other_ts, end, th, typical):
        return None
    step = ev.fields.get("step", "?")
    return (
        f"Stall: generation of step {step} never finished; the trainer waits for its rollouts",
        f"batch started at {_clock(ev.ts)} ({ev.where()}), {(end or 0) - (ev.ts or 0):.0f} s to the end of the logs "
        f"(stall_min_s {th.stall_min_s:g}, or 3x the median batch); {other}",
        ev.ts,
    )


def hang(d: Collected, th: Thresholds) -> Finding | None:
    """The ``rl`` launcher's watchdog saw no progress (``[hang] detected``): who waited on whom."""
    if not d.hangs:
        return None
    first = d.hangs[0]
    waits = first.fields.get("waits", "none")
    said = (
        f"{len(d.hangs)} time(s), first at {_clock(first.ts)} ({first.where()}): no progress for "
        f"{first.fields.get('silent_s', '?')} s (threshold {first.fields.get('threshold_s', '?')} s, median step "
        f"{first.fields.get('median_step_s', '?')} s); waits: {waits.replace(',', ', ')}"
    )
    return Finding(
        kind="hang",
        title="Hang: the launcher's watchdog saw no process make progress",
        evidence=said,
        share=1.0,
        next=(
            "Read the Python stacks each process dumped into its log right after the [hang] line.",
            "The side waited on (after '>' in waits) is where to look first.",
        ),
        thresholds=(),
    )
