"""The thresholds the rules of :mod:`prime_rl.analysis.rules` compare against.

Each is printed, with its description, at the end of SUMMARY.md and can be set with
``--threshold NAME=VALUE`` (see ``bottleneck_logs/README.md``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, field_validator


class Thresholds(BaseModel):
    """When a finding fires. Every value is printed in SUMMARY.md and can be set with --threshold.
    (A pydantic model of its own, not of ``prime_rl.config``: the analyzer does not load the
    processes' config machinery, a fifth of a second at every start. Its schema is built when a
    value is first checked: the command takes the defaults unchecked, ``model_construct``.)"""

    model_config = ConfigDict(
        extra="forbid",
        defer_build=True,
        use_attribute_docstrings=True,
        validate_assignment=True,
        allow_inf_nan=False,
    )

    @field_validator("*")
    @classmethod
    def _not_negative(cls, v: float) -> float:
        """Shares, ratios, times and counts: a negative one would fire (or silence) its rule always."""
        if v < 0:
            raise ValueError(f"must be 0 or more, not {v}")
        return v

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
    limit_wait_share: float = 0.05
    """A healthy run's limit (no alarm): the trainer when the orchestrator waits for its weights more than this share of the run and the trainer waits for rollouts less; generation the other way round; balanced when neither waits more."""
    verify_ratio: float = 0.5
    """Verification-bound: scoring time per step above this multiple of generation time per step."""
    rate_limited_frac: float = 0.01
    """Rate-limited: a client's 429 retries above this fraction of its own completions (the orchestrator's and an offline collector's judged apart), or any 429 of a client with no completions counted."""
    trunc_pct_warn: float = 10.0
    """Warn when mean trunc_pct is above this."""
    trunc_pct_high: float = 30.0
    """Truncation is a finding (a cause of generation time, ranked above generation-bound) when mean trunc_pct is above this."""
    update_share: float = 0.25
    """Slow engine reload (slow weight update at the server) whatever the queue does: the server's whole handling of the weight updates (lock wait, validation and rpc: server_ms, at the slowest server per update, which the orchestrator waits for) above this share of the run, and above their queue time. Also: failed weight-update attempts above this share of the run."""
    verify_util_high: float = 0.8
    """Verification-bound when the verifier workers are busy more than this share of the batch wall time (cpu_ms / (workers x batch ms)); needs workers= or the run's config."""
    verify_pass_share: float = 0.5
    """Deferred verification: a collector's verify passes (collect-rollouts verify: [collect] verify.done) take more than this share of the run's wall time (the union of their verifications' times)."""
    server_slow_ratio: float = 2.0
    """A server is named as slow when its median update wall_ms (a collector's: its median gen_ms per sample) is this multiple of its peers' (the median of the faster half's medians; never more than half the servers)."""
    server_min_updates: int = 3
    """... and it has at least this many updates."""
    stall_min_s: float = 30.0
    """A wait still open where the logs end is a stall when it lasted this many seconds (and 3x the median wait of its kind) to the last line of any log, or the other side fell silent since before it began for this many seconds and 3x its own median time between step lines (a server's: the orchestrator's)."""
    silence_pace_ratio: float = 10.0
    """In logs without run.start lines, a time in which the orchestrator and the trainer were both silent (no line), outside any down time, is warned of when it lasted this multiple of the slower one's pace (its median time between step lines) and at least stall_min_s: a restart there (one that redid no step, or whose start-up outlasted its crash) cannot be told from a pause, and it counts as run time. A process is silent where none of its logs wrote a line (a trainer's: one per rank). The orchestrator is not silent within a [gen] batch or a wait it logged, nor the trainer within a wait for rollouts or a step it logged and closed: a restart found of the orchestrator alone while the trainer waited warns of nothing, a whole-run crash of which only the orchestrator's restart is found still warns. A time before every process logged a step line is left out."""
    preemptions_per_min: float = 2.0
    """KV-cache pressure: a server preempts more than this many requests a minute ([server] metrics preemptions=, over the scraped time) ..."""
    kv_cache_pct_high: float = 90.0
    """... or its kv_cache_pct p95 is above this while requests wait (waiting > 0 in a scrape that found it this full). A full cache with nothing waiting is a cache well used, no alarm."""
    server_min_scrapes: int = 3
    """... judged only for a server scraped at least this many times."""
    secondary_share: float = 0.05
    """A finding below the primary is listed as a secondary bottleneck when it costs more than this share of the run; smaller ones are listed as minor."""
    time_jump_s: float = 3600.0
    """A tagged line (or up to 16 in a row) whose time lies more than this many seconds from the lines before and after it in its file (which lie within this of each other) is left out as a wrong clock or a corrupt date, and a file whose time goes back by more and stays is warned of (0: neither)."""
