"""The diagnosis rules: one function per bottleneck, each returning a :class:`Finding` or None.

A rule reads only the collected data (:class:`~prime_rl.analysis.stats.Collected`) and the
thresholds, so rules do not depend on each other; where two findings exclude each other (checkpoint
I/O vs trainer-bound) both rules test the same shared condition. :data:`RULES` is the order the
ranking walks; findings with equal shares keep it. The signatures are summarised in
``bottleneck_logs/README.md`` ("Diagnostic signatures").
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from prime_rl.analysis.findings import Finding
from prime_rl.analysis.rate_limits import COLLECTOR, COLLECTOR_429, COLLECTOR_COMPLETIONS, ORCHESTRATOR
from prime_rl.analysis.servers import (
    kv_cache_pressure,
    slow_generation,
    slow_server,
    stale_said,
    stale_servers,
)
from prime_rl.analysis.stages import (
    collector_of_run,
    env_wall_ms,
    fewest_verify_workers,
    of_the_samples,
    outside_counts,
    rate_limit_parts,
    update_critical,
    verify_wall_ms,
)
from prime_rl.analysis.stalls import hang, pause, stall
from prime_rl.analysis.stats import Collected, describe
from prime_rl.analysis.thresholds import Thresholds
from prime_rl.analysis.updates import of_the_steps

Rule = Callable[[Collected, Thresholds], Finding | None]


def _rpc_p50_mean(d: Collected) -> tuple[float | None, float | None]:
    """Median and mean engine RPC time: the client's rpc_ms, else the server log's rpc_ms."""
    r50, rmean = d.stat("rpc_ms", "p50"), d.stat("rpc_ms", "mean")
    if r50 is None:
        r50, rmean = d.stat("server_rpc_ms", "p50"), d.stat("server_rpc_ms", "mean")
    return r50, rmean


def frontend_queue_saturation(d: Collected, th: Thresholds) -> Finding | None:
    """Weight updates wait in front of the server: mean queue above ``queue_ratio`` x mean ``rpc_ms``
    (the server's rpc_ms when the client gives none) and p95 queue above ``queue_ms_min``. Queueing
    comes in bursts (an update waits when the pool happens to be full), so means (totals) are
    compared, not medians. The queue is each update's :func:`front_queue` (the client's ``queue_ms``
    less what the server's lines say it spent). Its share is the queue time the orchestrator waited
    for (each update at its slowest server, as the stages count it: the servers queue side by side)."""
    front, unsplit = front_queue(d)
    described = (
        describe(front) if front is not None else {k: d.stat("queue_ms", k) for k in ("p50", "p95", "mean")}
    )
    q50, q95, qmean = described.get("p50"), described.get("p95"), described.get("mean")
    _, rmean = _rpc_p50_mean(d)
    if qmean is None or rmean is None:
        return None
    if not (qmean > th.queue_ratio * max(rmean, 1e-9) and (q95 or 0) > th.queue_ms_min):
        return None
    gap = d.stat("send_to_recv_ms", "p50")
    where = ""
    if gap is not None:
        before = gap >= 0.5 * (q50 or 0.0)
        where = f"; client.send -> server.recv median {gap:.1f} ms" + (
            ", so the wait happens before the server sees the request" if before else ""
        )
    name = "queue_ms" if front is None else "queue in front of the server"
    title = "Front-end queue saturation: admin requests wait behind streaming inference"
    next_steps = (
        "Use the dedicated admin client (client.admin.mode: dedicated): its own small pool, never queued behind streams.",
        "Compare queue_ms before/after; lower max_inflight or raise client.max_connections if streams still starve the pool.",
    )
    if unsplit:
        title = (
            "Weight updates wait before the engine's reload: in front of the server, or in its lock wait and "
            "validation (logs without server_ms and the server's log do not tell them apart)"
        )
        where += (
            f"; {unsplit} update(s) logged no server_ms (a client before it: queue_ms = wall_ms - rpc_ms) and their "
            "server's log was not given: their queue_ms holds the server's lock wait and validation too"
        )
        next_steps = (
            "Give the analyzer the inference servers' logs: their server.recv, lock_wait_ms and validate_ms split "
            "this wait into the queue in front of the server and the server's own handling.",
            *next_steps,
        )
    run_ms = d.run_ms
    return Finding(
        kind="frontend_queue_saturation",
        title=title,
        evidence=f"{name} mean {qmean:.1f} ms (median {q50:.1f}, p95 {q95:.1f}) vs rpc_ms mean {rmean:.1f} ms: "
        f"{qmean / max(rmean, 1e-9):.1f}x{where}",
        share=_update_server_queue(d)[1] / run_ms if run_ms else 1.0,
        next=next_steps,
    )


def front_queue(d: Collected) -> tuple[list[float] | None, int]:
    """Each update's queue in front of the server (every server's part; None: no update was
    collected, the rule reads the ``queue_ms`` series), and how many of them could not be split.

    The client's ``queue_ms`` is ``wall_ms - server_ms``: the server's handling is out of it. A
    client from before ``server_ms`` logged ``wall_ms - rpc_ms``, so the server's lock wait and
    validation lay in it; then the server's own lines take them out: its ``rpc.done lock_wait_ms``
    and ``validate_ms`` where it logged them, and the queue is at most the time until its
    ``server.recv`` (``client.send -> server.recv``; the rest the server had the request: a server
    from before ``validate_ms`` logged its validation nowhere else). Such an update whose server
    log was not given (no ``server.recv``, no rpc.done) is *unsplit*: its queue_ms is kept, and
    counted."""
    if not d.updates:
        return None, 0
    col = pl.col
    old = col("handling").is_null() & col("queue").is_not_null()
    told = col("lock").fill_null(0.0) + col("validate").fill_null(0.0)
    less = (col("queue") - told).clip(lower_bound=0.0)
    received = col("send_to_recv").is_not_null()
    frame = d.update_frame().select(
        front=pl.when(old & received)
        .then(pl.min_horizontal(less, col("send_to_recv").clip(lower_bound=0.0)))
        .when(old)
        .then(less)
        .otherwise("queue"),
        unsplit=old & ~received & col("validate").is_null() & col("server_rpc").is_null(),
    )
    front = frame.get_column("front").drop_nulls().to_list()
    if not front:
        return None, 0
    return front, int(frame.get_column("unsplit").sum())


def _update_server_queue(d: Collected) -> tuple[float, float]:
    """The server's handling (lock wait, validation and rpc: ``server_ms``) and the queue, ms summed
    over updates, each at its slowest server (:func:`~prime_rl.analysis.stages.update_critical`;
    the series when no update objects were collected)."""
    if d.updates:
        t = update_critical(d)
        return t.server, t.queue
    return sum(d.series["server_ms"] or d.series["rpc_ms"] or d.series["server_rpc_ms"]), d.total("queue_ms")


_SERVER_PARTS = {
    "rpc": (
        "Slow engine reload: the server takes long to load new weights",
        (
            "Profile weight loading in the worker extension (load_ms in rpc.done): disk vs copy vs repack.",
            "Use faster storage (local NVMe) or in-memory sharing (shm/mmap) for weights/step_N.",
            "Use a smaller or quantised model (int8/int4) if the reload dominates.",
        ),
    ),
    "validate": (
        "Slow weight update at the server: validating the weight dir takes long",
        (
            "Validation reads every byte of weights/step_N for the manifest's checksums (rpc.done validate_ms), "
            "then the load reads it again: put output_dir on fast local storage (NVMe) or in memory (shm).",
            "Use a smaller or quantised model (int8/int4): fewer bytes to check and load.",
        ),
    ),
    "lock": (
        "Slow weight update at the server: updates wait for the server's swap lock",
        (
            "Another update or reload held the server's swap lock (rpc.done lock_wait_ms): find what overlaps "
            "the updates in timeline.txt (a health-loop reload, a timed-out update still loading when it was "
            "retried, a second orchestrator).",
            "If a timed-out update is retried while the first still loads, raise client.admin.timeout_s.",
        ),
    ),
    "unsplit": (
        "Slow weight update at the server: its lock wait and validation take long",
        (
            "Give the analyzer the servers' logs: their rpc.done lock_wait_ms and validate_ms tell the two apart.",
            "Validation reads every byte of weights/step_N (fast local storage helps); a lock wait means another "
            "update or reload held the server's swap lock.",
        ),
    ),
}
"""Per part of the server's handling that takes the most: the finding's title and next steps."""


def slow_reload(d: Collected, th: Thresholds) -> Finding | None:
    """The server takes long to handle the weight updates: median ``rpc_ms`` (the server's when the
    client gives none) above ``rpc_ms_high``, or the server's whole handling of the updates (its lock
    wait, validation and rpc: ``server_ms``, at the slowest server per update, which the orchestrator
    waits for) above ``update_share`` of the run while it exceeds their queue time. Titled by the
    part that takes the most of it."""
    r50, _ = _rpc_p50_mean(d)
    server, queue = _update_server_queue(d)
    run_ms = d.run_ms
    by_median = r50 is not None and r50 > th.rpc_ms_high
    by_share = bool(run_ms) and server > queue and server / run_ms > th.update_share
    if not (by_median or by_share):
        return None
    why = ([f"rpc_ms median > rpc_ms_high {th.rpc_ms_high:.0f} ms"] if by_median else []) + (
        [f"{100 * server / run_ms:.0f}% of the run > update_share {100 * th.update_share:.0f}%"]
        if by_share
        else []
    )
    parts = {"rpc": server}
    where = ""
    if d.updates:
        t = update_critical(d)
        parts = {"rpc": t.rpc, "validate": t.validate, "lock": t.lock, "unsplit": t.unsplit}  # ties: rpc
        named = [("lock wait", t.lock), ("validation", t.validate), ("rpc", t.rpc)]
        named += [("lock wait and validation (not split)", t.unsplit), ("other", t.other)]
        where = (
            " at the slowest server per update: "
            + ", ".join(f"{name} {ms / 1000:.1f} s" for name, ms in named if ms >= 50.0)
            + f"; queue in front of the server {t.queue / 1000:.1f} s"
        )
    p95 = d.stat("rpc_ms", "p95") or d.stat("server_rpc_ms", "p95")
    median = f"; rpc_ms median {r50:.1f} ms (p95 {p95:.1f})" if r50 is not None and p95 is not None else ""
    title, steps = _SERVER_PARTS[max(parts, key=lambda k: parts[k])]
    return Finding(
        kind="slow_reload",
        title=title,
        evidence=f"the server's handling of the weight updates {server / 1000:.1f} s in all ({'; '.join(why)})"
        f"{where}{median}",
        share=server / run_ms if run_ms else 0.5,
        next=steps,
        thresholds=(("rpc_ms_high",) if by_median else ()) + (("update_share",) if by_share else ()),
    )


def failed_attempts(d: Collected, th: Thresholds) -> Finding | None:
    """Weight updates lose time to attempts that failed: their failed attempts and the backoff after
    them (a retried update's wait before its last attempt; the whole wait of a steps' update that
    failed in the end; at the slowest server of each update, which the orchestrator waits for) above
    ``update_share`` of the run. With one server no slow server is named for them: this says it.
    The health loop's updates (``background=true``) are not the steps' and not counted. Titled by
    what there was: retries, updates that failed in the end, or both; a server whose last updates
    failed is named with the weights it kept (:func:`~prime_rl.analysis.servers.stale_servers`).
    A server's failed updates are not what :func:`~prime_rl.analysis.servers.slow_server` judges."""
    if not d.updates:
        return None
    retry = update_critical(d).retry
    run_ms = d.run_ms
    if not run_ms or retry / run_ms <= th.update_share:
        return None
    frame = d.update_frame()
    by_url = (
        frame.filter((pl.col("retried") | pl.col("failed")) & of_the_steps())
        .group_by("url", maintain_order=True)
        .agg(retried=pl.col("retried").sum(), failed=pl.col("failed").sum())
        .rows()
    )
    where = "; ".join(f"{url or 'a server not named'}: {r} retried, {f} failed" for url, r, f in by_url)
    retried, failed = (sum(row[k] for row in by_url) for k in (1, 2))
    if not failed:
        title, what = "the orchestrator waits for retries", "failed attempts and the backoff after them"
    elif not retried:
        title, what = "the orchestrator waits for updates that fail", "the waits for updates that failed"
    else:
        title = "the orchestrator waits for retries and for updates that fail"
        what = "failed attempts, the backoff after them and the waits for updates that failed"
    stale = stale_said(stale_servers(d))
    return Finding(
        kind="failed_attempts",
        title=f"Failed weight-update attempts: {title}",
        evidence=f"{what} {retry / 1000:.1f} s, {100 * retry / run_ms:.0f}% of the "
        f"run (> update_share {100 * th.update_share:.0f}%; the slowest server of each update); {where}"
        + (f"; {stale}" if stale else ""),
        share=min(1.0, retry / run_ms),
        next=(
            "Read why the attempts failed: the orchestrator log's warnings \"[weights][<trace id>] /update_weights "
            "to <url> failed (...)\" and the server's log at those times.",
            "A timeout: raise client.admin.timeout_s if the server loads weights that slowly; else fix or drop the server.",
        ),
        thresholds=("update_share",),
    )


def _waits_a_lot(d: Collected, th: Thresholds) -> bool:
    """The orchestrator's waits for weights ([ckpt] wait.done) exceed ``ckpt_wait_share`` of the run."""
    run_ms = d.run_ms
    return bool(run_ms and d.total("ckpt_wait_ms") / run_ms > th.ckpt_wait_share)


def _is_checkpoint_io(d: Collected, th: Thresholds) -> bool:
    """Long waits that the write explains (median write >= ``write_share`` of the median wait, or no
    write lines to tell), or slow writes on their own (p95 write_ms above ``write_ms_high``)."""
    w50, w95 = d.stat("write_ms", "p50"), d.stat("write_ms", "p95")
    wait50 = d.stat("ckpt_wait_ms", "p50")
    # a long wait with a short write means the trainer's compute, not its I/O, is what generation waits for
    io_share = (w50 / wait50) if (w50 is not None and wait50) else None
    return (_waits_a_lot(d, th) and (io_share is None or io_share >= th.write_share)) or (
        w95 is not None and w95 > th.write_ms_high
    )


def checkpoint_io(d: Collected, th: Thresholds) -> Finding | None:
    """The orchestrator waits for the trainer's weight writes: see :func:`_is_checkpoint_io`."""
    if not _is_checkpoint_io(d, th):
        return None
    run_ms = d.run_ms
    wait_total = d.total("ckpt_wait_ms")
    w50, w95 = d.stat("write_ms", "p50"), d.stat("write_ms", "p95")
    return Finding(
        kind="checkpoint_io",
        title="Checkpoint I/O: the orchestrator waits for the trainer's weight writes",
        evidence=f"ckpt wait {wait_total / 1000:.1f} s in all ({100 * wait_total / max(run_ms, 1e-9):.0f}% of {run_ms / 1000:.1f} s)"
        + (f"; write_ms median {w50:.1f} ms, p95 {w95:.1f} ms" if w95 is not None else ""),
        share=wait_total / run_ms if run_ms else 0.0,
        next=(
            "Profile the trainer's weight write ([ckpt] write.done write_ms): is the sharded save working?",
            "Put output_dir on local SSD/NVMe, not a network filesystem.",
            "Raise async_level so generation overlaps the trainer's write (more staleness).",
        )
        + (
            ()
            if d.counts["write.background"]
            else (
                "Write weights in the background (trainer weights.background = true): the step then pays only the copy.",
            )
        ),
    )


def trainer_bound(d: Collected, th: Thresholds) -> Finding | None:
    """Generation waits for the trainer's next step: the waits for weights exceed ``ckpt_wait_share``
    of the run while the median write is under ``write_share`` of the median wait (and no write's
    p95 is above ``write_ms_high``, which would make it checkpoint I/O)."""
    if not _waits_a_lot(d, th) or _is_checkpoint_io(d, th):
        return None
    run_ms = d.run_ms
    wait_total = d.total("ckpt_wait_ms")
    wait50, w50 = d.stat("ckpt_wait_ms", "p50"), d.stat("write_ms", "p50")
    return Finding(
        kind="trainer_bound",
        title="Trainer-bound: generation waits for the trainer's next step",
        evidence=f"ckpt wait {wait_total / 1000:.1f} s in all ({100 * wait_total / run_ms:.0f}% of {run_ms / 1000:.1f} s), "
        f"median {wait50:.0f} ms per step, while the weight write itself takes {w50:.1f} ms (median)",
        share=wait_total / run_ms,
        next=(
            "Speed up training: more trainer GPUs/ranks, larger micro-batches, bf16 on GPU.",
            "Raise async_level so more generation overlaps each training step (more staleness).",
            "Give the trainer dedicated cores/GPUs if it shares them with the inference server.",
        ),
    )


def generation_bound(d: Collected, th: Thresholds) -> Finding | None:
    """The run waits on the inference servers: the trainer's waits for rollouts ([train] step.done
    wait_ms) exceed ``train_wait_share`` of the run; without a trainer log, generation ([gen]
    batch.done dur_ms) exceeds ``gen_share`` of the run and no checkpoint wait explains the run."""
    run_ms = d.run_ms
    gen_total, train_wait = d.total("gen_dur_ms"), d.total("train_wait_ms")
    if d.series["train_wait_ms"]:  # the trainer says how long it waited for rollouts: the direct evidence
        if not (run_ms and train_wait / run_ms > th.train_wait_share):
            return None
        why = (
            f"the trainer waited {train_wait / 1000:.1f} s for rollouts ({100 * train_wait / max(run_ms, 1e-9):.0f}% of "
            f"{run_ms / 1000:.1f} s)"
        )
    else:  # no trainer log: generation's share of the run is all there is
        if (
            not (run_ms and gen_total / run_ms > th.gen_share)
            or _waits_a_lot(d, th)
            or _is_checkpoint_io(d, th)
        ):
            return None
        why = f"generation {gen_total / 1000:.1f} s of {run_ms / 1000:.1f} s ({100 * gen_total / max(run_ms, 1e-9):.0f}%; no trainer log)"
    return Finding(
        kind="generation_bound",
        title="Generation-bound: the run waits on the inference servers",
        evidence=f"{why}; batch dur_ms median {d.stat('gen_dur_ms', 'p50') or 0:.0f}",
        share=(train_wait if d.series["train_wait_ms"] else gen_total) / run_ms,
        next=(
            "Raise parallelism (max_inflight, more servers) until time per batch stops dropping.",
            "Tune the model server: tensor parallelism, max_num_seqs, max_num_batched_tokens, prefix caching.",
            "Lower max_tokens if trunc_pct shows most completions hit the limit.",
        ),
    )


def verification_bound(d: Collected, th: Thresholds) -> Finding | None:
    """Scoring paces the generation batches, compared like with like (see
    :mod:`~prime_rl.analysis.stages`): with ``tail_ms``, scoring's wall time above ``verify_ratio`` of
    the batch time; with the worker count, the workers busy above ``verify_util_high`` of the batch
    time; without it, when some step's scoring sums to more than its batch (the workers ran side by
    side), the fewest workers the batches allow (:func:`~prime_rl.analysis.stages.fewest_verify_workers`)
    busy above ``verify_util_high`` (an upper bound: more workers would be less busy; at most 100%,
    as the count is had from the batches); otherwise the summed scoring time per step (an upper bound
    of its wall time) above ``verify_ratio`` x the batch time. The summed scoring is compared with
    the batch time of the same steps (:attr:`Collected.verify_paired`; a step's scoring without its
    batch line is left out), else of all of them. Ranked above generation-bound, which it then
    explains."""
    gen = d.total("gen_dur_ms")
    if not d.series["verify_dur_ms"] or not gen:
        return None
    wall, how = verify_wall_ms(d)
    cpu = d.total("verify_dur_ms")
    # like with like: the summed scoring and the batch time of the steps that logged both
    cpu_c, gen_c, scope = cpu, gen, ""
    if d.verify_paired is not None:
        cpu_c, gen_c, steps, unpaired, _ = d.verify_paired
        if unpaired:
            scope = f" (the {steps} step(s) with both lines; {unpaired} step(s) scored with no batch line left out)"
    if d.series["verify_tail_ms"]:
        fired, measure = (
            wall > th.verify_ratio * gen,
            f"scoring wall {wall / 1000:.1f} s of {gen / 1000:.1f} s of batches ({100 * wall / gen:.0f}% > verify_ratio {th.verify_ratio:g})",
        )
        names: tuple[str, ...] = ("verify_ratio",)
    elif d.verify_workers:
        util = cpu_c / (d.verify_workers * gen_c)
        fired = util > th.verify_util_high
        measure = f"{d.verify_workers} verifier workers busy {100 * util:.0f}% of the batch time{scope} (> verify_util_high {100 * th.verify_util_high:.0f}%)"
        names = ("verify_util_high",)
    elif (fewest := fewest_verify_workers(d))[0] > 1:
        n, where = fewest
        # n is had from the batches: n workers score at most n times a batch (within WORKERS_SLACK)
        util = min(cpu_c / (n * gen_c), 1.0)
        fired = util > th.verify_util_high
        measure = (
            f"scoring {cpu_c / 1000:.1f} s summed over completions in {gen_c / 1000:.1f} s of batches{scope}: the workers ran "
            f"side by side, at least {n} of them ({where}); their number is not logged (workers=), so this is "
            f"an upper bound: {n} workers would be busy {100 * util:.0f}% of the batch time (> verify_util_high "
            f"{100 * th.verify_util_high:.0f}%), more of them less"
        )
        names = ("verify_util_high",)
    else:
        fired = cpu_c > th.verify_ratio * gen_c
        measure = (
            f"scoring {cpu_c / 1000:.1f} s summed over completions vs {gen_c / 1000:.1f} s of batch wall time{scope} "
            f"({cpu_c / gen_c:.1f}x > verify_ratio {th.verify_ratio:g}; workers unknown, so summed time stands for wall time)"
        )
        names = ("verify_ratio",)
    if not fired:
        return None
    run_ms = d.run_ms
    return Finding(
        kind="verification_bound",
        title="Verification-bound: scoring paces the generation batches",
        evidence=f"{measure}; scoring's wall-time estimate {wall / 1000:.1f} s ({how})",
        share=wall / run_ms if run_ms else 0.5,
        next=(
            "Add verifier processes (verify.workers) or speed up the verifier (cache, fast mode).",
            "Defer verification: collect with --no-verify and score later with verify-rollouts.",
        ),
        thresholds=names,
        explains="generation_bound",
    )


def truncation(d: Collected, th: Thresholds) -> Finding | None:
    """Completions run into max_tokens: mean [rollout] trunc_pct above ``trunc_pct_high``. Its share is
    generation time times the truncated fraction (the truncated completions are the longest, so
    this is a lower bound); ranked above generation-bound, which it then explains."""
    trunc = d.series["trunc_pct"]
    if not trunc:
        return None
    mean = sum(trunc) / len(trunc)
    if not mean > th.trunc_pct_high:
        return None
    gen = max(d.total("gen_dur_ms") - verify_wall_ms(d)[0], 0.0)
    run_ms = d.run_ms
    return Finding(
        kind="truncation",
        title="Truncation: many completions run into max_tokens",
        evidence=f"mean trunc_pct {mean:.1f}% over {len(trunc)} steps (> trunc_pct_high {th.trunc_pct_high:g}%); "
        f"at least {gen * mean / 100 / 1000:.1f} s of generation went into cut-off completions",
        share=gen * mean / 100 / run_ms if run_ms else 0.0,
        next=(
            "Raise max_tokens (and seq_len) if the answers need the room, or shorten them (prompt, penalty).",
            "A truncated answer earns no reward from most verifiers: check the reward of cut-off samples.",
        ),
        thresholds=("trunc_pct_high",),
        explains="generation_bound",
    )


def environment_bound(d: Collected, th: Thresholds) -> Finding | None:
    """Multi-turn episodes spend more time in the environment (its ``step`` calls, tools included)
    than in generation: the sum of [env] episode.done env_ms above ``verify_ratio`` x the sum of
    their gen_ms (both are per-episode times, so concurrency affects them alike). Its share is the
    environment's wall time (:func:`~prime_rl.analysis.stages.env_wall_ms`: the episodes run side by
    side within the batches, so their summed env_ms is divided by the episodes in flight)."""
    env_total, gen_total = d.total("env_ms"), d.total("episode_gen_ms")
    if not d.series["env_ms"] or not gen_total or not env_total > th.verify_ratio * gen_total:
        return None
    tool_total = d.total("tool_ms")
    run_ms = d.run_ms
    wall, how = env_wall_ms(d)
    episodes = len(d.series["env_ms"])
    errors = d.counts.get("episode.tool_errors", 0)
    return Finding(
        kind="environment_bound",
        title="Environment-bound: episodes wait on the environment and its tools more than on generation",
        evidence=f"environment {env_total / 1000:.1f} s (tools {tool_total / 1000:.1f} s) vs generation "
        f"{gen_total / 1000:.1f} s over {episodes} episodes ({env_total / gen_total:.1f}x); "
        f"{d.stat('episode_turns', 'mean') or 0:.1f} turns per episode, {errors} failed tool calls; "
        f"the environment's wall time {wall / 1000:.1f} s, {100 * wall / max(run_ms, 1e-9):.0f}% of the run ({how})",
        share=min(1.0, wall / run_ms) if run_ms else 0.5,
        next=(
            "Add verifier processes (verify.workers): the environment's turns run there.",
            "Make the tools cheaper (sandbox limits, caching), or cap episode.max_turns / episode.timeout_s.",
        ),
    )


def _collect_means(d: Collected) -> tuple[float | None, float | None, float | None]:
    """Mean gen_ms, verify_ms and queue_ms per sample of the offline collector ([collect] rollout.done)."""
    return (
        d.stat("collect_gen_ms", "mean"),
        d.stat("collect_verify_ms", "mean"),
        d.stat("collect_queue_ms", "mean"),
    )


def _collect_verify_slow(d: Collected, th: Thresholds) -> bool:
    cg, cv, _ = _collect_means(d)
    return bool(cg and cv is not None and cv > th.verify_ratio * cg)


def _collect_busy_ms(d: Collected) -> float:
    """The collector's summed [collect] dur_ms (1.0 when there is none): the base of its samples'
    shares of their own time."""
    return d.total("collect_ms") or 1.0


def _collect_share(d: Collected, key: str) -> tuple[float, str]:
    """(the share of the run, the evidence's clause saying what it is of) of the samples' summed
    ``key``: its share of the samples' time times the sampling's part of the run
    (:func:`~prime_rl.analysis.stages.collector_of_run`), the share the stage table gives it, so
    that it ranks like with like beside a trio's findings or a deferred verify pass's
    (:func:`collect_deferred_verification`), which are of the run. A collector alone: the same."""
    part = d.total(key) / _collect_busy_ms(d)
    return part * collector_of_run(d), of_the_samples(d, part)


def collect_verification_bound(d: Collected, th: Thresholds) -> Finding | None:
    """Offline collection waits on the verifier: mean [collect] rollout.done verify_ms above
    ``verify_ratio`` x mean gen_ms (the samples' own verification: a deferred verify pass's is
    :func:`collect_deferred_verification`)."""
    if not _collect_verify_slow(d, th):
        return None
    cg, cv, _ = _collect_means(d)
    share, of_what = _collect_share(d, "collect_verify_ms")
    return Finding(
        kind="verification_bound",
        title="Verification-bound: samples wait longer for the verifier than for the model",
        evidence=f"[collect] verify_ms mean {cv:.0f} ms vs gen_ms mean {cg:.0f} ms ({cv / cg:.1f}x){of_what}",
        share=share,
        next=(
            "Add verifier processes (--verify.workers) or speed up the verifier (cache, fast mode).",
            "Defer verification: collect with --no-verify and score later with collect-rollouts verify.",
        ),
    )


def collect_deferred_verification(d: Collected, th: Thresholds) -> Finding | None:
    """A collector's deferred verify passes (collect-rollouts verify: [collect] verify.done) take more
    than ``verify_pass_share`` of the run's wall time (their wall time: the union of their
    verifications' times); its share is that part of the run."""
    passes, run = d.verify_passes, d.run_ms
    if not passes or not passes.seconds or not run:
        return None
    share = min(1.0, passes.seconds * 1000.0 / run)
    if share <= th.verify_pass_share:
        return None
    return Finding(
        kind="collect_deferred_verification",
        title=f"Deferred verification: the verify pass (collect-rollouts verify) takes {100 * share:.0f}% of the run",
        evidence=f"[collect] verify.done: {passes.count} verifications, dur_ms mean "
        f"{passes.summed_ms / passes.count:.0f} ms, {passes.in_flight:.1f} in flight (mean), "
        f"{passes.seconds:.1f} s of the run's {run / 1000:.1f} s "
        f"(> verify_pass_share {100 * th.verify_pass_share:g}%)",
        share=share,
        next=(
            "Score more at once: give collect-rollouts verify more verifier processes (--verify.workers; "
            f"its num_samples_in_parallel bounds the verifications in flight, {passes.in_flight:.1f} here).",
            "Speed up the verifier (cache, fast mode).",
        ),
        thresholds=("verify_pass_share",),
    )


def collect_generation_bound(d: Collected, th: Thresholds) -> Finding | None:
    """Offline collection time is model time: [collect] gen_ms present, neither verification-bound
    (see :func:`collect_verification_bound`) nor queued (mean queue_ms above mean gen_ms)."""
    cg, cv, cq = _collect_means(d)
    if not cg or not d.series["collect_gen_ms"] or (cq and cq > cg) or _collect_verify_slow(d, th):
        return None
    share, of_what = _collect_share(d, "collect_gen_ms")
    return Finding(
        kind="collect_generation_bound",
        title="Model inference: collection time is generation time",
        evidence=f"[collect] gen_ms mean {cg:.0f} ms of {d.stat('collect_done_ms', 'mean') or 0:.0f} ms per sample"
        + (f"; verify_ms mean {cv:.0f} ms" if cv is not None else "")
        + of_what,
        share=share,
        next=(
            "Run `collect-rollouts diagnose`: if time drops with parallelism, raise num_samples_in_parallel.",
            "Otherwise tune the model server (memory utilisation, batched tokens, more replicas).",
        ),
    )


def collect_queue(d: Collected, th: Thresholds) -> Finding | None:
    """Offline samples wait on the client side (a parallelism slot or a rate-limit pause): mean
    [collect] queue_ms above mean gen_ms."""
    cg, _, cq = _collect_means(d)
    if not (cq and cg and cq > cg):
        return None
    share, of_what = _collect_share(d, "collect_queue_ms")
    return Finding(
        kind="collect_queue",
        title="Client-side queueing: samples wait for a parallelism slot or a rate-limit pause",
        evidence=f"[collect] queue_ms mean {cq:.0f} ms vs gen_ms mean {cg:.0f} ms{of_what}",
        share=share,
        next=(
            "If 429s are counted, the rate limit sets the pace: see the rate-limit finding.",
            "Otherwise raise num_samples_in_parallel (the server has room).",
        ),
    )


def rate_limited(d: Collected, th: Thresholds) -> Finding | None:
    """The server answers 429: a client's retries after HTTP 429 above ``rate_limited_frac`` of its
    own completions, or any 429 of a client with no completions counted. Each client is judged
    apart: the orchestrator's ([gen] request.retry status=429) against its [gen] batch.done
    completions, the offline collector's ([collect] request.retry status=429, or an older collector
    line with status=429) against its rollout.done lines (a collector rate-limited on every request,
    analysed with a trio's logs, was 40 of 5160 pooled completions: under 1%). With both clients'
    lines, the finding names the one(s) rate-limited. Its share is the wall time in which some request
    (of those clients) waited after a 429 (:meth:`Collected.rate_limited_ms`)."""
    n429, completions = d.counts.get("retry.429", 0), d.counts.get("completions", 0)
    c429, c_done = d.counts.get(COLLECTOR_429, 0), d.counts.get(COLLECTOR_COMPLETIONS, 0)
    clients = {ORCHESTRATOR: (n429 - c429, completions - c_done), COLLECTOR: (c429, c_done)}
    limited = [c for c, (n, done) in clients.items() if n and (not done or n / done > th.rate_limited_frac)]
    if not limited:
        return None
    run_ms = d.run_ms
    if not all(n or done for n, done in clients.values()):  # one client's lines: as it always read
        title, shared = "Rate-limited: the server answers 429", None
        said = f"{n429} retries after HTTP 429" + (f" for {completions} completions" if completions else "")
    else:  # a trio's logs and a collector's: each client's own
        who = " and the ".join(f"{c}'s" for c in limited)
        title = f"Rate-limited: the server answers 429 to the {who} requests"
        shared = limited[0] if len(limited) == 1 else None
        of = lambda done: f" for its {done} completions" if done else ""  # noqa: E731
        said = " and ".join(
            f"the {c}'s {clients[c][0]} retries after HTTP 429{of(clients[c][1])}" for c in limited
        )
        said += "".join(
            f" (the {c}'s: {n}{of(done)})" for c, (n, done) in clients.items() if c not in limited
        )
    return Finding(
        kind="rate_limited",
        title=title,
        evidence=said
        + (
            f"; retry waits median {d.stat('retry_wait_ms', 'p50'):.0f} ms"
            if d.series["retry_wait_ms"]
            else ""
        )
        + _rate_limited_time(d),
        share=d.rate_limited_ms(shared) / run_ms if run_ms else 0.5,
        next=(
            "Respect the rate limit: lower parallelism, honour Retry-After, spread load over more keys/servers.",
        ),
    )


def _rate_limited_time(d: Collected) -> str:
    """The time some request waited after a 429, each client's (the union of its waits), the
    orchestrator's split into the part within its generation batches and the rest
    (:func:`~prime_rl.analysis.stages.rate_limit_parts`; the rest when it is worth a row of the stage
    table: :func:`~prime_rl.analysis.stages.outside_counts`), as a clause of the finding's evidence."""
    parts = []
    if d.rate_limits.has(ORCHESTRATOR):
        inside, outside = rate_limit_parts(d)
        said = f"the orchestrator's for {(inside + outside) / 1000:.1f} s"
        if d.series["gen_dur_ms"] and outside_counts(d, outside):
            said += f" ({inside / 1000:.1f} s of it within its generation batches, {outside / 1000:.1f} s outside)"
        elif d.series["gen_dur_ms"]:
            said += " (within its generation batches)"
        parts.append(said)
    if d.rate_limits.has(COLLECTOR):
        parts.append(f"the collector's for {d.rate_limited_ms(COLLECTOR) / 1000:.1f} s")
    for client, at in ((ORCHESTRATOR, 0), (COLLECTOR, -1)):  # the time of its waits not counted
        if cut := d.rate_limits.cut_note(client):
            parts[at] += f" ({cut})"
    if not parts:
        return ""
    return f"; requests waited after a 429 (the union of their waits): {' and '.join(parts)}"


RULES: tuple[Rule, ...] = (
    stall,
    hang,
    pause,
    frontend_queue_saturation,
    slow_reload,
    failed_attempts,
    checkpoint_io,
    trainer_bound,
    generation_bound,
    verification_bound,
    environment_bound,
    collect_verification_bound,
    collect_deferred_verification,
    collect_generation_bound,
    collect_queue,
    rate_limited,
    truncation,
    slow_server,
    slow_generation,
    kv_cache_pressure,
)
"""Every rule, in the order findings with equal shares are listed."""
