"""Stalls: the logs end (or go silent) inside a wait; say who waited on whom, since when, and what
the other side's last line was.

Four waits are recognised: the orchestrator waiting for ``weights/step_N`` (a ``[ckpt]
wait.start`` with no ``wait.done``: the trainer never wrote it), a weight update with no answer
(``client.send`` without ``client.done``/``client.error``: the server never finished its rpc),
a generation batch that never ended (``[gen] batch.start`` without ``batch.done``: the trainer
waits for its rollouts), and the trainer waiting for rollouts no batch is making (``[train]
wait.start`` without ``wait.done``, no batch open: the orchestrator died between batches, or
hangs). A wait counts as a stall when it lasted ``stall_min_s`` to the end of the logs (the last line of any file), and three times the median of its kind (a run whose
steps take minutes waits that long every step), or when the other side fell silent before it
began and stayed silent ``stall_min_s`` and three times its own pace (the median time between two
of its step lines; the orchestrator's for a server, whose lines come once a step): logs read while
the run goes on end inside ordinary waits, with the other side at work and silent as long as it is
every step (a trainer computing 120 s a step is silent 110 s while the orchestrator waits 10 s of
its usual 20). Waits from before a restart of the orchestrator are over. A server log on a clock
of its own is read on the orchestrator's (:mod:`~prime_rl.analysis.clock_offsets`). A stall is
ranked first: a run that hangs has no other bottleneck that matters at its end.

The launcher's watchdog's ``[hang]`` lines: a hang the run did not go on after is :func:`hang`,
ranked first as a stall; one after which the processes it named made progress again is a
:func:`pause`, ranked by its time.
"""

from __future__ import annotations

import math

import polars as pl

from prime_rl.analysis.clock import local_time
from prime_rl.analysis.findings import Finding
from prime_rl.analysis.hangs import Pause
from prime_rl.analysis.log_files import label_for, log_of
from prime_rl.analysis.restarts import hang_said
from prime_rl.analysis.stats import Collected
from prime_rl.analysis.tagged import Event
from prime_rl.analysis.thresholds import Thresholds
from prime_rl.analysis.updates import Update, of_the_steps, unanswered


def _clock(ts: float | None) -> str:
    return local_time(ts)


def _moved(d: Collected, path: object, ts: float | None) -> float | None:
    """A time of file ``path`` on the orchestrator's clock: a server log on a clock of its own moved
    by its offset (the trainer's were moved as they were read)."""
    off = d.clock_offsets.get(log_of(str(path))) if path is not None and ts is not None else None
    return ts - off[0] if off is not None else ts  # type: ignore[operator]


def _last_lines(d: Collected) -> dict[str, tuple[float | None, str]]:
    """Each file's last line with its time on the orchestrator's clock (:func:`_moved`)."""
    return {path: (_moved(d, path, ts), text) for path, (ts, text) in d.parse.last_lines.items()}


def logs_end(d: Collected) -> float | None:
    """The latest timestamp of any line (tagged or not) of any file."""
    stamps = [ts for ts, _ in _last_lines(d).values() if ts is not None]
    # each source's last tagged line
    stamps += [_moved(d, e.path, e.ts) for e in d.last_events.values() if e.ts is not None]
    return max(stamps) if stamps else None  # type: ignore[type-var]


def last_line(d: Collected, process: str, path: str | None = None) -> tuple[float | None, str] | None:
    """The last line of a process's log files (the latest when there are several; ``path``'s
    when it is one of them), with its time."""
    lines = _last_lines(d)
    if path is not None and path in lines:
        return lines[path]
    found = [v for p, v in lines.items() if label_for(p) == process]
    if not found:
        return None
    return max(found, key=lambda v: v[0] if v[0] is not None else float("-inf"))


def _other_side(d: Collected, process: str, path: str | None = None) -> tuple[float | None, str]:
    """(time, words) of the other process's last line (of ``path``, its log file, when known), or
    (None, that its log was not given)."""
    last = last_line(d, process, path)
    if last is None:
        return None, f"no {process} log was given"
    ts, text = last
    when = f", at {_clock(ts)}" if ts is not None else " (no time on it)"
    return ts, f"the {process}'s last line{when}: `{text[:200]}`"


def _pace(d: Collected, process: str) -> tuple[float, str]:
    """How long ``process`` is silent as a rule, and whose pace that is: its median time between two
    step lines (:attr:`Collected.step_seconds`); a server's lines (once a step), and a process with
    too few steps, go by the orchestrator's (the run's pace), else the trainer's; 0.0: none known."""
    for whose in (process, "orchestrator", "trainer"):
        if d.step_seconds.get(whose):
            return d.step_seconds[whose], "its" if whose == process else f"the {whose}'s"
    return 0.0, "its"


def _is_stall(
    since: float | None,
    other: float | None,
    end: float | None,
    th: Thresholds,
    typical_ms: float | None = None,
    other_pace: tuple[float, str] = (0.0, "its"),
    other_process: str = "other side",
    kind: str = "wait",
) -> str | None:
    """Why a wait open since ``since`` is a stall where the logs end at ``end`` (the other side's
    last line at ``other``), in words with the numbers crossed; None: it is none. It lasted
    ``stall_min_s`` and three times ``typical_ms`` (the median of its ``kind``), or the other side
    fell silent before it began and stayed silent ``stall_min_s`` and three times ``other_pace``
    (its own pace, and whose it is: :func:`_pace`)."""
    if since is None or end is None:
        return None
    least = max(th.stall_min_s, 3 * (typical_ms or 0.0) / 1000.0)
    if end - since >= least:
        return (
            f"{end - since:.0f} s to the end of the logs (at least stall_min_s {th.stall_min_s:g} s and 3x the "
            f"median {kind}, {(typical_ms or 0.0) / 1000.0:.1f} s)"
        )
    pace, whose = other_pace
    silent = max(th.stall_min_s, 3 * pace)
    if other is not None and other < since and end - other >= silent:
        return (
            f"{end - since:.0f} s to the end of the logs, the {other_process} silent since before it: "
            f"{end - other:.0f} s (at least stall_min_s {th.stall_min_s:g} s and 3x {whose} median time "
            f"between steps, {pace:.1f} s)"
        )
    return None


def stall(d: Collected, th: Thresholds) -> Finding | None:
    """The logs end inside a wait (see the module docstring); None when they do not."""
    end = logs_end(d)
    found = (
        _ckpt_stall(d, th, end)
        or _update_stall(d, th, end)
        or _batch_stall(d, th, end)
        or _rollout_stall(d, th, end)
    )
    if found is None:
        return None
    title, evidence, since = found
    return Finding(
        kind="stall",
        title=title,
        evidence=evidence,
        share=min(1.0, ((end or 0) - (since or 0)) * 1000.0 / d.run_ms) if d.run_ms else 1.0,
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
    why = _is_stall(since, other_ts, end, th, d.stat("ckpt_wait_ms", "p50"), _pace(d, "trainer"), "trainer")
    if why is None:
        return None
    written = d.last_write.fields.get("step") if d.last_write else None
    wrote = f"the last weights it wrote: step {written}" if d.last_write else "no weight write in its log"
    if _step(written) is not None and _step(target) is not None and _step(written) >= _step(target):
        title = (
            f"Stall: the orchestrator waits for weights step {target}, which the trainer wrote; the "
            "orchestrator does not see it (another output_dir, or a shared filesystem that does not show the mark)"
        )
    else:
        title = f"Stall: the orchestrator waits for weights step {target}, which the trainer never wrote"
    return (
        title,
        f"waiting since {_clock(since)} ({ev.where()}), {why}; {other}; {wrote}",
        since,
    )


def _step(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def first_unanswered(d: Collected) -> Update | None:
    """The first sent of the steps' weight updates sent and never answered (:func:`unanswered`; not
    the health loop's) after the orchestrator's last restart (an update in flight when it died is
    over), the first in order of equals; None: there is none."""
    restarted = d.orchestrator_restarted
    waiting = (
        d.update_frame()
        .with_row_index("i")
        .filter(unanswered() & of_the_steps())
        .filter(pl.col("send_ts") >= restarted if restarted is not None else pl.lit(True))
        .sort("send_ts", "i")
    )
    return d.updates[waiting.item(0, "i")] if waiting.height else None


def _update_stall(d: Collected, th: Thresholds, end: float | None) -> tuple[str, str, float | None] | None:
    u = first_unanswered(d)
    if u is None:
        return None
    other_ts, other = _other_side(d, "inference", u.server)
    pace = _pace(d, "inference")
    why = _is_stall(u.send_ts, other_ts, end, th, d.stat("wall_ms", "p50"), pace, "server", "update")
    if why is None:
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
        f"sent at {_clock(u.send_ts)}, {why}; {server}; {other}",
        u.send_ts,
    )


def _batch_stall(d: Collected, th: Thresholds, end: float | None) -> tuple[str, str, float | None] | None:
    ev = d.open_batch
    if ev is None:
        return None
    step = ev.fields.get("step", "?")
    title = f"Stall: generation of step {step} never finished; the trainer waits for its rollouts"
    return _open_since(d, th, end, ev, "inference", "gen_dur_ms", title, "batch started at", "batch")


def _rollout_stall(d: Collected, th: Thresholds, end: float | None) -> tuple[str, str, float | None] | None:
    """The trainer waits for rollouts no batch is making: its ``[train] wait.start`` is open where
    its log ends and the orchestrator has no batch open (it died writing them, or hangs between
    batches; a batch open is :func:`_batch_stall`'s)."""
    ev = d.train_wait
    if ev is None or d.open_batch is not None:
        return None
    step = ev.fields.get("step", "?")
    title = f"Stall: the trainer waits for the rollouts of step {step}, which the orchestrator never wrote"
    return _open_since(
        d,
        th,
        end,
        ev,
        "orchestrator",
        "train_wait_ms",
        title,
        "waiting since",
        "wait",
        "no batch is being generated; ",
    )


def _open_since(
    d: Collected,
    th: Thresholds,
    end: float | None,
    ev: Event,
    other_process: str,
    typical: str,
    title: str,
    began: str,
    kind: str,
    note: str = "",
) -> tuple[str, str, float | None] | None:
    """A wait open since ``ev`` as a stall (:func:`_is_stall`, the median of series ``typical`` its
    kind's wait), with ``title``, or None: the evidence says since when, how long to the logs'
    end, ``note`` and ``other_process``'s last line."""
    other_ts, other = _other_side(d, other_process)
    pace, name = _pace(d, other_process), "server" if other_process == "inference" else other_process
    why = _is_stall(ev.ts, other_ts, end, th, d.stat(typical, "p50"), pace, name, kind)
    if why is None:
        return None
    return (title, f"{began} {_clock(ev.ts)} ({ev.where()}), {why}; {note}{other}", ev.ts)


def hang(d: Collected, th: Thresholds) -> Finding | None:
    """The ``rl`` launcher's watchdog saw no progress (``[hang] detected``) and the run did not go on
    after it (one it went on after is a :func:`pause`): who waited on whom."""
    if not d.hangs:
        return None
    first = d.hangs[0]
    said = f"{len(d.hangs)} time(s), first at {_clock(first.ts)} ({first.where()}): {hang_said(first)}"
    untold = next((h for h in d.hangs_untold if h.event is first), None)
    if untold is not None:
        said += _untold(untold.earliest, untold.latest)
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


def _untold(earliest: float, latest: float) -> str:
    """Why a ``[hang]`` line with no time, between ``earliest`` and ``latest`` (the times around it in
    its file), is taken as a hang: nothing tells in which silence of the run it came."""
    if not math.isfinite(earliest) and not math.isfinite(latest):
        where = "no line around it in its file has a time, so nothing tells"
    else:
        before = _clock(earliest) if math.isfinite(earliest) else "none before it"
        after = _clock(latest) if math.isfinite(latest) else "none after it"
        where = f"the times around it in its file ({before} to {after}) do not tell"
    return (
        f"; its line has no time, and {where} in which silence of the run it came (one as long as the "
        "silent_s it says): whether the run went on after it is not known, so it is taken as a hang"
    )


def pause(d: Collected, th: Thresholds) -> Finding | None:
    """The watchdog saw no progress (``[hang] detected``), and then every process it named made
    progress again within its run: the run paused and went on (:attr:`Collected.pauses`). Its share
    is the time from the last progress before the hang (in start-up, with none before it in its
    run: from the run's start) to the first after it (each pause once), of the run, net of down time
    and of the start-up the run's time leaves out (:attr:`Collected.paused_seconds`; at most 1.0);
    ranked by it, as any finding (a run that ends hung is :func:`hang`, ranked first). A pause none
    of whose time is run time (:attr:`~prime_rl.analysis.hangs.Pause.costs_nothing`: in start-up,
    which the run's time leaves out) is no finding: the warnings note it
    (:func:`~prime_rl.analysis.run_warnings.free_pauses`)."""
    pauses = [p for p in d.pauses if not p.costs_nothing]
    if not pauses:
        return None
    spans = sorted({(p.start, p.end) for p in pauses})
    paused = d.paused_seconds
    if paused is None:  # their time in the run's not known: their union
        paused, reach = 0.0, -math.inf
        for start, end in spans:
            paused += max(end - max(start, reach), 0.0)
            reach = max(reach, end)
    longest = max(pauses, key=lambda p: (p.counted, p.seconds))
    step = f" after step {longest.step}" if longest.step is not None else ""
    more = f"{len(spans)} pauses, {paused:.0f} s in all; the longest: " if len(spans) > 1 else ""
    went_on = f"; then the run went on, to step {longest.reached}" if longest.reached is not None else ""
    run_s = d.run_ms / 1000.0 if d.run_ms else None
    if longest.start_up:
        run = f"the run resumed at step {longest.resumed}" if longest.resumed is not None else "the run"
        title = (
            f"Pause in start-up: no progress for {longest.seconds:.0f} s from the start of {run} to its first "
            "progress, then the run went on (the launcher's watchdog saw a hang)"
        )
        since = f"from {_clock(longest.start)} (the start of {run}, no progress before it)"
    else:
        title = (
            f"Pause: no progress for {longest.counted:.0f} s{step}, then the run went on "
            "(the launcher's watchdog saw a hang)"
        )
        since = f"from {_clock(longest.start)} (the last progress before it)"
    net = ""
    if longest.counted < longest.seconds - 0.5:  # start-up or down time the run's time leaves out
        of_run = f" of {run_s:.1f} s" if run_s is not None else ""
        net = f", {longest.counted:.0f} s of it in the run's time{of_run} (which leaves out start-up and down time)"
    first = (
        (
            "In start-up: look at what loaded slowly before the first step (the servers' and the trainer's logs: a "
            "model download, compilation, a checkpoint load); the watchdog allows first_step_s of silence there.",
        )
        if longest.start_up
        else ()
    )
    return Finding(
        kind="pause",
        title=title,
        evidence=(
            f"{more}{since} to {_clock(longest.end)} (the first after it), {longest.seconds:.0f} s{step}{net}; "
            f"the watchdog's [hang] line {_hang_at(longest)}: {hang_said(longest.hang)}{went_on}"
        ),
        share=min(1.0, paused * 1000.0 / d.run_ms) if d.run_ms else 0.0,
        next=first
        + (
            "Read the Python stacks each process dumped into its log right after the [hang] line: where it was during the pause.",
            "The side waited on (after '>' in waits) is where to look first; a pause that comes back "
            "(a checkpoint save, a slow shared filesystem, a server restarting) costs its share every time.",
        ),
        thresholds=(),
    )


def _hang_at(p: Pause) -> str:
    """When and where a pause's ``[hang]`` line is: its time, or for one with none its placement."""
    if p.hang.ts is not None or p.placed is None:
        return f"at {_clock(p.hang.ts)} ({p.hang.where()})"
    earliest, latest = p.placed
    return (
        f"({p.hang.where()}; its line has no time: placed between {_clock(earliest)} and {_clock(latest)} (the times "
        "around it in its file, within its run), in the only silence there as long as the silent_s it says)"
    )
