"""SUMMARY.md sections: the verdict, where the time goes, per server, restarts, findings and steps.

The rest of SUMMARY.md (key numbers, staleness, inputs) is in :mod:`~prime_rl.analysis.report`.
"""

from __future__ import annotations

from prime_rl.analysis.analyze import Analysis
from prime_rl.analysis.clock import local_time
from prime_rl.analysis.findings import Finding
from prime_rl.analysis.output import md_cell
from prime_rl.analysis.restarts import HangBefore
from prime_rl.analysis.server_columns import server_columns
from prime_rl.analysis.servers import retry_counts, server_load_section, server_rows
from prime_rl.analysis.stages import (
    BESIDE_SAMPLES,
    BESIDE_STEPS,
    Stage,
    run_limit,
    server_preemptions,
    stages,
)
from prime_rl.analysis.stats import Collected


def _names(f: Finding) -> str:
    return f" (thresholds crossed: {', '.join(f'`{t}`' for t in f.thresholds)})" if f.thresholds else ""


def verdict(a: Analysis) -> str:
    """The run's verdict in a few words, as SUMMARY.md's first line gives it (and the command line
    prints it, COMPARE.md puts the two runs' side by side): its primary bottleneck, that its logs
    hold no tagged timing line (nothing was analysed: no verdict on the run), or that no threshold
    is crossed."""
    if a.primary:
        return a.primary.title
    d = a.data
    if d.nothing_tagged:
        return (
            f"Nothing to analyse: none of the {d.parse.lines} line(s) of the {len(d.parse.files)} file(s) given "
            "is a tagged timing line"
        )
    return "No bottleneck found"


def headline(a: Analysis) -> list[str]:
    """The primary bottleneck and its evidence, or that there is none, with what limits the run."""
    if a.primary:
        return [
            f"**Primary bottleneck: {verdict(a)}.**",
            "",
            f"Evidence: {a.primary.evidence}.{_names(a.primary)}",
            "",
        ]
    d = a.data
    if d.nothing_tagged:
        return [f"**{verdict(a)}.**", ""]
    healthy = []
    if d.stat("queue_ms", "count"):
        healthy.append(
            f"queue_ms median {d.stat('queue_ms', 'p50'):.1f} ms (max {d.stat('queue_ms', 'max'):.1f})"
        )
    if d.stat("rpc_ms", "count"):
        healthy.append(f"rpc_ms median {d.stat('rpc_ms', 'p50'):.1f} ms")
    if d.stat("ckpt_wait_ms", "count"):
        healthy.append(f"ckpt wait median {d.stat('ckpt_wait_ms', 'p50'):.1f} ms")
    limit = run_limit(d, a.thresholds)
    return [
        f"**{verdict(a)}: no threshold is crossed; queue delays and waits are within the thresholds.**",
        "",
        ("Numbers: " + "; ".join(healthy) + ".") if healthy else "No timed events to judge.",
        "",
    ] + ([f"Healthy run: {limit}.", ""] if limit else [])


def where_time_goes(d: Collected) -> list[str]:
    """Every stage's share of the run's wall time."""
    rows = stages(d)
    if not rows or not d.run_ms:
        return []
    lines = [
        "",
        "## Where the time goes",
        "",
        f"Share of the run's {d.run_ms / 1000:.1f} s wall time; "
        + (
            "a collector's samples overlap, so each stage's summed time is divided by the mean number of "
            "samples in flight (its share of the samples' time)"
            + ("; a deferred verify pass's by its verifications in flight." if d.verify_passes else ".")
            if all(s.process in ("collector", "inference") for s in rows)
            else "the orchestrator's and the trainer's stages run side by side, so the columns of the two do "
            "not add up."
        )
        + marker_note(rows),
        "",
        "| process | stage | total s | share | from |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {s.process} | {s.marker}{s.name} | {s.total_ms / 1000:.1f} | {100 * s.share:.1f}% | {s.how} |"
        for s in rows
    ]
    return lines + _server_side_note(d, any(s.process == "inference" for s in rows))


def marker_note(rows: list[Stage]) -> str:
    """What the markers of the rows ``rows`` have mean (a sentence each, with a space before it), as
    SUMMARY.md and COMPARE.md say it."""
    note = ""
    if any(s.within for s in rows):
        note += ' A row marked "(within generation)" is a part of generation\'s time, not added to it.'
    if any(s.beside == BESIDE_STEPS for s in rows):
        note += (
            ' A row marked "(beside the steps)" is time of the orchestrator\'s requests outside generation (its '
            "producer generates ahead while a step waits for weights or updates the servers): it overlaps the "
            "orchestrator's other rows and is not added to them either."
        )
    if any(s.beside == BESIDE_SAMPLES for s in rows):
        note += (
            ' A row marked "(beside the samples)" is wall time in which some request of the collector waited '
            "after a 429 (the union of the waits, while other samples ran): it overlaps the collector's rows of "
            "the samples' time and is not added to them."
        )
    return note


def _server_side_note(d: Collected, rows: bool) -> list[str]:
    """What the inference rows are, and the preemptions, which /metrics gives no time for."""
    note = []
    if rows:
        note.append(
            "The inference rows are the servers' view (from /metrics) of time inside generation, not added to it."
        )
    preempted = server_preemptions(d)
    if preempted is not None and preempted[0]:
        n, minutes = preempted
        note.append(
            f"The servers preempted {n:.0f} requests in {minutes:.1f} min scraped"
            + (f" ({n / minutes:.1f}/min)" if minutes else "")
            + "; /metrics "
            "gives no time for them: a preempted request waits in the queue again (counted in the queue row) and "
            "computes its prefill again inside generation."
        )
    return ["", " ".join(note)] if note else []


def per_server(d: Collected) -> list[str]:
    """One row per server URL: weight updates (failed, retried: :data:`~prime_rl.analysis.updates.RETRY_GAP_MS`;
    those never answered apart, in an ``unanswered`` column when there are any: died waiting for before a
    restart, or still waiting where the logs end),
    retries and failures; the collector's samples, failures and generation time in place of the
    updates' figures for a collector run, beside them when a trio's logs are analysed with it; the
    retries by 429 and other, the orchestrator's and the collector's in columns of their own when
    both are there."""
    rows = server_rows(d)
    if not rows:
        return []

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    columns = server_columns(rows)  # the rule COMPARE.md's per-server figures follow too
    samples, unanswered, updates, apart = columns.samples, columns.unanswered, columns.updates, columns.apart
    head, cells = ["server"], [[r.url] for r in rows]
    if updates:
        head += ["updates", "failed", "retried", "wall_ms p50", "rpc_ms p50", "queue_ms p50"]
        for r, row in zip(rows, cells, strict=True):
            row += [str(r.updates), str(r.updates_failed), str(r.retried)]
            row += [f(r.median(key)) for key in ("wall_ms", "rpc_ms", "queue_ms")]
    if unanswered:
        head.append("unanswered")
        for r, row in zip(rows, cells, strict=True):
            row.append(str(r.unanswered))
    if samples:
        head += ["samples", "failed samples" if updates else "failed", "gen_ms p50"]
        for r, row in zip(rows, cells, strict=True):
            row += [str(r.samples), str(r.samples_failed), f(r.median("gen_ms"))]
    # the orchestrator's and the collector's retries apart when both are in the table (the sum of a
    # trio's 429s and a collector's is neither's rate limit); else whoever's there are
    if apart:
        head += [
            f"{kind} retries ({who})" for who in ("orchestrator", "collector") for kind in ("429", "other")
        ]
    else:
        head += ["429 retries", "other retries"]
    for r, row in zip(rows, cells, strict=True):
        counts = (r.orchestrator_retries, r.sample_retries) if apart else (r.retries,)
        row += [str(n) for c in counts for n in retry_counts(c)]
    lines = ["", "## Per server", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(md_cell, row)) + " |" for row in cells]
    return lines + (["", UNANSWERED_NOTE] if unanswered else [])


UNANSWERED_NOTE = (
    "`unanswered`: weight updates never answered, not in `updates` or the medians: those the orchestrator "
    "died waiting for (sent before its last restart) count in the weight-update stages up to the crash (the "
    "down time after it is no run time), not in slowest_updates.txt; those sent after it (or with no "
    "restart) are still waiting where the logs end (see Stall, when it lasted long enough)."
)


def restarts(d: Collected) -> list[str]:
    """Where the logs hold a restart, and the steps done again (logged before and after it);
    under a restart of the orchestrator, the watchdog's hangs before it (the run hung, was killed and
    resumed); the time in which no process ran, left out of the run (also without a restart: a
    collector's verify pass an hour after its run)."""
    if not d.restarts:
        return ["", _down_time(d)] if d.down_seconds >= DOWN_NOTE_S else []
    lines = ["", "## Restarts", ""]
    for r in d.restarts:
        when = local_time(r.ts, "%Y-%m-%d %H:%M:%S")
        down = f", after {r.down_s:.0f} s without a line" if r.down_s is not None else ""
        if r.reached is None:  # the collector: a collect-rollouts run again, appended to its log
            lines.append(
                f"- {r.process} started again at {when} ({r.where}){down}: its samples in flight are "
                "measured over each run's own time."
            )
            continue
        lines.append(
            f"- {r.process} restarted at {when} ({r.where}){down}: it had reached step {r.reached} and "
            f"resumed at step {r.resumed}; {r.redone} step(s) redone (logged before, then again): their "
            "statistics keep the later run's numbers, the stages count the time of both runs (it is in "
            "the run's wall time)."
        )
        lines += [
            f"  - before it, the launcher's watchdog saw a hang {_hang_time(h)}: {h.said}."
            for h in r.hangs_before
        ]
    if d.down_seconds >= DOWN_NOTE_S:
        lines += ["", _down_time(d)]
    return lines


def _hang_time(h: HangBefore) -> str:
    """When and where a hang before a restart was seen (one with no time: where, and that its place is its position)."""
    if h.ts is None:
        return f"({h.where}; its line has no time, placed by the lines around it)"
    return f"at {local_time(h.ts, '%Y-%m-%d %H:%M:%S')} ({h.where})"


DOWN_NOTE_S = 1.0
"""SUMMARY.md says how much time in which no process ran the run's wall time leaves out when it is
at least this many seconds (less is a gap between two lines, no down time worth a sentence; it is in
summary.json's ``down_seconds`` all the same)."""


def _down_time(d: Collected) -> str:
    """The sentence that says how much time in which no process ran the run's wall time leaves out
    (under 10 s to a tenth of a second, else to the second)."""
    down = d.down_seconds
    return (
        f"The run's wall time leaves out the {down:.{1 if down < 10 else 0}f} s in which no process ran (between a "
        "crash and its resume's first line that is no start-up, as the run's first time is, or when "
        "neither a run of the collector, a verify pass nor the trio was at work): every share of the run is of the "
        "time it ran."
    )


def findings_and_steps(a: Analysis) -> list[str]:
    """Secondary findings (above ``secondary_share``), minor ones, warnings and every next step."""
    rest = a.findings[1:]
    share = a.thresholds.secondary_share
    secondary = [f for f in rest if f.share > share]
    minor = [f for f in rest if f.share <= share]
    lines = []
    if secondary:
        lines += ["", "## Secondary findings", ""]
        lines += [
            f"- **{f.title}**: {f.evidence}.{_names(f)} ({100 * f.share:.0f}% of the run)" for f in secondary
        ]
    if minor:
        lines += [
            "",
            f"## Minor findings (at most {100 * share:.0f}% of the run each: `secondary_share`)",
            "",
        ]
        lines += [f"- **{f.title}**: {f.evidence}.{_names(f)}" for f in minor]
    if a.warnings:
        lines += ["", "## Warnings", ""] + [f"- {w}" for w in a.warnings]
    steps = [s for f in a.findings for s in f.next]
    lines += ["", "## Next steps", ""]
    if steps:
        lines += [f"{i}. {s}" for i, s in enumerate(steps, 1)]
    elif a.data.nothing_tagged:
        lines.append(NOTHING_TAGGED_STEP)
    else:
        lines.append("Nothing to fix; re-run the analysis after changing the load.")
    return lines


NOTHING_TAGGED_STEP = (
    "Give the processes' own logs (orchestrator, inference, trainer, collector; or the run directory): "
    "lines such as `[gen] batch.done dur_ms=...` (the grammar of docs/design.md). The launcher's console "
    "copy of a run holds them too."
)


def sections_after_numbers(a: Analysis) -> list[str]:
    """Everything SUMMARY.md lists between the key numbers and the timeline."""
    d = a.data
    return where_time_goes(d) + per_server(d) + server_load_section(d) + restarts(d) + findings_and_steps(a)
