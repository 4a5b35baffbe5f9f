"""Where the time goes: every stage's share of the run's wall time, and what limits a healthy run.

The orchestrator's loop runs, per step: wait for weights (``[ckpt] wait``), update every server
(``[weights]``, the slowest server sets the pace), generate the batch (``[gen] batch.done
dur_ms``, which covers scoring too). The trainer runs beside it: wait for rollouts, compute,
publish. Stages of the two processes overlap in time, so the shares of the two columns do not
add up to one.

Scoring is compared like with like: ``[verify] batch.done dur_ms`` (or ``cpu_ms``) is scoring
time summed over concurrent workers, so its wall-time part of the batch is estimated as
``tail_ms`` when the line carries it (the batch's end spent only on scoring), else
``cpu_ms / workers`` when the worker count is known (``workers=`` or the run's config), else the
summed time over the fewest workers the batches allow (a step whose scoring sums to 4.3x its batch
had at least 5; one when none sums to more than its batch): an upper bound, never more than the batch.

Time spent inside the generation batches is part of the generation row, not beside it: the
environment's (multi-turn episodes run side by side within the batches, so their summed ``env_ms``
is divided by the episodes in flight) and the orchestrator's waits after a 429 that lie in them.
Those rows are marked ``within="generation"`` and are not added to the orchestrator's column. Its
waits after a 429 outside them (its producer generates ahead while a step waits for weights or
updates the servers) overlap those rows: marked ``beside="the steps"``, not added either. The
collector's waits after a 429 (wall time: the union of its requests' waits) run beside its samples,
whose rows are their summed times over the samples in flight: marked ``beside="the samples"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from prime_rl.analysis.bars import merge_intervals, overlap_s
from prime_rl.analysis.rate_limits import COLLECTOR, ORCHESTRATOR
from prime_rl.analysis.stats import Collected
from prime_rl.analysis.thresholds import Thresholds
from prime_rl.analysis.updates import died_waiting, of_the_steps


@dataclass(frozen=True)
class Stage:
    """One stage: its total time and its share of the run."""

    name: str
    process: str
    total_ms: float
    share: float
    how: str
    """Where the number comes from."""
    within: str | None = None
    """The stage whose time this one is a part of (``generation``), not added to its process's column."""
    beside: str | None = None
    """What this stage's time runs beside (``the steps``: the orchestrator's requests outside
    generation, while a step waits for weights or updates the servers; ``the samples``: the
    collector's waits after a 429, wall time among its rows of the samples' time): it overlaps the
    process's other rows and is not added to its column."""

    @property
    def marker(self) -> str:
        """What the row's name is prefixed with in the reports (:func:`row_marker`)."""
        return row_marker(self.within, self.beside)


def row_marker(within: str | None, beside: str | None) -> str:
    """What a stage's name is prefixed with in SUMMARY.md and COMPARE.md: ``(within generation) ``,
    ``(beside the steps) `` or nothing."""
    if within:
        return f"(within {within}) "
    return f"(beside {beside}) " if beside else ""


def update_group() -> tuple[pl.Expr, pl.Expr]:
    """The keys of an update's group in :meth:`Collected.update_frame`: the updates of one trace id
    (one per server) are one update; a trace id seen again more than ten minutes later (logs
    appended over runs) is another (its window: the start's ten minutes, null without a start)."""
    return pl.col("tid"), (pl.col("start") // 600).cast(pl.Int64).alias("window")


@dataclass(frozen=True)
class UpdateTime:
    """The weight updates' time the orchestrator waits for, ms, summed over the updates, each at its
    slowest server (:func:`update_critical`); ``wall`` is the sum of the parts: ``queue``, the
    server's handling (:attr:`server`: ``lock``, ``validate``, ``rpc``, ``other``, ``unsplit``) and
    ``retry``."""

    wall: float
    queue: float
    """Outside the server's handling: the client's ``wall_ms`` less the server's handling (``queue_ms``
    = ``wall_ms - server_ms``: the connection pool, the network, the server's front end)."""
    lock: float
    """The server's wait for its swap lock (rpc.done ``lock_wait_ms``)."""
    validate: float
    """The server's validation of the weight dir (rpc.done ``validate_ms``: sizes and checksums)."""
    rpc: float
    """The engine's reload (``rpc_ms``: pause, load, resume)."""
    other: float
    """The rest of the server's handling (``server_ms`` less its lock wait, validation and rpc: holding
    the weight files), of the updates whose server logged its lock wait or validation."""
    unsplit: float
    """``server_ms`` less ``rpc_ms`` and any logged lock wait, of the updates whose server logged no
    validation: validation, with the lock wait where that was not logged either (no server log read;
    a server from before ``validate_ms``, whose client's ``server_ms`` is then the time after its
    ``server.recv``)."""
    retry: float
    """The failed attempts and the backoff of retried updates, and the whole wait of those that
    failed in the end."""
    updates: int = 0
    summed: float = 0.0
    """The updates' time before it was clipped to the run's (the orchestrator waits for one update
    after another: their sum passing the run holds one no run can have); each part is cut in the
    same proportion. 0.0: not clipped."""

    @property
    def server(self) -> float:
        """The server's whole handling (``server_ms``) summed."""
        return self.lock + self.validate + self.rpc + self.other + self.unsplit


def update_critical(d: Collected) -> UpdateTime:
    """The weight updates' time, each update taken at its slowest server: what the orchestrator
    waits for before it generates again (:class:`UpdateTime`). The health loop's updates
    (:attr:`~prime_rl.analysis.updates.Update.background`) are left out: no step waits for them. One
    never answered (the orchestrator died waiting for it, :func:`~prime_rl.analysis.updates.died_waiting`,
    or still waited where the logs end) counts from its ``client.send`` to where the down time after
    it begins (else, the orchestrator crashed alone, to its last line before its restart), or the
    logs' end (:attr:`~prime_rl.analysis.stats.Collected.open_updates`): queue until
    its server's ``server.recv``, then the server's, rpc from an ``rpc.start`` no ``rpc.done``
    followed; a resume's resend under its trace id is another update (an update is one run's of the
    orchestrator)."""
    return d.memo("update_critical", lambda: _update_critical(d))


def _update_critical(d: Collected) -> UpdateTime:
    """Column-wise: each group's (:func:`update_group`, within one run of the orchestrator) slowest
    update by its wall time (else the
    server's handling as its log gives it, else 0; the first of equals), summed in the groups' order.

    An update's server handling is the client's ``server_ms``; in a log without it (``rpc_ms`` stood
    for it and ``queue_ms`` held the rest), ``rpc_ms`` and the server log's lock wait and validation,
    which then lay in the queue. It is split into the server log's lock wait, validation and rpc
    (each at most what is left of the last attempt's ``wall_ms``: the parts add up to the wall
    time) and the rest; the queue is ``wall_ms`` less the handling. One that failed in the end
    (:attr:`~prime_rl.analysis.updates.Update.gave_up`) counts as failed attempts alone."""
    if not d.updates:
        return UpdateTime(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    # the health loop's updates (a server brought back) are no step's wait
    frame, keep = d.update_frame(), of_the_steps() & ~died_waiting(d.orchestrator_restarted)
    if d.open_updates is not None:
        # one never answered counts up to the crash (or the logs' end), as a batch left open does
        col = pl.col
        frame = frame.with_row_index("k").join(d.open_updates, on="k", how="left", maintain_order="left")
        frame = frame.with_columns(
            wall=pl.coalesce("open_wall", "wall"),
            handling=pl.coalesce("open_handling", "handling"),
            rpc=pl.coalesce("open_rpc", "rpc"),
        )
        keep = of_the_steps() & (~died_waiting(d.orchestrator_restarted) | col("open_wall").is_not_null())
    # an update is one run's of the orchestrator: a resume's resend under a trace id the crash left
    # unanswered is another update, also one its start-up logs before its step goes back (the lines
    # after the crashed run fell silent are the resumed run's)
    silent = d.orchestrator_fell_silent
    run = pl.lit(0, pl.Int64)
    if silent:
        start = frame.get_column("start").fill_null(-math.inf).to_numpy()
        run = pl.Series("run", np.searchsorted(np.array(silent), start, side="left"), dtype=pl.Int64)
    frame = (
        frame.with_columns(run=run)
        .filter(keep)
        .select(
            *update_group(),
            "run",
            *(
                "start",
                "end",
                "wall",
                "rpc",
                "server_rpc",
                "retry",
                "gave_up",
                "lock",
                "validate",
                "handling",
                "send_to_recv",
            ),
        )
    )
    col = pl.col
    rpc = pl.coalesce("rpc", "server_rpc").fill_null(0.0)
    lock, validate = col("lock").fill_null(0.0), col("validate").fill_null(0.0)
    # the rest is validation (and lock wait, where not logged) unless the server logged its validation
    split = col("validate").is_not_null()
    # what the server's log says it spent (lock wait and validation come before its rpc.start)
    logged = rpc + lock + validate
    last = (col("wall") - col("retry")).clip(lower_bound=0.0)  # the last attempt's wall_ms
    # without server_ms, the server had the request from its server.recv on: what the client waited
    # after that was the server's (a server from before validate_ms logged its validation nowhere)
    held = pl.when(col("handling").is_null() & (col("retry") == 0.0)).then(last - col("send_to_recv"))
    handling = pl.max_horizontal(pl.coalesce("handling", "rpc", "server_rpc", pl.lit(0.0)), logged, held)
    # an update that failed in the end: its whole wait is failed attempts (a server that finished
    # after the client gave up has an rpc_ms the steps did not wait for on top)
    lost = lambda c: pl.when("gave_up").then(0.0).otherwise(c)  # noqa: E731
    parts = (
        frame.with_row_index("i")
        .with_columns(
            h=pl.when(col("wall").is_not_null()).then(pl.min_horizontal(handling, last)).otherwise(handling)
        )
        .with_columns(
            ms=pl.coalesce("wall", "h"),
            queue=lost(pl.when(col("wall").is_not_null()).then(last - col("h")).otherwise(0.0)),
            rpc_p=pl.min_horizontal(rpc, col("h")),
        )
        .with_columns(lock_p=pl.min_horizontal(lock, col("h") - col("rpc_p")))
        .with_columns(validate_p=pl.min_horizontal(validate, col("h") - col("rpc_p") - col("lock_p")))
        .with_columns(rest=col("h") - col("rpc_p") - col("lock_p") - col("validate_p"))
        .select(
            "tid",
            "window",
            "run",
            "i",
            "ms",
            "retry",
            "queue",
            "start",
            "end",
            lock=lost(col("lock_p")),
            validate=lost(col("validate_p")),
            rpc=lost(col("rpc_p")),
            other=lost(pl.when(split).then("rest").otherwise(0.0)),
            unsplit=lost(pl.when(split).then(0.0).otherwise("rest")),
        )
    )
    names = ("ms", "queue", "lock", "validate", "rpc", "other", "unsplit", "retry")
    # one server: every update its own group (the group_by's groups would cost 170 MB for the
    # 714k updates of the 10M-line all-tagged benchmark, the check 18 MB)
    if frame.get_column("tid").n_unique() < frame.height:
        parts = parts.group_by("tid", "window", "run", maintain_order=True).agg(
            pl.col(*names, "start", "end").sort_by("ms", "i", descending=[True, False]).first()
        )
    parts = _from_its_bounds(parts, names, d.first_ts)
    # summed in order, as one update after another (a cumulative sum adds left to right, as a loop
    # would: the same float; a pairwise sum could differ in the last digits)
    sums = [_in_order_sum(parts.get_column(c)) for c in names]
    run = d.run_ms
    if run and sums[0] > run:  # one update after another: no more than the run, each part cut alike
        return UpdateTime(*(x * run / sums[0] for x in sums), updates=parts.height, summed=sums[0])
    return UpdateTime(*sums, updates=parts.height)


def _from_its_bounds(parts: pl.DataFrame, names: tuple[str, ...], first: float | None) -> pl.DataFrame:
    """The updates ``parts`` (one row an update, at its slowest server) with each known from its
    client.done alone (no client.send, no server.recv: its start unknown) counted from no earlier than
    the end of the update before it (the orchestrator waits for one after another) nor the logs' first
    line ``first`` (as a batch's or a wait's: :attr:`~prime_rl.analysis.stats.Collected.before_logs_ms`),
    each of its parts ``names`` in the same proportion (which of them lay before cannot be told)."""
    end = parts.get_column("end").cast(pl.Float64).fill_null(np.nan).to_numpy()
    ms = parts.get_column("ms").fill_null(0.0).to_numpy()
    alone = parts.get_column("start").is_null().to_numpy() & ~np.isnan(end) & (ms > 0)
    if not alone.any():
        return parts
    ended = np.sort(end[~np.isnan(end)])
    at = np.searchsorted(ended, end, side="left") - 1  # the last update that ended before this one
    before = np.where(at >= 0, ended[np.maximum(at, 0)], -np.inf)
    lower = np.maximum(before, first if first is not None else -np.inf)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(alone, np.clip((end - lower) * 1000.0 / ms, 0.0, 1.0), 1.0)
    share = np.nan_to_num(share, nan=1.0)
    return parts.with_columns(pl.col(*names) * pl.Series(share))


def _in_order_sum(values: pl.Series) -> float:
    """``0.0 + values[0] + values[1] + ...``, left to right (+ 0.0 last: the loop's sum of zeros is 0.0,
    never -0.0)."""
    return float(np.cumsum(values.to_numpy())[-1]) + 0.0 if len(values) else 0.0


def verify_wall_ms(d: Collected) -> tuple[float, str]:
    """Scoring's wall time in the generation batches (see the module docstring) and how it was had.
    The summed scoring of a step with no batch line is in none of them: left out."""
    gen = d.total("gen_dur_ms")
    if d.series["verify_tail_ms"]:
        return min(d.total("verify_tail_ms"), gen or float("inf")), "[verify] tail_ms"
    cpu = d.total("verify_dur_ms") - (d.verify_paired.unpaired_ms if d.verify_paired else 0.0)
    if d.verify_workers:
        return min(cpu / d.verify_workers, gen or cpu), f"summed scoring time / {d.verify_workers} workers"
    fewest, _ = fewest_verify_workers(d)
    if fewest > 1:
        how = f"summed scoring time / {fewest} workers, the fewest the batches allow (workers unknown: an upper bound)"
        return min(cpu / fewest, gen or cpu), how
    return min(cpu, gen or cpu), "summed scoring time (workers unknown: an upper bound)"


WORKERS_SLACK = 0.01
"""How far (a share) summed scoring time may exceed a whole number of batch times before one more
verifier worker is taken as proven (:func:`fewest_verify_workers`)."""


def fewest_verify_workers(d: Collected) -> tuple[int, str]:
    """The fewest verifier workers the logs allow, when they do not say how many, and where that is
    seen, in words: ``k`` workers score at most ``k`` times a batch's wall time, so a step whose scoring
    sums to 4.3x its batch had at least 5 (:attr:`Collected.verify_busiest`; without a step that has
    both lines, the batches together); 1 (and no words) when no scoring sums to more than its batch.
    The two times are measured apart (and logged to 0.1 ms): a multiple within
    :data:`WORKERS_SLACK` above a whole number counts as that number (4.02x: 4 workers)."""
    if d.verify_busiest is not None:
        step, cpu, gen = d.verify_busiest
        where = f"step {step}: {cpu / 1000:.1f} s of scoring summed in a {gen / 1000:.2f} s batch"
    else:
        cpu, gen = d.total("verify_dur_ms"), d.total("gen_dur_ms")
        where = f"{cpu / 1000:.1f} s of scoring summed in {gen / 1000:.1f} s of batches"
    if not gen or cpu <= gen * (1 + WORKERS_SLACK):
        return 1, ""
    return math.ceil(cpu / gen / (1 + WORKERS_SLACK)), where


def env_wall_ms(d: Collected) -> tuple[float, str]:
    """The environment's (and its tools') wall time, and how it was had. Episodes run side by side
    within the generation batches, so their summed ``env_ms`` is divided by the mean number of
    episodes in flight (Little's law: their summed time, ``env_ms + gen_ms``, over the batches'
    generation time, at least 1): the batches' time split between the environment and the model as
    the episodes' time is. Without batch lines the run's wall time stands for the batches'."""
    env = d.total("env_ms")
    busy = env + d.total("episode_gen_ms")
    span = generation_ms(d) if d.series["gen_dur_ms"] else d.run_ms
    if not busy or not span:
        return env, "[env] env_ms summed over episodes"
    inflight = max(busy / span, 1.0)
    where = "the batches' generation time" if d.series["gen_dur_ms"] else "the run"
    return env / inflight, f"[env] env_ms summed / {inflight:.1f} episodes in flight (mean, over {where})"


def generation_ms(d: Collected) -> float:
    """The generation batches' wall time less scoring's (the stage "generation")."""
    return max(d.total("gen_dur_ms") - verify_wall_ms(d)[0], 0.0)


def stages(d: Collected) -> list[Stage]:
    """Every stage whose lines exist, largest share first within each process."""
    run = d.run_ms
    rows: list[tuple[str, str, float, str]] = []
    gen = d.total("gen_dur_ms")
    ver, how = verify_wall_ms(d)
    if d.series["gen_dur_ms"]:
        rows.append(("generation", "orchestrator", max(gen - ver, 0.0), "[gen] dur_ms less scoring"))
    if d.series["verify_dur_ms"] or d.series["verify_tail_ms"]:
        rows.append(("verification (scoring)", "orchestrator", ver, how))
    if d.series["env_ms"]:
        rows.append(("environment and tools", "orchestrator", *env_wall_ms(d)))
    if d.series["ckpt_wait_ms"]:
        rows.append(("checkpoint wait", "orchestrator", d.total("ckpt_wait_ms"), "[ckpt] wait_ms"))
    if d.updates:
        rows.extend(_update_rows(d))
    rows.extend(_rate_limit_rows(d))
    if d.series["train_ms"]:
        rows.append(("trainer compute", "trainer", d.total("train_ms"), "[train] train_ms"))
    if d.series["train_wait_ms"]:
        rows.append(("trainer waits for rollouts", "trainer", d.total("train_wait_ms"), "[train] wait_ms"))
    rows.extend(_publish_rows(d))
    rows.extend(_collector_rows(d))
    rows.extend(_server_rows(d, rows))
    # the environment's turns and the orchestrator's waits after a 429 happen inside the batches:
    # parts of generation
    parts = (
        {("environment and tools", "orchestrator"), ("rate-limit waits (429)", "orchestrator")}
        if d.series["gen_dur_ms"]
        else set()
    )
    out = [
        Stage(
            name,
            proc,
            ms,
            ms / run if run else 0.0,
            how,
            "generation" if (name, proc) in parts else None,
            BESIDE_STEPS
            if (name, proc) == (OUTSIDE_GENERATION, ORCHESTRATOR)
            else BESIDE_SAMPLES
            if (name, proc) == (RATE_LIMITED, COLLECTOR)
            else None,
        )
        for name, proc, ms, how in rows
    ]
    order = {"orchestrator": 0, "inference": 1, "trainer": 2, "collector": 3}
    # a row beside the steps after the process's rows that add up
    ranked = sorted(out, key=lambda s: (order[s.process], s.beside is not None, -s.total_ms))
    # each part right under the stage it is a part of
    return [row for s in ranked if not s.within for row in (s, *(p for p in ranked if p.within == s.name))]


OUTSIDE_GENERATION = "rate-limit waits (429) outside generation"
"""The row of the orchestrator's waits after a 429 outside generation (:func:`rate_limit_parts`)."""
BESIDE_STEPS = "the steps"
"""Its :attr:`Stage.beside`."""
RATE_LIMITED = "rate-limit waits (429)"
"""The row of a client's waits after a 429: the orchestrator's within generation (or its own row
without batch lines), the collector's (:func:`_rate_limit_rows`)."""
BESIDE_SAMPLES = "the samples"
"""The collector's row's :attr:`Stage.beside`: wall time in which some request waited after a 429 (the
union of the waits), while other samples ran, beside its rows of the samples' time; not added to them."""


def rate_limit_parts(d: Collected) -> tuple[float, float]:
    """The orchestrator's waits after a 429 (the union of its ``[gen] request.retry`` waits, ms) split
    into the part within generation and the rest: the part that lies inside its generation batches
    (all of it when the batches or the waits have no times), at most generation's time
    (:func:`generation_ms`); outside them its producer generates ahead while a step waits for
    weights or updates the servers. Without batch lines, all of it is the rest."""
    union = d.rate_limited_ms(ORCHESTRATOR)
    if not d.series["gen_dur_ms"]:
        return 0.0, union
    batches = d.batch_windows
    waits = d.rate_limits.merged(ORCHESTRATOR)
    inside = union
    if batches and waits is not None:
        start, end = np.frombuffer(batches, dtype=np.float64).reshape(-1, 2).T
        inside = min(overlap_s(waits, merge_intervals(start, end, 0.0)) * 1000.0, union)
    inside = min(inside, generation_ms(d))
    return inside, union - inside


OUTSIDE_MS = 1000.0
"""The orchestrator's waits after a 429 outside generation get a row (and a part in the rate-limit
finding's evidence) when they are at least this (ms) or :data:`OUTSIDE_SHARE` of the run
(:func:`outside_counts`): less is the rounding of the logged times (batch windows rebuilt from
``batch.done`` less ``dur_ms`` in logs without ``batch.start`` leave a few ms out), which made an
empty "0.0 s, 0.0%" row."""
OUTSIDE_SHARE = 0.005
"""The part of the run the waits outside generation get a row at, if under :data:`OUTSIDE_MS`."""


def outside_counts(d: Collected, outside_ms: float) -> bool:
    """Whether the orchestrator's waits after a 429 outside generation (``outside_ms``) are worth a
    row of their own: at least :data:`OUTSIDE_MS`, or :data:`OUTSIDE_SHARE` of the run."""
    return outside_ms >= OUTSIDE_MS or bool(d.run_ms and outside_ms >= OUTSIDE_SHARE * d.run_ms)


def _rate_limit_rows(d: Collected) -> list[tuple[str, str, float, str]]:
    """The time some request waited after a 429, each client's own (the union of its retry waits):
    the orchestrator's (``[gen] request.retry``; the part within generation and the rest apart:
    :func:`rate_limit_parts`) and the offline collector's (``[collect] request.retry``), which a
    trio's logs and a collector's analysed together hold both of; each says how much of its waits
    lay past its last line or in down time (:meth:`~prime_rl.analysis.rate_limits.RateLimitWaits.clip`)."""
    rows = []
    union = "the union of the {} request.retry waits"
    if d.rate_limits.has(ORCHESTRATOR):
        inside, outside = rate_limit_parts(d)
        if not d.series["gen_dur_ms"]:  # no batches: a row of its own, as the collector's
            how = f"time some request waited after a 429 ({union.format('[gen]')})"
            rows.append(("rate-limit waits (429)", ORCHESTRATOR, outside, how))
        else:
            beside = outside_counts(d, outside)
            if inside or not beside:
                how = f"time some request waited after a 429 inside the generation batches ({union.format('[gen]')})"
                rows.append(("rate-limit waits (429)", ORCHESTRATOR, inside, how))
            if beside:
                how = (
                    f"time some request waited after a 429 outside generation ({union.format('[gen]')} less "
                    "the part within generation): the producer generates ahead while a step waits for "
                    "weights or updates the servers"
                )
                rows.append((OUTSIDE_GENERATION, ORCHESTRATOR, outside, how))
        if cut := d.rate_limits.cut_note(ORCHESTRATOR):  # said once, in its first row
            name, process, ms, how = rows[0]
            rows[0] = (name, process, ms, f"{how}; {cut}")
    if d.rate_limits.has(COLLECTOR):
        how = f"time some request waited after a 429 ({union.format('[collect]')})"
        if cut := d.rate_limits.cut_note(COLLECTOR):
            how += f"; {cut}"
        rows.append((RATE_LIMITED, COLLECTOR, d.rate_limited_ms(COLLECTOR), how))
    return rows


def _collector_span_ms(d: Collected) -> float:
    """The collector's own time (ms): its sampling time (:attr:`Collected.collect_seconds`), else the
    run's; a trio's logs analysed with it, or a deferred verify pass, make the run longer."""
    return (d.collect_seconds or 0) * 1000.0 or d.run_ms


def collector_of_run(d: Collected) -> float:
    """The part of the run the collector's samples' time stands for: its sampling time over the run's
    (at most 1; 1 without either). A share of the samples' summed time (``[collect] dur_ms``) times
    this is the share of the run the stage table gives that time (:func:`_collector_rows`): what a
    collector's findings are ranked by beside a trio's or a verify pass's, which are of the run."""
    run = d.run_ms
    return min(1.0, _collector_span_ms(d) / run) if run else 1.0


SAME_TIME = 0.995
"""A collector whose sampling is at least this part of the run (:func:`collector_of_run`) had the
run to itself: its findings' evidence does not say how much of the run it sampled."""


def of_the_samples(d: Collected, part: float) -> str:
    """What a collector's finding whose time is ``part`` of the samples' time is a share of, as a
    clause of its evidence: that part and the run's (its sampling time of the run's), or nothing
    when the collector had the run to itself (its samples' time is the run's)."""
    scale = collector_of_run(d)
    if scale >= SAME_TIME:
        return ""
    return (
        f"; {100 * part:.0f}% of the samples' time, {100 * part * scale:.0f}% of the run (the collector "
        f"sampled {_collector_span_ms(d) / 1000:.1f} s of the run's {d.run_ms / 1000:.1f} s)"
    )


def _collector_rows(d: Collected) -> list[tuple[str, str, float, str]]:
    """The offline collector's stages: its samples' generation, verification and client-side queue
    over its samples in flight, and a deferred verify pass's verification (collect-rollouts verify)
    over its own verifications in flight (its wall time)."""
    rows = []
    busy = d.total("collect_ms")
    span = _collector_span_ms(d)  # the collector's own time (a trio's run beside it)
    passes = d.verify_passes
    if busy and span:
        # samples overlap: a stage's summed time over the mean number of samples in flight (Little's
        # law: busy time / the collector's wall time) is its wall-time equivalent
        inflight = busy / span
        for key, name in (
            ("collect_gen_ms", "generation"),
            ("collect_verify_ms", "verification"),
            ("collect_queue_ms", "client-side queue"),
        ):
            if d.series[key]:  # the samples' own (rollout.done): a verify pass's is its own row
                rows.append(
                    (
                        f"collector {name}",
                        "collector",
                        d.total(key) / inflight,
                        f"[collect] {key[8:]} summed / {inflight:.1f} samples in flight (mean)",
                    )
                )
    if passes and passes.seconds:
        how = f"[collect] verify.done dur_ms summed / {passes.in_flight:.1f} verifications in flight (mean)"
        rows.append(("collector deferred verification", "collector", passes.seconds * 1000.0, how))
    return rows


def _update_rows(d: Collected) -> list[tuple[str, str, float, str]]:
    """The weight updates' time (:func:`update_critical`: each update at its slowest server, the one
    the orchestrator waits for), in parts that add up to it: the queue in front of the server, the
    server's lock wait, validation and rpc (its handling, ``server_ms``), failed attempts."""
    t = update_critical(d)
    at = "slowest server per update"
    rows = [
        ("weight update: rpc", "orchestrator", t.rpc, f"{at}: rpc_ms"),
        (
            "weight update: queue",
            "orchestrator",
            t.queue,
            f"{at}: wall_ms less the server's handling (server_ms)",
        ),
    ]
    if t.lock or d.series["lock_wait_ms"]:
        rows.append(
            ("weight update: server lock wait", "orchestrator", t.lock, f"{at}: rpc.done lock_wait_ms")
        )
    if t.validate or d.series["validate_ms"]:
        rows.append(
            ("weight update: server validation", "orchestrator", t.validate, f"{at}: rpc.done validate_ms")
        )
    if t.unsplit:
        how = (
            f"{at}: server_ms (without it: wall_ms less client.send -> server.recv) less rpc_ms and any "
            "rpc.done lock_wait_ms (no validate_ms to split it)"
        )
        rows.append(("weight update: server lock wait and validation", "orchestrator", t.unsplit, how))
    if t.other > OTHER_MS * t.updates:
        how = f"{at}: server_ms less lock wait, validation and rpc (holding the weight files)"
        rows.append(("weight update: server, other", "orchestrator", t.other, how))
    if t.retry:
        how = f"{at}: attempts that failed, and the backoff after them"
        rows.append(("weight update: failed attempts", "orchestrator", t.retry, how))
    return rows


OTHER_MS = 0.2
"""The rest of the server's handling (:attr:`UpdateTime.other`) gets a row of its own when it is more
than this per update: below, it is the rounding of the four logged numbers (0.05 ms each)."""


def server_queue(d: Collected) -> tuple[float, int] | None:
    """The share of the requests' time at the servers spent waiting to be scheduled, from the
    ``[server] metrics`` gauges (Little's law: the time-averaged requests waiting over those waiting
    or running, each scrape's gauges standing for the interval before it, pauses in scraping left
    out; all servers together), and the intervals it was had from; None without a request seen."""
    waiting = busy = 0.0
    n = 0
    for s in d.server_load.values():
        for i, dt in s.intervals():
            waiting += s.waiting[i] * dt
            busy += (s.waiting[i] + s.running[i]) * dt
            n += 1
    return (waiting / busy, n) if busy > 0 else None


def server_preemptions(d: Collected) -> tuple[float, float] | None:
    """Preemptions at the servers during their scraped time and that time in minutes, all servers
    together (None: no ``preemptions=`` over a scraped interval)."""
    loads = [s for s in d.server_load.values() if any(v is not None for v in s.preemptions) and s.intervals()]
    if not loads:
        return None
    return sum(s.preempted() for s in loads), sum(s.covered_s() for s in loads) / 60.0


def _server_rows(d: Collected, rows: list[tuple[str, str, float, str]]) -> list[tuple[str, str, float, str]]:
    """The servers' own view, from ``/metrics`` (process ``inference``): the part of generation its
    requests spent in the servers' queues (:func:`server_queue`, applied to generation's wall time,
    the orchestrator's or else the collector's). It lies inside generation, not beside it."""
    queued = server_queue(d)
    gen = next((ms for name, _, ms, _ in rows if name == "generation"), None)
    if gen is None:
        gen = next((ms for name, _, ms, _ in rows if name == "collector generation"), None)
    if queued is None or gen is None:
        return []
    share, n = queued
    how = (
        f"[server] metrics waiting / (running + waiting) over {n} scrape intervals: {100 * share:.0f}% of "
        "the requests' time at the servers, times generation's wall time (inside generation)"
    )
    return [("server-side queue (requests waiting to be scheduled)", "inference", share * gen, how)]


def _publish_rows(d: Collected) -> list[tuple[str, str, float, str]]:
    """The trainer's publishing: the weight write ([ckpt] write_ms), and, when the writes ran in the
    background (``background=true``), what the steps still paid ([train] step.done write_ms) apart
    from the write, which then overlaps the next step's compute."""
    rows = []
    if d.series["write_ms"] and not d.counts["write.background"]:
        rows.append(("publish (weight write)", "trainer", d.total("write_ms"), "[ckpt] write_ms"))
    elif d.series["write_ms"]:
        how = "[ckpt] write_ms (background=true: beside the next step's compute)"
        rows.append(("publish: background write", "trainer", d.total("write_ms"), how))
        if d.series["publish_ms"]:
            how = "[train] step.done write_ms: gather, copy to host, wait for the previous write"
            rows.append(("publish: in the step", "trainer", d.total("publish_ms"), how))
    return rows


def run_limit(d: Collected, th: Thresholds) -> str | None:
    """What limits a run in which no threshold was crossed, as a finding in words (not an alarm), named
    from who waits on whom: the trainer when the orchestrator waits for its weights ([ckpt] wait_ms)
    more than ``limit_wait_share`` of the run and the trainer waits for rollouts ([train] wait_ms)
    less; generation when it is the other way round; both above it: the side waited for more, the
    other's wait said too; both under it: balanced. Without either wait's lines, the largest of the
    orchestrator's stages."""
    run = d.run_ms
    if not run:
        return None
    ckpt, rollouts = d.total("ckpt_wait_ms") / run, d.total("train_wait_ms") / run
    has_ckpt, has_rollouts = bool(d.series["ckpt_wait_ms"]), bool(d.series["train_wait_ms"])
    floor = th.limit_wait_share
    orch = f"the orchestrator waits for the trainer's weights {100 * ckpt:.1f}% of the run"
    trainer = f"the trainer waits for rollouts {100 * rollouts:.1f}%"
    below = f"(limit_wait_share {100 * floor:g}%; no threshold crossed)"
    if has_ckpt and has_rollouts:
        if ckpt <= floor and rollouts <= floor:
            return f"balanced, neither side waits much for the other: {orch}, {trainer} {below}"
        if ckpt > floor and rollouts > floor:
            first, second = (
                ("the trainer", "generation") if ckpt >= rollouts else ("generation", "the trainer")
            )
            who = f"{first} is the limit more often than {second}"
            return f"{who} (each waits for the other in turn): {orch}, {trainer} {below}"
        if ckpt > floor:
            return f"the trainer is the limit: {orch}, while {trainer} {below}"
        return f"generation is the limit: {trainer} of the run, while {orch} {below}"
    if has_ckpt and ckpt > floor:
        return f"the trainer is the limit: {orch} (no trainer log) {below}"
    if has_rollouts and rollouts > floor:
        return f"generation is the limit: {trainer} of the run (no [ckpt] wait lines) {below}"
    busy = [s for s in stages(d) if s.process == "orchestrator" and not s.within and not s.beside]
    if busy:
        top = max(busy, key=lambda s: s.total_ms)
        return f"the largest stage is {top.name} ({100 * top.share:.0f}% of the run), within the thresholds"
    return None
