"""Warnings: things worth knowing that are not bottlenecks (staleness, truncation, missing or bad lines).

One function per warning, each returning its sentence or None; :data:`WARNINGS` is the order
SUMMARY.md lists them in. See ``bottleneck_logs/README.md`` for what to do about each.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import polars as pl

from prime_rl.analysis.clock import local_time
from prime_rl.analysis.clock_offsets import SLACK_S, Offsets
from prime_rl.analysis.restarts import hang_said
from prime_rl.analysis.servers import stale_said, stale_servers
from prime_rl.analysis.stages import update_critical
from prime_rl.analysis.stats import CLIPPED_NAMED, REBUILT_MEDIANS, REBUILT_REFUSED, REPEATED, Collected
from prime_rl.analysis.thresholds import Thresholds

Check = Callable[[Collected, Thresholds], str | None]


def staleness_above_async_level(d: Collected, th: Thresholds) -> str | None:
    """[rollout] staleness above the async_level of the run it is in (when it is known), with every
    step; lines at no step (their current_step none or no step number) counted apart, as the
    Staleness section does."""
    bad, loose = d.staleness_violations(), d.staleness_at_no_step()
    level = d.async_level_text()
    apart = (
        f"{len(loose)} [rollout] line(s) at no step number (current_step none or no step number), "
        f"staleness up to {max(loose, default=0)}"
    )
    if bad:
        steps = ", ".join(f"{step} ({s})" for step, s in bad[:20]) + (
            f" and {len(bad) - 20} more" if len(bad) > 20 else ""
        )
        also = f"; and {apart}" if loose else ""
        return f"staleness above async_level {level} at {len(bad)} step(s): {steps} (step (staleness)){also}"
    if loose:
        return f"staleness above async_level {level} at no step: {apart}"
    return None


def truncation(d: Collected, th: Thresholds) -> str | None:
    """Mean [rollout] trunc_pct above ``trunc_pct_warn`` (above ``trunc_pct_high`` it is a finding instead)."""
    trunc = d.series["trunc_pct"]
    if trunc and th.trunc_pct_high >= sum(trunc) / len(trunc) > th.trunc_pct_warn:
        return (
            f"mean trunc_pct {sum(trunc) / len(trunc):.1f}% > {th.trunc_pct_warn:.0f}%: "
            "completions hit max_tokens; raise it or expect clipped answers"
        )
    return None


def missing_weight_lines(d: Collected, th: Thresholds) -> str | None:
    """No weight update at all, or none with its server side (no inference log given); not for a
    collector run, which never updates weights."""
    if d.is_collector_run or d.nothing_tagged:  # no tagged line at all: the headline says so
        return None
    if not d.updates:
        return (
            "no [weights] lines: check that async_level is set right, that the trainer writes checkpoints "
            "(progress.step > 0), that the orchestrator reaches the async barrier (step - ckpt_step > async_level), "
            "and that the orchestrator log (and, for server.recv, the inference log) was given"
        )
    server_side = d.update_frame().select(
        pl.any_horizontal(pl.col("server", "recv_ts", "server_rpc").is_not_null()).any()
    )
    if not server_side.item():
        return "no server-side [weights] lines: pass the inference log too to split queue time into client and server parts"
    return None


def malformed_lines(d: Collected, th: Thresholds) -> str | None:
    """Tagged lines the parser had to skip (malformed, or a file's last line cut short), values that
    are no number, lines left out or kept out of time order, a collector's lines stamped before their
    run's start (each named by file:line), lines with a tag the analyzer does not read, and compressed
    files it could not read to the end."""
    p = d.parse
    parts = []
    if p.malformed > len(p.cut_lines):
        parts.append(
            f"{p.malformed - len(p.cut_lines)} malformed tagged line(s) skipped "
            f"(e.g. {'; '.join(p.malformed_examples[:3])})"
        )
    if p.cut_lines:
        parts.append(
            f"{len(p.cut_lines)} tagged line(s) cut short skipped, none of their values used: the last line of "
            "a file with no newline after it (every line is written with one: a log copied while it was "
            f"written, or a compressed log cut short) ({'; '.join(p.cut_lines[:3])})"
        )
    if p.bad_values:
        parts.append(
            f"{p.bad_values} value(s) not read: no number, a duration (a field that ends in _ms) below 0, a "
            "trunc_pct outside 0-100, a staleness below 0, a collector sample's queue_ms, gen_ms or verify_ms "
            "longer than its dur_ms, or in a step field no step number of 1-8 digits "
            f"(the line's other values are kept, at no step number) (e.g. {'; '.join(p.bad_value_examples[:3])})"
        )
    if p.out_of_order:
        parts.append(
            f"{p.out_of_order} tagged line(s) left out: more than {th.time_jump_s:g} s from the lines before and after "
            f"them in their file, which agree (a wrong clock or a corrupt date; `time_jump_s`) "
            f"(e.g. {'; '.join(p.out_of_order_examples[:3])})"
        )
    if p.bad_times:
        parts.append(
            f"{p.bad_times} collector line(s) stamped more than a second before their run's [collect] run.start "
            "(a clock set back after it): their time is not used, their values are "
            f"(e.g. {'; '.join(p.bad_time_examples[:3])})"
        )
    if p.time_goes_back:
        parts.append(
            f"time goes back by more than {th.time_jump_s:g} s in {p.time_goes_back} place(s) (logs joined out of "
            f"order, or a clock set back): the lines are kept and the run counts from its earliest to its latest "
            f"line (e.g. {'; '.join(p.time_goes_back_examples[:3])})"
        )
    if p.unknown_tags:
        tags = ", ".join(
            f"[{t}] x{n}" + (f" (first at {p.unknown_tag_lines[t]})" if t in p.unknown_tag_lines else "")
            for t, n in p.unknown_tags.most_common(10)
        )
        parts.append(f"{sum(p.unknown_tags.values())} line(s) with a tag the analyzer does not read: {tags}")
    if p.duplicate_files:
        parts.append(
            f"{len(p.duplicate_files)} file(s) read once, each the same log as another given, their lines not read "
            f"twice ({'; '.join(p.duplicate_files[:3])})"
        )
    if p.reordered:
        parts.append(
            f"{len(p.reordered)} process(es)' logs read in the order of their dated lines, not as given (a log "
            "that begins earlier, or ends before another begins, is read first: the later lines first would "
            f"read as a restart) ({'; '.join(p.reordered[:3])})"
        )
    if p.cut_files:
        parts.append(
            f"{len(p.cut_files)} compressed file(s) cut short or corrupt, read up to where they break "
            f"({'; '.join(p.cut_files[:3])})"
        )
    return "; ".join(parts) or None


def clock_offsets(d: Collected, th: Thresholds) -> str | None:
    """Server logs (:mod:`~prime_rl.analysis.clock_offsets`) and trainer logs
    (:mod:`~prime_rl.analysis.trainer_clock`) on a clock of their own (not a log without dates off
    by whole days: its date, :func:`undated_logs`)."""
    parts = []
    server = {log: v for log, v in d.clock_offsets.items() if _days_off(d, log, v[0]) is None}
    trainer = {log: v for log, v in d.parse.clock_offsets.items() if _days_off(d, log, v[0]) is None}
    if server:
        parts.append(
            "a server log's clock is off the orchestrator's: its weight updates were received before they were "
            f"sent or finished after the client had its reply: {_offsets(server, 'update')} (another "
            "time zone, or a clock not synced). Its [weights] lines are joined, and the run's length measured, "
            "on the orchestrator's clock; its other lines keep their own times"
        )
    if trainer:
        parts.append(
            "a trainer log's clock is off the orchestrator's: it wrote checkpoints, or finished the steps they "
            "hold, after the orchestrator had them, or read rollouts before they were written: "
            f"{_offsets(trainer, 'step')} "
            "(another time zone, or a clock not synced). Its times are read on the orchestrator's clock"
        )
    return "; ".join(parts) or None


_DAY_S = 86400.0


def _days_off(d: Collected, log: str, off: float) -> int | None:
    """The whole days by which a log without dates (a console capture) is off the orchestrator's
    clock, give or take what a clock in step is (``SLACK_S``): the date it was placed on is not its
    own. None: it has dates, or it is off by another amount (a clock of its own)."""
    if log not in d.parse.undated:
        return None
    days = round(off / _DAY_S)
    return days if days and abs(off - days * _DAY_S) <= SLACK_S else None


_HOW = {
    "name": "the date in its name",
    "overlap": "the one date on which its times overlap the other logs'",
    "none": "the earliest date of the logs: its times overlap the other logs' on no date",
}


def undated_logs(d: Collected, th: Thresholds) -> str | None:
    """Logs whose times have no date (console captures, :class:`~prime_rl.analysis.clock.Placed`)
    whose date is a guess (several dates of the other logs fit their times, or none does), or which
    their weight updates or steps put on another date (their lines are read there: not a clock off)."""
    parts = []
    for log, place in d.parse.undated.items():
        how = (
            _HOW.get(place.how)
            or f"the first of the dates its times fit in the other logs ({', '.join(place.fits)})"
        )
        moved = {**d.clock_offsets, **d.parse.clock_offsets}.get(log)
        days = _days_off(d, log, moved[0]) if moved else None
        if days is not None:
            by = "weight updates" if log in d.clock_offsets else "steps"
            there = (
                "its [weights] lines are joined, and the run's length measured"
                if by[0] == "w"
                else "its times are read"
            )
            on = (datetime.strptime(place.date, "%Y-%m-%d") - timedelta(days=days)).date().isoformat()
            parts.append(
                f"{log} has times without a date (a console capture), placed on {place.date} ({how}); its {by} "
                f"put it {abs(days)} day(s) {'earlier' if days > 0 else 'later'}, on {on}: {there} there (a date "
                "the log does not carry, not a clock off)"
            )
        elif place.how in ("several", "none"):
            parts.append(
                f"{log} has times without a date (a console capture), placed on {place.date}, {how}: its times may "
                "be whole days off (nothing else places it; name a capture with its date, as in "
                "inference_$(date +%Y%m%d_%H%M%S).log)"
            )
    return "; ".join(parts) or None


def _offsets(offsets: Offsets, unit: str) -> str:
    return "; ".join(
        f"{log} is {abs(off):.0f} s {'ahead of' if off > 0 else 'behind'} it (measured on {n} {unit}(s))"
        for log, (off, n) in offsets.items()
    )


def failed_updates(d: Collected, th: Thresholds) -> str | None:
    """Weight updates that ended in [weights] client.error, and those that were retried, by server;
    a server whose last updates failed kept older weights (:func:`~prime_rl.analysis.servers.stale_servers`)."""
    frame = d.update_frame()
    failed = int(frame.get_column("failed").sum())
    parts = []
    if failed:
        where = (
            frame.filter("failed")
            .group_by("url", maintain_order=True)
            .len()
            .sort("len", descending=True)
            .rows()
        )
        by_server = ", ".join(f"{n} on {url or 'a server not named'}" for url, n in where)
        stale = stale_said(stale_servers(d))
        parts.append(
            f"{failed} weight update(s) failed (client.error; {by_server})" + (f": {stale}" if stale else "")
        )
    retried = (
        frame.filter("retried").group_by("url", maintain_order=True).len().sort("len", descending=True).rows()
    )
    if retried:
        by_server = ", ".join(f"{n} on {url or 'a server not named'}" for url, n in retried)
        parts.append(
            f"{sum(n for _, n in retried)} weight update(s) were retried ({by_server}): their wall time counts "
            "from the first attempt, the failed ones and the waits between them included (the retry warnings "
            "in the orchestrator's log say why each attempt failed)"
        )
    return "; ".join(parts) or None


def failed_samples(d: Collected, th: Thresholds) -> str | None:
    """The offline collector's samples that failed ([collect] rollout.failed), by server."""
    failed = d.counts.get("collect.rollout.failed", 0)
    if not failed:
        return None
    by_url = sorted(
        ((c["failed"], url) for url, c in d.server_counts.items() if c.get("failed")), reverse=True
    )
    where = f": {', '.join(f'{n} on {url}' for n, url in by_url)}" if by_url else ""
    done = d.counts.get("collect.rollout.done", 0)  # the collector's (completions holds the trio's too)
    return (
        f"{failed} of {failed + done} sample(s) failed ([collect] rollout.failed){where}; their errors are in "
        "the collector's OUT_failures.jsonl, and its next run retries them"
    )


def unplaced_hangs(d: Collected, th: Thresholds) -> str | None:
    """The watchdog's [hang] lines with no time that a restart of the orchestrator may lie before or
    after (:func:`~prime_rl.analysis.hangs.place_hangs`): neither this run's hang nor a restart's."""
    if not d.hangs_unplaced:
        return None
    where = ", ".join(h.where() for h in d.hangs_unplaced[:5])
    more = f" and {len(d.hangs_unplaced) - 5} more" if len(d.hangs_unplaced) > 5 else ""
    return (
        f"{len(d.hangs_unplaced)} [hang] line(s) of the launcher's watchdog have no time and cannot be placed "
        f"among the runs these logs hold ({where}{more}; the first: {hang_said(d.hangs_unplaced[0])}): the lines "
        "around them in their file do not tell whether the run hung before a restart of the orchestrator or "
        "after its last one, so they are neither a finding of this run nor listed with a restart"
    )


def silences_without_run_start(d: Collected, th: Thresholds) -> str | None:
    """In logs without run.start lines: the times in which the orchestrator and the trainer were both
    silent (:attr:`Collected.silences`) for ``silence_pace_ratio`` times the slower one's pace and
    at least ``stall_min_s``: a restart there cannot be told from a pause; they count as run time."""
    pace = max(d.step_seconds.values(), default=None)
    if pace is None or not d.silences:
        return None
    bar = max(th.silence_pace_ratio * pace, th.stall_min_s)
    long = [(a, b) for a, b in d.silences if b - a >= bar]
    if not long:
        return None
    listed = ", ".join(f"{b - a:.0f} s from {local_time(a, '%Y-%m-%d %H:%M:%S')}" for a, b in long[:5])
    more = f" and {len(long) - 5} more" if len(long) > 5 else ""
    return (
        f"{len(long)} time(s) in which neither the orchestrator nor the trainer wrote a line, each of at least "
        f"{bar:.0f} s (`silence_pace_ratio` "
        f"{th.silence_pace_ratio:g} x the steps' pace of {pace:.1f} s, and `stall_min_s`): {listed}{more}. These "
        "logs have no run.start lines (processes older than them): a restart there (a crash and a resume that "
        "redid no step, or whose start-up outlasted the crash) cannot be told from a pause, and the time counts "
        "as run time"
    )


def free_pauses(d: Collected, th: Thresholds) -> str | None:
    """The watchdog's hangs the run went on after whose pause has no run time
    (:attr:`~prime_rl.analysis.hangs.Pause.costs_nothing`: in start-up, which the run's time leaves
    out): no finding (:func:`~prime_rl.analysis.stalls.pause`), but worth knowing: how long the
    start-up took."""
    free = [p for p in d.pauses if p.costs_nothing]
    if not free:
        return None
    said = []
    for p in sorted(free, key=lambda p: p.start):
        run = f"the run resumed at step {p.resumed}" if p.resumed is not None else "the run"
        where = f"from the start of {run}" if p.start_up else f"from {local_time(p.start)}"
        said.append(
            f"no progress for {p.seconds:.0f} s {where} to its first progress at {local_time(p.end)} "
            f"({p.hang.where()}: {hang_said(p.hang)})"
        )
    return (
        f"the launcher's watchdog saw {len(free)} hang(s) the run went on after, none of whose time is run time "
        f"(start-up, which the run's time leaves out: the servers and the trainer loading), so no finding: "
        + "; ".join(said)
    )


def clipped_to_the_run(d: Collected, th: Thresholds) -> str | None:
    """Series of one-at-a-time durations whose sum passes the run's time, each clipped to it
    (:data:`~prime_rl.analysis.stats.ONE_AT_A_TIME`), and the weight updates' (one after another in the
    orchestrator: :func:`~prime_rl.analysis.stages.update_critical`); the orchestrator's durations that
    reach back over the one before them (:attr:`~prime_rl.analysis.stats.Collected.overlapping`)."""
    clipped = d.clipped()
    updates = update_critical(d).summed if d.updates else 0.0
    if updates > d.run_ms * (1 + CLIPPED_NAMED):
        clipped.append(("weight updates (wall_ms at the slowest server)", updates))
    parts = []
    if overlapped := d.overlapped():
        said = ", ".join(f"{key} x{n}" for key, n in overlapped)
        parts.append(
            f"durations that reach back over the end of the one before them, each taken one at a time, so each "
            f"is counted from that end in the stages and findings: {said} (e.g. {'; '.join(d.overlapping[:3])}; "
            "the values are kept in their statistics; a log whose clock stepped back reads so too)"
        )
    if refused := {
        k[len(REBUILT_REFUSED) :]: ms for k, ms in d.counts.items() if k.startswith(REBUILT_REFUSED)
    }:
        said = ", ".join(
            f"{kind} {ms / 1000:.3g} s before the logs' first line" for kind, ms in refused.items()
        )
        parts.append(
            f"the older log format's first batch or step, rebuilt from its done line, began more than "
            f"{REBUILT_MEDIANS:g} times its durations' median before the logs' first line ({said}): the run begins "
            "at the first line instead (a duration no run can have)"
        )
    if clipped:
        said = ", ".join(
            f"{key} {ms / 1000:.1f} s" if ms < 1e9 else f"{key} {ms / 1000:.3g} s" for key, ms in clipped
        )
        parts.append(
            f"durations that add up to more than the run's {d.run_ms / 1000:.1f} s, each taken one at a time, so "
            f"each sum is clipped to the run's time in the stages and findings: {said} (durations that overlap, "
            "which no run can have; the values are kept in their statistics)"
        )
    return "; ".join(parts) or None


def repeated_steps(d: Collected, th: Thresholds) -> str | None:
    """A step's line logged again in the same run (no restart between): its per-step values are the
    last line's (:data:`~prime_rl.analysis.stats.REPEATED`)."""
    counts = {k[len(REPEATED) :]: n for k, n in d.counts.items() if k.startswith(REPEATED)}
    if not counts:
        return None
    said = ", ".join(f"{key} x{n}" for key, n in counts.items())
    return (
        f"{sum(counts.values())} per-step value(s) logged again for a step the same run had logged (no restart "
        f"between): the last line's value is kept: {said} (e.g. {'; '.join(d.repeated_steps[:3])})"
    )


WARNINGS: tuple[Check, ...] = (
    staleness_above_async_level,
    truncation,
    missing_weight_lines,
    malformed_lines,
    clipped_to_the_run,
    repeated_steps,
    clock_offsets,
    undated_logs,
    failed_updates,
    failed_samples,
    unplaced_hangs,
    silences_without_run_start,
    free_pauses,
)
