"""``collect-rollouts diagnose``: the same small sample at low and high parallelism, and what
bounds throughput (the collector's counterpart of the diagnostic signatures in
bottleneck_logs/README.md):

- more errors or 429s at high parallelism -> the server or API is overloaded / rate-limited;
- time drops a lot (>= 1.5x faster) -> the model server had spare capacity: under-parallelised;
- time similar -> verification (responses wait for the verifier longer than they took to
  generate) or the model server at capacity (per-request latency grew with parallelism), else
  the network or API (latency that neither parallelism nor the verifier explains).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Any

from loguru import logger

from prime_rl.collect.config import DiagnoseConfig
from prime_rl.collect.runner import CollectResult, collect
from prime_rl.collect.store import sibling
from prime_rl.paths import atomic_write_json

SPEEDUP_MODEL_BOUND = 1.5
"""Time at high parallelism this many times shorter: the server was under-used at low."""
VERIFY_SHARE = 0.5
"""Mean verification wait at least this fraction of mean generation time: verification-bound."""
SATURATION = 0.6
"""Per-request latency grew by at least this fraction of the parallelism ratio: server at capacity."""


@dataclass
class Diagnosis:
    """What bounds collection throughput: ``kind`` (the ``verdict`` key of ``diagnosis.json``), a
    title, the numbers behind it and what to do next."""

    kind: str
    title: str
    evidence: str
    next: list[str]


def _row(r: CollectResult, level: int) -> dict[str, Any]:
    return {
        "parallelism": level,
        "wall_s": r.wall_s,
        "samples": r.written,
        "samples_per_s": r.samples_per_s,
        "failed": r.failed,
        "rate_limited": r.rate_limited,
        "retries": r.retries,
        "gen_ms_mean": r.gen_ms_mean,
        "verify_ms_mean": r.verify_ms_mean,
    }


def judge(low: dict[str, Any], high: dict[str, Any]) -> Diagnosis:
    """Apply the rules of the module docstring to the two runs (rows of :func:`_row`)."""
    ratio = high["parallelism"] / low["parallelism"]
    if high["rate_limited"] > low["rate_limited"] or high["failed"] > low["failed"]:
        limited = high["rate_limited"] > low["rate_limited"]
        return Diagnosis(
            "rate_limited" if limited else "overloaded",
            "Network/API rate limit" if limited else "Overloaded: errors appear at high parallelism",
            f"at {high['parallelism']} in flight: {high['rate_limited']} x 429 and {high['failed']} failed samples; "
            f"at {low['parallelism']}: {low['rate_limited']} x 429 and {low['failed']} failed",
            [
                "Lower num_samples_in_parallel to below where errors start (for a hosted API: RPM / 60).",
                "The collector already honours Retry-After and halves parallelism on 429; more keys, servers or a "
                "higher API tier raise the ceiling.",
            ],
        )
    speedup = low["wall_s"] / high["wall_s"] if high["wall_s"] > 0 else 0.0
    evidence = (
        f"{low['wall_s']:.1f} s at parallelism {low['parallelism']} vs {high['wall_s']:.1f} s at "
        f"{high['parallelism']} ({speedup:.2f}x faster for {ratio:.0f}x the parallelism)"
    )
    if speedup >= SPEEDUP_MODEL_BOUND:
        return Diagnosis(
            "under_parallelised",
            "Model inference, under-parallelised: time dropped a lot",
            evidence,
            [
                f"Raise num_samples_in_parallel to {high['parallelism']} or more; diagnose again with higher "
                "levels until the time stops dropping.",
                "Then tune the model server (gpu_memory_utilization, max_num_batched_tokens, max_model_len).",
            ],
        )
    gen, ver = high["gen_ms_mean"] or 0.0, high["verify_ms_mean"]
    if ver is not None and gen > 0 and ver >= VERIFY_SHARE * gen:
        return Diagnosis(
            "verification",
            "Verification: scoring holds the samples back",
            f"{evidence}; responses waited {ver:.0f} ms for the verifier vs {gen:.0f} ms to generate",
            [
                "Add verifier processes (--verify.workers), cache or speed up the verifier (fast mode).",
                "Or collect with --no-verify and score later with `collect-rollouts verify` at high "
                "parallelism.",
            ],
        )
    growth = gen / low["gen_ms_mean"] if low["gen_ms_mean"] else 0.0
    if growth >= SATURATION * ratio:
        return Diagnosis(
            "model_saturated",
            "Model inference, server at capacity: latency grew with parallelism",
            f"{evidence}; mean generation {low['gen_ms_mean']:.0f} -> {gen:.0f} ms",
            [
                "More parallelism will not help: a faster or bigger server setup (more GPUs, tensor "
                "parallelism, more replicas in --base_urls), shorter max_output_tokens or a smaller model."
            ],
        )
    return Diagnosis(
        "network",
        "Network or API: time similar, and neither the server nor the verifier explains it",
        f"{evidence}; mean generation {low['gen_ms_mean'] or 0:.0f} -> {gen:.0f} ms",
        [
            "Check the network path and the API's own limits (per-key concurrency, tiers); try a closer "
            "region or more keys/servers."
        ],
    )


async def diagnose(cfg: DiagnoseConfig) -> dict[str, Any]:
    workdir = sibling(cfg.output_jsonl_fpath, "_diagnose")
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    rows = []
    for n, level in enumerate((cfg.low, cfg.high), 1):
        sub = cfg.model_copy(
            update={
                "num_samples_in_parallel": level,
                "estimate": False,
                "output_jsonl_fpath": workdir / f"parallel_{level}.jsonl",
                "retry": cfg.retry.model_copy(update={"min_parallel": 1}),
            }
        )
        logger.info(f"diagnose: {cfg.limit} tasks x {cfg.num_repeats} at parallelism {level}")
        rows.append(_row(await collect(sub, diagnose_pass=n), level))  # its run.start: mode=diagnose pass=n
    diagnosis = judge(*rows)
    report = {
        "runs": rows,
        "verdict": diagnosis.kind,
        "title": diagnosis.title,
        "evidence": diagnosis.evidence,
        "next": diagnosis.next,
    }
    atomic_write_json(workdir / "diagnosis.json", report)
    return report


def render(report: dict[str, Any]) -> str:
    lines = ["parallelism   wall_s   samples/s   gen_ms   verify_ms   429s   failed"]
    for r in report["runs"]:
        lines.append(
            f"{r['parallelism']:>11}   {r['wall_s']:6.1f}   {r['samples_per_s']:9.2f}   "
            f"{r['gen_ms_mean'] or 0:6.0f}   {r['verify_ms_mean'] or 0:9.0f}   {r['rate_limited']:4}   "
            f"{r['failed']:6}"
        )
    lines += ["", f"Bottleneck: {report['title']}", f"  evidence: {report['evidence']}"]
    lines += [f"  next: {step}" for step in report["next"]]
    return "\n".join(lines)
