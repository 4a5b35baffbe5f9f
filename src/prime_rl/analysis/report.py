"""Write the analysis directory: SUMMARY.md, *_stats.txt, slowest_updates.txt, timeline.txt/.png, summary.json.

The files are described in ``bottleneck_logs/README.md``.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from dataclasses import asdict
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

import prime_rl.analysis.stats as collection
from prime_rl.analysis.analyze import Analysis
from prime_rl.analysis.bars import PLOT_BARS, SAMPLES, bars_by_kind, is_sample_row, merge_intervals
from prime_rl.analysis.output import RawJSON, dumps, md_text, write_text
from prime_rl.analysis.report_sections import headline, sections_after_numbers, verdict
from prime_rl.analysis.sample_spans import COLLECTOR_KINDS, VERIFICATION
from prime_rl.analysis.servers import server_dicts
from prime_rl.analysis.spans import SpanColumns, span_columns
from prime_rl.analysis.stages import stages
from prime_rl.analysis.stats import Collected
from prime_rl.analysis.thresholds import Thresholds
from prime_rl.analysis.timeline_plot import ROWS, SAMPLE_ROWS, PlotData, draw
from prime_rl.analysis.update_table import UpdateTable, frame_of
from prime_rl.analysis.updates import Update, died_waiting

TIMELINE_LINES = 50_000
"""timeline.txt lists at most this many spans (the rest are counted)."""
JSON_UPDATES = 10_000
"""summary.json lists the first this many weight updates (``updates_total`` counts them all);
slowest_updates.txt has the slowest of all, the statistics use every one."""

STAT_FILES = {
    "queue_ms_stats.txt": (
        "queue_ms",
        "Queue delay per weight update (client queue_ms: wall_ms - server_ms; - rpc_ms in logs without server_ms)",
    ),
    "server_ms_stats.txt": (
        "server_ms",
        "Server handling per weight update (client server_ms: lock wait + validation + rpc)",
    ),
    "rpc_ms_stats.txt": ("rpc_ms", "Server RPC time per weight update (client view)"),
    "server_rpc_ms_stats.txt": ("server_rpc_ms", "Server RPC time per weight update (server log)"),
    "send_to_recv_ms_stats.txt": ("send_to_recv_ms", "client.send -> server.recv per weight update"),
    "ckpt_wait_stats.txt": (
        "ckpt_wait_ms",
        "Orchestrator wait for weights/step_N/STABLE (wait_ms), every wait",
    ),
    "write_ms_stats.txt": ("write_ms", "Trainer weight write ([ckpt] write.done write_ms)"),
    "publish_ms_stats.txt": (
        "publish_ms",
        "Trainer publish time in the step ([train] step.done write_ms)",
    ),
    "gen_dur_ms_stats.txt": ("gen_dur_ms", "Generation time per batch ([gen] batch.done dur_ms)"),
    "verify_dur_ms_stats.txt": ("verify_dur_ms", "Scoring time per batch ([verify] batch.done dur_ms)"),
    "trunc_pct_stats.txt": ("trunc_pct", "Truncated completions per step (%)"),
    "staleness_stats.txt": ("staleness", "Policy staleness per step"),
    "collect_ms_stats.txt": ("collect_ms", "Offline collection timings ([collect] dur_ms)"),
    "collect_gen_ms_stats.txt": (
        "collect_gen_ms",
        "Offline collection: generation per sample ([collect] gen_ms)",
    ),
    "collect_verify_ms_stats.txt": (
        "collect_verify_ms",
        "Offline collection: verification wait per sample ([collect] rollout.done verify_ms)",
    ),
    "collect_queue_ms_stats.txt": (
        "collect_queue_ms",
        "Offline collection: client-side queueing per sample (queue_ms)",
    ),
    "collect_deferred_verify_ms_stats.txt": (
        "collect_deferred_verify_ms",
        "Deferred verification per record (collect-rollouts verify: [collect] verify.done dur_ms)",
    ),
}


def format_stats(title: str, stats: dict) -> str:
    if not stats.get("count"):
        return f"{title}\n  count: 0 (no such lines)\n"
    lines = [title]
    for key in ("count", "mean", "stddev", "min", "p50", "p95", "p99", "max"):
        value = stats[key]
        lines.append(f"  {key + ':':8} {value:.0f}" if key == "count" else f"  {key + ':':8} {value:.1f}")
    return "\n".join(lines) + "\n"


def _clock(ts: float | None) -> str:
    """``HH:MM:SS.mmm`` of a local time (what ``datetime.fromtimestamp(ts)`` shows, to the
    microsecond, cut to the millisecond); each second is formatted once."""
    if ts is None or not math.isfinite(ts):
        return "?"
    whole = math.floor(ts)
    micro = round((ts - whole) * 1e6)
    if micro >= 1_000_000:
        whole, micro = whole + 1, micro - 1_000_000
    second = _second(whole)
    return "?" if second is None else f"{second}.{micro // 1000:03d}"


EPOCH = datetime(1970, 1, 1)
CLOCKS_AT_ONCE = 2.0**40
"""Times (seconds, either side of 1970: some 35,000 years) that :func:`_clocks` formats together;
any other goes to :func:`_clock` alone."""


def _clocks(times: list[float | None]) -> list[str]:
    """:func:`_clock` of each time, all at once: the same arithmetic by numpy (IEEE operations,
    rounding half to even as ``round``), each UTC minute's offset to local time asked once
    (:func:`_offset`) and the text made by polars (timeline.txt's 85k clocks: about 0.15 s one by one,
    0.03 s together).
    A time that is None, not finite or too far out, or in a minute whose offset changes, goes to
    :func:`_clock` alone."""
    ts = np.array([math.nan if t is None else t for t in times], dtype=np.float64)
    together = np.isfinite(ts) & (np.abs(ts) < CLOCKS_AT_ONCE)
    safe = np.where(together, ts, 0.0)
    whole = np.floor(safe)
    micro = np.rint((safe - whole) * 1e6)
    carry = micro >= 1e6
    millis = ((micro - carry * 1e6) // 1000).astype(np.int64)
    seconds = whole.astype(np.int64) + carry
    minutes, at = np.unique(seconds - seconds % 60, return_inverse=True)
    offsets = np.array([_offset(m) for m in minutes.tolist()], dtype=np.float64)[at.reshape(-1)]
    together &= ~np.isnan(offsets)
    day = (seconds + np.where(together, offsets, 0.0).astype(np.int64)) % 86400
    parts = {"h": day // 3600, "m": day // 60 % 60, "s": day % 60, "ms": millis}
    two = [pl.col(name).cast(pl.String).str.zfill(2) for name in ("h", "m", "s")]
    out = (
        pl.DataFrame(parts)
        .select(pl.format("{}:{}:{}.{}", *two, pl.col("ms").cast(pl.String).str.zfill(3)))
        .to_series()
        .to_list()
    )
    for k in np.flatnonzero(~together).tolist():
        out[k] = _clock(times[k])
    return out


@lru_cache(maxsize=4096)
def _offset(minute: int) -> int | None:
    """Seconds from UTC to local time (what ``datetime.fromtimestamp`` shows) through the UTC minute
    that starts at ``minute``; None when the offset changes inside it or no date holds it."""
    try:
        first, last = datetime.fromtimestamp(minute), datetime.fromtimestamp(minute + 59)
    except (OverflowError, OSError, ValueError):
        return None
    if (last - first).total_seconds() != 59:
        return None
    since = first - EPOCH
    return since.days * 86400 + since.seconds - minute


@lru_cache(maxsize=4096)
def _second(whole: int) -> str | None:
    """``HH:MM:SS`` of a local time; None for one no date holds (a span started from a hostile
    ``dur_ms=1e20`` lies that far before its end)."""
    try:
        return datetime.fromtimestamp(whole).strftime("%H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return None


def slowest_updates(d: Collected, n: int = 10) -> str:
    """slowest_updates.txt: the ``n`` longest weight updates and the generation batches they overlapped.
    The updates the orchestrator died waiting for (:func:`~prime_rl.analysis.updates.died_waiting`:
    no answer says how long they took; the stages count them up to the crash) are not ranked; a line
    under the list names them."""
    rows = d.update_frame().select(  # the row numbers and times alone: a sort of every column would copy them all
        pl.int_range(pl.len(), dtype=pl.UInt32).alias("i"),
        pl.col("took").fill_null(0.0),
        timed=pl.col("wall").is_not_null() | pl.col("server_rpc").is_not_null(),
        dead=died_waiting(d.orchestrator_restarted),
    )
    slowest = (
        rows.filter(pl.col("timed") & ~pl.col("dead"))
        .sort("took", descending=True, maintain_order=True)  # equals keep their order
        .head(n)
    )
    ups = [d.updates[i] for i in slowest["i"].to_list()]
    dead = [d.updates[i] for i in rows.filter("dead")["i"].to_list()]
    gens = _gen_overlaps(d)
    out = [
        f"{'trace_id':14} {'start':12} {'wall_ms':>10} {'rpc_ms':>10} {'queue_ms':>10} {'send->recv':>10}  {'server':24} in flight"
    ]
    for u in ups:
        overlapping = gens.labels(u.start, u.end) if u.start is not None and u.end is not None else []
        gap = u.send_to_recv_ms
        out.append(
            f"{u.tid:14} {_clock(u.start):12} {_fmt(u.waited_ms):>10} {_fmt(u.rpc_ms or u.server_rpc_ms):>10} "
            f"{_fmt(u.queue_ms):>10} {_fmt(gap):>10}  {u.url or '-':24} {', '.join(overlapping) or '-'}"
        )
    if not ups:
        out.append(
            "(no answered weight updates in these logs)" if dead else "(no weight updates in these logs)"
        )
    if dead:
        out.append(_died_waiting_note(d, dead))
    return "\n".join(out) + "\n"


def _died_waiting_note(d: Collected, dead: list[Update]) -> str:
    """The line under slowest_updates.txt's list that names the updates the orchestrator died waiting
    for (the first five; the rest counted)."""
    named = ", ".join(f"{u.tid} to {u.url or 'a server not named'}" for u in dead[:5])
    more = f" and {len(dead) - 5} more" if len(dead) > 5 else ""
    return (
        f"(not ranked: {len(dead)} update(s) the orchestrator died waiting for, sent before its restart at "
        f"{_clock(d.orchestrator_restarted)} and never answered: {named}{more}; the stages count them up to the "
        "crash, where the down time begins)"
    )


def _gen_overlaps(d: Collected) -> _Overlaps:
    """The generation batches for overlap lookups (slowest_updates.txt and timeline.txt), made once."""
    return d.memo("gen_overlaps", lambda: _Overlaps(span_columns(d.spans, kind="gen")))


class _Overlaps:
    """Spans sorted by start, for "which of them overlap [start, end)" in logarithmic time (the
    generation batches follow one another, so the walk back stops at the first that ended before
    ``start``)."""

    def __init__(self, spans: SpanColumns) -> None:
        order = np.argsort(spans.start, kind="stable")
        self.starts, self.ends = spans.start[order].tolist(), spans.end[order].tolist()
        self.names = [spans.label[i] for i in order.tolist()]

    def labels(self, start: float, end: float, limit: int = 8) -> list[str]:
        i = bisect_left(self.starts, end) - 1
        out: list[str] = []
        while i >= 0 and len(out) < limit:
            if self.ends[i] <= start:
                break
            out.append(self.names[i])
            i -= 1
        return out[::-1]


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def timeline(d: Collected) -> str:
    """timeline.txt: every span in time order (at most :data:`TIMELINE_LINES`); updates with their
    server, queue/rpc split and the batches they overlapped; a collector's samples with their
    server, status and queue/gen/verify times; a verify pass's verifications with their task."""
    gens = _gen_overlaps(d)
    spans = span_columns(d.spans, TIMELINE_LINES)  # columns: an object a span took 0.05 s of 50,000
    kinds = set(spans.kind)
    out = (
        [f"An offline collector's {_collector_spans(kinds or {'sample'})} in time order."]
        if (kinds <= COLLECTOR_KINDS if kinds else d.is_collector_run)
        else [
            "Weight updates, checkpoint waits/writes, generation batches and the trainer's compute (train) and "
            "waits for rollouts (train_wait) in time order.",
            "For each update: its server, the batches it overlapped and, with the server log, the client.send -> server.recv gap.",
        ]
    )
    if "sample" in kinds:
        out.append(
            "For each sample (from its line's time less its dur_ms to the line): its trace id and server, its "
            "status and its queue, generation and verification ms."
        )
    if VERIFICATION in kinds:
        out.append(
            "For each verification of a deferred verify pass (collect-rollouts verify; from its verify.done "
            "line's time less its dur_ms to the line): its task and repeat."
        )
    out.append("")
    begin, finish = spans.start.tolist(), spans.end.tolist()
    starts, ends = _clocks(begin), _clocks(finish)
    took = ((spans.end - spans.start) * 1000).tolist()
    none = [None] * len(begin)
    queue, rpc, gaps = (spans.info.get(key, none) for key in ("queue_ms", "rpc_ms", "send_to_recv_ms"))
    url, status, gen, verify = (spans.info.get(key, none) for key in ("url", "status", "gen_ms", "verify_ms"))
    for i, kind in enumerate(spans.kind):
        line = f"{starts[i]} -> {ends[i]} {took[i]:9.1f} ms  {kind:10} {spans.label[i]}"
        if kind == "update":
            over = gens.labels(begin[i], finish[i])
            line += f"  queue_ms={_fmt(queue[i])} rpc_ms={_fmt(rpc[i])}"
            line += f" send->recv={_fmt(gaps[i])}" if gaps[i] is not None else ""
            line += f"  overlaps: {', '.join(over) if over else 'no batch'}"
        elif kind == "sample":
            line += (
                f" {url[i] or '-'}  status={status[i] or '-'} queue_ms={_fmt(queue[i])} gen_ms={_fmt(gen[i])} "
                f"verify_ms={_fmt(verify[i])}"
            )
        out.append(line)
    if len(d.spans) > TIMELINE_LINES:
        out.append(f"... and {len(d.spans) - TIMELINE_LINES} more spans")
    if d.spans_dropped:
        out.append(_dropped_note(d))
    if not d.spans:
        out.append("(no timed events)")
    return "\n".join(out) + "\n"


def _dropped_note(d: Collected) -> str:
    dropped = ", ".join(f"{n} {kind}" for kind, n in sorted(d.spans_dropped.items()))
    kinds = set(d.spans_dropped)
    samples = collection.kept_of(collection.SAMPLE)
    if kinds <= COLLECTOR_KINDS:  # a collector's log alone
        shown = f"the first and last {samples} {_collector_spans(kinds, 'as many')} are shown"
    else:
        ours = kinds & COLLECTOR_KINDS
        shown = f"the first and last {collection.SPANS_KEPT} spans of each kind are shown" + (
            f" ({samples} of a collector's {_collector_spans(ours, 'as many')})" if ours else ""
        )
    return f"(a long run: {shown}; between them {dropped} spans are left out here, not from the statistics)"


def _collector_spans(kinds: set[str], many: str = "") -> str:
    """The collector's kinds of span among ``kinds`` in words: "samples", "verifications" (a verify
    pass's) or "samples and ``many`` verifications"."""
    names = [name for kind, name in (("sample", "samples"), (VERIFICATION, "verifications")) if kind in kinds]
    return f" and {many} ".replace("  ", " ").join(names)


def plot_data(a: Analysis) -> PlotData | None:
    """What timeline.png is drawn from: one row per kind of event over the whole run (every span,
    kept or not, from :attr:`Collected.bars`) and the updates' queue parts; None: nothing to draw."""
    d = a.data
    if not d.spans:
        return None
    every = {kind: b.bars() for kind, b in d.bars.items() if b.spans}
    if not every:  # spans collected without bars (a hand-built Collected)
        every = {
            kind: b.bars()
            for kind, b in bars_by_kind(
                (SAMPLES if s.kind == "sample" else s.kind, s.start, s.end) for s in d.spans
            ).items()
        }
    t0 = min(float(start[0]) for start, _ in every.values())
    t1 = max(float(end.max()) for _, end in every.values())
    # every update's queue part, sorted as columns (a list of every update's bar would cost 120 MB
    # for the 714k updates of the 10M-line all-tagged benchmark); merged as the picture is drawn
    queued = (
        d.update_frame()
        .filter(pl.col("start").is_not_null() & pl.col("queue").is_not_null() & (pl.col("queue") != 0))
        .select(start=pl.col("start") - t0, width=pl.col("queue") / 1000.0)
        .sort("start", "width")
    )
    return PlotData(
        {kind: every[kind] for kind in (*ROWS, VERIFICATION) if kind in every} | _sample_rows(every),
        (queued.get_column("start").to_numpy(), queued.get_column("width").to_numpy()),
        t0,
        max(t1 - t0, 1e-3) / PLOT_BARS,
        verdict(a),
    )


def _sample_rows(every: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A collector's sample rows (:func:`~prime_rl.analysis.bars.sample_row`) by URL, at most
    :data:`~prime_rl.analysis.timeline_plot.SAMPLE_ROWS`: the servers past the first ones share the last."""
    keys = sorted(filter(is_sample_row, every))
    if len(keys) <= SAMPLE_ROWS:
        return {k: every[k] for k in keys}
    shown, rest = keys[: SAMPLE_ROWS - 1], keys[SAMPLE_ROWS - 1 :]
    merged = merge_intervals(
        np.concatenate([every[k][0] for k in rest]), np.concatenate([every[k][1] for k in rest]), 0.0
    )
    return {k: every[k] for k in shown} | {f"{SAMPLES} {len(rest)} other servers": merged}


def plot_timeline(a: Analysis, path: Path) -> bool:
    """timeline.png (:func:`plot_data`, then :func:`~prime_rl.analysis.timeline_plot.draw`);
    returns False when there is nothing to draw."""
    data = plot_data(a)
    if data is None:
        return False
    draw(data, path)
    return True


def _at_no_step(loose: list[int]) -> dict[str, int] | None:
    """summary.json's staleness above async_level at no step: how many lines, and the highest."""
    return {"lines": len(loose), "max_staleness": max(loose)} if loose else None


def _at_no_step_noted(d: Collected, series: str, title: str) -> str:
    """A series' title, saying how many of its values are at no step (a per-step series' values of
    lines whose step is none or no step number): its count is then no number of steps."""
    loose = d.counts.get(f"{collection.AT_NO_STEP}{series}", 0)
    return f"{title} ({loose} of the {len(d.series[series])} values at no step number)" if loose else title


def _key_numbers(d: Collected) -> list[str]:
    lines = [
        "## Key numbers",
        "",
        "| metric | count | mean | p50 | p95 | p99 | max |",
        "|---|---|---|---|---|---|---|",
    ]
    for series, title in STAT_FILES.values():
        s = d.describe(series)
        if s.get("count"):
            title = _at_no_step_noted(d, series, title)
            lines.append(
                f"| {title} | {s['count']} | {s['mean']:.1f} | {s['p50']:.1f} | {s['p95']:.1f} | {s['p99']:.1f} | {s['max']:.1f} |"
            )
    return lines


def _staleness(d: Collected) -> list[str]:
    """Steps per staleness value, and the async_level they are bounded by."""
    hist, loose = d.staleness_histogram(), d.staleness_at_no_step()
    if not hist and not loose:
        return []
    lines = ["", "## Staleness", ""]
    if hist:
        lines += [
            f"async_level {d.async_level_text()}; steps per staleness of their batch (its oldest sample):",
            "",
        ]
        lines += ["| staleness | steps |", "|---|---|"] + [f"| {s} | {n} |" for s, n in hist.items()]
    else:  # every [rollout] line at no step
        lines.append(f"async_level {d.async_level_text()}; no [rollout] line at a step number.")
    bad = d.staleness_violations()
    if bad:
        above = f"Above async_level: steps {', '.join(str(step) for step, _ in bad)}."
    else:
        above = "None above async_level at a step." if loose else "None above async_level."
    if loose:  # a [rollout] line whose step was refused (or had none): in no step's row, judged all the same
        above += (
            f" At no step number (a [rollout] line whose current_step is none or no step number): {len(loose)} "
            f"line(s) above async_level, staleness up to {max(loose)}."
        )
    lines += ["", above]
    drops = {k[5:]: n for k, n in d.counts.items() if k.startswith("drop.") and n}
    if drops:
        lines += [
            "",
            "Groups not used and generated again ([gen] group.drop): "
            + ", ".join(f"{n} {reason}" for reason, n in sorted(drops.items()))
            + ".",
        ]
    return lines


def _inputs(a: Analysis) -> list[str]:
    """What was parsed, and every threshold with its description."""
    p = a.data.parse
    lines = ["", "## Inputs and thresholds", ""]
    lines.append(
        f"Parsed {p.lines} lines ({p.tagged} tagged, {p.malformed} malformed, {p.bad_values} bad values, "
        f"{p.out_of_order} out of time order, {sum(p.unknown_tags.values())} with unknown tags) from {len(p.files)} file(s) in {p.seconds:.2f} s: "
        f"{', '.join(p.files)}."
    )

    lines.append("")
    for name, info in Thresholds.model_fields.items():
        lines.append(f"- `{name}` = {getattr(a.thresholds, name)}: {info.description}")
    return lines


def summary_md(a: Analysis, has_png: bool) -> str:
    """SUMMARY.md: the primary bottleneck, key numbers, other findings, warnings, next steps, inputs."""
    lines = ["# Bottleneck analysis", ""] + headline(a) + _key_numbers(a.data) + _staleness(a.data)
    lines += sections_after_numbers(a)
    if has_png:
        lines += ["", "## Timeline", "", "![timeline](timeline.png)"]
        if a.data.spans_dropped:
            lines += [
                "",
                f"(the picture draws every span of the run; in timeline.txt: {_dropped_note(a.data)[1:]}",
            ]
    lines += _inputs(a)
    return md_text("\n".join(lines) + "\n")


def to_json(a: Analysis) -> dict[str, Any]:
    """summary.json: findings, warnings, every series' statistics, counts, inputs and the updates."""
    d = a.data
    return {
        "primary": a.primary.to_dict() if a.primary else None,
        "findings": [f.to_dict() for f in a.findings],
        "warnings": list(a.warnings),
        "stats": {k: d.describe(k) for k in d.series},
        "counts": dict(d.counts),
        "run_seconds": d.run_seconds,
        "down_seconds": d.down_seconds,
        "async_level": d.async_level,
        "staleness": {
            "histogram": {str(k): v for k, v in d.staleness_histogram().items()},
            "violations": [{"step": step, "staleness": s} for step, s in d.staleness_violations()],
            "violations_at_no_step": _at_no_step(d.staleness_at_no_step()),
            "async_levels": d.async_levels(),
        },
        "thresholds": {name: getattr(a.thresholds, name) for name in Thresholds.model_fields},
        "parse": {
            "files": d.parse.files,
            "lines": d.parse.lines,
            "tagged": d.parse.tagged,
            "malformed": d.parse.malformed,
            "cut_lines": d.parse.cut_lines,
            "cut_files": d.parse.cut_files,
            "duplicate_files": d.parse.duplicate_files,
            "reordered": d.parse.reordered,
            "undated": {
                log: {"date": p.date, "how": p.how, "fits": list(p.fits)}
                for log, p in d.parse.undated.items()
            },
            "seconds": d.parse.seconds,
        },
        "updates": _updates_json(d),
        "updates_total": len(d.updates),
        "spans_dropped": d.spans_dropped,
        "stages": [asdict(st) for st in stages(d)],
        "servers": server_dicts(d),
        "restarts": [asdict(r) for r in d.restarts],
        "bad_values": {"count": d.parse.bad_values, "examples": d.parse.bad_value_examples},
        "out_of_order": {"count": d.parse.out_of_order, "examples": d.parse.out_of_order_examples},
        "time_goes_back": {"count": d.parse.time_goes_back, "examples": d.parse.time_goes_back_examples},
        "bad_times": {"count": d.parse.bad_times, "examples": d.parse.bad_time_examples},
        "clock_offsets": {
            **{log: {"seconds": off, "updates": n} for log, (off, n) in d.clock_offsets.items()},
            **{log: {"seconds": off, "steps": n} for log, (off, n) in d.parse.clock_offsets.items()},
        },
        "unknown_tags": dict(d.parse.unknown_tags),
        "unknown_tag_lines": dict(d.parse.unknown_tag_lines),
    }


def _updates_json(d: Collected) -> RawJSON:
    """The first :data:`JSON_UPDATES` updates, each its fields and ``send_to_recv_ms`` (what
    :meth:`~prime_rl.analysis.updates.Update.to_dict` gives), written by polars from the columns:
    as records through json, 10,000 updates took 0.05 s of a long run's report, 0.01 s so."""
    n = min(JSON_UPDATES, len(d.updates))
    table = d.updates.frame.head(n) if isinstance(d.updates, UpdateTable) else frame_of(d.updates[:n])
    gaps = d.update_frame().get_column("send_to_recv").head(n).alias("send_to_recv_ms")
    return RawJSON(table.with_columns(gaps).write_json())


def write_report(a: Analysis, out: Path) -> Path:
    """Write every file of the analysis directory ``out``; returns ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    for name, (series, title) in STAT_FILES.items():
        write_text(
            out / name, format_stats(_at_no_step_noted(a.data, series, title), a.data.describe(series))
        )
    write_text(out / "slowest_updates.txt", slowest_updates(a.data))
    write_text(out / "timeline.txt", timeline(a.data))
    write_text(out / "summary.json", _json_top_level_lines(to_json(a)))
    drawn = plot_timeline(a, out / "timeline.png")
    write_text(out / "SUMMARY.md", summary_md(a, drawn))
    return out


def _json_top_level_lines(obj: dict[str, Any]) -> str:
    """JSON with one top-level key per line, each value compact: readable at the top, and written
    by json's C encoder (an indented dump goes through its Python one, seconds for a long run)."""
    items = (f"{json.dumps(k)}: {v if isinstance(v, RawJSON) else dumps(v)}" for k, v in obj.items())
    return "{\n" + ",\n".join(items) + "\n}\n"
