"""From events to findings: weight updates joined by trace id, statistics, and the diagnosis."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from prime_rl.analysis.parser import ParseStats
from prime_rl.config import StrictModel


class Thresholds(StrictModel):
    """When a finding fires. Every value is printed in SUMMARY.md and can be set with --threshold."""

    queue_ratio: float = 3.0
    """Front-end queue saturation: mean queue_ms above this multiple of mean rpc_ms ..."""
    queue_ms_min: float = 1000.0
    """... and p95 queue_ms above this many ms."""
    rpc_ms_high: float = 10000.0
    """Slow engine reload: median rpc_ms above this."""
    ckpt_wait_share: float = 0.2
    """Checkpoint I/O: orchestrator waits for weights take more than this share of the run ..."""
    write_ms_high: float = 30000.0
    """... or the trainer's weight writes have p95 write_ms above this."""
    write_share: float = 0.3
    """A long ckpt wait counts as I/O when the median write takes this share of the median wait (else trainer-bound)."""
    train_wait_share: float = 0.3
    """Generation-bound: the trainer waits for rollouts more than this share of the run ..."""
    gen_share: float = 0.8
    """... or, without a trainer log, generation takes more than this share of the run."""
    verify_ratio: float = 0.5
    """Verification-bound: scoring time per step above this multiple of generation time per step."""
    rate_limited_frac: float = 0.01
    """Rate-limited: 429 retries above this fraction of completions (or any 429 when counts are missing)."""
    trunc_pct_warn: float = 10.0
    """Warn when mean trunc_pct is above this."""


def describe(values: list[float]) -> dict[str, float]:
    """count, mean, stddev, min, p50, p95, p99, max (linear interpolation percentiles)."""
    vals = sorted(v for v in values if v is not None and not math.isnan(v))
    n = len(vals)
    if not n:
        return {"count": 0}

    def pct(q: float) -> float:
        k = (n - 1) * q
        lo = int(k)
        hi = min(lo + 1, n - 1)
        return vals[lo] + (vals[hi] - vals[lo]) * (k - lo)

    mean = sum(vals) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1)) if n > 1 else 0.0
    return {
        "count": n,
        "mean": mean,
        "stddev": std,
        "min": vals[0],
        "p50": pct(0.5),
        "p95": pct(0.95),
        "p99": pct(0.99),
        "max": vals[-1],
    }


@dataclass
class Update:
    """One weight update as seen by client and server, joined by trace id."""

    tid: str
    path: str | None = None
    url: str | None = None
    send_ts: float | None = None
    send_t: float | None = None
    done_ts: float | None = None
    wall_ms: float | None = None
    rpc_ms: float | None = None
    queue_ms: float | None = None
    recv_ts: float | None = None
    recv_t: float | None = None
    server_rpc_ms: float | None = None
    target: str | None = None
    failed: bool = False

    @property
    def send_to_recv_ms(self) -> float | None:
        """Client send -> server first byte: monotonic clocks when consistent, else wall clocks."""
        if self.send_t is not None and self.recv_t is not None:
            gap = (self.recv_t - self.send_t) * 1000.0
            if 0 <= gap <= (self.wall_ms or math.inf) + 1.0:
                return gap
        if self.send_ts is not None and self.recv_ts is not None:
            return (self.recv_ts - self.send_ts) * 1000.0
        return None

    @property
    def start(self) -> float | None:
        return self.send_ts if self.send_ts is not None else self.recv_ts

    @property
    def end(self) -> float | None:
        if self.done_ts is not None:
            return self.done_ts
        if self.start is not None and (self.wall_ms or self.server_rpc_ms):
            return self.start + (self.wall_ms or self.server_rpc_ms or 0) / 1000.0
        return None


@dataclass
class Span:
    kind: str
    start: float
    end: float
    label: str
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Analysis:
    parse: ParseStats
    updates: list[Update]
    spans: list[Span]
    series: dict[str, list[float]]
    counts: Counter
    async_level: int | None
    thresholds: Thresholds
    findings: list[dict] = field(default_factory=list)
    primary: dict | None = None
    warnings: list[str] = field(default_factory=list)
    run_seconds: float | None = None


def _occurrence(updates: dict[str, list[Update]], ev) -> Update:
    """The update an event belongs to. Trace ids can repeat (logs appended over several runs): a
    client.send after a finished update starts a new one, and a server line joins the latest update
    sent at or before it that has no server part yet."""
    occ = updates.setdefault(ev.tid, [])
    if ev.event == "client.send":
        if not occ or occ[-1].done_ts is not None or occ[-1].failed:
            occ.append(Update(ev.tid))
        return occ[-1]
    if ev.event in ("client.done", "client.error"):
        if not occ:
            occ.append(Update(ev.tid))
        return occ[-1]
    open_ = [u for u in occ if u.recv_ts is None and u.recv_t is None] if ev.event == "server.recv" else occ
    if ev.event == "server.recv" and ev.ts is not None:
        before = [u for u in open_ if u.send_ts is None or u.send_ts <= ev.ts + 1.0]
        open_ = before or open_
    if not open_:
        occ.append(Update(ev.tid))
        return occ[-1]
    if ev.event == "server.recv":
        return open_[-1] if ev.ts is not None else open_[0]
    # rpc.start / rpc.done: the occurrence whose server.recv came last
    with_recv = [u for u in occ if u.recv_ts is not None or u.recv_t is not None]
    return with_recv[-1] if with_recv else occ[-1]


def collect(events, parse: ParseStats, thresholds: Thresholds, async_level: int | None = None) -> Analysis:
    updates: dict[str, list[Update]] = {}
    series: dict[str, list[float]] = {
        k: []
        for k in (
            "queue_ms",
            "rpc_ms",
            "wall_ms",
            "server_rpc_ms",
            "send_to_recv_ms",
            "ckpt_wait_ms",
            "write_ms",
            "gen_dur_ms",
            "verify_dur_ms",
            "trunc_pct",
            "staleness",
            "retry_wait_ms",
            "collect_ms",
            "train_wait_ms",
            "train_ms",
            "collect_queue_ms",
            "collect_gen_ms",
            "collect_verify_ms",
        )
    }
    spans: list[Span] = []
    counts: Counter = Counter()
    open_gen: dict[str, float] = {}
    open_wait: dict[str, float] = {}
    first_ts, last_ts = math.inf, -math.inf
    for ev in events:
        counts[f"{ev.tag}.{ev.event or '-'}"] += 1
        if ev.ts is not None:
            first_ts, last_ts = min(first_ts, ev.ts), max(last_ts, ev.ts)
        if ev.tag == "weights" and ev.tid:
            u = _occurrence(updates, ev)
            if ev.event == "client.send":
                if u.send_ts is None and u.send_t is None:  # first attempt (retries keep the same trace id)
                    u.send_ts, u.send_t = ev.ts, ev.num("t")
                u.url, u.path = ev.fields.get("url"), ev.fields.get("path")
            elif ev.event == "client.done":
                u.done_ts, u.wall_ms, u.rpc_ms, u.queue_ms = (
                    ev.ts,
                    ev.num("wall_ms"),
                    ev.num("rpc_ms"),
                    ev.num("queue_ms"),
                )
                if u.queue_ms is None and u.wall_ms is not None and u.rpc_ms is not None:
                    u.queue_ms = u.wall_ms - u.rpc_ms
            elif ev.event == "client.error":
                u.failed, u.done_ts = True, ev.ts
            elif ev.event == "server.recv":
                u.recv_ts, u.recv_t = ev.ts, ev.num("t")
                u.path = u.path or ev.fields.get("path")
            elif ev.event == "rpc.start":
                u.target = ev.fields.get("target")
            elif ev.event == "rpc.done":
                u.server_rpc_ms = ev.num("rpc_ms")
        elif ev.tag == "ckpt":
            if ev.event == "wait.start" and ev.ts is not None:
                open_wait[ev.fields.get("target_step", "?")] = ev.ts
            elif ev.event == "wait.done":
                ms = ev.num("wait_ms")
                if ms is not None:
                    series["ckpt_wait_ms"].append(ms)
                    end = ev.ts or 0.0
                    start = open_wait.pop(ev.fields.get("target_step", "?"), end - ms / 1000.0)
                    spans.append(
                        Span(
                            "ckpt_wait",
                            start,
                            end,
                            f"wait for weights step {ev.fields.get('target_step')}",
                            {"wait_ms": ms},
                        )
                    )
            elif ev.event == "write.done" and ev.num("write_ms") is not None:
                series["write_ms"].append(ev.num("write_ms"))
                if ev.ts is not None:
                    spans.append(
                        Span(
                            "ckpt_write",
                            ev.ts - ev.num("write_ms") / 1000.0,
                            ev.ts,
                            f"write weights step {ev.fields.get('step')}",
                        )
                    )
        elif ev.tag == "gen":
            key = ev.fields.get("step", str(counts["gen.batch.start"]))
            if ev.event == "batch.start" and ev.ts is not None:
                open_gen[key] = ev.ts
            elif ev.event == "batch.done":
                ms = ev.num("dur_ms")
                if ms is not None:
                    series["gen_dur_ms"].append(ms)
                    end = ev.ts or 0.0
                    start = open_gen.pop(key, end - ms / 1000.0)
                    spans.append(
                        Span(
                            "gen",
                            start,
                            end,
                            f"generate step {ev.fields.get('step', '?')}",
                            {"completions": ev.fields.get("completions"), "dur_ms": ms},
                        )
                    )
                counts["completions"] += int(ev.num("completions") or 0)
            elif ev.event == "request.retry":
                counts[f"retry.{ev.fields.get('status', '?')}"] += 1
                if ev.num("wait_ms") is not None:
                    series["retry_wait_ms"].append(ev.num("wait_ms"))
        elif ev.tag == "rollout":
            for key in ("trunc_pct", "staleness"):
                if ev.num(key) is not None:
                    series[key].append(ev.num(key))
        elif ev.tag == "verify" and ev.event == "batch.done" and ev.num("dur_ms") is not None:
            series["verify_dur_ms"].append(ev.num("dur_ms"))
        elif ev.tag == "train" and ev.event == "step.done":
            for src, dst in (("wait_ms", "train_wait_ms"), ("train_ms", "train_ms")):
                if ev.num(src) is not None:
                    series[dst].append(ev.num(src))
        elif ev.tag == "collect":  # the offline collector: one rollout.done per sample
            if ev.event == "request.retry":
                counts[f"retry.{ev.fields.get('status', '?')}"] += 1
                if ev.num("wait_ms") is not None:
                    series["retry_wait_ms"].append(ev.num("wait_ms"))
                continue
            if ev.num("dur_ms") is not None:
                series["collect_ms"].append(ev.num("dur_ms"))
            if ev.event == "rollout.done":
                counts["completions"] += 1
                for key in ("queue_ms", "gen_ms", "verify_ms"):
                    if ev.num(key) is not None:
                        series[f"collect_{key}"].append(ev.num(key))
            elif ev.fields.get("status") == "429":  # older collector lines: a 429 with its dur_ms
                counts["retry.429"] += 1
    ups = [
        u for occ in updates.values() for u in occ if u.path in (None, "/update_weights", "/reload_weights")
    ]
    for u in ups:
        for key in ("queue_ms", "rpc_ms", "wall_ms", "server_rpc_ms", "send_to_recv_ms"):
            value = getattr(u, key)
            if value is not None:
                series[key].append(value)
        if u.start is not None and u.end is not None:
            spans.append(
                Span(
                    "update", u.start, u.end, f"update {u.tid}", {"queue_ms": u.queue_ms, "rpc_ms": u.rpc_ms}
                )
            )
    spans.sort(key=lambda s: s.start)
    run_s = (last_ts - first_ts) if last_ts > first_ts else None
    return Analysis(parse, ups, spans, series, counts, async_level, thresholds, run_seconds=run_s)


def _stat(a: Analysis, key: str, what: str) -> float | None:
    return describe(a.series[key]).get(what)


def diagnose(a: Analysis) -> Analysis:
    """Fill ``findings`` (each with kind, title, evidence, share, next steps), ``primary``, ``warnings``."""
    th = a.thresholds
    run_ms = (a.run_seconds or 0) * 1000.0
    f: list[dict] = []
    q50, q95, r50 = _stat(a, "queue_ms", "p50"), _stat(a, "queue_ms", "p95"), _stat(a, "rpc_ms", "p50")
    qmean, rmean = _stat(a, "queue_ms", "mean"), _stat(a, "rpc_ms", "mean")
    if r50 is None:
        r50, rmean = _stat(a, "server_rpc_ms", "p50"), _stat(a, "server_rpc_ms", "mean")
    # queueing comes in bursts (an update waits when the pool happens to be full), so compare totals
    if (
        qmean is not None
        and rmean is not None
        and qmean > th.queue_ratio * max(rmean, 1e-9)
        and (q95 or 0) > th.queue_ms_min
    ):
        gap = _stat(a, "send_to_recv_ms", "p50")
        where = (
            f"; client.send -> server.recv median {gap:.1f} ms, so the wait happens before the server sees the request"
            if gap is not None
            else ""
        )
        f.append(
            {
                "kind": "frontend_queue_saturation",
                "title": "Front-end queue saturation: admin requests wait behind streaming inference",
                "evidence": f"queue_ms mean {qmean:.1f} ms (median {q50:.1f}, p95 {q95:.1f}) vs rpc_ms mean {rmean:.1f} ms: "
                f"{qmean / max(rmean, 1e-9):.1f}x{where}",
                "share": sum(a.series["queue_ms"]) / run_ms if run_ms else 1.0,
                "next": [
                    "Use the dedicated admin client (client.admin.mode: dedicated): its own small pool, never queued behind streams.",
                    "Compare queue_ms before/after; lower max_inflight or raise client.max_connections if streams still starve the pool.",
                ],
            }
        )
    if r50 is not None and r50 > th.rpc_ms_high:
        f.append(
            {
                "kind": "slow_reload",
                "title": "Slow engine reload: the server takes long to load new weights",
                "evidence": f"rpc_ms median {r50:.1f} ms (p95 {_stat(a, 'rpc_ms', 'p95') or _stat(a, 'server_rpc_ms', 'p95'):.1f}) > {th.rpc_ms_high:.0f} ms",
                "share": sum(a.series["rpc_ms"] or a.series["server_rpc_ms"]) / run_ms if run_ms else 0.5,
                "next": [
                    "Profile weight loading in the worker extension (load_ms in rpc.done): disk vs copy vs repack.",
                    "Use faster storage (local NVMe) or in-memory sharing (shm/mmap) for weights/step_N.",
                    "Use a smaller or quantised model (int8/int4) if the reload dominates.",
                ],
            }
        )
    wait_total = sum(a.series["ckpt_wait_ms"])
    w50, w95 = _stat(a, "write_ms", "p50"), _stat(a, "write_ms", "p95")
    wait50 = _stat(a, "ckpt_wait_ms", "p50")
    waits_a_lot = bool(run_ms and wait_total / run_ms > th.ckpt_wait_share)
    # a long wait with a short write means the trainer's compute, not its I/O, is what generation waits for
    io_share = (w50 / wait50) if (w50 is not None and wait50) else None
    if (waits_a_lot and (io_share is None or io_share >= th.write_share)) or (
        w95 is not None and w95 > th.write_ms_high
    ):
        f.append(
            {
                "kind": "checkpoint_io",
                "title": "Checkpoint I/O: the orchestrator waits for the trainer's weight writes",
                "evidence": f"ckpt wait {wait_total / 1000:.1f} s in all ({100 * wait_total / max(run_ms, 1e-9):.0f}% of {run_ms / 1000:.1f} s)"
                + (f"; write_ms median {w50:.1f} ms, p95 {w95:.1f} ms" if w95 is not None else ""),
                "share": wait_total / run_ms if run_ms else 0.0,
                "next": [
                    "Profile the trainer's weight write ([ckpt] write.done write_ms): is the sharded save working?",
                    "Put output_dir on local SSD/NVMe, not a network filesystem.",
                    "Raise async_level so generation overlaps the trainer's write (more staleness).",
                ],
            }
        )
    elif waits_a_lot:
        f.append(
            {
                "kind": "trainer_bound",
                "title": "Trainer-bound: generation waits for the trainer's next step",
                "evidence": f"ckpt wait {wait_total / 1000:.1f} s in all ({100 * wait_total / run_ms:.0f}% of {run_ms / 1000:.1f} s), "
                f"median {wait50:.0f} ms per step, while the weight write itself takes {w50:.1f} ms (median)",
                "share": wait_total / run_ms,
                "next": [
                    "Speed up training: more trainer GPUs/ranks, larger micro-batches, bf16 on GPU.",
                    "Raise async_level so more generation overlaps each training step (more staleness).",
                    "Give the trainer dedicated cores/GPUs if it shares them with the inference server.",
                ],
            }
        )
    gen_total = sum(a.series["gen_dur_ms"])
    train_wait = sum(a.series["train_wait_ms"])
    if a.series["train_wait_ms"]:  # the trainer says how long it waited for rollouts: the direct evidence
        gen_bound = bool(run_ms and train_wait / run_ms > th.train_wait_share)
        why = (
            f"the trainer waited {train_wait / 1000:.1f} s for rollouts ({100 * train_wait / max(run_ms, 1e-9):.0f}% of "
            f"{run_ms / 1000:.1f} s)"
        )
    else:  # no trainer log: generation's share of the run is all there is
        gen_bound = bool(run_ms and gen_total / run_ms > th.gen_share) and not any(
            x["kind"] in ("checkpoint_io", "trainer_bound") for x in f
        )
        why = f"generation {gen_total / 1000:.1f} s of {run_ms / 1000:.1f} s ({100 * gen_total / max(run_ms, 1e-9):.0f}%; no trainer log)"
    if gen_bound:
        f.append(
            {
                "kind": "generation_bound",
                "title": "Generation-bound: the run waits on the inference servers",
                "evidence": f"{why}; batch dur_ms median {_stat(a, 'gen_dur_ms', 'p50') or 0:.0f}",
                "share": (train_wait if a.series["train_wait_ms"] else gen_total) / run_ms,
                "next": [
                    "Raise parallelism (max_inflight, more servers) until time per batch stops dropping.",
                    "Tune the model server: tensor parallelism, max_num_seqs, max_num_batched_tokens, prefix caching.",
                    "Lower max_tokens if trunc_pct shows most completions hit the limit.",
                ],
            }
        )
    v50, g50 = _stat(a, "verify_dur_ms", "p50"), _stat(a, "gen_dur_ms", "p50")
    if v50 is not None and g50 and v50 > th.verify_ratio * g50:
        f.append(
            {
                "kind": "verification_bound",
                "title": "Verification-bound: scoring costs more than generation",
                "evidence": f"verify dur_ms median {v50:.0f} per step vs generation {g50:.0f} ms ({v50 / g50:.1f}x)",
                "share": sum(a.series["verify_dur_ms"]) / run_ms if run_ms else 0.5,
                "next": [
                    "Add verifier processes (verify.workers) or speed up the verifier (cache, fast mode).",
                    "Defer verification: collect with --no-verify and score later with verify-rollouts.",
                ],
            }
        )
    cg, cv, cq = (_stat(a, f"collect_{k}_ms", "mean") for k in ("gen", "verify", "queue"))
    busy = sum(a.series["collect_ms"]) or 1.0
    if cg and cv is not None and cv > th.verify_ratio * cg:
        f.append(
            {
                "kind": "verification_bound",
                "title": "Verification-bound: samples wait longer for the verifier than for the model",
                "evidence": f"[collect] verify_ms mean {cv:.0f} ms vs gen_ms mean {cg:.0f} ms ({cv / cg:.1f}x)",
                "share": sum(a.series["collect_verify_ms"]) / busy,
                "next": [
                    "Add verifier processes (--verify.workers) or speed up the verifier (cache, fast mode).",
                    "Defer verification: collect with --no-verify and score later with collect-rollouts verify.",
                ],
            }
        )
    elif cg and a.series["collect_gen_ms"] and not (cq and cq > cg):
        f.append(
            {
                "kind": "collect_generation_bound",
                "title": "Model inference: collection time is generation time",
                "evidence": f"[collect] gen_ms mean {cg:.0f} ms of {_stat(a, 'collect_ms', 'mean') or 0:.0f} ms per sample"
                + (f"; verify_ms mean {cv:.0f} ms" if cv is not None else ""),
                "share": sum(a.series["collect_gen_ms"]) / busy,
                "next": [
                    "Run `collect-rollouts diagnose`: if time drops with parallelism, raise num_samples_in_parallel.",
                    "Otherwise tune the model server (memory utilisation, batched tokens, more replicas).",
                ],
            }
        )
    if cq and cg and cq > cg:
        f.append(
            {
                "kind": "collect_queue",
                "title": "Client-side queueing: samples wait for a parallelism slot or a rate-limit pause",
                "evidence": f"[collect] queue_ms mean {cq:.0f} ms vs gen_ms mean {cg:.0f} ms",
                "share": sum(a.series["collect_queue_ms"]) / busy,
                "next": [
                    "If 429s are counted, the rate limit sets the pace: see the rate-limit finding.",
                    "Otherwise raise num_samples_in_parallel (the server has room).",
                ],
            }
        )
    n429 = a.counts.get("retry.429", 0)
    completions = a.counts.get("completions", 0)
    if n429 and (not completions or n429 / completions > th.rate_limited_frac):
        f.append(
            {
                "kind": "rate_limited",
                "title": "Rate-limited: the server answers 429",
                "evidence": f"{n429} retries after HTTP 429"
                + (f" for {completions} completions" if completions else "")
                + (
                    f"; retry waits median {_stat(a, 'retry_wait_ms', 'p50'):.0f} ms"
                    if a.series["retry_wait_ms"]
                    else ""
                ),
                "share": sum(a.series["retry_wait_ms"]) / run_ms if run_ms else 0.5,
                "next": [
                    "Respect the rate limit: lower parallelism, honour Retry-After, spread load over more keys/servers."
                ],
            }
        )
    a.findings = sorted(f, key=lambda x: -x["share"])
    a.primary = a.findings[0] if a.findings else None

    w: list[str] = []
    if a.async_level is not None and a.series["staleness"] and max(a.series["staleness"]) > a.async_level:
        w.append(f"staleness reached {max(a.series['staleness']):.0f}, above async_level {a.async_level}")
    if a.series["trunc_pct"] and sum(a.series["trunc_pct"]) / len(a.series["trunc_pct"]) > th.trunc_pct_warn:
        w.append(
            f"mean trunc_pct {sum(a.series['trunc_pct']) / len(a.series['trunc_pct']):.1f}% > {th.trunc_pct_warn:.0f}%: "
            "completions hit max_tokens; raise it or expect clipped answers"
        )
    if not a.updates:
        w.append(
            "no [weights] lines: check that async_level is set right, that the trainer writes checkpoints "
            "(progress.step > 0), that the orchestrator reaches the async barrier (step - ckpt_step > async_level), "
            "and that the orchestrator log (and, for server.recv, the inference log) was given"
        )
    elif not any(u.recv_ts is not None for u in a.updates):
        w.append(
            "no server-side [weights] lines: pass the inference log too to split queue time into client and server parts"
        )
    if a.parse.malformed:
        w.append(
            f"{a.parse.malformed} malformed tagged line(s) skipped (e.g. {a.parse.malformed_examples[:1]})"
        )
    failed = sum(u.failed for u in a.updates)
    if failed:
        w.append(f"{failed} weight update(s) failed (client.error)")
    a.warnings = w
    return a


def to_json(a: Analysis) -> dict[str, Any]:
    return {
        "primary": a.primary,
        "findings": a.findings,
        "warnings": a.warnings,
        "stats": {k: describe(v) for k, v in a.series.items()},
        "counts": dict(a.counts),
        "run_seconds": a.run_seconds,
        "async_level": a.async_level,
        "thresholds": a.thresholds.model_dump(),
        "parse": {
            "files": a.parse.files,
            "lines": a.parse.lines,
            "tagged": a.parse.tagged,
            "malformed": a.parse.malformed,
            "seconds": a.parse.seconds,
        },
        "updates": [asdict(u) | {"send_to_recv_ms": u.send_to_recv_ms} for u in a.updates],
    }
