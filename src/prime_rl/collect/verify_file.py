"""``collect-rollouts verify`` (``verify-rollouts``): deferred verification of a collected file.

Reads records (from ``collect-rollouts --no-verify``, or any run to re-score), scores each
response against its task with many verifier processes, and appends the scored records to
the output, resumable exactly like collection (pairs already in the output are skipped).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loguru import logger

from prime_rl.collect.config import VerifyFileConfig
from prime_rl.collect.progress import Progress
from prime_rl.collect.runner import write_aggregates
from prime_rl.collect.scoring import Scorer, apply_verdict
from prime_rl.collect.store import AppendWriter, exclusive, iter_records, scan_output
from prime_rl.logging import log_tagged


@dataclass
class VerifyResult:
    output: Path
    scored: int = 0
    copied: int = 0
    already_done: int = 0
    verify_failures: int = 0
    bad_records: int = 0
    wall_s: float = 0.0
    aggregates: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        rate = self.scored / self.wall_s if self.wall_s > 0 else 0.0
        return (
            f"scored {self.scored} records in {self.wall_s:.1f} s ({rate:.1f}/s), copied {self.copied} already "
            f"scored, skipped {self.already_done} already in the output and {self.bad_records} unusable; "
            f"verifier failures {self.verify_failures}"
        )


async def verify_file(cfg: VerifyFileConfig) -> VerifyResult:
    with exclusive(cfg.output_jsonl_fpath):
        return await _verify_file(cfg)


async def _verify_file(cfg: VerifyFileConfig) -> VerifyResult:
    result = VerifyResult(cfg.output_jsonl_fpath)
    if not cfg.input_jsonl_fpath.is_file():
        raise FileNotFoundError(f"input {cfg.input_jsonl_fpath} not found")
    done = scan_output(cfg.output_jsonl_fpath).done
    with open(cfg.input_jsonl_fpath, "rb") as f:  # the bar's total; bad lines are reported once, below
        total = sum(1 for raw in f if raw.endswith(b"\n") and raw.strip())
    scorer = Scorer(cfg.env, cfg.env_options, cfg.verify)  # type: ignore[arg-type]
    slots = asyncio.Semaphore(cfg.num_samples_in_parallel)
    progress = Progress(cfg.progress, total, 0, desc="Verifying rollouts")
    started = time.monotonic()
    pending: set[asyncio.Task] = set()

    async def score_one(record: dict[str, Any]) -> None:
        try:
            apply_verdict(record, await scorer.score(record["task"], record["response"]["text"]))
            writer.write(record)
            result.scored += 1
            result.verify_failures += record.get("verify_error") is not None
            log_tagged(
                "collect",
                "verify.done",
                None,
                task=record["task_index"],
                repeat=record["repeat_index"],
                dur_ms=record["timings"]["verify_ms"],
            )
        finally:
            slots.release()

    try:
        with AppendWriter(cfg.output_jsonl_fpath) as writer:
            for lineno, record in iter_records(cfg.input_jsonl_fpath, tolerant=not cfg.strict):
                key = (record["task_index"], record["repeat_index"])
                if key in done:
                    result.already_done += 1
                elif not isinstance(record.get("task"), dict) or not isinstance(
                    (record.get("response") or {}).get("text"), str
                ):
                    msg = f"{cfg.input_jsonl_fpath}:{lineno}: record has no task or response text"
                    if cfg.strict:
                        raise ValueError(msg)
                    logger.warning(msg + " (skipped)")
                    result.bad_records += 1
                elif isinstance(record.get("reward"), (int, float)) and not cfg.rescore:
                    writer.write(record)
                    result.copied += 1
                else:
                    await slots.acquire()
                    task = asyncio.create_task(score_one(record))
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                done.add(key)
                progress.refresh(
                    result.scored + result.copied + result.already_done + result.bad_records,
                    f"failures={result.verify_failures}",
                )
            while pending:
                await asyncio.gather(*list(pending))
    finally:
        for task in pending:
            task.cancel()
        progress.refresh(
            result.scored + result.copied + result.already_done + result.bad_records,
            f"failures={result.verify_failures}",
        )
        progress.close()
        scorer.close()
    result.wall_s = time.monotonic() - started
    result.aggregates = write_aggregates(cfg.output_jsonl_fpath, cfg.pass_threshold)
    return result
