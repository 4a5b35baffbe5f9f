"""The thresholds the rules of :mod:`prime_rl.analysis.rules` compare against.

Each is printed, with its description, at the end of SUMMARY.md and can be set with
``--threshold NAME=VALUE`` (see ``bottleneck_logs/README.md``).
"""

from __future__ import annotations

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
